//! Queues under test. The checkers judge histories, not scripts, so the
//! harness can judge any queue that implements [`Adapter`]: the reference
//! queue, the classic list patterns the seed contrasts it with, or a user's
//! own. Tokens are whatever the queue grants with a lease; a queue without
//! fencing tokens numbers its deliveries itself.
//!
//! Every time-dependent call takes `now_ms`: `Some` for the explorers'
//! logical time, `None` for the server clock (the chaos runner, production).
//!
//! Everything an adapter names is re-exported here, so that a queue of
//! one's own needs one import: `use ackgap::adapter::*;` brings the trait,
//! [`Wrapper`], the outcome types, [`QueueError`], [`BoxFuture`],
//! [`Keys`], [`Queue`] and [`ConnectionManager`].
//!
//! # Design notes
//!
//! `Reference` (in this file) wraps `Queue`. `by_name` is the `--queue`
//! registry, and `adapter::open` turns a `--queue` into an adapter (a
//! shipped name or `exec:`). `FEATURE_NAMES` and `check_name` make
//! `--queue apalis` in a build without the feature a usage error that names
//! the feature.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};

pub use crate::future::BoxFuture;
pub use crate::queue::client::EnqueueOptions;
pub use crate::queue::{
    CompleteAndLease, Enqueued, Extended, Failed, JobState, Keys, Lease, Queue, QueueError, Reaped,
    Settled, Snapshot,
};

#[cfg(feature = "apalis")]
pub mod apalis;
mod app;
pub mod exec;
mod list;
pub mod listing;
pub mod lmove;
mod protocol;
pub mod rpop;
pub mod serve;
pub mod shipped;
pub mod streams;
mod wrapper;

#[cfg(feature = "apalis")]
pub use apalis::Apalis;
pub use app::{App, APP_ENV};
pub use exec::{log_stderr_to, stderr_log, Exec, ExecError, ExecOptions, STDERR_TAIL};
pub use lmove::Lmove;
pub use rpop::Rpop;
pub use streams::Streams;
pub use wrapper::Wrapper;

/// The names `--queue` takes.
#[cfg(not(feature = "apalis"))]
pub const NAMES: [&str; 4] = ["reference", "lmove", "rpop", "streams"];
/// The names `--queue` takes.
#[cfg(feature = "apalis")]
pub const NAMES: [&str; 5] = ["reference", "lmove", "rpop", "streams", "apalis"];

/// Names `--queue` takes only in a build with a cargo feature: the name and
/// its feature. Such a name in a build without it is a usage error that
/// says so, not an unknown queue.
pub(crate) const FEATURE_NAMES: [(&str, &str); 1] = [("apalis", "apalis")];

/// The shipped adapter called `name`, on `queue`'s server and hash tag.
pub fn by_name(name: &str, queue: &Queue) -> Result<Arc<dyn Adapter>, String> {
    Ok(match name {
        "reference" => Arc::new(Reference::new(queue.on_server_clock())),
        "lmove" => Arc::new(Lmove::new(queue)),
        "rpop" => Arc::new(Rpop::new(queue)),
        "streams" => Arc::new(Streams::new(queue)),
        #[cfg(feature = "apalis")]
        "apalis" => Arc::new(Apalis::new(queue)),
        other => {
            return Err(check_name(other).err().unwrap_or_else(|| {
                format!("{other:?} is not a shipped adapter: adapter::open starts it")
            }))
        }
    })
}

/// Ok when `--queue SPEC` names a queue [`open`] can try: a built-in
/// adapter of this build ([`NAMES`]), then an adapter the binary carries
/// ([`shipped::NAMES`]), or `exec:` and a command (checked before any
/// server starts). Else why not: a name whose cargo feature this build
/// lacks says so, any other is unknown.
pub fn check_name(name: &str) -> Result<(), String> {
    if NAMES.contains(&name) || shipped::is_shipped(name) {
        return Ok(());
    }
    if let Some(command) = name.strip_prefix("exec:") {
        if command.trim().is_empty() {
            return Err("--queue exec: needs a command after the colon".into());
        }
        return Ok(());
    }
    if let Some((_, feature)) = FEATURE_NAMES.iter().find(|(n, _)| *n == name) {
        return Err(format!(
            "queue {name:?} needs the `{feature}` cargo feature, which this build lacks \
             (build with `--features {feature}`)"
        ));
    }
    Err(format!(
        "unknown queue {name:?}: expected a built-in adapter ({}), a shipped one ({}), or \
         exec:COMMAND",
        NAMES.join(", "),
        shipped::NAMES.join(", ")
    ))
}

