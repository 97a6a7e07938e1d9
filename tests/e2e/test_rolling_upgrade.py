"""A rolling upgrade under load, with real processes: two workers and two API processes are each stopped
(SIGTERM, exit 0) and started again, one at a time, while clients submit batches to four wikis through both
APIs. Afterwards plain git shows every accepted batch applied exactly once, in acceptance order."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.e2e.service import Service

WIKIS = [f"roll{i}" for i in range(4)]
PACE = 0.05  # seconds a client waits between two batches (about 20 batches/s per wiki)
STEP = 25  # batches accepted between two restarts (and before the first)
LEASE = 5.0  # seconds (the default): a partition moved by lease expiry would stall this long


class _Client:
    """One wiki's client: a batch at a time, each with its own ``Idempotency-Key``, sent to the two APIs in
    turn; a ``503`` or a connection error is retried with the same key (on the other API)."""

    def __init__(self, wiki: str, urls: list[str], stop: threading.Event) -> None:
        self.wiki = wiki
        self.urls = urls
        self.stop = stop
        self.accepted: list[tuple[str, str, float]] = []  # (key, job id, when), in acceptance order
        self.refusals: Counter[str] = Counter()  # what was retried: "503 CODE" or the transport error
        self.unexpected: list[str] = []
        self.replayed = 0  # acceptances answered 200: the job of an attempt whose answer was lost
        self.thread = threading.Thread(target=self.run, name=f"client-{wiki}")

    def run(self) -> None:
        """Submit until ``stop``; anything but an acceptance or a retryable refusal ends the client."""
        try:
            self._submit()
        except BaseException as exc:  # a client's failure must fail the test, not vanish with its thread
            self.unexpected.append(repr(exc))

    def _submit(self) -> None:
        turn = 0
        with httpx.Client(timeout=30) as http:
            for n in range(100_000):
                if self.stop.is_set() or self.unexpected:
                    return
                key = f"{self.wiki}-{n}"
                misses = 0
                while True:  # until this batch is accepted: retrying is the client's side of the contract
                    url = self.urls[turn % len(self.urls)]
                    turn += 1
                    try:
                        answer = http.post(
                            f"{url}/v1/wikis/{self.wiki}/batches",
                            json=_batch(key),
                            headers={"Idempotency-Key": key},
                        )
                    except httpx.TransportError as exc:
                        self.refusals[type(exc).__name__] += 1
                        misses += 1
                        if misses % 2 == 0:
                            self.stop.wait(0.02)  # both APIs refused in turn: back off a little
                        continue
                    if answer.status_code == 503:  # the contract's error object (a KeyError ends the client)
                        self.refusals[f"503 {answer.json()['error']['code']}"] += 1
                        self.stop.wait(0.05)  # Retry-After says 1 s; the other API may answer now
                        continue
                    if answer.status_code not in (200, 202):
                        self.unexpected.append(f"{answer.status_code} {answer.text[:200]}")
                        return
                    self.replayed += answer.status_code == 200  # an earlier attempt had been accepted
                    self.accepted.append((key, answer.json()["job_id"], time.time()))
                    break
                self.stop.wait(PACE)  # the load's pace, not a synchronisation


def _batch(key: str) -> dict[str, Any]:
    return {
        "message": key,
        "edits": [
            {"op": "create", "path": f"wiki/{key}/a.md", "content": f"{key}\n"},
            {"op": "create", "path": f"wiki/{key}/b.md", "content": f"[[{key}/a]]\n"},
        ],
    }


def _until(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)  # polling a state of the deployment


def test_a_rolling_upgrade_under_load_applies_every_accepted_batch_exactly_once_in_order(
    tmp_path: Path,
) -> None:
    """Restart worker 1, worker 2, API 1 and API 2 (SIGTERM, exit 0, start, healthy) while four clients
    submit: every accepted batch lands exactly once and in acceptance order, clients only ever had to retry
    (503 or a connection error), and no partition stalls anywhere near a lease."""
    began = time.monotonic()
    service = Service(tmp_path, WIKIQ_LEASE_SECONDS=str(LEASE)).start(workers=2)
    leases = redis.Redis.from_url(service.redis.url)
    stop = threading.Event()
    clients: list[_Client] = []
    try:
        ports = [service.port, service.start_api()]
        for wiki in WIKIS:
            service.create_wiki(wiki)
        clients = [_Client(wiki, [f"http://127.0.0.1:{p}" for p in ports], stop) for wiki in WIKIS]
        for client in clients:
            client.thread.start()

        def accepted() -> int:
            return sum(len(client.accepted) for client in clients)

        def progress() -> None:  # the load goes on between restarts
            target = accepted() + STEP
            _until(lambda: accepted() >= target or any(c.unexpected for c in clients), "the load goes on")

        steps: list[tuple[str, float, float]] = []  # (what, seconds to exit 0, seconds until healthy)
        progress()
        for number in (1, 2):
            old = service.workers[0]  # the oldest worker
            signalled = time.monotonic()
            assert service.stop_worker(old) == 0
            stopped = time.monotonic()
            new = service.start_worker()
            _until(lambda pid=new.pid: _holds(leases, pid), "the new worker holds a partition")
            steps.append((f"worker {number}", stopped - signalled, time.monotonic() - stopped))
            progress()
        for number, port in enumerate(ports, 1):
            signalled = time.monotonic()
            assert service.stop_api(port) == 0
            stopped = time.monotonic()
            service.start_api(port)
            steps.append((f"API {number}", stopped - signalled, time.monotonic() - stopped))
            progress()
        stop.set()
        for client in clients:
            client.thread.join(60)
            assert not client.thread.is_alive(), f"the client of {client.wiki} hung"
        loaded = time.monotonic() - began

        assert not [c.unexpected for c in clients if c.unexpected], "a client got an answer it may not retry"
        refusals = sum((c.refusals for c in clients), Counter())
        longest_wait, longest_gap, total = 0.0, 0.0, 0
        for client in clients:
            finished = [service.wait(job_id, timeout=60) for _, job_id, _ in client.accepted]
            assert all(job["status"] == "succeeded" for job in finished), [
                job for job in finished if job["status"] != "succeeded"
            ][:3]
            landed = service.landed(client.wiki)
            # exactly once, in acceptance order: the commits on main are the accepted jobs, one each, in turn
            assert [job_id for _, job_id, _ in landed] == [job_id for _, job_id, _ in client.accepted]
            for (commit, _, paths), (key, _, _), job in zip(landed, client.accepted, finished, strict=True):
                assert paths == {f"wiki/{key}/a.md", f"wiki/{key}/b.md"}, (key, paths)
                assert commit == job["result"]["commit"], key
            records = [leases.get(f"wikiq:job:{job_id}") for _, job_id, _ in client.accepted]
            done_ms = [_finished_ms(raw) for raw in records]
            waits = [done / 1000 - when for done, (_, _, when) in zip(done_ms, client.accepted, strict=True)]
            gaps = [(b - a) / 1000 for a, b in itertools.pairwise(done_ms)]
            longest_wait, longest_gap = max(longest_wait, *waits), max(longest_gap, *gaps)
            total += len(landed)
        print(
            f"\nrolling upgrade: {total} batches accepted, applied exactly once in order, over {len(WIKIS)} "
            f"wikis in {loaded:.1f} s of load; retried: {dict(refusals) or 'nothing'} "
            f"({sum(c.replayed for c in clients)} answered 200 as replays); longest 202-to-commit "
            f"{longest_wait:.3f} s, longest gap between commits of a wiki {longest_gap:.3f} s; "
            + "; ".join(
                f"{what}: exit 0 in {down:.2f} s, healthy {up:.2f} s later" for what, down, up in steps
            )
        )
        assert not [kind for kind in refusals if "Timeout" in kind], refusals  # a refusal, never a hang
        assert longest_wait < LEASE and longest_gap < LEASE, (longest_wait, longest_gap)
        for wiki in WIKIS:
            assert service.git(wiki, "fsck", "--strict", "--no-dangling") == ""
    finally:
        stop.set()
        for client in clients:
            client.thread.join(60)
        leases.close()
        service.stop()


def _holds(leases: redis.Redis, pid: int) -> bool:
    """True when the worker process ``pid`` holds a partition's lease."""
    return any(f":{pid}:".encode() in (leases.get(f"wikiq:lease:{p}") or b"") for p in range(4))


def _finished_ms(raw: bytes | None) -> int:
    """When a job finished, from its record in Redis (ms, the worker's clock)."""
    assert raw is not None
    return int(json.loads(raw)["finished_ms"])
