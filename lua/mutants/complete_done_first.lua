-- MUTANT of complete.lua: writes `done` first and checks the token after,
-- answering an error when it does not match. A Lua error does not roll
-- back: a stale ack is refused, yet the job is already marked done and in
-- the done set (while still in the active index, with a live holder).
-- Should be caught by: structure (a row in two indexes), fenced-settlement,
-- or refinement (the model's state is unchanged by a refused ack).
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end
e = emq_types(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'set'); if e then return e end

local row = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if not row[1] then
  return {'missing'}
end
local state, attempts = row[1], tonumber(row[2])
if state == 'done' and attempts == token then
  return {'already_settled'}
end
if state ~= 'active' then
  return {'fenced', attempts, state}
end
redis.call('SADD', KEYS[3], id)
redis.call('HSET', KEYS[1], 'state', 'done')
if attempts ~= token then
  return redis.error_reply('EMQARG stale token ' .. token .. ', current ' .. attempts)
end
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[1], 'worker', 'deadline')
return {'settled'}
