//! The smoke scenario of `ackgap run`, on a real server. Producers enqueue
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;

use crate::adapter::{Adapter, Reference};
use crate::check::{self, Report, Verdict};
use crate::history::{Recorded, Recorder, F};
use crate::queue::client::EnqueueOptions;
use crate::queue::{Queue, QueueError};

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

/// A worker: lease and complete until no job is ready.
async fn drain(queue: Recorded, lease_ms: u64) -> Result<(), QueueError> {
    let worker = queue.process().name().to_owned();
    loop {
        let Some(lease) = queue.lease(&worker, lease_ms, None).await? else {
            return Ok(());
        };
        queue.complete(&lease.id, lease.token).await?;
    }
}

/// The history file could not be created or written (a path that is not
/// writable, a full disk). The campaign stops with this error rather than
/// report a verdict whose history cannot be re-judged; every event is still
/// written, and flushed, as it happens, so the file holds what could be
/// written up to the failure.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the history to {}: {reason}", path.display())]
pub struct HistoryWriteError {
    /// The history file.
    pub path: PathBuf,
    /// The first error met.
    pub reason: String,
}

/// Runs the smoke campaign on `queue` (which is cleared first).
pub async fn smoke(
    queue: &Queue,
    config: SmokeConfig,
    history: Option<PathBuf>,
) -> anyhow::Result<SmokeReport> {
    let started = Instant::now();
    let rec = match &history {
        Some(path) => Recorder::to_file(path).map_err(|e| HistoryWriteError {
            path: path.clone(),
            reason: e.to_string(),
        })?,
        None => Recorder::in_memory(),
    };
    let ids = scenario(queue, &config, &rec).await?;
    let events = rec.events();
    let invariants = check::check_all(&events);
    let verdict = check::overall(&invariants);

    let jobs = job_lines(&ids, &events);
    if let Some(reason) = rec.write_error() {
        return Err(HistoryWriteError {
            path: history.unwrap_or_default(),
            reason,
        }
        .into());
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

/// The scenario itself, recorded into `rec`: answers the job ids.
async fn scenario(
    queue: &Queue,
    config: &SmokeConfig,
    rec: &Recorder,
) -> anyhow::Result<Vec<String>> {
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed ^ 0x5eed_5a0e);
    let queue = queue.on_server_clock();
    queue.clear().await?;
    let recorded = Recorded::new(Arc::new(Reference::new(queue.clone())), rec, "producer");

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
        recorded
            .enqueue(id, payload.as_bytes(), options, None)
            .await?;
    }
    let dup = &ids[rng.random_range(0..ids.len())];
    recorded
        .enqueue(dup, b"a different payload", options, None)
        .await?;

    // One worker leases a job and crashes holding it (forgets its lease).
    let crasher = recorded.as_process("w0");
    let stale = crasher
        .lease("w0", config.lease_ms, None)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the crashing worker found no job to lease"))?;
    crasher.process().crash(&stale.id, stale.token, json!({}));
    recorded.inner().crash("w0").await?;

    // The other workers drain the queue concurrently.
    let workers = || {
        (1..=config.workers)
            .map(|w| {
                let worker = recorded.as_process(&format!("w{w}"));
                tokio::spawn(drain(worker, config.lease_ms))
            })
            .collect::<Vec<_>>()
    };
    for handle in workers() {
        handle.await??;
    }

    // The crashed lease expires on the server clock; the reaper takes it back.
    let wait_ms = stale
        .deadline_ms
        .saturating_sub(queue.server_time_ms().await?)
        + 20;
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    recorded.as_process("reaper").reap(100, None).await?;
    for handle in workers() {
        handle.await??;
    }

    // The crashed worker comes back and acks its stale lease: fenced.
    crasher.complete(&stale.id, stale.token).await?;

    recorded.as_process("checker").read().await?;
    Ok(ids)
}

/// Each job's line: its deliveries (leases granted) and its state in the
/// final read.
fn job_lines(ids: &[String], events: &[crate::history::Event]) -> Vec<JobLine> {
    let states = check::final_read(events).unwrap_or_default();
    let mut deliveries: BTreeMap<&str, u64> = BTreeMap::new();
    for op in check::ops(events) {
        if op.f() == F::Lease && op.outcome() == Some("leased") {
            *deliveries.entry(op.job().unwrap_or_default()).or_default() += 1;
        }
    }
    ids.iter()
        .map(|id| JobLine {
            id: id.clone(),
            deliveries: deliveries.get(id.as_str()).copied().unwrap_or(0),
            state: states.get(id).cloned().unwrap_or_else(|| "absent".into()),
        })
        .collect()
}
