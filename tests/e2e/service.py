"""A whole wikiq deployment made of real processes, for end-to-end tests.

Its own Redis-compatible server (AOF on, so a clean restart keeps the queue, fsynced as
``WIKIQ_ACCEPT_DURABILITY`` needs), one API process on a free port (``client`` talks to it; ``start_api``
adds more, or starts one again on a port whose process was stopped) and any number of worker processes, all
on loopback, all stopped at the end.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from worker.jobs.ids import partition_of
from worker.redis_server import RedisServer, appendfsync_for, free_port

TEST_SECRET = "whsec_" + base64.b64encode(b"wikiq test secret, 32 bytes long").decode()


class Service:
    """Start, kill and restart the parts of a wikiq deployment; talk to its API with ``client``."""

    def __init__(self, root: Path, redis: RedisServer | None = None, **env: str) -> None:
        """``redis``: a server the caller starts and stops (e.g. the primary of a replicated set); by
        default the deployment has one of its own."""
        self.root = root
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        durability = env.get("WIKIQ_ACCEPT_DURABILITY", os.environ.get("WIKIQ_ACCEPT_DURABILITY", "local"))
        self.own_redis = redis is None
        self.redis = redis or RedisServer(
            root / "redis", appendonly=True, appendfsync=appendfsync_for(durability)
        )
        self.port = free_port()
        self.env = {
            **os.environ,
            "WIKIQ_DATA_DIR": str(self.data),
            "WIKIQ_REDIS_URL": self.redis.url,
            "WIKIQ_PARTITIONS": "4",
            "WIKIQ_LEASE_SECONDS": "1.5",
            "WIKIQ_WEBHOOK_ALLOW_PRIVATE": "true",
            "WIKIQ_WEBHOOK_SECRET": TEST_SECRET,
            "WIKIQ_RATE_LIMIT_SUBMISSIONS": "0",  # tests submit fast from one principal; test_auth sets one
            "WIKIQ_LOG_LEVEL": os.environ.get("WIKIQ_TEST_LOG_LEVEL", "warning"),
            **env,
        }
        self.apis: dict[int, subprocess.Popen[bytes]] = {}  # API processes by port
        self.workers: list[subprocess.Popen[bytes]] = []
        self.senders: list[subprocess.Popen[bytes]] = []  # `wikiq webhooks` processes
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=70)

    def logs(self) -> str:
        """Everything every process of the deployment wrote so far."""
        return "".join(p.read_text(errors="replace") for p in sorted(self.root.glob("*.log")))

    @property
    def url(self) -> str:
        """Base URL of the API."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> subprocess.Popen[bytes] | None:
        """The API process at ``url`` (None before ``start`` or once stopped)."""
        return self.apis.get(self.port)

    def _spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{args[0]}-{len(self.workers)}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        return subprocess.Popen(
            [sys.executable, "-m", "api.cli", *args],
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def start(self, workers: int = 1, senders: int = 1) -> Service:
        """Start Redis, the API (returning once it answers), ``workers`` workers and ``senders`` webhook
        senders."""
        if self.own_redis:
            self.redis.start()
        self.start_api(self.port)
        for _ in range(workers):
            self.start_worker()
        for _ in range(senders):
            self.start_sender()
        return self

    def start_api(self, port: int | None = None) -> int:
        """Start an API process on ``port`` (default: a free one), returning its port once ``/readyz``
        answers 200."""
        port = free_port() if port is None else port
        assert self.apis.get(port) is None or self.apis[port].poll() is not None, f"an API runs on {port}"
        process = self._spawn("api", "--port", str(port))
        self.apis[port] = process
        deadline = time.monotonic() + 30
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        return port
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"the API on port {port} did not start; logs in {self.root}")
                time.sleep(0.05)  # waiting for a starting process to listen

    def stop_api(self, port: int | None = None, timeout: float = 30) -> int:
        """SIGTERM the API process on ``port`` (default: the one at ``url``) and return its exit code
        (asserting it exits within ``timeout`` seconds)."""
        process = self.apis.pop(self.port if port is None else port)
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"the API did not exit within {timeout} s of SIGTERM") from None

    def stop_worker(self, process: subprocess.Popen[bytes], timeout: float = 30) -> int:
        """SIGTERM a worker and return its exit code (asserting it exits within ``timeout`` seconds)."""
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"the worker did not exit within {timeout} s of SIGTERM") from None
        finally:
            self.workers.remove(process)

    def start_sender(self, **env: str) -> subprocess.Popen[bytes]:
        """Start one more ``wikiq webhooks`` process (``env`` adds to or overrides the variables)."""
        process = self._spawn("webhooks", env=env)
        self.senders.append(process)
        return process

    def start_worker(self, **env: str) -> subprocess.Popen[bytes]:
        """Start one more worker process (``env`` adds to or overrides the deployment's variables)."""
        process = self._spawn("worker", env=env)
        self.workers.append(process)
        return process

    def kill_worker(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL a worker: no clean-up of any kind."""
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.workers.remove(process)

    def stop_workers(self) -> None:
        """Stop every worker gracefully (SIGTERM: each finishes its job in flight and lets its leases go)."""
        _terminate(self.workers)
        self.workers.clear()

    def stop(self) -> None:
        """Stop everything (workers, webhook senders and API processes gracefully, then Redis)."""
        _terminate([*self.workers, *self.senders, *self.apis.values()])
        self.workers.clear()
        self.senders.clear()
        self.apis.clear()
        self.client.close()
        if self.own_redis:
            self.redis.stop()

    # -- API helpers ------------------------------------------------------------------------------

    def create_wiki(self, wiki: str) -> str:
        """Create a wiki; its initial head."""
        answer = self.client.post("/v1/wikis", json={"id": wiki})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["head"])

    def page(self, wiki: str, path: str) -> dict[str, Any]:
        """A page at the head (asserting it exists)."""
        answer = self.client.get(f"/v1/wikis/{wiki}/pages/{path}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def submit(self, wiki: str, batch: dict[str, Any], **headers: str) -> httpx.Response:
        """POST a batch."""
        return self.client.post(f"/v1/wikis/{wiki}/batches", json=batch, headers=headers)

    def wait(self, job_id: str, timeout: float = 30) -> dict[str, Any]:
        """Long-poll a job until it is finished (asserting it finishes within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"job {job_id} did not finish in {timeout}s"
            answer = self.client.get(f"/v1/jobs/{job_id}", params={"wait": min(left, 60)})
            assert answer.status_code == 200, answer.text
            job = dict(answer.json())
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return job

    def apply(self, wiki: str, batch: dict[str, Any]) -> dict[str, Any]:
        """Submit a batch and wait for its job."""
        answer = self.submit(wiki, batch)
        assert answer.status_code == 202, answer.text
        return self.wait(answer.json()["job_id"])

    # -- plain git ---------------------------------------------------------------------------------

    def git(self, wiki: str, *args: str) -> str:
        """The output of ``git`` run on a local wiki's repository."""
        repo = self.data / "wikis" / f"{wiki}.git"
        return subprocess.run(
            ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
        ).stdout

    def landed(self, wiki: str) -> list[tuple[str, str, set[str]]]:
        """Every commit on ``main`` after the first, oldest first (first parents): its id, its ``Wikiq-Job``
        trailer ('' when none, several joined by spaces) and the paths it touched."""
        log = self.git(
            wiki,
            "log",
            "--first-parent",
            "--reverse",
            "--format=%x00%H %(trailers:key=Wikiq-Job,valueonly,separator=%x20)",
            "--name-only",
            "main",
        )
        found = []
        for block in log.split("\x00")[1:]:
            head, *paths = [line for line in block.splitlines() if line.strip()]
            commit, _, job = head.partition(" ")
            found.append((commit, job.strip(), set(paths)))
        return found[1:]  # the first commit is the wiki's creation


def wiki_on(partition: int, prefix: str, partitions: int = 4, skip: int = 0) -> str:
    """A wiki id starting with ``prefix`` that falls in ``partition`` (the ``skip``-th such id)."""
    found = (f"{prefix}{i}" for i in range(100_000) if partition_of(f"{prefix}{i}", partitions) == partition)
    for _ in range(skip):
        next(found)
    return next(found)


def _terminate(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process still running, then wait for each (SIGKILL after 20 s)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
