-- lease(job_prefix, worker, lease_ms, now_ms) -> nil | {id, token, deadline_ms, payload}
-- KEYS: pending index, active index.
-- Takes the ready pending job with the lowest score (ties by id), increments
-- its attempts counter, and the new value is the lease's fencing token. The
-- deadline is on the server clock unless a logical now is given.
--
-- Key types (see emq_refused): the pending index and the job row are read
-- before the first write, and the first write is to the active index, so no
-- TYPE call is made on the way to a lease; a key of another type gets the
-- refusal an up-front emq_types(pending, active, row) would give.
local prefix = ARGV[1]
local worker, e = emq_worker(ARGV[2]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[3], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end

local ids = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', emq_num(now), 'LIMIT', 0, 1)
e = emq_refused(ids, KEYS[1], 'zset', KEYS[2], 'zset'); if e then return e end
if #ids == 0 then
  return emq_types(KEYS[2], 'zset') or false
end
local id = ids[1]
local key = prefix .. id
local row = redis.pcall('HMGET', key, 'attempts', 'payload')
e = emq_refused(row, KEYS[2], 'zset', key, 'hash'); if e then return e end
-- The token is attempts + 1, written back with the row in one HSET.
local attempts; attempts, e = emq_attempts(row[1]); if e then return e end
local token = attempts + 1
local deadline = now + lease_ms
local deadline_text = emq_num(deadline)
e = emq_refused(redis.pcall('ZADD', KEYS[2], deadline_text, id), KEYS[2], 'zset'); if e then return e end
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', key, 'attempts', emq_num(token), 'state', 'active', 'worker', worker,
  'deadline', deadline_text)
return {id, token, deadline, row[2]}
