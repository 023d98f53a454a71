"""RQ (Redis Queue) 2.12 under ackgap: the adapter protocol
(docs/adapter-protocol.md) on the kit (adapters/kit/python/ackgap_kit.py).
Started by `adapters/rq/run` inside the venv ci/install-adapters builds.

Every operation is RQ's own call, in the order RQ's `SimpleWorker` makes
them for one job (rq/worker/base.py, rq/worker/worker_classes.py); the
adapter never runs a job function, it stands where the function would run.
README.md has the table, the configuration and every `unknown`.

- enqueue: `Queue.enqueue_call(func, args=(payload,), job_id=..., retry=
  Retry(max=max_attempts-1), unique=True)`; a delay is `Queue.create_job` +
  `Queue.schedule_job(job, now+delay, unique=True)` (what `enqueue_in` does,
  but `enqueue_in` ignores `unique`). `DuplicateJobError` is `duplicate`.
- lease: `Queue.dequeue_any([queue], None)` (non-blocking), then
  `worker.prepare_execution(job)` (the Execution and its StartedJobRegistry
  entry, scored now + the heartbeat TTL) and `worker.prepare_job_execution(
  job, True)` (status started, out of the intermediate list). The heartbeat
  TTL is the lease: `get_heartbeat_ttl` is RQ's hook for it.
- complete: `worker.handle_execution_ended` + `worker.handle_job_success`.
- fail: `worker.handle_execution_ended` + `worker.handle_job_failure` (RQ
  retries when `job.retries_left` > 0, else the job fails).
- extend: `worker.maintain_heartbeats(job)` (the monitor's heartbeat).
- reap: `RQScheduler.acquire_locks` + `enqueue_scheduled_jobs` (due delayed
  jobs to the queue), `StartedJobRegistry.cleanup()` and
  `IntermediateQueue.cleanup(worker, queue)`: RQ's maintenance.

With the user's own app (`ackgap ... --app MODULE:ATTR`, $ACKGAP_APP), the
attribute is either a job function decorated with RQ's `@job(...)` (its
timeout, result_ttl, ttl, failure_ttl and queue_class are what its
`.delay()` would enqueue with, and the adapter enqueues with them) or an
`rq.Queue` (an instance: its class, job_class, serializer and
default_timeout; or a Queue subclass). The adapter overrides what it must,
each named in the hello's `app`: the connection (the server ackgap runs,
no redis-py retries), the queue name (the hello's), the function (never
run: the adapter settles where it would return or raise), the retries
(ackgap's max_attempts, as `Retry(max=max_attempts - 1)`), the heartbeat
TTL (the lease ackgap asks for), and the worker (a SimpleWorker that never
runs RQ's maintenance on its own, nor callbacks).
"""

import itertools
import logging
import math
import os
import threading
import time
import uuid
from datetime import timedelta

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry as RedisRetry

import ackgap_kit
from rq import Queue, Retry
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus, validate_job_id
from rq.registry import StartedJobRegistry
from rq.scheduler import RQScheduler
from rq.utils import now
from rq.worker import SimpleWorker

# The function every job names. It is never imported or run: the adapter
# settles jobs itself, where the function's return or raise would.
FUNC = "ackgap_rq_never_run.run"
# redis-py's reply wait. RQ's Worker raises a lower one to worker_ttl - 15 + 10
# (Worker._set_connection); WORKER_TTL keeps that at 11 s.
SOCKET_TIMEOUT_S = float(os.environ.get("ACKGAP_RQ_SOCKET_TIMEOUT_S", "10"))
WORKER_TTL = 16
# A worker never runs RQ's maintenance on its own (the first loop and every
# maintenance_interval in Worker.work): recovery is the explicit reap.
MAINTENANCE_INTERVAL = 10**9

# Where RQ keeps a job (rq/registry.py, rq/queue.py), as the protocol names
# the state; a job in several places takes the first one's.
PLACES = [
    ("queue", "pending"),
    ("scheduled", "pending"),
    ("deferred", "pending"),
    ("intermediate", "active"),
    ("wip", "active"),
    ("finished", "done"),
    ("failed", "dead"),
    ("canceled", "dead"),
]
STATUS = {
    "queued": "pending",
    "scheduled": "pending",
    "deferred": "pending",
    "created": "pending",
    "started": "active",
    "finished": "done",
    "failed": "dead",
    "stopped": "dead",
    "canceled": "dead",
}

