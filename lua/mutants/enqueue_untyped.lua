-- MUTANT of enqueue.lua: the pending index's type is not checked before the
-- job stays written. enqueue.lua writes the job (HSETNX), then meets the
-- pending index's type in its ZADD and takes the job back (HDEL) before it
-- refuses; this one makes the ZADD with redis.call and takes nothing back.
-- With the pending index holding a string, the job is left without its
-- index entry, which no lease will ever find. tests/hostile.rs shows the
-- damage.
-- enqueue(id, payload, max_attempts, delay_ms[, now_ms]) -> 1 Enqueued | 0 Duplicate
-- KEYS: jobs, pending index, active index, dead index.
local id, e = emq_id(ARGV[1]); if e then return e end
local payload = ARGV[2]
if payload == nil then return redis.error_reply('EMQARG payload is missing') end
local max_attempts; max_attempts, e = emq_int(ARGV[3], 'max_attempts', 1, 1000000); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[4], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[5]); if e then return e end

local added = redis.pcall('HSETNX', KEYS[1], id, max_attempts .. ' ' .. payload)
if type(added) == 'table' then return emq_types(KEYS[2], 'zset', KEYS[1], 'hash') or added end
if added == 0 then
  return emq_types(KEYS[2], 'zset') or 0
end
if redis.call('ZADD', KEYS[2], now + delay_ms, id, 'inf', EMQ_WIDE_MEMBER) == 2 then
  redis.call('HSET', KEYS[1], EMQ_WIDE_FIELD, EMQ_WIDE)
  emq_keep(KEYS[3], KEYS[4])
end
return 1
