//! `ackgap chaos`: the flags, output, files and exit codes of the chaos
//! runner ([`ackgap::chaos::runner`]) and of its durability matrix
//! ([`ackgap::chaos::persistence_matrix`]).
//!
//! # Design notes
//!
//! The command writes the summary and the HTML report
//! (`report::render`). `src/cli/mod.rs` leaves Ctrl-C to this file,
//! which raises a `runner::Interrupt`: the run stops its workers, heals and
//! judges the history so far, and the command writes the report, stops the
//! server and exits 130.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use ackgap::chaos::matrix;
use ackgap::chaos::persistence_matrix;
use ackgap::chaos::runner::{self, ChaosConfig, ChaosReport, Interrupt};
use ackgap::chaos::schedule::{FaultSet, FaultSpec, Shape};
use ackgap::check::Verdict;
use ackgap::consumer;
use ackgap::explore::Shard;
use ackgap::queue::Durability;
use ackgap::server::{Instruments, Persistence, Server, ServerSpec};

use super::envelope::{ChaosJson, GridConfig, GridEnvelope, GridJson};
use super::{Exit, ExitError};

mod print;
use print::{print_matrix, print_plan, print_report};

/// The arguments of `ackgap chaos`.
#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    #[command(flatten)]
    pub(super) app: super::AppArg,
    /// The seed of the fault schedule and the payloads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    require: super::RequireExercised,
    /// Length of the faults phase: `20s`, `1500ms`, `2m` (a bare number is
    /// seconds). Heal, drain and the final read come on top.
    // Hyphen values allowed, so that `--duration -5s` reaches the parser
    // and is refused as a negative duration, not as an unknown flag.
    #[arg(long, default_value = "20s", value_parser = parse_duration_ms, allow_hyphen_values = true)]
    duration: u64,
    /// Concurrent workers (each behind its own port of the fault proxy).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Jobs enqueued over the first 85% of the faults phase.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    jobs: u64,
    /// Lease length (ms, server clock).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    lease_ms: u64,
    /// Enabled faults, comma-separated: `all` (every fault `--server`
    /// supports), `none`, the groups `worker`, `network`, `server` (the
    /// server's faults of that kind), `replication` (on `--server
    /// replicated`: replica-lag, failover, lag-failover,
    /// primary-partition), `cluster` (on a cluster: failover, takeover, and
    /// on a `container-cluster` primary-partition), or kinds
    /// (crash-before-effect, crash-ack-gap, crash-after-ack, stale-pause,
    /// heartbeat-stop, drop-request, drop-reply, delay-reply,
    /// duplicate-request, reset-connection, partition, server-pause,
    /// server-kill, script-flush, and the ones above); `-NAME` removes. A
    /// kind the server does not run is refused before it starts, with the
    /// reason. `power-loss` (unsynced bytes dropped, then a restart; on
    /// every server ackgap starts, every node at once) and `clock-jump`
    /// (the server's clock forward, then back; on `--server process`, and
    /// on a `cluster` the queue's primary's) run only when named: naming
    /// one starts the server with the power-loss shim or libfaketime.
    #[arg(long, default_value = "all")]
    faults: FaultSpec,
    /// What the reference queue's writes (enqueues, leases, settles, extends, reaps) must reach before
    /// they are `ok`: `none`, `wait:N[:TIMEOUT_MS]` (WAIT for N replicas)
    /// or `waitaof:L:N[:TIMEOUT_MS]` (WAITAOF: L=1 the primary's AOF
    /// fsynced, N replicas'). Fewer confirmations make the outcome unknown
    /// (`info`), never `ok`.
    #[arg(long, default_value = "none")]
    durability: Durability,
    /// Persistence of an embedded server: none, everysec or always. With
    /// `none`, a server kill loses every acknowledged job.
    #[arg(long, default_value = "always")]
    persistence: Persistence,
    /// Where the queue runs: `process`, `replicated[:N]` (a primary and N
    /// replicas, default 2, as processes), `container`, or a URL (no
    /// server pause or kill then).
    #[arg(long, default_value = "process", env = "ACKGAP_SERVER")]
    server: ServerSpec,
    /// The queue under test: reference, lmove, rpop, streams, apalis (built
    /// with --features apalis), or exec:COMMAND (a
    /// child speaking the adapter protocol, docs/adapter-protocol.md).
    #[arg(long, default_value = "reference")]
    pub(super) queue: String,
    /// The consumer: naive, natural, marker, marker-before, marker-after.
    #[arg(long, default_value = "marker")]
    consumer: consumer::Kind,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap-chaos")]
    queue_name: String,
    /// The liveness bound (ms after the heal). By default it is derived
    /// from the run: twice the backlog at the heal over the rate jobs
    /// were settled at before the first fault, plus 15 s (or ten leases)
    /// for the slowest job; the report says how.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    drain_ms_max: Option<u64>,
    /// Where to write the history (the summary, report and reproduce
    /// line go beside it, as .json, .html and .txt); default chaos-SEED.jsonl
    /// in a new directory of this run,
    /// target/ackgap/chaos/TIME-seedSEED-QUEUE/ (`target/ackgap/chaos/latest`
    /// points at the newest). Refused if any of these files exists, unless
    /// --force.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Replace the files of `--history` if they exist.
    #[arg(long, requires = "history")]
    force: bool,
    /// Print one JSON object instead of tables (and no progress).
    #[arg(long)]
    json: bool,
    /// Do not reduce a broken invariant's violations to exact `replay:`
    /// lines on logical time (`ackgap reduce HISTORY` does it later).
    #[arg(long)]
    no_reduce: bool,
    /// The persistence matrix: the same seed under each persistence mode
    /// (none, everysec, always) on `--server`, server kills added to the
    /// faults; prints which invariants held under which mode. Exits by the
    /// `always` column: 0 if every invariant held there. (Before the
    /// topology matrix, this was `--matrix`.)
    #[arg(long = "persistence-matrix", conflicts_with_all = ["persistence", "history"])]
    persistence_matrix: bool,
    /// The matrix: persistence (none, always) × topology (process,
    /// replicated:2, cluster:3x1) × durability (none, wait:1) × fault
    /// (server-kill on one server; failover and lag-failover on replicas;
    /// failover and takeover on the cluster), `--matrix-seeds`
    /// seeds per cell from `--seed`, each run on a fresh server; prints a
    /// table (or JSON) and writes grid.html. Exits 1 if a cell whose
    /// documentation promises to keep acknowledged writes lost one.
    /// `--grid` is another name for it.
    #[arg(long = "matrix", alias = "grid", conflicts_with_all = ["persistence", "history", "persistence_matrix", "faults", "durability"])]
    grid: bool,
    /// Seeds per cell of `--matrix` (`--grid-seeds` is another name).
    #[arg(long = "matrix-seeds", alias = "grid-seeds", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100), requires = "grid")]
    grid_seeds: u64,
    /// Only these topologies' cells of `--matrix`, comma-separated:
    /// process, replicated, cluster (default: all three).
    #[arg(long = "matrix-topology", value_delimiter = ',', requires = "grid")]
    grid_topology: Vec<String>,
    /// Run only shard K of N of `--matrix`'s runs (its cells' seeds, cell
    /// by cell: the K-th run and every N-th after it), and report it as a
    /// shard: `ackgap merge` combines the N shards' `--json` reports into
    /// the matrix of one machine. A single chaos run is one seed: without
    /// `--matrix` there is nothing to split.
    #[arg(long)]
    shard: Option<Shard>,
}

