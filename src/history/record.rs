//! One recording layer, like Jepsen's interpreter: every operation a run
//! makes is written here, invoke then ok / fail / info, and nowhere else.
//!
//! - [`Recorded`] is an [`Adapter`] that records the invoke and the
//!   completion of every queue call it forwards, as one process (`producer`,
//!   `w1`, `reaper`, `checker`). The explorers' driver, the chaos runner and
//!   the smoke scenario all call the queue through it.
//! - [`Process`] records the operations that are not queue calls: a
//!   consumer's effect, a crash, a fault of the nemesis, a tick of logical
//!   time.
//! - The value helpers ([`lease_value`], [`settled_value`], ...) say what
//!   each outcome looks like in a history; the bench harness, which steps
//!   the pure model without an adapter, writes its histories with them.
//!
//! A completion is `ok` with the call's value, `fail` for an error known
//! not to have happened (a refusal) and `info` for an unknown outcome
//! (a timeout, a lost reply): [`QueueError::is_unknown`] decides.
//!
//! # Design notes
//!
//! `Recorded::as_process` renames the process, and
//! `Recorded::timing_server_clock` brackets a reap with the server's `TIME`
//! and reads it after a granted lease and before a delayed enqueue. The
//! value helpers include `close`, `lease_value`, `settled_value`,
//! `failed_value` and `read_value`; `QueueError::is_unknown` decides in
//! `close`, once. `record::with_dedup` carries a queue's `"dedup": false`
//! into its reads, so that admission, and `ackgap check` of the file later,
//! know not to judge the refusal.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{FaultEvent, Pending, Recorder, F};
use crate::adapter::{Adapter, BoxFuture, Read, Tokens, Wrapper};
use crate::consumer::Consumer;
use crate::queue::client::EnqueueOptions;
use crate::queue::{
    CompleteAndLease, Enqueued, Extended, Failed, Lease, QueueError, Reaped, Settled,
};

/// What a completion fills in: the job and token it learnt (a lease learns
/// its job when it completes) and its value.
pub(crate) type Fields = (Option<String>, Option<u64>, Value);

/// Records an operation's outcome: ok with `value`, or fail / info by the
/// class of the error.
pub fn close<T>(
    rec: &Recorder,
    op: Pending,
    result: &Result<T, QueueError>,
    value: impl FnOnce(&T) -> Fields,
) {
    match result {
        Ok(v) => {
            let (job, token, value) = value(v);
            rec.ok(op, job.as_deref(), token, value);
        }
        Err(e) => close_error(rec, op, e),
    }
}

/// Closes `op` as fail or info by the class of `error`.
fn close_error(rec: &Recorder, op: Pending, error: &QueueError) {
    if error.is_unknown() {
        rec.info(op, error.to_string());
    } else {
        rec.fail(op, error.to_string());
    }
}

/// The invoke value of an enqueue: its payload and, when the run notes
/// it, the job's `max_attempts`.
pub fn enqueue_value(payload: &str, max_attempts: Option<u64>) -> Value {
    match max_attempts {
        Some(max) => json!({"payload": payload, "max_attempts": max}),
        None => json!({"payload": payload}),
    }
}

/// The history value of an enqueue outcome.
pub fn enqueued_value(e: &Enqueued) -> Value {
    json!({"outcome": serde_json::to_value(e).unwrap_or_default()})
}

/// The history fields of a lease outcome: the job and token it granted and
/// `{"outcome": "leased", ...}`, or `{"outcome": "empty"}`.
pub fn lease_value(lease: &Option<Lease>) -> Fields {
    match lease {
        Some(l) => (
            Some(l.id.clone()),
            Some(l.token),
            json!({"outcome": "leased", "deadline_ms": l.deadline_ms,
                   "payload": String::from_utf8_lossy(&l.payload)}),
        ),
        None => (None, None, json!({"outcome": "empty"})),
    }
}

