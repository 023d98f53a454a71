//! The walk's heal, VOPR-style: time moves past every deadline and
//! ready-at, the reaper takes every expired lease, and `w0` drains
//! ([`Drain`]); on a queue the model does not describe, the workers stop
//! first, as if crashed, and the queue's clients open their connections
//! afresh if a step restarted the server ([`heal_blind`]). Then
//! [`liveness`] judges the drain.

use std::collections::BTreeMap;

use super::{Driver, ExploreError, Outcome, Schedule, Step};
use crate::adapter::Operation;
use crate::check::{self, Report, Verdict};
use crate::history::Event;
use crate::queue::JobState;

/// What the drain did.
#[derive(Clone, Copy, Debug)]
pub(super) struct Drain {
    /// Leases asked for, the final empty one included.
    pub(super) leases: usize,
    /// The most leases liveness allows: one per unfinished job, plus the
    /// empty one that ends the drain.
    bound: usize,
    /// True when a lease came back empty within the bound.
    finished: bool,
}

impl Drain {
    /// `w0` leases and completes until a lease comes back empty
    /// (`finished`) or the bound is reached.
    async fn run(&mut self, driver: &mut Driver) -> Result<(), ExploreError> {
        while self.leases < self.bound {
            self.leases += 1;
            match driver.apply(&Step::Lease { worker: 0 }).await? {
                Outcome::Lease(Some(_)) => {
                    driver.apply(&Step::Complete { worker: 0 }).await?;
                }
                _ => {
                    self.finished = true;
                    break;
                }
            }
        }
        Ok(())
    }
}

/// The step in which `ms` pass while healing: real time (`w`) when the walk
/// used real time, so that what expires on the server's clock expires in
/// its heal too; logical time alone (`t`) otherwise. Decided by the steps,
/// so a replay line heals as its walk did.
fn time_step(driver: &Driver, ms: u64) -> Step {
    if Schedule(driver.applied().to_vec()).real_time_ms() > 0 {
        Step::Wait { ms }
    } else {
        Step::Tick { ms }
    }
}

/// Heals: time passes every deadline and ready-at, the reaper takes every
/// expired lease, and `w0` drains.
pub(super) async fn heal(driver: &mut Driver) -> Result<Drain, ExploreError> {
    if !driver.subject().refines() {
        return heal_blind(driver).await;
    }
    let latest = driver
        .model()
        .jobs()
        .filter(|(_, job)| matches!(job.state(), JobState::Pending | JobState::Active))
        .filter_map(|(_, job)| job.score_ms())
        .max();
    if let Some(latest) = latest {
        if latest > driver.now_ms() {
            let ms = latest - driver.now_ms();
            driver.apply(&time_step(driver, ms)).await?;
        }
    }
    // Time has passed every deadline, so each reap takes at least one of
    // the leases out.
    let count = |driver: &Driver, state: JobState| {
        driver
            .model()
            .jobs()
            .filter(|(_, job)| job.state() == state)
            .count()
    };
    for _ in 0..count(driver, JobState::Active) {
        if count(driver, JobState::Active) == 0 {
            break;
        }
        driver.apply(&Step::Reap).await?;
    }
    // The stated bound: one lease per unfinished job, plus the empty one.
    let mut drain = Drain {
        leases: 0,
        bound: count(driver, JobState::Pending) + count(driver, JobState::Active) + 1,
        finished: false,
    };
    drain.run(driver).await?;
    Ok(drain)
}

/// Heals a queue the model does not describe: time passes one lease length
/// and one ms, and past the latest deadline or ready-at the queue reported
/// (so that a queue whose leases expire only at `now > deadline_ms` has
/// expired them too), the reaper runs until it finds nothing, and `w0` drains as many
/// jobs as the adapter reads back unfinished.
async fn heal_blind(driver: &mut Driver) -> Result<Drain, ExploreError> {
    stop_workers(driver).await?;
    past_every_deadline(driver).await?;
    let unfinished = |jobs: &BTreeMap<String, String>| {
        jobs.values()
            .filter(|s| s.as_str() != "done" && s.as_str() != "dead")
            .count()
    };
    let setup = |source| ExploreError::Setup {
        during: "reading the queue while healing",
        source,
    };
    // Each read is recorded (`Driver::read`): structure judges every one,
    // not only the final read (a job in two indexes mid-heal is a problem
    // there).
    let jobs = driver.read().await.map_err(setup)?.jobs;
    // A queue without a reaper only has the drain. The reaper runs while
    // the queue reads a job active and a pass took something, or until
    // EMPTY_REAPS passes in a row took nothing: a reaper may need more than
    // one pass to take an expired lease (BullMQ's stalled check marks a job
    // on one pass and moves it on the next), and stopping at the first
    // empty pass would leave a job the queue would have recovered, and
    // report it lost.
    const EMPTY_REAPS: usize = 3;
    let reaps = if driver.capabilities().supports(Operation::Reap) {
        2 * jobs.len() + EMPTY_REAPS
    } else {
        0
    };
    let mut drain = Drain {
        leases: 0,
        bound: 0,
        finished: false,
    };
    // On logical time a round that leaves a job unfinished is followed by
    // another, a second and a ms later: a queue whose recovery is paced in
    // whole seconds (Sidekiq's cleanup lock lives a second) recovers on its
    // own time, which costs nothing here. On the server clock, one round.
    let rounds = if driver.on_server_clock() {
        1
    } else {
        HEAL_ROUNDS
    };
    for round in 0..rounds {
        if round > 0 {
            driver.apply(&Step::Tick { ms: 1_001 }).await?;
        }
        reap_until_settled(driver, reaps, EMPTY_REAPS).await?;
        let left = unfinished(&driver.read().await.map_err(setup)?.jobs);
        drain.bound += left + 1;
        drain.finished = false;
        drain.run(driver).await?;
        if unfinished(&driver.read().await.map_err(setup)?.jobs) == 0 {
            break;
        }
    }
    Ok(drain)
}

