//! `ackgap run --queue Q`: the whole battery on any queue, shipped or
//! `exec:`, in one verdict table (rows the invariants, columns the
//! phases): the exhaustive search where the queue takes logical time, the
//! seeded walks (the first failure of each broken invariant shrunk to a
//! minimal counterexample with its replay line), and chaos in each fault
//! group the server allows. What it found becomes a findings report
//! ([`findings`](super::findings)).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::table::Phase;
use crate::adapter::Adapter;
use crate::chaos::runner::{self as chaos, ChaosConfig};
use crate::chaos::schedule::{FaultSpec, Shape};
use crate::check::{Report, Verdict, Violation};
use crate::consumer::Kind as ConsumerKind;
use crate::explore::{
    exhaust, shrink, walk_seeds, ExhaustConfig, Line, Seeds, Subject, SwarmConfig, WalkObserver,
    WalkReport,
};
use crate::history::Event;
use crate::server::Server;

/// How much the battery tries: a CI-sized run (a minute or two) or a
/// research-sized one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// 30 walks of 40 steps, an exhaustive search of 1 job and 2 workers
    /// to depth 7 (a lease, its expiry, the reaper, a second lease and a
    /// stale settle fit), 3 s of chaos with 40 jobs per fault group.
    Ci,
    /// 300 walks of 100 steps, the search of 2 jobs and 2 workers to
    /// depth 7, 20 s of chaos with
    /// 200 jobs per fault group.
    Research,
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Budget::Ci => "ci",
            Budget::Research => "research",
        })
    }
}

impl std::str::FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Budget, String> {
        match s {
            "ci" => Ok(Budget::Ci),
            "research" => Ok(Budget::Research),
            _ => Err(format!("budget {s:?}: expected ci or research")),
        }
    }
}

/// The battery's settings, all derived from the queue, the seed and the
/// budget.
#[derive(Clone, Debug, Serialize)]
pub struct BatteryConfig {
    /// The queue under test (`--queue`).
    pub queue: String,
    /// The first seed: the walks take `seed .. seed + walks`, chaos `seed`.
    pub seed: u64,
    /// The server's persistence (the chaos `server` column kills it).
    #[serde(serialize_with = "as_display")]
    pub persistence: crate::server::Persistence,
    /// The budget the figures below come from.
    pub budget: Budget,
    /// Random walks.
    pub walks: u64,
    /// Random steps per walk.
    pub steps: usize,
    /// The exhaustive search's jobs, workers and depth.
    pub exhaust: (u8, u8, usize),
    /// Chaos per fault group: duration (ms) and jobs.
    pub chaos_ms: u64,
    /// Jobs of each chaos run.
    pub chaos_jobs: usize,
    /// Replays the shrinker may run per broken invariant.
    pub shrink_runs: usize,
}

impl BatteryConfig {
    /// The settings `budget` gives.
    pub fn new(queue: &str, seed: u64, budget: Budget) -> BatteryConfig {
        let (walks, steps, exhaust, chaos_ms, chaos_jobs, shrink_runs) = match budget {
            Budget::Ci => (30, 40, (1, 2, 7), 3_000, 40, 200),
            Budget::Research => (300, 100, (2, 2, 7), 20_000, 200, 2_000),
        };
        BatteryConfig {
            queue: queue.to_owned(),
            seed,
            // kill -9 under chaos's own default: the column then judges the
            // queue, not a server that keeps nothing.
            persistence: crate::server::Persistence::AofAlways,
            budget,
            walks,
            steps,
            exhaust,
            chaos_ms,
            chaos_jobs,
            shrink_runs,
        }
    }
}

