//! `ackgap reduce HISTORY`: a wall-clock run's violations pinned down on
//! logical time. For each broken invariant, the first violations naming a
//! job are read off the history as explorer schedules
//! ([`ackgap::explore::reduce`]), run on a fresh queue, shrunk, and run
//! again to count how often the replay breaks the same invariant; each
//! prints the exact `replay:` line beside the run's `rerun:` line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ackgap::check;
use ackgap::explore::reduce::{reduce, NotReduced, Reduced};

use ackgap::explore::line::Rerun;
use ackgap::history::Event;
use ackgap::server::{Persistence, ServerSpec};

use super::explore::{check_queue, open_subject};
use ackgap::explore::OwnedServer;

use super::{connect, stop, Exit, ExitError, ServerArgs};

/// The arguments of `ackgap reduce`.
#[derive(Debug, clap::Args)]
pub(super) struct ReduceArgs {
    /// The history (JSON lines, as `ackgap chaos` writes it). The run's
    /// summary beside it (`chaos-SEED.json`) gives the queue under test,
    /// the consumer, the lease and the persistence (over `--persistence`);
    /// the options below override it.
    history: PathBuf,
    #[command(flatten)]
    server: ServerArgs,
    /// The queue under test (default: the summary's).
    #[arg(long)]
    queue: Option<String>,
    /// The consumer (default: the summary's).
    #[arg(long)]
    consumer: Option<String>,
    /// The lease length the run used, in ms (default: the summary's).
    #[arg(long)]
    lease_ms: Option<u64>,
    /// Only the violations of this invariant.
    #[arg(long)]
    invariant: Option<String>,
    /// Violations tried per invariant, the first ones that name a job,
    /// until one is reduced.
    #[arg(long, default_value_t = 3)]
    tries: usize,
    /// Replays the shrinker may run for one violation.
    #[arg(long, default_value_t = 300)]
    shrink_runs: usize,
    /// Runs of each shrunk replay, counted in its line ("broke it in K of
    /// N runs").
    #[arg(long, default_value_t = 10)]
    confirm: usize,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap-reduce")]
    queue_name: String,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    json: bool,
}

/// What the summary beside a chaos history says of its run.
#[derive(Debug, Default)]
struct RunOf {
    queue: Option<String>,
    consumer: Option<String>,
    lease_ms: Option<u64>,
    persistence: Option<Persistence>,
    rerun: Option<String>,
}

/// Reads `chaos-SEED.json` beside `history` (`chaos-SEED.jsonl`); nothing
/// when there is none.
fn summary_of(history: &Path) -> Result<RunOf, ExitError> {
    let path = history.with_extension("json");
    if path == history || !path.exists() {
        return Ok(RunOf::default());
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ExitError::new(Exit::Usage, format!("{}: {e}", path.display())))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        ExitError::new(
            Exit::Usage,
            format!("{}: not a chaos run's summary: {e}", path.display()),
        )
    })?;
    let config = &value["config"];
    Ok(RunOf {
        queue: config["queue"].as_str().map(str::to_owned),
        consumer: config["consumer"].as_str().map(str::to_owned),
        lease_ms: config["lease_ms"].as_u64(),
        persistence: value["persistence"].as_str().and_then(|p| p.parse().ok()),
        rerun: value["replay"].as_str().map(str::to_owned),
    })
}

/// The queue, consumer and lease of the run: the flags, else the summary.
fn run_settings(args: &ReduceArgs, of: &RunOf) -> Result<(String, String, u64), ExitError> {
    let missing = |what: &str, flag: &str| {
        ExitError::new(
            Exit::Usage,
            format!(
                "{}: no summary beside it says the {what}: give {flag}",
                args.history.display()
            ),
        )
    };
    let queue = args
        .queue
        .clone()
        .or(of.queue.clone())
        .ok_or_else(|| missing("queue", "--queue"))?;
    let consumer = args
        .consumer
        .clone()
        .or(of.consumer.clone())
        .unwrap_or_else(|| "marker".into());
    let lease_ms = args
        .lease_ms
        .or(of.lease_ms)
        .ok_or_else(|| missing("lease", "--lease-ms"))?;
    check_queue(&queue)?;
    if let Some(inv) = &args.invariant {
        if check::judges(inv).is_none() {
            return Err(ExitError::new(
                Exit::Usage,
                format!("--invariant: no invariant {inv:?}"),
            ));
        }
    }
    super::check_queue_name(&args.queue_name)?;
    Ok((queue, consumer, lease_ms))
}

/// Each broken invariant's first `tries` violations naming a job (of
/// `invariant` alone when given).
fn chosen<'a>(
    reports: &'a [check::Report],
    invariant: Option<&str>,
    tries: usize,
) -> BTreeMap<&'static str, Vec<&'a check::Violation>> {
    let mut chosen: BTreeMap<&'static str, Vec<&check::Violation>> = BTreeMap::new();
    for r in reports {
        if invariant.is_some_and(|i| i != r.invariant) {
            continue;
        }
        for v in r.violations.iter().filter(|v| v.job.is_some()).take(tries) {
            chosen.entry(r.invariant).or_default().push(v);
        }
    }
    chosen
}

