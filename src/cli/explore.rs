//! `ackgap explore` (seeded random walks, the first failure shrunk) and
//! `ackgap replay LINE` (one replay line run again).

use std::path::PathBuf;
use std::sync::Arc;

use ackgap::check::Verdict;
use ackgap::explore::{self, Line, Schedule, Subject, SwarmConfig, WalkReport};
use ackgap::queue::Queue;
use ackgap::server::Server;

use super::{connect, print_invariants, start_server, stop, Exit, ExitError, ServerArgs};

/// The arguments of `ackgap explore`.
#[derive(Debug, clap::Args)]
pub(super) struct ExploreArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The seed of the (first) walk: it chooses the configuration and every
    /// step.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Random steps per walk (healing steps come on top).
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// How many walks: seeds SEED .. SEED+SEEDS-1, on one server.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// Run this schedule (as a failing walk prints it) instead of drawing
    /// steps; the seed still chooses the configuration.
    #[arg(long, conflicts_with_all = ["steps", "seeds"])]
    schedule: Option<String>,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap-explore")]
    queue_name: String,
    /// The queue under test: reference, lmove, rpop, streams, apalis (built
    /// with --features apalis), or exec:COMMAND (a
    /// child speaking the adapter protocol, docs/adapter-protocol.md).
    /// Only `reference` is compared with the model after every step; the
    /// others are judged by the history checkers.
    #[arg(long = "queue", default_value = "reference")]
    queue: String,
    /// The consumer the workers run: naive, natural, marker,
    /// marker-before or marker-after.
    #[arg(long, default_value = "marker")]
    consumer: ackgap::consumer::Kind,
    /// Replays the shrinker may run on a failure (0: do not shrink).
    #[arg(long, default_value_t = 2000)]
    shrink_runs: usize,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// The arguments of `ackgap replay`.
#[derive(Debug, clap::Args)]
pub(super) struct ReplayArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The replay line, e.g. `reference/marker/j2w2l100m3r1/e0.l1.c1`.
    line: String,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap-explore")]
    queue_name: String,
    /// Print one JSON object instead of the numbered steps.
    #[arg(long)]
    json: bool,
}

/// Walks seeds `SEED ..= SEED+SEEDS-1` (or the one `--schedule`), shrinks
/// the first failing walk, and prints one walk or a summary of many.
pub(super) async fn run(args: ExploreArgs) -> Result<Exit, ExitError> {
    let (schedule, last_seed) = check_args(&args)?;
    super::check_queue_name(&args.queue_name)?;
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let subject = open_subject(&args.queue, &args.consumer.to_string(), &queue, &server)
        .await?
        .with_rerun(args.server.rerun());
    let started = std::time::Instant::now();
    let reports = walk_all(&subject, &args, schedule.as_ref(), last_seed).await?;
    let elapsed = started.elapsed().as_secs_f64();
    shrink_first(&subject, &reports, args.shrink_runs).await?;
    let summary = Summary::of(&reports, elapsed);
    if args.json {
        outln!("{}", walks_json(&args, &reports, &summary, &server)?);
    } else if let [report] = reports.as_slice() {
        print_walk(report, &server.describe());
    } else {
        print_summary(&args, last_seed, &reports, &summary, &server);
    }
    drop(queue);
    stop(server).await?;
    Ok(summary.verdict.into())
}

/// The schedule to run, if any, and the last seed, or why the arguments
/// cannot be run; checked before any server starts.
fn check_args(args: &ExploreArgs) -> Result<(Option<Schedule>, u64), ExitError> {
    let schedule = match &args.schedule {
        Some(text) => Some(Schedule::parse(text).map_err(|e| ExitError::new(Exit::Usage, e))?),
        None => None,
    };
    let last_seed = args.seed.checked_add(args.seeds - 1).ok_or_else(|| {
        ExitError::new(
            Exit::Usage,
            format!(
                "--seed {} --seeds {} runs past u64::MAX",
                args.seed, args.seeds
            ),
        )
    })?;
    check_queue(&args.queue)?;
    if let Some(schedule) = &schedule {
        check_workers(schedule, SwarmConfig::from_seed(args.seed).workers)?;
    }
    Ok((schedule, last_seed))
}

/// A schedule that names a worker the run does not have (`workers` of
/// them) is bad input, refused before any server starts.
fn check_workers(schedule: &Schedule, workers: u8) -> Result<(), ExitError> {
    let named = schedule.0.iter().filter_map(|step| step.worker()).max();
    match named {
        Some(worker) if worker >= workers => Err(ExitError::new(
            Exit::Usage,
            format!("the schedule names worker {worker}, but this run has {workers} worker(s)"),
        )),
        _ => Ok(()),
    }
}

