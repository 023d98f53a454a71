//! **delay-respected**: a job is never leased before the ready time the
//! queue announced for it. Two operations announce one:
//!
//! - an enqueue admitted (`enqueued`) with a delay: its invoke value says
//!   `delay_ms`, and when it ran (`now_ms`, the logical time; or
//!   `before_ms`, the server's `TIME` read before it was sent, a lower
//!   bound of the script's clock), so the job is ready no earlier than
//!   their sum;
//! - a `fail` answered `requeued`, whose `ready_at_ms` is the queue's own
//!   promise (logical or server-clock ms, as the protocol says).
//!
//! A granted lease says when it ran in its ok value's `now_ms`: the logical
//! time, exact; or, on the server clock, the server's `TIME` read just
//! after its reply, an upper bound of the script's clock. A lease whose
//! `now_ms` is below the ready time announced before it was invoked came
//! before that ready time on the server's own clock: a proven violation. A
//! lease early by less than one round trip on the server clock passes
//! unseen.
//!
//! Each lease of a job is judged against the latest announcement of that
//! job completed before the lease was invoked. Once that announcement took
//! effect the job waits in pending until its ready time, and anything that
//! follows (a lease, a reap of it, the next fail) happens later on a clock
//! that only moves forward, so no later step can make it ready sooner;
//! except another `fail` of the job that may have taken effect between the
//! announcement and the lease (a stale fail a queue that does not fence
//! accepts: one answered `requeued`, or not answered). Such a lease is not
//! judged, and counted `unjudged`, as is one whose time or ready time the
//! history does not say. A lease of a job with no ready time announced
//! before it is not judged (an enqueue with no delay promises nothing a
//! lease could come before).
//!
//! A time the server read across a move of its clock (a clock jump or its
//! heal between the script and the `TIME` read: `check/clock.rs`) is not
//! judged either: the lease is `unjudged`, the enqueue's ready time unknown.
//!
//! On a queue that does not refuse a duplicate id (`dedup: false`), a
//! second `enqueued` of an id is a second message with its own ready time:
//! only the first admission of an id announces one.

use std::collections::BTreeMap;

use super::{Op, Ops, Report, Role};
use crate::history::{EventKind, F};

/// A ready time announced for a job.
struct Announced<'a> {
    op: &'a Op<'a>,
    /// The ready time (ms); `None` when the history does not say when the
    /// delayed enqueue ran.
    ready_ms: Option<u64>,
}

/// The ready time an admitted enqueue `op` announced: `None` when it had
/// no delay; `Some(None)` when the history does not say when it ran (no
/// time, or a `before_ms` read before the invoke across a move of the
/// server's clock since the producer's previous event).
fn delayed(ops: &Ops<'_>, op: &Op<'_>) -> Option<Option<u64>> {
    let args = op.invoke.value.as_ref();
    let num = |key: &str| args.and_then(|v| v.get(key)?.as_u64());
    let delay = num("delay_ms").filter(|d| *d > 0)?;
    let before = num("before_ms").filter(|_| !ops.straddle(op, true));
    let at = num("now_ms").or(before);
    Some(at.map(|at| at.saturating_add(delay)))
}

/// Checks delay-respected. Counts: `leases` (granted), `announced` (ready
/// times announced: delayed admissions and requeues), `judged` (leases
/// judged against one), `unjudged` (leases after an announcement that the
/// history cannot judge: no time, or a concurrent fail of the job).
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("delay-respected");
    for name in ["leases", "announced", "judged", "unjudged"] {
        report.count(name, 0);
    }
    let Announcements { announced, fails } = announcements(ops);
    report.count(
        "announced",
        announced.values().map(|list| list.len() as u64).sum(),
    );
    for lease in ops.granted() {
        let Some(job) = lease.job() else { continue };
        report.count("leases", 1);
        let Some(a) = announced
            .get(job)
            .and_then(|list| list.iter().rev().find(|a| a.op.end() < lease.invoke.index))
        else {
            continue;
        };
        let fails = fails.get(job).map_or(&[][..], Vec::as_slice);
        not_before_ready(&mut report, ops, lease, a, fails);
    }
    report
}

