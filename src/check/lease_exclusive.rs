//! **lease-exclusive**: a job is never leased while an earlier lease of it
//! is live: no two leases of one job overlap before the earlier one's
//! announced deadline, unless the earlier one was settled or reaped.
//!
//! A lease's deadline is in its ok value (`deadline_ms`, `0` when the queue
//! cannot say), and each accepted extend of it answers a new one; a lease
//! call's ok value, granted or empty, says when it ran (`now_ms`: the
//! logical time, exact; or, on the server clock, the server's `TIME` read
//! just after its reply, an upper bound of the script's clock). A lease of
//! job j granted at `now_ms` t is a proven violation when an earlier lease
//! of j, granted (completed) before it was invoked, had a deadline above t
//! and was neither settled nor reaped before it was invoked.
//!
//! What ends a lease: an accepted complete or fail of its token (by token,
//! rising or opaque: a token names one delivery), or a reap whose answer
//! names its job, completed after the lease was invoked. A crash of the
//! holder ends nothing (the lease holds until its deadline). The deadline
//! judged is the least of the grant's and of every accepted extend of the
//! lease sent before the later lease completed, leaving out each one that
//! another surely followed before the later lease was asked for: the
//! deadline in force when the later lease ran is one of them, so a
//! `now_ms` below the least is below it. The history cannot judge a pair, counted `unjudged` and never
//! a violation, when the later lease has no time, the earlier one's
//! deadline is unknown (`0`, missing, or an extend of it that was never
//! answered), an end of the earlier lease (a settle of its token, a reap of
//! its job, or a reap not answered) was in flight while the later lease was
//! asked for, the two grants were in flight together and in some order the
//! first had ended, may have, or had expired when the second ran (two
//! grants in flight together where, whichever ran first, the second ran
//! while the first was live and nothing had ended it are a violation in
//! either order: two workers' parallel leases of one job), or the queue does not refuse a duplicate id (`dedup: false`)
//! and the id was enqueued twice (two messages under one id).
//!
//! The chances to break it (`exercised`) are the lease calls, granted or
//! empty, answered with a time and asked for while some job was held under
//! a lease that nothing had ended and whose deadline was still ahead: each
//! could have handed that job out a second time. The reference queue only
//! leases from `pending`, so it holds the invariant whenever a worker asks
//! while another holds a job. A lease call whose time a server clock's
//! move may have skewed (a clock jump or its heal between its reply and
//! the `TIME` read after it: `check/clock.rs`) is judged as one without a
//! time.

use std::collections::{BTreeMap, BTreeSet};

use super::{fenced_settlement::accepted, Op, Ops, Report, Role};
use crate::history::{EventKind, F};

/// A lease granted, as the replay sees it.
struct Grant<'a> {
    op: &'a Op<'a>,
    job: &'a str,
    token: u64,
    /// Its announced deadline; `None` when the history does not say.
    deadline: Option<u64>,
    /// The completion index of the first event that surely ended it (an
    /// accepted settle of its token, a reap naming its job).
    ended: u64,
    /// The invoke index of the first event that may have ended it (the
    /// same, or one in flight, or a settle or reap never answered).
    may_end: u64,
}

/// True for an op with no answer (info, or the history ends first): it may
/// have taken effect at any time after it was invoked.
fn unanswered(op: &Op<'_>) -> bool {
    op.done.is_none_or(|e| e.kind == EventKind::Info)
}

/// The `now_ms` of an answered lease call, granted or empty; `None` when
/// it is one of `moved` (a server clock may have moved while it read it).
fn now_of(op: &Op<'_>, moved: &BTreeSet<u64>) -> Option<u64> {
    let e = op.done.filter(|e| e.kind == EventKind::Ok)?;
    if moved.contains(&op.invoke.index) {
        return None;
    }
    e.value.as_ref()?.get("now_ms")?.as_u64()
}

/// The jobs enqueued twice on a queue that does not refuse a duplicate id
/// (a read said `dedup: false`): two messages under one id.
fn enqueued_twice<'a>(ops: &Ops<'a>) -> BTreeSet<&'a str> {
    if ops.promises_dedup() {
        return BTreeSet::new();
    }
    let mut enqueues: BTreeMap<&str, u64> = BTreeMap::new();
    for op in ops.of(F::Enqueue) {
        if let Some(job) = op.job() {
            *enqueues.entry(job).or_default() += 1;
        }
    }
    enqueues
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(job, _)| job)
        .collect()
}

