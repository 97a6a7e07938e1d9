"""The job functions a worker runs: apply one batch, exactly once in effect.

``apply_batch`` moves the record to ``running``, applies the batch in a thread (git work blocks), and records
``succeeded`` or ``failed``. A run that may have happened before (the record was already ``running``, or a
compare-and-swap was lost) first looks for its own commit by its ``Wikiq-Job`` trailer and reports that
commit instead of writing a second one. Unexpected errors, and Redis being away, make arq run the job again
(``Retry``, never arq's "failed", which would drop the job with its record unfinished); only after
``max_job_tries`` runs is it reported failed, by this module, never by arq. A job runs again at its place in
the queue (no deferral, which would let the wiki's next batch overtake it), after a short back-off taken
inside the job while its partition waits anyway.

Every write a run makes to its job records is fenced by the epoch of the lease its worker holds the
partition by (``worker.jobs.leases``): a run of a worker that was paused past its lease while another took
over is refused by the script itself (``Fenced``), records nothing, takes nothing off the queue, logs no
``job.succeeded``, and ends with ``Retry`` so that arq leaves the job's entry queued for the partition's
current owner, which finds the job's commit by trailer if the stale run landed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from arq import Retry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worker.engine import preflight, review
from worker.engine.paths import ZonePolicy
from worker.errors import Fenced, RefLocked, RefMoved, WikiqError
from worker.git import STALE_LOCK_SECONDS, Identity, WikiRepo
from worker.git.policy import policy_for
from worker.jobs import events as telemetry
from worker.jobs import group, lifecycle
from worker.jobs.context import Deps, JobContext
from worker.jobs.group import Member
from worker.jobs.leases import Lease
from worker.jobs.publish import Outcome, publish_group
from worker.jobs.queue import queue_name, safety_net_ms, schedule_first
from worker.jobs.records import Finishing, JobRecord, JobStore
from worker.jobs.results import error_info, job_result
from worker.jobs.storage import storage_fault
from worker.schema.answers import ErrorInfo, JobResult
from worker.schema.edits import Limits

log = logging.getLogger("wikiq.worker")
MAX_SWAPS = 50
RECORD_PATIENCE = 30.0  # seconds a finished job waits for Redis to record its outcome before running again


def run_batch(
    repo: WikiRepo, policy: ZonePolicy, limits: Limits, record: JobRecord, maybe_ran: bool
) -> JobResult:
    """Check and commit ``record``'s batch on the current head; the ``result`` of the job.

    Raises ``BatchRejected`` when a rule fails (nothing written). When ``maybe_ran`` (or after a lost swap)
    the job's own commit is looked for first and, if found, reported as the result.
    """
    batch = record.batch
    if batch is None:
        raise WikiqError("the job's batch is gone", code="INTERNAL")
    author = Identity(record.author.name, record.author.email)
    swaps = 0
    locked_until = time.monotonic() + STALE_LOCK_SECONDS + 5
    while swaps < MAX_SWAPS:
        if maybe_ran and not batch.dry_run:
            mine = repo.find_job_commit(record.job_id, stop_at=record.base)
            if mine is not None:
                parents = repo.commit_info(mine).parents
                before = repo.snapshot(parents[0]) if parents else repo.snapshot(None)
                return job_result(mine, preflight(before, batch.edits, policy, limits))
        head = repo.head()
        snapshot = repo.snapshot(head)
        plan = preflight(snapshot, batch.edits, policy, limits, batch.expect)
        if batch.dry_run:
            return job_result(None, plan, review(snapshot, plan, policy))
        try:
            commit = repo.commit_plan(plan, head, batch.message, author, job_id=record.job_id)
        except RefLocked:
            telemetry.cas_retry("locked")
            if time.monotonic() > locked_until:
                raise WikiqError("refs/heads/main.lock stays locked", code="INTERNAL") from None
            time.sleep(0.05)  # another writer holds main.lock: back off, then check the head again
            maybe_ran = True
            continue
        except RefMoved:
            telemetry.cas_retry("moved")
            swaps += 1
            maybe_ran = True
            continue
        telemetry.commit_written(plan, len(batch.edits))
        return job_result(commit, plan)
    raise WikiqError(f"main kept moving; gave up after {MAX_SWAPS} attempts", code="INTERNAL")


async def _again(ctx: JobContext) -> Retry:
    """Back off briefly (longer each try), then the ``Retry`` that runs this job again, first in line."""
    await asyncio.sleep(0.05 * 2 ** min(int(ctx.get("job_try", 1)), 5))  # back-off before the same job
    return Retry()


async def _record(
    ctx: JobContext,
    jobs: JobStore,
    job_id: str,
    result: JobResult | None,
    error: ErrorInfo | None,
    run: int | None,
) -> tuple[JobRecord | None, bool]:
    """Record the outcome (of run ``run``, see ``_finish``), riding out a short Redis restart; the commit is
    already durable.

    Gives up after ``RECORD_PATIENCE`` seconds (well inside arq's job timeout, which would drop the job) and
    runs the job again, which then finds its commit by trailer and records it. The record as stored, and
    whether this call is what finished it.
    """
    delay = 0.05
    deadline = time.monotonic() + RECORD_PATIENCE
    finish = lifecycle.finish(result, error, run)
    applied = False

    def change(record: JobRecord) -> JobRecord | None:
        nonlocal applied
        changed = finish(record)
        applied = changed is not None
        return changed

    while time.monotonic() < deadline:
        try:
            return await jobs.update(job_id, change, _live_lease(ctx)), applied
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await asyncio.sleep(delay)  # waiting for Redis to come back, not for another task
            delay = min(delay * 2, 1.0)
    raise await _again(ctx)


async def _schedule_webhook(ctx: JobContext, record: JobRecord | None) -> None:
    """Queue the webhook of a finished job; if Redis is away, run the job again to queue it then. Nothing
    once the finish's attempt 0 was recorded (a run of a job finished earlier, after a webhook sender sent
    that attempt and dropped its arq entry: queued again, it would be sent twice)."""
    if record is None or record.webhook is None:
        return
    if record.webhook.round == 0 and (record.webhook.attempts or record.webhook.state != "pending"):
        return
    try:
        await schedule_first(ctx["redis"], record)
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise await _again(ctx) from exc


async def _retry_or_give_up(ctx: JobContext, deps: Deps, job_id: str, exc: Exception) -> ErrorInfo:
    """Raise arq's ``Retry`` while tries are left; on the last try, the error to record as failed."""
    if int(ctx.get("job_try", 1)) < deps.settings.max_job_tries:
        telemetry.job_retry(job_id, exc)
        raise await _again(ctx) from exc
    return error_info(WikiqError(f"the batch could not be applied: {type(exc).__name__}", code="INTERNAL"))


