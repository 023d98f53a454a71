//! The driver: applies each [`Step`] to the pure [`Model`] and to the queue
//! under test (an [`Adapter`]) on the same logical time, with a
//! [`Consumer`] applying the workers' effects. When the adapter is the
//! reference queue, it checks after every step that
//!
//! 1. both answered the same outcome, value for value;
//! 2. **refinement**: the whole queue read back from Valkey equals the
//!    model's state ([`Snapshot`] against [`Model::snapshot`]);
//! 3. **structure**: Valkey's snapshot has no structure problem.
//!
//! Any other adapter has no layout the model can be compared with: the
//! model still runs beside it (the walks use it to choose useful steps),
//! but only the history checkers judge the run.
//!
//! The first failed check is a [`Divergence`]. Every step is also recorded
//! in a [`Recorder`] history through the recording layer
//! ([`crate::history::record`]), so the history checkers judge the run as
//! well.
//!
//! The workers' local state (the lease each one holds, and the one it held
//! before its last crash) lives here: the queue and the model only know
//! tokens. On the reference queue the driver updates it from the *model's*
//! answers, so what the walk does next never depends on the system under
//! test; on another adapter, from the adapter's answers.
//!
//! A worker's effect may take several server calls (the consumer's
//! `parts`): `a` applies the next one, `c` applies those left and acks, so
//! a crash (`k`) falls before the effect, between parts, or in the ack gap
//! (after the effect, before the ack), and the history's crash event names
//! which.
//!
//! # A queue with only the server clock
//!
//! A queue whose [`Capabilities::logical_time`] is false cannot be told
//! what time it is: every call gets `now_ms: None`, and time must really
//! pass. The model still runs on logical time beside it, as a guide (it is
//! compared only with the reference queue, which takes logical time), and
//! the queue runs on a scaled copy of it: every lease the walk asks for
//! lasts [`SERVER_LEASE_MS`] real ms whatever the configuration's logical
//! lease, and every other duration (a tick, an extend, a retry delay) is
//! scaled by the same ratio, so that a tick of half a lease is still half a
//! lease. A tick is then a real `tokio::time::sleep` of its scaled length,
//! capped at [`MAX_WAIT_MS`] so that a hand-written schedule cannot stall a
//! run. The history's times are the server's: leases carry the queue's own
//! deadlines, and each reap is bracketed with the server's `TIME`
//! ([`Recorded::timing_server_clock`]) so that lease-respected judges it as it
//! judges the chaos runner's.
//!
//! # Real time
//!
//! A `w` step ([`Step::Wait`]) really waits: the driver sleeps `ms`, so the
//! server's own clock moves and whatever expires on it (a consumer's guard
//! with a TTL, a key with `PX`) may expire, and logical time moves on by
//! the same `ms`. On a queue with only the server clock it is a tick (a
//! real wait scaled by the lease). The step decides nothing that depends on
//! the wait: the model and the workers see only the logical time; the
//! checkers judge what the server did. The history's `wait` event notes
//! the real wait (`waited_ms`) and `real: true`.
//!
//! # Design notes
//!
//! A step has two sides, kept apart as proptest-state-machine keeps the
//! reference from the system under test: `subject_side` makes the queue call
//! through the driver's `Recorded` adapter, `model_side` asks the model, and
//! `keep` then updates the worker's lease. Effects, crashes and ticks are
//! recorded through a `Process`. `d` acks and loses the reply (`info`): the
//! worker still holds the lease, so a later `c` retries and a `k` gives up.
//!
//! Every `read` a walk or a search makes goes through the recorder
//! (`Driver::read`), so structure judges the heal's reads too, not only the
//! final one. On a queue with opaque tokens the driver names each lease by
//! its delivery (`Driver::delivery`) for the model beside it, and the walk's
//! late stale holders on a queue the model does not describe go by the
//! deadlines the queue answered (`Driver::superseding_deadline`).
//!
//! Speed: a checked step on the reference queue sends its script call and
//! the `snapshot` script in one pipeline (`Adapter::read_back` gives the
//! `ReadBack` trait, `ReadBack::set_readback` → `Queue::set_readback`;
//! `Queue::call` loads the library when a function is missing, and the
//! adapter's `snapshot` takes the pipelined read); a local step (crash,
//! tick, nothing to do) reuses the last read, since it sent nothing.
//!
//! Both clocks in the explorer's hand (`server::LogicalClock`,
//! `Subject::clock`): on a server started for the explorers, a walk of a
//! queue that `Capabilities::follows_clock` takes an epoch of its own, and
//! the driver sets the server's clock and the adapter's
//! (`Adapter::set_clock`, the protocol's `clock_ms`, the kits' time-machine
//! and Timecop) to `epoch + now_ms` at the start and at every tick; the walk
//! is then on logical time (`Subject::logical`). `explore --jobs N` gives
//! each walk in flight a server.
//!
//! The server clock is for a queue whose `Capabilities::logical_time` is
//! false, or a follower whose clock the explorers do not own (a URL, Redis
//! 7.0); the driver asks `capabilities()`, never the name. `SERVER_LEASE_MS`
//! is 50; every other duration is scaled from the lease the queue answered
//! (`Driver::learn_lease`), and a tick is capped at `MAX_WAIT_MS` (1 s) or
//! two answered leases; the tick event notes `waited_ms`.

use std::collections::HashMap;
use std::sync::Arc;

use redis::aio::ConnectionManager;
use serde::Serialize;
use serde_json::json;

use super::difference::difference;
use super::op::Step;
use super::server_steps::met_the_restart;
use crate::adapter::{Adapter, Capabilities, Reference};
use crate::consumer::{Consumer, Delivery, Kind as ConsumerKind};
use crate::history::{Process, Recorded, Recorder, F};
use crate::model::durable::Since;
use crate::model::{Model, ModelError};
use crate::queue::client::EnqueueOptions;
use crate::queue::{
    Enqueued, Extended, Failed, Lease, Queue, QueueError, Reaped, Settled, Snapshot,
};

mod outcomes;
mod together;
mod words;
use outcomes::{announced, complete_next, from_model, from_valkey, granted};
use words::answer;
pub(crate) use words::crash_point;
pub use words::describe;

/// Where logical time starts: not 0, where a script reading 0 as unset hides.
pub const START_MS: u64 = 1_000;

/// The real lease length (ms) of every lease on a queue with only the
/// server clock: long enough against Valkey's ms clock and a walk's round
/// trips (a few tenths of a ms each: a lease outlives tens of steps), short
/// enough that a walk of a hundred steps with its ticks takes a second or
/// two.
pub const SERVER_LEASE_MS: u64 = 50;

/// The longest real wait (ms) one time step becomes on a queue with only
/// the server clock (a walk's ticks are at most two leases, 100 ms; only a
/// hand-written schedule reaches the cap).
pub const MAX_WAIT_MS: u64 = 1_000;

