-- ackgap reference queue: the prelude prepended to every script.
--
-- Every script validates all of its arguments *before its first write*: a Lua
-- error raised half-way through a script does not roll back the writes made
-- before it, so a refusal must happen while nothing has been written yet.
--
-- Errors start with a code the client maps to a typed error:
--   EMQKIND  the id does not carry the JOB brand
--   EMQARG   an argument is missing, not an integer, or out of range
-- Numbers are written back with string.format('%.0f') because Lua 5.1 turns
-- a number into a string with '%.14g', which would print large deadlines in
-- exponent notation.

local function emq_num(n)
  return string.format('%.0f', n)
end

-- An integer argument in [min, max]: digits only, an optional leading '-',
-- at most 15 digits so that it stays exact in a Lua double.
local function emq_int(v, name, min, max)
  if type(v) ~= 'string' or not string.match(v, '^%-?%d+$') or #v > 16 then
    return nil, redis.error_reply('EMQARG ' .. name .. ' must be an integer, got ' .. string.format('%q', tostring(v)))
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

-- Ids must carry the JOB brand: the id is the idempotency key of the job.
local function emq_id(v)
  if type(v) ~= 'string' or string.sub(v, 1, 3) ~= 'JOB' then
    return nil, redis.error_reply('EMQKIND job id must be JOB-namespaced, got ' .. string.format('%q', tostring(v)))
  end
  if #v > 512 then
    return nil, redis.error_reply('EMQARG job id is longer than 512 bytes')
  end
  return v
end

local function emq_worker(v)
  if type(v) ~= 'string' or #v == 0 or #v > 256 then
    return nil, redis.error_reply('EMQARG worker must be 1 to 256 bytes')
  end
  return v
end
