-- MUTANT of fail.lua: the token check is gone. A worker whose lease was
-- reaped and re-granted fails the job under the new holder's feet: the job
-- goes back to pending (or dead) while another worker still works on it.
-- Should be caught by: fenced-settlement (a stale fail accepted), else
-- refinement.
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[3], 'retry_delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end
e = emq_types(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset'); if e then return e end

local row = redis.call('HMGET', KEYS[1], 'state', 'attempts', 'max_attempts')
if not row[1] then
  return {'missing'}
end
local state, attempts, max_attempts = row[1], tonumber(row[2]), tonumber(row[3])
if state ~= 'active' then
  return {'fenced', attempts, state}
end
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[1], 'worker', 'deadline')
if attempts >= max_attempts then
  redis.call('HSET', KEYS[1], 'state', 'dead')
  redis.call('ZADD', KEYS[4], emq_num(now), id)
  return {'dead'}
end
redis.call('HSET', KEYS[1], 'state', 'pending')
redis.call('ZADD', KEYS[3], emq_num(now + delay_ms), id)
return {'requeued', now + delay_ms}
