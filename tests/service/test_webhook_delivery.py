"""Webhook delivery in process: the production ``WebhookSender`` POSTs to a real receiver on loopback
(``tests.e2e.receiver``), the test is the scheduler.

A job is submitted through the app and run by the in-process worker, which hands its webhook to the
outbox (no taker runs in process: the tests below drive one). The test then calls the arq job function
``deliver_webhook(ctx, job_id, round, attempt)`` itself, attempt after attempt, with a context holding a
``WebhookSender`` built as a worker builds it (private addresses allowed, as in every test deployment),
the signer, and a seeded ``random.Random``. Each test has paths of its own on the module's receiver,
scripted with the answers it needs (a status, headers such as ``Retry-After``, a body, or no answer until
the sender times out), and reads back the requests that arrived there: the receiver records each before
answering it. The delay each retry was queued with is read back from arq (``Job.info()``: score minus
enqueue time), so the schedule is checked exactly without waiting for it.
"""

from __future__ import annotations

import errno
import itertools
import json
import random
import re
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
import pytest_asyncio
from arq.jobs import Job
from standardwebhooks import Webhook, WebhookVerificationError

from tests.e2e.receiver import HANG, Answer, Delivery, Receiver, running_receiver
from tests.service.harness import TEST_SECRET, Deployment, create
from worker import keys
from worker.jobs.context import JobContext
from worker.jobs.payloads import loads
from worker.webhooks.deliver import deliver_webhook, send, signer_for
from worker.webhooks.http import WebhookSender
from worker.webhooks.taker import Taker

SCHEDULE = (0.0, 5.0, 300.0, 1800.0)
SETTINGS = {"webhook_retry_schedule": SCHEDULE}
URL = "http://receiver.test/hook?token=capability"  # for jobs whose webhook no test sends
TIMEOUT = 0.5  # seconds a sender waits in the tests that meet a timeout (the others: the deployment's)
UNACCEPTED, REFUSED = "unaccepted", "refused"  # where a POST meets no receiver (``meeting``)
_serial = itertools.count()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """The module's receiver on loopback; each test scripts paths of its own on it."""
    with running_receiver() as running:
        yield running


def fresh() -> str:
    """A path prefix no other test of the module uses."""
    return f"/t{next(_serial)}"


def scripted(receiver: Receiver, *answers: Answer, name: str = "hook") -> str:
    """A path of its own on ``receiver``, with a query as a capability URL has, answering ``answers`` in
    order (the last one repeats; 200 when none)."""
    path = f"{fresh()}/{name}?token=capability"
    if answers:
        receiver.script[path] = list(answers)
    return path


def under(receiver: Receiver, prefix: str) -> list[str]:
    """The paths of the requests that arrived under ``prefix``, sorted."""
    with receiver.arrived:
        return sorted(d.path for d in receiver.deliveries if d.path.startswith(prefix + "/"))


def headers_of(request: Delivery) -> dict[str, str]:
    """The headers of ``request``, names lower-cased."""
    return {name.lower(): value for name, value in request.headers.items()}


@contextmanager
def meeting(receiver: Receiver, reply: Answer | str) -> Iterator[str]:
    """A webhook URL where a POST meets ``reply``: a path of its own on ``receiver`` answering it; for
    ``UNACCEPTED`` a loopback listener that accepts nothing and whose queue is full (Linux drops the SYN:
    the connect never completes); for ``REFUSED`` a loopback port bound, held, and not listening."""
    if not isinstance(reply, str):
        yield receiver.url(scripted(receiver, reply))
    elif reply == UNACCEPTED:
        with socket.create_server(("127.0.0.1", 0), backlog=0) as listener:
            port = listener.getsockname()[1]
            with socket.create_connection(("127.0.0.1", port)):  # the one connection its queue holds
                yield f"http://127.0.0.1:{port}/hook?token=capability"
    else:
        assert reply == REFUSED, reply
        with socket.socket() as bound:
            bound.bind(("127.0.0.1", 0))
            yield f"http://127.0.0.1:{bound.getsockname()[1]}/hook?token=capability"