/// What a history announced, job by job.
struct Announcements<'a> {
    /// The ready times announced, in the order of their completion.
    announced: BTreeMap<&'a str, Vec<Announced<'a>>>,
    /// The fails that may have requeued the job: answered requeued, or
    /// not answered at all (info, or the history ends first).
    fails: BTreeMap<&'a str, Vec<&'a Op<'a>>>,
}

/// Each job's announced ready times and the fails that may have requeued
/// it ([`Announcements`]).
fn announcements<'a>(ops: &'a Ops<'a>) -> Announcements<'a> {
    let mut announced: BTreeMap<&str, Vec<Announced<'_>>> = BTreeMap::new();
    let mut fails: BTreeMap<&str, Vec<&Op<'_>>> = BTreeMap::new();
    let mut admitted: BTreeMap<&str, ()> = BTreeMap::new();
    for op in ops.all() {
        let Some(job) = op.job() else { continue };
        match op.f() {
            F::Enqueue if op.outcome() == Some("enqueued") => {
                if admitted.insert(job, ()).is_some() {
                    continue;
                }
                if let Some(ready_ms) = delayed(ops, op) {
                    let a = Announced { op, ready_ms };
                    announced.entry(job).or_default().push(a);
                }
            }
            F::Fail => {
                let unanswered = op.done.is_none_or(|e| e.kind == EventKind::Info);
                if op.outcome() == Some("requeued") {
                    let value = op.done.and_then(|e| e.value.as_ref());
                    let ready_ms = value.and_then(|v| v.get("ready_at_ms")?.as_u64());
                    announced
                        .entry(job)
                        .or_default()
                        .push(Announced { op, ready_ms });
                    fails.entry(job).or_default().push(op);
                } else if unanswered {
                    fails.entry(job).or_default().push(op);
                }
            }
            _ => {}
        }
    }
    for list in announced.values_mut() {
        list.sort_by_key(|a| a.op.end());
    }
    Announcements { announced, fails }
}