def _live_lease(ctx: JobContext) -> Lease | None:
    """The run's lease (None: unfenced), after checking it is not known lost (``Fenced`` if it is)."""
    lease = ctx.get("lease")
    if lease is not None:
        lease.check()
    return lease


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
    deps: Deps = ctx["deps"]
    try:
        record, stored = await deps.jobs.update_stored(job_id, lifecycle.start, _live_lease(ctx))
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise await _again(ctx) from exc  # Redis is away: nothing was done, run again once it is back
    if record is None:
        return None
    if record.status != "running":
        if record.status in ("succeeded", "failed"):
            await _schedule_webhook(ctx, record)  # a crash may have come between record and enqueue
        return record.status
    telemetry.job_started(record)
    if record.runs > deps.settings.max_job_tries:
        gave_up = WikiqError(f"the job was interrupted {record.runs - 1} times; gave up", code="INTERNAL")
        await _finish_job(ctx, deps, job_id, None, error_info(gave_up), record.runs)
        return "failed"
    stop = asyncio.Event()
    work = asyncio.ensure_future(_apply(ctx, deps, record, stored, stop))
    try:
        outcomes = await asyncio.shield(work)
    except asyncio.CancelledError:
        # arq's job timeout (or a shutdown) cancels the job, but git work cannot stop half-way: let it end,
        # record what it did, then let the cancellation through. A remote-backed wiki's wait for its
        # remote stops at once (its jobs stay running and run again). No job is left with an unreported
        # commit.
        stop.set()
        outcomes = await work
        await _finish_all(ctx, deps, outcomes)
        raise
    await _finish_all(ctx, deps, outcomes)
    mine = next((o for o in outcomes if o.job_id == job_id), None)
    return None if mine is None else ("failed" if mine.error else "succeeded")


async def _apply(
    ctx: JobContext, deps: Deps, record: JobRecord, stored: bytes | None, stop: asyncio.Event
) -> list[Outcome]:
    """Check and commit the batch (in a thread): the outcome of ``record``, and of the other jobs a group
    commit or a remote publish took along; empty when stopped while waiting for a remote."""
    lease = ctx.get("lease")
    try:
        entry = None if deps.wikis is None else await deps.wikis.entry(record.wiki)
        if entry is not None and deps.wikis is not None:
            return await publish_group(deps, deps.wikis, record, entry, ctx.get("owner"), stop, lease)
        return await _apply_local(deps, record, stored, lease)
    except Fenced:
        raise
    except WikiqError as exc:
        if exc.code != "INTERNAL":
            return [Outcome(record.job_id, error=error_info(exc))]
        if (fault := storage_fault(exc)) is not None:
            return [_storage_failed(record, fault)]
        return [Outcome(record.job_id, error=await _retry_or_give_up(ctx, deps, record.job_id, exc))]
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise await _again(ctx) from exc
    except Exception as exc:
        if (fault := storage_fault(exc)) is not None:
            return [_storage_failed(record, fault)]
        log.exception("job %s: unexpected error", record.job_id)
        return [Outcome(record.job_id, error=await _retry_or_give_up(ctx, deps, record.job_id, exc))]


