"""Job records in Redis: wikiq's own record per job, its status transitions, and the wake-up channel.

A record is one JSON document under ``wikiq:job:<id>`` kept for the retention time, or until its
submitter's finished records pass their cap (``RETAIN``: the oldest go first). Every change is a
compare-and-set (a Lua script checks the bytes read), so a cancel and a worker's start can never both win.
Every change to a finished job is announced on the ``wikiq:events`` channel so long-pollers answer at once.

    queued ──▶ running ──▶ succeeded | failed
       └──▶ cancelled
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field
from redis.asyncio import Redis

from worker import keys
from worker.errors import Fenced
from worker.jobs.arq_compat import job_keys
from worker.jobs.leases import FENCED, Lease, fence_of
from worker.jobs.scripts import Call, Script, arg, items, key
from worker.schema.answers import Attempt, Author, ErrorInfo, Job, JobResult, WebhookState, WebhookStatus
from worker.schema.edits import Batch, Rename

Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
EVENTS = keys.EVENTS
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class _Ulid:
    """ULIDs, monotonic within a process so ids sort in acceptance order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_ms = 0
        self.last_rand = 0

    def new(self) -> str:
        with self.lock:
            ms = int(time.time() * 1000)
            if ms <= self.last_ms:
                ms, rand = self.last_ms, self.last_rand + 1
            else:
                rand = int.from_bytes(os.urandom(10), "big") >> 1
            self.last_ms, self.last_rand = ms, rand
        value = (ms << 80) | rand
        return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


new_job_id = _Ulid().new


def partition_of(wiki: str, partitions: int) -> int:
    """The partition that serialises wiki ``wiki``: a stable hash, the same in every process."""
    return int.from_bytes(hashlib.sha256(wiki.encode()).digest()[:8], "big") % partitions


class EditSummary(BaseModel):
    """What the status page and logs keep of an edit once its body is dropped: op and paths, no content."""

    op: str
    path: str
    new_path: str | None = None


SUMMARY_MESSAGE_CHARS = 1000  # the first characters of a batch's message a record keeps
SUMMARY_PATH_BYTES = 4096  # bytes of paths a record's summary lists (always at least the first edit)


class BatchSummary(BaseModel):
    """A batch without its content, bounded: the message's first ``SUMMARY_MESSAGE_CHARS`` characters,
    the dry-run flag, and the ops and paths of the first edits up to ``SUMMARY_PATH_BYTES`` of paths
    (at least the first edit), ``more`` counting the edits not listed."""

    message: str = ""
    dry_run: bool = False
    edits: list[EditSummary] = Field(default_factory=list)
    more: int = 0

    @property
    def count(self) -> int:
        """How many edits the batch had, listed or not."""
        return len(self.edits) + self.more

    @classmethod
    def of(cls, batch: Batch) -> BatchSummary:
        """The summary of ``batch``."""
        edits: list[EditSummary] = []
        size = 0
        for edit in batch.edits:
            new_path = edit.new_path if isinstance(edit, Rename) else None
            size += len(edit.path.encode()) + len((new_path or "").encode())
            if edits and size > SUMMARY_PATH_BYTES:
                break
            edits.append(EditSummary(op=edit.op, path=edit.path, new_path=new_path))
        return cls(
            message=batch.message[:SUMMARY_MESSAGE_CHARS],
            dry_run=batch.dry_run,
            edits=edits,
            more=len(batch.edits) - len(edits),
        )


class WebhookDelivery(BaseModel):
    """A job's webhook: where, its state, every attempt, and the round (one per redelivery)."""

    url: str
    state: WebhookStatus = "pending"
    attempts: list[Attempt] = Field(default_factory=list)
    round: int = 0


def iso(ms: int | None) -> str | None:
    """``ms`` (milliseconds since the epoch) as ISO 8601 UTC with milliseconds, or None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_ms() -> int:
    """The current time in milliseconds since the epoch (the one clock every record timestamp uses)."""
    return int(time.time() * 1000)


def redact_url(url: str) -> str:
    """``url`` reduced to its origin (``scheme://host[:port]/``): its path, ``;params``, query, fragment and
    userinfo may carry capabilities (Slack- and Discord-style URLs keep their secret in the path)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, "/", "", ""))


