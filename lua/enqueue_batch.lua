-- enqueue_batch(count, max_attempts, delay_ms, now_ms, id1, payload1, ...) -> {1|0, ...}
-- KEYS: pending index, jobs, active index, dead index.
-- The same as `count` successive enqueue calls with the same options at one
-- instant: 1 Enqueued or 0 Duplicate per id, in order. An id already present,
-- or present earlier in the same batch, is a duplicate and changes nothing.
-- Every argument, and the type of every key, is checked before the first
-- write. One HMGET of the jobs column is the duplicate test of the whole
-- batch and the column's type check; the writes are one ZADD (the first,
-- and the pending index's type check; with EMQ_WIDE_MEMBER, see the
-- prelude) and one HSET (with the column's EMQ_WIDE field), whatever the
-- batch's size: four calls with TIME. When the ZADD added EMQ_WIDE_MEMBER
-- too, the queue is new: the active and dead indexes get theirs (see
-- enqueue.lua).
local count, e = emq_int(ARGV[1], 'count', 1, EMQ_BATCH_MAX); if e then return e end
local max_attempts; max_attempts, e = emq_int(ARGV[2], 'max_attempts', 1, 1000000); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[3], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[4]); if e then return e end
if #ARGV ~= 4 + 2 * count or #KEYS ~= 4 then
  return redis.error_reply('EMQARG expected ' .. count .. ' (id, payload) pairs and 4 keys')
end
local ids = {}
for i = 1, count do
  ids[i], e = emq_id(ARGV[3 + 2 * i]); if e then return e end
end

local have = redis.pcall('HMGET', KEYS[2], unpack(ids))
if have.err then return emq_types(KEYS[1], 'zset', KEYS[2], 'hash') or have end

local out, fields, scored, seen = {}, {}, {'inf', EMQ_WIDE_MEMBER}, {}
local head, ready = max_attempts .. ' ', now + delay_ms
for i = 1, count do
  local id = ids[i]
  if have[i] or seen[id] then
    out[i] = 0
  else
    seen[id] = true
    fields[#fields + 1] = id
    fields[#fields + 1] = head .. ARGV[4 + 2 * i]
    scored[#scored + 1] = ready
    scored[#scored + 1] = id
    out[i] = 1
  end
end
if #fields > 0 then
  local n = redis.pcall('ZADD', KEYS[1], unpack(scored))
  if type(n) == 'table' then return emq_types(KEYS[1], 'zset') or n end
  if n == #scored / 2 then emq_keep(KEYS[3], KEYS[4]) end
  fields[#fields + 1] = EMQ_WIDE_FIELD
  fields[#fields + 1] = EMQ_WIDE
  redis.call('HSET', KEYS[2], unpack(fields))
  return out
end
-- Nothing to write: the pending index is still checked, as the one up-front
-- check used to (a TYPE call, on this path only).
return emq_types(KEYS[1], 'zset') or out