/// Checks lease-exclusive. Counts: `leases` (lease calls answered, granted
/// or empty), `judged` (those answered with a time, each judged against
/// every earlier lease not known to have ended), `exercised` (of those, the
/// ones asked for while a job was held under a lease nothing had ended and
/// whose deadline was ahead), `unjudged` (granted leases of a job with an
/// earlier lease not known to have ended that the history cannot time or
/// order: see the module's notes).
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("lease-exclusive");
    for name in ["leases", "judged", "exercised", "unjudged"] {
        report.count(name, 0);
    }
    let mut calls: Vec<&Op<'_>> = ops.of(F::Lease).filter(|op| op.is_ok()).collect();
    calls.sort_by_key(|op| op.invoke.index);
    let leases = Leases::of(ops, &calls);
    for call in calls {
        report.count("leases", 1);
        leases.judge(&mut report, call);
    }
    report
}

/// The replay's view of a history's leases.
struct Leases<'a> {
    /// Every lease granted, in the order of its invocation, with its ends.
    grants: Vec<Grant<'a>>,
    /// job -> the positions of its grants in `grants`.
    by_job: BTreeMap<&'a str, Vec<usize>>,
    /// (job, token) -> the extends of that lease.
    extends: BTreeMap<(&'a str, u64), Vec<&'a Op<'a>>>,
    /// The lease calls whose time a server clock's move may have skewed:
    /// untimed.
    moved: BTreeSet<u64>,
    /// The jobs enqueued twice on a queue that does not refuse a
    /// duplicate id ([`enqueued_twice`]).
    twice: BTreeSet<&'a str>,
}

/// What the earlier leases and the grants in flight with it say of one
/// lease call.
#[derive(Default)]
struct Seen<'g, 'a> {
    /// Some job was held under a live lease when it was asked for.
    held: bool,
    /// The history cannot time or order a pair with an earlier lease.
    unjudged: bool,
    /// The earlier lease it broke, and that lease's deadline.
    broke: Option<(&'g Grant<'a>, u64)>,
}

