//! `ackgap run`: the smoke campaign on a real server. Producers enqueue
//! jobs (and one duplicate), workers lease and complete them concurrently,
//! one worker crashes while holding a lease, the reaper recovers the job
//! once its deadline has passed on the server clock, and the crashed worker
//! comes back and tries to settle its stale lease. Everything is recorded as
//! a history and judged by the checkers.
//!
//! The seed chooses the number of jobs and workers, the payloads and which
//! id is enqueued twice. What real concurrency does with the rest (which
//! worker wins which lease) is not reproducible; the checkers judge any
//! interleaving.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;

use crate::adapter::{Adapter, Reference};
use crate::check::{self, Report, Verdict};
use crate::history::{Recorded, Recorder, F};
use crate::queue::client::EnqueueOptions;
use crate::queue::{Queue, QueueError};

/// The settings of one smoke campaign, all derived from the seed but the
/// lease length.
#[derive(Clone, Debug, Serialize)]
pub struct SmokeConfig {
    /// The seed everything below was drawn from.
    pub seed: u64,
    /// Jobs enqueued (besides the duplicate).
    pub jobs: usize,
    /// Concurrent workers (besides the one that crashes).
    pub workers: usize,
    /// Lease length (ms, server clock).
    pub lease_ms: u64,
    /// Attempts allowed per job.
    pub max_attempts: u64,
}

impl SmokeConfig {
    /// The settings the seed chooses.
    pub fn from_seed(seed: u64) -> SmokeConfig {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        SmokeConfig {
            seed,
            jobs: rng.random_range(8..=16),
            workers: rng.random_range(2..=4),
            lease_ms: 300,
            max_attempts: 3,
        }
    }
}

/// One job's line in the report.
#[derive(Clone, Debug, Serialize)]
pub struct JobLine {
    /// The job id.
    pub id: String,
    /// How many leases were granted for it.
    pub deliveries: u64,
    /// Its state at the end (`done`, `dead`, ... or `absent`).
    pub state: String,
}

/// What a smoke campaign found.
#[derive(Clone, Debug, Serialize)]
pub struct SmokeReport {
    /// The settings.
    pub config: SmokeConfig,
    /// The jobs, by id.
    pub jobs: Vec<JobLine>,
    /// One report per invariant.
    pub invariants: Vec<Report>,
    /// The worst verdict.
    pub verdict: Verdict,
    /// Events recorded.
    pub events: usize,
    /// How long the campaign took (ms).
    pub elapsed_ms: u64,
    /// Where the history was written, if it was.
    pub history: Option<PathBuf>,
}

/// A worker: lease and complete until no job is ready.
async fn drain(queue: Recorded, lease_ms: u64) -> Result<(), QueueError> {
    let worker = queue.process().name().to_owned();
    loop {
        let Some(lease) = queue.lease(&worker, lease_ms, None).await? else {
            return Ok(());
        };
        queue.complete(&lease.id, lease.token).await?;
    }
}

/// The history file could not be created or written (a path that is not
/// writable, a full disk). The campaign stops with this error rather than
/// report a verdict whose history cannot be re-judged; every event is still
/// written, and flushed, as it happens, so the file holds what could be
/// written up to the failure.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the history to {}: {reason}", path.display())]
pub struct HistoryWriteError {
    /// The history file.
    pub path: PathBuf,
    /// The first error met.
    pub reason: String,
}