/// Why `--queue SPEC` could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Neither a shipped name of this build nor `exec:COMMAND`: why, in
    /// words ([`check_name`]).
    #[error("{0}")]
    Unknown(String),
    /// The `exec:` adapter could not be started or refused its hello.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A shipped adapter could not be made ready: its files, its
    /// interpreter, a package the current environment lacks.
    #[error(transparent)]
    Shipped(#[from] shipped::ShippedError),
}

/// The queue under test `spec` names: a built-in adapter ([`by_name`]) on
/// `queue`, an adapter the binary carries ([`shipped`], in the current
/// environment) or `exec:COMMAND`, a child speaking the adapter protocol
/// ([`Exec`]) told to use `server_url` and `queue`'s name, with the
/// default [`ExecOptions`].
pub async fn open(
    spec: &str,
    queue: &Queue,
    server_url: &str,
) -> Result<Arc<dyn Adapter>, OpenError> {
    open_with(spec, queue, server_url, ExecOptions::default()).await
}

/// [`open`] with explicit options for an `exec:` adapter.
pub async fn open_with(
    spec: &str,
    queue: &Queue,
    server_url: &str,
    options: ExecOptions,
) -> Result<Arc<dyn Adapter>, OpenError> {
    match spec.strip_prefix("exec:") {
        Some(command) => Ok(Arc::new(
            Exec::start(command, queue, server_url, options).await?,
        )),
        None if !NAMES.contains(&spec) && shipped::is_shipped(spec) => {
            let ready = shipped::prepare(spec, false)?;
            Ok(Arc::new(shipped::Named {
                inner: Exec::start(&ready.command, queue, server_url, options).await?,
                name: spec.to_owned(),
            }))
        }
        None => by_name(spec, queue).map_err(OpenError::Unknown),
    }
}

/// True when `spec` names a queue [`open`] can try ([`check_name`]).
pub fn is_known(spec: &str) -> bool {
    check_name(spec).is_ok()
}

/// The whole queue read back at one instant, as the checkers see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// Each job's state: `pending`, `active`, `done`, `dead`, or another
    /// word the adapter uses (anything but done or dead counts as not
    /// finished).
    pub jobs: BTreeMap<String, String>,
    /// Structure problems the adapter can see in its own layout.
    #[serde(default)] // The protocol's `problems` may be left out: none.
    pub problems: Vec<String>,
    /// Each job's payload as the queue holds it, for the jobs the adapter
    /// reads it for (the protocol's optional `payloads`; empty when it
    /// reads none): admission judges each against the job's admitted one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub payloads: BTreeMap<String, String>,
    /// The queue library's own clock while the read ran (ms since the
    /// epoch), from an adapter that follows the explorers' clock (the
    /// protocol's optional `clock_ms`): it must equal the instant the read
    /// was sent at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_ms: Option<u64>,
}

/// One operation of the [`Adapter`] contract, as an adapter declares it
/// supports it (the adapter protocol's `capabilities.operations`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// [`Adapter::enqueue`].
    Enqueue,
    /// [`Adapter::lease`].
    Lease,
    /// [`Adapter::complete`].
    Complete,
    /// [`Adapter::fail`].
    Fail,
    /// [`Adapter::extend`].
    Extend,
    /// [`Adapter::reap`].
    Reap,
    /// [`Adapter::read`].
    Read,
    /// [`Adapter::clear`].
    Clear,
    /// [`Adapter::crash`]: optional, a queue that keeps nothing alive for
    /// a worker has nothing to do.
    Crash,
}

impl Operation {
    /// Every operation, in the contract's order.
    pub const ALL: [Operation; 9] = [
        Operation::Enqueue,
        Operation::Lease,
        Operation::Complete,
        Operation::Fail,
        Operation::Extend,
        Operation::Reap,
        Operation::Read,
        Operation::Clear,
        Operation::Crash,
    ];

    /// Those without which nothing can be judged: a queue that cannot
    /// enqueue, lease, complete, read or clear is refused.
    pub const REQUIRED: [Operation; 5] = [
        Operation::Enqueue,
        Operation::Lease,
        Operation::Complete,
        Operation::Read,
        Operation::Clear,
    ];

