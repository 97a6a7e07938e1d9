"""The job function a worker runs: ``apply_batch``, one batch (and those landing with it), exactly once.

``apply_batch`` moves the record to ``running``, hands the job to the pipeline (``worker.jobs.pipeline``:
claim the batches queued behind it, decide each, land them on the wiki's target, ``worker.jobs.targets``)
and records the outcomes (``worker.jobs.finish``); a proposal's check that succeeded is first written as its
revision, a commit on ``refs/proposals/<id>`` (and a branch of a remote-backed wiki's remote), named in its
result (``worker.jobs.revisions``). Unexpected errors, and Redis being away, make arq run
the job again (``Retry``, never arq's "failed", which would drop the job with its record unfinished); only
after ``max_job_tries`` runs is it reported failed, by this module, never by arq. A job runs again at its
place in the queue (no deferral, which would let the wiki's next batch overtake it), after a short
back-off taken inside the job while its partition waits anyway; it then looks for its own commit first.

Every write a run makes to its job records is fenced by the epoch of the lease its worker holds the
partition by (``worker.jobs.leases``): a run of a worker that was paused past its lease while another took
over is refused by the script itself (``Fenced``), records nothing, takes nothing off the queue, logs no
``job.succeeded``, and ends with ``Retry`` so that arq leaves the job's entry queued for the partition's
current owner, which finds the job's commit by trailer if the stale run landed one.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from arq import Retry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worker.errors import Fenced, WikiqError
from worker.jobs import events as telemetry
from worker.jobs import lifecycle, pipeline, proposals, revisions
from worker.jobs.context import JobContext
from worker.jobs.finish import again, finish, finish_job, live_lease
from worker.jobs.leases import Lease
from worker.jobs.pipeline import Decided, Member
from worker.jobs.proposals import ProposalStore
from worker.jobs.queue import ClaimLost, confirm_on_replica
from worker.jobs.resources import Resources
from worker.jobs.results import error_info
from worker.jobs.storage import storage_fault
from worker.jobs.targets import Target, target_for
from worker.schema.answers import ErrorInfo

log = logging.getLogger("wikiq.worker")


async def _retry_or_give_up(ctx: JobContext, resources: Resources, job_id: str, exc: Exception) -> ErrorInfo:
    """Raise arq's ``Retry`` while tries are left; on the last try, the error to record as failed."""
    if int(ctx.get("job_try", 1)) < resources.settings.max_job_tries:
        telemetry.job_retry(job_id, exc)
        raise await again(ctx) from exc
    return error_info(WikiqError(f"the batch could not be applied: {type(exc).__name__}", code="INTERNAL"))


async def apply_batch(ctx: JobContext, job_id: str) -> str | None:
    """arq job: apply the batch of job ``job_id`` and record the outcome; returns the final status.

    A fenced run (see the module) raises ``Retry`` having recorded nothing."""
    try:
        return await _apply_batch(ctx, job_id)
    except Fenced as exc:
        lease = ctx.get("lease")
        if lease is not None:
            lease.lost.set()  # the partition has a newer owner: this worker's consumer starts nothing more
        log.warning("job %s: fenced, nothing recorded (%s)", job_id, exc)
        raise Retry() from exc  # arq leaves the entry queued, where the current owner runs it


async def _apply_batch(ctx: JobContext, job_id: str) -> str | None:
    resources: Resources = ctx["resources"]
    try:
        record, stored = await resources.jobs.update_stored(job_id, lifecycle.start, live_lease(ctx))
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise await again(ctx) from exc  # Redis is away: nothing was done, run again once it is back
    if record is None:
        return None
    if record.status != "running":
        return record.status
    telemetry.job_started(record)
    if record.runs > resources.settings.max_job_tries:
        gave_up = WikiqError(f"the job was interrupted {record.runs - 1} times; gave up", code="INTERNAL")
        await finish_job(ctx, resources, job_id, None, error_info(gave_up), record.runs)
        return "failed"
    stop = asyncio.Event()
    head = Member(record, stored)
    work = asyncio.ensure_future(_apply(ctx, resources, head, stop))
    try:
        outcomes = await asyncio.shield(work)
    except asyncio.CancelledError:
        # arq's job timeout (or a shutdown) cancels the job, but git work cannot stop half-way: let it end,
        # record what it did, then let the cancellation through. No job is left with an unreported commit.
        stop.set()
        outcomes = await work
        if not outcomes:
            # a remote-backed wiki's wait for its remote stopped at once, its jobs given back: ``Retry``
            # keeps the head's arq entry queued at its place (arq drops the entry of a job that ends
            # with its timeout; a shutdown's cancellation keeps it either way)
            raise Retry() from None
        await finish(ctx, resources, outcomes)
        await _settle_proposals(resources, outcomes)
        raise
    await finish(ctx, resources, outcomes)
    await _settle_proposals(resources, outcomes)
    mine = next((o for o in outcomes if o.job_id == job_id), None)
    return None if mine is None else ("failed" if mine.error else "succeeded")


