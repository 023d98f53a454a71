-- complete_batch(count, id1, token1, id2, token2, ...) -> count | {outcome1, outcome2, ...}
-- KEYS: jobs, active index.
-- The same as `count` successive complete calls: each pair is fenced on its
-- own token and answers its own outcome ('settled', 'already_settled',
-- 'fenced attempts state' or 'missing'), in order, so an id twice in one
-- batch answers settled, then already_settled. When every pair settles,
-- the answer is the number `count` alone (one reply instead of `count`).
-- Every argument, and the type of every key, is checked before the first
-- write: one bad pair refuses the whole batch, writing nothing.
--
-- Cost: the state entries are read once for the whole batch (one HMGET,
-- also the column's type check). The common case, every pair the holder
-- of an active job, is settled from that read alone: an entry that says
-- 'token active' under the pair's own token was written by a lease, of a
-- job enqueued with a valid id, so the pair's id and token need no check
-- of their own; its writes are one ZREM (the first write, and the active
-- index's type check) and one HSET. Three calls, whatever the batch's
-- size. Any other batch is answered by the general path below, which
-- checks every argument first, in order.
local count, e = emq_int(ARGV[1], 'count', 1, EMQ_BATCH_MAX); if e then return e end
if #ARGV ~= 1 + 2 * count or #KEYS ~= 2 then
  return redis.error_reply('EMQARG expected ' .. count .. ' (id, token) pairs and 2 keys')
end
local fields = {}
for i = 1, count do
  fields[i] = '~' .. ARGV[2 * i]
end

local sts = redis.pcall('HMGET', KEYS[1], unpack(fields))
-- The common case: every pair settles a job that is active under its
-- token (the token without leading zeros, as a lease writes it).
local out, settled, states = {}, {}, {}
if sts.err then out = nil end
for i = 1, count do
  if not out then break end
  local id, tok, st = ARGV[2 * i], ARGV[2 * i + 1], sts[i]
  if not st or #tok > 15 or string.byte(tok) == 48 or string.match(st, '^(%d+) active ') ~= tok then
    out = nil
    break
  end
  settled[i] = id
  states[2 * i - 1] = fields[i]
  states[2 * i] = EMQ_DONE[tok] or emq_done(tok)
  out[i] = true
end
if out then
  local removed = redis.pcall('ZREM', KEYS[2], unpack(settled))
  if type(removed) == 'table' then return emq_types(KEYS[2], 'zset') or removed end
  redis.call('HSET', KEYS[1], unpack(states))
  if removed == count then
    return count
  end
  -- Fewer removed than pairs: an id twice in the batch (its later pairs
  -- answer already_settled, as a second complete would) or a job whose
  -- entry says active outside the active index (settled, as complete.lua
  -- settles it). The writes are those of the successive calls either way.
  local seen = {}
  for i = 1, count do
    local id = settled[i]
    if seen[id] then out[i] = 'already_settled' else out[i] = 'settled' end
    seen[id] = true
  end
  return out
end
-- The general path: every argument checked, in order, before anything
-- else is decided.
for i = 1, count do
  e = select(2, emq_id(ARGV[2 * i])); if e then return e end
  e = select(2, emq_int(ARGV[2 * i + 1], 'token', 1, EMQ_MAX_MS)); if e then return e end
end
e = emq_types(KEYS[2], 'zset', KEYS[1], 'hash'); if e then return e end
if sts.err then return sts end

-- The job of each id, as {attempts text, state}, or false when it is
-- missing.
local ids, tokens, jobs, unknown = {}, {}, {}, {}
for i = 1, count do
  ids[i], tokens[i] = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
end
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

out, settled, states = {}, {}, {}
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
