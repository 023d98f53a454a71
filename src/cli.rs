//! The command line: arguments, the commands, their output, and exit codes.
//!
//! Exit codes (documented in README.md):
//! 0 every invariant held; 1 an invariant was violated; 2 the verdict is
//! unknown; 64 bad arguments; 69 the server could not be found, started or
//! reached; 70 an internal error; 130 interrupted (Ctrl-C).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::campaign::{self, SmokeConfig, SmokeReport};
use crate::check::{self, Verdict};
use crate::queue::Queue;
use crate::server::{Persistence, Server, ServerSpec};

/// Exit code: every invariant held.
pub const EXIT_VALID: u8 = 0;
/// Exit code: an invariant was violated.
pub const EXIT_INVALID: u8 = 1;
/// Exit code: the verdict is unknown.
pub const EXIT_UNKNOWN: u8 = 2;
/// Exit code: bad arguments or input.
pub const EXIT_USAGE: u8 = 64;
/// Exit code: no server could be found, started or reached.
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit code: an internal error.
pub const EXIT_INTERNAL: u8 = 70;
/// Exit code: interrupted by Ctrl-C.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Proves, or disproves, the at-least-once bargain of a job queue built on
/// Valkey Lua scripts.
#[derive(Debug, Parser)]
#[command(name = "ackgap", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: a campaign against a real server, one verdict per
    /// invariant.
    Run(RunArgs),
    /// Re-judge a stored history (JSON lines) offline.
    Check(CheckArgs),
    /// The model checker: seeded random walks run against the pure model
    /// and a real server in lock step, checked after every step.
    Explore(ExploreArgs),
}

#[derive(Debug, clap::Args)]
struct ServerArgs {
    /// Where the queue runs: `process` (an embedded valkey-server child),
    /// `container` (the local image built by ci/build-image), or a URL
    /// `redis://[user:pass@]host:port`.
    #[arg(long, default_value = "process", env = "ACKGAP_SERVER")]
    server: ServerSpec,
    /// Persistence of an embedded server: none, everysec or always.
    #[arg(long, default_value = "none")]
    persistence: Persistence,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The seed every choice is drawn from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap")]
    queue_name: String,
    /// Where to write the history; default target/ackgap/runs/run-SEED.jsonl.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ExploreArgs {
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
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The history file (JSON lines, as `ackgap run` writes).
    file: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// An error with the exit code its class gets.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, message: impl std::fmt::Display) -> Failure {
        Failure {
            code,
            message: message.to_string(),
        }
    }
}

/// Parses the arguments, runs the command, and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ackgap: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_INTERNAL);
        }
    };
    let code = runtime.block_on(async {
        tokio::select! {
            res = run(cli) => match res {
                Ok(code) => code,
                Err(f) => {
                    eprintln!("ackgap: {}", f.message);
                    f.code
                }
            },
            _ = tokio::signal::ctrl_c() => {
                // Dropping the command's future drops its servers, which
                // kills their children.
                eprintln!("ackgap: interrupted; servers stopped");
                EXIT_INTERRUPTED
            }
        }
    });
    ExitCode::from(code)
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Run(args) => run_campaign(args).await,
        Command::Check(args) => check_file(args),
        Command::Explore(args) => run_explore(args).await,
    }
}

fn exit_for(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Valid => EXIT_VALID,
        Verdict::Invalid => EXIT_INVALID,
        Verdict::Unknown => EXIT_UNKNOWN,
    }
}

/// Starts the server `args` names, with errors classed for exit codes.
pub async fn start_server(spec: &ServerSpec, persistence: Persistence) -> Result<Server, Failure> {
    Server::start(spec, persistence)
        .await
        .map_err(|e| Failure::new(EXIT_UNAVAILABLE, e))
}

async fn connect(server: &Server, name: &str) -> Result<Queue, Failure> {
    Queue::connect(&server.client(), name)
        .await
        .map_err(|e| match e {
            crate::queue::QueueError::QueueName(_) => Failure::new(EXIT_USAGE, e),
            other => Failure::new(
                EXIT_UNAVAILABLE,
                format!("cannot reach {}: {other}", server.describe()),
            ),
        })
}

