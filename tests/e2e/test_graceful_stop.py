"""Graceful stops with real processes: SIGTERM to a worker mid-job, SIGTERM to an API with requests in flight.

A worker given SIGTERM starts no new job, finishes the one in flight, exits 0, and another worker serves its
partitions within moments (the lease is long here, so its expiry cannot explain a quick takeover). An API
given SIGTERM answers every request in flight (long-polls at once, with the job as it stands), refuses new
connections, and exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.e2e.service import Service, wiki_on

LEASE = 30.0  # seconds: a lapsed lease would move a partition only after this long
# a takeover slower than this is not the hand-back: a fifteenth of the lease, a fifth of its renewal period
# (the lease loop's own pace without a doorbell)
TAKEOVER_BOUND = 2.0


def _until(condition: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    """Poll ``condition`` until it is truthy (returning it), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.01)  # polling a state of the deployment
    return value


def _batch(name: str) -> dict[str, Any]:
    return {"message": name, "edits": [{"op": "create", "path": f"wiki/{name}.md", "content": f"{name}\n"}]}


@contextmanager
def _held(*locks: Path) -> Iterator[None]:
    """Hold ``main.lock`` of wikis as a live writer would: present and fresh (a lock left unchanged for
    ``STALE_LOCK_SECONDS`` is broken as stale), until each is unlinked or the block ends."""
    for lock in locks:
        lock.write_text("0" * 40 + "\n")
    done = threading.Event()

    def touch() -> None:
        while not done.wait(0.3):  # the writer's heartbeat
            for lock in locks:
                if lock.exists():
                    os.utime(lock)

    toucher = threading.Thread(target=touch)
    toucher.start()
    try:
        yield
    finally:
        done.set()
        toucher.join()
        for lock in locks:
            lock.unlink(missing_ok=True)


def _shared(client: redis.Redis, first: bytes, second: bytes) -> list[bytes] | None:
    """The owners of the four leases once two workers (their ids containing ``first``, ``second``) hold two
    each; else None."""
    owners = [client.get(f"wikiq:lease:{p}") or b"" for p in range(4)]
    held = [sum(marker in owner for owner in owners) for marker in (first, second)]
    return owners if held == [2, 2] else None


def _record(client: redis.Redis, job_id: str) -> dict[str, Any]:
    """A job's record as the workers keep it in Redis (with ``runs`` and times in ms)."""
    raw = client.get(f"wikiq:job:{job_id}")
    assert raw is not None, job_id
    return dict(json.loads(raw))


