"""Webhooks end to end, through the worker and sender processes to a receiver on a socket: retried on the
schedule, slow receivers timed out, Retry-After honoured, redelivered, exactly once per job, surviving a
worker kill and a taker kill, and refused when unsafe. Signing, 410, redirects and the end of the
schedule, delivery by delivery, are tests/service/test_webhook_delivery.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from standardwebhooks import Webhook

from tests.e2e.receiver import Receiver, running_receiver
from tests.e2e.service import TEST_SECRET, Service
from worker.keys import OUTBOX_GROUP, outbox

FAST = "0,0.3,0.3,0.3,5"  # the longest delay bounds a Retry-After: 5 s


@pytest.fixture(scope="module")
def hooks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with a compressed retry schedule and a 1 s delivery timeout."""
    service = Service(
        tmp_path_factory.mktemp("hooks"), WIKIQ_WEBHOOK_RETRY_SCHEDULE=FAST, WIKIQ_WEBHOOK_TIMEOUT="1"
    ).start(workers=1)
    service.create_wiki("hooks")
    yield service
    service.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A loopback HTTP receiver."""
    with running_receiver() as r:
        yield r


_counter = iter(range(10**6))


def _submit(service: Service, url: str, wiki: str = "hooks") -> str:
    n = next(_counter)
    batch = {
        "message": f"hook {n}",
        "edits": [{"op": "create", "path": f"wiki/hook-{time.monotonic_ns()}-{n}.md", "content": "x\n"}],
        "webhook": {"url": url},
    }
    answer = service.submit(wiki, batch)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["job_id"])


def _job_when(service: Service, job_id: str, done: Any, timeout: float = 30) -> dict[str, Any]:
    """The job once ``done(job)`` holds (the job is polled: webhook state has no long-poll)."""
    deadline = time.monotonic() + timeout
    while True:
        job = service.wait(job_id)
        if done(job):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)  # polling the job's webhook state, which nothing announces


def _verify(delivery_headers: dict[str, str], body: bytes, secret: str = TEST_SECRET) -> dict[str, Any]:
    headers = {k.lower(): v for k, v in delivery_headers.items()}
    return dict(Webhook(secret).verify(body, headers))


def test_three_500s_then_200_is_four_attempts_with_one_id(hooks: Service, receiver: Receiver) -> None:
    """500, 500, 500, 200: four POSTs with one webhook-id and body; the job shows 4 attempts, delivered."""
    receiver.script["/flaky"] = [(500, {}), (500, {}), (500, {}), (200, {})]
    job_id = _submit(hooks, receiver.url("/flaky"))
    receiver.wait_for(lambda: len(receiver.at("/flaky")) == 4)
    got = receiver.at("/flaky")
    assert len({d.headers["webhook-id"] for d in got}) == 1
    assert len({d.body for d in got}) == 1
    for delivery in got:
        _verify(delivery.headers, delivery.body)
    job = _job_when(hooks, job_id, lambda j: j["webhook"]["state"] == "delivered")
    assert [a["status"] for a in job["webhook"]["attempts"]] == [500, 500, 500, 200]


def test_slow_receiver_times_out_and_is_retried(hooks: Service, receiver: Receiver) -> None:
    """A receiver slower than the timeout is recorded as a timeout and retried until it answers in time."""
    receiver.delay["/slow"] = 2.5
    job_id = _submit(hooks, receiver.url("/slow"))
    job = _job_when(hooks, job_id, lambda j: len(j["webhook"]["attempts"]) >= 2)
    assert [a["error"] for a in job["webhook"]["attempts"][:2]] == ["timeout", "timeout"]
    receiver.delay["/slow"] = 0
    job = _job_when(hooks, job_id, lambda j: j["webhook"]["state"] != "pending")
    assert job["webhook"]["state"] == "delivered"


def test_retry_after_is_honoured(hooks: Service, receiver: Receiver) -> None:
    """A 429 with Retry-After: 2 delays the next attempt by at least two seconds (within the schedule's
    longest delay, which bounds it)."""
    receiver.script["/busy"] = [(429, {"retry-after": "2"}), (200, {})]
    job_id = _submit(hooks, receiver.url("/busy"))
    receiver.wait_for(lambda: len(receiver.at("/busy")) == 2)
    job = _job_when(hooks, job_id, lambda j: j["webhook"]["state"] == "delivered")
    first, second = (a["at"] for a in job["webhook"]["attempts"])
    from datetime import datetime

    gap = datetime.fromisoformat(second.replace("Z", "+00:00")) - datetime.fromisoformat(
        first.replace("Z", "+00:00")
    )
    assert gap.total_seconds() >= 1.9


def test_redeliver_sends_again_with_the_same_id(hooks: Service, receiver: Receiver) -> None:
    """POST .../webhook/redeliver sends the event again under the same webhook-id and records it."""
    job_id = _submit(hooks, receiver.url("/again"))
    _job_when(hooks, job_id, lambda j: j["webhook"]["state"] == "delivered")
    answer = hooks.client.post(f"/v1/jobs/{job_id}/webhook/redeliver")
    assert answer.status_code == 202, answer.text
    receiver.wait_for(lambda: len(receiver.at("/again")) == 2)
    first, second = receiver.at("/again")
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    job = _job_when(hooks, job_id, lambda j: len(j["webhook"]["attempts"]) == 2)
    assert job["webhook"]["state"] == "delivered"


def test_two_hundred_jobs_each_delivered_exactly_once(hooks: Service, receiver: Receiver) -> None:
    """200 jobs with webhooks to a receiver answering 200 at once: each webhook-id arrives exactly once."""
    jobs = [_submit(hooks, receiver.url("/bulk")) for _ in range(200)]
    receiver.wait_for(lambda: len(receiver.at("/bulk")) >= 200, timeout=120)
    for job_id in jobs:
        _job_when(hooks, job_id, lambda j: j["webhook"]["state"] == "delivered")
    ids = [d.headers["webhook-id"] for d in receiver.at("/bulk")]
    assert sorted(ids) == sorted(f"msg_{j}" for j in jobs)


def test_pending_retry_survives_a_worker_kill(tmp_path: Path, receiver: Receiver) -> None:
    """A delivery waiting for its retry when the worker is SIGKILLed is still delivered after a restart."""
    service = Service(tmp_path, WIKIQ_WEBHOOK_RETRY_SCHEDULE="0,3").start(workers=1)
    try:
        service.create_wiki("kill")
        receiver.script["/later"] = [(500, {}), (200, {})]
        job_id = _submit(service, receiver.url("/later"), wiki="kill")
        _job_when(service, job_id, lambda j: len(j["webhook"]["attempts"]) == 1)
        service.kill_worker(service.workers[0])
        service.start_worker()
        job = _job_when(service, job_id, lambda j: j["webhook"]["state"] != "pending")
        assert job["webhook"]["state"] == "delivered"
        assert [a["status"] for a in job["webhook"]["attempts"]] == [500, 200]
    finally:
        service.stop()


UNSAFE = [
    "http://127.0.0.1/",
    "http://10.0.0.1/",
    "http://169.254.169.254/latest/meta-data",
    "http://[::1]/",
    "http://localhost/",
    "http://100.64.0.1/",
    "http://0.0.0.0/",
    "ftp://x/",
    "http://user:pw@example.org/",
    "not a url",
]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment without WIKIQ_WEBHOOK_ALLOW_PRIVATE."""
    service = Service(tmp_path_factory.mktemp("guarded"), WIKIQ_WEBHOOK_ALLOW_PRIVATE="false").start(
        workers=1
    )
    service.create_wiki("guard")
    yield service
    service.stop()