impl<'a> Leases<'a> {
    /// Reads the grants of `ops`, their ends and extends, and which of
    /// `calls` are untimed.
    fn of(ops: &'a Ops<'a>, calls: &[&Op<'_>]) -> Leases<'a> {
        let mut grants: Vec<Grant<'_>> = ops
            .granted()
            .filter_map(|op| {
                let value = op.done.and_then(|e| e.value.as_ref());
                Some(Grant {
                    op,
                    job: op.job()?,
                    token: op.token()?,
                    deadline: value
                        .and_then(|v| v.get("deadline_ms")?.as_u64())
                        .filter(|d| *d > 0),
                    ended: u64::MAX,
                    may_end: u64::MAX,
                })
            })
            .collect();
        let mut by_job: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, g) in grants.iter().enumerate() {
            by_job.entry(g.job).or_default().push(i);
        }
        end_grants(ops.all(), &mut grants, &by_job);
        let mut extends: BTreeMap<(&str, u64), Vec<&Op<'_>>> = BTreeMap::new();
        for op in ops.of(F::Extend) {
            if let (Some(job), Some(token)) = (op.job(), op.token()) {
                extends.entry((job, token)).or_default().push(op);
            }
        }
        Leases {
            grants,
            by_job,
            extends,
            moved: ops.straddling(calls),
            twice: enqueued_twice(ops),
        }
    }

    /// The least deadline lease `g` may have had in force when `call` ran;
    /// `None` when the history cannot say. Its grant and each accepted
    /// extend of it sent before `call` completed set one; a setter is out
    /// of the running when another was sent after it completed and itself
    /// completed before `call` was invoked.
    fn deadline(&self, g: &Grant<'_>, call: &Op<'_>) -> Option<u64> {
        let mut setters = vec![(g.op.invoke.index, g.op.end(), g.deadline?)];
        for x in self.extends.get(&(g.job, g.token)).into_iter().flatten() {
            let sent_before = x.invoke.index < call.end();
            let after_grant = x.done.is_none_or(|e| e.index > g.op.invoke.index);
            if !(sent_before && after_grant) {
                continue;
            }
            if unanswered(x) {
                return None;
            }
            if x.outcome() == Some("extended") {
                let value = x.done.and_then(|e| e.value.as_ref());
                let d = value
                    .and_then(|v| v.get("deadline_ms")?.as_u64())
                    .filter(|d| *d > 0)?;
                setters.push((x.invoke.index, x.end(), d));
            }
        }
        let superseded = |end: u64| {
            setters
                .iter()
                .any(|(invoked, done, _)| end < *invoked && *done < call.invoke.index)
        };
        setters
            .iter()
            .filter(|(_, end, _)| !superseded(*end))
            .map(|(_, _, d)| *d)
            .min()
    }

    /// Judges lease call `call` (granted or empty) and counts it.
    fn judge(&self, report: &mut Report, call: &Op<'_>) {
        let now = now_of(call, &self.moved);
        let granted = (call.outcome() == Some("leased"))
            .then(|| call.job())
            .flatten();
        let mut seen = self.against_earlier(call, now, granted);
        self.against_together(&mut seen, call, granted);
        let Some(now) = now else {
            if granted.is_some() && (seen.unjudged || seen.broke.is_some()) {
                report.count("unjudged", 1);
            }
            return;
        };
        report.count("judged", 1);
        if let Some((g, d)) = seen.broke {
            report.count("exercised", 1);
            violate(report, call, now, g, d);
        } else if seen.unjudged {
            report.count("unjudged", 1);
        } else if seen.held {
            report.count("exercised", 1);
        }
    }

    /// The rule against the earlier leases no event had surely ended when
    /// `call` was invoked: a grant of one's job at `now` before its
    /// deadline, with nothing that may have ended it, breaks it.
    fn against_earlier(
        &self,
        call: &Op<'_>,
        now: Option<u64>,
        granted: Option<&str>,
    ) -> Seen<'_, 'a> {
        let mut seen = Seen::default();
        let earlier = self
            .grants
            .iter()
            .filter(|g| g.op.end() < call.invoke.index && g.ended >= call.invoke.index);
        for g in earlier {
            let d = self.deadline(g, call);
            let open = g.may_end >= call.end();
            if let (Some(now), Some(d), true) = (now, d, open) {
                seen.held |= now < d;
            }
            if granted != Some(g.job) {
                continue;
            }
            match (now, d) {
                (Some(now), Some(d)) if now >= d => {}
                (Some(_), Some(d)) if open && !self.twice.contains(g.job) => {
                    seen.broke = seen.broke.or(Some((g, d)))
                }
                _ => seen.unjudged = true,
            }
        }
        seen
    }

    /// The rule against a grant of the same job in flight with `call` (see
    /// [`Leases::together`]), reported once: by the later to complete.
    fn against_together<'g>(
        &'g self,
        seen: &mut Seen<'g, 'a>,
        call: &Op<'_>,
        granted: Option<&str>,
    ) {
        match granted.map_or(Together::Apart, |job| {
            self.together(&self.by_job[job], call)
        }) {
            Together::Broke(g, _) if self.twice.contains(g.job) => seen.unjudged = true,
            Together::Broke(g, d) if call.end() > g.op.end() => {
                seen.broke = seen.broke.or(Some((g, d)))
            }
            Together::Apart | Together::Broke(..) => {}
            Together::Unjudged => seen.unjudged = true,
        }
    }

