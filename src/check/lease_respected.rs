//! **lease-respected**: the reaper never takes a job whose deadline has not
//! passed. A lease's deadline is in its ok value (`deadline_ms`), and an
//! accepted extend moves it (`deadline_ms` again); a reap's ok value says
//! when it ran (`now_ms`) and what it took (`reaped`). A reap without
//! `now_ms` is counted `unjudged`.
//!
//! Each reaped job is judged against the deadline known when the reap was
//! *invoked*: the last grant or extend of that job that completed before.
//! An op that completed while the reap was in flight ran concurrently with
//! it, possibly after it on the server (a stale extend answered after the
//! reap took the job), so it does not count against this reap. A deadline
//! only moves forward while its lease lives, and every lease is as long as
//! the last, so the deadline in force when the script ran was at least the
//! one judged here.
//!
//! In the explorer `now_ms` is the logical time the reap ran at. In the
//! chaos runner it is the server's `TIME` read right after the reap's reply
//! (the script reads the clock itself and does not return it), so it is an
//! upper bound of the script's clock: a deadline past it is a proven
//! violation, while a reap early by less than one round trip passes
//! unseen. `within_round_trip` counts the reaped jobs whose deadline fell
//! between `before_ms` (a `TIME` read just before the reap) and `now_ms`:
//! those are judged only within that bound. A reap whose `TIME` reads
//! straddle a move of the server's clock (a clock jump or its heal:
//! `check/clock.rs`) is unjudged: the script ran on the clock before the
//! move, the `TIME` after it read the clock after.

use std::collections::BTreeMap;

use super::{Ops, Report, Role};
use crate::history::F;

/// Checks lease-respected. Counts: `reaped`, `judged`, `unjudged`,
/// `within_round_trip`.
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("lease-respected");
    for name in ["reaped", "judged"] {
        report.count(name, 0);
    }
    let all = ops.all();
    // Deadlines as they become known: (completion index, job, deadline).
    let mut known: Vec<(u64, &str, u64)> = Vec::new();
    for op in all {
        if matches!(op.f(), F::Lease | F::Extend)
            && matches!(op.outcome(), Some("leased" | "extended"))
        {
            let value = op.done.and_then(|e| e.value.as_ref());
            let d = value.and_then(|v| v.get("deadline_ms")?.as_u64());
            if let (Some(job), Some(d)) = (op.job(), d) {
                known.push((op.end(), job, d));
            }
        }
    }
    known.sort_by_key(|(end, _, _)| *end);
    let mut reaps: Vec<_> = all
        .iter()
        .filter(|op| op.f() == F::Reap && op.is_ok())
        .collect();
    reaps.sort_by_key(|op| op.invoke.index);
    let mut deadline: BTreeMap<&str, u64> = BTreeMap::new();
    let mut next = known.iter().peekable();
    for op in reaps {
        while let Some((_, job, d)) = next.next_if(|(end, _, _)| *end < op.invoke.index) {
            deadline.insert(job, *d);
        }
        let value = op.done.and_then(|e| e.value.as_ref());
        // Read across a move of the server's clock, `TIME` says nothing.
        let moved = ops.straddle(op, true);
        let time = |key: &str| value.and_then(|v| v.get(key)?.as_u64()).filter(|_| !moved);
        let (now, before) = (time("now_ms"), time("before_ms"));
        let reaped = value
            .and_then(|v| v.get("reaped")?.as_array().cloned())
            .unwrap_or_default();
        for r in reaped {
            let Some(id) = r.get("id").and_then(|v| v.as_str()) else {
                continue;
            };
            report.count("reaped", 1);
            let (Some(now), Some(d)) = (now, deadline.get(id)) else {
                report.count("unjudged", 1);
                continue;
            };
            report.count("judged", 1);
            if before.is_some_and(|b| *d > b) && *d <= now {
                report.count("within_round_trip", 1);
            }
            if *d > now {
                report.violate(
                    Some(id),
                    &[(op.end(), Role::Broke)],
                    format!(
                        "{id}: reaped at event {} at {now} ms, before its deadline {d} ms",
                        op.end()
                    ),
                );
            }
        }
    }
    report
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

    #[test]
    fn reaper_never_takes_a_live_lease() {
        let rec = Recorder::in_memory();
        let op = rec.invoke("w0", F::Lease, None, None);
        rec.ok(
            op,
            Some("JOB-0"),
            Some(1),
            json!({"outcome": "leased", "deadline_ms": 200}),
        );
        let op = rec.invoke("reaper", F::Reap, None, None);
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "reaped", "now_ms": 150,
                                       "reaped": [{"id": "JOB-0", "to": "pending"}]}),
        );
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
        let op = rec.invoke("reaper", F::Reap, None, None);
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "reaped", "now_ms": 200, "reaped": []}),
        );
        let ok = check(&rec.events()[4..]);
        assert_eq!(ok.verdict, Verdict::Valid);
    }

    #[test]
    fn an_extend_answered_while_the_reap_was_in_flight_does_not_count_against_it() {
        let rec = Recorder::in_memory();
        let op = rec.invoke("w0", F::Lease, None, None);
        rec.ok(
            op,
            Some("JOB-0"),
            Some(1),
            json!({"outcome": "leased", "deadline_ms": 100}),
        );
        let reap = rec.invoke("reaper", F::Reap, None, None);
        let op = rec.invoke("w0-hb", F::Extend, Some("JOB-0"), Some(1));
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "extended", "deadline_ms": 600}),
        );
        rec.ok(
            reap,
            None,
            None,
            json!({"outcome": "reaped", "before_ms": 99, "now_ms": 104,
                                       "reaped": [{"id": "JOB-0", "to": "pending"}]}),
        );
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!(r.counts["judged"], 1);
        assert_eq!(r.counts["within_round_trip"], 1);
    }
}
