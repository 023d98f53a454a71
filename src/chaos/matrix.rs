//! The matrix behind `ackgap chaos --matrix` (`--grid` is another name): persistence × topology
//! × durability × fault, N seeds per cell, each run on a fresh server, so
//! that one table shows where acknowledged jobs are lost.
//!
//! The cells are fixed ([`cells`]): a single server killed under no
//! persistence and under AOF `always` and its power lost under `everysec`
//! and `always` (the shim: only what was fsynced survives); a primary with
//! replicas whose every node loses power at once under `everysec`, without a dial, with
//! `wait:1` and with `waitaof:1:1`; and a primary with replicas failed
//! over (with and without held replication links first) under both
//! persistence modes, without a durability dial and with `wait:1`, and a
//! cluster of three primaries with a replica each (`cluster:3x1`) whose
//! queue's primary is killed (the cluster's own failover) or taken over
//! (`CLUSTER FAILOVER TAKEOVER`, given back with `FORCE`); and, once each,
//! the faults that restart nothing: a process whose clock jumps, and the
//! cluster's queue slot moved to another primary (`reshard`,
//! `reshard-classic`). Each
//! cell sums its runs' lost acknowledged jobs and names the invariants
//! any run broke; [`promise`] says what Valkey's documentation promises
//! for the row, to read beside what the cell found.
//!
//! # Design notes
//!
//! A matrix run gives a table, JSON and `grid.html`: the verdict, a legend,
//! a link to each run's report (`matrix::run` writes each run's timeline
//! beside its history) and its reproduce line. `matrix::run` takes the cells
//! to run (`--matrix-topology`), which runs to make by their ordinal
//! (`--shard K/N`; a cell with no run taken is left out, and `merge` puts
//! the shards' cells back in order) and the caller's reproduce line of a
//! run, and tells the caller of each run with its place among them (the
//! command's count and ETA).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::runner::{self, ChaosConfig, ChaosError};
use super::schedule::{FaultKind, FaultSet};
use crate::check::Verdict;
use crate::queue::Durability;
use crate::server::{Persistence, ProcessOptions, Server, ServerError, ServerSpec};

/// One cell of the grid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// The persistence mode of every node.
    #[serde(serialize_with = "display")]
    pub persistence: Persistence,
    /// The topology (`process`, `replicated:2`).
    #[serde(serialize_with = "display")]
    pub topology: ServerSpec,
    /// The client's durability dial.
    #[serde(serialize_with = "display")]
    pub durability: Durability,
    /// The fault the cell's runs inject.
    pub fault: FaultKind,
}

