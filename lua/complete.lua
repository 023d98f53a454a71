-- complete(id, token) -> 'settled' | 'already_settled' | 'fenced attempts state' | 'missing'
-- KEYS: jobs, active index.
-- Accepted only while the job is active and its attempts equal the token: a
-- worker whose lease was reaped and re-granted holds an older token and is
-- refused, changing nothing. The same token again after success answers
-- already_settled: an ack retried after a lost reply is not an error.
--
-- Key types (see the prelude, after emq_types): the job's state entry is
-- read first and the active index is the first write, so a settle makes no
-- TYPE call (three calls: HGET, ZREM, HSET); an answer that writes nothing
-- checks the active index before it is given. A key of another type gets
-- the refusal an up-front emq_types(jobs, active) would give. The job's own
-- field is read only when it has no state entry yet (never leased, or not
-- there).
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
if state == 'active' and attempts == token then
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
elseif attempts == token and state == 'done' then
  return 'already_settled'
end
return 'fenced ' .. emq_num(attempts) .. ' ' .. state
