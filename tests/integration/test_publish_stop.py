"""A consumer stopping while its remote-backed wiki's group waits for the remote (real Redis, real git):
once the stop's grace is over the job is cancelled, the wait ends, and every job of the group is
``queued`` again at its place, arq's entry of the head still queued, nothing of arq's run left behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.e2e.remotes import remotes_toml
from tests.integration.remote.repos import make_bare, refuse_pushes
from worker import keys
from worker.git import GitStore
from worker.git.remote import Remote
from worker.git.remote.registry import RemoteRegistry
from worker.jobs.arq_compat import job_keys
from worker.jobs.clock import now_ms
from worker.jobs.connection import connect
from worker.jobs.consumer import PartitionRunner
from worker.jobs.queue import enqueue_batch
from worker.jobs.record import BatchSummary, JobRecord
from worker.jobs.registry import WikiRegistry
from worker.jobs.resources import Resources
from worker.jobs.store import JobStore
from worker.jobs.wikis import Wikis
from worker.redis_server import RedisServer
from worker.schema.answers import Author
from worker.schema.edits import Batch
from worker.settings import Settings

PARTITION = 734  # a partition no other test uses
WIKI = "stopping"
OWNER = "worker-stop"
REFUSALS = 1000


def _record(n: int) -> JobRecord:
    batch = Batch.model_validate(
        {"message": f"b{n}", "edits": [{"op": "create", "path": f"wiki/b{n}.md", "content": "a\n"}]}
    )
    return JobRecord(
        job_id=f"stop-{n}-{time.monotonic_ns()}",
        wiki=WIKI,
        submitted_ms=now_ms(),
        batch=batch,
        summary=BatchSummary.of(batch),
        author=Author(name="Tester", email="tester@example.com"),
        partition=PARTITION,
    )


def _refusals_left(served: Path) -> int:
    """The hook's counter (read while the hook may be rewriting it: empty counts as not yet)."""
    text = (served / "refusals-left").read_text().strip()
    return int(text) if text else REFUSALS


async def test_a_stop_during_a_remote_wait_gives_the_group_back(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Three jobs queued, the remote refusing every push: the head claims the two others and waits between
    pushes. ``stop(grace=0.2)`` ends the wait: all three ``queued``, one run counted each, the head's arq
    entry queued with no in-progress marker, the consumer's task over."""
    served = make_bare(tmp_path / "served" / "docs.git")
    remotes = tmp_path / "remotes.toml"
    remotes.write_text(remotes_toml(Remote(name="docs", url=f"file://{served}")))
    redis = await connect(redis_server.url)
    settings = Settings(redis_url=redis_server.url, data_dir=tmp_path / "data", remotes_file=remotes)
    store = GitStore(settings.data_dir)
    jobs = JobStore(redis, 600)
    wikis = Wikis(store, WikiRegistry(redis), RemoteRegistry(remotes))
    resources = Resources(settings, redis, store, jobs, wikis)
    records = [_record(n) for n in range(3)]
    runner = PartitionRunner(PARTITION, resources, OWNER)
    try:
        await wikis.attach(WIKI, "docs")
        refuse_pushes(served, times=REFUSALS)
        await redis.set(keys.lease(PARTITION), OWNER)
        for record in records:
            await jobs.create(record)
            assert await enqueue_batch(redis, record.job_id, PARTITION, expires_s=600)
        runner.start()
        deadline = time.monotonic() + 60
        while _refusals_left(served) > REFUSALS - 2:  # refused twice: waiting between pushes
            assert time.monotonic() < deadline, "the group never pushed"
            await asyncio.sleep(0.02)  # polling the hook's counter: another process's state
        await runner.stop(grace=0.2)
        assert runner.task is not None and runner.task.done()
        for record in records:
            stored = await jobs.get(record.job_id)
            assert stored is not None
            assert (stored.status, stored.runs) == ("queued", 1), (record.job_id, stored.status, stored.runs)
        entry, _, marker, _ = job_keys(records[0].job_id)
        assert await redis.exists(entry) and not await redis.exists(marker)
        queued = [raw.decode() for raw in await redis.zrange(keys.queue(PARTITION), 0, -1)]
        assert queued == [record.job_id for record in records]
    finally:
        for task in list(runner.worker.tasks.values()):
            task.cancel()
        for record in records:
            await jobs.delete(record.job_id, record.wiki)
            await redis.delete(*job_keys(record.job_id))
        await redis.delete(keys.queue(PARTITION), keys.lease(PARTITION))
        await redis.hdel(keys.WIKIS, WIKI)
        await redis.hdel(keys.WIKI_HEADS, WIKI)
        store.close()
        await redis.aclose()
