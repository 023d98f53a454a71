//! `ackgap run`: the default campaign (exhaust, walks of every consumer,
//! the smoke scenario) and the mutation score, one verdict table.

use std::path::{Path, PathBuf};

use super::envelope::{BatteryEnvelope, PhaseJson, RunEnvelope, RunScore, ScoreJson};
use super::progress::{Progress, ShowWalks};
use super::{artifacts, connect, start_server, stop, Exit, ExitError, ServerArgs};
use ackgap::campaign::{self, CampaignConfig, SmokeConfig};
use ackgap::check::Verdict;
use ackgap::explore::{Seeds, Shard};
use ackgap::mutants::{self, Budget};
use ackgap::server::Server;

/// The arguments of `ackgap run`.
#[derive(Debug, clap::Args)]
pub(super) struct RunArgs {
    #[command(flatten)]
    pub(super) app: super::AppArg,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    require: super::RequireExercised,
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
    #[arg(long, conflicts_with = "queue")]
    history: Option<PathBuf>,
    /// Replace the file `--history` names if it exists.
    #[arg(long, requires = "history")]
    force: bool,
    /// Random walks per consumer: seeds SEED .. SEED+SEEDS-1.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=super::bounds::SEEDS_MAX), conflicts_with = "queue")]
    seeds: u64,
    /// Random steps per walk (healing steps come on top).
    #[arg(long, default_value_t = 100, value_parser = super::count::<1, { super::bounds::STEPS_MAX }>, conflicts_with = "queue")]
    steps: usize,
    /// Walks in flight at once, each on a queue of its own (QUEUE_NAME,
    /// QUEUE_NAME-1, ...) and its own connection; the report is the same
    /// for every N. Default: the number of cores.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=super::bounds::JOBS_MAX), conflicts_with = "queue")]
    jobs: Option<u64>,
    /// Walk only shard K of N of each consumer's seeds (the K-th and every
    /// N-th after it); the exhaustive search and the smoke scenario run in
    /// every shard, the mutation score in shard 1. `ackgap merge` combines
    /// the N shards' `--json` reports into the whole run's.
    #[arg(long, value_name = "K/N", conflicts_with = "queue")]
    shard: Option<Shard>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the verdict table as JUnit XML to FILE: a test suite per
    /// phase, a test case per invariant. An existing FILE is refused.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Run the whole battery on this queue instead of the default
    /// campaign: a built-in name (reference, lmove, rpop, streams,
    /// apalis), then an adapter the binary carries (celery, rq, dramatiq,
    /// arq, bullmq, sidekiq, lmove-python: run in the current Python
    /// environment, with its installed library), or exec:COMMAND. Exhaustive search where the queue takes logical
    /// time, the seeded walks (each broken invariant shrunk), chaos in
    /// each fault group the server allows; one verdict table, one exit
    /// code, and a findings report (Markdown and HTML). The battery's
    /// budget sets its walks and steps: --seeds, --steps, --jobs,
    /// --shard and --history are the default campaign's, and
    /// refused beside it.
    #[arg(long)]
    pub(super) queue: Option<String>,
    /// With --queue NAME of an adapter the binary carries: run it in its
    /// pinned venv (the one ci/install-adapters builds) instead of the
    /// current Python environment.
    #[arg(long, requires = "queue")]
    isolated: bool,
    /// With --queue: ci (a minute or two) or research (much longer).
    #[arg(long, default_value = "ci", requires = "queue")]
    budget: ackgap::campaign::battery::Budget,
    /// With --queue: where to write the findings report (Markdown; the
    /// HTML goes beside it with the extension .html). Default
    /// target/ackgap/findings/QUEUE.md.
    #[arg(long, value_name = "FILE", requires = "queue")]
    findings: Option<PathBuf>,
}

