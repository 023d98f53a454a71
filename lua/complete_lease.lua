-- complete_lease(id, token, worker, lease_ms, now_ms)
--   -> {complete's answer, lease's answer}
-- KEYS: jobs, active index, pending index.
-- A worker's loop in one round trip: settle the job it holds, take the next.
-- The function calls complete.lua and lease.lua, each spliced in whole as a
-- function of the library (emq_complete, emq_lease, defined once beside
-- the prelude; see src/queue/scripts.rs), one after the other in one run: each
-- answers exactly what it answers alone, its own error included (a refused
-- complete does not stop the lease, as two separate calls would not), and
-- no other call runs between them. A half's error reply comes back as the
-- string 'err ' .. message: an error nested in an array would make the
-- client fail the whole reply (redis-rs raises the first error it finds in
-- a reply), and no answer of either script starts with 'err'.
local function emq_half(answer)
  if type(answer) == 'table' and answer.err then
    -- redis.error_reply may keep the wire's leading '-'.
    return 'err ' .. (string.gsub(answer.err, '^%-', ''))
  end
  return answer
end
return {
  emq_half(emq_complete({KEYS[1], KEYS[2]}, {ARGV[1], ARGV[2]})),
  emq_half(emq_lease({KEYS[3], KEYS[2], KEYS[1]}, {ARGV[3], ARGV[4], ARGV[5]})),
}
