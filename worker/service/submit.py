"""Submitting a batch: every check that needs no repository, then one job record and one queue entry.

In order: the caller's write right on the wiki (404 if it may not read it, 403 otherwise), its rate limit,
the batch's static checks (limits, paths, zones, encodings), the caller's path prefixes, the webhook URL
(a configured secret, and no private address unless allowed), the idempotency key, the caller's queued
bytes (its batches still waiting, plus the dry-run results Redis still keeps for it), the record, the arq
job and the partition's doorbell, the last four in one atomic Lua script sent in one round trip with the
durability wait (``worker.jobs.queue.accept_job``). If that call fails, the record, the idempotency key
and the queued bytes are given back, so a refused submission leaves nothing behind.

Only once Redis confirms the job durable (``WIKIQ_ACCEPT_DURABILITY``: fsynced in its append-only file,
and on a replica with ``replica``; ``worker.jobs.queue.ring_durably``) is the submission answered. When
Redis cannot confirm in time, the answer is ``STORAGE_UNAVAILABLE`` (503), never a ``202`` that a power cut
could take back. The record and queue entry are then kept, not withdrawn: the job may already be running
(its doorbell rang) and a withdrawal would be as unconfirmed as the job itself. The message names the job
so the client can follow it, and the idempotency key stays bound to it, so submitting again with the same
``Idempotency-Key`` answers that job once it is durable instead of queueing a second one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import cast

from arq.connections import ArqRedis

from worker import keys
from worker.engine import check_static
from worker.errors import (
    AccessDenied,
    BatchRejected,
    IdempotencyConflict,
    ProposalNotOpen,
    RateLimited,
    StorageUnavailable,
    WebhookRefused,
)
from worker.jobs.clock import now_ms
from worker.jobs.events import job_accepted
from worker.jobs.ids import new_job_id, partition_of
from worker.jobs.proposals import ProposalDoc
from worker.jobs.queue import ACCEPTED, KEY_TAKEN, NotDurable, accept_job, enqueue_batch, ring_durably
from worker.jobs.record import BatchSummary, JobRecord, WebhookDelivery
from worker.jobs.store import JobStore
from worker.jobs.wikis import Wikis
from worker.schema.answers import Author, Job, JobStatus, Submitted
from worker.schema.edits import Batch, PlanSubmission, batch_paths
from worker.service.caller import Principal
from worker.service.plans import PLAN_USED_SECONDS, planned_batch
from worker.service.proposals import Proposals
from worker.service.ratelimit import check_rate
from worker.settings import Settings
from worker.webhooks.guard import check_webhook_url

log = logging.getLogger("wikiq.api")
TAKE_BACK_SECONDS = 60.0  # how long a failed submission's clean-up waits for Redis to answer again


def fingerprint(wiki: str, batch: Batch, proposal: bool = False) -> str:
    """A digest of what was submitted, to tell a retried submission from a different one (a proposal
    from the dry run its check is)."""
    submitted: list[object] = [wiki, batch.model_dump(mode="json"), *(["proposal"] if proposal else [])]
    canonical = json.dumps(submitted, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def status_url(job_id: str) -> str:
    """Where a job is polled."""
    return f"/v1/jobs/{job_id}"


@dataclass
class Intent:
    """What a submission queues besides its batch: the job's id and commit author, and the proposal it
    checks or lands (``proposal``), created with it (``new_proposal``) or re-checked after the revision
    ``revising`` (as ``seen``, with ``edits`` edits now); a proposal's check is kept ``kept_seconds``."""

    job_id: str
    author: Author
    proposal: str = ""
    kept_seconds: int = 0
    new_proposal: ProposalDoc | None = None
    revising: str = ""
    seen: ProposalDoc | None = None  # the proposal as the re-check read it
    edits: int = 0
    landing: bool = False  # an approved proposal's landing


