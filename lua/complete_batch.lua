-- complete_batch(count, id1, token1, id2, token2, ...) -> {outcome1, outcome2, ...}
-- KEYS: jobs, active index.
-- The same as `count` successive complete calls: each pair is fenced on its
-- own token and answers its own outcome ('settled', 'already_settled',
-- 'fenced attempts state' or 'missing'), in order, so an id twice in one
-- batch answers settled, then already_settled. Every argument, and the type
-- of every key, is checked before the first write: one bad pair refuses the
-- whole batch, writing nothing.
--
-- Cost: the state entries are read once for the whole batch (one HMGET,
-- also the column's type check), the jobs' own fields only for ids without
-- a state entry; the answers follow from those reads and the batch's own
-- earlier settles. The writes are one ZREM and one HSET, whatever the
-- batch's size.
local count, e = emq_int(ARGV[1], 'count', 1, EMQ_BATCH_MAX); if e then return e end
if #ARGV ~= 1 + 2 * count or #KEYS ~= 2 then
  return redis.error_reply('EMQARG expected ' .. count .. ' (id, token) pairs and 2 keys')
end
local ids, tokens, fields = {}, {}, {}
for i = 1, count do
  ids[i], e = emq_id(ARGV[2 * i]); if e then return e end
  tokens[i], e = emq_int(ARGV[2 * i + 1], 'token', 1, EMQ_MAX_MS); if e then return e end
  fields[i] = '~' .. ids[i]
end
e = emq_types(KEYS[2], 'zset'); if e then return e end

local sts = redis.pcall('HMGET', KEYS[1], unpack(fields))
if sts.err then return emq_types(KEYS[1], 'hash') or sts end
-- The job of each id, as {attempts text, state}, or false when it is
-- missing.
local jobs, unknown = {}, {}
for i = 1, count do
  local id, st = ids[i], sts[i]
  if jobs[id] == nil then
    if st then
      local a, s = string.match(st, '^(%d+) (%l+)')
      if not s then
        return redis.error_reply('ERR state of ' .. emq_show(id) .. ' in ' .. KEYS[1] .. ' is not "attempts state": ' .. emq_show(st))
      end
      jobs[id] = {a, s, tonumber(a)}
    else
      jobs[id] = false
      unknown[#unknown + 1] = id
    end
  end
end
if #unknown > 0 then
  local have = redis.call('HMGET', KEYS[1], unpack(unknown))
  for i, id in ipairs(unknown) do
    if have[i] then jobs[id] = {'0', 'pending', 0} end
  end
end

local out, settled, states = {}, {}, {}
for i = 1, count do
  local id, token = ids[i], tokens[i]
  local job = jobs[id]
  if not job then
    out[i] = 'missing'
  elseif job[3] == token and job[2] == 'active' then
    job[2] = 'done'
    settled[#settled + 1] = id
    states[#states + 1] = fields[i]
    states[#states + 1] = job[1] .. ' done'
    out[i] = 'settled'
  elseif job[3] == token and job[2] == 'done' then
    out[i] = 'already_settled'
  else
    out[i] = 'fenced ' .. emq_num(job[3]) .. ' ' .. job[2]
  end
end
if #settled > 0 then
  redis.call('ZREM', KEYS[2], unpack(settled))
  redis.call('HSET', KEYS[1], unpack(states))
end
return out
