-- enqueue(id, payload, max_attempts, delay_ms[, now_ms]) -> 1 Enqueued | 0 Duplicate
-- KEYS: jobs, pending index, active index, dead index.
-- A duplicate id changes nothing: producer-side admission. HSETNX of the
-- job's field is the duplicate test, the job's write and the type check of
-- the jobs column at once (see the prelude, after emq_types). The pending
-- index is type-checked by its own ZADD, the second write: when it holds
-- another type, the job's field is taken back (HDEL) before the refusal,
-- so a refusal leaves every key as it was (the script runs whole, nothing
-- sees the field meanwhile). That saves a TYPE call on every enqueue.
--
-- The ZADD also adds EMQ_WIDE_MEMBER (see the prelude); when it answers 2,
-- that member was new, so the queue is (the index was empty and gone): the
-- jobs column then gets its EMQ_WIDE field too, and the active and dead
-- indexes their EMQ_WIDE_MEMBER, so every key a script declares exists from
-- a queue's first enqueue on (see the prelude: a classic slot migration).
-- Three calls: TIME, HSETNX, ZADD.
--
-- The common arguments (a printable-ASCII JOB id, counts without leading
-- zeros and in range, a now that is absent or plain digits) are checked by
-- a few patterns; anything else goes through the prelude's checks, which
-- answer the exact refusal.
local id, payload, max_attempts, delay_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = ARGV[5]
if #ARGV >= 4 and #ARGV <= 5 and #id <= 512 and #delay_ms <= 15
    and (#max_attempts < 7 or max_attempts == '1000000')
    and string.find(id, '^JOB[ -~]*$') and string.find(max_attempts, '^[1-9]%d*$')
    and string.find(delay_ms, '^%d+$') and (#delay_ms == 1 or string.byte(delay_ms) ~= 48)
    and (now == nil or now == '' or (#now <= 15 and string.find(now, '^%d+$'))) then
  if now == nil or now == '' then
    local t = redis.call('TIME')
    now = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
  end
else
  local e
  id, e = emq_id(ARGV[1]); if e then return e end
  if payload == nil then return redis.error_reply('EMQARG payload is missing') end
  max_attempts, e = emq_int(ARGV[3], 'max_attempts', 1, 1000000); if e then return e end
  delay_ms, e = emq_int(ARGV[4], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
  now, e = emq_now(ARGV[5]); if e then return e end
end

local added = redis.pcall('HSETNX', KEYS[1], id, max_attempts .. ' ' .. payload)
if type(added) == 'table' then return emq_types(KEYS[2], 'zset', KEYS[1], 'hash') or added end
if added == 0 then
  -- A duplicate writes nothing; the pending index is still checked, as the
  -- up-front check used to (a TYPE call, on this path only).
  return emq_types(KEYS[2], 'zset') or 0
end
local n = redis.pcall('ZADD', KEYS[2], now + delay_ms, id, 'inf', EMQ_WIDE_MEMBER)
if type(n) == 'table' then
  redis.call('HDEL', KEYS[1], id)
  return emq_types(KEYS[2], 'zset') or n
end
if n == 2 then
  redis.call('HSET', KEYS[1], EMQ_WIDE_FIELD, EMQ_WIDE)
  emq_keep(KEYS[3], KEYS[4])
end
return 1
