#!/usr/bin/env python3
"""A self-check for an ackgap protocol adapter (docs/adapter-protocol.md).

    adapters/conformance.py [--server URL] [--queue NAME] [--lease-ms N] [--clock|--no-clock] -- COMMAND
    adapters/conformance.py --crash [--recover-s S] ... -- COMMAND

Starts COMMAND the way ackgap does (`sh -c COMMAND`, stdin and stdout
piped, stderr inherited, its own process group), says hello, and runs one
fixed scenario: enqueue two jobs, a duplicate enqueue (skipped, and said so,
when the hello says `dedup: false`), a complete of a job never leased, a
lease by a worker
whose own connection (hello's `connections`) cannot open, lease, complete, a
stale complete, fail, lease again, extend, two requests in flight at once,
reap after the lease expired, a stale extend and complete, read, then lease
and settle what is left, stale settles of done jobs, read, clear. A queue
whose hello says `fences: true` must answer every stale settle `fenced` with
the job's true `state` (or, for a complete of a done job,
`already_settled`). Every exchange is printed (`->` sent, `<-`
received). A malformed answer (not JSON, an id never asked or answered
twice, a value of the wrong shape, a wrong outcome) stops it with a message
naming the line, and exit status 1.

Without --server it starts its own valkey-server (found like ci/find-valkey
finds it) on a free port, and stops it at the end. The adapter's hello
decides the clock, in one of three modes (docs/adapter-protocol.md, Time):

- **logical** (`logical_time: true`, no `follows_clock`, e.g.
  adapters/lmove-python/run): `now_ms` numbers from 1000, time steps are
  free, leases are 1000 ms; no `clock_ms` is sent.
- **clock** (`logical_time: true` and `follows_clock: true`, on a server
  this script started): the valkey-server runs under libfaketime
  (`$ACKGAP_LIBFAKETIME`, else /usr/lib/x86_64-linux-gnu/faketime/
  libfaketime.so.1) reading a control file, and every request but the hello
  carries `clock_ms` = EPOCH + `now_ms` (EPOCH = 2000073600000, 2033-05-19
  00:00:00 UTC; `now_ms` starts at 1000). Before each request whose
  `clock_ms` differs from the last, the file is rewritten (atomically) with
  that frozen instant, so the server's TIME and PX expiry read it; time
  steps are free, leases are --lease-ms. On top of every other check: each
  `deadline_ms` and `ready_at_ms` is logical (not below `now_ms`, a
  whole-second library's ready time not below `now_ms - 1000`, and within
  60 s after it), each `read` answer's `clock_ms` is exactly the request's
  (the library's clock was the walk's instant), a reap before the lease's
  deadline takes nothing and one just after it (deadline + 1 ms, then again
  a lease later for a two-phase reaper) takes the job back.
- **server clock** (`logical_time: false`, or a follower with --no-clock or
  on a server given with --server, whose clock this script cannot set):
  `now_ms: null`, no `clock_ms`, and time steps are real sleeps of about a
  lease (--lease-ms, default 300).

The clock mode is the default for a follower whenever this script starts
its own server and libfaketime is there: the server is then always started
under libfaketime, on real time (the control file says `+0`) until the
hello says `follows_clock: true`. `--clock` insists on it (an error when
the adapter does not follow, with --server, or without libfaketime);
`--no-clock` starts a plain server and drives a follower on the server's
clock, as ackgap's chaos runner does. The first line after the hello says
which mode ran.

With `--check-doc` it validates every example exchange of
docs/adapter-protocol.md (its ```jsonl blocks) and exits. Messages are
checked against docs/adapter-protocol.schema.json when the `jsonschema`
package is importable; without it, only the checks written here run (a note
says so).
"""

import argparse
import json
import os
import queue as queue_mod
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCHEMA_PATH = os.path.join(ROOT, "docs", "adapter-protocol.schema.json")
DOC_PATH = os.path.join(ROOT, "docs", "adapter-protocol.md")
REQUIRED = ["enqueue", "lease", "complete", "read", "clear"]
STATES = {"pending", "active", "done", "dead"}
# The clock mode's epoch: clock_ms = EPOCH + now_ms (2033-05-19 00:00:00 UTC).
EPOCH = 2000073600000
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# A logical deadline or ready time further than this after now_ms is not sane.
SANE_AHEAD_MS = 60_000


class Bad(Exception):
    """The adapter broke the protocol or the scenario's expectations."""


# --- schema ------------------------------------------------------------------

