//! The harness's own speed: how fast the pure model steps and how fast the
//! checkers judge a history. Both are driven by one seed (ChaCha8), so a
//! figure is reproducible step for step; the criterion benches in
//! `benches/` use the same generators.
//!
//! # Design notes
//!
//! The generators make model steps and a valid history.

use crate::adapter::Read;
use crate::history::record::{
    applied_value, enqueue_value, enqueued_value, lease_value, read_value, reaped_value,
    settled_value,
};
use crate::history::{Event, Process, Recorder, F};
use crate::model::Model;
use crate::queue::{Lease, Reaped};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Drives a [`Model`] with `steps` operations drawn from `seed`: enqueue
/// (now and then a duplicate), lease, complete and fail (now and then with
/// a stale token), extend, reap, and time passing. Returns the model, for
/// its structure check, and the number of operations that changed it.
pub fn model_steps(seed: u64, steps: u64) -> (Model, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model = Model::new();
    let mut now: u64 = 1_000;
    let mut next_id: u64 = 0;
    let mut held: Vec<Lease> = Vec::new();
    let mut changed = 0;
    for _ in 0..steps {
        let roll = rng.random_range(0..100u32);
        let ok = match roll {
            0..=29 => {
                let id = if next_id > 0 && rng.random_range(0..20u32) == 0 {
                    rng.random_range(0..next_id)
                } else {
                    next_id += 1;
                    next_id - 1
                };
                let max_attempts = rng.random_range(1..4);
                let delay_ms = rng.random_range(0..3);
                model
                    .enqueue(&format!("JOB-{id}"), b"p", max_attempts, delay_ms, now)
                    .is_ok_and(|e| e == crate::queue::Enqueued::Enqueued)
            }
            30..=59 => match model.lease("w", rng.random_range(1..20), now) {
                Ok(Some(lease)) => {
                    held.push(lease);
                    true
                }
                _ => false,
            },
            60..=84 if !held.is_empty() => {
                let lease = held.swap_remove(rng.random_range(0..held.len()));
                let stale = rng.random_range(0..10u32) == 0;
                let token = if stale { lease.token + 1 } else { lease.token };
                if rng.random_range(0..4u32) == 0 {
                    model.fail(&lease.id, token, 2, now).is_ok()
                } else {
                    model.complete(&lease.id, token).is_ok()
                }
            }
            85..=89 if !held.is_empty() => {
                let lease = &held[rng.random_range(0..held.len())];
                model.extend(&lease.id, lease.token, 10, now).is_ok()
            }
            90..=94 => model.reap(100, now).is_ok_and(|r| !r.is_empty()),
            _ => {
                now += rng.random_range(1..5);
                true
            }
        };
        changed += u64::from(ok);
    }
    (model, changed)
}

/// A history of `jobs` jobs as a campaign would record it, generated on the
/// model: a producer enqueues every job (and every tenth id a second time),
/// workers lease, apply and complete them; one worker in twenty-five crashes
/// holding its lease, the reaper takes the job back and its late ack is
/// fenced; a final read closes the history. Valid under every checker.
pub fn generated_history(seed: u64, jobs: u64) -> Vec<Event> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let rec = Recorder::in_memory();
    let producer = Process::new(&rec, "producer");
    let mut model = Model::new();
    let now = 1_000;
    for i in 0..jobs {
        let id = format!("JOB-{i:08}");
        let payload = format!("p{i}");
        let dup = i % 10 == 9;
        for _ in 0..(1 + u64::from(dup)) {
            let op = producer.invoke_with(F::Enqueue, Some(&id), enqueue_value(&payload, None));
            let e = model
                .enqueue(&id, payload.as_bytes(), 3, 0, now)
                .expect("valid enqueue");
            rec.ok(op, None, None, enqueued_value(&e));
        }
    }
    let mut t = now;
    loop {
        let worker = format!("w{}", rng.random_range(0..8u32));
        let op = rec.invoke(&worker, F::Lease, None, None);
        let lease = model.lease(&worker, 100, t).expect("valid lease");
        let (job, token, value) = lease_value(&lease);
        rec.ok(op, job.as_deref(), token, value);
        let Some(lease) = lease else { break };
        if rng.random_range(0..25u32) == 0 {
            // A crash holding the lease, the reaper, a late fenced ack.
            Process::new(&rec, &worker).crash(&lease.id, lease.token, serde_json::json!({}));
            t = lease.deadline_ms;
            let op = rec.invoke("reaper", F::Reap, None, None);
            let reaped: Vec<Reaped> = model.reap(100, t).expect("valid reap");
            rec.ok(op, None, None, reaped_value(&reaped, None, None));
            let fresh = model
                .lease("w-retry", 100, t)
                .expect("valid lease")
                .expect("the reaped job is ready");
            let op = rec.invoke("w-retry", F::Lease, None, None);
            let (job, token, value) = lease_value(&Some(fresh.clone()));
            rec.ok(op, job.as_deref(), token, value);
            let op = rec.invoke(&worker, F::Complete, Some(&lease.id), Some(lease.token));
            let s = model.complete(&lease.id, lease.token).expect("valid");
            rec.ok(op, None, None, settled_value(&s));
            settle(&rec, &mut model, "w-retry", &fresh);
        } else {
            settle(&rec, &mut model, &worker, &lease);
        }
    }
    let read = Read {
        jobs: model
            .jobs()
            .map(|(id, job)| (id.to_owned(), job.state().to_string()))
            .collect(),
        problems: Vec::new(),
        ..Read::default()
    };
    Process::new(&rec, "checker").done(F::Read, None, None, read_value(&read, None));
    rec.events()
}

/// The effect, then the ack, of one lease.
fn settle(rec: &Recorder, model: &mut Model, worker: &str, lease: &Lease) {
    let op = rec.invoke(worker, F::Effect, Some(&lease.id), Some(lease.token));
    rec.ok(op, None, None, applied_value(None, None));
    let op = rec.invoke(worker, F::Complete, Some(&lease.id), Some(lease.token));
    let s = model.complete(&lease.id, lease.token).expect("valid");
    rec.ok(op, None, None, settled_value(&s));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{check_all, overall, Verdict};

    #[test]
    fn the_generated_history_is_valid_under_every_checker() {
        let history = generated_history(3, 300);
        let reports = check_all(&history);
        assert_eq!(overall(&reports), Verdict::Valid, "{reports:#?}");
        assert!(history.len() > 300 * 6, "{}", history.len());
    }

    #[test]
    fn model_steps_keep_the_models_structure_and_are_reproducible() {
        let (a, changed_a) = model_steps(5, 5_000);
        let (b, changed_b) = model_steps(5, 5_000);
        a.check_structure().unwrap();
        assert_eq!((a, changed_a), (b, changed_b));
        assert!(changed_a > 2_000, "{changed_a}");
    }
}