/// Parses `20s`, `1500ms`, `2m` or a bare number of seconds into ms.
fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, factor) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000)
    } else {
        (s, 1000)
    };
    let n: f64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration: expected e.g. 20s, 1500ms or 2m"))?;
    let ms = n * factor as f64;
    if ms <= 0.0 {
        return Err(format!("{s:?}: a duration must be positive"));
    }
    if !(100.0..=86_400_000.0).contains(&ms) {
        return Err(format!("{s:?}: a duration must lie between 100ms and 24h"));
    }
    Ok(ms as u64)
}

/// `ms` as `--duration` takes it: whole seconds as `20s`, else `1500ms`.
pub(super) fn duration_text(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl ChaosArgs {
    /// The runner's configuration these flags ask for: `--faults`
    /// resolved on the server `--server` starts, before it starts.
    fn config(&self) -> Result<ChaosConfig, ExitError> {
        let shape = Shape::of_spec(&self.server, self.instruments());
        let faults = self
            .faults
            .resolve(&shape)
            .map_err(|e| ExitError::new(Exit::Usage, format!("--faults {}: {e}", self.faults)))?;
        Ok(self.config_with(faults))
    }

    /// The runner's configuration these flags ask for, with `faults`.
    fn config_with(&self, faults: FaultSet) -> ChaosConfig {
        ChaosConfig {
            duration_ms: self.duration,
            workers: self.workers as usize,
            jobs: self.jobs as usize,
            lease_ms: self.lease_ms,
            faults,
            queue: self.queue.clone(),
            consumer: self.consumer,
            queue_name: self.queue_name.clone(),
            drain_ms_max: self.drain_ms_max,
            durability: self.durability,
            ..ChaosConfig::new(self.seed)
        }
    }

    /// `--faults` as a reproduce line gives it: the kinds the list
    /// selected on this server, by name (`all` when it is every one the
    /// server runs), so a pasted line runs the same faults.
    fn faults_text(&self) -> String {
        let shape = Shape::of_spec(&self.server, self.instruments());
        match self.faults.resolve(&shape) {
            Ok(set) if !set.0.is_empty() && set == FaultSet::all_on(&shape) => "all".into(),
            Ok(set) => set.to_string(),
            Err(_) => self.faults.to_string(),
        }
    }

    /// The libraries the server is started with: the power-loss shim and
    /// libfaketime, each only when `--faults` names its kind (they change
    /// the server under test, so `all` alone loads neither).
    fn instruments(&self) -> Instruments {
        FaultSet(self.faults.named().collect()).instruments()
    }

    /// The command that runs these flags again (no URL, no password; the
    /// persistence only where the server is ours: see `super::rerun`).
    fn replay(&self) -> String {
        // The faults by name (`faults_text`); the rest as configured.
        let cfg = self.config_with(FaultSet(Default::default()));
        replay_of(&cfg, &self.faults_text(), &self.server, self.persistence)
    }
}

/// The command that runs `cfg` again on `server` with `persistence`, its
/// faults named `faults`: one run's, or one run of the matrix's alone.
fn replay_of(
    cfg: &ChaosConfig,
    faults: &str,
    server: &ServerSpec,
    persistence: Persistence,
) -> String {
    let rerun = super::rerun(server, persistence, None);
    let command = format!(
        "ackgap chaos --seed {} --duration {} --workers {} --jobs {} --lease-ms {} --faults {} --queue {} --consumer {}",
        cfg.seed,
        duration_text(cfg.duration_ms),
        cfg.workers,
        cfg.jobs,
        cfg.lease_ms,
        faults,
        ackgap::explore::line::shell_word(&cfg.queue),
        cfg.consumer
    );
    rerun.command(&command)
        + &cfg
            .drain_ms_max
            .map_or(String::new(), |ms| format!(" --drain-ms-max {ms}"))
        + &if cfg.durability.waits() {
            format!(" --durability {}", cfg.durability)
        } else {
            String::new()
        }
        + &if cfg.queue_name != "ackgap-chaos" {
            format!(
                " --queue-name {}",
                ackgap::explore::line::shell_word(&cfg.queue_name)
            )
        } else {
            String::new()
        }
}

/// The message of a run stopped by Ctrl-C before it had anything to report.
const INTERRUPTED: &str = "interrupted; servers stopped";

/// Runs `ackgap chaos` (one run, `--matrix` or `--persistence-matrix`).
///
/// Ctrl-C is handled here rather than by dropping the run (as the other
/// commands do): the run stops its workers and nemesis, heals the server,
/// the report is written on the history so far, the server is stopped,
/// and the exit code is 130.
pub(super) async fn run(args: ChaosArgs) -> Result<Exit, ExitError> {
    let interrupt = Interrupt::new();
    let listener = {
        let interrupt = interrupt.clone();
        tokio::spawn(async move {
            super::ctrl_c().await;
            interrupt.raise();
        })
    };
    if args.shard.is_some() && !args.grid {
        listener.abort();
        return Err(ExitError::new(
            Exit::Usage,
            "--shard K/N splits the runs of --matrix; a single chaos run is one seed: there is nothing to split",
        ));
    }
    let result = if args.grid {
        // The grid has no partial report: an interrupt drops its servers.
        tokio::select! {
            res = run_grid(args) => res,
            _ = interrupt.raised() => Err(ExitError::new(Exit::Interrupted, INTERRUPTED)),
        }
    } else if args.persistence_matrix {
        // The matrix has no partial report: an interrupt drops its servers.
        tokio::select! {
            res = run_matrix(args) => res,
            _ = interrupt.raised() => Err(ExitError::new(Exit::Interrupted, INTERRUPTED)),
        }
    } else {
        run_one(args, &interrupt).await
    };
    listener.abort();
    result
}

/// The arguments clap cannot check, checked before any server starts: the
/// queue under test, the queue's name, the durability dial and the faults
/// on the server; the run's configuration if they hold.
fn check_args(args: &ChaosArgs) -> Result<ChaosConfig, ExitError> {
    super::explore::check_queue(&args.queue)?;
    super::check_queue_name(&args.queue_name)?;
    check_durability(args)?;
    args.config()
}

/// A durability dial the server cannot satisfy is bad input: every write
/// would be unknown.
fn check_durability(args: &ChaosArgs) -> Result<(), ExitError> {
    let d = args.durability;
    if !d.waits() {
        return Ok(());
    }
    if args.queue != "reference" {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "--durability {d} is the reference queue's client dial; --queue {} has its own client",
                args.queue
            ),
        ));
    }
    let (local, replicas) = match d {
        Durability::Wait { replicas, .. } => (0, replicas),
        Durability::WaitAof {
            local, replicas, ..
        } => (local, replicas),
        _ => (0, 0),
    };
    if local > 0 && !args.persistence_matrix && args.persistence == Persistence::None {
        return Err(ExitError::new(
            Exit::Usage,
            format!("--durability {d} waits for the primary's AOF: use --persistence everysec or always"),
        ));
    }
    let have = match &args.server {
        ServerSpec::Url(_) => return Ok(()),
        ServerSpec::Replicated { replicas, .. }
        | ServerSpec::ContainerReplicated { replicas }
        | ServerSpec::Cluster { replicas, .. }
        | ServerSpec::ContainerCluster { replicas, .. } => *replicas as u64,
        _ => 0,
    };
    if replicas > have {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "--durability {d} waits for {replicas} replicas and --server {} has {have}: use --server replicated:{replicas}",
                args.server.redacted()
            ),
        ));
    }
    Ok(())
}

