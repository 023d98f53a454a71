//! Liveness: after the faults heal, every job reaches done or dead within
//! a bound — a bound that follows from what the run measured, not a fixed
//! number.
//!
//! At the heal the run knows its backlog (jobs not yet done or dead) and
//! the rate its workers settled jobs at before the first fault (from the
//! history). A healthy queue then needs about backlog ÷ rate to drain; the
//! bound is that time [`MARGIN`] times over, plus an allowance for the
//! slowest single job ([`floor_ms`]: a lease to expire, a reap, a
//! reconnect, the work). The rate measured is never above what the workers
//! can do, so the bound errs long. When no rate can be measured (too few
//! jobs settled before the faults) or the backlog cannot be read, the bound
//! is not stated and liveness is `unknown` unless every job finished
//! anyway. `--drain-ms-max` overrides the derivation.

use super::*;
use crate::check::Violation;
use crate::history::{Action, Event, EventKind, F};

/// The stated margin: the bound is this many times the drain time the
/// measured rate predicts.
pub const MARGIN: u64 = 2;

/// Fewest settles a rate is measured from.
const SETTLES_MIN: u64 = 5;

/// Shortest window a rate is measured over (ms).
const WINDOW_MS_MIN: u64 = 500;

/// The longest the drain waits, whatever the bound: past it, unfinished
/// jobs make liveness `unknown` (the bound was not reached), not invalid.
pub const DRAIN_MS_CAP: u64 = 600_000;

/// How long the drain waits when no bound can be stated: finishing within
/// it is valid; not finishing is `unknown`.
const DRAIN_MS_UNSTATED: u64 = 60_000;

/// The allowance for the slowest single job after the heal, whatever the
/// backlog: its lease expiring, a reap, a reconnect after a server
/// restart, a redelivery and its work; 15 s or ten leases, the longer.
/// A queue without a reaper recovers inside a lease instead, which the
/// drain's workers keep calling: the same allowance (Sidekiq's dead
/// process is cleaned up 3 to 4 s after its last heartbeat; arq's
/// in-progress key lasts a lease). A library that says it may take longer
/// to recover a delivery it lost track of
/// ([`crate::adapter::Capabilities::recovery_ms`]: RQ's intermediate
/// list, a minute) gets that window on top.
pub fn floor_ms(lease_ms: u64, recovery_ms: Option<u64>) -> u64 {
    15_000.max(10 * lease_ms) + recovery_ms.unwrap_or(0)
}

/// The floor's words in a derivation: `15,000 ms for the slowest job (15 s
/// or ten leases)`, and the library's recovery window when it has one.
fn floor_words(floor: u64, recovery_ms: Option<u64>) -> String {
    match recovery_ms {
        Some(r) if r > 0 => format!(
            "{} ms for the slowest job (15 s or ten leases, + {} ms the library may take to recover a delivery it lost track of)",
            thousands(floor),
            thousands(r)
        ),
        _ => format!(
            "{} ms for the slowest job (15 s or ten leases)",
            thousands(floor)
        ),
    }
}

/// The liveness bound of a run and how it was decided.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LivenessBound {
    /// How long after the heal every job must be done or dead (ms);
    /// `None` when no bound could be stated.
    pub bound_ms: Option<u64>,
    /// How long the drain waited at most (ms): the bound, capped at
    /// [`DRAIN_MS_CAP`], or 60 s when there is no bound.
    pub wait_ms: u64,
    /// Jobs neither done nor dead at the heal (enqueued or not yet), if
    /// the queue could be read.
    pub backlog: Option<u64>,
    /// Jobs settled per second before the first fault, if measured.
    pub rate_per_s: Option<f64>,
    /// How the bound was derived, or why none could be, in a sentence.
    pub derivation: String,
}

impl LivenessBound {
    /// The bound `--drain-ms-max` sets.
    pub fn given(bound_ms: u64) -> LivenessBound {
        LivenessBound {
            bound_ms: Some(bound_ms),
            wait_ms: bound_ms,
            backlog: None,
            rate_per_s: None,
            derivation: format!("{} ms, set by --drain-ms-max", thousands(bound_ms)),
        }
    }

