//! `ackgap run`: the smoke campaign on a real server. Producers enqueue
//! jobs (and one duplicate), workers lease and complete them concurrently,
//! one worker crashes while holding a lease, the reaper recovers the job
//! once its deadline has passed on the server clock, and the crashed worker
//! comes back and tries to settle its stale lease. Everything is recorded as
//! a history and judged by the checkers.
//!
//! The seed chooses the number of jobs and workers, the payloads and which
//! id is enqueued twice. What real concurrency does with the rest (which
//! worker wins which lease) is not reproducible; the checkers judge any
//! interleaving.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;

use crate::check::{self, Report, Verdict};
use crate::history::{Recorder, F};
use crate::queue::client::EnqueueOptions;
use crate::queue::{Enqueued, Failed, Queue, QueueError, Settled};

/// The settings of one smoke campaign, all derived from the seed but the
/// lease length.
#[derive(Clone, Debug, Serialize)]
pub struct SmokeConfig {
    /// The seed everything below was drawn from.
    pub seed: u64,
    /// Jobs enqueued (besides the duplicate).
    pub jobs: usize,
    /// Concurrent workers (besides the one that crashes).
    pub workers: usize,
    /// Lease length (ms, server clock).
    pub lease_ms: u64,
    /// Attempts allowed per job.
    pub max_attempts: u64,
}

impl SmokeConfig {
    /// The settings the seed chooses.
    pub fn from_seed(seed: u64) -> SmokeConfig {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        SmokeConfig {
            seed,
            jobs: rng.random_range(8..=16),
            workers: rng.random_range(2..=4),
            lease_ms: 300,
            max_attempts: 3,
        }
    }
}

/// One job's line in the report.
#[derive(Clone, Debug, Serialize)]
pub struct JobLine {
    /// The job id.
    pub id: String,
    /// How many leases were granted for it.
    pub deliveries: u64,
    /// Its state at the end (`done`, `dead`, ... or `absent`).
    pub state: String,
}

/// What a smoke campaign found.
#[derive(Clone, Debug, Serialize)]
pub struct SmokeReport {
    /// The settings.
    pub config: SmokeConfig,
    /// The jobs, by id.
    pub jobs: Vec<JobLine>,
    /// One report per invariant.
    pub invariants: Vec<Report>,
    /// The worst verdict.
    pub verdict: Verdict,
    /// Events recorded.
    pub events: usize,
    /// How long the campaign took (ms).
    pub elapsed_ms: u64,
    /// Where the history was written, if it was.
    pub history: Option<PathBuf>,
}

/// Records an operation's outcome: ok with `value`, or fail / info by the
/// class of the error.
pub fn close<T>(
    rec: &Recorder,
    op: crate::history::Pending,
    result: &Result<T, QueueError>,
    value: impl FnOnce(&T) -> (Option<String>, Option<u64>, serde_json::Value),
) {
    match result {
        Ok(v) => {
            let (job, token, value) = value(v);
            rec.ok(op, job.as_deref(), token, value);
        }
        Err(e) if e.is_unknown() => rec.info(op, e.to_string()),
        Err(e) => rec.fail(op, e.to_string()),
    }
}

/// The history value of a settle outcome.
pub fn settled_value(s: &Settled) -> serde_json::Value {
    match s {
        Settled::Fenced { current, state } => {
            json!({"outcome": "fenced", "current": current, "state": state})
        }
        other => serde_json::to_value(other).unwrap_or_default(),
    }
}

