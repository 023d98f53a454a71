//! apalis-redis 1.0, a real peer from crates.io, measured by `ackgap bench`
//! only under `--features apalis` (so the default build does not carry it).
//!
//! Drain: a prefilled queue of `u64` jobs, one worker fetching `--batch` jobs
//! per poll and running its handlers as apalis documents it: spawned
//! (`parallelize(tokio::spawn)`) under a concurrency limit of `--workers`
//! handlers at a time (tower's `ConcurrencyLimitLayer`, which apalis's own
//! `concurrency` wraps: the worker polls for more only below the limit).
//! The row names its backlog: apalis-redis scans what waits at every fetch
//! (an `LREM` per leased job), so its cost per job grows with the backlog
//! and rows compare only at equal backlogs.
//! The handler does nothing but count deliveries: a round counts only if
//! every job was delivered exactly once. Enqueue: `push_bulk` of `--batch`
//! jobs per call; the round counts only if the queue then holds every job.
//!
//! # Design notes
//!
//! A reference row at the same backlog sits beside it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apalis_core::backend::TaskSink;
use apalis_core::task::data::Data;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_core::worker::context::WorkerContext;
use apalis_core::worker::ext::parallelize::ParallelizeExt;
use apalis_redis::{Config, RedisStorage};

use super::scenarios::{connection_config, server_cpu_s, Round, RESPONSE_TIMEOUT};
use super::BenchError;

/// The largest backlog the drain gives apalis-redis: its fetch script fails
/// with more than about 8,000 due scheduled tasks (Lua's `unpack` limit),
/// and `push_bulk` schedules every task it pushes.
pub(super) const BACKLOG_MAX: u64 = 5_000;

fn unavailable(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::unavailable(format!("apalis-redis {what}: {e}"))
}

/// Deliveries per job, and how many in all.
struct Seen {
    deliveries: Mutex<Vec<u32>>,
    total: AtomicU64,
    jobs: u64,
}

async fn handler(job: u64, seen: Data<Arc<Seen>>, worker: WorkerContext) {
    if let Some(n) = seen
        .deliveries
        .lock()
        .expect("deliveries lock")
        .get_mut(job as usize)
    {
        *n += 1;
    }
    if seen.total.fetch_add(1, Ordering::SeqCst) + 1 >= seen.jobs {
        let _ = worker.stop();
    }
}

async fn storage(
    client: &redis::Client,
    queue: &str,
    batch: usize,
) -> Result<RedisStorage<u64>, BenchError> {
    let manager_config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(Duration::from_secs(10)));
    let conn = redis::aio::ConnectionManager::new_with_config(client.clone(), manager_config)
        .await
        .map_err(|e| unavailable("connect", e))?;
    let config = Config::default().batch_size(batch).queue(queue);
    Ok(RedisStorage::new(conn).with_config(config))
}

async fn push_all(
    storage: &mut RedisStorage<u64>,
    jobs: u64,
    batch: usize,
) -> Result<(), BenchError> {
    let all: Vec<u64> = (0..jobs).collect();
    for chunk in all.chunks(batch) {
        storage
            .push_bulk(chunk.to_vec())
            .await
            .map_err(|e| unavailable("push_bulk", e))?;
    }
    Ok(())
}

/// The number of jobs waiting in the queue: its active list, plus its
/// scheduled set (a task pushed with a run-at time, as `push_bulk` gives
/// each, waits there until a worker's fetch moves it).
async fn waiting(client: &redis::Client, storage: &RedisStorage<u64>) -> Result<u64, BenchError> {
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&connection_config())
        .await
        .map_err(|e| unavailable("connect", e))?;
    let config = storage.get_config();
    let (listed, scheduled): (u64, u64) = redis::pipe()
        .cmd("LLEN")
        .arg(config.active_jobs_list())
        .cmd("ZCARD")
        .arg(config.scheduled_jobs_set())
        .query_async(&mut conn)
        .await
        .map_err(|e| unavailable("LLEN", e))?;
    Ok(listed + scheduled)
}

async fn flush(client: &redis::Client) -> Result<(), BenchError> {
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&connection_config())
        .await
        .map_err(|e| unavailable("connect", e))?;
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| unavailable("FLUSHDB", e))
}

/// Bulk enqueue: `push_bulk` of `batch` jobs per call, one producer.
pub(super) async fn enqueue(
    client: &redis::Client,
    jobs: u64,
    batch: usize,
    round: u64,
) -> Result<Round, BenchError> {
    flush(client).await?;
    let mut storage = storage(client, &format!("bench-apalis-enqueue-r{round}"), batch).await?;
    let mut control = client
        .get_multiplexed_async_connection_with_config(&connection_config())
        .await
        .map_err(|e| unavailable("connect", e))?;
    let cpu0 = server_cpu_s(&mut control).await;
    let started = Instant::now();
    push_all(&mut storage, jobs, batch).await?;
    let elapsed = started.elapsed();
    let cpu1 = server_cpu_s(&mut control).await;
    let mut problems = Vec::new();
    let n = waiting(client, &storage).await?;
    if n != jobs {
        problems.push(format!("{n} of {jobs} jobs queued"));
    }
    flush(client).await?;
    Ok(Round {
        jobs,
        elapsed,
        cpu_s: cpu0.zip(cpu1).map(|(a, b)| (b - a).max(0.0)),
        problems,
    })
}

/// Drain of a prefilled queue by one worker fetching `batch` per poll,
/// with at most `concurrency` handlers running.
pub(super) async fn drain(
    client: &redis::Client,
    jobs: u64,
    batch: usize,
    concurrency: usize,
    round: u64,
) -> Result<Round, BenchError> {
    flush(client).await?;
    let mut storage = storage(client, &format!("bench-apalis-drain-r{round}"), batch).await?;
    push_all(&mut storage, jobs, batch).await?;
    let seen = Arc::new(Seen {
        deliveries: Mutex::new(vec![0; jobs as usize]),
        total: AtomicU64::new(0),
        jobs,
    });
    let worker = WorkerBuilder::new(format!("bench-apalis-r{round}"))
        .backend(storage)
        .data(Arc::clone(&seen))
        .layer(tower::limit::ConcurrencyLimitLayer::new(concurrency.max(1)))
        .parallelize(tokio::spawn)
        .build(handler);
    let mut control = client
        .get_multiplexed_async_connection_with_config(&connection_config())
        .await
        .map_err(|e| unavailable("connect", e))?;
    let cpu0 = server_cpu_s(&mut control).await;
    let started = Instant::now();
    let ran = tokio::time::timeout(Duration::from_secs(120), worker.run()).await;
    let elapsed = started.elapsed();
    let cpu1 = server_cpu_s(&mut control).await;
    let mut problems = Vec::new();
    match ran {
        Err(_) => problems.push("the worker did not finish within 120 s".into()),
        Ok(Err(e)) => problems.push(format!("the worker stopped with {e}")),
        Ok(Ok(())) => {}
    }
    let deliveries = seen.deliveries.lock().expect("deliveries lock").clone();
    let lost = deliveries.iter().filter(|n| **n == 0).count();
    let twice = deliveries.iter().filter(|n| **n > 1).count();
    if lost > 0 || twice > 0 {
        problems.push(format!(
            "{lost} jobs never delivered, {twice} delivered more than once"
        ));
    }
    flush(client).await?;
    Ok(Round {
        jobs,
        elapsed,
        cpu_s: cpu0.zip(cpu1).map(|(a, b)| (b - a).max(0.0)),
        problems,
    })
}