    /// The operation's name, as the protocol spells it.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Enqueue => "enqueue",
            Operation::Lease => "lease",
            Operation::Complete => "complete",
            Operation::Fail => "fail",
            Operation::Extend => "extend",
            Operation::Reap => "reap",
            Operation::Read => "read",
            Operation::Clear => "clear",
            Operation::Crash => "crash",
        }
    }
}

/// What a queue's tokens say about the order of its deliveries
/// (the adapter protocol's `capabilities.tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokens {
    /// Each job's tokens rise with its deliveries (the reference queue's
    /// token is its attempts counter; the list patterns number their
    /// deliveries): a lower token granted after a higher one was answered
    /// is a violation (`structure`), and a grant ends every lease of a
    /// lower token (`fenced-settlement`).
    #[default]
    Rising,
    /// A token only names its delivery (a random lock token, a receipt):
    /// the checkers order a job's leases by the history, the newest
    /// granted being current whatever its number. Recorded in each lease's
    /// value as `"tokens": "opaque"`.
    Opaque,
}

impl Tokens {
    /// The word the protocol uses: `rising` or `opaque`.
    pub fn name(self) -> &'static str {
        match self {
            Tokens::Rising => "rising",
            Tokens::Opaque => "opaque",
        }
    }
}

/// What a queue under test can do: the contract's operations it supports,
/// whether it takes the explorers' logical time, and whether its tokens
/// fence. The harness draws only supported operations, and drives a queue
/// on the server clock with real waits ([`Capabilities::logical_time`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The operations it supports (every one of [`Operation::REQUIRED`]
    /// must be among them).
    pub operations: Vec<Operation>,
    /// True when the queue refuses a second enqueue of an id (`duplicate`,
    /// nothing changed); false when a second enqueue is a second message
    /// (Celery, Dramatiq). The harness then never enqueues an id twice,
    /// and admission does not judge the refusal. Absent from a hello:
    /// true, so an adapter written before it is unchanged.
    #[serde(default = "refuses_duplicates")]
    pub dedup: bool,
    /// True when every time-dependent call honours `now_ms: Some(..)`
    /// (the explorers' logical time); false when the queue only has the
    /// server's clock, and time must really pass.
    pub logical_time: bool,
    /// True when the queue takes logical time only with both clocks in the
    /// explorers' hand: it reads the server's clock (a `PX` lock, `TIME`
    /// in a script, an idle time) or its client library's, and each call
    /// then comes with the instant both read ([`Adapter::set_clock`]):
    /// the explorers freeze the server's clock there (libfaketime) and the
    /// adapter its library's (time-machine, Timecop). Without an owned
    /// server clock (a server given as a URL, Redis 7.0) such a queue runs
    /// on real time, as if [`Capabilities::logical_time`] were false.
    /// Absent from a hello: false.
    #[serde(default)]
    pub follows_clock: bool,
    /// True when a settle or extend checks the token it is given, so that
    /// a stale holder is refused; false when tokens are only delivery
    /// numbers the adapter hands out. The checkers judge either way: this
    /// is what the queue claims, not what it is trusted with.
    pub fences: bool,
    /// Whether each job's tokens rise with its deliveries, or only name
    /// them ([`Tokens`]).
    #[serde(default)]
    pub tokens: Tokens,
    /// How long past a lease's end the library may take to recover a
    /// delivery it lost track of (ms), when that is longer than its
    /// reaper's own round: RQ fails a job its dequeue moved to the
    /// intermediate list, and no worker registered, only once a cleanup
    /// has seen it there for a minute. A chaos run's drain waits that much
    /// longer before a job still held counts as lost ([`crate::chaos::runner::floor_ms`]).
    /// Absent from a hello: none.
    #[serde(default)]
    pub recovery_ms: Option<u64>,
}

impl Default for Capabilities {
    /// Every operation, logical time, fencing tokens that rise: the
    /// reference queue.
    fn default() -> Capabilities {
        Capabilities {
            operations: Operation::ALL.to_vec(),
            dedup: true,
            logical_time: true,
            follows_clock: false,
            fences: true,
            tokens: Tokens::Rising,
            recovery_ms: None,
        }
    }
}

/// `dedup` when a serialized [`Capabilities`] does not say.
fn refuses_duplicates() -> bool {
    true
}

impl Capabilities {
    /// True when `op` is among the supported operations.
    pub fn supports(&self, op: Operation) -> bool {
        self.operations.contains(&op)
    }