/// [`lease_value`], with `"tokens": "opaque"` in a granted lease's value
/// when the queue's tokens only name their deliveries: the checkers then
/// order the job's leases by the history, not by number.
pub(crate) fn lease_value_of(tokens: Tokens) -> impl Fn(&Option<Lease>) -> Fields {
    move |lease| {
        let (job, token, mut value) = lease_value(lease);
        if tokens == Tokens::Opaque && lease.is_some() {
            value["tokens"] = json!(tokens.name());
        }
        (job, token, value)
    }
}

/// A lease's fields, granted or empty, with `now_ms` (when it ran: the
/// logical time, or the server's `TIME` just after its reply) in its
/// value, when known: delay-respected judges a grant by it, and
/// lease-exclusive counts a lease asked for while another was live.
pub(crate) fn with_time(fields: Fields, now_ms: Option<u64>) -> Fields {
    let (job, token, mut value) = fields;
    if let Some(now) = now_ms {
        value["now_ms"] = now.into();
    }
    (job, token, value)
}

/// The history value of a settle outcome.
pub fn settled_value(s: &Settled) -> Value {
    match s {
        Settled::Fenced { current, state } => {
            json!({"outcome": "fenced", "current": current, "state": state})
        }
        other => serde_json::to_value(other).unwrap_or_default(),
    }
}

/// The history value of a fail outcome.
pub(crate) fn failed_value(f: &Failed) -> Value {
    serde_json::to_value(f).unwrap_or_default()
}

/// The history value of an extend outcome.
pub(crate) fn extended_value(x: &Extended) -> Value {
    serde_json::to_value(x).unwrap_or_default()
}

/// The history value of a reap: what it took back and, when known, the
/// time it ran at (`now_ms`: the logical time, or the server's `TIME` just
/// after the reply) and the server's `TIME` just before it was sent
/// (`before_ms`). lease-respected judges each reaped job against them.
pub fn reaped_value(reaped: &[Reaped], now_ms: Option<u64>, before_ms: Option<u64>) -> Value {
    let mut value = json!({"outcome": "reaped", "reaped": reaped});
    if let Some(now) = now_ms {
        value["now_ms"] = now.into();
        if let Some(before) = before_ms {
            value["before_ms"] = before.into();
        }
    }
    value
}

/// The history value of a crash: the job it held, and `extra` (where the
/// crash fell, the fault that caused it).
pub fn crashed_value(holding: &str, extra: Value) -> Value {
    let mut value = json!({"outcome": "crashed", "holding": holding});
    if let (Some(obj), Value::Object(more)) = (value.as_object_mut(), extra) {
        obj.extend(more);
    }
    value
}

/// The history value of an effect: the part applied and how many parts the
/// effect has, each when the run notes it.
pub fn applied_value(part: Option<usize>, parts: Option<usize>) -> Value {
    let mut value = json!({"outcome": "applied"});
    if let Some(part) = part {
        value["part"] = part.into();
    }
    if let Some(parts) = parts {
        value["parts"] = parts.into();
    }
    value
}

/// The history value of a whole-queue read: each job's state, every
/// structure problem, each job's payload when the queue reads them, and,
/// when they were counted, each job's effects.
pub fn read_value(read: &Read, effects: Option<&BTreeMap<String, u64>>) -> Value {
    let mut value = json!({"jobs": read.jobs, "problems": read.problems});
    if !read.payloads.is_empty() {
        value["payloads"] = json!(read.payloads);
    }
    if let Some(effects) = effects {
        value["effects"] = json!(effects);
    }
    value
}

/// A read's `value`, saying `dedup: false` when the queue does not
/// refuse a duplicate id (its hello said so): admission then does not
/// judge the refusal. A queue that refuses them reads as before.
pub fn with_dedup(mut value: Value, dedup: bool) -> Value {
    if !dedup {
        value["dedup"] = false.into();
    }
    value
}

