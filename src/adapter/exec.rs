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
//! The child never outlives the last handle: dropping it closes the
//! child's stdin, waits up to 2 s for it to exit, and kills its process
//! group. ackgap keeps its own connection to the server ([`Queue`]) for
//! the consumers' effects, which live under [`Keys`] of the queue name;
//! [`Adapter::clear`] asks the adapter to clear, then deletes those keys.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

use super::{Adapter, BoxFuture, Capabilities, ConnectionManager, Operation, Read, Tokens};
use crate::queue::client::EnqueueOptions;
use crate::queue::{Enqueued, Extended, Failed, JobState, Keys, Lease, Queue, QueueError};
use crate::queue::{Reaped, Settled};

/// The protocol version this side speaks.
pub const PROTOCOL: u64 = 1;

/// How long the child may take to exit after its stdin closed before its
/// process group is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How much of an offending line an error quotes.
const QUOTE_MAX: usize = 200;

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

/// An error answer of the adapter: its kind and message.
#[derive(Debug)]
struct Remote {
    kind: String,
    message: String,
}

type Answer = Result<Value, Remote>;

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
    pending: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
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
}

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

/// Parses an answer line: its `in_reply_to` and its `ok` or `error`.
fn parse_answer(line: &str) -> Result<(u64, Answer), String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("is not JSON ({e})"))?;
    let Value::Object(obj) = value else {
        return Err("is not a JSON object".into());
    };
    let id = obj
        .get("in_reply_to")
        .and_then(Value::as_u64)
        .ok_or("has no integer in_reply_to")?;
    match (obj.get("ok"), obj.get("error")) {
        (Some(ok), None) => Ok((id, Ok(ok.clone()))),
        (None, Some(Value::Object(err))) => {
            let kind = err.get("kind").and_then(Value::as_str);
            let message = err.get("message").and_then(Value::as_str).unwrap_or("");
            let kind = kind.ok_or("has an error without a string kind")?;
            Ok((
                id,
                Err(Remote {
                    kind: kind.to_owned(),
                    message: message.to_owned(),
                }),
            ))
        }
        (None, Some(_)) => Err("has an error that is not an object".into()),
        _ => Err("has neither ok nor error (exactly one is required)".into()),
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
    guard: Guard,
    /// `exec:COMMAND`: what `--queue` took, and the replay line carries.
    name: String,
    /// The name the adapter gave in its hello.
    adapter_name: String,
    capabilities: Capabilities,
    queue: Queue,
    options: ExecOptions,
    /// Who was granted each (job, token) through this child, so that its
    /// settle goes out under the same worker name.
    lessees: Mutex<HashMap<(String, u64), String>>,
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
        let (link, tasks) = spawn(command)?;
        let guard = Guard {
            link: Arc::clone(&link),
            tasks,
        };
        let mut hello = json!({
            "protocol": PROTOCOL,
            "server": server_url,
            "queue": queue.keys().name,
        });
        if !options.connections.is_empty() {
            hello["connections"] = json!(options.connections);
        }
        let Value::Object(fields) = hello else {
            unreachable!("a JSON object")
        };
        let answer = request(&link, "hello", None, fields, options.hello_timeout).await;
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
            Err(Called::Remote(r)) => return Err(refused(format!("{}: {}", r.kind, r.message))),
            Err(Called::TimedOut(ms)) => return Err(no_hello(format!("none within {ms} ms"))),
            Err(Called::Broken(m)) => return Err(no_hello(m)),
        };
        let (adapter_name, capabilities) = read_hello(&ok).map_err(refused)?;
        Ok(Exec {
            shared: Arc::new(Shared {
                guard,
                name: format!("exec:{command}"),
                adapter_name,
                capabilities,
                queue: queue.on_server_clock(),
                options,
                lessees: Mutex::new(HashMap::new()),
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

    /// The name the adapter gave in its hello (`bullmq`, ...).
    pub fn adapter_name(&self) -> &str {
        &self.shared.adapter_name
    }

    /// The child's pid (its process group's id), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.shared
            .guard
            .link
            .pgid
            .and_then(|p| u32::try_from(p).ok())
    }

    /// Sends one request of `op` from `worker` with `fields` and maps the
    /// answer's errors.
    async fn call(
        &self,
        op: &'static str,
        worker: &str,
        fields: Map<String, Value>,
    ) -> Result<Value, QueueError> {
        let supported = Operation::ALL
            .into_iter()
            .find(|o| o.name() == op)
            .is_none_or(|o| self.shared.capabilities.supports(o));
        if !supported {
            return Err(QueueError::Unsupported { op });
        }
        let link = &self.shared.guard.link;
        let timeout = self.shared.options.request_timeout;
        match request(link, op, Some(worker), fields, timeout).await {
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

/// Why a request got no `ok`.
enum Called {
    Remote(Remote),
    TimedOut(u128),
    Broken(String),
}

/// Sends request `op` and waits for its answer for at most `timeout`.
async fn request(
    link: &Arc<Link>,
    op: &'static str,
    worker: Option<&str>,
    mut fields: Map<String, Value>,
    timeout: Duration,
) -> Result<Value, Called> {
    if let Some(message) = link.fatal() {
        return Err(Called::Broken(message));
    }
    let id = link.next_id.fetch_add(1, Ordering::SeqCst);
    let (tx, rx) = oneshot::channel();
    lock(&link.pending).insert(id, tx);
    let mut line = Map::new();
    line.insert("id".into(), id.into());
    line.insert("op".into(), op.into());
    if let Some(worker) = worker {
        line.insert("worker".into(), worker.into());
    }
    line.append(&mut fields);
    let text = Value::Object(line).to_string();
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

/// The [`QueueError`] of an error answer to `op`.
fn remote_error(op: &'static str, r: Remote) -> QueueError {
    let Remote { kind, message } = r;
    match kind.as_str() {
        "unknown" => QueueError::Unknown {
            op,
            reason: message,
        },
        "unavailable" => QueueError::Unavailable {
            op,
            reason: message,
        },
        "refused" if message.starts_with("EMQKIND") => QueueError::Kind { op, message },
        "refused" => QueueError::BadArgument { op, message },
        "unsupported" => QueueError::Unsupported { op },
        "server" => {
            let (code, rest) = message.split_once(' ').unwrap_or((&message, ""));
            QueueError::Server {
                op,
                code: code.to_owned(),
                message: rest.to_owned(),
            }
        }
        other => QueueError::Adapter {
            op,
            message: format!("an error of unknown kind {other:?}: {}", quote(&message)),
        },
    }
}

/// The adapter's name and capabilities from its hello answer.
fn read_hello(ok: &Value) -> Result<(String, Capabilities), String> {
    if let Some(protocol) = ok.get("protocol") {
        if protocol.as_u64() != Some(PROTOCOL) {
            return Err(format!(
                "the adapter speaks protocol {protocol}, ackgap speaks {PROTOCOL}"
            ));
        }
    }
    let name = ok
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no string name in {}", quote(&ok.to_string())))?;
    let caps = ok
        .get("capabilities")
        .ok_or_else(|| format!("no capabilities in {}", quote(&ok.to_string())))?;
    let words = caps
        .get("operations")
        .and_then(Value::as_array)
        .ok_or("capabilities.operations is not a list")?;
    // Operations this side does not know are ignored: a newer adapter may
    // offer more.
    let operations: Vec<Operation> = Operation::ALL
        .into_iter()
        .filter(|op| words.iter().any(|w| w.as_str() == Some(op.name())))
        .collect();
    let flag = |key: &str| {
        caps.get(key)
            .and_then(Value::as_bool)
            .ok_or_else(|| format!("capabilities.{key} is not true or false"))
    };
    // Tokens are opaque unless the adapter says they rise: the protocol
    // asks only that a token name its delivery.
    let tokens = match caps.get("tokens") {
        None | Some(Value::Null) => Tokens::Opaque,
        Some(word) if word.as_str() == Some("opaque") => Tokens::Opaque,
        Some(word) if word.as_str() == Some("rising") => Tokens::Rising,
        Some(other) => {
            return Err(format!(
                "capabilities.tokens is {other}, not \"rising\" or \"opaque\""
            ))
        }
    };
    let capabilities = Capabilities {
        operations,
        // Optional (default true): a hello written before it said nothing.
        dedup: match caps.get("dedup") {
            None => true,
            Some(_) => flag("dedup")?,
        },
        logical_time: flag("logical_time")?,
        fences: flag("fences")?,
        tokens,
    };
    let missing = capabilities.missing_required();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|o| o.name()).collect();
        return Err(format!(
            "required operations missing: {} (every adapter must support {})",
            names.join(", "),
            Operation::REQUIRED.map(|o| o.name()).join(", ")
        ));
    }
    Ok((name.to_owned(), capabilities))
}

/// Starts `sh -c command` in a process group of its own, and its writer
/// and reader tasks.
fn spawn(command: &str) -> Result<(Arc<Link>, Vec<tokio::task::JoinHandle<()>>), ExecError> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ExecError::Spawn {
            command: command.to_owned(),
            source,
        })?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
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
    });
    let writer = tokio::spawn(write_lines(Arc::downgrade(&link), rx));
    let reader = tokio::spawn(read_lines(Arc::downgrade(&link), stdout));
    Ok((link, vec![writer, reader]))
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
    link.break_with(format!(
        "exec:{} {end} after {n} lines{status}",
        link.command
    ));
}

