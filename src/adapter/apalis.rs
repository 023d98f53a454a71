//! `apalis`: apalis-redis 1.0 under test (only under `--features apalis`),
//! driven through apalis's own public API: each delivery is a real apalis
//! `Worker` (`WorkerBuilder::new(..).backend(..).build(handler)`, run on
//! the runtime), so apalis's own middleware stack (its persistence layer,
//! which sends the lock and the ack; its lifecycle layer, which counts the
//! attempt and turns the handler's answer into `Done` or `Failed`) and its
//! own Lua scripts do every write. The adapter only decides what the
//! handler answers, and when.
//!
//! How the contract maps onto apalis, and where apalis's public API cannot
//! say what the contract asks:
//!
//! - **enqueue** is [`apalis_redis::queries::push_tasks`] (what
//!   `TaskSink::push` calls, public, but answering how many tasks it
//!   admitted) of one task whose apalis task id *is* the job id
//!   (`TaskId::from_string`). apalis answers a second push of a known id
//!   by doing nothing (`HSETNX` on its data hash, counts `(0, 0)`): the
//!   adapter reports that as [`Enqueued::Duplicate`]; no refusal is
//!   invented. `delay_ms` becomes the task's `run_at` (whole seconds, as
//!   apalis stores it); `max_attempts` is stored in the task's metadata,
//!   but apalis's ack script ignores it and allows 25 attempts to every
//!   task (`handle_results.lua`: "we hardcode 25").
//! - **lease** for worker `w` registers a fresh apalis worker `w~N` and
//!   runs it with a one-task backend (`OneDelivery`): apalis's own
//!   `RedisStorage` for registration, heartbeats, events and shutdown, and,
//!   for the one fetch, [`apalis_redis::queries::fetch_next`] (what the
//!   storage's poll calls, public) with a batch of one, which answers "no
//!   task" at once where the storage's stream would park the worker until
//!   woken. A worker per delivery, because apalis has no per-task lease:
//!   a task is held as long as the worker that fetched it heartbeats, and
//!   is re-enqueued when that worker is orphaned. The adapter trait says
//!   nothing of a worker's crash, so a worker per delivery that heartbeats
//!   only while it polls (registration, the lock, the ack) makes apalis's
//!   orphan rule the lease: the deadline is the worker's score in apalis's
//!   workers set (its registration, in whole seconds of the client clock)
//!   plus the orphan timeout, [`ORPHANED_S`]. The `lease_ms` asked for is
//!   not apalis's to take: its orphan timeout is one setting per queue.
//! - **tokens** are delivery numbers the adapter counts (`HINCRBY` on a key
//!   of its own): apalis's `attempts` counts acks, not deliveries (an
//!   orphaned task comes back with the same count), so it cannot name a
//!   delivery. **fences** is false: apalis's ack never sees a token. Its
//!   ack script checks that the task is in the acking *worker's* in-flight
//!   set (`SREM`, else "task not executed by worker"), which refuses a
//!   stale ack once the task was re-enqueued; the adapter reports that
//!   refusal as [`Settled::Fenced`].
//! - **complete** and **fail** answer the handler of the delivery's worker
//!   (`Ok(())`, or an error: apalis's lifecycle then records `Done` or
//!   `Failed`), and wait until that worker has flushed its ack on shutdown
//!   (`poll_close`) and stopped. A failed task goes back to apalis's
//!   scheduled set `attempt` seconds later (its own backoff; the
//!   contract's `retry_delay_ms` has no place in it), or to its dead set
//!   after 25 attempts.
//! - **extend** is not supported: apalis renews a worker's heartbeat on
//!   its own timer inside its poll loop (`keep_alive`, `renew_leases`);
//!   neither is public, and a heartbeat of a delivery's worker would also
//!   re-enqueue other workers' orphans. It is left out of `operations` and
//!   refused if called.
//! - **reap** is a heartbeat of a reaper worker of the adapter's own:
//!   apalis has no reaper, every worker's heartbeat re-enqueues the tasks
//!   of workers silent for longer than the orphan timeout
//!   (`reenqueue_orphaned`, not public). The reaper's heartbeat interval is
//!   [`REAPER_HEARTBEAT`], so a reap polls its storage, waits one interval
//!   and polls again: at least one heartbeat runs. The answer is read
//!   around it: the tasks in the in-flight sets of the workers the
//!   heartbeat removed (a task acked between the read and the heartbeat
//!   would be reported too). `limit` is not apalis's either.
//! - **read** reads apalis's keys in one script: the active list and the
//!   scheduled set are `pending`, a worker's in-flight set `active`, the
//!   done and dead sets `done` and `dead`; a task in none is `vanished`.
//! - **time**: apalis reads the client's clock, in whole seconds, in every
//!   script; `logical_time` is false and every `now_ms` is ignored.
//!
//! Every key is apalis's queue `emq:{name}:apalis` (and the adapter's two
//! counters beside it), under the queue's hash tag, so `clear` is the
//! queue's own. A delivery whose worker never acks (a crash) stays parked
//! until the adapter is dropped, which aborts it without an ack.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use apalis_core::backend::finalize::Ephemeral;
use apalis_core::backend::{Backend, BackendConfig};
use apalis_core::error::{BoxDynError, WorkerError};
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::task_id::TaskId;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_core::worker::context::WorkerContext;
use apalis_redis::{Config, RedisStorage, RedisTask};
use redis::aio::ConnectionManager;
use redis::Script;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Adapter, BoxFuture, Capabilities, Operation, Read};
use crate::queue::client::EnqueueOptions;
use crate::queue::{
    Enqueued, Extended, Failed, JobState, Keys, Lease, Queue, QueueError, Reaped, Settled,
};

