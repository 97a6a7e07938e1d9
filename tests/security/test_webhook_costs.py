"""Hostile webhook receivers cost the worker little and delay only their own principal's webhooks.

A real API, worker and Redis, and receivers on loopback sockets that answer what no server should
(``tests/e2e/hostile_receiver.py``): headers streamed without end, a ``Retry-After`` of 400 digits,
receivers that never answer a first attempt or a retry. The worker's CPU and peak memory are read from
``/proc`` around each attack (``tests/security/test_costs.py``), and its log must not say a partition lease
was lost. Fairness is shown by order, not by time: with a delivery timeout longer than the test, another
principal's webhooks all arrive while the hostile principal's attempts are still held unanswered, and the
hostile principal never holds more than its lane (``worker.webhooks.lanes``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import count
from typing import Any

import pytest
from redis import Redis

from tests.e2e.hostile_receiver import hostile_receiver
from tests.e2e.receiver import running_receiver
from tests.e2e.service import Service
from tests.security.conftest import as_, deployment, fsck_every_wiki
from tests.security.test_costs import Cost, worker_pid
from worker.keys import OUTBOX_GROUP, outbox
from worker.webhooks.lanes import FIRST_EACH, FIRST_IN_FLIGHT, RETRIES_EACH, RETRIES_IN_FLIGHT

CPU_LIMIT = 3.0  # seconds the worker may spend on six jobs and their attempts (unbounded: 13 s an attempt)
MEMORY_LIMIT = 96 * 1024 * 1024  # bytes it may grow by, first commits included (unbounded: 175 MB an attempt)
PARTITIONS = 4
_numbers = count()


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One worker; a delivery timeout longer than any test here (a hanging attempt never ends on its own
    within one) and retries half a second apart; wikis ``sec`` and ``other``."""
    service = deployment(
        tmp_path_factory.mktemp("hooked"),
        workers=1,
        WIKIQ_WEBHOOK_TIMEOUT="60",
        WIKIQ_WEBHOOK_RETRY_SCHEDULE="0,0.5,0.5,0.5",
        WIKIQ_REDELIVER_INTERVAL_SECONDS="60",
    )
    service.create_wiki("other")
    yield service
    service.stop()
    fsck_every_wiki(service)


def submit(service: Service, who: str, url: str, wiki: str = "sec") -> str:
    """A one-page batch by ``who`` with a webhook to ``url``; its job id."""
    n = next(_numbers)
    batch = {
        "message": f"hook {n}",
        "edits": [{"op": "create", "path": f"wiki/hook-{n}.md", "content": "x\n"}],
        "webhook": {"url": url},
    }
    with as_(service, who) as http:
        answer = http.post(f"/v1/wikis/{wiki}/batches", json=batch)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["job_id"])


def attempted(service: Service, job_id: str, timeout: float = 60) -> dict[str, Any]:
    """The job's webhook once its first attempt is recorded."""
    deadline = time.monotonic() + timeout
    while True:
        hook = service.wait(job_id)["webhook"]
        if hook["attempts"]:
            return dict(hook)
        assert time.monotonic() < deadline, hook
        time.sleep(0.05)  # polling the webhook's state, which nothing announces


def no_lease_lost(service: Service) -> None:
    assert "lease lost" not in service.logs(), "the worker lost a partition lease"


@pytest.mark.parametrize("mode", ["header-bomb", "many-headers"])
def test_a_receiver_streaming_headers_without_end_costs_the_worker_little(hooked: Service, mode: str) -> None:
    """Three jobs whose receiver streams one endless header (or endless small ones): each attempt fails
    at the head's bound with a reason that says so, and is retried on the schedule; the worker spends
    little CPU and memory, loses no lease, and another wiki's batch commits meanwhile."""
    with hostile_receiver(mode) as bad, Cost(worker_pid(hooked)) as cost:
        jobs = [submit(hooked, "dave", bad.url()) for _ in range(3)]
        hooks = [attempted(hooked, job_id) for job_id in jobs]
        edit = {"op": "create", "path": f"wiki/{mode}.md", "content": "x\n"}
        other = hooked.apply("other", {"message": "m", "edits": [edit]})
    assert other["status"] == "succeeded", other
    for hook in hooks:
        first = hook["attempts"][0]
        assert first["status"] is None and "RemoteProtocolError: the answer" in first["error"], hook
        assert ("headers are over 16384 bytes" if mode == "header-bomb" else "header fields") in first[
            "error"
        ]
    assert cost.cpu < CPU_LIMIT, f"the worker spent {cost.cpu:.1f} s of CPU"
    assert cost.grew < MEMORY_LIMIT, f"the worker grew by {cost.grew / 2**20:.0f} MB"
    no_lease_lost(hooked)


