//! `ackgap explore` (seeded random walks, the first failure shrunk) and
//! `ackgap replay LINE` (one replay line run again).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use ackgap::check::Verdict;
use ackgap::explore::{
    self, Line, OwnedServer, Schedule, Seeds, Shard, Step, Subject, SwarmConfig, WalkObserver,
    WalkReport,
};
use ackgap::fault::FaultKind;
use ackgap::queue::Queue;
use ackgap::server::{Instruments, Server, ServerSpec};

use super::progress::Progress;
use super::report::{ExploreConfig, ExploreSummary};
use super::{connect, print_invariants, start_explorer_server, stop, Exit, ExitError, ServerArgs};

/// `--queue-name`'s default.
const DEFAULT_QUEUE_NAME: &str = "ackgap-explore";

/// The arguments of `ackgap explore`.
#[derive(Debug, clap::Args)]
pub(super) struct ExploreArgs {
    #[command(flatten)]
    pub(super) app: super::AppArg,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    require: super::RequireExercised,
    /// The seed of the (first) walk: it chooses the configuration and every
    /// step.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Random steps per walk (healing steps come on top).
    #[arg(long, default_value_t = 100, value_parser = super::count::<1, { super::bounds::STEPS_MAX }>)]
    steps: usize,
    /// How many walks: seeds SEED .. SEED+SEEDS-1, on one server.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=super::bounds::SEEDS_MAX))]
    seeds: u64,
    /// Walks in flight at once, each on a queue of its own (QUEUE_NAME,
    /// QUEUE_NAME-1, ...) and its own connection to the same server; the
    /// walks are reported in seed order, the same for every N. Default:
    /// the number of cores.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=super::bounds::JOBS_MAX))]
    jobs: Option<u64>,
    /// Walk only shard K of N of the seeds (the K-th seed and every N-th
    /// after it), and report it as a shard: `ackgap merge` combines the N
    /// shards' `--json` reports into the report of the whole range.
    #[arg(long, value_name = "K/N", conflicts_with = "schedule")]
    shard: Option<Shard>,
    /// Run this schedule (as a failing walk prints it) instead of drawing
    /// steps; the seed still chooses the configuration.
    #[arg(long, conflicts_with_all = ["steps", "seeds", "jobs"])]
    schedule: Option<String>,
    /// The queue's name (its hash tag). On a cluster each job walks one
    /// queue per primary, QUEUE_NAME-K with the smallest K whose slot the
    /// primary serves, and seed S walks on primary S mod P.
    #[arg(long, default_value = DEFAULT_QUEUE_NAME)]
    queue_name: String,
    /// The queue under test: reference, lmove, rpop, streams, apalis (built
    /// with --features apalis), or exec:COMMAND (a
    /// child speaking the adapter protocol, docs/adapter-protocol.md).
    /// Only `reference` is compared with the model after every step; the
    /// others are judged by the history checkers.
    #[arg(long = "queue", default_value = "reference")]
    pub(super) queue: String,
    /// The consumer the workers run: naive, natural, marker,
    /// marker-before or marker-after.
    #[arg(long, default_value = "marker")]
    consumer: ackgap::consumer::Kind,
    /// How often, in percent, a walk's step is a parallel step: two
    /// workers' calls (or a worker's and the reaper's or the producer's)
    /// sent together, both on the wire before either answer is read
    /// (`l0+l1` in a schedule). 0 (the default) draws none; a seed's walk
    /// with parallel steps depends on who wins each race.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    parallel: u32,
    /// Replays the shrinker may run on a failure (0: do not shrink).
    #[arg(long, default_value_t = 2000, value_parser = super::count::<0, { super::bounds::SHRINK_RUNS_MAX }>)]
    shrink_runs: usize,
    /// Server faults the walks draw as steps, comma-separated:
    /// `server-kill` (`K`: kill -9, then a restart under --persistence)
    /// and `power-loss` (`P`: what the server did not fsync is lost, then
    /// it is powered on), each with a 3% chance per step. Needs `--server
    /// process`; off by default, so a seed's walk stays what it was.
    #[arg(long, value_delimiter = ',', value_parser = step_fault, conflicts_with = "jobs")]
    faults: Vec<FaultKind>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the verdicts as JUnit XML to FILE: one test case per
    /// invariant, a failure carrying the first failing walk's
    /// counterexample and replay line. An existing FILE is refused.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

/// The arguments of `ackgap replay`.
#[derive(Debug, clap::Args)]
pub(super) struct ReplayArgs {
    #[command(flatten)]
    pub(super) app: super::AppArg,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    require: super::RequireExercised,
    /// The replay line, e.g. `reference/marker/j2w2l100m3r1/e0.l1.c1`.
    pub(super) line: String,
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
    let started = std::time::Instant::now();
    let (schedule, seeds) = check_args(&args)?;
    if let Some(path) = &args.junit {
        super::junit::check_path(path)?;
    }
    let jobs = in_flight(&args, schedule.as_ref(), &seeds);
    let names: Vec<String> = (0..jobs)
        .map(|job| explore::parallel::job_queue_name(&args.queue_name, job))
        .collect();
    for name in &names {
        super::check_queue_name(name)?;
    }
    let (server, real_time) = server_for(&args.server, schedule.as_ref(), &args.faults).await?;
    let rows = spread(&server, &names).await?;
    let mut queues = Vec::new();
    let mut subjects = Vec::new();
    // A queue that follows the clock has one clock per server: walks in
    // flight at once each get a server of their own.
    let mut servers = vec![server];
    for (job, (base, row)) in names.iter().zip(&rows).enumerate() {
        if job > 0
            && subjects
                .first()
                .is_some_and(|row: &Vec<Arc<Subject>>| row[0].drives_clock())
        {
            let (more, _) =
                start_explorer_server(&args.server.server, args.server.persistence).await?;
            servers.push(more);
        }
        let server = servers.last().expect("one server at least");
        let mut rerun = args.server.rerun();
        // On a cluster, the job's own base name: with it a seed replayed
        // alone walks the very queue it walked here. Elsewhere the name
        // asked for, when it is not the default: a pasted line walks the
        // queue it names.
        let name = Some(base)
            .filter(|_| row.len() > 1)
            .unwrap_or(&args.queue_name);
        if name != DEFAULT_QUEUE_NAME {
            rerun.flags.push_str(&format!(
                " --queue-name {}",
                ackgap::explore::line::shell_word(name)
            ));
        }
        let mut subject_row = Vec::new();
        for name in row {
            let queue = connect(server, name).await?;
            let subject = open_subject(&args.queue, &args.consumer.to_string(), &queue, server)
                .await?
                .with_rerun(rerun.clone())
                .with_parallel(args.parallel);
            subject_row.push(Arc::new(subject));
            queues.push(queue);
        }
        subjects.push(subject_row);
    }
    let described = servers[0].describe();
    if !args.json {
        print_header(&args, schedule.is_some(), seeds, jobs, &described);
        print_clock(&subjects[0][0], real_time.as_deref(), servers.len());
    }
    let mut progress = Progress::new(args.json || schedule.is_some());
    let walks_started = std::time::Instant::now();
    let owned = lend(&args, schedule.as_ref(), &mut servers, &mut subjects);
    let reports = walk_all(&subjects, &args, schedule.as_ref(), seeds, &mut progress).await?;
    let elapsed = walks_started.elapsed().as_secs_f64();
    progress.finish();
    let first_failing = reports.iter().find(|r| !r.findings().is_empty());
    let shrink_on = of_seed(&subjects[0], first_failing.map_or(args.seed, |r| r.seed));
    let shrunk = shrink_first(shrink_on, &reports, args.shrink_runs).await?;
    give_back(owned, &mut servers, &mut subjects)?;
    if let Some(path) = &args.junit {
        let junit = super::junit::explore(&reports, shrunk.as_ref(), walks_started.elapsed());
        super::junit::write(path, &junit)?;
    }
    let summary = ExploreSummary::of(
        explore_config(&args),
        args.shard,
        &described,
        &reports,
        shrunk.as_ref(),
        elapsed,
    );
    if args.json {
        match reports.as_slice() {
            [report] if args.shard.is_none() => {
                let mut value = serde_json::to_value(report)?;
                value["server"] = described.clone().into();
                if let Some(shrunk) = &shrunk {
                    value["minimal"] = serde_json::to_value(super::report::minimal(shrunk))?;
                }
                outln!("{value}");
            }
            _ => outln!("{}", serde_json::to_value(&summary)?),
        }
    } else if let ([report], None) = (reports.as_slice(), args.shard) {
        print_walk(report);
        outln!("wall time {:.2} s", started.elapsed().as_secs_f64());
    } else {
        summary.print(started.elapsed().as_secs_f64());
    }
    drop(queues);
    drop(subjects);
    for server in servers {
        stop(server).await?;
    }
    let missing = ackgap::check::unexercised_of(&summary.invariants);
    Ok(args.require.apply(summary.verdict, &missing))
}

/// Which clock the walks run on, under the header: logical time (and
/// whether the server's clock follows it), or real time and why.
fn print_clock(subject: &Subject, real_time: Option<&str>, servers: usize) {
    let caps = subject.adapter.capabilities();
    let line = if subject.drives_clock() {
        format!(
            "  clock: logical; the server's clock (libfaketime) and the queue library's follow every step{}",
            if servers > 1 {
                format!(", a server per walk in flight ({servers})")
            } else {
                String::new()
            }
        )
    } else if subject.logical() {
        "  clock: logical (the queue takes the walk's time as an argument)".to_string()
    } else if caps.follows_clock {
        format!(
            "  clock: real time, one wall-clock sample per walk: {}",
            real_time.unwrap_or("the server's clock is not the explorers'")
        )
    } else {
        "  clock: real time, one wall-clock sample per walk (the queue reads clocks ackgap does not own)"
            .to_string()
    };
    outln!("{line}");
    print_app(subject.adapter.app().as_ref());
    outln!();
}

/// The user's app (`--app`) the adapter runs with, as its hello said.
fn print_app(app: Option<&ackgap::adapter::App>) {
    for line in app.iter().flat_map(|a| a.lines()) {
        outln!("  {line}");
    }
}

impl ExploreArgs {
    /// True when more than one walk may be in flight.
    pub(super) fn parallel(&self) -> bool {
        self.schedule.is_none() && self.seeds > 1 && jobs(self.jobs) > 1
    }
}

/// `--jobs`, or the number of cores.
pub(super) fn jobs(asked: Option<u64>) -> u64 {
    asked.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

/// What a report of these walks is of: what `ackgap merge` requires every
/// shard to share.
fn explore_config(args: &ExploreArgs) -> ExploreConfig {
    ExploreConfig {
        first_seed: args.seed,
        seeds: args.seeds,
        steps_max: args.steps,
        queue: args.queue.clone(),
        consumer: args.consumer.to_string(),
        shrink_runs: args.shrink_runs,
    }
}

/// The schedule to run, if any, and the last seed, or why the arguments
/// cannot be run; checked before any server starts.
fn check_args(args: &ExploreArgs) -> Result<(Option<Schedule>, Seeds), ExitError> {
    let schedule = match &args.schedule {
        Some(text) => Some(Schedule::parse(text).map_err(|e| ExitError::new(Exit::Usage, e))?),
        None => None,
    };
    let seeds = Seeds::range(args.seed, args.seeds).ok_or_else(|| {
        ExitError::new(
            Exit::Usage,
            format!(
                "--seed {} --seeds {} runs past u64::MAX",
                args.seed, args.seeds
            ),
        )
    })?;
    let seeds = seeds.shard(args.shard.unwrap_or(Shard::WHOLE));
    check_queue(&args.queue)?;
    if let Some(schedule) = &schedule {
        check_workers(schedule, SwarmConfig::from_seed(args.seed).workers)?;
    }
    Ok((schedule, seeds))
}

/// A schedule that names a worker the run does not have (`workers` of
/// them) is bad input, refused before any server starts.
fn check_workers(schedule: &Schedule, workers: u8) -> Result<(), ExitError> {
    let named = schedule.0.iter().flat_map(|step| step.workers()).max();
    match named {
        Some(worker) if worker >= workers => Err(ExitError::new(
            Exit::Usage,
            format!("the schedule names worker {worker}, but this run has {workers} worker(s)"),
        )),
        _ => Ok(()),
    }
}

/// Each job's queue names: on a cluster, one per primary (ordered by the
/// primaries' first slot), `BASE-K` with the smallest K whose slot that
/// primary serves; elsewhere the job's name alone. The names are printed
/// to stderr on a cluster.
async fn spread(server: &Server, names: &[String]) -> Result<Vec<Vec<String>>, ExitError> {
    let alone = || Ok(names.iter().map(|n| vec![n.clone()]).collect());
    if !connect(server, &names[0]).await?.on_cluster() {
        return alone();
    }
    let primaries = ackgap::server::cluster_primaries(&server.client())
        .await
        .map_err(|e| ExitError::new(Exit::Unavailable, e))?;
    if primaries.is_empty() {
        return alone();
    }
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|base| {
            primaries
                .iter()
                .map(|p| ackgap::chaos::matrix::name_in_slots(base, &p.slots))
                .collect()
        })
        .collect();
    for row in &rows {
        for name in row {
            super::check_queue_name(name)?;
        }
    }
    let placed: Vec<String> = rows[0]
        .iter()
        .zip(&primaries)
        .map(|(name, p)| {
            format!(
                "{name} (slot {}) on {}",
                ackgap::queue::keys::slot_of(name),
                p.node
            )
        })
        .collect();
    errln!(
        "ackgap explore: a cluster of {} primaries; seed S walks on the queue of primary S mod {}: {}",
        primaries.len(),
        primaries.len(),
        placed.join(", ")
    );
    Ok(rows)
}

/// The subject of `row` seed `seed` walks on.
fn of_seed(row: &[Arc<Subject>], seed: u64) -> &Subject {
    &row[(seed % row.len() as u64) as usize]
}

/// One walk per seed (of the shard), `subjects.len()` at once, each
/// failing one's schedule written to a file as it is reported (in seed
/// order); or the one `schedule`.
async fn walk_all(
    subjects: &[Vec<Arc<Subject>>],
    args: &ExploreArgs,
    schedule: Option<&Schedule>,
    seeds: Seeds,
    progress: &mut Progress,
) -> Result<Vec<WalkReport>, ExitError> {
    let stopped = |seed: u64, e: &explore::ExploreError| {
        let command = explore::walk_replay(of_seed(&subjects[0], seed), seed, args.steps, schedule);
        let mut stopped = ExitError::explore(format!("seed {seed}: the walk stopped"), e);
        stopped.message.push_str(&format!("\nreplay: {command}"));
        stopped
    };
    if let Some(schedule) = schedule {
        let report = explore::replay_on(of_seed(&subjects[0], args.seed), args.seed, schedule)
            .await
            .map_err(|e| stopped(args.seed, &e))?;
        if report.verdict != Verdict::Valid {
            write_failure(&report, args, &mut None);
        }
        return Ok(vec![report]);
    }
    let mut observer = Observer {
        args,
        dir: None,
        progress,
    };
    explore::walk_seeds_spread(subjects.to_vec(), seeds, args.steps, &mut observer)
        .await
        .map_err(|e| stopped(e.seed, &e.source))
}

/// Told of each walk in seed order: the progress bar, and a failing walk
/// printed and written to a file.
struct Observer<'a> {
    args: &'a ExploreArgs,
    /// This run's directory, made at its first failing walk.
    dir: Option<PathBuf>,
    progress: &'a mut Progress,
}

