"""Dramatiq's Redis broker under ackgap: the adapter protocol
(docs/adapter-protocol.md) on the kit (adapters/kit/python/ackgap_kit.py),
over the PyPI package `dramatiq` (RedisBroker, its Lua `dispatch` script).

Every write is Dramatiq's own call, the way its worker makes it (README.md
has the table):

- enqueue: `RedisBroker.enqueue(Message(message_id=JOB, ...), delay=...)`.
- lease: a fresh `broker.consume(queue, prefetch=1, timeout=0)` of the
  worker's own RedisBroker (one broker id = one Dramatiq worker), then
  `next(consumer)` (the `fetch` command: LPOP, SADD to the broker's acks
  set, heartbeat). Dramatiq has no per-lease token: the adapter numbers the
  deliveries of each job.
- complete: `consumer.ack(message)`; fail: the Retries middleware
  (`broker.emit_after("process_message", message, exception=Retry(delay))`,
  as Dramatiq's WorkerThread does for a failed message), then what the
  worker's `post_process_message` does: `nack` when the message was marked
  failed, else `ack`.
- reap: the dispatch script's maintenance pass (dead brokers' unacked
  messages back to their queue), forced: a broker with `maintenance_chance`
  = MAINTENANCE_SCALE dispatches `qsize` on the queue and its delay queue.
- delayed messages: Dramatiq's own `ConsumerThread.handle_message` /
  `handle_delayed_messages` on a consumer of the delay queue (what every
  Dramatiq worker runs), driven at each lease and reap by one adapter-owned
  broker (the "delay pump").

ack and nack return nothing (the script returns nil whether or not the
broker held the message). The adapter runs them inside one MULTI together
with an SISMEMBER of the broker's acks set, which the script's own `srem`
tests: the MULTI is atomic, so the SISMEMBER says exactly whether the ack
took effect. The same trick reports what a maintenance pass moved.

With the user's own broker (`ackgap ... --app MODULE:ATTR`, $ACKGAP_APP, a
RedisBroker), each worker's RedisBroker takes the user's middleware (the
same instances: Retries with its max_retries, backoff and retry_when,
AgeLimit, TimeLimit, Callbacks, ...), heartbeat_timeout (the lease) and
dead_message_ttl; the adapter overrides what it must, each named in the
hello's `app`: the connection (the server ackgap runs, one connection per
worker, no redis-py retries), the namespace (the hello's queue), the
maintenance chance (only the reaper runs it) and the actor (the adapter's
own, whose max_retries per message is ackgap's max_attempts - 1, as a
producer sets it with `send_with_options(max_retries=...)`).
"""

import itertools
import json
import os
import threading
from queue import PriorityQueue
from urllib.parse import urlparse

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry as RedisRetry

import ackgap_kit
import dramatiq
from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker
from dramatiq.common import dq_name
from dramatiq.middleware import Middleware, Retries
from dramatiq.worker import ConsumerThread

# Dramatiq's queue (inside the hello's namespace) and actor names.
QUEUE = "jobs"
ACTOR = "ackgap"
# The heartbeat timeout (the lease): ACKGAP_DRAMATIQ_HEARTBEAT_TIMEOUT_MS,
# else the lease_ms of the first lease asked for.
HEARTBEAT_ENV = os.environ.get("ACKGAP_DRAMATIQ_HEARTBEAT_TIMEOUT_MS")
SOCKET_TIMEOUT_S = float(os.environ.get("ACKGAP_DRAMATIQ_SOCKET_TIMEOUT_S", "10"))
# How many delayed messages the delay pump holds at once (Dramatiq's worker
# holds min(threads * 1000, 65535)).
DELAY_PREFETCH = 1000

# One snapshot of everything the broker keeps for QUEUE, read-only.
READ_LUA = """
local ns, q = ARGV[1], ARGV[2]
local base = ns .. ':' .. q
local acks = {}
for _, k in ipairs(redis.call('keys', ns .. ':__acks__.*')) do
  table.insert(acks, k)
  table.insert(acks, redis.call('smembers', k))
end
return {
  redis.call('lrange', base, 0, -1),
  redis.call('hgetall', base .. '.msgs'),
  redis.call('lrange', base .. '.DQ', 0, -1),
  redis.call('hgetall', base .. '.DQ.msgs'),
  redis.call('zrange', base .. '.XQ', 0, -1),
  redis.call('hgetall', base .. '.XQ.msgs'),
  redis.call('smembers', ns .. ':ackgap.admitted'),
  acks,
}
"""


