-- MUTANT of complete.lua: the token check is gone. Any holder of any lease
-- of an active job settles it, so a worker whose lease was reaped and
-- re-granted completes the job under the new holder's feet, and an old
-- token on a done job answers already_settled. The model checker must catch
-- this (tests/explore.rs).
-- Should be caught by: fenced-settlement (a stale ack accepted), else
-- refinement.
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end

local row = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if not row[1] then
  return {'missing'}
end
local state, attempts = row[1], tonumber(row[2])
if state == 'active' then
  redis.call('ZREM', KEYS[2], id)
  redis.call('SADD', KEYS[3], id)
  redis.call('HSET', KEYS[1], 'state', 'done')
  redis.call('HDEL', KEYS[1], 'worker', 'deadline')
  return {'settled'}
elseif state == 'done' then
  return {'already_settled'}
end
return {'fenced', attempts, state}
