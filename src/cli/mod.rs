//! The command line: the flags of each command, its output, and the exit
//! codes ([`exit`]). A module of the binary, not of the library: the library
//! returns typed reports and errors, and this is the one place that prints
//! them and turns them into exit codes (as Jepsen's `cli.clj` alone exits,
//! and ripgrep's flags live in its binary).
//!
//! One file per command; `mod.rs` parses, picks the runtime, handles
//! Ctrl-C, and routes.
//!
//! # Design notes
//!
//! `src/main.rs` declares `mod cli` and turns `cli::main()`'s `Exit` into
//! the process's exit code. `mod.rs` parses with clap; on Ctrl-C, dropping
//! the command's future stops its servers, and the exit is 130. It runs
//! `explore`, `replay`, `exhaust` and `deliveries` on a single-threaded
//! runtime (no thread hop per reply), except `explore --jobs N` with N
//! greater than 1.
//!
//! Each command's file holds its flags and prints what the library returns;
//! each validates every argument before it starts a server or touches a
//! file. The library never exits and never returns a code: clap and exit
//! codes appear only here and in `src/main.rs`, and
//! `tests/integration/house.rs` fails when they appear anywhere else.

use clap::{Parser, Subcommand};

// Every command prints to stdout through `out!` and `outln!`, never
// `print!` or `println!`, which panic when the reader went away (`ackgap
// check FILE | head`): see `exit::write_out`; and to stderr through `err!`
// and `errln!`. Defined before the commands' modules, so
// that they are in scope in each.

/// `print!` that never panics on a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::exit::write_out(format_args!($($arg)*))
    };
}

/// `eprint!` that never panics on a closed stderr (`2>&1 | head`): the
/// message is lost, the exit code still says what happened.
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = std::io::stderr().write_fmt(format_args!($($arg)*));
    }};
}

/// `errln!` that never panics on a closed stderr.
macro_rules! errln {
    () => {
        err!("\n")
    };
    ($($arg:tt)*) => {
        err!("{}\n", format_args!($($arg)*))
    };
}

