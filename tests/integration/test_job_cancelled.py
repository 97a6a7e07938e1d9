"""A job cancelled while its git work runs (arq's job timeout, a shutdown) is still recorded, never lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from worker.git import GitStore
from worker.jobs.queue import connect
from worker.jobs.records import BatchSummary, JobRecord, JobStore, now_ms
from worker.jobs.run import Deps, apply_batch
from worker.redis_server import RedisServer
from worker.schema.answers import Author
from worker.schema.edits import Batch
from worker.settings import Settings


class _WatchedExecutor(ThreadPoolExecutor):
    """A real thread pool that says when work is handed to it (the git work of a job starts)."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.started = asyncio.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.started.set()  # called on the event loop's thread by asyncio.to_thread
        return super().submit(fn, *args, **kwargs)


async def test_cancelled_job_finishes_its_commit_and_records_it(
    redis_server: RedisServer, data_dir: Path
) -> None:
    """Cancelled mid-commit, the job lets the git work end and records ``succeeded`` before giving way."""
    store = GitStore(data_dir)
    base = store.create("cancelled")
    repo = store.open("cancelled")
    redis = await connect(redis_server.url)
    jobs = JobStore(redis, 600)
    settings = Settings(redis_url=redis_server.url, data_dir=data_dir)
    batch = Batch.model_validate(
        {"message": "m", "edits": [{"op": "create", "path": "wiki/a.md", "content": "a\n"}]}
    )
    record = JobRecord(
        job_id="01CANCELLEDJOB0000000000001",
        wiki="cancelled",
        submitted_ms=now_ms(),
        batch=batch,
        summary=BatchSummary.of(batch),
        author=Author(name="Tester", email="tester@example.com"),
        base=base,
    )
    await jobs.create(record)
    executor = _WatchedExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    lock = repo.path / "refs" / "heads" / "main.lock"
    lock.write_text(base + "\n")  # another writer holds main: the job's git work waits in its thread
    ctx = {"deps": Deps(settings, store, jobs), "redis": redis, "job_try": 1}
    job = asyncio.create_task(apply_batch(ctx, record.job_id))
    try:
        await asyncio.wait_for(executor.started.wait(), 10)
        job.cancel()  # what arq's job timeout does
        lock.unlink()  # the other writer is done: the commit can land now
        with pytest.raises(asyncio.CancelledError):
            await job
        after = await jobs.get(record.job_id)
        assert after is not None and after.status == "succeeded"
        commit = repo.find_job_commit(record.job_id, stop_at=base)
        assert commit is not None and after.result is not None and after.result.commit == commit
        assert repo.head() == commit
    finally:
        lock.unlink(missing_ok=True)
        await jobs.delete(record.job_id, "cancelled")
        store.close()
        await redis.aclose()
