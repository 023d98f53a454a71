//! The measured scenarios. Each runs one round against a server and returns
//! how many jobs it moved, how long that took, the server CPU it cost, and
//! every invariant problem found when the round was read back: a round with
//! a problem does not count.
//!
//! # Design notes
//!
//! The rows: the ceiling, the `LMOVE` pattern, and the reference queue's
//! enqueue, drain and lifecycle. The `drain (complete + lease next)` row is
//! the unbatched worker loop on `Queue::complete_and_lease`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::AsyncCommands;

use super::BenchError;
use crate::queue::client::EnqueueOptions;
use crate::queue::{Enqueued, JobState, Queue, Settled};

/// One round of one scenario.
pub(super) struct Round {
    /// Jobs (or calls) moved in the timed part.
    pub jobs: u64,
    /// How long the timed part took.
    pub elapsed: Duration,
    /// Server CPU (user + sys) spent in the timed part, in seconds.
    pub cpu_s: Option<f64>,
    /// Every invariant problem found afterwards; empty when the round counts.
    pub problems: Vec<String>,
}

/// How long a bench request may wait for its reply, and a connection for
/// its handshake. Generous: a bench on a loaded machine may stall a while,
/// and redis-rs's defaults (0.5 s, 1 s) would turn a stall into an error.
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The configuration of every bench connection.
pub(super) fn connection_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
}

/// A lease long enough that no bench lease ever expires.
const LEASE_MS: u64 = 600_000;

const OPTS: EnqueueOptions = EnqueueOptions {
    max_attempts: 3,
    delay_ms: 0,
};

fn unavailable(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::unavailable(format!("{what}: {e}"))
}

/// `used_cpu_sys + used_cpu_user` from `INFO cpu`, in seconds.
pub(super) async fn server_cpu_s<C: ConnectionLike>(conn: &mut C) -> Option<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.ok()?;
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// Times `body`, with the server's CPU before and after.
async fn timed<C, F, T>(conn: &mut C, body: F) -> (T, Duration, Option<f64>)
where
    C: ConnectionLike,
    F: std::future::Future<Output = T>,
{
    let cpu0 = server_cpu_s(conn).await;
    let started = Instant::now();
    let out = body.await;
    let elapsed = started.elapsed();
    let cpu1 = server_cpu_s(conn).await;
    let cpu = cpu0.zip(cpu1).map(|(a, b)| (b - a).max(0.0));
    (out, elapsed, cpu)
}

/// Splits `0..n` among `workers` tasks as contiguous ranges.
fn shares(n: u64, workers: usize) -> Vec<std::ops::Range<u64>> {
    let w = workers as u64;
    (0..w)
        .map(|t| (n * t / w)..(n * (t + 1) / w))
        .filter(|r| !r.is_empty())
        .collect()
}

fn job_id(i: u64) -> String {
    format!("JOB-{i:08}")
}

/// The ceiling: a trivial script (one `INCR`) through the same client,
/// `tasks` connections, each sending `depth` calls per round trip
/// (depth 1: no pipelining). The invariant: the counter equals the calls
/// made.
pub(super) async fn ceiling(
    client: &redis::Client,
    calls: u64,
    tasks: usize,
    depth: usize,
    round: u64,
) -> Result<Round, BenchError> {
    let script = redis::Script::new("return redis.call('INCR', KEYS[1])");
    let key = format!("bench:{{ceiling}}:r{round}");
    let mut control = connect(client).await?;
    let _: () = control.del(&key).await.map_err(|e| unavailable("DEL", e))?;
    let hash: String = script
        .prepare_invoke()
        .load_async(&mut control)
        .await
        .map_err(|e| unavailable("SCRIPT LOAD", e))?;
    let mut conns = Vec::new();
    for _ in 0..tasks {
        conns.push(connect(client).await?);
    }
    let ranges = shares(calls, tasks);
    let (results, elapsed, cpu_s) = timed(&mut control, async {
        let mut set = tokio::task::JoinSet::new();
        for (mut conn, range) in conns.into_iter().zip(ranges) {
            let (hash, key) = (hash.clone(), key.clone());
            set.spawn(async move {
                ceiling_task(&mut conn, &hash, &key, range.end - range.start, depth).await
            });
        }
        set.join_all().await
    })
    .await;
    for r in results {
        r.map_err(|e| unavailable("EVALSHA", e))?;
    }
    let count: u64 = control.get(&key).await.map_err(|e| unavailable("GET", e))?;
    let _: () = control.del(&key).await.map_err(|e| unavailable("DEL", e))?;
    let mut problems = Vec::new();
    if count != calls {
        problems.push(format!("the counter is {count} after {calls} calls"));
    }
    Ok(Round {
        jobs: calls,
        elapsed,
        cpu_s,
        problems,
    })
}