/// One process of a history (`producer`, `w1`, `reaper`, `checker`,
/// `nemesis`): records its operations in a [`Recorder`]. Cheap to clone.
#[derive(Clone)]
pub struct Process {
    rec: Recorder,
    name: String,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Process({})", self.name)
    }
}

impl Process {
    /// Process `name`, recording into `rec`.
    pub fn new(rec: &Recorder, name: impl Into<String>) -> Process {
        Process {
            rec: rec.clone(),
            name: name.into(),
        }
    }

    /// The process's name, as the history writes it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The history it records into.
    pub fn recorder(&self) -> &Recorder {
        &self.rec
    }

    /// Records the invocation of `f` on `job` with `token`.
    pub fn invoke(&self, f: F, job: Option<&str>, token: Option<u64>) -> Pending {
        self.rec.invoke(&self.name, f, job, token)
    }

    /// Records the invocation of `f` on `job` with its arguments as `value`.
    pub fn invoke_with(&self, f: F, job: Option<&str>, value: Value) -> Pending {
        self.rec.push_invoke_with(&self.name, f, job, value)
    }

    /// Closes `op` by `result`: ok with `value`, or fail / info by the
    /// class of the error.
    pub fn close<T>(
        &self,
        op: Pending,
        result: &Result<T, QueueError>,
        value: impl FnOnce(&T) -> Fields,
    ) {
        close(&self.rec, op, result, value);
    }

    /// Closes `op` as unknown: it may have happened (a reply never read).
    pub fn info(&self, op: Pending, error: String) {
        self.rec.info(op, error);
    }

    /// Awaits `call` and closes `op` by its result.
    pub async fn call<T>(
        &self,
        op: Pending,
        call: impl Future<Output = Result<T, QueueError>>,
        value: impl FnOnce(&T) -> Fields,
    ) -> Result<T, QueueError> {
        let result = call.await;
        self.close(op, &result, value);
        result
    }

    /// Records an operation that happened at once, without a call (a
    /// crash, a tick, a fault event): invoke, then ok with `value`.
    pub fn done(&self, f: F, job: Option<&str>, token: Option<u64>, value: Value) {
        let op = self.invoke(f, job, token);
        self.rec.ok(op, None, None, value);
    }

    /// Records a crash holding lease `token` of `job` ([`crashed_value`]).
    pub fn crash(&self, job: &str, token: u64, extra: Value) {
        self.done(F::Crash, Some(job), Some(token), crashed_value(job, extra));
    }

    /// Records a fault event of the nemesis: ok with the event (its value,
    /// [`FaultEvent`]), or failed with the error that kept it from
    /// happening.
    pub fn fault(&self, result: Result<FaultEvent, String>) {
        let op = self.invoke(F::Fault, None, None);
        match result {
            Ok(event) => self.rec.ok(op, None, None, event.to_value()),
            Err(e) => self.rec.fail(op, e),
        }
    }

    /// Records a fault event of the nemesis that failed with `error`,
    /// keeping the event (its kind): a clock move that failed midway may
    /// have moved a clock, and the checkers read which kind it was.
    pub(crate) fn fault_failed(&self, event: FaultEvent, error: String) {
        let op = self.invoke(F::Fault, None, None);
        self.rec.fail_with(op, event.to_value(), error);
    }

    /// Applies a consumer's effect (`apply`: part `part` of the effect of
    /// lease `token` of `job`), recorded as an `effect` operation whose
    /// value notes `part` and, when given, `parts`.
    pub async fn effect(
        &self,
        job: &str,
        token: u64,
        part: usize,
        parts: Option<usize>,
        apply: impl Future<Output = Result<(), QueueError>>,
    ) -> Result<(), QueueError> {
        let op = self.invoke(F::Effect, Some(job), Some(token));
        self.call(op, apply, |_| {
            (None, None, applied_value(Some(part), parts))
        })
        .await
    }
}

