-- fail(id, token, retry_delay_ms, now_ms) -> 'requeued ready_at_ms' | 'dead' | 'fenced attempts state' | 'missing'
-- KEYS: jobs, active index, pending index, dead index.
-- Fenced like complete. A failure on the last allowed attempt sends the job
-- to the dead set (the morgue); otherwise it is pending again after the delay.
-- The job and its state entry are read in one HMGET (also the column's type
-- check); the three indexes are type-checked up front.
local id, e = emq_id(ARGV[1]); if e then return e end
local token; token, e = emq_int(ARGV[2], 'token', 1, EMQ_MAX_MS); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[3], 'retry_delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end

local field = '~' .. id
local row = redis.pcall('HMGET', KEYS[1], id, field)
if row.err then return emq_types(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset') or row end
e = emq_types(KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset'); if e then return e end
local job, st = row[1], row[2]
if not job then
  return 'missing'
end
local a, state = '0', 'pending'
if st then
  a, state = string.match(st, '^(%d+) (%l+)')
  if not state then
    return redis.error_reply('ERR state of ' .. emq_show(id) .. ' in ' .. KEYS[1] .. ' is not "attempts state": ' .. emq_show(st))
  end
end
local attempts = tonumber(a)
if state ~= 'active' or attempts ~= token then
  return 'fenced ' .. emq_num(attempts) .. ' ' .. state
end
local max_attempts = tonumber(string.match(job, '^%d+'))
if not max_attempts then
  return redis.error_reply('ERR max_attempts of ' .. emq_show(id) .. ' in ' .. KEYS[1] .. ' is not a count')
end
redis.call('ZREM', KEYS[2], id)
if attempts >= max_attempts then
  redis.call('HSET', KEYS[1], field, a .. ' dead')
  redis.call('ZADD', KEYS[4], now, id)
  return 'dead'
end
redis.call('HSET', KEYS[1], field, a .. ' pending')
redis.call('ZADD', KEYS[3], now + delay_ms, id)
return 'requeued ' .. emq_num(now + delay_ms)
