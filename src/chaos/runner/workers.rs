//! The run's tasks on the queue: producers, workers (lease, apply the
//! effect, settle; crash when a fault says so), heartbeats and the reaper.
//!
//! # Design notes
//!
//! A heartbeat runs only when the queue lists `extend`, the reaper only when
//! it lists `reap`: a queue without one recovers an expired lease inside a
//! lease (Sidekiq's fetch, arq's expiring in-progress key), which the
//! workers keep calling through the drain. On a queue that does not refuse a
//! duplicate id (`dedup: false`) the producers retry an enqueue only after a
//! `fail`, and send no drawn duplicate.

use super::*;
use crate::chaos::lease_table::LeaseKey;

/// Producer `p` enqueues its share of the jobs, evenly over the first 85%
/// of the faults phase (armed worker faults need deliveries to hit), each
/// with its drawn `max_attempts`. An enqueue that fails or whose outcome is unknown
/// is retried (a retry of an enqueue that did land answers `duplicate`).
/// On a queue that does not refuse a duplicate id (`dedup: false`) a retry
/// of an enqueue that did land would be a second message, so only a
/// certain failure (`fail`: nothing was sent or the queue refused before
/// any write) is retried there; an unknown outcome is left as it is.
///
/// After a drawn share of its enqueues (on a queue that refuses a
/// duplicate id), the producer enqueues an id again with another payload:
/// one the run last saw pending, active or finished, the class drawn from
/// the seed (the next class that has an id when it has none). That
/// enqueue is not retried.
pub(super) async fn producer(ctx: Arc<Ctx>, p: usize, jobs: Arc<Vec<JobDraw>>) {
    let name = format!("p{p}");
    let mine: Vec<&JobDraw> = jobs.iter().skip(p).step_by(ctx.cfg.producers).collect();
    let window_ms = ctx.cfg.duration_ms * 85 / 100;
    let gap_ms = window_ms / mine.len().max(1) as u64;
    // Each enqueue's `max_attempts` goes into the history: bounded-retries
    // judges every job's leases against it.
    let queue = ctx.recorded(&ctx.direct, &name).noting_max_attempts();
    let dedup = ctx.direct.capabilities().dedup;
    // This producer's draws of duplicates: whether, which class, which id.
    let duplicates = ctx.draws.duplicates(ctx.cfg.seed, p, mine.len());
    for (k, (job, duplicate)) in mine.into_iter().zip(duplicates).enumerate() {
        // On a fixed timetable: a producer held up by a fault catches up.
        let due = ctx.start + Duration::from_millis(k as u64 * gap_ms);
        tokio::time::sleep_until(due.into()).await;
        let options = EnqueueOptions {
            max_attempts: job.max_attempts,
            delay_ms: 0,
        };
        for _attempt in 0..5 {
            ctx.count();
            let res = queue
                .enqueue(&job.id, job.payload.as_bytes(), options, None)
                .await;
            match res {
                Ok(outcome) => {
                    if outcome == crate::queue::Enqueued::Enqueued {
                        lock(&ctx.acknowledged).insert(job.id.clone());
                        lock(&ctx.pools).admit(&job.id);
                    }
                    break;
                }
                Err(e) if e.is_unknown() && !dedup => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let Some(duplicate) = duplicate.filter(|_| dedup) else {
            continue;
        };
        let Some((seen, id)) = lock(&ctx.pools).pick(duplicate.class, duplicate.pick) else {
            continue;
        };
        // The id's own `max_attempts`: a duplicate changes nothing but
        // its payload.
        let max_attempts = id
            .rsplit('-')
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|i| jobs.get(i))
            .filter(|j| j.id == id)
            .map_or(job.max_attempts, |j| j.max_attempts);
        let options = EnqueueOptions {
            max_attempts,
            delay_ms: 0,
        };
        ctx.count();
        let res = queue
            .enqueue(&id, duplicate.payload.as_bytes(), options, None)
            .await;
        let answer = match res {
            Ok(crate::queue::Enqueued::Duplicate) => "duplicate",
            Ok(_) => "enqueued",
            Err(_) => "error",
        };
        let mut w = lock(&ctx.workload);
        *w.duplicates.entry(seen).or_default() += 1;
        *w.duplicate_answers.entry(answer.to_owned()).or_default() += 1;
    }
}

/// The reaper: takes expired leases back, every fifth of a lease.
///
/// The reap script reads the server clock itself and does not return it,
/// so the reaper brackets each reap with `TIME` (the recording layer's
/// [`Recorded::timing_server_clock`]): `before_ms` just before
/// it is sent, `now_ms` just after its reply came back. The script's own
/// `now` lies between the two. lease-respected judges each reaped job
/// against `now_ms`: a deadline past `now_ms` is a proven violation (the
/// script ran no later), while a deadline that fell between `before_ms`
/// and `now_ms` passes unproven — the check is blind to a reap early by
/// less than one round trip. A `TIME` that fails leaves the reap
/// unjudged.
pub(super) async fn reaper(ctx: Arc<Ctx>) {
    let queue = ctx.recorded(&ctx.direct, "reaper").timing_server_clock();
    while !ctx.stop_workers.load(Ordering::SeqCst) {
        ctx.count();
        if let Ok(reaped) = queue.reap(100, None).await {
            let mut pools = lock(&ctx.pools);
            for r in reaped {
                let class = match r.to {
                    crate::queue::JobState::Pending => Seen::Pending,
                    crate::queue::JobState::Active => Seen::Active,
                    _ => Seen::Finished,
                };
                pools.set(&r.id, class);
            }
        }
        tokio::time::sleep(ctx.cfg.reap_every()).await;
    }
}

/// How a delivery ended for the worker.
pub(super) enum Handled {
    /// Settled (or tried to): go on with the next lease.
    Next,
    /// The worker crashed: start a new incarnation.
    Crashed,
}

/// Worker `w`: lease, apply the effect, settle; crash and come back when a
/// fault says so.
pub(super) async fn worker(ctx: Arc<Ctx>, w: usize) {
    let slot = &ctx.slots[w];
    // Each answered lease is followed by the server's `TIME`, so that
    // delay-respected and lease-exclusive judge it as the explorers'
    // server-clock walks do (an upper bound of the script's clock).
    let queue = ctx
        .recorded(&slot.adapter, &slot.name)
        .timing_server_clock();
    let idle = Duration::from_millis(20);
    let mut incarnation = 0u64;
    'incarnation: while !ctx.stop_workers.load(Ordering::SeqCst) {
        incarnation += 1;
        let table = Arc::new(LeaseTable::new());
        // A queue without a per-job extend has no heartbeat to run (its
        // leases last as its own rules say: Sidekiq's while the process
        // lives, arq's for the job's timeout).
        let beating = ctx.slots[w]
            .adapter
            .capabilities()
            .supports(crate::adapter::Operation::Extend)
            .then(|| {
                AbortOnDrop(tokio::spawn(heartbeat(
                    Arc::clone(&ctx),
                    w,
                    incarnation,
                    Arc::clone(&table),
                )))
            });
        loop {
            if ctx.stop_workers.load(Ordering::SeqCst) {
                let (_, permits) = table.shutdown();
                for p in permits {
                    table.finish_settle(p);
                }
                return;
            }
            ctx.count();
            let lease = queue.lease(&slot.name, ctx.cfg.lease_ms, None).await;
            let lease = match lease {
                Ok(Some(lease)) => lease,
                Ok(None) => {
                    ctx.nap(idle).await;
                    continue;
                }
                Err(_) => {
                    ctx.nap(idle * 5).await;
                    continue;
                }
            };
            match handle(&ctx, slot, &table, lease).await {
                Handled::Next => {}
                Handled::Crashed => {
                    // The process is gone with its memory; it comes back
                    // after a moment with an empty table.
                    table.crash();
                    // Its heartbeat dies with it, then the queue's client
                    // is told (`exec:` adapters that listed `crash` drop
                    // the worker's connection and state). An error changes
                    // nothing here: the next incarnation's calls find out.
                    drop(beating);
                    let _ = slot.adapter.crash(&slot.name).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'incarnation;
                }
            }
        }
    }
}