/// An [`Adapter`] that records, as one [`Process`], the invoke and the
/// completion of every queue call it forwards (enqueue, lease, complete,
/// fail, extend, complete-and-lease, reap, read). Clearing the queue and
/// the refinement check's snapshots are the harness's, not the history's:
/// they are forwarded unrecorded.
#[derive(Clone)]
pub struct Recorded {
    inner: Arc<dyn Adapter>,
    process: Process,
    /// Write each enqueue's `max_attempts` into its invoke (the explorers
    /// vary it by configuration, the chaos runner draws it per job; the
    /// smoke history leaves it out).
    max_attempts: bool,
    /// On the server clock, read the server's `TIME` around the calls the
    /// time checkers judge: before and after each reap (`before_ms`,
    /// `now_ms`: lease-respected), after each answered lease (`now_ms`) and
    /// before each delayed enqueue (`before_ms`: delay-respected).
    server_times: bool,
}

impl std::fmt::Debug for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recorded({}, {})", self.inner.name(), self.process.name)
    }
}

impl Recorded {
    /// Records the calls to `inner` as process `process` of `rec`.
    pub fn new(inner: Arc<dyn Adapter>, rec: &Recorder, process: &str) -> Recorded {
        Recorded {
            inner,
            process: Process::new(rec, process),
            max_attempts: false,
            server_times: false,
        }
    }

    /// The same adapter and settings, recording as process `name`.
    pub fn as_process(&self, name: &str) -> Recorded {
        Recorded {
            process: Process::new(&self.process.rec, name),
            ..self.clone()
        }
    }

    /// Notes each enqueue's `max_attempts` in its invoke.
    pub fn noting_max_attempts(mut self) -> Recorded {
        self.max_attempts = true;
        self
    }

    /// Reads the server's `TIME` around each reap, after each answered
    /// lease and before each delayed enqueue, on the server clock.
    pub fn timing_server_clock(mut self) -> Recorded {
        self.server_times = true;
        self
    }

    /// The process the calls are recorded as.
    pub fn process(&self) -> &Process {
        &self.process
    }

    /// The adapter the calls go to.
    pub fn inner(&self) -> &Arc<dyn Adapter> {
        &self.inner
    }

    /// A complete whose reply the worker never sees: recorded as `info`
    /// when the queue did answer (as fail / info by its error otherwise).
    /// Answers what the queue answered, which the worker does not know.
    pub async fn complete_reply_lost(&self, id: &str, token: u64) -> Result<Settled, QueueError> {
        let op = self.process.invoke(F::Complete, Some(id), Some(token));
        let settled = self.inner.complete(id, token).await;
        if settled.is_ok() {
            self.process
                .info(op, "the reply was lost: the worker saw no answer".into());
        } else {
            self.process
                .close(op, &settled, |s| (None, None, settled_value(s)));
        }
        settled
    }

    /// A lease, or with `lost` a lease whose reply is lost (`u`): the
    /// script runs on the server, and the worker never reads what it
    /// granted; the history records `info`, so the checkers know only
    /// that the job may have been taken.
    pub async fn lease_maybe_lost(
        &self,
        worker: &str,
        lease_ms: u64,
        now_ms: Option<u64>,
        lost: bool,
    ) -> Result<Option<Lease>, QueueError> {
        if !lost {
            return Wrapper::lease(self, worker, lease_ms, now_ms).await;
        }
        let op = self.process.invoke(F::Lease, None, None);
        let leased = self.inner.lease(worker, lease_ms, now_ms).await;
        if leased.is_ok() {
            self.process
                .info(op, "the reply was lost: the worker saw no answer".into());
        } else {
            let value = lease_value_of(self.inner.capabilities().tokens);
            self.process.close(op, &leased, value);
        }
        leased
    }