/// One walk per seed, each failing one's schedule written to a file.
async fn walk_all(
    subject: &Subject,
    args: &ExploreArgs,
    schedule: Option<&Schedule>,
    last_seed: u64,
) -> Result<Vec<WalkReport>, ExitError> {
    let mut reports: Vec<WalkReport> = Vec::new();
    // This run's directory, made at its first failing walk.
    let mut dir: Option<PathBuf> = None;
    for seed in args.seed..=last_seed {
        let walked = match schedule {
            Some(schedule) => explore::replay_on(subject, seed, schedule).await,
            None => explore::explore_on(subject, seed, args.steps).await,
        };
        let report = walked.map_err(|e| {
            let command = explore::walk_replay(subject, seed, args.steps, schedule);
            let mut stopped = ExitError::explore(format!("seed {seed}: the walk stopped"), &e);
            stopped.message.push_str(&format!("\nreproduce: {command}"));
            stopped
        })?;
        if report.verdict != Verdict::Valid {
            write_failure(&report, args, &mut dir);
        }
        reports.push(report);
    }
    Ok(reports)
}

/// Shrinks the first failing walk to a minimal counterexample (with at
/// most `runs` replays; 0: not at all), prints it to stderr and writes it
/// under `target/ackgap/failures/`.
async fn shrink_first(
    subject: &Subject,
    reports: &[WalkReport],
    runs: usize,
) -> Result<(), ExitError> {
    let Some(r) = reports.iter().find(|r| !r.findings().is_empty()) else {
        return Ok(());
    };
    if runs == 0 {
        return Ok(());
    }
    let line: Line = r
        .line
        .parse()
        .map_err(|e: String| ExitError::new(Exit::Internal, e))?;
    let config = SwarmConfig {
        seed: r.seed,
        ..r.config.clone()
    };
    let shrunk = explore::shrink(subject, &config, &line.schedule, runs)
        .await
        .map_err(|e| ExitError::explore("shrinking stopped", &e))?;
    if let Some(shrunk) = &shrunk {
        err!("\n{}", shrunk.text());
        match explore::shrink::write_failure(&explore::shrink::failures_dir(), shrunk) {
            Ok(path) => errln!("  written to {}", path.display()),
            Err(e) => errln!("ackgap: cannot write the counterexample: {e}"),
        }
    }
    Ok(())
}

/// The walks' totals.
struct Summary {
    /// Steps over every walk.
    steps: usize,
    /// Wall time of the walks (s).
    elapsed: f64,
    /// Steps per second.
    steps_per_s: f64,
    /// The worst walk's verdict.
    verdict: Verdict,
}

impl Summary {
    fn of(reports: &[WalkReport], elapsed: f64) -> Summary {
        let steps: usize = reports.iter().map(|r| r.steps).sum();
        Summary {
            steps,
            elapsed,
            steps_per_s: steps as f64 / elapsed.max(1e-9),
            verdict: reports
                .iter()
                .map(|r| r.verdict)
                .max()
                .unwrap_or(Verdict::Unknown),
        }
    }
}

/// `--json`: the one walk's report, or the totals and the failed walks.
fn walks_json(
    args: &ExploreArgs,
    reports: &[WalkReport],
    summary: &Summary,
    server: &Server,
) -> Result<serde_json::Value, ExitError> {
    if let [report] = reports {
        let mut value = serde_json::to_value(report)?;
        value["server"] = server.describe().into();
        return Ok(value);
    }
    let failed: Vec<&WalkReport> = reports
        .iter()
        .filter(|r| r.verdict != Verdict::Valid)
        .collect();
    Ok(serde_json::json!({
        "server": server.describe(), "first_seed": args.seed, "seeds": args.seeds,
        "steps_max": args.steps, "steps": summary.steps, "elapsed_ms": summary.elapsed * 1000.0,
        "steps_per_s": summary.steps_per_s, "verdict": summary.verdict, "failed": failed,
    }))
}