    /// True when the queue runs on the explorers' logical time, given
    /// whether they own the server's clock (`clock_owned`): always for a
    /// queue that takes `now_ms` alone, only with the clock for one that
    /// [`Capabilities::follows_clock`], never for one on the server clock.
    pub fn logical_with(&self, clock_owned: bool) -> bool {
        self.logical_time && (clock_owned || !self.follows_clock)
    }

    /// The required operations missing, if any.
    pub fn missing_required(&self) -> Vec<Operation> {
        Operation::REQUIRED
            .into_iter()
            .filter(|op| !self.supports(*op))
            .collect()
    }
}

/// A queue under test.
pub trait Adapter: Send + Sync {
    /// The adapter's name, as `--queue` takes it.
    fn name(&self) -> &str;

    /// What the queue can do (the default: every operation, logical time,
    /// fencing tokens).
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// The user's own app the queue runs with (`--app`, [`App`]): `None`
    /// for every queue but an `exec:` adapter asked to load one.
    fn app(&self) -> Option<App> {
        None
    }

    /// The queue's keys (the consumers keep their effects under them).
    fn keys(&self) -> &Keys;

    /// A connection to the queue's server, for consumers' effects.
    fn connection(&self) -> ConnectionManager;

    /// Admits job `id`.
    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>>;

    /// Leases a ready job to `worker`.
    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>>;

    /// Settles lease `token` of job `id` as done.
    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>>;

    /// Settles lease `token` of job `id` as failed.
    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>>;

    /// Extends lease `token` of job `id`.
    fn extend<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>>;

    /// Settles lease `token` of job `id` as done, then leases the next job
    /// to `worker`: each half answers what [`Adapter::complete`] and
    /// [`Adapter::lease`] answer. The default makes the two calls one after
    /// the other; the reference queue makes them in one script run
    /// ([`Queue::complete_and_lease`]). A transport error of the whole is the
    /// outer error.
    fn complete_and_lease<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
        complete_then_lease(self, id, token, worker, lease_ms, now_ms)
    }

    /// Takes expired leases back.
    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>>;

    /// Reads every job's state.
    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>>;

    /// Deletes every key of the queue, effects included.
    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>>;

    /// Worker `worker` died: the queue's client drops what it keeps for
    /// that worker (connection, heartbeats, identity) without its shutdown
    /// path, so that the jobs the worker held stay held until the queue's
    /// own recovery takes them back. The explorers and the chaos runner
    /// call it after recording a crash. The default does nothing: a queue
    /// whose client keeps nothing alive for a worker has nothing to drop.
    fn crash<'a>(&'a self, worker: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        let _ = worker;
        Box::pin(async { Ok(()) })
    }

    /// The server was killed or lost its power and came back: the queue's
    /// clients open their connections afresh, as workers started after the
    /// outage would. The explorers call it where no worker holds anything
    /// (a heal, after its crashes; a new walk) on a queue whose server a
    /// step restarted ([`crate::explore::server_steps`]). The default does
    /// nothing: a client that reconnects by itself (a connection manager)
    /// has nothing to open; `exec:` starts its child again.
    fn reopen(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async { Ok(()) })
    }

    /// The reference layout's read-back ([`ReadBack`]), for the refinement
    /// check; `None` (the default) for queues that do not share the
    /// reference queue's layout.
    fn read_back(&self) -> Option<&dyn ReadBack> {
        None
    }

    /// The explorers froze the server's clock at `clock_ms` (ms since the
    /// Unix epoch) until the next call of this; `None`: real time. A queue
    /// that [`Capabilities::follows_clock`] makes its library's clock read
    /// the same instant in every call that follows (the adapter
    /// protocol's `clock_ms`). The default does nothing.
    fn set_clock(&self, clock_ms: Option<u64>) {
        let _ = clock_ms;
    }
}

/// The reference queue's read-back, kept apart from what every queue
/// implements ([`Adapter`]): its whole layout read back for the
/// explorers' refinement check, in the same round trip as each queue call
/// when asked. An adapter that keeps the reference layout answers it from
/// [`Adapter::read_back`].
pub trait ReadBack: Send + Sync {
    /// The reference layout read back whole: the read taken with the last
    /// queue call when the read-back mode is on, else a read of its own.
    fn snapshot(&self) -> BoxFuture<'_, Result<Snapshot, QueueError>>;

    /// Asks to read the [`ReadBack::snapshot`] in the same round trip as
    /// each following queue call, until turned off: the explorers'
    /// read-back after every step without a second round trip. Each call
    /// also drops a read not taken yet.
    fn set_readback(&self, on: bool);
}