/// The files a run writes for its history `history`: the history, its
/// summary, report and reproduce line.
fn run_files(history: &Path) -> Vec<PathBuf> {
    ["jsonl", "json", "html", "txt"]
        .iter()
        .map(|ext| history.with_extension(ext))
        .collect()
}

/// One run: the plan, progress on stderr, the report and its files.
///
/// The order keeps an earlier run's files whole whatever fails: the
/// arguments, then the server (started and reached), then a directory of
/// this run's own (or the `--history` file, checked before the server).
async fn run_one(args: ChaosArgs, interrupt: &Interrupt) -> Result<Exit, ExitError> {
    let mut config = check_args(&args)?;
    let explicit = args.history.as_deref();
    let files = explicit.map(run_files).unwrap_or_default();
    super::artifacts::check_writable("chaos", explicit, &files, args.force)?;
    let persistence = match args.server {
        ServerSpec::Url(_) => Persistence::None,
        _ => args.persistence,
    };
    let mut server = start_and_reach(&args, persistence, interrupt).await?;
    // A server given as a URL shows its shape only once reached (a cluster
    // takes no network fault): `--faults` is resolved again on it.
    if matches!(args.server, ServerSpec::Url(_)) {
        config.faults = args
            .faults
            .resolve(&Shape::of(&server))
            .map_err(|e| ExitError::new(Exit::Usage, format!("--faults {}: {e}", args.faults)))?;
    }
    let history = match &args.history {
        Some(path) => path.clone(),
        None => super::artifacts::run_dir("chaos", args.seed, &args.queue)?
            .join(format!("chaos-{}.jsonl", args.seed)),
    };
    super::log_adapter_in(super::artifacts::dir_of(&history));
    let replay = args.replay();
    if !args.json {
        print_plan(&args, &config, &server, &history);
    }
    let result = runner::run_until(
        &mut server,
        config,
        Some(history.clone()),
        super::progress::lines(args.json),
        interrupt.clone(),
    )
    .await;
    if !args.json && std::io::stderr().is_terminal() {
        errln!();
    }
    let described = server.describe();
    let stopped = server.stop().await;
    let report = result.map_err(|e| {
        ExitError::new(
            Exit::from(&e),
            format!("chaos run stopped: {e}\nrerun: {replay}"),
        )
    })?;
    stopped.map_err(ExitError::stopping)?;
    let files = write_files(&args, &report, &history, (&replay, &described), persistence)?;
    let reduce = report.verdict == Verdict::Invalid && !interrupt.is_raised() && !args.no_reduce;
    print_run(&args, (&report, &replay, &history), files, reduce).await;
    if let Some(note) = &report.interrupted {
        errln!("ackgap: {note}; server stopped");
        return Ok(Exit::Interrupted);
    }
    if interrupt.is_raised() {
        // Ctrl-C came during the final read: the report is complete.
        errln!("ackgap: interrupted after the run was judged; server stopped");
        return Ok(Exit::Interrupted);
    }
    Ok(args.require.apply(
        report.verdict,
        &ackgap::check::unexercised(&report.invariants),
    ))
}

