//! The adapter protocol's other side: any in-process [`Adapter`] served
//! over a pair of byte streams, one JSON object a line (`ackgap
//! serve-adapter --queue lmove` serves a shipped queue on stdin and
//! stdout). It lets the protocol's client ([`super::Exec`]) be tested
//! without another language, and it measures what the protocol costs: the
//! same queue judged in process and through a pipe.
//!
//! The first line must be `hello`; the adapter for the server URL is opened
//! then, and one per worker the hello's `connections` names on that
//! worker's first request, on its own URL (a worker whose URL cannot be
//! reached gets `unavailable`, and cuts no other worker). Every later
//! request runs in a task of its own, so answers go out as they are ready,
//! in any order.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::protocol::{self, Answer, Call, Error, ErrorKind, Granted, HelloOk, Offered, Op};
use super::protocol::{ReapedJob, Reply, Request, Unparsed, PROTOCOL};
use super::{Adapter, BoxFuture};
use crate::queue::client::{EnqueueOptions, QueueConfig};
use crate::queue::{Queue, QueueError};

/// Opens the adapter to serve on a server URL and a queue name.
pub type Open = Arc<
    dyn Fn(String, String) -> BoxFuture<'static, Result<Arc<dyn Adapter>, String>> + Send + Sync,
>;

/// Why serving stopped before the input ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The input or the output failed.
    #[error("adapter protocol I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The first line was not a hello this side can answer.
    #[error("adapter protocol: {0}")]
    Hello(String),
}

/// [`Open`] for the shipped adapter `name` ([`super::by_name`]): a
/// [`Queue`] connected to the URL, the adapter on it.
pub fn shipped(name: &str) -> Open {
    let name = name.to_owned();
    Arc::new(move |url: String, queue_name: String| {
        let name = name.clone();
        Box::pin(async move {
            let client = redis::Client::open(url.as_str()).map_err(|e| format!("{url}: {e}"))?;
            let queue = Queue::connect_with(&client, &queue_name, QueueConfig::default())
                .await
                .map_err(|e| e.to_string())?;
            super::by_name(&name, &queue)
        })
    })
}

/// The answer lines that may wait for the writer task. The requests in
/// flight are bounded by the client's workers (each waits for its answer
/// before it sends another: a few to a few dozen), so 64 leaves them room. A
/// full channel makes the answering task wait for the writer, never drops an
/// answer.
const ANSWERS_QUEUED: usize = 64;

/// Serves the adapters `open` gives on `input` and `output` until the
/// input ends (then waits for the requests in flight).
pub async fn serve<R, W>(input: R, output: W, open: Open) -> Result<(), ServeError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut lines = input.lines();
    let (tx, rx) = mpsc::channel::<String>(ANSWERS_QUEUED);
    let writer = tokio::spawn(write_lines(output, rx));
    let Some(first) = lines.next_line().await? else {
        return Ok(());
    };
    let adapters = match hello(&first, &open).await {
        Ok((id, adapters)) => {
            let ok = HelloOk {
                name: adapters.default.name().to_owned(),
                protocol: Some(PROTOCOL),
                capabilities: Offered::of(&adapters.default.capabilities()),
                app: None,
            };
            send(&tx, id, Ok(Reply::Hello(ok))).await;
            Arc::new(adapters)
        }
        Err((id, message)) => {
            if let Some(id) = id {
                send(&tx, id, Err(Error::new(ErrorKind::Refused, &message))).await;
            }
            drop(tx);
            let _ = writer.await;
            return Err(ServeError::Hello(message));
        }
    };
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let request: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("serve-adapter: a line that is not JSON ({e}): {line}");
                continue;
            }
        };
        let Some(id) = request.get("id").and_then(Value::as_u64) else {
            eprintln!("serve-adapter: a request without an id: {line}");
            continue;
        };
        let (adapters, tx) = (Arc::clone(&adapters), tx.clone());
        tasks.spawn(async move {
            let result = match protocol::parse_request(request) {
                Ok(request) => answer(&adapters, request).await,
                Err(unparsed) => Err(unparsed.error()),
            };
            send(&tx, id, result).await;
        });
        // Reap the finished ones as we go.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    drop(tx);
    let _ = writer.await;
    Ok(())
}

