//! The fault schedule: which fault fires when, and at whom, drawn from the
//! seed alone (`ChaCha8Rng`), before the run starts. The same seed and the
//! same settings give the same schedule, whatever the interleaving of the
//! run that follows; what a fault then hits (which job a dropped reply
//! belonged to) depends on timing and is recorded, not predicted.
//!
//! Every enabled kind fires at least once, early enough in the faults
//! phase to find work to disturb; more draws follow, one per two seconds of
//! the phase. Server faults never overlap: each starts after the previous
//! one has healed. A server kill is never drawn in the first fifth of the
//! phase, so acknowledged enqueues always precede it.
//!
//! # Design notes
//!
//! Every enabled kind fires once in the first 60% of the faults phase; the
//! later draws come at one per two seconds. No kill (`FaultKind::kills`:
//! server-kill, failover, lag-failover, primary-partition, power-loss) is
//! drawn in the first fifth.

use std::collections::BTreeSet;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

pub use super::fault::{FaultKind, FaultSet, FaultSpec, Shape, Target, Topology};

/// What the schedule is drawn from (besides the seed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ScheduleSettings {
    /// Length of the faults phase (ms).
    pub duration_ms: u64,
    /// Number of workers (targets of worker and network faults).
    pub workers: usize,
    /// Lease length (ms): fault windows are sized to outlast it.
    pub lease_ms: u64,
    /// Enabled kinds.
    pub faults: FaultSet,
}

/// One fault of the schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// When it is injected, from the start of the faults phase (ms).
    pub at_ms: u64,
    /// What.
    pub kind: FaultKind,
    /// The worker it hits (`w3`); `None` for server faults.
    pub target: Option<String>,
    /// How long it lasts before its heal (ms): a pause, a partition, a
    /// server's downtime, a delay; 0 for instant faults.
    pub duration_ms: u64,
}

/// The whole schedule, in injection order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSchedule {
    /// The faults, by `at_ms`.
    pub faults: Vec<Fault>,
}

impl FaultSchedule {
    /// Draws the schedule of `seed` under `settings`.
    pub(crate) fn generate(seed: u64, settings: &ScheduleSettings) -> FaultSchedule {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa17_5c4e_d01e);
        let d = settings.duration_ms.max(1);
        let lease = settings.lease_ms;
        let workers = settings.workers.max(1);
        let kinds: Vec<FaultKind> = settings.faults.0.iter().copied().collect();
        let mut faults = Vec::new();
        let draw =
            |rng: &mut ChaCha8Rng, kind: FaultKind, from: u64, to: u64, who: Option<usize>| {
                let from = if kind.kills() { from.max(d / 5) } else { from };
                let at_ms = rng.random_range(from..to.max(from + 1));
                let target = (kind.target() != Target::Server)
                    .then(|| format!("w{}", who.unwrap_or_else(|| rng.random_range(0..workers))));
                let duration_ms = kind.draw_window_ms(rng, lease);
                Fault {
                    at_ms,
                    kind,
                    target,
                    duration_ms,
                }
            };
        // Every enabled kind once, in the first 60% of the phase. The
        // first worker faults go to different workers, round robin from a
        // drawn one: a worker fires its armed faults one delivery at a
        // time, and one stalled worker must not hold back the rest.
        let mut next_worker = rng.random_range(0..workers);
        for &kind in &kinds {
            let who = (kind.target() == Target::Worker).then(|| {
                next_worker = (next_worker + 1) % workers;
                next_worker
            });
            faults.push(draw(&mut rng, kind, d / 10, d * 6 / 10, who));
        }
        // Then more, one per two seconds, anywhere but the last 10%.
        if !kinds.is_empty() {
            for _ in 0..d / 2000 {
                let kind = kinds[rng.random_range(0..kinds.len())];
                faults.push(draw(&mut rng, kind, d / 10, d * 9 / 10, None));
            }
        }
        faults.sort_by_key(|f| (f.at_ms, f.kind));
        // Server faults in sequence: each waits for the previous to heal.
        let mut free_at = 0;
        for f in faults
            .iter_mut()
            .filter(|f| f.kind.target() == Target::Server)
        {
            f.at_ms = f.at_ms.max(free_at);
            free_at = f.at_ms + f.duration_ms + 200;
        }
        faults.sort_by_key(|f| (f.at_ms, f.kind));
        FaultSchedule { faults }
    }

    /// The kinds the schedule contains.
    pub fn kinds(&self) -> BTreeSet<FaultKind> {
        self.faults.iter().map(|f| f.kind).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(faults: &str) -> ScheduleSettings {
        ScheduleSettings {
            duration_ms: 10_000,
            workers: 4,
            lease_ms: 500,
            faults: faults.parse().unwrap(),
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_schedule_and_another_seed_another() {
        let a = FaultSchedule::generate(7, &settings("all"));
        assert_eq!(a, FaultSchedule::generate(7, &settings("all")));
        assert_ne!(a, FaultSchedule::generate(8, &settings("all")));
    }

    #[test]
    fn every_enabled_kind_is_scheduled_and_no_other() {
        let s = FaultSchedule::generate(3, &settings("worker,script-flush"));
        let mut want: BTreeSet<FaultKind> = "worker".parse::<FaultSet>().unwrap().0;
        want.insert(FaultKind::ScriptFlush);
        assert_eq!(s.kinds(), want);
        assert_eq!(
            FaultSchedule::generate(3, &settings("all")).kinds(),
            FaultSet::all().0
        );
    }

    #[test]
    fn server_faults_never_overlap_and_kills_follow_the_first_fifth() {
        for seed in 0..50 {
            let s = FaultSchedule::generate(seed, &settings("server"));
            let server: Vec<&Fault> = s.faults.iter().collect();
            for pair in server.windows(2) {
                assert!(
                    pair[1].at_ms >= pair[0].at_ms + pair[0].duration_ms,
                    "{s:?}"
                );
            }
            for f in &s.faults {
                if f.kind == FaultKind::ServerKill {
                    assert!(f.at_ms >= 2_000, "{f:?}");
                }
            }
        }
    }
}
