//! `ackgap bench`: lease/ack throughput of the reference queue, measured side
//! by side in one run with the ceiling of the same client and server and
//! with the classic `LMOVE` list pattern, plus the harness's own speed.
//!
//! Every server row runs `--rounds` rounds; a round is read back afterwards
//! (every job in the state its flow leaves it in, each settled exactly once,
//! nothing else anywhere, the structure sound) and a row counts only if
//! every one of its rounds did. A row with a broken round says INVALID and
//! the command exits 1: no figure is reported from a run where an invariant
//! broke. Figures are jobs (or calls, or steps, or events) per second:
//! median, min and max over the rounds, and the server's CPU (user + sys
//! from `INFO cpu`) per job, in µs, the median over the rounds.
//!
//! # Design notes
//!
//! `run` aggregates rounds into median/min/max `Row`s and answers a
//! `BenchReport` (or a `BenchError`), telling an `Observer` of each row as
//! it is measured, so that `src/cli/bench.rs` prints the table row by row
//! (or `--json` at the end, and `--html FILE`). The figures measured so far,
//! and what they say, are in `benches/README.md`.

#[cfg(feature = "apalis")]
mod apalis;
pub mod callgrind;
pub mod harness;
pub mod html;
pub mod queues;
mod scenarios;

use std::time::Instant;

use serde::Serialize;

use crate::check::{self, Verdict};
use crate::queue::Queue;
use crate::server::{Persistence, Server, ServerError, ServerSpec};
use scenarios::{Flow, Round};

/// The settings of a bench run (`ackgap bench`'s flags).
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Where the queue runs. A URL server must be one the bench may write
    /// to: it writes and deletes keys under `emq:{bench-*}` and `bench:{*}`.
    pub server: ServerSpec,
    /// Concurrent tasks per scenario, sharing one multiplexed connection
    /// (so their calls pipeline).
    pub workers: u64,
    /// Jobs per batch call in the batched rows (1 to
    /// [`BATCH_MAX`](crate::queue::BATCH_MAX)).
    pub batch: u64,
    /// Jobs per round of each queue scenario (the ceiling rows make five
    /// times as many calls).
    pub jobs: u64,
    /// Rounds per row: median, min and max are over these.
    pub rounds: u64,
    /// The seed of the harness rows (model steps, generated history).
    pub seed: u64,
    /// Run only the rows whose name contains this text; every row when
    /// `None`.
    pub only: Option<String>,
}

/// Why the bench could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The server could not be found or started.
    #[error(transparent)]
    Server(ServerError),
    /// A scenario could not reach or drive the server.
    #[error("{0}")]
    Unavailable(String),
    /// `--only` matches no row: nothing was measured.
    #[error(
        "--only {only:?} matches no row (rows are named as in the table: ceiling, lmove, apalis-redis, reference, harness, ...)"
    )]
    NoRowMatches {
        /// The text no row name contains.
        only: String,
    },
    /// The server did not stop cleanly after the rows were measured.
    #[error("stopping the server: {0}")]
    Stop(ServerError),
    /// A request the bench cannot carry out (`--queue` with a URL server
    /// and instruction counts).
    #[error("{0}")]
    Usage(String),
    /// A queue of `--queue` could not be opened: an `exec:` adapter that
    /// did not start or answer its hello (not installed?).
    #[error("--queue {queue}: {source}")]
    Open {
        /// The queue as `--queue` named it.
        queue: String,
        /// Why.
        source: crate::adapter::OpenError,
    },
}

impl BenchError {
    fn unavailable(message: String) -> BenchError {
        BenchError::Unavailable(message)
    }
}

/// What the bench tells its caller as it goes: a table printed row by row
/// shows progress on a run that takes minutes. Every method does nothing
/// unless overridden.
pub trait Observer {
    /// The server is up: `server` describes it, `machine` the host.
    fn started(&mut self, _server: &str, _machine: &str) {}
    /// A row is measured.
    fn row(&mut self, _row: &Row) {}
    /// Every row is measured; the server is still up and stops next.
    fn finished(&mut self, _report: &BenchReport) {}
}

