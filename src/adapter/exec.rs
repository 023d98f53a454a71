//! `--queue exec:COMMAND`: a queue in any language behind the adapter
//! protocol (`docs/adapter-protocol.md`), as Maelstrom runs any program that
//! speaks JSON lines. [`Exec`] starts `sh -c COMMAND` in its own process
//! group, says `hello` (protocol 1, the server URL, the queue name, the
//! per-worker `connections`), takes the adapter's capabilities from the
//! answer, and then sends one request per queue call, one JSON object a
//! line, with increasing ids; a reader task matches each answer to its
//! request by `in_reply_to`, so several requests may be in flight.
//!
//! Three outcomes of a call, kept apart as the history needs them:
//!
//! - an answer: `ok` is mapped onto ackgap's outcome types, `error` onto a
//!   [`QueueError`] of its kind (`unknown` stays unknown: `info`);
//! - no answer within [`ExecOptions::request_timeout`]: an unknown outcome
//!   (`info`), exactly like a lost reply; a late answer is then dropped;
//! - a broken protocol (the adapter exits or closes its stdout, prints a
//!   line that is not a valid answer, answers an id never asked or already
//!   answered): [`QueueError::Adapter`], naming the line, for this call and
//!   every later one, and the child's process group is killed. The run
//!   stops; it is not a verdict about the queue.
//!
//! The child's stderr (an interpreter's tracebacks, a library's logging)
//! goes where [`log_stderr_to`] says, process-wide: a file each child
//! appends to under a header naming it, and its last lines
//! ([`STDERR_TAIL`]) are quoted in the error when the child dies or
//! refuses its hello; without a file (the default, and `--verbose`) it is
//! the terminal's, as it was.
//!
//! The child never outlives the last handle: dropping it closes the
//! child's stdin, waits up to 2 s for it to exit, and kills its process
//! group. ackgap keeps its own connection to the server ([`Queue`]) for
//! the consumers' effects, which live under [`Keys`] of the queue name;
//! [`Adapter::clear`] asks the adapter to clear, then deletes those keys.
//!
//! # Design notes
//!
//! Requests are sent by a writer task; the reader task routes each answer to
//! its waiting call through a map of oneshot senders. `Exec::for_worker`
//! gives handles of the same child with another `worker` name; the chaos
//! runner (`runner/context.rs`, `connect_run`) starts one child per run
//! whose hello names each worker's fault-proxy URL.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

use super::protocol::{remote_error, Error as Remote, Request};
use super::protocol::{Answer, Call, Granted, Hello, HelloOk, Op, ReapedJob};
use super::{Adapter, BoxFuture, Capabilities, ConnectionManager, Operation, Read};
use crate::queue::client::EnqueueOptions;
use crate::queue::{Enqueued, Extended, Failed, Keys, Lease, Queue, QueueError};
use crate::queue::{Reaped, Settled};

/// The protocol version this side speaks.
pub use super::protocol::PROTOCOL;

mod reopen;
mod stderr;
use stderr::{copy_stderr, open_stderr_log, StderrLog};

/// How long the child may take to exit after its stdin closed before its
/// process group is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How much of an offending line an error quotes.
const QUOTE_MAX: usize = 200;

/// How many of the child's last stderr lines an error about its death
/// quotes (the whole stderr is in the log file).
pub const STDERR_TAIL: usize = 12;

/// Where every `exec:` child started from now on writes its stderr:
/// `None`, the terminal (inherited).
static STDERR_LOG: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

/// Sends the stderr of every `exec:` child started after this call to
/// `path` (appended; its folder is made when the first child starts),
/// or back to the terminal (`None`). The command-line tool points it at
/// the run's directory unless `--verbose`.
pub fn log_stderr_to(path: Option<std::path::PathBuf>) {
    *lock(&STDERR_LOG) = path;
}

/// Where the stderr of a child started now goes ([`log_stderr_to`]).
pub fn stderr_log() -> Option<std::path::PathBuf> {
    lock(&STDERR_LOG).clone()
}

/// How an [`Exec`] adapter talks to its child.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// How long a request may wait for its answer before its outcome is
    /// unknown (`info`). Default 5 s.
    pub request_timeout: Duration,
    /// How long the child may take to answer `hello` (an interpreter and
    /// its packages may be slow to start). Default 30 s.
    pub hello_timeout: Duration,
    /// Per-worker server URLs for the hello's `connections` (the chaos
    /// runner's fault-proxy ports); workers not named use the server URL.
    pub connections: BTreeMap<String, String>,
}

