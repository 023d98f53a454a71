-- lease_batch(worker, lease_ms, count, now_ms) -> {'token deadline_ms id_bytes id..job', ...}
-- KEYS: pending index, active index, jobs.
-- The same as `count` successive lease calls at one instant: takes up to
-- `count` ready pending jobs in (ready-at, id) order, each with its attempts
-- incremented into its token, all active for `worker` until now + lease_ms.
-- Leasing a job never makes another one ready, so one ZRANGEBYSCORE sees
-- exactly the jobs the successive calls would take, in their order, and
-- they are the index's first members by rank: ZREMRANGEBYRANK takes them
-- out without sending their ids back. Fewer than `count` (or none: an
-- empty array) when fewer are ready. Each lease is answered as lease.lua
-- answers it, except that the job's whole field comes after the id
-- (`max_attempts payload`: the client drops the first word), which saves
-- cutting the payload out of it here. One TIME read serves the whole batch;
-- the calls are the same six whatever its size (one HMGET, one write per
-- key), and the type checks are those of lease.lua. The active index gets
-- EMQ_WIDE_MEMBER in its ZADD (see the prelude).
local worker, e = emq_worker(ARGV[1]); if e then return e end
local lease_ms; lease_ms, e = emq_int(ARGV[2], 'lease_ms', 1, EMQ_MAX_MS); if e then return e end
local count; count, e = emq_int(ARGV[3], 'count', 1, EMQ_BATCH_MAX); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end

local ids = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, count)
if ids.err then return emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash') or ids end
local n = #ids
if n == 0 then
  return emq_types(KEYS[2], 'zset') or {}
end
local fields = {}
for i = 1, n do
  local id = ids[i]
  fields[2 * i - 1] = id
  fields[2 * i] = '~' .. id
end
local rows = redis.pcall('HMGET', KEYS[3], unpack(fields))
if rows.err then return emq_types(KEYS[2], 'zset', KEYS[3], 'hash') or rows end

local dl = emq_num(now + lease_ms)
local out, scored, states = {}, {'inf', EMQ_WIDE_MEMBER}, {}
local tail, mid = ' active ' .. worker, ' ' .. dl .. ' '
for i = 1, n do
  local id, st, token = ids[i], rows[2 * i], 1
  if st then
    -- As in lease.lua: an attempts that is not a count is refused.
    local attempts = tonumber(string.match(st, '^[^ ]*'))
    if not attempts or attempts % 1 ~= 0 or attempts < 0 or attempts >= EMQ_MAX_COUNT then
      return redis.error_reply('ERR attempts of ' .. emq_show(id) .. ' in ' .. KEYS[3] .. ' is not a count: ' .. emq_show(st))
    end
    token = attempts + 1
  end
  local ts = EMQ_TEXT[token] or emq_text(token)
  out[i] = ts .. mid .. (EMQ_TEXT[#id] or emq_text(#id)) .. ' ' .. id .. (rows[2 * i - 1] or '')
  scored[2 * i + 1] = dl
  scored[2 * i + 2] = id
  states[2 * i - 1] = fields[2 * i]
  states[2 * i] = ts .. tail
end
local added = redis.pcall('ZADD', KEYS[2], unpack(scored))
if type(added) == 'table' then return emq_types(KEYS[2], 'zset') or added end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - 1)
states[2 * n + 1] = EMQ_WIDE_FIELD
states[2 * n + 2] = EMQ_WIDE
redis.call('HSET', KEYS[3], unpack(states))
return out