/// `ackgap run --queue Q`: the battery and its findings report.
async fn run_battery(args: RunArgs, spec: String) -> Result<Exit, ExitError> {
    use ackgap::campaign::battery;
    super::explore::check_queue(&spec)?;
    super::check_queue_name(&args.queue_name)?;
    if let Some(path) = &args.junit {
        super::junit::check_path(path)?;
    }
    let shipped = shipped_adapter(&spec, args.isolated)?;
    // Isolated, the pinned copy's command is the queue every phase opens
    // (and its replay lines name); else the name, which each opening
    // resolves in the current environment.
    let opened = match (&shipped, args.isolated) {
        (Some(ready), true) => format!("exec:{}", ready.command),
        _ => spec.clone(),
    };
    let mut args = args;
    let mut config = battery::BatteryConfig::new(&opened, args.seed, args.budget);
    // The battery's chaos kills the server: unless --persistence was given,
    // it keeps chaos's default (always), so the `server` column judges the
    // queue and not a server that keeps nothing on disk.
    let asked = std::env::args().any(|a| a == "--persistence" || a.starts_with("--persistence="));
    if !asked {
        args.server.persistence = config.persistence;
    }
    config.persistence = args.server.persistence;
    let mut server = start_server(&args.server.server, args.server.persistence).await?;
    let queue = connect(&server, &args.queue_name).await?;
    // The run's directory, once the server answered: the adapters' stderr.
    let dir = artifacts::run_dir("runs", args.seed, &spec)?;
    super::log_adapter_in(&dir);
    let adapter = ackgap::adapter::open(&opened, &queue, &server.url()).await?;
    let rerun = args.server.rerun();
    if !args.json {
        outln!(
            "ackgap run --queue {spec}: budget {}, seed {}, server {}",
            args.budget,
            args.seed,
            server.describe()
        );
        match ackgap::adapter::stderr_log() {
            Some(log) if opened.starts_with("exec:") || shipped.is_some() => {
                outln!("the adapter's stderr: {}\n", log.display())
            }
            _ => outln!(),
        }
    }
    let report = battery::battery(
        &mut server,
        &args.server.server,
        adapter,
        config,
        rerun.clone(),
    )
    .await
    .map_err(|e| ExitError::new(Exit::of_campaign(&e), format!("the battery stopped: {e:#}")))?;
    let library = shipped.and_then(|s| s.library);
    let (md_path, replay) =
        write_findings(&report, &spec, library, &server, args.findings.clone())?;
    if let Some(path) = &args.junit {
        super::junit::write(path, &super::junit::battery(&report))?;
    }
    let mut envelope = BatteryEnvelope::of(&report)?;
    envelope.server = server.describe();
    envelope.findings = md_path.display().to_string();
    envelope.rerun = rerun;
    envelope.replay = replay;
    if args.json {
        outln!("{}", serde_json::to_value(&envelope)?);
    } else {
        print_campaign(&envelope.table(), report.elapsed_ms as f64 / 1000.0);
        if !report.durability.is_empty() {
            outln!("\ndurability matrix (judged where Valkey documents that acknowledged writes survive the fault):");
            for c in &report.durability {
                outln!(
                    "  {:<38} {:<8} {:<8} fired {:>2}, lost {:>3}  {}",
                    c.label,
                    if c.judged { "judged" } else { "reported" },
                    c.verdict.to_string(),
                    c.fired,
                    c.lost,
                    c.rerun
                );
            }
        }
        print_skipped_and_app(&report);
        outln!("findings: {} (and .html)", md_path.display());
    }
    drop(queue);
    stop(server).await?;
    let unexercised = unexercised(&envelope.invariants, &envelope.phases);
    Ok(args.require.apply(report.verdict, &unexercised))
}

/// The battery's phases not run, and the user's app (`--app`) the adapter
/// ran with: its libraries, the settings kept and those overridden.
fn print_skipped_and_app(report: &ackgap::campaign::battery::BatteryReport) {
    for s in &report.skipped {
        outln!("not run: {s}");
    }
    for line in report.app.iter().flat_map(ackgap::adapter::App::lines) {
        outln!("{line}");
    }
}

