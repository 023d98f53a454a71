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
//! (`w0`…, heartbeats as `w0-hb`), job and token, by the recording layer
//! (every queue call goes through a [`Recorded`] adapter); every fault
//! event is a `fault` operation of the process `nemesis`.
//!
//! Workers keep their leases in flight in a [`LeaseTable`]: the heartbeat
//! extends only `Held` entries, the handler settles through the table's one
//! permit per lease, and a crash drops the table whole (a new incarnation of
//! the worker starts with a fresh one).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;

use super::lease_table::LeaseTable;
use super::proxy::{Armed, Proxy};
use super::schedule::{Fault, FaultKind, FaultSchedule, FaultSet, ScheduleSettings, Target};
use crate::adapter::Adapter;
use crate::check::{self, Report, Verdict};
use crate::consumer::{self, Consumer, Delivery};
use crate::history::{Process, Recorded, Recorder};
use crate::queue::client::{EnqueueOptions, QueueConfig};
use crate::queue::{Queue, QueueError};
use crate::server::Server;

/// The settings of one chaos run. Everything the run decides is drawn from
/// `seed`; the rest are the command line's.
#[derive(Clone, Debug, Serialize)]
pub struct ChaosConfig {
    /// The seed of the fault schedule and the payloads.
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
    /// Attempts allowed per job.
    pub max_attempts: u64,
    /// The enabled fault kinds.
    pub faults: FaultSet,
    /// The queue under test (`--queue`).
    pub queue: String,
    /// The consumer (`--consumer`).
    pub consumer: consumer::Kind,
    /// The queue's name (its hash tag).
    pub queue_name: String,
    /// How long the drain may take after the heal before liveness fails
    /// (ms).
    pub drain_ms_max: u64,
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
            max_attempts: 10,
            faults: FaultSet::all(),
            queue: "reference".into(),
            consumer: consumer::Kind::Marker,
            queue_name: "ackgap-chaos".into(),
            drain_ms_max: 15_000,
        }
    }

    /// What the fault schedule is drawn from.
    pub fn schedule_settings(&self) -> ScheduleSettings {
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
    /// Something else went wrong (a history that cannot be written).
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
    /// Where the history was written, if it was.
    pub history: Option<PathBuf>,
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

/// One worker's fixed parts.
struct Slot {
    name: String,
    adapter: Arc<dyn Adapter>,
    /// Worker faults armed on this worker, with their stall (ms).
    armed: Mutex<VecDeque<(FaultKind, u64)>>,
    /// The heartbeat skips its extends until this time (ms since start).
    silent_until_ms: AtomicU64,
}

/// What the tasks of a run share.
struct Ctx {
    cfg: ChaosConfig,
    rec: Recorder,
    start: Instant,
    consumer: Box<dyn Consumer>,
    slots: Vec<Slot>,
    /// The direct (unproxied) adapter: producers, reaper, reads.
    direct: Arc<dyn Adapter>,
    stop_workers: AtomicBool,
    ops: AtomicU64,
    /// Serializes the nemesis's invoke/ok pairs (the nemesis, the proxy
    /// and the workers all note fault events).
    nemesis: Mutex<()>,
    injected: Mutex<BTreeMap<FaultKind, u64>>,
    fired: Mutex<BTreeMap<FaultKind, u64>>,
    acknowledged: Mutex<BTreeSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ctx {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Counts one operation, for the progress line.
    fn count(&self) {
        self.ops.fetch_add(1, Ordering::Relaxed);
    }

    /// `adapter`'s calls, recorded as `process`.
    fn recorded(&self, adapter: &Arc<dyn Adapter>, process: &str) -> Recorded {
        Recorded::new(Arc::clone(adapter), &self.rec, process)
    }

    /// Records one fault event as a `fault` operation of the nemesis.
    fn note(
        &self,
        kind: FaultKind,
        action: &str,
        target: Option<&str>,
        extra: serde_json::Value,
        error: Option<String>,
    ) {
        let _guard = lock(&self.nemesis);
        let mut value = json!({"fault": kind.name(), "action": action, "target": target});
        if let (Some(obj), serde_json::Value::Object(more)) = (value.as_object_mut(), extra) {
            obj.extend(more);
        }
        Process::new(&self.rec, "nemesis").fault(match error {
            None => Ok(value),
            Some(e) => Err(e),
        });
    }

    fn fire(&self, kind: FaultKind, target: &str, what: serde_json::Value) {
        *lock(&self.fired).entry(kind).or_default() += 1;
        self.note(kind, "fired", Some(target), json!({"hit": what}), None);
    }
}

async fn connect(cfg: &ChaosConfig, url: &str) -> Result<Arc<dyn Adapter>, ChaosError> {
    let client = redis::Client::open(url)
        .map_err(|e| ChaosError::Internal(format!("bad proxy URL {url}: {e}")))?;
    let config = QueueConfig {
        response_timeout: cfg.response_timeout(),
        connect_timeout: Duration::from_secs(2),
        ..QueueConfig::default()
    };
    let queue = Queue::connect_with(&client, &cfg.queue_name, config)
        .await
        .map_err(|e| match e {
            QueueError::QueueName(_) => ChaosError::Usage(e.to_string()),
            other => ChaosError::Unavailable(format!("cannot reach the queue: {other}")),
        })?;
    crate::adapter::by_name(&cfg.queue, &queue.on_server_clock()).map_err(ChaosError::Usage)
}

/// Aborts a task when dropped: a worker's heartbeat dies with the worker.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs one chaos campaign against `server` (which it may pause, kill and
/// restart) and judges its history. The queue is cleared first.
pub async fn run(
    server: &mut Server,
    cfg: ChaosConfig,
    history: Option<PathBuf>,
    progress: Option<Progress>,
) -> Result<ChaosReport, ChaosError> {
    run_until(server, cfg, history, progress, Interrupt::new()).await
}

/// [`run`], stopping early when `interrupt` is raised: the report then
/// judges the history so far and says so in
/// [`ChaosReport::interrupted`]. The server is healed (resumed, restarted)
/// before this returns, so the caller can stop it.
pub async fn run_until(
    server: &mut Server,
    cfg: ChaosConfig,
    history: Option<PathBuf>,
    progress: Option<Progress>,
    interrupt: Interrupt,
) -> Result<ChaosReport, ChaosError> {
    if cfg.workers == 0 || cfg.producers == 0 || cfg.jobs == 0 {
        return Err(ChaosError::Usage(
            "--workers, producers and --jobs must be at least 1".into(),
        ));
    }
    if server.kind() == "url" {
        if let Some(k) = cfg.faults.0.iter().find(|k| k.needs_owned_server()) {
            return Err(ChaosError::Usage(format!(
                "fault {k} needs a server this tool owns; against a URL use --faults all,-server-pause,-server-kill"
            )));
        }
    }
    let schedule = cfg.schedule();
    let rec = match &history {
        Some(path) => Recorder::to_file(path).map_err(|e| {
            ChaosError::Internal(format!(
                "cannot write the history to {}: {e}",
                path.display()
            ))
        })?,
        None => Recorder::in_memory(),
    };
    let direct = connect(&cfg, &server.url()).await?;
    direct
        .clear()
        .await
        .map_err(|e| ChaosError::Unavailable(format!("cannot clear the queue: {e}")))?;

    // The proxy, one port per worker; fired faults are noted through a
    // hook that reaches the context once it exists.
    let names: Vec<String> = (0..cfg.workers).map(|w| format!("w{w}")).collect();
    let hook_ctx: Arc<Mutex<Option<std::sync::Weak<Ctx>>>> = Arc::new(Mutex::new(None));
    let hook = {
        let hook_ctx = Arc::clone(&hook_ctx);
        Arc::new(move |kind: FaultKind, client: &str, cmd: &str| {
            let ctx = lock(&hook_ctx).as_ref().and_then(|w| w.upgrade());
            if let Some(ctx) = ctx {
                ctx.fire(kind, client, json!(cmd));
            }
        })
    };
    let proxy = Proxy::start(server.port(), &names, hook)
        .await
        .map_err(|e| ChaosError::Internal(format!("cannot start the fault proxy: {e}")))?;
    let mut slots = Vec::new();
    for name in &names {
        let url = proxy.url(name).expect("a port per worker");
        slots.push(Slot {
            name: name.clone(),
            adapter: connect(&cfg, &url).await?,
            armed: Mutex::new(VecDeque::new()),
            silent_until_ms: AtomicU64::new(0),
        });
    }
    let ctx = Arc::new(Ctx {
        consumer: cfg.consumer.consumer(),
        cfg: cfg.clone(),
        rec: rec.clone(),
        start: Instant::now(),
        slots,
        direct: Arc::clone(&direct),
        stop_workers: AtomicBool::new(false),
        ops: AtomicU64::new(0),
        nemesis: Mutex::new(()),
        injected: Mutex::new(BTreeMap::new()),
        fired: Mutex::new(BTreeMap::new()),
        acknowledged: Mutex::new(BTreeSet::new()),
    });
    *lock(&hook_ctx) = Some(Arc::downgrade(&ctx));

    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut producers: JoinSet<()> = JoinSet::new();
    let payloads = payloads(&cfg);
    for p in 0..cfg.producers {
        producers.spawn(producer(Arc::clone(&ctx), p, payloads.clone()));
    }
    for w in 0..cfg.workers {
        tasks.spawn(worker(Arc::clone(&ctx), w));
    }
    tasks.spawn(reaper(Arc::clone(&ctx)));
    let phase_name: Arc<Mutex<&'static str>> = Arc::new(Mutex::new("faults"));
    let _progress = progress.map(|progress| {
        AbortOnDrop(tokio::spawn(report_progress(
            Arc::clone(&ctx),
            progress,
            Arc::clone(&phase_name),
        )))
    });

    // Phase 1: faults.
    let mut nemesis = Nemesis {
        ctx: Arc::clone(&ctx),
        proxy: &proxy,
        schedule: &schedule,
        active: BTreeSet::new(),
        interrupt: interrupt.clone(),
    };
    nemesis.run(server).await;
    let faults_ms = ctx.now_ms();
    // Where an interrupt stopped the run, if one did.
    let mut stopped_in: Option<(&'static str, u64)> =
        interrupt.is_raised().then(|| ("faults", ctx.now_ms()));

    // Phase 2: heal.
    *lock(&phase_name) = "heal";
    let t = Instant::now();
    nemesis.heal_all(server).await;
    let heal_ms = t.elapsed().as_millis() as u64;

    // Phase 3: drain. Producers finish what a fault delayed, then workers
    // go on until nothing is pending or active.
    *lock(&phase_name) = "drain";
    let t = Instant::now();
    if stopped_in.is_none() && interrupt.is_raised() {
        stopped_in = Some(("heal", ctx.now_ms()));
    }
    if stopped_in.is_none() {
        tokio::select! {
            _ = async { while producers.join_next().await.is_some() {} } => {}
            _ = interrupt.raised() => stopped_in = Some(("drain", ctx.now_ms())),
        }
    }
    producers.abort_all();
    let bound = Duration::from_millis(cfg.drain_ms_max);
    let mut unfinished: Vec<String> = Vec::new();
    while stopped_in.is_none() {
        unfinished = match direct.read().await {
            Ok(read) => read
                .jobs
                .iter()
                .filter(|(_, s)| !matches!(s.as_str(), "done" | "dead"))
                .map(|(id, _)| id.clone())
                .collect(),
            Err(e) => vec![format!("(the queue could not be read: {e})")],
        };
        if unfinished.is_empty() || t.elapsed() >= bound {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = interrupt.raised() => stopped_in = Some(("drain", ctx.now_ms())),
        }
    }
    let drain_ms = t.elapsed().as_millis() as u64;
    ctx.stop_workers.store(true, Ordering::SeqCst);
    // Interrupted, the workers get less time: whatever they still have in
    // flight stays an invoke without a completion (the same as info).
    let grace = Duration::from_secs(if stopped_in.is_some() { 2 } else { 5 });
    let stopping =
        tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} });
    if stopping.await.is_err() {
        tasks.abort_all();
    }
    while tasks.join_next().await.is_some() {}

    if let Some((phase, at_ms)) = stopped_in {
        return interrupted_report(InterruptedRun {
            ctx: &ctx,
            cfg,
            schedule,
            history,
            phases: Phases {
                faults_ms,
                heal_ms,
                drain_ms,
                read_ms: 0,
            },
            phase,
            at_ms,
        });
    }

    // Phase 4: the final read with effects, and the checkers.
    *lock(&phase_name) = "read";
    let t = Instant::now();
    let effects_by_job = final_read(&ctx)
        .await
        .map_err(|e| ChaosError::Unavailable(format!("the final read failed: {e}")))?;
    let events = rec.events();
    let mut invariants = check::check_all(&events);
    invariants.push(liveness(&unfinished, drain_ms, cfg.drain_ms_max));
    let states = check::final_read(&events).unwrap_or_default();
    let effects = summarize_effects(&states, &effects_by_job);
    let verdict = check::overall(&invariants);
    let read_ms = t.elapsed().as_millis() as u64;
    if let Some(e) = rec.write_error() {
        return Err(ChaosError::Internal(format!(
            "writing the history failed: {e}"
        )));
    }
    let acknowledged = lock(&ctx.acknowledged).clone();
    let lost = acknowledged
        .iter()
        .filter(|id| !matches!(states.get(*id).map(String::as_str), Some("done" | "dead")))
        .cloned()
        .collect();
    let fired = lock(&ctx.fired).clone();
    let never_fired = cfg
        .faults
        .0
        .iter()
        .copied()
        .filter(|k| !fired.contains_key(k))
        .collect();
    let injected = lock(&ctx.injected).clone();
    Ok(ChaosReport {
        config: cfg,
        schedule,
        injected,
        fired,
        never_fired,
        phases: Phases {
            faults_ms,
            heal_ms,
            drain_ms,
            read_ms,
        },
        invariants,
        verdict,
        ops: ctx.ops.load(Ordering::Relaxed),
        events: events.len(),
        effects,
        lost,
        history,
        interrupted: None,
    })
}

