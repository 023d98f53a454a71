//! **fenced-settlement**: a settle carrying token t is accepted only if t is
//! the current token of an active job. Lease t stops being current when a
//! newer lease of the job is granted, when the reaper takes the job back, or
//! when a settle of lease t is accepted; any settle (complete, fail, extend)
//! of lease t accepted after that — invoked after the ending event
//! completed, in real time — is a violation.

use std::collections::BTreeMap;

use super::{ops, Op, Report};
use crate::history::{Event, F};

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
    /// A lease with this token was granted.
    Grant(u64),
    /// A settle of this token was accepted (complete or fail).
    Settle(u64, String),
    /// The reaper took the job back; the reap was invoked at this index.
    Reap(u64),
}

/// Checks fenced-settlement. Counts: `judged` (settles tried: completes,
/// fails, extends), `accepted`, `refused` (fenced settles),
/// `already_settled`.
pub fn check(history: &[Event]) -> Report {
    let mut report = Report::new("fenced-settlement");
    // job -> token -> index of the event that ended the lease (first one).
    let mut ended: BTreeMap<String, BTreeMap<u64, (u64, String)>> = BTreeMap::new();
    let all = ops(history);
    // Ending events, ordered by completion index. Each names the lease it
    // ends: a grant ends every older lease of its job; an accepted settle
    // ends its own token (not "the current one": a newer grant may complete
    // first in the history although it happened later on the server); the
    // reaper ends the latest lease granted before the reap was invoked — a
    // lease granted concurrently with the reap may be the one it took or
    // not, and a verdict of invalid must not rest on a guess.
    let mut endings: Vec<(u64, String, Ending)> = Vec::new();
    for op in &all {
        let Some(job) = op.job() else { continue };
        match op.f() {
            F::Lease if op.is_ok() && op.outcome() == Some("leased") => {
                if let Some(t) = op.token() {
                    endings.push((op.end(), job.to_owned(), Ending::Grant(t)));
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
    for op in &all {
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
    // job -> (token, index of the grant's completion), in grant order.
    let mut granted: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    // Replay endings in order, recording for each lease when it ended.
    let mut ends_iter = endings.into_iter().peekable();
    let mut settles: Vec<&Op<'_>> = all
        .iter()
        .filter(|op| matches!(op.f(), F::Complete | F::Fail | F::Extend))
        .collect();
    settles.sort_by_key(|op| op.invoke.index);
    report.count("judged", settles.len() as u64);
    for op in settles {
        // Apply every ending that completed before this settle was invoked.
        while let Some((at, _, _)) = ends_iter.peek() {
            if *at >= op.invoke.index {
                break;
            }
            let (at, job, ending) = ends_iter.next().expect("peeked");
            let tokens = granted.entry(job.clone()).or_default();
            let end = ended.entry(job).or_default();
            match ending {
                Ending::Grant(t) => {
                    // A newer lease ends every older one.
                    for (old, _) in tokens.iter().copied().filter(|(old, _)| *old < t) {
                        end.entry(old).or_insert((at, "a newer lease".into()));
                    }
                    tokens.push((t, at));
                }
                Ending::Settle(t, why) => {
                    end.entry(t).or_insert((at, why));
                }
                Ending::Reap(invoked) => {
                    let before = tokens
                        .iter()
                        .filter(|(_, granted_at)| *granted_at < invoked)
                        .map(|(t, _)| *t)
                        .max();
                    if let Some(t) = before {
                        end.entry(t).or_insert((at, "the reaper".into()));
                    }
                }
            }
        }
        match op.outcome() {
            Some("fenced") => report.count("refused", 1),
            Some("already_settled") => report.count("already_settled", 1),
            _ => {}
        }
        if !accepted(op) {
            continue;
        }
        report.count("accepted", 1);
        let (Some(job), Some(token)) = (op.job(), op.token()) else {
            continue;
        };
        if let Some((at, why)) = ended.get(job).and_then(|m| m.get(&token)) {
            report.violate(format!(
                "{job}: {:?} with token {token} by {} accepted at event {}, but that lease had ended at event {at} ({why})",
                op.f(),
                op.invoke.process,
                op.end()
            ));
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::check::Verdict;
    use crate::history::Recorder;

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