/// Writes the findings report of `report` (Markdown and HTML) to
/// `findings` or `target/ackgap/findings/QUEUE.md`: its path, and the
/// command that ran it (the replay). `library`: the versions a shipped
/// adapter imported, else the adapter list's.
fn write_findings(
    report: &ackgap::campaign::battery::BatteryReport,
    spec: &str,
    library: Option<String>,
    server: &Server,
    findings: Option<PathBuf>,
) -> Result<(PathBuf, String), ExitError> {
    use ackgap::campaign::findings;
    let command = std::iter::once("ackgap".to_owned())
        .chain(std::env::args().skip(1))
        .map(|a| ackgap::explore::line::shell_word(&a))
        .collect::<Vec<_>>()
        .join(" ");
    // Where adapters/ and docs/ are read from, and the page links to.
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut head = findings::Head {
        command,
        version: env!("CARGO_PKG_VERSION").into(),
        library: library.or_else(|| findings::library_of(&cwd, spec)),
        promises: findings::promises_of(&cwd, spec),
        adapter: findings::adapter_dir_of(&cwd, spec),
        date: today(),
        server: server.describe(),
        to_root: String::new(),
        claims: findings::claims_of(&cwd, spec),
        repro: findings::repro_of(&cwd, spec),
    };
    let md_path = findings.unwrap_or_else(|| {
        let slug: String = spec
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        PathBuf::from("target/ackgap/findings").join(format!("{slug}.md"))
    });
    head.to_root = findings::link_to_root(&cwd, &md_path);
    let write = || -> std::io::Result<()> {
        if let Some(dir) = md_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&md_path, findings::markdown(report, &head))?;
        std::fs::write(
            md_path.with_extension("html"),
            findings::html(report, &head),
        )
    };
    write().map_err(|e| {
        ExitError::new(
            Exit::CantCreate,
            format!(
                "cannot write the findings report {}: {e}",
                md_path.display()
            ),
        )
    })?;
    Ok((md_path, head.command))
}

/// The adapter the binary carries that `spec` names (not a built-in one),
/// written out and ready (`--isolated`: its pinned venv), or None; a
/// library the current environment lacks is an error naming it (78).
/// `--isolated` beside any other queue is a usage error.
fn shipped_adapter(
    spec: &str,
    isolated: bool,
) -> Result<Option<ackgap::adapter::shipped::Shipped>, ExitError> {
    use ackgap::adapter::{shipped, OpenError, NAMES};
    if NAMES.contains(&spec) || !shipped::is_shipped(spec) {
        if isolated {
            return Err(ExitError::new(
                Exit::Usage,
                format!(
                    "--isolated: {spec} is not an adapter the binary carries ({})",
                    shipped::NAMES.join(", ")
                ),
            ));
        }
        return Ok(None);
    }
    shipped::prepare(spec, isolated)
        .map(Some)
        .map_err(|e| OpenError::from(e).into())
}

