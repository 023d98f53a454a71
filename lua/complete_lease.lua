-- complete_lease(id, token, worker, lease_ms[, now_ms])
--   -> {complete's answer, lease's answer}
--    | lease's answer (a string), or 0 (no job ready), when the complete
--      settled (the one-pass path below answers so: one reply, not three)
-- KEYS: jobs, active index, pending index.
-- A worker's loop in one round trip: settle the job it holds, take the next.
-- Each half answers exactly what complete.lua and lease.lua answer alone,
-- one after the other in one run, its own error included (a refused
-- complete does not stop the lease, as two separate calls would not), and
-- no other call runs between them. A half's error reply comes back as the
-- string 'err ' .. message: an error nested in an array would make the
-- client fail the whole reply (redis-rs raises the first error it finds in
-- a reply), and no answer of either script starts with 'err'.
--
-- Two paths. The general one calls the two bodies, each spliced in whole as
-- a function of the library (emq_complete, emq_lease, defined once beside
-- the prelude; see src/queue/scripts.rs), so a mutant of either is a mutant
-- of this script too (the library then turns the one-pass path off:
-- EMQ_FAST_LOOP). The one-pass path is the loop's common case, a settle
-- and a lease, in seven calls where the two bodies make nine: TIME, ZRANGE
-- of the head of pending (the next job if its score is due, and the
-- pending index's type check), one HMGET (the held job's state entry, the
-- next job and its entry; the column's type check), ZREM of the held job
-- from the active index (its type check), ZREM of the next from pending,
-- ZADD of it to active, one HSET of both entries. It makes the general
-- path's writes, in an order that gives the same keys (complete never
-- touches pending, and the next job is never the held one: that case goes
-- the general way).
-- Whatever it meets before its first write that is not that case (a held
-- job not active under this token, an attempts not a count, a key of
-- another type, arguments the prelude would look at twice) sends it to the
-- general path, which then starts from the keys as they were: nothing is
-- written before the path is chosen. The head of pending is read, not
-- popped: a pop put back (the permanent +inf member on an idle poll, a
-- delayed job at the head) would be a write and its undo, which replicas,
-- the AOF and keyspace notifications all see (DESIGN.md: a healthy path
-- writes nothing it takes back). The held job's id and token need no check
-- here: an entry that says 'token active' under them was written by a
-- lease, of a valid id.
local function emq_half(answer)
  if type(answer) == 'table' and answer.err then
    -- redis.error_reply may keep the wire's leading '-'.
    return 'err ' .. (string.gsub(answer.err, '^%-', ''))
  end
  return answer
end
repeat
  local id, tok, worker, lease_ms, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
  if not EMQ_FAST_LOOP or #ARGV < 4 or #ARGV > 5 or #tok > 15 or string.byte(tok) == 48
    or #lease_ms > 15 or #worker == 0 or #worker > 256 or not string.find(lease_ms, '^[1-9]%d*$')
    or (now and now ~= '' and (#now > 15 or not string.find(now, '^%d+$'))) then
    break
  end
  if now == nil or now == '' then
    local t = redis.call('TIME')
    now = t[1] * 1000 + (t[2] - t[2] % 1000) / 1000
  else
    now = tonumber(now)
  end
  local head = redis.pcall('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if head.err then break end
  local nid = head[1]
  if nid and tonumber(head[2]) > now then nid = nil end
  local field = '~' .. id
  local row
  if nid then
    row = redis.pcall('HMGET', KEYS[1], field, nid, '~' .. nid)
  else
    row = redis.pcall('HMGET', KEYS[1], field)
  end
  local st = row[1]
  local ok = not row.err and nid ~= id and st and string.match(st, '^(%d+) active ') == tok
  local token, job, nst = 0, row[2], row[3]
  if ok and nid then
    local attempts = 0
    if nst then attempts = tonumber(string.match(nst, '^[^ ]*')) end
    ok = attempts and attempts % 1 == 0 and attempts >= 0 and attempts < EMQ_MAX_COUNT
    if ok then token = attempts + 1 end
  end
  if ok then
    local removed = redis.pcall('ZREM', KEYS[2], id)
    ok = type(removed) ~= 'table'
  end
  if not ok then break end
  if not nid then
    redis.call('HSET', KEYS[1], field, EMQ_DONE[tok] or emq_done(tok))
    return 0
  end
  local deadline = now + lease_ms
  local ts = EMQ_TEXT[token] or emq_text(token)
  redis.call('ZREM', KEYS[3], nid)
  redis.call('ZADD', KEYS[2], deadline, nid)
  redis.call('HSET', KEYS[1], field, EMQ_DONE[tok] or emq_done(tok), '~' .. nid, ts .. ' active ' .. worker)
  local payload = ''
  if job then payload = string.sub(job, (string.find(job, ' ', 1, true) or #job) + 1) end
  return ts .. ' ' .. emq_num(deadline) .. ' ' .. (EMQ_TEXT[#nid] or emq_text(#nid)) .. ' ' .. nid .. payload
until true
return {
  emq_half(emq_complete({KEYS[1], KEYS[2]}, {ARGV[1], ARGV[2]})),
  emq_half(emq_lease({KEYS[3], KEYS[2], KEYS[1]}, {ARGV[3], ARGV[4], ARGV[5]})),
}