/// The longest the heal waits (ms) on the server clock for the deadlines
/// the queue itself reported to pass ([`Driver::wait_past_deadlines`]): a
/// queue whose leases last longer cannot be healed, and its walk stops with
/// an error instead of a verdict.
pub(crate) const HEAL_WAIT_MAX_MS: u64 = 30_000;

/// How far past the latest reported deadline the heal waits (ms): the
/// server's clock ticks in ms, and a queue may compare with `<`.
const DEADLINE_MARGIN_MS: u64 = 20;

/// How the driver calls the queue: the settings one swarm configuration
/// fixes for a whole run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DriverConfig {
    /// Workers `w0 .. w{workers-1}`; a step naming another worker is
    /// refused before it runs.
    pub workers: u8,
    /// The lease length of every lease and extend (ms).
    pub lease_ms: u64,
    /// The `max_attempts` of every enqueue.
    pub max_attempts: u64,
    /// The `limit` of every reap.
    pub reap_limit: u64,
}

/// A lease as a worker remembers it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Held {
    /// The job id.
    pub id: String,
    /// The fencing token the lease was granted with.
    pub token: u64,
    /// The payload delivered with it (the consumer's input).
    pub payload: Vec<u8>,
    /// How many parts of the consumer's effect it has applied.
    pub parts_done: usize,
}

impl From<Lease> for Held {
    /// A fresh lease: no part of the effect applied yet.
    fn from(lease: Lease) -> Held {
        Held {
            id: lease.id,
            token: lease.token,
            payload: lease.payload,
            parts_done: 0,
        }
    }
}

/// One worker's local state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Worker {
    /// The lease it holds and acts on.
    pub held: Option<Held>,
    /// The lease it held before its last crash (or that it abandoned by
    /// leasing again): what a stale complete acts on.
    pub stale: Option<Held>,
}

/// What one step answered, on either side.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The enqueue's answer.
    Enqueue(Enqueued),
    /// The lease's answer.
    Lease(Option<Lease>),
    /// A complete's (or stale complete's) answer.
    Complete(Settled),
    /// A fail's answer.
    Fail(Failed),
    /// An extend's answer.
    Extend(Extended),
    /// What the reaper did.
    Reap(Vec<Reaped>),
    /// The script refused the call before any write, with this code
    /// (`EMQKIND`, `EMQARG`).
    Refused {
        /// The error code.
        code: String,
    },
    /// The worker forgot its lease (a local step: nothing was sent).
    Crash,
    /// Logical time moved to `now_ms` (a local step).
    Tick {
        /// The new logical time.
        now_ms: u64,
    },
    /// The worker applied part `part` of its effect (a consumer call; the
    /// model knows nothing of effects).
    Effect {
        /// The part, from 0.
        part: usize,
    },
    /// The worker held no lease to act on: nothing was sent.
    Idle,
    /// The server was killed or lost power, and is back (`K`, `P`).
    Restarted,
    /// After a `K` or `P`, the call met a connection the restart closed:
    /// its error (unknown or unavailable) is the step's answer.
    Unanswered {
        /// The error, as the queue's client said it.
        error: String,
    },
    /// A `complete_and_lease`: the complete's outcome, then the lease's.
    CompleteNext {
        /// The complete half ([`Outcome::Complete`] or a refusal).
        settled: Box<Outcome>,
        /// The lease half ([`Outcome::Lease`] or a refusal).
        next: Box<Outcome>,
    },
    /// A parallel step's members' outcomes, in the order they are written
    /// ([`Outcome::Idle`] for a member with nothing to send).
    Parallel(Vec<Outcome>),
}

/// A step after which the model and Valkey disagree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("divergence at step {step_index} ({step}), {check} check: model {model}, valkey {valkey}")]
pub struct Divergence {
    /// The step's position in the schedule, from 0.
    pub step_index: usize,
    /// The step.
    pub step: Step,
    /// Which check failed: `outcome` (the answers differ), `refinement`
    /// (the states read back differ) or `structure` (Valkey's state has a
    /// structure problem).
    pub check: &'static str,
    /// What the model says (only the parts that differ, for a state).
    pub model: String,
    /// What Valkey says.
    pub valkey: String,
}

fn kept(history: &Option<std::path::PathBuf>) -> String {
    match history {
        Some(path) => format!(" (the history so far is in {})", path.display()),
        None => String::new(),
    }
}

/// Why a step could not be judged, or was judged wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExploreError {
    /// The model and Valkey disagree: a finding.
    #[error(transparent)]
    Divergence(Box<Divergence>),
    /// Valkey could not answer (unreachable, timeout, protocol error): the
    /// run cannot go on, and says nothing about the queue's correctness.
    #[error("step {step_index} ({step}): {source}")]
    Queue {
        /// The step's position, from 0.
        step_index: usize,
        /// The step.
        step: Step,
        /// What went wrong.
        source: QueueError,
    },
    /// Valkey could not answer outside a step: while the queue was cleared
    /// before the run, or read back after it.
    #[error("{during}: {source}")]
    Setup {
        /// What the explorer was doing.
        during: &'static str,
        /// What went wrong.
        source: QueueError,
    },
    /// The model broke its own invariants: a bug in the model.
    #[error("step {step_index} ({step}): the model broke its own invariants: {problems}")]
    Model {
        /// The step's position, from 0.
        step_index: usize,
        /// The step.
        step: Step,
        /// What [`Model::check_structure`] found.
        problems: String,
    },
    /// An exploration went past one of its limits.
    #[error("{what}")]
    Limit {
        /// What was requested and what was available.
        what: String,
    },
    /// The step calls an operation the queue under test does not support
    /// (a replayed or hand-written schedule: the walks never draw one);
    /// refused before the run starts.
    #[error("step {step_index} ({step}): the queue {queue} does not support {operation}")]
    Unsupported {
        /// The step's position, from 0.
        step_index: usize,
        /// The step.
        step: Step,
        /// The queue under test.
        queue: String,
        /// The operation it lacks, as the adapter protocol spells it.
        operation: &'static str,
    },
    /// The walk stopped on another error (`source`) before it could be
    /// judged; the history recorded up to there was kept at `history`
    /// (`None`: it could not be written, or was empty).
    #[error("{source}{}", kept(history))]
    Stopped {
        /// Why the walk stopped.
        source: Box<ExploreError>,
        /// Where its history so far was written.
        history: Option<std::path::PathBuf>,
    },
    /// The step names a worker the configuration does not have.
    #[error("step {step_index} ({step}): no worker {worker}; this run has {workers}")]
    NoSuchWorker {
        /// The step's position, from 0.
        step_index: usize,
        /// The step.
        step: Step,
        /// The worker named.
        worker: u8,
        /// How many workers the run has.
        workers: u8,
    },
}