impl WalkObserver for Observer<'_> {
    fn start(&mut self, total: u64) {
        self.progress.start(total);
    }

    fn walk(&mut self, report: &WalkReport) -> ControlFlow<()> {
        let failed = report.verdict != Verdict::Valid;
        self.progress.done(report.steps as u64, failed);
        if failed {
            let (args, dir) = (self.args, &mut self.dir);
            self.progress.suspend(|| {
                err!("{}", report.failure_text());
                write_failure(report, args, dir);
            });
        }
        ControlFlow::Continue(())
    }
}

/// Shrinks the first failing walk to a minimal counterexample (with at
/// most `runs` replays; 0: not at all), prints it to stderr, writes it
/// under `target/ackgap/failures/` and returns it (for `--junit` and
/// `--json`).
async fn shrink_first(
    subject: &Subject,
    reports: &[WalkReport],
    runs: usize,
) -> Result<Option<explore::shrink::Shrunk>, ExitError> {
    let Some(r) = reports.iter().find(|r| !r.findings().is_empty()) else {
        return Ok(None);
    };
    if runs == 0 {
        return Ok(None);
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
    Ok(shrunk)
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
    Ok(Subject::new(adapter, Arc::from(kind.consumer())).with_clock(server.logical_clock()))
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
    let (server, _) = server_for(&args.server, Some(&line.schedule), &[]).await?;
    let queue = connect(&server, &args.queue_name).await?;
    let subject = open_subject(&line.queue, &line.consumer, &queue, &server)
        .await?
        .with_rerun(args.server.rerun());
    let config = SwarmConfig::from_line(&line.config);
    let app = subject.adapter.app();
    let (report, server) =
        run_owning(&args.server, subject, &config, &line.schedule, server).await?;
    let report = report.map_err(|e| ExitError::explore("the replay stopped", &e))?;
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["server"] = server.describe().into();
        value["history"] = serde_json::to_value(&report.history).unwrap_or_default();
        value["log"] = serde_json::to_value(&report.log).unwrap_or_default();
        value["app"] = serde_json::to_value(&app).unwrap_or_default();
        outln!("{value}");
    } else {
        print_app(app.as_ref());
        out!("{}", report.counterexample_text());
        outln!();
        print_invariants(&report.invariants);
        outln!(
            "\nverdict: {}",
            ackgap::check::verdict_with(
                report.verdict,
                &ackgap::check::unexercised(&report.invariants)
            )
        );
    }
    drop(queue);
    stop(server).await?;
    Ok(args.require.apply(
        report.verdict,
        &ackgap::check::unexercised(&report.invariants),
    ))
}

