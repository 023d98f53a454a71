#!/usr/bin/env python3
"""A correct leased, fenced queue with OPAQUE tokens, for ackgap's own tests
(tests/integration/protocol.rs): a copy of adapters/lmove-python/run whose
lease draws a random 63-bit token (SystemRandom), keeps the job's current
token in a hash, and whose complete, fail and extend refuse any other
(`fenced`, with `current` and `state`). The hello says `fences: true` and
`tokens: "opaque"`. Standard library only.

    fenced.py [--strict] [MUTANT]

--strict          a lease expires only once `now > deadline_ms` (the reaper
                  takes a lease whose deadline is strictly past), where the
                  reference queue expires it at `now >= deadline_ms`: legal.

Mutants, each broken on purpose (the checkers must catch it; `ackgap
mutants` runs each as an `exec:` row, src/mutants/exec.rs):

--stale-complete           complete accepts a stale token while the job is
                           active (the classic unfenced LREM).
--complete-ignores-state   the job's last token outlives its lease (a reap,
                           a fail or a complete leave it until the next lease
                           overwrites it), and complete checks the token but
                           not that the job is active: the holder of a
                           reaped lease settles the job, pending again.
--extend-late-unfenced     extend checks the token only before the lease's
                           deadline: past it, any holder's heartbeat moves
                           the current lease's deadline.
--fail-keeps-active        a fail that requeues pushes the job back to
                           pending without taking it out of processing: the
                           job is in two indexes.
--dead-letter-late         the dead letter comes one attempt late (n > max):
                           one delivery past max_attempts, by fail or reap.
--readmit-done             an enqueue of an id that is done admits it again
                           (answers `enqueued` and makes it pending).
--fail-ignores-delay       a fail with a retry delay answers `ready_at_ms`
                           now + delay, as it should, but puts the job back
                           in pending at once (delay-respected must catch it).
--overwrite-done-payload   a duplicate enqueue of a done job overwrites its
                           payload and still answers `duplicate` (admission
                           must catch it, from the read's `payloads`).
--non-atomic-lease         a lease in two calls: it reads the head of pending
                           and the job's deliveries (the token is one more),
                           awaits (a slow client: NON_ATOMIC_GAP_S, then as
                           long as another lease has not done its read, at
                           most NON_ATOMIC_WAIT_S), then removes the job,
                           pushes it to processing and counts the delivery.
                           One lease at a time is correct; two sent together
                           both read the same head: two workers get one job
                           with one token (only parallel steps find it).

Delays: an enqueue's `delay_ms` and a fail's `retry_delay_ms` put the job in
a `delayed` sorted set scored by its ready time; a lease first moves the due
ones to pending. A read shows them as pending, and every job's payload.

Keys: emq:{QUEUE}:fz:* (the queue name is the hash tag).
"""

import asyncio
import json
import os
import random
import sys
from urllib.parse import unquote, urlparse

PROTOCOL = 1
# A call with no reply within this is `unknown` and its connection dropped
# (ACKGAP_LMOVE_TIMEOUT_S, default 10 s).
TIMEOUT_S = float(os.environ.get("ACKGAP_LMOVE_TIMEOUT_S", "10"))
OPERATIONS = ["enqueue", "lease", "complete", "fail", "extend", "reap", "read", "clear"]
STRICT = "--strict" in sys.argv[1:]
MUTANTS = ["--stale-complete", "--complete-ignores-state", "--extend-late-unfenced", "--fail-keeps-active",
           "--dead-letter-late", "--readmit-done", "--fail-ignores-delay", "--overwrite-done-payload",
           "--non-atomic-lease"]
