"""Job records in Redis: wikiq's own record per job, its status transitions, and the wake-up channel.

A record is one JSON document under ``wikiq:job:<id>`` kept for the retention time. Every change is a
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
from typing import Literal, cast
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field
from redis.asyncio import Redis

from worker import keys
from worker.errors import Fenced
from worker.jobs.arq_compat import job_entry, job_keys
from worker.jobs.leases import FENCED, Lease, fence_of
from worker.jobs.payloads import dumps
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


class BatchSummary(BaseModel):
    """A batch without its content: message, dry-run flag and the edits' ops and paths."""

    message: str = ""
    dry_run: bool = False
    edits: list[EditSummary] = Field(default_factory=list)

    @classmethod
    def of(cls, batch: Batch) -> BatchSummary:
        """The summary of ``batch``."""
        return cls(
            message=batch.message[:1000],
            dry_run=batch.dry_run,
            edits=[
                EditSummary(op=e.op, path=e.path, new_path=e.new_path if isinstance(e, Rename) else None)
                for e in batch.edits
            ],
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
    finishes or is cancelled, leaving ``summary`` (ops and paths, no content). Each moment is stored once, in
    milliseconds since the epoch; the ISO strings of the contract are rendered from them.
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


# compare-and-set one record (``JobStore.update_stored``), fenced by the lease epoch KEYS[4] / ARGV[7]:
# -1 when fenced, 0 when the record changed meanwhile, 1 when stored
_SWAP = (
    FENCED
    + """
if fenced(KEYS[4], ARGV[7]) then return -1 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[5] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
end
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
if ARGV[6] ~= '' and redis.call('HDEL', KEYS[2], ARGV[4]) == 1 then
  redis.call('DECRBY', KEYS[3], ARGV[6])
end
return 1
"""
)

# store records in order, each only while it holds the expected bytes (KEYS[1] / ARGV[1]: the lease epoch
# that fences them, then ARGV: expected, new per KEYS[i + 1]); stops at the first that does not: how many
# were stored, -1 when fenced
_SWAP_MANY = (
    FENCED
    + """
if fenced(KEYS[1], ARGV[1]) then return -1 end
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[2 * i - 2] then return i - 2 end
  redis.call('SET', KEYS[i], ARGV[2 * i - 1], 'KEEPTTL')
end
return #KEYS - 1
"""
)

# finish running jobs (``JobStore.finish_many``). KEYS: 1 the partition's arq queue, 2 the webhook queue,
# 3 the first attempts' list, 4 the senders' heartbeat, 5 the partition's lease epoch, then 8 per job:
# record, queued table, queued total, arq entry, arq retry, arq in-progress, webhook attempt 0's arq entry
# and result. ARGV: 1 events channel, 2 webhook entry ttl ms, 3 the list's cap, 4 its expiry ms, 5 now (ms),
# 6 the run's lease epoch ('' not fenced), then 9 per job: job id, expected
# bytes, new bytes, ttl ('' keep), queued bytes to give back ('' none), dequeue ('' no), webhook attempt
# entry ('' none), its arq job id, how much later attempt 0 is due when a sender is alive and takes the
# new bytes (0: hand nothing over). With no sender alive, attempt 0 is due now and nothing is handed over.
# Returns a 1 or 0 per job: finished, or changed meanwhile; -1 (nothing done) when the run is fenced.
_FINISH_MANY = (
    FENCED
    + """
if fenced(KEYS[5], ARGV[6]) then return -1 end
local done = {}
local pushed = false
local alive = redis.call('EXISTS', KEYS[4]) == 1
local jobs = (#KEYS - 5) / 8
for i = 0, jobs - 1 do
  local k, a = 5 + 8 * i, 6 + 9 * i
  local id = ARGV[a + 1]
  if redis.call('GET', KEYS[k + 1]) == ARGV[a + 2] then
    if ARGV[a + 4] ~= '' then
      redis.call('SET', KEYS[k + 1], ARGV[a + 3], 'EX', ARGV[a + 4])
    else
      redis.call('SET', KEYS[k + 1], ARGV[a + 3], 'KEEPTTL')
    end
    redis.call('PUBLISH', ARGV[1], id)
    if ARGV[a + 5] ~= '' and redis.call('HDEL', KEYS[k + 2], id) == 1 then
      redis.call('DECRBY', KEYS[k + 3], ARGV[a + 5])
    end
    if ARGV[a + 6] ~= '' then
      redis.call('ZREM', KEYS[1], id)
      redis.call('DEL', KEYS[k + 4], KEYS[k + 5], KEYS[k + 6])
    end
    if ARGV[a + 7] ~= '' and redis.call('EXISTS', KEYS[k + 7], KEYS[k + 8]) == 0 then
      redis.call('PSETEX', KEYS[k + 7], ARGV[2], ARGV[a + 7])
      local later = 0
      if alive and tonumber(ARGV[a + 9]) > 0 then
        later = tonumber(ARGV[a + 9])
        redis.call('RPUSH', KEYS[3], ARGV[a + 3])
        pushed = true
      end
      redis.call('ZADD', KEYS[2], tonumber(ARGV[5]) + later, ARGV[a + 8])
    end
    done[#done + 1] = 1
  else
    done[#done + 1] = 0
  end
end
if pushed then
  redis.call('LTRIM', KEYS[3], -tonumber(ARGV[3]), -1)
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
return done
"""
)
# ``keys.FIRST_ATTEMPTS`` keeps at most this many records (the oldest dropped first), and is dropped this long
# after the last push: with no sender running, at most a few MB wait there (arq's safety net sends them all)
FIRST_ATTEMPTS_CAP = 10_000
FIRST_ATTEMPTS_EXPIRY_MS = 60_000
WEBHOOK_ENTRY_MS = 24 * 3600 * 1000  # what arq keeps a queued attempt's entry (its default expiry)


@dataclass
class Finishing:
    """A running job to finish with ``JobStore.finish_many``: ``before`` as stored (its exact bytes
    ``stored``), ``record`` finished; ``dequeue``: take its arq entry out of ``queue`` (a job a group
    commit took along, which arq never started); ``hook_defer_ms``: when a webhook sender is alive
    (``keys.SENDERS_ALIVE``), hand the finished record to the senders (``keys.FIRST_ATTEMPTS``, read by
    ``wikiq webhooks``), which send the first attempt of its webhook at once, and queue that attempt on arq
    that much later (a safety net); with none alive, arq's attempt is due at once. ``body`` is
    set to the bytes stored for the finished record."""

    before: JobRecord
    stored: bytes
    record: JobRecord
    queue: str
    dequeue: bool
    hook_defer_ms: int = 0
    body: bytes = b""


@dataclass
class FirstAttempt:
    """The first attempt of a job's webhook, sent by a webhook sender (``worker.webhooks.first``), to
    record with ``JobStore.note_first_attempts``: the record as stored (exactly ``stored``) and after the
    attempt, and the next attempt's arq entry (None: no more attempts) with its score."""

    stored: bytes
    record: JobRecord
    next_entry: bytes | None
    next_score_ms: int


# record first attempts sent by a webhook sender (``JobStore.note_first_attempts``). KEYS: 1 the
# webhook queue, then 4 per job: record, attempt 0's arq entry, the next attempt's arq entry and result.
# ARGV: 1 entry ttl ms, then 6 per job: expected bytes, new bytes, attempt 0's arq id, next entry ('' none),
# its arq id, its score. Returns a 1 or 0 per job: recorded, or changed meanwhile.
_NOTE_FIRST = """
local done = {}
for i = 0, (#KEYS - 1) / 4 - 1 do
  local k, a = 1 + 4 * i, 1 + 6 * i
  if redis.call('GET', KEYS[k + 1]) == ARGV[a + 1] then
    redis.call('SET', KEYS[k + 1], ARGV[a + 2], 'KEEPTTL')
    redis.call('ZREM', KEYS[1], ARGV[a + 3])
    redis.call('DEL', KEYS[k + 2])
    if ARGV[a + 4] ~= '' and redis.call('EXISTS', KEYS[k + 3], KEYS[k + 4]) == 0 then
      redis.call('PSETEX', KEYS[k + 3], ARGV[1], ARGV[a + 4])
      redis.call('ZADD', KEYS[1], ARGV[a + 6], ARGV[a + 5])
    end
    done[#done + 1] = 1
  else
    done[#done + 1] = 0
  end
end
return done
"""

# create a record only while its idempotency key (KEYS[3]) still names it (ARGV[4]; '' = no key)
_CREATE = """
if ARGV[4] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[4] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
return 1
"""
# rebind an idempotency key (KEYS[1]) from a job (ARGV[4]) whose record (KEYS[2]) never came to be, giving
# back the bytes it held in its submitter's queued-bytes table (KEYS[3]) and total (KEYS[4])
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
local held = redis.call('HGET', KEYS[3], ARGV[4])
if held then
  redis.call('HDEL', KEYS[3], ARGV[4])
  redis.call('DECRBY', KEYS[4], held)
end
return 1
"""
IDEMPOTENCY_SECONDS = 24 * 3600
# count kept dry-run results in their submitter's queued bytes (``JobStore.keep``). KEYS: 1 the kept set,
# 2 the kept sizes, 3 the queued total. ARGV: 1 ttl s of the set, then 3 per job: id, size, expiry ms
_KEEP = """
for i = 2, #ARGV, 3 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('INCRBY', KEYS[3], ARGV[i + 1])
  end
  redis.call('ZADD', KEYS[1], ARGV[i + 2], ARGV[i])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
return 1
"""


class JobStore:
    """Reads and writes job records, the per-wiki job index, idempotency keys and queued bytes.

    A record moving to a finished status loses its batch body in the same compare-and-set (a succeeded dry
    run keeps it: it is a plan), gives its bytes back to the submitter's queued-bytes count (at most once:
    the job id leaves a hash), and, for a dry run, expires after ``dry_run_retention`` seconds instead of
    ``retention``, its size counted in the queued bytes meanwhile (``keep``).
    """

    def __init__(self, redis: Redis, retention_seconds: int, dry_run_retention_seconds: int = 3600) -> None:
        self.redis = redis
        self.retention = retention_seconds
        self.dry_run_retention = min(dry_run_retention_seconds, retention_seconds)
        self._swap = redis.register_script(_SWAP)
        self._create = redis.register_script(_CREATE)
        self._swap_many = redis.register_script(_SWAP_MANY)
        self._finish_many = redis.register_script(_FINISH_MANY)
        self._note_first = redis.register_script(_NOTE_FIRST)
        self._take_over = redis.register_script(_TAKE_OVER)
        self._keep = redis.register_script(_KEEP)

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
        names = [self.key(record.job_id), self.wiki_index(record.wiki), guard or self.key(record.job_id)]
        args: list[str | int] = [body, record.submitted_ms, cutoff, bound, self.retention, record.job_id]
        return bool(await self._create(keys=names, args=args))

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
        by_submitter: dict[str, list[str | int]] = {}
        expiry = now_ms() + self.dry_run_retention * 1000
        for record, size in records:
            if record.dry_run and record.submitter:
                by_submitter.setdefault(record.submitter, []).extend([record.job_id, size, expiry])
        for submitter, entries in by_submitter.items():
            kept, sizes = keys.kept(submitter)
            total = self.queued_keys(submitter)[1]
            await self._keep(keys=[kept, sizes, total], args=[self.dry_run_retention + 60, *entries])

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
            names = [key, table, total, epoch_key]
            # compare-and-set against the exact bytes read: two round trips instead of WATCH/GET/EXEC's three
            stored = await self._swap(keys=names, args=[raw, body, channel, job_id, ttl, release, epoch])
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
            if not (changed.dry_run and changed.status == "succeeded"):
                changed.batch = None  # a succeeded dry run keeps it: it is a plan (``PlanSubmission``)
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
        names = [epoch_key] + [self.key(job_id) for job_id, _, _ in items]
        args: list[bytes | str] = [epoch]
        for _, expected, new in items:
            args += [expected, new]
        stored = int(await self._swap_many(keys=names, args=args))
        if stored == -1:
            raise Fenced(f"a run of an older lease epoch than {epoch_key}'s; nothing stored")
        return stored

    async def finish_many(self, items: Sequence[Finishing], lease: Lease | None = None) -> list[bool]:
        """Finish several running jobs of one partition in one atomic script (one round trip), each only if
        its record still holds exactly ``Finishing.stored``: the record as ``update`` would finish it (body
        dropped, queued bytes given back, announced on ``wikiq:events``), and with it, for a job taken along
        by a group commit (``dequeue``), its arq entry out of its queue, and the first attempt of its
        webhook queued. Whether each was finished (a record that changed meanwhile is not: finish it with
        ``update``). With ``lease``, raises ``Fenced`` and does nothing at all once the partition's lease
        epoch is newer than its."""
        if not items:
            return []
        epoch_key, epoch = fence_of(lease, items[0].record.partition)
        names: list[str] = [items[0].queue, keys.WEBHOOK_QUEUE, keys.FIRST_ATTEMPTS, keys.SENDERS_ALIVE]
        names.append(epoch_key)
        now = now_ms()
        args: list[bytes | str | int] = [EVENTS, WEBHOOK_ENTRY_MS]
        args += [FIRST_ATTEMPTS_CAP, FIRST_ATTEMPTS_EXPIRY_MS, now, epoch]
        for item in items:
            record = item.record
            table, total = self.queued_keys(record.submitter)
            entry, _, in_progress, retry = job_keys(record.job_id)
            hook: bytes | str = ""
            hook_id = ""
            if record.webhook is not None:
                hook_id = keys.attempt(record.job_id, record.webhook.round, 0)
                hook = job_entry("deliver_webhook", (record.job_id, record.webhook.round, 0), now, dumps)
            hook_entry, hook_result, _, _ = job_keys(hook_id)
            names += [self.key(record.job_id), table, total, entry, retry, in_progress]
            names += [hook_entry, hook_result]
            body, ttl, release = self._changed(item.before, record)
            item.body = body.encode()
            dequeue = "1" if item.dequeue else ""
            args += [record.job_id, item.stored, body, ttl, release, dequeue, hook, hook_id]
            args.append(item.hook_defer_ms)
        done = await self._finish_many(keys=names, args=args)
        if done == -1:
            raise Fenced(f"a run of an older lease epoch than {epoch_key}'s; nothing finished")
        finished = [bool(flag) for flag in done]
        await self.keep(
            [(item.record, len(item.body)) for item, ok in zip(items, finished, strict=True) if ok]
        )
        return finished

    async def note_first_attempts(self, items: Sequence[FirstAttempt]) -> list[bool]:
        """Record first webhook attempts in one script (one round trip), each only if its record still
        holds exactly ``stored``: the record after the attempt, attempt 0's arq entry (the safety net)
        gone, the next attempt queued. Whether each was recorded (else: record it with ``update``)."""
        if not items:
            return []
        names: list[str] = [keys.WEBHOOK_QUEUE]
        args: list[bytes | str | int] = [WEBHOOK_ENTRY_MS]
        for item in items:
            record = item.record
            assert record.webhook is not None
            first = keys.attempt(record.job_id, record.webhook.round, 0)
            after = keys.attempt(record.job_id, record.webhook.round, 1)
            names += [self.key(record.job_id), job_keys(first)[0], *job_keys(after)[:2]]
            body = record.model_dump_json(exclude_defaults=True)
            args += [item.stored, body, first, item.next_entry or "", after, item.next_score_ms]
        done = await self._note_first(keys=names, args=args)
        return [bool(flag) for flag in done]

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
        bound_job, bound_print = text.split(" ", 1)
        return bound_job, bound_print

    async def take_over_idempotency(
        self, scope: str, key: str, bound: tuple[str, str], job_id: str, submitter: str
    ) -> bool:
        """Rebind ``key`` from ``bound`` (job id, fingerprint) to ``job_id`` if that job's record does not
        exist (its submission died between claiming the key and storing the record), giving back the
        queued bytes ``submitter`` may have claimed for it; True if done."""
        name = keys.idempotency(scope, key)
        old_job, digest = bound
        table, total = self.queued_keys(submitter)
        args: list[str | int] = [f"{old_job} {digest}", f"{job_id} {digest}", IDEMPOTENCY_SECONDS, old_job]
        return bool(await self._take_over(keys=[name, self.key(old_job), table, total], args=args))

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
