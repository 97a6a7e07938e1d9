"""Finding 3 (medium): batch bodies stay in Redis only while needed; queued bytes per principal are capped.

Issue 36, finding 7 (medium): what finished jobs keep in Redis counts against their principal, within
``WIKIQ_MAX_RETAINED_BYTES`` (the oldest dropped first), and a failed job keeps a bounded summary."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
import redis as redis_sync

from tests.e2e.service import Service
from tests.security.conftest import as_, deployment, fsck_every_wiki

MIB = 1024 * 1024


def _raw(service: Service, job_id: str) -> tuple[bytes, int]:
    client = redis_sync.Redis.from_url(service.redis.url)
    try:
        raw = client.get(f"wikiq:job:{job_id}")
        ttl = client.ttl(f"wikiq:job:{job_id}")
    finally:
        client.close()
    assert raw is not None
    return raw, int(ttl)


def test_a_finished_job_keeps_no_body(secured: Service) -> None:
    """A 1 MiB batch: once the job finished, its Redis record is small and holds none of the content,
    while the status page still lists its ops and paths."""
    content = "secret-body-" + "x" * MIB
    with as_(secured, "dave") as client:
        answer = client.post(
            "/v1/wikis/sec/batches",
            json={
                "message": "big",
                "edits": [{"op": "create", "path": "wiki/big-body.md", "content": content}],
            },
        )
        job = client.get(f"/v1/jobs/{answer.json()['job_id']}", params={"wait": 30}).json()
        assert job["status"] == "succeeded"
        raw, _ = _raw(secured, job["job_id"])
        assert len(raw) < 4096 and b"secret-body" not in raw
        assert b"wiki/big-body.md" in raw  # the summary: ops and paths
        page = client.get(f"/ui/jobs/{job['job_id']}")
        assert page.status_code == 200 and "wiki/big-body.md" in page.text


def test_a_dry_run_keeps_its_body_only_as_a_plan(secured: Service) -> None:
    """A succeeded 1 MiB dry run keeps its body as its plan, for the dry-run retention (10 minutes) at most,
    and a minute once the plan is committed; a failed one keeps it too, to be amended, for the same
    retention, even once read."""
    edits = [{"op": "create", "path": "wiki/dry-plan.md", "content": "d" * MIB}]
    with as_(secured, "dave") as client:
        answer = client.post(
            "/v1/wikis/sec/batches", json={"message": "dry", "edits": edits, "dry_run": True}
        )
        job = client.get(f"/v1/jobs/{answer.json()['job_id']}", params={"wait": 30}).json()
        assert job["status"] == "succeeded" and job["result"]["plan"]
        raw, ttl = _raw(secured, job["job_id"])
        assert len(raw) > MIB and 60 < ttl <= 600
        committed = client.post("/v1/wikis/sec/batches", json={"plan": job["result"]["plan"]})
        assert committed.status_code == 202, committed.text
        assert 0 < _raw(secured, job["job_id"])[1] <= 60
        assert (
            client.get(f"/v1/jobs/{committed.json()['job_id']}", params={"wait": 30}).json()["status"]
            == "succeeded"
        )
        bad = [{"op": "delete", "path": "wiki/absent.md", "expected_version": "0" * 40}, *edits]
        answer = client.post("/v1/wikis/sec/batches", json={"message": "dry", "edits": bad, "dry_run": True})
        job = client.get(f"/v1/jobs/{answer.json()['job_id']}", params={"wait": 30}).json()
        assert job["status"] == "failed" and job["dry_run"] is True and job["error"]["plan"]
        raw, ttl = _raw(secured, job["job_id"])
        assert len(raw) > MIB and 60 < ttl <= 600


def test_queued_bytes_per_principal_are_capped(stalled: Service) -> None:
    """With 200 000 bytes allowed per principal and no worker: 429 once full, 413 for one batch that can
    never fit, and room again once a waiting job is cancelled. Another principal is not affected."""
    batch = {"message": "q", "edits": [{"op": "create", "path": "wiki/q.md", "content": "q" * 90_000}]}
    with as_(stalled, "dave") as dave, as_(stalled, "carol") as carol:
        first = dave.post("/v1/wikis/sec/batches", json=batch)
        second = dave.post("/v1/wikis/sec/batches", json=batch)
        assert first.status_code == 202 and second.status_code == 202
        third = dave.post("/v1/wikis/sec/batches", json=batch)
        assert third.status_code == 429, third.text
        assert (
            third.json()["error"]["code"] == "RATE_LIMITED" and "waiting" in third.json()["error"]["message"]
        )
        assert "retry-after" in third.headers
        huge = {"message": "h", "edits": [{"op": "create", "path": "wiki/h.md", "content": "h" * 300_000}]}
        assert dave.post("/v1/wikis/sec/batches", json=huge).status_code == 413
        carols = {
            "message": "c",
            "edits": [{"op": "create", "path": "wiki/team-a/c.md", "content": "c" * 90_000}],
        }
        carol_job = carol.post("/v1/wikis/sec/batches", json=carols)
        assert carol_job.status_code == 202
        assert dave.delete(f"/v1/jobs/{first.json()['job_id']}").status_code == 200
        fourth = dave.post("/v1/wikis/sec/batches", json=batch)
        assert fourth.status_code == 202, fourth.text
        for job in (second, fourth):
            assert dave.delete(f"/v1/jobs/{job.json()['job_id']}").status_code == 200
        assert carol.delete(f"/v1/jobs/{carol_job.json()['job_id']}").status_code == 200


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with a worker and 300 000 queued bytes allowed per principal."""
    service = deployment(tmp_path_factory.mktemp("capped"), workers=1, WIKIQ_MAX_QUEUED_BYTES="300000")
    yield service
    service.stop()
    fsck_every_wiki(service)


