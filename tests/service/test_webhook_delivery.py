"""Webhook delivery in process: ``httpx.MockTransport`` is the receiver, the test is the scheduler.

A job is submitted through the app and run by the in-process worker, which queues its first delivery
attempt. The test then calls the arq job function ``deliver_webhook(ctx, job_id, round, attempt)`` itself,
attempt after attempt, with a context holding the production webhook client over a ``MockTransport``, the
signer, and a seeded ``random.Random``. The delay each retry was queued with is read back from arq
(``Job.info()``: score minus enqueue time), so the schedule is checked exactly without waiting for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
import pytest_asyncio
from arq.jobs import Job
from standardwebhooks import Webhook, WebhookVerificationError

from tests.e2e.receiver import running_receiver
from tests.service.harness import TEST_SECRET, Deployment, create
from worker import keys
from worker.jobs.context import JobContext
from worker.jobs.payloads import loads
from worker.jobs.run import apply_batch
from worker.webhooks.deliver import deliver_webhook, send, signer_for, webhook_client

SCHEDULE = (0.0, 5.0, 300.0, 1800.0)
SETTINGS = {"webhook_retry_schedule": SCHEDULE}
URL = "http://receiver.test/hook?token=capability"
Reply = httpx.Response | Exception


class Receiver:
    """A scripted receiver: answers each request with the next reply (the last one repeats)."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies) or [httpx.Response(200)]
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def headers(self, n: int) -> dict[str, str]:
        """The headers of request ``n``, lower-cased."""
        return {k.lower(): v for k, v in self.requests[n].headers.items()}


@pytest_asyncio.fixture(loop_scope="module")
async def hook(dep: Deployment) -> AsyncIterator[Callable[..., JobContext]]:
    """``hook(receiver, seed)``: a delivery context sending through the production client to ``receiver``."""
    clients: list[httpx.AsyncClient] = []

    def build(receiver: Receiver, seed: int = 7) -> JobContext:
        http = webhook_client(False, dep.settings.webhook_timeout, transport=httpx.MockTransport(receiver))
        clients.append(http)
        ctx = dep.worker.context()
        ctx["http"] = http
        ctx["signer"] = signer_for(TEST_SECRET)
        ctx["rng"] = random.Random(seed)
        return ctx

    yield build
    for client in clients:
        await client.aclose()


async def finished_job(
    dep: Deployment, edits: list[dict[str, Any]] | None = None, url: str = URL
) -> dict[str, Any]:
    """A job with ``webhook.url`` run to its end by the worker (its first attempt is queued, not sent)."""
    wiki = await dep.new_wiki("hooks")
    batch = {"message": "m", "edits": edits or [create("wiki/a.md")], "webhook": {"url": url}}
    job = await dep.apply(wiki, batch)
    assert job["webhook"] == {"url": url, "state": "pending", "attempts": []}, job
    return job


async def queued_delay(dep: Deployment, job_id: str, round_: int, attempt: int) -> float | None:
    """Seconds attempt ``attempt`` of round ``round_`` was deferred by on the webhook queue or None."""
    job = Job(
        f"wh:{job_id}:{round_}:{attempt}", dep.redis, _queue_name=keys.WEBHOOK_QUEUE, _deserializer=loads
    )
    info = await job.info()
    if info is None or info.score is None:
        return None
    assert list(info.args) == [job_id, round_, attempt]  # JSON-serialised: a list
    return (info.score - round(info.enqueue_time.timestamp() * 1000)) / 1000


async def webhook_of(dep: Deployment, job_id: str) -> dict[str, Any]:
    """The job's webhook state as the API shows it to its submitter."""
    answer = await dep.client.get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["webhook"])


async def test_the_first_attempt_is_queued_when_the_job_finishes(dep: Deployment) -> None:
    """Finishing a job with a webhook queues attempt 0 of round 0 at once (delay 0)."""
    job = await finished_job(dep)
    assert await queued_delay(dep, job["job_id"], 0, 0) == 0.0
    assert await queued_delay(dep, job["job_id"], 0, 1) is None