/// `println!` that never panics on a closed stdout.
macro_rules! outln {
    () => {
        $crate::cli::exit::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::exit::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

use ackgap::explore::line::{shell_word, Rerun};
use ackgap::queue::Queue;
use ackgap::server::{Persistence, Server, ServerSpec};

mod artifacts;
mod bench;
mod bench_queues;
mod chaos;
mod check;
mod conformance;
mod deliveries;
mod envelope;
mod exhaust;
pub mod exit;
mod explore;
mod junit;
mod merge;
mod mutants;
#[cfg(test)]
mod pasted;
mod progress;
mod reduce;
mod report;
mod run;
mod serve;

pub use exit::{Exit, ExitError};

/// Proves, or disproves, the at-least-once bargain of a job queue built on
/// Valkey Lua scripts.
#[derive(Debug, Parser)]
#[command(name = "ackgap", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
    /// An `exec:` adapter's stderr on the terminal as it writes it (by
    /// default it goes to `adapter.log` in the run's directory, and its
    /// last lines are quoted when the adapter dies).
    #[arg(long, short, global = true)]
    verbose: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job, the default campaign against a real server: a bounded
    /// exhaustive search, random walks of every shipped consumer and the
    /// concurrent crash/reap/stale-ack scenario, one verdict table.
    Run(run::RunArgs),
    /// Re-judge a stored history (JSON lines) offline.
    Check(check::CheckArgs),
    /// The model checker: seeded random walks run against the pure model
    /// and a real server in lock step, checked after every step.
    Explore(explore::ExploreArgs),
    /// Run one replay line (`QUEUE/CONSUMER/CONFIG/STEPS`, as a failure
    /// prints it) exactly again, heal, and judge it.
    Replay(explore::ReplayArgs),
    /// Pin a wall-clock run's violations down on logical time: each read
    /// off the history as a schedule, run on a fresh queue, shrunk, and
    /// printed as an exact replay line with how often it reproduced.
    Reduce(reduce::ReduceArgs),
    /// Bounded exhaustive search: every interleaving up to a depth on the
    /// reference queue, paths reaching the same state merged, each new
    /// state checked against the server.
    Exhaust(exhaust::ExhaustArgs),
    /// The replay figure: one job delivered N times to a consumer (a crash
    /// in the ack gap before every ack but the last), deliveries against
    /// effects.
    Deliveries(deliveries::DeliveriesArgs),
    /// Lease/ack throughput of the reference queue, unbatched and batched,
    /// side by side with the ceiling and the LMOVE list pattern, plus the
    /// harness's own speed; every round's invariants are checked.
    Bench(bench::BenchArgs),
    /// The chaos runner: concurrent workers on wall-clock time, faults in
    /// the workers, the network and the server, the history judged after.
    Chaos(chaos::ChaosArgs),
    /// Mutation testing of the checker: broken scripts and consumers from
    /// lua/mutants/, each run until an invariant catches it; a kill matrix.
    Mutants(mutants::MutantsArgs),
    /// Combine the `--json` reports of the shards of one run (`ackgap
    /// explore --shard K/N --json`) into the report of the whole run, with
    /// its exit code.
    Merge(merge::MergeArgs),
    /// Serve a shipped queue over stdin and stdout by the adapter protocol
    /// (`--queue 'exec:ackgap serve-adapter --queue lmove'`).
    ServeAdapter(serve::ServeArgs),
    /// The adapter protocol's self-check (conformance.py, carried in the
    /// binary) on an adapter of your own: `ackgap conformance -- COMMAND`.
    Conformance(conformance::ConformanceArgs),
}

#[derive(Debug, clap::Args)]
// Where the queue runs, shared by the commands that start one server (a
// plain comment: a doc comment would become the help text of the commands
// that flatten it).
struct ServerArgs {
    /// Where the queue runs: `process` (an embedded valkey-server child),
    /// `replicated[:N]` (a primary and N replicas, default 2, as
    /// children), `cluster[:PxR]` (a Valkey Cluster of P primaries with R
    /// replicas each, default 3x1, as children), `container` (the local
    /// image built by ci/build-image), or a URL
    /// `redis://[user:pass@]host:port`.
    #[arg(long, default_value = "process", env = "ACKGAP_SERVER")]
    server: ServerSpec,
    /// Persistence of an embedded server: none, everysec or always.
    #[arg(long, default_value = "none")]
    persistence: Persistence,
}

impl ServerArgs {
    /// What a printed command adds to run again on this server (the
    /// persistence when it is not the default `none`).
    fn rerun(&self) -> Rerun {
        rerun(&self.server, self.persistence, Some(Persistence::None))
    }
}

/// What a printed command adds to run again on the server `spec` with
/// `persistence`: `--server` as [`ServerSpec::redacted`] names it (a URL
/// becomes `"$ACKGAP_SERVER"`, so no password is printed), `--persistence`
/// when the server is ours and it differs from the command's `default`
/// (`None`: always, when the server is ours),
/// and, for a process server run from `$ACKGAP_VALKEY_SERVER` (Redis, say),
/// that variable in front, so that the pasted line runs the same binary;
/// `$ACKGAP_APP` in front too when the run loads the user's app (`--app`).
fn rerun(spec: &ServerSpec, persistence: Persistence, default: Option<Persistence>) -> Rerun {
    let mut flags = format!(" --server {}", spec.redacted());
    let url = matches!(spec, ServerSpec::Url(_));
    if !url && Some(persistence) != default {
        flags.push_str(&format!(" --persistence {persistence}"));
    }
    let binary = std::env::var(ackgap::server::BINARY_ENV).unwrap_or_default();
    let mut env = if spec.is_process() && !binary.is_empty() {
        format!("{}={} ", ackgap::server::BINARY_ENV, shell_word(&binary))
    } else {
        String::new()
    };
    // The user's app (`--app`, exported before the runtime started), in
    // front like the binary: every printed line carries it, those the
    // library writes with the env alone (the durability matrix's) too.
    if let Some(app) = ackgap::adapter::App::asked() {
        env.push_str(&format!(
            "{}={} ",
            ackgap::adapter::APP_ENV,
            shell_word(&app)
        ));
    }
    Rerun { env, flags }
}

/// Parses the arguments, runs the command, and answers how to exit.
pub fn main() -> Exit {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` are not errors: they print to stdout.
            let exit = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Valid
            };
            let _ = e.print();
            return exit;
        }
    };
    if let Err(e) = export_app(&cli.command) {
        errln!("ackgap: {}", e.message);
        return e.exit;
    }
    let runtime = match runtime(&cli.command) {
        Ok(rt) => rt,
        Err(e) => {
            errln!("ackgap: cannot start the async runtime: {e}");
            return Exit::Internal;
        }
    };
    register_sigint(&runtime);
    // `ackgap chaos` handles Ctrl-C itself: it stops, heals and writes its
    // report on the history so far before it exits 130.
    let own_interrupt = matches!(cli.command, Command::Chaos(_));
    let exit = runtime.block_on(async {
        let interrupted = async {
            if own_interrupt {
                std::future::pending::<()>().await;
            }
            ctrl_c().await;
        };
        let exit = tokio::select! {
            res = run(cli) => match res {
                Ok(exit) => exit,
                Err(f) => {
                    errln!("ackgap: {}", f.message);
                    f.exit
                }
            },
            _ = interrupted => {
                // Dropping the command's future drops its servers, which
                // kills their children; a container's start cut short ends
                // in a task of its own and removes it (`settle`, below).
                errln!("ackgap: interrupted; servers stopped");
                Exit::Interrupted
            }
        };
        ackgap::server::settle(2 * ackgap::server::CONTAINER_START_DEADLINE).await;
        exit
    });
    // Output cut short: the code of a process killed by SIGPIPE, as the
    // shell knows it from every other tool at the head of a pipe.
    if exit::stdout_closed() {
        return Exit::StdoutClosed;
    }
    exit
}

/// `--app MODULE:ATTR`: the user's own configured app, for the commands
/// that run a queue (a plain comment on the struct: a doc comment would
/// become the commands' help text).
#[derive(Clone, Debug, Default, clap::Args)]
pub(super) struct AppArg {
    /// With an `exec:` queue: the user's own app, MODULE:ATTR (a Celery app,
    /// an RQ Queue class, a Dramatiq broker, arq WorkerSettings), imported
    /// by the adapter with the working directory on its path. Its settings
    /// that decide redelivery are kept; what the adapter overrides to drive
    /// the queue step by step is printed. Given to the adapter as
    /// $ACKGAP_APP.
    #[arg(long, value_name = "MODULE:ATTR", value_parser = parse_app, env = "ACKGAP_APP")]
    pub(super) app: Option<String>,
}

/// `MODULE:ATTR`, each a dotted Python name.
fn parse_app(s: &str) -> Result<String, String> {
    let dotted = |part: &str| {
        !part.is_empty()
            && part.split('.').all(|w| {
                w.chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                    && w.chars().all(|c| c.is_alphanumeric() || c == '_')
            })
    };
    match s.split_once(':') {
        Some((module, attr)) if dotted(module) && dotted(attr) => Ok(s.to_owned()),
        _ => Err(format!(
            "{s:?} is not MODULE:ATTR (a dotted module and an attribute, e.g. myproj.celery:app)"
        )),
    }
}

/// Exports `--app` as $ACKGAP_APP (before the runtime and any child
/// starts: every `exec:` adapter inherits it, and printed commands carry
/// it), after checking that the command's queue is one behind the adapter
/// protocol (`exec:` or a shipped adapter's name), the only kind that
/// loads an app.
fn export_app(command: &Command) -> Result<(), ExitError> {
    let (app, queue) = match command {
        Command::Run(a) => (&a.app, a.queue.as_deref()),
        Command::Explore(a) => (&a.app, Some(a.queue.as_str())),
        Command::Replay(a) => (&a.app, Some(a.line.as_str())),
        Command::Exhaust(a) => (&a.app, Some(a.queue.as_str())),
        Command::Chaos(a) => (&a.app, Some(a.queue.as_str())),
        _ => return Ok(()),
    };
    let Some(app) = &app.app else {
        return Ok(());
    };
    // exec:, or an adapter the binary carries (a replay line: its first part).
    let protocol = |q: &str| {
        q.starts_with("exec:")
            || ackgap::adapter::shipped::is_shipped(q.split('/').next().unwrap_or(q))
    };
    if !queue.is_some_and(protocol) {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "--app {app} (or $ACKGAP_APP) needs a queue behind the adapter protocol \
                 (--queue exec:COMMAND, an adapter the binary carries such as celery, or a \
                 replay line of one): only such an adapter loads the user's app"
            ),
        ));
    }
    std::env::set_var(ackgap::adapter::APP_ENV, app);
    Ok(())
}

/// The runtime `command` runs on.
///
/// The explorers run one step at a time: on one thread, a reply wakes the
/// waiting step without a hop between threads, which more than halves a
/// round trip's latency on a loaded machine. Everything else (concurrent
/// workers, the fault proxy, and `explore --jobs N` with N > 1, whose walks
/// then share the cores: on one thread two walks ran no faster than one)
/// gets the multi-threaded runtime.
/// The SIGINT stream registered as soon as the runtime is built (in
/// [`main`]), for the first listener: tokio's `ctrl_c()` registers only
/// when first polled, and a listener made later does not see a signal
/// that came before it.
static SIGINT: std::sync::Mutex<Option<tokio::signal::unix::Signal>> = std::sync::Mutex::new(None);

/// Makes SIGINT ackgap's from here on: a Ctrl-C before any command
/// listens is kept for the first listener ([`ctrl_c`]), not the default
/// action's death.
fn register_sigint(runtime: &tokio::runtime::Runtime) {
    let _entered = runtime.enter();
    let interrupt = tokio::signal::unix::SignalKind::interrupt();
    if let Ok(stream) = tokio::signal::unix::signal(interrupt) {
        *SIGINT.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream);
    }
}

/// Waits for a Ctrl-C: on the stream registered at start-up when this is
/// its first listener (a Ctrl-C that came before is seen at once), else
/// on a listener of its own.
pub(super) async fn ctrl_c() {
    let early = SIGINT.lock().unwrap_or_else(|e| e.into_inner()).take();
    match early {
        Some(mut stream) => {
            stream.recv().await;
        }
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn runtime(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    let sequential = match command {
        Command::Explore(args) => !args.parallel(),
        _ => false,
    } || matches!(
        command,
        Command::Replay(_)
            | Command::Reduce(_)
            | Command::Exhaust(_)
            | Command::Deliveries(_)
            | Command::ServeAdapter(_)
    );
    let mut builder = if sequential {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder.enable_all().build()
}

/// Runs the command `cli` names.
async fn run(cli: Cli) -> Result<Exit, ExitError> {
    VERBOSE.store(cli.verbose, std::sync::atomic::Ordering::Relaxed);
    // Until a command makes a directory of its own for the run (`run
    // --queue`, `chaos`: [`log_adapter_in`]), its adapters log in its
    // folder; the file is made when the first adapter starts.
    let folder = match &cli.command {
        Command::Run(_) => "runs",
        Command::Check(_) | Command::Merge(_) => "check",
        Command::Explore(_) => "explore",
        Command::Replay(_) => "replay",
        Command::Reduce(_) => "reduce",
        Command::Exhaust(_) => "exhaust",
        Command::Deliveries(_) => "deliveries",
        Command::Chaos(_) => "chaos",
        Command::Mutants(_) => "mutants",
        Command::Bench(_) => "bench",
        Command::ServeAdapter(_) => "serve-adapter",
        Command::Conformance(_) => "conformance",
    };
    log_adapter_in(&artifacts::command_dir(folder));
    match cli.command {
        Command::Run(args) => run::run(args).await,
        Command::Check(args) => check::run(args),
        Command::Explore(args) => explore::run(args).await,
        Command::Replay(args) => explore::replay(args).await,
        Command::Reduce(args) => reduce::run(args).await,
        Command::Exhaust(args) => exhaust::run(args).await,
        Command::Deliveries(args) => deliveries::run(args).await,
        Command::Chaos(args) => chaos::run(args).await,
        Command::Mutants(args) => mutants::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::ServeAdapter(args) => serve::run(args).await,
        Command::Merge(args) => merge::run(args),
        Command::Conformance(args) => conformance::run(args).await,
    }
}

/// `--verbose`: an adapter's stderr stays on the terminal.
static VERBOSE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sends the stderr of the `exec:` adapters started from now on to
/// `dir/adapter.log`, unless `--verbose`.
pub(crate) fn log_adapter_in(dir: &std::path::Path) {
    if !VERBOSE.load(std::sync::atomic::Ordering::Relaxed) {
        ackgap::adapter::log_stderr_to(Some(dir.join("adapter.log")));
    }
}

/// The bounds of the commands' counts (a limit on everything, stated in
/// `--help` and in the refusal: exit 64 past one).
pub(crate) mod bounds {
    /// Random steps per walk.
    pub const STEPS_MAX: usize = 1_000_000;
    /// Walks (seeds) in one command.
    pub const SEEDS_MAX: u64 = 1_000_000;
    /// Walks or mutants in flight at once.
    pub const JOBS_MAX: u64 = 256;
    /// Runs a shrink may make.
    pub const SHRINK_RUNS_MAX: usize = 1_000_000;
    /// Depth of an exhaustive search (its states are bounded apart, by
    /// `--states-max`).
    pub const DEPTH_MAX: usize = 1_000;
    /// States an exhaustive search may keep.
    pub const STATES_MAX: usize = 100_000_000;
}

/// A count in `MIN..=MAX` (clap's own range is for integers of fixed
/// width, not `usize`): outside it, a refusal naming the bound.
pub(crate) fn count<const MIN: usize, const MAX: usize>(s: &str) -> Result<usize, String> {
    let n: u128 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number"))?;
    usize::try_from(n)
        .ok()
        .filter(|n| (MIN..=MAX).contains(n))
        .ok_or_else(|| format!("{n} is not in {MIN}..={MAX}"))
}

/// A queue name (`--queue-name`) that no queue can have is a usage error,
/// found before any server starts.
fn check_queue_name(name: &str) -> Result<(), ExitError> {
    ackgap::queue::Keys::new(name)
        .map(drop)
        .map_err(|e| ExitError::new(Exit::Usage, format!("--queue-name: {e}")))
}

/// Starts the server `spec` names, with errors classed for exit codes.
async fn start_server(spec: &ServerSpec, persistence: Persistence) -> Result<Server, ExitError> {
    Ok(Server::start(spec, persistence).await?)
}

/// Starts the server `spec` names for the explorers: under libfaketime,
/// so that a queue that follows the clock runs on logical time; where it
/// cannot, on real time, and the second value says why.
async fn start_explorer_server(
    spec: &ServerSpec,
    persistence: Persistence,
) -> Result<(Server, Option<String>), ExitError> {
    Ok(Server::start_for_explorers(spec, persistence).await?)
}

/// Connects to queue `name` on `server`: a bad name is a usage error, any
/// other failure an unavailable server.
async fn connect(server: &Server, name: &str) -> Result<Queue, ExitError> {
    Queue::connect(&server.client(), name)
        .await
        .map_err(|e| match Exit::from(&e) {
            Exit::Usage => ExitError::new(Exit::Usage, e),
            exit => ExitError::new(exit, format!("cannot reach {}: {e}", server.describe())),
        })
}

/// Stops `server`; a server that does not stop cleanly is an internal
/// error.
async fn stop(server: Server) -> Result<(), ExitError> {
    server.stop().await.map_err(ExitError::stopping)
}

/// The invariants table: one row per report, its counts and violations.
fn print_invariants(reports: &[ackgap::check::Report]) {
    outln!("{:<18} {:<13}  counts", "invariant", "verdict");
    for r in reports {
        let mut counts: Vec<String> = r.judged_text().into_iter().collect();
        counts.extend(r.counts.iter().map(|(k, v)| format!("{k}={v}")));
        outln!(
            "{:<18} {:<13}  {}",
            r.invariant,
            r.verdict_text(),
            counts.join(" ")
        );
        // An unknown invariant's entries say why it could not be judged.
        let word = if r.verdict == ackgap::check::Verdict::Unknown {
            "not judged"
        } else {
            "violation"
        };
        for v in &r.violations {
            outln!("    {word}: {v}");
            if !v.events.is_empty() {
                outln!("      {}", v.cites());
            }
        }
    }
}

/// `--require-exercised`: a run that is otherwise valid but gave one of
/// these invariants no chance to break exits 2 (unknown), for a CI that
/// wants every verdict to rest on evidence.
#[derive(Clone, Debug, Default, clap::Args)]
pub(super) struct RequireExercised {
    /// Exit 2 (unknown) when the verdict is valid but one of these
    /// invariants was not exercised (no run gave it a chance to break):
    /// comma-separated names, or `all`.
    #[arg(long, value_name = "INV,...|all", value_parser = parse_required)]
    require_exercised: Option<Required>,
}

/// The invariants `--require-exercised` names, parsed ([`parse_required`]).
#[derive(Clone, Debug)]
pub(super) struct Required(Vec<String>);

/// The invariants `--require-exercised` names: `all` is every checker's,
/// and a name that is not an invariant is a usage error.
fn parse_required(s: &str) -> Result<Required, String> {
    let known: Vec<&str> = ackgap::check::CHECKERS.iter().map(|(n, _)| *n).collect();
    if s.trim() == "all" {
        return Ok(Required(known.iter().map(|n| (*n).to_owned()).collect()));
    }
    let names: Vec<String> = s
        .split(',')
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Err("name at least one invariant, or `all`".into());
    }
    for n in &names {
        if !known.contains(&n.as_str()) {
            return Err(format!(
                "{n:?} is not an invariant; the invariants: {}, or all",
                known.join(", ")
            ));
        }
    }
    Ok(Required(names))
}

impl RequireExercised {
    /// `verdict`, made unknown when it is valid and an invariant this
    /// asks for is in `missing` (the run's invariants not exercised),
    /// saying so on stderr.
    pub(super) fn apply(&self, verdict: ackgap::check::Verdict, missing: &[&str]) -> Exit {
        use ackgap::check::Verdict;
        let Some(Required(required)) = &self.require_exercised else {
            return verdict.into();
        };
        let short: Vec<&str> = missing
            .iter()
            .copied()
            .filter(|m| required.iter().any(|r| r == m))
            .collect();
        if verdict != Verdict::Valid || short.is_empty() {
            return verdict.into();
        }
        errln!(
            "ackgap: --require-exercised: not exercised: {}; exit 2 (unknown)",
            short.join(", ")
        );
        Exit::Unknown
    }
}