/// The orphan timeout in seconds: a worker whose last heartbeat (a whole
/// second of the client clock) is this many seconds old or more loses its
/// tasks to the next heartbeat of another worker.
pub const ORPHANED_S: u64 = 2;

/// The reaper's heartbeat interval; with 40 missed
/// heartbeats it makes [`ORPHANED_S`] (apalis: interval × missed, in whole
/// seconds).
pub const REAPER_HEARTBEAT: Duration = Duration::from_millis(50);

/// The reaper's missed heartbeats (see [`REAPER_HEARTBEAT`]).
const REAPER_MISSED: usize = 40;

/// How long a complete or fail waits for the delivery's worker to flush
/// its ack and stop before the outcome is unknown.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a lease waits for its worker's one fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// apalis's ack script's error when the acking worker no longer holds the
/// task.
const NOT_HELD: &str = "task not executed by worker";

/// Every job's place in apalis's keys, atomically.
/// KEYS: data, active, scheduled, done, dead, workers.
/// ARGV: the in-flight sets' prefix.
/// Returns: ids, active, scheduled, done, dead, {worker, id, ...}.
const READ: &str = r#"
local inflight = {}
for _, w in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
  for _, id in ipairs(redis.call('SMEMBERS', ARGV[1] .. ':' .. w)) do
    table.insert(inflight, w); table.insert(inflight, id)
  end
end
return {redis.call('HKEYS', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1),
  redis.call('ZRANGE', KEYS[3], 0, -1), redis.call('SMEMBERS', KEYS[4]),
  redis.call('SMEMBERS', KEYS[5]), inflight}
"#;

/// What apalis's keys hold, read at one instant.
#[derive(Debug, Default)]
struct Places {
    ids: Vec<String>,
    active: Vec<String>,
    scheduled: Vec<String>,
    done: BTreeSet<String>,
    dead: BTreeSet<String>,
    /// (worker, task id) for every in-flight task.
    inflight: Vec<(String, String)>,
}

