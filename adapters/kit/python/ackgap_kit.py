"""The ackgap adapter protocol's plumbing for Python adapters, written once.

An adapter built on this kit holds only its queue's calls: a subclass of
`Queue` with one method per operation it supports. The kit owns everything
else, the same way for every adapter (docs/adapter-protocol.md):

- the `hello`: the protocol version is checked (`refused` otherwise), the
  server URL and the queue's name are validated and handed to
  `Queue.setup`, the capabilities are the subclass's attributes
  (`logical_time`, `follows_clock`, `fences`, `dedup`);
- **the clock** (docs/adapter-protocol.md, Time): an adapter whose library
  reads the process's own clock says `logical_time = True; follows_clock =
  True` and nothing else. Then, for each request carrying `clock_ms`, the
  kit freezes the process-wide clock (`time.time()`, `datetime.now()`, ...)
  at exactly that instant with time-machine before the request runs, and
  travels back to real time on a request without it; on a request carrying
  `now_ms` too it turns the answer's `deadline_ms` and `ready_at_ms` (the
  library's absolute ms) into logical ms, `value - (clock_ms - now_ms)`
  (0, "unknown", stays 0); and a `read` answer gains `clock_ms`, the
  library's `time.time()` in ms while it ran, so that a test can see that
  the library's clock is the walk's instant. time-machine is imported only
  when a `clock_ms` comes (a venv without it works on real time);
- a second `hello` is `refused` ("hello was already answered") and changes
  nothing; any request before the first `hello` is `refused`;
- an `op` the adapter does not list is `unsupported`;
- **one rule for errors**: a malformed request (a field missing or of the
  wrong type, checked here before the adapter sees it) is `refused`, since
  nothing was sent; a `Failure` raised by the adapter is its own kind; any
  other exception is `unknown`, because the call may already have reached
  the server (the adapter raises `Failure("unavailable", ...)` itself when
  it knows that nothing was sent, e.g. a failed connect);
- one thread per worker name: a worker's requests run one at a time and in
  order, on that worker's own session (`Queue.open(worker, url)`, opened on
  first use, with `connections[worker]` from the hello when given);
  different workers run concurrently;
- `crash`: the worker's session is dropped without any shutdown path
  (`Queue.crash(session)`: close sockets, stop heartbeats, never put jobs
  back), and the worker's next request opens a fresh session, as a
  restarted worker process would;
- answers are written one whole line at a time under a lock, and flushed;
- **the user's own app** (`ackgap ... --app MODULE:ATTR`, given to the
  adapter as $ACKGAP_APP): `load_app()` imports it the way `celery -A`
  does, with the working directory on sys.path, and an adapter that
  loaded one sets `self.app_report` (`app_report()` builds it: the spec,
  what the object is, the library versions, the user's settings it kept
  and what it overrode to drive the queue step by step), which the hello
  answers as `app`. ackgap refuses a hello without it when it asked for
  an app;
- on EOF the process exits at once, without closing sessions cleanly: a
  clean close of several of these libraries puts held jobs back, and the run
  is over anyway.

Only the standard library is used here, so that every adapter's venv can
import it (the adapters' `run` scripts put this directory on PYTHONPATH);
time-machine (PyPI `time-machine`, pinned in each following adapter's
requirements.txt) is imported lazily, the first time a request carries a
`clock_ms`.
"""

import asyncio
import datetime
import inspect
import json
import os
import queue as queue_mod
import re
import sys
import threading
import time
import traceback

PROTOCOL = 1
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
REQUIRED_OPERATIONS = ("enqueue", "lease", "complete", "read", "clear")
ALL_OPERATIONS = ("enqueue", "lease", "complete", "fail", "extend", "reap", "read", "clear", "crash")

