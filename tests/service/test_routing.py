"""Health, routing and the error object in process: 404 and 405 (with ``Allow``), bad query values, and no
stack trace ever, even when something breaks inside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.service.harness import Deployment, deployment, expect_error, expect_error_shape
from worker.redis_server import RedisServer


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def wiki(dep: Deployment) -> str:
    """The module's one wiki, ``w``."""
    await dep.create_wiki("w")
    return "w"


@pytest.mark.both  # what a probe sees of a real server
async def test_healthz_and_readyz(dep: Deployment) -> None:
    """/healthz answers exactly {"status": "ok"}; /readyz answers 200 with every check ok."""
    health = await dep.client.get("/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    ready = await dep.client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ok", "redis": "ok", "data_dir": "ok"}


async def test_readyz_is_503_without_redis_and_recovers(tmp_path: Path) -> None:
    """/readyz answers 503 naming Redis while it is down and 200 again once it is back; /healthz stays 200."""
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    try:
        async with deployment(server, tmp_path) as alone:
            server.stop()
            down = await alone.client.get("/readyz")
            assert down.status_code == 503, down.text
            assert down.json()["status"] == "unavailable"
            assert down.json()["redis"] != "ok" and down.json()["data_dir"] == "ok"
            assert (await alone.client.get("/healthz")).json() == {"status": "ok"}
            server.start()
            up = await alone.client.get("/readyz")
            assert up.status_code == 200, up.text
    finally:
        server.stop()


async def test_readyz_is_503_when_the_data_dir_is_gone(fresh: Any) -> None:
    """/readyz answers 503 naming the data directory when it cannot be written."""
    async with fresh() as alone:
        moved = alone.data.with_name("data-away")
        alone.data.rename(moved)
        try:
            answer = await alone.client.get("/readyz")
        finally:
            moved.rename(alone.data)
        assert answer.status_code == 503, answer.text
        assert answer.json()["data_dir"].startswith("not writable") and answer.json()["redis"] == "ok"
        assert (await alone.client.get("/readyz")).status_code == 200


@pytest.mark.parametrize("url", ["/nope", "/v1", "/v1/nope", "/v1/wikis/x/nope", "/v1/jobs", "/v1/jobs/"])
async def test_unknown_route_is_404_error_object(dep: Deployment, url: str) -> None:
    """An unknown route answers 404 with the contract's error object."""
    expect_error_shape(await dep.client.get(url), 404)


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("POST", "/healthz", {"GET"}),
        ("DELETE", "/readyz", {"GET"}),
        ("PUT", "/v1/wikis", {"GET", "POST"}),
        ("DELETE", "/v1/wikis", {"GET", "POST"}),
        ("GET", "/v1/wikis/x/batches", {"POST"}),
        ("POST", "/v1/jobs/x", {"GET", "DELETE"}),
        ("PATCH", "/v1/wikis/x/pages/index.md", {"GET"}),
        ("GET", "/v1/jobs/x/webhook/redeliver", {"POST"}),
    ],
)
async def test_wrong_method_is_405_with_allow(
    dep: Deployment, method: str, url: str, allowed: set[str]
) -> None:
    """A known route with the wrong method answers 405, the error object, and Allow naming its methods."""
    answer = await dep.client.request(method, url)
    expect_error_shape(answer, 405)
    named = {m.strip() for m in answer.headers["allow"].split(",") if m.strip()}
    assert named - {"HEAD"} == allowed, answer.headers["allow"]


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("PUT", "/v1/wikis"),
        ("DELETE", "/v1/wikis"),
        ("POST", "/healthz"),
        ("GET", "/v1/wikis/x/batches"),
        ("POST", "/v1/jobs/x"),
        ("PATCH", "/v1/wikis/x/pages/index.md"),
    ],
)
async def test_wrong_method_is_405_error_object(dep: Deployment, method: str, url: str) -> None:
    """Whatever its Allow header says, a 405 carries the error object and an Allow header."""
    answer = await dep.client.request(method, url)
    expect_error_shape(answer, 405)
    assert "allow" in answer.headers


@pytest.mark.parametrize(
    ("url", "params"),
    [
        ("/v1/wikis/{w}/pages", {"limit": 0}),
        ("/v1/wikis/{w}/pages", {"limit": "many"}),
        ("/v1/wikis/{w}/pages", {"limit": 10_001}),
        ("/v1/wikis/{w}/commits", {"limit": -1}),
        ("/v1/wikis/{w}/commits", {"limit": 1001}),
        ("/v1/wikis/{w}/jobs", {"limit": 0}),
        ("/v1/wikis/{w}/jobs", {"limit": 501}),
        ("/v1/wikis/{w}/jobs", {"status": "done"}),
        ("/v1/wikis/{w}/search", {}),
        ("/v1/wikis/{w}/search", {"q": "x", "limit": 0}),
        ("/v1/jobs/x", {"wait": -1}),
        ("/v1/jobs/x", {"wait": "abc"}),
    ],
)
async def test_bad_query_parameters_answer_422_error_object(
    dep: Deployment, wiki: str, url: str, params: dict[str, Any]
) -> None:
    """Out-of-range, mistyped or missing query parameters answer 422 INVALID_BATCH."""
    expect_error(await dep.client.get(url.format(w=wiki), params=params), 422, "INVALID_BATCH")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/wikis/w/pages/..%2F..%2Fetc%2Fpasswd",
        "/v1/wikis/w/pages/.git/config",
        "/v1/wikis/..%2Fw/pages",
        "/v1/wikis/w/pages?cursor=%%%",
        "/v1/wikis/w/search?q=",
    ],
)
async def test_odd_urls_are_4xx_error_object(dep: Deployment, wiki: str, path: str) -> None:
    """Traversal attempts and bad query values get a 4xx with the error object, never a file."""
    assert wiki == "w"
    answer = await dep.client.get(path)
    assert 400 <= answer.status_code < 500, answer.text
    expect_error_shape(answer, answer.status_code)
    assert "root:" not in answer.text


async def test_an_internal_failure_answers_the_error_object_without_details(dep: Deployment) -> None:
    """A repository broken behind wikiq's back fails reads with the error object: no trace, no details."""
    wiki = await dep.new_wiki("broken")
    (dep.repo(wiki) / "refs" / "heads" / "main").write_text("zz\n")  # not an object id
    client = dep.as_(None, raise_app_exceptions=False)  # let the app's own 500 handler answer
    for url in (f"/v1/wikis/{wiki}/pages/index.md", f"/v1/wikis/{wiki}/pages", f"/v1/wikis/{wiki}/commits"):
        answer = await client.get(url)
        assert answer.status_code >= 400, answer.text
        error = expect_error_shape(answer, answer.status_code)
        assert "fromhex" not in error["message"] and "Error" not in error["message"], error
    healthy = await dep.new_wiki("healthy")
    assert (await dep.client.get(f"/v1/wikis/{healthy}/pages")).status_code == 200


async def test_openapi_document_is_served(dep: Deployment) -> None:
    """/openapi.json names every operation of the contract by a stable operationId."""
    answer = await dep.client.get("/openapi.json")
    assert answer.status_code == 200
    spec = answer.json()
    operations = {
        op["operationId"] for path in spec["paths"].values() for op in path.values() if isinstance(op, dict)
    }
    assert {
        "healthz",
        "readyz",
        "create_wiki",
        "list_wikis",
        "list_pages",
        "read_page",
        "list_commits",
        "search",
        "submit_batch",
        "get_job",
        "cancel_job",
        "redeliver_webhook",
        "list_jobs",
    } <= operations
