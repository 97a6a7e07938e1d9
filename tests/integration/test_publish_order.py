"""A group keeps the queue's order: a job of the wiki left ``running`` by another run stops the claim of
followers, on a remote-backed wiki as on a local one, and a job ahead of the head is never taken along
(real Redis)."""

from __future__ import annotations

from pathlib import Path

from worker import keys
from worker.jobs.clock import now_ms
from worker.jobs.connection import connect
from worker.jobs.pipeline import claim
from worker.jobs.record import BatchSummary, JobRecord
from worker.jobs.store import JobStore
from worker.redis_server import RedisServer
from worker.schema.answers import Author
from worker.schema.edits import Batch

PARTITION = 733  # a partition no other test uses


def _record(job_id: str, status: str, submitted: int) -> JobRecord:
    batch = Batch.model_validate(
        {"message": job_id, "edits": [{"op": "create", "path": f"wiki/{job_id}.md", "content": "a\n"}]}
    )
    return JobRecord(
        job_id=job_id,
        wiki="ordered",
        status=status,  # type: ignore[arg-type]
        runs=1 if status == "running" else 0,
        submitted_ms=submitted,
        batch=batch,
        summary=BatchSummary.of(batch),
        author=Author(name="Tester", email="tester@example.com"),
        partition=PARTITION,
    )


async def test_a_follower_left_running_stops_the_claim(redis_server: RedisServer) -> None:
    """Queue: the head, a job another run left ``running``, then a queued one. Claiming followers for the
    head takes none: the queued job must not land before the one ahead of it."""
    redis = await connect(redis_server.url)
    jobs = JobStore(redis, 600)
    now = now_ms()
    records = [_record("order-1", "running", now), _record("order-2", "running", now + 1)]
    records.append(_record("order-3", "queued", now + 2))
    try:
        await redis.delete(keys.queue(PARTITION))
        for n, record in enumerate(records):
            await jobs.create(record)
            await redis.zadd(keys.queue(PARTITION), {record.job_id: now + n})
        claimed = await claim(jobs, records[0], limit=8)
        assert claimed == []
        third = await jobs.get("order-3")
        assert third is not None and third.status == "queued" and third.runs == 0

        await jobs.update("order-2", lambda r: r.model_copy(update={"status": "succeeded"}))
        claimed = await claim(jobs, records[0], limit=8)  # a finished job does not stop it
        assert [m.job_id for m in claimed] == ["order-3"]
    finally:
        for record in records:
            await jobs.delete(record.job_id, record.wiki)
        await redis.delete(keys.queue(PARTITION))
        await redis.aclose()


async def test_a_job_ahead_of_the_head_is_not_taken_along(redis_server: RedisServer, data_dir: Path) -> None:
    """Queue: a queued job of the wiki arq skipped (its in-progress marker, maybe stale, holds it), the
    head it started instead, then a queued one. The claim takes only the one behind the head: the one
    ahead, taken along, would land after the head."""
    redis = await connect(redis_server.url)
    jobs = JobStore(redis, 600)
    now = now_ms()
    records = [_record("ahead-1", "queued", now), _record("ahead-2", "running", now + 1)]
    records.append(_record("ahead-3", "queued", now + 2))
    try:
        await redis.delete(keys.queue(PARTITION))
        for n, record in enumerate(records):
            await jobs.create(record)
            await redis.zadd(keys.queue(PARTITION), {record.job_id: now + n})
        claimed = await claim(jobs, records[1], limit=8)
        assert [m.job_id for m in claimed] == ["ahead-3"]
        first = await jobs.get("ahead-1")
        assert first is not None and first.status == "queued" and first.runs == 0
    finally:
        for record in records:
            await jobs.delete(record.job_id, record.wiki)
        await redis.delete(keys.queue(PARTITION))
        await redis.aclose()
