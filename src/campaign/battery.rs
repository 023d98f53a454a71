//! `ackgap run --queue Q`: the whole battery on any queue, shipped or
//! `exec:`, in one verdict table (rows the invariants, columns the
//! phases): the exhaustive search where the queue takes logical time, the
//! seeded walks (the first failure of each broken invariant shrunk to a
//! minimal counterexample with its replay line), chaos in each fault
//! group the server allows, and a short durability matrix (server kills
//! under each persistence mode and, where the topology allows, failovers
//! of a replicated server with the durability dial: cells of
//! [`crate::chaos::matrix`], each on a fresh server). What it found becomes
//! a findings report ([`findings`](super::findings)).
//!
//! # Design notes
//!
//! The chaos phases run in each fault group the server allows, read from the
//! kinds' own requirements (`chaos/fault.rs`): worker; network everywhere;
//! server wherever one runs (on a url, script-flush alone). Then
//! `chaos clock-jump` (`battery::clock_phase`): clock-jump alone on a fresh
//! process under libfaketime, skipped with the reason on other servers. The
//! explorers' phases run on a server of their own (the chaos phases keep
//! real time). The battery ends in one verdict table and exit code, then the
//! findings report, Markdown and HTML (`--findings FILE`, default
//! `target/ackgap/findings/QUEUE.md`). `--budget ci|research` sizes it.
//!
//! The durability column's cells (`battery::durability_cells`): kill -9
//! under each persistence mode, power loss under everysec and always on a
//! process server; replicated failovers with the durability dial for the
//! reference queue, and for research a power loss of every node behind each
//! dial. `super::durability` runs them (`matrix::run`, each on a fresh
//! server); only the cells `matrix::promised` (documented to keep
//! acknowledged writes) make the column, and every cell is listed in the
//! findings report with its `ackgap chaos` rerun line and, where it broke,
//! the exact replay read off its history.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::table::{Phase, Replayed};
use crate::adapter::Adapter;
use crate::chaos::matrix::Cell as MatrixCell;
use crate::chaos::runner::{self as chaos, ChaosConfig};
use crate::chaos::schedule::{FaultKind, FaultSpec, Shape};
use crate::check::{Report, Verdict, Violation};
use crate::consumer::Kind as ConsumerKind;
use crate::explore::{
    exhaust, shrink_for, walk_seeds, ExhaustConfig, Line, Seeds, Subject, SwarmConfig,
    WalkObserver, WalkReport,
};
use crate::history::Event;
use crate::queue::Durability;
use crate::server::{Persistence, Server, ServerSpec};
use std::collections::BTreeMap;

/// How much the battery tries: a CI-sized run (a minute or two) or a
/// research-sized one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// 30 walks of 40 steps, an exhaustive search of 1 job and 2 workers
    /// to depth 7 (a lease, its expiry, the reaper, a second lease and a
    /// stale settle fit), 3 s of chaos with 40 jobs per fault group; the
    /// durability matrix's kill -9 under each persistence mode, power loss
    /// under everysec and always (a process server), and, for the
    /// reference queue, a failover under `wait:1`, 3 s each.
    Ci,
    /// 300 walks of 100 steps, the search of 2 jobs and 2 workers to
    /// depth 7, 20 s of chaos with
    /// 200 jobs per fault group; the durability matrix's kills, and
    /// failovers and lag-failovers of a replicated server (without the
    /// dial, and for the reference queue under `wait:1` and
    /// `waitaof:1:1`), 20 s each.
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
    /// A chaos run of the battery's seed, duration, jobs and queue (its
    /// columns and its durability cells set the faults).
    pub(crate) fn chaos_config(&self) -> ChaosConfig {
        let mut cfg = ChaosConfig::new(self.seed);
        cfg.duration_ms = self.chaos_ms;
        cfg.jobs = self.chaos_jobs;
        cfg.queue = self.queue.clone();
        cfg
    }

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

