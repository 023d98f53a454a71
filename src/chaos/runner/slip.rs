//! Whether the run kept its schedule: how late each fault's inject and heal
//! ran against the time the seed drew for it, how late the workers woke
//! from their sleeps (a worker ready to run that the machine did not run:
//! starved), and how long the run's own restarts took. A wall-clock run's
//! power depends on the machine's load: the same seed on a loaded machine
//! can miss the interleaving a quiet one finds, so a `valid` from a run
//! whose schedule slipped is marked weaker ([`ScheduleSlip::note`]).
//!
//! # Design notes
//!
//! The threshold is a tenth of a lease, at least 20 ms ([`threshold_ms`]):
//! the schedule draws its windows in parts of a lease (a kill of 50 ms up
//! to a lease, a stall past a deadline), so a fault a tenth of a lease off
//! lands in another part of the leases it was drawn against; a quiet
//! machine's timer jitter is a few ms, ten times less. The run slipped
//! when one fault ran later than that, or when more than
//! [`STARVED_SHARE_MAX`] of the workers' wake-ups did (a heartbeat that
//! late several times is a lease that may lapse where the seed did not
//! put a fault).

use super::*;

/// The share of workers' wake-ups later than the threshold above which
/// the workers count as starved (1 in 100).
pub const STARVED_SHARE_MAX: f64 = 0.01;

/// How late a fault or a wake-up may run before it counts as late (ms):
/// a tenth of the lease, at least 20 ms.
pub fn threshold_ms(lease_ms: u64) -> u64 {
    (lease_ms / 10).max(20)
}

/// What a run measured of its own schedule.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScheduleSlip {
    /// A fault or a wake-up later than this counts as late (ms).
    pub threshold_ms: u64,
    /// The nemesis's scheduled actions (injects, and heals due in the
    /// faults phase) that ran.
    pub fault_actions: u64,
    /// Of them, the ones later than the threshold.
    pub faults_late: u64,
    /// The latest of them (ms after its drawn time).
    pub fault_late_ms_max: u64,
    /// The latest one, in words (`server-kill inject drawn at 2093 ms ran
    /// 5451 ms late`).
    pub latest: Option<String>,
    /// The workers' and heartbeats' sleeps that ended.
    pub wakeups: u64,
    /// Of them, the ones that woke later than the threshold.
    pub wakeups_late: u64,
    /// The latest wake-up (ms past its time).
    pub wakeup_late_ms_max: u64,
    /// How long each of the run's own restarts (a kill's or a power
    /// loss's heal) took to answer again (ms), in order.
    pub restarts_ms: Vec<u64>,
    /// Whether the schedule slipped: a fault late, or more than
    /// [`STARVED_SHARE_MAX`] of the wake-ups late.
    pub slipped: bool,
}

impl ScheduleSlip {
    /// The share of the wake-ups that were late.
    pub fn starved_share(&self) -> f64 {
        self.wakeups_late as f64 / self.wakeups.max(1) as f64
    }

    /// The report's line: what was measured, slipped or not.
    pub fn describe(&self) -> String {
        let restarts = match self.restarts_ms.iter().max() {
            Some(max) => format!(
                "; {} restarts, the slowest {max} ms",
                self.restarts_ms.len()
            ),
            None => String::new(),
        };
        format!(
            "{} of {} fault actions late (up to {} ms), {} of {} worker wake-ups late (up to {} ms); late means past {} ms{restarts}",
            self.faults_late,
            self.fault_actions,
            self.fault_late_ms_max,
            self.wakeups_late,
            self.wakeups,
            self.wakeup_late_ms_max,
            self.threshold_ms,
        )
    }

    /// The verdict line's mark when the schedule slipped: what slipped,
    /// and that a `valid` here says less.
    pub fn note(&self) -> Option<String> {
        if !self.slipped {
            return None;
        }
        let mut what = Vec::new();
        if self.faults_late > 0 {
            what.push(format!(
                "{} of {} fault actions late by up to {} ms",
                self.faults_late, self.fault_actions, self.fault_late_ms_max
            ));
        }
        if self.starved_share() > STARVED_SHARE_MAX {
            what.push(format!(
                "workers starved ({:.0}% of wake-ups late by up to {} ms)",
                self.starved_share() * 100.0,
                self.wakeup_late_ms_max
            ));
        }
        Some(format!(
            "schedule slipped: {} (past {} ms); weaker: the run did not inject what the seed drew when it drew it",
            what.join(", "),
            self.threshold_ms
        ))
    }
}

