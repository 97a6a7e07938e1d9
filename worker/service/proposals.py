"""Proposals: a batch that lands only once someone else approved exactly what was checked.

A principal holding ``propose`` (and not ``write``) on a wiki, or any writer whose batch says
``"propose": true``, submits a batch as usual; it becomes a proposal (``Submissions.submit``): its batch
is queued as a dry run (a *revision*) whose record is kept as long as the proposal
(``WIKIQ_PROPOSAL_RETENTION_SECONDS``), and a ``ProposalDoc`` names it. Its state is read from that
document and the jobs it names (``state_of``), never stored twice:

    checking ──check succeeded──▶ open ──approve──▶ approved ──landing job succeeded──▶ landed
        └──check failed──▶ failed       └─reject─▶ rejected        └──the wiki changed──▶ stale
    open, checking, failed or stale past its expiry ─▶ expired;  re-check (stale, failed, open) ─▶ checking

Approving (``approve``: ``write`` on the wiki and every path the batch may write, not its author unless
``WIKIQ_PROPOSAL_SELF_APPROVE`` or single-user mode) queues the reviewed dry run's batch as a plan (its
``applied`` list expected, as ``worker.service.plans`` commits one), authored by the proposer with an
``Approved-by`` trailer: what lands is byte for byte what was reviewed, or nothing, and the proposal is
``stale`` naming the pages that changed. The proposer re-checks it onto the new head (``recheck``, with
``amend`` to correct edits): a new revision, the earlier ones kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from redis.exceptions import RedisError

from worker.errors import (
    AccessDenied,
    BatchRejected,
    ProposalNotFound,
    ProposalNotOpen,
    StorageUnavailable,
    WikiNotFound,
)
from worker.jobs.clock import iso, now_ms
from worker.jobs.ids import new_job_id
from worker.jobs.proposals import (
    MAX_REVISIONS,
    DecisionDoc,
    ProposalDoc,
    ProposalStore,
    landing_error,
    noted,
    release,
    stale_paths,
    state_of,
)
from worker.jobs.record import JobRecord
from worker.jobs.store import JobStore
from worker.jobs.wikis import Wikis
from worker.schema.answers import (
    Author,
    Decision,
    Proposal,
    ProposalList,
    ProposalRef,
    ProposalRevision,
    ProposalState,
    Submitted,
)
from worker.schema.edits import Batch, PlanSubmission, batch_paths
from worker.service.caller import SINGLE_USER_ID, Principal
from worker.service.plans import amended
from worker.settings import Settings

log = logging.getLogger("wikiq.api")
PREFIX = "prop-"
MAX_COMMENT_CHARS = 2000
DECIDABLE: frozenset[str] = frozenset({"open"})
RECHECKABLE: frozenset[str] = frozenset({"open", "failed", "stale"})
WITHDRAWABLE: frozenset[str] = frozenset({"checking", "open", "failed", "stale"})


def approval_message(message: str, approver: Principal) -> str:
    """The reviewed commit message with an ``Approved-by`` trailer naming the approver."""
    return f"{message.rstrip()}\n\nApproved-by: {approver.name} <{approver.email}>"


@dataclass(frozen=True)
class Permissions:
    """What a caller may do with a proposal now: approve it, reject it (``withdraw``: reject its own),
    and why it may not approve an open one (None when it may, or when nothing is to be decided)."""

    approve: bool = False
    reject: bool = False
    withdraw: bool = False
    why_not: str | None = None


class Queue(Protocol):
    """How proposals reach the queue (``worker.service.submit.Submissions``)."""

    async def land(self, approver: Principal, doc: ProposalDoc, batch: Batch, job_id: str) -> Submitted:
        """Queue an approved proposal's landing batch as job ``job_id``."""
        ...

    async def revise(self, caller: Principal, doc: ProposalDoc, batch: Batch, previous: str) -> Submitted:
        """Queue a new check of ``doc`` after its revision ``previous``."""
        ...


