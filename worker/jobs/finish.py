"""Recording a group's outcomes: the last step of the pipeline (``worker.jobs.pipeline``).

``finish`` records every member's outcome in one script (``JobStore.finish_many``: each record only while it
still holds the bytes its run stored; followers leave arq's queue; each webhook goes to its partition's
outbox, in the same script, which also takes the new entries for this process's taker: ``first_sends``
sends those attempts before the worker goes on), and each member whose record changed meanwhile one by
one, only while its run is the job's latest. Every write is fenced by the run's lease: a run whose lease
is known lost, or of an older epoch than the partition's, records nothing (``Fenced``). Redis being away
is ridden out for ``RECORD_PATIENCE`` seconds (the commits are durable already); then the job runs again
(``Retry``) and finds its commits.
"""

from __future__ import annotations

import asyncio
import time

from arq import Retry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worker import keys
from worker.jobs import events as telemetry
from worker.jobs import lifecycle
from worker.jobs.context import JobContext
from worker.jobs.handover import OutboxEntry
from worker.jobs.leases import Lease
from worker.jobs.pipeline import Decided
from worker.jobs.record import JobRecord
from worker.jobs.resources import Resources
from worker.jobs.store import Finishing, JobStore
from worker.schema.answers import ErrorInfo, JobResult

RECORD_PATIENCE = 30.0  # seconds a finished job waits for Redis to record its outcome before running again


async def again(ctx: JobContext) -> Retry:
    """Back off briefly (longer each try), then the ``Retry`` that runs this job again, first in line."""
    await asyncio.sleep(0.05 * 2 ** min(int(ctx.get("job_try", 1)), 5))  # back-off before the same job
    return Retry()


def live_lease(ctx: JobContext) -> Lease | None:
    """The run's lease (None: unfenced), after checking it is not known lost (``Fenced`` if it is)."""
    lease = ctx.get("lease")
    if lease is not None:
        lease.check()
    return lease


async def finish(ctx: JobContext, resources: Resources, outcomes: list[Decided]) -> None:
    """Record every outcome (see the module)."""
    live_lease(ctx)  # a run whose lease is known lost records nothing
    batched: list[tuple[Decided, Finishing]] = []
    for outcome in outcomes:
        member = outcome.member
        if member.stored is not None:
            # a shallow copy is enough: finishing only assigns fields of the record
            finished = lifecycle.finish(outcome.result, outcome.error)(member.record.model_copy())
            if finished is not None:
                queue = keys.queue(member.record.partition)
                item = Finishing(member.record, member.stored, finished, queue, member.follower)
                batched.append((outcome, item))
    done, taken = await _finish_many(ctx, resources, [item for _, item in batched])
    stored = [(outcome, item) for (outcome, item), flag in zip(batched, done, strict=True) if flag]
    if taken and resources.first_sends is not None:  # the webhooks these finishes owe: sent first
        await resources.first_sends.finished([(item.record, item.body) for _, item in stored], taken)
    recorded = set()
    for outcome, item in stored:
        recorded.add(outcome.job_id)
        telemetry.job_finished(item.record)
    for outcome in outcomes:
        if outcome.job_id not in recorded:  # its record changed since: read it again, if still this run's
            run = outcome.member.record.runs
            await finish_job(ctx, resources, outcome.job_id, outcome.result, outcome.error, run)


async def _finish_many(
    ctx: JobContext, resources: Resources, items: list[Finishing]
) -> tuple[list[bool], list[OutboxEntry]]:
    """``JobStore.finish_many`` (taking the outbox entries for this process's taker, if it has one),
    riding out a short Redis restart like ``_record``."""
    if not items:
        return [], []
    taker = "" if resources.first_sends is None else resources.first_sends.name
    delay = 0.05
    deadline = time.monotonic() + RECORD_PATIENCE
    while time.monotonic() < deadline:
        try:
            return await resources.jobs.finish_many(items, live_lease(ctx), taker)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await asyncio.sleep(delay)  # waiting for Redis to come back, not for another task
            delay = min(delay * 2, 1.0)
    raise await again(ctx)


async def finish_job(
    ctx: JobContext,
    resources: Resources,
    job_id: str,
    result: JobResult | None,
    error: ErrorInfo | None,
    run: int | None = None,
) -> None:
    """Record one outcome (of run ``run``: see ``lifecycle.finish``; its webhook goes to the outbox in the
    same write) and tell the metrics (only when this run finished the job: another run's finish is that
    run's to count)."""
    finished, applied = await _record(ctx, resources.jobs, job_id, result, error, run)
    if applied and finished is not None and finished.status != "running":
        telemetry.job_finished(finished)


async def _record(
    ctx: JobContext,
    jobs: JobStore,
    job_id: str,
    result: JobResult | None,
    error: ErrorInfo | None,
    run: int | None,
) -> tuple[JobRecord | None, bool]:
    """Record the outcome, riding out a short Redis restart (see the module): the record as stored, and
    whether this call is what finished it."""
    delay = 0.05
    deadline = time.monotonic() + RECORD_PATIENCE
    change_to = lifecycle.finish(result, error, run)
    applied = False

    def change(record: JobRecord) -> JobRecord | None:
        nonlocal applied
        changed = change_to(record)
        applied = changed is not None
        return changed

    while time.monotonic() < deadline:
        try:
            return await jobs.update(job_id, change, live_lease(ctx)), applied
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await asyncio.sleep(delay)  # waiting for Redis to come back, not for another task
            delay = min(delay * 2, 1.0)
    raise await again(ctx)
