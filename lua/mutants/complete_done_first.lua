-- MUTANT of complete.lua: writes `done` first and checks the token after,
-- answering an error when it does not match. A Lua error does not roll
-- back: a stale ack is refused, yet the job's state entry already says
-- done (while it is still in the active index, with a live holder).
-- Should be caught by: structure (a done job in the active index), fenced-settlement,
-- or refinement (the model's state is unchanged by a refused ack).
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end
e = emq_types(KEYS[1], 'hash', KEYS[2], 'zset'); if e then return e end

local field = '~' .. id
local st = redis.call('HGET', KEYS[1], field)
if not st then
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    return 'missing'
  end
  return 'fenced 0 pending'
end
local a, state = string.match(st, '^(%d+) (%l+)')
local attempts = tonumber(a)
if state == 'done' and attempts == token then
  return 'already_settled'
end
if state ~= 'active' then
  return 'fenced ' .. a .. ' ' .. state
end
redis.call('HSET', KEYS[1], field, a .. ' done')
if attempts ~= token then
  return redis.error_reply('EMQARG stale token ' .. token .. ', current ' .. attempts)
end
redis.call('ZREM', KEYS[2], id)
return 'settled'