def test_a_retry_after_of_400_digits_is_recorded_and_clamped(hooked: Service) -> None:
    """Jobs of one principal whose receiver answers ``503`` with a 400-digit ``Retry-After``, and another
    principal's jobs: every first attempt is recorded once and its outbox entry acknowledged (none is sent
    again), the hostile ones stay pending with one attempt and their retry queued, the others delivered."""
    with running_receiver() as good:
        good.script["/far"] = [(503, {"Retry-After": "9" * 400})]
        far = [submit(hooked, "dave", good.url("/far")) for _ in range(3)]
        near = [submit(hooked, "twin-a", good.url("/near")) for _ in range(3)]
        far_hooks = [attempted(hooked, job_id) for job_id in far]
        near_hooks = [attempted(hooked, job_id) for job_id in near]
        assert len(good.at("/far")) == 3 and len(good.at("/near")) == 3
    assert all(h["state"] == "pending" and [a["status"] for a in h["attempts"]] == [503] for h in far_hooks)
    assert all(h["state"] == "delivered" and len(h["attempts"]) == 1 for h in near_hooks)
    redis = Redis.from_url(hooked.redis.url)
    try:
        for partition in range(PARTITIONS):
            if redis.exists(outbox(partition)):
                assert redis.xpending(outbox(partition), OUTBOX_GROUP)["pending"] == 0
    finally:
        redis.close()
    no_lease_lost(hooked)


def test_hanging_receivers_delay_only_their_own_principals_first_attempts(hooked: Service) -> None:
    """Dave sends more jobs than a worker has first-attempt slots, to a receiver that never answers;
    twin-a's webhooks then all arrive while every one of dave's attempts is still held, and dave holds
    no more than his lane."""
    with hostile_receiver("hang") as bad, running_receiver() as good:
        for job_id in [submit(hooked, "dave", bad.url()) for _ in range(FIRST_IN_FLIGHT + 6)]:
            assert hooked.wait(job_id)["status"] == "succeeded"
        bad.wait_for("dave's lane of first attempts", lambda: bad.hanging >= FIRST_EACH)
        theirs = [submit(hooked, "twin-a", good.url(f"/first-{n}")) for n in range(5)]
        good.wait_for(lambda: all(good.at(f"/first-{n}") for n in range(5)))
        assert (bad.requests, bad.hanging) == (FIRST_EACH, FIRST_EACH)  # none of dave's ended meanwhile
    assert all(attempted(hooked, job_id)["state"] == "delivered" for job_id in theirs)
    no_lease_lost(hooked)


def test_hanging_retries_delay_only_their_own_principals_retries(hooked: Service) -> None:
    """Dave's receiver fails every first attempt at once and hangs on every retry, for more jobs than a
    worker runs retries at once; twin-a's jobs, whose first attempts fail too, then get their retries
    delivered while dave's retries are still held, and dave holds no more than his lane of retries."""
    with hostile_receiver("hang-retries") as bad, running_receiver() as good:
        dave = [submit(hooked, "dave", bad.url()) for _ in range(RETRIES_IN_FLIGHT + 4)]
        for job_id in dave:
            assert attempted(hooked, job_id)["attempts"][0]["status"] == 500
        bad.wait_for("dave's lane of retries", lambda: bad.hanging >= RETRIES_EACH)
        paths = [f"/retry-{n}" for n in range(5)]
        for path in paths:
            good.script[path] = [(500, {}), (200, {})]
        theirs = [submit(hooked, "twin-a", good.url(path)) for path in paths]
        good.wait_for(lambda: all(len(good.at(path)) >= 2 for path in paths))
        assert bad.hanging == RETRIES_EACH  # held all along: none of dave's retries ended meanwhile
    for job_id in theirs:
        assert [a["status"] for a in attempted(hooked, job_id)["attempts"]][:2] == [500, 200]
    no_lease_lost(hooked)


def test_the_service_still_works_after_the_receivers(hooked: Service) -> None:
    """After every attack, a batch on ``sec`` by another principal commits."""
    edit = {"op": "create", "path": "wiki/after-hooks.md", "content": "x\n"}
    with as_(hooked, "twin-b") as http:
        answer = http.post("/v1/wikis/sec/batches", json={"message": "m", "edits": [edit]})
    assert answer.status_code == 202, answer.text
    assert hooked.wait(answer.json()["job_id"])["status"] == "succeeded"
