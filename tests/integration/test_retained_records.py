"""What finished job records keep counts against their submitter, within ``retained_cap``: the oldest are
dropped first, an idempotency key that names a dropped job says how it ended, and a summary is bounded
(real Redis-compatible server)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from arq.connections import ArqRedis

from worker import keys
from worker.jobs import lifecycle
from worker.jobs.clock import now_ms
from worker.jobs.connection import connect
from worker.jobs.record import SUMMARY_MESSAGE_CHARS, SUMMARY_PATH_BYTES, BatchSummary, JobRecord
from worker.jobs.retention import RECORD_OVERHEAD
from worker.jobs.store import Finishing, JobStore
from worker.redis_server import RedisServer
from worker.schema.answers import Author, ErrorInfo, JobResult
from worker.schema.edits import Batch

PARTITION = 735  # a partition no other test uses
CAP = 40_000


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[ArqRedis]:
    client = await connect(redis_server.url)
    yield client
    await client.aclose()


def _batch(paths: int = 1, length: int = 60) -> Batch:
    return Batch.model_validate(
        {
            "message": "m" * 10_000,
            "edits": [
                {"op": "append", "path": f"wiki/{n:04d}" + "p" * length + ".md", "content": "x"}
                for n in range(paths)
            ],
        }
    )


async def _running(
    jobs: JobStore, submitter: str, wiki: str, *, dry_run: bool = False
) -> tuple[JobRecord, bytes]:
    batch = _batch().model_copy(update={"dry_run": dry_run})
    record = JobRecord(
        job_id=uuid.uuid4().hex.upper()[:26],
        wiki=wiki,
        submitted_ms=now_ms(),
        batch=batch,
        summary=BatchSummary.of(batch),
        author=Author(name="Tester", email="tester@example.com"),
        submitter=submitter,
        partition=PARTITION,
    )
    await jobs.create(record)
    running, stored = await jobs.update_stored(record.job_id, lifecycle.start)
    assert running is not None and stored is not None
    return running, stored


async def _fail(jobs: JobStore, submitter: str, wiki: str, *, dry_run: bool = False) -> str:
    """A job of ``submitter`` that failed NOT_FOUND (finished with ``finish_many``); its id."""
    record, stored = await _running(jobs, submitter, wiki, dry_run=dry_run)
    error = ErrorInfo(code="NOT_FOUND", message="'wiki/x.md' does not exist", index=0)
    done = lifecycle.finish(None, error)(record.model_copy())
    assert done is not None
    finished, _ = await jobs.finish_many([Finishing(record, stored, done, keys.queue(PARTITION), False)])
    assert finished == [True]
    return record.job_id


async def _held(redis: ArqRedis, submitter: str) -> int:
    return int(await redis.get(keys.retained(submitter)[2]) or 0)


def test_a_summary_is_bounded() -> None:
    """A batch of 1000 edits at long paths with a 10 000-character message keeps the message's first
    characters and the first paths up to the bound, counting the rest; at least one edit is listed."""
    summary = BatchSummary.of(_batch(paths=1000, length=200))
    assert len(summary.message) == SUMMARY_MESSAGE_CHARS
    assert 0 < sum(len(e.path) for e in summary.edits) <= SUMMARY_PATH_BYTES
    assert summary.count == 1000 and summary.more == 1000 - len(summary.edits)
    alone = BatchSummary.of(_batch(paths=3, length=4000))
    assert len(alone.edits) == 1 and alone.more == 2


async def test_the_oldest_records_go_first_and_others_stay(redis: ArqRedis) -> None:
    """A principal's failed jobs past the cap: its oldest records (and their wiki index entries) are
    dropped first, its total stays within the cap, and another principal's record is untouched."""
    jobs = JobStore(redis, 600, retained_cap=CAP)
    dave, carol = f"dave-{uuid.uuid4().hex}", f"carol-{uuid.uuid4().hex}"
    wiki = f"kept-{uuid.uuid4().hex[:8]}"
    carols = await _fail(jobs, carol, wiki)
    daves = [await _fail(jobs, dave, wiki) for _ in range(40)]
    size = len(await redis.get(keys.job(daves[-1]))) + RECORD_OVERHEAD
    assert 0 < await _held(redis, dave) <= CAP
    kept = [j for j in daves if await redis.exists(keys.job(j))]
    assert kept == daves[-len(kept) :] and len(kept) == CAP // size
    assert await _held(redis, dave) == len(kept) * size
    indexed = {i.decode() for i in await redis.zrange(keys.wiki_jobs(wiki), 0, -1)}
    assert indexed == {carols, *kept}
    assert await jobs.get(carols) is not None and await _held(redis, carol) > 0


