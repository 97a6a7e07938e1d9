"""What a principal's finished job records keep in Redis, counted and capped: ``RETAIN``, the Lua functions
``SWAP`` and ``FINISH_MANY`` (``worker.jobs.record_scripts``) call on every change of a finished record, and
``RECORD_OVERHEAD``.

Each finished record that is no dry run counts its stored bytes plus ``RECORD_OVERHEAD`` (its key, its wiki's
index entry and its ledger entries) in its submitter's ledger (``keys.retained``); past the cap
(``JobStore.retained_cap``), the oldest by submission are dropped (record, wiki index entry, ledger
entries), never the one just counted. A dropped job whose idempotency key still names it gets its final
status appended to the key's value (``"<job> <fingerprint> <status>"``), so a replay answers that job
instead of queueing the batch again. The record and index keys are built here from
``job_prefix``/``index_prefix`` (one Redis primary, no cluster); entries that expired by themselves
(``cutoff``) are forgotten the same way.
"""

from __future__ import annotations

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