    /// The grants among `ids` (of the job `call` was granted) in flight with
    /// `call`: a pair is a proven violation when, whichever ran first, the
    /// other ran (at its `now_ms`) before the first's `deadline` and nothing
    /// that may have ended the first was invoked before the other completed.
    fn together(&self, ids: &[usize], call: &Op<'_>) -> Together<'_, 'a> {
        let grants = &self.grants;
        let Some(me) = grants.iter().find(|g| std::ptr::eq(g.op, call)) else {
            return Together::Apart;
        };
        // `first`'s lease was live when `second` ran.
        let live = |first: &Grant<'_>, second: &Grant<'_>| {
            let (now, d) = (
                now_of(second.op, &self.moved),
                self.deadline(first, second.op),
            );
            let open = first.may_end >= second.op.end();
            matches!((now, d), (Some(now), Some(d)) if now < d && open)
        };
        let mut out = Together::Apart;
        for g in ids.iter().map(|&i| &grants[i]) {
            let overlap = !std::ptr::eq(g.op, call)
                && g.op.invoke.index < call.end()
                && g.op.end() > call.invoke.index;
            if !overlap {
                continue;
            }
            match self.deadline(g, call) {
                Some(d) if live(g, me) && live(me, g) => return Together::Broke(g, d),
                _ => out = Together::Unjudged,
            }
        }
        out
    }
}

/// Records that `call`, granted at `now`, broke grant `g`, live until `d`.
fn violate(report: &mut Report, call: &Op<'_>, now: u64, g: &Grant<'_>, d: u64) {
    let job = g.job;
    report.violate(
        Some(job),
        &[(call.end(), Role::Broke), (g.op.end(), Role::Earlier)],
        format!(
            "{job}: leased to {} at event {} at {now} ms, while {}'s lease (token {}, granted at event {}) was live until {d} ms, neither settled nor reaped{}",
            call.invoke.process,
            call.end(),
            g.op.invoke.process,
            g.token,
            g.op.end(),
            if g.op.end() > call.invoke.index { " (the two leases were in flight together: whichever ran first, the other was granted while it was live)" } else { "" },
        ),
    );
}

/// What the grants of a lease call's job in flight with it say.
enum Together<'g, 'a> {
    /// None was in flight with it.
    Apart,
    /// One was, and the pair may be legal: which ran first is unknown,
    /// and in some order the first had ended (or may have) or expired.
    Unjudged,
    /// This grant was in flight with it, and in either order the second
    /// was granted while the first was live (the first's deadline, in the
    /// order where this one ran first): a violation whichever ran first.
    Broke(&'g Grant<'a>, u64),
}

/// Each grant's ends: settles of its token and reaps of its job that
/// completed (or may complete) after it was invoked.
fn end_grants(all: &[Op<'_>], grants: &mut [Grant<'_>], by_job: &BTreeMap<&str, Vec<usize>>) {
    for op in all {
        let lost = unanswered(op);
        match op.f() {
            F::Complete | F::Fail if accepted(op) || lost => {
                let (Some(job), Some(token)) = (op.job(), op.token()) else {
                    continue;
                };
                for &i in by_job.get(job).into_iter().flatten() {
                    let g = &mut grants[i];
                    if g.token == token && op.done.is_none_or(|e| e.index > g.op.invoke.index) {
                        end(g, op, lost);
                    }
                }
            }
            F::Reap if op.is_ok() => {
                let reaped = op
                    .done
                    .and_then(|e| e.value.as_ref()?.get("reaped")?.as_array().cloned());
                for r in reaped.unwrap_or_default() {
                    let Some(id) = r.get("id").and_then(|v| v.as_str()) else {
                        continue;
                    };
                    for &i in by_job.get(id).into_iter().flatten() {
                        let g = &mut grants[i];
                        if op.end() > g.op.invoke.index {
                            end(g, op, false);
                        }
                    }
                }
            }
            // A reap never answered may have taken any job back.
            F::Reap if lost => {
                for g in grants.iter_mut() {
                    end(g, op, true);
                }
            }
            _ => {}
        }
    }
}

