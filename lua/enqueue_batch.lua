-- enqueue_batch(count, max_attempts, delay_ms, now_ms, id1, payload1, ...) -> {1|0, ...}
-- KEYS: pending index, then the row of each id, in order.
-- The same as `count` successive enqueue calls with the same options at one
-- instant: 1 Enqueued or 0 Duplicate per id, in order. An id already present,
-- or present earlier in the same batch, is a duplicate and changes nothing.
-- Every argument, and the type of every key, is checked before the first
-- write.
local count, e = emq_int(ARGV[1], 'count', 1, EMQ_BATCH_MAX); if e then return e end
local max_attempts; max_attempts, e = emq_int(ARGV[2], 'max_attempts', 1, 1000000); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[3], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end
if #ARGV ~= 4 + 2 * count or #KEYS ~= 1 + count then
  return redis.error_reply('EMQARG expected ' .. count .. ' (id, payload) pairs and ' .. (1 + count) .. ' keys')
end
local ids = {}
for i = 1, count do
  ids[i], e = emq_id(ARGV[3 + 2 * i]); if e then return e end
end
e = emq_types(KEYS[1], 'zset'); if e then return e end

-- One TYPE per row is both its type check and the duplicate test (a row
-- exists, as a hash, or it does not), before any write.
local fresh = {}
for i = 1, count do
  local key = KEYS[1 + i]
  local t = redis.call('TYPE', key)
  local kind = t['ok'] or t
  if kind ~= 'none' and kind ~= 'hash' then
    return emq_types(key, 'hash')
  end
  fresh[i] = kind == 'none'
end

local out = {}
local scored = {}
local written = {}
local attempts_text, ready_text = emq_num(max_attempts), emq_num(now + delay_ms)
for i = 1, count do
  local key = KEYS[1 + i]
  if not fresh[i] or written[key] then
    out[i] = 0
  else
    redis.call('HSET', key, 'state', 'pending', 'attempts', '0',
      'max_attempts', attempts_text, 'payload', ARGV[4 + 2 * i])
    written[key] = true
    scored[#scored + 1] = ready_text
    scored[#scored + 1] = ids[i]
    out[i] = 1
  end
end
if #scored > 0 then
  redis.call('ZADD', KEYS[1], unpack(scored))
end
return out