class JobRecord(BaseModel):
    """Everything wikiq keeps about one job; ``public()`` is the contract's job object.

    ``batch`` is the body as submitted, kept only while the job may still run: it is dropped when the job
    finishes or is cancelled, leaving ``summary`` (ops and paths, no content, bounded). Each moment is
    stored once, in milliseconds since the epoch; the ISO strings of the contract are rendered from them.
    """

    job_id: str
    wiki: str
    status: Status = "queued"
    submitted_ms: int
    started_ms: int | None = None
    finished_ms: int | None = None
    batch: Batch | None = None
    summary: BatchSummary = Field(default_factory=BatchSummary)
    result: JobResult | None = None
    error: ErrorInfo | None = None
    webhook: WebhookDelivery | None = None
    webhook_event: str | None = None  # the event, as earlier versions froze it at the finish (``event_body``)
    author: Author
    submitter: str = ""
    # the Redis key of the idempotency key bound to this job ('' none): marked when the record is dropped
    idempotency_guard: str = ""
    base: str | None = None
    partition: int = 0
    runs: int = 0
    queued_bytes: int = 0
    # the first run that wrote Wikiq-Proof trailers (0: none yet). A commit without a proof can be this
    # job's own only if a run before that one (of a version without proofs) started it: ``legacy``
    proofs_from_run: int = 0

    def begin_run(self) -> None:
        """Count a new run of the job (``runs``), noting the first that writes commit proofs."""
        self.runs += 1
        if not self.proofs_from_run:
            self.proofs_from_run = self.runs

    @property
    def legacy(self) -> bool:
        """True when a run that wrote no commit proofs (an earlier version's) may have committed the job:
        only then does its commit without a ``Wikiq-Proof`` count as its own."""
        return self.proofs_from_run != 1

    @property
    def dry_run(self) -> bool:
        """True for a dry run."""
        return self.summary.dry_run

    def public(self, reveal: bool = True) -> Job:
        """The job as clients see it (contract 3.2); without ``reveal`` the webhook URL is redacted."""
        hook = self.webhook
        return Job(
            job_id=self.job_id,
            wiki=self.wiki,
            status=self.status,
            dry_run=self.dry_run,
            submitted_at=iso(self.submitted_ms),
            started_at=iso(self.started_ms),
            finished_at=iso(self.finished_ms),
            result=self.result,
            error=self.error,
            webhook=None
            if hook is None
            else WebhookState(
                url=hook.url if reveal else redact_url(hook.url), state=hook.state, attempts=hook.attempts
            ),
        )


# The one webhook-related step of a finish: an entry (job id, round) on the partition's outbox, which
# ``worker.webhooks`` takes from there. A partition's outbox keeps about ``OUTBOX_CAP`` entries at most:
# past that, the oldest are dropped (their webhooks stay pending until redelivered; see docs/webhooks.md).
OUTBOX_CAP = 10_000
OUTBOX_TAKE = 64  # entries taken at most at once from one stream (a finish's take, a taker's read or claim)
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


def _taken(found: Any) -> list[OutboxEntry]:
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


# What a principal's finished records keep in Redis, counted and capped (``JobStore``): each finished
# record that is no dry run counts its stored bytes plus ``RECORD_OVERHEAD`` (its key, its wiki's index
# entry and these entries) in its submitter's ledger (``keys.retained``); past the cap, the oldest by
# submission are dropped (record, wiki index entry, ledger entries), never the one just counted. A dropped
# job whose idempotency key still names it gets its final status appended to the key's value
# (``"<job> <fingerprint> <status>"``), so a replay answers that job instead of queueing the batch again.
# The record and index keys are built here from ``job_prefix``/``index_prefix`` (one Redis primary, no
# cluster); entries that expired by themselves (``cutoff``) are forgotten the same way.
RECORD_OVERHEAD = 512
RETAIN = """
local function drop_retained(ledger, jobs, id, job_prefix, index_prefix)
  local entry = redis.call('HGET', jobs, id)
  local size, status, wiki, guard = 0, '', '', ''
  if entry then
    size, status, wiki, guard = string.match(entry, '^(%d+) (%S+) (%S+) ?(%S*)$')
  end
  redis.call('DEL', job_prefix .. id)
  if wiki and wiki ~= '' then redis.call('ZREM', index_prefix .. wiki, id) end
  if guard and guard ~= '' then
    local bound = redis.call('GET', guard)
    -- only while it names this job, and once: "<job> <fingerprint>" becomes "<job> <fingerprint> <status>"
    local names = bound and string.find(bound, id .. ' ', 1, true) == 1
    if names and not string.find(bound, ' ', #id + 2, true) then
      redis.call('SET', guard, bound .. ' ' .. status, 'KEEPTTL')
    end
  end
  redis.call('HDEL', jobs, id)
  redis.call('ZREM', ledger, id)
  return tonumber(size) or 0
end

local function retain(ledger, jobs, total, id, size, meta, score, cap, cutoff, ttl, job_prefix, index_prefix)
  local held = tonumber(redis.call('GET', total) or '0')
  local before = redis.call('HGET', jobs, id)
  if before then held = held - (tonumber(string.match(before, '^%d+')) or 0) end
  redis.call('HSET', jobs, id, size .. ' ' .. meta)
  redis.call('ZADD', ledger, score, id)
  held = held + tonumber(size)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', ledger, '-inf', cutoff, 'LIMIT', 0, 100)) do
    if gone ~= id then held = held - drop_retained(ledger, jobs, gone, job_prefix, index_prefix) end
  end
  local stop = false
  while held > tonumber(cap) and not stop do
    local oldest = redis.call('ZRANGE', ledger, 0, 63)
    stop = #oldest == 0
    for _, gone in ipairs(oldest) do
      if held <= tonumber(cap) then break end
      if gone == id then stop = true break end
      held = held - drop_retained(ledger, jobs, gone, job_prefix, index_prefix)
    end
  end
  if held < 0 then held = 0 end
  redis.call('SET', total, held, 'EX', ttl)
  redis.call('EXPIRE', ledger, ttl)
  redis.call('EXPIRE', jobs, ttl)
end
"""


