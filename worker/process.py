"""A ``wikiq worker`` process: partition leases, their consumers, the doorbell loop and webhook delivery
(a taker of the outbox, ``worker.webhooks.taker``, and arq's loop of retries).

Worker processes share partitions fairly: each registers a heartbeat, aims for ``ceil(P / live)``
partitions, takes free leases up to that, and hands back extras when idle. A killed process's leases
expire after ``lease_seconds``; the next owner clears the dead run's in-progress marker so the interrupted
job runs again first (its own commit is then found by trailer, see ``worker.jobs.run``). A partition is
handed back in the background with its lease still renewed until its consumer's job in flight ended, and a
stopping process keeps renewing until its last one ended: a lease never lapses under a running job of a live
process, and one slow job never holds up the renewal of the others. One blocking ``BLPOP`` over the
doorbells of every held partition wakes the right consumer.

A stopping process (SIGTERM) starts no new job: it leaves the live set at once (the others' share grows),
hands back every partition as soon as its job in flight (if any) ended, deleting the lease, and then rings
each other process's own doorbell (``keys.worker_bell``), whose lease loop looks at once instead of at its
next period: its partitions move within moments of being handed back, not after ``lease_seconds``. A
process that joins rings the others the same way, so that they hand it its share at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import signal
import socket
import time
from collections.abc import Awaitable
from typing import Any, cast

from arq.connections import ArqRedis
from arq.worker import Worker, func
from redis.exceptions import RedisError

from worker import keys
from worker.bootstrap import bootstrap, doorbells
from worker.jobs.consumer import PartitionRunner
from worker.jobs.context import JobContext
from worker.jobs.leases import GRANT, RELEASE, RENEW, Grant, Lease, Release, Renew
from worker.jobs.payloads import dumps, loads
from worker.jobs.queue import ARQ_MAX_TRIES, ring
from worker.jobs.resources import Resources
from worker.settings import Settings
from worker.tasks import cancel_and_wait
from worker.webhooks.deliver import deliver_webhook, signer_for
from worker.webhooks.http import WebhookSender
from worker.webhooks.lanes import RETRIES_EACH, RETRIES_IN_FLIGHT, Lanes
from worker.webhooks.taker import Taker, taker_name

log = logging.getLogger("wikiq.worker")
# what a process's own doorbell is rung with: look at the leases now; the partitions held changed
LEASES, BELLS = b"leases", b"bells"


class WorkerProcess:
    """A ``wikiq worker``: holds partition leases, runs their consumers, wakes them by doorbell."""

    def __init__(self, resources: Resources, bell_redis: ArqRedis) -> None:
        self.settings = resources.settings
        self.redis = resources.redis
        self.bell_redis = bell_redis
        self.id = f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"
        self.resources = resources
        self.runners: dict[int, PartitionRunner] = {}
        self.releasing: dict[int, asyncio.Task[None]] = {}  # partitions being handed back (leases kept)
        self.handing: dict[int, PartitionRunner] = {}  # their runners, until handed back
        self.lease_ms = int(self.settings.lease_seconds * 1000)
        self.stopping = asyncio.Event()
        self.bell = keys.worker_bell(self.id)  # this process's own doorbell (see the module)
        self.tend_now = asyncio.Event()  # set by the own doorbell: look at the leases now
        self.joined = False  # the others were told this process is here

    def _webhook_worker(self, ctx: JobContext) -> Worker:
        settings = self.settings
        return Worker(
            functions=[func(cast(Any, deliver_webhook), name="deliver_webhook", max_tries=ARQ_MAX_TRIES)],
            queue_name=keys.WEBHOOK_QUEUE,
            redis_pool=self.redis,
            handle_signals=False,
            max_jobs=RETRIES_IN_FLIGHT,
            job_timeout=settings.webhook_timeout + 10,
            keep_result=0,
            poll_delay=0.5,
            health_check_interval=3600,
            ctx=dict(ctx),
            job_serializer=dumps,
            job_deserializer=loads,
            log_results=False,
        )

    async def _webhook_loop(self, ctx: JobContext, workers: list[Worker]) -> None:
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
        http = WebhookSender(settings.webhook_allow_private, settings.webhook_timeout)
        signer = signer_for(settings.webhook_secret)
        rng = random.Random()
        ctx: JobContext = {
            "resources": self.resources,
            "redis": self.redis,
            "http": http,
            "signer": signer,
            "rng": rng,
            "lanes": Lanes(RETRIES_IN_FLIGHT, RETRIES_EACH),
        }
        webhook_workers: list[Worker] = []
        leases = asyncio.create_task(self._lease_loop())
        others = [
            asyncio.create_task(self._bell_loop()),
            asyncio.create_task(self._webhook_loop(ctx, webhook_workers)),
        ]
        taker = None
        if signer is not None:  # the first attempts of the jobs this process finishes, sent as they finish
            taker = Taker(
                settings, self.resources.jobs, self.bell_redis, http, signer, rng, taker_name("worker")
            )
            self.resources.first_sends = taker
            if not settings.webhook_senders:  # and the rest of the outbox, shared with every taker
                others.append(asyncio.create_task(taker.serve(self.stopping)))
        try:
            await self.stopping.wait()
        finally:
            await cancel_and_wait(*others)
            with contextlib.suppress(RedisError):  # the others' share grows at once: they take what is freed
                await self.redis.zrem(keys.WORKERS, self.id)
            # the lease loop goes on renewing (taking nothing new) until every partition is handed back:
            # a job in flight keeps its partition to the end, instead of a lapsed lease letting another
            # process run it again meanwhile
            while self.runners or self.releasing:  # (again for a lease granted as the stop began)
                for partition in list(self.runners):
                    self._release_later(partition)
                await asyncio.gather(*self.releasing.values(), return_exceptions=True)
            await cancel_and_wait(leases)
            deliveries = [task for worker in webhook_workers for task in worker.tasks.values()]
            deliveries += [] if taker is None else list(taker.tasks)
            if deliveries:  # let deliveries in flight finish (bounded)
                await asyncio.wait(deliveries, timeout=settings.webhook_timeout)
            await http.aclose()

    def stop(self) -> None:
        """Ask the process to stop gracefully."""
        self.stopping.set()

    async def _lease_loop(self) -> None:
        period = self.settings.lease_seconds / 3
        while True:
            self.tend_now.clear()
            try:
                await self._tend_leases()
            except RedisError as exc:
                log.warning("leases: Redis unavailable (%s)", exc)
            with contextlib.suppress(TimeoutError):  # the renewal period, cut short by the own doorbell
                await asyncio.wait_for(self.tend_now.wait(), period)

    async def _heartbeat(self) -> int:
        """Count this process among the live ones (not once stopping); the number of live processes."""
        now = int(time.time() * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            if self.stopping.is_set():
                pipe.zrem(keys.WORKERS, self.id)
            else:
                pipe.zadd(keys.WORKERS, {self.id: now})
            pipe.zremrangebyscore(keys.WORKERS, "-inf", now - self.lease_ms)
            pipe.zcard(keys.WORKERS)
            *_, live = await pipe.execute()
        return int(live)

    async def _ring_others(self) -> None:
        """Ring the own doorbell of every other live process: its lease loop looks at the leases now."""
        members = await self.redis.zrange(keys.WORKERS, 0, -1)
        others = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        async with self.redis.pipeline(transaction=False) as pipe:
            for other in others:
                if other != self.id:
                    bell = keys.worker_bell(other)
                    pipe.lpush(bell, LEASES)
                    pipe.ltrim(bell, 0, 7)
                    pipe.pexpire(bell, self.lease_ms)  # a process that pops none within a lease is gone
            await pipe.execute()

    async def _rebell(self) -> None:
        """Wake this process's own doorbell pop: the partitions it holds changed, so its keys do."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lpush(self.bell, BELLS)
            pipe.ltrim(self.bell, 0, 7)
            pipe.pexpire(self.bell, self.lease_ms)
            await pipe.execute()

    async def _tend_leases(self) -> None:
        live = await self._heartbeat()
        for partition in [*self.runners, *self.releasing]:
            kept = await RENEW.run(self.redis, Renew(keys.lease(partition), self.id, self.lease_ms))
            if kept:
                continue
            runner = self.runners.pop(partition, None)
            if runner is not None:
                log.warning("partition %s: lease lost; stopping its consumer and its job", partition)
                runner.lease.lost.set()  # its job in flight stops at the next safe point, recording nothing
                await runner.stop(grace=0)
            elif (handing := self.handing.get(partition)) is not None:
                handing.lease.lost.set()  # being handed back: its last job stops as well
        if self.stopping.is_set():
            return  # only renewing now, while the partitions are handed back
        target = math.ceil(self.settings.partitions / max(live, 1))
        if len(self.runners) < target:
            taken = False
            free = [
                p
                for p in range(self.settings.partitions)
                if p not in self.runners and p not in self.releasing
            ]
            random.shuffle(free)
            for partition in free:
                if len(self.runners) >= target or self.stopping.is_set():
                    break
                grant = Grant(keys.lease(partition), keys.lease_epoch(partition), self.id, self.lease_ms)
                epoch = int(await GRANT.run(self.redis, grant))
                if epoch:
                    lease = Lease(partition, epoch)
                    runner = PartitionRunner(partition, self.resources, self.id, lease)
                    self.runners[partition] = runner
                    runner.start()
                    taken = True
                    log.info("partition %s: lease taken by %s at epoch %s", partition, self.id, epoch)
            if taken:
                await self._rebell()
        elif len(self.runners) > target:
            for partition in [p for p, r in self.runners.items() if not r.busy][: len(self.runners) - target]:
                self._release_later(partition)
        if not self.joined:  # the others may hand this process its share now
            await self._ring_others()
            self.joined = True

    def _release_later(self, partition: int) -> None:
        """Hand ``partition`` back in the background: the lease loop goes on (renewing this lease too)
        while its consumer finishes the job it may have started meanwhile."""
        runner = self.runners.pop(partition)
        task = asyncio.create_task(self._release(partition, runner))
        self.releasing[partition] = task
        self.handing[partition] = runner

        def handed_back(_: object) -> None:
            self.releasing.pop(partition, None)
            self.handing.pop(partition, None)

        task.add_done_callback(handed_back)

    async def _release(self, partition: int, runner: PartitionRunner) -> None:
        """Stop ``runner`` after its job in flight, then delete the lease if still ours and ring the
        partition's doorbell, so that the next owner looks at once, and the other processes' own doorbells,
        so that one of them takes it at once."""
        if not self.stopping.is_set():  # (a stopping process's doorbell pop has ended already)
            with contextlib.suppress(RedisError):
                await self._rebell()  # the pop leaves this partition's doorbell to its next owner
        await runner.stop()
        with contextlib.suppress(RedisError):
            await RELEASE.run(self.redis, Release(keys.lease(partition), self.id))
            await ring(self.redis, partition)
            await self._ring_others()

    async def _bell_loop(self) -> None:
        while True:
            bells = [self.bell, *(keys.bell(p) for p in self.runners)]
            try:
                popped = await cast(Awaitable[Any], self.bell_redis.blpop(bells, timeout=1))
            except RedisError as exc:
                log.warning("doorbell: Redis unavailable (%s)", exc)
                await asyncio.sleep(0.5)  # back off while Redis is away
                continue
            if popped is None:
                continue
            key = popped[0].decode() if isinstance(popped[0], bytes) else popped[0]
            if key == self.bell:
                if popped[1] in (LEASES, LEASES.decode()):  # else BELLS: only the keys changed
                    self.tend_now.set()
                continue  # and pop again, over the partitions held now
            runner = self.runners.get(int(key.rsplit(":", 1)[1]))
            if runner is not None:
                runner.wake.set()


async def serve(settings: Settings) -> None:
    """Run one worker process until SIGINT/SIGTERM."""
    async with bootstrap(settings) as resources, doorbells(settings) as bell_redis:
        process = WorkerProcess(resources, bell_redis)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, process.stop)
        log.info("worker %s serving %s partitions", process.id, settings.partitions)
        await process.run()
