-- enqueue(id, payload, max_attempts, delay_ms, now_ms) -> 1 Enqueued | 0 Duplicate
-- KEYS: job row, pending index.
-- A duplicate id changes nothing: producer-side admission.
local id, e = emq_id(ARGV[1]); if e then return e end
local payload = ARGV[2]
if payload == nil then return redis.error_reply('EMQARG payload is missing') end
local max_attempts; max_attempts, e = emq_int(ARGV[3], 'max_attempts', 1, 1000000); if e then return e end
local delay_ms; delay_ms, e = emq_int(ARGV[4], 'delay_ms', 0, EMQ_MAX_MS); if e then return e end
local now; now, e = emq_now(ARGV[5]); if e then return e end
e = emq_types(KEYS[1], 'hash', KEYS[2], 'zset'); if e then return e end

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0',
  'max_attempts', emq_num(max_attempts), 'payload', payload)
redis.call('ZADD', KEYS[2], emq_num(now + delay_ms), id)
return 1