/// An [`Observer`] that watches nothing.
impl Observer for () {}

/// One line of the table.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// `ceiling`, `peer`, `reference` or `harness`.
    pub group: &'static str,
    /// The unit of the rates: `calls/s`, `jobs/s`, `steps/s`, `events/s`.
    pub unit: &'static str,
    /// Concurrent tasks (connections for the ceiling rows).
    pub workers: u64,
    /// Jobs per call (pipeline depth for the ceiling rows).
    pub batch: u64,
    /// Jobs (calls, steps, events) per round.
    pub per_round: u64,
    /// The rate of each round.
    pub rates: Vec<f64>,
    /// The median rate.
    pub median: f64,
    /// The lowest rate.
    pub min: f64,
    /// The highest rate.
    pub max: f64,
    /// Server CPU per job in µs (median over the rounds), when measured.
    pub server_cpu_us_per_job: Option<f64>,
    /// True when every round held its invariants.
    pub valid: bool,
    /// The problems of the rounds that did not.
    pub problems: Vec<String>,
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

impl Row {
    fn from_rounds(
        name: impl Into<String>,
        group: &'static str,
        unit: &'static str,
        workers: u64,
        batch: u64,
        rounds: &[Round],
    ) -> Row {
        let rates: Vec<f64> = rounds
            .iter()
            .map(|r| r.jobs as f64 / r.elapsed.as_secs_f64().max(1e-9))
            .collect();
        let mut sorted = rates.clone();
        sorted.sort_by(f64::total_cmp);
        let mut cpu: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.cpu_s.map(|c| c * 1e6 / r.jobs.max(1) as f64))
            .collect();
        cpu.sort_by(f64::total_cmp);
        let problems: Vec<String> = rounds
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                r.problems
                    .iter()
                    .map(move |p| format!("round {}: {p}", i + 1))
            })
            .collect();
        Row {
            name: name.into(),
            group,
            unit,
            workers,
            batch,
            per_round: rounds.first().map_or(0, |r| r.jobs),
            median: median(&sorted),
            min: sorted.first().copied().unwrap_or(0.0),
            max: sorted.last().copied().unwrap_or(0.0),
            rates,
            server_cpu_us_per_job: (cpu.len() == rounds.len() && !cpu.is_empty())
                .then(|| median(&cpu)),
            valid: problems.is_empty(),
            problems,
        }
    }
}

/// The whole report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// The server, described.
    pub server: String,
    /// The machine: cores and CPU model.
    pub machine: String,
    /// The settings of the run.
    pub workers: u64,
    /// Jobs per batch call in the batched rows.
    pub batch: u64,
    /// Jobs per round.
    pub jobs: u64,
    /// Rounds per row.
    pub rounds: u64,
    /// The seed of the harness rows.
    pub seed: u64,
    /// Every row.
    pub rows: Vec<Row>,
    /// True when every row held its invariants.
    pub valid: bool,
    /// The command that reproduces this run.
    pub reproduce: String,
}

/// The machine: `nproc` and the CPU model from `/proc/cpuinfo`.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim().to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cores} cores, {model}")
}

/// Runs the bench and answers its report; [`BenchReport::valid`] says whether
/// every row held its invariants. `observer` hears of each row as it is
/// measured, and of the report before the server stops.
pub async fn run(
    config: BenchConfig,
    observer: &mut (dyn Observer + Send),
) -> Result<BenchReport, BenchError> {
    let server = Server::start(&config.server, Persistence::None)
        .await
        .map_err(BenchError::Server)?;
    observer.started(&server.describe(), &machine());
    let client = server.client();
    let mut table = Table {
        config: &config,
        client: &client,
        observer,
        rows: Vec::new(),
    };
    // An error drops the server, which kills its child.
    table.measure().await?;
    let Table { rows, observer, .. } = table;
    if rows.is_empty() {
        let _ = server.stop().await;
        return Err(BenchError::NoRowMatches {
            only: config.only.clone().unwrap_or_default(),
        });
    }
    let report = BenchReport {
        server: server.describe(),
        machine: machine(),
        workers: config.workers,
        batch: config.batch,
        jobs: config.jobs,
        rounds: config.rounds,
        seed: config.seed,
        valid: rows.iter().all(|r| r.valid),
        rows,
        reproduce: reproduce(&config),
    };
    observer.finished(&report);
    server.stop().await.map_err(BenchError::Stop)?;
    Ok(report)
}

