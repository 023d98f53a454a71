"""BullMQ under ackgap: the adapter protocol (docs/adapter-protocol.md) over
the PyPI package `bullmq` (3.4.x runs the same Lua scripts as BullMQ for
Node). Started by `adapters/bullmq/run` inside the venv ci/install-adapters
builds.

Every operation goes through BullMQ's own API, the way a BullMQ worker
drives a job:

- enqueue: `Queue.add(name, data, {"jobId", "attempts", "delay"})`.
- lease: `Worker.getNextJob(token)` on a Worker with `lockDuration` =
  lease_ms, one per (worker name, lease_ms), `autorun` off. The token is a
  u64 this adapter hands out, passed to BullMQ as the lock token string, so
  BullMQ's own lock check is what fences.
- complete: `Job.moveToCompleted(value, token, fetchNext=False)`.
- fail: `Job.moveToFailed(err, token)`: BullMQ decides retry or failed from
  the job's attempts, as a worker whose processor raised.
- extend: the `extendLock` script with the token (`backend.extendLock`; the
  Python `Job` has no `extendLock` method, the worker's lock manager calls
  the backend).
- reap: BullMQ's stalled-jobs check, `moveStalledJobsToWait` (what
  `Worker.runStalledJobsCheck` runs every `stalledInterval`).
- read: every job's state from BullMQ's lists and sets in one MULTI.
- clear: `Queue.obliterate(force=True)`, then any key left under the
  queue's prefix is deleted.

Each worker name has its own server connection (the URL from hello's
`connections` if given), so a fault on one worker's connection cuts only
that worker. redis-py's own retries are off (`Retry(NoBackoff(), 0)`): one
protocol call is one attempt, and a connection lost mid-call is `unknown`,
not a silent resend; ackgap's consumers do the retrying.

The protocol's plumbing (hello, one thread and event loop per worker name,
the error rule, crash) is the kit's, adapters/kit/python/ackgap_kit.py:
this file holds only BullMQ's calls.

Settings (environment): ACKGAP_BULLMQ_MAX_STALLED_COUNT (default 1,
BullMQ's default `maxStalledCount`), ACKGAP_BULLMQ_SOCKET_TIMEOUT_S (default
10: a call that gets no reply within it is `unknown`).
"""

import copy
import itertools
import json
import os
import time
import uuid
from urllib.parse import unquote, urlparse

import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

import ackgap_kit
from ackgap_kit import Failure
from bullmq import Job, Queue, Worker
from bullmq.custom_errors import UnrecoverableError

MAX_STALLED_COUNT = int(os.environ.get("ACKGAP_BULLMQ_MAX_STALLED_COUNT", "1"))
SOCKET_TIMEOUT_S = float(os.environ.get("ACKGAP_BULLMQ_SOCKET_TIMEOUT_S", "10"))
# The stalled check's own guard key (`stalled-check`, PX this) keeps two
# checks from running within it; a reap is one explicit check, so the guard
# is made as short as BullMQ allows.
STALLED_INTERVAL_MS = 1
# The job name every enqueued job gets (BullMQ jobs have a name).
JOB_NAME = "ackgap"
# Where BullMQ keeps a job, as the protocol names the state.
STATES = {
    "wait": "pending",
    "paused": "pending",
    "delayed": "pending",
    "prioritized": "pending",
    "waiting-children": "pending",
    "active": "active",
    "completed": "done",
    "failed": "dead",
}
LISTS = ["wait", "paused", "active"]
ZSETS = ["delayed", "prioritized", "waiting-children", "completed", "failed"]


def log(*args):
    ackgap_kit.log("bullmq", *args)


def client_for(url):
    """One redis-py client holding exactly one connection to `url`."""
    u = urlparse(url)
    db = 0
    if u.path and u.path.strip("/"):
        db = int(u.path.strip("/"))
    return aredis.Redis(
        host=u.hostname or "127.0.0.1",
        port=u.port or 6379,
        db=db,
        username=unquote(u.username) if u.username else None,
        password=unquote(u.password) if u.password else None,
        decode_responses=True,
        single_connection_client=True,
        retry=Retry(NoBackoff(), 0),
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S,
    )