impl Default for ExecOptions {
    fn default() -> ExecOptions {
        ExecOptions {
            request_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(30),
            connections: BTreeMap::new(),
        }
    }
}

/// Why an `exec:` adapter could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// `exec:` with nothing after it.
    #[error("exec: needs a command, e.g. exec:'python3 adapter.py'")]
    Empty,
    /// `sh -c COMMAND` could not be started.
    #[error("exec:{command}: cannot start sh -c: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// The spawn error.
        source: std::io::Error,
    },
    /// The child gave no valid answer to `hello` (it exited, timed out or
    /// printed something else).
    #[error("exec:{command}: no answer to hello: {message}")]
    NoHello {
        /// The command.
        command: String,
        /// What happened.
        message: String,
    },
    /// The child answered `hello`, but ackgap cannot drive it: another
    /// protocol, a required operation missing, or an error answer.
    #[error("exec:{command}: hello refused: {message}")]
    Refused {
        /// The command.
        command: String,
        /// Why.
        message: String,
    },
}

/// An answer's `ok`, or its error (its kind and message).
type Outcome = Result<Value, Remote>;

/// The request lines that may wait for the writer task. Each caller (a
/// worker of a walk or of chaos) has one request in flight and waits for its
/// answer, so the lines waiting are at most the workers, a few to a few
/// dozen; 64 leaves them room. A full channel makes the caller wait (within
/// its request timeout), never drops a line.
const LINES_QUEUED: usize = 64;

/// What the handles and the reader share: the requests in flight and the
/// fatal error, once there is one.
struct Link {
    command: String,
    next_id: AtomicU64,
    /// Requests in flight, by id.
    pending: Mutex<HashMap<u64, oneshot::Sender<Outcome>>>,
    /// Requests given up after their timeout: a late answer is dropped.
    abandoned: Mutex<HashSet<u64>>,
    /// Set once, by the first broken rule; every later call fails with it.
    fatal: Mutex<Option<String>>,
    /// Request lines for the writer task, at most [`LINES_QUEUED`] waiting.
    lines: mpsc::Sender<String>,
    /// The child's stdin, taken (closed) on shutdown.
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    /// The child (`sh`), the leader of its own process group.
    child: Mutex<Option<Child>>,
    pgid: Option<i32>,
    /// The instant every request carries as `clock_ms` ([`Adapter::set_clock`]);
    /// [`NO_CLOCK`]: none, real time.
    clock_ms: AtomicU64,
    /// The child's stderr when it is logged: the file, its last
    /// [`STDERR_TAIL`] lines, and whether it has ended.
    stderr: Option<StderrLog>,
}

/// [`Link::clock_ms`] when no instant is set.
const NO_CLOCK: u64 = u64::MAX;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `text` cut to [`QUOTE_MAX`] bytes (on a char boundary), debug-quoted.
fn quote(text: &str) -> String {
    if text.len() <= QUOTE_MAX {
        return format!("{text:?}");
    }
    let mut end = QUOTE_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &text[..end], text.len())
}

impl Link {
    fn fatal(&self) -> Option<String> {
        lock(&self.fatal).clone()
    }

    /// `message` with the child's last stderr lines when they are logged
    /// (waiting briefly for the child's stderr to end, so that the lines
    /// it wrote as it died are there).
    async fn with_stderr(&self, message: String) -> String {
        let Some(log) = &self.stderr else {
            return message;
        };
        let mut ended = log.ended.subscribe();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, ended.wait_for(|e| *e)).await;
        format!("{message}{}", log.quoted())
    }

    /// Records the first broken rule, kills the child's group and wakes
    /// every request in flight (their senders drop).
    fn break_with(&self, message: String) {
        {
            let mut fatal = lock(&self.fatal);
            if fatal.is_none() {
                *fatal = Some(message);
            }
        }
        self.kill();
        lock(&self.pending).clear();
    }

    fn kill(&self) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
    }

    /// Routes one line of the child's stdout (`n` counts from 1).
    fn route(&self, n: u64, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        let (id, answer) = match parse_answer(line) {
            Ok(parsed) => parsed,
            Err(why) => {
                self.break_with(format!("stdout line {n} {why}: {}", quote(line)));
                return;
            }
        };
        let sender = lock(&self.pending).remove(&id);
        match sender {
            // The caller may have stopped waiting in the meantime: fine.
            Some(tx) => drop(tx.send(answer)),
            None if lock(&self.abandoned).remove(&id) => {}
            None => {
                let why = if id < self.next_id.load(Ordering::SeqCst) {
                    "answers a request that was answered already"
                } else {
                    "answers a request that was never asked"
                };
                self.break_with(format!("stdout line {n} {why} (id {id}): {}", quote(line)));
            }
        }
    }
}

