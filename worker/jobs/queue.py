"""The queue, from the enqueueing side: arq queues per partition, doorbells, what may be put on them, and
when an accepted job counts as durable.

Each wiki maps to one partition (``worker.jobs.ids.partition_of``); each partition is one arq queue
(``keys.queue``) consumed by exactly one worker process at a time (``worker.jobs.consumer``). Submissions
ring the partition's doorbell list (``keys.bell``), so its consumer wakes at once instead of polling.
Webhook attempts go on one shared arq queue. Only JSON crosses Redis (never pickle); every process reaches
Redis through ``worker.jobs.connection``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arq.connections import ArqRedis
from redis.exceptions import NoScriptError, ResponseError

from worker import keys
from worker.jobs.arq_compat import job_entry, job_keys
from worker.jobs.payloads import dumps
from worker.jobs.scripts import C, Call, Script, arg, key

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from worker.jobs.record import JobRecord
    from worker.jobs.store import JobStore

# arq never gives up on a batch or a delivery by itself (that would drop it with its record unfinished):
# ``worker.jobs.run`` counts runs and records the failure after ``max_job_tries``; a delivery fails by
# schedule.
ARQ_MAX_TRIES = 1_000_000
LANDING_KEPT_MS = 60_000  # ``keys.landing`` only needs to outlive its WAIT


async def enqueue_batch(redis: ArqRedis, job_id: str, partition: int, expires_s: float) -> bool:
    """Queue job ``job_id`` on ``partition`` (its doorbell is rung by ``ring``, or by ``ring_durably``);
    False when arq has that job already (queued or running: job ids are unique, so it is this job)."""
    job = await redis.enqueue_job(
        "apply_batch", job_id, _job_id=job_id, _queue_name=keys.queue(partition), _expires=expires_s
    )
    return job is not None


async def ring(redis: ArqRedis, partition: int) -> None:
    """Wake the consumer of ``partition``."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(keys.bell(partition), b"1")
        pipe.ltrim(keys.bell(partition), 0, 7)
        await pipe.execute()


class NotDurable(Exception):
    """Redis did not confirm in time that what this process wrote is on disk (or on a replica)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _wait_for_durability(pipe: Any, durability: str, timeout_s: float) -> None:
    """Append to ``pipe`` the waits ``durability`` asks for (see ``ring_durably``)."""
    ms = max(1, int(timeout_s * 1000))
    if durability != "none":
        pipe.execute_command("WAITAOF", 1, 0, ms)
    if durability == "replica":
        pipe.execute_command("WAIT", 1, ms)


def _check_durability(replies: list[Any], durability: str, timeout_s: float) -> None:
    """``NotDurable`` unless the replies of ``_wait_for_durability``'s commands confirm ``durability``."""
    for reply in replies:
        if isinstance(reply, ResponseError):
            text = str(reply)
            if "appendonly" in text.lower():
                raise NotDurable(
                    "Redis runs without its append-only file (appendonly no), so no submission can be "
                    "confirmed on disk: run Redis with --appendonly yes --appendfsync always, or set "
                    "WIKIQ_ACCEPT_DURABILITY=none"
                )
            raise NotDurable(f"Redis refused to confirm durability: {text}")
        if isinstance(reply, BaseException):
            raise reply
    if durability == "none":
        return
    local = replies[0]
    if not isinstance(local, list) or int(local[0]) < 1:
        raise NotDurable(f"Redis did not confirm within {timeout_s:g} s that the job is on disk (fsync)")
    if durability == "replica" and int(replies[1]) < 1:
        raise NotDurable(f"no replica of Redis confirmed the job within {timeout_s:g} s")


@dataclass
class Accept(Call):
    """A submission in one step: the idempotency guard (``guard``, or the record's key again; ``bound``
    '' = no key), the submitter's queued bytes (``size`` '' = no cap), the job record and its wiki's index,
    arq's job entry and queue entry (unless arq has the job already), the doorbell. Returns -1 accepted;
    -2 the idempotency key no longer names this job; >= 0 the bytes the submitter already has queued or
    kept, over the cap. Nothing is written unless -1, but the bytes of kept dry-run results that expired
    are given back first (``JobStore.keep``)."""

    record: str = key()
    wiki_index: str = key()
    guard: str = key()
    queued_table: str = key()
    queued_total: str = key()
    arq_entry: str = key()
    arq_result: str = key()
    arq_queue: str = key()
    doorbell: str = key()
    kept: str = key()
    kept_sizes: str = key()
    body: str = arg()
    submitted_ms: int = arg()
    cutoff: int = arg()
    bound: str = arg()
    retention: int = arg()
    job_id: str = arg()
    size: int | str = arg()
    cap: int = arg()
    entry: bytes = arg()
    entry_ttl_ms: int = arg()
    score: int = arg()


