//! `ackgap deliveries`: the replay figure, one job delivered N times to a
//! consumer, deliveries against effects.

use ackgap::check::Verdict;
use ackgap::consumer::Kind;
use ackgap::explore::{self, DeliveriesReport};
use ackgap::server::Server;

use super::explore::subject;
use super::{connect, start_server, stop, Exit, ExitError, ServerArgs};

/// The arguments of `ackgap deliveries`.
#[derive(Debug, clap::Args)]
pub(super) struct DeliveriesArgs {
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

/// Delivers one job N times to each consumer asked for, and prints
/// deliveries against effects.
pub(super) async fn run(args: DeliveriesArgs) -> Result<Exit, ExitError> {
    let kinds: Vec<Kind> = if args.consumer == "all" {
        Kind::ALL.to_vec()
    } else {
        vec![args
            .consumer
            .parse()
            .map_err(|e: String| ExitError::new(Exit::Usage, format!("{e}, or all")))?]
    };
    super::check_queue_name(&args.queue_name)?;
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let mut reports = Vec::new();
    for kind in kinds {
        let subject = subject("reference", kind.name(), &queue)?;
        let report = explore::deliveries(&subject, args.times)
            .await
            .map_err(|e| ExitError::new(Exit::from(&e), format!("{}: {e}", kind.name())))?;
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
        outln!("{value}");
    } else {
        print_table(&args, &reports, &server);
        outln!("\nverdict: {verdict}");
    }
    drop(queue);
    stop(server).await?;
    Ok(verdict.into())
}

/// The table: one line per consumer, its deliveries against its effects.
fn print_table(args: &DeliveriesArgs, reports: &[DeliveriesReport], server: &Server) {
    outln!(
        "ackgap deliveries: one job delivered {} times, a crash in the ack gap before every ack but the last; server {}\n",
        args.times,
        server.describe()
    );
    outln!(
        "{:<14} {:<11} {:>10} {:>8}  {:<10} state",
        "consumer",
        "effect-once",
        "deliveries",
        "effects",
        "figure"
    );
    for r in reports {
        outln!(
            "{:<14} {:<11} {:>10} {:>8}  {:<10} {}",
            r.consumer,
            if r.effect_once { "promised" } else { "no" },
            r.deliveries,
            r.effects,
            format!("{}\u{2192}{}", r.deliveries, r.effects),
            r.state
        );
    }
}