/// One ceiling task: `calls` calls of the script `hash` on `key`, `depth`
/// per round trip.
async fn ceiling_task(
    conn: &mut redis::aio::MultiplexedConnection,
    hash: &str,
    key: &str,
    calls: u64,
    depth: usize,
) -> Result<(), redis::RedisError> {
    let mut left = calls;
    while left > 0 {
        let n = left.min(depth as u64);
        if depth == 1 {
            let _: i64 = redis::cmd("EVALSHA")
                .arg(hash)
                .arg(1)
                .arg(key)
                .query_async(conn)
                .await?;
        } else {
            let mut pipe = redis::pipe();
            for _ in 0..n {
                pipe.cmd("EVALSHA").arg(hash).arg(1).arg(key);
            }
            let _: Vec<i64> = pipe.query_async(conn).await?;
        }
        left -= n;
    }
    Ok(())
}

/// A bench connection to `client`.
async fn connect(client: &redis::Client) -> Result<redis::aio::MultiplexedConnection, BenchError> {
    client
        .get_multiplexed_async_connection_with_config(&connection_config())
        .await
        .map_err(|e| unavailable("connect", e))
}

/// The classic list pattern: `LMOVE pending processing`, then `LREM` on
/// ack, by `workers` tasks sharing one multiplexed connection, draining a
/// prefilled list. The invariant: every job taken exactly once, every
/// `LREM` removed its entry, both lists empty at the end.
pub(super) async fn lmove(
    client: &redis::Client,
    jobs: u64,
    workers: usize,
    round: u64,
) -> Result<Round, BenchError> {
    let pending = format!("bench:{{lmove-r{round}}}:pending");
    let processing = format!("bench:{{lmove-r{round}}}:processing");
    let mut conn = connect(client).await?;
    let _: () = conn
        .del(&[&pending, &processing])
        .await
        .map_err(|e| unavailable("DEL", e))?;
    let ids: Vec<String> = (0..jobs).map(job_id).collect();
    for chunk in ids.chunks(1_000) {
        let _: () = conn
            .rpush(&pending, chunk)
            .await
            .map_err(|e| unavailable("RPUSH", e))?;
    }
    let mut control = conn.clone();
    let (results, elapsed, cpu_s) = timed(&mut control, async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..workers {
            let mut conn = conn.clone();
            let (pending, processing) = (pending.clone(), processing.clone());
            set.spawn(async move { lmove_worker(&mut conn, &pending, &processing).await });
        }
        set.join_all().await
    })
    .await;
    let mut problems = lmove_problems(results, jobs)?;
    let left: (u64, u64) = redis::pipe()
        .llen(&pending)
        .llen(&processing)
        .query_async(&mut control)
        .await
        .map_err(|e| unavailable("LLEN", e))?;
    if left != (0, 0) {
        problems.push(format!("lists not empty (pending, processing): {left:?}"));
    }
    let _: () = control
        .del(&[&pending, &processing])
        .await
        .map_err(|e| unavailable("DEL", e))?;
    Ok(Round {
        jobs,
        elapsed,
        cpu_s,
        problems,
    })
}

/// One LMOVE worker: takes and acks until `pending` is empty; answers the
/// jobs it took and how many of its `LREM`s removed nothing.
async fn lmove_worker(
    conn: &mut redis::aio::MultiplexedConnection,
    pending: &str,
    processing: &str,
) -> Result<(Vec<String>, u64), redis::RedisError> {
    let mut taken = Vec::new();
    let mut bad_acks = 0u64;
    loop {
        let item: Option<String> = redis::cmd("LMOVE")
            .arg(pending)
            .arg(processing)
            .arg("LEFT")
            .arg("RIGHT")
            .query_async(conn)
            .await?;
        let Some(item) = item else { break };
        let removed: i64 = conn.lrem(processing, 1, &item).await?;
        bad_acks += u64::from(removed != 1);
        taken.push(item);
    }
    Ok((taken, bad_acks))
}

/// The problems of the LMOVE workers' `results` draining `jobs` jobs: acks
/// that removed nothing, a job taken twice, a job never taken.
fn lmove_problems(
    results: Vec<Result<(Vec<String>, u64), redis::RedisError>>,
    jobs: u64,
) -> Result<Vec<String>, BenchError> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut taken_total = 0u64;
    for r in results {
        let (taken, bad_acks) = r.map_err(|e| unavailable("LMOVE", e))?;
        if bad_acks > 0 {
            problems.push(format!("{bad_acks} LREM removed nothing"));
        }
        taken_total += taken.len() as u64;
        seen.extend(taken);
    }
    if taken_total != seen.len() as u64 {
        problems.push(format!(
            "{} deliveries of {} distinct jobs",
            taken_total,
            seen.len()
        ));
    }
    if seen.len() as u64 != jobs {
        problems.push(format!("{} of {jobs} jobs taken", seen.len()));
    }
    Ok(problems)
}

