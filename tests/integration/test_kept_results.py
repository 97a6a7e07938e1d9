"""Kept dry-run results count in their submitter's queued bytes until their records expire (real Redis)."""

from __future__ import annotations

import uuid

from worker import keys
from worker.jobs.clock import now_ms
from worker.jobs.connection import connect
from worker.jobs.queue import ACCEPTED, accept_job
from worker.jobs.record import BatchSummary, JobRecord
from worker.jobs.store import JobStore
from worker.redis_server import RedisServer
from worker.schema.answers import Author


def _record(submitter: str, *, dry_run: bool, status: str = "succeeded") -> JobRecord:
    return JobRecord(
        job_id=uuid.uuid4().hex,
        wiki="kept",
        submitted_ms=now_ms(),
        summary=BatchSummary(message="m", dry_run=dry_run),
        author=Author(name="a", email="a@example.org"),
        submitter=submitter,
        status=status,  # type: ignore[arg-type]
        partition=0,
    )


async def test_kept_results_count_until_they_expire(redis_server: RedisServer) -> None:
    """Two kept dry runs add their sizes to the submitter's total (a real run's result does not) and a
    submission that would pass the cap with them is refused; once one is made to expire, the submission
    script gives its bytes back and the same submission is accepted."""
    redis = await connect(redis_server.url)
    try:
        store = JobStore(redis, retention_seconds=3600, dry_run_retention_seconds=600)
        submitter = "p-" + uuid.uuid4().hex
        total = keys.queued(submitter)[1]
        first, second = _record(submitter, dry_run=True), _record(submitter, dry_run=True)
        await store.keep([(first, 1000), (second, 300), (_record(submitter, dry_run=False), 5000)])
        assert int(await redis.get(total)) == 1300
        await store.keep([(first, 1000)])  # a second count of the same job changes nothing
        assert int(await redis.get(total)) == 1300
        waiting = _record(submitter, dry_run=False, status="queued")
        waiting.queued_bytes = 400
        assert await accept_job(redis, store, waiting, None, 1500, "none", 1.0) == 1300
        await store.expire_soon(first, 0)
        waiting.submitted_ms = now_ms()  # a submission made now, after the expiry
        assert await accept_job(redis, store, waiting, None, 1500, "none", 1.0) == ACCEPTED
        assert int(await redis.get(total)) == 300 + 400
    finally:
        await redis.aclose()
