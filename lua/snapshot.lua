-- snapshot(job_pattern) -> {pending, active, done, dead, rows}
-- KEYS: pending, active, done, dead indexes.
-- Reads the whole queue in one round trip, for the checkers and the
-- refinement check: the sorted sets with their scores, the done set, and
-- every job row under the queue's prefix as {key, field, value, ...}. Writes
-- nothing. Meant for test-sized queues: it walks the keyspace with SCAN.
local function zall(k) return redis.call('ZRANGE', k, 0, -1, 'WITHSCORES') end
local rows = {}
local cursor = '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, key in ipairs(r[2]) do
    local t = redis.call('TYPE', key)
    local kind = t['ok'] or t
    if kind == 'hash' then
      local row = redis.call('HGETALL', key)
      table.insert(row, 1, key)
      rows[#rows + 1] = row
    else
      rows[#rows + 1] = {key, '__type', kind}
    end
  end
until cursor == '0'
return {zall(KEYS[1]), zall(KEYS[2]), redis.call('SMEMBERS', KEYS[3]), zall(KEYS[4]), rows}