/// What a reference-queue round does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Producers enqueue every job.
    Enqueue,
    /// Workers lease and complete a prefilled queue.
    Drain,
    /// The same with `complete_and_lease`: one call per job, which settles
    /// the job held and leases the next (unbatched only).
    DrainNext,
    /// Each task enqueues, leases and completes.
    Lifecycle,
}

/// Counts of what the workers were answered.
#[derive(Default)]
struct Tally {
    enqueued: u64,
    refused: u64,
    settled: Vec<String>,
    not_settled: u64,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.enqueued += other.enqueued;
        self.refused += other.refused;
        self.settled.extend(other.settled);
        self.not_settled += other.not_settled;
    }
}

/// The reference queue: `flow` with `workers` tasks sharing one
/// multiplexed connection (so concurrent calls pipeline), unbatched when
/// `batch` is 1, else with the batch scripts. Read back afterwards: every
/// job in exactly the state the flow leaves it in (pending after an
/// enqueue round; done, settled exactly once, after the others), nothing
/// else anywhere, and the structure sound.
pub(super) async fn reference(
    queue: &Queue,
    flow: Flow,
    jobs: u64,
    workers: usize,
    batch: usize,
) -> Result<Round, BenchError> {
    let op_error = |e: crate::queue::QueueError| unavailable("queue", e);
    queue.clear().await.map_err(op_error)?;
    let ids: Vec<String> = (0..jobs).map(job_id).collect();
    let prefilled = matches!(flow, Flow::Drain | Flow::DrainNext);
    if prefilled {
        for chunk in ids.chunks(1_000) {
            let pairs: Vec<(&str, &[u8])> =
                chunk.iter().map(|id| (id.as_str(), &b"p"[..])).collect();
            queue.enqueue_batch(&pairs, OPTS).await.map_err(op_error)?;
        }
    }
    let mut control = queue.connection();
    let ranges = shares(jobs, workers);
    let (results, elapsed, cpu_s) = timed(&mut control, async {
        let mut set = tokio::task::JoinSet::new();
        for (t, range) in ranges.into_iter().enumerate() {
            let queue = queue.clone();
            let ids: Vec<String> = range.map(job_id).collect();
            let worker = format!("bench-w{t}");
            set.spawn(async move {
                match flow {
                    Flow::Enqueue => enqueue_all(&queue, &ids, batch).await,
                    Flow::Drain => drain(&queue, &worker, batch).await,
                    Flow::DrainNext => drain_next(&queue, &worker).await,
                    Flow::Lifecycle => lifecycle(&queue, &worker, &ids, batch).await,
                }
            });
        }
        set.join_all().await
    })
    .await;
    let mut tally = Tally::default();
    for r in results {
        tally.merge(r.map_err(op_error)?);
    }
    let problems = read_back(queue, flow, jobs, tally).await?;
    queue.clear().await.map_err(op_error)?;
    Ok(Round {
        jobs,
        elapsed,
        cpu_s,
        problems,
    })
}

async fn enqueue_all(
    queue: &Queue,
    ids: &[String],
    batch: usize,
) -> Result<Tally, crate::queue::QueueError> {
    let mut tally = Tally::default();
    if batch <= 1 {
        for id in ids {
            match queue.enqueue(id, b"p", OPTS).await? {
                Enqueued::Enqueued => tally.enqueued += 1,
                Enqueued::Duplicate => tally.refused += 1,
            }
        }
    } else {
        for chunk in ids.chunks(batch) {
            let pairs: Vec<(&str, &[u8])> =
                chunk.iter().map(|id| (id.as_str(), &b"p"[..])).collect();
            for e in queue.enqueue_batch(&pairs, OPTS).await? {
                match e {
                    Enqueued::Enqueued => tally.enqueued += 1,
                    Enqueued::Duplicate => tally.refused += 1,
                }
            }
        }
    }
    Ok(tally)
}

/// Leases and completes until no job is ready.
async fn drain(
    queue: &Queue,
    worker: &str,
    batch: usize,
) -> Result<Tally, crate::queue::QueueError> {
    let mut tally = Tally::default();
    loop {
        let n = lease_complete(queue, worker, batch, &mut tally).await?;
        if n == 0 {
            return Ok(tally);
        }
    }
}