ACCEPT = Script(
    Accept,
    body="""
if A.bound ~= '' and redis.call('GET', K.guard) ~= A.bound then return -2 end
if A.size ~= '' then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.kept, '-inf', A.submitted_ms, 'LIMIT', 0, 100)) do
    local size = redis.call('HGET', K.kept_sizes, id)
    if size then
      redis.call('HDEL', K.kept_sizes, id)
      if redis.call('DECRBY', K.queued_total, size) < 0 then
        redis.call('SET', K.queued_total, 0, 'KEEPTTL')
      end
    end
    redis.call('ZREM', K.kept, id)
  end
  local held = tonumber(redis.call('GET', K.queued_total) or '0')
  local size = tonumber(A.size)
  if held + size > tonumber(A.cap) then return held end
  if redis.call('HSETNX', K.queued_table, A.job_id, A.size) == 1 then
    redis.call('INCRBY', K.queued_total, size)
  end
  redis.call('EXPIRE', K.queued_table, A.retention)
  redis.call('EXPIRE', K.queued_total, A.retention)
end
redis.call('SET', K.record, A.body, 'EX', A.retention)
redis.call('ZADD', K.wiki_index, A.submitted_ms, A.job_id)
redis.call('ZREMRANGEBYSCORE', K.wiki_index, '-inf', A.cutoff)
if redis.call('EXISTS', K.arq_entry, K.arq_result) == 0 then
  redis.call('PSETEX', K.arq_entry, A.entry_ttl_ms, A.entry)
  redis.call('ZADD', K.arq_queue, A.score, A.job_id)
end
redis.call('LPUSH', K.doorbell, '1')
redis.call('LTRIM', K.doorbell, 0, 7)
return -1
""",
)
ACCEPTED, KEY_TAKEN = -1, -2


async def eval_pipelined(
    redis: ArqRedis, script: Script[C], call: C, then: Callable[[Any], None]
) -> list[Any]:
    """``script`` for ``call`` (by its sha) and the commands ``then(pipe)`` appends, in ONE round trip;
    their replies.

    redis-py's own pipelined scripts check ``SCRIPT EXISTS`` on every execution (a round trip more):
    here a script Redis does not know yet (``NOSCRIPT``, once per server start) is loaded and the whole
    pipeline sent again, which is safe because nothing of it ran.
    """
    keys_, args = script.keys_and_args(call)
    for _ in range(2):
        async with redis.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVALSHA", script.sha, len(keys_), *keys_, *args)
            then(pipe)
            replies = await pipe.execute(raise_on_error=False)
        if isinstance(replies[0], NoScriptError):
            await redis.script_load(script.text)
            continue
        if isinstance(replies[0], BaseException):
            raise replies[0]
        return list(replies)
    raise NoScriptError("Redis keeps forgetting wikiq's scripts")


async def accept_job(
    redis: ArqRedis,
    jobs: JobStore,
    record: JobRecord,
    idempotency: tuple[str, str, str] | None,
    cap: int,
    durability: str,
    timeout_s: float,
) -> int:
    """Store ``record``, queue its job and ring its partition's doorbell in one atomic script, and wait
    for Redis to confirm it durable, all in one round trip: ``ACCEPTED``, ``KEY_TAKEN`` (the idempotency
    key ``(scope, key, fingerprint)`` no longer names this job: nothing stored), or the bytes the submitter
    already has queued when this batch would pass ``cap`` (nothing stored; ``cap`` <= 0: no cap).

    Raises ``NotDurable`` (the job is stored and queued, but not confirmed) as ``ring_durably`` does.
    """
    job_id, partition = record.job_id, record.partition
    guard, bound = keys.job(job_id), ""
    if idempotency is not None:
        scope, key, fingerprint = idempotency
        guard, bound = keys.idempotency(scope, key), f"{job_id} {fingerprint}"
    table, total = keys.queued(record.submitter)
    entry, result, _, _ = job_keys(job_id)
    now = record.submitted_ms
    kept, kept_sizes = keys.kept(record.submitter)
    call = Accept(
        record=keys.job(job_id),
        wiki_index=keys.wiki_jobs(record.wiki),
        guard=guard,
        queued_table=table,
        queued_total=total,
        arq_entry=entry,
        arq_result=result,
        arq_queue=keys.queue(partition),
        doorbell=keys.bell(partition),
        kept=kept,
        kept_sizes=kept_sizes,
        body=record.model_dump_json(exclude_defaults=True),
        submitted_ms=now,
        cutoff=now - jobs.retention * 1000,
        bound=bound,
        retention=jobs.retention,
        job_id=job_id,
        size=record.queued_bytes if cap > 0 else "",
        cap=cap,
        entry=job_entry("apply_batch", (job_id,), now, dumps),
        entry_ttl_ms=jobs.retention * 1000,
        score=now,
    )
    replies = await eval_pipelined(
        redis, ACCEPT, call, lambda pipe: _wait_for_durability(pipe, durability, timeout_s)
    )
    outcome = int(replies[0])
    if outcome == ACCEPTED:
        _check_durability(replies[1:], durability, timeout_s)
    return outcome


