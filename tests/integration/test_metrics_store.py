"""The metrics recorder against a real Redis and a real git repository, and the ``/metrics`` rendering."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from api.server.metrics import Snapshot, SnapshotCollector
from worker.engine import preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git.repo import CommitGroup
from worker.jobs.clock import now_ms
from worker.jobs.connection import connect
from worker.jobs.pipeline import Member, run
from worker.jobs.record import BatchSummary, JobRecord
from worker.jobs.store import JobStore
from worker.jobs.targets import LocalTarget
from worker.redis_server import RedisServer, free_port
from worker.schema.answers import Author
from worker.schema.edits import Batch, Create, Limits
from worker.telemetry.metrics import RECORDER, Recorder, field


def _render(stored: dict[str, float]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(Snapshot(stored=stored, depth=[0], oldest_ms=[None], owners=[None])))
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def _stored(redis: Redis, key: str) -> dict[str, float]:
    return {k.decode(): float(v) for k, v in (await redis.hgetall(key)).items()}


async def test_flush_adds_into_redis_and_renders_cumulative_buckets(redis_server: RedisServer) -> None:
    """Two recorders (two processes) add into one hash; buckets render cumulative with +Inf equal to count."""
    key = f"test:metrics:{uuid.uuid4().hex}"
    redis = Redis.from_url(redis_server.url)
    try:
        a, b = Recorder(key), Recorder(key)
        a.inc("wikiq_jobs_succeeded")
        b.inc("wikiq_jobs_succeeded", value=2)
        a.inc("wikiq_jobs_failed", (("code", "VERSION_MISMATCH"),))
        for seconds in (0.004, 0.05, 0.3, 1000.0):
            a.observe("wikiq_job_run_seconds", seconds, (("outcome", "succeeded"),))
        b.observe("wikiq_commit_edits", 3)
        a._redis = b._redis = redis
        await a.flush()
        await b.flush()
        assert a.pending() == {} and b.pending() == {}
        samples = _render(await _stored(redis, key))
    finally:
        await redis.aclose()

    def at(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset(labels.items())))

    assert at("wikiq_jobs_succeeded_total") == 3
    assert at("wikiq_jobs_failed_total", code="VERSION_MISMATCH") == 1
    assert at("wikiq_jobs_accepted_total") == 0  # present at zero before any event
    run = {"outcome": "succeeded"}
    assert at("wikiq_job_run_seconds_bucket", le="0.005", **run) == 1
    assert at("wikiq_job_run_seconds_bucket", le="0.05", **run) == 2
    assert at("wikiq_job_run_seconds_bucket", le="0.25", **run) == 2
    assert at("wikiq_job_run_seconds_bucket", le="0.5", **run) == 3
    assert at("wikiq_job_run_seconds_bucket", le="300.0", **run) == 3
    assert at("wikiq_job_run_seconds_bucket", le="+Inf", **run) == 4
    assert at("wikiq_job_run_seconds_count", **run) == 4
    assert at("wikiq_job_run_seconds_sum", **run) == 0.004 + 0.05 + 0.3 + 1000.0
    assert at("wikiq_commit_edits_bucket", le="2.0") == 0
    assert at("wikiq_commit_edits_bucket", le="5.0") == 1
    assert at("wikiq_commit_bytes_count") == 0  # an unlabelled histogram is present before any event


async def test_increments_survive_an_unreachable_redis(redis_server: RedisServer) -> None:
    """A failed flush keeps the increments; the next flush to a live Redis writes them once."""
    key = f"test:metrics:{uuid.uuid4().hex}"
    recorder = Recorder(key)
    recorder.inc("wikiq_jobs_accepted", value=2)
    dead = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    recorder._redis = dead
    try:
        await recorder.flush()
        raise AssertionError("the flush to a dead server should fail")
    except (RedisConnectionError, OSError):
        pass
    finally:
        await dead.aclose()
    assert recorder.pending() == {field("wikiq_jobs_accepted"): 2.0}
    live = Redis.from_url(redis_server.url)
    try:
        recorder._redis = live
        recorder.inc("wikiq_jobs_accepted")
        await recorder.flush()
        assert await _stored(live, key) == {field("wikiq_jobs_accepted"): 3.0}
    finally:
        await live.aclose()


async def test_started_recorder_flushes_events_from_threads(redis_server: RedisServer) -> None:
    """Once started, an event recorded on a worker thread reaches Redis without any explicit flush."""
    key = f"test:metrics:{uuid.uuid4().hex}"
    redis = Redis.from_url(redis_server.url)
    recorder = Recorder(key, delay=0.01)
    try:
        recorder.start(redis)
        thread = threading.Thread(target=recorder.inc, args=("wikiq_cas_retries", (("reason", "moved"),)))
        thread.start()
        thread.join()
        for _ in range(500):
            if await _stored(redis, key):
                break
            await asyncio.sleep(0.01)  # polling Redis for the background write
        assert await _stored(redis, key) == {field("wikiq_cas_retries", (("reason", "moved"),)): 1.0}
    finally:
        await recorder.stop()
        await redis.aclose()


class _RacedGroup(CommitGroup):
    """A group whose first land finds ``main`` moved by a second, real writer just before its swap."""

    def land(self, epoch: int | None = None) -> None:
        repo = self.repo
        assert isinstance(repo, _RacedRepo)
        if not repo.raced:
            repo.raced = True
            head = repo.rival.head()
            edits = [Create(op="create", path="wiki/rival.md", content="rival\n")]
            repo.rival.commit_plan(
                preflight(repo.rival.snapshot(head), edits), head, "rival", Identity("r", "r@x")
            )
        super().land(epoch)


class _RacedRepo(WikiRepo):
    """A wiki whose ``main`` is moved by a second, real writer just before this one's first swap."""

    rival: WikiRepo
    raced = False

    def group(self) -> CommitGroup:
        return _RacedGroup(self)


async def test_lost_swap_counts_one_cas_retry_and_one_commit(
    data_dir: Path, redis_server: RedisServer
) -> None:
    """A batch whose first swap loses to another writer counts one ``moved`` retry and one commit size."""
    GitStore(data_dir).create("race")
    path = GitStore(data_dir).path("race")
    repo = _RacedRepo(path)
    repo.rival = GitStore(data_dir).open("race")
    content = "mine, 20 bytes long\n"
    batch = Batch.model_validate(
        {"message": "mine", "edits": [{"op": "create", "path": "wiki/mine.md", "content": content}]}
    )
    record = JobRecord(
        job_id="01TESTRACE",
        wiki="race",
        submitted_ms=now_ms(),
        batch=batch,
        summary=BatchSummary.of(batch),
        author=Author(name="t", email="t@x"),
    )
    moved = field("wikiq_cas_retries", (("reason", "moved"),))
    edits_sum, bytes_sum = field("wikiq_commit_edits", (), "sum"), field("wikiq_commit_bytes", (), "sum")
    before = RECORDER.pending()
    redis = await connect(redis_server.url)
    try:
        target = LocalTarget(repo)
        first = Member(record, None)
        decided = await run(JobStore(redis, 600), target, first, Limits(), None, None, asyncio.Event())
    finally:
        await redis.aclose()
    after = RECORDER.pending()
    assert len(decided) == 1 and decided[0].error is None
    result = decided[0].result
    assert result is not None
    assert result.commit == repo.head()
    assert after.get(moved, 0) - before.get(moved, 0) == 1
    assert after.get(edits_sum, 0) - before.get(edits_sum, 0) == 1
    assert after.get(bytes_sum, 0) - before.get(bytes_sum, 0) == len(content)