@dataclass
class SwapRecord(Call):
    """Compare-and-set one record (``JobStore.update_stored``), fenced by the lease epoch: -1 when fenced,
    0 when the record changed meanwhile, 1 when stored (announced on ``channel`` unless '', with ``ttl``
    or its own, ``release`` queued bytes given back unless '', webhook round ``hook_round`` handed to the
    ``outbox`` unless '', and counted as ``retained`` bytes in its submitter's ledger unless '': see
    ``RETAIN``)."""

    record: str = key()
    queued_table: str = key()
    queued_total: str = key()
    epoch_key: str = key()
    outbox: str = key()
    ledger: str = key()
    retained_jobs: str = key()
    retained_total: str = key()
    expected: bytes = arg()
    body: str = arg()
    channel: str = arg()
    job_id: str = arg()
    ttl: str = arg()
    release: str = arg()
    epoch: str = arg()
    hook_round: str = arg()
    outbox_cap: int = arg()
    retained: str = arg()
    retained_meta: str = arg()
    submitted_ms: int = arg()
    retained_cap: int = arg()
    cutoff: int = arg()
    ledger_ttl: int = arg()
    job_prefix: str = arg()
    index_prefix: str = arg()


SWAP = Script(
    SwapRecord,
    before=FENCED + HAND_OVER + RETAIN,
    body="""
if fenced(K.epoch_key, A.epoch) then return -1 end
if redis.call('GET', K.record) ~= A.expected then return 0 end
if A.ttl ~= '' then
  redis.call('SET', K.record, A.body, 'EX', A.ttl)
else
  redis.call('SET', K.record, A.body, 'KEEPTTL')
end
if A.channel ~= '' then redis.call('PUBLISH', A.channel, A.job_id) end
if A.release ~= '' and redis.call('HDEL', K.queued_table, A.job_id) == 1 then
  redis.call('DECRBY', K.queued_total, A.release)
end
if A.hook_round ~= '' then hand_over(K.outbox, A.outbox_cap, A.job_id, A.hook_round) end
if A.retained ~= '' then
  retain(K.ledger, K.retained_jobs, K.retained_total, A.job_id, A.retained, A.retained_meta, A.submitted_ms,
    A.retained_cap, A.cutoff, A.ledger_ttl, A.job_prefix, A.index_prefix)
end
return 1
""",
)


@dataclass
class SwapItem(Call):
    """One record of ``SwapMany``: stored as ``body`` only while it holds exactly ``expected``."""

    record: str = key()
    expected: bytes = arg()
    body: bytes = arg()


@dataclass
class SwapMany(Call):
    """Store records in order, each only while it holds the expected bytes, stopping at the first that does
    not: how many were stored; -1 (nothing stored) when the run's lease ``epoch`` is fenced."""

    item_class = SwapItem
    epoch_key: str = key()
    epoch: str = arg()
    records: list[SwapItem] = items()


SWAP_MANY = Script(
    SwapMany,
    before=FENCED,
    body="""
if fenced(K.epoch_key, A.epoch) then return -1 end
for i = 1, N do
  local key, arg = item(i)
  if redis.call('GET', key.record) ~= arg.expected then return i - 1 end
  redis.call('SET', key.record, arg.body, 'KEEPTTL')
end
return N
""",
)


@dataclass
class FinishItem(Call):
    """One job of ``FinishMany``: its record, queued-bytes table and total, arq's entry, retry and
    in-progress keys, its submitter's ledger of retained records; the new bytes with their ``ttl`` ('' keep),
    the queued bytes to give back ('' none), ``dequeue`` ('' no), the webhook round to hand to the outbox
    ('' none) and the bytes to count in the ledger (``retained``, '' none: see ``RETAIN``)."""

    record: str = key()
    queued_table: str = key()
    queued_total: str = key()
    arq_entry: str = key()
    arq_retry: str = key()
    arq_in_progress: str = key()
    ledger: str = key()
    retained_jobs: str = key()
    retained_total: str = key()
    job_id: str = arg()
    expected: bytes = arg()
    body: str = arg()
    ttl: str = arg()
    release: str = arg()
    dequeue: str = arg()
    hook_round: str = arg()
    retained: str = arg()
    retained_meta: str = arg()
    submitted_ms: int = arg()


