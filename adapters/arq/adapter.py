"""arq under ackgap: the adapter protocol (docs/adapter-protocol.md) over
arq 0.28.0 (PyPI), on the kit (adapters/kit/python/ackgap_kit.py). Started
by `adapters/arq/run` inside the venv ci/install-adapters builds.

arq has no "take one job" call: its Worker polls the queue (a sorted set
scored by the ready time), claims a job by setting its in-progress key (WATCH,
then MULTI PSETEX) and runs the job function in a task (`run_job`), whose end
writes the outcome (`finish_job`: result key, ZREM; or, on `Retry`, the
in-progress key deleted and the score moved). This adapter drives exactly
that code, one job at a time, and holds the job function open between the
lease and the settle:

- lease: a fresh `arq.worker.Worker` (max_jobs=1, sharing the worker name's
  one ArqRedis) runs one iteration of its own poll loop,
  `Worker._poll_iteration()`: ZRANGEBYSCORE, `start_jobs` (the WATCH/MULTI
  claim), and `run_job` in a task; `run_job` reads the job, INCRs its retry
  counter, checks max_tries, and calls the job function. The job function
  (`hold`, below) tells the adapter it started, then waits for the settle.
  A job that `run_job` finishes without calling the function (max_tries
  exceeded, job key expired) is arq's own dead-lettering; the lease then
  polls again.
- complete: the job function returns: `run_job` -> `finish_job(finish=True)`
  (result key, ZREM, DEL of the job, retry and in-progress keys).
- fail: the job function raises `arq.worker.Retry(defer=retry_delay_ms)`
  while arq's own `ctx['job_try']` is below the function's `max_tries`
  (`run_job` -> `finish_job(finish=False, incr_score)`: in-progress key
  deleted, score moved by the delay); on the last try it raises an ordinary
  exception, arq's permanent failure (`finish_job(finish=True)` with a
  failed result).
- read: the queue's keys and result values in one Lua script (one instant),
  results decoded with arq's own `deserialize_result`.
- clear: every key matching arq:*{QUEUE}*.

No extend (arq never refreshes an in-progress key), no reap (arq has no
reaper: a dead worker's job stays in the queue and is taken again once its
in-progress key expires on the server).

Settings (environment): ACKGAP_ARQ_KEEP_RESULT_FOREVER (default 0; see
KEEP_RESULT_FOREVER below), ACKGAP_ARQ_SOCKET_TIMEOUT_S (default 10: a call
with no reply within it is `unknown`), ACKGAP_ARQ_LOG (arq's log level on
stderr, default CRITICAL), ACKGAP_ARQ_MAX_TRIES_LIMIT (default 1000: the
largest max_attempts; one job function is registered per value).

With the user's own WorkerSettings (`ackgap ... --app MODULE:ATTR`,
$ACKGAP_APP: the class `arq` runs, or a dict of the same), each lease's
Worker takes the user's keep_result, keep_result_forever, retry_jobs,
allow_abort_jobs, expires_extra_ms, timezone and job serializers (the
client's too); the adapter overrides what it must, each named in the
hello's `app`: the connection (the server ackgap runs; no redis-py
retries), the queue name (the hello's queue), the functions (the adapter's
own, each with ackgap's max_attempts as its max_tries and a day's timeout,
since a held job waits for ackgap's settle), the in-progress key's expiry
(the lease ackgap asks for, where arq sets job_timeout + 10 s), one job at
a time, and no startup, shutdown or job hooks.
"""

import asyncio
import inspect
import itertools
import logging
import os
import sys
import threading
import time
from urllib.parse import unquote, urlparse

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix, retry_key_prefix
from arq.jobs import deserialize_result
from arq.worker import Retry, Worker, func
from redis.asyncio.retry import Retry as RedisRetry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

import ackgap_kit
from ackgap_kit import refused, unavailable, unknown