/// The run's server, started and reached; a Ctrl-C meanwhile ends the run
/// as interrupted.
async fn start_and_reach(
    args: &ChaosArgs,
    persistence: Persistence,
    interrupt: &Interrupt,
) -> Result<Server, ExitError> {
    // Dropping a server half started kills its child.
    let server = tokio::select! {
        res = Server::start_instrumented(&args.server, persistence, args.instruments()) => res?,
        _ = interrupt.raised() => return Err(ExitError::new(Exit::Interrupted, INTERRUPTED)),
    };
    // Reached before any file is made: an unreachable server leaves none.
    let reached = tokio::select! {
        res = super::connect(&server, &args.queue_name) => res,
        _ = interrupt.raised() => Err(ExitError::new(Exit::Interrupted, INTERRUPTED)),
    };
    drop(reached?);
    Ok(server)
}

/// The report (or the JSON summary) of a run whose files are written;
/// with `reduce`, its violations reduced to exact replays after it.
async fn print_run(
    args: &ChaosArgs,
    (report, replay, history): (&ChaosReport, &str, &Path),
    files: Files,
    reduce: bool,
) {
    let reduce = reduce && report.interrupted.is_none();
    let consumer = args.consumer.to_string();
    let run = (args.queue.as_str(), consumer.as_str(), args.lease_ms);
    if !args.json {
        print_report(report, replay, &files.summary, &files.html);
    }
    let reductions = match reduce {
        true => {
            super::reduce::after_chaos((&args.server, args.persistence), history, run, args.json)
                .await
        }
        false => serde_json::Value::Null,
    };
    if args.json {
        let mut value = files.summary_value;
        value["summary"] = files.summary.display().to_string().into();
        value["dir"] = super::artifacts::dir_of(&files.summary)
            .display()
            .to_string()
            .into();
        if reduce {
            value["reductions"] = reductions;
        }
        outln!("{value}");
    }
}