/// The durability matrix's cells for `queue` on servers like `spec`,
/// sized by `budget`: a single server killed (kill -9) under each
/// persistence mode; a process or container server's power lost (the
/// shim: only what was fsynced survives) under `everysec` and `always`; for the research budget, a primary with two replicas
/// failed over and lag-failed-over under `always`; for the reference
/// queue (the one whose client takes the durability dial), failovers
/// under `wait:1` (and `waitaof:1:1` for research), and for research the
/// power of every node of the replicated set lost under `everysec` behind
/// each of those dials. None on a URL (the
/// server is not ours to kill) or a cluster spec's single server aside,
/// the topologies follow `spec`: processes for a process, replicated or
/// cluster spec, containers for a container spec.
pub(crate) fn durability_cells(spec: &ServerSpec, queue: &str, budget: Budget) -> Vec<MatrixCell> {
    let (single, replicated) = match spec {
        ServerSpec::Url(_) => return Vec::new(),
        ServerSpec::Process(options)
        | ServerSpec::Replicated { options, .. }
        | ServerSpec::Cluster { options, .. } => (
            ServerSpec::Process(options.clone()),
            ServerSpec::Replicated {
                replicas: 2,
                options: options.clone(),
            },
        ),
        ServerSpec::Container
        | ServerSpec::ContainerReplicated { .. }
        | ServerSpec::ContainerCluster { .. } => (
            ServerSpec::Container,
            ServerSpec::ContainerReplicated { replicas: 2 },
        ),
    };
    let mut cells: Vec<MatrixCell> = crate::chaos::persistence_matrix::MODES
        .iter()
        .map(|&persistence| MatrixCell {
            persistence,
            topology: single.clone(),
            durability: Durability::None,
            fault: FaultKind::ServerKill,
        })
        .collect();
    // Power loss (only what was fsynced survives) where the server can
    // lose it: a process or a container started with the shim.
    if matches!(single, ServerSpec::Process(_) | ServerSpec::Container) {
        for persistence in [Persistence::AofEverysec, Persistence::AofAlways] {
            cells.push(MatrixCell {
                persistence,
                topology: single.clone(),
                durability: Durability::None,
                fault: FaultKind::PowerLoss,
            });
        }
    }
    let wait = Durability::Wait {
        replicas: 1,
        timeout_ms: crate::queue::durability::DEFAULT_WAIT_TIMEOUT_MS,
    };
    let waitaof = Durability::WaitAof {
        local: 1,
        replicas: 1,
        timeout_ms: crate::queue::durability::DEFAULT_WAIT_TIMEOUT_MS,
    };
    let dials: Vec<Durability> = match (budget, queue == "reference") {
        (Budget::Ci, false) => Vec::new(),
        (Budget::Ci, true) => vec![wait],
        (Budget::Research, false) => vec![Durability::None],
        (Budget::Research, true) => vec![Durability::None, wait, waitaof],
    };
    let faults: &[FaultKind] = match budget {
        Budget::Ci => &[FaultKind::Failover],
        Budget::Research => &[FaultKind::Failover, FaultKind::LagFailover],
    };
    for &durability in &dials {
        for &fault in faults {
            cells.push(MatrixCell {
                persistence: Persistence::AofAlways,
                topology: replicated.clone(),
                durability,
                fault,
            });
        }
    }
    // For research, every node of a replicated set of processes loses
    // power at once under everysec, behind each dial that waits: WAIT
    // (the replicas hold the write in memory) against WAITAOF (fsynced).
    if budget == Budget::Research && matches!(replicated, ServerSpec::Replicated { .. }) {
        for durability in dials.into_iter().filter(|d| d.waits()) {
            cells.push(MatrixCell {
                persistence: Persistence::AofEverysec,
                topology: replicated.clone(),
                durability,
                fault: FaultKind::PowerLoss,
            });
        }
    }
    cells
}

/// One cell of the durability matrix, as the findings report shows it.
#[derive(Clone, Debug, Serialize)]
pub struct DurabilityCell {
    /// `process always none server-kill`.
    pub label: String,
    /// What Valkey's documentation promises for the cell.
    pub promise: &'static str,
    /// True when that promise is to keep acknowledged writes: the cell is
    /// judged (its invariants make the `durability` column); otherwise it
    /// is reported beside it, what it lost being what Valkey documents.
    pub judged: bool,
    /// How often the cell's fault fired.
    pub fired: u64,
    /// Acknowledged jobs lost.
    pub lost: usize,
    /// The invariants it broke.
    pub broken: Vec<String>,
    /// Its run's verdict (unknown when its fault never fired).
    pub verdict: Verdict,
    /// The command that runs it again on the wall clock, pasteable (a
    /// rerun: it may not break the same way).
    pub rerun: String,
    /// Each broken invariant read off the cell's history and replayed
    /// exactly (a judged cell: every one it broke; a reported one: the
    /// loss, no-loss), by invariant.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub replays: BTreeMap<&'static str, Replayed>,
    /// Each of those no schedule replayed exactly, with why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unreduced: BTreeMap<&'static str, String>,
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
    /// What the counterexample is: shrunk (from how many steps), the
    /// exhaustive search's shortest path, or a walk as found; empty when
    /// there is none (a chaos run).
    pub label: String,
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
    /// The durability matrix's cells, in order (empty when not run).
    pub durability: Vec<DurabilityCell>,
    /// Phases not run, and why.
    pub skipped: Vec<String>,
    /// The worst verdict of any cell.
    pub verdict: Verdict,
    /// Wall-clock time (ms).
    pub elapsed_ms: u64,
    /// The user's app the adapter ran with (`--app`), as its hello said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<crate::adapter::App>,
}

