-- MUTANT (fail-retry-now) of fail.lua: a failure of the job's second
-- attempt or later requeues it ready at now, while the answer still says
-- `requeued now + retry_delay_ms` (a retry path that forgets the backoff
-- it reports). The first failure is right, and a fail with no delay is
-- right every time, so only a second failure with a nonzero delay shows
-- it (max_attempts 3 or more: a second failure at max_attempts 2 is dead):
-- `e0 l0 f0 l0 f0:50`, and a lease before the ready time.
-- Should be caught by: delay-respected (leased before the ready time the
-- fail announced), else refinement.
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
-- The mistake: from the second attempt on, the job is ready at once,
-- whatever the answer below promises.
local ready = now + delay_ms
if attempts >= 2 then ready = now end
redis.call('ZADD', KEYS[3], ready, id)
return 'requeued ' .. emq_num(now + delay_ms)