/// Reads the history, reduces its violations, prints one line each. Exits
/// 1 when a violation was pinned down (the finding stands, exactly), 2
/// when none could be, 0 when the history had none to reduce.
pub(super) async fn run(args: ReduceArgs) -> Result<Exit, ExitError> {
    let events =
        ackgap::history::read_file(&args.history).map_err(|e| ExitError::new(Exit::Usage, e))?;
    if events.is_empty() {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "{}: no event: an empty file is not a history",
                args.history.display()
            ),
        ));
    }
    let of = summary_of(&args.history)?;
    let (queue_spec, consumer, lease_ms) = run_settings(&args, &of)?;
    let reports = check::check_all(&events);
    let chosen = chosen(&reports, args.invariant.as_deref(), args.tries);
    if chosen.is_empty() {
        outln!(
            "{}: no violation naming a job{}: nothing to reduce",
            args.history.display(),
            args.invariant
                .as_deref()
                .map(|i| format!(" of {i}"))
                .unwrap_or_default()
        );
        return Ok(Exit::Valid);
    }
    let settings = Settings {
        queue: queue_spec,
        consumer,
        lease_ms,
        shrink_runs: args.shrink_runs,
        confirm: args.confirm,
        queue_name: args.queue_name.clone(),
        quiet: args.json,
        budget: None,
    };
    // The run's persistence (its summary's), so that a kill or a power
    // loss read off the history keeps what it kept there.
    let persistence = of.persistence.unwrap_or(args.server.persistence);
    let rerun = super::rerun(&args.server.server, persistence, Some(Persistence::None));
    let server = (&args.server.server, persistence, rerun);
    let (reduced, not) = reduce_events(server, &events, &chosen, &settings).await?;
    print(
        &args.history,
        args.json,
        of.rerun.as_deref(),
        &reduced,
        &not,
    );
    Ok(if reduced.is_empty() {
        Exit::Unknown
    } else {
        Exit::Invalid
    })
}

/// How the violations are reduced, and on which queue.
struct Settings {
    queue: String,
    consumer: String,
    lease_ms: u64,
    shrink_runs: usize,
    confirm: usize,
    queue_name: String,
    quiet: bool,
    /// Past it, the invariants not yet tried are left, and said (chaos's
    /// own reduction; `ackgap reduce` has none).
    budget: Option<std::time::Duration>,
}

/// Starts a server of `spec` (for the explorers: its clock ackgap's),
/// opens the queue under test on it, and reduces each invariant's chosen
/// violations until one is pinned down: the reductions, and for each
/// invariant none of whose violations was, why the last one was not.
async fn reduce_events(
    (spec, persistence, rerun): (&ServerSpec, Persistence, Rerun),
    events: &[Event],
    chosen: &BTreeMap<&'static str, Vec<&check::Violation>>,
    settings: &Settings,
) -> Result<(Vec<Reduced>, Vec<NotReduced>), ExitError> {
    let server = ackgap::explore::reduce::start_server(spec, persistence, events).await?;
    let queue = connect(&server, &settings.queue_name).await?;
    let subject = open_subject(&settings.queue, &settings.consumer, &queue, &server)
        .await?
        .with_rerun(rerun);
    // A kill or a power loss is a step on a server lent to the subject.
    let (kill, power_loss) = ackgap::explore::reduce::server_faults(events);
    let (server, owned) = match kill || power_loss {
        true => (None, Some(OwnedServer::new(server, persistence))),
        false => (Some(server), None),
    };
    let subject = subject.with_server(owned.clone());
    let mut reduced: Vec<Reduced> = Vec::new();
    let mut not: Vec<NotReduced> = Vec::new();
    let started = std::time::Instant::now();
    for (invariant, violations) in chosen {
        if let Some(budget) = settings.budget.filter(|b| started.elapsed() > *b) {
            not.push(NotReduced {
                invariant,
                job: violations.first().and_then(|v| v.job.clone()),
                why: vec![format!(
                    "not tried: the reduction's {} s had run out (`ackgap reduce HISTORY` tries it)",
                    budget.as_secs()
                )],
            });
            continue;
        }
        if !settings.quiet {
            errln!(
                "reduce: {invariant}: {} violation(s) to try",
                violations.len()
            );
        }
        let mut last = None;
        for v in violations {
            let (runs, confirm) = (settings.shrink_runs, settings.confirm);
            let outcome = reduce(&subject, events, v, settings.lease_ms, runs, confirm)
                .await
                .map_err(|e| ExitError::explore("the reduction stopped", &e))?;
            match outcome {
                Ok(r) => {
                    reduced.push(r);
                    last = None;
                    break;
                }
                Err(n) => last = Some(n),
            }
        }
        not.extend(last);
    }
    drop(subject);
    drop(queue);
    let server = match (server, owned) {
        (Some(server), _) => server,
        (None, Some(owned)) => owned
            .into_server()
            .map_err(|_| ExitError::new(Exit::Internal, "the reduction still holds its server"))?,
        (None, None) => unreachable!("the server is held or lent"),
    };
    stop(server).await?;
    Ok((reduced, not))
}

