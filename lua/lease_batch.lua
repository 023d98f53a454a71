-- lease_batch(worker, lease_ms, count, now_ms) -> {'token deadline_ms id_bytes id..payload', ...}
-- KEYS: pending index, active index, jobs.
-- The same as `count` successive lease calls at one instant: takes up to
-- `count` ready pending jobs in (ready-at, id) order, each with its attempts
-- incremented into its token, all active for `worker` until now + lease_ms.
-- Leasing a job never makes another one ready, so one ZRANGEBYSCORE sees
-- exactly the jobs the successive calls would take, in their order. Fewer
-- than `count` (or none: an empty array) when fewer are ready. Each lease
-- is answered as lease.lua answers it. One TIME read serves the whole
-- batch; the calls are the same six whatever its size (one HMGET, one
-- write per key), and the type checks are those of lease.lua.
local worker, e = emq_worker(ARGV[1]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[2], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local count; count, e = emq_int(ARGV[3], 'count', 1, EMQ_BATCH_MAX); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end

local ids = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, count)
if ids.err then return emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash') or ids end
if #ids == 0 then
  return emq_types(KEYS[2], 'zset') or {}
end
local fields = {}
for i, id in ipairs(ids) do
  fields[2 * i - 1] = id
  fields[2 * i] = '~' .. id
end
local rows = redis.pcall('HMGET', KEYS[3], unpack(fields))
if rows.err then return emq_types(KEYS[2], 'zset', KEYS[3], 'hash') or rows end

local deadline = now + lease_ms
local out, scored, states = {}, {}, {}
local tail = ' active ' .. worker
for i, id in ipairs(ids) do
  -- As in lease.lua: an attempts that is not a count is refused.
  local job, st, attempts = rows[2 * i - 1], rows[2 * i], 0
  if st then attempts = tonumber(string.match(st, '^[^ ]*')) end
  if not attempts or attempts % 1 ~= 0 or attempts < 0 or attempts >= EMQ_MAX_COUNT then
    return redis.error_reply('ERR attempts of ' .. emq_show(id) .. ' in ' .. KEYS[3] .. ' is not a count: ' .. emq_show(st))
  end
  local token = attempts + 1
  local payload = ''
  if job then payload = string.sub(job, (string.find(job, ' ', 1, true) or #job) + 1) end
  out[i] = string.format('%d %d %d ', token, deadline, #id) .. id .. payload
  scored[2 * i - 1] = deadline
  scored[2 * i] = id
  states[2 * i - 1] = fields[2 * i]
  states[2 * i] = token .. tail
end
local added = redis.pcall('ZADD', KEYS[2], unpack(scored))
if type(added) == 'table' then return emq_types(KEYS[2], 'zset') or added end
redis.call('ZREM', KEYS[1], unpack(ids))
states[#states + 1] = EMQ_WIDE_FIELD
states[#states + 1] = EMQ_WIDE
redis.call('HSET', KEYS[3], unpack(states))
return out