/// How long the handler works on a job: up to half a lease, a function of
/// the payload (FNV-1a), which the seed chose.
pub(super) fn work_time(cfg: &ChaosConfig, payload: &[u8]) -> Duration {
    let hash = payload.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    Duration::from_millis(hash % (cfg.lease_ms / 2 + 1))
}

/// Records the crash of the worker of `slot`, holding `lease`.
pub(super) fn crash(
    ctx: &Ctx,
    slot: &Slot,
    lease: &crate::queue::Lease,
    kind: FaultKind,
) -> Handled {
    ctx.count();
    Process::new(&ctx.rec, &slot.name).crash(&lease.id, lease.token, json!({"fault": kind.name()}));
    Handled::Crashed
}

/// Worker `slot` handles `lease`: applies the effect and completes it,
/// unless the fault armed for it crashes or stalls the worker first, or
/// the draws make its handler fail ([`Draws::fails`]): then it works and
/// sends `fail` without applying the effect. An effect whose write errs
/// fails the job too (the handler raised). A delivery with a worker
/// fault armed never fails: the fault is what it tests (a stalled worker's
/// stale *ack* must meet the next holder).
pub(super) async fn handle(
    ctx: &Ctx,
    slot: &Slot,
    table: &LeaseTable,
    lease: crate::queue::Lease,
) -> Handled {
    let delivery = {
        let mut seen = lock(&ctx.deliveries);
        let n = seen.entry(lease.id.clone()).or_default();
        *n += 1;
        *n
    };
    lock(&ctx.pools).set(&lease.id, Seen::Active);
    let Ok(key) = table.insert(&lease.id, lease.token, lease.deadline_ms) else {
        return Handled::Next;
    };
    let (fault, stall) = fire_armed(ctx, slot, &lease);
    let fails = fault.is_none()
        && supports_fail(slot)
        && ctx.draws.fails(ctx.cfg.seed, &lease.id, delivery);
    match fault {
        Some(FaultKind::CrashBeforeEffect) => {
            return crash(ctx, slot, &lease, FaultKind::CrashBeforeEffect)
        }
        Some(FaultKind::StalePause) | Some(FaultKind::HeartbeatStop) => {
            // Stale pause: the whole worker stalls, heartbeat included.
            // Heartbeat stop: the heartbeat dies while the handler works
            // too long. Either way the lease expires under the worker,
            // which then goes on as if it still held it.
            let stall = stall.max(past_the_answered_deadline(ctx, &lease).await);
            slot.silent_until_ms.store(
                ctx.now_ms() + stall.as_millis() as u64 + 100,
                Ordering::SeqCst,
            );
            tokio::time::sleep(stall).await;
        }
        _ => {
            // The handler's own work: up to half a lease, fixed per job by
            // its (seeded) payload, so redeliveries overlap real work.
            ctx.nap(work_time(&ctx.cfg, &lease.payload)).await;
        }
    }
    let queue = ctx.recorded(&slot.adapter, &slot.name);
    if fails {
        // The handler raised before its effect: the job is failed, with
        // the drawn retry delay.
        fail(ctx, table, &key, &queue, &lease).await;
        return Handled::Next;
    }
    if apply_effect(ctx, slot, &queue, &lease).await.is_err() {
        // The effect's write met an error: the handler raised, and the
        // worker does what a library's worker does then, it fails the job
        // (Dramatiq's, RQ's, Sidekiq's, arq's and ours alike). Giving the
        // lease up instead is a worker no library ships: on a queue that
        // recovers a job only from a dead worker (Dramatiq, Sidekiq's
        // reliable fetch), the job would wait for that worker's death. A
        // queue without `fail`: the lease is given up, the reaper takes the
        // job back.
        if supports_fail(slot) {
            fail(ctx, table, &key, &queue, &lease).await;
        } else if let Ok(permit) = table.begin_settle(&key) {
            table.finish_settle(permit);
        }
        return Handled::Next;
    }
    if fault == Some(FaultKind::CrashAckGap) {
        return crash(ctx, slot, &lease, FaultKind::CrashAckGap);
    }
    // A lease the heartbeat found lost has no permit; the worker still
    // acts on it (the queue must refuse a stale settle).
    let permit = table.begin_settle(&key).ok();
    ctx.count();
    if fault == Some(FaultKind::CrashAfterAck) {
        queue
            .complete_unread(
                &lease.id,
                lease.token,
                Duration::from_millis(5),
                "the worker crashed after sending the ack; its reply was never read",
            )
            .await;
        return crash(ctx, slot, &lease, FaultKind::CrashAfterAck);
    }
    let settled = queue.complete(&lease.id, lease.token).await;
    if let Ok(crate::queue::Settled::Settled | crate::queue::Settled::AlreadySettled) = settled {
        lock(&ctx.pools).set(&lease.id, Seen::Finished);
    }
    if let Some(permit) = permit {
        table.finish_settle(permit);
    }
    Handled::Next
}

