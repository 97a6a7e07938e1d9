"""Durable acceptance (``WIKIQ_ACCEPT_DURABILITY``): a submission is answered ``202`` only once Redis has
confirmed its job's record and queue entry on disk (``WAITAOF``) and, with ``replica``, on a replica
(``WAIT``); when it cannot confirm in time the answer is ``503 STORAGE_UNAVAILABLE`` naming the job, which
is kept (an idempotent retry then answers it). Redis unreachable is a ``503`` too, never a stack trace.

The server here runs ``appendfsync no``: Redis never fsyncs by itself, so its ``WAITAOF`` replies and
``INFO persistence`` show exactly when a write became durable, and switching to ``always`` makes it so.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from tests.e2e.proxy import FreezableProxy
from tests.service.harness import create, deployment, expect_error
from worker import keys
from worker.jobs.queue import ClaimLost, NotDurable, cancel_queued, confirm_on_replica
from worker.jobs.store import JobStore
from worker.redis_server import RedisServer
from worker.schema.edits import Batch
from worker.service.caller import SINGLE_USER_ID
from worker.service.submit import fingerprint


@pytest.fixture(scope="module")
def lazy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of this module's own with the AOF on but never fsynced by Redis itself."""
    server = RedisServer(tmp_path_factory.mktemp("lazy-redis"), appendonly=True, appendfsync="no").start()
    yield server
    server.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def admin(lazy_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain connection to the lazy server, put back to ``appendfsync no`` after each test."""
    redis = Redis.from_url(lazy_server.url, decode_responses=True)
    await redis.config_set("appendfsync", "no")
    yield redis
    await redis.config_set("appendfsync", "no")
    await redis.aclose()


async def _fsynced(admin: Redis) -> bool:
    """Whether a write made now is confirmed fsynced within 50 ms (``WAITAOF 1 0`` on its connection)."""
    async with admin.pipeline(transaction=False) as pipe:
        pipe.incr("probe:durable")
        pipe.execute_command("WAITAOF", 1, 0, 50)
        _, (local, _replicas) = await pipe.execute()
    return int(local) == 1


def _batch(path: str) -> dict[str, Any]:
    return {"message": "durable", "edits": [create(path)]}


async def test_202_is_not_sent_before_the_job_is_fsynced(
    lazy_server: RedisServer, admin: Redis, tmp_path: Path
) -> None:
    """With nothing fsynced, the submission hangs (its job record already in Redis, WAITAOF answering 0
    local fsyncs); the moment Redis fsyncs (appendfsync always) it is answered 202 for that same job."""
    async with deployment(lazy_server, tmp_path, accept_timeout_seconds=30) as dep:
        wiki = await dep.new_wiki("durable")
        info = await admin.info("persistence")
        assert info["aof_enabled"] == 1
        assert not await _fsynced(admin)  # this server fsyncs nothing by itself

        submitted = asyncio.ensure_future(dep.submit(wiki, _batch("wiki/a.md")))
        records: list[str] = []
        deadline = time.monotonic() + 10
        while not records:  # the record is written before the durability wait begins
            records = [k.decode() async for k in dep.redis.scan_iter(match="wikiq:job:*")]
            assert time.monotonic() < deadline, "the job record was never written"
            await asyncio.sleep(0.02)  # polling Redis for the record: nothing to wait on instead
        await asyncio.sleep(0.5)
        assert not submitted.done(), "answered before Redis confirmed the job on disk"
        assert not await _fsynced(admin)

        flipped = time.monotonic()
        await admin.config_set("appendfsync", "always")
        answer = await asyncio.wait_for(submitted, 10)
        assert answer.status_code == 202, answer.text
        assert time.monotonic() - flipped < 5
        assert records == [f"wikiq:job:{answer.json()['job_id']}"]
        assert await _fsynced(admin)
        assert (await dep.wait(answer.json()["job_id"]))["status"] == "succeeded"


async def test_unconfirmed_submission_is_503_naming_the_kept_job(
    lazy_server: RedisServer, admin: Redis, tmp_path: Path
) -> None:
    """Not confirmed within WIKIQ_ACCEPT_TIMEOUT_SECONDS: 503 STORAGE_UNAVAILABLE with Retry-After, naming
    the job, which is kept; the same Idempotency-Key answers that job (200) once Redis is durable again."""
    async with deployment(lazy_server, tmp_path, accept_timeout_seconds=0.3) as dep:
        wiki = await dep.new_wiki("unconfirmed")
        headers = {"Idempotency-Key": "nightly-1"}
        started = time.monotonic()
        answer = await dep.submit(wiki, _batch("wiki/b.md"), headers=headers)
        assert time.monotonic() - started >= 0.3
        error = expect_error(answer, 503, "STORAGE_UNAVAILABLE")
        assert answer.headers["retry-after"] == "1"
        assert "not confirmed durable" in error["message"] and "Idempotency-Key" in error["message"]
        job_id = error["message"].split()[1]
        assert (await dep.client.get(f"/v1/jobs/{job_id}")).status_code == 200  # kept, not withdrawn

        again = await dep.submit(wiki, _batch("wiki/b.md"), headers=headers)
        expect_error(again, 503, "STORAGE_UNAVAILABLE")  # still not durable: still not confirmed

        await admin.config_set("appendfsync", "always")
        replay = await dep.submit(wiki, _batch("wiki/b.md"), headers=headers)
        assert replay.status_code == 200, replay.text
        assert replay.json()["job_id"] == job_id
        assert (await dep.wait(job_id))["status"] == "succeeded"


async def test_none_answers_without_waiting_for_disk(
    lazy_server: RedisServer, admin: Redis, tmp_path: Path
) -> None:
    """WIKIQ_ACCEPT_DURABILITY=none answers 202 while nothing is fsynced (the job is in memory only)."""
    async with deployment(lazy_server, tmp_path, accept_durability="none", accept_timeout_seconds=30) as dep:
        wiki = await dep.new_wiki("none")
        started = time.monotonic()
        job_id = await dep.submit_ok(wiki, _batch("wiki/c.md"))
        assert time.monotonic() - started < 5
        assert not await _fsynced(admin)
        assert (await dep.wait(job_id))["status"] == "succeeded"


async def test_aof_off_is_503_saying_what_to_change(tmp_path: Path) -> None:
    """A Redis without its append-only file cannot confirm anything: 503 saying to turn appendonly on or
    to choose WIKIQ_ACCEPT_DURABILITY=none; nothing is answered 202."""
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    try:
        async with deployment(server, tmp_path) as dep:
            wiki = await dep.new_wiki("no-aof")
            error = expect_error(await dep.submit(wiki, _batch("wiki/d.md")), 503, "STORAGE_UNAVAILABLE")
            assert "appendonly" in error["message"] and "WIKIQ_ACCEPT_DURABILITY=none" in error["message"]
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def _replicated(root: Path) -> AsyncIterator[tuple[RedisServer, RedisServer, FreezableProxy]]:
    """A primary, its replica and the proxy the replica replicates through, once the replica's first sync
    is done; all stopped at the end."""
    primary = RedisServer(root / "primary", extra=("--repl-diskless-sync-delay", "0")).start()  # no 5 s wait
    via = FreezableProxy(primary.port)
    replica = RedisServer(root / "replica", extra=("--replicaof", "127.0.0.1", str(via.port)))
    probe = Redis.from_url(primary.url, decode_responses=True, socket_timeout=5)
    try:
        replica.start()
        deadline = time.monotonic() + 20
        while (await probe.info("replication")).get("slave0", {}).get("state") != "online":
            assert time.monotonic() < deadline, "the replica did not come online"
            await asyncio.sleep(0.05)  # waiting for the replica's first sync: nothing to wait on instead
        yield primary, replica, via
    finally:
        await probe.aclose()
        via.close()
        replica.stop()
        primary.stop()


async def test_replica_durability_needs_a_replica_to_confirm(tmp_path: Path) -> None:
    """``replica``: 202 while a replica acknowledges the job; once the replica is gone, 503 (never a 202
    that only the primary holds), and the job it names lands once a replica is back."""
    settings = {"accept_durability": "replica", "accept_timeout_seconds": 1}
    async with (
        _replicated(tmp_path) as (primary, replica, _),
        deployment(primary, tmp_path, **settings) as dep,
    ):
        wiki = await dep.new_wiki("replicated")
        job_id = await dep.submit_ok(wiki, _batch("wiki/e.md"))
        assert (await dep.wait(job_id))["status"] == "succeeded"
        replica.kill()
        error = expect_error(await dep.submit(wiki, _batch("wiki/f.md")), 503, "STORAGE_UNAVAILABLE")
        assert "no replica" in error["message"]
        replica.start()  # back (as a supervisor would start it): the kept job lands once it has the record
        assert (await dep.wait(error["message"].split()[1]))["status"] == "succeeded"


def _trailers(repo: Path) -> list[str]:
    """The ``Wikiq-Job`` trailer of every commit on ``main``, newest first."""
    out = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%B", "main"], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"^Wikiq-Job: (\S+)$", out, re.MULTILINE)


async def test_a_job_no_replica_has_is_not_landed_until_one_does(tmp_path: Path) -> None:
    """``replica``: a submission no replica confirms (the replication stream frozen by a proxy) is answered
    503 naming the kept job, and the worker does not put that job into git while no replica has its record
    (a failover could still take the record back, leaving a commit of a job nobody knows and a retry that
    queues the batch again). The worker waits for a replica without counting runs (more attempts than
    ``max_job_tries`` here), and once the stream flows the job lands, exactly once, in its first run."""
    settings = {"accept_durability": "replica", "accept_timeout_seconds": 0.3, "max_job_tries": 2}
    async with _replicated(tmp_path) as (primary, _, proxy), deployment(primary, tmp_path, **settings) as dep:
        wiki = await dep.new_wiki("unreplicated")
        proxy.freeze()
        error = expect_error(await dep.submit(wiki, _batch("wiki/u.md")), 503, "STORAGE_UNAVAILABLE")
        job_id = error["message"].split()[1]
        jobs = JobStore(dep.redis, 3600, 3600)
        record = await jobs.get(job_id)
        assert record is not None
        attempts: set[str] = set()  # each confirmation attempt writes a new timestamp there
        deadline = time.monotonic() + 30
        while len(attempts) < 4:
            assert time.monotonic() < deadline, f"the worker tried {len(attempts)} times"
            record = await jobs.get(job_id)
            assert record is not None and record.status != "succeeded", "landed while no replica had it"
            if (stamp := await dep.redis.get(keys.landing(record.partition))) is not None:
                attempts.add(stamp)
            await asyncio.sleep(0.05)  # polling the worker's attempts: no event to wait on
        record = await jobs.get(job_id)
        assert record is not None and (record.status, record.runs) == ("running", 1), record
        assert job_id not in _trailers(dep.repo(wiki))
        proxy.thaw()
        job = await dep.wait(job_id)
        assert job["status"] == "succeeded", job
        assert _trailers(dep.repo(wiki)).count(job_id) == 1
        record = await jobs.get(job_id)
        assert record is not None and record.runs == 1


async def test_confirming_a_claim_checks_its_records_where_it_waits(tmp_path: Path) -> None:
    """``confirm_on_replica`` returns once a replica has the claimed records; ``ClaimLost`` when the
    server it waits on holds other bytes for them (a node promoted since the claim); ``NotDurable`` when
    no replica confirms in time."""
    async with _replicated(tmp_path) as (primary, _, proxy):
        redis = Redis.from_url(primary.url, socket_timeout=5)
        try:
            await redis.set(keys.job("01CLAIMED"), b'{"claimed":1}')
            await confirm_on_replica(redis, 0, 1.0, [("01CLAIMED", b'{"claimed":1}')])
            with pytest.raises(ClaimLost):
                await confirm_on_replica(redis, 0, 1.0, [("01CLAIMED", b'{"claimed":2}')])
            with pytest.raises(ClaimLost):
                await confirm_on_replica(redis, 0, 1.0, [("01NEVERSTORED", b"{}")])
            proxy.freeze()
            with pytest.raises(NotDurable):
                await confirm_on_replica(redis, 0, 0.2, [("01CLAIMED", b'{"claimed":1}')])
        finally:
            await redis.aclose()


async def test_redis_away_is_503_not_a_trace(tmp_path: Path) -> None:
    """Redis unreachable (a restart, a failover): submissions and reads answer 503 STORAGE_UNAVAILABLE with
    Retry-After, then work again once it is back."""
    server = RedisServer(tmp_path / "redis").start()
    try:
        async with deployment(server, tmp_path) as dep:
            wiki = await dep.new_wiki("away")
            job_id = await dep.submit_ok(wiki, _batch("wiki/g.md"))
            await dep.wait(job_id)
            server.stop()
            client = dep.as_(None, raise_app_exceptions=False)
            down = await dep.submit(wiki, _batch("wiki/h.md"), client=client)
            expect_error(down, 503, "STORAGE_UNAVAILABLE")
            assert down.headers["retry-after"] == "1"
            expect_error(await client.get(f"/v1/jobs/{job_id}"), 503, "STORAGE_UNAVAILABLE")
            server.start()
            assert (await dep.client.get(f"/v1/jobs/{job_id}")).status_code == 200
    finally:
        server.stop()


async def test_a_key_whose_submission_died_before_its_record_is_taken_over(fresh: Any) -> None:
    """A key bound by a submission that died (or lost Redis to a failover) before storing its record:
    the retry with that key queues the batch under a new job (202) instead of answering a job that will
    never exist, the dead one's queued bytes are given back, and the new job runs."""
    async with fresh() as dep:
        wiki = await dep.new_wiki("phantom")
        batch = _batch("wiki/p.md")
        digest = fingerprint(wiki, Batch.model_validate(batch))
        scope = f"{SINGLE_USER_ID}\x00{wiki}"
        jobs = JobStore(dep.redis, 3600, 3600)
        assert await jobs.bind_key(scope, "k", digest, "01PHANTOMJOB") == ("01PHANTOMJOB", digest)
        table, total = keys.queued(SINGLE_USER_ID)  # the dead submission had claimed its bytes too
        await dep.redis.hset(table, "01PHANTOMJOB", 1000)  # type: ignore[misc]
        await dep.redis.incrby(total, 1000)
        answer = await dep.submit(wiki, batch, headers={"Idempotency-Key": "k"})
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["job_id"]
        assert job_id != "01PHANTOMJOB"
        assert (await dep.wait(job_id))["status"] == "succeeded"
        replay = await dep.submit(wiki, batch, headers={"Idempotency-Key": "k"})
        assert replay.status_code == 200 and replay.json()["job_id"] == job_id
        assert int(await dep.redis.get(total) or 0) == 0  # the phantom's bytes were given back
        assert not await dep.redis.hexists(table, "01PHANTOMJOB")  # type: ignore[misc]


async def test_a_recorded_job_missing_from_its_queue_is_queued_by_the_retry(fresh: Any) -> None:
    """A submission cut short between its record and its queue entry: the retry with the same key puts
    that job on its queue (200, same job), and it runs."""
    async with fresh() as dep:
        wiki = await dep.new_wiki("unqueued")
        batch = _batch("wiki/q.md")
        async with dep.worker.paused():
            first = await dep.submit(wiki, batch, headers={"Idempotency-Key": "q"})
            assert first.status_code == 202, first.text
            job_id = first.json()["job_id"]
            partition = (await JobStore(dep.redis, 3600, 3600).get(job_id)).partition  # type: ignore[union-attr]
            await cancel_queued(dep.redis, job_id, partition)  # as if the enqueue never happened
            replay = await dep.submit(wiki, batch, headers={"Idempotency-Key": "q"})
            assert replay.status_code == 200 and replay.json()["job_id"] == job_id
        assert (await dep.wait(job_id))["status"] == "succeeded"