/// The queue under test and the consumer its workers run.
#[derive(Clone)]
pub struct Subject {
    /// The queue under test.
    pub adapter: Arc<dyn Adapter>,
    /// What the workers do with a delivery.
    pub consumer: Arc<dyn Consumer>,
    /// What every command printed about a run of this subject adds (the
    /// server it ran on); empty unless [`Subject::with_rerun`] set it.
    pub rerun: super::line::Rerun,
    /// The server's clock, when the explorers own it
    /// ([`crate::server::Server::logical_clock`]): a queue that
    /// [`Capabilities::follows_clock`] then runs on logical time, each
    /// walk on an epoch of its own.
    pub clock: Option<crate::server::LogicalClock>,
    /// The server, when the explorers own it and may kill it or cut its
    /// power (the steps `K` and `P`: [`super::server_steps`]).
    pub server: Option<super::server_steps::OwnedServer>,
    /// How often, in percent (0, the default: never), a walk's step is a
    /// parallel step ([`Step::Parallel`]); a seed with it on names its walk
    /// only up to the races' outcomes.
    pub parallel: u32,
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.adapter.name(), self.consumer.name())
    }
}

impl Subject {
    /// `adapter` with `consumer`.
    pub fn new(adapter: Arc<dyn Adapter>, consumer: Arc<dyn Consumer>) -> Subject {
        Subject {
            adapter,
            consumer,
            rerun: super::line::Rerun::default(),
            clock: None,
            server: None,
            parallel: 0,
        }
    }

    /// This subject, its walks drawing a parallel step `percent` times in
    /// a hundred.
    pub fn with_parallel(self, percent: u32) -> Subject {
        Subject {
            parallel: percent,
            ..self
        }
    }

    /// This subject on a server the explorers own (`None`: they do not).
    pub fn with_server(self, server: Option<super::server_steps::OwnedServer>) -> Subject {
        Subject { server, ..self }
    }

    /// This subject on a server whose clock the explorers own (`None`:
    /// they do not).
    pub fn with_clock(self, clock: Option<crate::server::LogicalClock>) -> Subject {
        Subject { clock, ..self }
    }

    /// True when walks of this subject run on logical time: the queue takes
    /// `now_ms` alone, or follows the clock and the explorers own it.
    pub fn logical(&self) -> bool {
        self.adapter
            .capabilities()
            .logical_with(self.clock.is_some())
    }

    /// True when walks of this subject drive the server's clock: the queue
    /// follows it and the explorers own it. Walks in flight at once then
    /// need a server each.
    pub fn drives_clock(&self) -> bool {
        let caps = self.adapter.capabilities();
        caps.follows_clock && caps.logical_time && self.clock.is_some()
    }

    /// This subject, its printed commands completed by `rerun`.
    pub fn with_rerun(self, rerun: super::line::Rerun) -> Subject {
        Subject { rerun, ..self }
    }

    /// The reference queue on `queue` with the `marker` consumer: what
    /// [`super::explore`] runs.
    pub fn reference(queue: &Queue) -> Subject {
        Subject::new(
            Arc::new(Reference::new(queue.on_server_clock())),
            Arc::from(ConsumerKind::Marker.consumer()),
        )
    }

    /// True when the model is compared with the queue after every step:
    /// only the reference queue shares the model's layout.
    pub fn refines(&self) -> bool {
        self.adapter.name() == "reference"
    }
}

/// Drives one model and one queue under test in lock step.
pub struct Driver {
    subject: Subject,
    conn: ConnectionManager,
    model: Model,
    now_ms: u64,
    config: DriverConfig,
    workers: Vec<Worker>,
    recorder: Recorder,
    /// The subject's adapter, recording every call into `recorder`.
    recorded: Recorded,
    applied: Vec<Step>,
    log: Vec<String>,
    note: Option<String>,
    checked: bool,
    fixed_payloads: bool,
    /// Valkey's state as last read back, kept while only local steps
    /// (crash, tick, a worker with nothing to do) follow: they send
    /// nothing, so Valkey cannot have changed.
    last_read: Option<Snapshot>,
    /// What the queue under test can do, asked once at the start.
    capabilities: Capabilities,
    /// The latest deadline or ready-at (ms) the queue has reported in an
    /// answer: on the server clock, what the heal waits for.
    latest_deadline_ms: u64,
    /// The deadline (a lease, an extend) or ready time (a fail) announced
    /// last, by the model on the reference queue and by the queue
    /// elsewhere: where the walk's boundary ticks land
    /// ([`Driver::announced_ahead_ms`]).
    announced_ms: Option<u64>,
    /// Each lease granted, (job, token), named by its delivery: the n-th
    /// lease of its job, from 1 ([`Driver::delivery`]).
    deliveries: HashMap<(String, u64), u64>,
    /// Per job: leases granted, and the deadline of the latest one as the
    /// queue last answered it (its lease, or an extend of it).
    delivered: HashMap<String, (u64, u64)>,
    /// On the server clock, how long the queue's leases really last (ms),
    /// learnt from its first granted lease ([`Driver::learn_lease`]).
    answered_lease_ms: Option<u64>,
    /// The server's clock and this walk's epoch, when the walk drives it:
    /// every call runs with the server's and the library's clock frozen
    /// at `epoch + now_ms` ([`Driver::sync_clock`]).
    clock: Option<(crate::server::LogicalClock, u64)>,
    /// True on logical time ([`Subject::logical`]).
    logical: bool,
    /// On a server the explorers own, the model's states a crash may take
    /// the queue back to ([`super::server_steps`]).
    since: Option<crate::model::durable::Since>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("subject", &self.subject)
            .field("now_ms", &self.now_ms)
            .field("config", &self.config)
            .field("workers", &self.workers)
            .field("applied", &self.applied.len())
            .finish()
    }
}

impl Driver {
    /// A driver on the reference `queue` with the `marker` consumer; the
    /// queue is cleared first so that it starts, like the model, empty.
    /// Time starts at [`START_MS`].
    pub async fn start(
        queue: &Queue,
        config: DriverConfig,
        recorder: Recorder,
    ) -> Result<Driver, QueueError> {
        Driver::start_on(&Subject::reference(queue), config, recorder).await
    }