    /// The bound derived from `backlog` at the heal (or why it could not
    /// be read) and the drain rate measured in `events`, the history up to
    /// the heal; `recovery_ms` is the library's own recovery window
    /// ([`floor_ms`]).
    pub fn derive(
        events: &[Event],
        backlog: Result<u64, String>,
        lease_ms: u64,
        recovery_ms: Option<u64>,
    ) -> LivenessBound {
        let floor = floor_ms(lease_ms, recovery_ms);
        let unstated_ms = DRAIN_MS_UNSTATED + recovery_ms.unwrap_or(0);
        let rate = drain_rate(events);
        let (backlog, rate) = match (backlog, rate) {
            (Ok(b), Ok(r)) => (b, r),
            (Err(why), rate) => {
                return LivenessBound::unstated(None, rate.ok().map(|r| r.per_s), why, unstated_ms)
            }
            (Ok(b), Err(why)) => return LivenessBound::unstated(Some(b), None, why, unstated_ms),
        };
        let predicted_ms = (backlog as f64 / rate.per_s * 1000.0).ceil() as u64;
        let set_back = clock_set_back_ms(events);
        let bound_ms = MARGIN * predicted_ms + floor + set_back;
        let stretch = if set_back > 0 {
            format!(
                " + {} ms the server's clock was set back (the heals of its clock jumps: a lease \
                 granted before one lasts that much longer)",
                thousands(set_back)
            )
        } else {
            String::new()
        };
        LivenessBound {
            bound_ms: Some(bound_ms),
            wait_ms: bound_ms.min(DRAIN_MS_CAP),
            backlog: Some(backlog),
            rate_per_s: Some(rate.per_s),
            derivation: format!(
                "{} ms = {MARGIN} × ({} jobs unfinished at the heal ÷ {:.1} jobs/s settled {}) + {}{stretch}",
                thousands(bound_ms),
                thousands(backlog),
                rate.per_s,
                rate.window,
                floor_words(floor, recovery_ms)
            ),
        }
    }

    fn unstated(
        backlog: Option<u64>,
        rate_per_s: Option<f64>,
        why: String,
        wait_ms: u64,
    ) -> LivenessBound {
        LivenessBound {
            bound_ms: None,
            wait_ms,
            backlog,
            rate_per_s,
            derivation: format!(
                "no bound stated: {why}; the drain waits {} ms at most",
                thousands(wait_ms)
            ),
        }
    }
}

/// How far back, in all, the nemesis set the server's clock (ms): the
/// backward jumps the heals of the kinds that move it recorded
/// (`clock-jump`'s `jumped_ms`, the largest of `skew-failover`'s `aligned`
/// jumps). A lease granted on the
/// clock before it is set back lasts that much longer on the wall clock,
/// so the bound allows it; summed over the jumps, it errs long.
fn clock_set_back_ms(events: &[Event]) -> u64 {
    events
        .iter()
        .filter_map(Event::fault)
        .filter(|f| f.action == Action::Heal && f.fault.spec().moves_clock)
        .map(|f| {
            let v = &f.detail;
            let mut jumps: Vec<i64> = v
                .get("jumped_ms")
                .and_then(|j| j.as_i64())
                .into_iter()
                .collect();
            if let Some(aligned) = v.get("aligned").and_then(|a| a.as_array()) {
                jumps.extend(aligned.iter().filter_map(|a| a["jumped_ms"].as_i64()));
            }
            jumps
                .into_iter()
                .filter(|&j| j < 0)
                .map(i64::unsigned_abs)
                .max()
                .unwrap_or(0)
        })
        .sum()
}

/// A drain rate measured in a history, and over which window.
#[derive(Clone, Debug, PartialEq)]
struct Rate {
    per_s: f64,
    window: String,
}

