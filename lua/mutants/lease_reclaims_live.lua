-- MUTANT (lease-reclaims-live) of lease.lua: when nothing in pending is
-- ready, the lease reclaims an active job itself (a crashed holder's job
-- need not wait for the reaper), but the bound on the active index's score
-- is missing: ZRANGEBYSCORE active -inf +inf instead of -inf now. A job
-- whose holder is alive and whose deadline is ahead is handed to a second
-- worker. Only a second lease while the first is live shows it: `e0 l0 l1`.
-- Should be caught by: lease-exclusive (a second live lease), else
-- refinement.
-- KEYS: pending index, active index, jobs (as lease.lua).
local worker, e = emq_worker(ARGV[1]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[2], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[3]); if e then return e end

local ids = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if ids.err then return emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash') or ids end
if #ids == 0 then
  local e = emq_types(KEYS[2], 'zset'); if e then return e end
  -- The mistake: every active job, expired or not.
  ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '+inf', 'LIMIT', 0, 1)
  if #ids == 0 then return false end
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
