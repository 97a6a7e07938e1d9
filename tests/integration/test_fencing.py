"""Lease epochs fence every write of a run to its job records, against a real Redis-compatible server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from arq import Retry
from arq.connections import ArqRedis

from worker import keys
from worker.bootstrap import build
from worker.errors import Fenced
from worker.git import GitStore
from worker.jobs.clock import now_ms
from worker.jobs.connection import connect
from worker.jobs.context import JobContext
from worker.jobs.leases import GRANT, Grant, Lease
from worker.jobs.lifecycle import finish
from worker.jobs.record import BatchSummary, JobRecord
from worker.jobs.run import apply_batch
from worker.jobs.store import Finishing, JobStore
from worker.redis_server import RedisServer
from worker.schema.answers import Author, JobResult
from worker.schema.edits import Batch
from worker.settings import Settings

PARTITION = 731  # a partition no other test uses


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[ArqRedis]:
    client = await connect(redis_server.url)
    await client.delete(keys.lease(PARTITION), keys.lease_epoch(PARTITION), keys.queue(PARTITION))
    yield client
    await client.aclose()


async def _grant(redis: ArqRedis, owner: str) -> int:
    grant = Grant(keys.lease(PARTITION), keys.lease_epoch(PARTITION), owner, 60_000)
    return int(await GRANT.run(redis, grant))


async def _queued(jobs: JobStore, job_id: str, wiki: str, base: str | None) -> JobRecord:
    batch = Batch.model_validate(
        {"message": "m", "edits": [{"op": "create", "path": f"wiki/{job_id}.md", "content": "a\n"}]}
    )
    record = JobRecord(
        job_id=job_id,
        wiki=wiki,
        submitted_ms=now_ms(),
        batch=batch,
        summary=BatchSummary.of(batch),
        author=Author(name="Tester", email="tester@example.com"),
        base=base,
        partition=PARTITION,
    )
    await jobs.create(record)
    return record


async def test_each_grant_of_a_free_lease_raises_the_epoch(redis: ArqRedis) -> None:
    """A grant sets the lease and returns a new, larger epoch; a lease that is held is not granted."""
    first = await _grant(redis, "worker-a")
    assert first >= 1
    assert await _grant(redis, "worker-b") == 0  # held by a
    assert await redis.get(keys.lease(PARTITION)) == b"worker-a"
    await redis.delete(keys.lease(PARTITION))  # a's lease lapsed
    assert await _grant(redis, "worker-b") == first + 1
    assert int(await redis.get(keys.lease_epoch(PARTITION))) == first + 1


async def test_a_stale_epoch_records_nothing_and_takes_nothing_off_the_queue(
    redis: ArqRedis, data_dir: Path
) -> None:
    """Once a newer lease was granted, the old run's start, claim, finish and finish_many each raise
    ``Fenced`` and leave the record's bytes and the queue entry exactly as they were; the current run's
    go through."""
    jobs = JobStore(redis, 600)
    old = Lease(PARTITION, await _grant(redis, "worker-a"))
    record = await _queued(jobs, "fence-1", "fence-wiki", None)
    await redis.zadd(keys.queue(PARTITION), {record.job_id: now_ms()})
    running, stored = await jobs.update_stored(record.job_id, lambda r: _running(r), old)
    assert running is not None and stored is not None and running.status == "running"
    await redis.delete(keys.lease(PARTITION))
    new = Lease(PARTITION, await _grant(redis, "worker-b"))
    assert new.epoch > old.epoch

    done = finish(JobResult(commit="0" * 40, applied=[]), None)(running.model_copy())
    assert done is not None
    item = Finishing(running, stored, done, keys.queue(PARTITION), dequeue=True)
    with pytest.raises(Fenced):
        await jobs.finish_many([item], old)
    with pytest.raises(Fenced):
        await jobs.update(record.job_id, finish(JobResult(commit="0" * 40, applied=[]), None), old)
    with pytest.raises(Fenced):
        await jobs.swap_many([(record.job_id, stored, stored.replace(b"running", b"queued"))], old, PARTITION)
    assert await redis.get(keys.job(record.job_id)) == stored  # not a byte changed
    assert await redis.zscore(keys.queue(PARTITION), record.job_id) is not None  # still queued

    assert await jobs.finish_many([item], new) == ([True], [])
    after = await jobs.get(record.job_id)
    assert after is not None and after.status == "succeeded"
    assert await redis.zscore(keys.queue(PARTITION), record.job_id) is None


def _running(record: JobRecord) -> JobRecord:
    record.status, record.runs, record.started_ms = "running", record.runs + 1, now_ms()
    return record


async def test_a_fenced_run_of_apply_batch_retries_having_changed_nothing(
    redis: ArqRedis, data_dir: Path
) -> None:
    """``apply_batch`` under a lease older than the partition's: ``Retry`` (arq keeps the entry queued), the
    record untouched, nothing committed, and the lease marked lost."""
    store = GitStore(data_dir)
    base = store.create("fence-apply")
    jobs = JobStore(redis, 600)
    old = Lease(PARTITION, await _grant(redis, "worker-a"))
    await redis.delete(keys.lease(PARTITION))
    await _grant(redis, "worker-b")
    record = await _queued(jobs, "fence-2", "fence-apply", base)
    before = await redis.get(keys.job(record.job_id))
    settings = Settings(redis_url="redis://unused", data_dir=data_dir)
    ctx: JobContext = {
        "resources": build(settings, redis, store=store, jobs=jobs),
        "redis": redis,
        "lease": old,
        "job_try": 1,
    }
    with pytest.raises(Retry):
        await apply_batch(ctx, record.job_id)
    assert await redis.get(keys.job(record.job_id)) == before
    assert store.open("fence-apply").head() == base
    assert old.lost.is_set()
    store.close()


async def test_a_run_whose_lease_is_known_lost_records_nothing_even_at_the_current_epoch(
    redis: ArqRedis, data_dir: Path
) -> None:
    """A lease marked lost (the worker saw its renewal fail) stops the run before its first write, although
    no newer epoch exists yet."""
    store = GitStore(data_dir)
    base = store.create("fence-lost")
    jobs = JobStore(redis, 600)
    lease = Lease(PARTITION, await _grant(redis, "worker-a"))
    lease.lost.set()
    record = await _queued(jobs, "fence-3", "fence-lost", base)
    before = await redis.get(keys.job(record.job_id))
    settings = Settings(redis_url="redis://unused", data_dir=data_dir)
    ctx: JobContext = {
        "resources": build(settings, redis, store=store, jobs=jobs),
        "redis": redis,
        "lease": lease,
        "job_try": 1,
    }
    with pytest.raises(Retry):
        await apply_batch(ctx, record.job_id)
    assert await redis.get(keys.job(record.job_id)) == before
    assert store.open("fence-lost").head() == base
    store.close()