async def _apply(ctx: JobContext, resources: Resources, head: Member, stop: asyncio.Event) -> list[Decided]:
    """Run the pipeline for ``head``: the outcome of it and of the jobs landed with it; empty when stopped
    while waiting for a remote. An error of the run itself is the head's outcome (or a retry)."""
    record = head.record
    lease = ctx.get("lease")
    try:
        target = await target_for(resources, record.wiki, ctx.get("owner"))
        # the commit key before claiming: nothing to give back if Redis fails here
        key = await resources.commit_key.get(resources.settings, resources.jobs.redis)
        settings = resources.settings
        confirm = None
        if settings.accept_durability == "replica":
            redis, timeout = resources.jobs.redis, settings.accept_timeout_seconds
            confirm = functools.partial(confirm_on_replica, redis, record.partition, timeout)
        jobs, limits = resources.jobs, settings.limits
        outcomes = await pipeline.run(jobs, target, head, limits, key, lease, stop, confirm)
        await _keep_revisions(resources, target, outcomes, lease)
        return outcomes
    except Fenced:
        raise
    except ClaimLost as exc:  # nothing landed: run again on the Redis as it is now
        log.warning("job %s: %s; running it again", record.job_id, exc)
        raise await again(ctx) from exc
    except WikiqError as exc:
        if exc.code != "INTERNAL":
            return [Decided(head, error=error_info(exc))]
        if (fault := storage_fault(exc)) is not None:
            return [_storage_failed(head, fault)]
        return [Decided(head, error=await _retry_or_give_up(ctx, resources, record.job_id, exc))]
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise await again(ctx) from exc
    except Exception as exc:
        if (fault := storage_fault(exc)) is not None:
            return [_storage_failed(head, fault)]
        log.exception("job %s: unexpected error", record.job_id)
        return [Decided(head, error=await _retry_or_give_up(ctx, resources, record.job_id, exc))]


async def _keep_revisions(
    resources: Resources, target: Target, outcomes: list[Decided], lease: Lease | None
) -> None:
    """Write (and push) the revisions of the proposal checks that succeeded among ``outcomes``, each named
    in its result (``worker.jobs.revisions``); after a proposal's landing job, have the partition's
    refs of decided proposals swept at once."""
    checks = [
        (o.member.record, o.checked)
        for o in outcomes
        if o.checked is not None and o.result is not None and o.error is None
    ]
    if checks:
        kept = await revisions.keep(resources, target.repo, target.remote, checks, lease)
        for outcome in outcomes:
            if outcome.result is not None and outcome.job_id in kept:
                outcome.result.revision = kept[outcome.job_id]
    for outcome in outcomes:
        record = outcome.member.record
        if record.proposal and not record.dry_run:
            resources.sweep_now.add(record.partition)


async def _settle_proposals(resources: Resources, outcomes: list[Decided]) -> None:
    """Note in the proposal of each landing job among ``outcomes`` what it ended as, now that it is
    recorded (``worker.jobs.proposals.settle``). A failure is only logged: the proposal's next read notes
    it, as long as the job's record is kept."""
    settings = resources.settings
    store = ProposalStore(
        resources.jobs.redis, settings.proposal_retention_seconds + settings.job_retention_seconds
    )
    for outcome in outcomes:
        record = outcome.member.record
        if not record.proposal or record.dry_run:
            continue
        try:
            finished = await resources.jobs.get(record.job_id)
            if finished is not None:
                await proposals.settle(store, resources.jobs, finished)
        except Exception as exc:  # the proposal's reads settle it instead
            log.warning("job %s: proposal %s not settled (%r)", record.job_id, record.proposal, exc)


def _storage_failed(head: Member, fault: WikiqError) -> Decided:
    """A full or read-only data directory fails the job at once (``worker.jobs.storage``): no retry."""
    log.warning("job %s: %s", head.job_id, fault.message)
    return Decided(head, error=error_info(fault))