@pytest.mark.parametrize("url", UNSAFE)
def test_unsafe_urls_are_refused_and_nothing_is_queued(guarded: Service, url: str) -> None:
    """Loopback, private, link-local, CGNAT, non-http and credentialed URLs: 422 WEBHOOK_REFUSED, no job."""
    batch = {
        "message": "m",
        "edits": [{"op": "create", "path": "wiki/u.md", "content": ""}],
        "webhook": {"url": url},
    }
    answer = guarded.submit("guard", batch)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "WEBHOOK_REFUSED"
    assert guarded.client.get("/v1/wikis/guard/jobs").json()["jobs"] == []


def test_malformed_secret_stops_start_up_with_one_line(tmp_path: Path) -> None:
    """A WIKIQ_WEBHOOK_SECRET that is not whsec_+base64 stops the worker with one line naming it."""
    env = {"WIKIQ_WEBHOOK_SECRET": "not-a-secret", "WIKIQ_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "worker"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "WIKIQ_WEBHOOK_SECRET" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and json.dumps(done.stdout)


def _logged_attempts(service: Service, process: str, job_id: str) -> int:
    """How many ``webhook.attempt`` lines for ``job_id`` the ``process`` processes (api, worker, webhooks)
    logged."""
    lines = "".join(p.read_text(errors="replace") for p in service.root.glob(f"{process}-*.log")).splitlines()
    return sum(1 for line in lines if "webhook.attempt" in line and job_id in line)


def _attempts_logged(service: Service, process: str, job_id: str, timeout: float = 30) -> int:
    """``_logged_attempts`` once there is one. An attempt is logged just after it is recorded on
    the job, so a job showing it delivered may be read before the line is written."""
    deadline = time.monotonic() + timeout
    while (count := _logged_attempts(service, process, job_id)) == 0:
        assert time.monotonic() < deadline, _lines_of(service, job_id)
        time.sleep(0.05)  # polling the process's log file, which nothing announces
    return count


def _lines_of(service: Service, job_id: str) -> list[str]:
    """Every log line of the deployment naming ``job_id`` (what an assertion shows when it fails)."""
    return [line for line in service.logs().splitlines() if job_id in line]


def _until(done: Any, what: str, timeout: float = 30) -> None:
    """Poll ``done`` until it holds (failing after ``timeout`` seconds): waiting on another process."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling another process's state, not ordering our own work


def _stopped(process: subprocess.Popen[bytes]) -> bool:
    """True while ``process`` is stopped by a signal (state ``T`` in ``/proc``)."""
    stat = Path(f"/proc/{process.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _pending(redis: Redis, partitions: int) -> dict[str, int]:
    """Outbox entries taken and not yet recorded, by the consumer holding them."""
    held: dict[str, int] = {}
    for partition in range(partitions):
        if not redis.exists(outbox(partition)):
            continue
        for consumer in redis.xpending(outbox(partition), OUTBOX_GROUP)["consumers"]:
            name = consumer["name"].decode() if isinstance(consumer["name"], bytes) else consumer["name"]
            held[name] = held.get(name, 0) + int(consumer["pending"])
    return held


def test_the_worker_that_finishes_a_job_sends_its_first_attempt(tmp_path: Path, receiver: Receiver) -> None:
    """With ``WIKIQ_WEBHOOK_SENDERS=true`` and no ``wikiq webhooks`` process, no taker reads the outbox:
    every first attempt comes from the worker whose finish took its entry. Each webhook arrives once,
    recorded and logged by the worker, and nothing is left pending."""
    service = Service(tmp_path, WIKIQ_WEBHOOK_SENDERS="true", WIKIQ_LOG_LEVEL="info").start(
        workers=1, senders=0
    )
    redis = Redis.from_url(service.redis.url)
    try:
        service.create_wiki("own")
        jobs = [_submit(service, receiver.url("/own"), "own") for _ in range(5)]
        receiver.wait_for(lambda: len(receiver.at("/own")) >= 5)
        for job_id in jobs:
            job = _job_when(service, job_id, lambda j: j["webhook"]["state"] == "delivered")
            assert len(job["webhook"]["attempts"]) == 1
            assert _attempts_logged(service, "worker", job_id) == 1
        ids = sorted(d.headers["webhook-id"] for d in receiver.at("/own"))
        assert ids == sorted(f"msg_{job_id}" for job_id in jobs)
        assert sum(_pending(redis, 4).values()) == 0
    finally:
        redis.close()
        service.stop()


def test_a_worker_killed_with_its_webhooks_in_hand_loses_none(tmp_path: Path, receiver: Receiver) -> None:
    """A worker SIGKILLed after its finish took its jobs' outbox entries and before it sent any (it stops
    itself there, ``WIKIQ_PAUSE_AT``): what it held stays pending in the outbox's group under its name, a
    ``wikiq webhooks`` taker claims it once idle past the delivery timeout and sends it; every webhook
    arrives exactly once and nothing is left pending."""
    service = Service(
        tmp_path, WIKIQ_WEBHOOK_TIMEOUT="1", WIKIQ_WEBHOOK_SENDERS="true", WIKIQ_LOG_LEVEL="info"
    ).start(workers=0, senders=0)
    redis = Redis.from_url(service.redis.url)
    try:
        service.create_wiki("kill")
        first = service.start_worker(WIKIQ_PAUSE_AT="webhooks.taken")
        jobs = [_submit(service, receiver.url("/taken"), "kill") for _ in range(3)]
        _until(lambda: _stopped(first), "the worker to stop with entries in hand")
        held = _pending(redis, 4)
        assert sum(held.values()) >= 1 and all(name.startswith("worker:") for name in held), held
        service.kill_worker(first)
        assert receiver.at("/taken") == []  # taken, never sent
        service.start_worker()  # the jobs the killed worker had not finished yet
        service.start_sender()
        receiver.wait_for(lambda: len(receiver.at("/taken")) >= 3)
        for job_id in jobs:
            job = _job_when(service, job_id, lambda j: j["webhook"]["state"] == "delivered")
            assert len(job["webhook"]["attempts"]) == 1
        ids = sorted(d.headers["webhook-id"] for d in receiver.at("/taken"))
        assert ids == sorted(f"msg_{job_id}" for job_id in jobs)  # each exactly once
        assert sum(_pending(redis, 4).values()) == 0
    finally:
        redis.close()
        service.stop()
