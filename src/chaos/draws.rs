//! The workload's draws: what the producers admit and what the handlers do,
//! drawn from the seed alone (`ChaCha8Rng`), like the fault schedule and
//! the payloads. The same seed and the same `--jobs` and `--lease-ms` give
//! the same draws, so a run's reproduce line reproduces them.
//!
//! Four draws per run, each with a value that turns it off, so that some
//! runs keep the plain workload:
//!
//! - **low `max_attempts`**: a share of the jobs (none, a quarter or half)
//!   is admitted with 1, 2 or 3 attempts, the rest with [`MAX_ATTEMPTS`];
//!   which jobs, and how many attempts each, is drawn per job. A queue
//!   that dead-letters late, or delivers a dead job again, is then in
//!   reach of bounded-retries. Never all of them: a job with one attempt
//!   dies at the reap after a worker fault instead of meeting a new
//!   holder, and a stale ack accepted over a new holder is what those
//!   faults are there to show.
//! - **failing handlers**: a share of the deliveries (none, 10%, 25% or
//!   50%) fails: the handler works, then sends `fail` instead of applying
//!   its effect and acking (never a delivery a worker fault is armed on).
//!   Which deliveries fail is a function of the seed, the job and the
//!   delivery's number (the job's first, second, ... lease the run saw),
//!   not of the interleaving.
//! - **the retry delay** every `fail` asks for: 0 on half the runs, else
//!   up to one lease.
//! - **duplicate enqueues**: after a share of the enqueues (none, 10% or
//!   25%) the producer enqueues an id again, with another payload: an id
//!   it last saw pending, active or finished (the class is drawn; which id
//!   is in the class at that moment is the run's timing). Only on a queue
//!   that refuses a duplicate id (`dedup`).
//!
//! # Design notes
//!
//! `MAX_ATTEMPTS` is 10. The draws (`Draws`) are shown in the run's header
//! and in its report with what the run did with them (`Workload`). The ids a
//! duplicate enqueue aims at are kept in the run's `Pools`
//! (`runner/context.rs`). Failing handlers are drawn only on a queue that
//! lists `fail`.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// The attempts of a job the low-attempts draw did not pick.
pub const MAX_ATTEMPTS: u64 = 10;

/// The run-wide draws of one seed (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Draws {
    /// Per mille of the jobs admitted with 1–3 attempts.
    pub low_attempts_per_mille: u32,
    /// How many jobs got each `max_attempts`: `{"1": 12, "10": 150, ...}`.
    pub max_attempts: BTreeMap<u64, u64>,
    /// Per mille of deliveries whose handler fails (sends `fail`).
    pub fail_per_mille: u32,
    /// The `retry_delay_ms` of every `fail` (ms).
    pub retry_delay_ms: u64,
    /// Per mille of enqueues followed by a duplicate enqueue.
    pub duplicate_per_mille: u32,
}

/// One job of the run: its id, payload and `max_attempts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobDraw {
    /// `JOB-<seed>-<nnnn>`.
    pub id: String,
    /// `payload-<u32>`.
    pub payload: String,
    /// 1–3 for the jobs the low-attempts draw picked, else [`MAX_ATTEMPTS`].
    pub max_attempts: u64,
}

/// One duplicate enqueue a producer draws: the class of id it aims at, a
/// number that picks the id in the class, and its payload (never a job's
/// own: a duplicate that overwrote the payload would show).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateDraw {
    /// The class aimed at (the next one that has an id when it has none).
    pub class: Seen,
    /// Picks the id: its index in the class, modulo the class's size.
    pub pick: u64,
    /// `again-<u32>`.
    pub payload: String,
}

/// The class of an id a duplicate enqueue aims at, as the run last saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Seen {
    /// Admitted (or failed, or reaped to pending), not leased since.
    Pending,
    /// Leased, not settled or reaped since.
    Active,
    /// Settled, or dead.
    Finished,
}

impl Seen {
    /// Every class, in the order a drawn class falls back through.
    pub const ALL: [Seen; 3] = [Seen::Pending, Seen::Active, Seen::Finished];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Seen::Pending => "pending",
            Seen::Active => "active",
            Seen::Finished => "finished",
        }
    }
}