@pytest_asyncio.fixture(loop_scope="module")
async def hook(dep: Deployment) -> AsyncIterator[Callable[..., JobContext]]:
    """``hook(seed, timeout)``: a delivery context sending with the production ``WebhookSender``, built as
    a worker builds it (``timeout``: the deployment's unless given)."""
    senders: list[WebhookSender] = []

    def build(seed: int = 7, timeout: float | None = None) -> JobContext:
        settings = dep.settings
        http = WebhookSender(settings.webhook_allow_private, timeout or settings.webhook_timeout)
        senders.append(http)
        ctx = dep.worker.context()
        ctx["http"] = http
        ctx["signer"] = signer_for(TEST_SECRET)
        ctx["rng"] = random.Random(seed)
        return ctx

    assert dep.settings.webhook_allow_private  # the receiver is on loopback
    yield build
    for sender in senders:
        await sender.aclose()


async def finished_job(
    dep: Deployment, url: str, edits: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A job with ``webhook.url`` run to its end by the worker (its first attempt waits in the outbox)."""
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


async def test_delivery_is_signed_and_verifies(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """The receiver verifies the signature with standardwebhooks; a tampered body or another secret fails."""
    path = scripted(receiver, (200, {}, b"thanks"))
    job = await finished_job(dep, receiver.url(path))
    assert await deliver_webhook(hook(), job["job_id"], 0, 0) == "delivered"
    (request,) = receiver.at(path)
    headers = headers_of(request)
    assert (request.method, request.path, headers["host"]) == ("POST", path, f"127.0.0.1:{receiver.port}")
    assert headers["content-type"] == "application/json"
    assert headers["webhook-id"] == f"msg_{job['job_id']}"
    event = Webhook(TEST_SECRET).verify(request.body, headers)
    assert event["type"] == "batch.succeeded"
    assert event["data"] == job | {"webhook": event["data"]["webhook"]}  # the finished job, as submitted
    assert event["data"]["result"]["commit"] == job["result"]["commit"]
    with pytest.raises(WebhookVerificationError):
        Webhook(TEST_SECRET).verify(request.body.replace(b"succeeded", b"failed"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "QUJD" * 8).verify(request.body, headers)
    webhook = await webhook_of(dep, job["job_id"])
    assert webhook["state"] == "delivered"
    (attempt,) = webhook["attempts"]
    assert (attempt["status"], attempt["error"]) == (200, None)
    assert attempt["ms"] >= 0 and datetime.fromisoformat(attempt["at"]) <= datetime.now(UTC)
    assert await queued_delay(dep, job["job_id"], 0, 1) is None


async def test_failed_job_is_announced_as_batch_failed(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """A batch the worker refuses is POSTed as batch.failed with the job's error."""
    path = scripted(receiver, (204, {}))
    edits = [{"op": "delete", "path": "wiki/missing.md", "expected_version": "0" * 40}]
    job = await finished_job(dep, receiver.url(path), edits)
    assert job["status"] == "failed"
    assert await deliver_webhook(hook(), job["job_id"], 0, 0) == "delivered"
    (request,) = receiver.at(path)
    event = Webhook(TEST_SECRET).verify(request.body, headers_of(request))
    assert event["type"] == "batch.failed"
    assert event["data"]["job_id"] == job["job_id"]
    assert event["data"]["error"] == job["error"]
    assert event["data"]["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
async def test_any_2xx_is_delivery(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver, status: int
) -> None:
    """Any 2xx answer is delivery: one attempt, state delivered, nothing more queued."""
    job = await finished_job(
        dep, receiver.url(scripted(receiver, (status, {}, b"" if status == 204 else b"ok")))
    )
    assert await deliver_webhook(hook(), job["job_id"], 0, 0) == "delivered"
    webhook = await webhook_of(dep, job["job_id"])
    assert (webhook["state"], [a["status"] for a in webhook["attempts"]]) == ("delivered", [status])
    assert await queued_delay(dep, job["job_id"], 0, 1) is None


async def test_410_stops_after_one_attempt(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """A 410 answer ends delivery at once: one attempt, state failed, no retry queued."""
    path = scripted(receiver, (410, {}, b"gone"))
    job = await finished_job(dep, receiver.url(path))
    assert await deliver_webhook(hook(), job["job_id"], 0, 0) == "failed"
    webhook = await webhook_of(dep, job["job_id"])
    assert (webhook["state"], [a["status"] for a in webhook["attempts"]]) == ("failed", [410])
    assert await queued_delay(dep, job["job_id"], 0, 1) is None
    assert len(receiver.at(path)) == 1


# what a POST meets, the attempt's status, and its error (a pattern, matched in full)
RETRIED: list[tuple[str, Answer | str, int | None, str | None]] = [
    ("500", (500, {}, b"oops"), 500, None),
    ("502", (502, {}), 502, None),
    ("503", (503, {}), 503, None),
    ("404", (404, {}, b"not here"), 404, None),
    ("429", (429, {}), 429, None),
    ("read-timeout", HANG, None, "timeout"),
    ("connect-timeout", UNACCEPTED, None, "timeout"),
    ("connection-refused", REFUSED, None, rf"ConnectError: \[Errno {errno.ECONNREFUSED}\] .*"),
]


@pytest.mark.parametrize(
    ("reply", "status", "error"), [pytest.param(r, s, e, id=n) for n, r, s, e in RETRIED]
)
async def test_failures_are_retried_on_the_schedule_with_jitter(
    dep: Deployment,
    hook: Callable[..., JobContext],
    receiver: Receiver,
    reply: Answer | str,
    status: int | None,
    error: str | None,
) -> None:
    """5xx, other non-2xx, timeouts and connection errors: recorded, then the next attempt is queued after the
    schedule's delay times a jitter drawn from the injected random source, within ±20 %."""
    with meeting(receiver, reply) as url:
        job = await finished_job(dep, url)
        ctx = hook(seed=11, timeout=TIMEOUT if error == "timeout" else None)
        assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "pending"
    webhook = await webhook_of(dep, job["job_id"])
    (attempt,) = webhook["attempts"]
    assert attempt["status"] == status
    if error is None:
        assert attempt["error"] is None
    else:
        assert re.fullmatch(error, attempt["error"]), attempt["error"]
    delay = await queued_delay(dep, job["job_id"], 0, 1)
    expected = SCHEDULE[1] * random.Random(11).uniform(0.8, 1.2)
    assert delay is not None and abs(delay - expected) <= 0.001, (delay, expected)
    assert SCHEDULE[1] * 0.8 <= delay <= SCHEDULE[1] * 1.2


async def test_three_failures_then_200_is_four_attempts_with_one_id(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """500, timeout, 503, 200: four POSTs of one body under one webhook-id, each retry on the schedule."""
    path = scripted(receiver, (500, {}), HANG, (503, {}), (200, {}))
    job = await finished_job(dep, receiver.url(path))
    ctx = hook(seed=3, timeout=TIMEOUT)
    replay = random.Random(3)
    for attempt in range(3):
        assert await deliver_webhook(ctx, job["job_id"], 0, attempt) == "pending"
        delay = await queued_delay(dep, job["job_id"], 0, attempt + 1)
        expected = SCHEDULE[attempt + 1] * replay.uniform(0.8, 1.2)
        assert delay is not None and abs(delay - expected) <= 0.001, (attempt, delay, expected)
    assert await deliver_webhook(ctx, job["job_id"], 0, 3) == "delivered"
    receiver.wait_for(lambda: len(receiver.at(path)) == 4)  # the one it gave up on included
    requests = receiver.at(path)
    assert len({r.body for r in requests}) == 1
    assert {headers_of(r)["webhook-id"] for r in requests} == {f"msg_{job['job_id']}"}
    for request in requests:
        Webhook(TEST_SECRET).verify(request.body, headers_of(request))
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
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """A receiver that always answers 503 gets one attempt per schedule entry, then the state is failed."""
    path = scripted(receiver, (503, {}))
    job = await finished_job(dep, receiver.url(path))
    ctx = hook()
    states = [await deliver_webhook(ctx, job["job_id"], 0, attempt) for attempt in range(len(SCHEDULE))]
    assert states == ["pending"] * (len(SCHEDULE) - 1) + ["failed"]
    webhook = await webhook_of(dep, job["job_id"])
    assert webhook["state"] == "failed"
    assert [a["status"] for a in webhook["attempts"]] == [503] * len(SCHEDULE)
    assert await queued_delay(dep, job["job_id"], 0, len(SCHEDULE)) is None
    assert len(receiver.at(path)) == len(SCHEDULE)


@pytest.mark.parametrize("seed", range(8))
async def test_jitter_differs_by_seed_and_stays_within_20_percent(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver, seed: int
) -> None:
    """Each retry's delay is the scheduled one within ±20 %, and is the same for the same seed."""
    job = await finished_job(dep, receiver.url(scripted(receiver, (500, {}))))
    ctx = hook(seed=seed)
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
    # None: the jittered schedule decides; past the schedule's longest delay, that delay
    [("900", 900.0), ("4000", 1800.0), ("9" * 400, 1800.0), ("0", None), ("soon", None), ("1e400", None)],
)
async def test_retry_after_seconds_is_honoured(
    dep: Deployment,
    hook: Callable[..., JobContext],
    receiver: Receiver,
    retry_after: str,
    expected: float | None,
) -> None:
    """A Retry-After longer than the scheduled delay sets the delay, up to the schedule's longest; a
    shorter or unreadable one does not."""
    job = await finished_job(dep, receiver.url(scripted(receiver, (503, {"retry-after": retry_after}))))
    assert await deliver_webhook(hook(seed=5), job["job_id"], 0, 0) == "pending"
    delay = await queued_delay(dep, job["job_id"], 0, 1)
    jittered = SCHEDULE[1] * random.Random(5).uniform(0.8, 1.2)
    assert delay == pytest.approx(jittered if expected is None else expected, abs=0.001)


async def test_retry_after_date_counts_from_the_clock(receiver: Receiver) -> None:
    """An HTTP-date Retry-After is counted from ``send``'s clock; a date in the past means no wait."""
    clock = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    signer = signer_for(TEST_SECRET)
    assert signer is not None
    for later, expected in ((timedelta(seconds=120), 120.0), (timedelta(seconds=-30), 0.0)):
        date = format_datetime(clock + later, usegmt=True)
        path = scripted(receiver, (429, {"retry-after": date}))
        sender = WebhookSender(allow_private=True, timeout=5)
        try:
            outcome = await send(sender, receiver.url(path), "msg_x", "{}", signer, now=lambda: clock)
        finally:
            await sender.aclose()
        assert outcome.retry_after == expected
        assert (outcome.delivered, outcome.stop, outcome.attempt.status) == (False, False, 429)
        (request,) = receiver.at(path)
        assert headers_of(request)["webhook-timestamp"] == str(int(clock.timestamp()))
        assert outcome.attempt.at == "2030-01-02T03:04:05.000Z"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_redirect_is_not_followed(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver, status: int
) -> None:
    """A redirect counts as a failure (retried) and its Location, on the same receiver, is never requested."""
    elsewhere = scripted(receiver, name="steal")
    path = scripted(receiver, (status, {"location": receiver.url(elsewhere)}))
    job = await finished_job(dep, receiver.url(path))
    assert await deliver_webhook(hook(), job["job_id"], 0, 0) == "pending"
    assert [r.path for r in receiver.at(path)] == [path]
    assert receiver.at(elsewhere) == []
    (attempt,) = (await webhook_of(dep, job["job_id"]))["attempts"]
    assert (attempt["status"], attempt["error"]) == (status, "redirect not followed")
    assert await queued_delay(dep, job["job_id"], 0, 1) is not None


async def test_redelivery_is_a_new_round_with_the_same_id(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """After delivery, POST .../redeliver starts round 1: the same bytes and webhook-id, attempts appended;
    a late attempt of the old round sends nothing."""
    path = scripted(receiver, (200, {}))
    job = await finished_job(dep, receiver.url(path))
    ctx = hook()
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "delivered"
    answer = await dep.client.post(f"/v1/jobs/{job['job_id']}/webhook/redeliver")
    assert answer.status_code == 202, answer.text
    assert answer.json()["webhook"]["state"] == "pending"
    assert (job["job_id"], 1) in await outbox(dep)
    assert await deliver_webhook(ctx, job["job_id"], 0, 1) is None  # a stale round: nothing is sent
    assert len(receiver.at(path)) == 1
    assert await deliver_webhook(ctx, job["job_id"], 1, 0) == "delivered"
    first, second = receiver.at(path)
    assert first.body == second.body
    assert headers_of(first)["webhook-id"] == headers_of(second)["webhook-id"]
    webhook = await webhook_of(dep, job["job_id"])
    assert (webhook["state"], [a["status"] for a in webhook["attempts"]]) == ("delivered", [200, 200])


async def test_a_retry_sends_the_event_as_the_job_finished_not_as_its_webhook_is_now(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """The event is rebuilt for each attempt from what never changes after the finish: a retry sends the
    same bytes as the first attempt, whose data shows the webhook pending and without attempts."""
    path = scripted(receiver, (500, {}), (200, {}))
    url = receiver.url(path)
    job = await finished_job(dep, url)
    ctx = hook()
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "pending"
    assert await deliver_webhook(ctx, job["job_id"], 0, 1) == "delivered"
    first, second = (request.body for request in receiver.at(path))
    assert first == second
    assert json.loads(first)["data"]["webhook"] == {"url": url, "state": "pending", "attempts": []}


async def test_an_attempt_run_again_after_delivery_sends_nothing(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """arq may run an attempt twice; once the webhook is delivered, a repeat sends and records nothing."""
    path = scripted(receiver, (200, {}))
    job = await finished_job(dep, receiver.url(path))
    ctx = hook()
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "delivered"
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "delivered"
    assert len(receiver.at(path)) == 1
    assert len((await webhook_of(dep, job["job_id"]))["attempts"]) == 1


async def test_without_a_secret_nothing_is_sent(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """A worker without WIKIQ_WEBHOOK_SECRET cannot sign: it sends nothing and the delivery stays pending."""
    path = scripted(receiver, (200, {}))
    job = await finished_job(dep, receiver.url(path))
    ctx = hook()
    ctx["signer"] = None
    assert await deliver_webhook(ctx, job["job_id"], 0, 0) == "pending"
    assert receiver.at(path) == []
    assert (await webhook_of(dep, job["job_id"]))["attempts"] == []


async def test_the_event_body_is_the_finished_job(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """The POSTed body is {"type", "timestamp", "data"}: data is the job object, timestamp its finish time."""
    path = scripted(receiver, (200, {}))
    url = receiver.url(path)
    job = await finished_job(dep, url)
    await deliver_webhook(hook(), job["job_id"], 0, 0)
    (request,) = receiver.at(path)
    body = json.loads(request.body)
    assert set(body) == {"type", "timestamp", "data"}
    assert body["timestamp"] == job["finished_at"]
    assert body["data"]["job_id"] == job["job_id"] and body["data"]["status"] == "succeeded"
    assert body["data"]["webhook"]["url"] == url  # the receiver is the submitter's own: not redacted


async def outbox(dep: Deployment) -> list[tuple[str, int]]:
    """The entries of every partition's outbox, as (job id, round)."""
    found = []
    for partition in range(dep.settings.partitions):
        for _, fields in await dep.redis.xrange(keys.outbox(partition)):
            found.append((fields[b"job"].decode(), int(fields[b"round"])))
    return found


async def empty_outbox(dep: Deployment) -> None:
    """Delete every partition's outbox (a taker's next read joins again)."""
    await dep.redis.delete(*(keys.outbox(p) for p in range(dep.settings.partitions)))


def taker(dep: Deployment, name: str = "taker-a") -> Taker:
    """A taker of this deployment's outbox (consumer ``name``) sending to loopback."""
    signer = signer_for(TEST_SECRET)
    assert signer is not None
    sender = WebhookSender(allow_private=True, timeout=5)
    jobs = dep.worker.resources.jobs
    return Taker(dep.settings, jobs, dep.redis, sender, signer, random.Random(2), name)


async def take_all(one: Taker) -> int:
    """Read what waits in the outbox, send it as one burst and record it; how many entries were read."""
    await one.outbox.join()
    entries = await one.outbox.read(0)
    if entries:
        await one.deliver(entries)
    await one.sender.aclose()
    return len(entries)


async def _finished(dep: Deployment, url: str = URL) -> str:
    """A job with a webhook run to its end by the worker; its id."""
    wiki = await dep.new_wiki("first")
    return (await dep.apply(wiki, {"message": "m", "edits": [create("wiki/a.md")], "webhook": {"url": url}}))[
        "job_id"
    ]


async def test_a_finish_appends_one_outbox_entry_and_queues_nothing_on_arq(dep: Deployment) -> None:
    """The finish hands the webhook over as one entry (job id, round 0) on its partition's outbox: no record
    bytes, no attempt on arq; a job without a webhook appends nothing."""
    await empty_outbox(dep)
    job_id = await _finished(dep)
    wiki = await dep.new_wiki("plain")
    await dep.apply(wiki, {"message": "m", "edits": [create("wiki/a.md")]})
    assert await outbox(dep) == [(job_id, 0)]
    record = await dep.worker.resources.jobs.get(job_id)
    assert record is not None
    (_, fields), *_ = await dep.redis.xrange(keys.outbox(record.partition))
    assert set(fields) == {b"job", b"round"}
    assert await queued_delay(dep, job_id, 0, 0) is None


async def test_a_redelivery_appends_its_round_to_the_outbox(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """POST .../redeliver hands round 1 to the outbox in the same write that starts it."""
    job_id = await _finished(dep, receiver.url(scripted(receiver, (200, {}))))
    assert await deliver_webhook(hook(), job_id, 0, 0) == "delivered"
    await empty_outbox(dep)
    answer = await dep.client.post(f"/v1/jobs/{job_id}/webhook/redeliver")
    assert answer.status_code == 202, answer.text
    assert await outbox(dep) == [(job_id, 1)]


async def test_the_outbox_is_trimmed_past_its_cap(dep: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no taker reading, a partition's outbox keeps about ``OUTBOX_CAP`` entries, dropping the oldest
    (``MAXLEN ~``: whole nodes of ``stream-node-max-entries`` entries, set to 1 here to see it exactly)."""
    from worker.jobs import store

    monkeypatch.setattr(store, "OUTBOX_CAP", 2)
    before = await dep.redis.config_get("stream-node-max-entries")
    await dep.redis.config_set("stream-node-max-entries", 1)
    try:
        await empty_outbox(dep)
        jobs = [await _finished(dep) for _ in range(8)]
        by_partition: dict[int, list[str]] = {}
        for job_id in jobs:
            record = await dep.worker.resources.jobs.get(job_id)
            assert record is not None
            by_partition.setdefault(record.partition, []).append(job_id)
        kept = [job for job, _ in await outbox(dep)]
        assert sorted(kept) == sorted(job for ids in by_partition.values() for job in ids[-2:])
        assert len(kept) < len(jobs)
    finally:
        await dep.redis.config_set("stream-node-max-entries", before["stream-node-max-entries"])


@pytest.mark.parametrize(
    ("reply", "state", "next_delay"), [(200, "delivered", None), (500, "pending", SCHEDULE[1])]
)
async def test_a_taker_sends_records_and_acknowledges_a_first_attempt(
    dep: Deployment, receiver: Receiver, reply: int, state: str, next_delay: float | None
) -> None:
    """A taker reads the entry, POSTs the signed event, records the attempt on the job, acknowledges and
    deletes the entry in one script and, after a failure, queues attempt 1 on the schedule (±20 %)."""
    path = scripted(receiver, (reply, {}))
    await empty_outbox(dep)
    job_id = await _finished(dep, receiver.url(path))
    assert await take_all(taker(dep)) == 1
    (request,) = receiver.at(path)
    event = Webhook(TEST_SECRET).verify(request.body, headers_of(request))
    assert event["data"]["job_id"] == job_id
    webhook = await webhook_of(dep, job_id)
    assert webhook["state"] == state and [a["status"] for a in webhook["attempts"]] == [reply]
    assert await outbox(dep) == []  # acknowledged and deleted
    pending = await dep.redis.xpending(keys.outbox(0), keys.OUTBOX_GROUP)
    assert pending["pending"] == 0
    delay = await queued_delay(dep, job_id, 0, 1)
    if next_delay is None:
        assert delay is None
    else:
        assert delay is not None and next_delay * 0.8 - 0.01 <= delay <= next_delay * 1.2 + 0.01


async def test_entries_needing_no_attempt_are_dropped_unsent(
    dep: Deployment, hook: Callable[..., JobContext], receiver: Receiver
) -> None:
    """An entry of a job already delivered, of an older round, of an unknown job, or not wikiq's, is
    acknowledged and deleted without a POST."""
    path = scripted(receiver, name="once")
    job_id = await _finished(dep, receiver.url(path))
    await empty_outbox(dep)
    assert await deliver_webhook(hook(), job_id, 0, 0) == "delivered"
    assert len(receiver.at(path)) == 1
    for fields in ({"job": job_id, "round": 0}, {"job": job_id, "round": 7}, {"job": "nope", "round": 0}):
        await dep.redis.xadd(keys.outbox(0), fields)
    await dep.redis.xadd(keys.outbox(1), {"other": "x"})
    assert await take_all(taker(dep)) == 4
    assert len(receiver.at(path)) == 1  # the delivery's own POST only
    assert await outbox(dep) == [] and await dep.redis.xlen(keys.outbox(1)) == 0


async def test_what_a_dead_taker_left_pending_is_claimed_and_sent_once(
    dep: Deployment, receiver: Receiver
) -> None:
    """Entries one consumer read and never recorded (it died) stay pending; another taker's ``claim``
    takes them once idle long enough, sends and records them; nothing is left pending."""
    path = scripted(receiver, name="claimed")
    await empty_outbox(dep)
    job_id = await _finished(dep, receiver.url(path))
    dead = taker(dep, "taker-dead")
    await dead.outbox.join()
    assert [e.job_id for e in await dead.outbox.read(0)] == [job_id]  # taken, then the taker "dies"
    await dead.sender.aclose()
    alive = taker(dep, "taker-alive")
    assert await alive.outbox.read(0) == []  # a new read does not see it: it is the dead one's
    claimed = await alive.outbox.take_idle(0)
    assert [e.job_id for e in claimed] == [job_id]
    await alive.deliver(claimed)
    await alive.sender.aclose()
    assert len(receiver.at(path)) == 1
    assert (await webhook_of(dep, job_id))["state"] == "delivered"
    assert await outbox(dep) == []


async def test_an_unsendable_url_in_a_burst_is_its_own_failed_attempt(
    dep: Deployment, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst holding jobs whose URLs can never be sent (kept before URLs were encoded at submission:
    a 64-character label, a non-ASCII path, simulated by letting submission keep them as given) beside
    good ones: each good one is POSTed once and recorded delivered; each bad one is recorded failed, with
    its reason, and not retried."""
    from worker.service import submit as submit_module

    async def as_given(url: str, allow_private: bool) -> str:
        return url

    monkeypatch.setattr(submit_module, "check_webhook_url", as_given)
    await empty_outbox(dep)
    at = fresh()
    urls = [
        receiver.url(f"{at}/good-0"),
        "http://" + "a" * 64 + ".example/hook",
        receiver.url(f"{at}/good-1"),
        receiver.url(f"{at}/check-✓"),
        receiver.url(f"{at}/good-2"),
    ]
    jobs = [await _finished(dep, url) for url in urls]
    assert await take_all(taker(dep)) == len(urls)  # one burst
    assert under(receiver, at) == [f"{at}/check-%E2%9C%93", f"{at}/good-0", f"{at}/good-1", f"{at}/good-2"]
    hooks = [await webhook_of(dep, job_id) for job_id in jobs]
    assert [h["state"] for h in hooks] == ["delivered", "failed", "delivered", "delivered", "delivered"]
    assert all(len(h["attempts"]) == 1 for h in hooks), hooks
    assert hooks[1]["attempts"][0]["error"].startswith("InvalidWebhook: ")
    assert await queued_delay(dep, jobs[1], 0, 1) is None  # not retried: it can never be sent


@pytest.mark.parametrize("told", ["9" * 400, "Fri, 31 Dec 9999 23:59:59 GMT"])
async def test_a_retry_after_far_beyond_the_schedule_is_clamped_and_the_burst_recorded(
    dep: Deployment, receiver: Receiver, told: str
) -> None:
    """A receiver answering a ``Retry-After`` of 400 digits, or a date centuries ahead, in a burst beside
    good receivers: every attempt of the burst is recorded and acknowledged; the hostile one's next attempt
    is queued after the schedule's longest delay, not never, and nothing stays in the outbox."""
    await empty_outbox(dep)
    at = fresh()
    receiver.script[f"{at}/far"] = [(503, {"Retry-After": told})]
    urls = [receiver.url(f"{at}/good-0"), receiver.url(f"{at}/far"), receiver.url(f"{at}/good-1")]
    jobs = [await _finished(dep, url) for url in urls]
    assert await take_all(taker(dep)) == len(urls)  # one burst
    assert under(receiver, at) == [f"{at}/far", f"{at}/good-0", f"{at}/good-1"]
    hooks = [await webhook_of(dep, job_id) for job_id in jobs]
    assert [h["state"] for h in hooks] == ["delivered", "pending", "delivered"]
    assert [[a["status"] for a in h["attempts"]] for h in hooks] == [[200], [503], [200]]
    assert await queued_delay(dep, jobs[1], 0, 1) == pytest.approx(max(SCHEDULE), abs=0.01)
    assert await outbox(dep) == []
    assert (await dep.redis.xpending(keys.outbox(0), keys.OUTBOX_GROUP))["pending"] == 0