impl Adapter for Exec {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.capabilities.clone()
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
            const OP: &str = "enqueue";
            let payload = std::str::from_utf8(payload).map_err(|e| QueueError::BadArgument {
                op: OP,
                message: format!(
                    "the adapter protocol carries payloads as JSON strings: this one is not UTF-8 ({e})"
                ),
            })?;
            let fields = object(json!({
                "job": id, "payload": payload, "max_attempts": options.max_attempts,
                "delay_ms": options.delay_ms, "now_ms": now_ms,
            }));
            let ok = self.call(OP, self.named("producer"), fields).await?;
            match ok.as_str() {
                Some("enqueued") => Ok(Enqueued::Enqueued),
                Some("duplicate") => Ok(Enqueued::Duplicate),
                _ => Err(bad_ok(OP, &ok)),
            }
        })
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move {
            const OP: &str = "lease";
            let fields = object(json!({"lease_ms": lease_ms, "now_ms": now_ms}));
            // The lessee is the request's worker: in the chaos runner it
            // is the handle's own name, in the explorers `w0`, `w1`, ...
            let ok = self.call(OP, self.named(worker), fields).await?;
            if ok.is_null() {
                return Ok(None);
            }
            let job = ok.get("job").and_then(Value::as_str);
            let token = ok.get("token").and_then(Value::as_u64);
            let deadline = ok.get("deadline_ms").map_or(Some(0), Value::as_u64);
            let payload = ok.get("payload").and_then(Value::as_str);
            match (job, token, deadline, payload) {
                (Some(job), Some(token), Some(deadline_ms), Some(payload)) => {
                    if self.worker.is_none() {
                        let key = (job.to_owned(), token);
                        lock(&self.shared.lessees).insert(key, worker.to_owned());
                    }
                    Ok(Some(Lease {
                        id: job.to_owned(),
                        token,
                        deadline_ms,
                        payload: payload.as_bytes().to_vec(),
                    }))
                }
                _ => Err(bad_ok(OP, &ok)),
            }
        })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(async move {
            const OP: &str = "complete";
            let ok = self
                .call(
                    OP,
                    &self.holder(id, token),
                    object(json!({"job": id, "token": token})),
                )
                .await?;
            serde_json::from_value(ok.clone()).map_err(|_| bad_ok(OP, &ok))
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
            const OP: &str = "fail";
            let fields = object(json!({
                "job": id, "token": token, "retry_delay_ms": retry_delay_ms, "now_ms": now_ms,
            }));
            let ok = self.call(OP, &self.holder(id, token), fields).await?;
            serde_json::from_value(ok.clone()).map_err(|_| bad_ok(OP, &ok))
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
            const OP: &str = "extend";
            let fields = object(json!({
                "job": id, "token": token, "lease_ms": lease_ms, "now_ms": now_ms,
            }));
            let ok = self.call(OP, &self.holder(id, token), fields).await?;
            serde_json::from_value(ok.clone()).map_err(|_| bad_ok(OP, &ok))
        })
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(async move {
            const OP: &str = "reap";
            let fields = object(json!({"limit": limit, "now_ms": now_ms}));
            let ok = self.call(OP, self.named("reaper"), fields).await?;
            let items = ok.as_array().ok_or_else(|| bad_ok(OP, &ok))?;
            items
                .iter()
                .map(|item| {
                    let job = item.get("job").and_then(Value::as_str);
                    let to = item
                        .get("to")
                        .and_then(Value::as_str)
                        .and_then(JobState::parse);
                    match (job, to) {
                        (Some(job), Some(to)) => Ok(Reaped {
                            id: job.to_owned(),
                            to,
                        }),
                        _ => Err(bad_ok(OP, &ok)),
                    }
                })
                .collect()
        })
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(async move {
            const OP: &str = "read";
            let mut ok = self.call(OP, self.named("checker"), Map::new()).await?;
            // `problems` may be left out when there are none.
            if let Some(obj) = ok.as_object_mut() {
                obj.entry("problems").or_insert_with(|| json!([]));
            }
            serde_json::from_value(ok.clone()).map_err(|_| bad_ok(OP, &ok))
        })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move {
            // Its `ok` (null) says nothing more: any value will do.
            self.call("clear", self.named("checker"), Map::new())
                .await?;
            lock(&self.shared.lessees).clear();
            // The consumers' effects live under ackgap's own keys.
            self.shared.queue.clear().await.map(|_| ())
        })
    }

    /// Sends `{"op":"crash","worker":W}` when the hello listed `crash`;
    /// else the adapter is not told (its worker simply stops calling).
    fn crash<'a>(&'a self, worker: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        Box::pin(async move {
            if !self.shared.capabilities.supports(Operation::Crash) {
                return Ok(());
            }
            // Its `ok` (null) says nothing more: any value will do.
            self.call("crash", self.named(worker), Map::new())
                .await
                .map(|_| ())
        })
    }
}

