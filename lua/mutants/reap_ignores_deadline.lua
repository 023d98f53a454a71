-- MUTANT of reap.lua: the deadline is ignored (ZRANGE instead of
-- ZRANGEBYSCORE up to now). The reaper takes every active job, live leases
-- included, so a worker that is well within its lease loses it.
-- Should be caught by: lease-respected (reaped before its deadline).
local prefix = ARGV[1]
local limit, e = emq_int(ARGV[2], 'limit', 1, 100000); if e then return e end
local now; now, e = emq_now(ARGV[3]); if e then return e end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset'); if e then return e end

local ids = redis.call('ZRANGE', KEYS[1], 0, limit - 1)
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
