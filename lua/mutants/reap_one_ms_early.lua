-- MUTANT (reap-one-ms-early) of reap.lua: the reaper takes a lease whose
-- deadline is up to one ms ahead (deadline <= now + 1 instead of
-- deadline <= now): an off-by-one in a comparison with the clock. A
-- worker whose lease has one ms left loses it. Only time that lands one ms
-- before a deadline shows it: `e0 l0 t99 r` with a lease of 100 ms.
-- Should be caught by: lease-respected (reaped before its deadline), else
-- refinement.
local limit, e = emq_int(ARGV[1], 'limit', 1, 100000); if e then return e end
local now; now, e = emq_now(ARGV[2]); if e then return e end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset'); if e then return e end

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now + 1, 'LIMIT', 0, limit)
if #ids == 0 then
  return {}
end
-- `call(cmd, key, slice)` for every slice of `step` values of `list`; the
-- replies that are arrays, joined (HMGET's nils are false: ipairs goes on).
local function sliced(call, cmd, key, list, step)
  local out = {}
  for i = 1, #list, step do
    local r = call(cmd, key, unpack(list, i, math.min(i + step - 1, #list)))
    if type(r) == 'table' then
      if r.err then return r end
      for _, v in ipairs(r) do out[#out + 1] = v end
    end
  end
  return out
end
local fields = {}
for i, id in ipairs(ids) do
  fields[2 * i - 1] = id
  fields[2 * i] = '~' .. id
end
local rows = sliced(redis.pcall, 'HMGET', KEYS[4], fields, 2 * EMQ_BATCH_MAX)
if rows.err then return emq_types(KEYS[4], 'hash') or redis.error_reply(rows.err) end

local out, states, pending, dead = {}, {}, {}, {}
for i, id in ipairs(ids) do
  local max_attempts = tonumber(string.match(rows[2 * i - 1] or '', '^%d+'))
  local a = string.match(rows[2 * i] or '', '^%d+')
  if not a or not max_attempts then
    return redis.error_reply('ERR ' .. emq_show(id) .. ' is active without a count of attempts and max_attempts')
  end
  out[#out + 1] = id
  states[#states + 1] = '~' .. id
  if tonumber(a) >= max_attempts then
    states[#states + 1] = a .. ' dead'
    dead[#dead + 1] = now
    dead[#dead + 1] = id
    out[#out + 1] = 'dead'
  else
    states[#states + 1] = a .. ' pending'
    pending[#pending + 1] = now
    pending[#pending + 1] = id
    out[#out + 1] = 'pending'
  end
end
sliced(redis.call, 'ZREM', KEYS[1], ids, EMQ_BATCH_MAX)
sliced(redis.call, 'HSET', KEYS[4], states, 2 * EMQ_BATCH_MAX)
sliced(redis.call, 'ZADD', KEYS[2], pending, 2 * EMQ_BATCH_MAX)
sliced(redis.call, 'ZADD', KEYS[3], dead, 2 * EMQ_BATCH_MAX)
return out
