-- MUTANT of lease.lua: attempts is read, not incremented. The token is the
-- old attempts + 1, but the row keeps the old value, so the next lease of
-- the same job (after a reap or a fail) grants the same token again: two
-- leases share one fencing token and the older holder's ack is accepted.
-- Should be caught by: structure (a token granted twice), else refinement.
local prefix = ARGV[1]
local worker, e = emq_worker(ARGV[2]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[3], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end
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
local token = tonumber(redis.call('HGET', key, 'attempts')) + 1
redis.call('HSET', key, 'state', 'active', 'worker', worker, 'deadline', emq_num(deadline))
redis.call('ZADD', KEYS[2], emq_num(deadline), id)
return {id, token, deadline, redis.call('HGET', key, 'payload')}