MODES = {a for a in sys.argv[1:] if a in MUTANTS}
STALE_COMPLETE = "--stale-complete" in MODES
READMIT_DONE = "--readmit-done" in MODES
FAIL_IGNORES_DELAY = "--fail-ignores-delay" in MODES
OVERWRITE_DONE_PAYLOAD = "--overwrite-done-payload" in MODES
NON_ATOMIC_LEASE = "--non-atomic-lease" in MODES
# The non-atomic lease's await between its read and its write: 20 ms,
# then while another lease is between its arrival and its read (at most
# NON_ATOMIC_WAIT_S), so that two leases sent together both read before
# either writes, however loaded the machine; one lease alone waits the gap.
NON_ATOMIC_GAP_S = 0.02
NON_ATOMIC_WAIT_S = 2.0


def flag(mode):
    """'1' when the mutant `mode` was asked for: an argument of the scripts."""
    return "1" if mode in MODES else "0"
RANDOM = random.SystemRandom()

NOW = """
local function now_ms(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS: payloads, pending, max, delayed, done. ARGV: id, payload,
# max_attempts, now, delay_ms, overwrite ('1': a duplicate of a done job
# overwrites its payload), readmit ('1': a done id is admitted again): the
# two broken modes.
ENQUEUE = NOW + """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  if ARGV[6] == '1' and redis.call('SISMEMBER', KEYS[5], ARGV[1]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  end
  if ARGV[7] == '1' and redis.call('SREM', KEYS[5], ARGV[1]) == 1 then
    redis.call('LPUSH', KEYS[2], ARGV[1])
    return 1
  end
  return 0
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
local delay = tonumber(ARGV[5])
if delay > 0 then
  redis.call('ZADD', KEYS[4], now_ms(ARGV[4]) + delay, ARGV[1])
else
  redis.call('LPUSH', KEYS[2], ARGV[1])
end
return 1
"""

# KEYS: pending, processing, deadlines, deliveries, payloads, tokens,
# delayed. ARGV: now, lease_ms, token. The delayed jobs now due go to
# pending first.
LEASE = NOW + """
local due = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now_ms(ARGV[1]))
for _, j in ipairs(due) do
  redis.call('ZREM', KEYS[7], j)
  redis.call('LPUSH', KEYS[1], j)
end
local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
if not id then return false end
redis.call('HINCRBY', KEYS[4], id, 1)
redis.call('HSET', KEYS[6], id, ARGV[3])
local d = now_ms(ARGV[1]) + tonumber(ARGV[2])
redis.call('HSET', KEYS[3], id, d)
return {id, ARGV[3], d, redis.call('HGET', KEYS[5], id)}
"""

# The non-atomic lease's two calls (MUTANT non-atomic-lease). The read:
# KEYS: pending, delayed, deliveries. ARGV: now. The due delayed jobs go to
# pending; answers the head of pending and its deliveries, or nil.
LEASE_READ = NOW + """
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms(ARGV[1]))
for _, j in ipairs(due) do
  redis.call('ZREM', KEYS[2], j)
  redis.call('LPUSH', KEYS[1], j)