async def test_delivery_is_signed_and_verifies(dep: Deployment, hook: Callable[..., JobContext]) -> None:
    """The receiver verifies the signature with standardwebhooks; a tampered body or another secret fails."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(200))
    assert await deliver_webhook(hook(receiver), job["job_id"], 0, 0) == "delivered"
    (request,) = receiver.requests
    assert (request.method, str(request.url)) == ("POST", URL)
    headers = receiver.headers(0)
    assert headers["content-type"] == "application/json"
    assert headers["webhook-id"] == f"msg_{job['job_id']}"
    event = Webhook(TEST_SECRET).verify(request.content, headers)
    assert event["type"] == "batch.succeeded"
    assert event["data"] == job | {"webhook": event["data"]["webhook"]}  # the finished job, as submitted
    assert event["data"]["result"]["commit"] == job["result"]["commit"]
    with pytest.raises(WebhookVerificationError):
        Webhook(TEST_SECRET).verify(request.content.replace(b"succeeded", b"failed"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "QUJD" * 8).verify(request.content, headers)
    webhook = await webhook_of(dep, job["job_id"])
    assert webhook["state"] == "delivered"
    (attempt,) = webhook["attempts"]
    assert (attempt["status"], attempt["error"]) == (200, None)
    assert attempt["ms"] >= 0 and datetime.fromisoformat(attempt["at"]) <= datetime.now(UTC)
    assert await queued_delay(dep, job["job_id"], 0, 1) is None


async def test_failed_job_is_announced_as_batch_failed(
    dep: Deployment, hook: Callable[..., JobContext]
) -> None:
    """A batch the worker refuses is POSTed as batch.failed with the job's error."""
    edits = [{"op": "delete", "path": "wiki/missing.md", "expected_version": "0" * 40}]
    job = await finished_job(dep, edits)
    assert job["status"] == "failed"
    receiver = Receiver(httpx.Response(204))
    assert await deliver_webhook(hook(receiver), job["job_id"], 0, 0) == "delivered"
    event = Webhook(TEST_SECRET).verify(receiver.requests[0].content, receiver.headers(0))
    assert event["type"] == "batch.failed"
    assert event["data"]["job_id"] == job["job_id"]
    assert event["data"]["error"] == job["error"]
    assert event["data"]["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
async def test_any_2xx_is_delivery(dep: Deployment, hook: Callable[..., JobContext], status: int) -> None:
    """Any 2xx answer is delivery: one attempt, state delivered, nothing more queued."""
    job = await finished_job(dep)
    assert await deliver_webhook(hook(Receiver(httpx.Response(status))), job["job_id"], 0, 0) == "delivered"
    webhook = await webhook_of(dep, job["job_id"])
    assert (webhook["state"], [a["status"] for a in webhook["attempts"]]) == ("delivered", [status])
    assert await queued_delay(dep, job["job_id"], 0, 1) is None


async def test_410_stops_after_one_attempt(dep: Deployment, hook: Callable[..., JobContext]) -> None:
    """A 410 answer ends delivery at once: one attempt, state failed, no retry queued."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(410))
    assert await deliver_webhook(hook(receiver), job["job_id"], 0, 0) == "failed"
    webhook = await webhook_of(dep, job["job_id"])
    assert (webhook["state"], [a["status"] for a in webhook["attempts"]]) == ("failed", [410])
    assert await queued_delay(dep, job["job_id"], 0, 1) is None
    assert len(receiver.requests) == 1


RETRIED: list[tuple[str, Reply, int | None, str | None]] = [
    ("500", httpx.Response(500), 500, None),
    ("502", httpx.Response(502), 502, None),
    ("503", httpx.Response(503), 503, None),
    ("404", httpx.Response(404), 404, None),
    ("429", httpx.Response(429), 429, None),
    ("read-timeout", httpx.ReadTimeout("slow"), None, "timeout"),
    ("connect-timeout", httpx.ConnectTimeout("slow"), None, "timeout"),
    ("connection-refused", httpx.ConnectError("refused"), None, "ConnectError: refused"),
]


@pytest.mark.parametrize(
    ("reply", "status", "error"), [pytest.param(r, s, e, id=n) for n, r, s, e in RETRIED]
)
async def test_failures_are_retried_on_the_schedule_with_jitter(
    dep: Deployment, hook: Callable[..., JobContext], reply: Reply, status: int | None, error: str | None
) -> None:
    """5xx, other non-2xx, timeouts and connection errors: recorded, then the next attempt is queued after the
    schedule's delay times a jitter drawn from the injected random source, within ±20 %."""
    job = await finished_job(dep)
    assert await deliver_webhook(hook(Receiver(reply), seed=11), job["job_id"], 0, 0) == "pending"
    webhook = await webhook_of(dep, job["job_id"])
    (attempt,) = webhook["attempts"]
    assert (attempt["status"], attempt["error"]) == (status, error)
    delay = await queued_delay(dep, job["job_id"], 0, 1)
    expected = SCHEDULE[1] * random.Random(11).uniform(0.8, 1.2)
    assert delay is not None and abs(delay - expected) <= 0.001, (delay, expected)
    assert SCHEDULE[1] * 0.8 <= delay <= SCHEDULE[1] * 1.2


async def test_three_failures_then_200_is_four_attempts_with_one_id(
    dep: Deployment, hook: Callable[..., JobContext]
) -> None:
    """500, timeout, 503, 200: four POSTs of one body under one webhook-id, each retry on the schedule."""
    job = await finished_job(dep)
    receiver = Receiver(
        httpx.Response(500), httpx.ReadTimeout("slow"), httpx.Response(503), httpx.Response(200)
    )
    ctx = hook(receiver, seed=3)
    replay = random.Random(3)
    for attempt in range(3):
        assert await deliver_webhook(ctx, job["job_id"], 0, attempt) == "pending"
        delay = await queued_delay(dep, job["job_id"], 0, attempt + 1)
        expected = SCHEDULE[attempt + 1] * replay.uniform(0.8, 1.2)
        assert delay is not None and abs(delay - expected) <= 0.001, (attempt, delay, expected)
    assert await deliver_webhook(ctx, job["job_id"], 0, 3) == "delivered"
    assert len({r.content for r in receiver.requests}) == 1
    assert {receiver.headers(n)["webhook-id"] for n in range(4)} == {f"msg_{job['job_id']}"}
    for n in range(4):
        Webhook(TEST_SECRET).verify(receiver.requests[n].content, receiver.headers(n))
    webhook = await webhook_of(dep, job["job_id"])
    assert webhook["state"] == "delivered"
    assert [(a["status"], a["error"]) for a in webhook["attempts"]] == [
        (500, None),
        (None, "timeout"),
        (503, None),
        (200, None),
    ]
    assert await queued_delay(dep, job["job_id"], 0, 4) is None


async def test_schedule_exhausted_is_failed_with_every_attempt(
    dep: Deployment, hook: Callable[..., JobContext]
) -> None:
    """A receiver that always answers 503 gets one attempt per schedule entry, then the state is failed."""
    job = await finished_job(dep)
    ctx = hook(Receiver(httpx.Response(503)))
    states = [await deliver_webhook(ctx, job["job_id"], 0, attempt) for attempt in range(len(SCHEDULE))]
    assert states == ["pending"] * (len(SCHEDULE) - 1) + ["failed"]
    webhook = await webhook_of(dep, job["job_id"])
    assert webhook["state"] == "failed"
    assert [a["status"] for a in webhook["attempts"]] == [503] * len(SCHEDULE)
    assert await queued_delay(dep, job["job_id"], 0, len(SCHEDULE)) is None


@pytest.mark.parametrize("seed", range(8))
async def test_jitter_differs_by_seed_and_stays_within_20_percent(
    dep: Deployment, hook: Callable[..., JobContext], seed: int
) -> None:
    """Each retry's delay is the scheduled one within ±20 %, and is the same for the same seed."""
    job = await finished_job(dep)
    ctx = hook(Receiver(httpx.Response(500)), seed=seed)
    delays = []
    for attempt in range(len(SCHEDULE) - 1):
        await deliver_webhook(ctx, job["job_id"], 0, attempt)
        delay = await queued_delay(dep, job["job_id"], 0, attempt + 1)
        assert delay is not None
        assert SCHEDULE[attempt + 1] * 0.8 - 0.001 <= delay <= SCHEDULE[attempt + 1] * 1.2 + 0.001
        delays.append(delay)
    replay = random.Random(seed)
    assert delays == pytest.approx([SCHEDULE[n + 1] * replay.uniform(0.8, 1.2) for n in range(3)], abs=0.001)


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [("4000", 4000.0), ("0", None), ("soon", None)],  # None: the jittered schedule decides
)
async def test_retry_after_seconds_is_honoured(
    dep: Deployment, hook: Callable[..., JobContext], retry_after: str, expected: float | None
) -> None:
    """A Retry-After longer than the scheduled delay sets the delay; a shorter or unreadable one does not."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(503, headers={"retry-after": retry_after}))
    assert await deliver_webhook(hook(receiver, seed=5), job["job_id"], 0, 0) == "pending"
    delay = await queued_delay(dep, job["job_id"], 0, 1)
    jittered = SCHEDULE[1] * random.Random(5).uniform(0.8, 1.2)
    assert delay == pytest.approx(jittered if expected is None else expected, abs=0.001)


async def test_retry_after_date_counts_from_the_clock() -> None:
    """An HTTP-date Retry-After is counted from ``send``'s clock; a date in the past means no wait."""
    clock = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    signer = signer_for(TEST_SECRET)
    assert signer is not None
    for later, expected in ((timedelta(seconds=120), 120.0), (timedelta(seconds=-30), 0.0)):
        date = format_datetime(clock + later, usegmt=True)
        receiver = Receiver(httpx.Response(429, headers={"retry-after": date}))
        async with webhook_client(False, 5, transport=httpx.MockTransport(receiver)) as http:
            outcome = await send(http, URL, "msg_x", "{}", signer, now=lambda: clock)
        assert outcome.retry_after == expected
        assert (outcome.delivered, outcome.stop, outcome.attempt.status) == (False, False, 429)
        assert receiver.headers(0)["webhook-timestamp"] == str(int(clock.timestamp()))
        assert outcome.attempt.at == "2030-01-02T03:04:05.000Z"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_redirect_is_not_followed(
    dep: Deployment, hook: Callable[..., JobContext], status: int
) -> None:
    """A redirect counts as a failure (retried) and its Location is never requested."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(status, headers={"location": "http://elsewhere.test/steal"}))
    assert await deliver_webhook(hook(receiver), job["job_id"], 0, 0) == "pending"
    assert [str(r.url) for r in receiver.requests] == [URL]
    (attempt,) = (await webhook_of(dep, job["job_id"]))["attempts"]
    assert (attempt["status"], attempt["error"]) == (status, "redirect not followed")
    assert await queued_delay(dep, job["job_id"], 0, 1) is not None


async def test_redelivery_is_a_new_round_with_the_same_id(
    dep: Deployment, hook: Callable[..., JobContext]
) -> None:
    """After delivery, POST .../redeliver starts round 1: the same bytes and webhook-id, attempts appended;
    a late attempt of the old round sends nothing."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(200))
    ctx = hook(receiver)
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "delivered"
    answer = await dep.client.post(f"/v1/jobs/{job['job_id']}/webhook/redeliver")
    assert answer.status_code == 202, answer.text
    assert answer.json()["webhook"]["state"] == "pending"
    assert await queued_delay(dep, job["job_id"], 1, 0) == 0.0
    assert await deliver_webhook(ctx, job["job_id"], 0, 1) is None  # a stale round: nothing is sent
    assert len(receiver.requests) == 1
    assert await deliver_webhook(ctx, job["job_id"], 1, 0) == "delivered"
    assert receiver.requests[0].content == receiver.requests[1].content
    assert receiver.headers(0)["webhook-id"] == receiver.headers(1)["webhook-id"]
    webhook = await webhook_of(dep, job["job_id"])
    assert (webhook["state"], [a["status"] for a in webhook["attempts"]]) == ("delivered", [200, 200])


