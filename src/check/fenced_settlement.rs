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

/// Checks fenced-settlement. Counts: `accepted`, `refused` (fenced
/// settles), `already_settled`.
pub fn check(history: &[Event]) -> Report {
    let mut report = Report::new("fenced-settlement");
    // job -> token -> index of the event that ended the lease (first one).
    let mut ended: BTreeMap<String, BTreeMap<u64, (u64, String)>> = BTreeMap::new();
    // job -> tokens granted so far, in order.
    let mut granted: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let all = ops(history);
    // Ending events, ordered by completion index.
    let mut endings: Vec<(u64, String, Option<u64>, String)> = Vec::new();
    for op in &all {
        let Some(job) = op.job() else { continue };
        match op.f() {
            F::Lease if op.is_ok() && op.outcome() == Some("leased") => {
                if let Some(t) = op.token() {
                    endings.push((op.end(), job.to_owned(), Some(t), "a newer lease".into()));
                }
            }
            F::Complete | F::Fail if accepted(op) => {
                endings.push((op.end(), job.to_owned(), None, format!("{:?}", op.f())));
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
                    endings.push((op.end(), id.to_owned(), None, "the reaper".into()));
                }
            }
        }
    }
    endings.sort();
    // Replay endings in order, recording for each lease when it ended.
    let mut ends_iter = endings.into_iter().peekable();
    let mut settles: Vec<&Op<'_>> = all
        .iter()
        .filter(|op| matches!(op.f(), F::Complete | F::Fail | F::Extend))
        .collect();
    settles.sort_by_key(|op| op.invoke.index);
    for op in settles {
        // Apply every ending that completed before this settle was invoked.
        while let Some((at, _, _, _)) = ends_iter.peek() {
            if *at >= op.invoke.index {
                break;
            }
            let (at, job, token, why) = ends_iter.next().expect("peeked");
            let tokens = granted.entry(job.clone()).or_default();
            let current = tokens.last().copied();
            let end = ended.entry(job).or_default();
            match token {
                Some(t) => {
                    // A newer lease ends every older one.
                    for old in tokens.iter().copied().filter(|old| *old < t) {
                        end.entry(old).or_insert((at, why.clone()));
                    }
                    tokens.push(t);
                }
                None => {
                    if let Some(c) = current {
                        end.entry(c).or_insert((at, why));
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
