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
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel
from redis.asyncio import Redis

Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
EVENTS = "wikiq:events"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def now_iso() -> str:
    """The current UTC time, ISO 8601 with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


class JobRecord(BaseModel):
    """Everything wikiq keeps about one job; ``public()`` is the contract's job object."""

    job_id: str
    wiki: str
    status: Status = "queued"
    submitted_at: str
    started_at: str | None = None
    finished_at: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    webhook: dict[str, Any] | None = None
    webhook_event: str | None = None
    batch: dict[str, Any]
    author: dict[str, str]
    principal: str | None = None
    base: str | None = None
    partition: int = 0
    runs: int = 0
    submitted_ms: int = 0
    started_ms: int | None = None
    finished_ms: int | None = None

    def public(self) -> dict[str, Any]:
        """The job as clients see it (contract 3.2)."""
        return {
            "job_id": self.job_id,
            "wiki": self.wiki,
            "status": self.status,
            "dry_run": bool(self.batch.get("dry_run", False)),
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "error": self.error,
            "webhook": None
            if self.webhook is None
            else {
                "url": self.webhook["url"],
                "state": self.webhook["state"],
                "attempts": self.webhook.get("attempts", []),
            },
        }


_SWAP = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return 1
"""


class JobStore:
    """Reads and writes job records, the per-wiki job index and idempotency keys."""

    def __init__(self, redis: Redis, retention_seconds: int) -> None:
        self.redis = redis
        self.retention = retention_seconds
        self._swap = redis.register_script(_SWAP)

    @staticmethod
    def key(job_id: str) -> str:
        """The Redis key of a job record."""
        return f"wikiq:job:{job_id}"

    @staticmethod
    def wiki_index(wiki: str) -> str:
        """The sorted set of a wiki's job ids by submission time."""
        return f"wikiq:wiki-jobs:{wiki}"

    async def create(self, record: JobRecord) -> None:
        """Store a new record and index it under its wiki (trimming index entries past retention)."""
        cutoff = record.submitted_ms - self.retention * 1000
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.key(record.job_id), record.model_dump_json(), ex=self.retention)
            pipe.zadd(self.wiki_index(record.wiki), {record.job_id: record.submitted_ms})
            pipe.zremrangebyscore(self.wiki_index(record.wiki), "-inf", cutoff)
            await pipe.execute()

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

    async def update(self, job_id: str, change: Callable[[JobRecord], JobRecord | None]) -> JobRecord | None:
        """Apply ``change`` to the record atomically; ``change`` returns None to leave it as it is.

        Returns the stored record after the call (changed or not), None when the job is unknown.
        A finished record's change is announced on ``wikiq:events``.
        """
        key = self.key(job_id)
        while True:
            raw = await self.redis.get(key)
            if raw is None:
                return None
            current = JobRecord.model_validate_json(raw)
            changed = change(current.model_copy(deep=True))
            if changed is None:
                return current
            channel = EVENTS if changed.status in FINISHED else ""
            # compare-and-set against the exact bytes read: two round trips instead of WATCH/GET/EXEC's three
            if await self._swap(keys=[key], args=[raw, changed.model_dump_json(), channel, job_id]):
                return changed

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
        name = "wikiq:idem:" + hashlib.sha256(f"{scope}\x00{key}".encode()).hexdigest()
        value = f"{job_id} {fingerprint}"
        if await self.redis.set(name, value, nx=True, ex=24 * 3600):
            return job_id, fingerprint
        existing = await self.redis.get(name)
        if existing is None:  # expired between the two calls: claim again
            return await self.claim_idempotency(scope, key, fingerprint, job_id)
        text = existing.decode() if isinstance(existing, bytes) else existing
        bound_job, bound_print = text.split(" ", 1)
        return bound_job, bound_print

    async def release_idempotency(self, scope: str, key: str) -> None:
        """Forget an idempotency key whose job could not be queued."""
        await self.redis.delete("wikiq:idem:" + hashlib.sha256(f"{scope}\x00{key}".encode()).hexdigest())