/// The files a run leaves beside its history.
struct Files {
    /// The summary (`.json`): the report, the replay command and the
    /// persistence mode.
    summary: PathBuf,
    /// The summary's contents, with the report's path.
    summary_value: serde_json::Value,
    /// The timeline (`.html`).
    html: PathBuf,
}

/// Writes the summary, the HTML timeline and, for a failed or interrupted
/// run, the replay command (`.txt`) beside `history`. A file that cannot
/// be written is said on stderr and does not change the exit code.
fn write_files(
    args: &ChaosArgs,
    report: &ChaosReport,
    history: &Path,
    (replay, server): (&str, &str),
    persistence: Persistence,
) -> Result<Files, ExitError> {
    let summary = history.with_extension("json");
    let mut value = serde_json::to_value(report)?;
    value["replay"] = replay.into();
    value["persistence"] = persistence.to_string().into();
    // The verdict line as printed: with the schedule's slip when it slipped.
    value["verdict_line"] = print::verdict_line(report).into();
    if let Err(e) = std::fs::write(&summary, format!("{value:#}\n")) {
        errln!("ackgap: cannot write {}: {e}", summary.display());
    }
    let html = history.with_extension("html");
    let title = match &report.interrupted {
        None => format!("ackgap chaos seed {}: {}", args.seed, report.verdict),
        Some(note) => format!(
            "ackgap chaos seed {}: {} (interrupted) — {note}",
            args.seed, report.verdict
        ),
    };
    // What ran, where, and the line that runs it again.
    let lead = [
        format!("queue {}, consumer {}", args.queue, args.consumer),
        format!("server {server}"),
        format!("rerun: {replay}"),
    ];
    let written = ackgap::history::read_file(history)
        .map_err(|e| e.to_string())
        .and_then(|events| {
            std::fs::write(
                &html,
                ackgap::report::render_with(&title, &lead, &events, &report.invariants),
            )
            .map_err(|e| e.to_string())
        });
    if let Err(e) = written {
        errln!("ackgap: cannot write the report {}: {e}", html.display());
    }
    value["html"] = html.display().to_string().into();
    let path = history.with_extension("txt");
    if report.verdict == Verdict::Valid && report.interrupted.is_none() {
        // Under --force, an earlier failed run's reproduce line must not
        // outlive it beside this valid run's files.
        if path.exists() {
            if let Err(e) = std::fs::remove_file(&path) {
                errln!("ackgap: cannot remove the stale {}: {e}", path.display());
            }
        }
    } else {
        let mut text = format!("verdict: {}\nrerun: {replay}\n", report.verdict);
        if let Some(note) = &report.interrupted {
            text.push_str(&format!("{note}\n"));
        }
        if let Err(e) = std::fs::write(&path, text) {
            errln!("ackgap: cannot write {}: {e}", path.display());
        }
    }
    Ok(Files {
        summary,
        summary_value: value,
        html,
    })
}