impl Places {
    /// Every place `id` is in.
    fn of(&self, id: &str) -> Vec<&'static str> {
        let mut places = Vec::new();
        let count = |list: &[String]| list.iter().filter(|x| *x == id).count();
        places.extend(std::iter::repeat_n("pending", count(&self.active)));
        places.extend(std::iter::repeat_n("pending", count(&self.scheduled)));
        let held = self.inflight.iter().filter(|(_, t)| t == id).count();
        places.extend(std::iter::repeat_n("active", held));
        if self.done.contains(id) {
            places.push("done");
        }
        if self.dead.contains(id) {
            places.push("dead");
        }
        places
    }

    fn read(&self) -> Read {
        let mut out = Read::default();
        for id in &self.ids {
            let places = self.of(id);
            if places.len() > 1 {
                out.problems
                    .push(format!("{id}: in several places [{}]", places.join(", ")));
            }
            let state = places.first().copied().unwrap_or("vanished");
            out.jobs.insert(id.clone(), state.to_owned());
        }
        out.problems.sort();
        out
    }

    fn state(&self, id: &str) -> JobState {
        match self.of(id).first().copied() {
            Some("active") => JobState::Active,
            Some("done") => JobState::Done,
            Some("dead") => JobState::Dead,
            _ => JobState::Pending,
        }
    }
}

/// The task one delivery's worker fetched, as its backend reports it.
struct Fetched {
    id: String,
    payload: Vec<u8>,
}

/// The one fetch's answer, or why there was none (an outcome unknown to
/// the lease).
type FetchReport = Result<Option<Fetched>, String>;
type FetchFuture =
    Pin<Box<dyn Future<Output = Result<Vec<RedisTask>, apalis_redis::Error>> + Send>>;

/// The backend of one delivery's worker: apalis's `RedisStorage` for
/// everything but the fetch, which is one [`apalis_redis::queries::fetch_next`]
/// (batch of one) reported to the adapter; after it, the stream ends and
/// the worker shuts down once its handler has answered.
struct OneDelivery {
    storage: RedisStorage<Vec<u8>>,
    fetch: Option<FetchFuture>,
    report: Option<oneshot::Sender<FetchReport>>,
    served: bool,
}

impl Backend for OneDelivery {
    type Task = RedisTask;
    type Error = apalis_redis::Error;

    fn poll_ready(
        &mut self,
        cx: &mut Context<'_>,
        worker: &WorkerContext,
    ) -> Poll<Result<(), Self::Error>> {
        match self.storage.poll_ready(cx, worker) {
            Poll::Ready(Err(e)) => {
                // Registration failed: the lease learns it here.
                if let Some(report) = self.report.take() {
                    let _ = report.send(Err(format!("apalis worker registration: {e}")));
                }
                Poll::Ready(Err(e))
            }
            other => other,
        }
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        worker: &WorkerContext,
    ) -> Poll<Option<Result<Self::Task, Self::Error>>> {
        if self.served {
            return Poll::Ready(None);
        }
        if self.fetch.is_none() {
            let mut conn = self.storage.get_connection().clone();
            let config = self.storage.get_config().clone();
            let worker = worker.clone();
            self.fetch = Some(Box::pin(async move {
                apalis_redis::queries::fetch_next(&mut conn, &worker, &config).await
            }));
        }
        let Some(fetch) = self.fetch.as_mut() else {
            return Poll::Ready(None);
        };
        let res = match fetch.as_mut().poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(res) => res,
        };
        self.fetch = None;
        self.served = true;
        let report = self.report.take();
        let send = |r: FetchReport| {
            if let Some(report) = report {
                let _ = report.send(r);
            }
        };
        match res {
            Ok(tasks) => match tasks.into_iter().next() {
                Some(task) => {
                    let id = task
                        .ctx()
                        .task_id()
                        .map(|t| t.to_string())
                        .unwrap_or_default();
                    let payload =
                        serde_json::from_slice(&task.args).unwrap_or_else(|_| task.args.clone());
                    send(Ok(Some(Fetched { id, payload })));
                    Poll::Ready(Some(Ok(task)))
                }
                None => {
                    send(Ok(None));
                    Poll::Ready(None)
                }
            },
            Err(e) => {
                send(Err(format!("apalis fetch_next: {e}")));
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    fn poll_close(
        &mut self,
        cx: &mut Context<'_>,
        worker: &WorkerContext,
    ) -> Poll<Result<(), Self::Error>> {
        self.storage.poll_close(cx, worker)
    }
}

impl BackendConfig for OneDelivery {
    type Args = Vec<u8>;
    type Id = <RedisStorage<Vec<u8>> as BackendConfig>::Id;
    type Kind = Ephemeral;
    type Config = Config;
    type Layer = <RedisStorage<Vec<u8>> as BackendConfig>::Layer;

    fn config(&self) -> &Config {
        self.storage.get_config()
    }

    fn middleware(&mut self, worker: &mut WorkerContext) -> Self::Layer {
        self.storage.middleware(worker)
    }
}

/// What the handler of a delivery answers: `Ok` completes, `Err` fails.
type Decision = Result<(), String>;

/// A delivery in flight: its worker, parked in its handler until told.
struct Held {
    decision: oneshot::Sender<Decision>,
    /// The worker's context (shared with the running worker): stopping it
    /// after the handler's answer lets the worker flush its ack and exit.
    ctx: WorkerContext,
    join: JoinHandle<Result<(), WorkerError>>,
}

/// A delivery's worker just started: its fetch's report to come, and the
/// delivery to hold if it fetched a task.
struct Spawned {
    report: oneshot::Receiver<FetchReport>,
    held: Held,
}

/// The reaper: an apalis worker that fetches nothing and only heartbeats.
struct Reaper {
    storage: RedisStorage<Vec<u8>>,
    ctx: WorkerContext,
}

impl Reaper {
    async fn beat(&mut self) -> Result<(), apalis_redis::Error> {
        let Reaper { storage, ctx } = self;
        poll_fn(|cx| storage.poll_ready(cx, ctx)).await
    }
}

/// apalis-redis 1.0 behind the adapter trait (see the module docs).
pub struct Apalis {
    queue: Queue,
    /// apalis's queue name: `emq:{name}:apalis`.
    apalis_queue: String,
    deliveries: String,
    incarnations: String,
    held: Mutex<HashMap<(String, u64), Held>>,
    reaper: tokio::sync::Mutex<Option<Reaper>>,
}

impl std::fmt::Debug for Apalis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Apalis")
            .field("queue", &self.apalis_queue)
            .finish()
    }
}

