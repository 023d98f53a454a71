//! **fenced-settlement**: a settle carrying token t is accepted only if t is
//! the current token of an active job. Lease t stops being current when a
//! newer lease of the job is granted, when the reaper takes the job back, or
//! when a settle of lease t is accepted; any settle (complete, fail, extend)
//! of lease t accepted after that — invoked after the ending event
//! completed, in real time — is a violation.
//!
//! "Newer" is by number when the queue's tokens rise with its deliveries
//! (the reference queue's token is its attempts counter), and by the
//! history when a lease's value says `"tokens": "opaque"` (a random lock
//! token only names its delivery): a grant then ends every lease of its
//! job granted before it was invoked, and the reaper the one granted last.

use std::collections::BTreeMap;

use super::{Op, Ops, Report, Role};
use crate::history::F;

/// The outcomes of a settle that mean "accepted, something changed".
pub fn accepted(op: &Op<'_>) -> bool {
    matches!(
        op.outcome(),
        Some("settled" | "requeued" | "dead" | "extended")
    )
}

/// What ended a lease, in the replay of [`check`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ending {
    /// A lease with this token was granted; the grant was invoked at this
    /// index; its tokens are opaque (ordered by the history, not by number).
    Grant(u64, u64, bool),
    /// A settle of this token was accepted (complete or fail).
    Settle(u64, String),
    /// The reaper took the job back; the reap was invoked at this index.
    Reap(u64),
}

/// Checks fenced-settlement. Counts: `judged` (settles tried: completes,
/// fails, extends), `exercised` (those sent after the reaper or a newer
/// lease had ended their lease: the only settles that can break it),
/// `accepted`, `refused` (fenced settles), `already_settled`.
///
/// The settles are judged in the order they were invoked; before each,
/// every ending that completed before it was invoked is applied, so that
/// a settle is judged against the leases that had ended when it was sent.
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("fenced-settlement");
    let all = ops.all();
    let mut endings = endings(all).into_iter().peekable();
    let mut leases = Leases::default();
    let mut settles: Vec<&Op<'_>> = all
        .iter()
        .filter(|op| matches!(op.f(), F::Complete | F::Fail | F::Extend))
        .collect();
    settles.sort_by_key(|op| op.invoke.index);
    report.count("judged", settles.len() as u64);
    report.count("exercised", 0);
    for op in settles {
        while let Some((at, job, ending)) = endings.next_if(|(at, _, _)| *at < op.invoke.index) {
            leases.end(at, job, ending);
        }
        judge(&mut report, all, &leases, op);
    }
    report
}

