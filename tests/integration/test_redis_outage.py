"""Riding out a Redis outage: long-poll wake-ups and stale in-progress markers, against a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from arq.constants import in_progress_key_prefix
from redis.asyncio import Redis

from worker import keys
from worker.bootstrap import build
from worker.jobs.connection import connect
from worker.jobs.consumer import PartitionRunner
from worker.jobs.queue import enqueue_batch
from worker.jobs.store import JobStore
from worker.jobs.waiters import Waiters
from worker.redis_server import RedisServer
from worker.settings import Settings


async def test_waiters_wake_everyone_again_once_resubscribed(tmp_path: Path) -> None:
    """A waiter registered while the subscription is down is woken when it is back, to re-read its record.

    Pub/sub keeps nothing for an absent subscriber, so a job finishing in the gap is only in its record.
    """
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    redis = Redis.from_url(server.url)
    waiters = Waiters()
    waiters.start(redis)
    try:
        await asyncio.wait_for(waiters.subscribed.wait(), 10)
        with waiters.register("before") as before:
            server.stop()
            await asyncio.wait_for(before.wait(), 10)  # the outage itself wakes everyone
        assert not waiters.subscribed.is_set()
        with waiters.register("in-the-gap") as in_the_gap:
            assert not in_the_gap.is_set()
            server.start()
            await asyncio.wait_for(in_the_gap.wait(), 15)
            assert waiters.subscribed.is_set()
        with waiters.register("after") as after:  # and live messages flow again
            await redis.publish("wikiq:events", "after")
            await asyncio.wait_for(after.wait(), 10)
    finally:
        await waiters.stop()
        await redis.aclose()
        server.stop()


async def test_stale_in_progress_markers_are_cleared_only_under_our_lease(
    redis_server: RedisServer, data_dir: Path
) -> None:
    """The markers of this partition's queued jobs go while we hold its lease; never once it is taken."""
    settings = Settings(redis_url=redis_server.url, data_dir=data_dir)
    redis = await connect(redis_server.url)
    resources = build(settings, redis, jobs=JobStore(redis, 60))
    partition = 917
    runner = PartitionRunner(partition, resources, owner="worker-a")
    markers = [in_progress_key_prefix + job for job in ("j1", "j2")]
    elsewhere = in_progress_key_prefix + "j-other-queue"
    try:
        await redis.zadd(keys.queue(partition), {"j1": 1, "j2": 2})
        for key in [*markers, elsewhere]:
            await redis.set(key, b"1", px=600_000)

        await redis.set(keys.lease(partition), "worker-b")
        assert await runner._clear_stale_runs() == -1
        assert await redis.exists(*markers) == 2

        await redis.set(keys.lease(partition), "worker-a")
        assert await runner._clear_stale_runs() == 2
        assert await redis.exists(*markers) == 0
        assert await redis.exists(elsewhere) == 1  # another queue's job is not ours to touch
    finally:
        await redis.delete(keys.queue(partition), keys.lease(partition), *markers, elsewhere)
        resources.store.close()
        await redis.aclose()


async def _left_queue(redis: Redis, partition: int, job_id: str, timeout: float) -> bool:
    """Whether ``job_id`` left ``partition``'s queue (arq ran it) within ``timeout`` seconds: re-checked on
    each change of the queue, announced by Redis' keyspace notifications."""
    key = keys.queue(partition)
    await redis.config_set("notify-keyspace-events", "Kz")
    pubsub = redis.pubsub()
    await pubsub.subscribe(f"__keyspace@0__:{key}")  # before the first look: no change is missed
    try:
        async with asyncio.timeout(timeout):
            while await redis.zscore(key, job_id) is not None:
                await pubsub.get_message(timeout=timeout)  # returns at the queue's next change
    except TimeoutError:
        return False
    finally:
        await pubsub.aclose()
    return True


async def test_a_marker_set_after_we_took_the_lease_does_not_hold_its_job(
    redis_server: RedisServer, data_dir: Path
) -> None:
    """An in-progress marker that appears once we hold the lease (a process whose lease lapsed polled once
    more, then died): a poll that starts nothing while a job is due clears it, and the job runs, instead
    of waiting out arq's in-progress timeout (10 minutes here)."""
    settings = Settings(redis_url=redis_server.url, data_dir=data_dir)
    redis = await connect(redis_server.url)
    resources = build(settings, redis, jobs=JobStore(redis, 60))
    partition = 918
    runner = PartitionRunner(partition, resources, owner="worker-a")
    stale = in_progress_key_prefix + "j-stale"
    try:
        await redis.set(keys.lease(partition), "worker-a")
        runner.start()
        assert await enqueue_batch(redis, "j-first", partition, expires_s=60)
        runner.wake.set()
        assert await _left_queue(redis, partition, "j-first", 10)  # the runner took the lease's markers

        await redis.set(stale, b"1", px=600_000)
        assert await enqueue_batch(redis, "j-stale", partition, expires_s=60)
        runner.wake.set()
        assert await _left_queue(redis, partition, "j-stale", 10)
        assert not await redis.exists(stale)
    finally:
        await runner.stop(grace=5)
        await redis.delete(keys.queue(partition), keys.lease(partition), stale)
        resources.store.close()
        await redis.aclose()
