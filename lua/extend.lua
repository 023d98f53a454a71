-- extend(id, token, lease_ms, now_ms) -> {'extended', deadline_ms} | {'fenced', attempts, state} | {'missing'}
-- KEYS: job row, active index.
-- A heartbeat: moves the deadline to now + lease_ms, fenced like complete. A
-- lease past its deadline that the reaper has not taken yet may still be
-- extended; once reaped, the token is stale and the extend is refused.
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
if state ~= 'active' or attempts ~= token then
  return {'fenced', attempts, state}
end
local deadline = now + lease_ms
redis.call('HSET', KEYS[1], 'deadline', emq_num(deadline))
redis.call('ZADD', KEYS[2], emq_num(deadline), id)
return {'extended', deadline}