# Each operation's fields and their types, as the protocol states them. A
# request lacking one, or carrying one of another type, is refused before
# the adapter sees it. `now_ms` may be null (the server's clock).
FIELDS = {
    "enqueue": {"job": str, "payload": str, "max_attempts": int, "delay_ms": int},
    "lease": {"lease_ms": int},
    "complete": {"job": str, "token": int},
    "fail": {"job": str, "token": int, "retry_delay_ms": int},
    "extend": {"job": str, "token": int, "lease_ms": int},
    "reap": {"limit": int},
    "read": {},
    "clear": {},
    "crash": {},
}
TIMED = {"enqueue", "lease", "fail", "extend", "reap"}
# The instants an answer may carry (lease, extend: deadline_ms; fail:
# ready_at_ms): the library's absolute ms, made logical by the kit when the
# request carried both now_ms and clock_ms (the protocol's rule 3).
INSTANTS = ("deadline_ms", "ready_at_ms")
# How long a change of the clock waits for the requests in flight (which
# run at the clock they were sent at) before it moves the clock anyway.
CLOCK_WAIT_S = 10.0


APP_ENV = "ACKGAP_APP"


def app_spec():
    """The user's app asked for ($ACKGAP_APP, `MODULE:ATTR`), or None."""
    spec = os.environ.get(APP_ENV, "").strip()
    return spec or None


def load_app(spec=None):
    """The object `MODULE:ATTR` names ($ACKGAP_APP by default; None when
    no app is asked for), imported with the current working directory first
    on sys.path, as `celery -A` finds a project's module. ATTR may be dotted
    (`tasks:settings.Worker`). A module that does not import, or an
    attribute it does not have, is `refused`, naming the module, the
    attribute and what was found."""
    import importlib

    spec = spec if spec is not None else app_spec()
    if spec is None:
        return None
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise refused(f"${APP_ENV}={spec!r}: expected MODULE:ATTR, e.g. myproj.celery:app")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import error is the user's module's
        raise refused(f"--app {spec}: cannot import module {module_name!r} (from {cwd} and sys.path): "
                      f"{type(e).__name__}: {e}") from e
    walked = module_name
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = sorted(n for n in dir(obj) if not n.startswith("_"))
            raise refused(f"--app {spec}: {walked} has no attribute {part!r}; it has: "
                          f"{', '.join(found[:40]) or 'nothing public'}")
        obj = getattr(obj, part)
        walked = f"{walked}.{part}"
    return obj


def app_report(spec, kind, packages, settings, overridden):
    """The hello's `app`: `spec` as asked, what the object is (`kind`), the
    installed versions of `packages` (distribution names), the user's
    `settings` kept (name -> value) and what was `overridden` (name ->
    the value used and why), every value as text."""
    import importlib.metadata as metadata

    versions = {}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    text = lambda d: {str(k): str(v) for k, v in d.items()}  # noqa: E731
    return {"spec": spec, "kind": kind, "versions": versions, "settings": text(settings),
            "overridden": text(overridden)}