async fn run_campaign(args: RunArgs) -> Result<u8, Failure> {
    let config = SmokeConfig::from_seed(args.seed);
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let history = args
        .history
        .unwrap_or_else(|| PathBuf::from(format!("target/ackgap/runs/run-{}.jsonl", args.seed)));
    if !args.json {
        println!(
            "ackgap run: seed {}, server {}\n  {} jobs, {} workers + 1 that crashes, lease {} ms, max_attempts {}\n",
            args.seed,
            server.describe(),
            config.jobs,
            config.workers,
            config.lease_ms,
            config.max_attempts
        );
    }
    let report = campaign::smoke(&queue, config, Some(history))
        .await
        .map_err(|e| Failure::new(EXIT_UNAVAILABLE, format!("the campaign stopped: {e:#}")))?;
    let replay = format!(
        "ackgap run --seed {} --server {}",
        args.seed,
        server_arg(&args.server.server)
    );
    if args.json {
        let mut value =
            serde_json::to_value(&report).map_err(|e| Failure::new(EXIT_INTERNAL, e))?;
        value["server"] = server.describe().into();
        value["replay"] = replay.clone().into();
        println!("{value}");
    } else {
        print_smoke(&report, &replay);
    }
    drop(queue);
    server
        .stop()
        .await
        .map_err(|e| Failure::new(EXIT_INTERNAL, format!("stopping the server: {e}")))?;
    Ok(exit_for(report.verdict))
}

fn server_arg(spec: &ServerSpec) -> String {
    match spec {
        ServerSpec::Process(_) => "process".into(),
        ServerSpec::Container => "container".into(),
        // Never print a password.
        ServerSpec::Url(_) => "URL".into(),
    }
}

fn print_smoke(report: &SmokeReport, replay: &str) {
    println!("{:<16} {:>10}  state", "job", "deliveries");
    for job in &report.jobs {
        println!("{:<16} {:>10}  {}", job.id, job.deliveries, job.state);
    }
    println!();
    print_invariants(&report.invariants);
    println!();
    println!(
        "verdict: {}  ({} events in {:.1} s; history {})",
        report.verdict,
        report.events,
        report.elapsed_ms as f64 / 1000.0,
        report
            .history
            .as_ref()
            .map_or("not written".into(), |p| p.display().to_string())
    );
    println!("reproduce: {replay}");
}

fn print_invariants(reports: &[check::Report]) {
    println!("{:<18} {:<8}  counts", "invariant", "verdict");
    for r in reports {
        let counts: Vec<String> = r.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("{:<18} {:<8}  {}", r.invariant, r.verdict, counts.join(" "));
        for v in &r.violations {
            println!("    violation: {v}");
        }
    }
}