    /// A driver on `subject`, whose queue (effects included) is cleared
    /// first.
    pub(crate) async fn start_on(
        subject: &Subject,
        config: DriverConfig,
        recorder: Recorder,
    ) -> Result<Driver, QueueError> {
        // A walk that drives the clock starts at an epoch of its own.
        let clock = match subject.clock.clone().filter(|_| subject.drives_clock()) {
            Some(clock) => {
                let epoch = clock.next_epoch_ms().await;
                set_clocks(&clock, subject.adapter.as_ref(), epoch + START_MS).await?;
                Some((clock, epoch))
            }
            None => None,
        };
        super::server_steps::reopen_after_restart(subject).await?;
        subject.adapter.clear().await?;
        let mut conn = subject.adapter.connection();
        if let Some(owned) = &subject.server {
            super::server_steps::durable_point(owned, &mut conn).await?;
        }
        let since = subject.server.as_ref().map(|_| Since::new(&Model::new()));
        let capabilities = subject.adapter.capabilities();
        let logical = subject.logical();
        let mut recorded =
            Recorded::new(Arc::clone(&subject.adapter), &recorder, "checker").noting_max_attempts();
        if !logical {
            recorded = recorded.timing_server_clock();
        }
        Ok(Driver {
            subject: subject.clone(),
            conn,
            model: Model::new(),
            now_ms: START_MS,
            config,
            workers: vec![Worker::default(); usize::from(config.workers)],
            recorded,
            capabilities,
            recorder,
            applied: Vec::new(),
            log: Vec::new(),
            note: None,
            checked: true,
            fixed_payloads: false,
            last_read: None,
            latest_deadline_ms: 0,
            announced_ms: None,
            deliveries: HashMap::new(),
            delivered: HashMap::new(),
            clock,
            logical,
            answered_lease_ms: None,
            since,
        })
    }

    /// Moves the server's clock and the library's to `epoch + now_ms`,
    /// when the walk drives them.
    async fn sync_clock(&self) -> Result<(), QueueError> {
        match &self.clock {
            Some((clock, epoch)) => {
                set_clocks(clock, self.subject.adapter.as_ref(), epoch + self.now_ms).await
            }
            None => Ok(()),
        }
    }

    /// The instant (ms since the Unix epoch) this walk's logical time 0 is
    /// on the server's clock, when the walk drives it.
    pub fn epoch_ms(&self) -> Option<u64> {
        self.clock.as_ref().map(|(_, epoch)| *epoch)
    }

    /// What the queue under test can do.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// True when the queue under test runs on the server's clock: time
    /// steps are real waits (see the module docs).
    pub fn on_server_clock(&self) -> bool {
        !self.logical
    }

    /// The `now_ms` every call gets: the logical time, or `None` on the
    /// server clock.
    fn now_arg(&self) -> Option<u64> {
        (!self.on_server_clock()).then_some(self.now_ms)
    }

    /// A duration of the walk (ms of logical time) as the queue under test
    /// gets it: as is on logical time, scaled so that the configured lease
    /// lasts [`SERVER_LEASE_MS`] on the server clock.
    pub(crate) fn queue_ms(&self, ms: u64) -> u64 {
        self.scaled(ms, SERVER_LEASE_MS)
    }

    /// `ms` of the walk scaled so that the configured lease lasts `lease`
    /// ms on the server clock (as is on logical time).
    fn scaled(&self, ms: u64, lease: u64) -> u64 {
        if !self.on_server_clock() {
            return ms;
        }
        let asked = self.config.lease_ms.max(1);
        u64::try_from(u128::from(ms) * u128::from(lease) / u128::from(asked)).unwrap_or(u64::MAX)
    }

    /// A duration of the walk (a tick, a retry delay) as real time on the
    /// server clock: scaled from the lease the queue *answered* (its first
    /// granted lease's deadline less the server's time then), not the
    /// [`SERVER_LEASE_MS`] asked for, so that half a lease is half of the
    /// queue's own lease (RQ answers whole seconds to a 50 ms request).
    fn real_ms(&self, ms: u64) -> u64 {
        self.scaled(ms, self.answered_lease_ms.unwrap_or(SERVER_LEASE_MS))
    }

    /// The longest real wait one time step becomes: [`MAX_WAIT_MS`], or two
    /// of the queue's answered leases when they are longer.
    fn max_wait_ms(&self) -> u64 {
        MAX_WAIT_MS.max(2 * self.answered_lease_ms.unwrap_or(0))
    }

    /// On the server clock, the first granted lease tells how long the
    /// queue's leases really last: its deadline less the server's `TIME`.
    async fn learn_lease(&mut self, outcome: &Outcome) {
        let Outcome::Lease(Some(lease)) = outcome else {
            return;
        };
        if !self.on_server_clock() || self.answered_lease_ms.is_some() || lease.deadline_ms == 0 {
            return;
        }
        let time: Result<(u64, u64), _> = redis::cmd("TIME").query_async(&mut self.conn).await;
        if let Ok((secs, micros)) = time {
            let now = secs * 1_000 + micros / 1_000;
            let lease_ms = lease.deadline_ms.saturating_sub(now).max(SERVER_LEASE_MS);
            self.answered_lease_ms = Some(lease_ms);
            if lease_ms > SERVER_LEASE_MS * 2 {
                self.note = Some(format!(
                    "(asked for {SERVER_LEASE_MS} ms, the queue's lease lasts about {lease_ms} ms \
                     on the server clock: time steps are scaled to it)"
                ));
            }
        }
    }

    /// Turns the checks after each step on or off (on by default). The
    /// exhaustive search turns them off while it replays a path prefix it
    /// has checked before, and on for the step that reaches a new state.
    pub(crate) fn set_checked(&mut self, checked: bool) {
        self.checked = checked;
    }

    /// Makes the first enqueue of job `j` carry the payload `payload-j`,
    /// whatever its position, and its `n`-th duplicate `payload-j-dup-n`
    /// (off by default: each enqueue's payload names its step). The
    /// exhaustive search turns it on so that two orders of the same
    /// enqueues reach the same state, while a duplicate that overwrote
    /// the payload still shows.
    pub(crate) fn set_fixed_payloads(&mut self, fixed: bool) {
        self.fixed_payloads = fixed;
    }

    /// The payload of an enqueue of `job` at `step_index`: with fixed
    /// payloads, `n` is how many enqueues of `job` came before.
    pub fn payload(fixed: bool, job: u8, n: usize) -> String {
        match (fixed, n) {
            (true, 0) => format!("payload-{job}"),
            (true, n) => format!("payload-{job}-dup-{n}"),
            (false, step_index) => format!("payload-{job}-{step_index}"),
        }
    }

    /// [`Driver::payload`] of the enqueue of `job` at `step_index`.
    fn payload_at(&self, job: u8, step_index: usize) -> String {
        let n = match self.fixed_payloads {
            true => self.applied[..step_index]
                .iter()
                .flat_map(Step::members)
                .filter(|s| **s == Step::Enqueue { job })
                .count(),
            false => step_index,
        };
        Driver::payload(self.fixed_payloads, job, n)
    }

    /// The logical time now (ms).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The model, as it stands after the steps applied so far. On an
    /// adapter other than the reference it is a guide, not a judge.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The queue under test and the consumer.
    pub fn subject(&self) -> &Subject {
        &self.subject
    }

    /// The settings.
    pub fn config(&self) -> DriverConfig {
        self.config
    }

    /// Each worker's local state, by index.
    pub fn workers(&self) -> &[Worker] {
        &self.workers
    }

