-- snapshot() -> {pending, active, dead, jobs}
-- KEYS: pending, active, dead indexes, then the jobs column.
-- Reads the whole queue in one round trip, for the checkers and the
-- refinement check: the sorted sets with their scores, and the column as
-- {field, value, ...}, or as {type} (one element) when its key holds
-- another type than a hash. Writes nothing. Meant for test-sized queues.
-- Every member below +inf: EMQ_WIDE_MEMBER (see the prelude) is not a job.
local function zall(k) return redis.call('ZRANGEBYSCORE', k, '-inf', '(+inf', 'WITHSCORES') end
local t = redis.call('TYPE', KEYS[4])
local kind = t['ok'] or t
local jobs = {kind}
if kind == 'hash' or kind == 'none' then
  jobs = redis.call('HGETALL', KEYS[4])
end
return {zall(KEYS[1]), zall(KEYS[2]), zall(KEYS[3]), jobs}