class Schema:
    """The protocol's JSON Schema, when jsonschema is importable."""

    def __init__(self):
        with open(SCHEMA_PATH) as f:
            self.doc = json.load(f)
        try:
            from jsonschema import Draft202012Validator

            Draft202012Validator.check_schema(self.doc)
            self.validator = Draft202012Validator
            self.note = "messages checked against docs/adapter-protocol.schema.json"
        except ImportError:
            self.validator = None
            self.note = "jsonschema is not importable: schema checks skipped (the hand-written checks still run)"

    def check(self, value, definition, line):
        """Validates `value` against `$defs/<definition>` (or the whole
        schema when None); raises Bad naming `line`."""
        if self.validator is None:
            return
        schema = dict(self.doc)
        if definition is not None:
            schema = {"$schema": self.doc["$schema"], "$defs": self.doc["$defs"],
                      "$ref": f"#/$defs/{definition}"}
        errors = sorted(self.validator(schema).iter_errors(value), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            where = "/".join(str(p) for p in e.path) or "(top)"
            raise Bad(f"schema ({definition or 'message'}) at {where}: {e.message}\n  line: {line}")


# --- hand checks (run with or without jsonschema) -----------------------------

def expect(cond, what, line):
    if not cond:
        raise Bad(f"{what}\n  line: {line}")


def check_ok(op, ok, line):
    """The shape of an `ok` value for `op`, by hand."""
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    if op == "hello":
        caps = ok.get("capabilities") if isinstance(ok, dict) else None
        expect(isinstance(caps, dict) and isinstance(ok.get("name"), str), "hello: needs name and capabilities", line)
        ops = caps.get("operations")
        expect(isinstance(ops, list) and all(o in ops for o in REQUIRED),
               f"hello: operations must include {REQUIRED}", line)
        expect(isinstance(caps.get("logical_time"), bool) and isinstance(caps.get("fences"), bool),
               "hello: logical_time and fences must be booleans", line)
        expect(isinstance(caps.get("follows_clock", False), bool),
               "hello: follows_clock, when given, must be a boolean", line)
        expect(caps.get("recovery_ms") is None or is_int(caps.get("recovery_ms")),
               "hello: recovery_ms, when given, must be a non-negative integer (ms)", line)
    elif op == "enqueue":
        expect(ok in ("enqueued", "duplicate"), "enqueue: ok must be \"enqueued\" or \"duplicate\"", line)
    elif op == "lease":
        if ok is not None:
            expect(isinstance(ok, dict) and isinstance(ok.get("job"), str) and is_int(ok.get("token"))
                   and is_int(ok.get("deadline_ms")) and isinstance(ok.get("payload"), str),
                   "lease: ok must be null or {job, token, deadline_ms, payload}", line)
    elif op in ("complete", "fail", "extend"):
        words = {"complete": {"settled", "already_settled", "fenced", "missing"},
                 "fail": {"requeued", "dead", "fenced", "missing"},
                 "extend": {"extended", "fenced", "missing"}}[op]
        expect(isinstance(ok, dict) and ok.get("outcome") in words, f"{op}: outcome must be one of {sorted(words)}", line)
        if ok["outcome"] == "fenced":
            expect(is_int(ok.get("current")) and ok.get("state") in STATES, "fenced needs current and state", line)
        if ok["outcome"] == "requeued":
            expect(is_int(ok.get("ready_at_ms")), "requeued needs ready_at_ms", line)
        if ok["outcome"] == "extended":
            expect(is_int(ok.get("deadline_ms")), "extended needs deadline_ms", line)
    elif op == "reap":
        expect(isinstance(ok, list) and all(isinstance(r, dict) and isinstance(r.get("job"), str)
                                            and r.get("to") in ("pending", "dead") for r in ok),
               "reap: ok must be a list of {job, to: pending|dead}", line)
    elif op == "read":
        expect(isinstance(ok, dict) and isinstance(ok.get("jobs"), dict) and isinstance(ok.get("problems"), list),
               "read: ok must be {jobs: {...}, problems: [...]}", line)
        if "payloads" in ok:
            expect(isinstance(ok["payloads"], dict) and all(isinstance(v, str) for v in ok["payloads"].values()),
                   "read: payloads, when given, must be {job: payload string}", line)
        if "clock_ms" in ok:
            expect(is_int(ok["clock_ms"]), "read: clock_ms, when given, must be a u64", line)
    elif op == "clear":
        expect(ok is None, "clear: ok must be null", line)


def fenced_as(ok, state, what, line):
    """A fencing queue's answer to a stale settle: `fenced`, with the job's
    state now (`current` is any u64: check_ok checked it)."""
    expect(ok["outcome"] == "fenced", f"{what} must be refused (fenced) by a fencing queue, got {ok}", line)
    expect(ok["state"] == state, f"{what}: fenced with the job's state now, {state!r}, got {ok['state']!r}", line)


# --- the adapter process --------------------------------------------------------

class Adapter:
    """The adapter child and the lines both ways."""

    def __init__(self, command, schema, timeout_s):
        self.schema = schema
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True)
        self.lines = queue_mod.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0
        self.clock = None  # the scenario's Clock, once the hello chose it
        self.asked = {}  # id -> op, not yet answered
        self.requests = {}  # id -> the request, not yet answered
        self.answered = set()
        self.exchanges = 0

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.put(raw)
        self.lines.put(None)

    def send(self, op, worker=None, malformed=False, **fields):
        """Sends one request; `malformed` ones (on purpose) skip the schema."""
        rid = self.next_id
        self.next_id += 1
        req = {"id": rid, "op": op}
        if worker is not None:
            req["worker"] = worker
        req.update(fields)
        if op != "hello" and self.clock is not None and self.clock.server is not None:
            # The clock mode: the server's clock is set to this request's
            # instant before it is sent, and the request says it.
            req["clock_ms"] = self.clock.clock_ms()
            self.clock.server.set(req["clock_ms"])
        line = json.dumps(req, separators=(",", ":"))
        if not malformed:
            self.schema.check(req, "request", line)
        print(f"-> {line}", flush=True)
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise Bad(f"the adapter closed its stdin (exit status {self.proc.poll()})")
        self.asked[rid] = op
        self.requests[rid] = req
        return rid

    def receive(self):
        """The next answer: (id, op, answer), checked."""
        try:
            raw = self.lines.get(timeout=self.timeout_s)
        except queue_mod.Empty:
            raise Bad(f"no answer within {self.timeout_s}s (asked: {sorted(self.asked)})")
        if raw is None:
            raise Bad(f"the adapter closed stdout (exit status {self.proc.wait()})")
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        print(f"<- {line}", flush=True)
        try:
            ans = json.loads(line)
        except ValueError as e:
            raise Bad(f"not JSON ({e})\n  line: {line}")
        expect(isinstance(ans, dict), "an answer must be a JSON object", line)
        self.schema.check(ans, "answer", line)
        rid = ans.get("in_reply_to")
        expect(rid not in self.answered, f"in_reply_to {rid} was answered already", line)
        expect(rid in self.asked, f"in_reply_to {rid!r} was never asked", line)
        expect(("ok" in ans) != ("error" in ans), "an answer has exactly one of ok and error", line)
        op = self.asked.pop(rid)
        req = self.requests.pop(rid)
        self.answered.add(rid)
        self.exchanges += 1
        if "ok" in ans:
            self.schema.check(ans["ok"], f"ok_{op}", line)
            check_ok(op, ans["ok"], line)
            if self.clock is not None and self.clock.server is not None:
                check_clock(req, ans["ok"], line)
        return rid, op, ans, line

    def call(self, op, worker=None, **fields):
        """One request and its answer's `ok` value (an error answer is Bad)."""
        rid = self.send(op, worker, **fields)
        got, _, ans, line = self.receive()
        expect(got == rid, f"answer to {got} while only {rid} was in flight", line)
        if "error" in ans:
            raise Bad(f"{op}: error answer {ans['error']}\n  line: {line}")
        return ans["ok"], line

    def close(self):
        """EOF on stdin; SIGKILL to the group if it has not exited in 2 s."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise Bad("the adapter did not exit within 2 s of EOF on stdin (killed)")
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def check_clock(req, ok, line):
    """The clock mode's checks of one answer: its instants are logical (rule
    3 of the protocol's Time section), a read says the library's clock."""
    now = req.get("now_ms")
    if isinstance(ok, dict) and isinstance(now, int):
        for key, slack in (("deadline_ms", 0), ("ready_at_ms", 1000)):
            value = ok.get(key)
            if isinstance(value, int) and value != 0:
                expect(now - slack <= value <= now + SANE_AHEAD_MS,
                       f"{req['op']}: {key} {value} is not a logical time near now_ms {now} "
                       f"(between {now - slack} and {now + SANE_AHEAD_MS}): the instants of an answer to a "
                       f"request with now_ms and clock_ms are the library's ms minus (clock_ms - now_ms)", line)
    if req["op"] == "read":
        expect(ok.get("clock_ms") == req["clock_ms"],
               f"read: the answer's clock_ms (the library's clock while it ran) must be exactly the request's "
               f"{req['clock_ms']}, got {ok.get('clock_ms')!r}", line)


# --- the scenario ---------------------------------------------------------------

class Clock:
    """Logical time for an adapter that takes it, real waits otherwise. In
    the clock mode (`server` is the ServerClock) every request carries
    clock_ms = EPOCH + now."""

    def __init__(self, logical, server=None):
        self.logical = logical
        self.server = server
        self.now = 1000

    def now_ms(self):
        return self.now if self.logical else None

    def clock_ms(self):
        return EPOCH + self.now

    def wait(self, ms):
        if self.logical:
            self.now += ms
        else:
            time.sleep(ms / 1000)

    def wait_until(self, ms):
        """Logical time: to `ms` if that is later."""
        self.now = max(self.now, ms)


def choose_clock(a, args, caps, line):
    """The mode the hello and the options make (the module's docstring), as
    the Clock the scenario runs on; it is given to the Adapter, which adds
    clock_ms to each request in the clock mode."""
    follows = caps.get("follows_clock", False)
    expect(isinstance(follows, bool), "hello: capabilities.follows_clock must be true or false", line)
    want = follows and caps["logical_time"] and args.clock != "off"
    if args.clock == "on":
        expect(follows and caps["logical_time"],
               "--clock: the hello must say logical_time: true and follows_clock: true", line)
        if args.server_clock is None:
            raise Bad("--clock needs a valkey-server this script starts under libfaketime "
                      "(no --server, and libfaketime installed or $ACKGAP_LIBFAKETIME)")
    if want and args.server_clock is not None:
        clock = Clock(True, args.server_clock)
        mode = f"clock (clock_ms = {EPOCH} + now_ms, the server under libfaketime)"
    elif follows:
        clock = Clock(False)
        if args.clock == "off":
            why = "--no-clock"
        elif args.own_server is None:
            why = "--server given"
        elif args.server_clock is None:
            why = "no libfaketime"
        else:
            why = "logical_time is false"
        mode = f"server clock (follows_clock, but {why}: no clock_ms, now_ms null)"
    else:
        clock = Clock(caps["logical_time"])
        mode = "logical time" if clock.logical else "server clock"
    a.clock = clock
    return clock, mode


def scenario(a, args):
    # A worker whose own URL (hello's `connections`) points at a closed port:
    # its calls must be `unavailable`, and cut no other worker's.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    down = f"redis://127.0.0.1:{closed.getsockname()[1]}/"
    closed.close()
    hello, line = a.call("hello", protocol=1, server=args.server, queue=args.queue, connections={"w-down": down})
    caps = hello["capabilities"]
    ops = set(caps["operations"])
    fences = caps["fences"]
    # Optional, true when absent: false says a second enqueue of an id is a
    # second message (the queue has no duplicate-id refusal).
    dedup = caps.get("dedup", True)
    expect(isinstance(dedup, bool), "hello: capabilities.dedup must be true or false", line)
    clock, mode = choose_clock(a, args, caps, line)
    lease_ms = 1000 if clock.logical and clock.server is None else args.lease_ms
    print(f"# {hello['name']}: {mode}, "
          f"{'fences' if fences else 'does not fence'}, "
          f"{'refuses duplicate ids' if dedup else 'dedup: false'}, lease_ms {lease_ms}; "
          f"optional operations: {sorted(ops - set(REQUIRED)) or 'none'}", flush=True)

    def step(title):
        print(f"# {title}", flush=True)

    step("the same answers every adapter gives: a second hello, a malformed request, an unknown op")
    a.send("hello", protocol=1, server=args.server, queue=args.queue)
    _, _, ans, line = a.receive()
    expect(ans.get("error", {}).get("kind") == "refused", "a second hello is refused", line)
    a.send("enqueue", "producer", malformed=True, job="JOB-0", payload="payload-0-0", delay_ms=0,
           now_ms=clock.now_ms())
    _, _, ans, line = a.receive()
    expect(ans.get("error", {}).get("kind") == "refused",
           "an enqueue without max_attempts is malformed: refused, nothing sent", line)
    a.send("teleport", "w0", malformed=True)
    _, _, ans, line = a.receive()
    expect(ans.get("error", {}).get("kind") == "unsupported", "an unknown op is unsupported", line)

    step("clear")
    ok, line = a.call("clear", "checker")
    payloads = {"JOB-1": "payload-1-0", "JOB-2": "payload-2-0"}
    step("enqueue two jobs" + (", then JOB-1 again" if dedup else ""))
    for job in ("JOB-1", "JOB-2"):
        ok, line = a.call("enqueue", "producer", job=job, payload=payloads[job], max_attempts=3, delay_ms=0,
                          now_ms=clock.now_ms())
        expect(ok == "enqueued", f"a new id must be enqueued, got {ok!r}", line)
    if dedup:
        ok, line = a.call("enqueue", "producer", job="JOB-1", payload="payload-1-dup", max_attempts=3, delay_ms=0,
                          now_ms=clock.now_ms())
        expect(ok == "duplicate", f"an id enqueued before must be a duplicate, got {ok!r}", line)
    else:
        step("SKIPPED: the duplicate enqueue of JOB-1 (the hello says dedup: false: "
             "a second enqueue of an id is a second message, which the queue does not refuse)")

    if fences:
        step("complete a job never leased: fenced, state pending (current: 0 by the doc, not judged)")
        ok, line = a.call("complete", "w0", job="JOB-2", token=1)
        fenced_as(ok, "pending", "a complete of a job never leased", line)

    step("lease by a worker whose connection cannot open (hello's connections): unavailable")
    a.send("lease", "w-down", lease_ms=lease_ms, now_ms=clock.now_ms())
    _, _, ans, line = a.receive()
    expect(ans.get("error", {}).get("kind") == "unavailable",
           "a call that could not be sent is an error of kind unavailable", line)

    step("lease, complete, complete again with the same token")
    first, line = a.call("lease", "w0", lease_ms=lease_ms, now_ms=clock.now_ms())
    expect(first is not None and first["job"] in payloads, "two jobs are ready: a lease must grant one", line)
    expect(first["payload"] == payloads[first["job"]], "the payload must be the first enqueue's", line)
    j1 = first["job"]
    j2 = "JOB-2" if j1 == "JOB-1" else "JOB-1"
    ok, line = a.call("complete", "w0", job=j1, token=first["token"])
    expect(ok["outcome"] == "settled", f"a current lease's complete must settle, got {ok}", line)
    ok, line = a.call("complete", "w0", job=j1, token=first["token"])
    expect(ok["outcome"] != "settled", f"a second complete must not settle again, got {ok}", line)
    if fences:
        expect(ok["outcome"] in ("already_settled", "fenced"),
               f"a fencing queue answers a stale complete already_settled or fenced, got {ok}", line)
        if ok["outcome"] == "fenced":
            fenced_as(ok, "done", "a complete of a done job", line)

    step(f"lease {j2}" + (", fail it, lease it again" if "fail" in ops else ""))
    lease, line = a.call("lease", "w1", lease_ms=lease_ms, now_ms=clock.now_ms())
    expect(lease is not None and lease["job"] == j2, f"{j2} is the one job ready", line)
    if "fail" in ops:
        ok, line = a.call("fail", "w1", job=j2, token=lease["token"], retry_delay_ms=0, now_ms=clock.now_ms())
        expect(ok["outcome"] == "requeued", f"a first failure of 3 attempts requeues, got {ok}", line)
        old = lease["token"]
        lease, line = a.call("lease", "w0", lease_ms=lease_ms, now_ms=clock.now_ms())
        expect(lease is not None and lease["job"] == j2, f"the failed {j2} must be ready again", line)
        expect(lease["token"] != old, "a new delivery needs a new token", line)
    else:
        old = None
    token = lease["token"]
    deadline = lease["deadline_ms"]

    if "extend" in ops:
        step("extend")
        clock.wait(lease_ms // 4)
        ok, line = a.call("extend", "w0", job=j2, token=token, lease_ms=lease_ms, now_ms=clock.now_ms())
        expect(ok["outcome"] == "extended", f"a current lease extends, got {ok}", line)
        expect(ok["deadline_ms"] >= deadline, "an extended deadline does not move back", line)
        deadline = ok["deadline_ms"]

    step("two requests in flight: read and lease (nothing is ready)")
    r1 = a.send("read", "checker")
    r2 = a.send("lease", "w1", lease_ms=lease_ms, now_ms=clock.now_ms())
    got = {}
    for _ in range(2):
        rid, op, ans, line = a.receive()
        expect("ok" in ans, f"{op}: error answer {ans.get('error')}", line)
        got[rid] = (ans["ok"], line)
    expect(got[r2][0] is None, f"no job is ready: the lease must be null, got {got[r2][0]}", got[r2][1])
    expect(got[r1][0]["jobs"].get(j2) == "active", f"{j2} is leased: read must say active", got[r1][1])

    reaped = False
    if "reap" in ops and clock.server is not None and deadline and deadline - 1 >= clock.now:
        step("reap before the lease's deadline: it takes nothing")
        clock.wait_until(deadline - 1)
        ok, line = a.call("reap", "reaper", limit=100, now_ms=clock.now_ms())
        expect(not [r for r in ok if r["job"] == j2],
               f"{j2}'s lease lasts until {deadline}: a reap at {clock.now} must not take it, got {ok}", line)
    if "reap" in ops:
        step("reap after the lease expired (a two-phase reaper may need a second call)")
        if clock.server is not None and deadline:
            # The clock mode: just past the deadline (a queue that counts a
            # lease expired only after it needs the +1), time being free.
            clock.wait_until(deadline + 1 - lease_ms)
        elif not clock.logical and deadline:
            # A queue that rounds leases up (whole seconds) reports the true
            # deadline: wait for it, on this machine's clock, at most 30 s.
            clock.wait(max(0, min(30_000, deadline - int(time.time() * 1000))))
        for attempt in range(4):
            clock.wait(lease_ms + (0 if clock.logical else 50))
            ok, line = a.call("reap", "reaper", limit=100, now_ms=clock.now_ms())
            hits = [r for r in ok if r["job"] == j2]
            expect(all(r["job"] == j2 for r in ok), f"only {j2} was leased, reap gave {ok}", line)
            if hits:
                expect(hits[0]["to"] == "pending", f"{j2} has attempts left: reaped to pending, got {hits}", line)
                reaped = True
                break
        expect(reaped, f"{j2}'s lease expired long ago, four reaps did not take it back", line)
        if "extend" in ops:
            step("extend with the reaped lease's token")
            ok, line = a.call("extend", "w0", job=j2, token=token, lease_ms=lease_ms, now_ms=clock.now_ms())
            expect(ok["outcome"] != "extended", f"a reaped lease must not extend, got {ok}", line)
            if fences:
                fenced_as(ok, "pending", "an extend of a reaped lease", line)
        if fences:
            step("complete with the reaped lease's token: fenced, state pending")
            ok, line = a.call("complete", "w0", job=j2, token=token)
            fenced_as(ok, "pending", "a complete of a reaped lease", line)

    step("read")
    ok, line = a.call("read", "checker")
    want = {j1: "done", j2: "pending" if reaped else "active"}
    expect(ok["jobs"] == want, f"read must say {want}", line)
    expect(ok["problems"] == [], "no structure problems expected", line)
    for job, payload in ok.get("payloads", {}).items():
        expect(payloads.get(job) == payload,
               f"read: {job}'s payload must be its first enqueue's {payloads.get(job)!r} "
               "(a duplicate changes nothing)", line)

    step("enqueue JOB-3 with one attempt; lease and settle what is ready" +
         (" (fail JOB-3: dead)" if "fail" in ops else ""))
    ok, line = a.call("enqueue", "producer", job="JOB-3", payload="payload-3-0", max_attempts=1, delay_ms=0,
                      now_ms=clock.now_ms())
    expect(ok == "enqueued", f"JOB-3 is new, got {ok!r}", line)
    want = {j1: "done", "JOB-3": "dead" if "fail" in ops else "done"}
    if reaped:
        want[j2] = "done"
    for _ in range(5):
        lease, line = a.call("lease", "w1", lease_ms=lease_ms, now_ms=clock.now_ms())
        if lease is None:
            break
        expect(lease["job"] in want and lease["job"] != j1, f"unexpected lease of {lease['job']}", line)
        if lease["job"] == "JOB-3" and "fail" in ops:
            ok, line = a.call("fail", "w1", job="JOB-3", token=lease["token"], retry_delay_ms=0,
                              now_ms=clock.now_ms())
            expect(ok["outcome"] == "dead", f"a job of one attempt dies on its first failure, got {ok}", line)
        else:
            ok, line = a.call("complete", "w1", job=lease["job"], token=lease["token"])
            expect(ok["outcome"] == "settled", f"a current lease settles, got {ok}", line)
    if fences:
        step(f"stale settles of the done {j1}" + (f" and {j2}" if reaped and old is not None else ""))
        if "fail" in ops:
            ok, line = a.call("fail", "w0", job=j1, token=first["token"], retry_delay_ms=0, now_ms=clock.now_ms())
            fenced_as(ok, "done", "a fail of a done job (already_settled is complete's answer only)", line)
        if "extend" in ops:
            ok, line = a.call("extend", "w0", job=j1, token=first["token"], lease_ms=lease_ms,
                              now_ms=clock.now_ms())
            fenced_as(ok, "done", "an extend of a done job", line)
        if reaped and old is not None:
            ok, line = a.call("complete", "w1", job=j2, token=old)
            expect(ok["outcome"] in ("already_settled", "fenced"),
                   f"a complete of a done job with an older lease's token: already_settled or fenced, got {ok}",
                   line)
            if ok["outcome"] == "fenced":
                fenced_as(ok, "done", "a complete of a done job with an older lease's token", line)
    ok, line = a.call("read", "checker")
    if not reaped:
        want[j2] = "active"
    expect(ok["jobs"] == want, f"read must say {want}", line)

    step("clear, read")
    ok, line = a.call("clear", "checker")
    ok, line = a.call("read", "checker")
    expect(ok["jobs"] == {}, "after clear the queue knows no job", line)


def crash_scenario(a, args):
    """A worker dies holding a job: is the job delivered again?

    enqueue JOB-1; w0 leases it; w0 crashes (`crash`, when the hello lists
    it; otherwise w0 just stops calling); then, until --recover-s, time
    passes in steps of half a lease, the reaper runs (when the adapter has
    one) and w1 polls. Prints one last line that a test reads:
    `CRASH: recovered after N ms` or `CRASH: not recovered within N ms (read
    says STATE)`. Either is a finding about the queue, not a failure of the
    adapter: the exit status is 0 for both."""
    hello, line = a.call("hello", protocol=1, server=args.server, queue=args.queue)
    caps = hello["capabilities"]
    ops = set(caps["operations"])
    clock, mode = choose_clock(a, args, caps, line)
    lease_ms = 1000 if clock.logical and clock.server is None else args.lease_ms
    print(f"# {hello['name']}: crash scenario, {mode}, lease_ms {lease_ms}, "
          f"{'crash sent' if 'crash' in ops else 'no crash operation: w0 stops calling'}", flush=True)
    a.call("clear", "checker")
    ok, line = a.call("enqueue", "producer", job="JOB-1", payload="payload-1-0", max_attempts=3, delay_ms=0,
                      now_ms=clock.now_ms())
    expect(ok == "enqueued", f"JOB-1 is new, got {ok!r}", line)
    first, line = a.call("lease", "w0", lease_ms=lease_ms, now_ms=clock.now_ms())
    expect(first is not None and first["job"] == "JOB-1", "JOB-1 is ready: w0 must lease it", line)
    if "crash" in ops:
        ok, line = a.call("crash", "w0")
        expect(ok is None, "crash answers null", line)
    started = time.monotonic()
    waited = 0
    while waited < args.recover_s * 1000:
        clock.wait(lease_ms // 2)
        waited = clock.now - 1000 if clock.logical else int((time.monotonic() - started) * 1000)
        if "reap" in ops:
            a.call("reap", "reaper", limit=100, now_ms=clock.now_ms())
        again, line = a.call("lease", "w1", lease_ms=lease_ms, now_ms=clock.now_ms())
        if again is not None:
            expect(again["job"] == "JOB-1", f"only JOB-1 exists, leased {again['job']}", line)
            expect(again["token"] != first["token"], "a new delivery needs a new token", line)
            ok, line = a.call("complete", "w1", job="JOB-1", token=again["token"])
            expect(ok["outcome"] == "settled", f"the new lease settles, got {ok}", line)
            print(f"CRASH: recovered after {waited} ms", flush=True)
            return
    ok, line = a.call("read", "checker")
    print(f"CRASH: not recovered within {waited} ms (read says {ok['jobs'].get('JOB-1', 'nothing')})", flush=True)


# --- the doc's examples ----------------------------------------------------------

def check_doc(schema):
    """Validates every ```jsonl block of the doc: each line a message; each
    answer checked against the op of the request with its id in the block."""
    with open(DOC_PATH) as f:
        text = f.read()
    blocks = re.findall(r"```jsonl\n(.*?)```", text, re.S)
    n = 0
    for block in blocks:
        ops = {}
        for line in block.strip().splitlines():
            msg = json.loads(line)
            schema.check(msg, None, line)
            if "op" in msg:
                ops[msg["id"]] = msg["op"]
            else:
                op = ops.get(msg["in_reply_to"])
                expect(op is not None, "an example answer with no request in its block", line)
                if "ok" in msg:
                    schema.check(msg["ok"], f"ok_{op}", line)
                    check_ok(op, msg["ok"], line)
            n += 1
    print(f"doc: {n} example lines in {len(blocks)} blocks are valid; {schema.note}")


# --- a server of our own ---------------------------------------------------------

class ServerClock:
    """The control file of a valkey-server under libfaketime: `+0` (real
    time) or a frozen absolute instant with milliseconds, rewritten with a
    rename so that the server (which reads it at every clock call,
    FAKETIME_NO_CACHE) never sees half a line."""

    def __init__(self, path):
        self.path = path
        self.ms = None
        self.write("+0")

    def write(self, text):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, self.path)

    def set(self, ms):
        if ms == self.ms:
            return
        s, frac = divmod(ms, 1000)
        self.write(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s)) + f".{frac:03d}")
        self.ms = ms


def libfaketime():
    path = os.environ.get("ACKGAP_LIBFAKETIME") or LIBFAKETIME
    return path if os.path.isfile(path) else None


def start_valkey(faketime=None):
    """A valkey-server on a free port: (process, URL, its directory, its
    ServerClock or None). Under libfaketime (`faketime`, the library's
    path) its clock is the control file's, on real time until set."""
    try:
        binary = subprocess.run([os.path.join(ROOT, "ci", "find-valkey")], check=True, capture_output=True,
                                text=True).stdout.strip()
    except subprocess.CalledProcessError as e:
        sys.exit(f"conformance: no valkey-server (pass --server URL, or run ci/install-valkey):\n{e.stderr}")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tmp = tempfile.mkdtemp(prefix="ackgap-conformance-")
    env, clock = None, None
    if faketime is not None:
        clock = ServerClock(os.path.join(tmp, "clock"))
        env = dict(os.environ, LD_PRELOAD=faketime, FAKETIME_TIMESTAMP_FILE=clock.path, FAKETIME_NO_CACHE="1",
                   FAKETIME_DONT_FAKE_MONOTONIC="1", TZ="UTC")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(64).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/", tmp, clock
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit(f"conformance: {binary} did not answer PING on port {port} within 10 s")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", help="a running server's URL (default: start a valkey-server)")
    p.add_argument("--queue", default="ackgap-conformance")
    p.add_argument("--lease-ms", type=int, default=300, help="lease length for a server-clock adapter")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for one answer")
    p.add_argument("--check-doc", action="store_true", help="validate the doc's examples and exit")
    p.add_argument("--crash", action="store_true",
                   help="run the crash scenario instead: does a job held by a dead worker come back?")
    p.add_argument("--recover-s", type=float, default=30.0, help="how long the crash scenario waits for recovery")
    p.add_argument("--clock", dest="clock", action="store_const", const="on", default="auto",
                   help="insist on the clock mode: the server under libfaketime, clock_ms on every request "
                        "(the default for an adapter whose hello says follows_clock, when no --server is given)")
    p.add_argument("--no-clock", dest="clock", action="store_const", const="off",
                   help="drive a follows_clock adapter on the server's clock (no clock_ms), as the chaos runner does")
    p.add_argument("command", nargs="*", help="the adapter command (after --)")
    args = p.parse_args()
    schema = Schema()
    if args.check_doc:
        try:
            check_doc(schema)
        except Bad as e:
            sys.exit(f"conformance: doc example: {e}")
        return
    if not args.command:
        p.error("an adapter command is needed (after --)")
    command = " ".join(args.command)
    server = None
    args.own_server = args.server_clock = None
    if args.clock == "on" and args.server is not None:
        p.error("--clock sets the server's clock: it needs the server this script starts (no --server)")
    if args.server is None:
        faketime = libfaketime() if args.clock != "off" else None
        if args.clock == "on" and faketime is None:
            p.error(f"--clock needs libfaketime ({LIBFAKETIME}, or $ACKGAP_LIBFAKETIME)")
        server, args.server, tmp, args.server_clock = start_valkey(faketime)
        args.own_server = server
    print(f"# adapter: {command}\n# server: {args.server}\n# {schema.note}", flush=True)
    a = None
    status = 0
    try:
        a = Adapter(command, schema, args.timeout)
        (crash_scenario if args.crash else scenario)(a, args)
        a.close()
        print(f"PASS: {a.exchanges} exchanges, the adapter exited on EOF", flush=True)
    except Bad as e:
        print(f"FAIL: {e}", file=sys.stderr, flush=True)
        status = 1
    finally:
        if a is not None and a.proc.poll() is None:
            os.killpg(a.proc.pid, signal.SIGKILL)
            a.proc.wait()
        if server is not None:
            server.terminate()
            server.wait()
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
