-- complete_batch(count, id1, token1, id2, token2, ...) -> {outcome1, outcome2, ...}
-- KEYS: active index, done index, then the row of each id, in order.
-- The same as `count` successive complete calls: each pair is fenced on its
-- own token and answers its own outcome ({'settled'}, {'already_settled'},
-- {'fenced', attempts, state} or {'missing'}), in order, so an id twice in
-- one batch answers settled, then already_settled. Every argument, and the
-- type of every key, is checked before the first write: one bad pair refuses
-- the whole batch, writing nothing.
--
-- Cost: every row is read once, up front, and that read is also its type
-- check (a row of another type refuses the batch before any write; TYPE per
-- row would cost more than the read itself). The answers then follow from
-- those reads and the batch's own earlier settles. The index writes of the
-- settled jobs are made once, at the end.
local count, e = emq_int(ARGV[1], 'count', 1, EMQ_BATCH_MAX); if e then return e end
if #ARGV ~= 1 + 2 * count or #KEYS ~= 2 + count then
  return redis.error_reply('EMQARG expected ' .. count .. ' (id, token) pairs and ' .. (2 + count) .. ' keys')
end
local ids, tokens = {}, {}
for i = 1, count do
  ids[i], e = emq_id(ARGV[2 * i]); if e then return e end
  tokens[i], e = emq_int(ARGV[2 * i + 1], 'token', 1, EMQ_MAX_MS); if e then return e end
end
e = emq_types(KEYS[1], 'zset', KEYS[2], 'set'); if e then return e end

local rows = {}
for i = 1, count do
  local key = KEYS[2 + i]
  if not rows[key] then
    local row = redis.pcall('HMGET', key, 'state', 'attempts')
    if row.err then return emq_types(key, 'hash') or redis.error_reply(row.err) end
    rows[key] = {row[1], tonumber(row[2])}
  end
end

local out = {}
local settled = {}
for i = 1, count do
  local key, token = KEYS[2 + i], tokens[i]
  local row = rows[key]
  local state, attempts = row[1], row[2]
  if not state then
    out[i] = {'missing'}
  elseif attempts == token and state == 'active' then
    redis.call('HSET', key, 'state', 'done')
    redis.call('HDEL', key, 'worker', 'deadline')
    row[1] = 'done'
    settled[#settled + 1] = ids[i]
    out[i] = {'settled'}
  elseif attempts == token and state == 'done' then
    out[i] = {'already_settled'}
  else
    out[i] = {'fenced', attempts, state}
  end
end
if #settled > 0 then
  redis.call('ZREM', KEYS[1], unpack(settled))
  redis.call('SADD', KEYS[2], unpack(settled))
end
return out
