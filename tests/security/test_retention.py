"""Finding 3 (medium): batch bodies stay in Redis only while needed; queued bytes per principal are capped."""

from __future__ import annotations

from collections.abc import Iterator

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
    and a minute once the plan is committed; a failed one keeps no body, and a minute once read."""
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
        assert job["status"] == "failed" and job["dry_run"] is True
        raw, ttl = _raw(secured, job["job_id"])
        assert len(raw) < 4096 and 0 < ttl <= 60


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
