-- MUTANT (extend-takes-expired): extend lets any holder take over a lease
-- that is past its deadline. "The current holder is late anyway, so whoever
-- heartbeats keeps the job": a worker whose lease was reaped, and whose job
-- was leased again, extends once the newer lease has expired too, moving the
-- newer holder's deadline with a stale token. Only a late stale holder shows
-- it: the newer lease must have expired before the stale worker acts.
-- extend(id, token, lease_ms, now_ms) -> {'extended', deadline_ms} | {'fenced', attempts, state} | {'missing'}
-- KEYS: job row, active index.
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[3], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end
e = emq_types(KEYS[1], 'hash', KEYS[2], 'zset'); if e then return e end

local row = redis.call('HMGET', KEYS[1], 'state', 'attempts', 'deadline')
if not row[1] then
  return {'missing'}
end
local state, attempts, current = row[1], tonumber(row[2]), tonumber(row[3])
-- The mistake: a token that is not the current one passes when the current
-- lease has expired.
local expired = current ~= nil and current <= now
if state ~= 'active' or (attempts ~= token and not expired) then
  return {'fenced', attempts, state}
end
local deadline = now + lease_ms
redis.call('HSET', KEYS[1], 'deadline', emq_num(deadline))
redis.call('ZADD', KEYS[2], emq_num(deadline), id)
return {'extended', deadline}
