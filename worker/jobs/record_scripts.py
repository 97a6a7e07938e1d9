"""The Lua scripts that change job records, each with its ``Call`` class (``worker.jobs.scripts``); their one
caller is ``JobStore`` (``worker.jobs.store``).

Every change is a compare-and-set against the exact bytes read, so a cancel and a worker's start can never
both win:

- ``SWAP``: one record (``JobStore.update``); ``SWAP_MANY``: several, in order, none finishing a job;
- ``FINISH_MANY``: the running jobs of one partition finished in one step, arq entries of followers
  included, their webhooks handed to the outbox (``worker.jobs.handover``) and taken for a taker;
- ``CREATE``: a new record and its wiki's index entry, only while its idempotency key names it;
- ``TAKE_OVER``: an idempotency key rebound from a submission that died before its record;
- ``KEEP``: kept dry-run results counted in their submitter's queued bytes.

``SWAP``, ``SWAP_MANY`` and ``FINISH_MANY`` are fenced by the lease epoch of the run that writes
(``FENCED``); ``SWAP`` and ``FINISH_MANY`` also hand webhook rounds to the outbox and count finished records
in their submitter's retained bytes (``worker.jobs.retention``).
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.jobs.handover import HAND_OVER
from worker.jobs.leases import FENCED
from worker.jobs.retention import RETAIN
from worker.jobs.scripts import Call, Script, arg, items, key


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


@dataclass
class KeepItem(Call):
    """One kept dry-run result of ``Keep``: its job id, size and expiry."""

    job_id: str = arg()
    size: int = arg()
    expiry_ms: int = arg()


@dataclass
class Keep(Call):
    """Count kept dry-run results in their submitter's queued bytes (``JobStore.keep``); the kept set and
    sizes live at least ``ttl`` seconds more."""

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
for _, name in ipairs({K.kept, K.sizes}) do
  if redis.call('TTL', name) < tonumber(A.ttl) then redis.call('EXPIRE', name, A.ttl) end
end
return 1
""",
)