/// The workers stop, as if crashed, before a blind heal; then the queue's
/// clients open their connections afresh if a step restarted the server.
async fn stop_workers(driver: &mut Driver) -> Result<(), ExploreError> {
    // The workers stop here, as if crashed: each one still holding a lease
    // crashes as the walk's own crash step does (recorded the same way,
    // and a queue that listed `crash` is told). A library that keeps a
    // worker alive by itself (Sidekiq's heartbeat per process) would
    // otherwise hold that job through the heal, and the drain would find
    // it held by a worker nobody runs.
    let holding: Vec<u8> = (0..driver.workers().len())
        .filter(|w| driver.workers()[*w].held.is_some())
        .filter_map(|w| u8::try_from(w).ok())
        .collect();
    for worker in holding {
        driver.apply(&Step::Crash { worker }).await?;
    }
    // Only now, with nothing held: a client started again holds nothing.
    let subject = driver.subject().clone();
    (super::super::server_steps::reopen_after_restart(&subject).await).map_err(|source| {
        ExploreError::Setup {
            during: "opening the queue's connections again after the server restarted",
            source,
        }
    })
}

/// Time passes one lease length and one ms, and past the latest deadline
/// or ready-at the queue reported.
async fn past_every_deadline(driver: &mut Driver) -> Result<(), ExploreError> {
    // Strictly past every deadline and ready-at the queue reported: a
    // queue may count a lease expired only once `now > deadline_ms`.
    let lease_ms = driver.config().lease_ms;
    // (On the server clock the deadlines are server ms: the wait below.)
    let ahead_ms = match driver.on_server_clock() {
        false => driver.latest_deadline_ms().saturating_sub(driver.now_ms()),
        true => 0,
    };
    let ms = lease_ms.max(ahead_ms) + 1;
    driver.apply(&time_step(driver, ms)).await?;
    // On the server clock the queue's own deadlines may lie further ahead
    // than the lease it was asked for.
    driver.wait_past_deadlines().await?;
    Ok(())
}

/// How many rounds of reaping and draining the heal runs on logical time
/// while a job is left unfinished ([`heal_blind`]).
const HEAL_ROUNDS: usize = 3;

/// The reaper runs (at most `reaps` passes) while the queue reads a job
/// active and a pass took something, or until `empty` passes in a row
/// took nothing.
async fn reap_until_settled(
    driver: &mut Driver,
    reaps: usize,
    empty: usize,
) -> Result<(), ExploreError> {
    let setup = |source| ExploreError::Setup {
        during: "reading the queue while healing",
        source,
    };
    let active = |jobs: &BTreeMap<String, String>| jobs.values().any(|s| s == "active");
    let mut empty_in_a_row = 0;
    for _ in 0..reaps {
        match driver.apply(&Step::Reap).await? {
            Outcome::Reap(r) if !r.is_empty() => empty_in_a_row = 0,
            _ => empty_in_a_row += 1,
        }
        if empty_in_a_row >= empty || !active(&driver.read().await.map_err(setup)?.jobs) {
            break;
        }
    }
    Ok(())
}

pub(super) fn liveness(events: &[Event], drain: Option<&Drain>) -> Report {
    let mut report = Report {
        invariant: "liveness",
        verdict: Verdict::Valid,
        counts: BTreeMap::new(),
        violations: Vec::new(),
    };
    let (Some(drain), Some(states)) = (drain, check::final_read(events)) else {
        report.verdict = Verdict::Unknown;
        report.violations.push(check::Violation::new(
            "liveness",
            None,
            &[],
            "the run did not heal and drain: liveness not judged".into(),
        ));
        return report;
    };
    report.counts.insert("drain_leases", drain.leases as u64);
    report.counts.insert("bound", drain.bound as u64);
    if !drain.finished {
        report.verdict = Verdict::Invalid;
        report.violations.push(check::Violation::new(
            "liveness",
            None,
            &[],
            format!(
                "the drain still found ready jobs after {} leases (bound {})",
                drain.leases, drain.bound
            ),
        ));
    }
    let mut unfinished = 0;
    for (id, state) in &states {
        if state != "done" && state != "dead" {
            unfinished += 1;
            report.verdict = Verdict::Invalid;
            report.violations.push(check::Violation::new(
                "liveness",
                Some(id),
                &[],
                format!("{id}: {state} after healing and draining"),
            ));
        }
    }
    report.counts.insert("unfinished", unfinished);
    report
}