fn display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// The grid's cells, in the table's order.
pub fn cells() -> Vec<Cell> {
    let process = ServerSpec::Process(ProcessOptions::default());
    let replicated = ServerSpec::Replicated {
        replicas: 2,
        options: ProcessOptions::default(),
    };
    let cluster = ServerSpec::Cluster {
        primaries: 3,
        replicas: 1,
        options: ProcessOptions::default(),
    };
    let wait: Durability = Durability::Wait {
        replicas: 1,
        timeout_ms: crate::queue::durability::DEFAULT_WAIT_TIMEOUT_MS,
    };
    let waitaof: Durability = Durability::WaitAof {
        local: 1,
        replicas: 1,
        timeout_ms: crate::queue::durability::DEFAULT_WAIT_TIMEOUT_MS,
    };
    let mut out = Vec::new();
    for persistence in [Persistence::None, Persistence::AofAlways] {
        out.push(Cell {
            persistence,
            topology: process.clone(),
            durability: Durability::None,
            fault: FaultKind::ServerKill,
        });
        // Power loss beside the kill: only what was fsynced survives
        // (under `none` the two are the same, so everysec takes its place).
        out.push(Cell {
            persistence: match persistence {
                Persistence::None => Persistence::AofEverysec,
                other => other,
            },
            topology: process.clone(),
            durability: Durability::None,
            fault: FaultKind::PowerLoss,
        });
        for durability in [Durability::None, wait] {
            for fault in [FaultKind::Failover, FaultKind::LagFailover] {
                out.push(Cell {
                    persistence,
                    topology: replicated.clone(),
                    durability,
                    fault,
                });
            }
        }
        // Every node of the set loses power at once, under everysec: no
        // dial, WAIT (the replicas hold the write in memory) and WAITAOF
        // (the primary and a replica fsynced it).
        if persistence == Persistence::AofAlways {
            for durability in [Durability::None, wait, waitaof] {
                out.push(Cell {
                    persistence: Persistence::AofEverysec,
                    topology: replicated.clone(),
                    durability,
                    fault: FaultKind::PowerLoss,
                });
            }
        }
        for durability in [Durability::None, wait] {
            for fault in [FaultKind::Failover, FaultKind::Takeover] {
                out.push(Cell {
                    persistence,
                    topology: cluster.clone(),
                    durability,
                    fault,
                });
            }
        }
    }
    // Faults that restart nothing, once each (persistence plays no part):
    // the server's clock jumps (the leases it reads expire at once, or
    // last longer), and the queue's slot moves to another primary, the
    // atomic way and the classic one.
    out.push(Cell {
        persistence: Persistence::None,
        topology: process,
        durability: Durability::None,
        fault: FaultKind::ClockJump,
    });
    for fault in [FaultKind::Reshard, FaultKind::ReshardClassic] {
        out.push(Cell {
            persistence: Persistence::None,
            topology: cluster.clone(),
            durability: Durability::None,
            fault,
        });
    }
    out
}

/// What Valkey's documentation promises for `cell`'s row.
pub fn promise(cell: &Cell) -> &'static str {
    match cell.fault {
        FaultKind::ClockJump => {
            return "a clock jump restarts nothing: every acknowledged write stays (leases read on the server's clock end early or late)"
        }
        FaultKind::Reshard => {
            return "CLUSTER MIGRATESLOTS: the slot's keys and the writes meanwhile move with it"
        }
        FaultKind::ReshardClassic => {
            return "MIGRATE moves each key atomically; SETSLOT NODE hands the slot over: nothing is dropped"
        }
        _ => {}
    }
    match (&cell.topology, cell.persistence, cell.durability) {
        (ServerSpec::Process(_) | ServerSpec::Container, Persistence::AofAlways, _)
            if cell.fault == FaultKind::PowerLoss =>
        {
            "appendfsync always: a write is fsynced before its reply, so power loss keeps it"
        }
        (ServerSpec::Process(_) | ServerSpec::Container, Persistence::AofEverysec, _)
            if cell.fault == FaultKind::PowerLoss =>
        {
            "appendfsync everysec: power loss may lose up to a second of writes"
        }
        (_, _, Durability::WaitAof { local: 1.., .. }) if cell.fault == FaultKind::PowerLoss => {
            "WAITAOF: the write was fsynced to the primary's AOF (and the replicas'), so power loss of every node keeps it"
        }
        (_, _, Durability::None) if cell.fault == FaultKind::PowerLoss => {
            "asynchronous replication, appendfsync everysec: power loss of every node can lose the last second or so of writes"
        }
        (_, Persistence::AofAlways, _) if cell.fault == FaultKind::PowerLoss => {
            "appendfsync always: the primary fsyncs a write before its reply, so power loss of every node keeps it"
        }
        (_, _, _) if cell.fault == FaultKind::PowerLoss => {
            "WAIT: replicas received the write, none promised to fsync it: power loss of every node can lose it"
        }
        (ServerSpec::Process(_) | ServerSpec::Container, Persistence::None, _) => {
            "no persistence: a restarted server is empty"
        }
        (ServerSpec::Process(_) | ServerSpec::Container, Persistence::AofAlways, _) => {
            "appendfsync always: a write is fsynced before its reply"
        }
        (ServerSpec::Process(_) | ServerSpec::Container, _, _) => "appendfsync everysec: up to a second may be lost",
        (ServerSpec::Cluster { .. }, _, Durability::None) if cell.fault == FaultKind::Takeover => {
            "CLUSTER FAILOVER TAKEOVER/FORCE: no agreement with the primary; writes it takes before it learns are lost"
        }
        (_, _, Durability::None) => {
            "asynchronous replication: acknowledged writes can be lost on failover"
        }
        (_, _, _) => {
            "WAIT: not strong consistency; a failover to a replica that confirmed keeps the write"
        }
    }
}

