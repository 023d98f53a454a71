-- complete(id, token) -> {'settled'} | {'already_settled'} | {'fenced', attempts, state} | {'missing'}
-- KEYS: job row, active index, done index.
-- Accepted only while the job is active and its attempts equal the token: a
-- worker whose lease was reaped and re-granted holds an older token and is
-- refused, changing nothing. The same token again after success answers
-- already_settled: an ack retried after a lost reply is not an error.
--
-- Key types (see the prelude, after emq_types): the row is read first and the active index is
-- the first write, so a settle makes one TYPE call, for the done set; an
-- answer that writes nothing checks both indexes before it is given. A key
-- of another type gets the refusal an up-front emq_types(row, active, done)
-- would give.
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end

local row = redis.pcall('HMGET', KEYS[1], 'state', 'attempts')
if row.err then return emq_types(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'set') or row end
local state, attempts = row[1], tonumber(row[2])
if state == 'active' and attempts == token then
  e = emq_types(KEYS[3], 'set') and emq_types(KEYS[2], 'zset', KEYS[3], 'set'); if e then return e end
  local removed = redis.pcall('ZREM', KEYS[2], id)
  if type(removed) == 'table' then return emq_types(KEYS[2], 'zset') or removed end
  redis.call('SADD', KEYS[3], id)
  redis.call('HSET', KEYS[1], 'state', 'done')
  redis.call('HDEL', KEYS[1], 'worker', 'deadline')
  return {'settled'}
end
e = emq_types(KEYS[2], 'zset', KEYS[3], 'set'); if e then return e end
if not state then
  return {'missing'}
elseif attempts == token and state == 'done' then
  return {'already_settled'}
end
return {'fenced', attempts, state}
