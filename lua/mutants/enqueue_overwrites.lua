-- MUTANT of enqueue.lua: no duplicate check. A second enqueue of the same
-- id overwrites the job (the new payload and max_attempts), puts it in the
-- pending index again and answers `enqueued`: a done job runs again (while
-- still in the done set), a leased one is handed out twice.
-- Should be caught by: admission (a duplicate admitted).
local id, e = emq_id(ARGV[1]); if e then return e end
local payload = ARGV[2]
if payload == nil then return redis.error_reply('EMQARG payload is missing') end
local max_attempts; max_attempts, e = emq_int(ARGV[3], 'max_attempts', 1, 1000000); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[4], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[5]); if e then return e end

local added = redis.pcall('HSET', KEYS[1], id, max_attempts .. ' ' .. payload)
if type(added) == 'table' then return emq_types(KEYS[2], 'zset', KEYS[1], 'hash') or added end
local n = redis.pcall('ZADD', KEYS[2], now + delay_ms, id, 'inf', EMQ_WIDE_MEMBER)
if type(n) == 'table' then
  redis.call('HDEL', KEYS[1], id)
  return emq_types(KEYS[2], 'zset') or n
end
if n == 2 then
  redis.call('HSET', KEYS[1], EMQ_WIDE_FIELD, EMQ_WIDE)
  emq_keep(KEYS[3], KEYS[4])
end
return 1
