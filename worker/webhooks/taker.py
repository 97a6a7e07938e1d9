"""The one sender of first webhook attempts: a taker gets entries of the outbox (``worker.webhooks.outbox``),
POSTs, and records what happened.

Every ``wikiq worker`` process has a taker, and entries reach it two ways:

- the jobs it finishes: their finish script takes the partition's new entries for it (``finished``), and
  it POSTs those attempts from the records in hand, every request written before the worker goes on to
  its next job: no other process, no read of the records back;
- the rest of the outbox (a redelivery's entry, what a dead taker left): read with ``XREADGROUP`` by the
  takers that serve it (``serve``), every worker's unless ``WIKIQ_WEBHOOK_SENDERS`` leaves that to
  ``wikiq webhooks`` processes, which run nothing else (``worker.sender``). Such a read is a burst: one
  ``MGET`` for the records, then its POSTs at once.

Either way (``IN_FLIGHT`` POSTs at most per process, one principal's ``FIRST_EACH`` at most:
``worker.webhooks.lanes``) one script then records every attempt of a burst (a principal's part of it) on
its job (compared against the exact bytes the attempt was built from), acknowledges and deletes its entry
and queues the next attempt on arq when one is due. Retries (attempt 1 on) are arq jobs on the
``wikiq:webhooks`` queue that the workers run (``worker.webhooks.deliver``).

Nothing is lost when a taker dies: what it took stays pending in the outbox's group, and every serving
taker takes entries left pending longer than the delivery timeout plus ``TAKE_MARGIN`` (checking every
half of that), so at worst a receiver sees an event twice under the same ``webhook-id``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any

from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError
from standardwebhooks import Webhook

from worker import faults, keys
from worker.jobs import events as telemetry
from worker.jobs.arq_compat import job_entry, job_keys
from worker.jobs.clock import now_ms
from worker.jobs.handover import OutboxEntry
from worker.jobs.payloads import dumps
from worker.jobs.record import JobRecord
from worker.jobs.store import JobStore
from worker.settings import Settings
from worker.tasks import cancel_and_wait
from worker.webhooks.deliver import (
    Outcome,
    enqueue_attempt,
    event_body,
    event_id,
    failed,
    next_delay,
    noting,
    send,
    utc_now,
)
from worker.webhooks.http import WebhookSender
from worker.webhooks.lanes import FIRST_EACH, FIRST_IN_FLIGHT, Lanes
from worker.webhooks.outbox import TAKE_MARGIN, Outbox, RecordItem

log = logging.getLogger("wikiq.webhooks")
IN_FLIGHT = FIRST_IN_FLIGHT  # POSTs, and bursts, this process has in flight at most
BLOCK_MS = 1000  # the longest one read of the outbox waits for an entry


def idle_before_taking_ms(settings: Settings) -> int:
    """How long an entry stays pending with the taker that read it before another takes it."""
    return int((settings.webhook_timeout + TAKE_MARGIN) * 1000)


def taker_name(kind: str) -> str:
    """A consumer name for one process's taker (``kind``: worker or webhooks), unique among every process
    that ever takes: a restarted process takes what its earlier self left, as any other taker does."""
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"


class Taker:
    """One process's taker of first attempts (see the module): consumer ``name`` of the outbox's group."""

    def __init__(
        self,
        settings: Settings,
        jobs: JobStore,
        redis: Redis,
        sender: WebhookSender,
        signer: Webhook,
        rng: random.Random,
        name: str,
    ) -> None:
        self.name = name
        self.schedule = settings.webhook_retry_schedule
        self.idle_ms = idle_before_taking_ms(settings)
        self.jobs = jobs
        self.redis = redis
        self.outbox = Outbox(redis, settings.partitions, name)
        self.sender = sender
        self.signer = signer
        self.rng = rng
        self.lanes = Lanes(IN_FLIGHT, FIRST_EACH)
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self, stopping: asyncio.Event) -> None:
        """Take and send until ``stopping`` is set (or the task is cancelled): new entries as they come,
        and every ``idle_ms / 2`` the entries a dead taker left. While Redis is away, try again every
        second (what was taken meanwhile stays pending, and is taken again)."""
        joined = False
        taken_idle = float("-inf")
        while not stopping.is_set():
            if len(self.tasks) >= IN_FLIGHT:
                await asyncio.wait(list(self.tasks), return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                if not joined:
                    await self.outbox.join()
                    joined = True
                if time.monotonic() - taken_idle >= self.idle_ms / 2000:
                    taken_idle = time.monotonic()
                    self.start(await self.outbox.take_idle(self.idle_ms))
                self.start(await self.outbox.read(BLOCK_MS))
            except (RedisError, OSError) as exc:
                log.warning("webhooks: Redis unavailable (%s)", exc)
                await asyncio.sleep(1)  # back off while Redis is away

    def start(self, entries: list[OutboxEntry]) -> None:
        """Send the first attempts ``entries`` ask for, in the background."""
        if entries:
            self._background(self._deliver(entries))

    async def deliver(self, entries: list[OutboxEntry]) -> None:
        """Send and record one burst read from the outbox (see the module); Redis failing leaves its
        entries pending."""
        await self._recorded(self._deliver(entries))

    async def finished(self, records: list[tuple[JobRecord, bytes]], taken: list[OutboxEntry]) -> None:
        """The finish of ``records`` (this process's jobs, each with the exact bytes stored) took the
        partition's new outbox entries for this taker (``taken``): POST at once the attempts it owes,
        from the records in hand, writing every request before returning; record them in the background.
        Any other entry taken (a redelivery's) goes as a burst read from Redis."""
        known = {record.job_id: (record, raw) for record, raw in records}
        due: list[tuple[OutboxEntry, JobRecord, bytes]] = []
        others: list[OutboxEntry] = []
        for entry in taken:
            record, raw = known.get(entry.job_id, (None, b""))
            if record is not None and _owes(record, entry):
                due.append((entry, record, raw))
            else:
                others.append(entry)
        if others:
            self.start(others)
        if due:
            for burst in self._bursts(due):
                self._background(burst)
            await asyncio.sleep(0)  # each send writes its request before this worker goes on

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(self._recorded(work))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _recorded(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work``; Redis failing leaves its entries pending, taken later."""
        try:
            await work
        except (RedisError, OSError) as exc:
            log.warning("webhooks: first attempts not recorded (%s); taken later", exc)

    async def _deliver(self, entries: list[OutboxEntry]) -> None:
        raws = await self.redis.mget([keys.job(entry.job_id) for entry in entries])
        due: list[tuple[OutboxEntry, JobRecord, bytes]] = []
        dropped = []
        for entry, raw in zip(entries, raws, strict=True):
            record = _record(raw)
            if record is None or not _owes(record, entry):
                dropped.append(entry)  # gone, redelivered since, or sent already: nothing to send
            else:
                due.append((entry, record, raw))
        await self.outbox.drop(dropped)
        if due:
            for failure in await asyncio.gather(*self._bursts(due), return_exceptions=True):
                if isinstance(failure, BaseException):
                    raise failure

    def _bursts(self, due: list[tuple[OutboxEntry, JobRecord, bytes]]) -> list[Coroutine[Any, Any, None]]:
        """Start the first attempts' POSTs of ``due`` at once, after the ``webhooks.taken`` crash point;
        their recordings, one burst per principal (a principal's hanging receiver delays the recording of
        its own attempts only)."""
        faults.point("webhooks.taken")
        sends = [asyncio.ensure_future(self._send(record)) for _, record, _ in due]
        groups: dict[str, list[int]] = {}
        for number, (_, record, _) in enumerate(due):
            groups.setdefault(record.submitter, []).append(number)
        return [
            self._record_burst([due[n] for n in numbers], [sends[n] for n in numbers])
            for numbers in groups.values()
        ]

    async def _record_burst(
        self, due: list[tuple[OutboxEntry, JobRecord, bytes]], sends: Sequence[Awaitable[Outcome]]
    ) -> None:
        """Wait for the POSTs ``sends`` of ``due`` (entry, record, its exact bytes), then record every
        attempt, acknowledge and delete its entry and queue the next attempt when one is due, in one
        script. Whatever one attempt brought back, the others of the burst are recorded."""
        outcomes = await asyncio.gather(*sends)
        now = now_ms()
        calls = [
            self._item(entry, record, raw, outcome, now)
            for (entry, record, raw), outcome in zip(due, outcomes, strict=True)
        ]
        try:
            done = await self.outbox.record(calls)
        except ResponseError as exc:  # the script refused the burst: each attempt alone, as a retry would
            log.warning("webhooks: a burst's recording was refused (%s); recording each attempt alone", exc)
            done = [False] * len(calls)
        for (entry, record, _), outcome, flag in zip(due, outcomes, done, strict=True):
            if flag:
                telemetry.webhook_attempt(record, entry.round, 0, outcome.attempt)
            else:
                await self._record_changed(entry, outcome)
            if record.proposal and record.dry_run and self._delay(outcome) is None:
                await self.jobs.update(entry.job_id, JobRecord.begin_decision)  # a decision that waited

    def _item(
        self, entry: OutboxEntry, record: JobRecord, raw: bytes, outcome: Outcome, now: int
    ) -> RecordItem:
        """The recording of one first attempt (``RecordItem``); the next attempt queued ``now`` plus its
        delay when one is due."""
        delay = self._delay(outcome)
        after = noting(entry.round, outcome, delay)(record)
        assert after is not None
        following = keys.attempt(entry.job_id, entry.round, 1)
        next_entry, next_result, _, _ = job_keys(following)
        return RecordItem(
            record=keys.job(entry.job_id),
            next_entry_key=next_entry,
            next_result=next_result,
            stream=entry.stream,
            expected=raw,
            body=after.model_dump_json(exclude_defaults=True),
            entry_id=entry.entry_id,
            next_entry=""
            if delay is None
            else job_entry("deliver_webhook", (entry.job_id, entry.round, 1), now, dumps),
            next_id=following,
            next_score_ms=now + round((delay or 0) * 1000),
        )

    def _delay(self, outcome: Outcome) -> float | None:
        """Seconds before the second attempt after ``outcome`` (None: no more attempts)."""
        return None if outcome.stop else next_delay(self.schedule, 1, outcome.retry_after, self.rng)

    async def _send(self, record: JobRecord) -> Outcome:
        """One first attempt; whatever goes wrong in it is its failed outcome, never the burst's."""
        assert record.webhook is not None
        try:
            body = event_body(record)
            async with self.lanes.slot(record.submitter):
                return await send(self.sender, record.webhook.url, event_id(record), body, self.signer)
        except Exception as exc:
            log.warning("webhooks: first attempt of job %s failed unexpectedly", record.job_id, exc_info=exc)
            return failed(utc_now(), f"{type(exc).__name__}: {str(exc)[:200]}")

    async def _record_changed(self, entry: OutboxEntry, outcome: Outcome) -> None:
        """Record an attempt on a job whose record changed since it was read (a redelivery began, say),
        unless another taker (which took the entry meanwhile) recorded it already: its entry
        acknowledged first, then the attempt as a retry would record it."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xack(entry.stream, keys.OUTBOX_GROUP, entry.entry_id)
            pipe.xdel(entry.stream, entry.entry_id)
            acked, _ = await pipe.execute()
        if not acked:
            return
        delay = self._delay(outcome)
        after = await self.jobs.update(entry.job_id, noting(entry.round, outcome, delay))
        telemetry.webhook_attempt(after, entry.round, 0, outcome.attempt)
        noted = after is not None and after.webhook is not None and after.webhook.round == entry.round
        if delay is not None and noted:
            await enqueue_attempt(self.redis, entry.job_id, entry.round, 1, delay)

    async def close(self, timeout: float) -> None:
        """Let the bursts in flight finish (at most ``timeout`` seconds; the rest stay pending)."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout)
        await cancel_and_wait(*self.tasks)


def _owes(record: JobRecord, entry: OutboxEntry) -> bool:
    """True while ``record`` owes the first attempt ``entry`` asks for: its webhook of that round is still
    pending (not redelivered since, nor sent already)."""
    hook = record.webhook
    return hook is not None and hook.round == entry.round and hook.state == "pending"


def _record(raw: bytes | None) -> JobRecord | None:
    if raw is None:
        return None
    try:
        return JobRecord.model_validate_json(raw)
    except ValidationError:
        return None