/// True when the queue of `slot` has a `fail` to call.
fn supports_fail(slot: &Slot) -> bool {
    slot.adapter
        .capabilities()
        .supports(crate::adapter::Operation::Fail)
}

/// The worker fails `lease` (its handler raised), with the drawn retry
/// delay, and counts the answer. A lease the heartbeat found lost has no
/// permit; the worker still fails it (the queue must refuse it).
async fn fail(
    ctx: &Ctx,
    table: &LeaseTable,
    key: &LeaseKey,
    queue: &Recorded,
    lease: &crate::queue::Lease,
) {
    let permit = table.begin_settle(key).ok();
    ctx.count();
    let res = queue
        .fail(&lease.id, lease.token, ctx.draws.retry_delay_ms, None)
        .await;
    let answer = match &res {
        Ok(crate::queue::Failed::Requeued { .. }) => {
            lock(&ctx.pools).set(&lease.id, Seen::Pending);
            "requeued"
        }
        Ok(crate::queue::Failed::Dead) => {
            lock(&ctx.pools).set(&lease.id, Seen::Finished);
            "dead"
        }
        Ok(crate::queue::Failed::Fenced { .. }) => "fenced",
        Ok(crate::queue::Failed::Missing) => "missing",
        Err(_) => "error",
    };
    *lock(&ctx.workload)
        .fails
        .entry(answer.to_owned())
        .or_default() += 1;
    if let Some(permit) = permit {
        table.finish_settle(permit);
    }
}

