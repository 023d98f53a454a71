//! The chaos runtime: producers, a pool of workers on tokio (lease, apply
//! the consumer's effect, settle), a heartbeat per worker that extends its
//! leases, a reaper, and the nemesis that follows the fault schedule.
//!
//! A run has four phases, each timed in the report:
//!
//! 1. **faults** — for `duration_ms`, producers enqueue, workers work and the
//!    nemesis injects the schedule's faults (and heals the ones with a
//!    window: a paused server resumes, a killed one restarts, a partition
//!    ends).
//! 2. **heal** — every fault still in force is healed and every armed fault
//!    that has not fired is disarmed.
//! 3. **drain** — the workers and the reaper go on until no job is pending
//!    or active, or until the liveness bound passes.
//! 4. **read** — the whole queue is read back with each job's effect count
//!    (a `read` event), the checkers judge the history, and `liveness` is
//!    judged here from the drain.
//!
//! An [`Interrupt`] (Ctrl-C) cuts the faults phase or the drain short: the
//! run heals, stops its tasks and judges the history it has, without a
//! final read (so no-loss and liveness are `unknown`).
//!
//! Every operation is recorded invoke → ok / fail / info with its worker
//! (`w0`…, heartbeats as `w0-hb1`, one process per incarnation), job and token, by the recording layer
//! (every queue call goes through a [`Recorded`] adapter); every fault
//! event is a `fault` operation of the process `nemesis`.
//!
//! Workers keep their leases in flight in a [`LeaseTable`]: the heartbeat
//! extends only `Held` entries, the handler settles through the table's one
//! permit per lease, and a crash drops the table whole (a new incarnation of
//! the worker starts with a fresh one).
//!
//! # Design notes
//!
//! This file holds the config, the report types and `Interrupt`;
//! `ackgap chaos` calls `run_until` (`phases.rs`), which owns the four
//! phases. `run_until` watches the `Interrupt` in the nemesis's sleeps and
//! the drain; the report of an interrupted run is
//! `ChaosReport::interrupted`. A failed heal of a server fault
//! (`Ctx::server_lost`) stops the run with the reason, judging nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;

use super::draws::{Draws, JobDraw, Seen, Workload};
use super::lease_table::LeaseTable;
use super::proxy::{Armed, Proxy};
use super::schedule::{Fault, FaultKind, FaultSchedule, FaultSet, ScheduleSettings, Shape, Target};
use crate::adapter::Adapter;
use crate::check::{self, Report, Verdict};
use crate::consumer::{self, Consumer, Delivery};
use crate::history::{Action, FaultEvent, Process, Recorded, Recorder};
use crate::queue::client::{EnqueueOptions, QueueConfig};
use crate::queue::{Durability, Queue, QueueError};
use crate::server::Server;

/// The settings of one chaos run. Everything the run decides is drawn from
/// `seed` (the fault schedule, the payloads, each job's `max_attempts`,
/// the failing handlers and the duplicate enqueues: [`ChaosConfig::draws`]);
/// the rest are the command line's.
#[derive(Clone, Debug, Serialize)]
pub struct ChaosConfig {
    /// The seed of the fault schedule, the payloads and the workload's
    /// draws.
    pub seed: u64,
    /// Length of the faults phase (ms).
    pub duration_ms: u64,
    /// Concurrent workers.
    pub workers: usize,
    /// Concurrent producers.
    pub producers: usize,
    /// Jobs enqueued, spread over the first 85% of the faults phase.
    pub jobs: usize,
    /// Lease length (ms, server clock).
    pub lease_ms: u64,
    /// The enabled fault kinds.
    pub faults: FaultSet,
    /// The queue under test (`--queue`).
    pub queue: String,
    /// The consumer (`--consumer`).
    pub consumer: consumer::Kind,
    /// The queue's name (its hash tag).
    pub queue_name: String,
    /// How long the drain may take after the heal before liveness fails
    /// (ms), as `--drain-ms-max` sets it; `None` derives the bound from
    /// the run (see [`LivenessBound`]).
    pub drain_ms_max: Option<u64>,
    /// What the reference queue's writes must reach before
    /// they are `ok` (`--durability`); shipped queues only.
    #[serde(serialize_with = "display")]
    pub durability: Durability,
}