@dataclass
class FinishMany(Call):
    """Finish running jobs of one partition (``JobStore.finish_many``): per job, 1 finished or 0 changed
    meanwhile, and the outbox entries taken; -1 (nothing done) when the run is fenced. A finished job with
    a webhook adds one entry to the partition's ``outbox`` (kept to about ``outbox_cap`` entries); with a
    ``taker`` ('' none), the partition's new entries (``take`` at most) are then read for that consumer of
    the takers' ``group``, so they are its to send and no other taker's. Each finished record that counts
    is added to its submitter's ledger, within ``retained_cap`` (``RETAIN``)."""

    item_class = FinishItem
    queue: str = key()
    outbox: str = key()
    epoch_key: str = key()
    channel: str = arg()
    outbox_cap: int = arg()
    epoch: str = arg()
    taker: str = arg()
    group: str = arg()
    take: int = arg()
    retained_cap: int = arg()
    cutoff: int = arg()
    ledger_ttl: int = arg()
    job_prefix: str = arg()
    index_prefix: str = arg()
    jobs: list[FinishItem] = items()


FINISH_MANY = Script(
    FinishMany,
    before=FENCED + HAND_OVER + RETAIN,
    body="""
if fenced(K.epoch_key, A.epoch) then return -1 end
local done = {}
local handed = false
for i = 1, N do
  local key, arg = item(i)
  if redis.call('GET', key.record) == arg.expected then
    if arg.ttl ~= '' then
      redis.call('SET', key.record, arg.body, 'EX', arg.ttl)
    else
      redis.call('SET', key.record, arg.body, 'KEEPTTL')
    end
    redis.call('PUBLISH', A.channel, arg.job_id)
    if arg.release ~= '' and redis.call('HDEL', key.queued_table, arg.job_id) == 1 then
      redis.call('DECRBY', key.queued_total, arg.release)
    end
    if arg.dequeue ~= '' then
      redis.call('ZREM', K.queue, arg.job_id)
      redis.call('DEL', key.arq_entry, key.arq_retry, key.arq_in_progress)
    end
    if arg.hook_round ~= '' then
      hand_over(K.outbox, A.outbox_cap, arg.job_id, arg.hook_round)
      handed = true
    end
    if arg.retained ~= '' then
      retain(key.ledger, key.retained_jobs, key.retained_total, arg.job_id, arg.retained, arg.retained_meta,
        arg.submitted_ms, A.retained_cap, A.cutoff, A.ledger_ttl, A.job_prefix, A.index_prefix)
    end
    done[#done + 1] = 1
  else
    done[#done + 1] = 0
  end
end
local taken = {}
if handed and A.taker ~= '' then
  redis.pcall('XGROUP', 'CREATE', K.outbox, A.group, '0', 'MKSTREAM')  -- BUSYGROUP when it exists
  taken = redis.call('XREADGROUP', 'GROUP', A.group, A.taker, 'COUNT', A.take, 'STREAMS', K.outbox, '>')
end
return {done, taken}
""",
)


@dataclass
class Finishing:
    """A running job to finish with ``JobStore.finish_many``: ``before`` as stored (its exact bytes
    ``stored``), ``record`` finished; ``dequeue``: take its arq entry out of ``queue`` (a job a group
    commit took along, which arq never started). ``body`` is set to the bytes stored for the finished
    record."""

    before: JobRecord
    stored: bytes
    record: JobRecord
    queue: str
    dequeue: bool
    body: bytes = b""


@dataclass
class CreateRecord(Call):
    """Create a record and index it under its wiki (trimming entries before ``cutoff``), only while its
    idempotency key ``guard`` still names it (``bound``; '' = no key): 1 created, 0 not."""

    record: str = key()
    wiki_index: str = key()
    guard: str = key()
    body: str = arg()
    submitted_ms: int = arg()
    cutoff: int = arg()
    bound: str = arg()
    retention: int = arg()
    job_id: str = arg()


CREATE = Script(
    CreateRecord,
    body="""
if A.bound ~= '' and redis.call('GET', K.guard) ~= A.bound then return 0 end
redis.call('SET', K.record, A.body, 'EX', A.retention)
redis.call('ZADD', K.wiki_index, A.submitted_ms, A.job_id)
redis.call('ZREMRANGEBYSCORE', K.wiki_index, '-inf', A.cutoff)
return 1
""",
)


