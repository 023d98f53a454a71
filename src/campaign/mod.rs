//! `ackgap run`: the default campaign. A bounded exhaustive search, the
//! seeded random walks of every shipped consumer, and the smoke scenario
//! ([`smoke`](mod@smoke)) on a real server, aggregated into one verdict table
//! ([`table`]): rows the invariants, columns the phases.
//!
//! # Design notes
//!
//! `campaign` runs `exhaust`, `--seeds` walks per shipped consumer, then the
//! smoke scenario, and folds every run's `check::Report`s into one
//! `RunReport`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::adapter::Reference;
use crate::check::{Report, Verdict};
use crate::consumer::{Consumer, Kind as ConsumerKind};
use crate::explore::{
    exhaust, walk_seeds, ExhaustConfig, PrintFailures, Seeds, Shard, Subject, WalkObserver,
};
use crate::queue::Queue;

pub mod battery;
mod durability;
pub mod findings;
mod reduced;
pub mod smoke;
pub mod table;

pub use smoke::{smoke, HistoryWriteError, JobLine, SmokeConfig, SmokeReport};
pub use table::{Cell, Phase};

/// The settings of the default campaign (`ackgap run`): a bounded
/// exhaustive search, `seeds` random walks per shipped consumer, and the
/// smoke scenario on the server clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The part of the seeds each consumer's walks take (`1/1`: all of
    /// them); the exhaustive search and the smoke scenario run whole in
    /// every shard.
    pub shard: Shard,
}

impl CampaignConfig {
    /// `seeds` walks of 100 steps per consumer and an exhaustive search of
    /// 2 jobs and 2 workers to depth 6 (`ackgap run` takes 300 seeds: a
    /// minute or two on two loaded cores, one walk in eight waiting on
    /// real time).
    pub fn new(seed: u64, seeds: u64) -> CampaignConfig {
        CampaignConfig {
            seed,
            seeds,
            steps: 100,
            exhaust_jobs: 2,
            exhaust_workers: 2,
            exhaust_depth: 6,
            shard: Shard::WHOLE,
        }
    }
}

/// What the default campaign found: one verdict table, rows the
/// invariants, columns the phases. Extend it with fields of its own (the
/// mutation score is added beside it by the command).
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
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
) -> anyhow::Result<RunReport> {
    campaign_on(
        std::slice::from_ref(queue),
        config,
        history,
        &mut PrintFailures,
    )
    .await
}

/// [`campaign`] with the random walks run `queues.len()` at a time, each
/// on one of `queues` (give each its own name and connection to the same
/// server; the first runs the exhaustive search and the smoke scenario),
/// `observer` told of every walk in seed order, phase after phase. The
/// report is the same for any number of queues.
pub async fn campaign_on(
    queues: &[Queue],
    config: CampaignConfig,
    history: Option<PathBuf>,
    observer: &mut dyn WalkObserver,
) -> anyhow::Result<RunReport> {
    let started = Instant::now();
    let queue = queues
        .first()
        .ok_or_else(|| anyhow::anyhow!("a campaign needs a queue"))?;
    let count = ConsumerKind::ALL.len() + 2;
    observer.phase(
        &format!(
            "phase 1/{count}: exhaustive search ({} jobs, {} workers, depth {})",
            config.exhaust_jobs, config.exhaust_workers, config.exhaust_depth
        ),
        false,
    );
    let mut phases = vec![exhaust_phase(queue, &config).await?];
    for (i, kind) in ConsumerKind::ALL.into_iter().enumerate() {
        observer.phase(
            &format!("phase {}/{count}: walks, consumer {}", i + 2, kind.name()),
            true,
        );
        phases.push(walks_phase(queues, &config, kind, observer).await?);
    }
    observer.phase(&format!("phase {count}/{count}: smoke scenario"), false);
    let (phase, smoke) = smoke_phase(queue, &config, history).await?;
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
    Ok(RunReport {
        config,
        invariants,
        phases,
        smoke,
        verdict,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// The exhaustive search's column: refinement over every interleaving,
/// and every history checker over each new state's run, healed.
async fn exhaust_phase(queue: &Queue, config: &CampaignConfig) -> anyhow::Result<Phase> {
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
    let mut search = ExhaustConfig::new(j, w, d);
    search.judge = true;
    let subject = Subject::reference(queue);
    phase.exact = subject.logical();
    let report = exhaust(&subject, search).await?;
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
        violations: report
            .failure
            .iter()
            .map(|f| crate::check::Violation::new("refinement", None, &[], f.clone()))
            .collect(),
    };
    if let Some(line) = &report.line {
        phase.failures.push(format!("ackgap replay {line}"));
    } else if report.failure.is_some() {
        phase.failures.push(format!(
            "ackgap exhaust --jobs {j} --workers {w} --depth {d} --judge"
        ));
    }
    // Each history checker over the runs judged: one run per new state.
    for (invariant, judged) in &report.judged {
        if *invariant == "refinement" {
            continue;
        }
        phase.cells.insert(invariant, Cell::of_search(judged));
    }
    phase.add(&[refinement], true);
    phase.what = format!("{}: {} states", phase.what, report.states);
    phase.runs = 1;
    phase.steps = report.valkey_steps;
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    Ok(phase)
}

/// One consumer's column: its random walks on the reference queue.
async fn walks_phase(
    queues: &[Queue],
    config: &CampaignConfig,
    kind: ConsumerKind,
    observer: &mut dyn WalkObserver,
) -> anyhow::Result<Phase> {
    let t = Instant::now();
    let consumer: Arc<dyn Consumer> = Arc::from(kind.consumer());
    let promised = consumer.promises_effect_once();
    let subjects: Vec<Arc<Subject>> = queues
        .iter()
        .map(|queue| {
            Arc::new(Subject::new(
                Arc::new(Reference::new(queue.on_server_clock())),
                consumer.clone(),
            ))
        })
        .collect();
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
    let seeds = Seeds::range(config.seed, config.seeds)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "seeds {}.. ({} of them) run past u64::MAX",
                config.seed,
                config.seeds
            )
        })?
        .shard(config.shard);
    if !config.shard.is_whole() {
        phase.what = format!(
            "{} (shard {}: {} of them)",
            phase.what,
            config.shard,
            seeds.len()
        );
    }
    for walk in walk_seeds(subjects, seeds, config.steps, observer).await? {
        phase.runs += 1;
        phase.steps += walk.steps as u64;
        phase.add(&walk.invariants, promised);
        if walk.verdict != Verdict::Valid && phase.failures.len() < 3 {
            phase.failures.push(walk.replay.clone());
            phase.counterexamples.push(walk.failure_text());
        }
    }
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    Ok(phase)
}

/// The smoke scenario's column, and its own report.
async fn smoke_phase(
    queue: &Queue,
    config: &CampaignConfig,
    history: Option<PathBuf>,
) -> anyhow::Result<(Phase, SmokeReport)> {
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
    Ok((phase, smoke))
}
