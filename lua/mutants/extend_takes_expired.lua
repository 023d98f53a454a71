-- MUTANT (extend-takes-expired): extend lets any holder take over a lease
-- that is past its deadline. "The current holder is late anyway, so whoever
-- heartbeats keeps the job": a worker whose lease was reaped, and whose job
-- was leased again, extends once the newer lease has expired too, moving the
-- newer holder's deadline with a stale token. Only a late stale holder shows
-- it: the newer lease must have expired before the stale worker acts.
-- KEYS: jobs, active index (as extend.lua).
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
-- The mistake: a token that is not the current one passes when the current
-- lease (the active index's score) has expired.
e = emq_types(KEYS[2], 'zset'); if e then return e end
local current = tonumber(redis.call('ZSCORE', KEYS[2], id))
local expired = current ~= nil and current <= now
if state ~= 'active' or (attempts ~= token and not expired) then
  if st then
    return 'fenced ' .. emq_num(attempts) .. ' ' .. state
  end
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    return 'missing'
  end
  return 'fenced 0 pending'
end
local deadline = now + lease_ms
redis.call('ZADD', KEYS[2], deadline, id)
return 'extended ' .. emq_num(deadline)
