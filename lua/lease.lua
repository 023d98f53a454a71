-- lease(job_prefix, worker, lease_ms, now_ms) -> nil | {id, token, deadline_ms, payload}
-- KEYS: pending index, active index.
-- Takes the ready pending job with the lowest score (ties by id), increments
-- its attempts counter, and the new value is the lease's fencing token. The
-- deadline is on the server clock unless a logical now is given.
--
-- Key types (see the prelude, after emq_types): the pending index and the job row are read
-- before the first write, and the first write is to the active index, so no
-- TYPE call is made on the way to a lease; a key of another type gets the
-- refusal an up-front emq_types(pending, active, row) would give.
local prefix = ARGV[1]
local worker, e = emq_worker(ARGV[2]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[3], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end

local ids = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', emq_num(now), 'LIMIT', 0, 1)
if ids.err then return emq_types(KEYS[1], 'zset', KEYS[2], 'zset') or ids end
if #ids == 0 then
  return emq_types(KEYS[2], 'zset') or false
end
local id = ids[1]
local key = prefix .. id
local row = redis.pcall('HMGET', key, 'attempts', 'payload')
if row.err then return emq_types(KEYS[2], 'zset', key, 'hash') or row end
-- The token is attempts + 1, written back with the row in one HSET. An
-- attempts only another writer could leave (not a whole number in [0,
-- EMQ_MAX_MS)) is refused before any write; lease_batch makes the same
-- check (inline: a prelude function costs every script run its creation).
local attempts = tonumber(row[1] or 0)
if not attempts or attempts % 1 ~= 0 or attempts < 0 or attempts >= EMQ_MAX_MS then
  return redis.error_reply('ERR attempts of ' .. key .. ' is not a count: ' .. emq_show(row[1]))
end
local token = attempts + 1
local deadline = now + lease_ms
local deadline_text = emq_num(deadline)
local added = redis.pcall('ZADD', KEYS[2], deadline_text, id)
if type(added) == 'table' then return emq_types(KEYS[2], 'zset') or added end
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', key, 'attempts', emq_num(token), 'state', 'active', 'worker', worker,
  'deadline', deadline_text)
return {id, token, deadline, row[2]}