/// Whether a run has server steps (`K` or `P` in `schedule`, or
/// `--faults`), and whether one of them may be a power loss.
fn server_steps(schedule: Option<&Schedule>, faults: &[FaultKind]) -> (bool, bool) {
    let steps = schedule.map_or(&[][..], |s| s.steps());
    let power = faults.contains(&FaultKind::PowerLoss) || steps.contains(&Step::PowerLoss);
    (
        power || !faults.is_empty() || steps.contains(&Step::ServerKill),
        power,
    )
}

/// The explorers' server: with server steps, a process server the explorer
/// starts and owns (any other is refused, before it starts), with the
/// power-loss shim when a power loss may come and without libfaketime;
/// without, [`start_explorer_server`]'s.
async fn server_for(
    server: &ServerArgs,
    schedule: Option<&Schedule>,
    faults: &[FaultKind],
) -> Result<(Server, Option<String>), ExitError> {
    let (any, power_loss) = server_steps(schedule, faults);
    if !any {
        return start_explorer_server(&server.server, server.persistence).await;
    }
    if !matches!(server.server, ServerSpec::Process(_)) {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "the server steps K and P (a schedule with them, or --faults) need a server the \
                 explorer starts and can kill: --server process, not --server {}",
                server.server.redacted()
            ),
        ));
    }
    let instruments = Instruments {
        power_loss,
        clock: false,
    };
    let started =
        Server::start_instrumented(&server.server, server.persistence, instruments).await?;
    let why = "a run with server steps starts it without libfaketime: a queue that reads the \
               server's clock runs on real time";
    Ok((started, Some(why.to_string())))
}