SOCKET_TIMEOUT_S = float(os.environ.get("ACKGAP_ARQ_SOCKET_TIMEOUT_S", "10"))
MAX_TRIES_LIMIT = int(os.environ.get("ACKGAP_ARQ_MAX_TRIES_LIMIT", "1000"))
# The job functions' timeout: arq cancels a job running longer (and fails it
# for good). A held job waits for ackgap's settle, so it is made long; the
# lease is the in-progress key's expiry, set per lease below.
JOB_TIMEOUT_S = 86400
# keep_result_forever=True is broken in arq 0.28.0 (issue #314, PR #532):
# finish_failed_job sends SET ... PX 0, which fails inside EXEC after the
# job's DELs and ZREM ran, so a job past max_tries vanishes without a
# result. Off by default (arq's own default keep_result, 3600 s);
# ACKGAP_ARQ_KEEP_RESULT_FOREVER=1 turns it on to show that.
KEEP_RESULT_FOREVER = os.environ.get("ACKGAP_ARQ_KEEP_RESULT_FOREVER", "0") == "1"
# How many times one lease polls again after arq dead-lettered the job it
# picked instead of running it.
MAX_POLLS = 1000

logging.getLogger("arq").setLevel(os.environ.get("ACKGAP_ARQ_LOG", "CRITICAL"))
if not logging.getLogger().handlers:
    logging.basicConfig(stream=sys.stderr, format="arq-adapter: %(name)s %(levelname)s %(message)s")


def log(*args):
    ackgap_kit.log("arq", *args)


class JobFailed(Exception):
    """The job function's permanent failure (its last try)."""


# The Worker settings of the user's WorkerSettings the adapter keeps.
KEPT = ("keep_result", "keep_result_forever", "retry_jobs", "allow_abort_jobs", "expires_extra_ms", "timezone",
        "job_serializer", "job_deserializer")


class Slot:
    """One delivery: the job function fills it in and waits on `outcome`."""

    def __init__(self, loop, token, generation):
        self.token = token
        self.generation = generation
        self.entered = loop.create_future()
        self.outcome = loop.create_future()
        self.task = None
        self.job = None
        self.payload = None
        self.job_try = None
        self.max_tries = None
        self.retry_jobs = True  # the Worker's: False makes a Retry a failure for good
        self.settled = None  # "complete" or "fail" once the settle's finish_job committed


def hold_for(max_tries):
    async def hold(ctx, payload):
        slot = ctx["ackgap_slot"]
        slot.job_try = ctx["job_try"]
        slot.max_tries = max_tries
        slot.payload = payload
        slot.entered.set_result(None)
        what, delay_ms = await slot.outcome
        if what == "complete":
            return "done"
        # The job function's own choice, as an arq user writes it: retry
        # while arq's try counter is below max_tries, else fail for good.
        if ctx["job_try"] < max_tries:
            raise Retry(defer=delay_ms / 1000)
        raise JobFailed(f"failed by ackgap on try {ctx['job_try']} of {max_tries}")

    return hold


def function_name(max_tries):
    return f"ackgap-max-tries-{max_tries}"


# One job function per max_tries: arq's max_tries is per function (or per
# Worker), not per job, so the job's function name carries it.
FUNCTIONS = [func(hold_for(n), name=function_name(n), max_tries=n, timeout=JOB_TIMEOUT_S)
             for n in range(1, MAX_TRIES_LIMIT + 1)]


# Reads the queue at one instant: the sorted set with scores, every key of
# the queue's jobs, and each result key's value.
READ = """
local z = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local keys = redis.call('KEYS', ARGV[1])
local vals = {}
for i, k in ipairs(keys) do
  if string.sub(k, 1, #ARGV[2]) == ARGV[2] then vals[i] = redis.call('GET', k) or '' else vals[i] = '' end
end
return {z, keys, vals}
"""


class Session:
    """One worker name: its event loop, its ArqRedis, its live deliveries."""

    def __init__(self, adapter, name, url):
        self.adapter = adapter
        self.name = name
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        u = urlparse(url)
        db = int(u.path.strip("/")) if u.path and u.path.strip("/") else 0
        # arq's own client class. redis-py's retries are off: one protocol
        # call is one attempt; a lost connection mid-call is `unknown`.
        self.pool = ArqRedis(
            host=u.hostname or "127.0.0.1",
            port=u.port or 6379,
            db=db,
            username=unquote(u.username) if u.username else None,
            password=unquote(u.password) if u.password else None,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            retry=RedisRetry(NoBackoff(), 0),
            default_queue_name=adapter.queue_key,
            **{k: v for k, v in adapter.worker_settings.items() if k in ("job_serializer", "job_deserializer")},
        )
        # (job id as arq knows it, token) -> Slot
        self.slots = {}

    def run(self, coro):
        return self.loop.run_until_complete(coro)


