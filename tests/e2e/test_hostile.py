"""Hostile input is answered with a 4xx and the contract's error object: never a 500, never a trace."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.service import Service


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One deployment for the module, with a wiki named hostile."""
    service = Service(tmp_path_factory.mktemp("hostile"), WIKIQ_MAX_BODY_BYTES="1048576").start(workers=1)
    service.create_wiki("hostile")
    yield service
    service.stop()


def _assert_error(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "index"}
    assert body["error"]["code"] == code
    assert "Traceback" not in answer.text and 'File "' not in answer.text


BATCHES = "/v1/wikis/hostile/batches"
JSON = {"content-type": "application/json"}

RAW_BODIES = [
    pytest.param(b"{", id="truncated"),
    pytest.param(b"not json", id="not-json"),
    pytest.param(b"", id="empty"),
    pytest.param(b"[]", id="array"),
    pytest.param(b"null", id="null"),
    pytest.param(b'{"message": "m", "edits": "x"}', id="edits-not-list"),
    pytest.param(b'{"message": 5, "edits": []}', id="message-number"),
    pytest.param(b'{"message": "m", "edits": [{"op": "explode", "path": "wiki/a.md"}]}', id="unknown-op"),
    pytest.param(
        b'{"message": "m", "edits": [{"op": "create", "path": 7, "content": ""}]}', id="path-number"
    ),
    pytest.param(b'{"message": "\xff\xfe", "edits": []}', id="invalid-utf8"),
    pytest.param(
        b'{"message": "m", "edits": [{"op": "create", "path": "wiki/\\u0000.md", "content": ""}]}',
        id="nul-in-path",
    ),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deep-array"),
    pytest.param(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, id="deep-object"),
    pytest.param(b'{"message": "m", "edits": [], "extra": 1}', id="unknown-field"),
    pytest.param(
        b'{"message": "m", "edits": [{"op": "create", "path": "wiki/a.md", "content": "\\ud800"}]}',
        id="lone-surrogate",
    ),
]


@pytest.mark.parametrize("body", RAW_BODIES)
def test_malformed_bodies_are_422(svc: Service, body: bytes) -> None:
    """Malformed JSON, wrong types, invalid UTF-8, NUL, deep nesting: 422 with the error object."""
    answer = svc.client.post(BATCHES, content=body, headers=JSON)
    assert answer.status_code == 422, answer.text[:300]
    assert answer.json()["error"]["code"] in {
        "INVALID_BATCH",
        "INVALID_PATH",
        "INVALID_ENCODING",
        "BATCH_EMPTY",
    }
    assert "Traceback" not in answer.text


def test_body_over_limit_by_content_length_is_413_before_reading(svc: Service) -> None:
    """A Content-Length over the limit is refused at once with 413, without sending the body."""
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as sock:
        sock.sendall(
            b"POST "
            + BATCHES.encode()
            + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 999999999\r\n\r\n"
        )
        reply = b""
        while b"}}" not in reply:  # the answer may arrive in several segments
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        text = reply.decode()
    assert text.startswith("HTTP/1.1 413")
    assert json.loads(text.split("\r\n\r\n", 1)[1])["error"]["code"] == "BATCH_TOO_LARGE"


def test_chunked_body_over_limit_is_413(svc: Service) -> None:
    """A chunked body without Content-Length is cut off with 413 once it passes the limit."""

    def chunks() -> Iterator[bytes]:
        yield b'{"message": "m", "edits": [{"op": "create", "path": "wiki/a.md", "content": "'
        for _ in range(300):
            yield b"x" * 8192
        yield b'"}]}'

    answer = svc.client.post(BATCHES, content=chunks(), headers=JSON)
    _assert_error(answer, 413, "BATCH_TOO_LARGE")


def test_long_query_string_is_414(svc: Service) -> None:
    """A query string over 48 KiB is refused with the error object."""
    _assert_error(
        svc.client.get("/v1/wikis/hostile/pages", params={"prefix": "x" * 60_000}), 414, "INVALID_BATCH"
    )


def test_huge_headers_are_431(svc: Service) -> None:
    """Headers over 32 KiB in all are refused with the error object."""
    headers = {f"x-filler-{i}": "y" * 4000 for i in range(10)}
    _assert_error(svc.client.get("/healthz", headers=headers), 431, "INVALID_BATCH")


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/nope", 404),
        ("DELETE", "/v1/wikis", 405),
        ("PUT", BATCHES, 405),
        ("GET", "/v1/jobs/", 404),
        ("PATCH", "/v1/wikis/hostile/pages/index.md", 405),
    ],
)
def test_unknown_routes_and_methods(svc: Service, method: str, path: str, status: int) -> None:
    """Unknown routes answer 404 and wrong methods 405, both with the error object."""
    answer = svc.client.request(method, path)
    assert answer.status_code == status
    assert set(answer.json()["error"]) == {"code", "message", "index"}


@pytest.mark.parametrize(
    "path",
    [
        "/v1/wikis/hostile/pages/..%2F..%2Fetc%2Fpasswd",
        "/v1/wikis/hostile/pages/.git/config",
        "/v1/wikis/..%2Fhostile/pages",
        "/v1/wikis/hostile/pages?limit=-1",
        "/v1/wikis/hostile/pages?limit=abc",
        "/v1/wikis/hostile/pages?cursor=%%%",
        "/v1/jobs/x?wait=abc",
        "/v1/wikis/hostile/search?q=",
    ],
)
def test_odd_urls_are_4xx(svc: Service, path: str) -> None:
    """Traversal attempts and bad query values get a 4xx with the error object, never a file."""
    answer = svc.client.get(path)
    assert 400 <= answer.status_code < 500, answer.text
    assert set(answer.json()["error"]) == {"code", "message", "index"}
    assert "root:" not in answer.text


def test_service_still_works_after_the_abuse(svc: Service) -> None:
    """After all of the above, a normal batch still commits."""
    job = svc.apply(
        "hostile", {"message": "ok", "edits": [{"op": "create", "path": "wiki/ok.md", "content": "ok"}]}
    )
    assert job["status"] == "succeeded"
