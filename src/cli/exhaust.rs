//! `ackgap exhaust`: the bounded exhaustive search on the reference queue.

use ackgap::check::Verdict;
use ackgap::explore;

use super::explore::subject;
use super::{connect, start_server, stop, Exit, ExitError, ServerArgs};

/// The arguments of `ackgap exhaust`.
#[derive(Debug, clap::Args)]
pub(super) struct ExhaustArgs {
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
    consumer: ackgap::consumer::Kind,
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

/// Searches every interleaving up to the depth, and prints the counts and
/// the first failure.
pub(super) async fn run(args: ExhaustArgs) -> Result<Exit, ExitError> {
    let started = std::time::Instant::now();
    let mut config = explore::ExhaustConfig::new(args.jobs, args.workers, args.depth);
    config.valkey = !args.model_only;
    config.states_max = args.states_max;
    super::check_queue_name(&args.queue_name)?;
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let subject = subject("reference", &args.consumer.to_string(), &queue)?;
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
        let c = &report.config;
        outln!(
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
        outln!(
            "states {}  transitions {}  merged {}  by depth {:?}",
            report.states,
            report.transitions,
            report.merged,
            report.states_by_depth
        );
        outln!(
            "model steps {} ({:.0}/s)  valkey steps {} ({:.0}/s)  in {:.2} s",
            report.model_steps,
            report.model_steps_per_s,
            report.valkey_steps,
            report.valkey_steps_per_s,
            report.elapsed_ms / 1000.0
        );
        if let Some(f) = &report.failure {
            outln!("failure: {f}");
        }
        outln!(
            "verdict: {verdict}  (wall time {:.2} s)",
            started.elapsed().as_secs_f64()
        );
    }
    drop(queue);
    stop(server).await?;
    Ok(verdict.into())
}