end
local id = redis.call('LINDEX', KEYS[1], -1)
if not id then return false end
return {id, redis.call('HGET', KEYS[3], id) or '0'}
"""

# The write: KEYS: pending, processing, deadlines, deliveries, payloads,
# tokens. ARGV: id, now, lease_ms, token.
LEASE_WRITE = NOW + """
local id = ARGV[1]
redis.call('LREM', KEYS[1], 1, id)
redis.call('LPUSH', KEYS[2], id)
redis.call('HINCRBY', KEYS[4], id, 1)
redis.call('HSET', KEYS[6], id, ARGV[4])
local d = now_ms(ARGV[2]) + tonumber(ARGV[3])
redis.call('HSET', KEYS[3], id, d)
return {tostring(d), redis.call('HGET', KEYS[5], id)}
"""

# The gate of complete, fail and extend. KEYS: processing, done, dead,
# tokens, payloads, deadlines, pending, deliveries, max, delayed. ARGV: id,
# token, now, lease_ms, op, checks ('1': the token must be current), strict
# ('1': a lease expires once now > deadline), then the mutants' flags ('1':
# on): complete-ignores-state, extend-late-unfenced, fail-keeps-active,
# dead-letter-late; then retry_delay_ms and delays ('1': a retry delay is
# honoured; '0': the broken mode that requeues at once and still answers
# the delayed ready time).
GATE = NOW + """
local id, tok, op = ARGV[1], ARGV[2], ARGV[5]
local ignores_state, late_extend = ARGV[8] == '1', ARGV[9] == '1'
local keeps_active, late_dead = ARGV[10] == '1', ARGV[11] == '1'
if redis.call('HEXISTS', KEYS[5], id) == 0 then return {'missing'} end
local held = redis.call('LPOS', KEYS[1], id)
local cur = redis.call('HGET', KEYS[4], id)
local stale = ARGV[6] == '1' and cur ~= tok
if stale and op == 'extend' and late_extend and held then
  -- MUTANT extend-late-unfenced: past the deadline the token is not checked.
  local d = tonumber(redis.call('HGET', KEYS[6], id) or '0')
  local now = now_ms(ARGV[3])
  if d < now or (d == now and ARGV[7] ~= '1') then stale = false end
end
-- MUTANT complete-ignores-state: the token alone decides a complete.
local unheld = not held and not (ignores_state and op == 'complete' and cur == tok)
if unheld or stale then
  local state = 'pending'
  if held then state = 'active'
  elseif redis.call('SISMEMBER', KEYS[2], id) == 1 then state = 'done'
  elseif redis.call('ZSCORE', KEYS[3], id) then state = 'dead' end
  if state == 'done' and op == 'complete' then return {'already_settled'} end
  return {'fenced', cur or '0', state}
end
if op == 'extend' then
  local d = now_ms(ARGV[3]) + tonumber(ARGV[4])
  redis.call('HSET', KEYS[6], id, d)
  return {'extended', tostring(d)}
end
local n = tonumber(redis.call('HGET', KEYS[8], id) or '0')
local max = tonumber(redis.call('HGET', KEYS[9], id) or '1')
local dies = n >= max
-- MUTANT dead-letter-late: one more attempt than max_attempts.
if late_dead then dies = n > max end
-- MUTANT fail-keeps-active: a requeue leaves the job in processing too.
if not (keeps_active and op == 'fail' and not dies) then
  redis.call('LREM', KEYS[1], 1, id)
end
redis.call('HDEL', KEYS[6], id)
-- MUTANT complete-ignores-state: the token outlives the lease.
if not ignores_state then redis.call('HDEL', KEYS[4], id) end
if op == 'complete' then
  redis.call('SADD', KEYS[2], id)
  return {'settled'}
end
local now = now_ms(ARGV[3])
if dies then
  redis.call('ZADD', KEYS[3], now, id)
  return {'dead'}
end
local delay = tonumber(ARGV[12])
if delay > 0 and ARGV[13] == '1' then
  redis.call('ZADD', KEYS[10], now + delay, id)
else
  redis.call('RPUSH', KEYS[7], id)
end
return {'requeued', tostring(now + delay)}
"""

# KEYS: processing, deadlines, pending, dead, deliveries, max, tokens.
# ARGV: now, limit, strict ('1': expired only once now > deadline), the
# mutants complete-ignores-state (tokens kept) and dead-letter-late.
# Oldest deliveries first (LMOVE pushes on the left).
REAP = NOW + """
local now = now_ms(ARGV[1])
local limit = tonumber(ARGV[2])
local out = {}
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
for i = #ids, 1, -1 do
  if #out >= 2 * limit then break end
  local id = ids[i]
  local d = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  if d < now or (d == now and ARGV[3] ~= '1') then
    redis.call('LREM', KEYS[1], 1, id)
    redis.call('HDEL', KEYS[2], id)
    if ARGV[4] ~= '1' then redis.call('HDEL', KEYS[7], id) end
    local n = tonumber(redis.call('HGET', KEYS[5], id) or '0')
    local max = tonumber(redis.call('HGET', KEYS[6], id) or '1')
    local dies = n >= max
    if ARGV[5] == '1' then dies = n > max end
    if dies then
      redis.call('ZADD', KEYS[4], now, id)
      table.insert(out, id); table.insert(out, 'dead')
    else
      redis.call('RPUSH', KEYS[3], id)
      table.insert(out, id); table.insert(out, 'pending')
    end
  end
