-- MUTANT of lease.lua: lease done as two calls instead of one script. The
-- client (src/mutants/adapters.rs, `SplitLease`) first asks
-- `ZRANGEBYSCORE pending -inf now LIMIT 0 1` on its own, then runs this
-- script to claim the id it saw (ARGV[4]), without checking that the job
-- is still pending: between the two calls another worker may have claimed
-- it, completed it, or it may have been requeued for later. Each worker
-- peeks its next job right after a lease and claims it on its next lease,
-- so the explorers can put other workers' steps between the two halves.
-- Should be caught by: settle-once (a done job leased again), structure or
-- bounded-retries, else refinement (the model's lease is atomic).
-- KEYS: pending index, active index, jobs.
local worker, e = emq_worker(ARGV[1]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[2], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[3]); if e then return e end
local id; id, e = emq_id(ARGV[4]); if e then return e end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash'); if e then return e end

local field = '~' .. id
local row = redis.call('HMGET', KEYS[3], id, field)
local job, st = row[1], row[2]
if not job then
  return false
end
local attempts = 0
if st then attempts = tonumber(string.match(st, '^%d+')) end
local token = attempts + 1
local deadline = now + lease_ms
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', KEYS[3], field, token .. ' active ' .. worker)
redis.call('ZADD', KEYS[2], deadline, id)
local payload = string.sub(job, (string.find(job, ' ', 1, true) or #job) + 1)
return string.format('%d %d %d ', token, deadline, #id) .. id .. payload