/// The command that runs `config` again.
fn reproduce(config: &BenchConfig) -> String {
    format!(
        "ackgap bench --server {} --workers {} --batch {} --jobs {} --rounds {} --seed {}{}",
        config.server.redacted(),
        config.workers,
        config.batch,
        config.jobs,
        config.rounds,
        config.seed,
        config
            .only
            .as_deref()
            .map_or(String::new(), |o| format!(" --only '{o}'"))
    )
}

/// Runs `f` for rounds `0 .. n`, one after the other.
async fn rounds<F, Fut>(n: u64, mut f: F) -> Result<Vec<Round>, BenchError>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<Round, BenchError>>,
{
    let mut rs = Vec::with_capacity(n as usize);
    for round in 0..n {
        rs.push(f(round).await?);
    }
    Ok(rs)
}

/// The rows measured so far, in the table's order, and whom to tell.
struct Table<'a> {
    config: &'a BenchConfig,
    client: &'a redis::Client,
    observer: &'a mut (dyn Observer + Send),
    rows: Vec<Row>,
}

impl Table<'_> {
    /// Every row `--only` selects, in the table's order.
    async fn measure(&mut self) -> Result<(), BenchError> {
        self.ceiling().await?;
        self.lmove().await?;
        // apalis-redis, a real peer, only under `--features apalis`. It runs
        // on the same server, whose whole database it flushes between
        // rounds: so never on a `--server URL`.
        #[cfg(feature = "apalis")]
        if !matches!(self.config.server, ServerSpec::Url(_)) {
            self.apalis().await?;
        }
        self.reference().await?;
        self.harness_model();
        self.harness_history();
        self.harness_explorer().await
    }

    fn wanted(&self, name: &str) -> bool {
        self.config.only.as_deref().is_none_or(|o| name.contains(o))
    }

    fn push(&mut self, row: Row) {
        self.observer.row(&row);
        self.rows.push(row);
    }

    /// The ceiling: 8 connections, then the same pipelined 16 deep.
    async fn ceiling(&mut self) -> Result<(), BenchError> {
        let client = self.client;
        let calls = self.config.jobs.saturating_mul(5);
        for (depth, name) in [
            (1usize, "ceiling: EVALSHA INCR"),
            (16, "ceiling: EVALSHA INCR, pipelined"),
        ] {
            if !self.wanted(name) {
                continue;
            }
            let rs = rounds(self.config.rounds, move |round| {
                scenarios::ceiling(client, calls, 8, depth, round)
            })
            .await?;
            self.push(Row::from_rounds(
                name,
                "ceiling",
                "calls/s",
                8,
                depth as u64,
                &rs,
            ));
        }
        Ok(())
    }

    /// The classic list pattern.
    async fn lmove(&mut self) -> Result<(), BenchError> {
        let name = "lmove: drain (LMOVE + LREM)";
        if !self.wanted(name) {
            return Ok(());
        }
        let (client, jobs, workers) = (self.client, self.config.jobs, self.config.workers);
        let rs = rounds(self.config.rounds, move |round| {
            scenarios::lmove(client, jobs, workers as usize, round)
        })
        .await?;
        self.push(Row::from_rounds(name, "peer", "jobs/s", workers, 1, &rs));
        Ok(())
    }

    /// apalis-redis: a bulk enqueue, then a drain.
    #[cfg(feature = "apalis")]
    async fn apalis(&mut self) -> Result<(), BenchError> {
        let (client, jobs, batch) = (self.client, self.config.jobs, self.config.batch);
        let b = batch as usize;
        let name = "apalis-redis: enqueue, push_bulk";
        if self.wanted(name) {
            let rs = rounds(self.config.rounds, move |round| {
                apalis::enqueue(client, jobs, b, round)
            })
            .await?;
            self.push(Row::from_rounds(name, "peer", "jobs/s", 1, batch, &rs));
        }
        // apalis-redis 1.0's fetch promotes every due scheduled task with one
        // `unpack` (lua/fetch_next.lua), and push_bulk schedules every task:
        // above about 8,000 due tasks the fetch fails ("too many results to
        // unpack") and the worker stops. So its backlog is capped.
        let backlog = jobs.min(apalis::BACKLOG_MAX);
        let workers = self.config.workers;
        let name = format!("apalis-redis: drain (backlog {backlog}, concurrency {workers})");
        if self.wanted(&name) {
            let rs = rounds(self.config.rounds, move |round| {
                apalis::drain(client, backlog, b, workers as usize, round)
            })
            .await?;
            self.push(Row::from_rounds(
                name, "peer", "jobs/s", workers, batch, &rs,
            ));
        }
        // Its fetch scans the backlog: the reference's one-call drain at the
        // same backlog, when the other rows' is larger, to compare with.
        let name = format!("reference: drain (complete + lease next, one call), backlog {backlog}");
        if backlog < jobs && self.wanted(&name) {
            let rs = rounds(self.config.rounds, move |round| async move {
                let queue = Queue::connect_with(
                    client,
                    &format!("bench-drain-next-backlog-r{round}"),
                    queue_config(),
                )
                .await
                .map_err(|e| BenchError::unavailable(e.to_string()))?;
                scenarios::reference(&queue, Flow::DrainNext, backlog, workers as usize, 1).await
            })
            .await?;
            self.push(Row::from_rounds(
                name,
                "reference",
                "jobs/s",
                workers,
                1,
                &rs,
            ));
        }
        Ok(())
    }

    /// The reference queue, unbatched and batched.
    async fn reference(&mut self) -> Result<(), BenchError> {
        let batch = self.config.batch;
        for (flow, label) in [
            (Flow::Enqueue, "enqueue"),
            (Flow::Drain, "drain (lease + complete)"),
            (Flow::DrainNext, "drain (complete + lease next, one call)"),
            (Flow::Lifecycle, "lifecycle (enqueue + lease + complete)"),
        ] {
            let sizes = if batch == 1 || flow == Flow::DrainNext {
                vec![1]
            } else {
                vec![1, batch]
            };
            for b in sizes {
                let name = if b == 1 {
                    format!("reference: {label}")
                } else {
                    format!("reference: {label}, batched")
                };
                if self.wanted(&name) {
                    self.reference_row(name, flow, b).await?;
                }
            }
        }
        Ok(())
    }

    /// One row of the reference queue: `flow` with `batch` jobs per call,
    /// each round on a queue of its own.
    async fn reference_row(&mut self, name: String, flow: Flow, b: u64) -> Result<(), BenchError> {
        let (client, jobs, workers) = (self.client, self.config.jobs, self.config.workers);
        let rs = rounds(self.config.rounds, move |round| async move {
            let name = format!("bench-{}-b{b}-r{round}", flow_slug(flow));
            let queue = Queue::connect_with(client, &name, queue_config())
                .await
                .map_err(|e| BenchError::unavailable(e.to_string()))?;
            scenarios::reference(&queue, flow, jobs, workers as usize, b as usize).await
        })
        .await?;
        self.push(Row::from_rounds(
            name,
            "reference",
            "jobs/s",
            workers,
            b,
            &rs,
        ));
        Ok(())
    }

    /// The harness's own speed: the pure model's steps.
    fn harness_model(&mut self) {
        let name = "harness: model steps";
        if !self.wanted(name) {
            return;
        }
        let steps = 200_000;
        let rs: Vec<Round> = (0..self.config.rounds)
            .map(|round| {
                let started = Instant::now();
                let (model, _) = harness::model_steps(self.config.seed.wrapping_add(round), steps);
                let elapsed = started.elapsed();
                Round {
                    jobs: steps,
                    elapsed,
                    cpu_s: None,
                    problems: model.check_structure().err().into_iter().collect(),
                }
            })
            .collect();
        self.push(Row::from_rounds(name, "harness", "steps/s", 1, 1, &rs));
    }

    /// The history checkers' speed on a generated history.
    fn harness_history(&mut self) {
        let name = "harness: history events checked";
        if !self.wanted(name) {
            return;
        }
        let history = harness::generated_history(self.config.seed, (self.config.jobs / 2).max(1));
        let rs: Vec<Round> = (0..self.config.rounds)
            .map(|_| {
                let started = Instant::now();
                let reports = check::check_all(&history);
                let elapsed = started.elapsed();
                let verdict = check::overall(&reports);
                Round {
                    jobs: history.len() as u64,
                    elapsed,
                    cpu_s: None,
                    problems: if verdict == Verdict::Valid {
                        Vec::new()
                    } else {
                        vec![format!("the generated history is {verdict}")]
                    },
                }
            })
            .collect();
        self.push(Row::from_rounds(name, "harness", "events/s", 1, 1, &rs));
    }

    /// The explorer's speed: what `ackgap explore --seeds 40 --steps 100
    /// --jobs N` does (the walks of 40 seeds, N at a time, each job on a
    /// queue and connection of its own, reported in seed order), for one
    /// job and for two.
    async fn harness_explorer(&mut self) -> Result<(), BenchError> {
        for jobs in [1usize, 2] {
            let name = format!("harness: explorer steps, --jobs {jobs} (on the server)");
            if !self.wanted(&name) {
                continue;
            }
            let (client, seed) = (self.client, self.config.seed);
            let rs = rounds(self.config.rounds, move |round| async move {
                let mut subjects = Vec::new();
                let mut queues = Vec::new();
                for job in 0..jobs {
                    let name = format!("bench-explore-r{round}-j{job}");
                    let queue = Queue::connect_with(client, &name, queue_config())
                        .await
                        .map_err(|e| BenchError::unavailable(e.to_string()))?;
                    subjects.push(std::sync::Arc::new(crate::explore::Subject::reference(
                        &queue,
                    )));
                    queues.push(queue);
                }
                let first = seed.wrapping_add(round * 40);
                let seeds = crate::explore::Seeds::range(first, 40)
                    .ok_or_else(|| BenchError::unavailable("seeds past u64::MAX".into()))?;
                let started = Instant::now();
                let reports = crate::explore::walk_seeds(
                    subjects,
                    seeds,
                    100,
                    &mut crate::explore::PrintFailures,
                )
                .await
                .map_err(|e| BenchError::unavailable(format!("explore: {e}")))?;
                let elapsed = started.elapsed();
                for queue in &queues {
                    let _ = queue.clear().await;
                }
                Ok(Round {
                    jobs: reports.iter().map(|r| r.steps as u64).sum(),
                    elapsed,
                    cpu_s: None,
                    problems: reports
                        .iter()
                        .filter(|r| r.verdict != Verdict::Valid)
                        .map(|r| format!("walk of seed {} is {}", r.seed, r.verdict))
                        .collect(),
                })
            })
            .await?;
            self.push(Row::from_rounds(
                name,
                "harness",
                "steps/s",
                jobs as u64,
                1,
                &rs,
            ));
        }
        Ok(())
    }
}

/// The reference queue's client as the bench runs it: the reference
/// scripts, with the bench's generous timeouts.
fn queue_config() -> crate::queue::client::QueueConfig {
    crate::queue::client::QueueConfig {
        response_timeout: scenarios::RESPONSE_TIMEOUT,
        connect_timeout: std::time::Duration::from_secs(10),
        ..Default::default()
    }
}

fn flow_slug(flow: Flow) -> &'static str {
    match flow {
        Flow::Enqueue => "enqueue",
        Flow::Drain => "drain",
        Flow::DrainNext => "drain-next",
        Flow::Lifecycle => "lifecycle",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[1.0, 2.0, 3.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 10.0]), 3.0);
    }
}