    /// The steps applied so far (the one that diverged included).
    pub fn applied(&self) -> &[Step] {
        &self.applied
    }

    /// One line per applied step: who did what and what the server
    /// answered.
    pub fn log(&self) -> &[String] {
        &self.log
    }

    /// The history recorded so far.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// Applies `step` to both sides and, on the reference queue, checks
    /// outcome, refinement and structure. Returns the outcome (the model's
    /// on the reference queue, where both agree; the adapter's elsewhere).
    pub async fn apply(&mut self, step: &Step) -> Result<Outcome, ExploreError> {
        let step_index = self.applied.len();
        self.applied.push(step.clone());
        if let Some(worker) = step
            .workers()
            .into_iter()
            .find(|w| *w >= self.config.workers)
        {
            self.log.push(format!("{step}: no such worker"));
            return Err(ExploreError::NoSuchWorker {
                step_index,
                step: step.clone(),
                worker,
                workers: self.config.workers,
            });
        }
        if let Step::Parallel { steps } = step {
            return self.apply_together(step_index, step, steps).await;
        }
        let queue_error = |source: QueueError| ExploreError::Queue {
            step_index,
            step: step.clone(),
            source,
        };
        // A checked step on the reference queue reads the queue back in the
        // same round trip as its script call (one pipeline).
        let reading = self.checked && self.subject.refines();
        if let Some(reads) = self.subject.adapter.read_back() {
            reads.set_readback(reading);
        }
        let ran = self.run(step_index, step).await;
        let (model, valkey) = match ran {
            Ok(pair) => pair,
            Err(e) => {
                self.log.push(format!("{}: error: {e}", describe(step)));
                return Err(queue_error(e));
            }
        };
        // Anything but a local step may have written to Valkey.
        let local = matches!(
            valkey,
            Outcome::Crash | Outcome::Tick { .. } | Outcome::Idle
        );
        if !local {
            self.last_read = None;
        }
        self.note_deadline(&valkey);
        // What the walk draws from is the model's answer on the reference
        // queue (a seed names one walk), the queue's elsewhere.
        let told = if self.subject.refines() {
            &model
        } else {
            &valkey
        };
        if let Some(at) = announced(told) {
            self.announced_ms = Some(at);
        }
        self.learn_lease(&valkey).await;
        let note = self.note.take().map_or(String::new(), |n| format!(" {n}"));
        self.log
            .push(format!("{} -> {}{note}", describe(step), answer(&valkey)));
        if !self.subject.refines() {
            return Ok(valkey);
        }
        if !self.checked {
            return Ok(model);
        }
        self.check(step_index, step, model, valkey, local).await
    }

