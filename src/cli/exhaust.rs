//! `ackgap exhaust`: the bounded exhaustive search, on the reference queue
//! (merged by the model's state, each new state checked against the model)
//! or any other (every path's history judged, merged by what the queue
//! reads back and the history told, each new state's run healed and judged
//! by every history checker).

use ackgap::check::Verdict;
use ackgap::explore;

use super::explore::{check_queue, open_subject};
use super::{connect, start_explorer_server, stop, Exit, ExitError, ServerArgs};

/// The arguments of `ackgap exhaust`.
#[derive(Debug, clap::Args)]
pub(super) struct ExhaustArgs {
    #[command(flatten)]
    pub(super) app: super::AppArg,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    require: super::RequireExercised,
    /// Jobs JOB-0 .. in play.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=8))]
    jobs: u8,
    /// Workers w0 ...
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=8))]
    workers: u8,
    /// The longest interleaving (steps).
    #[arg(long, default_value_t = 6, value_parser = super::count::<1, { super::bounds::DEPTH_MAX }>)]
    depth: usize,
    /// The queue under test: `reference` (searched on the model), or any
    /// other `--queue` name (`lmove`, `rpop`, `exec:COMMAND`, ...),
    /// searched on the queue itself.
    #[arg(long, default_value = "reference")]
    pub(super) queue: String,
    /// The consumer the workers run.
    #[arg(long, default_value = "marker")]
    consumer: ackgap::consumer::Kind,
    /// Search the model alone, without checking states against the server.
    #[arg(long)]
    model_only: bool,
    /// `max_attempts` of every job: deliveries allowed in all, retries
    /// counted.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=8))]
    max_attempts: u64,
    /// Stop with an error past this many states.
    #[arg(long, default_value_t = 5_000_000, value_parser = super::count::<1, { super::bounds::STATES_MAX }>)]
    states_max: usize,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap-exhaust")]
    queue_name: String,
    /// On the reference queue, also judge each new state's run, healed,
    /// with every history checker (another queue always is).
    #[arg(long)]
    judge: bool,
    /// Also try, at each state, two callers' calls sent together (a
    /// parallel step: `l0+l1`, `c0+l1`, `r+c0`) as the path's last step:
    /// each such path run and judged, never searched past (the order the
    /// server ran the two calls in is not the path's to choose). Finds a
    /// race whose harm the parallel step itself shows (`e0 l0+l1`: a
    /// non-atomic lease); `explore --parallel` finds the rest.
    #[arg(long)]
    parallel: bool,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

/// Searches every interleaving up to the depth, and prints the counts and
/// the first failure.
pub(super) async fn run(args: ExhaustArgs) -> Result<Exit, ExitError> {
    let started = std::time::Instant::now();
    let mut config = explore::ExhaustConfig::new(args.jobs, args.workers, args.depth);
    config.valkey = !args.model_only;
    config.states_max = args.states_max;
    config.judge = args.judge;
    config.max_attempts = args.max_attempts;
    config.keep_going = true;
    config.parallel = args.parallel;
    check_queue(&args.queue)?;
    if args.model_only && args.parallel {
        return Err(ExitError::new(
            Exit::Usage,
            "--parallel sends calls together to a server; --model-only has none",
        ));
    }
    if args.model_only && args.queue != "reference" {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "--model-only searches the model, which only the reference queue refines; \
                 --queue {} is searched on the queue itself",
                args.queue
            ),
        ));
    }
    super::check_queue_name(&args.queue_name)?;
    let (server, _) = start_explorer_server(&args.server.server, args.server.persistence).await?;
    let queue = match connect(&server, &args.queue_name).await {
        Ok(queue) => queue,
        Err(e) => {
            let _ = stop(server).await;
            return Err(e);
        }
    };
    let subject = match open_subject(&args.queue, &args.consumer.to_string(), &queue, &server).await
    {
        Ok(subject) => subject.with_rerun(args.server.rerun()),
        Err(e) => {
            drop(queue);
            let _ = stop(server).await;
            return Err(e);
        }
    };
    // The search reports nothing until it ends: a spinner with the time
    // it has taken, on a terminal.
    let spinner = super::progress::Progress::spinner(
        &format!(
            "searching every interleaving of {} jobs, {} workers to depth {}",
            args.jobs, args.workers, args.depth
        ),
        args.json,
    );
    let report = explore::exhaust(&subject, config).await;
    spinner.finish();
    let report = report.map_err(|e| ExitError::explore("the search stopped", &e))?;
    let verdict = if report.failure.is_some() {
        Verdict::Invalid
    } else {
        Verdict::Valid
    };
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["server"] = server.describe().into();
        value["verdict"] = serde_json::to_value(verdict).unwrap_or_default();
        outln!("{value}");
    } else {
        print_summary(
            &args,
            &report,
            &server.describe(),
            &subject,
            verdict,
            started,
        );
    }
    drop(queue);
    stop(server).await?;
    Ok(args.require.apply(verdict, &not_exercised(&report)))
}