/// A JSON object literal's map.
fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// An `ok` this side cannot read as `op`'s answer: the protocol is broken.
fn bad_ok(op: &'static str, ok: &Value) -> QueueError {
    QueueError::Adapter {
        op,
        message: format!("not a valid {op} answer: ok = {}", quote(&ok.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_needs_an_id_and_exactly_one_of_ok_and_error() {
        assert!(parse_answer(r#"{"in_reply_to":3,"ok":null}"#).is_ok());
        let (id, answer) =
            parse_answer(r#"{"in_reply_to":4,"error":{"kind":"unknown","message":"m"}}"#).unwrap();
        assert_eq!(id, 4);
        assert_eq!(answer.unwrap_err().kind, "unknown");
        for bad in [
            "hello",
            "[1]",
            r#"{"ok":1}"#,
            r#"{"in_reply_to":1}"#,
            r#"{"in_reply_to":1,"ok":1,"error":{"kind":"x"}}"#,
            r#"{"in_reply_to":-1,"ok":1}"#,
            r#"{"in_reply_to":1,"error":"boom"}"#,
        ] {
            assert!(parse_answer(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn error_kinds_map_to_their_history_class() {
        let r = |kind: &str, message: &str| Remote {
            kind: kind.into(),
            message: message.into(),
        };
        assert!(remote_error("lease", r("unknown", "timeout")).is_unknown());
        assert!(matches!(
            remote_error("lease", r("unavailable", "")),
            QueueError::Unavailable { .. }
        ));
        assert!(matches!(
            remote_error("enqueue", r("refused", "EMQKIND id")),
            QueueError::Kind { .. }
        ));
        assert!(matches!(
            remote_error("enqueue", r("refused", "bad")),
            QueueError::BadArgument { .. }
        ));
        match remote_error("read", r("server", "WRONGTYPE Operation against a key")) {
            QueueError::Server { code, .. } => assert_eq!(code, "WRONGTYPE"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_hello_without_a_required_operation_is_refused_by_name() {
        let ok = json!({"name": "q", "capabilities": {
            "operations": ["enqueue", "lease", "read", "clear"],
            "logical_time": false, "fences": false}});
        let e = read_hello(&ok).unwrap_err();
        assert!(e.contains("complete"), "{e}");
        let ok = json!({"name": "q", "protocol": 2, "capabilities": {}});
        assert!(read_hello(&ok).unwrap_err().contains("protocol 2"));
    }

    #[test]
    fn a_hello_promises_dedup_unless_it_says_false() {
        let hello = |dedup: Option<Value>| {
            let mut caps = json!({"operations": ["enqueue", "lease", "complete", "read", "clear"],
                "logical_time": false, "fences": false});
            if let Some(d) = dedup {
                caps["dedup"] = d;
            }
            read_hello(&json!({"name": "q", "capabilities": caps}))
        };
        assert!(
            hello(None).unwrap().1.dedup,
            "absent: an old adapter, unchanged"
        );
        assert!(hello(Some(json!(true))).unwrap().1.dedup);
        assert!(!hello(Some(json!(false))).unwrap().1.dedup);
        let e = hello(Some(json!("no"))).unwrap_err();
        assert!(e.contains("capabilities.dedup"), "{e}");
    }

    #[test]
    fn a_long_line_is_quoted_cut() {
        let q = quote(&"é".repeat(500));
        assert!(q.len() < 300 && q.ends_with("(1000 bytes)"), "{q}");
    }
}