# --- I/O errors RQ swallows ---------------------------------------------------
# handle_job_failure suppresses ConnectionError around one execute and logs
# and drops any exception of the other, so its return does not say whether
# its writes happened. Every connection the adapter's clients open counts the
# errors it meets in the calling thread (one thread per worker name, the
# kit's); an operation that met one answers `unknown`.
_io = threading.local()


def io_errors():
    return getattr(_io, "errors", 0)


class CountingConnection(redis.Connection):
    def send_packed_command(self, *args, **kwargs):
        try:
            return super().send_packed_command(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            _io.errors = io_errors() + 1
            raise

    def read_response(self, *args, **kwargs):
        try:
            return super().read_response(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            _io.errors = io_errors() + 1
            raise


def client_for(url):
    """A redis-py client for `url`, one attempt per command (no silent resend)."""
    return redis.Redis.from_url(
        url,
        connection_class=CountingConnection,
        retry=RedisRetry(NoBackoff(), 0),
        retry_on_timeout=False,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S,
    )


def ttl_s(lease_ms):
    """The heartbeat TTL for a lease of `lease_ms`: RQ scores an entry
    floor(now in s) + TTL (current_timestamp), so the lease lasts between
    TTL - 1 and TTL seconds; one second more makes it at least `lease_ms`."""
    return math.ceil(lease_ms / 1000) + 1


def enc(name):
    """`name` ([A-Za-z0-9_.-]) in RQ's job-id alphabet ([A-Za-z0-9_-]),
    injectively: `_` is always followed by u or d."""
    return name.replace("_", "_u").replace(".", "_d")


class AckgapWorker(SimpleWorker):
    """RQ's SimpleWorker whose heartbeat TTL (the StartedJobRegistry score's
    distance from now, and so the lease) is the lease ackgap asks for. RQ's
    own get_heartbeat_ttl is job.timeout + 60 s (at least 60 s)."""

    lease_ttl_s = 1

    def get_heartbeat_ttl(self, job):
        return self.lease_ttl_s


class Session:
    """One worker name: its client, its RQ Worker (one identity), its
    scheduler (reaper only)."""

    def __init__(self, adapter, worker, url):
        self.name = worker
        self.client = client_for(url)
        self.ensure_connected()
        self.queue = adapter.queue_class(adapter.queue, connection=self.client, **adapter.queue_options)
        self.worker = AckgapWorker(
            [self.queue],
            name=f"{adapter.worker_prefix}{worker}-{uuid.uuid4().hex[:8]}",
            connection=self.client,
            worker_ttl=WORKER_TTL,
            maintenance_interval=MAINTENANCE_INTERVAL,
            **adapter.worker_options,
        )
        self.worker.last_cleaned_at = now()
        self.worker.register_birth()
        self.scheduler = None

    def ensure_connected(self):
        """Opens the connection if it is not open; a failure is `unavailable`:
        the operation that follows was certainly not sent."""
        pool = self.client.connection_pool
        try:
            conn = pool.get_connection()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            raise ackgap_kit.unavailable(f"{self.name}: not connected: {e}") from e
        pool.release(conn)

    def drop(self):
        """Closes every socket, without RQ's shutdown path (no register_death,
        nothing put back)."""
        for c in [self.client] + ([self.scheduler.connection] if self.scheduler else []):
            try:
                c.connection_pool.disconnect()
            except Exception:  # noqa: BLE001 - a dead process closes nothing cleanly
                pass


class Lease:
    """What the worker process holds for one delivery between dequeue and
    settle: the Job object and the Execution RQ made for it."""

    def __init__(self, session, job, execution):
        self.session = session
        self.job = job
        self.execution = execution
        # This delivery's success was sent to RQ (handle_job_success ran,
        # whatever it answered) / handled for sure (success or failure).
        self.success_sent = False
        self.completed = False


class Adapter(ackgap_kit.Queue):
    name = "rq"
    # RQ reads the process's clock (rq.utils.now, current_timestamp): the kit
    # sets it to each request's clock_ms (README.md, Time).
    logical_time = True
    follows_clock = True
    fences = False
    # A dequeue whose reply is lost (the server dies between RQ's LMOVE to
    # the intermediate list and the worker's registration) leaves the job in
    # the intermediate list; IntermediateQueue.cleanup fails it through
    # (retrying it) only once a cleanup has seen it there for a minute
    # (should_be_cleaned_up: timedelta(minutes=1)), plus a reap's round.
    recovery_ms = 65_000

    def setup(self, server, queue, connections):
        super().setup(server, queue, connections)
        self.job_prefix = enc(queue) + "_j"
        self.worker_prefix = "ackgap-" + enc(queue) + "_w"
        self.lock = threading.Lock()
        self.deliveries = {}  # job id -> deliveries so far (the tokens)
        self.leases = {}  # (job id, token) -> Lease
        # The RQ classes and options: RQ's defaults, or the user's app's.
        self.queue_class, self.queue_options, self.worker_options, self.job_options = Queue, {}, {}, {}
        app = ackgap_kit.load_app()
        if app is not None:
            self.load_user_app(app)

    def load_user_app(self, app):
        """Reads the user's `@job` function or Queue (see the module's doc):
        what it sets is kept; the hello's `app` says so, and what is
        overridden."""
        from rq.decorators import job as job_decorator

        spec = ackgap_kit.app_spec()
        cells = [c.cell_contents for c in (getattr(getattr(app, "delay", None), "__closure__", None) or ())]
        decorator = next((c for c in cells if isinstance(c, job_decorator)), None)
        queue = None
        if decorator is not None:
            kind = "RQ @job function"
            self.job_options = {"timeout": decorator.timeout, "result_ttl": decorator.result_ttl,
                                "ttl": decorator.ttl, "failure_ttl": decorator.failure_ttl}
            queue = decorator.queue if isinstance(decorator.queue, Queue) else None
            self.queue_class = type(queue) if queue is not None else decorator.queue_class or Queue
            name = queue.name if queue is not None else decorator.queue
        elif isinstance(app, Queue) or (isinstance(app, type) and issubclass(app, Queue)):
            kind = "rq.Queue" if isinstance(app, Queue) else "rq.Queue subclass"
            queue = app if isinstance(app, Queue) else None
            self.queue_class = type(app) if queue is not None else app
            name = queue.name if queue is not None else "(a class)"
        else:
            raise ackgap_kit.refused(f"--app {spec}: a {type(app).__module__}.{type(app).__qualname__}, neither a "
                                     "function decorated with rq's @job(...) nor an rq.Queue (instance or subclass)")
        if queue is not None:
            self.queue_options = {"job_class": queue.job_class, "serializer": queue.serializer,
                                  "default_timeout": queue._default_timeout}
            self.worker_options = {"job_class": queue.job_class, "serializer": queue.serializer}
        self.worker_options["queue_class"] = self.queue_class
        shown = lambda v: getattr(v, "__qualname__", getattr(v, "__name__", v))  # noqa: E731
        kept = {"queue_class": shown(self.queue_class)}
        kept.update({k: shown(v) for k, v in self.queue_options.items()})
        kept.update({k: f"{v} (RQ's default)" if v is None else v for k, v in self.job_options.items()})
        overridden = {
            "connection": f"the server ackgap runs, redis-py retries off, socket timeout {SOCKET_TIMEOUT_S} s",
            "queue name": f"{self.queue!r} (the app's: {name!r})",
            "function": f"{FUNC} (never run: the adapter settles where the function returns or raises)",
            "retry": "Retry(max=max_attempts - 1), ackgap's max_attempts"
                     + (f" (the app's: {decorator.retry!r})" if decorator is not None else ""),
            "heartbeat TTL": "the lease ackgap asks for (RQ's: job timeout + 60 s)",
            "worker": f"a SimpleWorker, worker_ttl {WORKER_TTL} s, maintenance only at ackgap's reap, no "
                      "callbacks run",
        }
        self.app_report = ackgap_kit.app_report(spec, kind, ["rq", "redis"], kept, overridden)

    # --- sessions -------------------------------------------------------
    def open(self, worker, url):
        return Session(self, worker, url)

    def crash(self, session):
        # The process is gone; its leases stay known by (job, token): a
        # settle that names one afterwards is a stale worker's (one stalled
        # past its heartbeat TTL still holds its Execution), sent with that
        # delivery's Execution as RQ's worker would send it. Forgetting the
        # Execution would leave its StartedJobRegistry entry behind, which
        # RQ's worker never does (docs/findings/repro/rq.md).
        session.drop()

    # --- helpers --------------------------------------------------------
    def rq_id(self, job):
        return self.job_prefix + job

    def ours(self, rq_id):
        return rq_id[len(self.job_prefix):] if rq_id.startswith(self.job_prefix) else None

    def begin(self, s):
        s.ensure_connected()
        _io.errors = 0

    def checked(self, what):
        if io_errors():
            raise ackgap_kit.unknown(f"{what}: a connection error during the call (RQ may have dropped it)")

    def lease_for(self, s, req):
        """The Lease a settle names, or a Job fetched by id for a token this
        adapter no longer holds (a crashed worker's, or never handed out).
        None when the job does not exist."""
        with self.lock:
            lease = self.leases.get((req["job"], req["token"]))
        if lease is not None:
            return lease
        try:
            job = Job.fetch(self.rq_id(req["job"]), connection=s.client)
        except NoSuchJobError:
            return None
        return Lease(s, job, None)

    def current(self, s, job_id):
        """For a fenced answer: the job's latest token and its status."""
        with self.lock:
            token = self.deliveries.get(job_id, 0)
        status = s.client.hget(Job.key_for(self.rq_id(job_id)), "status")
        return token, STATUS.get((status or b"").decode(), "pending")

    # --- operations -----------------------------------------------------
    def op_enqueue(self, s, req):
        rq_id = self.rq_id(req["job"])
        try:
            validate_job_id(rq_id)
        except ValueError as e:
            raise ackgap_kit.refused(f"RQ refuses the job id {rq_id!r}: {e}") from e
        attempts = req["max_attempts"]
        if attempts < 1:
            raise ackgap_kit.refused("max_attempts must be at least 1")
        retry = Retry(max=attempts - 1) if attempts > 1 else None
        self.begin(s)
        try:
            if req["delay_ms"] > 0:
                job = s.queue.create_job(FUNC, args=(req["payload"],), job_id=rq_id, retry=retry,
                                         status=JobStatus.SCHEDULED, **self.job_options)
                s.queue.schedule_job(job, now() + timedelta(milliseconds=req["delay_ms"]), unique=True)
            else:
                s.queue.enqueue_call(FUNC, args=(req["payload"],), job_id=rq_id, retry=retry, unique=True,
                                     **self.job_options)
        except DuplicateJobError:
            return "duplicate"
        return "enqueued"

    def op_lease(self, s, req):
        self.begin(s)
        w = s.worker
        w.lease_ttl_s = ttl_s(req["lease_ms"])
        w.heartbeat()
        got = Queue.dequeue_any(w._ordered_queues, None, connection=w.connection,
                                job_class=w.job_class, serializer=w.serializer)
        if got is None:
            self.checked("lease")
            return None
        job, queue = got
        job_id = self.ours(job.id)
        execution = w.prepare_execution(job)
        w.prepare_job_execution(job, remove_from_intermediate_queue=len(w.queues) == 1)
        job.started_at = now()
        with self.lock:
            token = self.deliveries[job_id] = self.deliveries.get(job_id, 0) + 1
            self.leases[(job_id, token)] = Lease(s, job, execution)
        # The registry's score (whole seconds) is the lease's end: read back
        # this execution's own entry, which only its heartbeats rewrite.
        score = s.client.zscore(queue.started_job_registry.key, execution.composite_key)
        self.checked("lease")
        deadline_ms = int(score * 1000) if score is not None else 0
        args = job.args or ("",)
        return {"job": job_id, "token": token, "deadline_ms": deadline_ms, "payload": str(args[0])}

    def op_complete(self, s, req):
        lease = self.lease_for(s, req)
        if lease is None:
            return {"outcome": "missing"}
        if lease.completed:
            # This delivery's success was handled already: RQ's worker never
            # handles one execution's success twice; nothing is sent.
            return {"outcome": "already_settled"}
        self.begin(s)
        w, job = s.worker, lease.job
        job.started_at = job.started_at or now()
        w.execution = lease.execution
        lease.success_sent = True
        w.handle_execution_ended(job, s.queue, job.success_callback_timeout)
        job._status = JobStatus.FINISHED
        w.handle_job_success(job=job, queue=s.queue, started_job_registry=s.queue.started_job_registry)
        self.checked("complete")
        lease.completed = True
        return {"outcome": "settled"}

    def op_fail(self, s, req):
        lease = self.lease_for(s, req)
        if lease is None:
            return {"outcome": "missing"}
        # RQ's worker handles one execution once: a job function returns or
        # raises, never both (perform_job). A fail of a delivery already
        # handled is answered without calling RQ: fenced where the handling
        # is known, refused (certainly not done) where its success was sent
        # and its answer is unknown (RQ's handle_job_success retries its
        # transaction on a lost reply; its worker then fails nothing).
        if lease.completed:
            token, state = self.current(s, req["job"])
            return {"outcome": "fenced", "current": token, "state": state}
        if lease.success_sent:
            raise ackgap_kit.refused("RQ's worker never handles a failure of an execution whose success it sent")
        self.begin(s)
        w, job = s.worker, lease.job
        job.started_at = job.started_at or now()
        delay_s = math.ceil(req["retry_delay_ms"] / 1000)
        if job.retries_left:
            # RQ's retry interval is whole seconds, kept on the job.
            job.retry_intervals = [delay_s]
        # handle_job_failure retries iff job.should_retry, on this object:
        # the same test, made here first, says which it did.
        retried = job.should_retry
        w.execution = lease.execution
        w.handle_execution_ended(job, s.queue, job.failure_callback_timeout)
        job._status = JobStatus.FAILED
        w.handle_job_failure(job=job, queue=s.queue, started_job_registry=s.queue.started_job_registry,
                             exc_string="failed by ackgap")
        after_ms = int(time.time() * 1000)
        ready_ms = after_ms
        if retried and delay_s > 0:
            score = s.client.zscore(s.queue.scheduled_job_registry.key, job.id)
            ready_ms = int(score * 1000) if score is not None else after_ms + delay_s * 1000
        self.checked("fail")
        lease.completed = True
        if retried:
            return {"outcome": "requeued", "ready_at_ms": ready_ms}
        return {"outcome": "dead"}

    def op_extend(self, s, req):
        with self.lock:
            lease = self.leases.get((req["job"], req["token"]))
        if lease is None:
            if not s.client.exists(Job.key_for(self.rq_id(req["job"]))):
                return {"outcome": "missing"}
            # No execution of this token is held: nothing to heartbeat.
            token, state = self.current(s, req["job"])
            return {"outcome": "fenced", "current": token, "state": state}
        self.begin(s)
        w = s.worker
        w.lease_ttl_s = ttl_s(req["lease_ms"])
        w.execution = lease.execution
        w.maintain_heartbeats(lease.job)
        # maintain_heartbeats re-scores the execution's entry with ZADD XX and
        # returns nothing. The entry is this execution's own (its id is a
        # uuid): only its heartbeats write it, so present = extended, to
        # exactly this score; absent = the XX found nothing to extend.
        score = s.client.zscore(s.queue.started_job_registry.key, lease.execution.composite_key)
        self.checked("extend")
        if score is not None:
            return {"outcome": "extended", "deadline_ms": int(score * 1000)}
        token, state = self.current(s, req["job"])
        return {"outcome": "fenced", "current": token, "state": state}

    def op_reap(self, s, req):
        self.begin(s)
        # Due delayed jobs (enqueue delays, retry intervals) to the queue: the
        # scheduler a worker started with --with-scheduler runs every second.
        if s.scheduler is None:
            s.scheduler = RQScheduler([self.queue], connection=s.client)
        s.scheduler.acquire_locks()
        s.scheduler.enqueue_scheduled_jobs()
        # RQ's maintenance: StartedJobRegistry.cleanup retries (retries_left >
        # 0) or fails each job whose score has passed. It returns nothing; the
        # job class records the Job objects it fetched, whose retries_left is
        # what it decided on.
        seen = []

        class Seen(Job):
            @classmethod
            def fetch(cls, id, connection=None, serializer=None):
                job = Job.fetch(id, connection=connection, serializer=serializer)
                # cleanup decides on retries_left as fetched (job.retry then
                # decrements it on this object).
                seen.append((job.id, bool(job.retries_left and job.retries_left > 0)))
                return job

        registry = StartedJobRegistry(self.queue, connection=s.client, job_class=Seen)
        registry.cleanup()
        out = [{"job": self.ours(rq_id) or rq_id, "to": "pending" if retried else "dead"} for rq_id, retried in seen]
        # Jobs dequeued but never registered as started (a worker cut between
        # the two): IntermediateQueue.cleanup fails them through
        # handle_job_failure once they have been there over a minute.
        iq = IntermediateQueue(s.queue.key, s.client)
        before = set(iq.get_job_ids())
        seen_iq = []

        class SeenQ(Queue):
            def fetch_job(self, job_id):
                job = super().fetch_job(job_id)
                if job is not None:
                    # handle_job_failure decides on should_retry as fetched.
                    seen_iq.append((job.id, job.should_retry))
                return job

        q = SeenQ(self.queue, connection=s.client)
        s.worker.execution = None
        iq.cleanup(s.worker, q)
        left = set(iq.get_job_ids())
        for rq_id, retried in seen_iq:
            if rq_id in before - left:
                out.append({"job": self.ours(rq_id) or rq_id, "to": "pending" if retried else "dead"})
        self.checked("reap")
        return out

    def op_read(self, s, req):
        q = self.queue
        keys = {
            "queue": f"rq:queue:{q}",
            "intermediate": IntermediateQueue.get_intermediate_queue_key(f"rq:queue:{q}"),
            "scheduled": f"rq:scheduled:{q}",
            "deferred": f"rq:deferred:{q}",
            "wip": f"rq:wip:{q}",
            "finished": f"rq:finished:{q}",
            "failed": f"rq:failed:{q}",
            "canceled": f"rq:canceled:{q}",
        }
        # The job hashes first, then the places in one MULTI: a job is always
        # in some place once its hash exists (every RQ step that moves a job
        # is one MULTI, or adds before it removes), so a hash seen here and
        # in no place at the MULTI is a real gap.
        hashes = {}
        for key in s.client.scan_iter(match=Job.key_for(self.job_prefix) + "*", count=1000):
            rq_id = key.decode()[len("rq:job:"):]
            if ":" not in rq_id:
                hashes[rq_id] = None
        with s.client.pipeline(transaction=True) as pipe:
            for name, _ in PLACES:
                if name in ("queue", "intermediate"):
                    pipe.lrange(keys[name], 0, -1)
                else:
                    pipe.zrange(keys[name], 0, -1)
            results = pipe.execute()
        places, problems = {}, set()
        for (name, _), entries in zip(PLACES, results):
            for entry in entries:
                rq_id = entry.decode().split(":")[0] if name == "wip" else entry.decode()
                places.setdefault(rq_id, []).append(name)
        state_of = dict(PLACES)
        jobs = {}
        for rq_id, where in places.items():
            job_id = self.ours(rq_id)
            if job_id is None:
                problems.add(f"{rq_id}: an entry not named by this adapter in {where}")
                continue
            if len(where) > 1:
                problems.add(f"{job_id}: in several places [{', '.join(where)}]")
            jobs[job_id] = state_of[where[0]]
            if rq_id not in hashes and not s.client.exists(Job.key_for(rq_id)):
                problems.add(f"{job_id}: an entry in [{', '.join(where)}] without a job hash")
        for rq_id in hashes:
            job_id = self.ours(rq_id)
            if job_id not in jobs:
                jobs[job_id] = "vanished"
                status = s.client.hget(Job.key_for(rq_id), "status")
                problems.add(f"{job_id}: a job hash in no queue or registry (status {status!r})")
        return {"jobs": dict(sorted(jobs.items())), "problems": sorted(problems)}

    def op_clear(self, s, req):
        q = self.queue
        exact = {f"rq:{kind}:{q}" for kind in ("queue", "wip", "finished", "failed", "deferred", "scheduled",
                                               "canceled", "workers", "scheduler-lock", "clean_registries")}
        starts = (f"rq:queue:{q}:",) + tuple(
            f"rq:{kind}:{self.job_prefix}" for kind in ("job", "execution", "executions", "results")
        ) + (f"rq:worker:{self.worker_prefix}",)
        doomed = []
        for key in s.client.scan_iter(match="rq:*", count=1000):
            k = key.decode()
            if k in exact or k.startswith(starts):
                doomed.append(key)
        # RQ's scheduler hashes are named by uuid; ours are the reaper's.
        if s.scheduler is not None:
            doomed.append(s.scheduler.key)
        for i in range(0, len(doomed), 500):
            s.client.delete(*doomed[i:i + 500])
        s.client.srem("rq:queues", f"rq:queue:{q}")
        members = [m for m in s.client.smembers("rq:workers") if m.decode().startswith(f"rq:worker:{self.worker_prefix}")]
        if members:
            s.client.srem("rq:workers", *members)
        with self.lock:
            self.deliveries.clear()
            self.leases.clear()
        # Every session's worker hash was deleted: re-register the identities.
        s.worker.register_birth()
        return None


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("ACKGAP_RQ_LOG", "WARNING"))
    ackgap_kit.serve(Adapter())