/// With server steps, the first server lent to every walk's subject
/// (taken out of `servers`) for the walks and the shrinker; `None`
/// without.
fn lend(
    args: &ExploreArgs,
    schedule: Option<&Schedule>,
    servers: &mut Vec<Server>,
    subjects: &mut [Vec<Arc<Subject>>],
) -> Option<OwnedServer> {
    if !server_steps(schedule, &args.faults).0 {
        return None;
    }
    let percent = |kind| {
        if args.faults.contains(&kind) {
            FAULT_PERCENT
        } else {
            0
        }
    };
    let owned = OwnedServer::new(servers.remove(0), args.server.persistence).drawing(
        percent(FaultKind::ServerKill),
        percent(FaultKind::PowerLoss),
    );
    for row in subjects.iter_mut() {
        for subject in row.iter_mut() {
            *subject = Arc::new((**subject).clone().with_server(Some(owned.clone())));
        }
    }
    Some(owned)
}

/// The server [`lend`] lent, back in `servers` (first) once every subject
/// let it go.
fn give_back(
    owned: Option<OwnedServer>,
    servers: &mut Vec<Server>,
    subjects: &mut [Vec<Arc<Subject>>],
) -> Result<(), ExitError> {
    let Some(owned) = owned else { return Ok(()) };
    for row in subjects.iter_mut() {
        for subject in row.iter_mut() {
            *subject = Arc::new((**subject).clone().with_server(None));
        }
    }
    servers.insert(0, taken_back(owned)?);
    Ok(())
}

