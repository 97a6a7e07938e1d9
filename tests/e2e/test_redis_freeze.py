"""A Redis that stops answering (its connections frozen by a proxy, nothing closed) is a 503 from the API,
and ``/readyz`` says so within its own short timeout; once Redis answers again, so does everything."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.e2e.proxy import FreezableProxy
from tests.e2e.service import Service

ACCEPT_TIMEOUT = 1.0  # WIKIQ_ACCEPT_TIMEOUT_SECONDS: the API's Redis replies are bounded 0.5 s past it
REPLY_BOUND = ACCEPT_TIMEOUT + 0.5  # worker.jobs.connection.reply_timeout
# /readyz answers within its own 1 s; a submission or a read within one reply bound (what a submission may
# have stored is taken back in the background; a new connection sends nothing before its command). Each
# client bound adds a second of slack for a loaded machine; a hang is
# what they catch.
READY_BOUND = 2.0
REQUEST_BOUND = REPLY_BOUND + 1


def _batch(n: int) -> dict[str, object]:
    return {"message": f"batch {n}", "edits": [{"op": "create", "path": f"wiki/p{n}.md", "content": "x\n"}]}


def test_a_frozen_redis_is_a_503_not_a_hang(tmp_path: Path) -> None:
    service = Service(tmp_path, WIKIQ_ACCEPT_TIMEOUT_SECONDS=str(ACCEPT_TIMEOUT))
    port = urlsplit(service.redis.url).port
    assert port is not None
    proxy = FreezableProxy(port)
    service.env["WIKIQ_REDIS_URL"] = proxy.url  # the API and the worker talk to Redis through the proxy
    try:
        service.start(workers=1, senders=0)
        service.create_wiki("frozen")
        done = service.apply("frozen", _batch(0))
        assert done["status"] == "succeeded"
        with httpx.Client(base_url=service.url, timeout=REQUEST_BOUND) as api:
            proxy.freeze()
            ready = api.get("/readyz", timeout=READY_BOUND)
            assert ready.status_code == 503, ready.text
            assert ready.json()["redis"].startswith("unreachable"), ready.text
            submitted = api.post("/v1/wikis/frozen/batches", json=_batch(1))
            assert submitted.status_code == 503, submitted.text
            assert submitted.json()["error"]["code"] == "STORAGE_UNAVAILABLE"
            read = api.get(f"/v1/jobs/{done['job_id']}")
            assert read.status_code == 503, read.text
            listed = api.get("/v1/wikis/frozen/jobs")
            assert listed.status_code == 503, listed.text

            proxy.thaw()
            deadline = time.monotonic() + 30
            while api.get("/readyz", timeout=READY_BOUND).status_code != 200:
                assert time.monotonic() < deadline, "the API did not become ready again"
                time.sleep(0.1)  # waiting for the API's Redis connections to be replaced
        again = service.apply("frozen", _batch(2))
        assert again["status"] == "succeeded"
    finally:
        proxy.thaw()
        service.stop()
        proxy.close()
