-- lease(job_prefix, worker, lease_ms, now_ms) -> nil | {id, token, deadline_ms, payload}
-- KEYS: pending index, active index.
-- Takes the ready pending job with the lowest score (ties by id), increments
-- its attempts counter, and the new value is the lease's fencing token. The
-- deadline is on the server clock unless a logical now is given.
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
local token = redis.call('HINCRBY', key, 'attempts', 1)
redis.call('HSET', key, 'state', 'active', 'worker', worker, 'deadline', emq_num(deadline))
redis.call('ZADD', KEYS[2], emq_num(deadline), id)
return {id, token, deadline, redis.call('HGET', key, 'payload')}