/// Today's date, UTC, as YYYY-MM-DD (from the system clock: a report's
/// date, never an input to a run).
fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Runs the campaign, then the fast mutation score, and prints both.
pub(super) async fn run(args: RunArgs) -> Result<Exit, ExitError> {
    if let Some(spec) = args.queue.clone() {
        return run_battery(args, spec).await;
    }
    let started = std::time::Instant::now();
    let mut config = CampaignConfig::new(args.seed, args.seeds);
    config.steps = args.steps;
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    config.shard = shard;
    let walks_each = Seeds::range(args.seed, args.seeds)
        .ok_or_else(|| {
            ExitError::new(
                Exit::Usage,
                format!(
                    "--seed {} --seeds {} runs past u64::MAX",
                    args.seed, args.seeds
                ),
            )
        })?
        .shard(shard)
        .len();
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
    let names: Vec<String> = (0..jobs.min(walks_each.max(1) as usize))
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
    progress.start(walks_each * ackgap::consumer::Kind::ALL.len() as u64);
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
    // The campaign's lines are bare (it knows no server): each gets the
    // server's environment and flags once, here, so that every consumer
    // of the report (the table, --json, --junit, `merge`) pastes it as is.
    let mut report = report;
    for phase in &mut report.phases {
        for line in &mut phase.failures {
            *line = rerun.command(line);
        }
    }
    if let Some(path) = &args.junit {
        super::junit::write(path, &super::junit::run(&report))?;
    }
    let mut replay = rerun.command(&format!(
        "ackgap run --seed {} --seeds {} --steps {}",
        args.seed, args.seeds, args.steps,
    ));
    if args.queue_name != "ackgap" {
        replay.push_str(&format!(
            " --queue-name {}",
            ackgap::explore::line::shell_word(&args.queue_name)
        ));
    }
    progress.finish();
    // The mutation score: every run shows the checker can still fail (a
    // sharded run's first shard runs it).
    let budget = Budget::fast();
    let mutation = if shard.index == 1 {
        let mut progress = Progress::of("mutants", "states and walks", "survived", args.json);
        progress.start(mutants::score_mutants(&budget).len() as u64);
        let score = mutants::score_jobs(&server.client(), &budget, jobs, |kill| {
            progress.done(kill.states as u64 + kill.seeds, !kill.killed);
        })
        .await;
        progress.finish();
        Some(score)
    } else {
        None
    };
    let mut envelope = RunEnvelope::of(&report)?;
    envelope.shard = args.shard;
    envelope.server = server.describe();
    envelope.replay = replay;
    envelope.rerun = rerun;
    envelope.dir = artifacts::dir_of(&history).display().to_string();
    envelope.mutation_score = mutation.map(|score| match score {
        Ok(score) => RunScore::Measured(ScoreJson::from(&score)),
        Err(e) => RunScore::NotMeasured {
            error: e.to_string(),
        },
    });
    let wall = started.elapsed().as_secs_f64();
    envelope.wall_ms = wall * 1000.0;
    if args.json {
        outln!("{}", serde_json::to_value(&envelope)?);
    } else {
        print_campaign(&envelope.table(), wall);
    }
    drop(queues);
    stop(server).await?;
    let unexercised = unexercised(&envelope.invariants, &envelope.phases);
    Ok(args.require.apply(report.verdict, &unexercised))
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

/// The one summary line `ackgap run` prints for the `mutation_score` of
/// its JSON report ([`mutants::score`] with [`Budget::fast`]); none in a
/// shard that did not run it.
fn score_line(score: Option<&RunScore>) -> Option<String> {
    let score = match score? {
        RunScore::NotMeasured { error } => {
            return Some(format!("mutation score: not measured: {error}"))
        }
        RunScore::Measured(score) => score,
    };
    let secs = score.elapsed_ms / 1000.0;
    Some(if score.survived.is_empty() {
        format!(
            "mutation score: {}/{} mutants killed in {secs:.1} s (fast subset: exhaustive search only, consumer mutants not run; `ackgap mutants` runs them all)",
            score.killed, score.total
        )
    } else {
        format!(
            "mutation score: {}/{} mutants killed in {secs:.1} s: SURVIVED {} -- the checker missed a broken queue; run `ackgap mutants`",
            score.killed,
            score.total,
            score.survived.join(", ")
        )
    })
}

/// The invariants of a campaign's report (its rows `invariants` and
/// columns `phases`) that ran in some phase and were exercised in none.
pub(super) fn unexercised<'a>(invariants: &'a [String], phases: &[PhaseJson]) -> Vec<&'a str> {
    invariants
        .iter()
        .map(String::as_str)
        .filter(|inv| {
            let cells: Vec<&ackgap::campaign::Cell> = phases
                .iter()
                .filter_map(|p| p.cells.get(*inv))
                .filter(|c| c.runs > 0)
                .collect();
            !cells.is_empty() && cells.iter().all(|c| c.exercised() == Some(0))
        })
        .collect()
}

/// What [`print_campaign`] prints: a campaign's verdict table, from its
/// `--json` report ([`RunEnvelope`], [`BatteryEnvelope`]).
pub(super) struct Table<'a> {
    /// The rows.
    invariants: &'a [String],
    /// The columns.
    phases: &'a [PhaseJson],
    /// The worst verdict.
    verdict: Verdict,
    /// The campaign's time (ms).
    elapsed_ms: u64,
    /// The smoke scenario's history, if written.
    smoke_history: Option<&'a str>,
    /// The command that runs it again.
    replay: &'a str,
    /// The mutation score, where measured.
    score: Option<&'a RunScore>,
}

