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

use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{Adapter, BoxFuture, Read};
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
            let caps = adapters.default.capabilities();
            let ops: Vec<&str> = caps.operations.iter().map(|o| o.name()).collect();
            let mut ok = json!({"name": adapters.default.name(), "protocol": super::exec::PROTOCOL,
                "capabilities": {"operations": ops, "logical_time": caps.logical_time,
                "fences": caps.fences, "tokens": caps.tokens.name()}});
            ok["capabilities"]["dedup"] = caps.dedup.into();
            let _ = tx
                .send(json!({"in_reply_to": id, "ok": ok}).to_string())
                .await;
            Arc::new(adapters)
        }
        Err((id, message)) => {
            if let Some(id) = id {
                let error = json!({"kind": "refused", "message": message});
                let _ = tx
                    .send(json!({"in_reply_to": id, "error": error}).to_string())
                    .await;
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
            let answer = match answer(&adapters, &request).await {
                Ok(ok) => json!({"in_reply_to": id, "ok": ok}),
                Err((kind, message)) => {
                    json!({"in_reply_to": id, "error": {"kind": kind, "message": message}})
                }
            };
            let _ = tx.send(answer.to_string()).await;
        });
        // Reap the finished ones as we go.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    drop(tx);
    let _ = writer.await;
    Ok(())
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
    async fn of(&self, request: &Value) -> Result<Arc<dyn Adapter>, (&'static str, String)> {
        let Some((worker, url)) = request
            .get("worker")
            .and_then(Value::as_str)
            .and_then(|w| self.urls.get_key_value(w))
        else {
            return Ok(Arc::clone(&self.default));
        };
        let mut workers = self.workers.lock().await;
        if let Some(adapter) = workers.get(worker) {
            return Ok(Arc::clone(adapter));
        }
        // Nothing was sent: the call cannot have happened.
        let adapter = (self.open)(url.clone(), self.queue.clone())
            .await
            .map_err(|e| ("unavailable", format!("{worker}: {e}")))?;
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
    if v.get("op").and_then(Value::as_str) != Some("hello") {
        return Err(refuse("the first request must be hello".into()));
    }
    let id = id.ok_or_else(|| (None, "the hello has no id".to_owned()))?;
    let protocol = v.get("protocol").and_then(Value::as_u64);
    if protocol != Some(super::exec::PROTOCOL) {
        return Err(refuse(format!(
            "protocol {protocol:?} asked, {} served",
            super::exec::PROTOCOL
        )));
    }
    let text = |key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| refuse(format!("the hello has no string {key}")))
    };
    let (server, queue) = (text("server")?, text("queue")?);
    let default = open(server, queue.clone()).await.map_err(refuse)?;
    let mut urls = BTreeMap::new();
    if let Some(connections) = v.get("connections").and_then(Value::as_object) {
        for (worker, url) in connections {
            let url = url
                .as_str()
                .ok_or_else(|| refuse(format!("connections.{worker} is not a URL")))?;
            urls.insert(worker.clone(), url.to_owned());
        }
    }
    let adapters = Adapters {
        default,
        open: Arc::clone(open),
        queue,
        urls,
        workers: tokio::sync::Mutex::new(BTreeMap::new()),
    };
    Ok((id, adapters))
}

/// The `ok` value of one request, or its error's kind and message.
async fn answer(adapters: &Adapters, r: &Value) -> Result<Value, (&'static str, String)> {
    let adapter = adapters.of(r).await?;
    let num = |key: &str| {
        r.get(key)
            .and_then(Value::as_u64)
            .ok_or(("refused", format!("{key} must be a non-negative integer")))
    };
    let text = |key: &str| {
        r.get(key)
            .and_then(Value::as_str)
            .ok_or(("refused", format!("{key} must be a string")))
    };
    let now = r.get("now_ms").and_then(Value::as_u64);
    let op = r.get("op").and_then(Value::as_str).unwrap_or("");
    let value = |v: Result<Value, serde_json::Error>| v.map_err(|e| ("unknown", e.to_string()));
    match op {
        "enqueue" => {
            let options = EnqueueOptions {
                max_attempts: num("max_attempts")?,
                delay_ms: num("delay_ms").unwrap_or(0),
            };
            let payload = text("payload")?.as_bytes();
            let out = adapter.enqueue(text("job")?, payload, options, now).await;
            value(serde_json::to_value(out.map_err(error)?))
        }
        "lease" => {
            let worker = text("worker").unwrap_or("w0");
            let lease = adapter.lease(worker, num("lease_ms")?, now).await;
            Ok(lease.map_err(error)?.map_or(Value::Null, |l| {
                json!({"job": l.id, "token": l.token, "deadline_ms": l.deadline_ms,
                    "payload": String::from_utf8_lossy(&l.payload)})
            }))
        }
        "complete" => {
            let out = adapter.complete(text("job")?, num("token")?).await;
            value(serde_json::to_value(out.map_err(error)?))
        }
        "fail" => {
            let delay = num("retry_delay_ms").unwrap_or(0);
            let out = adapter.fail(text("job")?, num("token")?, delay, now).await;
            value(serde_json::to_value(out.map_err(error)?))
        }
        "extend" => {
            let out = adapter
                .extend(text("job")?, num("token")?, num("lease_ms")?, now)
                .await;
            value(serde_json::to_value(out.map_err(error)?))
        }
        "reap" => {
            let reaped = adapter.reap(num("limit")?, now).await.map_err(error)?;
            Ok(reaped
                .iter()
                .map(|r| json!({"job": r.id, "to": r.to}))
                .collect())
        }
        "read" => {
            let read: Read = adapter.read().await.map_err(error)?;
            value(serde_json::to_value(read))
        }
        "clear" => {
            adapter.clear().await.map_err(error)?;
            Ok(Value::Null)
        }
        "crash" => {
            let worker = text("worker")?;
            adapter.crash(worker).await.map_err(error)?;
            Ok(Value::Null)
        }
        // The session keeps its first hello (docs/adapter-protocol.md: the
        // three cases every adapter answers the same way).
        "hello" => Err(("refused", "hello was already answered; send it once".into())),
        other => Err(("unsupported", format!("no operation {other:?}"))),
    }
}

/// A [`QueueError`] as the protocol's error kind and message.
fn error(e: QueueError) -> (&'static str, String) {
    match e {
        QueueError::Unavailable { reason, .. } => ("unavailable", reason),
        QueueError::Kind { message, .. } => ("refused", format!("EMQKIND {message}")),
        QueueError::BadArgument { message, .. } => ("refused", format!("EMQARG {message}")),
        QueueError::Server { code, message, .. } => ("server", format!("{code} {message}")),
        QueueError::Unsupported { op } => ("unsupported", format!("{op} is not supported")),
        QueueError::QueueName(e) => ("refused", e.to_string()),
        // Unknown, an unreadable reply, a broken inner adapter: maybe.
        other => ("unknown", other.to_string()),
    }
}
