"""Everything arq- and Redis-queue-specific: partitions, leases, doorbells, enqueueing, the worker loop.

Each wiki maps to one partition (``partition_of``); each partition is one arq queue consumed by exactly one
worker process at a time, holding a lease ``wikiq:lease:<p>`` renewed while it lives. A process serves its
partitions with one arq ``Worker`` each (``max_jobs=1``), so a wiki's batches run one at a time in
acceptance order, without locks. Instead of arq's 0.5 s poll, submissions ring a per-partition doorbell
list and one blocking ``BLPOP`` wakes the right consumer at once. Only JSON crosses Redis.

Worker processes share partitions fairly: each registers a heartbeat, aims for ``ceil(P / live)``
partitions, takes free leases up to that, and hands back extras when idle. A killed process's leases
expire after ``lease_seconds``; the next owner clears the dead run's in-progress marker so the interrupted
job runs again first (its own commit is then found by trailer, see ``worker.jobs``).

Redis going away mid-job (a restart) is ridden out the same way: a run that could not be finished in Redis
leaves arq's in-progress marker (a clean shutdown persists it), which the consumer clears once Redis is back
instead of waiting out arq's in-progress timeout; and since arq's ``start_jobs`` keeps its job slot taken
when Redis fails half-way through starting a job, a consumer that saw an error continues with a fresh arq
``Worker`` once nothing is in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import random
import socket
import time
from collections.abc import Awaitable
from typing import Any, cast

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.constants import in_progress_key_prefix
from arq.worker import Worker, func
from redis.exceptions import RedisError

from worker.gitstore import GitStore
from worker.jobs import Deps, apply_batch
from worker.jobstore import JobStore
from worker.metrics import RECORDER
from worker.settings import Settings
from worker.webhooks import QUEUE as WEBHOOK_QUEUE
from worker.webhooks import deliver_webhook, signer_for, webhook_client

log = logging.getLogger("wikiq.queue")

WORKERS = "wikiq:workers"
IDLE_RECHECK = 2.0  # seconds an idle consumer waits before re-reading its queue without a doorbell
# arq never gives up on a batch or a delivery by itself (that would drop it with its record unfinished):
# ``worker.jobs`` counts runs and records the failure after ``max_job_tries``; a delivery fails by schedule.
ARQ_MAX_TRIES = 1_000_000


def queue_name(partition: int) -> str:
    """The arq queue of ``partition``."""
    return f"wikiq:queue:{partition}"


def bell_key(partition: int) -> str:
    """The doorbell list rung when work arrives on ``partition``."""
    return f"wikiq:bell:{partition}"


def lease_key(partition: int) -> str:
    """The lease naming the worker that owns ``partition``."""
    return f"wikiq:lease:{partition}"


def _dumps(value: dict[str, Any]) -> bytes:
    # default=str: arq also stores results, which may hold an exception; jobs themselves are plain JSON
    return json.dumps(value, separators=(",", ":"), default=str).encode()


def _loads(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("arq job payload is not a JSON object")
    return value


async def connect(url: str) -> ArqRedis:
    """An arq Redis pool that serialises jobs as JSON (never pickle)."""
    settings = RedisSettings.from_dsn(url)
    settings.conn_retries = 0
    return await create_pool(settings, job_serializer=_dumps, job_deserializer=_loads)


async def enqueue_batch(redis: ArqRedis, job_id: str, partition: int, expires_s: float) -> None:
    """Queue job ``job_id`` on ``partition`` and ring its doorbell; ``RuntimeError`` if arq refused it."""
    job = await redis.enqueue_job(
        "apply_batch", job_id, _job_id=job_id, _queue_name=queue_name(partition), _expires=expires_s
    )
    if job is None:
        raise RuntimeError(f"arq refused job {job_id}: the id is taken")
    await ring(redis, partition)


async def ring(redis: ArqRedis, partition: int) -> None:
    """Wake the consumer of ``partition``."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(bell_key(partition), b"1")
        pipe.ltrim(bell_key(partition), 0, 7)
        await pipe.execute()


