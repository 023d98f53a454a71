//! `ackgap run`: the default campaign (exhaust, walks of every consumer,
//! the smoke scenario) and the mutation score, one verdict table.

use std::path::{Path, PathBuf};

use ackgap::campaign::{self, CampaignConfig, RunReport, SmokeConfig};
use ackgap::mutants::{self, Budget, MutantsError, MutationScore};
use ackgap::server::Server;

use super::progress::{Progress, ShowWalks};
use super::{artifacts, connect, start_server, stop, Exit, ExitError, Rerun, ServerArgs};

/// The arguments of `ackgap run`.
#[derive(Debug, clap::Args)]
pub(super) struct RunArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The seed every choice is drawn from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap")]
    queue_name: String,
    /// Where to write the smoke scenario's history; default
    /// run-SEED.jsonl in a new directory of this run,
    /// target/ackgap/runs/TIME-seedSEED/ (`target/ackgap/runs/latest` points
    /// at the newest). An existing FILE is refused unless --force.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Replace the file `--history` names if it exists.
    #[arg(long, requires = "history")]
    force: bool,
    /// Random walks per consumer: seeds SEED .. SEED+SEEDS-1.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// Random steps per walk (healing steps come on top).
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// Walks in flight at once, each on a queue of its own (QUEUE_NAME,
    /// QUEUE_NAME-1, ...) and its own connection; the report is the same
    /// for every N. Default: the number of cores.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    jobs: Option<u64>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the verdict table as JUnit XML to FILE: a test suite per
    /// phase, a test case per invariant. An existing FILE is refused.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

/// Runs the campaign, then the fast mutation score, and prints both.
pub(super) async fn run(args: RunArgs) -> Result<Exit, ExitError> {
    let started = std::time::Instant::now();
    let mut config = CampaignConfig::new(args.seed, args.seeds);
    config.steps = args.steps;
    // The order that leaves an earlier run's files alone: the arguments
    // (a history that cannot be written is known before any server
    // starts, and no file is touched), the server, then the files.
    let explicit = args.history.as_deref();
    let files: Vec<PathBuf> = explicit.into_iter().map(Path::to_path_buf).collect();
    artifacts::check_writable("runs", explicit, &files, args.force)?;
    if let Some(path) = &args.junit {
        super::junit::check_path(path)?;
    }
    let jobs = super::explore::jobs(args.jobs) as usize;
    let names: Vec<String> = (0..jobs.min(args.seeds as usize))
        .map(|job| ackgap::explore::parallel::job_queue_name(&args.queue_name, job))
        .collect();
    for name in &names {
        super::check_queue_name(name)?;
    }
    let server = start_server(&args.server.server, args.server.persistence).await?;
    let mut queues = Vec::new();
    for name in &names {
        queues.push(connect(&server, name).await?);
    }
    let history = match &args.history {
        Some(path) => path.clone(),
        None => artifacts::run_dir("runs", args.seed, "")?.join(format!("run-{}.jsonl", args.seed)),
    };
    if !args.json {
        print_plan(&args, &config, &server, &history);
    }
    let mut progress = Progress::new(args.json);
    progress.start(args.seeds * ackgap::consumer::Kind::ALL.len() as u64);
    let report = campaign::campaign_on(
        &queues,
        config,
        Some(history.clone()),
        &mut ShowWalks(&mut progress),
    )
    .await
    .map_err(|e| {
        ExitError::new(
            Exit::of_campaign(&e),
            format!("the campaign stopped: {e:#}"),
        )
    })?;
    let rerun = args.server.rerun();
    if let Some(path) = &args.junit {
        super::junit::write(path, &super::junit::run(&report, &rerun))?;
    }
    let replay = rerun.command(&format!(
        "ackgap run --seed {} --seeds {} --steps {}",
        args.seed, args.seeds, args.steps,
    ));
    progress.finish();
    // The mutation score: every run shows the checker can still fail.
    let budget = Budget::fast();
    let mut progress = Progress::of("mutants", "states and walks", "survived", args.json);
    progress.start(mutants::score_mutants(&budget).len() as u64);
    let mutation = mutants::score_jobs(&server.client(), &budget, jobs, |kill| {
        progress.done(kill.states as u64 + kill.seeds, !kill.killed);
    })
    .await;
    progress.finish();
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["server"] = server.describe().into();
        value["replay"] = replay.clone().into();
        value["dir"] = artifacts::dir_of(&history).display().to_string().into();
        value["mutation_score"] = match &mutation {
            Ok(score) => serde_json::to_value(score)?,
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        outln!("{value}");
    } else {
        print_campaign(&report, &replay, &rerun, started.elapsed().as_secs_f64());
        outln!("{}", score_line(&mutation));
    }
    drop(queues);
    stop(server).await?;
    Ok(report.verdict.into())
}