/// Parses an answer line: its `in_reply_to` and its `ok` or `error` (an
/// error of a kind the protocol does not name breaks it, as any line that
/// is not a valid answer does).
fn parse_answer(line: &str) -> Result<(u64, Outcome), String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("is not JSON ({e})"))?;
    if !value.is_object() {
        return Err("is not a JSON object".into());
    }
    let answer: Answer = serde_path_to_error::deserialize(&value)
        .map_err(|e| format!("is not a valid answer ({})", at(&e)))?;
    Ok((answer.in_reply_to, answer.result))
}

/// A deserialization error with the path of the field it is about.
fn at(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    match e.path().to_string().as_str() {
        "." => e.inner().to_string(),
        path => format!("{path}: {}", e.inner()),
    }
}

/// Kills process group `pgid` (SIGKILL).
#[allow(unsafe_code)]
fn kill_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions. `pgid` is the
    // pid of our child `sh`, which made itself a group leader at spawn and
    // is not reaped before this runs, so the group is ours.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// The child process and its tasks: dropped with the last handle.
struct Guard {
    link: Arc<Link>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Close stdin (the adapter exits on EOF), give it a moment, then
        // kill whatever is left of its group.
        if let Ok(mut stdin) = self.link.stdin.try_lock() {
            stdin.take();
            let deadline = Instant::now() + SHUTDOWN_GRACE;
            if let Some(child) = lock(&self.link.child).as_mut() {
                while Instant::now() < deadline {
                    match child.try_wait() {
                        Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                        _ => break,
                    }
                }
            }
        }
        self.link.kill();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What every handle of one child shares.
struct Shared {
    /// The child: another one after [`Adapter::reopen`].
    guard: Mutex<Guard>,
    /// The server URL its hello names.
    server_url: String,
    /// `exec:COMMAND`: what `--queue` took, and the replay line carries.
    name: String,
    /// The name the adapter gave in its hello.
    adapter_name: String,
    capabilities: Capabilities,
    /// The user's app its hello says it loaded (`--app`).
    app: Option<super::App>,
    queue: Queue,
    options: ExecOptions,
    /// Who was granted each (job, token) through this child, so that its
    /// settle goes out under the same worker name.
    lessees: Mutex<HashMap<(String, u64), String>>,
    /// Every worker name a request of this child carried: its sessions.
    names: Mutex<std::collections::BTreeSet<String>>,
}

/// A queue behind the adapter protocol: one child `sh -c COMMAND`, shared
/// by every handle. A handle of [`Exec::for_worker`] names one worker in
/// all its requests; the handle [`Exec::start`] answers names each request
/// by its role, as the explorers' history does: `producer` (enqueue),
/// `reaper`, `checker` (read, clear), the lessee (lease), and for a settle
/// or an extend the worker that was granted that job's lease with that
/// token.
#[derive(Clone)]
pub struct Exec {
    shared: Arc<Shared>,
    worker: Option<String>,
}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exec")
            .field("name", &self.shared.name)
            .field("adapter", &self.shared.adapter_name)
            .field("worker", &self.worker)
            .finish()
    }
}

impl Exec {
    /// Starts `sh -c command` in the current directory, says hello with
    /// `server_url` and `queue`'s name, and answers a handle named
    /// its requests by their role. `queue` is ackgap's own connection (consumers'
    /// effects, [`Adapter::clear`]).
    pub async fn start(
        command: &str,
        queue: &Queue,
        server_url: &str,
        options: ExecOptions,
    ) -> Result<Exec, ExecError> {
        if command.trim().is_empty() {
            return Err(ExecError::Empty);
        }
        let (guard, (adapter_name, capabilities, app)) =
            greeted(command, &queue.keys().name, server_url, &options).await?;
        Ok(Exec {
            shared: Arc::new(Shared {
                guard: Mutex::new(guard),
                server_url: server_url.to_owned(),
                name: format!("exec:{command}"),
                adapter_name,
                capabilities,
                app,
                queue: queue.on_server_clock(),
                options,
                lessees: Mutex::new(HashMap::new()),
                names: Mutex::default(),
            }),
            worker: None,
        })
    }

