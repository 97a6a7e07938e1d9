"""Consuming one partition: an arq ``Worker`` (one job at a time) woken by the partition's doorbell.

A process serves each partition it holds the lease of with one ``PartitionRunner``, so a wiki's batches
run one at a time in acceptance order, without locks. Redis going away mid-job (a restart) is ridden out:
a run that could not be finished in Redis leaves arq's in-progress marker (a clean shutdown persists it),
which the consumer clears once Redis is back (atomically with a check that the lease is still ours)
instead of waiting out arq's in-progress timeout; and since arq's ``start_jobs`` keeps its job slot taken
when Redis fails half-way through starting a job, a consumer that saw an error continues with a fresh arq
``Worker`` once nothing is in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, cast

from arq.worker import Worker, func
from redis.exceptions import RedisError

from worker import keys
from worker.jobs import revisions
from worker.jobs.arq_compat import IN_PROGRESS_PREFIX, poll_once
from worker.jobs.clock import now_ms
from worker.jobs.context import JobContext
from worker.jobs.leases import Lease
from worker.jobs.payloads import dumps, loads
from worker.jobs.queue import ARQ_MAX_TRIES
from worker.jobs.resources import Resources
from worker.jobs.run import apply_batch
from worker.jobs.scripts import Call, Script, arg, key
from worker.settings import Settings
from worker.tasks import cancel_and_wait

log = logging.getLogger("wikiq.queue")
IDLE_RECHECK = 2.0  # seconds an idle consumer waits before re-reading its queue without a doorbell
CANCEL_GRACE = 10.0  # seconds a stopping consumer waits for the job it cancelled to record what it did


@dataclass
class ClearStale(Call):
    """Delete the in-progress markers (``marker_prefix`` + id) of every job in ``queue`` while ``owner``
    holds ``lease``: how many were deleted, or -1 when the lease is not ``owner``'s."""

    lease: str = key()
    queue: str = key()
    owner: str = arg()
    marker_prefix: str = arg()


CLEAR_STALE = Script(
    ClearStale,
    body="""
if redis.call('GET', K.lease) ~= A.owner then return -1 end
local n = 0
for _, id in ipairs(redis.call('ZRANGE', K.queue, 0, -1)) do
  n = n + redis.call('DEL', A.marker_prefix .. id)
end
return n
""",
)


def job_timeout(settings: Settings) -> float:
    """arq's timeout for a batch job: one of a remote-backed wiki may also wait that long for its remote."""
    extra = settings.remote_wait_seconds if settings.remotes_file is not None else 0.0
    return settings.job_timeout_seconds + extra