/// Serializes a value by its Display form (`always`, `everysec`, `none`).
fn as_display<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// A broken invariant: where it broke, the minimal counterexample, the
/// line that replays it, the violation and the events it rests on.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The invariant.
    pub invariant: &'static str,
    /// The phase (column) it broke in.
    pub phase: String,
    /// The command that reproduces it, pasteable.
    pub replay: String,
    /// The counterexample in words (numbered steps, what broke).
    pub counterexample: String,
    /// The violations of the invariant in that run.
    pub violations: Vec<Violation>,
    /// The history's events the violations name, and the other events of
    /// their jobs: the excerpt of the timeline that shows it.
    pub excerpt: Vec<Event>,
}

/// What the battery found.
#[derive(Clone, Debug, Serialize)]
pub struct BatteryReport {
    /// The settings.
    pub config: BatteryConfig,
    /// The rows, in order.
    pub invariants: Vec<&'static str>,
    /// The columns, in order.
    pub phases: Vec<Phase>,
    /// Each broken invariant, once (its first phase).
    pub findings: Vec<Finding>,
    /// Phases not run, and why.
    pub skipped: Vec<String>,
    /// The worst verdict of any cell.
    pub verdict: Verdict,
    /// Wall-clock time (ms).
    pub elapsed_ms: u64,
}

