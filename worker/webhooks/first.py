"""First attempts of webhooks, sent at once by a ``wikiq webhooks`` process: without a round through arq,
and off the worker's core.

A webhook attempt that goes through arq costs its queue entry, arq's start (a ``WATCH`` transaction and
three round trips), its run and finish, and two reads and a compare-and-set of the job record: more CPU
than accepting the batch. And sent from the worker that finished the job, even a lean attempt (building
the event, the signed POST, recording it) takes a fifth of the CPU the worker spends on a batch, and the
worker's core is what bounds the write rate. So the script that finishes a job (``JobStore.finish_many``)
also pushes the finished record's exact bytes onto a list (``keys.FIRST_ATTEMPTS``), and a sender process
pops them in bursts (``FirstAttempts.take``): all of a burst's POSTs at once, then ONE script records
every attempt on its job (compared against the exact bytes the finish stored), removes the attempt's arq
entry and queues the next attempt when one is due (``JobStore.note_first_attempts``).

Records are handed over only while a sender is alive (``keys.SENDERS_ALIVE``, renewed by each sender): with
none, the finish queues attempt 0 on arq due at once, and a worker sends it. Nothing is lost if a sender dies
with records in hand: the same finish queued attempt 0 on arq ``safety_net_ms`` later (the delivery timeout
plus 10 s), so that entry is sent by a worker if no sender recorded the attempt first. A record popped more
than ``STALE_MS`` after its finish is left to that entry; at worst a receiver sees the event twice under the
same ``webhook-id`` (Standard Webhooks receivers de-duplicate by it).
Retries (attempt 1 on) and redeliveries stay arq jobs (``worker.webhooks.deliver``), on the schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

from arq.connections import ArqRedis
from pydantic import ValidationError
from redis.exceptions import RedisError
from standardwebhooks import Webhook

from worker import keys
from worker.jobs import events as telemetry
from worker.jobs.arq_compat import job_entry, job_keys
from worker.jobs.payloads import dumps
from worker.jobs.queue import enqueue_attempt
from worker.jobs.records import FirstAttempt, JobRecord, JobStore, event_body, now_ms
from worker.settings import Settings
from worker.webhooks.deliver import Outcome, failed, next_delay, noting, send, utc_now
from worker.webhooks.http import WebhookSender

log = logging.getLogger("wikiq.webhooks")
IN_FLIGHT = 64  # POSTs this process has in flight at most
BURST = 64  # records popped at most at once
LINGER = 0.05  # seconds between a pop that found records and the next: the bursts' batching window
STALE_MS = 5_000  # a record popped later than this after its finish is left to arq's safety net
ALIVE_MS = 3_000  # the senders' heartbeat lasts this long unless renewed


class FirstAttempts:
    """A sender process's first attempts (see the module)."""

    def __init__(
        self,
        settings: Settings,
        jobs: JobStore,
        redis: ArqRedis,
        sender: WebhookSender,
        signer: Webhook,
        rng: random.Random,
    ) -> None:
        self.schedule = settings.webhook_retry_schedule
        self.jobs = jobs
        self.redis = redis
        self.sender = sender
        self.signer = signer
        self.rng = rng
        self.slots = asyncio.Semaphore(IN_FLIGHT)
        self.tasks: set[asyncio.Task[None]] = set()

    async def take(self, block: float) -> int:
        """Pop up to ``BURST`` records handed over by finishes, in one round trip (waiting up to ``block``
        seconds for the first; 0: do not wait), and send their first attempts in the background; how many
        were popped."""
        pop = (1, keys.FIRST_ATTEMPTS, "LEFT", "COUNT", BURST)  # one list, from its head, up to BURST
        command = ("BLMPOP", block, *pop) if block > 0 else ("LMPOP", *pop)
        got = await self.redis.execute_command(*command)
        popped: list[bytes] = [] if got is None else got[1]
        now = now_ms()
        finished = []
        for stored in popped:
            try:
                record = JobRecord.model_validate_json(stored)
            except ValidationError:  # not a record wikiq wrote: nothing to send
                log.warning("webhooks: a value on %s is no job record; dropped", keys.FIRST_ATTEMPTS)
                continue
            if record.webhook is not None and now - (record.finished_ms or 0) <= STALE_MS:
                finished.append((record, stored))
            else:
                log.warning("webhooks: job %s popped late; arq's safety net sends it", record.job_id)
        if finished:
            self.start(finished)
        return len(popped)

    async def serve(self, stopping: asyncio.Event) -> None:
        """Send first attempts until ``stopping`` is set, keeping ``keys.SENDERS_ALIVE`` set meanwhile (a
        finish hands records over only while it is; it lapses ``ALIVE_MS`` after this process stops or dies,
        and finishes then queue their first attempts on arq at once): a burst at a time, at most one per
        ``LINGER`` seconds (what finishes meanwhile goes with the next burst: one pop, one script and one
        wakeup for several attempts, for at most ``LINGER`` of delay), with at most ``IN_FLIGHT`` bursts in
        flight. While Redis is away, try again every second (arq's safety net covers what waits meanwhile)."""
        renewed = 0.0
        while not stopping.is_set():
            if len(self.tasks) >= IN_FLIGHT:
                await asyncio.wait(list(self.tasks), return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                if time.monotonic() - renewed >= ALIVE_MS / 3000:  # renewed three times per lifetime
                    await self.redis.set(keys.SENDERS_ALIVE, b"1", px=ALIVE_MS)
                    renewed = time.monotonic()
                if await self.take(block=1.0):
                    await asyncio.sleep(LINGER)  # pacing the pops: batching, not waiting on anything
            except (RedisError, OSError) as exc:
                log.warning("webhooks: Redis unavailable (%s)", exc)
                await asyncio.sleep(1)  # back off while Redis is away

    def start(self, finished: list[tuple[JobRecord, bytes]]) -> None:
        """Send the first attempt of each finished job's webhook (with the bytes stored for the job), in
        the background."""
        task = asyncio.create_task(self._deliver(finished))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, record: JobRecord) -> Outcome:
        """One first attempt; whatever goes wrong in it is its failed outcome, never the burst's."""
        assert record.webhook is not None
        try:
            body = event_body(record)
            async with self.slots:
                return await send(self.sender, record.webhook.url, f"msg_{record.job_id}", body, self.signer)
        except Exception as exc:
            log.warning("webhooks: first attempt of job %s failed unexpectedly", record.job_id, exc_info=exc)
            return failed(utc_now(), f"{type(exc).__name__}: {str(exc)[:200]}")

    async def _deliver(self, finished: list[tuple[JobRecord, bytes]]) -> None:
        try:
            outcomes = await asyncio.gather(*(self._send(record) for record, _ in finished))
            items: list[tuple[FirstAttempt, Outcome, float | None]] = []
            for (record, stored), outcome in zip(finished, outcomes, strict=True):
                assert record.webhook is not None
                delay = None if outcome.stop else next_delay(self.schedule, 1, outcome.retry_after, self.rng)
                copy = record.model_copy()  # the attempt changes only the webhook: copy that deeply
                copy.webhook = record.webhook.model_copy(deep=True)
                after = noting(record.webhook.round, outcome, delay)(copy)
                assert after is not None
                now = now_ms()
                entry = None
                if delay is not None:
                    entry = job_entry("deliver_webhook", (record.job_id, record.webhook.round, 1), now, dumps)
                items.append(
                    (FirstAttempt(stored, after, entry, now + round(delay or 0) * 1000), outcome, delay)
                )
            done = await self.jobs.note_first_attempts([item for item, _, _ in items])
            for (item, outcome, delay), flag in zip(items, done, strict=True):
                if flag:
                    record = item.record
                    assert record.webhook is not None
                    telemetry.webhook_attempt(record, record.webhook.round, 0, outcome.attempt)
                else:
                    await self._record_changed(item.record, outcome, delay)
        except (RedisError, OSError) as exc:
            # each attempt's arq entry (the safety net) sends it again later; nothing else to do
            log.warning("first webhook attempts not recorded (%s); arq sends them again", exc)

    async def _record_changed(self, record: JobRecord, outcome: Outcome, delay: float | None) -> None:
        """Record an attempt on a job whose record changed since it finished (a redelivery began): as an
        arq attempt would, then drop the attempt's arq entry."""
        assert record.webhook is not None
        round_, job_id = record.webhook.round, record.job_id
        after = await self.jobs.update(job_id, noting(round_, outcome, delay))
        telemetry.webhook_attempt(after or record, round_, 0, outcome.attempt)
        first = keys.attempt(job_id, round_, 0)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(keys.WEBHOOK_QUEUE, first)
            pipe.delete(job_keys(first)[0])
            await pipe.execute()
        noted = after is not None and after.webhook is not None and after.webhook.round == round_
        if delay is not None and noted:
            await enqueue_attempt(self.redis, job_id, round_, 1, delay)

    async def close(self, timeout: float) -> None:
        """Let the attempts in flight finish (at most ``timeout`` seconds; the rest are arq's)."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout)
        for task in list(self.tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