    /// A handle on the same child whose requests carry `worker`: the
    /// adapter keeps one server connection per worker name.
    pub fn for_worker(&self, worker: &str) -> Exec {
        Exec {
            shared: Arc::clone(&self.shared),
            worker: Some(worker.to_owned()),
        }
    }

    /// The worker name every request of this handle carries (`None`: each
    /// names its role).
    pub fn worker(&self) -> Option<&str> {
        self.worker.as_deref()
    }

    /// The worker name of a request of `role`: this handle's, else the
    /// role's own.
    fn named<'a>(&'a self, role: &'a str) -> &'a str {
        self.worker.as_deref().unwrap_or(role)
    }

    /// The worker name of a settle or extend of (`job`, `token`): this
    /// handle's, else the lessee's (`w0` for a lease not granted here).
    fn holder(&self, job: &str, token: u64) -> String {
        if let Some(worker) = &self.worker {
            return worker.clone();
        }
        lock(&self.shared.lessees)
            .get(&(job.to_owned(), token))
            .cloned()
            .unwrap_or_else(|| "w0".into())
    }

    /// The child's pid (its process group's id), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.link().pgid.and_then(|p| u32::try_from(p).ok())
    }

    /// The link to the child running now.
    fn link(&self) -> Arc<Link> {
        Arc::clone(&lock(&self.shared.guard).link)
    }

    /// Sends `call` from `worker` and maps the answer's errors.
    async fn call(&self, worker: &str, call: Call) -> Result<Value, QueueError> {
        let timeout = self.shared.options.request_timeout;
        self.call_within(worker, call, timeout).await
    }

    /// [`Exec::call`] with its own bound on the wait for the answer.
    async fn call_within(
        &self,
        worker: &str,
        call: Call,
        timeout: Duration,
    ) -> Result<Value, QueueError> {
        let op = call.op().name();
        let supported =
            (call.op().operation()).is_none_or(|o| self.shared.capabilities.supports(o));
        if !supported {
            return Err(QueueError::Unsupported { op });
        }
        lock(&self.shared.names).insert(worker.to_owned());
        match request(&self.link(), Some(worker), call, timeout).await {
            Ok(ok) => Ok(ok),
            Err(Called::Remote(r)) => Err(remote_error(op, r)),
            Err(Called::TimedOut(ms)) => Err(QueueError::Unknown {
                op,
                reason: format!("the adapter did not answer within {ms} ms"),
            }),
            Err(Called::Broken(message)) => Err(QueueError::Adapter { op, message }),
        }
    }
}

/// Starts `sh -c command`, says hello with `server_url` and the `queue`
/// name, and answers the child with what its hello said: its name, its
/// capabilities, the app it loaded.
async fn greeted(
    command: &str,
    queue: &str,
    server_url: &str,
    options: &ExecOptions,
) -> Result<(Guard, Hellod), ExecError> {
    let (link, tasks) = spawn(command)?;
    let guard = Guard {
        link: Arc::clone(&link),
        tasks,
    };
    let hello = Call::Hello(Hello {
        protocol: PROTOCOL,
        server: server_url.to_owned(),
        queue: queue.to_owned(),
        connections: options.connections.clone(),
    });
    let answer = request(&link, None, hello, options.hello_timeout).await;
    let no_hello = |message: String| ExecError::NoHello {
        command: command.to_owned(),
        message,
    };
    let refused = |message: String| ExecError::Refused {
        command: command.to_owned(),
        message,
    };
    let ok = match answer {
        Ok(ok) => ok,
        Err(Called::Remote(r)) => return Err(refused(format!("{}: {}", r.kind.name(), r.message))),
        Err(Called::TimedOut(ms)) => {
            let message = link.with_stderr(format!("none within {ms} ms")).await;
            return Err(no_hello(message));
        }
        Err(Called::Broken(m)) => return Err(no_hello(m)),
    };
    Ok((guard, read_hello(&ok).map_err(refused)?))
}