impl Draws {
    /// The draws of `seed` for a run of `jobs` jobs with leases of
    /// `lease_ms`.
    pub(crate) fn generate(seed: u64, jobs: usize, lease_ms: u64) -> Draws {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd2a4_5eed_0b5e);
        let low_attempts_per_mille = [0, 250, 500][rng.random_range(0..3)];
        let fail_per_mille = [0, 100, 250, 500][rng.random_range(0..4)];
        let retry_delay_ms = if rng.random_bool(0.5) {
            0
        } else {
            rng.random_range(1..=lease_ms.max(1))
        };
        let duplicate_per_mille = [0, 100, 250][rng.random_range(0..3)];
        let mut draws = Draws {
            low_attempts_per_mille,
            max_attempts: BTreeMap::new(),
            fail_per_mille,
            retry_delay_ms,
            duplicate_per_mille,
        };
        for job in draws.jobs(seed, jobs) {
            *draws.max_attempts.entry(job.max_attempts).or_default() += 1;
        }
        draws
    }

    /// The run's jobs, in order: ids and payloads as before the draws
    /// (the payload fixes the handler's work time), and each job's
    /// `max_attempts`.
    pub fn jobs(&self, seed: u64, jobs: usize) -> Vec<JobDraw> {
        let mut payloads = ChaCha8Rng::seed_from_u64(seed ^ 0xc4a0_5eed);
        let mut attempts = ChaCha8Rng::seed_from_u64(seed ^ 0xa77e_3b75);
        (0..jobs)
            .map(|i| {
                let low = attempts.random_range(0..1000) < self.low_attempts_per_mille;
                let n = attempts.random_range(1..=3);
                JobDraw {
                    id: format!("JOB-{seed}-{i:04}"),
                    payload: format!("payload-{}", payloads.random::<u32>()),
                    max_attempts: if low { n } else { MAX_ATTEMPTS },
                }
            })
            .collect()
    }

    /// Producer `producer`'s duplicate draws, one per enqueue of its
    /// `count` jobs: `None`, or the duplicate it sends after that enqueue
    /// ([`DuplicateDraw`]).
    pub fn duplicates(
        &self,
        seed: u64,
        producer: usize,
        count: usize,
    ) -> Vec<Option<DuplicateDraw>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd0b1_e5ee_d000 ^ producer as u64);
        (0..count)
            .map(|_| {
                let again = rng.random_range(0..1000) < self.duplicate_per_mille;
                let draw = DuplicateDraw {
                    class: Seen::ALL[rng.random_range(0..3)],
                    pick: rng.random(),
                    payload: format!("again-{}", rng.random::<u32>()),
                };
                again.then_some(draw)
            })
            .collect()
    }

    /// Whether the handler of delivery `delivery` (1 for the job's first
    /// lease the run saw) of job `id` fails: a function of the seed, the
    /// job and the number alone.
    pub fn fails(&self, seed: u64, id: &str, delivery: u64) -> bool {
        if self.fail_per_mille == 0 {
            return false;
        }
        let bytes = seed
            .to_le_bytes()
            .into_iter()
            .chain(id.bytes())
            .chain(delivery.to_le_bytes());
        let hash = bytes.fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        // FNV's low bits are weak on short inputs: fold the high half in.
        (hash ^ (hash >> 32)) % 1000 < u64::from(self.fail_per_mille)
    }

    /// The draws in words, for the run's header.
    pub fn describe(&self) -> String {
        let attempts: Vec<String> = self
            .max_attempts
            .iter()
            .map(|(m, n)| format!("{m}:{n}"))
            .collect();
        let delay = if self.retry_delay_ms == 0 {
            "no retry delay".to_owned()
        } else {
            format!("retry delay {} ms", self.retry_delay_ms)
        };
        format!(
            "max_attempts (attempts:jobs) {}; handlers fail {}% of deliveries, {delay}; a duplicate enqueue after {}% of enqueues",
            attempts.join(" "),
            f64::from(self.fail_per_mille) / 10.0,
            f64::from(self.duplicate_per_mille) / 10.0,
        )
    }
}

