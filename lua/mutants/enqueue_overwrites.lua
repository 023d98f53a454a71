-- MUTANT of enqueue.lua: no duplicate check. A second enqueue of the same
-- id overwrites the row (state pending, attempts 0, the new payload) and
-- answers `enqueued`: a done job runs again, a leased one is handed out
-- twice, and its attempts counter (the fencing token) goes back to 0.
-- Should be caught by: admission (a duplicate admitted).
local id, e = emq_id(ARGV[1]); if e then return e end
local payload = ARGV[2]
if payload == nil then return redis.error_reply('EMQARG payload is missing') end
local max_attempts; max_attempts, e = emq_int(ARGV[3], 'max_attempts', 1, 1000000); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[4], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[5]); if e then return e end
e = emq_types(KEYS[1], 'hash', KEYS[2], 'zset'); if e then return e end

redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0',
  'max_attempts', emq_num(max_attempts), 'payload', payload)
redis.call('ZADD', KEYS[2], emq_num(now + delay_ms), id)
return 1