def no_actor(payload):
    raise RuntimeError("the ackgap adapter drives Dramatiq's worker calls by hand")


def pairs(flat):
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def job_of(data):
    """Dramatiq's encoded message (JSON) -> its message_id, ackgap's job."""
    try:
        return json.loads(data).get("message_id")
    except (ValueError, AttributeError):
        return None


class LastEnqueue(Middleware):
    """Remembers the last message this broker enqueued (the Retries
    middleware throws away what `broker.enqueue` returns; its `eta` is the
    retry's ready time)."""

    def __init__(self):
        self.message = None

    def after_enqueue(self, broker, message, delay):
        self.message = message


class Session:
    """One worker name: its own connection and RedisBroker (its own broker
    id, i.e. one Dramatiq worker process)."""

    def __init__(self, adapter, name, url, maintenance_chance=0):
        self.name = name
        u = urlparse(url)
        if u.scheme not in ("redis", "rediss"):
            raise ackgap_kit.refused(f"{name}: not a redis:// URL: {url}")
        # One connection: a pool of one, no silent resends (redis-py retries
        # off), so a connection lost mid-call is `unknown`, never a resend.
        self.pool = redis.ConnectionPool.from_url(
            url,
            max_connections=1,
            retry=RedisRetry(NoBackoff(), 0),
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
        )
        self.client = redis.Redis(connection_pool=self.pool)
        self.last = LastEnqueue()
        user = adapter.user_broker
        self.broker = RedisBroker(
            client=self.client,
            namespace=adapter.queue,
            middleware=([Retries()] if user is None else list(user.middleware)) + [self.last],
            maintenance_chance=maintenance_chance,
            heartbeat_timeout=adapter.heartbeat_ms(),
            **({} if user is None else {"dead_message_ttl": user.dead_message_ttl}),
        )
        dramatiq.actor(no_actor, broker=self.broker, actor_name=ACTOR, queue_name=QUEUE)
        adapter.broker_ids.append(self.broker.broker_id)
        self.ready = False
        # The ack or nack this worker could not send (a connection error):
        # (job, token, call). Dramatiq's consumer thread retries it "until
        # the connection recovers" before it fetches again
        # (ConsumerThread.post_process_message); the adapter retries it
        # before this worker's next call. A crash loses it with the session,
        # as a restart does ("the message will be re-processed later").
        self.unsent = []

    def connect(self):
        """Connects if not connected: a failure here is `unavailable`, the
        call that follows was certainly not sent."""
        try:
            conn = self.pool.get_connection()
            try:
                conn.connect()
            finally:
                self.pool.release(conn)
            if not self.ready:
                # Dramatiq sizes its Lua unpacks on first use (the maxstack
                # script); done here, outside any MULTI.
                self.broker._max_unpack_size()
                self.ready = True
        except (RedisConnectionError, RedisTimeoutError, OSError) as e:
            raise ackgap_kit.unavailable(f"{self.name}: not connected: {e}") from e

    def acks_key(self, queue_name, broker_id=None):
        """The broker's set of fetched-but-unacked message ids (dispatch.lua:
        $namespace:__acks__.$worker_id.$queue_name)."""
        return f"{self.broker.namespace}:__acks__.{broker_id or self.broker.broker_id}.{queue_name}"

    def in_multi(self, before, dramatiq_calls, after=lambda pipe: None):
        """Runs `before(pipe)`, then Dramatiq's own calls `dramatiq_calls()`
        with its dispatch script sent on the same transaction, then
        `after(pipe)`, as one MULTI/EXEC. Returns the replies."""
        script = self.broker.scripts["dispatch"]
        with self.client.pipeline(transaction=True) as pipe:
            before(pipe)
            script.registered_client = pipe
            try:
                dramatiq_calls()
            finally:
                script.registered_client = self.client
            after(pipe)
            return pipe.execute()

    def drop(self):
        try:
            self.pool.disconnect()
        except Exception:
            pass