class Proposals:
    """Reading, deciding and re-checking proposals (the module says how they work)."""

    def __init__(self, settings: Settings, store: ProposalStore, jobs: JobStore, wikis: Wikis) -> None:
        self.settings = settings
        self.store = store
        self.jobs = jobs
        self.wikis = wikis
        self.submissions: Queue | None = None  # set by ``Service``: approving submits a batch

    def new(self, caller: Principal, wiki: str, batch: Batch, job_id: str) -> ProposalDoc:
        """The document of a new proposal of ``batch`` whose first check is the dry run ``job_id``."""
        at = now_ms()
        return ProposalDoc(
            id=PREFIX + new_job_id(),  # sortable by creation, as job ids
            wiki=wiki,
            author=Author(name=caller.name, email=caller.email),
            author_id=caller.id,
            message=batch.message,
            edits=len(batch.edits),
            created_ms=at,
            expires_ms=at + self.settings.proposal_retention_seconds * 1000,
            webhook=batch.webhook,
            revisions=[job_id],
        )

    @staticmethod
    def ref(doc: ProposalDoc, state: ProposalState = "checking") -> ProposalRef:
        """How a submission answers the proposal it became: its state, where it is read (GET) and decided
        (POST .../approve, .../reject), and its review page in ``/ui``."""
        return ProposalRef(
            proposal_id=doc.id,
            state=state,
            url=f"/v1/proposals/{doc.id}",
            review_url=f"/ui/wikis/{doc.wiki}/proposals/{doc.id}",
        )

    async def _visible(self, caller: Principal, proposal_id: str) -> ProposalDoc:
        """The proposal if ``caller`` may read its wiki; else ``PROPOSAL_NOT_FOUND`` (the same answer)."""
        doc = await self.store.get(proposal_id) if len(proposal_id) <= 64 else None
        if doc is None or not caller.may(doc.wiki, "read"):
            raise ProposalNotFound(
                f"no proposal {proposal_id[:64]!r}: list a wiki's proposals with "
                "GET /v1/wikis/{wiki}/proposals"
            )
        return doc

    async def _records(self, doc: ProposalDoc) -> tuple[JobRecord | None, JobRecord | None]:
        """The latest revision's dry run and the landing job (each None when absent or expired)."""
        check = await self.jobs.get(doc.revisions[-1])
        landing = await self.jobs.get(doc.landing) if doc.landing is not None else None
        return check, landing

    async def _settle(
        self, doc: ProposalDoc, check: JobRecord | None, landing: JobRecord | None
    ) -> ProposalDoc:
        """Note in the document what a finished landing job ended as, if the worker that ran it could not
        (``worker.jobs.proposals.settle``; the job's record may expire before the proposal)."""
        if landing is None or noted(doc.model_copy(deep=True), landing, check) is None:
            return doc
        settled = await self.store.update(doc.id, lambda current: noted(current, landing, check))
        if settled is not None and settled.commit is not None:
            await release(self.jobs, settled)  # landed: its checks' diffs need not be kept a week
        return settled or doc

    async def view(self, caller: Principal, proposal_id: str, diffs: bool = True) -> Proposal:
        """The proposal with its state and every revision (with each check's result when ``diffs``)."""
        doc = await self._visible(caller, proposal_id)
        return await self._view(doc, diffs)

    async def _view(self, doc: ProposalDoc, diffs: bool, latest_only: bool = False) -> Proposal:
        check, landing = await self._records(doc)
        doc = await self._settle(doc, check, landing)
        state = state_of(doc, check, landing, now_ms())
        revisions = []
        for number, job_id in enumerate(doc.revisions, start=1):
            if job_id == doc.revisions[-1]:
                revisions.append(_revision(number, job_id, check, diffs))
            elif not latest_only:
                revisions.append(_revision(number, job_id, await self.jobs.get(job_id), diffs))
        stale = doc.stale_paths
        error = doc.error
        if state == "stale" and stale is None and landing is not None:
            stale, error = stale_paths(landing, check), landing.error
        elif state == "failed" and error is None:
            error = (
                landing_error(doc, landing) if doc.landing is not None else (check.error if check else None)
            )
        decision = doc.decision
        commit = doc.commit
        if commit is None and state == "landed" and landing is not None and landing.result is not None:
            commit = landing.result.commit
        return Proposal(
            **self.ref(doc, state).model_dump(),
            wiki=doc.wiki,
            author=doc.author,
            message=doc.message,
            created_at=iso(doc.created_ms) or "",
            expires_at=iso(doc.expires_ms) or "",
            edits=doc.edits,
            revisions=revisions,
            decision=None
            if decision is None
            else Decision(
                by=decision.by,
                at=iso(decision.at_ms) or "",
                approved=decision.approved,
                comment=decision.comment,
            ),
            job_id=doc.landing,
            commit=commit,
            stale_paths=stale,
            error=error,
            branch=check.result.revision.branch
            if state == "open" and check is not None and check.result and check.result.revision
            else None,
            compare_url=check.result.revision.compare_url
            if state == "open" and check is not None and check.result and check.result.revision
            else None,
        )

    async def list(
        self,
        caller: Principal,
        wiki: str,
        state: ProposalState | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ProposalList:
        """A wiki's proposals, most recently proposed or re-checked first (only those in ``state`` when
        given), each with its latest check only and no diffs. One call looks at ``limit`` proposals at
        most: ``next_cursor`` (when present) answers the ones after them."""
        caller.require(wiki, "read")
        if not await self.wikis.exists(wiki):
            raise WikiNotFound(f"no wiki {wiki[:80]!r}; create it with POST /v1/wikis")
        after = _after(cursor)
        found: list[Proposal] = []
        page = await self.store.page(wiki, limit, after)
        for _, proposal_id in page:
            doc = await self.store.get(proposal_id)
            if doc is None:
                await self.store.forget(wiki, proposal_id)
                continue
            proposal = await self._view(doc, diffs=False, latest_only=True)
            if state is None or proposal.state == state:
                found.append(proposal)
        more = len(page) == limit and bool(await self.store.page(wiki, 1, page[-1]))
        return ProposalList(proposals=found, next_cursor=f"{page[-1][0]}.{page[-1][1]}" if more else None)

    def refusal(self, caller: Principal, doc: ProposalDoc, batch: Batch, action: str) -> str | None:
        """Why ``caller`` may not ``action`` (approve, reject) proposal ``doc`` of ``batch``, or None when
        it may: it needs ``write`` on the wiki and on every path the batch may write, and not to be its
        author (unless ``WIKIQ_PROPOSAL_SELF_APPROVE``, or single-user mode)."""
        if not caller.may(doc.wiki, "write"):
            return f"your token does not allow write on this wiki, so it may not {action} it"
        if not caller.may_write_paths(doc.wiki, batch_paths(batch)):
            return f"your token may not write every path this proposal changes, so it may not {action} it"
        own = caller.id == doc.author_id and caller.id != SINGLE_USER_ID
        if own and not self.settings.proposal_self_approve:
            return (
                f"you proposed it: another principal with write on this wiki must {action} it "
                "(or the operator sets WIKIQ_PROPOSAL_SELF_APPROVE)"
            )
        return None

    def _may_decide(self, caller: Principal, doc: ProposalDoc, check: JobRecord, action: str) -> None:
        """``AccessDenied`` with the ``refusal`` when ``caller`` may not ``action`` the proposal."""
        assert check.batch is not None
        refused = self.refusal(caller, doc, check.batch, action)
        if refused is not None:
            raise AccessDenied(refused)

    async def permissions(self, caller: Principal, proposal_id: str) -> Permissions:
        """What ``caller`` may do with the proposal now, as ``approve`` and ``reject`` would decide it."""
        doc = await self._visible(caller, proposal_id)
        check, landing = await self._records(doc)
        state = state_of(doc, check, landing, now_ms())
        if state not in WITHDRAWABLE:
            return Permissions()
        own = caller.id == doc.author_id
        if check is None or check.batch is None:
            return Permissions(reject=own, withdraw=own, why_not="its check is no longer kept: it expired")
        refused = self.refusal(caller, doc, check.batch, "approve")
        open_ = state in DECIDABLE and check.result is not None
        return Permissions(
            approve=open_ and refused is None,
            reject=own or refused is None,
            withdraw=own,
            why_not=refused if open_ else None,
        )

    async def approve(self, caller: Principal, proposal_id: str, comment: str | None = None) -> Proposal:
        """Approve an open proposal: its reviewed check is queued as a plan (see the module); the proposal
        is then ``approved`` until that job lands it (``landed``) or finds the wiki changed (``stale``).
        ``PROPOSAL_NOT_OPEN`` when it is not open (decided, checking, failed, stale or expired)."""
        assert self.submissions is not None
        doc = await self._visible(caller, proposal_id)
        check, landing = await self._records(doc)
        state = state_of(doc, check, landing, now_ms())
        if state not in DECIDABLE or check is None or check.batch is None or check.result is None:
            raise ProposalNotOpen(f"proposal {doc.id} is {state}; only an open proposal can be approved")
        self._may_decide(caller, doc, check, "approve")
        landing_id = new_job_id()
        revision = doc.revisions[-1]
        note = _comment(comment)
        decided = await self.store.update(
            doc.id, lambda d: _decided(d, caller, revision, True, note, landing_id)
        )
        if decided is None or decided.landing != landing_id:
            raise ProposalNotOpen(f"proposal {doc.id} was decided or re-checked meanwhile; read it again")
        batch = Batch(
            message=approval_message(doc.message, caller),
            edits=check.batch.edits,
            webhook=doc.webhook,
            expect=[entry.model_dump(mode="json", exclude_defaults=True) for entry in check.result.applied],
        )
        try:
            await self.submissions.land(caller, doc, batch, landing_id)
        except StorageUnavailable as exc:
            if exc.job_id != landing_id:  # else queued, not confirmed durable: it may still land
                await self.store.update(doc.id, lambda d: _undecided(d, landing_id))
            raise
        except BaseException:
            await self.store.update(doc.id, lambda d: _undecided(d, landing_id))
            raise
        await self._announce(revision, "approved")
        return await self._view(await self.store.get(doc.id) or decided, diffs=False)

    async def reject(self, caller: Principal, proposal_id: str, comment: str | None = None) -> Proposal:
        """Reject a proposal (its author may withdraw it): nothing lands, and its checks' diffs are kept
        only briefly. ``PROPOSAL_NOT_OPEN`` once it was decided or expired."""
        doc = await self._visible(caller, proposal_id)
        check, landing = await self._records(doc)
        state = state_of(doc, check, landing, now_ms())
        if state not in WITHDRAWABLE:
            raise ProposalNotOpen(f"proposal {doc.id} is {state}; it can no longer be rejected")
        if caller.id != doc.author_id:
            if check is None or check.batch is None:
                raise ProposalNotOpen(f"proposal {doc.id} has no check left to decide on; it expired")
            self._may_decide(caller, doc, check, "reject")
        note, over = _comment(comment), doc.landing if state in ("stale", "failed") else None
        decided = await self.store.update(
            doc.id, lambda d: _decided(d, caller, doc.revisions[-1], False, note, None, over)
        )
        mine = decided is not None and decided.decision is not None and not decided.decision.approved
        if decided is None or not mine or decided.decision is None or decided.decision.by_id != caller.id:
            raise ProposalNotOpen(f"proposal {doc.id} was decided or re-checked meanwhile; read it again")
        await self._announce(decided.revisions[-1], "rejected")
        await release(self.jobs, decided)
        return await self._view(decided, diffs=False)

    async def recheck(
        self, caller: Principal, proposal_id: str, submission: PlanSubmission | None = None
    ) -> Submitted:
        """Check the proposal's batch again on the head (with ``submission.amend``'s edits, when given): a
        new revision, the earlier ones kept. Only its author, while it is open, failed or stale."""
        assert self.submissions is not None
        doc = await self._visible(caller, proposal_id)
        if caller.id != doc.author_id:
            raise AccessDenied("only the proposal's author may re-check it")
        caller.require(doc.wiki, "propose")
        check, landing = await self._records(doc)
        state = state_of(doc, check, landing, now_ms())
        if state not in RECHECKABLE:
            raise ProposalNotOpen(
                f"proposal {doc.id} is {state}; only an open, failed or stale one is re-checked"
            )
        if check is None or check.batch is None:
            raise ProposalNotOpen(f"proposal {doc.id}'s batch is no longer kept; propose it again")
        if len(doc.revisions) >= MAX_REVISIONS:
            raise BatchRejected(
                "INVALID_BATCH", f"proposal {doc.id} was checked {MAX_REVISIONS} times; propose it anew"
            )
        batch = check.batch.model_copy(update={"message": doc.message, "webhook": doc.webhook})
        if submission is not None and submission.amend is not None:
            batch = amended(batch, submission).model_copy(update={"webhook": doc.webhook})
        return await self.submissions.revise(caller, doc, batch, check.job_id)

    async def _announce(self, revision: str, decision: str) -> None:
        """Note ``decision`` on the check ``revision``: its webhook, if any, sends ``proposal.<decision>``
        (handed to the outbox in the same write). The decision stands whether or not this succeeds."""
        try:
            await self.jobs.update(revision, lambda record: record.announce(decision))
        except RedisError as exc:
            log.warning("proposal check %s: its %s webhook was not sent: %r", revision, decision, exc)


def _after(cursor: str | None) -> tuple[int, str] | None:
    """The last proposal of an earlier page, from its ``next_cursor`` (``INVALID_BATCH`` when malformed)."""
    if cursor is None:
        return None
    moment, _, proposal_id = cursor.partition(".")
    if not moment.isdigit() or not proposal_id.startswith(PREFIX) or len(cursor) > 100:
        raise BatchRejected("INVALID_BATCH", "cursor: pass back the next_cursor a listing answered")
    return int(moment), proposal_id


def _comment(comment: str | None) -> str | None:
    if comment is not None and len(comment) > MAX_COMMENT_CHARS:
        raise BatchRejected("INVALID_BATCH", f"comment: at most {MAX_COMMENT_CHARS} characters")
    return comment or None


def _decided(
    doc: ProposalDoc,
    caller: Principal,
    revision: str,
    approved: bool,
    comment: str | None,
    landing: str | None,
    over: str | None = None,
) -> ProposalDoc | None:
    """``doc`` decided by ``caller``, only while ``revision`` is still its latest and nobody decided it,
    or (``over``) while its approval's landing job ``over`` is its landing: a stale or failed landing may
    still be rejected (it keeps naming that job)."""
    undecided = doc.decision is None and doc.landing is None
    overruled = (
        over is not None and doc.landing == over and doc.decision is not None and doc.decision.approved
    )
    if not (undecided or overruled) or doc.revisions[-1] != revision:
        return None
    if overruled:
        landing = doc.landing
    doc.decision = DecisionDoc(
        by=Author(name=caller.name, email=caller.email),
        by_id=caller.id,
        at_ms=now_ms(),
        approved=approved,
        comment=comment,
    )
    doc.landing = landing
    return doc


def _undecided(doc: ProposalDoc, landing: str) -> ProposalDoc | None:
    """``doc`` open again after its landing job ``landing`` could not be queued."""
    if doc.landing != landing:
        return None
    doc.decision, doc.landing = None, None
    return doc


def _revision(number: int, job_id: str, record: JobRecord | None, diffs: bool) -> ProposalRevision:
    if record is None:
        return ProposalRevision(revision=number, job_id=job_id, status="expired")
    return ProposalRevision(
        revision=number,
        job_id=job_id,
        status=record.status,
        checked_at=iso(record.finished_ms),
        commit=record.result.revision.commit if record.result and record.result.revision else None,
        result=record.result if diffs else None,
        error=record.error if diffs else None,
    )