/// Runs the battery on `server` (which chaos may pause, kill and
/// restart): `adapter` is the queue under test,
/// `rerun` what a printed command adds (the server's flags).
pub async fn battery(
    server: &mut Server,
    adapter: Arc<dyn Adapter>,
    config: BatteryConfig,
    rerun: crate::explore::line::Rerun,
) -> anyhow::Result<BatteryReport> {
    let started = Instant::now();
    let subject = Arc::new(
        Subject::new(adapter.clone(), Arc::from(ConsumerKind::Marker.consumer()))
            .with_rerun(rerun.clone()),
    );
    let mut phases = Vec::new();
    let mut findings = Vec::new();
    let mut skipped = Vec::new();
    if adapter.capabilities().logical_time {
        phases.push(exhaust_phase(&subject, &config, &mut findings).await?);
    } else {
        skipped.push(format!(
            "exhaust: {} takes no logical time (its capabilities), so interleavings cannot be searched",
            config.queue
        ));
    }
    phases.push(walks_phase(&subject, &config, &mut findings).await?);
    drop(subject);
    for group in fault_groups(server) {
        phases.push(chaos_phase(server, &config, group, &rerun, &mut findings).await?);
    }
    skipped.push(
        "durability matrix: not run by the battery yet (`ackgap chaos --matrix` runs it)".into(),
    );
    let mut invariants: Vec<&'static str> = Vec::new();
    for p in &phases {
        for name in p.cells.keys() {
            if !invariants.contains(name) {
                invariants.push(name);
            }
        }
    }
    let order = |name: &str| {
        crate::check::CHECKERS
            .iter()
            .position(|(n, _)| *n == name)
            .unwrap_or(usize::MAX)
    };
    invariants.sort_by_key(|name| (order(name), *name));
    let verdict = phases
        .iter()
        .map(Phase::verdict)
        .max()
        .unwrap_or(Verdict::Unknown);
    Ok(BatteryReport {
        config,
        invariants,
        phases,
        findings,
        skipped,
        verdict,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// The fault groups `server` allows, from the kinds' own requirements
/// (`chaos/fault.rs`): worker faults everywhere, network faults except on
/// a cluster (its client goes past the proxy), server faults wherever one
/// runs.
fn fault_groups(server: &Server) -> Vec<&'static str> {
    let shape = Shape::of(server);
    ["worker", "network", "server"]
        .into_iter()
        .filter(|g| {
            g.parse::<FaultSpec>()
                .is_ok_and(|s| s.resolve(&shape).is_ok())
        })
        .collect()
}

/// The exhaustive search's column on the queue itself.
async fn exhaust_phase(
    subject: &Subject,
    config: &BatteryConfig,
    findings: &mut Vec<Finding>,
) -> anyhow::Result<Phase> {
    let t = Instant::now();
    let (j, w, d) = config.exhaust;
    let mut phase = Phase::new(
        "exhaust",
        format!("every interleaving of {j} jobs, {w} workers to depth {d} (marker)"),
    );
    let mut search = ExhaustConfig::new(j, w, d);
    search.judge = true;
    let report = exhaust(subject, search).await?;
    for (invariant, judged) in &report.judged {
        let cell = phase.cells.entry(invariant).or_default();
        cell.verdict = judged.verdict;
        cell.runs = judged.runs;
        cell.invalid = judged.invalid;
        cell.unknown = judged.unknown;
    }
    if let (Some(line), Some(failure)) = (&report.line, &report.failure) {
        let bare = format!("ackgap replay {}", crate::explore::line::shell_word(line));
        // The table's line is bare (its printer adds the server's flags);
        // the finding's is pasteable as it stands.
        let replay = subject.rerun.command(&bare);
        phase.failures.push(bare);
        // The search's failing run, replayed, is the finding's evidence.
        if let Ok(parsed) = line.parse::<Line>() {
            let cfg = SwarmConfig::from_line(&parsed.config);
            let run = crate::explore::run_schedule(subject, &cfg, &parsed.schedule).await?;
            for r in run
                .invariants
                .iter()
                .filter(|r| r.verdict == Verdict::Invalid)
            {
                add_finding(
                    findings,
                    "exhaust",
                    r,
                    replay.clone(),
                    failure.clone(),
                    &run.history,
                );
            }
        }
    }
    phase.what = format!("{}: {} states", phase.what, report.states);
    phase.runs = 1;
    phase.steps = report.valkey_steps;
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    Ok(phase)
}

/// Tells nothing: the battery prints its table at the end.
struct Quiet;

impl WalkObserver for Quiet {
    fn walk(&mut self, _: &WalkReport) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// The seeded walks' column; each broken invariant's first walk shrunk.
async fn walks_phase(
    subject: &Arc<Subject>,
    config: &BatteryConfig,
    findings: &mut Vec<Finding>,
) -> anyhow::Result<Phase> {
    let t = Instant::now();
    let mut phase = Phase::new(
        "walks",
        format!(
            "{} walks of {} steps, seeds {}..={} (marker)",
            config.walks,
            config.steps,
            config.seed,
            config.seed + config.walks.saturating_sub(1)
        ),
    );
    let seeds = Seeds::range(config.seed, config.walks)
        .ok_or_else(|| anyhow::anyhow!("seeds {}.. run past u64::MAX", config.seed))?;
    let walks = walk_seeds(vec![subject.clone()], seeds, config.steps, &mut Quiet).await?;
    for walk in &walks {
        phase.runs += 1;
        phase.steps += walk.steps as u64;
        phase.add(&walk.invariants, true);
        if walk.verdict != Verdict::Valid && phase.failures.len() < 3 {
            phase.failures.push(walk.replay.clone());
        }
    }
    let mut broken: Vec<&'static str> = Vec::new();
    for walk in &walks {
        for r in walk
            .invariants
            .iter()
            .filter(|r| r.verdict == Verdict::Invalid)
        {
            if broken.contains(&r.invariant) || known(findings, r.invariant) {
                continue;
            }
            broken.push(r.invariant);
            let minimal = minimal(subject, walk, r.invariant, config.shrink_runs).await?;
            let run = minimal.as_ref().unwrap_or(walk);
            let report = run
                .invariants
                .iter()
                .find(|x| x.invariant == r.invariant && x.verdict == Verdict::Invalid)
                .unwrap_or(r);
            let text = format!("{}{}", run.failure_text(), run.counterexample_text());
            add_finding(
                findings,
                "walks",
                report,
                run.replay_line_command(),
                text,
                &run.history,
            );
            phase.counterexamples.push(run.failure_text());
        }
    }
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    Ok(phase)
}

/// `walk` shrunk to a 1-minimal schedule that still breaks `invariant`,
/// when its first finding is that invariant (the shrinker keeps the first
/// finding's); `None` otherwise, and the walk itself is the evidence.
async fn minimal(
    subject: &Subject,
    walk: &WalkReport,
    invariant: &str,
    runs: usize,
) -> anyhow::Result<Option<WalkReport>> {
    if walk.findings().first().map(|(i, _)| *i) != Some(invariant) {
        return Ok(None);
    }
    let line: Line = walk.line.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let config = SwarmConfig {
        seed: walk.seed,
        ..walk.config.clone()
    };
    let shrunk = shrink(subject, &config, &line.schedule, runs).await?;
    Ok(shrunk.map(|s| s.report))
}

/// One fault group's chaos column.
async fn chaos_phase(
    server: &mut Server,
    config: &BatteryConfig,
    group: &str,
    rerun: &crate::explore::line::Rerun,
    findings: &mut Vec<Finding>,
) -> anyhow::Result<Phase> {
    let t = Instant::now();
    let mut cfg = ChaosConfig::new(config.seed);
    cfg.duration_ms = config.chaos_ms;
    cfg.jobs = config.chaos_jobs;
    cfg.queue = config.queue.clone();
    cfg.faults = group
        .parse::<FaultSpec>()
        .and_then(|spec| spec.resolve(&Shape::of(server)))
        .map_err(|e| anyhow::anyhow!(e))?;
    let name = format!("chaos {group}");
    let mut phase = Phase::new(
        &name,
        format!(
            "{} s, {} jobs, {} workers, {group} faults, seed {} (marker)",
            cfg.duration_ms / 1000,
            cfg.jobs,
            cfg.workers,
            cfg.seed
        ),
    );
    // chaos's own default persistence is `always`, the battery's server
    // may differ: the line names it, so it starts the same server.
    let bare = format!(
        "ackgap chaos --queue {} --seed {} --duration {}ms --jobs {} --faults {group}{}",
        crate::explore::line::shell_word(&config.queue),
        cfg.seed,
        cfg.duration_ms,
        cfg.jobs,
        // `rerun` names any persistence but none, chaos's default is always.
        if config.persistence == crate::server::Persistence::None {
            " --persistence none"
        } else {
            ""
        }
    );
    let replay = rerun.command(&bare);
    let report = chaos::run(server, cfg, None, None).await?;
    phase.add(&report.invariants, true);
    phase.runs = 1;
    phase.steps = report.ops;
    if report.verdict != Verdict::Valid {
        phase.failures.push(bare);
    }
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    for r in report
        .invariants
        .iter()
        .filter(|r| r.verdict == Verdict::Invalid)
    {
        // The chaos history is not kept in memory: its violations and
        // the command that runs it again are the evidence.
        add_finding(findings, &name, r, replay.clone(), String::new(), &[]);
    }
    Ok(phase)
}

/// True when `invariant` already has a finding.
fn known(findings: &[Finding], invariant: &str) -> bool {
    findings.iter().any(|f| f.invariant == invariant)
}

/// Records `report`'s violations as the finding of its invariant, unless
/// an earlier phase found it first; the excerpt is every event of
/// `history` the violations cite or that names one of their jobs.
fn add_finding(
    findings: &mut Vec<Finding>,
    phase: &str,
    report: &Report,
    replay: String,
    counterexample: String,
    history: &[Event],
) {
    if known(findings, report.invariant) {
        return;
    }
    let cited: Vec<u64> = report
        .violations
        .iter()
        .flat_map(|v| v.events.iter().map(|c| c.event))
        .collect();
    let jobs: Vec<&str> = report
        .violations
        .iter()
        .filter_map(|v| v.job.as_deref())
        .collect();
    let excerpt = history
        .iter()
        .filter(|e| cited.contains(&e.index) || e.job.as_deref().is_some_and(|j| jobs.contains(&j)))
        .cloned()
        .collect();
    findings.push(Finding {
        invariant: report.invariant,
        phase: phase.to_owned(),
        replay,
        counterexample,
        violations: report.violations.clone(),
        excerpt,
    });
}