/// The rate jobs were settled at (accepted completes per second) before
/// the first fault: from the first enqueue to the nemesis's first event.
/// A window shorter than half a second or with fewer than five settles
/// falls back to the whole faults phase (slower, so the bound errs long).
fn drain_rate(events: &[Event]) -> Result<Rate, String> {
    let start_ms = events
        .iter()
        .find(|e| e.f == F::Enqueue)
        .map(|e| e.time_ms)
        .ok_or("no job was enqueued")?;
    let end_ms = events.last().map_or(start_ms, |e| e.time_ms);
    let first_fault_ms = events
        .iter()
        .find(|e| e.process == "nemesis")
        .map(|e| e.time_ms);
    let settled = |until_ms: u64| {
        events
            .iter()
            .filter(|e| e.time_ms < until_ms && is_settle(e))
            .count() as u64
    };
    let over = |until_ms: u64| {
        let settles = settled(until_ms);
        let window_ms = until_ms.saturating_sub(start_ms);
        (settles >= SETTLES_MIN && window_ms >= WINDOW_MS_MIN).then(|| {
            (
                settles as f64 * 1000.0 / window_ms as f64,
                settles,
                window_ms,
            )
        })
    };
    if let Some(fault_ms) = first_fault_ms {
        if let Some((per_s, settles, window_ms)) = over(fault_ms) {
            return Ok(Rate {
                per_s,
                window: format!(
                    "before the first fault ({settles} in {} ms)",
                    thousands(window_ms)
                ),
            });
        }
    }
    let why = match first_fault_ms {
        Some(_) => "too few before the first fault",
        None => "no fault was injected",
    };
    match over(end_ms + 1) {
        Some((per_s, settles, window_ms)) => Ok(Rate {
            per_s,
            window: format!(
                "over the whole faults phase ({settles} in {} ms; {why})",
                thousands(window_ms)
            ),
        }),
        None => Err(format!(
            "fewer than {SETTLES_MIN} jobs were settled before the heal, so no drain rate was measured"
        )),
    }
}

/// An accepted complete: a job that became done.
fn is_settle(e: &Event) -> bool {
    e.kind == EventKind::Ok
        && e.f == F::Complete
        && e.value
            .as_ref()
            .and_then(|v| v.get("outcome"))
            .and_then(|o| o.as_str())
            == Some("settled")
}

/// The liveness report: `unfinished` jobs after a drain of `drain_ms`
/// under `bound`. Every job finished is valid whatever the bound; jobs
/// unfinished after the whole bound are invalid; after a capped wait, with
/// no bound, or after a drain that `stalled` (the server refused every
/// call of a stretch: the reason), `unknown`.
pub(super) fn liveness(
    unfinished: &[String],
    drain_ms: u64,
    bound: &LivenessBound,
    stalled: Option<&str>,
) -> Report {
    let mut counts = BTreeMap::new();
    counts.insert("drain_ms", drain_ms);
    if let Some(b) = bound.bound_ms {
        counts.insert("bound_ms", b);
    }
    if let Some(b) = bound.backlog {
        counts.insert("backlog_at_heal", b);
    }
    counts.insert("unfinished", unfinished.len() as u64);
    let reached = bound.bound_ms.is_some_and(|b| b <= bound.wait_ms) && stalled.is_none();
    let verdict = match (unfinished.is_empty(), reached) {
        (true, _) => Verdict::Valid,
        (false, true) => Verdict::Invalid,
        (false, false) => Verdict::Unknown,
    };
    let mut violations: Vec<Violation> = Vec::new();
    if verdict == Verdict::Unknown {
        let text = match (stalled, bound.bound_ms) {
            (Some(why), _) => format!(
                "{} jobs unfinished, and the server would not let them finish: {why}",
                unfinished.len()
            ),
            (None, Some(b)) => format!(
                "{} jobs unfinished when the drain stopped waiting at {} ms, short of the bound {} ms: cannot tell",
                unfinished.len(),
                thousands(drain_ms),
                thousands(b)
            ),
            (None, None) => format!(
                "{} jobs unfinished after a drain of {} ms, and no bound could be stated: {}",
                unfinished.len(),
                thousands(drain_ms),
                bound.derivation
            ),
        };
        violations.push(Violation::new("liveness", None, &[], text));
    }
    if verdict == Verdict::Invalid {
        violations.extend(unfinished.iter().take(20).map(|id| {
            Violation::new(
                "liveness",
                Some(id),
                &[],
                format!(
                    "{id}: neither done nor dead {} ms after the faults healed (the bound: {} ms)",
                    thousands(drain_ms),
                    thousands(bound.bound_ms.unwrap_or(bound.wait_ms))
                ),
            )
        }));
    }
    Report {
        invariant: "liveness",
        verdict,
        counts,
        violations,
    }
}