end
return out
"""


class Failure(Exception):
    """An error answer of the protocol's kind `kind`."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


class ServerError(Exception):
    """The server answered an error (the message starts with its code)."""


class Resp:
    """A RESP2 client on one connection; calls run one at a time."""

    def __init__(self, url):
        u = urlparse(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 6379
        self.username = unquote(u.username) if u.username else None
        self.password = unquote(u.password) if u.password else None
        self.db = int(u.path.strip("/")) if u.path and u.path.strip("/") else 0
        self.reader = None
        self.writer = None
        self.lock = asyncio.Lock()

    async def connect(self):
        """Opens the connection if there is none; a failure means nothing
        was sent: `unavailable`."""
        if self.writer is not None:
            return
        try:
            self.reader, self.writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), TIMEOUT_S)
            if self.password is not None:
                auth = ["AUTH", self.password] if self.username is None else ["AUTH", self.username, self.password]
                await self.roundtrip(auth)
            if self.db:
                await self.roundtrip(["SELECT", str(self.db)])
        except (OSError, ConnectionError, ServerError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
            self.drop()
            raise Failure("unavailable", f"cannot connect to {self.host}:{self.port}: {e}") from e

    def drop(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    async def parse(self):
        line = await self.reader.readuntil(b"\r\n")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return ServerError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = await self.reader.readexactly(n + 2)
            return data[:-2].decode("utf-8", errors="replace")
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [await self.parse() for _ in range(n)]
        raise ConnectionError(f"bad RESP line {line!r}")

    async def roundtrip(self, args):
        self.writer.write(self.encode(args))
        await self.writer.drain()
        reply = await self.parse()
        if isinstance(reply, ServerError):
            raise reply
        return reply

    async def pipeline(self, commands):
        self.writer.write(b"".join(self.encode(c) for c in commands))
        await self.writer.drain()
        return [await self.parse() for _ in commands]

    async def call(self, *args):
        """One command; a connection lost after connecting is `unknown`
        (it may have run), and the connection is dropped for the next call."""
        async with self.lock:
            await self.connect()
            try:
                return await asyncio.wait_for(self.roundtrip(list(args)), TIMEOUT_S)
            except ServerError:
                raise
            except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
                self.drop()
                raise Failure("unknown", f"connection lost mid-call: {e!r}") from e

    async def transaction(self, commands):
        """MULTI, the commands, EXEC, sent at once under the lock: the
        replies of EXEC, one per command."""
        async with self.lock:
            await self.connect()
            try:
                replies = await asyncio.wait_for(self.pipeline([["MULTI"], *commands, ["EXEC"]]), TIMEOUT_S)
            except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
                self.drop()
                raise Failure("unknown", f"connection lost mid-call: {e!r}") from e
            for r in replies:
                if isinstance(r, ServerError):
                    raise r
            return replies[-1]

    async def eval(self, script, keys, args):
        return await self.call("EVAL", script, len(keys), *keys, *args)


class Fenced:
    def __init__(self, server, connections, queue):
        self.server = server
        self.connections = connections
        self.conns = {}
        # Non-atomic leases between their arrival and their read.
        self.reading = 0
        base = "emq:{%s}:fz:" % queue
        self.all = "emq:{%s}:*" % queue
        for name in ["pending", "processing", "done", "dead", "payloads", "deadlines", "deliveries", "max", "tokens",
                     "delayed"]:
            setattr(self, name, base + name)

    def conn(self, worker):
        name = worker or "default"
        if name not in self.conns:
            self.conns[name] = Resp(self.connections.get(name, self.server))
        return self.conns[name]

    @staticmethod
    def now(req):
        n = req.get("now_ms")
        return "" if n is None else str(int(n))

    async def enqueue(self, c, req):
        n = await c.eval(ENQUEUE, [self.payloads, self.pending, self.max, self.delayed, self.done],
                         [req["job"], req.get("payload", ""), int(req.get("max_attempts", 1)), self.now(req),
                          int(req.get("delay_ms", 0)), "1" if OVERWRITE_DONE_PAYLOAD else "0",
                          "1" if READMIT_DONE else "0"])
        return "enqueued" if n == 1 else "duplicate"

    async def lease(self, c, req):
        if NON_ATOMIC_LEASE:
            return await self.lease_in_two_calls(c, req)
        token = RANDOM.getrandbits(63)
        got = await c.eval(LEASE, [self.pending, self.processing, self.deadlines, self.deliveries, self.payloads,
                                   self.tokens, self.delayed], [self.now(req), int(req["lease_ms"]), token])
        if got is None:
            return None
        job, token, deadline, payload = got
        return {"job": job, "token": int(token), "deadline_ms": int(deadline), "payload": payload or ""}

    async def lease_in_two_calls(self, c, req):
        # MUTANT non-atomic-lease: the read, then (after an await) the write.
        self.reading += 1
        try:
            got = await c.eval(LEASE_READ, [self.pending, self.delayed, self.deliveries], [self.now(req)])
        finally:
            self.reading -= 1
        await asyncio.sleep(NON_ATOMIC_GAP_S)
        waited = NON_ATOMIC_GAP_S
        while self.reading > 0 and waited < NON_ATOMIC_WAIT_S:
            await asyncio.sleep(0.001)
            waited += 0.001
        if got is None:
            return None
        job, n = got
        token = int(n) + 1
        got = await c.eval(LEASE_WRITE, [self.pending, self.processing, self.deadlines, self.deliveries,
                                         self.payloads, self.tokens],
                           [job, self.now(req), int(req["lease_ms"]), token])
        deadline, payload = got
        return {"job": job, "token": token, "deadline_ms": int(deadline), "payload": payload or ""}

    async def gate(self, c, req, op, checks=True):
        keys = [self.processing, self.done, self.dead, self.tokens, self.payloads, self.deadlines, self.pending,
                self.deliveries, self.max, self.delayed]
        args = [req["job"], int(req["token"]), self.now(req), int(req.get("lease_ms", 0)), op,
                "1" if checks else "0", "1" if STRICT else "0", flag("--complete-ignores-state"),
                flag("--extend-late-unfenced"), flag("--fail-keeps-active"), flag("--dead-letter-late"),
                int(req.get("retry_delay_ms", 0)), "0" if FAIL_IGNORES_DELAY else "1"]
        got = await c.eval(GATE, keys, args)
        word = got[0]
        if word == "fenced":
            return {"outcome": "fenced", "current": int(got[1]), "state": got[2]}
        if word == "extended":
            return {"outcome": "extended", "deadline_ms": int(got[1])}
        if word == "requeued":
            return {"outcome": "requeued", "ready_at_ms": int(got[1])}
        return {"outcome": word}

    async def complete(self, c, req):
        return await self.gate(c, req, "complete", checks=not STALE_COMPLETE)

    async def fail(self, c, req):
        return await self.gate(c, req, "fail")

    async def extend(self, c, req):
        return await self.gate(c, req, "extend")

    async def reap(self, c, req):
        flat = await c.eval(REAP, [self.processing, self.deadlines, self.pending, self.dead, self.deliveries, self.max,
                                   self.tokens], [self.now(req), int(req.get("limit", 100)), "1" if STRICT else "0",
                                   flag("--complete-ignores-state"), flag("--dead-letter-late")])
        return [{"job": flat[i], "to": "dead" if flat[i + 1] == "dead" else "pending"} for i in range(0, len(flat), 2)]

    async def read(self, c, req):
        # One MULTI so that the six reads see one instant.
        flat, pending, processing, done, dead, delayed = await c.transaction([
            ["HGETALL", self.payloads], ["LRANGE", self.pending, 0, -1], ["LRANGE", self.processing, 0, -1],
            ["SMEMBERS", self.done], ["ZRANGE", self.dead, 0, -1], ["ZRANGE", self.delayed, 0, -1]])
        payloads = dict(zip(flat[0::2], flat[1::2]))
        ids = list(payloads)
        jobs, problems = {}, set()
        for job in ids:
            places = ["pending"] * (pending.count(job) + delayed.count(job)) + ["active"] * processing.count(job)
            places += ["done"] if job in done else []
            places += ["dead"] if job in dead else []
            if len(places) > 1:
                problems.add(f"{job}: in several places [{', '.join(places)}]")
            jobs[job] = places[0] if places else "vanished"
        for entry in pending + processing + done + dead + delayed:
            if entry not in ids:
                problems.add(f"{entry}: an entry without a payload")
        return {"jobs": dict(sorted(jobs.items())), "problems": sorted(problems),
                "payloads": dict(sorted(payloads.items()))}

    async def clear(self, c, req):
        cursor, keys = "0", []
        while True:
            cursor, batch = await c.call("SCAN", cursor, "MATCH", self.all, "COUNT", 1000)
            keys += batch
            if cursor == "0":
                break
        for i in range(0, len(keys), 500):
            await c.call("DEL", *keys[i:i + 500])
        return None


async def answer(queue, req, send):
    rid = req.get("id")
    try:
        op = req.get("op")
        if op not in OPERATIONS:
            raise Failure("unsupported", f"op {op!r} is not supported")
        ok = await getattr(queue, op)(queue.conn(req.get("worker")), req)
        await send({"in_reply_to": rid, "ok": ok})
    except Failure as e:
        await send({"in_reply_to": rid, "error": {"kind": e.kind, "message": e.message}})
    except ServerError as e:
        await send({"in_reply_to": rid, "error": {"kind": "server", "message": str(e)}})
    except (KeyError, ValueError, TypeError) as e:
        # Checked before any write: the request's fields were not usable.
        await send({"in_reply_to": rid, "error": {"kind": "refused", "message": f"bad request: {e!r}"}})


async def main():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    lock = asyncio.Lock()

    async def send(obj):
        async with lock:
            sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
            sys.stdout.flush()

    queue = None
    tasks = set()
    while True:
        line = await reader.readline()
        if not line:
            break  # EOF: ackgap is done
        try:
            req = json.loads(line)
        except ValueError:
            print(f"fenced.py: not JSON, ignored: {line[:200]!r}", file=sys.stderr, flush=True)
            continue
        if req.get("op") == "hello":
            if req.get("protocol") != PROTOCOL:
                await send({"in_reply_to": req.get("id"),
                            "error": {"kind": "refused", "message": f"protocol {req.get('protocol')!r}; I speak {PROTOCOL}"}})
                continue
            queue = Fenced(req["server"], req.get("connections") or {}, req["queue"])
            await send({"in_reply_to": req.get("id"), "ok": {
                "name": "fenced-opaque",
                "capabilities": {"operations": OPERATIONS, "logical_time": True, "fences": True,
                                 "tokens": "opaque"}}})
            continue
        if queue is None:
            await send({"in_reply_to": req.get("id"), "error": {"kind": "refused", "message": "hello must come first"}})
            continue
        task = asyncio.ensure_future(answer(queue, req, send))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main())