class Submissions:
    """Accepting batches (and proposals: ``worker.service.proposals``)."""

    def __init__(
        self, settings: Settings, redis: ArqRedis, wikis: Wikis, jobs: JobStore, proposals: Proposals
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.wikis = wikis
        self.jobs = jobs
        self.proposals = proposals
        self._taking_back: set[asyncio.Future[None]] = set()

    async def submit(
        self,
        caller: Principal,
        wiki: str,
        batch: Batch | PlanSubmission,
        idempotency_key: str | None = None,
    ) -> Submitted | Job:
        """Check ``batch`` and queue it: ``Submitted`` for a new job, or the ``Job`` an idempotency key named.
        A ``PlanSubmission`` queues the batch of the dry run it names, or that batch amended
        (``worker.service.plans``). A batch of a caller holding ``propose`` but not ``write``, or one that
        says ``propose``, becomes a proposal (``worker.service.proposals``): its check is queued as a dry
        run, kept until the proposal is decided or expires, and the answer names the proposal.

        Raises the refusal (``BatchRejected``, ``AccessDenied``, ``RateLimited``, ...) when any check
        fails; nothing is then stored.
        """
        if not caller.may(wiki, "propose"):
            caller.require(wiki, "write")  # 404 when it may not read the wiki, else 403
        plan, checked = None, None
        if isinstance(batch, PlanSubmission):
            if batch.amend is None:  # an amended batch is a new one: it commits no plan
                plan = batch.plan
            batch, checked = await planned_batch(self.jobs, caller.id, wiki, batch)
        elif batch.expect is not None:
            raise BatchRejected("INVALID_BATCH", "expect: Extra inputs are not permitted (plans set it)")
        intent = Intent(new_job_id(), Author(name=caller.name, email=caller.email))
        if not batch.dry_run and (batch.propose or not caller.may(wiki, "write")):
            # a proposal: checked now as a dry run, landed only once approved (a plan's token is not used)
            plan, checked = None, None
            batch = batch.model_copy(update={"dry_run": True, "propose": False, "expect": None})
            doc = self.proposals.new(caller, wiki, batch, intent.job_id)
            intent.proposal, intent.new_proposal = doc.id, doc
            intent.kept_seconds = self.settings.proposal_retention_seconds
        return await self._accept(caller, wiki, batch, intent, idempotency_key, plan, checked)

    async def land(self, approver: Principal, doc: ProposalDoc, batch: Batch, job_id: str) -> Submitted:
        """Queue an approved proposal's landing ``batch`` (a plan: its ``expect`` set) as job ``job_id``,
        authored by the proposer and counted in the approver's rate and queued bytes."""
        intent = Intent(job_id, doc.author, proposal=doc.id, landing=True)
        answer = await self._accept(approver, doc.wiki, batch, intent)
        assert isinstance(answer, Submitted)
        return answer

    async def revise(self, caller: Principal, doc: ProposalDoc, batch: Batch, previous: str) -> Submitted:
        """Queue a new check (revision) of proposal ``doc``: ``batch`` as a dry run, named in the proposal
        only while ``previous`` is still its latest revision and nobody decided it since ``doc`` was read
        (else ``PROPOSAL_NOT_OPEN``)."""
        intent = Intent(new_job_id(), Author(name=caller.name, email=caller.email), proposal=doc.id)
        intent.kept_seconds = self.settings.proposal_retention_seconds
        intent.revising, intent.seen, intent.edits = previous, doc, len(batch.edits)
        answer = await self._accept(caller, doc.wiki, batch.model_copy(update={"dry_run": True}), intent)
        assert isinstance(answer, Submitted)
        return answer

    async def _accept(
        self,
        caller: Principal,
        wiki: str,
        batch: Batch,
        intent: Intent,
        idempotency_key: str | None = None,
        plan: str | None = None,
        checked: JobRecord | None = None,
    ) -> Submitted | Job:
        """Every check that needs no repository, then the record, the queue entry and the proposal
        ``intent`` names (see the module); what is stored is taken back when a check refuses."""
        at = await self.wikis.target(wiki)  # never a fetch: the worker checks the batch on the head
        settings = self.settings
        await check_rate(
            self.redis, caller.id, settings.rate_limit_submissions, settings.rate_limit_window_seconds
        )
        check_static(batch, at.policy, settings.limits)
        if not caller.may_write_paths(wiki, batch_paths(batch)):
            # like the seeds: the whole batch is refused and the denied path is not named
            raise AccessDenied("your token may not write every path of this batch", code="FORBIDDEN")
        if batch.webhook is not None and not intent.landing:  # a landing's was checked when proposed
            if settings.webhook_secret is None:
                raise WebhookRefused(
                    "this server has no WIKIQ_WEBHOOK_SECRET, so it sends no webhooks; poll the job"
                )
            url = await check_webhook_url(batch.webhook.url, allow_private=settings.webhook_allow_private)
            batch = batch.model_copy(update={"webhook": batch.webhook.model_copy(update={"url": url})})
            if intent.new_proposal is not None:
                intent.new_proposal.webhook = batch.webhook
        job_id = intent.job_id
        scope = f"{caller.id}\x00{wiki}"
        guard = None
        if idempotency_key is not None:
            digest = fingerprint(wiki, batch, proposal=intent.new_proposal is not None)
            guard = (scope, idempotency_key, digest)
            replayed = await self._bind_key(caller.id, scope, idempotency_key, digest, job_id)
            if replayed is not None:
                return replayed
        record = self._record(caller, wiki, job_id, batch, at.commit, intent)
        if idempotency_key is not None:
            record.idempotency_guard = keys.idempotency(scope, idempotency_key)
        cap = settings.max_queued_bytes
        if 0 < cap < record.queued_bytes:
            if idempotency_key is not None:
                await self.jobs.unbind_key(scope, idempotency_key)
            raise BatchRejected(
                "BATCH_TOO_LARGE",
                f"the batch is {record.queued_bytes} bytes, over the {cap} bytes one principal may have "
                "waiting; split it",
            )
        if plan is not None and not await self.redis.set(keys.plan_used(plan), job_id, nx=True, ex=86400):
            if idempotency_key is not None:
                await self.jobs.unbind_key(scope, idempotency_key)
            raise BatchRejected(
                "PLAN_NOT_FOUND", f"plan {plan[:80]!r} was committed already (a plan commits once)"
            )
        try:
            await self._name_proposal(intent)
        except BaseException:
            if idempotency_key is not None:
                await self.jobs.unbind_key(scope, idempotency_key)
            raise
        try:  # one round trip: bytes, record, queue entry and doorbell at once, then the durability wait
            outcome = await accept_job(
                self.redis,
                self.jobs,
                record,
                guard,
                cap,
                settings.accept_durability,
                settings.accept_timeout_seconds,
            )
        except NotDurable as exc:
            job_accepted(self.redis, record)
            raise self._not_durable(job_id, exc) from None
        except BaseException:  # the script may or may not have run: take back what it may have stored
            self._take_back_later(record, scope, idempotency_key, plan, intent)
            raise
        if outcome != ACCEPTED:
            await self._unname_proposal(intent)
        if outcome != ACCEPTED and plan is not None:
            await self.redis.delete(keys.plan_used(plan))
        if outcome == KEY_TAKEN:
            # a retry took the key over while this submission stalled: it answers that retry's job
            assert guard is not None
            replayed = await self._bind_key(caller.id, *guard, new_job_id())
            if replayed is None:  # the key expired meanwhile (24 h): nothing was queued for it
                await self.jobs.unbind_key(scope, guard[1])
                raise StorageUnavailable("this submission stalled and was not queued; submit it again", 1)
            return replayed
        if outcome != ACCEPTED:
            if idempotency_key is not None:
                await self.jobs.unbind_key(scope, idempotency_key)
            raise RateLimited(
                f"{outcome} bytes of your batches are still waiting or kept as dry-run results (the limit "
                f"is {cap}); wait for some to finish (a dry run counts until it expires or its plan is "
                "committed; a proposal until it is decided), then submit again",
                retry_after=1,
            )
        job_accepted(self.redis, record)
        if plan is not None and checked is not None:  # its plan is committed: kept a minute more only
            await self.jobs.expire_soon(checked, PLAN_USED_SECONDS)
        proposal = None
        if intent.new_proposal is not None or intent.revising:
            proposal = self.proposals.ref(await self._proposal_doc(intent))
        return Submitted(job_id=job_id, status="queued", status_url=status_url(job_id), proposal=proposal)

    async def _proposal_doc(self, intent: Intent) -> ProposalDoc:
        """The proposal an accepted check names (as stored, or as created)."""
        found = await self.proposals.store.get(intent.proposal)
        assert found is not None or intent.new_proposal is not None
        return found or cast(ProposalDoc, intent.new_proposal)

    async def _name_proposal(self, intent: Intent) -> None:
        """Store the proposal ``intent`` creates, or add its check as the proposal's new revision (only
        while ``intent.revising`` is still its latest: ``PROPOSAL_NOT_OPEN`` otherwise), before the job
        is accepted: a proposal never names a check that was not queued for longer than a refusal takes."""
        store = self.proposals.store
        if intent.new_proposal is not None:
            await store.create(intent.new_proposal)
        elif intent.revising:
            ttl = self.settings.proposal_retention_seconds

            seen = intent.seen

            def revise(doc: ProposalDoc) -> ProposalDoc | None:
                decided = seen is None or doc.landing != seen.landing or doc.decision != seen.decision
                if doc.revisions[-1] != intent.revising or decided:
                    return None
                doc.revisions.append(intent.job_id)
                doc.decision = doc.landing = doc.commit = doc.stale_paths = doc.error = None
                doc.expires_ms, doc.edits = now_ms() + ttl * 1000, intent.edits
                return doc

            stored = await store.update(intent.proposal, revise)
            if stored is None or stored.revisions[-1] != intent.job_id:
                raise ProposalNotOpen(f"proposal {intent.proposal} was re-checked or decided meanwhile")
            await store.touch(stored)

    async def _unname_proposal(self, intent: Intent) -> None:
        """Take back what ``_name_proposal`` stored for a job that was not queued."""
        store = self.proposals.store
        if intent.new_proposal is not None:
            await store.delete(intent.new_proposal)
        elif intent.revising:
            seen = intent.seen

            def unrevise(doc: ProposalDoc) -> ProposalDoc | None:
                if doc.revisions[-1] != intent.job_id or seen is None:
                    return None
                return seen  # as it was before this re-check, which was not queued

            await store.update(intent.proposal, unrevise)

    def _take_back_later(
        self, record: JobRecord, scope: str, key: str | None, plan: str | None, intent: Intent
    ) -> None:
        """Take back, in the background, what a submission whose script failed may have stored (its
        record, queued bytes, idempotency key, plan marker): its refusal is answered at once, not after a
        second wait on a Redis that does not answer. A retry with the same key that comes first takes the
        key over (``_bind_key``), so one job per key remains either way."""

        async def take_back() -> None:
            try:
                async with asyncio.timeout(TAKE_BACK_SECONDS):
                    await self.jobs.delete(record.job_id, record.wiki)
                    await self.jobs.return_bytes(record)
                    if key is not None:
                        await self.jobs.unbind_key(scope, key)
                    if plan is not None:
                        await self.redis.delete(keys.plan_used(plan))
                    await self._unname_proposal(intent)
            except Exception as exc:  # Redis still away: the key expires, the record never was
                log.warning("a failed submission's clean-up failed (job %s): %r", record.job_id, exc)

        task = asyncio.ensure_future(take_back())
        self._taking_back.add(task)
        task.add_done_callback(self._taking_back.discard)

    async def _bind_key(self, submitter: str, scope: str, key: str, digest: str, job_id: str) -> Job | None:
        """Bind idempotency ``key`` to the new ``job_id`` (None: go on and queue it), or answer the job it
        is bound to already (``IdempotencyConflict`` for another body).

        A bound job whose record does not appear (its submission died, or Redis failed over, between
        claiming the key and storing the record) would otherwise be answered forever without existing:
        after a short wait the key is taken over for ``job_id`` (atomically, only while that record is
        missing; the stalled submission's own store is guarded by the key, so one job per key remains).
        A bound job still ``queued`` is put on its queue again if it is not there (a submission cut short
        between its record and its queue entry), and confirmed durable before it is answered. A bound job
        whose record was dropped under its submitter's retained-bytes cap (``JobStore.dropped``) is
        answered by its id, wiki and final status alone, and never queued again.
        """
        for _ in range(3):
            bound, bound_digest = await self.jobs.bind_key(scope, key, digest, job_id)
            if bound == job_id:
                return None
            if bound_digest != digest:
                raise IdempotencyConflict("this Idempotency-Key was used with a different batch")
            existing = await self.jobs.get(bound)
            if existing is None:
                status = await self.jobs.dropped(scope, key, bound)
                if status is not None:  # it ran; its record was dropped under the retained-bytes cap
                    return Job(job_id=bound, wiki=scope.split("\x00", 1)[1], status=cast(JobStatus, status))
                existing = await self._record_of(bound)
            if existing is None:
                if await self.jobs.take_over_key(scope, key, (bound, digest), job_id, submitter):
                    return None
                continue  # rebound or stored meanwhile: look again
            if existing.status == "queued":  # a no-op when it is on its queue already
                await enqueue_batch(
                    self.redis, bound, existing.partition, self.settings.job_retention_seconds
                )
            await self._durable(bound, existing.partition)
            return existing.public(reveal=True)
        raise StorageUnavailable("this Idempotency-Key is busy with another submission; try again", 1)

    async def _record_of(self, job_id: str) -> JobRecord | None:
        """The record of ``job_id``, waiting about a second for a submission still storing it."""
        for delay in (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4):
            await asyncio.sleep(delay)  # another request is between claiming the key and storing the record
            existing = await self.jobs.get(job_id)
            if existing is not None:
                return existing
        return None

    async def _durable(self, job_id: str, partition: int) -> None:
        """Ring the partition's doorbell and wait until Redis confirms the job durable (see the module);
        ``StorageUnavailable`` naming the job when it cannot."""
        settings = self.settings
        try:
            await ring_durably(
                self.redis, partition, settings.accept_durability, settings.accept_timeout_seconds
            )
        except NotDurable as exc:
            raise self._not_durable(job_id, exc) from None

    @staticmethod
    def _not_durable(job_id: str, exc: NotDurable) -> StorageUnavailable:
        """The 503 of a job queued but not confirmed durable (it is kept: see the module)."""
        return StorageUnavailable(
            f"job {job_id} was queued but is not confirmed durable: {exc.message}. It may still run "
            f"(see {status_url(job_id)}); submitting again with the same Idempotency-Key answers that "
            "job instead of queueing another",
            retry_after=1,
            job_id=job_id,
        )

    def _record(
        self, caller: Principal, wiki: str, job_id: str, batch: Batch, base: str | None, intent: Intent
    ) -> JobRecord:
        record = JobRecord(
            job_id=job_id,
            wiki=wiki,
            submitted_ms=now_ms(),
            batch=batch,
            summary=BatchSummary.of(batch),
            author=intent.author,
            submitter=caller.id,
            proposal=intent.proposal,
            kept_seconds=intent.kept_seconds,
            base=base,
            partition=partition_of(wiki, self.settings.partitions),
            webhook=None if batch.webhook is None else WebhookDelivery(url=batch.webhook.url),
        )
        record.queued_bytes = len(batch.model_dump_json(exclude_defaults=True))
        return record