/// Runs the battery on `server` (which chaos may pause, kill and
/// restart), started from `spec` (the durability matrix starts fresh
/// servers like it): `adapter` is the queue under test,
/// `rerun` what a printed command adds (the server's flags).
pub async fn battery(
    server: &mut Server,
    spec: &ServerSpec,
    adapter: Arc<dyn Adapter>,
    config: BatteryConfig,
    rerun: crate::explore::line::Rerun,
) -> anyhow::Result<BatteryReport> {
    let started = Instant::now();
    let app = adapter.app();
    let (subject, explorers_server) = explorer_subject(spec, adapter, &config, &rerun).await?;
    let mut phases = Vec::new();
    let mut findings = Vec::new();
    let mut skipped = Vec::new();
    if subject.logical() {
        phases.push(exhaust_phase(&subject, &config, &mut findings).await?);
    } else {
        skipped.push(format!(
            "exhaust: {} runs on real time here (its capabilities, or a server whose clock ackgap \
             does not own), so interleavings cannot be searched",
            config.queue
        ));
    }
    phases.push(walks_phase(&subject, &config, &mut findings).await?);
    drop(subject);
    if let Some(server) = explorers_server {
        server.stop().await?;
    }
    for group in fault_groups(server) {
        phases.push(chaos_phase((server, spec), &config, group, &rerun, &mut findings).await?);
    }
    match clock_phase(spec, &config, &rerun, &mut findings).await? {
        Ok(phase) => phases.push(phase),
        Err(why) => skipped.push(format!("chaos clock-jump: {why}")),
    }
    let cells = durability_cells(spec, &config.queue, config.budget);
    let mut durability = Vec::new();
    if cells.is_empty() {
        skipped.push(format!(
            "durability: the server ({}) is not ours to kill",
            server.kind()
        ));
    } else {
        let out = (&mut durability, &mut findings);
        phases.push(super::durability::durability_phase(&config, &cells, &rerun, out).await?);
    }
    let invariants = invariants_of(&phases);
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
        durability,
        skipped,
        verdict,
        elapsed_ms: started.elapsed().as_millis() as u64,
        app,
    })
}

/// The subject the explorers' phases (exhaust, walks) run: `adapter` as
/// it is, or, for a queue that follows the clock on a server ackgap
/// starts, the same queue opened on a server of their own, whose clock
/// they own (libfaketime, frozen at each step's instant): the chaos
/// phases after them need `adapter`'s server on real time. That server
/// is answered too, to be stopped once the phases are done.
async fn explorer_subject(
    spec: &ServerSpec,
    adapter: Arc<dyn Adapter>,
    config: &BatteryConfig,
    rerun: &crate::explore::line::Rerun,
) -> anyhow::Result<(Arc<Subject>, Option<Server>)> {
    let subject = |adapter| {
        Subject::new(adapter, Arc::from(ConsumerKind::Marker.consumer())).with_rerun(rerun.clone())
    };
    if !adapter.capabilities().follows_clock || matches!(spec, ServerSpec::Url(_)) {
        return Ok((Arc::new(subject(adapter)), None));
    }
    let (server, real_time) = Server::start_for_explorers(spec, config.persistence).await?;
    if real_time.is_some() {
        server.stop().await?;
        return Ok((Arc::new(subject(adapter)), None));
    }
    let queue = crate::queue::Queue::connect(&server.client(), &adapter.keys().name).await?;
    let opened = crate::adapter::open(&config.queue, &queue, &server.url()).await?;
    let subject = subject(opened).with_clock(server.logical_clock());
    Ok((Arc::new(subject), Some(server)))
}

