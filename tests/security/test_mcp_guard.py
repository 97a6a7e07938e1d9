"""Finding 2 (medium): /mcp authenticates itself and never connects where request headers say."""

from __future__ import annotations

import socket
import threading
import time

import httpx

from tests.e2e.service import Service
from tests.security.conftest import TOKENS
from worker.redis_server import free_port

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


def _call(tool: str, **arguments: object) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def test_bad_or_missing_token_is_refused_before_any_tool_list(secured: Service) -> None:
    """initialize and tools/list answer 401 with the error object for no token and for an unknown one."""
    for headers in ({}, {"authorization": "Bearer not-a-token"}, {"authorization": "Basic eDp5"}):
        for body in (INIT, LIST):
            answer = httpx.post(
                f"{secured.url}/mcp", json=body, headers={**MCP_HEADERS, **headers}, timeout=30
            )
            assert answer.status_code == 401, answer.text
            assert answer.json()["error"]["code"] == "UNAUTHORIZED"
            assert answer.headers["www-authenticate"] == "Bearer"
        stream = httpx.get(f"{secured.url}/mcp", headers={**MCP_HEADERS, **headers}, timeout=30)
        assert stream.status_code == 405 and stream.headers["allow"] == "POST"  # no stream to open at all


def test_a_forged_host_header_makes_the_server_connect_nowhere(secured: Service) -> None:
    """A tool call with Host and X-Forwarded-Proto naming another port: no connection reaches that port,
    and the answer is the real one (the tools call the service in process)."""
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    listener.settimeout(0.2)
    connections: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connections.append(listener.accept())
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    headers = {
        **MCP_HEADERS,
        "authorization": f"Bearer {TOKENS['reader']}",
        "host": f"127.0.0.1:{port}",
        "x-forwarded-proto": "https",
    }
    try:
        answer = httpx.post(f"{secured.url}/mcp", json=_call("list_wikis"), headers=headers, timeout=30)
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert not result.get("isError"), result
    assert [w["id"] for w in result["structuredContent"]["wikis"]] == ["sec"]
    assert connections == []


def test_tools_act_as_the_token_holder(secured: Service) -> None:
    """A tool call acts with the caller's rights: the reader's write_batch is refused FORBIDDEN."""
    headers = {**MCP_HEADERS, "authorization": f"Bearer {TOKENS['reader']}"}
    edit = {"op": "create", "path": "wiki/x.md", "content": "x"}
    answer = httpx.post(
        f"{secured.url}/mcp",
        json=_call("write_batch", wiki="sec", message="m", edits=[edit]),
        headers=headers,
        timeout=30,
    )
    result = answer.json()["result"]
    assert result["isError"] is True and result["structuredContent"]["error"]["code"] == "FORBIDDEN"


def test_requests_in_flight_per_principal_are_bounded(stalled: Service) -> None:
    """With WIKIQ_MCP_MAX_CONCURRENT=1, a second request while a long-poll is open is 429 RATE_LIMITED."""
    headers = {**MCP_HEADERS, "authorization": f"Bearer {TOKENS['dave']}"}
    with httpx.Client(base_url=stalled.url, headers={"authorization": f"Bearer {TOKENS['dave']}"}) as api:
        queued = api.post(
            "/v1/wikis/sec/batches",
            json={"message": "m", "edits": [{"op": "create", "path": "wiki/q.md", "content": "q"}]},
        ).json()["job_id"]
        done = threading.Event()
        first: list[httpx.Response] = []

        def long_poll() -> None:
            while True:  # it may lose the slot to one of the asks below: then it asks again
                answer = httpx.post(
                    f"{stalled.url}/mcp",
                    json=_call("get_job", job_id=queued, wait_seconds=20),
                    headers=headers,
                    timeout=60,
                )
                if answer.status_code != 429:
                    break
            first.append(answer)
            done.set()

        thread = threading.Thread(target=long_poll)
        thread.start()
        try:
            # the long-poll is in flight once the server has seen it: ask again until the limit bites,
            # for as long as the long-poll lasts (each ask is a real request; none sleeps)
            second = None
            deadline = time.monotonic() + 15
            while not done.is_set() and time.monotonic() < deadline:
                second = httpx.post(f"{stalled.url}/mcp", json=LIST, headers=headers, timeout=30)
                if second.status_code == 429:
                    break
            assert second is not None and second.status_code == 429, second and second.text[:300]
            assert second.json()["error"]["code"] == "RATE_LIMITED"
            other = httpx.post(
                f"{stalled.url}/mcp",
                json=LIST,
                headers={**MCP_HEADERS, "authorization": f"Bearer {TOKENS['reader']}"},
                timeout=30,
            )
            assert other.status_code == 200  # another principal is not affected
        finally:
            api.delete(f"/v1/jobs/{queued}")  # the job is finished: the long-poll answers now
            thread.join()
        assert first[0].status_code == 200