/// True when Valkey's documentation promises to keep `cell`'s
/// acknowledged writes through its fault: a single server (process or
/// container) under AOF `always`, or any topology whose client waits for
/// the write's replication or fsync (`wait`, `waitaof`); for a power
/// loss, `always` or a WAITAOF with the primary's own fsync alone; for a
/// fault that restarts nothing (a clock jump, a slot migration), always.
pub fn promised(cell: &Cell) -> bool {
    // Against power loss only an fsync on the node the set restarts from
    // (the primary) promises anything: `always`, or WAITAOF with a local
    // fsync. WAIT and a replica's fsync do not (the replicas resync from
    // what the primary kept).
    if cell.fault == FaultKind::PowerLoss {
        return cell.persistence == Persistence::AofAlways
            || matches!(cell.durability, Durability::WaitAof { local: 1.., .. });
    }
    // Nothing restarts: nothing acknowledged may go.
    if matches!(
        cell.fault,
        FaultKind::ClockJump | FaultKind::Reshard | FaultKind::ReshardClassic
    ) {
        return true;
    }
    matches!(
        (&cell.topology, cell.persistence),
        (
            ServerSpec::Process(_) | ServerSpec::Container,
            Persistence::AofAlways
        )
    ) || cell.durability.waits()
}

/// What one cell found over its seeds.
#[derive(Clone, Debug, Serialize)]
pub struct CellResult {
    /// The cell.
    pub cell: Cell,
    /// What Valkey documents for it.
    pub promise: &'static str,
    /// Runs made (one per seed).
    pub runs: usize,
    /// How often the cell's fault fired, over its runs.
    pub fired: u64,
    /// Acknowledged jobs lost, over its runs.
    pub lost: usize,
    /// Invariants some run broke (invalid), by name.
    pub broken: Vec<String>,
    /// The worst verdict of its runs.
    pub verdict: Verdict,
    /// Whether the consumer's own writes (its effects, through
    /// `Queue::connection()`) were confirmed by the cell's dial: the
    /// shipped consumer follows each with the same WAIT or WAITAOF as the
    /// queue's writes. False without a dial: an effect can then be lost in
    /// a failover that keeps the job's acknowledgement.
    pub effects_confirmed: bool,
    /// Effect writes fewer replicas confirmed than the dial asked, over
    /// its runs: each is `info` in its history, and the worker did not
    /// acknowledge the job on it.
    pub effects_short: u64,
    /// Each run's history.
    pub histories: Vec<PathBuf>,
    /// Every run's invariant reports, run after run (not serialized:
    /// `broken` and `verdict` say it in JSON; `ackgap run --queue`'s
    /// durability column reads them).
    #[serde(skip)]
    pub invariant_reports: Vec<crate::check::Report>,
    /// Each run's HTML report (its timeline), beside its history.
    pub reports: Vec<PathBuf>,
    /// The command that runs each run again alone, as the caller writes
    /// it (the `replay` of [`run`]).
    pub replays: Vec<String>,
    /// Each run's verdict.
    pub verdicts: Vec<Verdict>,
}

/// The whole grid.
#[derive(Clone, Debug, Serialize)]
pub struct Grid {
    /// The configuration every cell ran (its fault, durability and seed
    /// replaced).
    pub config: ChaosConfig,
    /// Seeds per cell: `config.seed` .. `config.seed + seeds - 1`.
    pub seeds: u64,
    /// Each cell's result, in [`cells`] order.
    pub cells: Vec<CellResult>,
}

