//! Exit codes, and the one place that maps a verdict or an error to one.
//!
//! Exit codes (documented in README.md, like ripgrep's `main`: by class):
//! 0 every invariant held; 1 an invariant was violated; 2 the verdict is
//! unknown; 64 bad arguments; 69 the server could not be found, started or
//! reached, or refused access; 70 an internal error; 73 the history could
//! not be written; 78 the `exec:` adapter could not start; 130 interrupted
//! (Ctrl-C); 141 stdout was closed early.
//!
//! # A closed stdout
//!
//! `ackgap check FILE | head` closes the pipe under the command. Rust
//! ignores SIGPIPE, so a write fails with `EPIPE`, and `println!` panics
//! on it (exit 101). Resetting SIGPIPE to its default would let the
//! kernel kill the process silently instead, but it would also kill it on
//! a write to any other closed pipe or socket: an `exec:` adapter's
//! stdin, a fault-proxy connection, where the run must see an error and
//! stop its servers. So SIGPIPE stays ignored, and every command prints
//! through [`write_out`] (the `out!` and `outln!` macros of `cli`): the
//! first failed write marks stdout closed and drops the rest, the command
//! finishes (servers stopped, files written), and `main` exits 141, the
//! code a shell shows for a process killed by SIGPIPE.
//!
//! # Design notes
//!
//! `Exit` converts from a `Verdict` and from each library error
//! (`ServerError`, `QueueError`, `ExploreError`, `ChaosError`, `BenchError`,
//! `MatrixError`, `UnknownMutant`, `MutantsError`); `ExitError` is an
//! error's message and its exit code.

use std::fmt::Display;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use ackgap::adapter::{ExecError, OpenError};
use ackgap::bench::BenchError;
use ackgap::campaign::HistoryWriteError;
use ackgap::chaos::persistence_matrix::MatrixError;
use ackgap::chaos::runner::ChaosError;
use ackgap::check::Verdict;
use ackgap::explore::ExploreError;
use ackgap::mutants::{MutantsError, UnknownMutant};
use ackgap::queue::QueueError;
use ackgap::server::ServerError;

/// How `ackgap` exits: the verdict's class, or the class of the error that
/// stopped it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: every invariant held (also `--help` and `--version`).
    Valid = 0,
    /// 1: an invariant was violated.
    Invalid = 1,
    /// 2: the verdict is unknown.
    Unknown = 2,
    /// 64: bad arguments or input.
    Usage = 64,
    /// 69: no server could be found, started or reached, or it refused
    /// to run the test (`queue::environment_refusal`: an ACL failure in
    /// or out of a script, `NOAUTH`, `WRONGPASS`, a missing command, a
    /// read-only replica).
    Unavailable = 69,
    /// 70: an internal error.
    Internal = 70,
    /// 78: the `exec:` adapter could not start: its command is missing or
    /// its library not installed (no venv), it exited or said nothing
    /// before answering its hello, or it refused the hello (another
    /// protocol, a required operation missing). The server was reached;
    /// no verdict. (sysexits' `EX_CONFIG`: 69 stays the server's.)
    AdapterUnavailable = 78,
    /// 73: the history could not be written (a path that is not writable,
    /// a full disk).
    CantCreate = 73,
    /// 130: interrupted by Ctrl-C.
    Interrupted = 130,
    /// 141: stdout was closed before everything was printed (128 +
    /// SIGPIPE, what a shell shows for a process the signal killed).
    StdoutClosed = 141,
}

