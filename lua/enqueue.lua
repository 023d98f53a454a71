-- enqueue(id, payload, max_attempts, delay_ms, now_ms) -> 1 Enqueued | 0 Duplicate
-- KEYS: jobs, pending index.
-- A duplicate id changes nothing: producer-side admission. HSETNX of the
-- job's field is the duplicate test, the job's write and the type check of
-- the jobs column at once (see the prelude, after emq_types); the pending
-- index is checked up front, as the later write. When there is no pending
-- index (a new queue, or one whose jobs have all been leased), the column
-- gets its EMQ_WIDE field first (see the prelude).
local id, e = emq_id(ARGV[1]); if e then return e end
local payload = ARGV[2]
if payload == nil then return redis.error_reply('EMQARG payload is missing') end
local max_attempts; max_attempts, e = emq_int(ARGV[3], 'max_attempts', 1, 1000000); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[4], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[5]); if e then return e end
local t = redis.call('TYPE', KEYS[2])
local kind = t['ok'] or t
if kind ~= 'zset' then
  if kind ~= 'none' then return emq_types(KEYS[2], 'zset') end
  local wide = redis.pcall('HSET', KEYS[1], EMQ_WIDE_FIELD, EMQ_WIDE)
  if type(wide) == 'table' then return emq_types(KEYS[1], 'hash') or wide end
end

local added = redis.pcall('HSETNX', KEYS[1], id, max_attempts .. ' ' .. payload)
if type(added) == 'table' then return emq_types(KEYS[1], 'hash') or added end
if added == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], now + delay_ms, id)
return 1