/// Every invariant some phase judged, in the checkers' order
/// ([`crate::check::CHECKERS`]): the rows of the verdict table.
fn invariants_of(phases: &[Phase]) -> Vec<&'static str> {
    let mut invariants: Vec<&'static str> = Vec::new();
    for p in phases {
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
    invariants
}

/// The fault groups `server` allows, from the kinds' own requirements
/// (`chaos/fault.rs`): worker and network faults everywhere, server
/// faults wherever one runs.
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
    search.keep_going = true;
    phase.exact = subject.logical();
    let report = exhaust(subject, search).await?;
    for (invariant, judged) in &report.judged {
        phase
            .cells
            .insert(invariant, crate::campaign::Cell::of_search(judged));
    }
    for found in &report.findings {
        let (line, failure) = (&found.line, &found.failure);
        let bare = format!("ackgap replay {}", crate::explore::line::shell_word(line));
        // The table's line and the finding's are pasteable as they stand.
        let replay = subject.rerun.command(&bare);
        phase.failures.push(replay.clone());
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
                    (
                        failure.clone(),
                        format!(
                            "the exhaustive search's first path to break it, {} steps: a shortest one (breadth first)",
                            parsed.schedule.steps().len()
                        ),
                    ),
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
    phase.exact = subject.logical();
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
            let label = shrunk_label(walk, minimal.as_ref());
            add_finding(
                findings,
                "walks",
                report,
                run.replay_line_command(),
                (text, label),
                &run.history,
            );
            phase.counterexamples.push(run.failure_text());
        }
    }
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    Ok(phase)
}

/// A walk's finding's label: the steps it was shrunk from and to, or why
/// it stands as found.
fn shrunk_label(walk: &WalkReport, minimal: Option<&WalkReport>) -> String {
    match minimal {
        Some(shrunk) => format!(
            "shrunk from {} to {} steps (seed {})",
            walk.steps, shrunk.steps, walk.seed
        ),
        None => format!(
            "walk seed {} as found, {} steps, not shrunk: its replay did not break it again",
            walk.seed, walk.steps
        ),
    }
}

/// `walk` shrunk to a 1-minimal schedule that still breaks `invariant`,
/// when its first finding is that invariant (the shrinker keeps the first
/// finding's); `None` otherwise, and the walk itself is the evidence.
async fn minimal(
    subject: &Subject,
    walk: &WalkReport,
    invariant: &'static str,
    runs: usize,
) -> anyhow::Result<Option<WalkReport>> {
    let line: Line = walk.line.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let config = SwarmConfig {
        seed: walk.seed,
        ..walk.config.clone()
    };
    let shrunk = shrink_for(subject, &config, &line.schedule, runs, Some(invariant)).await?;
    // The replay broke another invariant only: no counterexample of this one.
    Ok(shrunk
        .filter(|s| s.invariant == invariant)
        .map(|s| s.report))
}

/// How many times a wall-clock run that broke an invariant (a chaos
/// group's, a judged durability cell's) is run again with the same seed:
/// a cell that broke and never again is `seen once`
/// ([`super::table::Cell::seen_once`]), listed apart on the findings page.
pub const RERUNS: u64 = 2;

/// Records in `phase`'s cells of `broken` how the reruns of their run went:
/// each `again` one rerun's reports.
pub(super) fn record_reruns(phase: &mut Phase, broken: &[&'static str], again: &[Report]) {
    for inv in broken {
        let cell = phase.cells.entry(inv).or_default();
        cell.reruns += 1;
        if again
            .iter()
            .any(|r| r.invariant == *inv && r.verdict == Verdict::Invalid)
        {
            cell.again += 1;
        }
    }
}

/// The invariants `reports` found broken.
pub(super) fn broken_in(reports: &[Report]) -> Vec<&'static str> {
    reports
        .iter()
        .filter(|r| r.verdict == Verdict::Invalid)
        .map(|r| r.invariant)
        .collect()
}

/// The line that runs `group`'s chaos column again (same seed, wall
/// clock: it may not break the same way), pasteable.
fn chaos_rerun(config: &BatteryConfig, group: &str, rerun: &crate::explore::line::Rerun) -> String {
    // chaos's own default persistence is `always`, the battery's server
    // may differ: the line names it, so it starts the same server.
    let bare = format!(
        "ackgap chaos --queue {} --seed {} --duration {}ms --jobs {} --faults {group}{}",
        crate::explore::line::shell_word(&config.queue),
        config.seed,
        config.chaos_ms,
        config.chaos_jobs,
        // `rerun` names any persistence but none, chaos's default is always.
        if config.persistence == crate::server::Persistence::None {
            " --persistence none"
        } else {
            ""
        }
    );
    rerun.command(&bare)
}