/// What the campaign is about to run, before it runs.
fn print_plan(args: &RunArgs, config: &CampaignConfig, server: &Server, history: &Path) {
    let smoke = SmokeConfig::from_seed(args.seed);
    outln!(
        "ackgap run: seed {}, server {}\n  exhaust: {} jobs, {} workers, depth {}, marker\n  walks: {} seeds of {} steps for each consumer\n  smoke: {} jobs, {} workers + 1 that crashes, lease {} ms, max_attempts {}, server clock\n  files: {}\n",
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
        smoke.max_attempts,
        artifacts::dir_of(history).display()
    );
}

/// The one summary line `ackgap run` prints for [`mutants::score`] with
/// [`Budget::fast`].
fn score_line(score: &Result<MutationScore, MutantsError>) -> String {
    match score {
        Ok(s) if s.survived.is_empty() => format!(
            "mutation score: {}/{} mutants killed in {:.1} s (fast subset: exhaustive search only, consumer mutants not run; `ackgap mutants` runs them all)",
            s.killed,
            s.total,
            s.elapsed_ms / 1000.0
        ),
        Ok(s) => format!(
            "mutation score: {}/{} mutants killed in {:.1} s: SURVIVED {} -- the checker missed a broken queue; run `ackgap mutants`",
            s.killed,
            s.total,
            s.elapsed_ms / 1000.0,
            s.survived.join(", ")
        ),
        Err(e) => format!("mutation score: not measured: {e}"),
    }
}

/// The default campaign's verdict table (rows: invariants; columns: the
/// phases), what each column ran, and the verdict.
fn print_campaign(report: &RunReport, replay: &str, rerun: &Rerun, wall: f64) {
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
    outln!("{}", header.trim_end());
    for inv in &report.invariants {
        let mut row = format!("{inv:<18}");
        for (p, w) in report.phases.iter().zip(&widths) {
            let cell = p.cells.get(inv).map_or("-".into(), |c| c.text());
            row.push_str(&format!("{cell:<w$}"));
        }
        outln!("{}", row.trim_end());
    }
    outln!(
        "\n(effect-once of a consumer that does not promise it is reported, not judged:\n the jobs whose effect was duplicated or lost are expected findings.)\n"
    );
    for p in &report.phases {
        outln!(
            "{:<14} {:<8} {} runs, {} steps in {:.1} s: {}",
            p.name,
            p.verdict(),
            p.runs,
            p.steps,
            p.elapsed_ms as f64 / 1000.0,
            p.what
        );
        for f in &p.failures {
            outln!("    reproduce: {}", rerun.command(f));
        }
    }
    outln!();
    outln!(
        "verdict: {}  (campaign {:.1} s, wall time {wall:.1} s with the mutation score; smoke history {})",
        report.verdict,
        report.elapsed_ms as f64 / 1000.0,
        report
            .smoke
            .history
            .as_ref()
            .map_or("not written".into(), |p| p.display().to_string())
    );
    outln!("reproduce: {replay}");
}
