-- MUTANT of lease.lua: lease done as two calls instead of one script. The
-- client (src/mutants/adapters.rs, `SplitLease`) first asks
-- `ZRANGEBYSCORE pending -inf now LIMIT 0 1` on its own, then runs this
-- script to claim the id it saw (ARGV[5]), without checking that the job
-- is still pending: between the two calls another worker may have claimed
-- it, completed it, or it may have been requeued for later. Each worker
-- peeks its next job right after a lease and claims it on its next lease,
-- so the explorers can put other workers' steps between the two halves.
-- Should be caught by: settle-once (a done job leased again), structure or
-- bounded-retries, else refinement (the model's lease is atomic).
local prefix = ARGV[1]
local worker, e = emq_worker(ARGV[2]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[3], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end
local id; id, e = emq_id(ARGV[5]); if e then return e end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'zset'); if e then return e end

local key = prefix .. id
e = emq_types(key, 'hash'); if e then return e end
if redis.call('EXISTS', key) == 0 then
  return false
end
local deadline = now + lease_ms
redis.call('ZREM', KEYS[1], id)
local token = redis.call('HINCRBY', key, 'attempts', 1)
redis.call('HSET', key, 'state', 'active', 'worker', worker, 'deadline', emq_num(deadline))
redis.call('ZADD', KEYS[2], emq_num(deadline), id)
return {id, token, deadline, redis.call('HGET', key, 'payload')}