/// What a hello answered: the adapter's name, its capabilities, its app.
type Hellod = (String, Capabilities, Option<super::App>);

/// Why a request got no `ok`.
enum Called {
    Remote(Remote),
    TimedOut(u128),
    Broken(String),
}

/// Sends `call` (from `worker`) and waits for its answer for at most
/// `timeout`.
async fn request(
    link: &Arc<Link>,
    worker: Option<&str>,
    call: Call,
    timeout: Duration,
) -> Result<Value, Called> {
    if let Some(message) = link.fatal() {
        return Err(Called::Broken(message));
    }
    let id = link.next_id.fetch_add(1, Ordering::SeqCst);
    let clock_ms = link.clock_ms.load(Ordering::SeqCst);
    let request = Request {
        id,
        worker: worker.map(str::to_owned),
        clock_ms: (clock_ms != NO_CLOCK && !matches!(call, Call::Hello(_))).then_some(clock_ms),
        call,
    };
    let text = serde_json::to_string(&request)
        .map_err(|e| Called::Broken(format!("request {id} cannot be written: {e}")))?;
    let (tx, rx) = oneshot::channel();
    lock(&link.pending).insert(id, tx);
    // A fatal error may have come between the check and the insert: it
    // cleared `pending` before our insert, so look again.
    if let Some(message) = link.fatal() {
        lock(&link.pending).remove(&id);
        return Err(Called::Broken(message));
    }
    // The request's timeout covers the wait for room in the channel too (a
    // child that stops reading its stdin fills it): the request then times
    // out as before, instead of waiting for ever.
    let deadline = tokio::time::Instant::now() + timeout;
    let sent = tokio::time::timeout_at(deadline, link.lines.send(text)).await;
    if let Ok(Err(_)) = sent {
        lock(&link.pending).remove(&id);
        let message = link
            .fatal()
            .unwrap_or_else(|| "the adapter's stdin is closed".into());
        return Err(Called::Broken(message));
    }
    let answered = match sent {
        Ok(_) => tokio::time::timeout_at(deadline, rx).await,
        Err(elapsed) => Err(elapsed),
    };
    match answered {
        Ok(Ok(answer)) => answer.map_err(Called::Remote),
        Ok(Err(_)) => Err(Called::Broken(
            link.fatal()
                .unwrap_or_else(|| "the adapter link closed".into()),
        )),
        Err(_) => {
            // Abandon before removing, so that an answer arriving in
            // between finds one of the two.
            lock(&link.abandoned).insert(id);
            if lock(&link.pending).remove(&id).is_none() {
                // The answer came just now, and was sent to `rx`, which
                // is gone: it counts as late.
                lock(&link.abandoned).remove(&id);
            }
            Err(Called::TimedOut(timeout.as_millis()))
        }
    }
}

/// The adapter's name and capabilities from its hello answer. The
/// version comes first: another version's hello may have another shape.
fn read_hello(ok: &Value) -> Result<Hellod, String> {
    if let Some(protocol) = ok.get("protocol") {
        if protocol.as_u64() != Some(PROTOCOL) {
            return Err(format!(
                "the adapter speaks protocol {protocol}, ackgap speaks {PROTOCOL}"
            ));
        }
    }
    let hello: HelloOk = serde_path_to_error::deserialize(ok)
        .map_err(|e| format!("{} in {}", at(&e), quote(&ok.to_string())))?;
    // Tokens are opaque unless the adapter says they rise (the protocol
    // asks only that a token name its delivery), dedup is promised unless
    // it says false (a hello written before it said nothing), operations
    // this side does not know are ignored (a newer adapter may offer more).
    let capabilities = hello.capabilities.capabilities();
    let missing = capabilities.missing_required();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|o| o.name()).collect();
        return Err(format!(
            "required operations missing: {} (every adapter must support {})",
            names.join(", "),
            Operation::REQUIRED.map(|o| o.name()).join(", ")
        ));
    }
    super::app::confirm(super::App::asked().as_deref(), hello.app.as_ref())?;
    Ok((hello.name, capabilities, hello.app))
}