/// Runs the smoke campaign on `queue` (which is cleared first).
pub async fn smoke(
    queue: &Queue,
    config: SmokeConfig,
    history: Option<PathBuf>,
) -> anyhow::Result<SmokeReport> {
    let started = Instant::now();
    let rec = match &history {
        Some(path) => Recorder::to_file(path).map_err(|e| HistoryWriteError {
            path: path.clone(),
            reason: e.to_string(),
        })?,
        None => Recorder::in_memory(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed ^ 0x5eed_5a0e);
    let queue = queue.on_server_clock();
    queue.clear().await?;
    let recorded = Recorded::new(Arc::new(Reference::new(queue.clone())), &rec, "producer");

    // Producers: every job, then one duplicate of a job drawn by the seed.
    let ids: Vec<String> = (0..config.jobs)
        .map(|i| format!("JOB-{}-{i:02}", config.seed))
        .collect();
    let options = EnqueueOptions {
        max_attempts: config.max_attempts,
        delay_ms: 0,
    };
    for id in &ids {
        let payload = format!("payload-{}", rng.random::<u32>());
        recorded
            .enqueue(id, payload.as_bytes(), options, None)
            .await?;
    }
    let dup = &ids[rng.random_range(0..ids.len())];
    recorded
        .enqueue(dup, b"a different payload", options, None)
        .await?;

    // One worker leases a job and crashes holding it (forgets its lease).
    let crasher = recorded.as_process("w0");
    let stale = crasher
        .lease("w0", config.lease_ms, None)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the crashing worker found no job to lease"))?;
    crasher.process().crash(&stale.id, stale.token, json!({}));

    // The other workers drain the queue concurrently.
    let workers = || {
        (1..=config.workers)
            .map(|w| {
                let worker = recorded.as_process(&format!("w{w}"));
                tokio::spawn(drain(worker, config.lease_ms))
            })
            .collect::<Vec<_>>()
    };
    for handle in workers() {
        handle.await??;
    }

    // The crashed lease expires on the server clock; the reaper takes it back.
    let wait_ms = stale
        .deadline_ms
        .saturating_sub(queue.server_time_ms().await?)
        + 20;
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    recorded.as_process("reaper").reap(100, None).await?;
    for handle in workers() {
        handle.await??;
    }

    // The crashed worker comes back and acks its stale lease: fenced.
    crasher.complete(&stale.id, stale.token).await?;

    recorded.as_process("checker").read().await?;
    let events = rec.events();
    let invariants = check::check_all(&events);
    let verdict = check::overall(&invariants);

    let states = check::final_read(&events).unwrap_or_default();
    let mut deliveries: BTreeMap<&str, u64> = BTreeMap::new();
    for op in check::ops(&events) {
        if op.f() == F::Lease && op.outcome() == Some("leased") {
            *deliveries.entry(op.job().unwrap_or_default()).or_default() += 1;
        }
    }
    let jobs = ids
        .iter()
        .map(|id| JobLine {
            id: id.clone(),
            deliveries: deliveries.get(id.as_str()).copied().unwrap_or(0),
            state: states.get(id).cloned().unwrap_or_else(|| "absent".into()),
        })
        .collect();
    if let Some(reason) = rec.write_error() {
        return Err(HistoryWriteError {
            path: history.unwrap_or_default(),
            reason,
        }
        .into());
    }
    Ok(SmokeReport {
        config,
        jobs,
        invariants,
        verdict,
        events: events.len(),
        elapsed_ms: started.elapsed().as_millis() as u64,
        history,
    })
}

// ---------------------------------------------------------------------------
// The default campaign: what `ackgap run` runs.

/// The settings of the default campaign (`ackgap run`): a bounded
/// exhaustive search, `seeds` random walks per shipped consumer, and the
/// smoke scenario on the server clock.
#[derive(Clone, Debug, Serialize)]
pub struct CampaignConfig {
    /// The seed: the smoke scenario's, and the first walk's.
    pub seed: u64,
    /// Random walks per consumer: seeds `seed .. seed + seeds`.
    pub seeds: u64,
    /// Random steps per walk (healing steps come on top).
    pub steps: usize,
    /// Jobs of the exhaustive search.
    pub exhaust_jobs: u8,
    /// Workers of the exhaustive search.
    pub exhaust_workers: u8,
    /// Depth of the exhaustive search.
    pub exhaust_depth: usize,
}

impl CampaignConfig {
    /// `seeds` walks of 100 steps per consumer and an exhaustive search of
    /// 2 jobs and 2 workers to depth 6 (`ackgap run` takes 300 seeds: about
    /// half a minute on two loaded cores).
    pub fn new(seed: u64, seeds: u64) -> CampaignConfig {
        CampaignConfig {
            seed,
            seeds,
            steps: 100,
            exhaust_jobs: 2,
            exhaust_workers: 2,
            exhaust_depth: 6,
        }
    }
}

/// One cell of the verdict table: one invariant over the runs of one phase.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// The worst verdict of any run.
    pub verdict: Verdict,
    /// Runs judged.
    pub runs: u64,
    /// Runs with an `invalid` verdict.
    pub invalid: u64,
    /// Runs with an `unknown` verdict.
    pub unknown: u64,
    /// True when the invariant is reported, not judged, for this phase
    /// (effect-once for a consumer that does not promise it): its
    /// findings are expected, not failures.
    pub reported_only: bool,
    /// Each count of the invariant's reports, summed over the runs.
    pub counts: BTreeMap<&'static str, u64>,
}