/// What [`interrupted_report`] judges.
struct InterruptedRun<'a> {
    ctx: &'a Ctx,
    cfg: ChaosConfig,
    schedule: FaultSchedule,
    history: Option<PathBuf>,
    phases: Phases,
    /// The phase the interrupt stopped, and when (ms since the start).
    phase: &'static str,
    at_ms: u64,
}

/// The report of an interrupted run: the checkers on the history so far
/// (without a final read, so no-loss says `unknown`), and liveness
/// `unknown` since no drain ran to its end.
fn interrupted_report(run: InterruptedRun<'_>) -> Result<ChaosReport, ChaosError> {
    let ctx = run.ctx;
    let note = format!(
        "interrupted (Ctrl-C) {:.1} s into the run, in the {} phase: no drain ran to its end and no final read happened, so no-loss and liveness are unknown; the other invariants are judged on the history up to the interrupt",
        run.at_ms as f64 / 1000.0,
        run.phase
    );
    let events = ctx.rec.events();
    let mut invariants = check::check_all(&events);
    let mut counts = BTreeMap::new();
    counts.insert("drain_ms", run.phases.drain_ms);
    counts.insert("bound_ms", run.cfg.drain_ms_max);
    invariants.push(Report {
        invariant: "liveness",
        verdict: Verdict::Unknown,
        counts,
        violations: vec![format!(
            "interrupted in the {} phase before the drain ended: cannot tell whether every job would finish",
            run.phase
        )],
    });
    let verdict = check::overall(&invariants);
    if let Some(e) = ctx.rec.write_error() {
        return Err(ChaosError::Internal(format!(
            "writing the history failed: {e}"
        )));
    }
    let fired = lock(&ctx.fired).clone();
    let never_fired = run
        .cfg
        .faults
        .0
        .iter()
        .copied()
        .filter(|k| !fired.contains_key(k))
        .collect();
    Ok(ChaosReport {
        injected: lock(&ctx.injected).clone(),
        fired,
        never_fired,
        phases: run.phases,
        invariants,
        verdict,
        ops: ctx.ops.load(Ordering::Relaxed),
        events: events.len(),
        effects: Effects::default(),
        lost: Vec::new(),
        history: run.history,
        interrupted: Some(note),
        config: run.cfg,
        schedule: run.schedule,
    })
}

