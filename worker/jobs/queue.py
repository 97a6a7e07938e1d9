"""The queue, from the enqueueing side: partitions, arq queues, doorbells, and what may be put on them.

Each wiki maps to one partition (``worker.jobs.records.partition_of``); each partition is one arq queue
consumed by exactly one worker process at a time (``worker.jobs.consumer``). Submissions ring the
partition's doorbell list, so its consumer wakes at once instead of polling. Webhook attempts go on one
shared arq queue. Only JSON crosses Redis (never pickle).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, cast

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.constants import job_key_prefix

from worker import keys

if TYPE_CHECKING:
    from worker.jobs.records import JobRecord

WORKERS = keys.WORKERS
# arq never gives up on a batch or a delivery by itself (that would drop it with its record unfinished):
# ``worker.jobs.run`` counts runs and records the failure after ``max_job_tries``; a delivery fails by
# schedule.
ARQ_MAX_TRIES = 1_000_000


def queue_name(partition: int) -> str:
    """The arq queue of ``partition``."""
    return keys.queue(partition)


def bell_key(partition: int) -> str:
    """The doorbell list rung when work arrives on ``partition``."""
    return keys.bell(partition)


def lease_key(partition: int) -> str:
    """The lease naming the worker that owns ``partition``."""
    return keys.lease(partition)


def dumps(value: dict[str, Any]) -> bytes:
    """A job payload as JSON (``default=str``: arq also stores results, which may hold an exception)."""
    return json.dumps(value, separators=(",", ":"), default=str).encode()


def loads(raw: bytes) -> dict[str, Any]:
    """A job payload from JSON; ``ValueError`` for anything but an object."""
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("arq job payload is not a JSON object")
    return value


async def connect(url: str) -> ArqRedis:
    """An arq Redis pool that serialises jobs as JSON (never pickle)."""
    settings = RedisSettings.from_dsn(url)
    settings.conn_retries = 0
    return await create_pool(settings, job_serializer=dumps, job_deserializer=loads)


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
        pipe.delete(job_key_prefix + job_id)
        await pipe.execute()


async def run_script(redis: ArqRedis, script: str, names: tuple[str, ...], *args: str) -> Any:
    """Run the Lua ``script`` on the keys ``names`` with ``args``."""
    return await cast(Awaitable[Any], redis.eval(script, len(names), *names, *args))


async def enqueue_attempt(redis: Any, job_id: str, round_: int, attempt: int, delay: float) -> None:
    """Queue one delivery attempt; the arq job id makes a second enqueue of the same attempt a no-op."""
    await redis.enqueue_job(
        "deliver_webhook",
        job_id,
        round_,
        attempt,
        _job_id=f"wh:{job_id}:{round_}:{attempt}",
        _queue_name=keys.WEBHOOK_QUEUE,
        _defer_by=delay,
    )


async def schedule_first(redis: Any, record: JobRecord) -> None:
    """Queue the first attempt of a finished job's webhook (idempotent)."""
    if record.webhook is not None:
        await enqueue_attempt(redis, record.job_id, record.webhook.round, 0, 0.0)
