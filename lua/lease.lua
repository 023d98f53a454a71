-- lease(worker, lease_ms, now_ms) -> nil | 'token deadline_ms id_bytes id..payload'
-- KEYS: pending index, active index, jobs.
-- Takes the ready pending job with the lowest score (ties by id), increments
-- its attempts counter, and the new value is the lease's fencing token. The
-- deadline is on the server clock unless a logical now is given. The answer
-- is one string: the token, the deadline and the id's length in bytes,
-- each followed by a space, then the id and the payload joined (one string
-- crosses from Lua to the reply for much less than four).
--
-- Key types (see the prelude, after emq_types): the pending index and the
-- jobs column are read before the first write, and the first write is to
-- the active index, so no TYPE call is made on the way to a lease; a key of
-- another type gets the refusal an up-front emq_types(pending, active,
-- jobs) would give. Six calls: TIME, ZRANGEBYSCORE, HMGET, ZADD, ZREM, HSET.
local worker, e = emq_worker(ARGV[1]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[2], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[3]); if e then return e end

local ids = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if ids.err then return emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash') or ids end
if #ids == 0 then
  return emq_types(KEYS[2], 'zset') or false
end
local id = ids[1]
local field = '~' .. id
local row = redis.pcall('HMGET', KEYS[3], id, field)
if row.err then return emq_types(KEYS[2], 'zset', KEYS[3], 'hash') or row end
local job, st = row[1], row[2]
-- The token is attempts + 1. An attempts only another writer could leave
-- (not a whole number in [0, EMQ_MAX_COUNT)) is refused before any write;
-- lease_batch makes the same check (inline: a function call costs).
local attempts = 0
if st then attempts = tonumber(string.match(st, '^[^ ]*')) end
if not attempts or attempts % 1 ~= 0 or attempts < 0 or attempts >= EMQ_MAX_COUNT then
  return redis.error_reply('ERR attempts of ' .. emq_show(id) .. ' in ' .. KEYS[3] .. ' is not a count: ' .. emq_show(st))
end
local token = attempts + 1
local deadline = now + lease_ms
local added = redis.pcall('ZADD', KEYS[2], deadline, id)
if type(added) == 'table' then return emq_types(KEYS[2], 'zset') or added end
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', KEYS[3], field, token .. ' active ' .. worker)
local payload = ''
if job then payload = string.sub(job, (string.find(job, ' ', 1, true) or #job) + 1) end
return string.format('%d %d %d ', token, deadline, #id) .. id .. payload
