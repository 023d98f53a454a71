-- ackgap reference queue: the prelude prepended to every script.
--
-- The layout: columns, not rows. Every key of queue q shares the hash tag
-- {q}, and every key a script touches is one of its KEYS (none is built
-- from a prefix inside a script), so a Valkey Cluster takes every script:
--   emq:{q}:pending  zset  id -> ready-at (ms), and EMQ_WIDE_MEMBER -> +inf
--   emq:{q}:active   zset  id -> lease deadline (ms), and EMQ_WIDE_MEMBER
--                          -> +inf
--   emq:{q}:dead     zset  id -> time of death (ms), and EMQ_WIDE_MEMBER
--                          -> +inf
--   emq:{q}:jobs     hash  the one column of the queue's jobs:
--                      id        -> max_attempts .. ' ' .. payload, written
--                                   once by enqueue (the job exists iff
--                                   this field does)
--                      '~' .. id -> attempts .. ' ' .. state, then
--                                   ' ' .. worker while active; absent
--                                   until the first lease (pending,
--                                   attempts 0)
--                      EMQ_WIDE_FIELD (below)
-- A job's state is written twice: in its state entry, and in the index of
-- that state (a done job is in no index: its entry alone says done). The
-- snapshot reads both and the structure invariant holds them equal. The
-- lease deadline is the active index's score alone. No id starts with '~'
-- (ids carry the JOB brand), so a state entry is never a job's field.
-- Why one column: a queue-wide hash is one key, so a batch reads and writes
-- any number of jobs in one call (HMGET, HSET, ZADD, ZREM each once), a
-- lease reads a job's payload and its state in one HMGET, and a complete
-- makes three calls (read the state, leave the active index, write the
-- state).
--
-- Errors start with a code the client maps to a typed error:
--   EMQKIND  the id does not carry the JOB brand
--   EMQARG   an argument is missing, not an integer, or out of range
-- Numbers are written back with string.format('%d') because Lua 5.1 turns
-- a number into a string with '%.14g', which would print large deadlines in
-- exponent notation. '%d' formats a C long: exact for every whole number
-- the scripts make (below 2^53), and much cheaper than '%.0f', which goes
-- through the floating-point printer.

local function emq_num(n)
  return string.format('%d', n)
end

-- Small whole numbers as text, remembered across calls: a table lookup
-- where a conversion costs a formatting call (tokens and id lengths repeat;
-- a batch makes several per job). Read as `EMQ_TEXT[n] or emq_text(n)`.
-- Filled on first use: at load time a library sees only `redis`.
local EMQ_TEXT = {}
local function emq_text(n)
  local s = string.format('%d', n)
  if n >= 0 and n < 4096 then EMQ_TEXT[n] = s end
  return s
end

-- A done state entry, 'attempts done', by its attempts text, remembered
-- likewise: `EMQ_DONE[a] or emq_done(a)`.
local EMQ_DONE = {}
local function emq_done(a)
  local s = a .. ' done'
  if #a < 4 then EMQ_DONE[a] = s end
  return s
end