class Arq(ackgap_kit.Queue):
    name = "arq"
    # arq reads the process's clock (timestamp_ms: the queue's scores, the
    # retry's defer); its in-progress key's PX runs on the server's clock.
    # The kit sets the first to each request's clock_ms, ackgap the second
    # (README.md, Time).
    logical_time = True
    follows_clock = True
    fences = False

    def __init__(self):
        self.tokens = itertools.count(1)
        self.generation = 0
        self.lock = threading.Lock()

    def setup(self, server, queue, connections):
        super().setup(server, queue, connections)
        # arq's key prefixes (arq:job:, arq:in-progress:, arq:retry:,
        # arq:result:) are module constants; the queue's sorted set is the
        # one name arq lets us choose. So the queue name is in the sorted
        # set's name and in every job id, as a hash tag: every key of this
        # queue contains {QUEUE}.
        self.tag = "{" + queue + "}"
        self.queue_key = f"arq:queue:{self.tag}"
        self.id_prefix = self.tag + ":"
        # The Worker's settings: the adapter's, or those the user's
        # WorkerSettings set (KEPT).
        self.worker_settings = {"job_timeout": JOB_TIMEOUT_S, "keep_result_forever": KEEP_RESULT_FOREVER}
        settings = ackgap_kit.load_app()
        if settings is not None:
            self.load_user_settings(settings)

    def load_user_settings(self, settings):
        """Reads the user's WorkerSettings (a class or a dict, as arq's
        `run_worker` takes it): the settings of KEPT it sets are kept, the
        others are arq's defaults; the hello's `app` says which, and what
        is overridden."""
        spec = ackgap_kit.app_spec()
        if isinstance(settings, dict):
            given = dict(settings)
        elif isinstance(settings, type):
            given = {k: getattr(settings, k) for k in dir(settings) if not k.startswith("_")}
        else:
            raise refused(f"--app {spec}: a {type(settings).__module__}.{type(settings).__qualname__}, not arq "
                          "WorkerSettings (a class or a dict of arq.worker.Worker's settings)")
        self.worker_settings = {"job_timeout": JOB_TIMEOUT_S}
        self.worker_settings.update({k: given[k] for k in KEPT if k in given})
        defaults = inspect.signature(Worker.__init__).parameters
        shown = lambda v: getattr(v, "__qualname__", v)  # noqa: E731
        kept = {k: shown(given[k]) if k in given else f"{shown(defaults[k].default)} (arq's default)" for k in KEPT}
        rs = given.get("redis_settings")
        redis_settings = f"{rs.host}:{rs.port} db {rs.database}" if rs is not None else "arq's default"
        overridden = {
            "redis_settings": f"the server ackgap runs, redis-py retries off, socket timeout {SOCKET_TIMEOUT_S} s "
                              f"(the app's: {redis_settings})",
            "queue_name": f"{self.queue_key!r} (the app's: {given.get('queue_name', 'arq:queue')!r})",
            "functions": "the adapter's own, one per max_tries (ackgap's max_attempts), each with a timeout of "
                         f"{JOB_TIMEOUT_S} s (a held job waits for ackgap's settle)",
            "max_tries": f"per function, ackgap's max_attempts (the app's: {given.get('max_tries', 5)})",
            "job_timeout": f"{JOB_TIMEOUT_S} s; the in-progress key's expiry (arq: job_timeout + 10 s) is ackgap's "
                           f"lease_ms (the app's job_timeout: {given.get('job_timeout', 300)})",
            "max_jobs": "1, one poll per lease (burst off, no signal handlers)",
            "hooks": "on_startup, on_shutdown, on_job_start, on_job_end, after_job_end and cron_jobs not run",
        }
        self.app_report = ackgap_kit.app_report(spec, "arq WorkerSettings", ["arq", "redis"], kept, overridden)

    def arq_id(self, job):
        return self.id_prefix + job

    def our_id(self, arq_id):
        return arq_id[len(self.id_prefix):]

    # --- sessions --------------------------------------------------------
    def open(self, worker, url):
        s = Session(self, worker, url)
        try:
            s.run(s.pool.ping())
        except (RedisConnectionError, RedisTimeoutError, OSError) as e:
            self.drop(s)
            raise unavailable(f"{worker}: cannot connect to {url}: {e}") from e
        return s

    def drop(self, s):
        """Closes the sockets. Nothing of arq runs: the held jobs' tasks stay
        suspended on their futures and are never resumed (resuming or
        cancelling them would run arq's finish_job and put the job back)."""
        try:
            s.run(s.pool.connection_pool.disconnect(inuse_connections=True))
        except Exception as e:  # noqa: BLE001 - the worker is dead either way
            log(f"{s.name}: closing sockets: {e!r}")

    def crash(self, session):
        self.drop(session)
        # Kept referenced so that the suspended coroutines are never closed
        # by the garbage collector (nothing would run, but it logs).
        with self.lock:
            self.graveyard = getattr(self, "graveyard", [])
            self.graveyard.append(session)

    # --- operations ------------------------------------------------------
    def op_enqueue(self, s, req):
        n = req["max_attempts"]
        if not 1 <= n <= MAX_TRIES_LIMIT:
            raise refused(f"max_attempts must be 1..{MAX_TRIES_LIMIT} (one arq function per value), got {n}")
        delay = req["delay_ms"]
        job = s.run(s.pool.enqueue_job(function_name(n), req["payload"], _job_id=self.arq_id(req["job"]),
                                       _queue_name=self.queue_key, _defer_by=delay / 1000 if delay else None))
        # arq's own dedup: None when the job key or its result exists (its
        # WATCH makes a concurrent enqueue of the same id None too).
        return "enqueued" if job is not None else "duplicate"

    def op_lease(self, s, req):
        return s.run(self.lease(s, req["lease_ms"]))

    async def lease(self, s, lease_ms):
        with self.lock:
            generation = self.generation
        for _ in range(MAX_POLLS):
            slot = Slot(s.loop, next(self.tokens), generation)
            w = Worker(FUNCTIONS, queue_name=self.queue_key, redis_pool=s.pool, burst=False, handle_signals=False,
                       max_jobs=1, ctx={"ackgap_slot": slot}, **self.worker_settings)
            slot.retry_jobs = w.retry_jobs
            # arq sets the in-progress key's PX to the longest job timeout
            # plus 10 s; the lease is that key, so it is set to lease_ms.
            # (+0.5: start_jobs truncates the product to whole ms.)
            w.in_progress_timeout_s = (lease_ms + 0.5) / 1000
            started_ms = int(time.time() * 1000)
            await w._poll_iteration()
            if not w.tasks:
                return None
            (arq_id, task), = w.tasks.items()
            await asyncio.wait({slot.entered, task}, return_when=asyncio.FIRST_COMPLETED)
            if slot.entered.done():
                slot.task, slot.job = task, arq_id
                s.slots[(arq_id, slot.token)] = slot
                # The in-progress key's PX started after started_ms.
                return {"job": self.our_id(arq_id), "token": slot.token, "deadline_ms": started_ms + lease_ms,
                        "payload": slot.payload if isinstance(slot.payload, str) else repr(slot.payload)}
            # run_job ended without running the job: an error (raised here:
            # unknown), or arq's own dead-lettering (max_tries exceeded, job
            # key expired): poll again.
            task.result()
            log(f"{s.name}: {arq_id} was dead-lettered by run_job instead of delivered; polling again")
        raise unknown(f"lease: {MAX_POLLS} polls in a row took a job arq dead-lettered")

    def settle(self, s, req, what, delay_ms=0):
        arq_id, token = self.arq_id(req["job"]), req["token"]
        slot = s.slots.get((arq_id, token))
        with self.lock:
            generation = self.generation
        if slot is None or slot.generation != generation:
            # arq settles a job only from the task running it: there is no
            # call for a delivery this worker does not hold (another
            # worker's, a crashed session's, one from before clear).
            raise refused(f"{s.name} holds no delivery of {req['job']} with token {token}: arq finishes a job "
                          "only in the worker task running it; nothing was sent")
        if slot.settled is not None:
            if slot.settled == "complete" and what == "complete":
                # This delivery's own complete committed before; nothing sent.
                return {"outcome": "already_settled"}
            raise refused(f"delivery {token} of {req['job']} ended already ({slot.settled}); nothing was sent")
        if slot.task.done():
            raise refused(f"delivery {token} of {req['job']}: its arq task ended ({slot.task!r}); nothing was sent")
        started_ms = int(time.time() * 1000)
        slot.outcome.set_result((what, delay_ms))
        # run_job resumes: the job function returns or raises, and run_job
        # writes the outcome with finish_job (one MULTI). An error there
        # (connection lost mid-MULTI) is raised here: unknown.
        s.run(asyncio.wait({slot.task}))
        slot.task.result()
        slot.settled = what
        if what == "complete":
            return {"outcome": "settled"}
        if slot.job_try < slot.max_tries and slot.retry_jobs:
            # Retry(defer): arq re-scored the job at its own clock + delay,
            # read after started_ms: a lower bound. (With retry_jobs off,
            # arq finished the Retry as a failure: dead.)
            return {"outcome": "requeued", "ready_at_ms": started_ms + delay_ms}
        return {"outcome": "dead"}

    def op_complete(self, s, req):
        return self.settle(s, req, "complete")

    def op_fail(self, s, req):
        return self.settle(s, req, "fail", req["retry_delay_ms"])

    def op_read(self, s, req):
        z, keys, vals = s.run(s.pool.eval(READ, 1, self.queue_key, f"arq:*{self.tag}*",
                                          result_key_prefix + self.id_prefix))
        queued = {z[i].decode(): float(z[i + 1]) for i in range(0, len(z), 2)}
        kinds = {"job": set(), "progress": set(), "retry": set()}
        results = {}
        prefixes = [(job_key_prefix, "job"), (in_progress_key_prefix, "progress"), (retry_key_prefix, "retry"),
                    (result_key_prefix, "result")]
        for key, val in zip(keys, vals):
            key = key.decode()
            for prefix, kind in prefixes:
                if key.startswith(prefix + self.id_prefix):
                    arq_id = key[len(prefix):]
                    if kind == "result":
                        results[arq_id] = val
                    else:
                        kinds[kind].add(arq_id)
        jobs, problems = {}, []
        for arq_id in sorted(set(queued) | kinds["job"] | set(results)):
            job = self.our_id(arq_id)
            if arq_id in queued:
                jobs[job] = "active" if arq_id in kinds["progress"] else "pending"
                if arq_id not in kinds["job"]:
                    problems.append(f"{job}: in the queue without its job key (arq fails it as expired when taken)")
                if arq_id in results:
                    problems.append(f"{job}: in the queue and has a result")
            elif arq_id in results:
                try:
                    ok = deserialize_result(results[arq_id],
                                            deserializer=self.worker_settings.get("job_deserializer")).success
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{job}: its result does not decode: {e!r}")
                    jobs[job] = "vanished"
                    continue
                jobs[job] = "done" if ok else "dead"
                if arq_id in kinds["job"]:
                    problems.append(f"{job}: has a result and still its job key")
            else:
                jobs[job] = "vanished"
                problems.append(f"{job}: a job key in no queue and with no result")
        known = {self.arq_id(job) for job in jobs}
        for kind in ("progress", "retry"):
            for arq_id in sorted(kinds[kind] - known):
                problems.append(f"{self.our_id(arq_id)}: an arq:{kind} key of a job the queue does not hold")
        return {"jobs": jobs, "problems": problems}

    def op_clear(self, s, req):
        async def clear():
            keys = [k async for k in s.pool.scan_iter(match=f"arq:*{self.tag}*", count=1000)]
            for i in range(0, len(keys), 500):
                await s.pool.delete(*keys[i:i + 500])

        s.run(clear())
        # Deliveries from before the clear are forgotten: their settles are
        # refused (their tasks stay suspended; nothing of them is sent).
        with self.lock:
            self.generation += 1
        return None


if __name__ == "__main__":
    ackgap_kit.serve(Arq())