impl Drop for Apalis {
    fn drop(&mut self) {
        // A parked delivery dies with its process: no ack.
        if let Ok(held) = self.held.get_mut() {
            for (_, h) in held.drain() {
                h.join.abort();
            }
        }
    }
}

fn apalis_error(op: &'static str, e: apalis_redis::Error) -> QueueError {
    match e {
        apalis_redis::Error::Database(e) => QueueError::from_redis(op, e),
        other => QueueError::Unknown {
            op,
            reason: other.to_string(),
        },
    }
}

impl Apalis {
    /// apalis-redis on `queue`'s server, under its hash tag.
    pub fn new(queue: &Queue) -> Apalis {
        let apalis_queue = format!("emq:{{{}}}:apalis", queue.keys().name);
        Apalis {
            deliveries: format!("{apalis_queue}:ackgap-deliveries"),
            incarnations: format!("{apalis_queue}:ackgap-incarnations"),
            apalis_queue,
            queue: queue.on_server_clock(),
            held: Mutex::new(HashMap::new()),
            reaper: tokio::sync::Mutex::new(None),
        }
    }

    fn config(&self) -> Config {
        Config::default().queue(&self.apalis_queue).batch_size(1)
    }

    fn storage(&self, config: Config) -> RedisStorage<Vec<u8>> {
        RedisStorage::new(self.queue.connection()).with_config(config)
    }

