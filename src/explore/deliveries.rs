//! The seed's replay figure: one job delivered N times to one consumer,
//! deliveries against effects. Each of the first N-1 deliveries is leased,
//! its effect applied whole, and then the worker crashes in the ack gap
//! (after the effect, before the ack); time passes the deadline and the
//! reaper hands the job back. The last delivery acks. An idempotent
//! consumer turns N deliveries into one effect; `naive` into N.
//!
//! The schedule runs through the [`Driver`] on the reference queue, so the
//! model and Valkey are compared after every step as in any walk.

use serde::Serialize;

use super::driver::{job_id, Driver, DriverConfig, ExploreError, Outcome, Subject};
use super::op::{Schedule, Step};
use crate::history::Recorder;
use crate::queue::JobState;

/// The lease length of the replay (ms, logical time).
pub const LEASE_MS: u64 = 100;

/// The largest `times` [`deliveries`] takes.
pub const TIMES_MAX: u64 = 10_000;

/// What [`deliveries`] found for one consumer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeliveriesReport {
    /// The consumer.
    pub consumer: String,
    /// Whether it promises one effect per done job.
    pub effect_once: bool,
    /// How many times the job was delivered (leases granted).
    pub deliveries: u64,
    /// How many times its effect landed.
    pub effects: u64,
    /// The job's state at the end (`done` when the last ack landed).
    pub state: String,
    /// The schedule run, in the explorers' notation.
    pub schedule: String,
}

/// The schedule of [`deliveries`]: enqueue, then `times - 1` rounds of
/// lease, effect (every part), crash, time past the deadline, reap; then a
/// last lease and complete.
pub fn schedule(times: u64, parts: usize) -> Schedule {
    let w = 0;
    let mut steps = vec![Step::Enqueue { job: 0 }];
    for _ in 1..times {
        steps.push(Step::Lease { worker: w });
        steps.extend((0..parts).map(|_| Step::Effect { worker: w }));
        steps.push(Step::Crash { worker: w });
        steps.push(Step::Tick { ms: LEASE_MS });
        steps.push(Step::Reap);
    }
    steps.push(Step::Lease { worker: w });
    steps.push(Step::Complete { worker: w });
    Schedule(steps)
}

/// Delivers one job `times` times to `subject`'s consumer (see the module
/// documentation) and counts deliveries and effects. `subject`'s queue must
/// be the reference queue; `times` is 1 to [`TIMES_MAX`].
pub async fn deliveries(subject: &Subject, times: u64) -> Result<DeliveriesReport, ExploreError> {
    if !(1..=TIMES_MAX).contains(&times) {
        return Err(ExploreError::Limit {
            what: format!("deliveries: {times} times requested; 1 to {TIMES_MAX} available"),
        });
    }
    let config = DriverConfig {
        workers: 1,
        lease_ms: LEASE_MS,
        // Every delivery but the last is reaped back to pending, never to
        // dead.
        max_attempts: times,
        reap_limit: 1,
    };
    let schedule = schedule(times, subject.consumer.parts());
    let mut driver = Driver::start_on(subject, config, Recorder::in_memory())
        .await
        .map_err(|source| ExploreError::Setup {
            during: "clearing the queue",
            source,
        })?;
    let mut delivered = 0;
    for step in schedule.steps() {
        if let Outcome::Lease(Some(_)) = driver.apply(step).await? {
            delivered += 1;
        }
    }
    let id = job_id(0);
    let state = driver
        .model()
        .snapshot()
        .rows
        .get(&id)
        .and_then(|r| r.state)
        .map_or("?".into(), |s: JobState| s.to_string());
    let mut conn = subject.adapter.connection();
    let effects = subject
        .consumer
        .effects(&mut conn, subject.adapter.keys(), &id)
        .await
        .map_err(|source| ExploreError::Setup {
            during: "counting the effects",
            source,
        })?;
    Ok(DeliveriesReport {
        consumer: subject.consumer.name().to_owned(),
        effect_once: subject.consumer.promises_effect_once(),
        deliveries: delivered,
        effects,
        state,
        schedule: schedule.to_string(),
    })
}
