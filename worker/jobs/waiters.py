"""Long-poll wake-ups: one Redis subscription per API process, fanned out to waiting requests.

Workers publish a job id on ``wikiq:events`` when a job finishes; a registered waiter is woken as soon as
that message arrives. A waiter registers before it reads the record, so no finish is missed while the
subscription is live. Pub/sub does not queue messages for an absent subscriber, so after a Redis outage every
waiter is woken twice: when the outage is seen, and again once the subscription is back, so each re-reads
its record (a finish published in the gap is then found in the record).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator

from redis.asyncio import Redis
from redis.exceptions import RedisError

from worker import keys
from worker.tasks import cancel_and_wait

log = logging.getLogger("wikiq.api")


class Waiters:
    """Maps job ids to the events of requests waiting for them."""

    def __init__(self) -> None:
        self.events: dict[str, set[asyncio.Event]] = defaultdict(set)
        self.task: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()  # set while the subscription is live

    @contextlib.contextmanager
    def register(self, job_id: str) -> Iterator[asyncio.Event]:
        """Within the block, the returned event is set when ``job_id`` finishes."""
        event = asyncio.Event()
        self.events[job_id].add(event)
        try:
            yield event
        finally:
            self.events[job_id].discard(event)
            if not self.events[job_id]:
                del self.events[job_id]

    def notify(self, job_id: str) -> None:
        """Wake every request waiting for ``job_id``."""
        for event in self.events.get(job_id, ()):
            event.set()

    def start(self, redis: Redis) -> None:
        """Listen on ``wikiq:events`` in the background, resubscribing after a Redis outage."""
        self.task = asyncio.create_task(self._listen(redis))

    async def _listen(self, redis: Redis) -> None:
        while True:
            try:
                async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(keys.EVENTS)
                    self.subscribed.set()
                    self._wake_all()  # anything published before this point is only in the records
                    async for message in pubsub.listen():
                        data = message.get("data")
                        if isinstance(data, bytes):
                            self.notify(data.decode())
            except RedisError as exc:
                log.warning("event listener: Redis unavailable (%s)", exc)
                self.subscribed.clear()
                self._wake_all()
                await asyncio.sleep(0.5)  # back off while Redis is away

    def _wake_all(self) -> None:
        for job_id in list(self.events):
            self.notify(job_id)

    async def stop(self) -> None:
        """Stop listening."""
        if self.task is not None:
            await cancel_and_wait(self.task)
