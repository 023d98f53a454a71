-- lease_batch(job_prefix, worker, lease_ms, count, now_ms) -> {{id, token, deadline_ms, payload}, ...}
-- KEYS: pending index, active index.
-- The same as `count` successive lease calls at one instant: takes up to
-- `count` ready pending jobs in (ready-at, id) order, each with its attempts
-- incremented into its token, all active for `worker` until now + lease_ms.
-- Leasing a job never makes another one ready, so one ZRANGEBYSCORE sees
-- exactly the jobs the successive calls would take, in their order. Fewer
-- than `count` (or none: an empty array) when fewer are ready. One TIME read
-- serves the whole batch; every key's type is checked before the first write.
local prefix = ARGV[1]
local worker, e = emq_worker(ARGV[2]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[3], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local count; count, e = emq_int(ARGV[4], 'count', 1, EMQ_BATCH_MAX); if e then return e end
local now; now, e = emq_now(ARGV[5]); if e then return e end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'zset'); if e then return e end

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', emq_num(now), 'LIMIT', 0, count)
if #ids == 0 then
  return {}
end
-- Every row is read once, before any write; the read is its type check.
local rows = {}
for i, id in ipairs(ids) do
  local key = prefix .. id
  local row = redis.pcall('HMGET', key, 'attempts', 'payload')
  if row.err then return emq_types(key, 'hash') or redis.error_reply(row.err) end
  -- As in lease.lua: an attempts that is not a count is refused.
  local attempts = tonumber(row[1] or 0)
  if not attempts or attempts % 1 ~= 0 or attempts < 0 or attempts >= EMQ_MAX_MS then
    return redis.error_reply('ERR attempts of ' .. key .. ' is not a count: ' .. emq_show(row[1]))
  end
  row[1] = attempts
  rows[i] = row
end
local deadline = now + lease_ms
local deadline_text = emq_num(deadline)
local out = {}
local scored = {}
redis.call('ZREM', KEYS[1], unpack(ids))
for i, id in ipairs(ids) do
  local key = prefix .. id
  -- One write per job: the same row lease.lua's HSET leaves.
  local row = rows[i]
  local token = row[1] + 1
  redis.call('HSET', key, 'attempts', emq_num(token), 'state', 'active', 'worker', worker,
    'deadline', deadline_text)
  out[i] = {id, token, deadline, row[2]}
  scored[2 * i - 1] = deadline_text
  scored[2 * i] = id
end
redis.call('ZADD', KEYS[2], unpack(scored))
return out
