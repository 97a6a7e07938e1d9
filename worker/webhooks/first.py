"""First attempts sent by the process that finished the job: at once, without a round through arq.

A webhook attempt that goes through arq costs its queue entry, arq's start (a ``WATCH`` transaction and
three round trips), its run and finish, and two reads and a compare-and-set of the job record: more CPU
than accepting the batch. So a worker process sends the first attempt of the webhooks of the jobs it has
just finished itself (``FirstAttempts.start``, from ``worker.jobs.run``): all of a group's POSTs at once,
then ONE script records every attempt on its job (compared against the exact bytes the finish stored),
removes the attempt's arq entry and queues the next attempt when one is due
(``JobStore.note_first_attempts``).

Nothing is lost if the process dies: the same finish queued attempt 0 on arq, ``defer_ms`` later (the
delivery timeout plus 10 s), so that entry is sent by any worker if this process does not get to record
its own attempt first; at worst a receiver sees the event twice under the same ``webhook-id`` (Standard
Webhooks receivers de-duplicate by it). Retries (attempt 1 on) and redeliveries stay arq jobs
(``worker.webhooks.deliver``), on the schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from arq.connections import ArqRedis
from redis.exceptions import RedisError
from standardwebhooks import Webhook

from worker import keys
from worker.jobs import events as telemetry
from worker.jobs.arq_compat import job_entry, job_keys
from worker.jobs.queue import dumps, enqueue_attempt
from worker.jobs.records import FirstAttempt, JobRecord, JobStore, event_body, now_ms
from worker.settings import Settings
from worker.webhooks.deliver import Outcome, next_delay, noting, send
from worker.webhooks.http import WebhookSender

log = logging.getLogger("wikiq.webhooks")
IN_FLIGHT = 64  # POSTs this process has in flight at most


class FirstAttempts:
    """A worker process's sender of first attempts (see the module)."""

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
        self.defer_ms = int((settings.webhook_timeout + 10) * 1000)
        self.jobs = jobs
        self.redis = redis
        self.sender = sender
        self.signer = signer
        self.rng = rng
        self.slots = asyncio.Semaphore(IN_FLIGHT)
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, finished: list[tuple[JobRecord, bytes]]) -> None:
        """Send the first attempt of each finished job's webhook (with the bytes stored for the job), in
        the background."""
        task = asyncio.create_task(self._deliver(finished))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, record: JobRecord) -> Outcome:
        assert record.webhook is not None
        body = event_body(record)
        async with self.slots:
            return await send(self.sender, record.webhook.url, f"msg_{record.job_id}", body, self.signer)

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
