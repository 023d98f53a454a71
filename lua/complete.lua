-- complete(id, token) -> {'settled'} | {'already_settled'} | {'fenced', attempts, state} | {'missing'}
-- KEYS: job row, active index, done index.
-- Accepted only while the job is active and its attempts equal the token: a
-- worker whose lease was reaped and re-granted holds an older token and is
-- refused, changing nothing. The same token again after success answers
-- already_settled: an ack retried after a lost reply is not an error.
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end
e = emq_types(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'set'); if e then return e end

local row = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if not row[1] then
  return {'missing'}
end
local state, attempts = row[1], tonumber(row[2])
if attempts == token then
  if state == 'active' then
    redis.call('ZREM', KEYS[2], id)
    redis.call('SADD', KEYS[3], id)
    redis.call('HSET', KEYS[1], 'state', 'done')
    redis.call('HDEL', KEYS[1], 'worker', 'deadline')
    return {'settled'}
  elseif state == 'done' then
    return {'already_settled'}
  end
end
return {'fenced', attempts, state}
