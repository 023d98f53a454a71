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

local st = redis.pcall('HGET', KEYS[1], '~' .. id)
if type(st) == 'table' then return emq_types(KEYS[1], 'hash', KEYS[2], 'zset') or st end
local a, state
if st then
  a, state = string.match(st, '^(%d+) (%l+)')
  if not state then
    return redis.error_reply('ERR state of ' .. emq_show(id) .. ' in ' .. KEYS[1] .. ' is not "attempts state": ' .. emq_show(st))
  end
end
local attempts = a and tonumber(a)
if state ~= 'active' then
  e = emq_types(KEYS[2], 'zset'); if e then return e end
  if st then
    return 'fenced ' .. emq_num(attempts) .. ' ' .. state
  end
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    return 'missing'
  end
  return 'fenced 0 pending'
end
local deadline = now + lease_ms
local added = redis.pcall('ZADD', KEYS[2], deadline, id)
if type(added) == 'table' then return emq_types(KEYS[2], 'zset') or added end
return 'extended ' .. emq_num(deadline)