/// The search's summary for people: the configuration, the counts, the
/// judged tallies, each invariant broken with its replay line, the verdict.
fn print_summary(
    args: &ExhaustArgs,
    report: &ackgap::explore::exhaust::ExhaustReport,
    server: &str,
    subject: &explore::Subject,
    verdict: Verdict,
    started: std::time::Instant,
) {
    let c = &report.config;
    outln!(
        "ackgap exhaust: queue {}, {} jobs, {} workers, depth {}, lease {} ms, max_attempts {}, consumer {}, {}",
        args.queue,
        c.jobs,
        c.workers,
        c.depth,
        c.lease_ms,
        c.max_attempts,
        args.consumer,
        how(&args.queue, c.valkey, server)
    );
    outln!(
        "states {}  transitions {}  merged {}  by depth {:?}{}",
        report.states,
        report.transitions,
        report.merged,
        report.states_by_depth,
        match report.paths_judged {
            0 => String::new(),
            n => format!("  paths judged {n}"),
        } + &match report.parallel_paths {
            0 => String::new(),
            n => format!("  ending in a parallel step {n}"),
        }
    );
    outln!(
        "model steps {} ({:.0}/s)  valkey steps {} ({:.0}/s)  in {:.2} s",
        report.model_steps,
        report.model_steps_per_s,
        report.valkey_steps,
        report.valkey_steps_per_s,
        report.elapsed_ms / 1000.0
    );
    if !report.judged.is_empty() {
        outln!("judged: {}", judged(report).join(", "));
    }
    // Each invariant broken, once, on the shortest path that broke it.
    for found in &report.findings {
        outln!("broke: {}", found.invariant);
        outln!("  failure: {}", found.failure);
        outln!(
            "  replay: {}",
            subject.rerun.command(&format!(
                "ackgap replay {}",
                explore::line::shell_word(&found.line)
            ))
        );
    }
    let missing = not_exercised(report);
    outln!(
        "verdict: {}  (wall time {:.2} s)",
        ackgap::check::verdict_with(verdict, &missing),
        started.elapsed().as_secs_f64()
    );
}

/// How the search judged, in words: on another queue than the reference,
/// every path; on the reference, each new state on the server, or the
/// model alone.
fn how(queue: &str, valkey: bool, server: &str) -> String {
    if queue != "reference" {
        format!(
            "every path's history judged, states merged by what the queue reads back and the history told, each new state's run healed and judged by every checker, on {server}"
        )
    } else if valkey {
        format!("each new state checked on {server}")
    } else {
        "model only".into()
    }
}

/// Each judged invariant's tally over the judged runs, in words.
fn judged(report: &ackgap::explore::exhaust::ExhaustReport) -> Vec<String> {
    report
        .judged
        .iter()
        .map(|(invariant, j)| {
            let t = &j.tally;
            let nothing = match t.not_exercised {
                0 => String::new(),
                n => format!(", {n} not exercising it"),
            };
            let chances = t
                .exercised
                .map_or(String::new(), |n| format!(", exercised {n}"));
            match t.verdict {
                _ if t.is_not_exercised() => {
                    format!("{invariant} not exercised (in {} runs)", t.runs)
                }
                Verdict::Valid => {
                    format!("{invariant} valid ({} runs{nothing}{chances})", t.runs)
                }
                Verdict::Invalid => {
                    format!("{invariant} INVALID {}/{}{nothing}", j.invalid, t.runs)
                }
                _ => format!("{invariant} unknown {}/{}{nothing}", j.unknown, t.runs),
            }
        })
        .collect()
}

/// The invariants no path of the search exercised.
fn not_exercised(report: &ackgap::explore::exhaust::ExhaustReport) -> Vec<&'static str> {
    report
        .judged
        .iter()
        .filter(|(_, j)| j.tally.is_not_exercised())
        .map(|(name, _)| *name)
        .collect()
}
