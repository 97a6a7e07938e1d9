"""A finish takes the outbox entries of the webhooks it owes for its own process's taker, in the same
script, so no other taker sees them (real Redis-compatible server)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from arq.connections import ArqRedis

from worker import keys
from worker.jobs import lifecycle
from worker.jobs.clock import now_ms
from worker.jobs.connection import connect
from worker.jobs.handover import OutboxEntry
from worker.jobs.record import BatchSummary, JobRecord, WebhookDelivery
from worker.jobs.store import Finishing, JobStore
from worker.redis_server import RedisServer
from worker.schema.answers import Author, JobResult
from worker.schema.edits import Batch

PARTITION = 734  # a partition no other test uses


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[ArqRedis]:
    client = await connect(redis_server.url)
    await client.delete(keys.outbox(PARTITION), keys.queue(PARTITION))
    yield client
    await client.delete(keys.outbox(PARTITION), keys.queue(PARTITION))
    await client.aclose()


async def _running(jobs: JobStore, job_id: str, webhook: bool) -> tuple[JobRecord, bytes]:
    """A job of the partition, created and started; its record and the exact bytes stored."""
    batch = Batch.model_validate(
        {"message": "m", "edits": [{"op": "create", "path": f"wiki/{job_id}.md", "content": "a\n"}]}
    )
    record = JobRecord(
        job_id=job_id,
        wiki="takes",
        submitted_ms=now_ms(),
        batch=batch,
        summary=BatchSummary.of(batch),
        author=Author(name="Tester", email="tester@example.com"),
        partition=PARTITION,
        webhook=WebhookDelivery(url="https://example.com/hook") if webhook else None,
    )
    await jobs.create(record)
    running, stored = await jobs.update_stored(job_id, lifecycle.start)
    assert running is not None and stored is not None
    return running, stored


def _finishing(record: JobRecord, stored: bytes) -> Finishing:
    done = lifecycle.finish(JobResult(commit="0" * 40, applied=[]), None)(record.model_copy())
    assert done is not None
    return Finishing(record, stored, done, keys.queue(PARTITION), dequeue=False)


async def test_a_finish_takes_its_webhooks_entries_for_its_taker_and_no_one_else(redis: ArqRedis) -> None:
    """Three jobs finish together, two with a webhook: the finish returns those two entries (job, round
    0), pending under its taker's name, and another taker reading the outbox gets nothing."""
    jobs = JobStore(redis, 600)
    started = [await _running(jobs, f"takes-{n}", webhook=n != 1) for n in range(3)]
    done, taken = await jobs.finish_many([_finishing(*job) for job in started], taker="worker:a")
    assert done == [True, True, True]
    assert [(entry.job_id, entry.round) for entry in taken] == [("takes-0", 0), ("takes-2", 0)]
    assert all(isinstance(entry, OutboxEntry) and entry.entry_id for entry in taken)
    assert {entry.stream for entry in taken} == {keys.outbox(PARTITION)}
    pending = await redis.xpending_range(keys.outbox(PARTITION), keys.OUTBOX_GROUP, "-", "+", 10)
    assert [(p["message_id"], p["consumer"]) for p in pending] == [
        (entry.entry_id, b"worker:a") for entry in taken
    ]
    other = await redis.xreadgroup(keys.OUTBOX_GROUP, "webhooks:b", {keys.outbox(PARTITION): ">"}, count=10)
    assert not other or not other[0][1]


async def test_without_a_taker_the_entries_wait_for_any(redis: ArqRedis) -> None:
    """A finish with no taker of its own (a process without a webhook secret) takes nothing: the entry
    waits in the outbox for whichever taker reads it."""
    jobs = JobStore(redis, 600)
    record, stored = await _running(jobs, "takes-none", webhook=True)
    await redis.xgroup_create(keys.outbox(PARTITION), keys.OUTBOX_GROUP, id="0", mkstream=True)
    done, taken = await jobs.finish_many([_finishing(record, stored)])
    assert (done, taken) == ([True], [])
    other = await redis.xreadgroup(keys.OUTBOX_GROUP, "webhooks:b", {keys.outbox(PARTITION): ">"}, count=10)
    [(_, entries)] = other
    assert [fields[b"job"] for _, fields in entries] == [b"takes-none"]