async def ring_durably(redis: ArqRedis, partition: int, durability: str, timeout_s: float) -> None:
    """Wake the consumer of ``partition``, then return once Redis confirms that everything written before
    (by any connection of this process) is durable as ``durability`` asks; ``NotDurable`` if it cannot.

    ``WAITAOF`` and ``WAIT`` wait for the replication offset of their *connection's* last write, so they go
    in one pipeline behind the doorbell's ``LPUSH``: that write's offset is past every write this process
    finished before, and Redis' append-only file and replication stream are both in offset order, so
    confirming it confirms the job's record and queue entry too. ``none``: ring only.
    ``local``: ``WAITAOF 1 0`` (fsynced in the primary's AOF). ``replica``: also ``WAIT 1`` (one replica
    has it). With ``appendfsync always`` the fsync happened before any reply left Redis, so the wait costs
    one round trip; with ``everysec`` it waits for the next fsync (up to a second).
    """
    if durability == "none":
        await ring(redis, partition)
        return
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(keys.bell(partition), b"1")
        pipe.ltrim(keys.bell(partition), 0, 7)
        _wait_for_durability(pipe, durability, timeout_s)
        replies = await pipe.execute(raise_on_error=False)
    _check_durability(replies[2:], durability, timeout_s)


class ClaimLost(Exception):
    """The records a worker claimed are not what this Redis holds: it failed over to a node that never had
    the claim. Nothing may land; the job runs again on the Redis as it is."""


async def confirm_on_replica(
    redis: Redis, partition: int, timeout_s: float, claimed: Sequence[tuple[str, bytes]]
) -> None:
    """Return once a replica of Redis holds the records of ``claimed`` (job id, the bytes its claim stored)
    and everything else this process read and wrote before the call. ``NotDurable`` if no replica confirms
    within ``timeout_s`` (or Redis refuses, e.g. a demoted primary's ``READONLY``); ``ClaimLost`` if the
    records are not those bytes.

    A worker of a ``replica`` deployment calls it before it lands the jobs it claimed: a job answered 503
    (stored and queued, not confirmed) is then never put into git while a failover could still take its
    record back, which would leave a commit of a job nobody knows and a retry that queues the batch
    again. One pipeline on one connection, so on one server: ``MGET`` finds the claimed records there
    (not on a node promoted since the claim), then ``WAIT`` waits for that connection's last write, a
    timestamp under ``keys.landing``: past the records in the replication stream, which is in offset
    order, so confirming it confirms them.
    """
    async with redis.pipeline(transaction=False) as pipe:
        if claimed:
            pipe.mget([keys.job(job_id) for job_id, _ in claimed])
        pipe.set(keys.landing(partition), str(int(time.time() * 1000)), px=LANDING_KEPT_MS)
        pipe.execute_command("WAIT", 1, max(1, int(timeout_s * 1000)))
        replies = await pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise NotDurable(f"Redis refused to confirm the claimed jobs: {reply}")
        if isinstance(reply, BaseException):
            raise reply
    if claimed and list(replies[0]) != [stored for _, stored in claimed]:
        raise ClaimLost("the claimed jobs' records changed under this worker (did Redis fail over?)")
    if int(replies[-1]) < 1:
        raise NotDurable(f"no replica of Redis confirmed the claimed jobs within {timeout_s:g} s")


async def cancel_queued(redis: ArqRedis, job_id: str, partition: int) -> None:
    """Take a cancelled job out of its arq queue so no consumer ever reads it."""
    async with redis.pipeline(transaction=True) as pipe:
        entry, _, _, _ = job_keys(job_id)
        pipe.zrem(keys.queue(partition), job_id)
        pipe.delete(entry)
        await pipe.execute()
