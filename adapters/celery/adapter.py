"""Celery under ackgap: the adapter protocol (docs/adapter-protocol.md) over
Celery 5.7.0 with the Redis broker (kombu 5.7.0's Redis transport) and the
Redis result backend, configured for at-least-once (`task_acks_late=True`).
Started by `adapters/celery/run` inside the venv ci/install-adapters builds;
README.md beside this file says which Celery call each operation is.

Each worker name is one Celery "worker process": a Celery app of its own,
whose broker and result backend are both the worker's URL, with one kombu
connection that consumes and a solo pool that runs the task in-line, the way
`celery worker -P solo` does. A lease takes a message from the queue without
auto-ack (`kombu.Queue.get(no_ack=False)`, i.e. `Channel.basic_get`, which a
`SimpleQueue.get(block=False)` also is) and wraps it in Celery's worker
`Request`; complete and fail run that Request through Celery's own tracer
(`Request.execute_using_pool` on the solo pool), whose task body returns
(complete) or calls `Task.retry` (fail); Celery then stores the result and
acks the message itself (`Request.on_success` / `on_retry` / `on_failure`).

With the user's own app (`ackgap ... --app MODULE:ATTR`, $ACKGAP_APP), each
worker's Celery app takes every setting of the user's app (task_acks_late,
task_reject_on_worker_lost, the visibility_timeout of
broker_transport_options, serializers, ...) and the adapter overrides only
what it must to drive the queue step by step, each named in the hello's
`app`: the broker and result backend URLs (the server ackgap runs), the
key prefix and queue name (the hello's queue), the connection retries and
socket timeouts (an unanswered call must be `unknown`, not retried for
ever), and the solo pool. The task is the adapter's own (`ackgap.job`,
whose retries are ackgap's max_attempts), with the app's acks_late. With
acks_late off, Celery's worker acks a message when its pool accepts the
task, before the body runs (`Request.on_accepted`): the adapter makes that
call at the lease, when ackgap's worker starts the job, so that a worker
that dies holding it has taken it off the broker, as Celery's would have.
"""

import itertools
import os
import threading
import time
from datetime import datetime, timezone
from urllib.parse import urlparse

import ackgap_kit
from ackgap_kit import Failure, log, refused, unavailable, unknown

import redis
from celery import Celery
from celery.concurrency.solo import TaskPool
from celery.worker.request import Request
from kombu.transport import virtual
from kombu.utils.json import loads as kombu_loads

NAME = "celery"
# The task every job is: its body returns (complete) or retries (fail).
TASK = "ackgap.job"
# Celery's default queue name; its key is PREFIX + this.
QUEUE = "celery"
# A reply that takes longer than this is `unknown` (kombu's socket_timeout;
# redis-py's own retries stay as Celery and kombu configure them).
SOCKET_TIMEOUT_S = float(os.environ.get("ACKGAP_CELERY_SOCKET_TIMEOUT_S", "10"))
# The visibility timeout, if fixed here; otherwise the first lease's lease_ms
# (ackgap asks for one lease length per run).
VISIBILITY_MS_ENV = os.environ.get("ACKGAP_CELERY_VISIBILITY_MS")

# One read of everything under the prefix, in one script (atomic): every
# list (the queue and its priority lists), the unacked hash and its index,
# and every result of the result backend.
READ_SCRIPT = """
local p = ARGV[1]
local out = {}
for _, key in ipairs(redis.call('KEYS', p .. '*')) do
    local t = redis.call('TYPE', key)['ok']
    if t == 'list' then
        table.insert(out, {'list', key, redis.call('LRANGE', key, 0, -1)})
    elseif t == 'hash' then
        table.insert(out, {'hash', key, redis.call('HGETALL', key)})
    elseif t == 'zset' then
        table.insert(out, {'zset', key, redis.call('ZRANGE', key, 0, -1)})
    elseif t == 'string' and string.find(key, p .. ARGV[2], 1, true) == 1 then
        table.insert(out, {'string', key, {redis.call('GET', key)}})
    end
end
return out
"""