/// Leases one job, then settles each job it holds and leases the next in
/// one call, until no job is ready.
async fn drain_next(queue: &Queue, worker: &str) -> Result<Tally, crate::queue::QueueError> {
    let mut tally = Tally::default();
    let mut held = queue.lease(worker, LEASE_MS).await?;
    while let Some(lease) = held {
        let answer = queue
            .complete_and_lease(&lease.id, lease.token, worker, LEASE_MS)
            .await?;
        match answer.settled? {
            Settled::Settled => tally.settled.push(lease.id),
            _ => tally.not_settled += 1,
        }
        held = answer.next?;
    }
    Ok(tally)
}

/// One lease (of up to `batch` jobs) and the completes of what it got;
/// answers how many jobs were leased.
async fn lease_complete(
    queue: &Queue,
    worker: &str,
    batch: usize,
    tally: &mut Tally,
) -> Result<usize, crate::queue::QueueError> {
    if batch <= 1 {
        let Some(lease) = queue.lease(worker, LEASE_MS).await? else {
            return Ok(0);
        };
        match queue.complete(&lease.id, lease.token).await? {
            Settled::Settled => tally.settled.push(lease.id),
            _ => tally.not_settled += 1,
        }
        return Ok(1);
    }
    let leases = queue.lease_batch(worker, LEASE_MS, batch as u64).await?;
    if leases.is_empty() {
        return Ok(0);
    }
    let pairs: Vec<(&str, u64)> = leases.iter().map(|l| (l.id.as_str(), l.token)).collect();
    let outcomes = queue.complete_batch(&pairs).await?;
    for (lease, outcome) in leases.iter().zip(outcomes) {
        match outcome {
            Settled::Settled => tally.settled.push(lease.id.clone()),
            _ => tally.not_settled += 1,
        }
    }
    Ok(leases.len())
}

/// Enqueues `ids` (in batches of `batch`), and after each enqueue leases
/// and completes as many jobs as it enqueued.
async fn lifecycle(
    queue: &Queue,
    worker: &str,
    ids: &[String],
    batch: usize,
) -> Result<Tally, crate::queue::QueueError> {
    let mut tally = Tally::default();
    for chunk in ids.chunks(batch.max(1)) {
        tally.merge(enqueue_all(queue, chunk, batch).await?);
        let mut owed = chunk.len();
        // Every task leases only after its own enqueue, so at least as many
        // jobs are ready as it asks for; an empty lease is only retried.
        let mut empty = 0;
        while owed > 0 {
            let n = lease_complete(queue, worker, owed.min(batch.max(1)), &mut tally).await?;
            owed -= n.min(owed);
            if n == 0 {
                empty += 1;
                if empty > 1_000 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    }
    Ok(tally)
}

async fn read_back(
    queue: &Queue,
    flow: Flow,
    jobs: u64,
    tally: Tally,
) -> Result<Vec<String>, BenchError> {
    let snap = queue
        .snapshot()
        .await
        .map_err(|e| unavailable("snapshot", e))?;
    let mut problems = snap.structure_problems();
    problems.truncate(5);
    let prefilled = matches!(flow, Flow::Drain | Flow::DrainNext);
    if !prefilled && (tally.enqueued != jobs || tally.refused != 0) {
        problems.push(format!(
            "{} of {jobs} enqueues admitted, {} refused",
            tally.enqueued, tally.refused
        ));
    }
    if snap.rows.len() as u64 != jobs {
        problems.push(format!("{} rows for {jobs} jobs", snap.rows.len()));
    }
    let want = if flow == Flow::Enqueue {
        JobState::Pending
    } else {
        JobState::Done
    };
    let wrong = snap
        .rows
        .values()
        .filter(|r| r.state != Some(want) || r.attempts != u64::from(want == JobState::Done))
        .count();
    if wrong > 0 {
        problems.push(format!(
            "{wrong} jobs not {want} after exactly the expected attempts"
        ));
    }
    let (in_want, others) = match want {
        JobState::Pending => (
            snap.pending.len(),
            snap.active.len() + snap.done.len() + snap.dead.len(),
        ),
        _ => (
            snap.done.len(),
            snap.active.len() + snap.pending.len() + snap.dead.len(),
        ),
    };
    if in_want as u64 != jobs || others != 0 {
        problems.push(format!(
            "{in_want} of {jobs} jobs {want}, {others} elsewhere"
        ));
    }
    if flow != Flow::Enqueue {
        let distinct: BTreeSet<&String> = tally.settled.iter().collect();
        if tally.settled.len() as u64 != jobs || distinct.len() != tally.settled.len() {
            problems.push(format!(
                "{} settles of {} distinct jobs for {jobs} jobs",
                tally.settled.len(),
                distinct.len()
            ));
        }
        if tally.not_settled > 0 {
            problems.push(format!("{} completes were not accepted", tally.not_settled));
        }
    }
    Ok(problems)
}