    /// A complete sent by a worker that dies at once: the call goes on in
    /// the background and its reply is never read; after `wait` the
    /// operation is recorded as `info` with `why`.
    pub async fn complete_unread(&self, id: &str, token: u64, wait: Duration, why: &str) {
        let op = self.process.invoke(F::Complete, Some(id), Some(token));
        let adapter = Arc::clone(&self.inner);
        let id = id.to_owned();
        tokio::spawn(async move {
            let _ = adapter.complete(&id, token).await;
        });
        tokio::time::sleep(wait).await;
        self.process.info(op, why.to_owned());
    }

    /// Reads the whole queue back with the effects `consumer` counts for
    /// each job read and each job of `also`, as one `read` event: every
    /// job's state, the adapter's structure problems, the effect counts,
    /// the consumer's name and whether it promises effect-once (the
    /// effect-once checker reads both). Answers the read and the counts.
    pub async fn read_with_effects(
        &self,
        consumer: &dyn Consumer,
        also: impl IntoIterator<Item = String>,
    ) -> Result<(Read, BTreeMap<String, u64>), QueueError> {
        let op = self.process.invoke(F::Read, None, None);
        let read = self.inner.read().await;
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                close_error(&self.process.rec, op, &e);
                return Err(e);
            }
        };
        let mut ids: BTreeSet<String> = read.jobs.keys().cloned().collect();
        ids.extend(also);
        let mut conn = self.inner.connection();
        let mut effects = BTreeMap::new();
        let mut moved = 0;
        for id in ids {
            loop {
                match consumer.effects(&mut conn, self.inner.keys(), &id).await {
                    Ok(n) => {
                        effects.insert(id, n);
                        break;
                    }
                    // On a cluster the queue's connection follows its slot's
                    // primary by re-reading it every 100 ms: just after a
                    // failover or a takeover's heal it may still point at
                    // the old one. A read is safe to send again.
                    Err(QueueError::Server { ref code, .. }) if code == "MOVED" && moved < 20 => {
                        moved += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        conn = self.inner.connection();
                    }
                    Err(e) => {
                        self.process.info(op, format!("counting effects: {e}"));
                        return Err(e);
                    }
                }
            }
        }
        let mut value = with_dedup(
            read_value(&read, Some(&effects)),
            self.inner.capabilities().dedup,
        );
        value["consumer"] = consumer.name().into();
        value["effect_once"] = consumer.promises_effect_once().into();
        self.process.recorder().ok(op, None, None, value);
        Ok((read, effects))
    }

    /// When an answered lease ran, granted or empty (delay-respected,
    /// lease-exclusive): the logical time, or, on the server clock when
    /// this adapter times its calls, the server's `TIME` read just after
    /// the reply (an upper bound of the script's clock); `None` for a
    /// failed lease.
    async fn lease_time(
        &self,
        leased: &Result<Option<Lease>, QueueError>,
        now_ms: Option<u64>,
    ) -> Option<u64> {
        match (leased, now_ms) {
            (Ok(_), Some(now)) => Some(now),
            (Ok(_), None) if self.server_times => self.server_time_ms().await,
            _ => None,
        }
    }

    /// The server's clock (`TIME`) in ms, as the scripts compute it; `None`
    /// if the server does not answer.
    async fn server_time_ms(&self) -> Option<u64> {
        let mut conn = self.inner.connection();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.ok()?;
        Some(secs * 1000 + micros / 1000)
    }
}