class Session:
    """One worker name's connection, Queue and Workers."""

    def __init__(self, adapter, name, url):
        self.adapter = adapter
        self.name = name
        self.client = client_for(url)
        self.queue = None
        self.workers = {}

    async def ensure_connected(self):
        """Connects if not connected; a failure here is `unavailable`: the
        call that follows was certainly not sent."""
        try:
            await self.client.initialize()
            conn = self.client.connection
            if conn is not None and not conn.is_connected:
                await conn.connect()
        except (RedisConnectionError, RedisTimeoutError, OSError) as e:
            raise Failure("unavailable", f"{self.name}: not connected: {e}") from e

    def opts(self):
        return {"connection": self.client, "prefix": self.adapter.prefix}

    def get_queue(self):
        if self.queue is None:
            self.queue = Queue(self.adapter.queue_name, self.opts())
        return self.queue

    def worker(self, lease_ms):
        w = self.workers.get(lease_ms)
        if w is None:
            opts = self.opts()
            opts.update(
                {
                    "autorun": False,
                    "lockDuration": lease_ms,
                    "maxStalledCount": MAX_STALLED_COUNT,
                    "stalledInterval": STALLED_INTERVAL_MS,
                }
            )
            w = Worker(self.adapter.queue_name, no_processor, opts)
            self.workers[lease_ms] = w
        return w

    def any_worker(self):
        """A Worker of this name for settles of a token it did not lease."""
        if self.workers:
            return next(iter(self.workers.values()))
        return self.worker(30000)

    async def close(self):
        try:
            await self.client.aclose()
        except Exception:
            pass


async def no_processor(job, token):
    # Never called: the Workers do not run; the adapter drives them.
    raise RuntimeError("the ackgap adapter drives BullMQ's Worker by hand")