/// The server out of an [`OwnedServer`] no walk holds any more.
fn taken_back(owned: OwnedServer) -> Result<Server, ExitError> {
    owned.into_server().map_err(|_| {
        ExitError::new(
            Exit::Internal,
            "a walk still holds the server after the walks ended",
        )
    })
}

/// Runs `schedule` on `subject`, on a server lent to it when the schedule
/// has server steps; answers the run and the server.
async fn run_owning(
    args: &ServerArgs,
    subject: Subject,
    config: &SwarmConfig,
    schedule: &Schedule,
    server: Server,
) -> Result<(Result<WalkReport, explore::ExploreError>, Server), ExitError> {
    if !server_steps(Some(schedule), &[]).0 {
        let report = explore::run_schedule(&subject, config, schedule).await;
        return Ok((report, server));
    }
    let owned = OwnedServer::new(server, args.persistence);
    let subject = subject.with_server(Some(owned.clone()));
    let report = explore::run_schedule(&subject, config, schedule).await;
    drop(subject);
    Ok((report, taken_back(owned)?))
}

/// How many walks run at once: one for a schedule, or with server steps
/// (a kill would hit every walk on the server).
fn in_flight(args: &ExploreArgs, schedule: Option<&Schedule>, seeds: &Seeds) -> usize {
    match schedule {
        Some(_) => 1,
        None if !args.faults.is_empty() => 1,
        None => jobs(args.jobs).min(seeds.len()).max(1) as usize,
    }
}