def test_a_worker_given_sigterm_finishes_its_job_and_hands_its_partitions_over_at_once(
    tmp_path: Path,
) -> None:
    """Two workers, leases of 30 s; SIGTERM the one whose job waits for ``main.lock``: its idle partition
    moves to the other at once, its queued job stays queued, it finishes the job in flight (once), starts
    nothing more, exits 0, and the other worker runs the next job of that partition within moments."""
    service = Service(tmp_path, WIKIQ_LEASE_SECONDS=str(LEASE)).start(workers=2)
    client = redis.Redis.from_url(service.redis.url)
    try:
        victim, survivor = service.workers
        mine, other = f":{victim.pid}:".encode(), f":{survivor.pid}:".encode()
        owners = _until(lambda: _shared(client, mine, other), "the two workers share the partitions")
        busy, idle = [p for p, owner in enumerate(owners) if mine in owner]
        first, second, third = wiki_on(busy, "first"), wiki_on(busy, "second"), wiki_on(idle, "third")
        for wiki in (first, second, third):
            service.create_wiki(wiki)
        lock_first, lock_second = (
            service.data / "wikis" / f"{w}.git" / "refs/heads/main.lock" for w in (first, second)
        )
        with _held(lock_first, lock_second):
            job1 = service.submit(first, _batch("one")).json()["job_id"]
            _until(lambda: service.client.get(f"/v1/jobs/{job1}").json()["status"] == "running", "job 1 runs")
            job2 = service.submit(second, _batch("two")).json()["job_id"]  # queued behind job 1
            assert service.client.get(f"/v1/jobs/{job2}").json()["status"] == "queued"

            victim.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            # its idle partition is handed back at once, while its job in flight still waits for main.lock
            _until(
                lambda: other in (client.get(f"wikiq:lease:{idle}") or b""), "the idle partition moves", 10
            )
            idle_moved = time.monotonic() - signalled
            submitted = time.monotonic()
            job3 = service.wait(service.submit(third, _batch("three")).json()["job_id"])
            idle_applied = time.monotonic() - submitted
            assert job3["status"] == "succeeded", job3
            assert victim.poll() is None, "the worker exited with its job still in flight"
            assert mine in (client.get(f"wikiq:lease:{busy}") or b""), (
                "the busy partition moved under its job"
            )
            assert service.client.get(f"/v1/jobs/{job2}").json()["status"] == "queued"

            lock_first.unlink()  # job 1 can commit now; job 2 would wait for main.lock of its own wiki
            # had it started job 2, it would be waiting for main.lock of job 2's wiki: no exit for 30 s
            assert service.stop_worker(victim, timeout=20) == 0
            exited = time.time()
            done1 = service.wait(job1)
            assert done1["status"] == "succeeded" and done1["result"]["commit"], done1
            _until(
                lambda: _record(client, job2)["status"] == "running",
                "job 2 runs on the other worker",
                LEASE / 2,
            )
            owner = client.get(f"wikiq:lease:{busy}")
            assert owner is not None and other in owner, owner
            started2, finished1 = _record(client, job2)["started_ms"], _record(client, job1)["finished_ms"]
            takeover = (started2 - finished1) / 1000
            after_exit = started2 / 1000 - exited
        # a batch submitted now to the partition the stopped worker held is applied by the other one
        submitted = time.monotonic()
        job4 = service.wait(service.submit(first, _batch("four")).json()["job_id"])
        fresh_applied = time.monotonic() - submitted
        done2 = service.wait(job2)
        print(
            f"\ngraceful worker stop (lease {LEASE:g} s): idle partition moved {idle_moved:.3f} s after "
            f"SIGTERM, a batch on it applied in {idle_applied:.3f} s; busy partition: next job started "
            f"{takeover:.3f} s after the stopping worker finished its last ({after_exit:+.3f} s from its "
            f"observed exit), a new batch applied in {fresh_applied:.3f} s"
        )
        assert takeover < TAKEOVER_BOUND < LEASE / 2, takeover
        assert idle_moved < TAKEOVER_BOUND, idle_moved
        assert fresh_applied < TAKEOVER_BOUND, fresh_applied
        for job in (done1, done2, job3, job4):
            assert job["status"] == "succeeded", job
            assert _record(client, job["job_id"])["runs"] == 1, job  # none ran twice
        for wiki, jobs in ((first, [done1, job4]), (second, [done2]), (third, [job3])):
            landed = service.landed(wiki)
            assert [(commit, job_id) for commit, job_id, _ in landed] == [
                (job["result"]["commit"], job["job_id"]) for job in jobs
            ], landed
    finally:
        client.close()
        service.stop()


