"""Finding 8 (low), the schema's edges: ``level`` is an integer in the schema, yet a JSON ``5.0`` (an integer
by JSON Schema's own rule: a number without a fraction) was refused; and answers the server gives (414 for
any path, 422 for a redelivery without a webhook) were not all declared in the OpenAPI spec."""

from __future__ import annotations

from typing import Any

from tests.e2e.service import Service
from tests.security.conftest import as_


def _page(service: Service, path: str) -> dict[str, Any]:
    with as_(service, "dave") as dave:
        answer = dave.get(f"/v1/wikis/sec/pages/{path}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _apply(service: Service, *edits: dict[str, Any]) -> dict[str, Any]:
    with as_(service, "dave") as dave:
        answer = dave.post("/v1/wikis/sec/batches", json={"message": "m", "edits": list(edits)})
        assert answer.status_code == 202, answer.text
        job = dave.get(f"/v1/jobs/{answer.json()['job_id']}", params={"wait": 30}).json()
    assert job["status"] == "succeeded", job["error"]
    return dict(job)


def test_whole_numbers_written_with_a_fraction_are_integers(secured: Service) -> None:
    """``level: 5.0`` and ``expected_count: 2.0`` are 5 and 2; ``5.5``, ``true`` and ``"5"`` stay refused
    (422 INVALID_BATCH, the edit's index named)."""
    _apply(secured, {"op": "create", "path": "wiki/levels.md", "content": "# Top\nx x\n"})
    version = _page(secured, "wiki/levels.md")["version"]
    _apply(
        secured,
        {
            "expected_version": version,
            "op": "insert_section_after",
            "path": "wiki/levels.md",
            "heading": "Top",
            "new_heading": "Deep",
            "level": 5.0,
        },
    )
    version = _page(secured, "wiki/levels.md")["version"]
    _apply(
        secured,
        {
            "expected_version": version,
            "op": "replace",
            "path": "wiki/levels.md",
            "old": "x",
            "new": "y",
            "replace_all": True,
            "expected_count": 2.0,
        },
    )
    assert _page(secured, "wiki/levels.md")["content"] == "# Top\ny y\n##### Deep\n"
    with as_(secured, "dave") as dave:
        for level in (5.5, True, "5", 7.0):
            edit = {
                "op": "insert_section_after",
                "path": "wiki/levels.md",
                "heading": "Top",
                "new_heading": "N",
            }
            body = {
                "message": "m",
                "edits": [
                    {"op": "append", "path": "wiki/levels.md", "content": ""},
                    {**edit, "level": level},
                ],
            }
            answer = dave.post("/v1/wikis/sec/batches", json=body)
            assert answer.status_code == 422, (level, answer.text)
            assert answer.json()["error"]["code"] == "INVALID_BATCH" and answer.json()["error"]["index"] == 1


def test_every_status_answered_is_declared(secured: Service) -> None:
    """A query string over the limit on every operation's path, and a redelivery of a job without a
    webhook: each answer's status is among those the spec declares for that operation."""
    spec = secured.client.get("/openapi.json").json()
    long_query = {"q": "x" * (49 * 1024)}
    seen = []
    with as_(secured, "dave") as dave:
        for path, operations in spec["paths"].items():
            concrete = (
                path.replace("{wiki}", "sec").replace("{job_id}", "none").replace("{path}", "wiki/a.md")
            )
            for method in operations:
                answer = dave.request(method.upper(), concrete, params=long_query)
                assert answer.status_code == 414, (method, path, answer.status_code)
                seen.append((method, path, answer.status_code))
        job = dave.post(
            "/v1/wikis/sec/batches",
            json={"message": "m", "edits": [{"op": "create", "path": "wiki/nohook.md", "content": ""}]},
        ).json()["job_id"]
        dave.get(f"/v1/jobs/{job}", params={"wait": 30})
        answer = dave.post(f"/v1/jobs/{job}/webhook/redeliver")
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "INVALID_BATCH", answer.text
        seen.append(("post", "/v1/jobs/{job_id}/webhook/redeliver", 422))
    undeclared = [(m, p, s) for m, p, s in seen if str(s) not in spec["paths"][p][m]["responses"]]
    assert undeclared == []
    assert (
        "webhook"
        in spec["paths"]["/v1/jobs/{job_id}/webhook/redeliver"]["post"]["responses"]["422"]["description"]
    )
