-- MUTANT of reap.lua: a job that has used its max_attempts is deleted
-- instead of moved to the dead set ("nobody reads the morgue anyway"). The
-- reply still says `dead`, but the row and every index entry are gone: an
-- acknowledged job vanishes.
-- Should be caught by: refinement (the model keeps a dead row), no-loss
-- (after a final read) or structure.
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
    redis.call('DEL', key)
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