async def _apply_local(
    deps: Deps, record: JobRecord, stored: bytes | None, lease: Lease | None
) -> list[Outcome]:
    """A local wiki's batch, with the batches of its wiki queued behind it (``worker.jobs.group``)."""
    repo = deps.store.open(record.wiki)
    policy = policy_for(repo.path)
    limits = deps.settings.limits
    key = await deps.commit_key.get(deps.settings, deps.jobs.redis)  # before claiming: nothing to give back
    members = [Member(record, stored, record.runs > 1, follower=False)]
    if record.runs == 1:  # a job run again (after an error or a crash) runs alone: others wait, uncounted
        members += await group.claim(deps, record, lease)
    try:
        run = await asyncio.to_thread(group.run_group, repo, policy, limits, members, lease, key)
    except BaseException:
        with contextlib.suppress(RedisError, OSError, Fenced):  # else they run again by themselves, later
            await group.release(deps, members[1:], lease)
        raise
    if run.left_out:
        with contextlib.suppress(RedisError, OSError, Fenced):
            await group.release(deps, run.left_out, lease)
    return [
        Outcome(d.job_id, d.result, d.error, record=m.record, stored=m.stored, follower=m.follower)
        for d, m in zip(run.decided, members, strict=False)
    ]


def _storage_failed(record: JobRecord, fault: WikiqError) -> Outcome:
    """A full or read-only data directory fails the job at once (``worker.jobs.storage``): no retry."""
    log.warning("job %s: %s", record.job_id, fault.message)
    return Outcome(record.job_id, error=error_info(fault))


async def _finish_all(ctx: JobContext, deps: Deps, outcomes: list[Outcome]) -> None:
    """Record every outcome: those handed over with their stored bytes in one script (``finish_many``,
    which also queues their webhooks, hands them to the webhook senders and takes followers out of arq's
    queue), the rest one by one."""
    _live_lease(ctx)  # a run whose lease is known lost records nothing
    defer_ms = safety_net_ms(deps.settings)
    batched: list[tuple[Outcome, Finishing]] = []
    for outcome in outcomes:
        if outcome.record is not None and outcome.stored is not None:
            # a shallow copy is enough: finishing only assigns fields of the record
            finished = lifecycle.finish(outcome.result, outcome.error)(outcome.record.model_copy())
            if finished is not None:
                queue = queue_name(outcome.record.partition)
                item = Finishing(outcome.record, outcome.stored, finished, queue, outcome.follower)
                if finished.webhook is not None:
                    item.hook_defer_ms = defer_ms  # a sender sends it at once; arq's entry is the net
                batched.append((outcome, item))
    done = await _finish_many(ctx, deps, [item for _, item in batched]) if batched else []
    recorded = set()
    for (outcome, item), flag in zip(batched, done, strict=True):
        if flag:
            recorded.add(outcome.job_id)
            telemetry.job_finished(item.record)
    for outcome in outcomes:
        if outcome.job_id not in recorded:  # its record changed since: read it again, if still this run's
            run = None if outcome.record is None else outcome.record.runs
            await _finish_job(ctx, deps, outcome.job_id, outcome.result, outcome.error, run)


async def _finish_many(ctx: JobContext, deps: Deps, items: list[Finishing]) -> list[bool]:
    """``JobStore.finish_many``, riding out a short Redis restart like ``_record``."""
    delay = 0.05
    deadline = time.monotonic() + RECORD_PATIENCE
    while time.monotonic() < deadline:
        try:
            return await deps.jobs.finish_many(items, _live_lease(ctx))
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await asyncio.sleep(delay)  # waiting for Redis to come back, not for another task
            delay = min(delay * 2, 1.0)
    raise await _again(ctx)


async def _finish_job(
    ctx: JobContext,
    deps: Deps,
    job_id: str,
    result: JobResult | None,
    error: ErrorInfo | None,
    run: int | None = None,
) -> None:
    """Record the outcome (of run ``run``: see ``_finish``), tell the metrics (only when this run finished
    the job: another run's finish is that run's to count) and queue the webhook."""
    finished, applied = await _record(ctx, deps.jobs, job_id, result, error, run)
    if finished is not None and finished.status == "running":
        return  # a newer run of the job is under way: it records the outcome and queues the webhook
    if applied:
        telemetry.job_finished(finished)
    await _schedule_webhook(ctx, finished)
