"""Handing a finished job's webhook over to ``worker.webhooks``: the format of a partition's outbox stream
(``keys.outbox``), shared by the side that writes it and the side that reads it.

The finish scripts (``worker.jobs.record_scripts``) append one entry, job id and round, with ``HAND_OVER``
whenever ``hand_over_round`` says a change owes a webhook round, and may take the new entries for a taker in
the same script (``taken_entries`` parses what they took); ``worker.webhooks.outbox`` reads and claims the
rest as ``OutboxEntry`` values. The format lives here, in ``worker.jobs``, because the layers let
``worker.webhooks`` import ``worker.jobs`` and not the other way round.

A partition's outbox keeps about ``OUTBOX_CAP`` entries at most: past that, the oldest are dropped (their
webhooks stay pending until redelivered; see docs/webhooks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.jobs.record import FINISHED, JobRecord

OUTBOX_CAP = 10_000
OUTBOX_TAKE = 64  # entries taken at most at once from one stream (a finish's take, a taker's read or claim)
# the Lua function a finish script appends an entry with, trimming the stream to about ``cap`` entries
HAND_OVER = """
local function hand_over(outbox, cap, job_id, round)
  redis.call('XADD', outbox, 'MAXLEN', '~', cap, '*', 'job', job_id, 'round', round)
end
"""


@dataclass(frozen=True)
class OutboxEntry:
    """One outbox entry: where it is (stream and id), and the job and webhook round it asks an attempt
    for ('' and -1: not an entry wikiq wrote, to acknowledge and drop)."""

    stream: str
    entry_id: bytes
    job_id: str
    round: int

    @classmethod
    def parse(cls, stream: bytes | str, entry_id: bytes, fields: dict[bytes, bytes]) -> OutboxEntry:
        """The entry ``entry_id`` of ``stream`` holding ``fields``, as ``hand_over`` wrote them."""
        name = stream.decode() if isinstance(stream, bytes) else stream
        try:
            return cls(name, entry_id, fields[b"job"].decode(), int(fields[b"round"]))
        except (KeyError, ValueError, UnicodeDecodeError):
            return cls(name, entry_id, "", -1)


def taken_entries(found: Any) -> list[OutboxEntry]:
    """The entries of a script's ``XREADGROUP`` answer, whose fields come as a flat list
    (``{{stream, {{id, {field, value, ...}}, ...}}}``)."""
    return [
        OutboxEntry.parse(stream, entry_id, dict(zip(flat[::2], flat[1::2], strict=False)))
        for stream, entries in found or ()
        for entry_id, flat in entries
    ]


def hand_over_round(before: JobRecord, after: JobRecord) -> str:
    """The webhook round a change hands over to the outbox ('' none): the job just finished (succeeded or
    failed) with a webhook, or a finished job's webhook began a new round (a redelivery)."""
    hook = after.webhook
    if hook is None or hook.state != "pending" or after.status not in ("succeeded", "failed"):
        return ""
    if before.status in FINISHED and before.webhook is not None and before.webhook.round == hook.round:
        return ""
    return str(hook.round)