class Failure(Exception):
    """An error answer of the protocol's kind `kind`."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


def refused(message):
    return Failure("refused", message)


def unavailable(message):
    return Failure("unavailable", message)


def unknown(message):
    return Failure("unknown", message)


def log(name, *args):
    print(f"{name}-adapter:", *args, file=sys.stderr, flush=True)


class Queue:
    """What an adapter implements. Attributes are the hello's answer; each
    operation is a method `op_<name>(session, req)` returning the `ok`
    value, or raising `Failure`."""

    name = "unnamed"
    logical_time = False
    # True when the library reads this process's clock (time.time(),
    # datetime.now()) and the kit is to set it to each request's clock_ms.
    # With logical_time = True it makes the adapter honour now_ms exactly
    # when requests carry clock_ms (the kit turns the answers' absolute
    # times into logical ones); without clock_ms it runs on real time and
    # now_ms must be null.
    follows_clock = False
    fences = False
    # False for a queue with no duplicate-id refusal: a second enqueue of an
    # id is a second message. ackgap then never sends an id twice. Never
    # fake it with a set of ids the adapter keeps: that is not the queue.
    dedup = True
    # How long past a lease's end (ms) the library may take to recover a
    # delivery it lost track of, when longer than its reaper's own round
    # (RQ: a job left in its intermediate list is failed through a minute
    # after a cleanup first saw it). A chaos run's drain waits that much
    # longer before a job the queue still holds counts as lost. None: none.
    recovery_ms = None
    # The hello's `app` (`app_report(...)`), set by an adapter that loaded
    # the user's app ($ACKGAP_APP) in `setup`; None: its own configuration.
    app_report = None

    def operations(self):
        """The operations this adapter implements: those it has a method
        for, and `crash`, which the kit always honours (it drops the
        session; `crash` below drops whatever else a dead process loses)."""
        return [op for op in ALL_OPERATIONS if op == "crash" or hasattr(self, "op_" + op)]

    def setup(self, server, queue, connections):
        """Called once, at hello, before any session is opened."""
        self.server = server
        self.queue = queue
        self.connections = connections

    def open(self, worker, url):
        """A new session for `worker` on `url`: whatever the operations of
        that worker need (a connection, a library's worker object)."""
        raise NotImplementedError

    def crash(self, session):
        """The worker holding `session` died: drop its state without the
        library's shutdown path (nothing may be put back). The default has
        nothing to drop; override it when a session holds more than sockets
        that a dead process would lose (a heartbeat thread, say)."""


class _Clock:
    """The process-wide clock, frozen by time-machine at a request's
    `clock_ms`, or real. Moved only by the dispatching thread, between
    requests: the explorers send one request at a time and wait for its
    answer, and a move first waits for the requests in flight (see
    `Server.set_clock`)."""

    def __init__(self):
        self.travel = None  # the started time_machine.travel, or None: real time
        self.traveller = None
        self.ms = None

    @staticmethod
    def destination(ms):
        # A naive datetime is UTC to time-machine and, unlike an aware one,
        # sets no TZ (its TZ switch is setenv + tzset, unsafe beside threads).
        # Built from whole seconds and microseconds: the traveller's
        # timestamp is exact integer ns, time.time() reads back exactly ms.
        return datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=ms // 1000, milliseconds=ms % 1000)

    def set(self, ms):
        """Freezes the clock at `ms` (ms since the Unix epoch), or goes back
        to real time when `ms` is None."""
        if ms == self.ms:
            return
        if ms is None:
            self.travel.stop()
            self.travel = self.traveller = None
        elif self.travel is None:
            try:
                import time_machine
            except ImportError as e:
                raise refused("this request carries clock_ms, and following a clock needs the time-machine "
                              f"package (pip install time-machine==3.6.0), which is not importable: {e}") from e
            travel = time_machine.travel(self.destination(ms), tick=False)
            self.traveller = travel.start()
            self.travel = travel
        else:
            self.traveller.move_to(self.destination(ms), tick=False)
        self.ms = ms


def _follows(queue, req):
    """The request's clock_ms when this adapter follows it, else None."""
    clock = req.get("clock_ms")
    if queue.follows_clock and isinstance(clock, int) and not isinstance(clock, bool):
        return clock
    return None


def _logical(queue, req, ok):
    """The answer of a request run at its clock_ms, as the protocol wants it:
    with now_ms too, every instant logical (rule 3); a read says the
    library's clock (its `clock_ms`)."""
    clock = _follows(queue, req)
    if clock is None or not isinstance(ok, dict):
        return ok
    now = req.get("now_ms")
    if isinstance(now, int) and not isinstance(now, bool):
        offset = clock - now
        for key in INSTANTS:
            value = ok.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value != 0:
                if value - offset < 0:
                    raise unknown(f"{key} {value} is before the walk's epoch (clock_ms {clock} - now_ms {now}): "
                                  "the library did not read the clock the kit set")
                ok = dict(ok, **{key: value - offset})
    if req.get("op") == "read":
        ok = dict(ok, clock_ms=int(time.time() * 1000))
    return ok


class _Worker:
    """One worker name: a thread running its requests in order. An adapter
    on an asyncio library may make `open`, `crash` and its `op_` methods
    coroutines: each worker thread runs them on an event loop of its own,
    so a session's connections stay on the loop that made them."""

    def __init__(self, server, name):
        self.server = server
        self.name = name
        self.session = None
        self.event_loop = None
        self.inbox = queue_mod.SimpleQueue()
        self.thread = threading.Thread(target=self.serve, name=f"worker-{name}", daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            req = self.inbox.get()
            try:
                self.server.answer(req, self.run, req)
            finally:
                self.server.finished()

    def wait(self, value):
        """`value`, or what it resolves to on this thread's loop."""
        if not inspect.isawaitable(value):
            return value
        if self.event_loop is None:
            self.event_loop = asyncio.new_event_loop()
        return self.event_loop.run_until_complete(value)

    def run(self, req):
        q = self.server.queue
        op = req["op"]
        if op == "crash":
            if self.session is not None:
                session, self.session = self.session, None
                self.wait(q.crash(session))
            return None
        if self.session is None:
            url = q.connections.get(self.name, q.server)
            self.session = self.wait(q.open(self.name, url))
        return _logical(q, req, self.wait(getattr(q, "op_" + op)(self.session, req)))


class Server:
    def __init__(self, queue):
        self.queue = queue
        self.out_lock = threading.Lock()
        self.workers = {}
        self.greeted = False
        self.clock = _Clock()
        # Requests handed to a worker thread and not answered yet.
        self.in_flight = 0
        self.idle = threading.Condition()

    def finished(self):
        with self.idle:
            self.in_flight -= 1
            self.idle.notify_all()

    def set_clock(self, ms):
        """Sets the process's clock for the request about to be handed over:
        frozen at `ms`, or real (None). A change waits first for the
        requests in flight to be answered (they run at the clock they were
        sent at), at most CLOCK_WAIT_S."""
        if ms == self.clock.ms:
            return
        with self.idle:
            if not self.idle.wait_for(lambda: self.in_flight == 0, timeout=CLOCK_WAIT_S):
                log(self.queue.name, f"clock moved to {ms} with {self.in_flight} request(s) still in flight "
                                     f"after {CLOCK_WAIT_S} s")
            self.clock.set(ms)

    def send(self, answer):
        line = json.dumps(answer, separators=(",", ":")) + "\n"
        with self.out_lock:
            sys.stdout.write(line)
            sys.stdout.flush()

    def answer(self, req, fn, *args):
        rid = req.get("id")
        try:
            ok = fn(*args)
            self.send({"in_reply_to": rid, "ok": ok})
        except Failure as e:
            self.send({"in_reply_to": rid, "error": {"kind": e.kind, "message": e.message}})
        except Exception as e:  # noqa: BLE001 - the one rule: after sending, unknown
            log(self.queue.name, f"request {rid} ({req.get('op')}): {traceback.format_exc()}")
            self.send({"in_reply_to": rid, "error": {"kind": "unknown", "message": f"{type(e).__name__}: {e}"}})

    def hello(self, req):
        if self.greeted:
            raise refused("hello was already answered; send it once")
        if req.get("protocol") != PROTOCOL:
            raise refused(f"protocol {req.get('protocol')!r} not supported; this adapter speaks {PROTOCOL}")
        server, queue = req.get("server"), req.get("queue")
        if not isinstance(server, str) or not server:
            raise refused("hello: `server` must be a URL string")
        if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
            raise refused(f"hello: `queue` must match [A-Za-z0-9_.-]{{1,64}}, got {queue!r}")
        connections = req.get("connections") or {}
        if not isinstance(connections, dict) or not all(isinstance(v, str) for v in connections.values()):
            raise refused("hello: `connections` must map worker names to URL strings")
        self.queue.setup(server, queue, connections)
        if app_spec() is not None and self.queue.app_report is None:
            raise refused(f"${APP_ENV}={app_spec()} asks for the user's app, and the {self.queue.name} "
                          "adapter does not load one")
        self.greeted = True
        return {
            "name": self.queue.name,
            "capabilities": {
                "operations": self.queue.operations(),
                "logical_time": bool(self.queue.logical_time),
                "follows_clock": bool(self.queue.follows_clock),
                "fences": bool(self.queue.fences),
                "dedup": bool(self.queue.dedup),
                **({"recovery_ms": int(self.queue.recovery_ms)} if self.queue.recovery_ms else {}),
            },
            **({"app": self.queue.app_report} if self.queue.app_report is not None else {}),
        }

    def malformed(self, req):
        """Why `req` cannot be run as it is, or None."""
        op = req.get("op")
        if not isinstance(req.get("id"), int):
            return "a request needs an integer `id`"
        if op not in FIELDS or op not in self.queue.operations():
            return None  # unsupported, answered below
        if not isinstance(req.get("worker"), str):
            return f"{op}: `worker` must be a string"
        for field, kind in FIELDS[op].items():
            value = req.get(field)
            if not isinstance(value, kind) or isinstance(value, bool):
                return f"{op}: `{field}` must be {'an integer' if kind is int else 'a string'}, got {value!r}"
            if kind is int and value < 0:
                return f"{op}: `{field}` must not be negative, got {value}"
        if op in TIMED:
            now = req.get("now_ms")
            if now is not None and (not isinstance(now, int) or isinstance(now, bool) or now < 0):
                return f"{op}: `now_ms` must be null or a non-negative integer, got {now!r}"
        if self.queue.follows_clock:
            clock = req.get("clock_ms")
            if clock is not None and (not isinstance(clock, int) or isinstance(clock, bool) or clock < 0):
                return f"{op}: `clock_ms` must be null or a non-negative integer, got {clock!r}"
            if op in TIMED and req.get("now_ms") is not None and clock is None:
                return (f"{op}: a logical now_ms needs clock_ms: this adapter's library reads its own clock, "
                        "which only a clock_ms sets (without it, now_ms must be null)")
        return None

    def dispatch(self, req):
        op = req.get("op")
        if op == "hello":
            self.answer(req, self.hello, req)
            return
        if not self.greeted:
            self.send({"in_reply_to": req.get("id"),
                       "error": {"kind": "refused", "message": "hello must come first"}})
            return
        why = self.malformed(req)
        if why is not None:
            self.send({"in_reply_to": req.get("id"), "error": {"kind": "refused", "message": why}})
            return
        if op not in self.queue.operations():
            self.send({"in_reply_to": req.get("id"),
                       "error": {"kind": "unsupported",
                                 "message": f"op {op!r} is not one of {self.queue.operations()}"}})
            return
        if self.queue.follows_clock:
            try:
                self.set_clock(_follows(self.queue, req))
            except Failure as e:
                log(self.queue.name, e.message)
                self.send({"in_reply_to": req.get("id"), "error": {"kind": e.kind, "message": e.message}})
                return
        worker = self.workers.get(req["worker"])
        if worker is None:
            worker = self.workers[req["worker"]] = _Worker(self, req["worker"])
        with self.idle:
            self.in_flight += 1
        worker.inbox.put(req)

    def serve(self):
        for raw in sys.stdin.buffer:
            try:
                req = json.loads(raw)
            except ValueError:
                log(self.queue.name, f"not JSON, ignored: {raw[:200]!r}")
                continue
            if not isinstance(req, dict):
                log(self.queue.name, f"not an object, ignored: {raw[:200]!r}")
                continue
            self.dispatch(req)
        # stdin closed: ackgap is done. Exit now, without a clean close of
        # any session (that would put held jobs back) and without waiting
        # for calls still in flight, whose answers nobody reads.
        sys.stdout.flush()
        os._exit(0)


def serve(queue):
    """Speaks the protocol on stdin and stdout for `queue` until EOF."""
    Server(queue).serve()