def test_kept_dry_run_results_count_against_the_queued_bytes(capped: Service) -> None:
    """Dry runs whose results Redis keeps (diffs of ~80 KB each, read only by another principal) fill the
    submitter's queued-bytes allowance: the next submission is 429 naming the kept results, while another
    principal may still submit."""
    page = "".join(f"line {n} of a page with a long diff\n" for n in range(2500))
    batch = {
        "message": "dry",
        "dry_run": True,
        "edits": [{"op": "create", "path": "wiki/k.md", "content": page}],
    }
    with as_(capped, "dave") as dave, as_(capped, "reader") as reader, as_(capped, "carol") as carol:
        refused = None
        for _ in range(6):
            answer = dave.post("/v1/wikis/sec/batches", json=batch)
            if answer.status_code != 202:
                refused = answer
                break
            job = reader.get(f"/v1/jobs/{answer.json()['job_id']}", params={"wait": 30}).json()
            assert job["status"] == "succeeded" and len(job["result"]["diff"][0]["diff"]) > 80_000
        assert refused is not None and refused.status_code == 429, "kept results were not counted"
        assert "dry-run results" in refused.json()["error"]["message"]
        other = {**batch, "edits": [{**batch["edits"][0], "path": "wiki/team-a/k.md"}]}
        assert carol.post("/v1/wikis/sec/batches", json=other).status_code == 202


RETAINED_CAP = 4 * MIB