class Outcome:
    """What Celery's worker did with one Request: filled by the Request's
    own handlers (on_success / on_retry / on_failure) and by its on_ack /
    on_reject callbacks."""

    def __init__(self):
        self.failed = None  # True if the traced task did not succeed
        self.retried = False  # on_retry ran: Task.retry published a new message
        self.exc = None  # the task's exception (Retry, MaxRetriesExceeded, Reject...)
        self.settle = None  # "ack" or ("reject", requeue)
        self.removed = None  # HDEL's reply: 1 = the unacked entry was removed
        self.error = None  # an exception of the ack itself
        # What Celery's result backend did in this execution, one pair per
        # store (mark_as_done / _retry / _failure -> _store_result): the
        # status `_store_result` read first, and the state it then wrote,
        # None when it wrote nothing (a SUCCESS was there: Celery ignores
        # every later state of a task that succeeded).
        self.stores = []

    def wrote(self, state, over=None):
        """True when the backend wrote `state` in this execution (over a
        status other than `over`, when given)."""
        return any(w == state and (over is None or seen != over) for seen, w in self.stores)


class AckgapRequest(Request):
    """Celery's worker Request, recording what its handlers decided (the
    worker builds a subclass per task the same way: create_request_cls)."""

    outcome = None

    def on_success(self, failed__retval__runtime, **kwargs):
        failed, retval, _ = failed__retval__runtime
        self.outcome.failed = bool(failed)
        if failed:
            self.outcome.exc = getattr(retval, "exception", retval)
        return super().on_success(failed__retval__runtime, **kwargs)

    def on_retry(self, exc_info):
        self.outcome.retried = True
        return super().on_retry(exc_info)


def record_stores(session, backend):
    """Makes `backend` (Celery's result backend of this worker's thread: a
    backend is per thread, and the kit runs each worker name's requests on
    one thread) tell `session.recording` what each `_store_result` read and
    wrote. Celery 5.7.0's BaseKeyValueStoreBackend._store_result reads the
    task's meta (`_get_task_meta_for`), returns without writing if its
    status is SUCCESS, else writes (`_set_with_state`): the same two calls,
    observed, nothing of their behaviour changed."""
    if getattr(backend, "_ackgap_recorded", False):
        return
    get_meta, set_with_state = backend._get_task_meta_for, backend._set_with_state

    def observed_get(task_id):
        meta = get_meta(task_id)
        if session.recording is not None:
            session.recording.stores.append([meta.get("status"), None])
        return meta

    def observed_set(key, value, state):
        result = set_with_state(key, value, state)
        o = session.recording
        if o is not None:
            if o.stores and o.stores[-1][1] is None:
                o.stores[-1][1] = state
            else:
                o.stores.append([None, state])
        return result

    backend._get_task_meta_for = observed_get
    backend._set_with_state = observed_set
    backend._ackgap_recorded = True


def ack_with_reply(message):
    """`message.ack()` on kombu's Redis transport, keeping the server's reply.

    Message.ack -> Channel.basic_ack -> redis.QoS.ack, which is
    `self._remove_from_indices(tag).execute(); virtual.QoS.ack(self, tag)`:
    a MULTI of ZREM unacked_index + HDEL unacked, whose reply QoS.ack drops.
    These are the same calls in the same order; the HDEL count is kept: 1
    means this ack removed the delivery's unacked entry (the transport will
    never restore it), 0 that there was none (restored already, or acked)."""
    if message.acknowledged:
        raise ackgap_kit.Failure("refused", f"message already acknowledged with state {message._state}")
    qos = message.channel.qos
    _zrem, hdel = qos._remove_from_indices(message.delivery_tag).execute()
    virtual.QoS.ack(qos, message.delivery_tag)
    message._state = "ACK"
    return int(hdel)


def reject_with_reply(message, requeue):
    """`message.reject(requeue)` on kombu's Redis transport: without requeue
    redis.QoS.reject runs the same MULTI as ack (reply kept, as above); with
    requeue the library's own call is made and its effect is not said."""
    if message.acknowledged:
        raise ackgap_kit.Failure("refused", f"message already acknowledged with state {message._state}")
    if requeue:
        message.reject(requeue=True)
        return None
    qos = message.channel.qos
    _zrem, hdel = qos._remove_from_indices(message.delivery_tag).execute()
    virtual.QoS.ack(qos, message.delivery_tag)
    message._state = "REJECTED"
    return int(hdel)