async def test_a_retry_sends_the_event_as_the_job_finished_not_as_its_webhook_is_now(
    dep: Deployment, hook: Callable[..., JobContext]
) -> None:
    """The event is rebuilt for each attempt from what never changes after the finish: a retry sends the
    same bytes as the first attempt, whose data shows the webhook pending and without attempts."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(500), httpx.Response(200))
    ctx = hook(receiver)
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "pending"
    assert await deliver_webhook(ctx, job["job_id"], 0, 1) == "delivered"
    first, second = (request.content for request in receiver.requests)
    assert first == second
    assert json.loads(first)["data"]["webhook"] == {"url": URL, "state": "pending", "attempts": []}
    assert "webhook_event" not in json.loads(await dep.redis.get(f"wikiq:job:{job['job_id']}"))


async def test_an_event_frozen_by_an_earlier_version_is_sent_as_stored(
    dep: Deployment, hook: Callable[..., JobContext]
) -> None:
    """A record whose event an earlier version stored (``webhook_event``) sends exactly those bytes."""
    job = await finished_job(dep)
    name = f"wikiq:job:{job['job_id']}"
    record = json.loads(await dep.redis.get(name))
    record["webhook_event"] = '{"type":"batch.succeeded","frozen":true}'
    await dep.redis.set(name, json.dumps(record), keepttl=True)
    receiver = Receiver(httpx.Response(200))
    assert await deliver_webhook(hook(receiver), job["job_id"], 0, 0) == "delivered"
    assert receiver.requests[0].content == b'{"type":"batch.succeeded","frozen":true}'


async def test_an_attempt_run_again_after_delivery_sends_nothing(
    dep: Deployment, hook: Callable[..., JobContext]
) -> None:
    """arq may run an attempt twice; once the webhook is delivered, a repeat sends and records nothing."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(200))
    ctx = hook(receiver)
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "delivered"
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "delivered"
    assert len(receiver.requests) == 1
    assert len((await webhook_of(dep, job["job_id"]))["attempts"]) == 1


