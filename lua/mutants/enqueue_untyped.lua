-- MUTANT of enqueue.lua: no key type check (emq_types) before the first
-- write. With the pending index holding a string, HSETNX writes the job,
-- then ZADD fails with WRONGTYPE: a job left without its index entry,
-- which no lease will ever find. tests/hostile.rs shows the damage.
-- enqueue(id, payload, max_attempts, delay_ms, now_ms) -> 1 Enqueued | 0 Duplicate
-- KEYS: jobs, pending index.
-- A duplicate id changes nothing: producer-side admission.
local id, e = emq_id(ARGV[1]); if e then return e end
local payload = ARGV[2]
if payload == nil then return redis.error_reply('EMQARG payload is missing') end
local max_attempts; max_attempts, e = emq_int(ARGV[3], 'max_attempts', 1, 1000000); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[4], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[5]); if e then return e end

if redis.call('HSETNX', KEYS[1], id, max_attempts .. ' ' .. payload) == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], now + delay_ms, id)
return 1