impl Default for Cell {
    fn default() -> Cell {
        Cell {
            verdict: Verdict::Valid,
            runs: 0,
            invalid: 0,
            unknown: 0,
            reported_only: false,
            counts: BTreeMap::new(),
        }
    }
}

impl Cell {
    fn add(&mut self, report: &Report, reported_only: bool) {
        self.runs += 1;
        self.verdict = self.verdict.max(report.verdict);
        self.invalid += u64::from(report.verdict == Verdict::Invalid);
        self.unknown += u64::from(report.verdict == Verdict::Unknown);
        self.reported_only = reported_only;
        for (k, v) in &report.counts {
            *self.counts.entry(k).or_default() += v;
        }
    }

    /// The cell as the table prints it: `valid`, `INVALID k/n`,
    /// `unknown k/n`, `-` (not judged here), or the expected findings
    /// (`37 dup 5 lost`) of an invariant reported only.
    pub fn text(&self) -> String {
        let judged = self.counts.get("judged").copied();
        match self.verdict {
            _ if self.runs == 0 || judged == Some(0) => "-".into(),
            Verdict::Invalid => format!("INVALID {}/{}", self.invalid, self.runs),
            Verdict::Unknown => format!("unknown {}/{}", self.unknown, self.runs),
            Verdict::Valid if self.reported_only => {
                let dup = self.counts.get("duplicated").copied().unwrap_or(0);
                let lost = self.counts.get("lost").copied().unwrap_or(0);
                match (dup, lost) {
                    (0, 0) => "none seen".into(),
                    (d, 0) => format!("{d} dup"),
                    (0, l) => format!("{l} lost"),
                    (d, l) => format!("{d} dup {l} lost"),
                }
            }
            Verdict::Valid => "valid".into(),
        }
    }
}

/// One column of the verdict table.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// The column's name: `exhaust`, `smoke`, or a consumer's name (its
    /// random walks).
    pub name: String,
    /// What ran, in words.
    pub what: String,
    /// Runs (walks, searches, scenarios).
    pub runs: u64,
    /// Steps run against the server (for the smoke scenario: its history's
    /// events).
    pub steps: u64,
    /// Wall-clock time (ms).
    pub elapsed_ms: u64,
    /// One cell per invariant, by name.
    pub cells: BTreeMap<&'static str, Cell>,
    /// How to run each failing run again (the first few).
    pub failures: Vec<String>,
}

impl Phase {
    fn new(name: &str, what: String) -> Phase {
        Phase {
            name: name.to_owned(),
            what,
            runs: 0,
            steps: 0,
            elapsed_ms: 0,
            cells: BTreeMap::new(),
            failures: Vec::new(),
        }
    }

    fn add(&mut self, reports: &[Report], effect_once_promised: bool) {
        for r in reports {
            let reported_only = r.invariant == "effect-once" && !effect_once_promised;
            self.cells
                .entry(r.invariant)
                .or_default()
                .add(r, reported_only);
        }
    }

    /// The worst verdict of the column.
    pub fn verdict(&self) -> Verdict {
        self.cells
            .values()
            .map(|c| c.verdict)
            .max()
            .unwrap_or(Verdict::Unknown)
    }
}

/// What the default campaign found: one verdict table, rows the
/// invariants, columns the phases. Extend it with fields of its own (the
/// mutation score is added beside it by the command).
#[derive(Clone, Debug, Serialize)]
pub struct CampaignReport {
    /// The settings.
    pub config: CampaignConfig,
    /// The rows, in order.
    pub invariants: Vec<&'static str>,
    /// The columns, in order.
    pub phases: Vec<Phase>,
    /// The smoke scenario's own report (jobs, history file).
    pub smoke: SmokeReport,
    /// The worst verdict of any cell: `invalid` only for an invariant a
    /// queue or consumer promises.
    pub verdict: Verdict,
    /// Wall-clock time (ms).
    pub elapsed_ms: u64,
}

