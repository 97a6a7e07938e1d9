"""The webhook outbox: one Redis stream per partition (``keys.outbox``), read by a consumer group.

A finish (and a redelivery) appends one entry, ``job`` and ``round``, in the same script that stores the
record (``hand_over``, in the entry format of ``worker.jobs.handover``), and a worker's finish takes the new
entries for that worker's taker in the same script (its consumer name is all the job side knows of
webhooks). Other takers (``worker.webhooks.taker``) read new entries with ``XREADGROUP`` (each entry goes to
one taker), and an entry stays pending in the group until the taker that sent its attempt recorded it,
acknowledged it and deleted it (``RECORD``), in one script. A taker that dies with entries in hand leaves
them pending: any taker takes those idle longer than the delivery timeout plus ``TAKE_MARGIN`` seconds
(``XAUTOCLAIM``) and sends them, so a webhook is sent at least once (receivers de-duplicate by
``webhook-id``).

Bounded: each stream keeps about ``worker.jobs.handover.OUTBOX_CAP`` entries (``MAXLEN ~`` at every append).
Only entries not yet recorded stay in it, so it reaches the cap only when no taker ran for a long time; past
it the oldest entries are dropped, and their jobs' webhooks stay ``pending`` with no attempt until
redelivered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from worker import keys
from worker.jobs.handover import OUTBOX_TAKE, OutboxEntry
from worker.jobs.scripts import Call, Script, arg, items, key

TAKE_MARGIN = 5.0  # seconds an entry stays pending past the delivery timeout before another taker takes it
WEBHOOK_ENTRY_MS = 24 * 3600 * 1000  # what arq keeps a queued attempt's entry (its default expiry)


@dataclass
class RecordItem(Call):
    """One first attempt of ``RecordFirst``: the job's record, the next attempt's arq entry and result,
    the outbox entry's stream; the record bytes expected and new, the entry's id, the next attempt's arq
    entry ('' none), its id and score."""

    record: str = key()
    next_entry_key: str = key()
    next_result: str = key()
    stream: str = key()
    expected: bytes = arg()
    body: str = arg()
    entry_id: bytes = arg()
    next_entry: bytes | str = arg()
    next_id: str = arg()
    next_score_ms: int = arg()


@dataclass
class RecordFirst(Call):
    """Record first attempts (``Outbox.record``): per job, 1 recorded (its entry acknowledged and deleted,
    the next attempt queued on arq when one is due) or 0 its record changed meanwhile (nothing done)."""

    item_class = RecordItem
    webhook_queue: str = key()
    group: str = arg()
    entry_ttl_ms: int = arg()
    jobs: list[RecordItem] = items()


RECORD = Script(
    RecordFirst,
    body="""
local done = {}
for i = 1, N do
  local key, arg = item(i)
  if redis.call('GET', key.record) == arg.expected then
    redis.call('SET', key.record, arg.body, 'KEEPTTL')
    redis.call('XACK', key.stream, A.group, arg.entry_id)
    redis.call('XDEL', key.stream, arg.entry_id)
    if arg.next_entry ~= '' and redis.call('EXISTS', key.next_entry_key, key.next_result) == 0 then
      redis.call('PSETEX', key.next_entry_key, A.entry_ttl_ms, arg.next_entry)
      redis.call('ZADD', K.webhook_queue, arg.next_score_ms, arg.next_id)
    end
    done[#done + 1] = 1
  else
    done[#done + 1] = 0
  end
end
return done
""",
)


def _entries(stream: Any, found: Any) -> list[OutboxEntry]:
    """The entries of one stream in a read or take answer; one deleted while pending has no fields."""
    return [OutboxEntry.parse(stream, entry_id, fields) for entry_id, fields in found or () if fields]


class Outbox:
    """Every partition's outbox, as one consumer (``name``) of the takers' group sees it."""

    def __init__(self, redis: Redis, partitions: int, name: str) -> None:
        self.redis = redis
        self.name = name
        self.streams = [keys.outbox(p) for p in range(partitions)]

    async def join(self) -> None:
        """Create the takers' group on every stream that has none yet (from its first entry on, so what
        finished before any taker ran is sent too)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in self.streams:
                pipe.xgroup_create(stream, keys.OUTBOX_GROUP, id="0", mkstream=True)
            replies = await pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                raise reply

    async def read(self, block_ms: int) -> list[OutboxEntry]:
        """New entries of every stream (up to ``OUTBOX_TAKE`` each), now theirs to send; waits up to
        ``block_ms`` for the first (0: does not wait). Joins the group again if the streams were deleted
        meanwhile."""
        try:
            got = await self.redis.xreadgroup(
                keys.OUTBOX_GROUP,
                self.name,
                dict.fromkeys(self.streams, ">"),
                count=OUTBOX_TAKE,
                block=block_ms or None,
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.join()
            return []
        return [entry for stream, found in got or () for entry in _entries(stream, found)]

    async def take_idle(self, idle_ms: int) -> list[OutboxEntry]:
        """Entries another consumer took and left pending for ``idle_ms`` or longer (it died, or hangs),
        now this one's to send."""
        out: list[OutboxEntry] = []
        for stream in self.streams:
            start: Any = "0-0"
            while True:
                try:
                    reply = await self.redis.xautoclaim(
                        stream, keys.OUTBOX_GROUP, self.name, idle_ms, start_id=start, count=OUTBOX_TAKE
                    )
                except ResponseError as exc:
                    if "NOGROUP" not in str(exc):
                        raise
                    await self.join()
                    return out
                start, found = reply[0], reply[1]
                out += _entries(stream, found)
                if start in (b"0-0", "0-0") or not found:
                    break
        return out

    async def drop(self, entries: Sequence[OutboxEntry]) -> None:
        """Acknowledge and delete entries that need no attempt (or were recorded some other way)."""
        if not entries:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry in entries:
                pipe.xack(entry.stream, keys.OUTBOX_GROUP, entry.entry_id)
                pipe.xdel(entry.stream, entry.entry_id)
            await pipe.execute()

    async def record(self, calls: Sequence[RecordItem]) -> list[bool]:
        """Record first attempts in one script (``RecordFirst``): whether each was."""
        if not calls:
            return []
        call = RecordFirst(
            webhook_queue=keys.WEBHOOK_QUEUE,
            group=keys.OUTBOX_GROUP,
            entry_ttl_ms=WEBHOOK_ENTRY_MS,
            jobs=list(calls),
        )
        return [bool(flag) for flag in await RECORD.run(self.redis, call)]

    async def length(self) -> int:
        """Entries waiting in every stream (not yet taken, or taken and not yet recorded)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in self.streams:
                pipe.xlen(stream)
            return sum(int(n) for n in await pipe.execute())
