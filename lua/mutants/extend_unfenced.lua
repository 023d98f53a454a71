-- MUTANT of extend.lua: the token check is gone. Any holder of any lease of
-- an active job moves its deadline, so a worker whose lease was reaped and
-- re-granted keeps the new holder's lease alive (or, with a shorter lease,
-- cuts it short) and is told `extended` instead of `fenced`.
-- Should be caught by: fenced-settlement (a stale token accepted), else
-- refinement (the model refuses the extend).
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[3], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end
e = emq_types(KEYS[1], 'hash', KEYS[2], 'zset'); if e then return e end

local row = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if not row[1] then
  return {'missing'}
end
local state, attempts = row[1], tonumber(row[2])
if state ~= 'active' then
  return {'fenced', attempts, state}
end
local deadline = now + lease_ms
redis.call('HSET', KEYS[1], 'deadline', emq_num(deadline))
redis.call('ZADD', KEYS[2], emq_num(deadline), id)
return {'extended', deadline}