class _Monitor:
    """The commands Redis runs, as ``MONITOR`` reports them, read from a raw connection with deadlines."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"MONITOR\r\n")
        self.seen = b""

    def wait_for(self, needles: list[bytes], timeout: float = 20) -> None:
        """Return once every one of ``needles`` was part of a command Redis ran since ``MONITOR``."""
        deadline = time.monotonic() + timeout
        while missing := [n for n in needles if n not in self.seen]:
            left = deadline - time.monotonic()
            assert left > 0, f"Redis did not run {missing[:3]} within {timeout} s"
            self.sock.settimeout(left)
            try:
                self.seen += self.sock.recv(1 << 16)
            except TimeoutError:
                continue

    def close(self) -> None:
        self.sock.close()


LONG_POLLS = 6
SUBMITTERS = 3


def test_an_api_given_sigterm_answers_every_request_in_flight_and_exits_0(tmp_path: Path) -> None:
    """No worker runs, so long-polls of queued jobs wait: SIGTERM the API while six wait (each seen reading
    its job in Redis) and three clients submit in a loop. Every long-poll answers 200 with its job at once,
    every submission answers 202 or a 503 with the error object or fails to connect (never hangs), the
    process exits 0 within seconds, and every submission, retried with its key on a new API, lands once."""
    service = Service(tmp_path).start(workers=0)
    monitor = _Monitor(service.redis.port)
    try:
        service.create_wiki("drain")
        queued = [service.submit("drain", _batch(f"queued{n}")).json()["job_id"] for n in range(LONG_POLLS)]
        polls: dict[str, tuple[float, httpx.Response | BaseException]] = {}
        sent: dict[int, list[tuple[str, float, float, httpx.Response | BaseException]]] = {
            n: [] for n in range(SUBMITTERS)
        }

        def poll(job_id: str) -> None:
            with httpx.Client(base_url=service.url, timeout=70) as http:
                try:
                    answer: httpx.Response | BaseException = http.get(
                        f"/v1/jobs/{job_id}", params={"wait": 60}
                    )
                except httpx.TransportError as exc:
                    answer = exc
            polls[job_id] = (time.monotonic(), answer)

        def submit(number: int) -> None:
            with httpx.Client(base_url=service.url, timeout=30) as http:
                for n in range(10_000):
                    key = f"s{number}-{n}"
                    started = time.monotonic()
                    try:
                        answer: httpx.Response | BaseException = http.post(
                            "/v1/wikis/drain/batches", json=_batch(key), headers={"Idempotency-Key": key}
                        )
                    except httpx.TransportError as exc:
                        answer = exc
                    sent[number].append((key, started, time.monotonic(), answer))
                    if isinstance(answer, BaseException):
                        return  # the API is gone

        pollers = [threading.Thread(target=poll, args=(job_id,)) for job_id in queued]
        for thread in pollers:
            thread.start()
        # each long-poll is in its handler once the API read its job's record
        monitor.wait_for([f'"GET" "wikiq:job:{job_id}"'.encode() for job_id in queued])
        submitters = [threading.Thread(target=submit, args=(n,)) for n in range(SUBMITTERS)]
        for thread in submitters:
            thread.start()
        _until(lambda: all(len(sent[n]) >= 3 for n in sent), "every client submitted")
        signalled = time.monotonic()
        code = service.stop_api(timeout=30)
        exited = time.monotonic() - signalled
        for thread in [*pollers, *submitters]:
            thread.join(30)
            assert not thread.is_alive(), "a request hung"

        assert code == 0, code
        assert exited < 5, exited
        assert set(polls) == set(queued), "a long-poll's thread failed"
        for job_id, (answered, answer) in polls.items():
            assert isinstance(answer, httpx.Response), f"long-poll of {job_id} got no answer: {answer!r}"
            assert answer.status_code == 200, answer.text
            assert answer.json()["job_id"] == job_id and answer.json()["status"] == "queued", answer.text
            assert answered - signalled < 5, "a long-poll was answered only at its end"
        in_flight = 0
        last: dict[int, str] = {}
        accepted: dict[str, str] = {}
        for number, attempts in sent.items():
            *answered, (key, _, _, final) = attempts
            assert isinstance(final, httpx.TransportError), f"client {number} ended on {final!r}"
            last[number] = key
            for key, started, ended, answer in answered:
                assert isinstance(answer, httpx.Response), f"{key}: {answer!r} before the API stopped"
                if answer.status_code == 503:
                    assert set(answer.json()["error"]) >= {"code", "message", "index"}, answer.text
                    continue
                assert answer.status_code == 202, answer.text
                accepted[key] = answer.json()["job_id"]
                in_flight += started < signalled < ended
        print(
            f"\ngraceful API stop: exit 0 {exited:.3f} s after SIGTERM; {LONG_POLLS} long-polls answered "
            f"within {max(a for a, _ in polls.values()) - signalled:.3f} s; {len(accepted)} submissions "
            f"accepted, {in_flight} of them in flight at the signal"
        )

        service.start_api(service.port)  # a new API process: the old one's answers hold, nothing is lost
        for key, job_id in accepted.items():
            assert service.client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued", key
        for key in last.values():  # retried with its key: the job of the attempt cut off, or a new one
            again = service.client.post(
                "/v1/wikis/drain/batches", json=_batch(key), headers={"Idempotency-Key": key}
            )
            assert again.status_code in (200, 202), again.text
            accepted[key] = again.json()["job_id"]
        assert len(set(accepted.values())) == len(accepted)
        service.start_worker()
        expected = [*queued, *accepted.values()]
        for job_id in expected:
            assert service.wait(job_id)["status"] == "succeeded"
        landed = [job_id for _, job_id, _ in service.landed("drain")]
        assert sorted(landed) == sorted(expected)  # each one commit: none lost, none twice
    finally:
        monitor.close()
        service.stop()
