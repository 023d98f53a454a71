-- reap(job_prefix, limit, now_ms) -> {id1, 'pending'|'dead', id2, ...}
-- KEYS: active index, pending index, dead index.
-- Takes up to limit active jobs whose deadline has passed (deadline <= now)
-- and returns each to pending (ready now), or to the dead set once its
-- attempts have reached max_attempts. A lease whose deadline is still ahead
-- is never taken.
local prefix = ARGV[1]
local limit, e = emq_int(ARGV[2], 'limit', 1, 100000); if e then return e end
local now; now, e = emq_now(ARGV[3]); if e then return e end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset'); if e then return e end

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', emq_num(now), 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
  e = emq_types(prefix .. id, 'hash'); if e then return e end
end
local out = {}
for _, id in ipairs(ids) do
  local key = prefix .. id
  local row = redis.call('HMGET', key, 'attempts', 'max_attempts')
  local attempts, max_attempts = tonumber(row[1]), tonumber(row[2])
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', key, 'worker', 'deadline')
  if attempts >= max_attempts then
    redis.call('HSET', key, 'state', 'dead')
    redis.call('ZADD', KEYS[3], emq_num(now), id)
    out[#out + 1] = id
    out[#out + 1] = 'dead'
  else
    redis.call('HSET', key, 'state', 'pending')
    redis.call('ZADD', KEYS[2], emq_num(now), id)
    out[#out + 1] = id
    out[#out + 1] = 'pending'
  end
end
return out