class BullMQ(ackgap_kit.Queue):
    name = "bullmq"
    # BullMQ's scripts take the client's timestamps (round(time.time()*1000));
    # its locks' PX and the stalled check's guard run on the server's clock.
    # The kit sets the first to each request's clock_ms, ackgap the second
    # (README.md, Time).
    logical_time = True
    follows_clock = True
    fences = True

    def __init__(self):
        self.queue_name = None
        self.prefix = None
        # Tokens are the adapter's own u64s, BullMQ's lock token strings.
        self.tokens = itertools.count(1)
        # The Job object each live token was leased with, as a BullMQ worker
        # keeps it between getNextJob and moveToCompleted: a settle with a
        # stale token uses the stale object, like a stalled worker would.
        self.leased = {}
        # The token of each job's latest delivery: a fenced answer's
        # `current` when no lock names a holder (expired or released).
        self.last_token = {}

    def setup(self, server, queue, connections):
        super().setup(server, queue, connections)
        # Every key is bull:{QUEUE}:...: the queue name is the hash tag, so
        # several queues coexist and a queue lives in one cluster slot.
        self.prefix = "bull"
        self.queue_name = "{" + queue + "}"

    async def open(self, worker, url):
        return Session(self, worker, url)

    async def crash(self, s):
        # A dead process's sockets close; nothing of BullMQ's close path
        # (Worker.close) runs, and the locks it held expire on their own.
        await s.close()

    # --- operations ------------------------------------------------------
    async def op_enqueue(self, s, req):
        await s.ensure_connected()
        q = s.get_queue()
        # A duplicate id makes BullMQ return the existing job's id without
        # writing anything, and Queue.add returns a Job either way. The
        # data carries a nonce of this call; the stored data is written only
        # when the job is created, so reading it back tells created (our
        # nonce) from duplicate (another's) without a race: no interleaving
        # of other adds can make a duplicate look like ours.
        nonce = uuid.uuid4().hex
        data = {"payload": req.get("payload", ""), "nonce": nonce}
        opts = {"jobId": req["job"], "attempts": int(req.get("max_attempts", 1))}
        if req.get("delay_ms"):
            opts["delay"] = int(req["delay_ms"])
        job = await q.add(JOB_NAME, data, opts)
        stored = await s.client.hget(q.toKey(job.id), "data")
        try:
            mine = json.loads(stored or "{}").get("nonce") == nonce
        except (ValueError, AttributeError):
            mine = False
        return "enqueued" if mine else "duplicate"

    async def op_lease(self, s, req):
        await s.ensure_connected()
        lease_ms = int(req["lease_ms"])
        w = s.worker(lease_ms)
        # A bounded loop: a job the stalled check marked for failure is
        # failed here, as Worker.processJob does, and the next one fetched.
        for _ in range(1000):
            token = next(self.tokens)
            started_ms = int(time.time() * 1000)
            # getNextJob blocks on the queue's marker for drainDelay seconds
            # once the worker has seen the queue drained; a lease is a poll
            # that answers null at once, so the worker is never left
            # "drained" and getNextJob moves the next job straight to active.
            w.drained = False
            job = await w.getNextJob(str(token))
            if job is None:
                return None
            if job.deferredFailure:
                await job.moveToFailed(UnrecoverableError(job.deferredFailure), str(token))
                continue
            self.leased[(job.id, token)] = job
            self.last_token[job.id] = token
            # The lock's PX started after started_ms: the lease lasts at
            # least until this deadline on the machine's clock.
            payload = job.data.get("payload", "") if isinstance(job.data, dict) else json.dumps(job.data)
            return {"job": job.id, "token": token, "deadline_ms": started_ms + lease_ms, "payload": payload}
        raise Failure("unknown", "lease: more than 1000 deferred failures in a row")

    async def job_for(self, s, job_id, token):
        job = self.leased.get((job_id, token))
        if job is not None:
            if any(job.queue is w for w in s.workers.values()):
                return job
            # Leased by another worker name: the same view of the job, on
            # this worker's connection.
            job = copy.copy(job)
            job.queue = s.any_worker()
            job.backend = job.queue.backend
            return job
        job = await Job.fromId(s.any_worker(), job_id)
        return job

    async def refusal(self, s, job_id, message):
        """A settle or extend BullMQ refused: `missing` when the job does not
        exist, else `fenced` with the lock's holder and the job's state."""
        q = s.get_queue()
        key = q.toKey(job_id)
        exists, holder = await s.client.exists(key), await s.client.get(key + ":lock")
        if not exists:
            return {"outcome": "missing"}
        state = await q.getJobState(job_id)
        try:
            current = int(holder) if holder is not None else self.last_token.get(job_id, 0)
        except ValueError:
            current = self.last_token.get(job_id, 0)
        log(f"{job_id}: refused ({message}); lock {holder!r}, state {state}")
        return {"outcome": "fenced", "current": current, "state": STATES.get(state, "pending")}

    async def op_complete(self, s, req):
        await s.ensure_connected()
        job_id, token = req["job"], int(req["token"])
        job = await self.job_for(s, job_id, token)
        if job is None:
            return {"outcome": "missing"}
        try:
            await job.moveToCompleted("done", str(token), fetchNext=False)
        except TypeError as e:
            return await self.refusal(s, job_id, str(e))
        self.leased.pop((job_id, token), None)
        return {"outcome": "settled"}

    async def op_fail(self, s, req):
        await s.ensure_connected()
        job_id, token = req["job"], int(req["token"])
        job = await self.job_for(s, job_id, token)
        if job is None:
            return {"outcome": "missing"}
        delay = int(req.get("retry_delay_ms") or 0)
        if delay > 0:
            # BullMQ takes a retry's delay from the job's backoff option.
            job.opts["backoff"] = {"type": "fixed", "delay": delay}
        attempts_before = job.attemptsMade
        started_ms = int(time.time() * 1000)
        try:
            await job.moveToFailed(Exception("failed by ackgap"), str(token))
        except TypeError as e:
            return await self.refusal(s, job_id, str(e))
        self.leased.pop((job_id, token), None)
        # Job.moveToFailed retried the job iff attempts were left, the same
        # test it made just now.
        if attempts_before + 1 < int(job.opts.get("attempts") or 1):
            return {"outcome": "requeued", "ready_at_ms": started_ms + delay}
        return {"outcome": "dead"}

    async def op_extend(self, s, req):
        await s.ensure_connected()
        job_id, token, lease_ms = req["job"], int(req["token"]), int(req["lease_ms"])
        w = s.worker(lease_ms)
        started_ms = int(time.time() * 1000)
        ok = await w.backend.extendLock(job_id, str(token), lease_ms)
        if ok == 1:
            return {"outcome": "extended", "deadline_ms": started_ms + lease_ms}
        return await self.refusal(s, job_id, "extendLock returned 0")

    async def op_reap(self, s, req):
        await s.ensure_connected()
        w = s.any_worker()
        if isinstance(req.get("clock_ms"), int):
            # A frozen clock (README.md, Time): the check's guard, set by the
            # previous check with PX STALLED_INTERVAL_MS, lives until the
            # clock moves past it, so a second reap at the same instant would
            # check nothing, where on real time at least that 1 ms passes
            # between two reaps. Each reap is one check on either clock: the
            # guard of a check at this instant (the only one it can be) goes.
            await s.client.delete(s.get_queue().toKey("stalled-check"))
        # Two-phase, as in BullMQ: each check first moves the jobs that the
        # previous check marked and whose lock has expired, then marks every
        # active job. A job stalled more than maxStalledCount times goes to
        # wait with a deferred failure (`defa`): the next worker to fetch it
        # fails it without running it. That is reported as `dead`.
        moved = await w.backend.moveStalledJobsToWait(MAX_STALLED_COUNT, STALLED_INTERVAL_MS)
        out = []
        q = s.get_queue()
        for job_id in moved or []:
            defa = await s.client.hget(q.toKey(job_id), "defa")
            out.append({"job": job_id, "to": "dead" if defa else "pending"})
        return out

    async def op_read(self, s, req):
        await s.ensure_connected()
        q = s.get_queue()
        async with s.client.pipeline(transaction=True) as pipe:
            for name in LISTS:
                pipe.lrange(q.toKey(name), 0, -1)
            for name in ZSETS:
                pipe.zrange(q.toKey(name), 0, -1)
            results = await pipe.execute()
        places = {}
        for name, ids in zip(LISTS + ZSETS, results):
            for job_id in ids:
                places.setdefault(job_id, []).append(name)
        problems = []
        jobs = {}
        for job_id, where in places.items():
            if len(where) > 1:
                problems.append(f"{job_id}: in several places [{', '.join(where)}]")
            jobs[job_id] = STATES[where[0]]
        # Job hashes in no list or set: BullMQ's getState says where.
        known = set(places)
        prefix = q.toKey("")
        reserved = {q.toKey(n) for n in ("meta", "repeat", "de", "events")}
        async for key in s.client.scan_iter(match=prefix + "*", count=1000, _type="hash"):
            job_id = key[len(prefix):]
            if key in reserved or ":" in job_id or job_id in known:
                continue
            state = await q.getJobState(job_id)
            jobs[job_id] = STATES.get(state, "vanished")
            if state not in STATES:
                problems.append(f"{job_id}: a job hash in no list or set ({state})")
        ids = sorted(known)
        if ids:
            async with s.client.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.exists(q.toKey(job_id))
                found = await pipe.execute()
            for job_id, n in zip(ids, found):
                if not n:
                    problems.append(f"{job_id}: an entry without a job hash")
        problems.sort()
        return {"jobs": dict(sorted(jobs.items())), "problems": problems}

    async def op_clear(self, s, req):
        await s.ensure_connected()
        q = s.get_queue()
        await q.obliterate(force=True)
        keys = [k async for k in s.client.scan_iter(match=q.toKey("") + "*", count=1000)]
        for i in range(0, len(keys), 500):
            await s.client.delete(*keys[i : i + 500])
        self.leased.clear()
        self.last_token.clear()
        return None



def main():
    ackgap_kit.serve(BullMQ())


if __name__ == "__main__":
    main()