async def test_without_a_secret_nothing_is_sent(dep: Deployment, hook: Callable[..., JobContext]) -> None:
    """A worker without WIKIQ_WEBHOOK_SECRET cannot sign: it sends nothing and the delivery stays pending."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(200))
    ctx = hook(receiver)
    ctx["signer"] = None
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "pending"
    assert receiver.requests == []
    assert (await webhook_of(dep, job["job_id"]))["attempts"] == []


async def test_the_event_body_is_the_finished_job(dep: Deployment, hook: Callable[..., JobContext]) -> None:
    """The POSTed body is {"type", "timestamp", "data"}: data is the job object, timestamp its finish time."""
    job = await finished_job(dep)
    receiver = Receiver(httpx.Response(200))
    await deliver_webhook(hook(receiver), job["job_id"], 0, 0)
    body = json.loads(receiver.requests[0].content)
    assert set(body) == {"type", "timestamp", "data"}
    assert body["timestamp"] == job["finished_at"]
    assert body["data"]["job_id"] == job["job_id"] and body["data"]["status"] == "succeeded"
    assert body["data"]["webhook"]["url"] == URL  # the receiver is the submitter's own: not redacted


def _sending(dep: Deployment) -> JobContext:
    """An arq ``ctx`` for ``apply_batch`` in a deployment whose webhook senders send first attempts
    (``WIKIQ_WEBHOOK_SENDERS=true``); a sender counts as alive only once ``_alive`` said so."""
    ctx = dep.worker.context()
    settings = dep.settings.model_copy(update={"webhook_senders": True})
    ctx["resources"] = dataclasses.replace(ctx["resources"], settings=settings)
    return ctx


async def _finished_with(dep: Deployment, ctx: JobContext, url: str = URL) -> dict[str, Any]:
    """A job with a webhook, run by ``apply_batch`` with ``ctx`` (the worker paused meanwhile)."""
    wiki = await dep.new_wiki("first")
    batch = {"message": "m", "edits": [create("wiki/a.md")], "webhook": {"url": url}}
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, batch)
        assert await apply_batch(ctx, job_id) == "succeeded"
    return await dep.wait(job_id)


async def _alive(dep: Deployment) -> None:
    """Set the senders' heartbeat, as a live `wikiq webhooks` process keeps it (a minute here)."""
    await dep.redis.set(keys.SENDERS_ALIVE, b"1", px=60_000)