/// The events that end leases, each with its completion index and job,
/// ordered by completion index. Each names the lease it ends: a grant
/// ends every older lease of its job; an accepted settle ends its own
/// token (not "the current one": a newer grant may complete first in the
/// history although it happened later on the server); the reaper ends the
/// latest lease granted before the reap was invoked — a lease granted
/// concurrently with the reap may be the one it took or not, and a verdict
/// of invalid must not rest on a guess.
fn endings(all: &[Op<'_>]) -> Vec<(u64, String, Ending)> {
    let mut endings: Vec<(u64, String, Ending)> = Vec::new();
    for op in all {
        let Some(job) = op.job() else { continue };
        match op.f() {
            F::Lease if op.is_ok() && op.outcome() == Some("leased") => {
                if let Some(t) = op.token() {
                    let grant = Ending::Grant(t, op.invoke.index, op.opaque_token());
                    endings.push((op.end(), job.to_owned(), grant));
                }
            }
            F::Complete | F::Fail if accepted(op) => {
                if let Some(t) = op.token() {
                    endings.push((
                        op.end(),
                        job.to_owned(),
                        Ending::Settle(t, format!("{:?}", op.f())),
                    ));
                }
            }
            _ => {}
        }
    }
    for op in all {
        if op.f() == F::Reap && op.is_ok() {
            let reaped = op
                .done
                .and_then(|e| e.value.as_ref()?.get("reaped")?.as_array().cloned());
            for r in reaped.unwrap_or_default() {
                if let Some(id) = r.get("id").and_then(|v| v.as_str()) {
                    endings.push((op.end(), id.to_owned(), Ending::Reap(op.invoke.index)));
                }
            }
        }
    }
    endings.sort();
    endings
}

/// The replay's state: the leases granted so far and when each ended.
#[derive(Default)]
struct Leases {
    /// job -> token -> (index of the event that ended the lease (the
    /// first one), what it was).
    ended: BTreeMap<String, BTreeMap<u64, (u64, String)>>,
    /// job -> (token, index of the grant's completion, opaque), in grant
    /// order.
    granted: BTreeMap<String, Vec<(u64, u64, bool)>>,
}

impl Leases {
    /// Applies `ending`, which completed at event `at`, to `job`'s leases.
    fn end(&mut self, at: u64, job: String, ending: Ending) {
        let tokens = self.granted.entry(job.clone()).or_default();
        let end = self.ended.entry(job).or_default();
        match ending {
            Ending::Grant(t, invoked, opaque) => {
                // A newer lease ends every older one: older by number
                // when tokens rise; when they are opaque, granted
                // before this grant was invoked (two grants in flight
                // together ran in either order).
                let older = |(old, granted_at, _): &(u64, u64, bool)| match opaque {
                    false => *old < t,
                    true => *old != t && *granted_at < invoked,
                };
                for (old, _, _) in tokens.iter().copied().filter(older) {
                    end.entry(old).or_insert((at, "a newer lease".into()));
                }
                tokens.push((t, at, opaque));
            }
            Ending::Settle(t, why) => {
                end.entry(t).or_insert((at, why));
            }
            Ending::Reap(invoked) => {
                // The latest: by number when tokens rise, by the
                // history when they are opaque.
                let seen = tokens
                    .iter()
                    .filter(|(_, granted_at, _)| *granted_at < invoked);
                let before = match seen.clone().any(|(_, _, opaque)| *opaque) {
                    false => seen.map(|(t, _, _)| *t).max(),
                    true => seen
                        .max_by_key(|(_, granted_at, _)| *granted_at)
                        .map(|l| l.0),
                };
                if let Some(t) = before {
                    end.entry(t).or_insert((at, "the reaper".into()));
                }
            }
        }
    }

    /// When `job`'s lease `token` had ended, and what ended it.
    fn ended(&self, job: &str, token: u64) -> Option<&(u64, String)> {
        self.ended.get(job).and_then(|m| m.get(&token))
    }
}

/// Counts settle `op`'s outcome, and reports it when it was accepted for a
/// lease that had ended before it was invoked.
fn judge(report: &mut Report, all: &[Op<'_>], leases: &Leases, op: &Op<'_>) {
    if let (Some(job), Some(token)) = (op.job(), op.token()) {
        let stale = leases
            .ended(job, token)
            .is_some_and(|(_, why)| matches!(why.as_str(), "the reaper" | "a newer lease"));
        report.count("exercised", u64::from(stale));
    }
    match op.outcome() {
        Some("fenced") => report.count("refused", 1),
        Some("already_settled") => report.count("already_settled", 1),
        _ => {}
    }
    if !accepted(op) {
        return;
    }
    report.count("accepted", 1);
    let (Some(job), Some(token)) = (op.job(), op.token()) else {
        return;
    };
    let Some((at, why)) = leases.ended(job, token) else {
        return;
    };
    let mut events = vec![(op.end(), Role::StaleSettle), (*at, Role::LeaseEnded)];
    if let Some(current) = current_lease(all, job, token, op.end()) {
        events.push((current, Role::CurrentLease));
    }
    report.violate(
        Some(job),
        &events,
        format!(
            "{job}: {:?} with token {token} by {} accepted at event {}, but that lease had ended at event {at} ({why})",
            op.f(),
            op.invoke.process,
            op.end()
        ),
    );
}

/// The lease a stale settle of `job`'s token `token`, accepted at event
/// `settled`, should have lost to: the newest grant of the job with a
/// higher token completed before it (none when the reaper or the lease's
/// own settle ended it and no newer lease was granted yet).
fn current_lease(all: &[Op<'_>], job: &str, token: u64, settled: u64) -> Option<u64> {
    all.iter()
        .filter(|op| op.f() == F::Lease && op.is_ok() && op.outcome() == Some("leased"))
        .filter(|op| op.job() == Some(job) && op.token().is_some_and(|t| t > token))
        .map(Op::end)
        .filter(|end| *end < settled)
        .max()
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

    /// A reap invoked before a lease was granted, whose reply arrives after
    /// the grant's (the server was paused with both in flight): the reap
    /// took the older, unseen lease, so the new holder's ack is legitimate.
    #[test]
    fn a_reap_concurrent_with_a_grant_does_not_end_the_new_lease() {
        let rec = Recorder::in_memory();
        let reap = rec.invoke("reaper", F::Reap, None, None);
        let lease = rec.invoke("w0", F::Lease, None, None);
        rec.ok(lease, Some("JOB-1"), Some(2), json!({"outcome": "leased"}));
        rec.ok(
            reap,
            None,
            None,
            json!({"outcome": "reaped", "reaped": [{"id": "JOB-1", "to": "pending"}]}),
        );
        let ack = rec.invoke("w0", F::Complete, Some("JOB-1"), Some(2));
        rec.ok(ack, None, None, json!({"outcome": "settled"}));
        let report = check(&rec.events());
        assert_eq!(report.verdict, Verdict::Valid, "{:?}", report.violations);
    }

    /// The same reap invoked after the grant completed may well have taken
    /// that lease: an ack accepted after it is a violation.
    #[test]
    fn a_reap_after_a_grant_ends_that_lease() {
        let rec = Recorder::in_memory();
        let lease = rec.invoke("w0", F::Lease, None, None);
        rec.ok(lease, Some("JOB-1"), Some(2), json!({"outcome": "leased"}));
        let reap = rec.invoke("reaper", F::Reap, None, None);
        rec.ok(
            reap,
            None,
            None,
            json!({"outcome": "reaped", "reaped": [{"id": "JOB-1", "to": "pending"}]}),
        );
        let ack = rec.invoke("w0", F::Complete, Some("JOB-1"), Some(2));
        rec.ok(ack, None, None, json!({"outcome": "settled"}));
        assert_eq!(check(&rec.events()).verdict, Verdict::Invalid);
    }

    /// A fail accepted for lease 1 whose reply arrives after the grant of
    /// lease 2 ends lease 1, not lease 2.
    #[test]
    fn an_accepted_settle_ends_its_own_token_not_a_newer_one() {
        let rec = Recorder::in_memory();
        let fail = rec.invoke("w1", F::Fail, Some("JOB-1"), Some(1));
        let lease = rec.invoke("w2", F::Lease, None, None);
        rec.ok(lease, Some("JOB-1"), Some(2), json!({"outcome": "leased"}));
        rec.ok(fail, None, None, json!({"outcome": "requeued"}));
        let ack = rec.invoke("w2", F::Complete, Some("JOB-1"), Some(2));
        rec.ok(ack, None, None, json!({"outcome": "settled"}));
        let report = check(&rec.events());
        assert_eq!(report.verdict, Verdict::Valid, "{:?}", report.violations);
    }
}
