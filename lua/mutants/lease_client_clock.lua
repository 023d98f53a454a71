-- MUTANT of lease.lua: the deadline is computed from the caller's clock.
-- The script no longer reads TIME when no logical now is given: it trusts
-- ARGV[4], which its client (src/mutants/adapters.rs, `ClientClock`) fills
-- from its own wall clock, skewed. Deadlines then disagree with the server
-- clock the reaper and the other scripts use: a client whose clock is
-- behind grants leases that the reaper takes early.
-- Should be caught by: refinement (the deadline differs from the model's,
-- which stands for the server clock), or lease-respected.
local prefix = ARGV[1]
local worker, e = emq_worker(ARGV[2]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[3], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now = tonumber(ARGV[4])
if now == nil then return redis.error_reply('EMQARG the client clock is missing') end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'zset'); if e then return e end

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', emq_num(now), 'LIMIT', 0, 1)
if #ids == 0 then
  return false
end
local id = ids[1]
local key = prefix .. id
e = emq_types(key, 'hash'); if e then return e end
local deadline = now + lease_ms
redis.call('ZREM', KEYS[1], id)
local token = redis.call('HINCRBY', key, 'attempts', 1)
redis.call('HSET', key, 'state', 'active', 'worker', worker, 'deadline', emq_num(deadline))
redis.call('ZADD', KEYS[2], emq_num(deadline), id)
return {id, token, deadline, redis.call('HGET', key, 'payload')}