/// Set by the first write to stdout that failed.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` to stdout; after a failed write (the reader went away)
/// writes nothing more, and [`stdout_closed`] says so.
pub fn write_out(args: std::fmt::Arguments<'_>) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if stdout.write_fmt(args).is_err() {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// True when a write to stdout failed: the exit code becomes
/// [`Exit::StdoutClosed`].
pub fn stdout_closed() -> bool {
    // What is still buffered must reach the reader too, or fail here.
    if std::io::stdout().lock().flush().is_err() {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

impl From<Verdict> for Exit {
    fn from(verdict: Verdict) -> Exit {
        match verdict {
            Verdict::Valid => Exit::Valid,
            Verdict::Invalid => Exit::Invalid,
            Verdict::Unknown => Exit::Unknown,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

/// An error on its way out: the message `main` prints after `ackgap: `,
/// and the exit code of its class.
#[derive(Debug)]
pub struct ExitError {
    /// The exit code.
    pub exit: Exit,
    /// What happened, with the context the command added.
    pub message: String,
}

impl ExitError {
    /// A failure of class `exit`.
    pub fn new(exit: Exit, message: impl Display) -> ExitError {
        ExitError {
            exit,
            message: message.to_string(),
        }
    }

    /// An explorer that stopped on `e`, said after `context`; a limit says
    /// that the verdict is unknown.
    pub fn explore(context: impl Display, e: &ExploreError) -> ExitError {
        let exit = Exit::from(e);
        let unknown = if exit == Exit::Unknown {
            "; verdict: unknown (not every interleaving asked for was checked)"
        } else {
            ""
        };
        ExitError::new(exit, format!("{context}: {e}{unknown}"))
    }

    /// A server that could not be stopped.
    pub fn stopping(e: ServerError) -> ExitError {
        ExitError::new(Exit::Internal, format!("stopping the server: {e}"))
    }
}

impl From<ServerError> for ExitError {
    /// A server that could not be found, started or reached; a request the
    /// backend cannot carry out (`--persistence` on a URL server, a spec
    /// that does not parse) is bad input.
    fn from(e: ServerError) -> ExitError {
        let exit = match &e {
            ServerError::Unsupported { .. }
            | ServerError::InvalidSpec { .. }
            | ServerError::NotReplicated { .. } => Exit::Usage,
            _ => Exit::Unavailable,
        };
        ExitError::new(exit, e)
    }
}

impl Exit {
    /// `--queue`: an unknown name is the user's; an `exec:` adapter that
    /// cannot be started, or whose hello is refused, is
    /// [`Exit::AdapterUnavailable`].
    pub fn of_open(e: &OpenError) -> Exit {
        match e {
            OpenError::Unknown(_) | OpenError::Exec(ExecError::Empty) => Exit::Usage,
            // Spawn, NoHello, Refused, and any kind added later.
            _ => Exit::AdapterUnavailable,
        }
    }

    /// The class of an error that stopped the campaign or the battery of
    /// `ackgap run`: a history that could not be written, an adapter that
    /// could not start, or else the server.
    pub fn of_campaign(e: &anyhow::Error) -> Exit {
        if e.is::<HistoryWriteError>() {
            Exit::CantCreate
        } else if e.chain().any(|c| {
            c.downcast_ref::<OpenError>().map(Exit::of_open) == Some(Exit::AdapterUnavailable)
                || c.is::<ExecError>()
        }) {
            Exit::AdapterUnavailable
        } else {
            Exit::Unavailable
        }
    }
}

impl From<&QueueError> for Exit {
    /// Connecting to a queue: a bad queue name is the user's; anything else
    /// is the server's.
    fn from(e: &QueueError) -> Exit {
        match e {
            QueueError::QueueName(_) => Exit::Usage,
            _ => Exit::Unavailable,
        }
    }
}

impl From<&ExploreError> for Exit {
    /// Every explorer (`explore`, `replay`, `exhaust`, `deliveries`): the
    /// queue left the model's path, a violation; a schedule the run cannot
    /// carry out (a worker it does not have, an operation the queue lacks)
    /// is bad input; a limit reached before the search could finish leaves
    /// the verdict unknown (the request was valid, and what was searched
    /// held, but not every interleaving asked for was checked); a model
    /// that breaks itself is ours; anything else is the server's.
    fn from(e: &ExploreError) -> Exit {
        match e {
            ExploreError::Divergence(_) => Exit::Invalid,
            ExploreError::NoSuchWorker { .. } | ExploreError::Unsupported { .. } => Exit::Usage,
            ExploreError::Limit { .. } => Exit::Unknown,
            ExploreError::Model { .. } => Exit::Internal,
            ExploreError::Stopped { source, .. } => Exit::from(source.as_ref()),
            ExploreError::Queue { source, .. } | ExploreError::Setup { source, .. } => {
                Exit::from(source)
            }
            // Any kind added later until it is classed.
            _ => Exit::Internal,
        }
    }
}

impl From<&ChaosError> for Exit {
    fn from(e: &ChaosError) -> Exit {
        match e {
            ChaosError::Usage(_) => Exit::Usage,
            ChaosError::Unavailable(_) => Exit::Unavailable,
            ChaosError::Adapter(_) => Exit::AdapterUnavailable,
            ChaosError::History(_) => Exit::CantCreate,
            // `Internal`, and any kind added later until it is classed.
            _ => Exit::Internal,
        }
    }
}

impl From<BenchError> for ExitError {
    fn from(e: BenchError) -> ExitError {
        let exit = match &e {
            BenchError::Server(_) | BenchError::Unavailable(_) => Exit::Unavailable,
            BenchError::NoRowMatches { .. } | BenchError::Usage(_) => Exit::Usage,
            BenchError::Open { source, .. } => Exit::of_open(source),
            // `Stop`, and any kind added later until it is classed.
            _ => Exit::Internal,
        };
        ExitError::new(exit, e)
    }
}

impl From<MatrixError> for ExitError {
    fn from(e: MatrixError) -> ExitError {
        let exit = match &e {
            MatrixError::UrlServer => Exit::Usage,
            MatrixError::Server(_) | MatrixError::Run { .. } => Exit::Unavailable,
            // `Stop`, and any kind added later until it is classed.
            _ => Exit::Internal,
        };
        ExitError::new(exit, e)
    }
}

impl From<ackgap::chaos::matrix::GridError> for ExitError {
    /// A grid cell's server that could not start, or a run that stopped.
    fn from(e: ackgap::chaos::matrix::GridError) -> ExitError {
        ExitError::new(Exit::Unavailable, e)
    }
}

impl From<OpenError> for ExitError {
    /// `--queue`: [`Exit::of_open`].
    fn from(e: OpenError) -> ExitError {
        ExitError::new(Exit::of_open(&e), e)
    }
}

impl From<UnknownMutant> for ExitError {
    fn from(e: UnknownMutant) -> ExitError {
        ExitError::new(Exit::Usage, e)
    }
}

impl From<MutantsError> for ExitError {
    /// A mutant that could not be judged is the tool's failure, not the
    /// server's: the server answered the start.
    fn from(e: MutantsError) -> ExitError {
        ExitError::new(Exit::Internal, e)
    }
}

impl From<serde_json::Error> for ExitError {
    /// A report that cannot be written as JSON.
    fn from(e: serde_json::Error) -> ExitError {
        ExitError::new(Exit::Internal, e)
    }
}