class PartitionRunner:
    """One arq ``Worker`` (max_jobs=1) for one partition, woken by its doorbell instead of polling.

    ``lease``: the lease the process holds the partition by; its jobs are fenced by its epoch, and the
    runner starts nothing more once it is lost (None: unfenced, as some tests run it)."""

    def __init__(self, partition: int, resources: Resources, owner: str, lease: Lease | None = None) -> None:
        self.partition = partition
        self.redis = resources.redis
        self.resources = resources
        self.owner = owner
        self.lease = lease if lease is not None else Lease(partition, 0)
        self.wake = asyncio.Event()
        self.stopping = False
        self.worker = self._consumer()
        self.task: asyncio.Task[None] | None = None
        self.next_sweep = 0.0  # when the partition's proposal refs are swept next (``_sweep``)

    def _consumer(self) -> Worker:
        """A fresh arq ``Worker`` for this partition's queue, one job at a time."""
        return Worker(
            functions=[func(cast(Any, apply_batch), name="apply_batch", max_tries=ARQ_MAX_TRIES)],
            queue_name=keys.queue(self.partition),
            redis_pool=self.redis,
            handle_signals=False,
            max_jobs=1,
            job_timeout=job_timeout(self.resources.settings),
            keep_result=0,
            max_tries=ARQ_MAX_TRIES,
            health_check_interval=3600,
            ctx=self._context(),
            job_serializer=dumps,
            job_deserializer=loads,
            log_results=False,
        )

    def _context(self) -> dict[str, Any]:
        ctx: JobContext = {"resources": self.resources, "redis": self.redis, "owner": self.owner}
        if self.lease.epoch:
            ctx["lease"] = self.lease
        return dict(ctx)

    def start(self) -> None:
        """Begin consuming in a task."""
        self.task = asyncio.create_task(self._run(), name=f"partition-{self.partition}")

    @property
    def busy(self) -> bool:
        """True while a job of this partition is in flight."""
        return bool(self.worker.tasks)

    async def _clear_stale_runs(self) -> int:
        """Delete the in-progress markers of this queue's jobs, if we still hold the lease.

        Called only with no job of ours in flight, so any marker left belongs to a run that is over: a dead
        process's, or ours when Redis went away before arq could finish the job. Atomic with the lease check,
        so a partition already taken over by another process is left alone. The number of markers deleted,
        or -1 when the lease is no longer ours.
        """
        call = ClearStale(
            keys.lease(self.partition), keys.queue(self.partition), self.owner, IN_PROGRESS_PREFIX
        )
        return int(await CLEAR_STALE.run(self.redis, call))

    async def _due_jobs(self) -> bool:
        """Whether jobs of this queue are due now (called when a poll started none of them).

        Then arq skipped them for their in-progress markers, and with the lease ours and nothing in flight
        those are stale: most likely set by a process whose lease had lapsed, polling once more before it
        stopped (or was killed), after we cleared the queue's markers on taking the lease. Left alone, such
        a marker holds its job, and every job of its wiki behind it, until arq's in-progress timeout (the job
        timeout, plus the remote wait for remote-backed wikis: minutes); the next pass clears it instead.
        """
        return bool(await self.redis.zcount(keys.queue(self.partition), "-inf", now_ms()))

    async def _sweep(self) -> None:
        """Between jobs, when due (every ``proposal_sweep_seconds``, or at once after a proposal's landing
        job): remove the refs and branches of this partition's decided proposals
        (``worker.jobs.revisions.sweep``, which stops early when jobs wait). Its errors are logged: the
        next sweep tries again."""
        resources = self.resources
        now = time.monotonic()
        if self.lease.lost.is_set() or (self.partition not in resources.sweep_now and now < self.next_sweep):
            return
        resources.sweep_now.discard(self.partition)
        self.next_sweep = now + resources.settings.proposal_sweep_seconds
        try:
            await revisions.sweep(resources, self.partition, self._due_jobs)
        except Exception as exc:
            log.warning("partition %s: proposal sweep failed (%r); trying again later", self.partition, exc)

    async def _run_jobs(self) -> bool:
        """Wait for the jobs in flight; True if every one ran to its end in Redis (started and finished)."""
        running = list(self.worker.tasks.items())
        await asyncio.wait([task for _, task in running])
        clean = True
        for job_id, task in running:
            self.worker.tasks.pop(job_id, None)  # reaped here, so arq's poll never re-raises it
            error = None if task.cancelled() else task.exception()
            if task.cancelled() or error is not None:
                log.warning("partition %s: run of %s cut short (%r)", self.partition, job_id, error)
                clean = False
        return clean

    async def _run(self) -> None:
        backoff = 0.1
        cleared = False  # the queue's stale in-progress markers are cleared (done first, and after errors)
        fresh = True  # the arq Worker has seen no error
        while not self.stopping and not self.lease.lost.is_set():
            self.wake.clear()
            try:
                if self.worker.tasks:
                    if not await self._run_jobs():
                        cleared = False
                    continue
                if not fresh:
                    self.worker, fresh = self._consumer(), True
                if not cleared:  # -1: the lease lapsed or moved; start nothing until the lease loop decides
                    cleared = await self._clear_stale_runs() >= 0
                if cleared:
                    await poll_once(self.worker)
                    if self.worker.tasks:
                        continue
                    cleared = not await self._due_jobs()  # due, yet none started: clear markers first
                    if cleared:
                        await self._sweep()
                backoff = 0.1
            except Exception as exc:  # the consumer must outlive any error; Redis being away is the usual one
                if isinstance(exc, RedisError):
                    log.warning("partition %s: Redis unavailable (%s); retrying", self.partition, exc)
                else:
                    log.exception("partition %s: consumer error; retrying", self.partition)
                cleared = fresh = False
                await asyncio.sleep(backoff)  # back off while Redis is away
                backoff = min(backoff * 2, 2.0)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), IDLE_RECHECK)
        if self.worker.tasks:  # a job started by the last poll before the stop: let it end
            with contextlib.suppress(Exception):
                await self._run_jobs()

    async def stop(self, grace: float = 30.0) -> None:
        """Stop after the job in flight, waiting at most ``grace`` seconds for it; then (``grace`` > 0)
        cancel it, waiting at most ``CANCEL_GRACE`` more: git work in flight ends and is recorded, and a
        remote-backed wiki's wait for its remote stops with its jobs given back to the queue, while this
        process still holds the lease. With ``grace`` 0 (the lease is lost) the job is left to stop at its
        next safe point, recording nothing."""
        self.stopping = True
        self.wake.set()
        if self.task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self.task), grace)
            return
        except TimeoutError:
            pass
        if grace > 0 and self.worker.job_tasks:
            for task in list(self.worker.job_tasks.values()):  # the job, not arq's bookkeeping around it
                task.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.task), CANCEL_GRACE)
        await cancel_and_wait(self.task)