class Adapter(ackgap_kit.Queue):
    name = "dramatiq"
    # Dramatiq's client computes every timestamp itself, from the process's
    # clock: the kit sets it to each request's clock_ms (README.md, Time).
    logical_time = True
    follows_clock = True
    fences = False  # tokens are this adapter's delivery numbers
    dedup = False  # no duplicate-id refusal: a second enqueue is a second message

    def setup(self, server, queue, connections):
        super().setup(server, queue, connections)
        self.lock = threading.Lock()
        self.broker_ids = []
        self.heartbeat = int(HEARTBEAT_ENV) if HEARTBEAT_ENV else None
        self.pump_lock = threading.Lock()
        self.pump = None
        self.user_broker = ackgap_kit.load_app()
        if self.user_broker is not None:
            self.load_user_broker()
        self.reset()

    def load_user_broker(self):
        """Reads the user's RedisBroker: its middleware, heartbeat_timeout
        and dead_message_ttl are kept; the hello's `app` says so, and what
        is overridden."""
        spec, user = ackgap_kit.app_spec(), self.user_broker
        if not isinstance(user, RedisBroker):
            raise ackgap_kit.refused(f"--app {spec}: a {type(user).__module__}.{type(user).__qualname__}, not a "
                                     "Dramatiq RedisBroker (dramatiq.brokers.redis.RedisBroker)")
        self.heartbeat = int(user.heartbeat_timeout)
        kept = {"middleware": ", ".join(type(m).__name__ for m in user.middleware) or "none",
                "heartbeat_timeout": f"{user.heartbeat_timeout} ms (the lease)",
                "dead_message_ttl": f"{user.dead_message_ttl} ms"}
        for m in user.middleware:
            if isinstance(m, Retries):
                kept["Retries"] = (f"max_retries {m.max_retries}, min_backoff {m.min_backoff} ms, max_backoff "
                                   f"{m.max_backoff} ms, retry_when {getattr(m.retry_when, '__qualname__', None)}")
        pool = user.client.connection_pool.connection_kwargs
        overridden = {
            "client": f"the server ackgap runs, one connection per worker, redis-py retries off, socket timeout "
                      f"{SOCKET_TIMEOUT_S} s (the app's: {pool.get('host')}:{pool.get('port')} db {pool.get('db')})",
            "namespace": f"the hello's queue (the app's: {user.namespace!r})",
            "maintenance_chance": f"0 for workers, forced for the reaper (the app's: {user.maintenance_chance})",
            "actor": f"{ACTOR} on queue {QUEUE!r} (the adapter's own); max_retries per message: ackgap's "
                     "max_attempts - 1; a fail raises dramatiq.Retry(delay=retry_delay_ms)",
        }
        self.app_report = ackgap_kit.app_report(spec, "Dramatiq RedisBroker", ["dramatiq", "redis"], kept,
                                                overridden)

    def reset(self):
        with self.lock:
            # (job, token) -> the leased MessageProxy.
            self.leases = {}
            # job -> deliveries so far (the token of the latest).
            self.deliveries = {}
            # (job, token) whose ack or nack took effect.
            self.settled = set()
        with self.pump_lock:
            if self.pump is not None:
                self.pump.session.drop()
            self.pump = None

    def heartbeat_ms(self, lease_ms=None):
        with self.lock:
            if self.heartbeat is None and lease_ms is not None:
                self.heartbeat = lease_ms
            return self.heartbeat if self.heartbeat is not None else 1000

    def open(self, worker, url):
        return Session(self, worker, url, MAINTENANCE_SCALE if worker == "reaper" else 0)

    def crash(self, session):
        # A dead process: the sockets close, the broker id is never used
        # again, its heartbeat stops. No consumer.close()/requeue (that is
        # Dramatiq's clean shutdown, which puts unacked messages back).
        session.drop()

    # --- the delay pump -------------------------------------------------
    def run_pump(self):
        """Dramatiq's worker delay handling, once: fetch what the delay
        queue has (ConsumerThread.handle_message holds it by eta), then
        handle_delayed_messages: every message whose eta passed is enqueued
        on the queue and acked on the delay queue."""
        with self.pump_lock:
            if self.pump is None:
                s = Session(self, "delay-pump", self.server)
                ct = ConsumerThread(broker=s.broker, queue_name=dq_name(QUEUE), prefetch=DELAY_PREFETCH,
                                    work_queue=PriorityQueue(), worker_timeout=0)
                ct.session = s
                self.pump = ct
            ct = self.pump
            ct.session.connect()
            if ct.consumer is None:
                ct.consumer = ct.broker.consume(dq_name(QUEUE), prefetch=DELAY_PREFETCH, timeout=0)
            while True:
                message = next(ct.consumer)
                if message is None:
                    break
                ct.handle_message(message)
            ct.handle_delayed_messages()

    # --- operations -----------------------------------------------------
    def op_enqueue(self, s, req):
        s.connect()
        options = {"max_retries": max(req["max_attempts"] - 1, 0)}
        message = dramatiq.Message(queue_name=QUEUE, actor_name=ACTOR, args=(req["payload"],), kwargs={},
                                   options=options, message_id=req["job"])
        delay = req["delay_ms"] or None
        s.broker.enqueue(message, delay=delay)
        # Dramatiq forgets an acked message; this set (the adapter's, under
        # the namespace) is how `read` tells a done job from one never
        # admitted. Written after the enqueue succeeded.
        s.client.sadd(f"{self.queue}:ackgap.admitted", req["job"])
        # Dramatiq has no deduplication: a second enqueue of an id is a
        # second message, and that is what it did.
        return "enqueued"

    def op_lease(self, s, req):
        H = self.heartbeat_ms(req["lease_ms"])
        s.connect()
        self.resend(s)
        self.run_pump()
        consumer = s.broker.consume(QUEUE, prefetch=1, timeout=0)
        message = next(consumer)
        if message is None:
            return None
        # The lease lasts until the reaper finds this broker's heartbeat
        # older than the heartbeat timeout: the heartbeat the fetch just
        # wrote (its client timestamp) + H. Only this session writes it.
        beat = s.client.zscore(f"{self.queue}:__heartbeats__", s.broker.broker_id)
        job = message.message_id
        with self.lock:
            token = self.deliveries.get(job, 0) + 1
            self.deliveries[job] = token
            self.leases[(job, token)] = message
        payload = message.args[0] if message.args else ""
        return {"job": job, "token": token, "deadline_ms": int(beat) + H if beat is not None else 0,
                "payload": payload}

    def settle(self, s, req, call):
        """Runs Dramatiq's ack or nack (`call(consumer, message)`) in a MULTI
        after an SISMEMBER of this broker's acks set: True when the script's
        srem found the message (the settle took effect), False when it did
        nothing. On a connection error the call is kept for the worker's
        next call (`resend`) and the answer is unknown."""
        try:
            return self.post_process(s, req["job"], req["token"], call)
        except (RedisConnectionError, RedisTimeoutError) as e:
            s.unsent.append((req["job"], req["token"], call))
            raise ackgap_kit.unknown(f"{s.name}: {e}; Dramatiq's worker retries it before its next fetch") from e

    def post_process(self, s, job, token, call):
        message = self.leases[(job, token)]
        consumer = s.broker.consume(QUEUE, prefetch=1, timeout=0)
        mid = message.options["redis_message_id"]
        replies = s.in_multi(lambda pipe: pipe.sismember(s.acks_key(QUEUE), mid),
                             lambda: call(consumer, message))
        return bool(replies[0])

    def resend(self, s):
        """The acks and nacks this worker could not send, sent again before
        anything else it does, as Dramatiq's consumer thread does. While one
        still fails the worker's call is not sent (`unavailable`): the worker
        fetches nothing, so its heartbeat ages, as a Dramatiq worker's
        does while it retries."""
        while s.unsent:
            job, token, call = s.unsent[0]
            try:
                took = self.post_process(s, job, token, call)
            except (RedisConnectionError, RedisTimeoutError) as e:
                raise ackgap_kit.unavailable(
                    f"{s.name}: still retrying the ack of {job} (token {token}): {e}") from e
            s.unsent.pop(0)
            if took:
                with self.lock:
                    self.settled.add((job, token))

    def refusal(self, s, job, token, op="complete"):
        with self.lock:
            # `already_settled` is complete's answer only (the protocol): a
            # fail after its lease was settled is fenced.
            if op == "complete" and (job, token) in self.settled:
                return {"outcome": "already_settled"}
            current = self.deliveries.get(job, 0)
        state = self.snapshot(s)["jobs"].get(job)
        if state is None and current == 0:
            return {"outcome": "missing"}
        if state not in ("pending", "active", "done", "dead"):
            state = "pending"
        return {"outcome": "fenced", "current": current, "state": state}

    def known(self, job, token):
        with self.lock:
            return (job, token) in self.leases

    def reach(self, s):
        """Connects and sends what this worker owes (`resend`): False when
        the server cannot be reached now."""
        try:
            s.connect()
            self.resend(s)
            return True
        except ackgap_kit.Failure as e:
            if e.kind != "unavailable":
                raise
            return False

    def op_complete(self, s, req):
        job, token = req["job"], req["token"]
        if not self.reach(s):
            if not self.known(job, token):
                raise ackgap_kit.unavailable(f"{s.name}: the server cannot be reached")
            # Dramatiq's worker, its actor done, post-processes the message
            # (the ack) and retries it until the connection recovers: it
            # never gives a message up while it lives.
            s.unsent.append((job, token, lambda c, m: c.ack(m)))
            raise ackgap_kit.unknown(f"{s.name}: the server cannot be reached; the ack is sent before "
                                     "this worker's next call, as Dramatiq's worker retries it")
        if not self.known(job, token):
            return self.refusal(s, job, token)
        if self.settle(s, req, lambda c, m: c.ack(m)):
            with self.lock:
                self.settled.add((job, token))
            return {"outcome": "settled"}
        return self.refusal(s, job, token)

    def op_fail(self, s, req):
        reached = self.reach(s)
        job, token = req["job"], req["token"]
        if not self.known(job, token):
            if not reached:
                raise ackgap_kit.unavailable(f"{s.name}: the server cannot be reached")
            return self.refusal(s, job, token, "fail")
        # A server out of reach goes on as Dramatiq's worker does: the
        # Retries enqueue meets the connection error, and the message's
        # post-processing is kept for the worker's next call (below).
        message = self.leases[(job, token)]
        # What Dramatiq's WorkerThread does when the actor raised: the
        # middleware's after_process_message (Retries: re-enqueue with the
        # delay when retries are left, else message.fail()), then the
        # consumer's post_process_message: nack if failed, else ack.
        # Broker.emit_after logs and swallows a middleware's exception (the
        # retry's enqueue meeting a connection error): the message is then
        # neither failed nor re-enqueued, and is acked (below).
        s.last.message = None
        s.broker.emit_after("process_message", message, exception=dramatiq.Retry(delay=req["retry_delay_ms"]))
        if message.failed:
            if self.settle(s, req, lambda c, m: c.nack(m)):
                with self.lock:
                    self.settled.add((job, token))
                return {"outcome": "dead"}
            return self.refusal(s, job, token, "fail")
        retry = s.last.message
        held = self.settle(s, req, lambda c, m: c.ack(m))
        if held:
            with self.lock:
                self.settled.add((job, token))
        if retry is None:
            # Neither failed nor re-enqueued: the Retries enqueue raised,
            # and emit_after logged and swallowed it. The message was acked
            # all the same, as Dramatiq's worker acks it: no retry exists.
            raise ackgap_kit.unknown(f"{s.name}: the Retries middleware's enqueue of the retry failed "
                                     "(Dramatiq logs and swallows it) and the message was acked")
        # The retry was enqueued whether or not this broker still held the
        # message (Retries does not look): the job is pending again either
        # way, and that is what Dramatiq did.
        eta = retry.options.get("eta")
        return {"outcome": "requeued", "ready_at_ms": int(eta) if eta is not None else 0}

    def op_reap(self, s, req):
        s.connect()
        H = self.heartbeat_ms()
        s.broker.heartbeat_timeout = H
        # The delay pump heartbeats here, so the maintenance never takes
        # the delayed messages it holds (a Dramatiq worker's delay consumer
        # polls at least every worker_timeout).
        self.run_pump()
        with self.lock:
            ids = list(self.broker_ids)
        hb = f"{self.queue}:__heartbeats__"
        msgs = f"{self.queue}:{QUEUE}.msgs"

        def before(pipe):
            pipe.zrange(hb, 0, -1, withscores=True)
            pipe.hgetall(msgs)
            for b in ids:
                pipe.smembers(s.acks_key(QUEUE, b))
                pipe.zscore(hb, b)

        def calls():
            # `qsize` only reads; with maintenance_chance = SCALE the
            # dispatch runs its maintenance first, for this queue name.
            s.broker.do_qsize(QUEUE)

        def after(pipe):
            pipe.zscore(hb, s.broker.broker_id)

        replies = s.in_multi(before, calls, after)
        # The delay queue's own maintenance (messages a dead broker's delay
        # consumer held); the pump is alive, so normally nothing moves.
        s.broker.do_qsize(dq_name(QUEUE))
        beats, stored = replies[0], replies[1]
        now = replies[-1]
        if now is None:
            raise ackgap_kit.unknown("reap: no heartbeat of the reaper after its dispatch")
        cutoff = now - H
        mine = set(ids)
        strangers = [b.decode() if isinstance(b, bytes) else b for b, score in beats if score <= cutoff]
        strangers = [b for b in strangers if b not in mine]
        if strangers:
            raise ackgap_kit.unknown(f"reap: dead brokers this adapter did not create: {strangers}")
        moved = []
        for i, b in enumerate(ids):
            members, score = replies[2 + 2 * i], replies[3 + 2 * i]
            if score is None or score > cutoff:
                continue
            for mid in sorted(members):
                if mid in stored:
                    moved.append(job_of(stored[mid]))
        return [{"job": j, "to": "pending"} for j in moved[: req["limit"]] if j is not None]

    def snapshot(self, s):
        raw = s.client.eval(READ_LUA, 0, self.queue, QUEUE)
        dec = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
        queue_list, msgs, dq_list, dq_msgs, xq, xq_msgs, admitted, acks = raw
        msgs, dq_msgs, xq_msgs = (
            {dec(k): v for k, v in pairs(h).items()} for h in (msgs, dq_msgs, xq_msgs))
        # Where each message id is: (place, state).
        places = {}
        for mid in queue_list:
            places.setdefault(dec(mid), []).append(("queue", "pending"))
        for mid in dq_list:
            places.setdefault(dec(mid), []).append(("delay queue", "pending"))
        for mid in xq:
            places.setdefault(dec(mid), []).append(("dead-letter queue", "dead"))
        acks = pairs(acks)
        for key, members in sorted(acks.items()):
            key = dec(key)
            broker_id, _, qname = key[len(f"{self.queue}:__acks__."):].partition(".")
            if qname == QUEUE:
                where = ("acks of " + broker_id, "active")
            elif qname == dq_name(QUEUE):
                # Held by a delay consumer until its eta: still pending.
                where = ("delay acks of " + broker_id, "pending")
            else:
                continue
            for mid in members:
                places.setdefault(dec(mid), []).append(where)
        problems = []
        data = {}
        for hname, h in (("queue", msgs), ("delay queue", dq_msgs), ("dead-letter queue", xq_msgs)):
            for mid, blob in h.items():
                data.setdefault(mid, []).append((hname, blob))
        job_states = {}
        for mid in sorted(set(places) | set(data)):
            where = places.get(mid, [])
            blobs = data.get(mid, [])
            if not blobs:
                problems.append(f"message {mid}: in {', '.join(w for w, _ in where)} without its data")
                continue
            if len(blobs) > 1:
                problems.append(f"message {mid}: data in several hashes ({', '.join(h for h, _ in blobs)})")
            job = job_of(blobs[0][1])
            if job is None:
                problems.append(f"message {mid}: data that is not a Dramatiq message")
                continue
            if not where:
                problems.append(f"message {mid} ({job}): data in the {blobs[0][0]} hash, in no list or acks set")
                state = "vanished"
            else:
                if len(where) > 1:
                    problems.append(f"message {mid} ({job}): in several places [{', '.join(w for w, _ in where)}]")
                state = where[0][1]
            job_states.setdefault(job, []).append(state)
        jobs = {}
        for job, states in job_states.items():
            if len(states) > 1:
                problems.append(f"{job}: {len(states)} live messages ({', '.join(sorted(states))})")
            for pick in ("active", "pending", "vanished", "dead"):
                if pick in states:
                    jobs[job] = pick
                    break
        # A job admitted whose every message is gone from the broker's
        # hashes was acked: only ack (and nack, which moves it to the
        # dead-letter hash) deletes a message's data.
        for job in admitted:
            job = dec(job)
            if job not in jobs:
                jobs[job] = "done"
        return {"jobs": dict(sorted(jobs.items())), "problems": sorted(problems)}

    def op_read(self, s, req):
        s.connect()
        return self.snapshot(s)

    def op_clear(self, s, req):
        s.connect()
        keys = list(s.client.scan_iter(match=f"{self.queue}:*", count=1000))
        for i in range(0, len(keys), 500):
            s.client.delete(*keys[i: i + 500])
        self.reset()
        return None


if __name__ == "__main__":
    ackgap_kit.serve(Adapter())