/// `2432` → `2,432`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(time_ms: u64, process: &str, kind: EventKind, f: F) -> Event {
        Event {
            value: (f == F::Complete).then(|| json!({"outcome": "settled"})),
            ..Event::bare(time_ms, process, kind, f)
        }
    }

    /// An enqueue at 0 ms, a settle every `every_ms` from 0 until
    /// `until_ms`, and the nemesis's first event at `fault_ms`, if any.
    fn history(every_ms: u64, until_ms: u64, fault_ms: Option<u64>) -> Vec<Event> {
        let mut events = vec![event(0, "p0", EventKind::Invoke, F::Enqueue)];
        events.extend(fault_ms.map(|t| event(t, "nemesis", EventKind::Invoke, F::Fault)));
        events.extend(
            (0..until_ms)
                .step_by(every_ms as usize)
                .map(|t| event(t, "w0", EventKind::Ok, F::Complete)),
        );
        events.sort_by_key(|e| e.time_ms);
        events
    }

    #[test]
    fn the_bound_is_twice_the_backlog_over_the_rate_before_the_faults_plus_the_floor() {
        // 100 settles/s before the first fault at 2 s, then one a second.
        let mut events = history(10, 2_000, Some(2_000));
        events.extend(
            (2_000..10_000)
                .step_by(1_000)
                .map(|t| event(t, "w0", EventKind::Ok, F::Complete)),
        );
        let bound = LivenessBound::derive(&events, Ok(1_000), 500, None);
        // 1,000 jobs at 100/s: 10 s; twice that, plus 15 s.
        assert_eq!(bound.bound_ms, Some(2 * 10_000 + 15_000));
        assert_eq!(bound.wait_ms, 35_000);
        assert_eq!(
            bound.derivation,
            "35,000 ms = 2 × (1,000 jobs unfinished at the heal ÷ 100.0 jobs/s settled before the first fault (200 in 2,000 ms)) + 15,000 ms for the slowest job (15 s or ten leases)"
        );
    }

    /// RQ fails a job stuck in its intermediate list only once a cleanup
    /// has seen it there for a minute: a drain shorter than that would
    /// count a job the library still holds, and will recover, as lost.
    #[test]
    fn a_library_s_recovery_window_lengthens_the_bound_and_the_unstated_wait_and_is_named() {
        let events = history(10, 2_000, Some(2_000));
        let bound = LivenessBound::derive(&events, Ok(1_000), 500, Some(60_000));
        assert_eq!(bound.bound_ms, Some(2 * 10_000 + 15_000 + 60_000));
        assert!(
            bound.derivation.ends_with(
                "+ 75,000 ms for the slowest job (15 s or ten leases, + 60,000 ms the library may take to recover a delivery it lost track of)"
            ),
            "{}",
            bound.derivation
        );
        let unstated =
            LivenessBound::derive(&history(1_000, 3_000, None), Ok(10), 500, Some(60_000));
        assert_eq!(unstated.bound_ms, None);
        assert_eq!(unstated.wait_ms, 120_000);
    }

    #[test]
    fn a_clock_set_back_by_its_heals_lengthens_the_bound_by_as_much_and_says_so() {
        let mut events = history(10, 2_000, Some(2_000));
        let heal = |time_ms: u64, value: serde_json::Value| Event {
            kind: EventKind::Ok,
            value: Some(value),
            ..event(time_ms, "nemesis", EventKind::Ok, F::Fault)
        };
        events.push(heal(
            2_500,
            json!({"fault": "clock-jump", "action": "heal", "jumped_ms": -1_500, "offset_ms": 0}),
        ));
        events.push(heal(
            2_900,
            json!({"fault": "skew-failover", "action": "heal", "rejoined": "127.0.0.1:1",
                   "aligned": [{"node": "127.0.0.1:2", "jumped_ms": -2_000}]}),
        ));
        // A forward jump (an inject) sets nothing back.
        events.push(heal(
            2_950,
            json!({"fault": "clock-jump", "action": "inject", "jumped_ms": 1_000}),
        ));
        let bound = LivenessBound::derive(&events, Ok(1_000), 500, None);
        assert_eq!(bound.bound_ms, Some(2 * 10_000 + 15_000 + 3_500));
        assert!(
            bound
                .derivation
                .ends_with("+ 3,500 ms the server's clock was set back (the heals of its clock jumps: a lease granted before one lasts that much longer)"),
            "{}",
            bound.derivation
        );
    }

    #[test]
    fn too_few_settles_before_the_first_fault_fall_back_to_the_whole_phase() {
        let events = history(100, 4_000, Some(150));
        let bound = LivenessBound::derive(&events, Ok(10), 500, None);
        assert!(
            bound.derivation.contains("whole faults phase"),
            "{}",
            bound.derivation
        );
        assert!(bound.bound_ms.is_some());
    }

    #[test]
    fn no_rate_or_no_backlog_states_no_bound_and_unfinished_jobs_are_unknown() {
        let events = history(1_000, 3_000, None);
        let bound = LivenessBound::derive(&events, Ok(10), 500, None);
        assert_eq!(bound.bound_ms, None);
        assert!(
            bound.derivation.contains("fewer than 5 jobs"),
            "{}",
            bound.derivation
        );
        let report = liveness(&["JOB-1".into()], 60_000, &bound, None);
        assert_eq!(report.verdict, Verdict::Unknown);
        assert_eq!(liveness(&[], 10, &bound, None).verdict, Verdict::Valid);

        let unread = LivenessBound::derive(
            &history(10, 2_000, None),
            Err("the read failed".into()),
            500,
            None,
        );
        assert_eq!(unread.bound_ms, None);
        assert!(unread.derivation.contains("the read failed"));
    }

    #[test]
    fn unfinished_jobs_past_the_whole_bound_are_invalid_and_past_a_capped_wait_unknown() {
        let given = LivenessBound::given(1_000);
        assert_eq!(
            liveness(&["JOB-1".into()], 1_000, &given, None).verdict,
            Verdict::Invalid
        );
        let capped = LivenessBound {
            bound_ms: Some(DRAIN_MS_CAP + 1),
            wait_ms: DRAIN_MS_CAP,
            ..given
        };
        assert_eq!(
            liveness(&["JOB-1".into()], DRAIN_MS_CAP, &capped, None).verdict,
            Verdict::Unknown
        );
    }

    #[test]
    fn the_drain_s_figures_agree_the_texts_name_the_drain_it_took_not_the_most_it_would_wait() {
        let events = history(1_000, 3_000, None);
        let bound = LivenessBound::derive(&events, Ok(10), 500, None);
        assert!(
            bound
                .derivation
                .ends_with("the drain waits 60,000 ms at most"),
            "{}",
            bound.derivation
        );
        let report = liveness(&["JOB-1".into()], 611, &bound, None);
        assert_eq!(report.counts["drain_ms"], 611);
        let text = &report.violations[0].text;
        assert!(text.contains("after a drain of 611 ms"), "{text}");
        assert!(!text.contains("60,000 ms,"), "{text}");
        let given = LivenessBound::given(1_000);
        let report = liveness(&["JOB-1".into()], 1_203, &given, None);
        assert_eq!(
            report.violations[0].text,
            "JOB-1: neither done nor dead 1,203 ms after the faults healed (the bound: 1,000 ms)"
        );
    }

    #[test]
    fn unfinished_jobs_after_a_stalled_drain_are_unknown_with_the_reason() {
        let given = LivenessBound::given(1_000);
        let report = liveness(
            &["JOB-1".into()],
            600,
            &given,
            Some("every call was refused with OOM"),
        );
        assert_eq!(report.verdict, Verdict::Unknown);
        assert!(report.violations[0].text.contains("refused with OOM"));
        assert_eq!(
            liveness(&[], 600, &given, Some("refused")).verdict,
            Verdict::Valid
        );
    }
}