/// One fault group's chaos column: one run (its history kept in a
/// temporary file), what it broke run again [`RERUNS`] times, and each
/// broken invariant reduced to an exact replay on a server of `spec`
/// ([`super::reduced`]).
async fn chaos_phase(
    (server, spec): (&mut Server, &ServerSpec),
    config: &BatteryConfig,
    group: &str,
    rerun: &crate::explore::line::Rerun,
    findings: &mut Vec<Finding>,
) -> anyhow::Result<Phase> {
    let t = Instant::now();
    let mut cfg = config.chaos_config();
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
    let replay = chaos_rerun(config, group, rerun);
    let kept = tempfile::NamedTempFile::new()?;
    let report = chaos::run(server, cfg.clone(), Some(kept.path().into()), None).await?;
    phase.add(&report.invariants, true);
    phase.runs = 1;
    phase.steps = report.ops;
    if report.verdict != Verdict::Valid {
        phase.failures.push(replay.clone());
    }
    // One wall-clock sample: what it broke is run again, to tell a
    // finding that comes back from one seen once.
    let broken = broken_in(&report.invariants);
    if !broken.is_empty() {
        for _ in 0..RERUNS {
            let again = chaos::run(server, cfg.clone(), None, None).await?;
            record_reruns(&mut phase, &broken, &again.invariants);
        }
        let events = crate::history::read_file(kept.path()).map_err(|e| anyhow::anyhow!(e))?;
        let judged = (events.as_slice(), report.invariants.as_slice());
        let reduced =
            super::reduced::reduce_column(spec, config, rerun, judged, cfg.lease_ms).await?;
        phase.replays = reduced.replays;
        phase.unreduced = reduced.unreduced;
    }
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    for r in report
        .invariants
        .iter()
        .filter(|r| r.verdict == Verdict::Invalid)
    {
        // The chaos history is not kept: its violations and the command
        // that runs it again are the evidence (the exact replay, if any,
        // is the phase's).
        add_finding(findings, &name, r, replay.clone(), Default::default(), &[]);
    }
    Ok(phase)
}

/// The server clock's column: the chaos phase with `clock-jump` alone
/// (the server's wall clock jumps forward by the fault's window, then
/// back) on a fresh process of `spec` started under libfaketime. A
/// forward jump expires every lease at once, so the reaper takes jobs
/// from live workers and their late settles must be refused. Runs where
/// the fault does (a single process); elsewhere, or where the server
/// refuses libfaketime (Debian's redis-server 7.0), the reason it was
/// skipped.
async fn clock_phase(
    spec: &ServerSpec,
    config: &BatteryConfig,
    rerun: &crate::explore::line::Rerun,
    findings: &mut Vec<Finding>,
) -> anyhow::Result<Result<Phase, String>> {
    if !matches!(spec, ServerSpec::Process(_)) {
        return Ok(Err(
            "the server's clock jumps on a single process this tool starts (--server process)"
                .into(),
        ));
    }
    let instruments = crate::server::Instruments {
        clock: true,
        ..Default::default()
    };
    let mut server = match Server::start_instrumented(spec, config.persistence, instruments).await {
        Ok(server) => server,
        Err(e) => {
            return Ok(Err(format!(
                "the server does not start under libfaketime: {e}"
            )))
        }
    };
    let phase = chaos_phase((&mut server, spec), config, "clock-jump", rerun, findings).await;
    server.stop().await?;
    Ok(Ok(phase?))
}

/// True when `invariant` already has a finding.
fn known(findings: &[Finding], invariant: &str) -> bool {
    findings.iter().any(|f| f.invariant == invariant)
}

/// Records `report`'s violations as the finding of its invariant, unless
/// an earlier phase found it first; the excerpt is every event of
/// `history` the violations cite or that names one of their jobs.
pub(super) fn add_finding(
    findings: &mut Vec<Finding>,
    phase: &str,
    report: &Report,
    replay: String,
    (counterexample, label): (String, String),
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
        label,
        violations: report.violations.clone(),
        excerpt,
    });
}