/// Why the grid could not be run to the end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GridError {
    /// A server could not be found or started.
    #[error("{cell}: {source}")]
    Server {
        /// The cell, in words.
        cell: String,
        /// Why.
        source: ServerError,
    },
    /// A run stopped.
    #[error("{cell}, seed {seed}: {source}")]
    Run {
        /// The cell, in words.
        cell: String,
        /// The seed.
        seed: u64,
        /// Why.
        source: ChaosError,
    },
}

impl Cell {
    /// `replicated:2 always wait:1 lag-failover`.
    pub fn label(&self) -> String {
        format!(
            "{} {} {} {}",
            self.topology, self.persistence, self.durability, self.fault
        )
    }
}

/// A queue name `BASE-K` (the smallest such K) whose hash tag's slot lies
/// in the share of primary `primary` of a cluster of `primaries` built by
/// `--server cluster` (the 16384 slots split evenly in order, the last
/// primary taking the remainder).
pub(crate) fn queue_on_primary(base: &str, primary: usize, primaries: usize) -> String {
    let per = 16384 / primaries.max(1);
    let from = primary * per;
    let to = if primary + 1 >= primaries {
        16383
    } else {
        from + per - 1
    };
    name_in_slots(base, &[(from as u16, to as u16)])
}

/// A queue name `BASE-K` (the smallest such K) whose hash tag's slot lies
/// in one of `ranges` (inclusive), e.g. a cluster primary's slots as
/// `CLUSTER SLOTS` lists them. `ranges` must not be empty: with 16384
/// slots and names drawn from CRC16, some K lands in any range; the
/// search gives up past a million suffixes and answers `BASE-0`.
pub fn name_in_slots(base: &str, ranges: &[(u16, u16)]) -> String {
    (0..1_000_000u32)
        .map(|k| format!("{base}-{k}"))
        .find(|name| {
            let slot = crate::queue::keys::slot_of(name);
            ranges.iter().any(|&(a, b)| a <= slot && slot <= b)
        })
        .unwrap_or_else(|| format!("{base}-0"))
}

