"""The programs in examples/, each run as its README says against real processes (Redis, the API, a
worker): the CLI submits examples/batch.json, the stdlib webhook receiver verifies a real delivery and
refuses forged and stale ones, and the MCP client lists the tools and the wikis.

Only the address changes: the service listens on a free port, and the receiver takes port 0."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from standardwebhooks import Webhook

from tests.e2e.service import TEST_SECRET, Service

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent


def clean_env(**env: str) -> dict[str, str]:
    """This process's environment without any WIKIQ_* variable (a developer's token), plus ``env``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("WIKIQ_")}, **env}


class Lines:
    """A running process's output (stdout and stderr), read line by line as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, prefix: str, timeout: float = 30) -> str:
        """The next line starting with ``prefix`` (asserting it comes within ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no line starting {prefix!r} in {timeout} s: {self.seen}"
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, f"the process ended without printing {prefix!r}: {self.seen}"
            self.seen.append(line)
            if line.startswith(prefix):
                return line


@contextmanager
def receiver() -> Iterator[tuple[str, Lines]]:
    """examples/webhook_receiver.py on a free port, with the test service's secret: its URL and output."""
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "webhook_receiver.py"), "0"],
        cwd=ROOT,
        env=clean_env(WIKIQ_WEBHOOK_SECRET=TEST_SECRET, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = Lines(process)
        url = lines.wait_for("listening on ").removeprefix("listening on ")
        yield url, lines
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_cli_submits_the_example_batch(svc: Service) -> None:
    """`wikiq submit <wiki> examples/batch.json --wait` lands the batch's three edits as one commit."""
    svc.create_wiki("ex-cli")
    done = subprocess.run(
        [str(BIN / "wikiq"), "submit", "ex-cli", "examples/batch.json", "--wait"],
        cwd=ROOT,
        env=clean_env(WIKIQ_URL=svc.url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    batch = json.loads((EXAMPLES / "batch.json").read_text(encoding="utf-8"))
    assert [edit["op"] for edit in batch["edits"]] == ["create", "create", "append"]  # no version needed
    [(commit, _job, paths)] = svc.landed("ex-cli")
    assert paths == {"wiki/redis.md", "wiki/valkey.md", "log.md"}
    assert commit[:7] in done.stdout
    for edit in batch["edits"][:2]:
        assert svc.page("ex-cli", edit["path"])["content"] == edit["content"]
    assert svc.page("ex-cli", "log.md")["content"].endswith(batch["edits"][2]["content"])
    assert svc.git("ex-cli", "log", "-1", "--format=%s", "main").strip() == batch["message"]


def test_the_receiver_verifies_a_delivery_and_rejects_forgeries(svc: Service) -> None:
    """A wrong signature and a stale one are 401 and print no event; wikiq's delivery of a batch's webhook
    is verified and printed with the job's commit."""
    svc.create_wiki("ex-hook")
    body = b'{"type": "batch.succeeded", "data": {"job_id": "forged", "result": {"commit": "0"}}}'
    now = datetime.now(UTC)
    stale = now - timedelta(minutes=6)
    forged = {
        "webhook-id": "msg_forged",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook("whsec_" + "QUJD" * 8).sign("msg_forged", now, body),  # another key
    }
    replayed = {  # signed with the right key, six minutes ago
        "webhook-id": "msg_forged",
        "webhook-timestamp": str(int(stale.timestamp())),
        "webhook-signature": Webhook(TEST_SECRET).sign("msg_forged", stale, body),
    }
    with receiver() as (url, lines):
        for headers in (forged, replayed):
            answer = httpx.post(url, content=body, headers={"content-type": "application/json", **headers})
            assert answer.status_code == 401
            lines.wait_for("rejected: ")
        batch = json.loads((EXAMPLES / "batch.json").read_text(encoding="utf-8"))
        submitted = svc.submit("ex-hook", {**batch, "webhook": {"url": url}})
        assert submitted.status_code == 202, submitted.text
        job = svc.wait(submitted.json()["job_id"])
        assert job["status"] == "succeeded", job
        line = lines.wait_for("verified ")
    assert line == f"verified batch.succeeded job {job['job_id']} commit {job['result']['commit']}"
    assert [seen for seen in lines.seen if "verified" in seen] == [line]  # the forgeries printed no event


def test_the_mcp_client_lists_the_tools_and_the_wikis(svc: Service) -> None:
    """examples/mcp_client.py, pointed at the service's /mcp, prints the tools and list_wikis' answer."""
    svc.create_wiki("ex-mcp")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "mcp_client.py"), f"{svc.url}/mcp"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    first, rest = done.stdout.split("\n", 1)
    assert {"list_wikis", "read_pages", "check_batch", "write_batch"} <= set(
        first.removeprefix("tools: ").split(", ")
    )
    answer = json.loads(rest.removeprefix("list_wikis: "))
    assert "ex-mcp" in [wiki["id"] for wiki in answer["wikis"]]