async def handed_over(dep: Deployment) -> list[bytes]:
    """The records on the webhook senders' list, oldest first."""
    return list(await dep.redis.lrange(keys.FIRST_ATTEMPTS, 0, -1))


async def test_a_finish_hands_the_record_to_the_webhook_senders_and_defers_arqs_attempt(
    dep: Deployment,
) -> None:
    """With webhook senders, the finish pushes the record's exact stored bytes on their list and queues arq's
    attempt 0 the delivery timeout + 10 s later (sent by a worker if no sender records the attempt first)."""
    await dep.redis.delete(keys.FIRST_ATTEMPTS)
    await _alive(dep)
    job = await _finished_with(dep, _sending(dep))
    assert await queued_delay(dep, job["job_id"], 0, 0) == dep.settings.webhook_timeout + 10
    (stored,) = await handed_over(dep)
    assert stored == await dep.redis.get(f"wikiq:job:{job['job_id']}")
    assert 0 < await dep.redis.pttl(keys.FIRST_ATTEMPTS) <= 60_000  # gone a minute after the last push
    assert b"webhook_event" not in stored  # no copy of the event stored
    await dep.redis.delete(keys.FIRST_ATTEMPTS)


async def test_without_webhook_senders_nothing_is_handed_over(dep: Deployment) -> None:
    """``WIKIQ_WEBHOOK_SENDERS=false`` (this module's default): attempt 0 is queued at once, on arq only."""
    await dep.redis.delete(keys.FIRST_ATTEMPTS)
    job = await _finished_with(dep, dep.worker.context())
    assert await queued_delay(dep, job["job_id"], 0, 0) == 0.0
    assert await handed_over(dep) == []