/// Runs `cells` (some of [`cells`], in its order) for `seeds` seeds from
/// `config.seed`, each run on a fresh server, the histories and each run's
/// HTML report in `dir`; `started` hears of each run before it starts,
/// with its place among the runs made (from 1) and their number. Only the
/// runs whose ordinal (from 0, cell by cell, seed by seed) `take` accepts
/// are made (a shard of the grid); a cell none of whose runs is taken is
/// left out. `replay` writes the command that runs one run again alone
/// (the caller's command line: its configuration and its cell's server).
pub async fn run(
    dir: &Path,
    config: ChaosConfig,
    seeds: u64,
    cells: &[Cell],
    take: impl Fn(u64) -> bool,
    replay: impl Fn(&ChaosConfig, &Cell) -> String,
    mut started: impl FnMut(&Cell, u64, &str, Count),
) -> Result<Grid, GridError> {
    let mut results = Vec::new();
    let mut ordinal = 0u64;
    let total = (0..cells.len() as u64 * seeds).filter(|&o| take(o)).count() as u64;
    let mut made = 0u64;
    for cell in cells.iter().cloned() {
        let mut result = CellResult {
            promise: promise(&cell),
            cell: cell.clone(),
            runs: 0,
            fired: 0,
            lost: 0,
            broken: Vec::new(),
            verdict: Verdict::Valid,
            effects_confirmed: config
                .consumer
                .consumer_with(cell.durability)
                .durability()
                .waits(),
            effects_short: 0,
            histories: Vec::new(),
            reports: Vec::new(),
            invariant_reports: Vec::new(),
            replays: Vec::new(),
            verdicts: Vec::new(),
        };
        for seed in config.seed..config.seed + seeds {
            ordinal += 1;
            if !take(ordinal - 1) {
                continue;
            }
            // A fault that needs a library loaded into the server (the
            // power-loss shim) gets it.
            let instruments = FaultSet([cell.fault].into_iter().collect()).instruments();
            let mut server =
                Server::start_instrumented(&cell.topology, cell.persistence, instruments)
                    .await
                    .map_err(|source| GridError::Server {
                        cell: cell.label(),
                        source,
                    })?;
            made += 1;
            started(&cell, seed, &server.describe(), Count { made, total });
            // On a cluster the seeds' queues land on the primaries in turn
            // (seed i on primary i mod P), so a cell's faults hit more than
            // one shard.
            let queue_name = match &cell.topology {
                ServerSpec::Cluster { primaries, .. } => queue_on_primary(
                    &config.queue_name,
                    ((seed - config.seed) % *primaries as u64) as usize,
                    *primaries,
                ),
                _ => config.queue_name.clone(),
            };
            let cfg = ChaosConfig {
                seed,
                faults: FaultSet([cell.fault].into_iter().collect()),
                durability: cell.durability,
                queue_name,
                ..config.clone()
            };
            let history = dir.join(format!(
                "grid-{}-{}-{}-{}-seed{seed}.jsonl",
                cell.topology.to_string().replace(':', ""),
                cell.persistence,
                cell.durability.to_string().replace(':', ""),
                cell.fault
            ));
            let line = replay(&cfg, &cell);
            let report = runner::run(&mut server, cfg, Some(history.clone()), None).await;
            // A server that does not stop cleanly is killed on drop; the
            // run's report stands.
            let _ = server.stop().await;
            let report = report.map_err(|source| GridError::Run {
                cell: cell.label(),
                seed,
                source,
            })?;
            result.runs += 1;
            result.fired += report.fired.get(&cell.fault).copied().unwrap_or(0);
            result.lost += report.lost.len();
            for r in &report.invariants {
                if r.verdict == Verdict::Invalid && !result.broken.iter().any(|b| b == r.invariant)
                {
                    result.broken.push(r.invariant.to_string());
                }
            }
            result.verdict = result.verdict.max(report.verdict);
            result
                .invariant_reports
                .extend(report.invariants.iter().cloned());
            result.effects_short += short_effects(&history);
            result
                .reports
                .push(write_report(&history, &cell, seed, &report));
            result.replays.push(line);
            result.verdicts.push(report.verdict);
            result.histories.push(history);
        }
        if result.runs > 0 {
            // By name, not by the first run to break it: a shard's order is
            // the whole grid's.
            result.broken.sort();
            results.push(result);
        }
    }
    Ok(Grid {
        config,
        seeds,
        cells: results,
    })
}

/// Which run of the grid's is starting: the `made`-th (from 1) of `total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    /// This run's place among the runs made, from 1.
    pub made: u64,
    /// The runs the grid (or its shard) makes.
    pub total: u64,
}

/// Writes one run's HTML report (its timeline) beside its `history`, as
/// `ackgap chaos` writes a single run's; answers its path. A history that
/// cannot be read or a report that cannot be written leaves a report
/// saying so.
fn write_report(history: &Path, cell: &Cell, seed: u64, report: &runner::ChaosReport) -> PathBuf {
    let path = history.with_extension("html");
    let title = format!(
        "ackgap chaos --matrix: {}, seed {seed}: {}",
        cell.label(),
        report.verdict
    );
    let html = match crate::history::read_file(history) {
        Ok(events) => crate::report::render(&title, &events, &report.invariants),
        Err(e) => format!(
            "<!doctype html><meta charset=\"utf-8\"><title>{t}</title><p>{t}: the history could not be read: {e}</p>\n",
            t = escape(&title),
            e = escape(&e.to_string())
        ),
    };
    // A report that cannot be written is a missing link, not a failed grid.
    let _ = std::fs::write(&path, html);
    path
}

/// Effect writes in the history at `path` that the dial's WAIT found
/// short (`info`, "unconfirmed"); 0 when it cannot be read.
fn short_effects(path: &Path) -> u64 {
    crate::history::read_file(path).map_or(0, |events| {
        events
            .iter()
            .filter(|e| {
                e.f == crate::history::F::Effect
                    && e.kind == crate::history::EventKind::Info
                    && e.error
                        .as_deref()
                        .is_some_and(|m| m.contains("unconfirmed"))
            })
            .count() as u64
    })
}