-- A value as an error reply shows it: in double quotes, `"` and `\` escaped
-- by a backslash, every byte outside printable ASCII as `\ddd` (decimal),
-- and at most its first 64 bytes, then `...`. An error reply must be short
-- text: echoing a binary argument verbatim makes the client fail to parse
-- the reply, and a 1 MB id would make a 1 MB error.
local function emq_show(v)
  local s, more = tostring(v), ''
  if #s > 64 then
    s, more = string.sub(s, 1, 64), '...'
  end
  s = string.gsub(s, '.', function(c)
    local b = string.byte(c)
    if c == '"' or c == '\\' then
      return '\\' .. c
    elseif b < 32 or b > 126 then
      return string.format('\\%03d', b)
    end
    return c
  end)
  return '"' .. s .. '"' .. more
end

-- An integer argument in [min, max]: digits only, an optional leading '-',
-- at most 15 digits so that it stays exact in a Lua double.
local function emq_int(v, name, min, max)
  if type(v) ~= 'string' or not string.match(v, '^%-?%d+$') or #v > 16 then
    return nil, redis.error_reply('EMQARG ' .. name .. ' must be an integer, got ' .. emq_show(v))
  end
  local n = tonumber(v)
  if n < min or n > max then
    return nil, redis.error_reply('EMQARG ' .. name .. ' must be in [' .. emq_num(min) .. ', ' .. emq_num(max) .. '], got ' .. v)
  end
  return n
end

-- The largest duration or time the scripts accept, in milliseconds (about
-- 31,000 years): deadlines stay exact integers in a Lua double.
local EMQ_MAX_MS = 1000000000000000

-- A field the jobs column holds beside its jobs, with a value longer than
-- hash-max-listpack-value (64 bytes by default): a hash holding it is kept
-- in the hashtable encoding from its first write on. A small hash is kept
-- as a listpack, which every HGET and HSET searches linearly: up to 512
-- entries (hash-max-listpack-entries), a fresh queue's column would cost
-- more per job than a large queue's. No id starts with 'emq:' (ids carry
-- the JOB brand), and the snapshot leaves the field out.
local EMQ_WIDE_FIELD = 'emq:wide'
local EMQ_WIDE = 'keeps this column in the hashtable encoding: a listpack is searched linearly (lua/prelude.lua)'

-- The same for the pending and active indexes: a member longer than
-- zset-max-listpack-value (64 bytes) in a ZADD makes the sorted set a
-- skiplist from that call on (a listpack zset of up to 128 members costs a
-- batch of 100 inserts about 16k instructions per job). The member is
-- scored +inf, so no range up to a time (a ready job, an expired lease)
-- ever reaches it, and the snapshot leaves it out; it is not a job (no id
-- starts with 'emq:'), and once in, it keeps the index's key alive when the
-- index has no job. enqueue and enqueue_batch add it to pending, and
-- lease_batch to active, in the ZADD they make anyway: enqueue learns from
-- that ZADD's answer that the queue is new (see enqueue.lua). The batches
-- put it first: Redis 7.0 picks a new sorted set's encoding from the first
-- member of the ZADD alone (Valkey 9 from the longest).
local EMQ_WIDE_MEMBER = 'emq:wide keeps this index in the skiplist encoding: a listpack is searched linearly (lua/prelude.lua)'

-- Every key of a queue exists from its first enqueue on: the enqueue that
-- finds the queue new (its ZADD added EMQ_WIDE_MEMBER to pending) adds the
-- member to the active and dead indexes too, and the jobs column holds
-- EMQ_WIDE_FIELD. A script that declares a key its node lacks is refused
-- during a classic slot migration (CLUSTER SETSLOT ... MIGRATING,
-- MIGRATE): TRYAGAIN from the source while some of its keys have moved,
-- and from the importing target after ASKING while some have not. With
-- every key present, the source runs a script until its keys move and
-- the target (after ASKING) once they have. A key of a wrong type is left
-- as it is: the scripts that use it refuse it.
local function emq_keep(active, dead)
  redis.pcall('ZADD', active, 'inf', EMQ_WIDE_MEMBER)
  redis.pcall('ZADD', dead, 'inf', EMQ_WIDE_MEMBER)
end

-- The largest attempts count a lease accepts (10^14 - 1): a count below
-- 10^14 is written by Lua's own number-to-text conversion ('%.14g') as
-- plain digits, so a state entry is made with one concatenation.
local EMQ_MAX_COUNT = 99999999999999

-- The most jobs one batch script takes or settles in a call: it bounds the
-- script's run time (the server runs nothing else meanwhile) and the size
-- of `unpack`, which Lua 5.1 limits to a few thousand values.
local EMQ_BATCH_MAX = 1000

-- Whether complete_lease may take its one-pass path (see complete_lease.lua):
-- the library sets it to false when the complete or lease body is not the
-- reference one (a mutant), so that complete_lease runs those bodies.
local EMQ_FAST_LOOP = true

-- Now, in milliseconds. An empty argument means the server clock (TIME); the
-- harness passes a logical time for deterministic exploration, production
-- callers never do.
local function emq_now(v)
  if v == nil or v == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return emq_int(v, 'now_ms', 0, EMQ_MAX_MS)
end

-- True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, at
-- most U+10FFFF). Ids come back to clients as text: the typed client reads
-- them into Rust strings, so a binary id admitted here would make every
-- lease, reap and snapshot that meets it unreadable.
local function emq_utf8(s)
  if not string.find(s, '[\128-\255]') then
    return true
  end
  local i, n = 1, #s
  while i <= n do
    local c = string.byte(s, i)
    local len, lo, hi = 1, 0x80, 0xBF
    if c < 0x80 then
      len = 1
    elseif c >= 0xC2 and c <= 0xDF then
      len = 2
    elseif c >= 0xE0 and c <= 0xEF then
      len = 3
      if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      len = 4
      if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
    else
      return false
    end
    if i + len - 1 > n then
      return false
    end
    for j = i + 1, i + len - 1 do
      local d = string.byte(s, j)
      if j == i + 1 then
        if d < lo or d > hi then return false end
      elseif d < 0x80 or d > 0xBF then
        return false
      end
    end
    i = i + len
  end
  return true
end

-- Ids must carry the JOB brand: the id is the idempotency key of the job.
local function emq_id(v)
  -- The common case in one pattern: the brand, then printable ASCII.
  if type(v) == 'string' and #v <= 512 and string.find(v, '^JOB[ -~]*$') then
    return v
  end
  if type(v) ~= 'string' or string.sub(v, 1, 3) ~= 'JOB' then
    return nil, redis.error_reply('EMQKIND job id must be JOB-namespaced, got ' .. emq_show(v))
  end
  if #v > 512 then
    return nil, redis.error_reply('EMQARG job id is longer than 512 bytes')
  end
  if not emq_utf8(v) then
    return nil, redis.error_reply('EMQARG job id is not UTF-8')
  end
  return v
end

local function emq_worker(v)
  if type(v) ~= 'string' or #v == 0 or #v > 256 then
    return nil, redis.error_reply('EMQARG worker must be 1 to 256 bytes')
  end
  return v
end

-- Key types. A write to a key of the wrong type fails with WRONGTYPE only
-- when the script reaches it, after the writes before it have been made (a
-- Lua error rolls nothing back): a job left without its index entry. So
-- a script checks the type of every key it will write, after its arguments
-- and before its first write. `emq_types(key1, type1, key2, type2, ...)`
-- answers an error reply when a key exists with another type, else nil.
local function emq_types(...)
  local spec = {...}
  for i = 1, #spec, 2 do
    local t = redis.call('TYPE', spec[i])
    local kind = t['ok'] or t
    if kind ~= 'none' and kind ~= spec[i + 1] then
      return redis.error_reply('WRONGTYPE ' .. spec[i] .. ' holds a ' .. kind .. ' where the queue keeps a ' .. spec[i + 1] .. '; nothing was written')
    end
  end
  return nil
end

-- The same check, made by calls the script makes anyway. A command checks
-- the type of its key before it changes anything, so a read of a key, or
-- the script's first write, meets a key of another type before anything has
-- been written: such a key needs no TYPE call of its own (on the lease and
-- complete path each call costs about as much as a command). Such a call is
-- made with redis.pcall; when it answers an error, the script answers what
-- emq_types over its keys would have answered up front (the same key named
-- first), or that error itself when no key is of another type:
--   local ids = redis.pcall('ZRANGEBYSCORE', key, ...)
--   if ids.err then return emq_types(key, 'zset', ...) or ids end
-- (HGET and a write answer a string, false or a number, so there:
-- `if type(v) == 'table' then`). Not
-- a helper function: every function the prelude defines costs every script
-- run its creation.
