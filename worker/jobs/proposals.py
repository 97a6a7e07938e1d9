"""Proposals as Redis keeps them: one JSON document per proposal under ``keys.proposal``, a per-wiki
index and a per-author list, and the state a proposal is in (``state_of``).

A ``ProposalDoc`` holds what is decided about a proposal (its author, the dry runs that checked it, the
decision, the landing job and what it ended as); what the checks showed lives in those dry runs' job
records, kept as long as the proposal (``JobRecord.kept_seconds``). Every change is a compare-and-set
(``update``), so two reviewers deciding at once cannot both win. What a landing job ended as is noted in
the document by the worker that ran it (``settle``), and again by any read that finds it missing, so it
outlives the job's record; a decided proposal's checks are then kept only briefly (``release``). An author
keeps at most ``MAX_KEPT`` proposals: past it, its oldest are forgotten.

The service (``worker.service.proposals``) says what each state allows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, Field
from redis.asyncio import Redis
from redis.exceptions import WatchError

from worker import keys
from worker.errors import OUTAGES
from worker.jobs.clock import now_ms
from worker.jobs.record import FINISHED, JobRecord
from worker.jobs.store import JobStore
from worker.schema.answers import Author, ErrorInfo
from worker.schema.edits import Edit, Webhook
from worker.settings import Settings

log = logging.getLogger("wikiq.jobs")
MAX_REVISIONS = 20  # checks one proposal may have: each keeps a dry run's diff for the proposal's life
MAX_KEPT = 1000  # proposals one author keeps (any state): past it, its oldest are forgotten
# an approval whose landing job has no record this long after the decision was never queued (Redis
# failed between the two writes): the proposal is failed, so its author can re-check it
LANDING_GRACE_MS = 60_000
LANDED_SECONDS = 60  # a landed proposal's checks are kept this long more (its commit holds their diffs)
State = Literal["checking", "open", "failed", "approved", "landed", "stale", "rejected", "expired"]


class DecisionDoc(BaseModel):
    """An approval or rejection: by whom (and the principal id), when, with what comment."""

    by: Author
    by_id: str
    at_ms: int
    approved: bool
    comment: str | None = None


class ProposalDoc(BaseModel):
    """One proposal as stored. ``revisions`` are the dry-run job ids that checked its batch, the latest
    last; ``landing`` the job an approval queued; ``commit``, ``stale_paths`` and ``error`` what that job
    ended as, noted once seen (the job's record may expire before the proposal)."""

    id: str
    wiki: str
    author: Author
    author_id: str
    message: str
    edits: int
    created_ms: int
    expires_ms: int
    webhook: Webhook | None = None
    revisions: list[str] = Field(default_factory=list)
    decision: DecisionDoc | None = None
    landing: str | None = None
    commit: str | None = None
    stale_paths: list[str] | None = None
    error: ErrorInfo | None = None


class ProposalStore:
    """Proposal documents in Redis: each lives ``keep_seconds`` after its last change, indexed by wiki."""

    def __init__(self, redis: Redis, keep_seconds: int, proposal_seconds: int = 0) -> None:
        self.redis = redis
        self.keep_seconds = keep_seconds
        # a document lives at most a proposal's life past its last listing (a re-check), then
        # ``keep_seconds`` past its last change: its index entry is kept that long
        self.listed_seconds = keep_seconds + proposal_seconds

    @classmethod
    def of(cls, redis: Redis, settings: Settings) -> ProposalStore:
        """The store of a deployment: a proposal is kept ``WIKIQ_JOB_RETENTION_SECONDS`` past its own life."""
        life = settings.proposal_retention_seconds
        return cls(redis, life + settings.job_retention_seconds, life)

    async def create(self, doc: ProposalDoc) -> None:
        """Store a new proposal, index it under its wiki (dropping index entries of forgotten ones) and
        its author, forgetting the author's oldest past ``MAX_KEPT``."""
        index, mine = keys.wiki_proposals(doc.wiki), keys.author_proposals(doc.author_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.proposal(doc.id), doc.model_dump_json(exclude_defaults=True), ex=self.keep_seconds)
            pipe.zadd(index, {doc.id: doc.created_ms})
            pipe.zremrangebyscore(index, "-inf", now_ms() - self.listed_seconds * 1000)
            pipe.expire(index, self.listed_seconds)
            pipe.zadd(mine, {doc.id: doc.created_ms})
            pipe.zremrangebyscore(mine, "-inf", now_ms() - self.keep_seconds * 1000)
            pipe.zrange(mine, 0, -(MAX_KEPT + 1))  # the oldest past the cap
            pipe.zremrangebyrank(mine, 0, -(MAX_KEPT + 1))
            pipe.expire(mine, self.keep_seconds)
            found = await pipe.execute()
        forgotten = [m.decode() if isinstance(m, bytes) else str(m) for m in found[6]]
        if forgotten:
            await self.redis.delete(*(keys.proposal(name) for name in forgotten))

    async def touch(self, doc: ProposalDoc) -> None:
        """List ``doc`` as re-checked now: first in its wiki's index, which lives ``listed_seconds`` more."""
        index = keys.wiki_proposals(doc.wiki)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(index, {doc.id: now_ms()})
            pipe.expire(index, self.listed_seconds)
            await pipe.execute()

    async def delete(self, doc: ProposalDoc) -> None:
        """Remove a proposal whose first check was never queued."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.proposal(doc.id))
            pipe.zrem(keys.wiki_proposals(doc.wiki), doc.id)
            await pipe.execute()

    async def forget(self, wiki: str, proposal_id: str) -> None:
        """Drop the index entry of a proposal whose document expired."""
        await self.redis.zrem(keys.wiki_proposals(wiki), proposal_id)

    async def get(self, proposal_id: str) -> ProposalDoc | None:
        """The proposal, or None when unknown or expired."""
        raw = await self.redis.get(keys.proposal(proposal_id))
        return None if raw is None else ProposalDoc.model_validate_json(raw)

    async def page(self, wiki: str, limit: int, after: tuple[int, str] | None) -> list[tuple[int, str]]:
        """A wiki's proposals as ``(ms, id)``, most recently created or re-checked first, at most ``limit``,
        those after ``after`` (the last of an earlier page) only."""
        top = "+inf" if after is None else after[0]
        found = await self.redis.zrevrangebyscore(
            keys.wiki_proposals(wiki), top, "-inf", start=0, num=limit + 64, withscores=True
        )
        page = []
        for member, score in found:
            name = member.decode() if isinstance(member, bytes) else str(member)
            if after is not None and int(score) == after[0] and name >= after[1]:
                continue  # at the last page's moment: the ones it listed (members sort backwards)
            page.append((int(score), name))
        return page[:limit]

    async def update(
        self, proposal_id: str, change: Callable[[ProposalDoc], ProposalDoc | None]
    ) -> ProposalDoc | None:
        """Apply ``change`` atomically (it returns None to leave the proposal as it is): the stored
        proposal after the call, None when it is unknown. ``change`` is called again when another writer
        changed the proposal between the read and the write."""
        key = keys.proposal(proposal_id)
        while True:
            async with self.redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(key)
                    raw = await pipe.get(key)
                    if raw is None:
                        return None
                    changed = change(ProposalDoc.model_validate_json(raw))
                    if changed is None:
                        return ProposalDoc.model_validate_json(raw)
                    pipe.multi()
                    pipe.set(key, changed.model_dump_json(exclude_defaults=True), ex=self.keep_seconds)
                    await pipe.execute()
                    return changed
                except WatchError:
                    continue


def state_of(doc: ProposalDoc, check: JobRecord | None, landing: JobRecord | None, at_ms: int) -> State:
    """A proposal's state from its document, its latest revision's dry run (None: expired) and its landing
    job (None: none, or expired), at ``at_ms``: rejected; with a landing, what it ended as (noted in the
    document, else read from its record: landed, stale when the batch's checks refused it on the changed
    wiki, failed otherwise, approved while it has not finished, failed when it has no record
    ``LANDING_GRACE_MS`` after the approval); else expired, checking, open or failed by the check."""
    decision = doc.decision
    if decision is not None and not decision.approved:
        return "rejected"
    if doc.landing is not None:
        if doc.commit is not None:
            return "landed"
        if doc.stale_paths is not None:
            return "stale"
        if doc.error is not None:
            return "failed"
        if landing is None:
            approved = decision.at_ms if decision is not None else 0
            return "failed" if at_ms - approved > LANDING_GRACE_MS else "approved"
        if landing.status not in FINISHED:
            return "approved"
        if landing.status == "succeeded":
            return "landed"
        return "stale" if _refused(landing) else "failed"
    if at_ms >= doc.expires_ms or check is None:
        return "expired"
    if check.status in ("queued", "running"):
        return "checking"
    return "open" if check.status == "succeeded" else "failed"


def _refused(landing: JobRecord) -> bool:
    """True when the landing job failed because the batch's checks refused it (the wiki changed)."""
    error = landing.error
    return landing.status == "failed" and error is not None and error.code not in OUTAGES


def stale_paths(landing: JobRecord, check: JobRecord | None) -> list[str]:
    """The pages a stale landing names: a ``PLAN_STALE``'s path, else the paths of the edits that failed
    (from the reviewed batch), in order, without repeats."""
    error = landing.error
    if error is None:
        return []
    if error.details and isinstance(error.details.get("path"), str):
        return [error.details["path"]]
    indexes = [item.index for item in error.errors or []] or [error.index]
    edits: Sequence[Edit] = check.batch.edits if check is not None and check.batch is not None else ()
    found = [edits[i].path for i in indexes if i is not None and 0 <= i < len(edits)]
    return list(dict.fromkeys(found))


def landing_error(doc: ProposalDoc, landing: JobRecord | None) -> ErrorInfo:
    """Why a landing that is neither landed nor stale failed: its error, else what became of it."""
    if landing is not None and landing.error is not None:
        return landing.error
    what = "was cancelled before it ran" if landing is not None else "was never queued (Redis failed)"
    return ErrorInfo(
        code="PROPOSAL_NOT_OPEN",
        message=f"its landing job {doc.landing} {what}: nothing landed; its author may re-check it",
    )


def noted(doc: ProposalDoc, landing: JobRecord, check: JobRecord | None) -> ProposalDoc | None:
    """``doc`` with what its finished landing job ``landing`` ended as (the commit; or the stale pages
    and the refusal; or the error), or None when ``landing`` is not its landing, has not finished, or
    was noted already."""
    done = doc.commit is not None or doc.stale_paths is not None or doc.error is not None
    if doc.landing != landing.job_id or landing.status not in FINISHED or done:
        return None
    if landing.status == "succeeded" and landing.result is not None:
        doc.commit = landing.result.commit
    elif _refused(landing):
        doc.stale_paths, doc.error = stale_paths(landing, check), landing.error
    else:
        doc.error = landing_error(doc, landing)
    return doc


async def settle(store: ProposalStore, jobs: JobStore, landing: JobRecord) -> ProposalDoc | None:
    """Note what the finished landing job ``landing`` ended as in its proposal (``noted``), and once it
    landed, keep its checks only briefly (``release``): the stored proposal, None when it is unknown."""
    doc = await store.get(landing.proposal)
    if doc is None or doc.landing != landing.job_id:
        return doc
    check = await jobs.get(doc.revisions[-1])
    settled = await store.update(doc.id, lambda current: noted(current, landing, check))
    if settled is not None and settled.commit is not None:
        await release(jobs, settled)
    return settled


async def release(jobs: JobStore, doc: ProposalDoc) -> None:
    """A decided proposal's checks are kept only ``jobs.dry_run_retention`` more, a landed one's only
    ``LANDED_SECONDS`` and no longer counted in the proposer's queued bytes (the commit holds what they
    showed); a check still to run is kept no longer once it finishes. The idempotency key that queued
    one answers it as finished once its record is gone, so a retry of the proposal never becomes a
    second one."""
    landed = doc.commit is not None
    seconds = LANDED_SECONDS if landed else jobs.dry_run_retention
    for job_id in doc.revisions:
        record = await jobs.get(job_id)
        if record is None:
            continue
        if record.status not in FINISHED and record.kept_seconds:
            record = await jobs.update(job_id, _kept_briefly) or record
        await jobs.expire_soon(record, seconds, counted=0 if landed else seconds)
        if record.idempotency_guard and record.status in FINISHED:
            await _answer_as_finished(jobs.redis, record)


async def _answer_as_finished(redis: Redis, record: JobRecord) -> None:
    """Note ``record``'s final status in the idempotency key bound to it (as a record dropped under its
    submitter's retained-bytes cap is noted: ``JobStore.dropped``), while the key still names it."""
    value = await redis.get(record.idempotency_guard)
    words = (value.decode() if isinstance(value, bytes) else value or "").split(" ")
    if len(words) == 2 and words[0] == record.job_id:
        marked = f"{words[0]} {words[1]} {record.status}"
        await redis.set(record.idempotency_guard, marked, xx=True, keepttl=True)


def _kept_briefly(record: JobRecord) -> JobRecord | None:
    if record.status in FINISHED or not record.kept_seconds:
        return None
    record.kept_seconds = 0
    return record