/// Many walks: one line per failed walk, then the totals.
fn print_summary(
    args: &ExploreArgs,
    last_seed: u64,
    reports: &[WalkReport],
    summary: &Summary,
    server: &Server,
) {
    outln!(
        "ackgap explore: seeds {}..={last_seed}, {} steps each, server {}",
        args.seed,
        args.steps,
        server.describe()
    );
    for r in reports.iter().filter(|r| r.verdict != Verdict::Valid) {
        let why = r.divergence.as_ref().map_or_else(
            || {
                r.invariants
                    .iter()
                    .filter(|i| i.verdict != Verdict::Valid)
                    .map(|i| i.invariant)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            |d| d.to_string(),
        );
        outln!(
            "seed {}: {}: {why}; reproduce: {}",
            r.seed,
            r.verdict,
            r.replay
        );
    }
    let failed = reports
        .iter()
        .filter(|r| r.verdict != Verdict::Valid)
        .count();
    let reported = reports
        .iter()
        .filter(|r| r.verdict == Verdict::Valid && !r.findings().is_empty())
        .count();
    let reported = if reported > 0 {
        format!(" ({reported} more with reported effect anomalies)")
    } else {
        String::new()
    };
    let Summary {
        steps,
        elapsed,
        steps_per_s,
        verdict,
    } = summary;
    outln!(
        "{} seeds, {failed} failed;{reported} {steps} steps in {elapsed:.2} s ({steps_per_s:.0} steps/s); verdict: {verdict}",
        reports.len()
    );
}

/// The shipped queue under test `queue_under_test` (an adapter name) with
/// consumer `consumer`; an unknown name of either is a usage error.
pub(super) fn subject(
    queue_under_test: &str,
    consumer: &str,
    queue: &Queue,
) -> Result<Subject, ExitError> {
    let adapter = ackgap::adapter::by_name(queue_under_test, queue)
        .map_err(|e| ExitError::new(Exit::Usage, e))?;
    let kind: ackgap::consumer::Kind = consumer
        .parse()
        .map_err(|e| ExitError::new(Exit::Usage, e))?;
    Ok(Subject::new(adapter, Arc::from(kind.consumer())))
}

/// An unknown `--queue` (neither a shipped name nor `exec:COMMAND`) is a
/// usage error, found before any server starts.
pub(super) fn check_queue(spec: &str) -> Result<(), ExitError> {
    ackgap::adapter::check_name(spec)
        .map_err(|e| ExitError::new(Exit::Usage, format!("--queue: {e}")))
}

/// The queue under test `queue_under_test` (an adapter name or
/// `exec:COMMAND`, told `server`'s URL) with consumer `consumer`; an
/// unknown name of either is a usage error.
pub(super) async fn open_subject(
    queue_under_test: &str,
    consumer: &str,
    queue: &Queue,
    server: &Server,
) -> Result<Subject, ExitError> {
    let kind: ackgap::consumer::Kind = consumer
        .parse()
        .map_err(|e| ExitError::new(Exit::Usage, e))?;
    let adapter = ackgap::adapter::open(queue_under_test, queue, &server.url()).await?;
    Ok(Subject::new(adapter, Arc::from(kind.consumer())))
}

/// Runs one replay line again, heals, judges, and prints the numbered
/// steps (or JSON).
pub(super) async fn replay(args: ReplayArgs) -> Result<Exit, ExitError> {
    let line: Line = args
        .line
        .parse()
        .map_err(|e: String| ExitError::new(Exit::Usage, e))?;
    check_queue(&line.queue)?;
    line.consumer
        .parse::<ackgap::consumer::Kind>()
        .map_err(|e| ExitError::new(Exit::Usage, e))?;
    super::check_queue_name(&args.queue_name)?;
    check_workers(&line.schedule, line.config.workers)?;
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let subject = open_subject(&line.queue, &line.consumer, &queue, &server)
        .await?
        .with_rerun(args.server.rerun());
    let config = SwarmConfig::from_line(&line.config);
    let report = explore::run_schedule(&subject, &config, &line.schedule)
        .await
        .map_err(|e| ExitError::explore("the replay stopped", &e))?;
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["server"] = server.describe().into();
        value["history"] = serde_json::to_value(&report.history).unwrap_or_default();
        value["log"] = serde_json::to_value(&report.log).unwrap_or_default();
        outln!("{value}");
    } else {
        out!("{}", report.counterexample_text());
        outln!();
        print_invariants(&report.invariants);
        outln!("\nverdict: {}", report.verdict);
    }
    drop(queue);
    stop(server).await?;
    Ok(report.verdict.into())
}

/// Writes a failing walk's schedule and replay command as `seed-S.txt` in
/// this run's directory `dir` (`target/ackgap/explore/TIME-seedSEED-QUEUE/`,
/// made at the first failure, `latest` pointing at it), so that it
/// survives the terminal and no later run replaces it.
fn write_failure(report: &WalkReport, args: &ExploreArgs, dir: &mut Option<PathBuf>) {
    if dir.is_none() {
        match super::artifacts::run_dir("explore", args.seed, &args.queue) {
            Ok(made) => {
                errln!("ackgap: failing walks written in {}", made.display());
                *dir = Some(made);
            }
            Err(e) => {
                errln!("ackgap: {}", e.message);
                return;
            }
        }
    }
    let Some(dir) = dir else { return };
    let path = dir.join(format!("seed-{}.txt", report.seed));
    if let Err(e) = std::fs::write(&path, report.failure_text()) {
        errln!("ackgap: cannot write {}: {e}", path.display());
    }
}

fn print_walk(report: &WalkReport, server: &str) {
    let c = &report.config;
    let w = &c.weights;
    outln!(
        "ackgap explore: seed {}, server {}\n  {} jobs, {} workers, lease {} ms, max_attempts {}, reap limit {}\n  weights e{} l{} c{} f{} x{} k{} s{} r{} t{}\n",
        report.seed, server, c.jobs, c.workers, c.lease_ms, c.max_attempts, c.reap_limit,
        w.enqueue, w.lease, w.complete, w.fail, w.extend, w.crash, w.stale_complete, w.reap, w.tick
    );
    print_invariants(&report.invariants);
    outln!();
    if let Some(d) = &report.divergence {
        outln!("{d}\n");
    }
    outln!(
        "verdict: {}  ({} steps, {} events in {:.1} ms; {:.0} steps/s)",
        report.verdict,
        report.steps,
        report.events,
        report.elapsed_ms,
        report.steps_per_s
    );
    if report.verdict != Verdict::Valid {
        outln!("schedule: {}", report.schedule);
    }
    outln!("reproduce: {}", report.replay);
}