@dataclass
class TakeOver(Call):
    """Rebind an idempotency key from a job (``old_job``) whose record never came to be, giving back the
    bytes it held in its submitter's queued-bytes table and total: 1 done, 0 not."""

    guard: str = key()
    old_record: str = key()
    queued_table: str = key()
    queued_total: str = key()
    bound: str = arg()
    new_bound: str = arg()
    ttl: int = arg()
    old_job: str = arg()


TAKE_OVER = Script(
    TakeOver,
    body="""
if redis.call('GET', K.guard) ~= A.bound or redis.call('EXISTS', K.old_record) == 1 then return 0 end
redis.call('SET', K.guard, A.new_bound, 'EX', A.ttl)
local held = redis.call('HGET', K.queued_table, A.old_job)
if held then
  redis.call('HDEL', K.queued_table, A.old_job)
  redis.call('DECRBY', K.queued_total, held)
end
return 1
""",
)
IDEMPOTENCY_SECONDS = 24 * 3600


@dataclass
class KeepItem(Call):
    """One kept dry-run result of ``Keep``: its job id, size and expiry."""

    job_id: str = arg()
    size: int = arg()
    expiry_ms: int = arg()


@dataclass
class Keep(Call):
    """Count kept dry-run results in their submitter's queued bytes (``JobStore.keep``); the kept set and
    sizes live ``ttl`` seconds."""

    item_class = KeepItem
    kept: str = key()
    sizes: str = key()
    total: str = key()
    ttl: int = arg()
    results: list[KeepItem] = items()


KEEP = Script(
    Keep,
    body="""
for i = 1, N do
  local _, arg = item(i)
  if redis.call('HSETNX', K.sizes, arg.job_id, arg.size) == 1 then
    redis.call('INCRBY', K.total, arg.size)
  end
  redis.call('ZADD', K.kept, arg.expiry_ms, arg.job_id)
end
redis.call('EXPIRE', K.kept, A.ttl)
redis.call('EXPIRE', K.sizes, A.ttl)
return 1
""",
)