fn display<S: serde::Serializer>(d: &Durability, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

impl ChaosConfig {
    /// The defaults for `seed`: 20 s, 4 workers, 2 producers, 200 jobs,
    /// 500 ms leases, every fault, the reference queue, the marker consumer.
    pub fn new(seed: u64) -> ChaosConfig {
        ChaosConfig {
            seed,
            duration_ms: 20_000,
            workers: 4,
            producers: 2,
            jobs: 200,
            lease_ms: 500,
            faults: FaultSet::all(),
            queue: "reference".into(),
            consumer: consumer::Kind::Marker,
            queue_name: "ackgap-chaos".into(),
            drain_ms_max: None,
            durability: Durability::None,
        }
    }

    /// What the fault schedule is drawn from.
    pub(crate) fn schedule_settings(&self) -> ScheduleSettings {
        ScheduleSettings {
            duration_ms: self.duration_ms,
            workers: self.workers,
            lease_ms: self.lease_ms,
            faults: self.faults.clone(),
        }
    }

    /// The fault schedule of this run.
    pub fn schedule(&self) -> FaultSchedule {
        FaultSchedule::generate(self.seed, &self.schedule_settings())
    }

    /// The workload's draws of this run: each job's `max_attempts`, the
    /// failing handlers, the retry delay, the duplicate enqueues.
    pub fn draws(&self) -> Draws {
        Draws::generate(self.seed, self.jobs, self.lease_ms)
    }

    fn reap_every(&self) -> Duration {
        Duration::from_millis((self.lease_ms / 5).clamp(20, 200))
    }

    fn response_timeout(&self) -> Duration {
        // Longer than a delayed reply (1.5 leases), so a delay arrives late
        // rather than turning into a timeout.
        Duration::from_millis(self.lease_ms * 3 + 500)
    }
}

/// Why a run could not be carried out (as opposed to what it found).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChaosError {
    /// The settings cannot be run (an unknown queue, a fault the server
    /// does not support).
    #[error("{0}")]
    Usage(String),
    /// The server could not be reached or driven.
    #[error("{0}")]
    Unavailable(String),
    /// The `exec:` adapter could not start (missing, not installed, no
    /// hello) or refused its hello.
    #[error("{0}")]
    Adapter(String),
    /// The history could not be created or written (a path that is not
    /// writable, a full disk).
    #[error("{0}")]
    History(String),
    /// Something else went wrong.
    #[error("{0}")]
    Internal(String),
}

/// How long each phase took (ms).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phases {
    /// Faults injected while the workload runs.
    pub faults_ms: u64,
    /// Healing what was still in force.
    pub heal_ms: u64,
    /// Until no job was pending or active (or the bound passed).
    pub drain_ms: u64,
    /// The final read with effect counts, and the checkers.
    pub read_ms: u64,
}

/// Effect counts from the final read.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Effects {
    /// Effects that landed, over every job.
    pub total: u64,
    /// Jobs whose effect landed more than once.
    pub duplicated: u64,
    /// Done jobs whose effect never landed.
    pub missing: u64,
    /// Jobs by their number of effects: `{"0": 3, "1": 190, "2": 7}`.
    pub histogram: BTreeMap<u64, u64>,
}