class Held:
    """One delivery a worker holds: Celery's Request and when it was taken."""

    def __init__(self, request, outcome, taken_s, job):
        self.request = request
        self.outcome = outcome
        self.taken_s = taken_s
        self.job = job
        self.answer = None  # the first settle's answer, once settled


class Session:
    """One worker name: a Celery app (a worker process) on the worker's URL."""

    def __init__(self, adapter, worker, url):
        self.adapter = adapter
        self.worker = worker
        self.url = url
        self.epoch = None
        self.action = None  # what the task body does in this execution
        user = adapter.user_app
        if user is None:
            app = Celery(f"ackgap-{worker}", set_as_current=False)
            app.conf.update(adapter.overrides(url, task_acks_late=True, worker_hijack_root_logger=False))
        else:
            # The user's app, as a worker process of its own: every setting
            # of it, then the overrides (each named in the hello's `app`).
            app = Celery(user.main or f"ackgap-{worker}", set_as_current=False)
            app.conf.update(adapter.user_settings)
            app.conf.update(adapter.overrides(url))
        self.app = app
        session = self
        # The task's acks_late: True (this adapter's configuration), or the
        # user's app's task_acks_late.
        options = {} if user is not None else {"acks_late": True}

        @app.task(bind=True, name=TASK, shared=False, **options)
        def job(self, payload, max_attempts):
            if session.action == "fail":
                delay_s = session.retry_delay_ms / 1000.0
                raise self.retry(countdown=delay_s, max_retries=max(max_attempts - 1, 0),
                                 exc=JobFailed(f"failed by ackgap ({payload})"))
            return "done"

        self.task = job
        self.pool = TaskPool(app=app)
        self.conn = None  # the consuming kombu connection
        self.channel = None
        self.queue = None
        self.reapers = {}  # visibility_s -> (connection, channel)
        self.held = {}  # token -> Held
        self.reserved = []  # Held with an ETA not reached yet (the worker's timer)
        self.redis = None  # a plain client for read and clear
        self.retry_delay_ms = 0
        self.recording = None  # the Outcome whose backend stores are recorded now

    # --- connections -----------------------------------------------------
    def check_epoch(self):
        """After a clear, the exchange's binding is declared again and what
        this worker held is forgotten."""
        if self.epoch != self.adapter.epoch:
            self.epoch = self.adapter.epoch
            self.held.clear()
            self.reserved.clear()
            self.declared = False

    def consumer(self):
        self.check_epoch()
        if self.channel is None:
            try:
                self.conn = self.app.connection_for_read()
                self.channel = self.conn.channel()
            except Exception as e:  # the connect (a PING) failed: nothing sent
                self.conn = self.channel = None
                raise unavailable(f"{self.worker}: cannot connect: {type(e).__name__}: {e}") from e
            self.queue = self.app.amqp.queues[QUEUE](self.channel)
            self.declared = False
        if not self.declared:
            # What a Celery worker does when it starts consuming.
            self.queue.declare()
            self.declared = True
        return self.queue

    def reaper(self, visibility_s):
        self.check_epoch()
        entry = self.reapers.get(visibility_s)
        if entry is None:
            try:
                conn = self.app.connection_for_read(
                    transport_options={"visibility_timeout": visibility_s})
                channel = conn.channel()
            except Exception as e:
                raise unavailable(f"{self.worker}: cannot connect: {type(e).__name__}: {e}") from e
            entry = self.reapers[visibility_s] = (conn, channel)
        return entry[1]

    def client(self):
        if self.redis is None:
            self.redis = redis.Redis.from_url(self.url, socket_timeout=SOCKET_TIMEOUT_S,
                                              socket_connect_timeout=SOCKET_TIMEOUT_S)
            try:
                self.redis.ping()
            except redis.exceptions.ConnectionError as e:
                self.redis = None
                raise unavailable(f"{self.worker}: cannot connect: {e}") from e
        return self.redis

    def kombu_connections(self):
        conns = [self.conn] + [c for c, _ in self.reapers.values()]
        pool = self.app._pool
        if pool is not None:
            conns += list(getattr(pool, "_dirty", ())) + list(pool._resource.queue)
        return [c for c in conns if c is not None]

    def die(self):
        """A real death: no channel is closed (a kombu channel's close puts
        the messages it holds back in the queue); the messages stay in the
        unacked hash, as after a SIGKILL, for restore_visible to take back.
        The sockets are closed and every finalizer that would restore them
        at garbage collection is cancelled."""
        for conn in self.kombu_connections():
            # A pool may hold connections not made yet (kombu's `lazy`).
            transport = getattr(conn, "_transport", None)
            if transport is None:
                continue
            for ch in list(getattr(transport, "channels", [])) + list(getattr(transport, "_avail_channels", [])):
                qos = ch.__dict__.get("_qos")
                if qos is not None:
                    qos._on_collect.cancel()
                    qos.restore_at_shutdown = False
                    qos._delivered.clear()
                ch.do_restore = False
                try:
                    ch._disconnect_pools()
                except Exception:
                    pass
        try:
            backend = self.app._local.__dict__.get("backend")
            if backend is not None:
                backend.client.connection_pool.disconnect()
        except Exception:
            pass
        if self.redis is not None:
            self.redis.connection_pool.disconnect()
        self.held.clear()
        self.reserved.clear()