/// What the run measures as it goes: the nemesis's lateness, the workers'
/// wake-ups.
#[derive(Debug, Default)]
pub(super) struct SlipLog {
    /// (kind, action, drawn at ms, late by ms) of each scheduled action.
    faults: Mutex<Vec<(FaultKind, &'static str, u64, u64)>>,
    wakeups: AtomicU64,
    wakeups_late: AtomicU64,
    wakeup_late_us_max: AtomicU64,
}

impl SlipLog {
    /// The nemesis ran `action` of `kind`, drawn at `at_ms`, `late` after
    /// its time.
    pub(super) fn fault(&self, kind: FaultKind, action: &'static str, at_ms: u64, late: Duration) {
        lock(&self.faults).push((kind, action, at_ms, late.as_millis() as u64));
    }

    /// Sleeps `d` and notes how late the wake-up was against `threshold`.
    pub(super) async fn nap(&self, d: Duration, threshold: Duration) {
        let due = Instant::now() + d;
        tokio::time::sleep_until(due.into()).await;
        let late = due.elapsed();
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        if late > threshold {
            self.wakeups_late.fetch_add(1, Ordering::Relaxed);
        }
        self.wakeup_late_us_max
            .fetch_max(late.as_micros() as u64, Ordering::Relaxed);
    }

    /// The account, with the restarts `events` recorded.
    pub(super) fn account(&self, lease_ms: u64, events: &[crate::history::Event]) -> ScheduleSlip {
        let threshold_ms = threshold_ms(lease_ms);
        let faults = lock(&self.faults).clone();
        let worst = faults.iter().max_by_key(|f| f.3);
        let wakeups = self.wakeups.load(Ordering::Relaxed);
        let wakeups_late = self.wakeups_late.load(Ordering::Relaxed);
        let faults_late = faults.iter().filter(|f| f.3 > threshold_ms).count() as u64;
        let restarts_ms = events
            .iter()
            .filter(|e| e.process == "nemesis")
            .filter_map(|e| e.fault())
            .filter(|f| f.action == Action::Heal)
            .filter_map(|f| f.detail.get("restart_ms").and_then(|v| v.as_u64()))
            .collect();
        let mut slip = ScheduleSlip {
            threshold_ms,
            fault_actions: faults.len() as u64,
            faults_late,
            fault_late_ms_max: worst.map_or(0, |f| f.3),
            latest: worst.map(|(kind, action, at, late)| {
                format!("{kind} {action} drawn at {at} ms ran {late} ms late")
            }),
            wakeups,
            wakeups_late,
            wakeup_late_ms_max: self.wakeup_late_us_max.load(Ordering::Relaxed) / 1000,
            restarts_ms,
            slipped: false,
        };
        slip.slipped = faults_late > 0 || slip.starved_share() > STARVED_SHARE_MAX;
        slip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_slipped_when_one_fault_or_over_one_in_a_hundred_wake_ups_ran_past_a_tenth_of_a_lease()
    {
        assert_eq!(threshold_ms(500), 50);
        assert_eq!(threshold_ms(100), 20);
        let log = SlipLog::default();
        log.fault(
            FaultKind::ServerKill,
            "inject",
            1_000,
            Duration::from_millis(50),
        );
        log.wakeups.store(1_000, Ordering::Relaxed);
        log.wakeups_late.store(10, Ordering::Relaxed);
        let slip = log.account(500, &[]);
        assert!(!slip.slipped, "at the threshold, not past it: {slip:?}");
        assert_eq!(slip.note(), None);
        log.fault(
            FaultKind::ServerPause,
            "heal",
            2_000,
            Duration::from_millis(51),
        );
        let slip = log.account(500, &[]);
        assert!(slip.slipped);
        assert_eq!(
            slip.latest.as_deref(),
            Some("server-pause heal drawn at 2000 ms ran 51 ms late")
        );
        let note = slip.note().unwrap();
        assert!(
            note.contains("1 of 2 fault actions late by up to 51 ms"),
            "{note}"
        );
        assert!(!note.contains("starved"), "{note}");
        let log = SlipLog::default();
        log.wakeups.store(1_000, Ordering::Relaxed);
        log.wakeups_late.store(11, Ordering::Relaxed);
        let note = log.account(500, &[]).note().expect("starved");
        assert!(note.contains("workers starved (1% of wake-ups"), "{note}");
    }
}
