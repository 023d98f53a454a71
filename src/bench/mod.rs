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

#[cfg(feature = "apalis")]
mod apalis;
pub mod harness;
mod scenarios;

use std::time::Instant;

use serde::Serialize;

use crate::check::{self, Verdict};
use crate::queue::{Queue, BATCH_MAX};
use crate::server::{Persistence, Server, ServerSpec};
use scenarios::{Flow, Round};

/// The options of `ackgap bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Where the queue runs: `process` (an embedded valkey-server child),
    /// `container`, or a URL `redis://[user:pass@]host:port`. A URL server
    /// must be one the bench may write to: it writes and deletes keys under
    /// `emq:{bench-*}` and `bench:{*}`.
    #[arg(long, default_value = "process", env = "ACKGAP_SERVER")]
    pub server: ServerSpec,
    /// Concurrent tasks per scenario, sharing one multiplexed connection
    /// (so their calls pipeline).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// Jobs per batch call in the batched rows (1 to 1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=BATCH_MAX as u64))]
    pub batch: u64,
    /// Jobs per round of each queue scenario (the ceiling rows make five
    /// times as many calls).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub jobs: u64,
    /// Rounds per row: median, min and max are over these.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// The seed of the harness rows (model steps, generated history).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run only the rows whose name contains this text (`--only drain`,
    /// `--only ceiling`); every row when absent.
    #[arg(long)]
    pub only: Option<String>,
}

/// Why the bench could not run, with the exit code of its class.
#[derive(Debug)]
pub struct BenchError {
    /// The exit code (see `crate::cli`).
    pub code: u8,
    /// What happened.
    pub message: String,
}