/// [`Adapter::complete_and_lease`] as two calls on `adapter`, one after the
/// other: the trait's default, and what a [`Wrapper`] that overrides
/// `complete` or `lease` uses so that both halves go through its own.
pub fn complete_then_lease<'a, A: Adapter + ?Sized>(
    adapter: &'a A,
    id: &'a str,
    token: u64,
    worker: &'a str,
    lease_ms: u64,
    now_ms: Option<u64>,
) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
    Box::pin(async move {
        let settled = match adapter.complete(id, token).await {
            // No answer: the lease is not sent, as the one script call
            // would have no answer either.
            Err(e @ (QueueError::Unknown { .. } | QueueError::Unavailable { .. })) => {
                return Err(e)
            }
            answer => answer,
        };
        let next = adapter.lease(worker, lease_ms, now_ms).await;
        Ok(CompleteAndLease { settled, next })
    })
}

/// The reference queue (`lua/`) behind the adapter trait.
#[derive(Clone, Debug)]
pub struct Reference {
    queue: Queue,
}

impl Reference {
    /// Wraps a connected queue (with a read-back mode of its own: see
    /// [`ReadBack::set_readback`]).
    pub fn new(queue: Queue) -> Reference {
        Reference {
            queue: queue.with_own_readback(),
        }
    }

    fn clock(&self, now_ms: Option<u64>) -> Queue {
        match now_ms {
            Some(now) => self.queue.at(now),
            None => self.queue.on_server_clock(),
        }
    }
}

/// Runs one of an adapter's own scripts on `conn`; an error is `op`'s.
/// The list patterns and the streams pattern call their scripts this way.
pub(crate) async fn run_script<T: redis::FromRedisValue>(
    mut conn: ConnectionManager,
    op: &'static str,
    script: &redis::ScriptInvocation<'_>,
) -> Result<T, QueueError> {
    script
        .invoke_async(&mut conn)
        .await
        .map_err(|e| QueueError::from_redis(op, e))
}

/// A reap script's flat reply `[id, "pending"|"dead", ...]` as the jobs it
/// took (a word other than `dead` sends the job back to pending): the list
/// patterns' and the streams pattern's reapers answer this shape.
pub(crate) fn reaped_pairs(flat: &[String]) -> Vec<Reaped> {
    flat.chunks(2)
        .map(|pair| Reaped {
            id: pair[0].clone(),
            to: if pair.get(1).map(String::as_str) == Some("dead") {
                JobState::Dead
            } else {
                JobState::Pending
            },
        })
        .collect()
}

/// The state names and structure problems of a reference snapshot.
pub(crate) fn read_of(snapshot: &Snapshot) -> Read {
    Read {
        jobs: snapshot
            .rows
            .iter()
            .map(|(id, row)| (id.clone(), row.state.map_or("?".into(), |s| s.to_string())))
            .collect(),
        problems: snapshot.structure_problems(),
        payloads: snapshot
            .rows
            .iter()
            .map(|(id, row)| {
                (
                    id.clone(),
                    String::from_utf8_lossy(&row.payload).into_owned(),
                )
            })
            .collect(),
        clock_ms: None,
    }
}

impl Adapter for Reference {
    fn name(&self) -> &str {
        "reference"
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
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        Box::pin(async move { self.clock(now_ms).enqueue(id, payload, options).await })
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move { self.clock(now_ms).lease(worker, lease_ms).await })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(async move { self.queue.complete(id, token).await })
    }

    fn complete_and_lease<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
        Box::pin(async move {
            self.clock(now_ms)
                .complete_and_lease(id, token, worker, lease_ms)
                .await
        })
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Box::pin(async move { self.clock(now_ms).fail(id, token, retry_delay_ms).await })
    }

    fn extend<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        Box::pin(async move { self.clock(now_ms).extend(id, token, lease_ms).await })
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(async move { self.clock(now_ms).reap(limit).await })
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(async move { Ok(read_of(&self.queue.snapshot().await?)) })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move { self.queue.clear().await.map(|_| ()) })
    }

    fn read_back(&self) -> Option<&dyn ReadBack> {
        Some(self)
    }
}

impl ReadBack for Reference {
    fn snapshot(&self) -> BoxFuture<'_, Result<Snapshot, QueueError>> {
        Box::pin(async move {
            match self.queue.take_readback() {
                Some(read) => read,
                None => self.queue.snapshot().await,
            }
        })
    }

    fn set_readback(&self, on: bool) {
        self.queue.set_readback(on);
    }
}