impl RunEnvelope {
    /// The report's verdict table.
    pub(super) fn table(&self) -> Table<'_> {
        Table {
            invariants: &self.invariants,
            phases: &self.phases,
            verdict: self.verdict,
            elapsed_ms: self.elapsed_ms,
            smoke_history: self.smoke_history(),
            replay: &self.replay,
            score: self.mutation_score.as_ref(),
        }
    }
}

impl BatteryEnvelope {
    /// The battery's verdict table.
    fn table(&self) -> Table<'_> {
        Table {
            invariants: &self.invariants,
            phases: &self.phases,
            verdict: self.verdict,
            elapsed_ms: self.elapsed_ms,
            smoke_history: None,
            replay: &self.replay,
            score: None,
        }
    }
}

/// How a phase's printed failures are labelled: `replay` for an explorer
/// on logical time (each run replays exactly), `rerun` for a wall-clock
/// sample (chaos: the same seed, what it finds may differ).
fn rerun_label(phase: &PhaseJson) -> &'static str {
    if phase.exact {
        "replay"
    } else {
        "rerun"
    }
}

/// The default campaign's verdict table (rows: invariants; columns: the
/// phases), what each column ran, the verdict and the mutation score, from
/// the JSON report (`ackgap run --json`, or `ackgap merge` of its shards),
/// and the wall time `wall` s of the command.
pub(super) fn print_campaign(report: &Table<'_>, wall: f64) {
    let phases = report.phases;
    let cell_text = |p: &PhaseJson, inv: &str| p.cells.get(inv).map(|c| c.text_with_count());
    let mut widths: Vec<usize> = phases
        .iter()
        .map(|p| {
            report
                .invariants
                .iter()
                .map(|i| cell_text(p, i).map_or(1, |t| t.len()))
                .chain([p.name.len()])
                .max()
                .unwrap_or(1)
        })
        .collect();
    widths.iter_mut().for_each(|w| *w += 2);
    let mut header = format!("{:<18}", "invariant");
    for (p, w) in phases.iter().zip(&widths) {
        header.push_str(&format!("{:<w$}", p.name));
    }
    outln!("{}", header.trim_end());
    for inv in report.invariants {
        let mut row = format!("{inv:<18}");
        for (p, w) in phases.iter().zip(&widths) {
            let cell = cell_text(p, inv).unwrap_or_else(|| "-".into());
            row.push_str(&format!("{cell:<w$}"));
        }
        outln!("{}", row.trim_end());
    }
    outln!(
        "\n(n): the chances the runs gave the invariant to break; not exercised: none.\n(effect-once of a consumer that does not promise it is reported, not judged:\n the jobs whose effect was duplicated or lost are expected findings.)\n"
    );
    print_columns(phases);
    let verdict = ackgap::check::verdict_with(
        report.verdict,
        &unexercised(report.invariants, report.phases),
    );
    outln!(
        "verdict: {}  (campaign {:.1} s, wall time {wall:.1} s{}; smoke history {})",
        verdict,
        report.elapsed_ms as f64 / 1000.0,
        if report.score.is_none() {
            ""
        } else {
            " with the mutation score"
        },
        report.smoke_history.unwrap_or("not written")
    );
    outln!("rerun: {}", report.replay);
    if let Some(line) = score_line(report.score) {
        outln!("{line}");
    }
}

/// Each column's verdict, runs, steps, time and what ran, with its
/// failing runs' lines.
fn print_columns(phases: &[PhaseJson]) {
    let width = phases.iter().map(|p| p.name.len()).max().unwrap_or(0);
    for p in phases {
        let verdict = p.cells.values().map(|c| c.verdict).max();
        outln!(
            "{:<width$} {:<8} {} runs, {} steps in {:.1} s: {}",
            p.name,
            verdict.unwrap_or(Verdict::Unknown),
            p.runs,
            p.steps,
            p.elapsed_ms as f64 / 1000.0,
            p.what
        );
        for f in &p.failures {
            outln!("    {}: {f}", rerun_label(p));
        }
    }
    outln!();
}