impl BenchError {
    fn unavailable(message: String) -> BenchError {
        BenchError {
            code: crate::cli::EXIT_UNAVAILABLE,
            message,
        }
    }
    fn internal(message: impl std::fmt::Display) -> BenchError {
        BenchError {
            code: crate::cli::EXIT_INTERNAL,
            message: message.to_string(),
        }
    }
}

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
pub struct Report {
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

/// Runs the bench; answers the exit code: 0 when every row held its
/// invariants, 1 when one did not.
pub async fn run(args: BenchArgs) -> Result<u8, BenchError> {
    let server = Server::start(&args.server, Persistence::None)
        .await
        .map_err(|e| BenchError::unavailable(e.to_string()))?;
    let client = server.client();
    let workers = args.workers;
    let w = workers as usize;
    let batch = args.batch;
    let rounds = args.rounds;
    let jobs = args.jobs;
    if !args.json {
        println!(
            "ackgap bench: server {}\n  machine {}; {jobs} jobs per round, {rounds} rounds, --workers {workers}, --batch {batch}\n",
            server.describe(),
            machine()
        );
        print_header();
    }
    let wanted = |name: &str| args.only.as_deref().is_none_or(|o| name.contains(o));
    let mut rows = Vec::new();
    let mut emit = |row: Row, json: bool| {
        if !json {
            print_row(&row);
        }
        rows.push(row);
    };

    // The ceiling: 8 connections, then the same pipelined 16 deep.
    let calls = jobs.saturating_mul(5);
    for (depth, name) in [
        (1usize, "ceiling: EVALSHA INCR"),
        (16, "ceiling: EVALSHA INCR, pipelined"),
    ] {
        if !wanted(name) {
            continue;
        }
        let mut rs = Vec::new();
        for round in 0..rounds {
            rs.push(scenarios::ceiling(&client, calls, 8, depth, round).await?);
        }
        emit(
            Row::from_rounds(name, "ceiling", "calls/s", 8, depth as u64, &rs),
            args.json,
        );
    }

    // The classic list pattern.
    let name = "lmove: drain (LMOVE + LREM)";
    if wanted(name) {
        let mut rs = Vec::new();
        for round in 0..rounds {
            rs.push(scenarios::lmove(&client, jobs, w, round).await?);
        }
        emit(
            Row::from_rounds(name, "peer", "jobs/s", workers, 1, &rs),
            args.json,
        );
    }

    // apalis-redis, a real peer, only under `--features apalis`. It runs on
    // the same server, whose whole database it flushes between rounds: so
    // never on a `--server URL`.
    #[cfg(feature = "apalis")]
    if !matches!(args.server, ServerSpec::Url(_)) {
        let b = batch as usize;
        let name = "apalis-redis: enqueue, push_bulk";
        if wanted(name) {
            let mut rs = Vec::new();
            for round in 0..rounds {
                rs.push(apalis::enqueue(&client, jobs, b, round).await?);
            }
            emit(
                Row::from_rounds(name, "peer", "jobs/s", 1, batch, &rs),
                args.json,
            );
        }
        // apalis-redis 1.0's fetch promotes every due scheduled task with one
        // `unpack` (lua/fetch_next.lua), and push_bulk schedules every task:
        // above about 8,000 due tasks the fetch fails ("too many results to
        // unpack") and the worker stops. So its backlog is capped.
        let backlog = jobs.min(apalis::BACKLOG_MAX);
        let name = format!("apalis-redis: drain (backlog {backlog})");
        if wanted(&name) {
            let mut rs = Vec::new();
            for round in 0..rounds {
                rs.push(apalis::drain(&client, backlog, b, round).await?);
            }
            emit(
                Row::from_rounds(name, "peer", "jobs/s", 1, batch, &rs),
                args.json,
            );
        }
    }

    // The reference queue, unbatched and batched.
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
            let row_name = if b == 1 {
                format!("reference: {label}")
            } else {
                format!("reference: {label}, batched")
            };
            if !wanted(&row_name) {
                continue;
            }
            let mut rs = Vec::new();
            for round in 0..rounds {
                let name = format!("bench-{}-b{b}-r{round}", flow_slug(flow));
                let queue = Queue::connect_with(&client, &name, queue_config())
                    .await
                    .map_err(|e| BenchError::unavailable(e.to_string()))?;
                rs.push(scenarios::reference(&queue, flow, jobs, w, b as usize).await?);
            }
            emit(
                Row::from_rounds(row_name, "reference", "jobs/s", workers, b, &rs),
                args.json,
            );
        }
    }

    // The harness's own speed.
    let steps = 200_000;
    let name = "harness: model steps";
    if wanted(name) {
        let mut rs = Vec::new();
        for round in 0..rounds {
            let started = Instant::now();
            let (model, _) = harness::model_steps(args.seed.wrapping_add(round), steps);
            let elapsed = started.elapsed();
            rs.push(Round {
                jobs: steps,
                elapsed,
                cpu_s: None,
                problems: model.check_structure().err().into_iter().collect(),
            });
        }
        emit(
            Row::from_rounds(name, "harness", "steps/s", 1, 1, &rs),
            args.json,
        );
    }

    let name = "harness: history events checked";
    if wanted(name) {
        let history = harness::generated_history(args.seed, (jobs / 2).max(1));
        let mut rs = Vec::new();
        for _ in 0..rounds {
            let started = Instant::now();
            let reports = check::check_all(&history);
            let elapsed = started.elapsed();
            let verdict = check::overall(&reports);
            rs.push(Round {
                jobs: history.len() as u64,
                elapsed,
                cpu_s: None,
                problems: if verdict == Verdict::Valid {
                    Vec::new()
                } else {
                    vec![format!("the generated history is {verdict}")]
                },
            });
        }
        emit(
            Row::from_rounds(name, "harness", "events/s", 1, 1, &rs),
            args.json,
        );
    }

    let name = "harness: explorer steps (on the server)";
    if wanted(name) {
        let explore_steps = 300;
        let mut rs = Vec::new();
        for round in 0..rounds {
            let queue =
                Queue::connect_with(&client, &format!("bench-explore-r{round}"), queue_config())
                    .await
                    .map_err(|e| BenchError::unavailable(e.to_string()))?;
            let started = Instant::now();
            let report =
                crate::explore::explore(&queue, args.seed.wrapping_add(round), explore_steps)
                    .await
                    .map_err(|e| BenchError::unavailable(format!("explore: {e}")))?;
            let elapsed = started.elapsed();
            rs.push(Round {
                jobs: report.steps as u64,
                elapsed,
                cpu_s: None,
                problems: if report.verdict == Verdict::Valid {
                    Vec::new()
                } else {
                    vec![format!(
                        "walk of seed {} is {}",
                        report.seed, report.verdict
                    )]
                },
            });
            let _ = queue.clear().await;
        }
        emit(
            Row::from_rounds(name, "harness", "steps/s", 1, 1, &rs),
            args.json,
        );
    }

    let valid = rows.iter().all(|r| r.valid);
    if rows.is_empty() {
        let _ = server.stop().await;
        return Err(BenchError {
            code: crate::cli::EXIT_USAGE,
            message: format!(
                "--only {:?} matches no row (rows are named as in the table: ceiling, lmove, apalis-redis, reference, harness, ...)",
                args.only.unwrap_or_default()
            ),
        });
    }
    let reproduce = format!(
        "ackgap bench --server {} --workers {workers} --batch {batch} --jobs {jobs} --rounds {rounds} --seed {}{}",
        match &args.server {
            ServerSpec::Process(_) => "process",
            ServerSpec::Container => "container",
            ServerSpec::Url(_) => "URL",
        },
        args.seed,
        args.only
            .as_deref()
            .map_or(String::new(), |o| format!(" --only '{o}'"))
    );
    let report = Report {
        server: server.describe(),
        machine: machine(),
        workers,
        batch,
        jobs,
        rounds,
        seed: args.seed,
        rows,
        valid,
        reproduce,
    };
    if args.json {
        let text = serde_json::to_string(&report).map_err(BenchError::internal)?;
        println!("{text}");
    } else {
        for row in report.rows.iter().filter(|r| !r.valid) {
            for p in row.problems.iter().take(10) {
                println!("INVALID {}: {p}", row.name);
            }
        }
        println!(
            "\n{}\nreproduce: {}",
            if valid {
                "every round held its invariants"
            } else {
                "INVALID: an invariant broke; those rows report no figure"
            },
            report.reproduce
        );
    }
    server
        .stop()
        .await
        .map_err(|e| BenchError::internal(format!("stopping the server: {e}")))?;
    Ok(if valid {
        crate::cli::EXIT_VALID
    } else {
        crate::cli::EXIT_INVALID
    })
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

fn print_header() {
    println!(
        "{:<58} {:>7} {:>5} {:>12} {:>12} {:>12} {:>10}",
        "row", "workers", "batch", "median", "min", "max", "cpu µs/job"
    );
}

fn print_row(row: &Row) {
    let cpu = row
        .server_cpu_us_per_job
        .map_or("-".into(), |c| format!("{c:.2}"));
    if row.valid {
        println!(
            "{:<58} {:>7} {:>5} {:>12} {:>12} {:>12} {:>10}  {}",
            row.name,
            row.workers,
            row.batch,
            thousands(row.median),
            thousands(row.min),
            thousands(row.max),
            cpu,
            row.unit
        );
    } else {
        println!(
            "{:<58} {:>7} {:>5} {:>12} {:>12} {:>12} {:>10}",
            row.name, row.workers, row.batch, "INVALID", "-", "-", "-"
        );
    }
}

/// `1234567.8` as `1,234,568`.
fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_234_567.8), "1,234,568");
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[1.0, 2.0, 3.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 10.0]), 3.0);
    }
}
