//! The command line: arguments, the commands, their output, and exit codes.
//!
//! Exit codes (documented in README.md):
//! 0 every invariant held; 1 an invariant was violated; 2 the verdict is
//! unknown; 64 bad arguments; 69 the server could not be found, started or
//! reached; 70 an internal error; 130 interrupted (Ctrl-C).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::campaign::{self, SmokeConfig};
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
/// Exit code: the history could not be written (a path that is not
/// writable, a full disk).
pub const EXIT_CANTCREAT: u8 = 73;
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
    /// The main job, the default campaign against a real server: a bounded
    /// exhaustive search, random walks of every shipped consumer and the
    /// concurrent crash/reap/stale-ack scenario, one verdict table.
    Run(RunArgs),
    /// Re-judge a stored history (JSON lines) offline.
    Check(CheckArgs),
    /// The model checker: seeded random walks run against the pure model
    /// and a real server in lock step, checked after every step.
    Explore(ExploreArgs),
    /// Run one replay line (`QUEUE/CONSUMER/CONFIG/STEPS`, as a failure
    /// prints it) exactly again, heal, and judge it.
    Replay(ReplayArgs),
    /// Bounded exhaustive search: every interleaving up to a depth on the
    /// reference queue, paths reaching the same state merged, each new
    /// state checked against the server.
    Exhaust(ExhaustArgs),
    /// The replay figure: one job delivered N times to a consumer (a crash
    /// in the ack gap before every ack but the last), deliveries against
    /// effects.
    Deliveries(DeliveriesArgs),
    /// Lease/ack throughput of the reference queue, unbatched and batched,
    /// side by side with the ceiling and the LMOVE list pattern, plus the
    /// harness's own speed; every round's invariants are checked.
    Bench(crate::bench::BenchArgs),
    /// The chaos runner: concurrent workers on wall-clock time, faults in
    /// the workers, the network and the server, the history judged after.
    Chaos(crate::chaos::command::ChaosArgs),
    /// Mutation testing of the checker: broken scripts and consumers from
    /// lua/mutants/, each run until an invariant catches it; a kill matrix.
    Mutants(crate::mutants::MutantsArgs),
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
    /// Where to write the smoke scenario's history; default
    /// target/ackgap/runs/run-SEED.jsonl.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Random walks per consumer: seeds SEED .. SEED+SEEDS-1.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// Random steps per walk (healing steps come on top).
    #[arg(long, default_value_t = 100)]
    steps: usize,
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
    /// The queue under test: reference, lmove or rpop. Only `reference` is
    /// compared with the model after every step; the others are judged by
    /// the history checkers.
    #[arg(long = "queue", default_value = "reference")]
    queue: String,
    /// The consumer the workers run: naive, natural, marker,
    /// marker-before or marker-after.
    #[arg(long, default_value = "marker")]
    consumer: crate::consumer::Kind,
    /// Replays the shrinker may run on a failure (0: do not shrink).
    #[arg(long, default_value_t = 2000)]
    shrink_runs: usize,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ExhaustArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Jobs JOB-0 .. in play.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=8))]
    jobs: u8,
    /// Workers w0 ...
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=8))]
    workers: u8,
    /// The longest interleaving (steps).
    #[arg(long, default_value_t = 6)]
    depth: usize,
    /// The consumer the workers run.
    #[arg(long, default_value = "marker")]
    consumer: crate::consumer::Kind,
    /// Search the model alone, without checking states against the server.
    #[arg(long)]
    model_only: bool,
    /// Stop with an error past this many states.
    #[arg(long, default_value_t = 5_000_000)]
    states_max: usize,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap-exhaust")]
    queue_name: String,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct DeliveriesArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The consumer: naive, natural, marker, marker-before, marker-after,
    /// or `all` (one line each).
    #[arg(long, default_value = "all")]
    consumer: String,
    /// How many times the job is delivered (1 to 10000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    times: u64,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap-deliveries")]
    queue_name: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
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
    // The explorers run one step at a time: on one thread, a reply wakes
    // the waiting step without a hop between threads, which more than
    // halves a round trip's latency on a loaded machine. Everything else
    // (concurrent workers, the fault proxy) gets the multi-threaded runtime.
    let sequential = matches!(
        cli.command,
        Command::Explore(_) | Command::Replay(_) | Command::Exhaust(_) | Command::Deliveries(_)
    );
    let mut builder = if sequential {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ackgap: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_INTERNAL);
        }
    };
    // `ackgap chaos` handles Ctrl-C itself: it stops, heals and writes its
    // report on the history so far before it exits 130.
    let own_interrupt = matches!(cli.command, Command::Chaos(_));
    let code = runtime.block_on(async {
        let interrupted = async {
            if own_interrupt {
                std::future::pending::<()>().await;
            }
            let _ = tokio::signal::ctrl_c().await;
        };
        tokio::select! {
            res = run(cli) => match res {
                Ok(code) => code,
                Err(f) => {
                    eprintln!("ackgap: {}", f.message);
                    f.code
                }
            },
            _ = interrupted => {
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
        Command::Replay(args) => run_replay(args).await,
        Command::Exhaust(args) => run_exhaust(args).await,
        Command::Deliveries(args) => run_deliveries(args).await,
        Command::Chaos(args) => crate::chaos::command::run(args)
            .await
            .map_err(|(code, message)| Failure::new(code, message)),
        Command::Mutants(args) => crate::mutants::command(args)
            .await
            .map_err(|(code, message)| Failure::new(code, message)),
        Command::Bench(args) => crate::bench::run(args)
            .await
            .map_err(|e| Failure::new(e.code, e.message)),
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
    let mut config = campaign::CampaignConfig::new(args.seed, args.seeds);
    config.steps = args.steps;
    let smoke = SmokeConfig::from_seed(args.seed);
    let history = args
        .history
        .unwrap_or_else(|| PathBuf::from(format!("target/ackgap/runs/run-{}.jsonl", args.seed)));
    // A history that cannot be written is known before any server starts.
    crate::history::Recorder::to_file(&history).map_err(|e| {
        Failure::new(
            EXIT_CANTCREAT,
            campaign::HistoryWriteError {
                path: history.clone(),
                reason: e.to_string(),
            },
        )
    })?;
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    if !args.json {
        println!(
            "ackgap run: seed {}, server {}\n  exhaust: {} jobs, {} workers, depth {}, marker\n  walks: {} seeds of {} steps for each consumer\n  smoke: {} jobs, {} workers + 1 that crashes, lease {} ms, max_attempts {}, server clock\n",
            args.seed,
            server.describe(),
            config.exhaust_jobs,
            config.exhaust_workers,
            config.exhaust_depth,
            config.seeds,
            config.steps,
            smoke.jobs,
            smoke.workers,
            smoke.lease_ms,
            smoke.max_attempts
        );
    }
    let report = campaign::campaign(&queue, config, Some(history))
        .await
        .map_err(|e| {
            let code = if e.is::<campaign::HistoryWriteError>() {
                EXIT_CANTCREAT
            } else {
                EXIT_UNAVAILABLE
            };
            Failure::new(code, format!("the campaign stopped: {e:#}"))
        })?;
    let replay = format!(
        "ackgap run --seed {} --seeds {} --steps {} --server {}",
        args.seed,
        args.seeds,
        args.steps,
        server_arg(&args.server.server)
    );
    // --- mutation score (issue 5, src/mutants/): the checker can still fail.
    let mutation = crate::mutants::score(&server.client(), &crate::mutants::Budget::fast()).await;
    // --- end mutation score.
    if args.json {
        let mut value =
            serde_json::to_value(&report).map_err(|e| Failure::new(EXIT_INTERNAL, e))?;
        value["server"] = server.describe().into();
        value["replay"] = replay.clone().into();
        value["mutation_score"] = match &mutation {
            Ok(score) => serde_json::to_value(score).map_err(|e| Failure::new(EXIT_INTERNAL, e))?,
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        println!("{value}");
    } else {
        print_campaign(&report, &replay);
        println!("{}", crate::mutants::score_line(&mutation));
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

/// The default campaign's verdict table (rows: invariants; columns: the
/// phases), what each column ran, and the verdict.
fn print_campaign(report: &campaign::RunReport, replay: &str) {
    let mut widths: Vec<usize> = report
        .phases
        .iter()
        .map(|p| {
            report
                .invariants
                .iter()
                .map(|i| p.cells.get(i).map_or(1, |c| c.text().len()))
                .chain([p.name.len()])
                .max()
                .unwrap_or(1)
        })
        .collect();
    widths.iter_mut().for_each(|w| *w += 2);
    let mut header = format!("{:<18}", "invariant");
    for (p, w) in report.phases.iter().zip(&widths) {
        header.push_str(&format!("{:<w$}", p.name));
    }
    println!("{}", header.trim_end());
    for inv in &report.invariants {
        let mut row = format!("{inv:<18}");
        for (p, w) in report.phases.iter().zip(&widths) {
            let cell = p.cells.get(inv).map_or("-".into(), |c| c.text());
            row.push_str(&format!("{cell:<w$}"));
        }
        println!("{}", row.trim_end());
    }
    println!(
        "\n(effect-once of a consumer that does not promise it is reported, not judged:\n the jobs whose effect was duplicated or lost are expected findings.)\n"
    );
    for p in &report.phases {
        println!(
            "{:<14} {:<8} {} runs, {} steps in {:.1} s: {}",
            p.name,
            p.verdict(),
            p.runs,
            p.steps,
            p.elapsed_ms as f64 / 1000.0,
            p.what
        );
        for f in &p.failures {
            println!("    reproduce: {f}");
        }
    }
    println!();
    println!(
        "verdict: {}  ({:.1} s; smoke history {})",
        report.verdict,
        report.elapsed_ms as f64 / 1000.0,
        report
            .smoke
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
    let adapter_ok = crate::adapter::NAMES.contains(&args.queue.as_str());
    if !adapter_ok {
        return Err(Failure::new(
            EXIT_USAGE,
            format!(
                "unknown --queue {:?}: expected one of {}",
                args.queue,
                crate::adapter::NAMES.join(", ")
            ),
        ));
    }
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let subject = subject(&args.queue, &args.consumer.to_string(), &queue)?;
    let started = std::time::Instant::now();
    let mut reports: Vec<WalkReport> = Vec::new();
    for seed in args.seed..=last_seed {
        let walked = match &schedule {
            Some(schedule) => explore::replay_on(&subject, seed, schedule).await,
            None => explore::explore_on(&subject, seed, args.steps).await,
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
    // The first failing walk is shrunk to a minimal counterexample.
    let first_failing = reports.iter().find(|r| !r.findings().is_empty());
    let shrunk = match first_failing {
        Some(r) if args.shrink_runs > 0 => {
            let line: crate::explore::Line = r
                .line
                .parse()
                .map_err(|e: String| Failure::new(EXIT_INTERNAL, e))?;
            let config = crate::explore::SwarmConfig {
                seed: r.seed,
                ..r.config.clone()
            };
            crate::explore::shrink(&subject, &config, &line.schedule, args.shrink_runs)
                .await
                .map_err(|e| Failure::new(EXIT_UNAVAILABLE, format!("shrinking stopped: {e}")))?
        }
        _ => None,
    };
    if let Some(shrunk) = &shrunk {
        eprint!("\n{}", shrunk.text());
        match crate::explore::shrink::write_failure(&crate::explore::shrink::failures_dir(), shrunk)
        {
            Ok(path) => eprintln!("  written to {}", path.display()),
            Err(e) => eprintln!("ackgap: cannot write the counterexample: {e}"),
        }
    }
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
        let reported = reports
            .iter()
            .filter(|r| r.verdict == Verdict::Valid && !r.findings().is_empty())
            .count();
        let reported = if reported > 0 {
            format!(" ({reported} more with reported effect anomalies)")
        } else {
            String::new()
        };
        println!(
            "{} seeds, {failed} failed;{reported} {steps} steps in {elapsed:.2} s ({steps_per_s:.0} steps/s); verdict: {verdict}",
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

/// The queue under test `queue` (an adapter name) with consumer `consumer`.
fn subject(
    queue_under_test: &str,
    consumer: &str,
    queue: &Queue,
) -> Result<crate::explore::Subject, Failure> {
    let adapter = crate::adapter::by_name(queue_under_test, queue)
        .map_err(|e| Failure::new(EXIT_USAGE, e))?;
    let kind: crate::consumer::Kind = consumer.parse().map_err(|e| Failure::new(EXIT_USAGE, e))?;
    Ok(crate::explore::Subject::new(
        adapter,
        std::sync::Arc::from(kind.consumer()),
    ))
}

async fn run_replay(args: ReplayArgs) -> Result<u8, Failure> {
    use crate::explore::{Line, SwarmConfig};

    let line: Line = args
        .line
        .parse()
        .map_err(|e: String| Failure::new(EXIT_USAGE, e))?;
    if !crate::adapter::NAMES.contains(&line.queue.as_str()) {
        return Err(Failure::new(
            EXIT_USAGE,
            format!(
                "unknown queue {:?}: expected one of {}",
                line.queue,
                crate::adapter::NAMES.join(", ")
            ),
        ));
    }
    line.consumer
        .parse::<crate::consumer::Kind>()
        .map_err(|e| Failure::new(EXIT_USAGE, e))?;
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let subject = subject(&line.queue, &line.consumer, &queue)?;
    let config = SwarmConfig::from_line(&line.config);
    let report = crate::explore::run_schedule(&subject, &config, &line.schedule)
        .await
        .map_err(|e| Failure::new(EXIT_UNAVAILABLE, format!("the replay stopped: {e}")))?;
    if args.json {
        let mut value =
            serde_json::to_value(&report).map_err(|e| Failure::new(EXIT_INTERNAL, e))?;
        value["server"] = server.describe().into();
        value["history"] = serde_json::to_value(&report.history).unwrap_or_default();
        value["log"] = serde_json::to_value(&report.log).unwrap_or_default();
        println!("{value}");
    } else {
        print!("{}", report.counterexample_text());
        println!();
        print_invariants(&report.invariants);
        println!("\nverdict: {}", report.verdict);
    }
    drop(queue);
    server
        .stop()
        .await
        .map_err(|e| Failure::new(EXIT_INTERNAL, format!("stopping the server: {e}")))?;
    Ok(exit_for(report.verdict))
}

async fn run_exhaust(args: ExhaustArgs) -> Result<u8, Failure> {
    let mut config = crate::explore::ExhaustConfig::new(args.jobs, args.workers, args.depth);
    config.valkey = !args.model_only;
    config.states_max = args.states_max;
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let subject = subject("reference", &args.consumer.to_string(), &queue)?;
    let report = crate::explore::exhaust(&subject, config)
        .await
        .map_err(|e| Failure::new(EXIT_UNAVAILABLE, format!("the search stopped: {e}")))?;
    let verdict = if report.failure.is_some() {
        Verdict::Invalid
    } else {
        Verdict::Valid
    };
    if args.json {
        let mut value =
            serde_json::to_value(&report).map_err(|e| Failure::new(EXIT_INTERNAL, e))?;
        value["server"] = server.describe().into();
        value["verdict"] = serde_json::to_value(verdict).unwrap_or_default();
        println!("{value}");
    } else {
        let c = &report.config;
        println!(
            "ackgap exhaust: {} jobs, {} workers, depth {}, lease {} ms, max_attempts {}, consumer {}, {}",
            c.jobs,
            c.workers,
            c.depth,
            c.lease_ms,
            c.max_attempts,
            args.consumer,
            if c.valkey {
                format!("each new state checked on {}", server.describe())
            } else {
                "model only".into()
            }
        );
        println!(
            "states {}  transitions {}  merged {}  by depth {:?}",
            report.states, report.transitions, report.merged, report.states_by_depth
        );
        println!(
            "model steps {} ({:.0}/s)  valkey steps {} ({:.0}/s)  in {:.2} s",
            report.model_steps,
            report.model_steps_per_s,
            report.valkey_steps,
            report.valkey_steps_per_s,
            report.elapsed_ms / 1000.0
        );
        if let Some(f) = &report.failure {
            println!("failure: {f}");
        }
        println!("verdict: {verdict}");
    }
    drop(queue);
    server
        .stop()
        .await
        .map_err(|e| Failure::new(EXIT_INTERNAL, format!("stopping the server: {e}")))?;
    Ok(exit_for(verdict))
}

async fn run_deliveries(args: DeliveriesArgs) -> Result<u8, Failure> {
    use crate::consumer::Kind;

    let kinds: Vec<Kind> = if args.consumer == "all" {
        Kind::ALL.to_vec()
    } else {
        vec![args
            .consumer
            .parse()
            .map_err(|e: String| Failure::new(EXIT_USAGE, format!("{e}, or all")))?]
    };
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let mut reports = Vec::new();
    for kind in kinds {
        let subject = subject("reference", kind.name(), &queue)?;
        let report = crate::explore::deliveries(&subject, args.times)
            .await
            .map_err(|e| match e {
                crate::explore::ExploreError::Divergence(_) => {
                    Failure::new(EXIT_INVALID, format!("{}: {e}", kind.name()))
                }
                other => Failure::new(EXIT_UNAVAILABLE, format!("{}: {other}", kind.name())),
            })?;
        reports.push(report);
    }
    // A consumer that promises effect-once and did not keep it is a
    // violation; the others show what they promise not to.
    let broken = reports
        .iter()
        .any(|r| r.effect_once && (r.effects != 1 || r.state != "done"));
    let verdict = if broken {
        Verdict::Invalid
    } else {
        Verdict::Valid
    };
    if args.json {
        let value = serde_json::json!({
            "server": server.describe(),
            "times": args.times,
            "consumers": reports,
            "verdict": verdict,
        });
        println!("{value}");
    } else {
        println!(
            "ackgap deliveries: one job delivered {} times, a crash in the ack gap before every ack but the last; server {}\n",
            args.times,
            server.describe()
        );
        println!(
            "{:<14} {:<11} {:>10} {:>8}  {:<10} state",
            "consumer", "effect-once", "deliveries", "effects", "figure"
        );
        for r in &reports {
            println!(
                "{:<14} {:<11} {:>10} {:>8}  {:<10} {}",
                r.consumer,
                if r.effect_once { "promised" } else { "no" },
                r.deliveries,
                r.effects,
                format!("{}\u{2192}{}", r.deliveries, r.effects),
                r.state
            );
        }
        println!("\nverdict: {verdict}");
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