/// The chance (percent) per step of a server fault `--faults` names.
const FAULT_PERCENT: u32 = 3;

/// `--faults`' value: `server-kill` or `power-loss` (the faults the
/// explorers take as steps).
fn step_fault(text: &str) -> Result<FaultKind, String> {
    match text {
        "server-kill" => Ok(FaultKind::ServerKill),
        "power-loss" => Ok(FaultKind::PowerLoss),
        other => Err(format!(
            "{other:?}: the explorers take the server faults server-kill (K) and power-loss (P)"
        )),
    }
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

/// What the command is about to run, first, as `run` and `chaos` print
/// theirs: the walks, the queue, the server (its port, pid, directory) and
/// where the files go.
fn print_header(args: &ExploreArgs, schedule: bool, seeds: Seeds, jobs: usize, server: &str) {
    let walks = if schedule {
        format!("seed {}, the schedule given", args.seed)
    } else {
        let last = args.seed.saturating_add(args.seeds.saturating_sub(1));
        let shard = args.shard.map_or(String::new(), |s| {
            format!(" (shard {s}: {} of them)", seeds.len())
        });
        format!(
            "seeds {}..={last}{shard}, up to {} steps each, {jobs} in flight",
            args.seed, args.steps
        )
    };
    outln!(
        "ackgap explore: {walks}\n  queue {}, consumer {}, queue name {}\n  server {}\n  files: a failing walk in {}/TIME-seed{}-QUEUE/ (made at the first failure; `latest` points at it), its minimal counterexample in {}/\n",
        args.queue,
        args.consumer,
        args.queue_name,
        server,
        super::artifacts::command_dir("explore").display(),
        args.seed,
        explore::shrink::failures_dir().display()
    );
}

fn print_walk(report: &WalkReport) {
    let c = &report.config;
    let w = &c.weights;
    outln!(
        "walk: seed {}\n  {} jobs, {} workers, lease {} ms, max_attempts {}, reap limit {}\n  weights e{} l{} c{} f{} x{} k{} s{} r{} t{}\n",
        report.seed, c.jobs, c.workers, c.lease_ms, c.max_attempts, c.reap_limit,
        w.enqueue, w.lease, w.complete, w.fail, w.extend, w.crash, w.stale_complete, w.reap, w.tick
    );
    print_invariants(&report.invariants);
    outln!();
    if let Some(d) = &report.divergence {
        outln!("{d}\n");
    }
    outln!(
        "verdict: {}  ({} steps, {} events in {:.1} ms; {:.0} steps/s)",
        ackgap::check::verdict_with(
            report.verdict,
            &ackgap::check::unexercised(&report.invariants)
        ),
        report.steps,
        report.events,
        report.elapsed_ms,
        report.steps_per_s
    );
    if report.verdict != Verdict::Valid {
        outln!("schedule: {}", report.schedule);
    }
    outln!("replay: {}", report.replay);
}