async def cancel_queued(redis: ArqRedis, job_id: str, partition: int) -> None:
    """Take a cancelled job out of its arq queue so no consumer ever reads it."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.zrem(queue_name(partition), job_id)
        pipe.delete(f"arq:job:{job_id}")
        await pipe.execute()


async def _script(redis: ArqRedis, script: str, keys: tuple[str, ...], *args: str) -> Any:
    """Run the Lua ``script`` on ``keys`` with ``args``."""
    return await cast(Awaitable[Any], redis.eval(script, len(keys), *keys, *args))


_CLEAR_STALE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
local n = 0
for _, id in ipairs(ids) do n = n + redis.call('DEL', ARGV[2] .. id) end
return n
"""


class PartitionRunner:
    """One arq ``Worker`` (max_jobs=1) for one partition, woken by its doorbell instead of polling."""

    def __init__(self, partition: int, redis: ArqRedis, deps: Deps, owner: str) -> None:
        self.partition = partition
        self.redis = redis
        self.deps = deps
        self.owner = owner
        self.wake = asyncio.Event()
        self.stopping = False
        self.worker = self._consumer()
        self.task: asyncio.Task[None] | None = None

    def _consumer(self) -> Worker:
        """A fresh arq ``Worker`` for this partition's queue, one job at a time."""
        return Worker(
            functions=[func(apply_batch, name="apply_batch", max_tries=ARQ_MAX_TRIES)],
            queue_name=queue_name(self.partition),
            redis_pool=self.redis,
            handle_signals=False,
            max_jobs=1,
            job_timeout=self.deps.settings.job_timeout_seconds,
            keep_result=0,
            max_tries=ARQ_MAX_TRIES,
            health_check_interval=3600,
            ctx={"deps": self.deps, "redis": self.redis},
            job_serializer=_dumps,
            job_deserializer=_loads,
            log_results=False,
        )

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
        keys = (lease_key(self.partition), queue_name(self.partition))
        return int(await _script(self.redis, _CLEAR_STALE, keys, self.owner, in_progress_key_prefix))

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
        while not self.stopping:
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
                    await self.worker._poll_iteration()
                    if self.worker.tasks:
                        continue
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

    async def stop(self, grace: float = 30.0) -> None:
        """Stop after the job in flight (waiting at most ``grace`` seconds for it)."""
        self.stopping = True
        self.wake.set()
        if self.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.task), grace)
            except TimeoutError:
                self.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self.task