    fn conn(&self) -> ConnectionManager {
        self.queue.connection()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u64), Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh worker name: `w~N`, N counted on the server so that names
    /// never repeat (apalis refuses to register a name seen recently).
    async fn incarnation(&self, op: &'static str, worker: &str) -> Result<String, QueueError> {
        let n: u64 = redis::cmd("INCR")
            .arg(&self.incarnations)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| QueueError::from_redis(op, e))?;
        Ok(format!("{worker}~{n}"))
    }

    async fn places(&self, op: &'static str) -> Result<Places, QueueError> {
        let c = self.config();
        type Raw = (
            Vec<String>,
            Vec<String>,
            Vec<String>,
            Vec<String>,
            Vec<String>,
            Vec<String>,
        );
        let (ids, active, scheduled, done, dead, inflight): Raw = Script::new(READ)
            .key(c.job_data_hash())
            .key(c.active_jobs_list())
            .key(c.scheduled_jobs_set())
            .key(c.done_jobs_set())
            .key(c.dead_jobs_set())
            .key(c.workers_set())
            .arg(c.inflight_jobs_set())
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| QueueError::from_redis(op, e))?;
        Ok(Places {
            ids,
            active,
            scheduled,
            done: done.into_iter().collect(),
            dead: dead.into_iter().collect(),
            inflight: inflight
                .chunks(2)
                .filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone())))
                .collect(),
        })
    }

    /// The job's delivery count and state, for a refused settle.
    async fn refusal(
        &self,
        op: &'static str,
        id: &str,
    ) -> Result<Option<(u64, JobState)>, QueueError> {
        let places = self.places(op).await?;
        if !places.ids.iter().any(|x| x == id) {
            return Ok(None);
        }
        let current: Option<u64> = redis::cmd("HGET")
            .arg(&self.deliveries)
            .arg(id)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| QueueError::from_redis(op, e))?;
        Ok(Some((current.unwrap_or(0), places.state(id))))
    }

    /// Tells delivery (`id`, `token`)'s handler `decision` and waits until
    /// its worker has flushed the ack and stopped: `Ok(true)` when apalis
    /// took the ack, `Ok(false)` when it refused it as not held, `Err`
    /// when the outcome is unknown or the delivery is not this adapter's.
    async fn settle(
        &self,
        op: &'static str,
        id: &str,
        token: u64,
        decision: Decision,
    ) -> Result<Option<bool>, QueueError> {
        let held = self.held().remove(&(id.to_owned(), token));
        let Some(mut held) = held else {
            return Ok(None);
        };
        let _ = held.decision.send(decision);
        // As a handler's `worker.stop()` does: the worker finishes the task
        // in hand, flushes its events (the ack) and exits.
        let _ = held.ctx.stop();
        let ran = tokio::time::timeout(SETTLE_TIMEOUT, &mut held.join).await;
        let unknown = |reason: String| QueueError::Unknown { op, reason };
        match ran {
            Err(_) => {
                held.join.abort();
                Err(unknown(format!(
                    "the delivery's apalis worker did not stop within {SETTLE_TIMEOUT:?}"
                )))
            }
            Ok(Err(e)) => Err(unknown(format!("the delivery's apalis worker died: {e}"))),
            Ok(Ok(Ok(()))) => Ok(Some(true)),
            Ok(Ok(Err(e))) => {
                let message = e.to_string();
                if message.contains(NOT_HELD) {
                    Ok(Some(false))
                } else {
                    Err(unknown(format!("apalis worker: {message}")))
                }
            }
        }
    }

    /// Starts apalis worker `name` on a [`OneDelivery`] backend, its
    /// handler parked until told what to answer.
    fn spawn_delivery(&self, name: &str, config: Config) -> Spawned {
        let (report_tx, report) = oneshot::channel();
        let (decision, decision_rx) = oneshot::channel::<Decision>();
        let backend = OneDelivery {
            storage: self.storage(config),
            fetch: None,
            report: Some(report_tx),
            served: false,
        };
        let told = Arc::new(Mutex::new(Some(decision_rx)));
        let handler = move |_args: Vec<u8>| {
            let told = Arc::clone(&told);
            async move {
                let rx = told.lock().unwrap_or_else(|e| e.into_inner()).take();
                let answer = match rx {
                    Some(rx) => rx.await.ok(),
                    None => None,
                };
                match answer {
                    Some(Ok(())) => Ok(()),
                    Some(Err(reason)) => Err(BoxDynError::from(reason)),
                    // Nobody will answer: the process died with the
                    // delivery, which must not ack.
                    None => std::future::pending().await,
                }
            }
        };
        let ctx = WorkerContext::new(name);
        let worker = WorkerBuilder::new(&ctx).backend(backend).build(handler);
        Spawned {
            report,
            held: Held {
                decision,
                ctx,
                join: tokio::spawn(worker.run()),
            },
        }
    }

    async fn lease_as(&self, worker: &str) -> Result<Option<Lease>, QueueError> {
        const OP: &str = "lease";
        let name = self.incarnation(OP, worker).await?;
        let config = self.config();
        let Spawned { report, held } = self.spawn_delivery(&name, config.clone());
        let fetched = match tokio::time::timeout(FETCH_TIMEOUT, report).await {
            Ok(Ok(Ok(fetched))) => fetched,
            Ok(Ok(Err(reason))) => {
                held.join.abort();
                return Err(QueueError::Unknown { op: OP, reason });
            }
            Ok(Err(_)) => {
                let ran = held.join.await;
                return Err(QueueError::Unknown {
                    op: OP,
                    reason: format!("the apalis worker stopped before its fetch: {ran:?}"),
                });
            }
            Err(_) => {
                held.join.abort();
                return Err(QueueError::Unknown {
                    op: OP,
                    reason: format!("no fetch within {FETCH_TIMEOUT:?}"),
                });
            }
        };
        let Some(Fetched { id, payload }) = fetched else {
            // Nothing to do: the worker's stream has ended; stopped, it
            // exits. Its name stays in apalis's workers set (apalis's
            // shutdown removes the wrong member) until a reaper's
            // heartbeat finds it orphaned.
            let _ = held.ctx.stop();
            return Ok(None);
        };
        let (token, registered_s): (u64, Option<f64>) = redis::pipe()
            .cmd("HINCRBY")
            .arg(&self.deliveries)
            .arg(&id)
            .arg(1)
            .cmd("ZSCORE")
            .arg(config.workers_set())
            .arg(&name)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| QueueError::from_redis(OP, e))?;
        let deadline_ms = (registered_s.unwrap_or(0.0) as u64 + ORPHANED_S) * 1000;
        self.held().insert((id.clone(), token), held);
        Ok(Some(Lease {
            id,
            token,
            deadline_ms,
            payload,
        }))
    }

    /// A reaper registered in apalis (a worker that fetches nothing).
    async fn new_reaper(&self, op: &'static str) -> Result<Reaper, QueueError> {
        let name = self.incarnation(op, "reaper").await?;
        let config = self
            .config()
            .heartbeat_interval(REAPER_HEARTBEAT)
            .missed_heartbeats(REAPER_MISSED);
        let mut fresh = Reaper {
            storage: self.storage(config),
            ctx: WorkerContext::new(&name),
        };
        fresh.beat().await.map_err(|e| apalis_error(op, e))?;
        Ok(fresh)
    }

    /// Polls the reaper's storage, waits one heartbeat interval and polls
    /// again: at least one heartbeat (apalis's `reenqueue_orphaned`) runs.
    async fn heartbeat(reaper: &mut Reaper) -> Result<(), apalis_redis::Error> {
        reaper.beat().await?;
        tokio::time::sleep(REAPER_HEARTBEAT + Duration::from_millis(5)).await;
        reaper.beat().await
    }

    async fn reap_orphans(&self) -> Result<Vec<Reaped>, QueueError> {
        const OP: &str = "reap";
        let mut reaper = self.reaper.lock().await;
        let before = self.places(OP).await?;
        let beat = match reaper.as_mut() {
            Some(r) => Self::heartbeat(r).await,
            None => Err(apalis_redis::Error::WorkerOutOfSync),
        };
        if beat.is_err() {
            // No reaper yet, or apalis no longer knows it (its keep-alive
            // refuses a worker another heartbeat found silent, and a dead
            // storage stays dead): register a new one, as a restarted
            // process would, and beat with it.
            *reaper = None;
            let mut fresh = self.new_reaper(OP).await?;
            Self::heartbeat(&mut fresh)
                .await
                .map_err(|e| apalis_error(OP, e))?;
            *reaper = Some(fresh);
        }
        let workers: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.config().workers_set())
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| QueueError::from_redis(OP, e))?;
        let mut out: BTreeMap<String, Reaped> = BTreeMap::new();
        for (worker, id) in before.inflight {
            if !workers.contains(&worker) {
                out.insert(
                    id.clone(),
                    Reaped {
                        id,
                        to: JobState::Pending,
                    },
                );
            }
        }
        Ok(out.into_values().collect())
    }
}