class JobFailed(Exception):
    """The exception a failing job raises (Task.retry's `exc`)."""


def now_ms():
    return int(time.time() * 1000)


class CeleryQueue(ackgap_kit.Queue):
    name = NAME
    # kombu and Celery read the process's clock (time(), datetime.now()): the
    # kit sets it to each request's clock_ms (README.md, Time).
    logical_time = True
    follows_clock = True
    fences = False
    # Celery has no duplicate-id refusal: a second apply_async of a task id
    # publishes a second message. ackgap then never enqueues an id twice.
    dedup = False

    def setup(self, server, queue, connections):
        super().setup(server, queue, connections)
        # Every key is under QUEUE_NAME: kombu's and the result backend's
        # global_keyprefix (the queue's list is PREFIX + "celery").
        self.prefix = queue + ":"
        self.lock = threading.Lock()
        self.deliveries = {}  # job -> deliveries handed out (the token)
        self.enqueued = set()  # ids enqueued through this adapter
        self.epoch = 0
        self.graveyard = []  # crashed sessions, kept so nothing is collected
        self.visibility_s = int(VISIBILITY_MS_ENV) / 1000.0 if VISIBILITY_MS_ENV else None
        self.user_app = ackgap_kit.load_app()
        if self.user_app is not None:
            self.load_user_app()

    def load_user_app(self):
        """Reads the user's Celery app: its settings (all of them, kept) and
        its visibility_timeout (kombu's default, 3600 s, when it sets none);
        the hello's `app` names what is kept and what is overridden."""
        from celery.app.defaults import DEFAULTS

        spec, user = ackgap_kit.app_spec(), self.user_app
        if not isinstance(user, Celery):
            raise refused(f"--app {spec}: a {type(user).__module__}.{type(user).__qualname__}, not a Celery app "
                          "(celery.Celery)")
        conf = user.conf
        self.user_settings = {k: conf[k] for k in DEFAULTS if k in conf}
        transport = dict(conf.broker_transport_options or {})
        self.visibility_s = float(transport.get("visibility_timeout", 3600))
        kept = {k: conf[k] for k in ("task_acks_late", "task_reject_on_worker_lost",
                                     "task_acks_on_failure_or_timeout", "task_serializer", "result_expires")}
        kept["broker_transport_options.visibility_timeout"] = (
            f"{transport['visibility_timeout']}" if "visibility_timeout" in transport
            else "3600 (kombu's default; the app sets none)")
        overridden = {
            "broker_url": f"the server ackgap runs (the app's: {conf.broker_url!r})",
            "result_backend": f"the server ackgap runs (the app's: {conf.result_backend!r}): read tells "
                              "done and dead from its results",
            "broker_transport_options.global_keyprefix": f"{self.prefix!r} (the hello's queue)",
            "result_backend_transport_options.global_keyprefix": f"{self.prefix!r}",
            "task_default_queue": f"{QUEUE!r} (the app's: {conf.task_default_queue!r})",
            "broker_connection_retry_on_startup": "False, broker_connection_max_retries 0 (a call the "
                                                  "server does not answer is unknown, not retried)",
            "socket timeouts": f"{SOCKET_TIMEOUT_S} s (broker and redis_socket_*)",
            "worker_pool": "solo, in-line (as celery worker -P solo), one worker process per ackgap worker",
            "task": f"{TASK} (the adapter's own; its retries are ackgap's max_attempts)",
        }
        self.app_report = ackgap_kit.app_report(spec, "Celery app", ["celery", "kombu", "redis"], kept,
                                                overridden)

    def overrides(self, url, **more):
        """The settings a worker's app takes over its own: the worker's URL,
        the key prefix, the queue, no retries of a connect, socket timeouts."""
        prefix = self.prefix
        user = self.user_app
        transport = dict(user.conf.broker_transport_options or {}) if user is not None else {}
        transport.update({
            "global_keyprefix": prefix,
            "visibility_timeout": self.visibility_s or 3600,
            "socket_timeout": SOCKET_TIMEOUT_S,
            "socket_connect_timeout": SOCKET_TIMEOUT_S,
        })
        backend = dict(user.conf.result_backend_transport_options or {}) if user is not None else {}
        backend["global_keyprefix"] = prefix
        settings = dict(
            broker_url=url,
            result_backend=url,
            task_default_queue=QUEUE,
            broker_transport_options=transport,
            result_backend_transport_options=backend,
            redis_socket_timeout=SOCKET_TIMEOUT_S,
            redis_socket_connect_timeout=SOCKET_TIMEOUT_S,
            broker_connection_retry_on_startup=False,
            broker_connection_max_retries=0,
            **more,
        )
        if user is not None:
            settings["task_always_eager"] = False
        return settings

    def open(self, worker, url):
        s = Session(self, worker, url)
        s.app.set_current()
        return s

    def crash(self, session):
        session.die()
        self.graveyard.append(session)

    # --- operations ------------------------------------------------------
    def op_enqueue(self, s, req):
        s.app.set_current()
        s.check_epoch()
        s.consumer()  # the exchange and its binding, as the worker declares them
        delay_s = req["delay_ms"] / 1000.0
        # Task.apply_async with the job's id. Celery has no duplicate-id
        # refusal: a second enqueue of an id publishes a second message.
        s.task.apply_async(kwargs={"payload": req["payload"], "max_attempts": req["max_attempts"]},
                           task_id=req["job"], countdown=delay_s if delay_s > 0 else None)
        # Only a publish that returned makes `read` name the job (`vanished`
        # once it is nowhere): a read that names a job says it existed, and
        # one whose publish raised may never have reached the server.
        self.enqueued.add(req["job"])
        return "enqueued"

    def visibility(self, lease_ms):
        with self.lock:
            if self.visibility_s is None:
                self.visibility_s = lease_ms / 1000.0
                log(NAME, f"visibility_timeout = {self.visibility_s} s (the first lease's lease_ms)")
            return self.visibility_s

    def grant(self, s, held):
        with self.lock:
            token = self.deliveries.get(held.job, 0) + 1
            self.deliveries[held.job] = token
        s.held[token] = held
        kwargs = held.request.kwargs or {}
        return {"job": held.job, "token": token,
                "deadline_ms": int((held.taken_s + self.visibility_s) * 1000),
                "payload": str(kwargs.get("payload", ""))}

    def op_lease(self, s, req):
        s.app.set_current()
        self.visibility(req["lease_ms"])
        q = s.consumer()
        now = datetime.now(timezone.utc)
        # The worker's timer: a message fetched with an ETA is held
        # (unacked) until its ETA, then run.
        for held in sorted(s.reserved, key=lambda h: h.request.eta):
            if held.request.eta <= now:
                s.reserved.remove(held)
                return self.grant(s, self.start(held))
        for _ in range(10000):
            taken_s = time.time()
            message = q.get(no_ack=False, accept=s.app.conf.accept_content)
            if message is None:
                return None
            outcome = Outcome()
            request = AckgapRequest(
                message,
                on_ack=lambda logger, errors, m=message, o=outcome: self.on_settle(o, "ack", m),
                on_reject=lambda logger, errors, requeue, m=message, o=outcome: self.on_settle(o, ("reject", requeue), m),
                app=s.app, hostname=f"{s.worker}@ackgap", task=s.task,
                connection_errors=s.conn.connection_errors,
            )
            request.outcome = outcome
            held = Held(request, outcome, taken_s, request.id)
            if request.eta is not None and request.eta > datetime.now(timezone.utc):
                s.reserved.append(held)
                continue
            return self.grant(s, self.start(held))
        raise unknown("lease: more than 10000 messages with a future ETA in a row")

    def start(self, held):
        """The job starts on the worker: with the user's app, what Celery's
        worker does when its pool accepts the task (`Request.on_accepted`:
        the ack, when the task's acks_late is off). Without it, nothing
        (this adapter's task acks late)."""
        if self.user_app is not None:
            held.request.on_accepted(os.getpid(), time.monotonic())
            if held.outcome.error is not None:
                raise unknown(f"lease {held.job}: the early ack (acks_late off) failed: "
                              f"{type(held.outcome.error).__name__}: {held.outcome.error}")
        return held

    @staticmethod
    def on_settle(outcome, how, message):
        """The Request's on_ack / on_reject: like Message.ack_log_error, an
        error is kept (and logged), not raised into the worker."""
        outcome.settle = how
        try:
            if how == "ack":
                outcome.removed = ack_with_reply(message)
            else:
                outcome.removed = reject_with_reply(message, how[1])
        except Exception as e:  # noqa: BLE001
            outcome.error = e
            log(NAME, f"settle {how} of {message.delivery_tag}: {type(e).__name__}: {e}")

    def run(self, s, req, action):
        s.app.set_current()
        s.check_epoch()
        held = s.held.get(req["token"])
        if held is None or held.job != req["job"]:
            raise refused(f"{s.worker} holds no delivery of {req['job']} with token {req['token']} "
                          "(a Celery worker settles only the messages its own channel received); nothing sent")
        if held.answer is not None:
            # This delivery's Request ran already: Celery does not run or ack
            # it twice (Request.acknowledge is a no-op once acknowledged).
            if held.answer.get("outcome") == "settled" and action == "complete":
                return {"outcome": "already_settled"}
            raise refused(f"{req['job']} token {req['token']}: this Request was acknowledged already "
                          "(Celery's Request.acknowledge does nothing twice); nothing sent")
        s.action = action
        s.retry_delay_ms = req.get("retry_delay_ms", 0)
        started_ms = now_ms()
        held.answer = {"outcome": "unknown"}
        record_stores(s, s.app.backend)
        s.recording = held.outcome
        try:
            held.request.execute_using_pool(s.pool)
        finally:
            s.action = None
            s.recording = None
        answer = self.classify(s, req, action, held.outcome, started_ms)
        held.answer = answer
        return answer

    def classify(self, s, req, action, o, started_ms):
        job = req["job"]
        what = f"{action} {job} token {req['token']}"
        if o.error is not None:
            raise unknown(f"{what}: the ack failed: {type(o.error).__name__}: {o.error}")
        if o.settle is None:
            raise unknown(f"{what}: Celery's worker neither acked nor rejected the message (task failed: {o.exc!r})")
        if o.settle != "ack" and o.settle != ("reject", False):
            raise unknown(f"{what}: Celery rejected the message with requeue ({o.exc!r}); its effect is not said")
        if o.removed != 1:
            return self.unacked_gone(s, req, action, o, started_ms)
        if action == "complete":
            if o.failed:
                raise unknown(f"{what}: the task was traced as failed ({o.exc!r}), then acked")
            return {"outcome": "settled"}
        if o.retried:
            return {"outcome": "requeued", "ready_at_ms": started_ms + int(req.get("retry_delay_ms", 0))}
        exc_name = type(o.exc).__name__ if o.exc is not None else ""
        if o.failed and exc_name in ("JobFailed", "MaxRetriesExceededError"):
            # Task.retry raised the job's exception: no retries left; the
            # tracer stored FAILURE and the worker acked (acks_on_failure).
            return {"outcome": "dead"}
        raise unknown(f"{what}: the task ended with {o.exc!r} (settle {o.settle})")

    def unacked_gone(self, s, req, action, o, started_ms):
        """The answer when the ack removed nothing: this delivery's unacked
        entry was gone (restore_visible put the message back in the queue,
        or another delivery of it was acked). The ack changed nothing in
        the broker, but Celery's tracer ran before it and wrote the task's
        result: the answer is what those writes did (README, "A stale
        complete").

        - complete: the tracer stored SUCCESS (`mark_as_done`; Celery's
          backend writes it unless a SUCCESS is there already). From then
          on Celery tells every caller the task succeeded
          (`AsyncResult.status`, `.get()`), while its message, back in the
          queue or held by a newer delivery, runs again: a stale complete
          that took effect, `settled`, which fenced-settlement judges (and
          settle-once, when the job is leased or settled again). `read`
          still says `pending` (or `active`) while a message of the job
          is in the broker: that is where the job is, and it will run.
          Nothing written (a SUCCESS was there: the job was done already)
          is `fenced`: nothing changed.
        - fail with retries left: Task.retry published a new message
          before the ack: the job is pending again through this call,
          `requeued` (a second message when the old one is back too).
        - fail with none left: the tracer stored FAILURE
          (`mark_as_failure`) over a task that had not failed: Celery now
          reports the task failed for good while its message runs again,
          `dead`. FAILURE over FAILURE (the job was dead already) or
          nothing written (it had succeeded) changed no state: `fenced`.
        """
        job = req["job"]
        what = f"{action} {job} token {req['token']}"
        if action == "complete":
            if o.failed:
                raise unknown(f"{what}: the task was traced as failed ({o.exc!r}); the ack removed nothing")
            if o.wrote("SUCCESS"):
                log(NAME, f"{what}: the ack removed nothing, but Celery stored SUCCESS: a stale complete "
                          "that took effect (settled)")
                return {"outcome": "settled"}
            return self.fenced(s, job)
        if o.retried:
            return {"outcome": "requeued", "ready_at_ms": started_ms + int(req.get("retry_delay_ms", 0))}
        exc_name = type(o.exc).__name__ if o.exc is not None else ""
        if o.failed and exc_name in ("JobFailed", "MaxRetriesExceededError"):
            if o.wrote("FAILURE", over="FAILURE"):
                log(NAME, f"{what}: the ack removed nothing, but Celery stored FAILURE: a stale fail "
                          "that took effect (dead)")
                return {"outcome": "dead"}
            return self.fenced(s, job)
        raise unknown(f"{what}: the task ended with {o.exc!r} (settle {o.settle}); the ack removed nothing")

    def fenced(self, s, job):
        """The fenced answer's `current` (the job's latest delivery number)
        and `state` (read from the server after the refusal: informational,
        the refusal itself is HDEL's reply)."""
        state = self.op_read(s, {})["jobs"].get(job, "pending")
        with self.lock:
            current = self.deliveries.get(job, 0)
        return {"outcome": "fenced", "current": current,
                "state": state if state in ("pending", "active", "done", "dead") else "pending"}

    def op_complete(self, s, req):
        return self.run(s, req, "complete")

    def op_fail(self, s, req):
        return self.run(s, req, "fail")

    def op_reap(self, s, req):
        s.app.set_current()
        visibility = self.visibility_s if self.visibility_s is not None else 3600.0
        channel = s.reaper(visibility)
        qos = channel.qos
        moved = {}
        # Which messages restore_visible's transactions pushed back: each
        # restore_by_tag attempt starts with _remove_from_indices (the entry
        # is reset there, so a retried transaction counts once) and pushes
        # the message through _do_restore_message only when its unacked
        # entry existed; a push queued in the transaction that committed is
        # a message moved back to the queue.
        orig_remove = qos._remove_from_indices
        orig_restore = channel._do_restore_message

        def remove(tag, pipe=None):
            moved.pop(tag if isinstance(tag, str) else tag.decode(), None)
            return orig_remove(tag, pipe)

        def restore(payload, exchange, routing_key, pipe, leftmost=False):
            tag = payload.get("properties", {}).get("delivery_tag")
            job = payload.get("headers", {}).get("id")
            spy = PushSpy(pipe, lambda: moved.__setitem__(tag, job))
            return orig_restore(payload, exchange, routing_key, spy, leftmost)

        qos._remove_from_indices = remove
        channel._do_restore_message = restore
        try:
            # One sweep of the transport's own recovery, as the worker's
            # event loop runs it every unacked_restore_interval seconds
            # (interval=1: this call scans, no throttle).
            qos.restore_visible(start=0, num=req["limit"], interval=1)
        finally:
            del qos._remove_from_indices
            del channel._do_restore_message
        return [{"job": job, "to": "pending"} for job in moved.values() if job]

    def op_read(self, s, req):
        c = s.client()
        rows = c.eval(READ_SCRIPT, 0, self.prefix, "celery-task-meta-")
        pending, active, results, problems = set(), set(), {}, []
        unacked, index = {}, set()
        for kind, key, values in rows:
            key = key.decode()
            name = key[len(self.prefix):]
            if kind == b"list":
                for raw in values:
                    job = message_id(raw)
                    if job is None:
                        problems.append(f"{name}: a message without a task id")
                    else:
                        pending.add(job)
            elif kind == b"hash" and name == "unacked":
                for tag, raw in zip(values[::2], values[1::2]):
                    unacked[tag.decode()] = raw
            elif kind == b"zset" and name == "unacked_index":
                index = {t.decode() for t in values}
            elif kind == b"string":
                try:
                    meta = kombu_loads(values[0])
                    results[meta["task_id"]] = meta["status"]
                except (ValueError, KeyError, TypeError):
                    problems.append(f"{name}: a result that does not parse")
        for tag, raw in unacked.items():
            try:
                payload = kombu_loads(raw)[0]
                job = payload["headers"]["id"]
            except (ValueError, KeyError, TypeError, IndexError):
                problems.append(f"unacked {tag}: an entry that does not parse")
                continue
            active.add(job)
            if tag not in index:
                # restore_visible finds messages through the index only:
                # this one would never be restored.
                problems.append(f"{job}: unacked entry {tag} has no unacked_index entry")
        jobs = {}
        for job in set(results) | self.enqueued | pending | active:
            if job in active:
                jobs[job] = "active"
            elif job in pending:
                jobs[job] = "pending"
            elif results.get(job) == "SUCCESS":
                jobs[job] = "done"
            elif results.get(job) == "FAILURE":
                jobs[job] = "dead"
            else:
                jobs[job] = "vanished"
        problems.sort()
        return {"jobs": dict(sorted(jobs.items())), "problems": problems}

    def op_clear(self, s, req):
        c = s.client()
        keys = list(c.scan_iter(match=self.prefix + "*", count=1000))
        for i in range(0, len(keys), 500):
            c.delete(*keys[i:i + 500])
        with self.lock:
            self.deliveries.clear()
            self.enqueued.clear()
            self.epoch += 1
        return None


class PushSpy:
    """A pipeline that tells when a message is pushed through it."""

    def __init__(self, pipe, pushed):
        self._pipe = pipe
        self._pushed = pushed

    def rpush(self, *args):
        self._pushed()
        return self._pipe.rpush(*args)

    def lpush(self, *args):
        self._pushed()
        return self._pipe.lpush(*args)

    def __getattr__(self, name):
        return getattr(self._pipe, name)


def message_id(raw):
    try:
        return kombu_loads(raw)["headers"]["id"]
    except (ValueError, KeyError, TypeError):
        return None


if __name__ == "__main__":
    ackgap_kit.serve(CeleryQueue())
