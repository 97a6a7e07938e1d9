"""Webhook delivery: Standard Webhooks signatures, one POST per attempt, retries scheduled as arq jobs.

A job's first attempt (of each round) is sent by a taker of the outbox (``worker.webhooks.taker``); each later
attempt is an arq job on the ``wikiq:webhooks`` queue (``enqueue_attempt``, consumed by every worker process,
never by the partition consumers, so a slow receiver cannot delay the next batch). ``deliver_webhook`` makes
one POST and records it on the job: a 2xx within the timeout is delivery; ``410`` stops; a redirect (never
followed), another status, a timeout or a connection error schedules the next attempt after the configured
delay (with jitter, at least ``Retry-After``). The event POSTed (``event_body``) is a function of the
finished job alone, so every attempt and every retry sends the same bytes under the same ``webhook-id``.

Each POST is made by the ``WebhookSender`` (``worker.webhooks.http``), which production and the tests alike
hand in: at connect time it resolves the host again and refuses private addresses, so DNS rebinding after
the submission check gains nothing (unless private addresses are allowed).
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from arq import Retry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from standardwebhooks import Webhook

from worker import keys
from worker.errors import OUTAGES, WebhookRefused, WikiqError
from worker.jobs import events as telemetry
from worker.jobs.clock import iso, now_ms
from worker.jobs.context import JobContext
from worker.jobs.record import JobRecord, WebhookDelivery
from worker.jobs.store import JobStore
from worker.schema.answers import Attempt
from worker.webhooks.guard import sendable_url
from worker.webhooks.http import SendError, WebhookSender

log = logging.getLogger("wikiq.webhooks")


@dataclass(frozen=True)
class Outcome:
    """One attempt: what to record, and whether to stop or retry (after at least ``retry_after`` s)."""

    attempt: Attempt
    delivered: bool
    stop: bool
    retry_after: float | None


def utc_now() -> datetime:
    """The current time (UTC): the default clock of ``send``."""
    return datetime.now(UTC)


_SECONDS = re.compile(r"[0-9]+")
_MOST_SECONDS = 10**9  # what a longer run of digits counts as (clamped by ``next_delay`` anyway)


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """A ``Retry-After`` header's wait in seconds, counted from ``now``, or None when it is absent or not
    one of its two forms (RFC 9110: a non-negative integer of seconds, or an HTTP date; a date in the past
    is 0). Always finite: ``next_delay`` clamps it to the schedule."""
    if not value:
        return None
    value = value.strip()
    if _SECONDS.fullmatch(value):
        return float(int(value)) if len(value) <= 9 else float(_MOST_SECONDS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no zone said
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, (when - now).total_seconds()), float(_MOST_SECONDS))


def event_type(record: JobRecord) -> str:
    """The event a finished job sends: ``batch.succeeded``/``batch.failed``; for a proposal's check,
    ``proposal.proposed`` (open for review) or ``proposal.failed``, then ``proposal.approved`` or
    ``proposal.rejected`` once decided; for its landing, ``proposal.landed``, or ``proposal.stale`` when the
    wiki changed since the check (any refusal of the batch's checks)."""
    succeeded = record.status == "succeeded"
    if record.deciding:  # a proposal's check announcing its decision
        return f"proposal.{record.decided}"
    if not record.proposal:
        return "batch.succeeded" if succeeded else "batch.failed"
    if record.dry_run:
        return "proposal.proposed" if succeeded else "proposal.failed"
    if succeeded:
        return "proposal.landed"
    refused = record.error is not None and record.error.code not in OUTAGES
    return "proposal.stale" if refused else "proposal.failed"


def event_body(record: JobRecord) -> str:
    """The event POSTed for a finished job: type, timestamp and the job object as it was when the job
    finished (its webhook pending, without attempts). A function of what never changes after the finish,
    so every attempt and every redelivery sends the same bytes, and no copy of them is stored."""
    kind = event_type(record)
    finished = record
    if record.webhook is not None:
        finished = record.model_copy(update={"webhook": WebhookDelivery(url=record.webhook.url)})
    data = finished.public(reveal=True).model_dump_json()  # the receiver is the submitter's own
    at = record.decided_ms if record.deciding else record.finished_ms
    timestamp = iso(at if at is not None else now_ms())
    return f'{{"type":"{kind}","timestamp":"{timestamp}","data":{data}}}'  # both plain ASCII, no escapes


def event_id(record: JobRecord) -> str:
    """The ``webhook-id`` of the event ``record`` sends: ``msg_<job id>``, the same on every retry and
    redelivery; a proposal's decision is an event of its own (``msg_<job id>_approved``)."""
    return f"msg_{record.job_id}_{record.decided}" if record.deciding else f"msg_{record.job_id}"


async def send(
    sender: WebhookSender,
    url: str,
    event_id: str,
    body: str,
    signer: Webhook,
    now: Callable[[], datetime] = utc_now,
) -> Outcome:
    """POST ``body`` signed for ``event_id`` once; never raises: every failure (the receiver's, the
    network's, a URL that cannot be sent, a bug) is the outcome of this attempt alone. A URL that can never
    be sent stops (no retry).

    ``now`` is the clock: the signed timestamp, and what a ``Retry-After`` date is counted from.
    """
    sent_at = now()
    try:
        url = sendable_url(url)
    except WikiqError as exc:  # kept before URLs were encoded at submission: it can never be sent
        return failed(sent_at, f"InvalidWebhook: {exc.message}"[:200], stop=True)
    headers = {
        "content-type": "application/json",
        "webhook-id": event_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": signer.sign(event_id, sent_at, body),
    }
    start = time.perf_counter()
    status: int | None = None
    error: str | None = None
    retry_after = None
    try:
        answer = await sender.post(url, body.encode(), headers)
        status = answer.status
        retry_after = retry_after_seconds(answer.retry_after, now())
        if 300 <= status < 400:  # any 3xx: never followed
            error = "redirect not followed"
    except TimeoutError:
        error = "timeout"
    except SendError as exc:  # no HTTP answer: ``<kind>: <detail>``
        error = str(exc)[:200]
    except Exception as exc:  # a failure of this one attempt, whatever it is, is this attempt's alone
        log.warning("webhook attempt for %s failed unexpectedly", event_id, exc_info=exc)
        error = f"{type(exc).__name__}: {str(exc)[:200]}"
    attempt = Attempt(
        at=sent_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        status=status,
        error=error,
        ms=round((time.perf_counter() - start) * 1000),
    )
    delivered = status is not None and 200 <= status < 300
    return Outcome(attempt, delivered, stop=delivered or status == 410, retry_after=retry_after)


def failed(at: datetime, reason: str, stop: bool = False) -> Outcome:
    """An attempt that got no answer for ``reason`` (retried on the schedule unless ``stop``)."""
    attempt = Attempt(
        at=at.isoformat(timespec="milliseconds").replace("+00:00", "Z"), status=None, error=reason, ms=0
    )
    return Outcome(attempt, delivered=False, stop=stop, retry_after=None)


def next_delay(
    schedule: tuple[float, ...], attempt: int, retry_after: float | None, rng: random.Random
) -> float | None:
    """Seconds before attempt ``attempt`` (0-based), or None when the schedule is exhausted: the scheduled
    delay with ±20 % jitter, or the receiver's ``retry_after`` when that is longer, but never longer than
    the schedule's longest delay (a receiver cannot park a webhook past the schedule's bounds)."""
    if attempt >= len(schedule):
        return None
    delay = schedule[attempt] * rng.uniform(0.8, 1.2)
    told = min(retry_after or 0.0, max(schedule))
    return max(delay, told)


async def enqueue_attempt(redis: Any, job_id: str, round_: int, attempt: int, delay: float) -> None:
    """Queue one delivery attempt on arq (the arq job id makes a second enqueue of it a no-op)."""
    await redis.enqueue_job(
        "deliver_webhook",
        job_id,
        round_,
        attempt,
        _job_id=keys.attempt(job_id, round_, attempt),
        _queue_name=keys.WEBHOOK_QUEUE,
        _defer_by=delay,
    )


async def deliver_webhook(ctx: JobContext, job_id: str, round_: int, attempt: int) -> str | None:
    """arq job: one delivery attempt for ``job_id`` (a retry: the first attempt is sent by the taker,
    ``worker.webhooks.taker``), recorded on the job; schedules the next if needed.

    If Redis is away, the attempt runs again a second later (arq's ``Retry``) rather than being dropped,
    so a pending delivery outlives a Redis restart. With ``lanes`` in ``ctx``, a retry of a principal that
    has its lane's worth in flight already runs again later (within the delivery timeout) instead of
    taking one more of arq's slots (``worker.webhooks.lanes``).
    """
    try:
        return await _attempt(ctx, job_id, round_, attempt)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise Retry(defer=1) from exc


async def _attempt(ctx: JobContext, job_id: str, round_: int, attempt: int) -> str | None:
    jobs: JobStore = ctx["resources"].jobs
    settings = ctx["resources"].settings
    record = await jobs.get(job_id)
    if record is None or record.webhook is None or record.webhook.round != round_:
        return None
    if record.webhook.state != "pending":
        return record.webhook.state
    assert record.webhook is not None
    signer = ctx.get("signer")
    if signer is None:  # the secret was removed after the job was accepted: nothing can be signed
        log.warning("webhook of job %s not sent: WIKIQ_WEBHOOK_SECRET is not set", job_id)
        return record.webhook.state
    lanes = ctx.get("lanes")
    if lanes is not None and lanes.full(record.submitter):  # its lane is taken: back on the queue
        raise Retry(defer=settings.webhook_timeout * ctx["rng"].uniform(0.5, 1.0))
    async with lanes.slot(record.submitter) if lanes is not None else contextlib.nullcontext():
        outcome = await send(ctx["http"], record.webhook.url, event_id(record), event_body(record), signer)
    delay = (
        None
        if outcome.stop
        else next_delay(settings.webhook_retry_schedule, attempt + 1, outcome.retry_after, ctx["rng"])
    )

    after = await jobs.update(job_id, noting(round_, outcome, delay))
    if after is not None and delay is None:  # this round ended: a decision waiting for it goes out now
        after = await jobs.update(job_id, JobRecord.begin_decision) or after
    telemetry.webhook_attempt(after or record, round_, attempt, outcome.attempt)
    if delay is not None:
        await enqueue_attempt(ctx["redis"], job_id, round_, attempt + 1, delay)
    return None if after is None or after.webhook is None else after.webhook.state


def noting(round_: int, outcome: Outcome, delay: float | None) -> Callable[[JobRecord], JobRecord | None]:
    """The change that records ``outcome`` on a job (nothing when its webhook is in another round by
    now): one more attempt, and the state it leaves (``delay``: the next attempt's, None if none)."""

    def note(r: JobRecord) -> JobRecord | None:
        if r.webhook is None or r.webhook.round != round_:
            return None
        r.webhook.attempts.append(outcome.attempt)
        r.webhook.state = "delivered" if outcome.delivered else ("pending" if delay is not None else "failed")
        return r

    return note


def signer_for(secret: str | None) -> Webhook | None:
    """The Standard Webhooks signer of ``secret``; ``WebhookRefused`` when the secret is malformed."""
    if secret is None:
        return None
    if not secret.startswith("whsec_"):
        raise WebhookRefused("WIKIQ_WEBHOOK_SECRET must start with whsec_")
    try:
        signer = Webhook(secret)
    except Exception:
        raise WebhookRefused("WIKIQ_WEBHOOK_SECRET is not whsec_ followed by base64") from None
    return signer