impl Adapter for Apalis {
    fn name(&self) -> &str {
        "apalis"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            operations: vec![
                Operation::Enqueue,
                Operation::Lease,
                Operation::Complete,
                Operation::Fail,
                Operation::Reap,
                Operation::Read,
                Operation::Clear,
            ],
            // A repeated task id is skipped by apalis (`duplicate`).
            dedup: true,
            logical_time: false,
            follows_clock: false,
            fences: false,
            tokens: super::Tokens::Rising,
            recovery_ms: None,
        }
    }

    fn keys(&self) -> &Keys {
        self.queue.keys()
    }

    fn connection(&self) -> ConnectionManager {
        self.queue.connection()
    }

    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        _now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        Box::pin(async move {
            const OP: &str = "enqueue";
            let args = serde_json::to_vec(payload).map_err(|e| QueueError::BadArgument {
                op: OP,
                message: e.to_string(),
            })?;
            let mut task = TaskBuilder::new(args)
                .task_id(TaskId::from_string(id))
                .max_attempts(options.max_attempts as usize);
            if options.delay_ms > 0 {
                task = task.run_after(Duration::from_millis(options.delay_ms));
            }
            let (enqueued, scheduled) = apalis_redis::queries::push_tasks(
                &mut self.conn(),
                &self.config(),
                &[task.build()],
            )
            .await
            .map_err(|e| apalis_error(OP, e))?;
            Ok(if enqueued + scheduled > 0 {
                Enqueued::Enqueued
            } else {
                Enqueued::Duplicate
            })
        })
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        _lease_ms: u64,
        _now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(self.lease_as(worker))
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(async move {
            const OP: &str = "complete";
            if self.settle(OP, id, token, Ok(())).await? == Some(true) {
                return Ok(Settled::Settled);
            }
            Ok(match self.refusal(OP, id).await? {
                None => Settled::Missing,
                Some((current, state)) => Settled::Fenced { current, state },
            })
        })
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        _retry_delay_ms: u64,
        _now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Box::pin(async move {
            const OP: &str = "fail";
            let failed = self
                .settle(OP, id, token, Err("ackgap: fail".into()))
                .await?;
            if failed != Some(true) {
                return Ok(match self.refusal(OP, id).await? {
                    None => Failed::Missing,
                    Some((current, state)) => Failed::Fenced { current, state },
                });
            }
            let c = self.config();
            let (ready_s, dead): (Option<f64>, bool) = redis::pipe()
                .cmd("ZSCORE")
                .arg(c.scheduled_jobs_set())
                .arg(id)
                .cmd("SISMEMBER")
                .arg(c.dead_jobs_set())
                .arg(id)
                .query_async(&mut self.conn())
                .await
                .map_err(|e| QueueError::from_redis(OP, e))?;
            Ok(match (dead, ready_s) {
                (true, _) => Failed::Dead,
                // Already promoted by a fetch: ready now.
                (false, s) => Failed::Requeued {
                    ready_at_ms: s.map_or(0, |s| s as u64 * 1000),
                },
            })
        })
    }

    fn extend<'a>(
        &'a self,
        _id: &'a str,
        _token: u64,
        _lease_ms: u64,
        _now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        Box::pin(async move {
            Err(QueueError::BadArgument {
                op: "extend",
                message: "apalis-redis exposes no per-task lease extension".into(),
            })
        })
    }

    fn reap(
        &self,
        _limit: u64,
        _now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(self.reap_orphans())
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(async move { Ok(self.places("read").await?.read()) })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move {
            let parked: Vec<Held> = self.held().drain().map(|(_, h)| h).collect();
            for h in parked {
                h.join.abort();
            }
            *self.reaper.lock().await = None;
            self.queue.clear().await?;
            // register_worker lists every queue in a key of apalis's own,
            // outside the hash tag.
            let _: () = redis::cmd("ZREM")
                .arg("core:apalis:queues:list")
                .arg(self.config().workers_set())
                .query_async(&mut self.conn())
                .await
                .map_err(|e| QueueError::from_redis("clear", e))?;
            Ok(())
        })
    }
}
