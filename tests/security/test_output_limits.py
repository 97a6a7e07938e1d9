"""Finding 1 (high): a small batch must not build a huge result. Limits count what a batch produces."""

from __future__ import annotations

import pytest

from tests.e2e.service import Service
from tests.security.conftest import as_
from worker.engine import DictHead, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Create, Limits, Overwrite, Replace

MIB = 1024 * 1024


def _bomb(path: str) -> list[dict[str, object]]:
    """The 776-byte attack: 100 bytes, then three replace_all of "a" by 100 "a"s (100 B -> 100 MB)."""
    grow = {"op": "replace", "path": path, "old": "a", "new": "a" * 100, "replace_all": True}
    return [{"op": "create", "path": path, "content": "a" * 100}, grow, grow, grow]


def test_replace_that_multiplies_a_page_is_refused_before_it_is_built() -> None:
    """The third replace_all would make a 100 MB page: BATCH_TOO_LARGE at index 3, with the sizes."""
    edits = [Create(**e) if e["op"] == "create" else Replace(**e) for e in _bomb("wiki/bomb.md")]  # type: ignore[arg-type]
    with pytest.raises(BatchRejected) as refused:
        preflight(DictHead({}), edits)
    assert refused.value.code == "BATCH_TOO_LARGE" and refused.value.index == 3
    assert "100000000" in refused.value.message and "split" in refused.value.message


def test_total_new_content_of_a_batch_is_bounded() -> None:
    """Files each under the file limit, together over the output limit: refused where they cross it."""
    limits = Limits(max_file_bytes=MIB, max_output_bytes=3 * MIB)
    page = "x" * (MIB - 10)
    head = DictHead({f"wiki/{i}.md": b"a" for i in range(5)})
    edits = [
        Overwrite(
            op="overwrite", path=f"wiki/{i}.md", content=page, expected_version=head.version(f"wiki/{i}.md")
        )
        for i in range(5)
    ]
    with pytest.raises(BatchRejected) as refused:
        preflight(head, edits, limits=limits)
    assert refused.value.code == "BATCH_TOO_LARGE" and refused.value.index == 3


def test_rewriting_one_file_many_times_counts_it_once() -> None:
    """Chained edits of one path hold only its latest content: many overwrites of a page stay in limits."""
    limits = Limits(max_file_bytes=MIB, max_output_bytes=2 * MIB)
    head = DictHead({"wiki/a.md": b"a"})
    version = head.version("wiki/a.md")
    edits = [
        Overwrite(op="overwrite", path="wiki/a.md", content=str(i) * (MIB - 1), expected_version=version)
        for i in range(8)
    ]
    plan = preflight(head, edits, limits=limits)
    assert plan.changes["wiki/a.md"] is not None and len(plan.changes["wiki/a.md"].data or b"") == MIB - 1


def test_the_776_byte_batch_fails_and_writes_nothing(secured: Service) -> None:
    """Through the API: the job fails BATCH_TOO_LARGE at edit 3, the head does not move."""
    with as_(secured, "dave") as client:
        before = client.get("/v1/wikis/sec/commits", params={"limit": 1}).json()["commits"][0]["commit"]
        body = {"message": "bomb", "edits": _bomb("wiki/bomb.md")}
        assert len(client.post("/v1/wikis/sec/batches", json=body).request.content) < 1000
        accepted = client.post("/v1/wikis/sec/batches", json=body)
        assert accepted.status_code == 202, accepted.text
        job = client.get(f"/v1/jobs/{accepted.json()['job_id']}", params={"wait": 30}).json()
        assert job["status"] == "failed", job
        assert job["error"]["code"] == "BATCH_TOO_LARGE" and job["error"]["index"] == 3
        after = client.get("/v1/wikis/sec/commits", params={"limit": 1}).json()["commits"][0]["commit"]
        assert after == before
        assert client.get("/v1/wikis/sec/pages/wiki/bomb.md").status_code == 404


def test_one_file_over_the_file_limit_is_refused_at_submission(secured: Service) -> None:
    """A create whose content alone is over WIKIQ_MAX_FILE_BYTES is 413 with its index, nothing queued."""
    with as_(secured, "dave") as client:
        small = {"op": "create", "path": "wiki/ok.md", "content": "ok"}
        big = {"op": "create", "path": "wiki/big.md", "content": "b" * (8 * MIB + 1)}
        answer = client.post("/v1/wikis/sec/batches", json={"message": "m", "edits": [small, big]})
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "BATCH_TOO_LARGE"


def test_search_answers_carry_bounded_lines(secured: Service) -> None:
    """A match in a very long line comes back cut around the match, not whole."""
    line = "z" * 300_000 + " needle " + "z" * 300_000 + "\n"
    with as_(secured, "dave") as client:
        created = client.post(
            "/v1/wikis/sec/batches",
            json={"message": "long", "edits": [{"op": "create", "path": "wiki/long.md", "content": line}]},
        )
        assert (
            client.get(f"/v1/jobs/{created.json()['job_id']}", params={"wait": 30}).json()["status"]
            == "succeeded"
        )
        found = client.get("/v1/wikis/sec/search", params={"q": "needle"}).json()["matches"]
    assert len(found) == 1 and "needle" in found[0]["text"] and len(found[0]["text"]) <= 1000
    assert found[0]["truncated"] is True
