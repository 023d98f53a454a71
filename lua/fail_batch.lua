-- fail_batch(count, retry_delay_ms, now_ms, id1, token1, ...) -> {outcome1, ...}
-- KEYS: active index, pending index, dead index, then the row of each id.
-- The same as `count` successive fail calls at one instant, each pair fenced
-- on its own token with its own outcome ({'requeued', ready_at_ms},
-- {'dead'}, {'fenced', attempts, state} or {'missing'}): an id twice in one
-- batch answers requeued (or dead), then fenced. Every argument, and the
-- type of every key, is checked before the first write. Every row is read
-- once, up front, and that read is its type check (see complete_batch.lua).
local count, e = emq_int(ARGV[1], 'count', 1, EMQ_BATCH_MAX); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[2], 'retry_delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[3]); if e then return e end
if #ARGV ~= 3 + 2 * count or #KEYS ~= 3 + count then
  return redis.error_reply('EMQARG expected ' .. count .. ' (id, token) pairs and ' .. (3 + count) .. ' keys')
end
local ids, tokens = {}, {}
for i = 1, count do
  ids[i], e = emq_id(ARGV[2 + 2 * i]); if e then return e end
  tokens[i], e = emq_int(ARGV[3 + 2 * i], 'token', 1, EMQ_MAX_MS); if e then return e end
end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset'); if e then return e end

local rows = {}
for i = 1, count do
  local key = KEYS[3 + i]
  if not rows[key] then
    local row = redis.pcall('HMGET', key, 'state', 'attempts', 'max_attempts')
    if row.err then return emq_types(key, 'hash') or redis.error_reply(row.err) end
    rows[key] = {row[1], tonumber(row[2]), tonumber(row[3])}
  end
end

local out = {}
local now_text, ready_text = emq_num(now), emq_num(now + delay_ms)
for i = 1, count do
  local key, id, token = KEYS[3 + i], ids[i], tokens[i]
  local row = rows[key]
  local state, attempts, max_attempts = row[1], row[2], row[3]
  if not state then
    out[i] = {'missing'}
  elseif state ~= 'active' or attempts ~= token then
    out[i] = {'fenced', attempts, state}
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', key, 'worker', 'deadline')
    if attempts >= max_attempts then
      redis.call('HSET', key, 'state', 'dead')
      redis.call('ZADD', KEYS[3], now_text, id)
      row[1] = 'dead'
      out[i] = {'dead'}
    else
      redis.call('HSET', key, 'state', 'pending')
      redis.call('ZADD', KEYS[2], ready_text, id)
      row[1] = 'pending'
      out[i] = {'requeued', now + delay_ms}
    end
  end
end
return out