/// What the run did with its draws: the fails sent and how the queue
/// answered, the duplicate enqueues sent by the class of their id and how
/// the queue answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Fails sent, by answer: `requeued`, `dead`, `fenced`, `missing`, or
    /// `error` (no answer, or an error answer).
    pub fails: BTreeMap<String, u64>,
    /// Duplicate enqueues sent, by the class of the id as the run last saw
    /// it (`pending`, `active`, `finished`).
    pub duplicates: BTreeMap<Seen, u64>,
    /// Duplicate enqueues by answer: `duplicate`, `enqueued` (admitted
    /// again: admission judges it) or `error`.
    pub duplicate_answers: BTreeMap<String, u64>,
}

impl Workload {
    /// The counts in words, for the run's report.
    pub fn describe(&self) -> String {
        let words = |m: &BTreeMap<String, u64>| -> String {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let fails: u64 = self.fails.values().sum();
        let dups: u64 = self.duplicates.values().sum();
        let classes: Vec<String> = self
            .duplicates
            .iter()
            .map(|(k, n)| format!("{} {n}", k.name()))
            .collect();
        let mut out = format!("{fails} fails");
        if fails > 0 {
            out.push_str(&format!(" ({})", words(&self.fails)));
        }
        out.push_str(&format!("; {dups} duplicate enqueues"));
        if dups > 0 {
            out.push_str(&format!(
                " of ids {} ({})",
                classes.join(", "),
                words(&self.duplicate_answers)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_workload_and_the_draws_vary_over_seeds() {
        let a = Draws::generate(7, 200, 500);
        assert_eq!(a, Draws::generate(7, 200, 500));
        assert_eq!(a.jobs(7, 200), Draws::generate(7, 200, 500).jobs(7, 200));
        assert_eq!(a.max_attempts.values().sum::<u64>(), 200);
        let all: Vec<Draws> = (0..64).map(|s| Draws::generate(s, 200, 500)).collect();
        // Every setting of each draw occurs over 64 seeds, off included.
        for share in [0, 250, 500] {
            assert!(all.iter().any(|d| d.low_attempts_per_mille == share));
        }
        for share in [0, 100, 250, 500] {
            assert!(all.iter().any(|d| d.fail_per_mille == share));
        }
        for share in [0, 100, 250] {
            assert!(all.iter().any(|d| d.duplicate_per_mille == share));
        }
        assert!(all.iter().any(|d| d.retry_delay_ms == 0));
        assert!(all.iter().all(|d| d.retry_delay_ms <= 500));
        assert!(all
            .iter()
            .any(|d| d.max_attempts.keys().any(|m| *m == 1) && d.fail_per_mille >= 250));
    }

    #[test]
    fn payloads_and_ids_are_those_of_the_seed_before_the_draws() {
        // The payload fixes the handler's work time: the draws must not
        // move it.
        let jobs = Draws::generate(3, 5, 500).jobs(3, 5);
        let mut rng = ChaCha8Rng::seed_from_u64(3 ^ 0xc4a0_5eed);
        for (i, job) in jobs.iter().enumerate() {
            assert_eq!(job.id, format!("JOB-3-{i:04}"));
            assert_eq!(job.payload, format!("payload-{}", rng.random::<u32>()));
        }
    }

    #[test]
    fn a_drawn_share_of_deliveries_fails_and_the_same_delivery_always_does() {
        let d = Draws {
            fail_per_mille: 250,
            ..Draws::generate(1, 0, 500)
        };
        let failed = (0..4000)
            .filter(|i| d.fails(9, &format!("JOB-9-{i:04}"), 1))
            .count();
        assert!((800..1200).contains(&failed), "{failed} of 4000");
        assert_eq!(d.fails(9, "JOB-9-0001", 2), d.fails(9, "JOB-9-0001", 2));
        let off = Draws {
            fail_per_mille: 0,
            ..d
        };
        assert!((0..100).all(|i| !off.fails(9, &format!("JOB-{i}"), 1)));
    }
}