/// How long chaos's own reduction may start new invariants for: a kill
/// step restarts the server, and a queue's replays may take a second
/// each, so a run that broke many invariants would otherwise double its
/// time. `ackgap reduce` has no such bound.
const AFTER_CHAOS_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// After a chaos run that broke an invariant: its history's violations
/// reduced on a process server of ours (the run's own kind when it was a
/// single process or container), each printed with its `replay:` line
/// (nothing under `json`: the value gains `reduced` and `not_reduced`).
/// A reduction that stops is said (the run's verdict stays as it is) and
/// gives `{"error": …}`.
pub(super) async fn after_chaos(
    server: (&ServerSpec, Persistence),
    history: &Path,
    run: (&str, &str, u64),
    json: bool,
) -> serde_json::Value {
    reduce_run(server, history, run, json)
        .await
        .unwrap_or_else(|e| {
            let e = e.message;
            errln!(
                "ackgap: the reduction stopped: {e}; `ackgap reduce {}` tries again",
                history.display()
            );
            serde_json::json!({ "error": e })
        })
}

/// [`after_chaos`], its errors returned.
async fn reduce_run(
    (spec, persistence): (&ServerSpec, Persistence),
    history: &Path,
    (queue, consumer, lease_ms): (&str, &str, u64),
    json: bool,
) -> Result<serde_json::Value, ExitError> {
    let events =
        ackgap::history::read_file(history).map_err(|e| ExitError::new(Exit::Internal, e))?;
    let reports = check::check_all(&events);
    let chosen = chosen(&reports, None, 2);
    if chosen.is_empty() {
        return Ok(serde_json::json!({"reduced": [], "not_reduced": []}));
    }
    let spec = match spec {
        ServerSpec::Process(_) | ServerSpec::Container => spec.clone(),
        _ => ServerSpec::Process(Default::default()),
    };
    let rerun = super::rerun(&spec, persistence, Some(Persistence::None));
    let settings = Settings {
        queue: queue.to_owned(),
        consumer: consumer.to_owned(),
        lease_ms,
        shrink_runs: 100,
        confirm: 10,
        queue_name: "ackgap-reduce".into(),
        quiet: json,
        budget: Some(AFTER_CHAOS_BUDGET),
    };
    let (reduced, not) =
        reduce_events((&spec, persistence, rerun), &events, &chosen, &settings).await?;
    if !json {
        outln!();
        for r in &reduced {
            outln!("{}", r.describe());
        }
        for n in &not {
            outln!("{n}");
        }
        for r in &reduced {
            outln!("replay: {}", r.shrunk.report.replay_line_command());
        }
    }
    Ok(json_of(&reduced, &not))
}

/// The reductions as JSON: `reduced` (each with its replay line and
/// counts) and `not_reduced` (each with why).
fn json_of(reduced: &[Reduced], not: &[NotReduced]) -> serde_json::Value {
    serde_json::json!({
        "reduced": reduced.iter().map(|r| serde_json::json!({
            "invariant": r.invariant,
            "job": r.job,
            "order": r.extraction.order,
            "extracted": r.extraction.schedule.to_string(),
            "extracted_steps": r.extraction.schedule.len(),
            "steps": r.shrunk.line().schedule.len(),
            "replay": r.shrunk.report.replay_line_command(),
            "reproduced": r.reproduced,
            "runs": r.confirm,
        })).collect::<Vec<_>>(),
        "not_reduced": not.iter().map(|n| serde_json::json!({
            "invariant": n.invariant, "job": n.job, "why": n.why,
        })).collect::<Vec<_>>(),
    })
}

/// Prints the reductions (or one JSON object): each pinned violation's
/// schedule and counterexample, the ones not reduced and why, then the
/// `rerun:` line and one `replay:` line each.
fn print(history: &Path, json: bool, rerun: Option<&str>, reduced: &[Reduced], not: &[NotReduced]) {
    if json {
        let mut value = json_of(reduced, not);
        value["history"] = history.display().to_string().into();
        value["rerun"] = rerun.into();
        outln!("{value}");
        return;
    }
    for r in reduced {
        outln!("{}", r.describe());
        outln!("  read off the history: {}", r.extraction.schedule);
        out!("{}", r.shrunk.text());
    }
    for n in not {
        outln!("{n}");
    }
    if let Some(rerun) = rerun {
        outln!("rerun: {rerun}");
    }
    for r in reduced {
        outln!("replay: {}", r.shrunk.report.replay_line_command());
    }
}