/// The history fields of a lease outcome: the job and token it granted and
/// `{"outcome": "leased", ...}`, or `{"outcome": "empty"}`.
pub fn lease_value(
    lease: &Option<crate::queue::Lease>,
) -> (Option<String>, Option<u64>, serde_json::Value) {
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

/// The history value of a fail outcome.
pub fn failed_value(f: &Failed) -> serde_json::Value {
    serde_json::to_value(f).unwrap_or_default()
}

/// Reads the whole queue back and records it as a `read` event: the state
/// of every job and every structure problem.
pub async fn record_read(queue: &Queue, rec: &Recorder) -> Result<(), QueueError> {
    let op = rec.invoke("checker", F::Read, None, None);
    let snap = queue.snapshot().await;
    close(rec, op, &snap, |s| {
        let jobs: BTreeMap<&String, String> = s
            .rows
            .iter()
            .map(|(id, row)| (id, row.state.map_or("?".into(), |st| st.to_string())))
            .collect();
        (
            None,
            None,
            json!({"jobs": jobs, "problems": s.structure_problems()}),
        )
    });
    snap.map(|_| ())
}

/// A worker: lease and complete until no job is ready.
async fn drain(
    queue: Queue,
    rec: Recorder,
    worker: String,
    lease_ms: u64,
) -> Result<(), QueueError> {
    loop {
        let op = rec.invoke(&worker, F::Lease, None, None);
        let lease = queue.lease(&worker, lease_ms).await;
        close(&rec, op, &lease, lease_value);
        let Some(lease) = lease? else { return Ok(()) };
        let op = rec.invoke(&worker, F::Complete, Some(&lease.id), Some(lease.token));
        let settled = queue.complete(&lease.id, lease.token).await;
        close(&rec, op, &settled, |s| (None, None, settled_value(s)));
        settled?;
    }
}

/// Runs the smoke campaign on `queue` (which is cleared first).
pub async fn smoke(
    queue: &Queue,
    config: SmokeConfig,
    history: Option<PathBuf>,
) -> anyhow::Result<SmokeReport> {
    let started = Instant::now();
    let rec = match &history {
        Some(path) => Recorder::to_file(path)
            .map_err(|e| anyhow::anyhow!("cannot write the history to {}: {e}", path.display()))?,
        None => Recorder::in_memory(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed ^ 0x5eed_5a0e);
    let queue = queue.on_server_clock();
    queue.clear().await?;

    // Producers: every job, then one duplicate of a job drawn by the seed.
    let ids: Vec<String> = (0..config.jobs)
        .map(|i| format!("JOB-{}-{i:02}", config.seed))
        .collect();
    let options = EnqueueOptions {
        max_attempts: config.max_attempts,
        delay_ms: 0,
    };
    for id in &ids {
        let payload = format!("payload-{}", rng.random::<u32>());
        enqueue(&queue, &rec, id, &payload, options).await?;
    }
    let dup = &ids[rng.random_range(0..ids.len())];
    enqueue(&queue, &rec, dup, "a different payload", options).await?;

    // One worker leases a job and crashes holding it (forgets its lease).
    let crasher = "w0";
    let op = rec.invoke(crasher, F::Lease, None, None);
    let stale = queue.lease(crasher, config.lease_ms).await;
    close(&rec, op, &stale, lease_value);
    let stale =
        stale?.ok_or_else(|| anyhow::anyhow!("the crashing worker found no job to lease"))?;
    let op = rec.invoke(crasher, F::Crash, Some(&stale.id), Some(stale.token));
    rec.ok(
        op,
        None,
        None,
        json!({"outcome": "crashed", "holding": stale.id}),
    );

    // The other workers drain the queue concurrently.
    let workers = |rec: &Recorder| {
        (1..=config.workers)
            .map(|w| {
                tokio::spawn(drain(
                    queue.clone(),
                    rec.clone(),
                    format!("w{w}"),
                    config.lease_ms,
                ))
            })
            .collect::<Vec<_>>()
    };
    for handle in workers(&rec) {
        handle.await??;
    }

    // The crashed lease expires on the server clock; the reaper takes it back.
    let wait_ms = stale
        .deadline_ms
        .saturating_sub(queue.server_time_ms().await?)
        + 20;
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    let op = rec.invoke("reaper", F::Reap, None, None);
    let reaped = queue.reap(100).await;
    close(&rec, op, &reaped, |r| {
        (None, None, json!({"outcome": "reaped", "reaped": r}))
    });
    reaped?;
    for handle in workers(&rec) {
        handle.await??;
    }

    // The crashed worker comes back and acks its stale lease: fenced.
    let op = rec.invoke(crasher, F::Complete, Some(&stale.id), Some(stale.token));
    let late = queue.complete(&stale.id, stale.token).await;
    close(&rec, op, &late, |s| (None, None, settled_value(s)));
    late?;

    record_read(&queue, &rec).await?;
    let events = rec.events();
    let invariants = check::check_all(&events);
    let verdict = check::overall(&invariants);

    let states = check::final_read(&events).unwrap_or_default();
    let mut deliveries: BTreeMap<&str, u64> = BTreeMap::new();
    for op in check::ops(&events) {
        if op.f() == F::Lease && op.outcome() == Some("leased") {
            *deliveries.entry(op.job().unwrap_or_default()).or_default() += 1;
        }
    }
    let jobs = ids
        .iter()
        .map(|id| JobLine {
            id: id.clone(),
            deliveries: deliveries.get(id.as_str()).copied().unwrap_or(0),
            state: states.get(id).cloned().unwrap_or_else(|| "absent".into()),
        })
        .collect();
    if let Some(e) = rec.write_error() {
        anyhow::bail!("writing the history failed: {e}");
    }
    Ok(SmokeReport {
        config,
        jobs,
        invariants,
        verdict,
        events: events.len(),
        elapsed_ms: started.elapsed().as_millis() as u64,
        history,
    })
}

async fn enqueue(
    queue: &Queue,
    rec: &Recorder,
    id: &str,
    payload: &str,
    options: EnqueueOptions,
) -> Result<Enqueued, QueueError> {
    let op = rec.push_invoke_with(
        "producer",
        F::Enqueue,
        Some(id),
        json!({"payload": payload}),
    );
    let res = queue.enqueue(id, payload.as_bytes(), options).await;
    close(rec, op, &res, |e| {
        (
            None,
            None,
            json!({"outcome": serde_json::to_value(e).unwrap_or_default()}),
        )
    });
    res
}