/// Notes that `op` ends lease `g`: surely (by its completion) unless
/// `maybe`, and possibly from when it was invoked.
fn end(g: &mut Grant<'_>, op: &Op<'_>, maybe: bool) {
    g.may_end = g.may_end.min(op.invoke.index);
    if !maybe {
        g.ended = g.ended.min(op.end());
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

    /// A lease call answered at `now`: `job` with `token` until `deadline`,
    /// or empty.
    fn lease(rec: &Recorder, w: &str, job: Option<(&str, u64)>, now: u64, deadline: u64) {
        let op = rec.invoke(w, F::Lease, None, None);
        match job {
            Some((job, token)) => rec.ok(
                op,
                Some(job),
                Some(token),
                json!({"outcome": "leased", "deadline_ms": deadline, "payload": "p", "now_ms": now}),
            ),
            None => rec.ok(op, None, None, json!({"outcome": "empty", "now_ms": now})),
        }
    }

    fn settle(rec: &Recorder, w: &str, f: F, job: &str, token: u64, outcome: &str) {
        let op = rec.invoke(w, f, Some(job), Some(token));
        rec.ok(op, None, None, json!({ "outcome": outcome }));
    }

    fn reap(rec: &Recorder, job: &str, now: u64) {
        let op = rec.invoke("reaper", F::Reap, None, None);
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "reaped", "now_ms": now, "reaped": [{"id": job, "to": "pending"}]}),
        );
    }

    /// Two lease calls in flight together, both answered at `now`: w0's
    /// and w1's grants (or empty answers), until `deadline`.
    fn together(rec: &Recorder, grants: [Option<(&str, u64)>; 2], now: u64, deadline: u64) {
        let ops = ["w0", "w1"].map(|w| rec.invoke(w, F::Lease, None, None));
        for (op, grant) in ops.into_iter().zip(grants) {
            let value = match grant {
                Some(_) => {
                    json!({"outcome": "leased", "deadline_ms": deadline, "payload": "p", "now_ms": now})
                }
                None => json!({"outcome": "empty", "now_ms": now}),
            };
            rec.ok(op, grant.map(|g| g.0), grant.map(|g| g.1), value);
        }
    }

    #[test]
    fn lease_exclusive_breaks_when_two_leases_in_flight_together_both_get_one_job() {
        let rec = Recorder::in_memory();
        together(&rec, [Some(("JOB-1", 1)), Some(("JOB-1", 1))], 1_000, 1_100);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
        assert_eq!(r.violations.len(), 1, "reported once: {r:?}");
        assert!(r.violations[0].text.contains("in flight together"), "{r:?}");
    }

    #[test]
    fn lease_exclusive_holds_when_two_leases_in_flight_together_get_one_job_and_nothing() {
        for grants in [
            [Some(("JOB-1", 1)), None],
            [None, Some(("JOB-1", 1))],
            [Some(("JOB-1", 1)), Some(("JOB-2", 1))],
        ] {
            let rec = Recorder::in_memory();
            together(&rec, grants, 1_000, 1_100);
            let r = check(&rec.events());
            assert_ne!(r.verdict, Verdict::Invalid, "{grants:?}: {r:?}");
            assert_eq!(r.counts["unjudged"], 0, "{grants:?}: {r:?}");
        }
    }

    #[test]
    fn lease_exclusive_leaves_unjudged_two_grants_in_flight_together_when_one_may_have_expired() {
        // The first's lease ended at its deadline, 1_000, the time both ran:
        // in that order the second was legal.
        let rec = Recorder::in_memory();
        together(&rec, [Some(("JOB-1", 1)), Some(("JOB-1", 2))], 1_000, 1_000);
        let r = check(&rec.events());
        assert_ne!(r.verdict, Verdict::Invalid, "{r:?}");
        assert_eq!(r.counts["unjudged"], 2, "{r:?}");
    }

    #[test]
    fn lease_exclusive_breaks_when_a_second_lease_is_granted_before_the_first_deadline() {
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 1)), 1_000, 1_100);
        lease(&rec, "w1", Some(("JOB-1", 2)), 1_050, 1_150);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
        assert_eq!(r.violations.len(), 1);
        let v = &r.violations[0];
        assert_eq!(v.job.as_deref(), Some("JOB-1"));
        assert_eq!(v.event(Role::Broke), Some(3));
        assert_eq!(v.event(Role::Earlier), Some(1));
        assert_eq!((r.counts["exercised"], r.counts["judged"]), (1, 2));
        // A crash of the holder does not end its lease.
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 1)), 1_000, 1_100);
        let op = rec.invoke("w0", F::Crash, None, None);
        rec.ok(op, None, None, json!({"outcome": "crashed"}));
        lease(&rec, "w1", Some(("JOB-1", 2)), 1_099, 1_199);
        assert_eq!(check(&rec.events()).verdict, Verdict::Invalid);
    }

    #[test]
    fn lease_exclusive_breaks_when_the_earlier_lease_was_extended_past_the_later_one() {
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 7)), 1_000, 1_100);
        let op = rec.invoke("w0", F::Extend, Some("JOB-1"), Some(7));
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "extended", "deadline_ms": 1_180}),
        );
        lease(&rec, "w1", Some(("JOB-1", 3)), 1_150, 1_250);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
        // An extend answered only after the later lease was asked for may
        // have come after it: the grant's deadline is judged, and held.
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 7)), 1_000, 1_100);
        let op = rec.invoke("w0", F::Extend, Some("JOB-1"), Some(7));
        lease(&rec, "w1", Some(("JOB-1", 3)), 1_150, 1_250);
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "extended", "deadline_ms": 1_180}),
        );
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
    }

    #[test]
    fn lease_exclusive_holds_after_a_settle_a_reap_or_the_deadline() {
        // After an accepted fail of the earlier lease, and after an
        // accepted complete (a redelivery the queue may make).
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 1)), 1_000, 1_100);
        settle(&rec, "w0", F::Fail, "JOB-1", 1, "requeued");
        lease(&rec, "w1", Some(("JOB-1", 2)), 1_010, 1_110);
        settle(&rec, "w1", F::Complete, "JOB-1", 2, "settled");
        lease(&rec, "w0", Some(("JOB-1", 3)), 1_020, 1_120);
        // After the reaper took it back.
        reap(&rec, "JOB-1", 1_030);
        lease(&rec, "w1", Some(("JOB-1", 4)), 1_030, 1_130);
        // At its deadline, with nothing ending it.
        lease(&rec, "w0", Some(("JOB-1", 5)), 1_130, 1_230);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!(r.counts["judged"], 5);
        assert_eq!(r.counts["unjudged"], 0);
    }

    #[test]
    fn lease_exclusive_counts_a_lease_asked_for_while_a_job_was_held_as_exercised() {
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 1)), 1_000, 1_100);
        // Another job, and nothing: each could have been JOB-1.
        lease(&rec, "w1", Some(("JOB-2", 1)), 1_010, 1_110);
        lease(&rec, "w2", None, 1_020, 0);
        // Past both deadlines: nothing was held.
        lease(&rec, "w2", None, 1_200, 0);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!((r.counts["exercised"], r.counts["judged"]), (2, 4));
        // A history where every lease ends before the next: not exercised.
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 1)), 1_000, 1_100);
        settle(&rec, "w0", F::Complete, "JOB-1", 1, "settled");
        lease(&rec, "w0", None, 1_010, 0);
        let r = check(&rec.events());
        assert_eq!(r.counts["exercised"], 0, "{r:?}");
    }

    #[test]
    fn lease_exclusive_leaves_unjudged_what_the_history_cannot_time_or_order() {
        // The later lease carries no time (the chaos runner's).
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 1)), 1_000, 1_100);
        let op = rec.invoke("w1", F::Lease, None, None);
        rec.ok(
            op,
            Some("JOB-1"),
            Some(2),
            json!({"outcome": "leased", "deadline_ms": 1_150, "payload": "p"}),
        );
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!((r.counts["unjudged"], r.counts["exercised"]), (1, 0));
        // A fail of the earlier lease in flight while the later one was
        // asked for may have ended it first.
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 1)), 1_000, 1_100);
        let fail = rec.invoke("w0", F::Fail, Some("JOB-1"), Some(1));
        lease(&rec, "w1", Some(("JOB-1", 2)), 1_010, 1_110);
        rec.ok(fail, None, None, json!({"outcome": "requeued"}));
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!(r.counts["unjudged"], 1);
        // An extend of the earlier lease never answered: its deadline is
        // unknown.
        let rec = Recorder::in_memory();
        lease(&rec, "w0", Some(("JOB-1", 1)), 1_000, 1_100);
        let op = rec.invoke("w0", F::Extend, Some("JOB-1"), Some(1));
        rec.info(op, "timeout".into());
        lease(&rec, "w1", Some(("JOB-1", 2)), 1_010, 1_110);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
        assert_eq!(r.counts["unjudged"], 1);
    }
}