/// What a chaos run found.
#[derive(Clone, Debug, Serialize)]
pub struct ChaosReport {
    /// The settings.
    pub config: ChaosConfig,
    /// The fault schedule drawn from the seed.
    pub schedule: FaultSchedule,
    /// The workload's draws from the seed ([`ChaosConfig::draws`]).
    pub draws: Draws,
    /// What the run did with them: the fails and duplicate enqueues sent,
    /// and the queue's answers.
    pub workload: Workload,
    /// How often each kind was injected (armed, for one-shot faults).
    pub injected: BTreeMap<FaultKind, u64>,
    /// How often each kind actually hit something.
    pub fired: BTreeMap<FaultKind, u64>,
    /// Enabled kinds that never fired.
    pub never_fired: Vec<FaultKind>,
    /// Phase timings.
    pub phases: Phases,
    /// One report per invariant (the checkers', then liveness).
    pub invariants: Vec<Report>,
    /// The worst verdict.
    pub verdict: Verdict,
    /// Operations invoked.
    pub ops: u64,
    /// Events recorded.
    pub events: usize,
    /// Effect counts.
    pub effects: Effects,
    /// Jobs whose enqueue was acknowledged but that are neither done nor
    /// dead at the end.
    pub lost: Vec<String>,
    /// Duplicate effects that are the consumer's finding: a forward jump
    /// of the server's clock between two effects of a job, and a consumer
    /// whose marker expires on that clock ([`marker_ttl`]).
    pub consumer_findings: Vec<String>,
    /// Each slot migration of the run (`reshard`, `reshard-classic`) and
    /// how long the queue was unavailable during it.
    pub migrations: Vec<MigrationWindow>,
    /// The liveness bound and how it was derived.
    pub liveness_bound: LivenessBound,
    /// Why the drain stopped before every job finished and before the
    /// bound passed, if it did: every call of a stretch was refused by the
    /// server for one cause of its state (OOM under `noeviction`, ...).
    pub drain_stalled: Option<String>,
    /// The errors the run's operations met, by kind (the server's code,
    /// or the client's class: `unknown outcome`, ...), each with its
    /// first example.
    pub errors: ErrorKinds,
    /// The server's own account of the run (what it evicted and refused)
    /// and what that explains; `None` when it could not be read (see
    /// `server_unread`) or the run was interrupted.
    pub server: Option<ServerAccount>,
    /// Why `server` is missing, when it is.
    pub server_unread: Option<String>,
    /// Where the history was written, if it was.
    pub history: Option<PathBuf>,
    /// Whether the run kept its schedule: how late its faults and its
    /// workers' wake-ups ran, and how long its restarts took; a `valid`
    /// from a run that slipped is weaker ([`ScheduleSlip::note`]).
    pub schedule_slip: ScheduleSlip,
    /// Set when the run was interrupted (Ctrl-C): where it stopped and
    /// what that leaves unjudged. The invariants were judged on the history
    /// up to that point, without a drain or a final read.
    pub interrupted: Option<String>,
}

/// A request from outside to stop the run where it is (Ctrl-C). The run
/// then stops its producers, workers and nemesis, heals what is in force
/// (a paused server resumes), and judges the history it has so far.
#[derive(Clone, Debug)]
pub struct Interrupt(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Interrupt {
    fn default() -> Interrupt {
        Interrupt::new()
    }
}

impl Interrupt {
    /// A request not raised yet.
    pub fn new() -> Interrupt {
        Interrupt(Arc::new(tokio::sync::watch::Sender::new(false)))
    }

    /// Raises the request; every waiter wakes.
    pub fn raise(&self) {
        self.0.send_replace(true);
    }

    /// Whether the request was raised.
    pub fn is_raised(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once the request is raised (at once if it was).
    pub async fn raised(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the channel never closes here.
        let _ = rx.wait_for(|raised| *raised).await;
    }
}

/// A progress callback: called about once a second with a line to show.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

mod context;
mod errors;
mod liveness;
pub mod marker_ttl;
mod migrations;
mod nemesis;
mod phases;
mod report;
pub mod slip;
mod workers;

use self::context::{
    announced_nodes, connect_run, lock, AbortOnDrop, Ctx, NodeAddresses, Pools, Slot,
};
pub use self::context::{ChaosSubject, OpenAdapter};
pub use self::errors::{
    count_errors, error_kind, ErrorCount, ErrorKinds, STALL_CALLS_MIN, STALL_MS,
};
use self::errors::{first_refusal, RefusalWatch, Stall};
use self::liveness::liveness;
pub use self::liveness::{floor_ms, LivenessBound, DRAIN_MS_CAP, MARGIN};
pub use self::migrations::{migration_windows, MigrationWindow};
use self::nemesis::Nemesis;
use self::phases::ARMED_GRACE;
pub use self::phases::{run, run_until, run_with};
pub use self::report::ServerAccount;
use self::report::{
    final_read, interrupted_report, server_account, server_counters, summarize_effects,
    InterruptedRun, ServerCounters,
};
pub use self::slip::ScheduleSlip;
use self::slip::SlipLog;
use self::workers::{producer, reaper, worker};