/// The payload of each job, drawn from the seed.
fn payloads(cfg: &ChaosConfig) -> Arc<Vec<(String, String)>> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xc4a0_5eed);
    Arc::new(
        (0..cfg.jobs)
            .map(|i| {
                (
                    format!("JOB-{}-{i:04}", cfg.seed),
                    format!("payload-{}", rng.random::<u32>()),
                )
            })
            .collect(),
    )
}

/// Producer `p` enqueues its share of the jobs, evenly over the first 85%
/// of the faults phase (armed worker faults need deliveries to hit). An enqueue that fails or whose outcome is unknown
/// is retried (a retry of an enqueue that did land answers `duplicate`).
async fn producer(ctx: Arc<Ctx>, p: usize, jobs: Arc<Vec<(String, String)>>) {
    let name = format!("p{p}");
    let mine: Vec<&(String, String)> = jobs.iter().skip(p).step_by(ctx.cfg.producers).collect();
    let window_ms = ctx.cfg.duration_ms * 85 / 100;
    let gap_ms = window_ms / mine.len().max(1) as u64;
    let options = EnqueueOptions {
        max_attempts: ctx.cfg.max_attempts,
        delay_ms: 0,
    };
    let queue = ctx.recorded(&ctx.direct, &name);
    for (k, (id, payload)) in mine.into_iter().enumerate() {
        // On a fixed timetable: a producer held up by a fault catches up.
        let due = ctx.start + Duration::from_millis(k as u64 * gap_ms);
        tokio::time::sleep_until(due.into()).await;
        for _attempt in 0..5 {
            ctx.count();
            let res = queue.enqueue(id, payload.as_bytes(), options, None).await;
            match res {
                Ok(outcome) => {
                    if outcome == crate::queue::Enqueued::Enqueued {
                        lock(&ctx.acknowledged).insert(id.clone());
                    }
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

/// The reaper: takes expired leases back, every fifth of a lease.
///
/// The reap script reads the server clock itself and does not return it,
/// so the reaper brackets each reap with `TIME` (the recording layer's
/// [`Recorded::timing_reaps`]): `before_ms` just before
/// it is sent, `now_ms` just after its reply came back. The script's own
/// `now` lies between the two. lease-respected judges each reaped job
/// against `now_ms`: a deadline past `now_ms` is a proven violation (the
/// script ran no later), while a deadline that fell between `before_ms`
/// and `now_ms` passes unproven — the check is blind to a reap early by
/// less than one round trip. A `TIME` that fails leaves the reap
/// unjudged.
async fn reaper(ctx: Arc<Ctx>) {
    let queue = ctx.recorded(&ctx.direct, "reaper").timing_reaps();
    while !ctx.stop_workers.load(Ordering::SeqCst) {
        ctx.count();
        let _ = queue.reap(100, None).await;
        tokio::time::sleep(ctx.cfg.reap_every()).await;
    }
}

/// How a delivery ended for the worker.
enum Handled {
    /// Settled (or tried to): go on with the next lease.
    Next,
    /// The worker crashed: start a new incarnation.
    Crashed,
}

/// Worker `w`: lease, apply the effect, settle; crash and come back when a
/// fault says so.
async fn worker(ctx: Arc<Ctx>, w: usize) {
    let slot = &ctx.slots[w];
    let queue = ctx.recorded(&slot.adapter, &slot.name);
    let idle = Duration::from_millis(20);
    'incarnation: while !ctx.stop_workers.load(Ordering::SeqCst) {
        let table = Arc::new(LeaseTable::new());
        let _heartbeat = AbortOnDrop(tokio::spawn(heartbeat(
            Arc::clone(&ctx),
            w,
            Arc::clone(&table),
        )));
        loop {
            if ctx.stop_workers.load(Ordering::SeqCst) {
                let (_, permits) = table.shutdown();
                for p in permits {
                    table.finish_settle(p);
                }
                return;
            }
            ctx.count();
            let lease = queue.lease(&slot.name, ctx.cfg.lease_ms, None).await;
            let lease = match lease {
                Ok(Some(lease)) => lease,
                Ok(None) => {
                    tokio::time::sleep(idle).await;
                    continue;
                }
                Err(_) => {
                    tokio::time::sleep(idle * 5).await;
                    continue;
                }
            };
            match handle(&ctx, slot, &table, lease).await {
                Handled::Next => {}
                Handled::Crashed => {
                    // The process is gone with its memory; it comes back
                    // after a moment with an empty table.
                    table.crash();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'incarnation;
                }
            }
        }
    }
}

/// How long the handler works on a job: up to half a lease, a function of
/// the payload (FNV-1a), which the seed chose.
fn work_ms(cfg: &ChaosConfig, payload: &[u8]) -> u64 {
    let hash = payload.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    hash % (cfg.lease_ms / 2 + 1)
}

/// Records the crash of the worker of `slot`, holding `lease`.
fn crash(ctx: &Ctx, slot: &Slot, lease: &crate::queue::Lease, kind: FaultKind) -> Handled {
    ctx.count();
    Process::new(&ctx.rec, &slot.name).crash(&lease.id, lease.token, json!({"fault": kind.name()}));
    Handled::Crashed
}

async fn handle(ctx: &Ctx, slot: &Slot, table: &LeaseTable, lease: crate::queue::Lease) -> Handled {
    let Ok(key) = table.insert(&lease.id, lease.token, lease.deadline_ms) else {
        return Handled::Next;
    };
    let armed = lock(&slot.armed).pop_front();
    if let Some((kind, _)) = armed {
        ctx.fire(
            kind,
            &slot.name,
            json!({"job": lease.id, "token": lease.token}),
        );
    }
    let fault = armed.map(|(kind, _)| kind);
    let stall = Duration::from_millis(armed.map_or(0, |(_, ms)| ms));
    match fault {
        Some(FaultKind::CrashBeforeEffect) => {
            return crash(ctx, slot, &lease, FaultKind::CrashBeforeEffect)
        }
        Some(FaultKind::StalePause) | Some(FaultKind::HeartbeatStop) => {
            // Stale pause: the whole worker stalls, heartbeat included.
            // Heartbeat stop: the heartbeat dies while the handler works
            // too long. Either way the lease expires under the worker,
            // which then goes on as if it still held it.
            slot.silent_until_ms.store(
                ctx.now_ms() + stall.as_millis() as u64 + 100,
                Ordering::SeqCst,
            );
            tokio::time::sleep(stall).await;
        }
        _ => {
            // The handler's own work: up to half a lease, fixed per job by
            // its (seeded) payload, so redeliveries overlap real work.
            tokio::time::sleep(Duration::from_millis(work_ms(&ctx.cfg, &lease.payload))).await;
        }
    }
    let mut conn = slot.adapter.connection();
    let delivery = Delivery {
        id: &lease.id,
        token: lease.token,
        payload: &lease.payload,
    };
    let queue = ctx.recorded(&slot.adapter, &slot.name);
    for part in 0..ctx.consumer.parts() {
        ctx.count();
        let apply = ctx
            .consumer
            .apply(&mut conn, slot.adapter.keys(), delivery, part);
        let res = queue
            .process()
            .effect(&lease.id, lease.token, part, None, apply)
            .await;
        if res.is_err() {
            // Give the lease up: the reaper takes the job back.
            if let Ok(permit) = table.begin_settle(&key) {
                table.finish_settle(permit);
            }
            return Handled::Next;
        }
    }
    if fault == Some(FaultKind::CrashAckGap) {
        return crash(ctx, slot, &lease, FaultKind::CrashAckGap);
    }
    // A lease the heartbeat found lost has no permit; the worker still
    // acts on it (the queue must refuse a stale settle).
    let permit = table.begin_settle(&key).ok();
    ctx.count();
    if fault == Some(FaultKind::CrashAfterAck) {
        queue
            .complete_unread(
                &lease.id,
                lease.token,
                Duration::from_millis(5),
                "the worker crashed after sending the ack; its reply was never read",
            )
            .await;
        return crash(ctx, slot, &lease, FaultKind::CrashAfterAck);
    }
    let _ = queue.complete(&lease.id, lease.token).await;
    if let Some(permit) = permit {
        table.finish_settle(permit);
    }
    Handled::Next
}

/// Worker `w`'s heartbeat: extends every held lease every third of a lease,
/// until its table closes.
async fn heartbeat(ctx: Arc<Ctx>, w: usize, table: Arc<LeaseTable>) {
    let slot = &ctx.slots[w];
    let queue = ctx.recorded(&slot.adapter, &format!("{}-hb", slot.name));
    let every = Duration::from_millis((ctx.cfg.lease_ms / 3).max(10));
    loop {
        tokio::time::sleep(every).await;
        if table.phase() != super::lease_table::Phase::Open
            || ctx.stop_workers.load(Ordering::SeqCst)
        {
            return;
        }
        if ctx.now_ms() < slot.silent_until_ms.load(Ordering::SeqCst) {
            continue;
        }
        for (key, _) in table.held() {
            let Ok(ticket) = table.begin_extend(&key) else {
                continue;
            };
            ctx.count();
            let res = queue
                .extend(key.id(), key.token(), ctx.cfg.lease_ms, None)
                .await;
            if let Ok(answer) = &res {
                let _ = table.finish_extend(ticket, answer);
            }
        }
    }
}

async fn report_progress(ctx: Arc<Ctx>, progress: Progress, phase: Arc<Mutex<&'static str>>) {
    let mut last_ops = 0;
    let mut last = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ops = ctx.ops.load(Ordering::Relaxed);
        let rate = (ops - last_ops) as f64 / last.elapsed().as_secs_f64().max(1e-3);
        last_ops = ops;
        last = Instant::now();
        let fired: u64 = lock(&ctx.fired).values().sum();
        let line = format!(
            "{:>5.1} s  {:<6}  {ops} ops  {rate:.0} ops/s  {fired} faults fired",
            ctx.start.elapsed().as_secs_f64(),
            *lock(&phase),
        );
        progress(&line);
    }
}

/// The nemesis: follows the schedule, injecting and healing.
struct Nemesis<'a> {
    ctx: Arc<Ctx>,
    proxy: &'a Proxy,
    schedule: &'a FaultSchedule,
    /// Faults injected whose heal has not run yet.
    active: BTreeSet<usize>,
    /// Stops the faults phase early (Ctrl-C).
    interrupt: Interrupt,
}

fn heals(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::ServerPause | FaultKind::ServerKill | FaultKind::Partition
    )
}

impl Nemesis<'_> {
    async fn run(&mut self, server: &mut Server) {
        // (time, heal before inject at the same instant, fault index).
        let mut timeline: Vec<(u64, bool, usize)> = Vec::new();
        for (i, f) in self.schedule.faults.iter().enumerate() {
            timeline.push((f.at_ms, true, i));
            if heals(f.kind) {
                timeline.push((f.at_ms + f.duration_ms, false, i));
            }
        }
        timeline.sort();
        let end = self.ctx.start + Duration::from_millis(self.ctx.cfg.duration_ms);
        for (at, inject, i) in timeline {
            if at >= self.ctx.cfg.duration_ms {
                break;
            }
            let due = self.ctx.start + Duration::from_millis(at);
            tokio::select! {
                _ = tokio::time::sleep_until(due.into()) => {}
                _ = self.interrupt.raised() => return,
            }
            if inject {
                self.inject(server, i).await;
            } else if self.active.remove(&i) {
                self.heal(server, i).await;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep_until(end.into()) => {}
            _ = self.interrupt.raised() => {}
        }
    }

    async fn inject(&mut self, server: &mut Server, i: usize) {
        let f: &Fault = &self.schedule.faults[i];
        let ctx = &self.ctx;
        let target = f.target.as_deref().unwrap_or("server");
        *lock(&ctx.injected).entry(f.kind).or_default() += 1;
        let scheduled = json!({"at_ms": f.at_ms, "duration_ms": f.duration_ms});
        let armed = match f.kind {
            FaultKind::DropRequest => Some(Armed::DropRequest),
            FaultKind::DropReply => Some(Armed::DropReply),
            FaultKind::DelayReply => Some(Armed::DelayReply(Duration::from_millis(f.duration_ms))),
            FaultKind::DuplicateRequest => Some(Armed::Duplicate),
            _ => None,
        };
        if f.kind.target() == Target::Worker {
            ctx.note(f.kind, "inject", Some(target), scheduled, None);
            if let Some(slot) = ctx.slots.iter().find(|s| s.name == target) {
                lock(&slot.armed).push_back((f.kind, f.duration_ms));
            }
            return;
        }
        if let Some(armed) = armed {
            ctx.note(f.kind, "inject", Some(target), scheduled, None);
            self.proxy.arm(target, armed);
            return;
        }
        let result: Result<serde_json::Value, String> = match f.kind {
            FaultKind::ResetConnection => Ok(json!({"connections": self.proxy.reset(target)})),
            FaultKind::Partition => {
                self.proxy.partition(target);
                Ok(json!({}))
            }
            FaultKind::ServerPause => server
                .pause()
                .await
                .map(|_| json!({}))
                .map_err(|e| e.to_string()),
            FaultKind::ServerKill => server
                .kill()
                .await
                .map(|_| json!({}))
                .map_err(|e| e.to_string()),
            FaultKind::ScriptFlush => {
                let mut conn = ctx.direct.connection();
                redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async::<()>(&mut conn)
                    .await
                    .map(|_| json!({}))
                    .map_err(|e| e.to_string())
            }
            _ => Ok(json!({})),
        };
        match result {
            Ok(hit) => {
                ctx.note(f.kind, "inject", Some(target), scheduled, None);
                if heals(f.kind) {
                    self.active.insert(i);
                }
                ctx.fire(f.kind, target, hit);
            }
            Err(e) => ctx.note(f.kind, "inject", Some(target), scheduled, Some(e)),
        }
    }

    async fn heal(&mut self, server: &mut Server, i: usize) {
        let f = &self.schedule.faults[i];
        let target = f.target.as_deref().unwrap_or("server");
        let result = match f.kind {
            FaultKind::ServerPause => server.resume().await.map_err(|e| e.to_string()),
            FaultKind::ServerKill => server.restart().await.map_err(|e| e.to_string()),
            FaultKind::Partition => {
                self.proxy.unpartition(target);
                Ok(())
            }
            _ => Ok(()),
        };
        self.ctx
            .note(f.kind, "heal", Some(target), json!({}), result.err());
    }

    /// Heals every fault still in force and disarms the ones that never
    /// fired.
    async fn heal_all(&mut self, server: &mut Server) {
        for i in std::mem::take(&mut self.active) {
            self.heal(server, i).await;
        }
        // An armed worker fault fires on the worker's next lease. A server
        // fault healed just now may have kept workers from leasing, so give
        // armed faults a bounded chance to fire on a healthy server before
        // they are disarmed.
        let deadline = tokio::time::Instant::now() + ARMED_GRACE;
        while tokio::time::Instant::now() < deadline
            && self.ctx.slots.iter().any(|s| !lock(&s.armed).is_empty())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (client, kind) in self.proxy.heal() {
            self.ctx
                .note(kind, "disarm", Some(&client), json!({}), None);
        }
        for slot in &self.ctx.slots {
            let armed: Vec<(FaultKind, u64)> = lock(&slot.armed).drain(..).collect();
            for (kind, _) in armed {
                self.ctx
                    .note(kind, "disarm", Some(&slot.name), json!({}), None);
            }
        }
    }
}

/// How long the heal phase waits for armed worker faults to fire.
const ARMED_GRACE: Duration = Duration::from_secs(5);

/// Reads the whole queue back with every job's effect count, as one `read`
/// event of the `checker`. Answers the effect counts.
async fn final_read(ctx: &Ctx) -> Result<BTreeMap<String, u64>, QueueError> {
    ctx.count();
    let acknowledged = lock(&ctx.acknowledged).clone();
    let (_, effects) = ctx
        .recorded(&ctx.direct, "checker")
        .read_with_effects(ctx.consumer.as_ref(), acknowledged)
        .await?;
    Ok(effects)
}

fn liveness(unfinished: &[String], drain_ms: u64, bound_ms: u64) -> Report {
    let mut counts = BTreeMap::new();
    counts.insert("drain_ms", drain_ms);
    counts.insert("bound_ms", bound_ms);
    counts.insert("unfinished", unfinished.len() as u64);
    let violations: Vec<String> = unfinished
        .iter()
        .take(20)
        .map(|id| format!("{id}: neither done nor dead {bound_ms} ms after the faults healed"))
        .collect();
    Report {
        invariant: "liveness",
        verdict: if unfinished.is_empty() {
            Verdict::Valid
        } else {
            Verdict::Invalid
        },
        counts,
        violations,
    }
}

fn summarize_effects(
    states: &BTreeMap<String, String>,
    effects: &BTreeMap<String, u64>,
) -> Effects {
    let mut out = Effects::default();
    for (id, &n) in effects {
        out.total += n;
        *out.histogram.entry(n).or_default() += 1;
        if n > 1 {
            out.duplicated += 1;
        }
        if n == 0 && states.get(id).map(String::as_str) == Some("done") {
            out.missing += 1;
        }
    }
    out
}
