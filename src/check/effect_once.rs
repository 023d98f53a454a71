//! **effect-once**: with a consumer that promises it (`marker`, `natural`),
//! every done job has exactly one effect and no job ever has two. The
//! effect counts come from the final `read` of the history, whose value
//! carries `effects: {id: n}`, the `consumer`'s name and `effect_once`
//! (whether it promises). Effects only grow, so a job with two at the end
//! had two at some point, and one with two at some point has two at the end.
//!
//! A consumer that does not promise effect-once (`naive`, `marker-before`,
//! `marker-after`) is reported, not judged: the counts say how many effects
//! were duplicated or lost, which is what the harness shows about it.

use super::{Op, Ops, Report, Role};
use crate::history::{EventKind, F};

/// Checks effect-once. Counts: `judged` (1 with a final read that counts
/// effects), `exercised` (redeliveries of jobs whose effect was tried
/// and did not fail), `promised` (1 if the consumer promises it), `done`,
/// `effects`, `duplicated` (jobs with two effects or more),
/// `lost` (done jobs with none). A history without effect counts (the
/// smoke campaign runs no consumer) counts `judged=0` and is valid.
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("effect-once");
    let read = ops.final_read();
    let value = read.and_then(|op| op.done?.value.as_ref());
    let Some(effects) = value.and_then(|v| v.get("effects")?.as_object()) else {
        report.count("judged", 0);
        report.count("exercised", 0);
        return report;
    };
    report.count("exercised", redelivered_after_effect(ops.all()));
    let value = value.expect("effects came from it");
    let promised = value
        .get("effect_once")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let consumer = value
        .get("consumer")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    report.count("judged", 1);
    report.count("promised", u64::from(promised));
    for name in ["done", "effects", "duplicated", "lost"] {
        report.count(name, 0);
    }
    let states = value.get("jobs").and_then(|v| v.as_object());
    let mut found = Vec::new();
    for (id, n) in effects {
        let n = n.as_u64().unwrap_or(0);
        let state = states
            .and_then(|s| s.get(id))
            .and_then(|v| v.as_str())
            .unwrap_or("absent");
        report.count("effects", n);
        if state == "done" {
            report.count("done", 1);
            if n == 0 {
                report.count("lost", 1);
                found.push((
                    id,
                    format!("{id}: done with no effect: the effect was lost ({consumer})"),
                ));
            }
        }
        if n > 1 {
            report.count("duplicated", 1);
            found.push((
                id,
                format!(
                    "{id}: {n} effects ({state}): the effect was applied more than once ({consumer})"
                ),
            ));
        }
    }
    if promised {
        // The final read is where the effects were counted.
        let at = read.map_or(0, Op::end);
        for (id, what) in found {
            report.violate(Some(id), &[(at, Role::FinalRead)], what);
        }
    }
    report
}

/// Redeliveries (leases beyond a job's first) of the jobs whose effect was
/// tried and did not fail (it completed, or its outcome is unknown: a
/// worker that crashed in the effect may have applied it): the chances to
/// apply an effect twice, or to skip it on a later delivery. A job
/// delivered once whose effect doubled or went missing is counted by the
/// check all the same; its chance is not one this counts.
fn redelivered_after_effect(all: &[Op<'_>]) -> u64 {
    let mut tried: std::collections::BTreeSet<&str> = Default::default();
    let mut leases: std::collections::BTreeMap<&str, u64> = Default::default();
    for op in all {
        let Some(job) = op.job() else { continue };
        match op.f() {
            F::Effect if op.done.is_none_or(|e| e.kind != EventKind::Fail) => {
                tried.insert(job);
            }
            F::Lease if op.outcome() == Some("leased") => *leases.entry(job).or_default() += 1,
            _ => {}
        }
    }
    tried
        .iter()
        .map(|job| leases.get(job).map_or(0, |n| n.saturating_sub(1)))
        .sum()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::check::Verdict;
    use crate::history::{Event, Recorder};

    /// The checker over `history`'s op index, as `check_all` runs it.
    fn check(history: &[Event]) -> Report {
        super::check(&Ops::new(history))
    }

    fn read(effects: serde_json::Value, promised: bool) -> Vec<Event> {
        let rec = Recorder::in_memory();
        let op = rec.invoke("checker", F::Read, None, None);
        rec.ok(
            op,
            None,
            None,
            json!({"jobs": {"JOB-0": "done", "JOB-1": "done", "JOB-2": "pending"},
                   "problems": [], "effects": effects, "consumer": "c",
                   "effect_once": promised}),
        );
        rec.events()
    }

    #[test]
    fn a_promising_consumer_with_a_lost_and_a_doubled_effect_is_invalid() {
        let r = check(&read(json!({"JOB-0": 0, "JOB-1": 1, "JOB-2": 2}), true));
        assert_eq!(r.verdict, Verdict::Invalid);
        assert_eq!((r.counts["lost"], r.counts["duplicated"]), (1, 1));
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
    }

    #[test]
    fn a_consumer_that_promises_nothing_is_counted_not_judged() {
        let r = check(&read(json!({"JOB-0": 2, "JOB-1": 1, "JOB-2": 0}), false));
        assert_eq!(r.verdict, Verdict::Valid);
        assert_eq!((r.counts["duplicated"], r.counts["promised"]), (1, 0));
    }

    #[test]
    fn a_history_without_effects_is_not_judged() {
        let r = check(&[]);
        assert_eq!(r.verdict, Verdict::Valid);
        assert_eq!(r.counts["judged"], 0);
    }
}