/// Runs the default campaign on `queue` (cleared before each run): the
/// exhaustive search (reference queue, `marker`), the random walks of each
/// shipped consumer on the reference queue, then the smoke scenario, whose
/// history goes to `history`.
pub async fn campaign(
    queue: &Queue,
    config: CampaignConfig,
    history: Option<PathBuf>,
) -> anyhow::Result<CampaignReport> {
    use crate::consumer::Kind;
    use crate::explore::{exhaust, explore_on, ExhaustConfig, Subject};

    let started = Instant::now();
    let mut phases = Vec::new();

    let t = Instant::now();
    let (j, w, d) = (
        config.exhaust_jobs,
        config.exhaust_workers,
        config.exhaust_depth,
    );
    let mut phase = Phase::new(
        "exhaust",
        format!("every interleaving of {j} jobs, {w} workers to depth {d} (marker)"),
    );
    let report = exhaust(&Subject::reference(queue), ExhaustConfig::new(j, w, d)).await?;
    let refinement = Report {
        invariant: "refinement",
        verdict: if report.failure.is_some() {
            Verdict::Invalid
        } else {
            Verdict::Valid
        },
        counts: BTreeMap::from([
            ("states", report.states as u64),
            ("transitions", report.transitions as u64),
        ]),
        violations: report.failure.iter().cloned().collect(),
    };
    if report.failure.is_some() {
        phase.failures.push(format!(
            "ackgap exhaust --jobs {j} --workers {w} --depth {d}"
        ));
    }
    phase.add(&[refinement], true);
    phase.what = format!("{}: {} states", phase.what, report.states);
    phase.runs = 1;
    phase.steps = report.valkey_steps;
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    phases.push(phase);

    for kind in Kind::ALL {
        let t = Instant::now();
        let consumer: Arc<dyn crate::consumer::Consumer> = Arc::from(kind.consumer());
        let promised = consumer.promises_effect_once();
        let subject = Subject::new(Arc::new(Reference::new(queue.on_server_clock())), consumer);
        let mut phase = Phase::new(
            kind.name(),
            format!(
                "{} walks of {} steps, seeds {}..={}",
                config.seeds,
                config.steps,
                config.seed,
                config.seed + config.seeds.saturating_sub(1)
            ),
        );
        for seed in config.seed..config.seed.saturating_add(config.seeds) {
            let walk = explore_on(&subject, seed, config.steps).await?;
            phase.runs += 1;
            phase.steps += walk.steps as u64;
            phase.add(&walk.invariants, promised);
            if walk.verdict != Verdict::Valid && phase.failures.len() < 3 {
                phase.failures.push(walk.replay.clone());
            }
        }
        phase.elapsed_ms = t.elapsed().as_millis() as u64;
        phases.push(phase);
    }

    let t = Instant::now();
    let smoke_config = SmokeConfig::from_seed(config.seed);
    let smoke = smoke(queue, smoke_config.clone(), history).await?;
    let mut phase = Phase::new(
        "smoke",
        format!(
            "{} jobs, {} workers + 1 that crashes, reap and stale ack on the server clock",
            smoke_config.jobs, smoke_config.workers
        ),
    );
    phase.add(&smoke.invariants, true);
    phase.runs = 1;
    phase.steps = smoke.events as u64;
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    phases.push(phase);

    let mut invariants: Vec<&'static str> = Vec::new();
    for p in &phases {
        for name in p.cells.keys() {
            if !invariants.contains(name) {
                invariants.push(name);
            }
        }
    }
    // The order the checkers report them in, then the explorers' own.
    let order = |name: &str| {
        smoke
            .invariants
            .iter()
            .position(|r| r.invariant == name)
            .unwrap_or(usize::MAX)
    };
    invariants.sort_by_key(|name| (order(name), *name));
    let verdict = phases
        .iter()
        .map(Phase::verdict)
        .max()
        .unwrap_or(Verdict::Unknown);
    Ok(CampaignReport {
        config,
        invariants,
        phases,
        smoke,
        verdict,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}