/// `--matrix`: every cell of the topology matrix, then its table (or JSON)
/// and `grid.html`.
async fn run_grid(args: ChaosArgs) -> Result<Exit, ExitError> {
    let (seed, json) = (args.seed, args.json);
    let config = check_args(&args)?;
    let topologies = &args.grid_topology;
    for t in topologies {
        if !TOPOLOGIES.contains(&t.as_str()) {
            return Err(ExitError::new(
                Exit::Usage,
                format!(
                    "--matrix-topology {t:?}: expected some of {}",
                    TOPOLOGIES.join(", ")
                ),
            ));
        }
    }
    let dir = super::artifacts::run_dir("chaos", seed, &format!("{}-grid", args.queue))?;
    // Its adapters' stderr: the log stays if the run made nothing else.
    super::log_adapter_in(&dir);
    if !json {
        errln!("matrix: files in {}", dir.display());
    }
    let cells = grid_cells(topologies);
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    let began = std::time::Instant::now();
    let result = matrix::run(
        &dir,
        config,
        args.grid_seeds,
        &cells,
        |ordinal| ordinal % shard.count == shard.index - 1,
        |cfg, cell| {
            replay_of(
                cfg,
                &cfg.faults.to_string(),
                &cell.topology,
                cell.persistence,
            )
        },
        |cell, seed, server, count| {
            if !json {
                errln!(
                    "matrix: run {}/{} ({}): {}, seed {seed}: {server}",
                    count.made,
                    count.total,
                    grid_eta(began.elapsed(), count),
                    cell.label()
                );
            }
        },
    )
    .await;
    if result.is_err() {
        // Only if empty: a partial run's histories are kept.
        let _ = std::fs::remove_dir(&dir);
    }
    let grid = result?;
    let html = dir.join("grid.html");
    if let Err(e) = std::fs::write(&html, grid.html()) {
        errln!("ackgap: cannot write {}: {e}", html.display());
    }
    let verdict = grid.verdict();
    if json {
        let report = GridEnvelope {
            command: "chaos".into(),
            version: super::envelope::VERSION.into(),
            config: GridConfig {
                chaos: ChaosJson::of(&grid.config)?,
                matrix_seeds: args.grid_seeds,
                matrix_topology: topologies.clone(),
                shard,
            },
            shard: args.shard,
            grid: GridJson::of(&grid)?,
            verdict,
            dir: dir.display().to_string(),
            html: html.display().to_string(),
        };
        outln!("{}", serde_json::to_value(&report)?);
    } else {
        out!("\n{}", grid.table());
        out!("\n{}", grid.runs_text());
        outln!(
            "\nverdict: {verdict} (invalid only if a row that promises to keep acknowledged writes lost one)\nreport: {}\nrerun: {}",
            html.display(),
            grid_replay(&args, topologies, args.shard)
        );
    }
    Ok(verdict.into())
}