/// The fault armed on `slot` for its next delivery, if any, fired (noted)
/// for `lease`: its kind and how long it stalls the worker.
/// How long a stalled worker must stall for its lease to end under it: to
/// the deadline the queue answered (on the server's clock, read with
/// `TIME`) and half a configured lease past it, into the next holder's
/// work. The drawn window is sized for the lease asked for; a queue may
/// answer a longer one (RQ counts in whole seconds). Zero when the server
/// does not say its time or the lease has no deadline.
async fn past_the_answered_deadline(ctx: &Ctx, lease: &crate::queue::Lease) -> Duration {
    if lease.deadline_ms == 0 {
        return Duration::ZERO;
    }
    let mut conn = ctx.direct.connection();
    let time: Result<(u64, u64), _> = redis::cmd("TIME").query_async(&mut conn).await;
    let Ok((secs, micros)) = time else {
        return Duration::ZERO;
    };
    let now = secs * 1_000 + micros / 1_000;
    let ahead = lease.deadline_ms.saturating_sub(now);
    Duration::from_millis(ahead + ctx.cfg.lease_ms / 2)
}

fn fire_armed(
    ctx: &Ctx,
    slot: &Slot,
    lease: &crate::queue::Lease,
) -> (Option<FaultKind>, Duration) {
    let armed = lock(&slot.armed).pop_front();
    if let Some((kind, _)) = armed {
        ctx.fire(
            kind,
            &slot.name,
            json!({"job": lease.id, "token": lease.token}),
        );
    }
    let fault = armed.map(|(kind, _)| kind);
    let stall = Duration::from_millis(armed.map_or(0, |(_, ms)| ms));
    (fault, stall)
}

/// Worker `w`'s heartbeat: extends every held lease every third of a lease,
/// until its table closes. Each incarnation's heartbeat is a process of
/// its own (`w0-hb1`, `w0-hb2`, ...): a crash aborts the heartbeat, maybe
/// with an extend in flight, and that invoke stays open for good, as
/// Jepsen's crashed processes do; the next heartbeat must not be the same
/// process, or the history would not be well formed.
pub(super) async fn heartbeat(ctx: Arc<Ctx>, w: usize, incarnation: u64, table: Arc<LeaseTable>) {
    let slot = &ctx.slots[w];
    let queue = ctx.recorded(&slot.adapter, &format!("{}-hb{incarnation}", slot.name));
    let every = Duration::from_millis((ctx.cfg.lease_ms / 3).max(10));
    loop {
        ctx.nap(every).await;
        if table.phase() != crate::chaos::lease_table::Phase::Open
            || ctx.stop_workers.load(Ordering::SeqCst)
        {
            return;
        }
        if ctx.now_ms() < slot.silent_until_ms.load(Ordering::SeqCst) {
            continue;
        }
        for (key, _) in table.held() {
            let Ok(ticket) = table.begin_extend(&key) else {
                continue;
            };
            ctx.count();
            let res = queue
                .extend(key.id(), key.token(), ctx.cfg.lease_ms, None)
                .await;
            if let Ok(answer) = &res {
                let _ = table.finish_extend(ticket, answer);
            }
        }
    }
}

/// Applies every part of the consumer's effect for `lease`, each recorded
/// as an `effect` of the worker; stops at the first part that fails.
async fn apply_effect(
    ctx: &Ctx,
    slot: &Slot,
    queue: &Recorded,
    lease: &crate::queue::Lease,
) -> Result<(), QueueError> {
    let mut conn = slot.adapter.connection();
    let delivery = Delivery {
        id: &lease.id,
        token: lease.token,
        payload: &lease.payload,
    };
    for part in 0..ctx.consumer.parts() {
        ctx.count();
        let apply = ctx
            .consumer
            .apply(&mut conn, slot.adapter.keys(), delivery, part);
        queue
            .process()
            .effect(&lease.id, lease.token, part, None, apply)
            .await?;
    }
    Ok(())
}
