"""A job cancelled while its git work runs (arq's job timeout, a shutdown) is still recorded, never lost; a
run overtaken by a newer run of the same job (its partition's lease moved meanwhile) leaves the record to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from arq import Retry

from worker import keys
from worker.bootstrap import build
from worker.git import GitStore, WikiRepo
from worker.jobs.clock import now_ms
from worker.jobs.connection import connect
from worker.jobs.context import JobContext
from worker.jobs.finish import finish
from worker.jobs.leases import Lease
from worker.jobs.lifecycle import start
from worker.jobs.pipeline import Decided, Member
from worker.jobs.record import BatchSummary, JobRecord
from worker.jobs.run import apply_batch
from worker.jobs.store import JobStore
from worker.redis_server import RedisServer
from worker.schema.answers import Author, ErrorInfo
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


@dataclass
class _Blocked:
    """A queued job creating ``wiki/a.md`` on a new wiki whose ``main.lock`` another writer holds: its git
    work waits in its thread (``executor.started`` says when it began) until the test removes ``lock``."""

    job_id: str
    wiki: str
    repo: WikiRepo
    base: str
    lock: Path
    jobs: JobStore
    executor: _WatchedExecutor
    ctx: JobContext


@asynccontextmanager
async def _blocked_job(
    redis_server: RedisServer, data_dir: Path, job_id: str, wiki: str
) -> AsyncIterator[_Blocked]:
    store = GitStore(data_dir)
    base = store.create(wiki)
    repo = store.open(wiki)
    redis = await connect(redis_server.url)
    jobs = JobStore(redis, 600)
    settings = Settings(redis_url=redis_server.url, data_dir=data_dir)
    batch = Batch.model_validate(
        {"message": "m", "edits": [{"op": "create", "path": "wiki/a.md", "content": "a\n"}]}
    )
    author = Author(name="Tester", email="tester@example.com")
    summary = BatchSummary.of(batch)
    record = JobRecord(
        job_id=job_id,
        wiki=wiki,
        submitted_ms=now_ms(),
        batch=batch,
        summary=summary,
        author=author,
        base=base,
    )
    await jobs.create(record)
    executor = _WatchedExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    lock = repo.path / "refs" / "heads" / "main.lock"
    lock.write_text(base + "\n")
    ctx: JobContext = {
        "resources": build(settings, redis, store=store, jobs=jobs),
        "redis": redis,
        "job_try": 1,
    }
    try:
        yield _Blocked(job_id, wiki, repo, base, lock, jobs, executor, ctx)
    finally:
        lock.unlink(missing_ok=True)
        await jobs.delete(job_id, wiki)
        store.close()
        await redis.aclose()


async def _assert_committed_once(blocked: _Blocked) -> None:
    """The job reads succeeded with its commit, the one commit on ``base`` (now ``main``)."""
    after = await blocked.jobs.get(blocked.job_id)
    commit = blocked.repo.find_job_commit(blocked.job_id, stop_at=blocked.base)
    assert after is not None and after.status == "succeeded" and after.error is None
    assert commit is not None and after.result is not None and after.result.commit == commit
    assert blocked.repo.head() == commit and blocked.repo.commit_info(commit).parents == (blocked.base,)


async def test_cancelled_job_finishes_its_commit_and_records_it(
    redis_server: RedisServer, data_dir: Path
) -> None:
    """Cancelled mid-commit, the job lets the git work end and records ``succeeded`` before giving way."""
    async with _blocked_job(redis_server, data_dir, "01CANCELLEDJOB0000000000001", "cancelled") as blocked:
        job = asyncio.create_task(apply_batch(blocked.ctx, blocked.job_id))
        await asyncio.wait_for(blocked.executor.started.wait(), 10)
        job.cancel()  # what arq's job timeout does
        blocked.lock.unlink()  # the other writer is done: the commit can land now
        with pytest.raises(asyncio.CancelledError):
            await job
        await _assert_committed_once(blocked)


async def test_an_overtaken_run_leaves_the_outcome_to_the_newer_run(
    redis_server: RedisServer, data_dir: Path
) -> None:
    """Run 1 of a job started, then lost its partition; run 2 started elsewhere and is committing. Run 1's
    late failure (its record changed, so it is recorded by reading the record again) must not finish the
    job: run 2 commits and records it, and the job reads succeeded with that commit, not failed with a
    commit on main."""
    async with _blocked_job(redis_server, data_dir, "01OVERTAKENJOB0000000000001", "overtaken") as blocked:
        jobs, ctx = blocked.jobs, blocked.ctx
        first, first_stored = await jobs.update_stored(blocked.job_id, start)  # run 1 starts
        assert first is not None and first.runs == 1
        second = asyncio.create_task(apply_batch(ctx, blocked.job_id))  # run 2, its git work held back
        try:
            await asyncio.wait_for(blocked.executor.started.wait(), 10)
            running = await jobs.get(blocked.job_id)
            assert running is not None and running.status == "running" and running.runs == 2
            late = ErrorInfo(code="INTERNAL", message="run 1 gave up")
            stale = Decided(Member(first, first_stored), error=late)
            await finish(ctx, ctx["resources"], [stale])
            after_late = await jobs.get(blocked.job_id)
            assert after_late is not None and after_late.status == "running" and after_late.error is None
            blocked.lock.unlink()
            assert await asyncio.wait_for(second, 30) == "succeeded"
            await _assert_committed_once(blocked)
        finally:
            second.cancel()


async def test_a_job_whose_lease_is_lost_mid_run_records_nothing(
    redis_server: RedisServer, data_dir: Path
) -> None:
    """The worker learns its lease is lost while the job's git work waits for ``main.lock``: the job stops
    at its next safe point and ends with ``Retry`` (arq keeps its entry queued), its record left exactly as
    its start stored it, for the partition's next owner to run (finding its commit, had one landed)."""
    async with _blocked_job(redis_server, data_dir, "01LEASELOSTJOB0000000000001", "lease-lost") as blocked:
        lease = Lease(0, 10**12)  # of the current epoch (none newer): only the lost flag stops the run
        ctx: JobContext = {**blocked.ctx, "lease": lease}
        job = asyncio.create_task(apply_batch(ctx, blocked.job_id))
        await asyncio.wait_for(blocked.executor.started.wait(), 10)
        started = await blocked.jobs.redis.get(keys.job(blocked.job_id))
        lease.lost.set()  # what the lease loop does when the renewal fails
        blocked.lock.unlink()  # the other writer is done
        with pytest.raises(Retry):
            await asyncio.wait_for(job, 30)
        assert await blocked.jobs.redis.get(keys.job(blocked.job_id)) == started
        record = await blocked.jobs.get(blocked.job_id)
        assert record is not None and record.status == "running" and record.runs == 1
        assert record.result is None