/// Starts `sh -c command` in a process group of its own, and its writer
/// and reader tasks.
fn spawn(command: &str) -> Result<(Arc<Link>, Vec<tokio::task::JoinHandle<()>>), ExecError> {
    let log = open_stderr_log();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(match &log {
            Some(_) => std::process::Stdio::piped(),
            None => std::process::Stdio::inherit(),
        })
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ExecError::Spawn {
            command: command.to_owned(),
            source,
        })?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take();
    let logged = log.map(|(path, file)| {
        use std::io::Write as _;
        let mut file = file;
        // One header per child: a log holds every child of the run.
        let _ = writeln!(
            file,
            "== exec:{command} (pid {}) ==",
            child.id().unwrap_or(0)
        );
        let (ended, _) = tokio::sync::watch::channel(false);
        (
            StderrLog {
                path,
                tail: Mutex::new(std::collections::VecDeque::new()),
                ended,
            },
            file,
        )
    });
    let (stderr_log, stderr_file) = match logged {
        Some((log, file)) => (Some(log), Some(file)),
        None => (None, None),
    };
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    let (lines, rx) = mpsc::channel(LINES_QUEUED);
    let link = Arc::new(Link {
        command: command.to_owned(),
        next_id: AtomicU64::new(0),
        pending: Mutex::new(HashMap::new()),
        abandoned: Mutex::new(HashSet::new()),
        fatal: Mutex::new(None),
        lines,
        stdin: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
        child: Mutex::new(Some(child)),
        pgid,
        clock_ms: AtomicU64::new(NO_CLOCK),
        stderr: stderr_log,
    });
    let writer = tokio::spawn(write_lines(Arc::downgrade(&link), rx));
    let reader = tokio::spawn(read_lines(Arc::downgrade(&link), stdout));
    let mut tasks = vec![writer, reader];
    if let (Some(stderr), Some(file)) = (stderr, stderr_file) {
        tasks.push(tokio::spawn(copy_stderr(
            Arc::downgrade(&link),
            stderr,
            file,
        )));
    }
    Ok((link, tasks))
}

/// The writer task: each request line, `\n`-terminated and flushed.
async fn write_lines(link: std::sync::Weak<Link>, mut rx: mpsc::Receiver<String>) {
    while let Some(mut line) = rx.recv().await {
        let Some(link) = link.upgrade() else { return };
        line.push('\n');
        let mut stdin = link.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else { return };
        let written = async {
            pipe.write_all(line.as_bytes()).await?;
            pipe.flush().await
        }
        .await;
        drop(stdin);
        if let Err(e) = written {
            // The child has probably exited: let the reader, which sees
            // its stdout end, report that with its exit status; say what
            // the writer saw only if it does not come.
            let deadline = Instant::now() + SHUTDOWN_GRACE;
            while link.fatal().is_none() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            link.break_with(format!(
                "cannot write to exec:{} ({e}); it has probably exited",
                link.command
            ));
            return;
        }
    }
}

/// The reader task: routes each line of the child's stdout; at EOF the
/// child is waited for (briefly) and the link broken.
async fn read_lines(link: std::sync::Weak<Link>, stdout: ChildStdout) {
    let mut lines = BufReader::new(stdout).lines();
    let mut n: u64 = 0;
    let end = loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                n += 1;
                let Some(link) = link.upgrade() else { return };
                link.route(n, &line);
            }
            Ok(None) => break "closed its stdout".to_owned(),
            Err(e) => break format!("stdout unreadable after line {n} ({e})"),
        }
    };
    let Some(link) = link.upgrade() else { return };
    if link.fatal().is_some() {
        return;
    }
    let child = lock(&link.child).take();
    let status = match child {
        Some(mut child) => {
            let status = tokio::time::timeout(SHUTDOWN_GRACE, child.wait()).await;
            link.kill();
            match status {
                Ok(Ok(status)) => format!(", exited with {status}"),
                _ => {
                    // Reap it now that the group is killed.
                    let _ = child.wait().await;
                    ", killed".to_owned()
                }
            }
        }
        None => String::new(),
    };
    let message = link
        .with_stderr(format!(
            "exec:{} {end} after {n} lines{status}",
            link.command
        ))
        .await;
    link.break_with(message);
}

impl Adapter for Exec {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn set_clock(&self, clock_ms: Option<u64>) {
        let value = clock_ms.unwrap_or(NO_CLOCK);
        self.link().clock_ms.store(value, Ordering::SeqCst);
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.capabilities.clone()
    }

    fn app(&self) -> Option<super::App> {
        self.shared.app.clone()
    }