impl CellResult {
    /// Whether the consumer's writes were confirmed, in words:
    /// `unconfirmed`, `confirmed`, or `confirmed, N short`.
    pub fn effects(&self) -> String {
        match (self.effects_confirmed, self.effects_short) {
            (false, _) => "unconfirmed".to_string(),
            (true, 0) => "confirmed".to_string(),
            (true, n) => format!("confirmed, {n} short"),
        }
    }
}

impl Grid {
    /// The grid as a text table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<13} {:<11} {:<11} {:<15} {:>4} {:>5} {:>5}  {:<20} {:<28} {}\n",
            "topology",
            "persistence",
            "durability",
            "fault",
            "runs",
            "fired",
            "lost",
            "consumer writes",
            "broken invariants",
            "Valkey documents"
        );
        for c in &self.cells {
            let broken = if c.broken.is_empty() {
                "-".to_string()
            } else {
                c.broken.join(",")
            };
            let _ = writeln!(
                out,
                "{:<13} {:<11} {:<11} {:<15} {:>4} {:>5} {:>5}  {:<20} {:<28} {}",
                c.cell.topology.to_string(),
                c.cell.persistence.to_string(),
                c.cell.durability.to_string(),
                c.cell.fault.to_string(),
                c.runs,
                c.fired,
                c.lost,
                c.effects(),
                broken,
                c.promise
            );
        }
        out
    }

    /// Each run, cell by cell: its verdict, the command that runs it
    /// again alone, its history and its report.
    pub fn runs_text(&self) -> String {
        let mut out = String::new();
        for c in &self.cells {
            for (i, history) in c.histories.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{}, run {}: {}\n  rerun: {}\n  history: {}\n  report: {}",
                    c.cell.label(),
                    i + 1,
                    c.verdicts
                        .get(i)
                        .map_or("?".to_string(), Verdict::to_string),
                    c.replays.get(i).map_or("?", String::as_str),
                    history.display(),
                    c.reports
                        .get(i)
                        .map_or("?".to_string(), |p| p.display().to_string())
                );
            }
        }
        out
    }

    /// The grid as one self-contained HTML page: the verdict and why, a
    /// legend of the colours, then a cell per row of [`cells`], coloured
    /// by what it lost (red: acknowledged jobs lost where the row's
    /// documentation promises to keep them; pink: lost where it does not;
    /// orange: another invariant broken; green: nothing), with a link to
    /// each run's report and history and the command that runs it again.
    pub fn html(&self) -> String {
        let mut rows = String::new();
        for c in &self.cells {
            let colour = if c.lost > 0 && promised(&c.cell) {
                "#f87171"
            } else if c.lost > 0 {
                "#fca5a5"
            } else if !c.broken.is_empty() {
                "#fdba74"
            } else {
                "#bbf7d0"
            };
            let mut runs = String::new();
            for (i, history) in c.histories.iter().enumerate() {
                let name = |p: &Path| {
                    p.file_name()
                        .map_or(String::new(), |n| n.to_string_lossy().into_owned())
                };
                let report = c.reports.get(i).map(|p| name(p)).unwrap_or_default();
                let _ = write!(
                    runs,
                    "<div>{verdict}: <a href=\"{report}\">report</a> · <a href=\"{history}\">history</a><br><code>{replay}</code></div>",
                    verdict = c.verdicts.get(i).map_or("?".to_string(), Verdict::to_string),
                    report = escape(&report),
                    history = escape(&name(history)),
                    replay = escape(c.replays.get(i).map_or("", String::as_str)),
                );
            }
            let _ = writeln!(
                rows,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"cell\" style=\"background:{colour}\">{} lost{}</td><td>{}</td><td>{}</td><td>{}</td><td>{runs}</td></tr>",
                escape(&c.cell.topology.to_string()),
                c.cell.persistence,
                c.cell.durability,
                c.cell.fault,
                c.lost,
                if c.broken.is_empty() {
                    String::new()
                } else {
                    format!("; broken: {}", escape(&c.broken.join(", ")))
                },
                c.runs,
                c.effects(),
                escape(c.promise)
            );
        }
        let verdict = self.verdict();
        let why = match verdict {
            Verdict::Invalid => "a cell whose row's documentation promises to keep acknowledged writes (a single server under AOF always, or the wait:1 dial) lost one",
            _ => "no cell whose row's documentation promises to keep acknowledged writes lost one (losses where the documentation allows them are findings, not failures)",
        };
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>ackgap chaos grid, seed {}: {verdict}</title>\
             <style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top}}\
             .key{{display:inline-block;width:1em;height:1em;border:1px solid #999;vertical-align:middle;margin:0 4px 0 12px}}code{{font-size:85%}}</style>\
             </head><body><h1>Acknowledged jobs lost by topology, persistence, durability and fault</h1>\
             <p id=\"verdict\"><strong>verdict: {verdict}</strong>: {why}.</p>\
             <p>Seeds {} to {} per cell, {} ms of faults each.</p>\
             <p id=\"legend\">Found:<span class=\"key\" style=\"background:#f87171\"></span>acknowledged jobs lost where the documentation promises to keep them\
             <span class=\"key\" style=\"background:#fca5a5\"></span>acknowledged jobs lost where it does not\
             <span class=\"key\" style=\"background:#fdba74\"></span>another invariant broken\
             <span class=\"key\" style=\"background:#bbf7d0\"></span>nothing lost or broken</p>\
             <table><tr><th>topology</th><th>persistence</th><th>durability</th><th>fault</th><th>found</th><th>runs</th><th>consumer writes</th><th>Valkey documents</th><th>each run: report, history, reproduce</th></tr>\n{rows}</table></body></html>\n",
            self.config.seed,
            self.config.seed,
            self.config.seed + self.seeds - 1,
            self.config.duration_ms
        )
    }

    /// The grid's verdict: invalid when a cell lost an acknowledged job
    /// that its row's documentation promises to keep (a single server
    /// under AOF `always` killed, or `wait:1` failed over), else valid.
    pub fn verdict(&self) -> Verdict {
        let broken_promise = self.cells.iter().any(|c| promised(&c.cell) && c.lost > 0);
        if broken_promise {
            Verdict::Invalid
        } else {
            Verdict::Valid
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_has_a_promise_and_a_distinct_label() {
        let cells = cells();
        assert_eq!(cells.len(), 26);
        let labels: std::collections::BTreeSet<String> = cells.iter().map(Cell::label).collect();
        assert_eq!(labels.len(), cells.len());
        for c in &cells {
            assert!(!promise(c).is_empty());
        }
    }

    #[test]
    fn against_power_loss_only_the_primary_s_own_fsync_is_a_promise() {
        let power: Vec<(String, bool)> = cells()
            .iter()
            .filter(|c| c.fault == FaultKind::PowerLoss)
            .map(|c| (c.label(), promised(c)))
            .collect();
        let expected = [
            ("process everysec none power-loss", false),
            ("process always none power-loss", true),
            ("replicated:2 everysec none power-loss", false),
            ("replicated:2 everysec wait:1 power-loss", false),
            ("replicated:2 everysec waitaof:1:1 power-loss", true),
        ];
        assert_eq!(
            power,
            expected
                .iter()
                .map(|(l, p)| (l.to_string(), *p))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_container_s_power_loss_reads_as_a_single_server_s() {
        for (persistence, says, kept) in [
            (Persistence::AofEverysec, "up to a second", false),
            (Persistence::AofAlways, "fsynced before its reply", true),
        ] {
            let cell = Cell {
                persistence,
                topology: ServerSpec::Container,
                durability: Durability::None,
                fault: FaultKind::PowerLoss,
            };
            assert!(promise(&cell).contains(says), "{}", promise(&cell));
            assert!(!promise(&cell).contains("every node"), "{}", promise(&cell));
            assert_eq!(promised(&cell), kept);
        }
    }

    #[test]
    fn a_cell_says_whether_the_consumer_s_writes_were_confirmed() {
        let mut result = CellResult {
            promise: promise(&cells()[0]),
            cell: cells()[0].clone(),
            runs: 1,
            fired: 1,
            lost: 0,
            broken: Vec::new(),
            verdict: Verdict::Valid,
            effects_confirmed: false,
            effects_short: 0,
            histories: Vec::new(),
            reports: Vec::new(),
            invariant_reports: Vec::new(),
            replays: Vec::new(),
            verdicts: Vec::new(),
        };
        assert_eq!(result.effects(), "unconfirmed");
        result.effects_confirmed = true;
        assert_eq!(result.effects(), "confirmed");
        result.effects_short = 3;
        assert_eq!(result.effects(), "confirmed, 3 short");
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["effects_confirmed"], true);
        assert_eq!(json["effects_short"], 3);
    }

    #[test]
    fn grid_html_has_the_verdict_a_legend_and_each_run_s_report_history_and_reproduce_line() {
        // process, always, server-kill: a cell whose row promises to keep
        // acknowledged writes.
        let cell = cells()
            .into_iter()
            .find(|c| c.label() == "process always none server-kill")
            .expect("the cell");
        let result = CellResult {
            promise: promise(&cell),
            cell,
            runs: 1,
            fired: 2,
            lost: 3,
            broken: vec!["no-loss".into()],
            verdict: Verdict::Invalid,
            effects_confirmed: false,
            effects_short: 0,
            invariant_reports: Vec::new(),
            histories: vec![PathBuf::from(
                "dir/grid-process-always-none-server-kill-seed1.jsonl",
            )],
            reports: vec![PathBuf::from(
                "dir/grid-process-always-none-server-kill-seed1.html",
            )],
            replays: vec!["ackgap chaos --seed 1 --faults server-kill --server process".into()],
            verdicts: vec![Verdict::Invalid],
        };
        let grid = Grid {
            config: ChaosConfig::new(1),
            seeds: 1,
            cells: vec![result],
        };
        let html = grid.html();
        assert!(
            html.contains(r#"<p id="verdict"><strong>verdict: invalid</strong>"#),
            "{html}"
        );
        assert!(html.contains(r#"<p id="legend">"#), "{html}");
        for colour in ["#f87171", "#fca5a5", "#fdba74", "#bbf7d0"] {
            assert!(
                html.contains(&format!("background:{colour}\"></span>")),
                "{colour}"
            );
        }
        // Links relative to grid.html, which is written beside them.
        assert!(html
            .contains(r#"<a href="grid-process-always-none-server-kill-seed1.html">report</a>"#));
        assert!(html
            .contains(r#"<a href="grid-process-always-none-server-kill-seed1.jsonl">history</a>"#));
        assert!(html
            .contains("<code>ackgap chaos --seed 1 --faults server-kill --server process</code>"));
        let text = grid.runs_text();
        assert!(text.contains("rerun: ackgap chaos --seed 1"), "{text}");
        assert!(
            text.contains("history: dir/grid-process-always-none-server-kill-seed1.jsonl"),
            "{text}"
        );
    }

    #[test]
    fn a_name_in_slots_lands_in_the_ranges_given() {
        let name = super::name_in_slots("q", &[(100, 200), (9000, 9100)]);
        let slot = crate::queue::keys::slot_of(&name);
        assert!((100..=200).contains(&slot) || (9000..=9100).contains(&slot));
    }

    #[test]
    fn queues_on_primaries_land_in_each_primary_s_share_of_the_slots() {
        for p in 0..3 {
            let name = super::queue_on_primary("ackgap-chaos", p, 3);
            let slot = crate::queue::keys::slot_of(&name) as usize;
            assert!(
                (p * 5461..(p + 1) * 5461 + if p == 2 { 1 } else { 0 }).contains(&slot),
                "{name} {slot}"
            );
        }
    }
}
