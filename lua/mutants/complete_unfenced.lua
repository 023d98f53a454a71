-- MUTANT of complete.lua: the token check is gone. Any holder of any lease
-- of an active job settles it, so a worker whose lease was reaped and
-- re-granted completes the job under the new holder's feet, and an old
-- token on a done job answers already_settled. The model checker must catch
-- this (tests/explore.rs).
-- Should be caught by: fenced-settlement (a stale ack accepted), else
-- refinement.
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end

local field = '~' .. id
local st = redis.pcall('HGET', KEYS[1], field)
if type(st) == 'table' then return emq_types(KEYS[1], 'hash', KEYS[2], 'zset') or st end
local a, state
if st then
  a, state = string.match(st, '^(%d+) (%l+)')
  if not state then
    return redis.error_reply('ERR state of ' .. emq_show(id) .. ' in ' .. KEYS[1] .. ' is not "attempts state": ' .. emq_show(st))
  end
end
local attempts = a and tonumber(a)
if state == 'active' then
  local removed = redis.pcall('ZREM', KEYS[2], id)
  if type(removed) == 'table' then return emq_types(KEYS[2], 'zset') or removed end
  redis.call('HSET', KEYS[1], field, a .. ' done')
  return 'settled'
end
e = emq_types(KEYS[2], 'zset'); if e then return e end
if not st then
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    return 'missing'
  end
  return 'fenced 0 pending'
elseif state == 'done' then
  return 'already_settled'
end
return 'fenced ' .. emq_num(attempts) .. ' ' .. state