@pytest.fixture(scope="module")
def retaining(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with a worker, the default rate limit (1 200 submissions a minute) and 4 MiB of
    finished records kept per principal."""
    service = deployment(
        tmp_path_factory.mktemp("retaining"),
        workers=1,
        WIKIQ_RATE_LIMIT_SUBMISSIONS="1200",
        WIKIQ_RATE_LIMIT_WINDOW_SECONDS="60",
        WIKIQ_MAX_RETAINED_BYTES=str(RETAINED_CAP),
    )
    yield service
    service.stop()
    fsck_every_wiki(service)


def _failing(n: int, under: str = "wiki/") -> dict[str, object]:
    """A batch of about 86 KB that fails NOT_FOUND at its first edit: a 10 000-character message and 20
    appends to absent pages at paths of about 4 000 bytes."""
    segment = "s" * 240

    def path(k: int) -> str:
        return under + "/".join(f"{segment}{n:06d}{k:03d}" for _ in range(16)) + f"/p{k}.md"

    return {
        "message": "m" * 10_000,
        "edits": [{"op": "append", "path": path(k), "content": "x"} for k in range(20)],
    }


def _finished(client: httpx.Client, job_id: str) -> dict[str, object]:
    while True:
        job = client.get(f"/v1/jobs/{job_id}", params={"wait": 60}).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return dict(job)


def test_finished_records_stay_within_the_principal_cap(retaining: Service) -> None:
    """1 199 failing 86 KB jobs of one principal and a replay, its whole rate limit of a minute: Redis
    keeps at most 4 MiB of its finished records (measured with MEMORY USAGE; INFO's used_memory grows by
    no more than that and the allocator's rounding), the oldest dropped first, and a replay of a dropped
    job's idempotency key still answers that job; another principal's records are untouched, and the
    newest failed job still answers its error from a bounded record."""
    assert len(json.dumps(_failing(0))) > 86_000
    client = redis_sync.Redis.from_url(retaining.redis.url)
    try:
        with as_(retaining, "carol") as carol, as_(retaining, "dave") as dave:
            carols = []
            for n in range(3):
                answer = carol.post("/v1/wikis/sec/batches", json=_failing(n, "wiki/team-a/"))
                assert answer.status_code == 202, answer.text
                carols.append(_finished(carol, answer.json()["job_id"])["job_id"])
            kept_for_carol = client.mget([f"wikiq:job:{j}" for j in carols])
            assert all(kept_for_carol)
            used_before = int(client.info("memory")["used_memory"])
            daves = []
            for n in range(1199):  # and the replay below: the rate limit's 1 200 a minute
                key = {"idempotency-key": "first"} if n == 0 else {}
                answer = dave.post("/v1/wikis/sec/batches", json=_failing(n), headers=key)
                assert answer.status_code == 202, answer.text
                daves.append(answer.json()["job_id"])
            last = _finished(dave, daves[-1])  # one wiki's jobs finish in acceptance order
            assert last["status"] == "failed" and last["result"] is None
            assert last["error"]["code"] == "NOT_FOUND" and last["error"]["index"] == 0
            grown = int(client.info("memory")["used_memory"]) - used_before
            kept = [j for j in daves if client.exists(f"wikiq:job:{j}")]
            usage = sum(int(client.memory_usage(f"wikiq:job:{j}") or 0) for j in kept)
            assert usage <= RETAINED_CAP, f"{usage} bytes of records kept for one principal"
            # the cap counts stored bytes; the allocator rounds each value up by at most a quarter
            assert grown <= RETAINED_CAP * 3 // 2, f"Redis grew by {grown} bytes"
            assert kept == daves[-len(kept) :], "not the oldest records were dropped"
            assert len(kept) >= 100  # each failed record keeps a bounded summary, so many fit
            # a bounded summary (5 KiB) and the error: its message, and at most 8 KiB of listed failures
            assert len(client.get(f"wikiq:job:{daves[-1]}") or b"") < 24 * 1024
            page = dave.get(f"/ui/jobs/{daves[-1]}")  # its first edit's path, and how many more it had
            assert page.status_code == 200 and "and 19 more edits" in page.text
            gone = dave.get(f"/v1/jobs/{daves[0]}")
            assert gone.status_code == 404 and gone.json()["error"]["code"] == "JOB_NOT_FOUND"
            replay = dave.post(
                "/v1/wikis/sec/batches", json=_failing(0), headers={"idempotency-key": "first"}
            )
            assert replay.status_code == 200, replay.text  # the dropped job, not a new one
            assert replay.json()["job_id"] == daves[0] and replay.json()["status"] == "failed"
            assert client.mget([f"wikiq:job:{j}" for j in carols]) == kept_for_carol
            assert carol.get(f"/v1/jobs/{carols[0]}").json()["error"]["code"] == "NOT_FOUND"
    finally:
        client.close()