async def test_a_record_that_grows_after_its_finish_counts_again(redis: ArqRedis) -> None:
    """A change of a finished record (webhook attempts noted, say) counts its new size, and pushes out the
    oldest record once over the cap."""
    jobs = JobStore(redis, 600, retained_cap=CAP)
    dave = f"dave-{uuid.uuid4().hex}"
    first = await _fail(jobs, dave, "grow")
    job_id = await _fail(jobs, dave, "grow")
    held = await _held(redis, dave)

    def noted(record: JobRecord) -> JobRecord:
        record.result = JobResult(commit=None, applied=[])
        record.error = ErrorInfo(code="NOT_FOUND", message="x" * 39_000, index=0)
        return record

    after = await jobs.update(job_id, noted)
    assert after is not None
    assert await _held(redis, dave) == len(await redis.get(keys.job(job_id))) + RECORD_OVERHEAD
    assert await _held(redis, dave) > held and not await redis.exists(keys.job(first))


async def test_dry_runs_and_a_cap_of_zero_count_nothing(redis: ArqRedis) -> None:
    """A dry run's record counts in the queued bytes (``JobStore.keep``), not here; without a cap no
    record counts."""
    dave = f"dave-{uuid.uuid4().hex}"
    await _fail(JobStore(redis, 600, 600, retained_cap=CAP), dave, "dry", dry_run=True)
    await _fail(JobStore(redis, 600), dave, "dry")
    assert await _held(redis, dave) == 0


async def test_a_dropped_job_keeps_its_idempotency_key_bound(redis: ArqRedis) -> None:
    """A job submitted with an idempotency key whose record is dropped: the key still names it, now with
    its final status, so a replay answers it instead of queueing the batch again."""
    jobs = JobStore(redis, 600, retained_cap=CAP)
    dave = f"dave-{uuid.uuid4().hex}"
    scope = f"{dave}\x00idem"
    record, stored = await _running(jobs, dave, "idem")
    assert await jobs.bind_key(scope, "k", "f" * 64, record.job_id) == (record.job_id, "f" * 64)
    record.idempotency_guard = keys.idempotency(scope, "k")
    await redis.set(keys.job(record.job_id), record.model_dump_json(exclude_defaults=True), keepttl=True)
    stored = await redis.get(keys.job(record.job_id))
    done = lifecycle.finish(None, ErrorInfo(code="NOT_FOUND", message="gone", index=0))(record.model_copy())
    assert done is not None
    assert (await jobs.finish_many([Finishing(record, stored, done, keys.queue(PARTITION), False)]))[0] == [
        True
    ]
    assert await jobs.dropped(scope, "k", record.job_id) is None  # kept: nothing to say
    for _ in range(40):
        await _fail(jobs, dave, "idem")
    assert await jobs.get(record.job_id) is None
    assert await jobs.dropped(scope, "k", record.job_id) == "failed"
    assert await jobs.bind_key(scope, "k", "f" * 64, "ANOTHER") == (record.job_id, "f" * 64)
    assert not await jobs.take_over_key(scope, "k", (record.job_id, "f" * 64), "ANOTHER", dave)