/// Sends the answer to request `id`: the reply's `ok`, or the error.
async fn send(tx: &mpsc::Sender<String>, id: u64, result: Result<Reply, Error>) {
    let result = result.and_then(|reply| {
        serde_json::to_value(reply).map_err(|e| Error::new(ErrorKind::Unknown, e.to_string()))
    });
    let answer = Answer {
        in_reply_to: id,
        result,
    };
    match serde_json::to_string(&answer) {
        Ok(line) => drop(tx.send(line).await),
        Err(e) => eprintln!("serve-adapter: the answer to {id} cannot be written: {e}"),
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut rx: mpsc::Receiver<String>) {
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

/// The adapters of one session: the default one, and one per worker the
/// hello's `connections` names, opened on that worker's first request
/// (docs/adapter-protocol.md: a connection per worker, opened on first use).
struct Adapters {
    default: Arc<dyn Adapter>,
    open: Open,
    queue: String,
    urls: BTreeMap<String, String>,
    workers: tokio::sync::Mutex<BTreeMap<String, Arc<dyn Adapter>>>,
}

impl Adapters {
    /// The adapter `worker`'s requests go to.
    async fn of(&self, worker: Option<&str>) -> Result<Arc<dyn Adapter>, Error> {
        let Some((worker, url)) = worker.and_then(|w| self.urls.get_key_value(w)) else {
            return Ok(Arc::clone(&self.default));
        };
        let mut workers = self.workers.lock().await;
        if let Some(adapter) = workers.get(worker) {
            return Ok(Arc::clone(adapter));
        }
        // Nothing was sent: the call cannot have happened.
        let adapter = (self.open)(url.clone(), self.queue.clone())
            .await
            .map_err(|e| Error::new(ErrorKind::Unavailable, format!("{worker}: {e}")))?;
        workers.insert(worker.clone(), Arc::clone(&adapter));
        Ok(adapter)
    }
}

/// Opens the adapters a hello line asks for, or says why not (with the
/// hello's id when it has one).
async fn hello(line: &str, open: &Open) -> Result<(u64, Adapters), (Option<u64>, String)> {
    let v: Value = serde_json::from_str(line)
        .map_err(|e| (None, format!("the first line is not JSON ({e})")))?;
    let id = v.get("id").and_then(Value::as_u64);
    let refuse = |m: String| (id, m);
    if v.get("op").and_then(Value::as_str) != Some(Op::Hello.name()) {
        return Err(refuse("the first request must be hello".into()));
    }
    let id = id.ok_or_else(|| (None, "the hello has no id".to_owned()))?;
    let hello = match protocol::parse_request(v) {
        Ok(Request {
            call: Call::Hello(hello),
            ..
        }) => hello,
        Ok(_) => return Err(refuse("the first request must be hello".into())),
        Err(Unparsed::Malformed(why) | Unparsed::Unsupported(why)) => return Err(refuse(why)),
    };
    if hello.protocol != PROTOCOL {
        return Err(refuse(format!(
            "protocol {} asked, {PROTOCOL} served",
            hello.protocol
        )));
    }
    let default = open(hello.server, hello.queue.clone())
        .await
        .map_err(refuse)?;
    let adapters = Adapters {
        default,
        open: Arc::clone(open),
        queue: hello.queue,
        urls: hello.connections,
        workers: tokio::sync::Mutex::new(BTreeMap::new()),
    };
    Ok((id, adapters))
}

/// The reply to one request, or its error.
async fn answer(adapters: &Adapters, request: Request) -> Result<Reply, Error> {
    let Request {
        worker,
        call,
        clock_ms,
        ..
    } = request;
    let adapter = adapters.of(worker.as_deref()).await?;
    adapter.set_clock(clock_ms);
    Ok(match call {
        Call::Enqueue {
            job,
            payload,
            max_attempts,
            delay_ms,
            now_ms,
        } => {
            let options = EnqueueOptions {
                max_attempts,
                delay_ms,
            };
            let out = adapter.enqueue(&job, payload.as_bytes(), options, now_ms);
            Reply::Enqueue(out.await.map_err(error)?)
        }
        Call::Lease { lease_ms, now_ms } => {
            let worker = worker.as_deref().unwrap_or("w0");
            let lease = adapter.lease(worker, lease_ms, now_ms).await;
            Reply::Lease(lease.map_err(error)?.map(Granted::from))
        }
        Call::Complete { job, token } => {
            Reply::Complete(adapter.complete(&job, token).await.map_err(error)?)
        }
        Call::Fail {
            job,
            token,
            retry_delay_ms,
            now_ms,
        } => {
            let out = adapter.fail(&job, token, retry_delay_ms, now_ms).await;
            Reply::Fail(out.map_err(error)?)
        }
        Call::Extend {
            job,
            token,
            lease_ms,
            now_ms,
        } => {
            let out = adapter.extend(&job, token, lease_ms, now_ms).await;
            Reply::Extend(out.map_err(error)?)
        }
        Call::Reap { limit, now_ms } => {
            let reaped = adapter.reap(limit, now_ms).await.map_err(error)?;
            Reply::Reap(reaped.into_iter().map(ReapedJob::from).collect())
        }
        Call::Read => Reply::Read(adapter.read().await.map_err(error)?),
        Call::Clear => {
            adapter.clear().await.map_err(error)?;
            Reply::Clear
        }
        Call::Crash => {
            let worker = worker.ok_or_else(|| Error::new(ErrorKind::Refused, CRASH_NOBODY))?;
            adapter.crash(&worker).await.map_err(error)?;
            Reply::Crash
        }
        // The session keeps its first hello (docs/adapter-protocol.md: the
        // three cases every adapter answers the same way).
        Call::Hello(_) => return Err(Error::new(ErrorKind::Refused, HELLO_AGAIN)),
    })
}

/// The refusal of a second hello.
const HELLO_AGAIN: &str = "hello was already answered; send it once";

/// The refusal of a crash that names no worker.
const CRASH_NOBODY: &str = "crash: missing field `worker`";

/// A [`QueueError`] as the protocol's error: refused when nothing was
/// written, unknown when the call may have run.
fn error(e: QueueError) -> Error {
    let (kind, message) = match e {
        QueueError::Unavailable { reason, .. } => (ErrorKind::Unavailable, reason),
        QueueError::Kind { message, .. } => (ErrorKind::Refused, format!("EMQKIND {message}")),
        QueueError::BadArgument { message, .. } => {
            (ErrorKind::Refused, format!("EMQARG {message}"))
        }
        QueueError::Server { code, message, .. } => {
            (ErrorKind::Server, format!("{code} {message}"))
        }
        QueueError::Unsupported { op } => {
            (ErrorKind::Unsupported, format!("{op} is not supported"))
        }
        QueueError::QueueName(e) => (ErrorKind::Refused, e.to_string()),
        // An unreadable reply, a broken inner adapter: the call may have
        // run.
        e @ (QueueError::Unknown { .. }
        | QueueError::Protocol { .. }
        | QueueError::Adapter { .. }) => (ErrorKind::Unknown, e.to_string()),
    };
    Error::new(kind, message)
}