class JobStore:
    """Reads and writes job records, the per-wiki job index, idempotency keys and queued bytes.

    A record moving to a finished status loses its batch body in the same compare-and-set (a dry run that
    succeeded or failed keeps it: it is a plan, to commit or amend), gives its bytes back to the
    submitter's queued-bytes count (at most once: the job id leaves a hash), and, for a dry run, expires
    after ``dry_run_retention`` seconds instead of ``retention``, its size counted in the queued bytes
    meanwhile (``keep``). Any other finished record
    counts, from its finish and after every later change, in its submitter's retained bytes: past
    ``retained_cap`` (0: no cap) the submitter's oldest finished records are dropped (``RETAIN``).
    """

    def __init__(
        self,
        redis: Redis,
        retention_seconds: int,
        dry_run_retention_seconds: int = 3600,
        retained_cap: int = 0,
    ) -> None:
        self.redis = redis
        self.retention = retention_seconds
        self.dry_run_retention = min(dry_run_retention_seconds, retention_seconds)
        self.retained_cap = retained_cap

    def retaining(self, record: JobRecord, body: bytes) -> tuple[str, str]:
        """What ``record``, stored as ``body``, counts in its submitter's retained bytes and the ledger's
        note of it (``RETAIN``): ``('', '')`` when it does not count (not finished, a dry run, no
        submitter, no cap)."""
        if not self.retained_cap or record.status not in FINISHED or record.dry_run or not record.submitter:
            return "", ""
        note = f"{record.status} {record.wiki} {record.idempotency_guard}".rstrip()
        return str(len(body) + RECORD_OVERHEAD), note

    def _retain_args(self) -> dict[str, Any]:
        """The arguments every record of a ``RETAIN`` call shares."""
        return {
            "retained_cap": self.retained_cap,
            "cutoff": now_ms() - self.retention * 1000,
            "ledger_ttl": self.retention + 60,
            "job_prefix": keys.job(""),
            "index_prefix": keys.wiki_jobs(""),
        }

    @staticmethod
    def key(job_id: str) -> str:
        """The Redis key of a job record."""
        return keys.job(job_id)

    @staticmethod
    def wiki_index(wiki: str) -> str:
        """The sorted set of a wiki's job ids by submission time."""
        return keys.wiki_jobs(wiki)

    @staticmethod
    def queued_keys(submitter: str) -> tuple[str, str]:
        """The hash of a submitter's unfinished jobs (id -> bytes) and the counter of their total."""
        return keys.queued(submitter)

    async def release_bytes(self, record: JobRecord) -> None:
        """Give back the bytes of a job that was never queued."""
        table, total = self.queued_keys(record.submitter)
        if await cast(Awaitable[int], self.redis.hdel(table, record.job_id)):
            await self.redis.decrby(total, record.queued_bytes)

    async def create(self, record: JobRecord, idempotency: tuple[str, str, str] | None = None) -> bool:
        """Store a new record and index it under its wiki (trimming index entries past retention).

        With ``idempotency`` (scope, key, fingerprint), only while that key is bound to this job (a retry
        may have taken over a key whose first submission seemed dead, ``take_over_idempotency``); False
        when it is not, and nothing is stored.
        """
        cutoff = record.submitted_ms - self.retention * 1000
        body = record.model_dump_json(exclude_defaults=True)
        guard, bound = "", ""
        if idempotency is not None:
            scope, key, fingerprint = idempotency
            guard = keys.idempotency(scope, key)
            bound = f"{record.job_id} {fingerprint}"
        call = CreateRecord(
            record=self.key(record.job_id),
            wiki_index=self.wiki_index(record.wiki),
            guard=guard or self.key(record.job_id),
            body=body,
            submitted_ms=record.submitted_ms,
            cutoff=cutoff,
            bound=bound,
            retention=self.retention,
            job_id=record.job_id,
        )
        return bool(await CREATE.run(self.redis, call))

    async def delete(self, job_id: str, wiki: str) -> None:
        """Remove a record that was never accepted (its enqueue failed)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.key(job_id))
            pipe.zrem(self.wiki_index(wiki), job_id)
            await pipe.execute()

    async def get(self, job_id: str) -> JobRecord | None:
        """The record of ``job_id``, or None when unknown or expired."""
        raw = await self.redis.get(self.key(job_id))
        return None if raw is None else JobRecord.model_validate_json(raw)

    async def expire_soon(self, record: JobRecord, seconds: int) -> None:
        """Let the finished record live at most ``seconds`` more (never longer than it would), and count its
        kept bytes only that long."""
        await self.redis.expire(self.key(record.job_id), seconds, lt=True)
        if record.dry_run and record.submitter:
            kept, _ = keys.kept(record.submitter)
            await self.redis.zadd(kept, {record.job_id: now_ms() + seconds * 1000}, xx=True, lt=True)

    async def keep(self, records: Sequence[tuple[JobRecord, int]]) -> None:
        """Count each just-finished dry run's stored size (``(record, size)``) in its submitter's queued
        bytes until its record expires: what a principal's results keep in Redis is bounded with what it
        has waiting (``max_queued_bytes``). The submission script gives them back once they expired."""
        by_submitter: dict[str, list[KeepItem]] = {}
        expiry = now_ms() + self.dry_run_retention * 1000
        for record, size in records:
            if record.dry_run and record.submitter:
                by_submitter.setdefault(record.submitter, []).append(KeepItem(record.job_id, size, expiry))
        for submitter, results in by_submitter.items():
            kept, sizes = keys.kept(submitter)
            total = self.queued_keys(submitter)[1]
            call = Keep(kept, sizes, total, ttl=self.dry_run_retention + 60, results=results)
            await KEEP.run(self.redis, call)

    async def update(
        self, job_id: str, change: Callable[[JobRecord], JobRecord | None], lease: Lease | None = None
    ) -> JobRecord | None:
        """Apply ``change`` to the record atomically; ``change`` returns None to leave it as it is.

        Returns the stored record after the call (changed or not), None when the job is unknown.
        A finished record's change is announced on ``wikiq:events``; a record that finishes with this change
        drops its batch body and releases its queued bytes (see the class). With ``lease`` (a worker's
        run), raises ``Fenced`` and stores nothing once the partition's lease epoch is newer than its.
        """
        return (await self.update_stored(job_id, change, lease))[0]

    async def update_stored(
        self, job_id: str, change: Callable[[JobRecord], JobRecord | None], lease: Lease | None = None
    ) -> tuple[JobRecord | None, bytes | None]:
        """``update``, and the exact bytes now stored (for a later compare-and-set without reading them
        again, ``finish_many``)."""
        key = self.key(job_id)
        while True:
            raw = await self.redis.get(key)
            if raw is None:
                return None, None
            current = JobRecord.model_validate_json(raw)
            # a second parse is the copy ``change`` may edit: ~5x cheaper than ``model_copy(deep=True)``
            changed = change(JobRecord.model_validate_json(raw))
            if changed is None:
                return current, raw
            body, ttl, release = self._changed(current, changed)
            channel = EVENTS if changed.status in FINISHED else ""
            table, total = self.queued_keys(changed.submitter)
            epoch_key, epoch = fence_of(lease, current.partition)
            ledger, retained_jobs, retained_total = keys.retained(changed.submitter)
            retained, note = self.retaining(changed, body.encode())
            # compare-and-set against the exact bytes read: two round trips instead of WATCH/GET/EXEC's three
            call = SwapRecord(
                record=key,
                queued_table=table,
                queued_total=total,
                epoch_key=epoch_key,
                outbox=keys.outbox(current.partition),
                ledger=ledger,
                retained_jobs=retained_jobs,
                retained_total=retained_total,
                expected=raw,
                body=body,
                channel=channel,
                job_id=job_id,
                ttl=ttl,
                release=release,
                epoch=epoch,
                hook_round=hand_over_round(current, changed),
                outbox_cap=OUTBOX_CAP,
                retained=retained,
                retained_meta=note,
                submitted_ms=changed.submitted_ms,
                **self._retain_args(),
            )
            stored = await SWAP.run(self.redis, call)
            if stored == -1:
                raise Fenced(f"job {job_id}: a run of an older lease epoch than {epoch_key}'s; not stored")
            if stored:
                if release and changed.dry_run:
                    await self.keep([(changed, len(body))])
                return changed, body.encode()

    def _changed(self, current: JobRecord, changed: JobRecord) -> tuple[str, str, str]:
        """The bytes to store for ``current`` becoming ``changed``, its new ttl ('' = keep) and the queued
        bytes to give back ('' = none): a record that finishes drops its body and its bytes."""
        ttl, release = "", ""
        if changed.status in FINISHED and current.status not in FINISHED:
            if not (changed.dry_run and changed.status in ("succeeded", "failed")):
                changed.batch = None  # a checked dry run keeps it: its plan, to commit or amend
            release = str(changed.queued_bytes) if changed.submitter else ""
            if changed.dry_run:
                ttl = str(self.dry_run_retention)
        return changed.model_dump_json(exclude_defaults=True), ttl, release

    async def swap_many(
        self, items: Sequence[tuple[str, bytes, bytes]], lease: Lease | None = None, partition: int = 0
    ) -> int:
        """Store each ``(job_id, expected bytes, new bytes)`` in order, each only if its record still holds
        exactly the expected bytes, stopping at the first that does not (none of these changes may finish
        a job): how many were stored. One round trip for all. With ``lease``, raises ``Fenced`` (nothing
        stored) once ``partition``'s lease epoch is newer than its."""
        if not items:
            return 0
        epoch_key, epoch = fence_of(lease, partition)
        records = [SwapItem(self.key(job_id), expected, new) for job_id, expected, new in items]
        stored = int(await SWAP_MANY.run(self.redis, SwapMany(epoch_key, epoch, records)))
        if stored == -1:
            raise Fenced(f"a run of an older lease epoch than {epoch_key}'s; nothing stored")
        return stored

    async def finish_many(
        self, items: Sequence[Finishing], lease: Lease | None = None, taker: str = ""
    ) -> tuple[list[bool], list[OutboxEntry]]:
        """Finish several running jobs of one partition in one atomic script (one round trip), each only if
        its record still holds exactly ``Finishing.stored``: the record as ``update`` would finish it (body
        dropped, queued bytes given back, announced on ``wikiq:events``, its webhook handed to the
        partition's outbox), and with it, for a job taken along by a group commit (``dequeue``), its arq
        entry out of its queue. Whether each was finished (a record that changed meanwhile is not: finish it
        with ``update``), and, with ``taker`` (an outbox consumer name), the partition's new outbox entries
        taken for it: the webhooks these finishes owe, for that taker to send. With ``lease``, raises
        ``Fenced`` and does nothing at all once the partition's lease epoch is newer than its."""
        if not items:
            return [], []
        partition = items[0].record.partition
        epoch_key, epoch = fence_of(lease, partition)
        call = FinishMany(
            queue=items[0].queue,
            outbox=keys.outbox(partition),
            epoch_key=epoch_key,
            channel=EVENTS,
            outbox_cap=OUTBOX_CAP,
            epoch=epoch,
            taker=taker,
            group=keys.OUTBOX_GROUP,
            take=OUTBOX_TAKE,
            **self._retain_args(),
        )
        for item in items:
            record = item.record
            table, total = self.queued_keys(record.submitter)
            entry, _, in_progress, retry = job_keys(record.job_id)
            body, ttl, release = self._changed(item.before, record)
            item.body = body.encode()
            ledger, retained_jobs, retained_total = keys.retained(record.submitter)
            retained, note = self.retaining(record, item.body)
            call.jobs.append(
                FinishItem(
                    record=self.key(record.job_id),
                    queued_table=table,
                    queued_total=total,
                    arq_entry=entry,
                    arq_retry=retry,
                    arq_in_progress=in_progress,
                    ledger=ledger,
                    retained_jobs=retained_jobs,
                    retained_total=retained_total,
                    job_id=record.job_id,
                    expected=item.stored,
                    body=body,
                    ttl=ttl,
                    release=release,
                    dequeue="1" if item.dequeue else "",
                    hook_round=hand_over_round(item.before, record),
                    retained=retained,
                    retained_meta=note,
                    submitted_ms=record.submitted_ms,
                )
            )
        reply = await FINISH_MANY.run(self.redis, call)
        if reply == -1:
            raise Fenced(f"a run of an older lease epoch than {epoch_key}'s; nothing finished")
        done, found = reply
        finished = [bool(flag) for flag in done]
        await self.keep(
            [(item.record, len(item.body)) for item, ok in zip(items, finished, strict=True) if ok]
        )
        return finished, _taken(found)

    async def wiki_jobs(self, wiki: str, limit: int, status: str | None = None) -> list[JobRecord]:
        """A wiki's recent jobs, newest first, optionally only those with ``status``."""
        out: list[JobRecord] = []
        start = 0
        page = max(limit, 50)
        while len(out) < limit:
            ids = await self.redis.zrevrange(self.wiki_index(wiki), start, start + page - 1)
            if not ids:
                break
            start += page
            raws = await self.redis.mget([self.key(i.decode() if isinstance(i, bytes) else i) for i in ids])
            for raw in raws:
                if raw is None:
                    continue
                record = JobRecord.model_validate_json(raw)
                if status is None or record.status == status:
                    out.append(record)
                    if len(out) >= limit:
                        break
        return out

    async def claim_idempotency(self, scope: str, key: str, fingerprint: str, job_id: str) -> tuple[str, str]:
        """Bind ``key`` to ``job_id`` for 24 h, or return the ``(job_id, fingerprint)`` already bound."""
        name = keys.idempotency(scope, key)
        value = f"{job_id} {fingerprint}"
        if await self.redis.set(name, value, nx=True, ex=IDEMPOTENCY_SECONDS):
            return job_id, fingerprint
        existing = await self.redis.get(name)
        if existing is None:  # expired between the two calls: claim again
            return await self.claim_idempotency(scope, key, fingerprint, job_id)
        text = existing.decode() if isinstance(existing, bytes) else existing
        bound_job, bound_print = text.split(" ")[:2]  # a third word: the record was dropped (``dropped``)
        return bound_job, bound_print

    async def dropped(self, scope: str, key: str, job_id: str) -> str | None:
        """The final status of ``job_id`` when idempotency ``key`` still names it and its record was
        dropped under its submitter's retained-bytes cap (``RETAIN`` notes it in the key); else None."""
        value = await self.redis.get(keys.idempotency(scope, key))
        words = (value.decode() if isinstance(value, bytes) else value or "").split(" ")
        return words[2] if len(words) == 3 and words[0] == job_id and words[2] in FINISHED else None

    async def take_over_idempotency(
        self, scope: str, key: str, bound: tuple[str, str], job_id: str, submitter: str
    ) -> bool:
        """Rebind ``key`` from ``bound`` (job id, fingerprint) to ``job_id`` if that job's record does not
        exist (its submission died between claiming the key and storing the record), giving back the
        queued bytes ``submitter`` may have claimed for it; True if done."""
        name = keys.idempotency(scope, key)
        old_job, digest = bound
        table, total = self.queued_keys(submitter)
        call = TakeOver(
            guard=name,
            old_record=self.key(old_job),
            queued_table=table,
            queued_total=total,
            bound=f"{old_job} {digest}",
            new_bound=f"{job_id} {digest}",
            ttl=IDEMPOTENCY_SECONDS,
            old_job=old_job,
        )
        return bool(await TAKE_OVER.run(self.redis, call))

    async def release_idempotency(self, scope: str, key: str) -> None:
        """Forget an idempotency key whose job could not be queued."""
        await self.redis.delete(keys.idempotency(scope, key))


def event_body(record: JobRecord) -> str:
    """The event POSTed for a finished job: type, timestamp and the job object as it was when the job
    finished (its webhook pending, without attempts). A function of what never changes after the finish,
    so every attempt and every redelivery sends the same bytes, and no copy of them is stored."""
    if record.webhook_event is not None:  # frozen into the record by an earlier version
        return record.webhook_event
    kind = "batch.succeeded" if record.status == "succeeded" else "batch.failed"
    finished = record
    if record.webhook is not None:
        finished = record.model_copy(update={"webhook": WebhookDelivery(url=record.webhook.url)})
    data = finished.public(reveal=True).model_dump_json()  # the receiver is the submitter's own
    timestamp = iso(record.finished_ms if record.finished_ms is not None else now_ms())
    return f'{{"type":"{kind}","timestamp":"{timestamp}","data":{data}}}'  # both plain ASCII, no escapes
