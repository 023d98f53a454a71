-- fail_batch(count, retry_delay_ms, now_ms, id1, token1, ...) -> {outcome1, ...}
-- KEYS: jobs, active index, pending index, dead index.
-- The same as `count` successive fail calls at one instant, each pair fenced
-- on its own token with its own outcome ('requeued ready_at_ms', 'dead',
-- 'fenced attempts state' or 'missing'): an id twice in one batch answers
-- requeued (or dead), then fenced. Every argument, and the type of every
-- key, is checked before the first write. Each job and its state entry are
-- read in one HMGET for the whole batch (also the column's type check; see
-- complete_batch.lua), and each key is written once.
local count, e = emq_int(ARGV[1], 'count', 1, EMQ_BATCH_MAX); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[2], 'retry_delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[3]); if e then return e end
if #ARGV ~= 3 + 2 * count or #KEYS ~= 4 then
  return redis.error_reply('EMQARG expected ' .. count .. ' (id, token) pairs and 4 keys')
end
local ids, tokens, fields = {}, {}, {}
for i = 1, count do
  ids[i], e = emq_id(ARGV[2 + 2 * i]); if e then return e end
  tokens[i], e = emq_int(ARGV[3 + 2 * i], 'token', 1, EMQ_MAX_MS); if e then return e end
  fields[2 * i - 1] = ids[i]
  fields[2 * i] = '~' .. ids[i]
end
e = emq_types(KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset'); if e then return e end

local rows = redis.pcall('HMGET', KEYS[1], unpack(fields))
if rows.err then return emq_types(KEYS[1], 'hash') or rows end
-- The job of each id, as {attempts text, state, max_attempts}, or false.
local jobs = {}
for i = 1, count do
  local id, job, st = ids[i], rows[2 * i - 1], rows[2 * i]
  if jobs[id] == nil then
    if not job then
      jobs[id] = false
    else
      local a, s = '0', 'pending'
      if st then
        a, s = string.match(st, '^(%d+) (%l+)')
        if not s then
          return redis.error_reply('ERR state of ' .. emq_show(id) .. ' in ' .. KEYS[1] .. ' is not "attempts state": ' .. emq_show(st))
        end
      end
      local max_attempts = tonumber(string.match(job, '^%d+'))
      if not max_attempts then
        return redis.error_reply('ERR max_attempts of ' .. emq_show(id) .. ' in ' .. KEYS[1] .. ' is not a count')
      end
      jobs[id] = {a, s, max_attempts, tonumber(a)}
    end
  end
end

local out, taken, states, pending, dead = {}, {}, {}, {}, {}
local ready = now + delay_ms
local ready_text = emq_num(ready)
for i = 1, count do
  local id, token = ids[i], tokens[i]
  local job = jobs[id]
  if not job then
    out[i] = 'missing'
  elseif job[2] ~= 'active' or job[4] ~= token then
    out[i] = 'fenced ' .. emq_num(job[4]) .. ' ' .. job[2]
  else
    taken[#taken + 1] = id
    states[#states + 1] = fields[2 * i]
    if job[4] >= job[3] then
      job[2] = 'dead'
      states[#states + 1] = job[1] .. ' dead'
      dead[#dead + 1] = now
      dead[#dead + 1] = id
      out[i] = 'dead'
    else
      job[2] = 'pending'
      states[#states + 1] = job[1] .. ' pending'
      pending[#pending + 1] = ready
      pending[#pending + 1] = id
      out[i] = 'requeued ' .. ready_text
    end
  end
end
if #taken > 0 then
  redis.call('ZREM', KEYS[2], unpack(taken))
  redis.call('HSET', KEYS[1], unpack(states))
  if #pending > 0 then redis.call('ZADD', KEYS[3], unpack(pending)) end
  if #dead > 0 then redis.call('ZADD', KEYS[4], unpack(dead)) end
end
return out