_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class WorkerProcess:
    """A ``wikiq worker``: holds partition leases, runs their consumers, wakes them by doorbell."""

    def __init__(self, settings: Settings, redis: ArqRedis, bell_redis: ArqRedis) -> None:
        self.settings = settings
        self.redis = redis
        self.bell_redis = bell_redis
        self.id = f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"
        jobs = JobStore(redis, settings.job_retention_seconds)
        self.deps = Deps(settings, GitStore(settings.data_dir), jobs)
        self.runners: dict[int, PartitionRunner] = {}
        self.lease_ms = int(settings.lease_seconds * 1000)
        self.stopping = asyncio.Event()

    def _webhook_worker(self, ctx: dict[str, Any]) -> Worker:
        settings = self.settings
        return Worker(
            functions=[func(deliver_webhook, name="deliver_webhook", max_tries=ARQ_MAX_TRIES)],
            queue_name=WEBHOOK_QUEUE,
            redis_pool=self.redis,
            handle_signals=False,
            max_jobs=16,
            job_timeout=settings.webhook_timeout + 10,
            keep_result=0,
            poll_delay=0.5,
            health_check_interval=3600,
            ctx=ctx,
            job_serializer=_dumps,
            job_deserializer=_loads,
            log_results=False,
        )

    async def _webhook_loop(self, ctx: dict[str, Any], workers: list[Worker]) -> None:
        """Run arq's own loop on the webhook queue; after an error, go on with a fresh ``Worker``."""
        while True:
            worker = self._webhook_worker(ctx)  # fresh: a failed start can leave arq's job slot taken
            workers.append(worker)
            try:
                await worker.main()
            except RedisError as exc:
                log.warning("webhooks: Redis unavailable (%s)", exc)
                await asyncio.sleep(1)  # back off while Redis is away

    async def run(self) -> None:
        """Serve until ``stop()``; then finish jobs in flight and hand back every lease."""
        settings = self.settings
        http = webhook_client(settings.webhook_allow_private, settings.webhook_timeout)
        ctx = {
            "deps": self.deps,
            "redis": self.redis,
            "http": http,
            "signer": signer_for(settings.webhook_secret),
            "rng": random.Random(),
        }
        webhook_workers: list[Worker] = []
        tasks = [
            asyncio.create_task(self._lease_loop()),
            asyncio.create_task(self._bell_loop()),
            asyncio.create_task(self._webhook_loop(ctx, webhook_workers)),
        ]
        try:
            await self.stopping.wait()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await asyncio.gather(*(self._release(p) for p in list(self.runners)), return_exceptions=True)
            with contextlib.suppress(RedisError):
                await self.redis.zrem(WORKERS, self.id)
            deliveries = [task for worker in webhook_workers for task in worker.tasks.values()]
            if deliveries:  # let deliveries in flight finish (bounded)
                await asyncio.wait(deliveries, timeout=settings.webhook_timeout)
            await http.aclose()
            self.deps.store.close()

    def stop(self) -> None:
        """Ask the process to stop gracefully."""
        self.stopping.set()

    async def _lease_loop(self) -> None:
        period = self.settings.lease_seconds / 3
        while True:
            try:
                await self._tend_leases()
            except RedisError as exc:
                log.warning("leases: Redis unavailable (%s)", exc)
            await asyncio.sleep(period)  # the lease renewal period

    async def _tend_leases(self) -> None:
        now = int(time.time() * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(WORKERS, {self.id: now})
            pipe.zremrangebyscore(WORKERS, "-inf", now - self.lease_ms)
            pipe.zcard(WORKERS)
            *_, live = await pipe.execute()
        for partition in list(self.runners):
            kept = await _script(self.redis, _RENEW, (lease_key(partition),), self.id, str(self.lease_ms))
            if not kept:
                log.warning("partition %s: lease lost; stopping its consumer", partition)
                runner = self.runners.pop(partition)
                await runner.stop(grace=0)
        target = math.ceil(self.settings.partitions / max(int(live), 1))
        if len(self.runners) < target:
            free = [p for p in range(self.settings.partitions) if p not in self.runners]
            random.shuffle(free)
            for partition in free:
                if len(self.runners) >= target:
                    break
                if await self.redis.set(lease_key(partition), self.id, nx=True, px=self.lease_ms):
                    runner = PartitionRunner(partition, self.redis, self.deps, self.id)
                    self.runners[partition] = runner
                    runner.start()
                    log.info("partition %s: lease taken by %s", partition, self.id)
        elif len(self.runners) > target:
            for partition in [p for p, r in self.runners.items() if not r.busy][: len(self.runners) - target]:
                await self._release(partition)

    async def _release(self, partition: int) -> None:
        runner = self.runners.pop(partition, None)
        if runner is not None:
            await runner.stop()
        with contextlib.suppress(RedisError):
            await _script(self.redis, _RELEASE, (lease_key(partition),), self.id)
            await ring(self.redis, partition)  # the next owner should look at once

    async def _bell_loop(self) -> None:
        while True:
            if not self.runners:
                await asyncio.sleep(0.2)  # no partition yet: the lease loop is acquiring
                continue
            keys = [bell_key(p) for p in self.runners]
            try:
                popped = await cast(Awaitable[Any], self.bell_redis.blpop(keys, timeout=1))
            except RedisError as exc:
                log.warning("doorbell: Redis unavailable (%s)", exc)
                await asyncio.sleep(0.5)  # back off while Redis is away
                continue
            if popped is None:
                continue
            key = popped[0].decode() if isinstance(popped[0], bytes) else popped[0]
            runner = self.runners.get(int(key.rsplit(":", 1)[1]))
            if runner is not None:
                runner.wake.set()


async def serve(settings: Settings) -> None:
    """Run one worker process until SIGINT/SIGTERM."""
    import signal

    redis = await connect(settings.redis_url)
    bell_redis = await connect(settings.redis_url)
    process = WorkerProcess(settings, redis, bell_redis)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, process.stop)
    log.info("worker %s serving %s partitions", process.id, settings.partitions)
    RECORDER.start(redis)
    try:
        await process.run()
    finally:
        await RECORDER.stop()
        await redis.aclose()
        await bell_redis.aclose()