/// The matrix's time left before run `count.made` starts, `elapsed`
/// into it: the runs made so far took `elapsed`, the ones left take as
/// long each (indicatif's words for the time).
fn grid_eta(elapsed: std::time::Duration, count: matrix::Count) -> String {
    let done = count.made.saturating_sub(1);
    if done == 0 {
        return format!("{} runs, ETA after the first", count.total);
    }
    let left = count.total - done;
    let eta = elapsed.mul_f64(left as f64 / done as f64);
    format!(
        "{} elapsed, ETA {}",
        indicatif::HumanDuration(elapsed),
        indicatif::HumanDuration(eta)
    )
}

/// The topologies `--matrix-topology` takes.
const TOPOLOGIES: [&str; 3] = ["process", "replicated", "cluster"];

/// The cells of the matrix on `topologies` (all if none), in its order.
fn grid_cells(topologies: &[String]) -> Vec<matrix::Cell> {
    matrix::cells()
        .into_iter()
        .filter(|c| {
            let topology = c.topology.to_string();
            let kind = topology.split(':').next().unwrap_or("");
            topologies.is_empty() || topologies.iter().any(|t| t == kind)
        })
        .collect()
}

/// The command that runs the matrix (or its `shard`) again.
fn grid_replay(args: &ChaosArgs, topologies: &[String], shard: Option<Shard>) -> String {
    let mut command = format!(
        "ackgap chaos --matrix --seed {} --matrix-seeds {} --duration {} --jobs {}",
        args.seed,
        args.grid_seeds,
        duration_text(args.duration),
        args.jobs
    );
    if !topologies.is_empty() {
        command.push_str(&format!(" --matrix-topology {}", topologies.join(",")));
    }
    if let Some(shard) = shard {
        command.push_str(&format!(" --shard {shard}"));
    }
    command
}

/// `--persistence-matrix`: one run per persistence mode, then a table of verdicts;
/// exits by the `always` column.
///
/// The matrix starts a server per mode, so its directory is made after
/// the arguments are checked but before the first server; a matrix that
/// stops before writing anything removes it again.
async fn run_matrix(args: ChaosArgs) -> Result<Exit, ExitError> {
    let (seed, json) = (args.seed, args.json);
    let config = check_args(&args)?;
    if matches!(args.server, ServerSpec::Url(_)) {
        return Err(persistence_matrix::MatrixError::UrlServer.into());
    }
    let dir = super::artifacts::run_dir("chaos", seed, &format!("{}-matrix", args.queue))?;
    // Its adapters' stderr: the log stays if the run made nothing else.
    super::log_adapter_in(&dir);
    if !json {
        errln!("persistence matrix: files in {}", dir.display());
    }
    let result = persistence_matrix::run(&args.server, &dir, config, |mode, server| {
        if !json {
            errln!("persistence matrix: seed {seed}, persistence {mode}: {server}");
        }
    })
    .await;
    if result.is_err() {
        // Only if empty: a partial run's histories are kept.
        let _ = std::fs::remove_dir(&dir);
    }
    let matrix = result?;
    let verdict = matrix.verdict();
    if json {
        let rows: Vec<serde_json::Value> = matrix
            .reports
            .iter()
            .map(|(mode, r)| {
                serde_json::json!({"persistence": mode.to_string(), "verdict": r.verdict,
                    "lost": r.lost, "invariants": r.invariants, "history": r.history,
                    "fired": r.fired})
            })
            .collect();
        outln!(
            "{}",
            serde_json::json!({"seed": seed, "config": matrix.config, "modes": rows, "verdict": verdict, "dir": dir.display().to_string()})
        );
    } else {
        print_matrix(&matrix);
    }
    Ok(verdict.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_seconds_milliseconds_and_minutes() {
        assert_eq!(parse_duration_ms("20s"), Ok(20_000));
        assert_eq!(parse_duration_ms("1500ms"), Ok(1500));
        assert_eq!(parse_duration_ms("2m"), Ok(120_000));
        assert_eq!(parse_duration_ms("3"), Ok(3000));
        assert!(parse_duration_ms("soon").is_err());
        assert!(parse_duration_ms("0s").is_err());
        assert_eq!(duration_text(20_000), "20s");
    }
}