async fn run_explore(args: ExploreArgs) -> Result<u8, Failure> {
    use crate::explore::{self, Schedule, WalkReport};

    let schedule = match &args.schedule {
        Some(text) => Some(Schedule::parse(text).map_err(|e| Failure::new(EXIT_USAGE, e))?),
        None => None,
    };
    let last_seed = args.seed.checked_add(args.seeds - 1).ok_or_else(|| {
        Failure::new(
            EXIT_USAGE,
            format!(
                "--seed {} --seeds {} runs past u64::MAX",
                args.seed, args.seeds
            ),
        )
    })?;
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let started = std::time::Instant::now();
    let mut reports: Vec<WalkReport> = Vec::new();
    for seed in args.seed..=last_seed {
        let walked = match &schedule {
            Some(schedule) => explore::replay(&queue, seed, schedule).await,
            None => explore::explore(&queue, seed, args.steps).await,
        };
        let report = walked.map_err(|e| {
            Failure::new(
                EXIT_UNAVAILABLE,
                format!(
                    "seed {seed}: the walk stopped: {e}\nreproduce: {}",
                    explore::replay_command(seed, args.steps)
                ),
            )
        })?;
        if report.verdict != Verdict::Valid {
            write_failure(&report);
        }
        reports.push(report);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let steps: usize = reports.iter().map(|r| r.steps).sum();
    let steps_per_s = steps as f64 / elapsed.max(1e-9);
    let verdict = reports
        .iter()
        .map(|r| r.verdict)
        .max()
        .unwrap_or(Verdict::Unknown);
    if args.json {
        let value = if let [report] = reports.as_slice() {
            let mut value =
                serde_json::to_value(report).map_err(|e| Failure::new(EXIT_INTERNAL, e))?;
            value["server"] = server.describe().into();
            value
        } else {
            let failed: Vec<&WalkReport> = reports
                .iter()
                .filter(|r| r.verdict != Verdict::Valid)
                .collect();
            serde_json::json!({
                "server": server.describe(), "first_seed": args.seed, "seeds": args.seeds,
                "steps_max": args.steps, "steps": steps, "elapsed_ms": elapsed * 1000.0,
                "steps_per_s": steps_per_s, "verdict": verdict, "failed": failed,
            })
        };
        println!("{value}");
    } else if let [report] = reports.as_slice() {
        print_walk(report, &server.describe());
    } else {
        println!(
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
            println!(
                "seed {}: {}: {why}; reproduce: {}",
                r.seed, r.verdict, r.replay
            );
        }
        let failed = reports
            .iter()
            .filter(|r| r.verdict != Verdict::Valid)
            .count();
        println!(
            "{} seeds, {failed} failed; {steps} steps in {elapsed:.2} s ({steps_per_s:.0} steps/s); verdict: {verdict}",
            reports.len()
        );
    }
    drop(queue);
    server
        .stop()
        .await
        .map_err(|e| Failure::new(EXIT_INTERNAL, format!("stopping the server: {e}")))?;
    Ok(exit_for(verdict))
}

/// Writes a failing walk's schedule and replay command under
/// `target/ackgap/explore/`, so that it survives the terminal.
fn write_failure(report: &crate::explore::WalkReport) {
    let path = PathBuf::from(format!("target/ackgap/explore/seed-{}.txt", report.seed));
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| std::fs::write(&path, report.failure_text()));
    if let Err(e) = written {
        eprintln!("ackgap: cannot write {}: {e}", path.display());
    }
}

fn print_walk(report: &crate::explore::WalkReport, server: &str) {
    let c = &report.config;
    let w = &c.weights;
    println!(
        "ackgap explore: seed {}, server {}\n  {} jobs, {} workers, lease {} ms, max_attempts {}, reap limit {}\n  weights e{} l{} c{} f{} x{} k{} s{} r{} t{}\n",
        report.seed, server, c.jobs, c.workers, c.lease_ms, c.max_attempts, c.reap_limit,
        w.enqueue, w.lease, w.complete, w.fail, w.extend, w.crash, w.stale_complete, w.reap, w.tick
    );
    print_invariants(&report.invariants);
    println!();
    if let Some(d) = &report.divergence {
        println!("{d}\n");
    }
    println!(
        "verdict: {}  ({} steps, {} events in {:.1} ms; {:.0} steps/s)",
        report.verdict, report.steps, report.events, report.elapsed_ms, report.steps_per_s
    );
    if report.verdict != Verdict::Valid {
        println!("schedule: {}", report.schedule);
    }
    println!("reproduce: {}", report.replay);
}

fn check_file(args: CheckArgs) -> Result<u8, Failure> {
    let events = crate::history::read_file(&args.file).map_err(|e| Failure::new(EXIT_USAGE, e))?;
    let reports = check::check_all(&events);
    let verdict = check::overall(&reports);
    if args.json {
        let value = serde_json::json!({"file": args.file, "events": events.len(),
                                        "verdict": verdict, "invariants": reports});
        println!("{value}");
    } else {
        println!("{}: {} events\n", args.file.display(), events.len());
        print_invariants(&reports);
        println!("\nverdict: {verdict}");
    }
    Ok(exit_for(verdict))
}