/// The rule: `lease` of `job` ran no earlier than the ready time `a`
/// announced, the latest announcement of the job completed before it was
/// invoked. Unjudged when the history does not say a time, when it read
/// one across a move of the server's clock, or when another of the job's
/// `fails` may have taken effect between the two.
fn not_before_ready(
    report: &mut Report,
    ops: &Ops<'_>,
    lease: &Op<'_>,
    a: &Announced<'_>,
    fails: &[&Op<'_>],
) {
    let job = lease.job().unwrap_or_default();
    // A fail of the job, other than the announcement, that may have
    // taken effect after it and before the lease.
    let between = fails.iter().any(|f| {
        !std::ptr::eq(*f, a.op)
            && f.invoke.index < lease.end()
            && f.done.map_or(u64::MAX, |e| e.index) > a.op.invoke.index
    });
    let value = lease.done.and_then(|e| e.value.as_ref());
    let at = value.and_then(|v| v.get("now_ms")?.as_u64());
    let moved = ops.straddle(lease, false);
    let (Some(ready), Some(at), false, false) = (a.ready_ms, at, between, moved) else {
        report.count("unjudged", 1);
        return;
    };
    report.count("judged", 1);
    if at < ready {
        let what = match a.op.f() {
            F::Fail => "its fail answered",
            _ => "its enqueue's delay made it",
        };
        report.violate(
            Some(job),
            &[(lease.end(), Role::Broke), (a.op.end(), Role::Earlier)],
            format!(
                "{job}: leased by {} at event {} at {at} ms, before {ready} ms, the ready time {what} at event {}",
                lease.invoke.process,
                lease.end(),
                a.op.end()
            ),
        );
    }
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

    fn lease(rec: &Recorder, w: &str, job: &str, token: u64, now: u64) {
        let op = rec.invoke(w, F::Lease, None, None);
        rec.ok(
            op,
            Some(job),
            Some(token),
            json!({"outcome": "leased", "deadline_ms": now + 100, "payload": "p", "now_ms": now}),
        );
    }

    fn fail(rec: &Recorder, w: &str, job: &str, token: u64, ready: u64) {
        let op = rec.invoke(w, F::Fail, Some(job), Some(token));
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "requeued", "ready_at_ms": ready}),
        );
    }

    fn enqueue(rec: &Recorder, job: &str, args: serde_json::Value) {
        let op = rec.push_invoke_with("producer", F::Enqueue, Some(job), args);
        rec.ok(op, None, None, json!({"outcome": "enqueued"}));
    }

    #[test]
    fn a_lease_before_the_ready_time_a_fail_announced_is_invalid_and_names_the_job() {
        let rec = Recorder::in_memory();
        enqueue(&rec, "JOB-1", json!({"payload": "p"}));
        lease(&rec, "w0", "JOB-1", 1, 1_000);
        fail(&rec, "w0", "JOB-1", 1, 1_500);
        lease(&rec, "w1", "JOB-1", 2, 1_100);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
        assert_eq!(r.violations.len(), 1);
        let v = &r.violations[0];
        assert_eq!(v.invariant, "delay-respected");
        assert_eq!(v.job.as_deref(), Some("JOB-1"));
        assert_eq!(v.event(Role::Broke), Some(7));
        assert_eq!(v.event(Role::Earlier), Some(5));
        assert_eq!((r.counts["judged"], r.counts["leases"]), (1, 2));
    }

    #[test]
    fn a_lease_at_or_after_the_ready_time_is_valid() {
        let rec = Recorder::in_memory();
        enqueue(&rec, "JOB-1", json!({"payload": "p"}));
        lease(&rec, "w0", "JOB-1", 1, 1_000);
        fail(&rec, "w0", "JOB-1", 1, 1_500);
        lease(&rec, "w1", "JOB-1", 2, 1_500);
        fail(&rec, "w1", "JOB-1", 2, 1_600);
        lease(&rec, "w0", "JOB-1", 3, 1_700);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!(r.counts["judged"], 2);
        assert_eq!(r.counts["announced"], 2);
    }

    #[test]
    fn a_lease_before_a_delayed_enqueue_is_ready_is_invalid_and_after_it_valid() {
        let rec = Recorder::in_memory();
        enqueue(
            &rec,
            "JOB-1",
            json!({"payload": "p", "delay_ms": 50, "now_ms": 1_000}),
        );
        lease(&rec, "w0", "JOB-1", 1, 1_025);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
        assert_eq!(r.violations[0].job.as_deref(), Some("JOB-1"));
        let rec = Recorder::in_memory();
        enqueue(
            &rec,
            "JOB-1",
            json!({"payload": "p", "delay_ms": 50, "before_ms": 1_000}),
        );
        lease(&rec, "w0", "JOB-1", 1, 1_050);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!(r.counts["judged"], 1);
    }

    #[test]
    fn a_lease_with_no_time_or_after_a_concurrent_fail_is_unjudged_not_a_violation() {
        // No `now_ms` on the lease: nothing proves when it ran.
        let rec = Recorder::in_memory();
        enqueue(&rec, "JOB-1", json!({"payload": "p"}));
        lease(&rec, "w0", "JOB-1", 1, 1_000);
        fail(&rec, "w0", "JOB-1", 1, 1_500);
        let op = rec.invoke("w1", F::Lease, None, None);
        rec.ok(
            op,
            Some("JOB-1"),
            Some(2),
            json!({"outcome": "leased", "deadline_ms": 1_200, "payload": "p"}),
        );
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!((r.counts["judged"], r.counts["unjudged"]), (0, 1));
        // A stale fail of a queue that does not fence, answered after the
        // lease was invoked: it may have made the job ready at once.
        let rec = Recorder::in_memory();
        enqueue(&rec, "JOB-1", json!({"payload": "p"}));
        lease(&rec, "w0", "JOB-1", 1, 1_000);
        fail(&rec, "w0", "JOB-1", 1, 1_500);
        let stale = rec.invoke("w2", F::Fail, Some("JOB-1"), Some(1));
        lease(&rec, "w1", "JOB-1", 2, 1_100);
        rec.ok(
            stale,
            None,
            None,
            json!({"outcome": "requeued", "ready_at_ms": 1_100}),
        );
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!(r.counts["unjudged"], 1);
    }
}