    /// The checks after a step on the reference queue: both sides
    /// answered the same, the model kept its own invariants, and the queue
    /// read back equals the model's state without a structure problem.
    /// `local` says the step sent nothing, so the last read still holds.
    async fn check(
        &mut self,
        step_index: usize,
        step: &Step,
        model: Outcome,
        valkey: Outcome,
        local: bool,
    ) -> Result<Outcome, ExploreError> {
        let diverged = |check: &'static str, model: String, valkey: String| {
            ExploreError::Divergence(Box::new(Divergence {
                step_index,
                step: step.clone(),
                check,
                model,
                valkey,
            }))
        };
        if model != valkey {
            return Err(diverged(
                "outcome",
                format!("{model:?}"),
                format!("{valkey:?}"),
            ));
        }
        self.model
            .check_structure()
            .map_err(|problems| ExploreError::Model {
                step_index,
                step: step.clone(),
                problems,
            })?;
        let read = match self.last_read.take() {
            Some(read) if local => read,
            _ => {
                let Some(reads) = self.subject.adapter.read_back() else {
                    return Ok(model);
                };
                reads
                    .snapshot()
                    .await
                    .map_err(|source| ExploreError::Queue {
                        step_index,
                        step: step.clone(),
                        source,
                    })?
            }
        };
        let expected = self.model.snapshot();
        if read != expected {
            let (model, valkey) = difference(&expected, &read);
            return Err(diverged("refinement", model, valkey));
        }
        let problems = read.structure_problems();
        if !problems.is_empty() {
            return Err(diverged(
                "structure",
                "no problem".into(),
                problems.join("; "),
            ));
        }
        self.last_read = Some(read);
        Ok(model)
    }

    /// Reads the queue back into the history (the final `read` the
    /// checkers need): every job's state, the adapter's structure problems,
    /// and the consumer's effect count per job (`effects`), with the
    /// consumer's name and whether it promises effect-once.
    pub async fn read_back(&self) -> Result<(), QueueError> {
        self.read_with_effects().await.map(|_| ())
    }

    /// [`Driver::read_back`], answering the read and the effect counts.
    pub async fn read_with_effects(
        &self,
    ) -> Result<
        (
            crate::adapter::Read,
            std::collections::BTreeMap<String, u64>,
        ),
        QueueError,
    > {
        let (read, effects) = self
            .recorded
            .as_process("checker")
            .read_with_effects(self.subject.consumer.as_ref(), [])
            .await?;
        self.check_library_clock(&read)?;
        Ok((read, effects))
    }

    /// When the walk drives the clock and the adapter said what its
    /// library's clock read (`Read::clock_ms`), that it read the walk's
    /// instant: a library that does not follow would make every verdict
    /// on time a guess, so the walk stops instead.
    fn check_library_clock(&self, read: &crate::adapter::Read) -> Result<(), QueueError> {
        let (Some((_, epoch)), Some(library)) = (&self.clock, read.clock_ms) else {
            return Ok(());
        };
        let instant = epoch + self.now_ms;
        if library == instant {
            return Ok(());
        }
        Err(QueueError::Protocol {
            op: "read",
            reply: format!(
                "the queue library's clock read {library} ms since the epoch, not the walk's \
                 instant {instant}: the adapter says it follows the clock (follows_clock), and \
                 its library did not"
            ),
        })
    }

    /// Reads the queue through the recorder: a `read` of the history like
    /// any other, so the checkers judge it (structure its problems) as
    /// they judge the final one. Every read a walk or a search makes goes
    /// through here.
    pub async fn read(&self) -> Result<crate::adapter::Read, QueueError> {
        let read = self.recorded.read().await?;
        self.check_library_clock(&read)?;
        Ok(read)
    }

    /// Runs `step` on both sides: (model's outcome, adapter's outcome).
    /// The subject runs first; then the model; then the workers are updated
    /// (from the model's answer on the reference queue, from the adapter's
    /// elsewhere). An error that is not a refusal stops the run: at once
    /// when the subject gave no answer at all, after the model and the
    /// workers otherwise.
    async fn run(
        &mut self,
        step_index: usize,
        step: &Step,
    ) -> Result<(Outcome, Outcome), QueueError> {
        let worker = step.worker().map(usize::from);
        let held = match *step {
            Step::Effect { worker } => return self.effect_step(worker).await,
            Step::Crash { worker } => return self.crash(worker).await,
            Step::Tick { ms } => return self.tick(ms).await,
            Step::Wait { ms } => return self.wait(ms).await,
            Step::ServerKill | Step::PowerLoss => return self.server_fault(step).await,
            Step::Enqueue { .. } | Step::Reap | Step::Lease { .. } | Step::LeaseLost { .. } => None,
            _ => {
                let Some(held) = self.acting_on(step) else {
                    return Ok((Outcome::Idle, Outcome::Idle));
                };
                Some(held)
            }
        };
        let acks = matches!(
            step,
            Step::Complete { .. }
                | Step::StaleComplete { .. }
                | Step::CompleteLost { .. }
                | Step::CompleteNext { .. }
        );
        let held = match (held, step.worker()) {
            // A worker acks only after its effect: it applies the parts it
            // has not applied yet.
            (Some(held), Some(w)) if acks => Some(self.finish_effect(w, held).await?),
            (held, _) => held,
        };
        let valkey = self.subject_side(step_index, step, held.as_ref()).await?;
        let lost = match step {
            Step::CompleteLost { .. } => matches!(valkey, Ok(Outcome::Complete(_))),
            Step::LeaseLost { .. } => matches!(valkey, Ok(Outcome::Lease(_))),
            _ => false,
        };
        if lost {
            self.note = Some("(the worker saw no answer)".into());
        }
        let model = self.model_side(step_index, step, held.as_ref());
        if let Some(since) = &mut self.since {
            since.note(&self.model);
        }
        if let Some(w) = worker {
            self.keep(w, step, held, &model, &valkey);
        }
        let valkey = met_the_restart(valkey, &self.applied[..step_index], self.subject.refines());
        Ok((model, valkey?))
    }

    /// The lease a worker's step acts on: the one it holds, or for a stale
    /// complete the one it held before. A fail gives it up at once.
    fn acting_on(&mut self, step: &Step) -> Option<Held> {
        let w = &mut self.workers[usize::from(step.worker()?)];
        match step {
            Step::StaleComplete { .. } => w.stale.clone(),
            Step::Fail { .. } => w.held.take(),
            _ => w.held.clone(),
        }
    }

    /// The subject's side of `step`: the queue call, recorded. The outer
    /// error is a call that got no answer at all (the model is then not
    /// stepped); the inner one an error that is not a refusal.
    async fn subject_side(
        &self,
        step_index: usize,
        step: &Step,
        held: Option<&Held>,
    ) -> Result<Result<Outcome, QueueError>, QueueError> {
        let now = self.now_arg();
        let cfg = self.config;
        let lease_ms = self.queue_ms(cfg.lease_ms);
        let name = step.worker().map_or_else(String::new, worker_name);
        let process = match step {
            Step::Enqueue { .. } => "producer",
            Step::Reap => "reaper",
            _ => &name,
        };
        let queue = self.recorded.as_process(process);
        let (id, token) = held.map_or((String::new(), 0), |h| (h.id.clone(), h.token));
        Ok(match *step {
            Step::Enqueue { job } => {
                let payload = self.payload_at(job, step_index);
                let options = EnqueueOptions {
                    max_attempts: cfg.max_attempts,
                    delay_ms: 0,
                };
                let answer = queue
                    .enqueue(&job_id(job), payload.as_bytes(), options, now)
                    .await;
                from_valkey(answer, Outcome::Enqueue)
            }
            Step::Lease { .. } | Step::LeaseLost { .. } => {
                let lost = matches!(step, Step::LeaseLost { .. });
                let answer = queue.lease_maybe_lost(&name, lease_ms, now, lost).await;
                from_valkey(answer, Outcome::Lease)
            }
            Step::Complete { .. } | Step::StaleComplete { .. } => {
                from_valkey(queue.complete(&id, token).await, Outcome::Complete)
            }
            Step::CompleteLost { .. } => from_valkey(
                queue.complete_reply_lost(&id, token).await,
                Outcome::Complete,
            ),
            Step::CompleteNext { .. } => {
                let both = queue
                    .complete_and_lease(&id, token, &name, lease_ms, now)
                    .await?;
                complete_next(
                    from_valkey(both.settled, Outcome::Complete),
                    from_valkey(both.next, Outcome::Lease),
                )
            }
            Step::Fail { delay_ms, .. } => {
                let delay_ms = self.real_ms(delay_ms);
                from_valkey(queue.fail(&id, token, delay_ms, now).await, Outcome::Fail)
            }
            Step::Extend { .. } => {
                let answer = queue.extend(&id, token, lease_ms, now).await;
                from_valkey(answer, Outcome::Extend)
            }
            Step::Reap => from_valkey(queue.reap(cfg.reap_limit, now).await, Outcome::Reap),
            Step::Effect { .. }
            | Step::Crash { .. }
            | Step::Tick { .. }
            | Step::Wait { .. }
            | Step::ServerKill
            | Step::PowerLoss
            | Step::Parallel { .. } => unreachable!("only one queue call's steps come here"),
        })
    }

    /// The model's side of `step`: the reference state machine's answer
    /// (a refusal is an outcome).
    fn model_side(&mut self, step_index: usize, step: &Step, held: Option<&Held>) -> Outcome {
        let now = self.now_ms;
        let cfg = self.config;
        let name = step.worker().map_or_else(String::new, worker_name);
        // The model's token for the queue's: the same number unless the
        // queue's tokens are opaque, whose lease the model knows by its
        // delivery (its attempts then).
        let (id, token) = held.map_or((String::new(), 0), |h| {
            (h.id.clone(), self.delivery(&h.id, h.token))
        });
        let payload = match *step {
            Step::Enqueue { job } => self.payload_at(job, step_index),
            _ => String::new(),
        };
        let model = &mut self.model;
        match *step {
            Step::Enqueue { job } => {
                let answer =
                    model.enqueue(&job_id(job), payload.as_bytes(), cfg.max_attempts, 0, now);
                from_model(answer, Outcome::Enqueue)
            }
            Step::Lease { .. } | Step::LeaseLost { .. } => {
                from_model(model.lease(&name, cfg.lease_ms, now), Outcome::Lease)
            }
            Step::Complete { .. } | Step::StaleComplete { .. } | Step::CompleteLost { .. } => {
                from_model(model.complete(&id, token), Outcome::Complete)
            }
            Step::CompleteNext { .. } => {
                let settled = from_model(model.complete(&id, token), Outcome::Complete);
                let next = from_model(model.lease(&name, cfg.lease_ms, now), Outcome::Lease);
                Outcome::CompleteNext {
                    settled: Box::new(settled),
                    next: Box::new(next),
                }
            }
            Step::Fail { delay_ms, .. } => {
                from_model(model.fail(&id, token, delay_ms, now), Outcome::Fail)
            }
            Step::Extend { .. } => {
                from_model(model.extend(&id, token, cfg.lease_ms, now), Outcome::Extend)
            }
            Step::Reap => from_model(model.reap(cfg.reap_limit, now), Outcome::Reap),
            Step::Effect { .. }
            | Step::Crash { .. }
            | Step::Tick { .. }
            | Step::Wait { .. }
            | Step::ServerKill
            | Step::PowerLoss
            | Step::Parallel { .. } => unreachable!("only one queue call's steps come here"),
        }
    }

    /// The worker bookkeeping after a worker's queue call: the lease it
    /// holds next, from the model's answer on the reference queue (so what
    /// the walk does next never depends on the system under test), from
    /// the adapter's elsewhere.
    fn keep(
        &mut self,
        w: usize,
        step: &Step,
        held: Option<Held>,
        model: &Outcome,
        valkey: &Result<Outcome, QueueError>,
    ) {
        let answer = if self.subject.refines() {
            Some(model)
        } else {
            valkey.as_ref().ok()
        };
        let granted = answer.and_then(granted);
        if let Some(lease) = &granted {
            let (n, deadline) = self.delivered.entry(lease.id.clone()).or_default();
            *n += 1;
            *deadline = lease.deadline_ms;
            self.deliveries.insert((lease.id.clone(), lease.token), *n);
        }
        if let (
            Step::Extend { .. },
            Some(h),
            Some(Outcome::Extend(Extended::Extended { deadline_ms })),
        ) = (step, &held, answer)
        {
            let named = self.delivery(&h.id, h.token);
            if let Some((n, deadline)) = self.delivered.get_mut(&h.id) {
                if *n == named {
                    *deadline = *deadline_ms;
                }
            }
        }
        let granted = granted.map(Held::from);
        let w = &mut self.workers[w];
        match step {
            Step::Lease { .. } => {
                if let Some(lease) = granted {
                    if let Some(old) = w.held.take() {
                        w.stale = Some(old);
                    }
                    w.held = Some(lease);
                }
            }
            Step::StaleComplete { .. } => w.stale = None,
            // It still holds the lease, effect applied: it may retry the
            // ack or give up.
            Step::CompleteLost { .. } => w.held = held,
            // Whatever the answer, the worker is done with it.
            Step::Complete { .. } => w.held = None,
            // Done with the lease it held, whatever the answer; it holds
            // the next one if there was one.
            Step::CompleteNext { .. } => w.held = granted,
            _ => {}
        }
    }

    /// The token of job `id`'s lease `token` as the model counts it: the
    /// same number, unless the queue's tokens are opaque (a random lock
    /// token, [`crate::adapter::Tokens::Opaque`]): then the delivery it
    /// names, the n-th lease of the job (0 for a token never granted).
    /// The walk's choices and the model beside a queue that is not the
    /// reference compare leases by it.
    pub fn delivery(&self, id: &str, token: u64) -> u64 {
        if self.capabilities.tokens != crate::adapter::Tokens::Opaque {
            return token;
        }
        self.deliveries
            .get(&(id.to_owned(), token))
            .copied()
            .unwrap_or(0)
    }

    /// The deadline of the lease that superseded job `id`'s lease `token`
    /// (the job's latest, as the queue last answered it), when the job was
    /// leased again since: what the walk's late stale holders wait for on
    /// a queue the model does not describe (whose order of leases may not
    /// be the model's).
    pub(crate) fn superseding_deadline(&self, id: &str, token: u64) -> Option<u64> {
        let named = self.delivery(id, token);
        let (n, deadline) = self.delivered.get(id)?;
        (*n > named).then_some(*deadline)
    }

    /// Applies the next part of `worker`'s effect, if it holds a lease
    /// with a part left.
    async fn effect_step(&mut self, worker: u8) -> Result<(Outcome, Outcome), QueueError> {
        let parts = self.subject.consumer.parts();
        let w = usize::from(worker);
        match self.workers[w].held.clone() {
            Some(held) if held.parts_done < parts => {
                let part = held.parts_done;
                self.effect(worker, &held, part).await?;
                if let Some(h) = self.workers[w].held.as_mut() {
                    h.parts_done += 1;
                }
                let outcome = Outcome::Effect { part };
                Ok((outcome.clone(), outcome))
            }
            _ => Ok((Outcome::Idle, Outcome::Idle)),
        }
    }

    /// Applies the parts of `held`'s effect not applied yet, before an ack.
    async fn finish_effect(&mut self, worker: u8, mut held: Held) -> Result<Held, QueueError> {
        while held.parts_done < self.subject.consumer.parts() {
            self.effect(worker, &held, held.parts_done).await?;
            held.parts_done += 1;
        }
        Ok(held)
    }

    /// `worker` forgets the lease it holds: recorded as a crash, then the
    /// queue's client is told ([`Adapter::crash`]: an `exec:` adapter that
    /// listed `crash` drops the worker's connection and state; any other
    /// is sent nothing). A worker holding nothing does not crash.
    async fn crash(&mut self, worker: u8) -> Result<(Outcome, Outcome), QueueError> {
        let parts = self.subject.consumer.parts();
        let w = &mut self.workers[usize::from(worker)];
        let Some(held) = w.held.take() else {
            return Ok((Outcome::Idle, Outcome::Idle));
        };
        let point = crash_point(held.parts_done, parts);
        self.recorded
            .as_process(&worker_name(worker))
            .process()
            .crash(
                &held.id,
                held.token,
                json!({"point": point, "parts_done": held.parts_done}),
            );
        self.note = Some(format!("({} token {}, {point})", held.id, held.token));
        w.stale = Some(held);
        self.subject.adapter.crash(&worker_name(worker)).await?;
        Ok((Outcome::Crash, Outcome::Crash))
    }

    /// A server step (`K`, `P`; refused before the run on a server the
    /// explorers do not own): the fault and the restart, then the model
    /// goes on from the state the queue came back in, if its persistence
    /// allows it (else it stays, and the check after the step diverges).
    async fn server_fault(&mut self, step: &Step) -> Result<(Outcome, Outcome), QueueError> {
        let Some(owned) = self.subject.server.clone() else {
            return Err(QueueError::Protocol {
                op: "a server fault",
                reply: "the explorers do not own this server".into(),
            });
        };
        let note = owned.fault(step, &self.recorder, &mut self.conn).await?;
        self.note = Some(note);
        if let (Some(since), Some(reads)) = (&mut self.since, self.subject.adapter.read_back()) {
            if let Some(model) = since.recover(owned.kept(), &reads.snapshot().await?) {
                self.model = model;
            }
        }
        Ok((Outcome::Restarted, Outcome::Restarted))
    }

    /// Keeps the latest deadline or ready-at the queue reported.
    fn note_deadline(&mut self, outcome: &Outcome) {
        if let Some(at) = announced(outcome) {
            self.latest_deadline_ms = self.latest_deadline_ms.max(at);
        }
    }

    /// The deadline (of a lease or an extend) or ready time (of a fail)
    /// announced last, by the model on the reference queue and by the
    /// queue elsewhere, if it is still ahead of now on logical time: on
    /// the server clock the queue's times are server ms, not the walk's.
    pub(crate) fn announced_ahead_ms(&self) -> Option<u64> {
        if self.on_server_clock() {
            return None;
        }
        self.announced_ms.filter(|at| *at > self.now_ms)
    }

    /// The latest deadline or ready-at the queue reported in any answer
    /// (logical ms on logical time, server ms on the server clock; 0 if
    /// none).
    pub(crate) fn latest_deadline_ms(&self) -> u64 {
        self.latest_deadline_ms
    }

    /// On the server clock, waits until the server's `TIME` is past the
    /// latest deadline or ready-at the queue reported in any answer (plus
    /// a margin), so that the heal's reaps find every lease expired however
    /// long the queue's own leases are (a queue may not honour the lease
    /// length it is asked for: apalis's last whole seconds). Recorded as a
    /// `wait` of the nemesis with the real wait (`waited_ms`) and the
    /// server time waited for (`until_server_ms`). Does
    /// nothing on logical time. A deadline more than [`HEAL_WAIT_MAX_MS`]
    /// ahead is an error: the walk cannot heal, so it gets no verdict.
    pub(crate) async fn wait_past_deadlines(&mut self) -> Result<(), ExploreError> {
        if !self.on_server_clock() || self.latest_deadline_ms == 0 {
            return Ok(());
        }
        let setup = |source| ExploreError::Setup {
            during: "reading the server clock while healing",
            source,
        };
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn)
            .await
            .map_err(|e| setup(QueueError::from_redis("time", e)))?;
        let server_ms = secs * 1_000 + micros / 1_000;
        let until = self.latest_deadline_ms + DEADLINE_MARGIN_MS;
        if until <= server_ms {
            return Ok(());
        }
        let wait_ms = until - server_ms;
        if wait_ms > HEAL_WAIT_MAX_MS {
            return Err(setup(QueueError::Protocol {
                op: "heal",
                reply: format!(
                    "the queue reported a deadline {wait_ms} ms ahead of the server's clock, \
                     past the heal's {HEAL_WAIT_MAX_MS} ms wait"
                ),
            }));
        }
        let nemesis = Process::new(&self.recorder, "nemesis");
        let op = nemesis.invoke(F::Fault, None, None);
        tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
        nemesis.recorder().ok(
            op,
            None,
            None,
            json!({"outcome": "wait", "now_ms": self.now_ms,
                   "waited_ms": wait_ms, "until_server_ms": until}),
        );
        self.log.push(format!(
            "time passes until the server clock is past the latest deadline \
             (waited {wait_ms} ms)"
        ));
        Ok(())
    }

    /// Logical time moves `ms` on (a local step, recorded as a fault of
    /// the nemesis). On the server clock the driver really waits the
    /// scaled time, at most [`MAX_WAIT_MS`], and the event notes the wait
    /// (`waited_ms`).
    async fn tick(&mut self, ms: u64) -> Result<(Outcome, Outcome), QueueError> {
        self.now_ms = self.now_ms.saturating_add(ms);
        self.sync_clock().await?;
        let mut value = json!({"outcome": "tick", "ms": ms, "now_ms": self.now_ms});
        let nemesis = Process::new(&self.recorder, "nemesis");
        let op = nemesis.invoke(F::Fault, None, None);
        if self.on_server_clock() {
            let wait_ms = self.real_ms(ms).min(self.max_wait_ms());
            tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
            value["waited_ms"] = wait_ms.into();
            self.note = Some(format!("(waited {wait_ms} ms on the server clock)"));
        }
        nemesis.recorder().ok(op, None, None, value);
        let outcome = Outcome::Tick {
            now_ms: self.now_ms,
        };
        Ok((outcome.clone(), outcome))
    }

    /// `ms` really pass and logical time moves on by the same `ms` (a
    /// local step, recorded as a `wait` fault of the nemesis with the real
    /// wait, `waited_ms`, at most [`MAX_WAIT_MS`]). On the server clock it
    /// is a tick: a real wait scaled by the lease; and so it is when the
    /// walk drives the server's clock, which then moves with logical time
    /// (whatever expires on it expires, without a real wait).
    async fn wait(&mut self, ms: u64) -> Result<(Outcome, Outcome), QueueError> {
        if self.on_server_clock() || self.clock.is_some() {
            return self.tick(ms).await;
        }
        self.now_ms = self.now_ms.saturating_add(ms);
        let wait_ms = ms.min(MAX_WAIT_MS);
        let nemesis = Process::new(&self.recorder, "nemesis");
        let op = nemesis.invoke(F::Fault, None, None);
        tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
        nemesis.recorder().ok(
            op,
            None,
            None,
            json!({"outcome": "wait", "ms": ms, "now_ms": self.now_ms,
                   "waited_ms": wait_ms, "real": true}),
        );
        self.note = Some(format!("(waited {wait_ms} ms of real time)"));
        let outcome = Outcome::Tick {
            now_ms: self.now_ms,
        };
        Ok((outcome.clone(), outcome))
    }

    /// Applies part `part` of the effect of `held` for `worker`, recorded
    /// as an `effect` operation.
    async fn effect(&mut self, worker: u8, held: &Held, part: usize) -> Result<(), QueueError> {
        let delivery = Delivery {
            id: &held.id,
            token: held.token,
            payload: &held.payload,
        };
        let consumer = &self.subject.consumer;
        let apply = consumer.apply(&mut self.conn, self.subject.adapter.keys(), delivery, part);
        Process::new(&self.recorder, worker_name(worker))
            .effect(&held.id, held.token, part, Some(consumer.parts()), apply)
            .await
    }
}

impl Drop for Driver {
    /// Later users of the same adapter read back on their own again.
    fn drop(&mut self) {
        if let Some(reads) = self.subject.adapter.read_back() {
            reads.set_readback(false);
        }
    }
}

/// The id of job index `job`.
pub fn job_id(job: u8) -> String {
    format!("JOB-{job}")
}

/// The name of worker index `worker`.
pub(crate) fn worker_name(worker: u8) -> String {
    format!("w{worker}")
}

/// Freezes the server's clock (every node) and the adapter's library's
/// clock at `instant_ms`.
async fn set_clocks(
    clock: &crate::server::LogicalClock,
    adapter: &dyn Adapter,
    instant_ms: u64,
) -> Result<(), QueueError> {
    clock
        .set(instant_ms)
        .await
        .map_err(|e| QueueError::Protocol {
            op: "set the server's clock",
            reply: e.to_string(),
        })?;
    adapter.set_clock(Some(instant_ms));
    Ok(())
}
