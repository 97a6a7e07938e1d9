"""Job records in Redis: ``JobStore`` reads and writes them, with the per-wiki job index, idempotency keys,
and the queued and retained bytes of each submitter.

A record (``worker.jobs.record``) is one JSON document under ``keys.job`` kept for the retention time, or
until its submitter's finished records pass their cap (``worker.jobs.retention``: the oldest go first).
Every change is a compare-and-set (a Lua script of ``worker.jobs.record_scripts`` checks the bytes read), so
a cancel and a worker's start can never both win. Every change to a finished job is announced on the
``keys.EVENTS`` channel so long-pollers answer at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from worker import keys
from worker.errors import Fenced
from worker.jobs.arq_compat import job_keys
from worker.jobs.clock import now_ms
from worker.jobs.handover import OUTBOX_CAP, OUTBOX_TAKE, OutboxEntry, hand_over_round, taken_entries
from worker.jobs.leases import REFUSED, Lease, fence_of
from worker.jobs.record import FINISHED, JobRecord
from worker.jobs.record_scripts import (
    CREATE,
    FINISH_MANY,
    KEEP,
    SWAP,
    SWAP_MANY,
    TAKE_OVER,
    CreateRecord,
    FinishItem,
    FinishMany,
    Keep,
    KeepItem,
    SwapItem,
    SwapMany,
    SwapRecord,
    TakeOver,
)
from worker.jobs.retention import RECORD_OVERHEAD

IDEMPOTENCY_SECONDS = 24 * 3600  # how long an idempotency key names its job


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


class JobStore:
    """Reads and writes job records, the per-wiki job index, idempotency keys and queued bytes.

    A record moving to a finished status loses its batch body in the same compare-and-set (a dry run that
    succeeded or failed keeps it: it is a plan, to commit or amend), gives its bytes back to the
    submitter's queued-bytes count (at most once: the job id leaves a hash), and, for a dry run, expires
    after ``dry_run_retention`` seconds instead of ``retention``, its size counted in the queued bytes
    meanwhile (``keep``). Any other finished record counts, from its finish and after every later change,
    in its submitter's retained bytes: past ``retained_cap`` (0: no cap) the submitter's oldest finished
    records are dropped (``worker.jobs.retention``).
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

    async def return_bytes(self, record: JobRecord) -> None:
        """Give back the bytes of a job that was never queued."""
        table, total = keys.queued(record.submitter)
        if await cast(Awaitable[int], self.redis.hdel(table, record.job_id)):
            await self.redis.decrby(total, record.queued_bytes)

    async def create(self, record: JobRecord, idempotency: tuple[str, str, str] | None = None) -> bool:
        """Store a new record and index it under its wiki (trimming index entries past retention).

        With ``idempotency`` (scope, key, fingerprint), only while that key is bound to this job (a retry
        may have taken over a key whose first submission seemed dead, ``take_over_key``); False
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
            record=keys.job(record.job_id),
            wiki_index=keys.wiki_jobs(record.wiki),
            guard=guard or keys.job(record.job_id),
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
            pipe.delete(keys.job(job_id))
            pipe.zrem(keys.wiki_jobs(wiki), job_id)
            await pipe.execute()

    async def get(self, job_id: str) -> JobRecord | None:
        """The record of ``job_id``, or None when unknown or expired."""
        raw = await self.redis.get(keys.job(job_id))
        return None if raw is None else JobRecord.model_validate_json(raw)

    async def expire_soon(self, record: JobRecord, seconds: int, counted: int | None = None) -> None:
        """Let the finished record live at most ``seconds`` more (never longer than it would), and count its
        kept bytes only that long (``counted`` seconds, when given)."""
        await self.redis.expire(keys.job(record.job_id), seconds, lt=True)
        if record.dry_run and record.submitter:
            kept, _ = keys.kept(record.submitter)
            until = now_ms() + (seconds if counted is None else counted) * 1000
            await self.redis.zadd(kept, {record.job_id: until}, xx=True, lt=True)

    async def keep(self, records: Sequence[tuple[JobRecord, int]]) -> None:
        """Count each just-finished dry run's stored size (``(record, size)``) in its submitter's queued
        bytes until its record expires: what a principal's results keep in Redis is bounded with what it
        has waiting (``max_queued_bytes``). The submission script gives them back once they expired."""
        by_submitter: dict[str, list[KeepItem]] = {}
        longest: dict[str, int] = {}
        for record, size in records:
            if record.dry_run and record.submitter:
                seconds = self.kept_seconds(record)
                expiry = now_ms() + seconds * 1000
                by_submitter.setdefault(record.submitter, []).append(KeepItem(record.job_id, size, expiry))
                longest[record.submitter] = max(longest.get(record.submitter, 0), seconds)
        for submitter, results in by_submitter.items():
            kept, sizes = keys.kept(submitter)
            total = keys.queued(submitter)[1]
            call = Keep(kept, sizes, total, ttl=longest[submitter] + 60, results=results)
            await KEEP.run(self.redis, call)

    def kept_seconds(self, record: JobRecord) -> int:
        """How long the finished dry run ``record`` is kept: its own ``kept_seconds`` (a proposal's
        revision lives as long as the proposal), else ``dry_run_retention``."""
        return record.kept_seconds or self.dry_run_retention

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
        key = keys.job(job_id)
        while True:
            raw = await self.redis.get(key)
            if raw is None:
                return None, None
            current = JobRecord.model_validate_json(raw)
            # a second parse is the copy ``change`` may edit: ~5x cheaper than ``model_copy(deep=True)``
            changed = change(JobRecord.model_validate_json(raw))
            if changed is None:
                return current, raw
            epoch_key, epoch = fence_of(lease, current.partition)
            # compare-and-set against the exact bytes read: two round trips instead of WATCH/GET/EXEC's three
            call = SwapRecord(
                **self._change(current, changed, raw),
                epoch_key=epoch_key,
                outbox=keys.outbox(current.partition),
                channel=keys.EVENTS if changed.status in FINISHED else "",
                epoch=epoch,
                outbox_cap=OUTBOX_CAP,
                **self._retain_args(),
            )
            stored = await SWAP.run(self.redis, call)
            if stored == REFUSED:
                raise Fenced(f"job {job_id}: a run of an older lease epoch than {epoch_key}'s; not stored")
            if stored:
                if call.release and changed.dry_run:
                    await self.keep([(changed, len(call.body))])
                return changed, call.body.encode()

    def _change(self, before: JobRecord, after: JobRecord, expected: bytes) -> dict[str, Any]:
        """The fields a record's change sets in either script that stores it (``SwapRecord``, a
        ``FinishItem``): the record holding exactly ``expected`` (``before``, parsed) becomes ``after``,
        as ``_changed`` stores it, handing over the webhook round ``hand_over_round`` says and counting in
        its submitter's retained bytes what ``retaining`` says."""
        body, ttl, release = self._changed(before, after)
        table, total = keys.queued(after.submitter)
        ledger, retained_jobs, retained_total = keys.retained(after.submitter)
        retained, note = self.retaining(after, body.encode())
        return {
            "record": keys.job(after.job_id),
            "queued_table": table,
            "queued_total": total,
            "ledger": ledger,
            "retained_jobs": retained_jobs,
            "retained_total": retained_total,
            "job_id": after.job_id,
            "expected": expected,
            "body": body,
            "ttl": ttl,
            "release": release,
            "hook_round": hand_over_round(before, after),
            "retained": retained,
            "retained_meta": note,
            "submitted_ms": after.submitted_ms,
        }

    def _changed(self, current: JobRecord, changed: JobRecord) -> tuple[str, str, str]:
        """The bytes to store for ``current`` becoming ``changed``, its new ttl ('' = keep) and the queued
        bytes to give back ('' = none): a record that finishes drops its body and its bytes."""
        ttl, release = "", ""
        if changed.status in FINISHED and current.status not in FINISHED:
            if not (changed.dry_run and changed.status in ("succeeded", "failed")):
                changed.batch = None  # a checked dry run keeps it: its plan, to commit or amend
            release = str(changed.queued_bytes) if changed.submitter else ""
            if changed.dry_run:
                ttl = str(self.kept_seconds(changed))
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
        records = [SwapItem(keys.job(job_id), expected, new) for job_id, expected, new in items]
        stored = int(await SWAP_MANY.run(self.redis, SwapMany(epoch_key, epoch, records)))
        if stored == REFUSED:
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
            channel=keys.EVENTS,
            outbox_cap=OUTBOX_CAP,
            epoch=epoch,
            taker=taker,
            group=keys.OUTBOX_GROUP,
            take=OUTBOX_TAKE,
            **self._retain_args(),
        )
        for item in items:
            entry, _, in_progress, retry = job_keys(item.record.job_id)
            finish = FinishItem(
                **self._change(item.before, item.record, item.stored),
                arq_entry=entry,
                arq_retry=retry,
                arq_in_progress=in_progress,
                dequeue="1" if item.dequeue else "",
            )
            item.body = finish.body.encode()
            call.jobs.append(finish)
        reply = await FINISH_MANY.run(self.redis, call)
        if reply == REFUSED:
            raise Fenced(f"a run of an older lease epoch than {epoch_key}'s; nothing finished")
        done, found = reply
        finished = [bool(flag) for flag in done]
        await self.keep(
            [(item.record, len(item.body)) for item, ok in zip(items, finished, strict=True) if ok]
        )
        return finished, taken_entries(found)

    async def wiki_jobs(self, wiki: str, limit: int, status: str | None = None) -> list[JobRecord]:
        """A wiki's recent jobs, newest first, optionally only those with ``status``."""
        out: list[JobRecord] = []
        start = 0
        page = max(limit, 50)
        while len(out) < limit:
            ids = await self.redis.zrevrange(keys.wiki_jobs(wiki), start, start + page - 1)
            if not ids:
                break
            start += page
            raws = await self.redis.mget([keys.job(i.decode() if isinstance(i, bytes) else i) for i in ids])
            for raw in raws:
                if raw is None:
                    continue
                record = JobRecord.model_validate_json(raw)
                if status is None or record.status == status:
                    out.append(record)
                    if len(out) >= limit:
                        break
        return out

    async def bind_key(self, scope: str, key: str, fingerprint: str, job_id: str) -> tuple[str, str]:
        """Bind ``key`` to ``job_id`` for 24 h, or return the ``(job_id, fingerprint)`` already bound."""
        name = keys.idempotency(scope, key)
        value = f"{job_id} {fingerprint}"
        if await self.redis.set(name, value, nx=True, ex=IDEMPOTENCY_SECONDS):
            return job_id, fingerprint
        existing = await self.redis.get(name)
        if existing is None:  # expired between the two calls: claim again
            return await self.bind_key(scope, key, fingerprint, job_id)
        text = existing.decode() if isinstance(existing, bytes) else existing
        bound_job, bound_print = text.split(" ")[:2]  # a third word: the record was dropped (``dropped``)
        return bound_job, bound_print

    async def dropped(self, scope: str, key: str, job_id: str) -> str | None:
        """The final status of ``job_id`` when idempotency ``key`` still names it and its record was
        dropped under its submitter's retained-bytes cap (``RETAIN`` notes it in the key); else None."""
        value = await self.redis.get(keys.idempotency(scope, key))
        words = (value.decode() if isinstance(value, bytes) else value or "").split(" ")
        return words[2] if len(words) == 3 and words[0] == job_id and words[2] in FINISHED else None

    async def take_over_key(
        self, scope: str, key: str, bound: tuple[str, str], job_id: str, submitter: str
    ) -> bool:
        """Rebind ``key`` from ``bound`` (job id, fingerprint) to ``job_id`` if that job's record does not
        exist (its submission died between claiming the key and storing the record), giving back the
        queued bytes ``submitter`` may have claimed for it; True if done."""
        name = keys.idempotency(scope, key)
        old_job, digest = bound
        table, total = keys.queued(submitter)
        call = TakeOver(
            guard=name,
            old_record=keys.job(old_job),
            queued_table=table,
            queued_total=total,
            bound=f"{old_job} {digest}",
            new_bound=f"{job_id} {digest}",
            ttl=IDEMPOTENCY_SECONDS,
            old_job=old_job,
        )
        return bool(await TAKE_OVER.run(self.redis, call))

    async def unbind_key(self, scope: str, key: str) -> None:
        """Forget an idempotency key whose job could not be queued."""
        await self.redis.delete(keys.idempotency(scope, key))