// A `Wrapper`: every call that changes or reads the queue is overridden to
// be recorded; name, keys, connection, clear, snapshot and the read-back
// switch forward to the queue as they are.
impl Wrapper for Recorded {
    fn inner(&self) -> &dyn Adapter {
        &*self.inner
    }

    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        Box::pin(async move {
            let max_attempts = self.max_attempts.then_some(options.max_attempts);
            let mut args = enqueue_value(&String::from_utf8_lossy(payload), max_attempts);
            // A delay announces a ready time (delay-respected): when the
            // enqueue ran, and the delay. On the server clock, `TIME` read
            // before it is sent is a lower bound of the script's clock.
            if options.delay_ms > 0 {
                args["delay_ms"] = options.delay_ms.into();
                let at = match now_ms {
                    Some(now) => Some(("now_ms", now)),
                    None if self.server_times => {
                        self.server_time_ms().await.map(|t| ("before_ms", t))
                    }
                    None => None,
                };
                if let Some((key, at)) = at {
                    args[key] = at.into();
                }
            }
            let op = self.process.invoke_with(F::Enqueue, Some(id), args);
            let call = self.inner.enqueue(id, payload, options, now_ms);
            self.process
                .call(op, call, |e| (None, None, enqueued_value(e)))
                .await
        })
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move {
            let op = self.process.invoke(F::Lease, None, None);
            let leased = self.inner.lease(worker, lease_ms, now_ms).await;
            let at = self.lease_time(&leased, now_ms).await;
            let value = lease_value_of(self.inner.capabilities().tokens);
            self.process.close(op, &leased, |l| with_time(value(l), at));
            leased
        })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        let op = self.process.invoke(F::Complete, Some(id), Some(token));
        let call = self.inner.complete(id, token);
        Box::pin(
            self.process
                .call(op, call, |s| (None, None, settled_value(s))),
        )
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        let op = self.process.invoke(F::Fail, Some(id), Some(token));
        let call = self.inner.fail(id, token, retry_delay_ms, now_ms);
        Box::pin(
            self.process
                .call(op, call, |f| (None, None, failed_value(f))),
        )
    }

    fn extend<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        let op = self.process.invoke(F::Extend, Some(id), Some(token));
        let call = self.inner.extend(id, token, lease_ms, now_ms);
        Box::pin(
            self.process
                .call(op, call, |x| (None, None, extended_value(x))),
        )
    }

    /// Recorded as two operations of this process, the complete and then
    /// the lease, with nothing between them: the explorers run one step
    /// at a time and the reference queue's script runs whole. No answer to
    /// the whole is no answer to either half.
    fn complete_and_lease<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
        Box::pin(async move {
            let op = self.process.invoke(F::Complete, Some(id), Some(token));
            let both = self
                .inner
                .complete_and_lease(id, token, worker, lease_ms, now_ms)
                .await;
            match &both {
                Ok(both) => {
                    self.process
                        .close(op, &both.settled, |s| (None, None, settled_value(s)));
                    let at = self.lease_time(&both.next, now_ms).await;
                    let op = self.process.invoke(F::Lease, None, None);
                    let value = lease_value_of(self.inner.capabilities().tokens);
                    self.process
                        .close(op, &both.next, |l| with_time(value(l), at));
                }
                Err(e) => {
                    close_error(&self.process.rec, op, e);
                    let op = self.process.invoke(F::Lease, None, None);
                    close_error(&self.process.rec, op, e);
                }
            }
            both
        })
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(async move {
            // On the server clock the script reads `TIME` itself and does
            // not return it: the reap is bracketed by `TIME` just before it
            // is sent and just after its reply. A `TIME` lost to a pause or
            // a kill before the reap only loses `before_ms`.
            let timed = self.server_times && now_ms.is_none();
            let before_ms = match timed {
                true => self.server_time_ms().await,
                false => None,
            };
            let op = self.process.invoke(F::Reap, None, None);
            let reaped = self.inner.reap(limit, now_ms).await;
            let after_ms = match &reaped {
                Ok(_) if timed => self.server_time_ms().await,
                _ => now_ms,
            };
            self.process.close(op, &reaped, |r| {
                (None, None, reaped_value(r, after_ms, before_ms))
            });
            reaped
        })
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(async move {
            let op = self.process.invoke(F::Read, None, None);
            let call = self.inner.read();
            let dedup = self.inner.capabilities().dedup;
            self.process
                .call(op, call, |r| {
                    (None, None, with_dedup(read_value(r, None), dedup))
                })
                .await
        })
    }
}