async def test_with_no_sender_alive_attempt_0_is_due_at_once_and_nothing_is_handed_over(
    dep: Deployment,
) -> None:
    """Senders on, but no `wikiq webhooks` process alive (its heartbeat lapsed, or none ever ran): the worker
    queues attempt 0 on arq due at once, as without senders, instead of leaving it to the safety net."""
    await dep.redis.delete(keys.FIRST_ATTEMPTS, keys.SENDERS_ALIVE)
    job = await _finished_with(dep, _sending(dep))
    assert await queued_delay(dep, job["job_id"], 0, 0) == 0.0
    assert await handed_over(dep) == []


async def test_the_senders_list_keeps_the_newest_records_up_to_its_cap(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no sender popping, the list is cut to its cap, dropping the oldest records (their attempts are
    left to arq's safety net)."""
    from worker.jobs import records

    monkeypatch.setattr(records, "FIRST_ATTEMPTS_CAP", 2)
    await dep.redis.delete(keys.FIRST_ATTEMPTS)
    await _alive(dep)
    jobs = [(await _finished_with(dep, _sending(dep)))["job_id"] for _ in range(3)]
    kept = [json.loads(stored)["job_id"] for stored in await handed_over(dep)]
    assert kept == jobs[1:]
    await dep.redis.delete(keys.FIRST_ATTEMPTS)


async def test_a_record_popped_late_is_left_to_arqs_safety_net(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sender that pops a record later than ``STALE_MS`` after its finish sends nothing for it: arq's
    attempt 0, due soon, sends it (a POST now could arrive twice)."""
    from worker.webhooks import first as first_module
    from worker.webhooks.first import FirstAttempts
    from worker.webhooks.http import WebhookSender

    monkeypatch.setattr(first_module, "STALE_MS", -1)  # every record counts as popped late
    await dep.redis.delete(keys.FIRST_ATTEMPTS)
    await dep.redis.rpush(keys.FIRST_ATTEMPTS, b"not a record")  # skipped too, without stopping the sender
    await _alive(dep)
    with running_receiver() as receiver:
        job = await _finished_with(dep, _sending(dep), receiver.url("/late"))
        sender = WebhookSender(allow_private=True, timeout=5)
        signer = signer_for(TEST_SECRET)
        assert signer is not None
        first = FirstAttempts(
            dep.settings, dep.worker.resources.jobs, dep.redis, sender, signer, random.Random(2)
        )
        assert await first.take(block=0) == 2
        await first.close(10)
        await sender.aclose()
        assert receiver.at("/late") == []
    assert await handed_over(dep) == []
    assert (await webhook_of(dep, job["job_id"]))["attempts"] == []
    assert await queued_delay(dep, job["job_id"], 0, 0) == dep.settings.webhook_timeout + 10


@pytest.mark.parametrize(
    ("reply", "state", "next_delay"), [(200, "delivered", None), (500, "pending", SCHEDULE[1])]
)
async def test_a_first_attempt_is_recorded_and_replaces_the_safety_net(
    dep: Deployment, reply: int, state: str, next_delay: float | None
) -> None:
    """``FirstAttempts`` pops the finished record, POSTs the signed event, records the attempt on the job in
    one script, drops arq's attempt 0 and, after a failure, queues attempt 1 on the schedule (±20 %)."""
    from worker.webhooks.first import FirstAttempts
    from worker.webhooks.http import WebhookSender

    got: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = [
            int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")
        ]
        got.append(head + await reader.readexactly(length[0]))
        writer.write(b"HTTP/1.1 %d X\r\ncontent-length: 0\r\n\r\n" % reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    sender = WebhookSender(allow_private=True, timeout=5)
    signer = signer_for(TEST_SECRET)
    assert signer is not None
    first = FirstAttempts(
        dep.settings, dep.worker.resources.jobs, dep.redis, sender, signer, random.Random(2)
    )
    await dep.redis.delete(keys.FIRST_ATTEMPTS)
    await _alive(dep)
    wiki = await dep.new_wiki("first")
    async with server, dep.worker.paused():  # the job's arq entry runs only when told to, below
        job_id = await dep.submit_ok(
            wiki, {"message": "m", "edits": [create("wiki/a.md")], "webhook": {"url": url}}
        )
        assert await apply_batch(_sending(dep), job_id) == "succeeded"
        assert await first.take(block=0) == 1
        await first.close(10)
        # arq's entry of the job, run again (as after a crash before arq saw it end): nothing re-queued
        assert await apply_batch(dep.worker.context(), job_id) == "succeeded"
    await sender.aclose()
    (request,) = got
    head, body = request.split(b"\r\n\r\n", 1)
    headers = dict(line.decode().split(": ", 1) for line in head.split(b"\r\n")[1:])
    event = Webhook(TEST_SECRET).verify(body, {k.lower(): v for k, v in headers.items()})
    assert event["data"]["job_id"] == job_id
    webhook = await webhook_of(dep, job_id)
    assert webhook["state"] == state and [a["status"] for a in webhook["attempts"]] == [reply]
    assert await queued_delay(dep, job_id, 0, 0) is None
    delay = await queued_delay(dep, job_id, 0, 1)
    if next_delay is None:
        assert delay is None
    else:
        assert delay is not None and next_delay * 0.8 - 0.01 <= delay <= next_delay * 1.2 + 0.01


async def test_an_unsendable_url_in_a_burst_is_its_own_failed_attempt(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst holding records whose URLs can never be sent (kept before URLs were encoded at submission:
    a 64-character label, a non-ASCII path, simulated by letting submission keep them as given) beside
    good ones: each good one is POSTed once and recorded delivered; each bad one is recorded failed, with
    its reason, and not retried."""
    from worker.service import submit as submit_module
    from worker.webhooks.first import FirstAttempts
    from worker.webhooks.http import WebhookSender

    async def as_given(url: str, allow_private: bool) -> str:
        return url

    monkeypatch.setattr(submit_module, "check_webhook_url", as_given)
    await dep.redis.delete(keys.FIRST_ATTEMPTS)
    await _alive(dep)
    with running_receiver() as receiver:
        urls = [
            receiver.url("/good-0"),
            "http://" + "a" * 64 + ".example/hook",
            receiver.url("/good-1"),
            receiver.url("/check-✓"),
            receiver.url("/good-2"),
        ]
        sender = WebhookSender(allow_private=True, timeout=5)
        signer = signer_for(TEST_SECRET)
        assert signer is not None
        first = FirstAttempts(
            dep.settings, dep.worker.resources.jobs, dep.redis, sender, signer, random.Random(2)
        )
        wiki = await dep.new_wiki("first")
        jobs = []
        async with dep.worker.paused():  # the jobs' arq entries run only here, by apply_batch
            for n, url in enumerate(urls):
                batch = {"message": "m", "edits": [create(f"wiki/{n}.md")], "webhook": {"url": url}}
                jobs.append(await dep.submit_ok(wiki, batch))
                assert await apply_batch(_sending(dep), jobs[-1]) == "succeeded"
            assert await first.take(block=0) == len(urls)  # one burst
            await first.close(10)
        await sender.aclose()
        assert sorted(d.path for d in receiver.deliveries) == [
            "/check-%E2%9C%93",
            "/good-0",
            "/good-1",
            "/good-2",
        ]
    hooks = [await webhook_of(dep, job_id) for job_id in jobs]
    assert [h["state"] for h in hooks] == ["delivered", "failed", "delivered", "delivered", "delivered"]
    assert all(len(h["attempts"]) == 1 for h in hooks), hooks
    assert hooks[1]["attempts"][0]["error"].startswith("InvalidWebhook: ")
    assert await queued_delay(dep, jobs[1], 0, 1) is None  # not retried: it can never be sent
    for job_id in jobs:
        assert await queued_delay(dep, job_id, 0, 0) is None  # arq's safety net dropped: recorded once