    fn keys(&self) -> &Keys {
        self.shared.queue.keys()
    }

    fn connection(&self) -> ConnectionManager {
        self.shared.queue.connection()
    }

    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        Box::pin(async move {
            let payload = std::str::from_utf8(payload).map_err(|e| QueueError::BadArgument {
                op: Op::Enqueue.name(),
                message: format!(
                    "the adapter protocol carries payloads as JSON strings: this one is not UTF-8 ({e})"
                ),
            })?;
            let call = Call::Enqueue {
                job: id.to_owned(),
                payload: payload.to_owned(),
                max_attempts: options.max_attempts,
                delay_ms: options.delay_ms,
                now_ms,
            };
            let ok = self.call(self.named("producer"), call).await?;
            ok_as(Op::Enqueue, ok)
        })
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move {
            let call = Call::Lease { lease_ms, now_ms };
            // The lessee is the request's worker: in the chaos runner it
            // is the handle's own name, in the explorers `w0`, `w1`, ...
            let ok = self.call(self.named(worker), call).await?;
            let granted: Option<Granted> = ok_as(Op::Lease, ok)?;
            if let (Some(granted), None) = (&granted, &self.worker) {
                let key = (granted.job.clone(), granted.token);
                lock(&self.shared.lessees).insert(key, worker.to_owned());
            }
            Ok(granted.map(Lease::from))
        })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(async move {
            let job = id.to_owned();
            let ok = self
                .call(&self.holder(id, token), Call::Complete { job, token })
                .await?;
            ok_as(Op::Complete, ok)
        })
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Box::pin(async move {
            let call = Call::Fail {
                job: id.to_owned(),
                token,
                retry_delay_ms,
                now_ms,
            };
            let ok = self.call(&self.holder(id, token), call).await?;
            ok_as(Op::Fail, ok)
        })
    }

    fn extend<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        Box::pin(async move {
            let call = Call::Extend {
                job: id.to_owned(),
                token,
                lease_ms,
                now_ms,
            };
            let ok = self.call(&self.holder(id, token), call).await?;
            ok_as(Op::Extend, ok)
        })
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(async move {
            let call = Call::Reap { limit, now_ms };
            let ok = self.call(self.named("reaper"), call).await?;
            let reaped: Vec<ReapedJob> = ok_as(Op::Reap, ok)?;
            Ok(reaped.into_iter().map(Reaped::from).collect())
        })
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(async move {
            // `problems` may be left out when there are none.
            let ok = self.call(self.named("checker"), Call::Read).await?;
            ok_as(Op::Read, ok)
        })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move {
            // Its `ok` (null) says nothing more: any value will do. The
            // clear is set-up, before anything is judged, and often an
            // adapter's first call after its hello (a Ruby adapter starts
            // a worker's process then): it gets the hello's time, not a
            // request's (chaos's is 2 s, which Sidekiq's first call
            // outlasted under load).
            let timeout = self.shared.options.hello_timeout;
            self.call_within(self.named("checker"), Call::Clear, timeout)
                .await?;
            lock(&self.shared.lessees).clear();
            // The consumers' effects live under ackgap's own keys.
            self.shared.queue.clear().await.map(|_| ())
        })
    }

    /// Opens the child's sessions afresh: see `exec/reopen.rs`.
    fn reopen(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(self.reopen_sessions())
    }

    /// Sends `{"op":"crash","worker":W}` when the hello listed `crash`;
    /// else the adapter is not told (its worker simply stops calling).
    fn crash<'a>(&'a self, worker: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        Box::pin(async move {
            if !self.shared.capabilities.supports(Operation::Crash) {
                return Ok(());
            }
            // Its `ok` (null) says nothing more: any value will do.
            self.call(self.named(worker), Call::Crash).await.map(|_| ())
        })
    }
}

/// `ok` read as `op`'s answer ([`super::protocol::Reply`] names each op's
/// type);
/// an `ok` of another shape breaks the protocol.
fn ok_as<T: DeserializeOwned>(op: Op, ok: Value) -> Result<T, QueueError> {
    serde_path_to_error::deserialize(&ok).map_err(|e| QueueError::Adapter {
        op: op.name(),
        message: format!(
            "not a valid {} answer ({}): ok = {}",
            op.name(),
            at(&e),
            quote(&ok.to_string())
        ),
    })
}

#[cfg(test)]
mod tests;
