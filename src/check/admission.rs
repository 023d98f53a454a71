//! **admission**: a duplicate enqueue is refused and changes nothing, and
//! a job is never delivered that no enqueue admitted or attempted. At most
//! one enqueue per id is acknowledged as `enqueued`, every lease of a job
//! carries the payload of the enqueue that admitted it, and — Jepsen's
//! total-queue *unexpected* — every job leased, settled or found in the
//! final read had an enqueue invoked before (its outcome may be unknown:
//! an unacknowledged enqueue that shows up is *recovered*, counted by
//! no-loss, not unexpected).
//!
//! A queue that does not refuse a duplicate id (its hello's `dedup: false`,
//! which its reads carry into the history as `"dedup": false`) does not
//! promise the first part: a second enqueue of an id is a second message.
//! The harness then never enqueues an id twice, and this checker does not
//! judge "admitted twice": it counts `dedup_promised=0` and
//! `duplicate_refusal_judged=0` and judges the rest (nothing delivered
//! that no enqueue attempted, payloads).

use std::collections::BTreeMap;

use super::fenced_settlement::accepted;
use super::{final_read, ops, Op, Report, Role};
use crate::history::{Event, F};

/// Checks admission. Counts: `admitted`, `duplicates_refused`,
/// `unexpected` (jobs delivered, settled or read with no enqueue invoked
/// before); and, for a queue that does not promise to refuse duplicates,
/// `dedup_promised=0 duplicate_refusal_judged=0`.
pub fn check(history: &[Event]) -> Report {
    let mut report = Report::new("admission");
    report.count("unexpected", 0);
    let all = ops(history);
    let dedup = promises_dedup(&all);
    if !dedup {
        report.count("dedup_promised", 0);
        report.count("duplicate_refusal_judged", 0);
    }
    let mut admitted: BTreeMap<&str, (u64, Option<&serde_json::Value>)> = BTreeMap::new();
    // job -> index of its first enqueue invoke.
    let mut attempted: BTreeMap<&str, u64> = BTreeMap::new();
    for op in &all {
        if op.f() != F::Enqueue {
            continue;
        }
        let job = op.job().unwrap_or_default();
        attempted.entry(job).or_insert(op.invoke.index);
        let payload = op.invoke.value.as_ref().and_then(|v| v.get("payload"));
        match op.outcome() {
            Some("enqueued") => {
                report.count("admitted", 1);
                if let Some((first, _)) = admitted.get(job) {
                    if !dedup {
                        // A second message: the queue never promised
                        // otherwise. Payloads are judged against the first.
                        continue;
                    }
                    report.violate(
                        Some(job),
                        &[(*first, Role::First), (op.end(), Role::Second)],
                        format!("{job}: admitted twice (events {first} and {})", op.end()),
                    );
                } else {
                    admitted.insert(job, (op.end(), payload));
                }
            }
            Some("duplicate") => report.count("duplicates_refused", 1),
            _ => {}
        }
    }
    let mut unexpected: BTreeMap<&str, (u64, String)> = BTreeMap::new();
    for op in &all {
        let seen = match op.f() {
            F::Lease if op.outcome() == Some("leased") => "leased",
            F::Complete | F::Fail | F::Extend if accepted(op) => "settled",
            _ => continue,
        };
        let job = op.job().unwrap_or_default();
        if attempted.get(job).is_none_or(|at| *at > op.end()) {
            unexpected.entry(job).or_insert_with(|| {
                (
                    op.end(),
                    format!(
                        "{job}: {seen} by {} at event {}, but no enqueue of it was invoked before (unexpected)",
                        op.invoke.process,
                        op.end()
                    ),
                )
            });
        }
    }
    let read_at = all
        .iter()
        .rev()
        .find(|op| op.f() == F::Read && op.is_ok())
        .map(Op::end);
    for (job, state) in final_read(history).unwrap_or_default() {
        if !attempted.contains_key(job.as_str()) && !unexpected.contains_key(job.as_str()) {
            report.count("unexpected", 1);
            report.violate(
                Some(&job),
                &read_at.map(|at| (at, Role::FinalRead)).into_iter().collect::<Vec<_>>(),
                format!(
                    "{job}: {state} in the final read, but no enqueue of it was ever invoked (unexpected)"
                ),
            );
        }
    }
    for (job, (at, what)) in unexpected {
        report.count("unexpected", 1);
        report.violate(Some(job), &[(at, Role::Broke)], what);
    }
    for op in &all {
        if op.f() != F::Lease || op.outcome() != Some("leased") {
            continue;
        }
        let job = op.job().unwrap_or_default();
        let got = op.done.and_then(|e| e.value.as_ref()?.get("payload"));
        if let Some((at, Some(want))) = admitted.get(job) {
            if got.is_some_and(|g| g != *want) {
                report.violate(
                    Some(job),
                    &[(op.end(), Role::Broke), (*at, Role::Earlier)],
                    format!(
                        "{job}: leased at event {} with payload {} but admitted at event {at} with {}",
                        op.end(),
                        got.expect("checked"),
                        want
                    ),
                );
            }
        }
    }
    report
}

/// False when a read of the history says the queue does not refuse a
/// duplicate id (`"dedup": false`, from its hello).
fn promises_dedup(all: &[super::Op<'_>]) -> bool {
    !all.iter().any(|op| {
        op.f() == F::Read
            && op
                .done
                .and_then(|e| e.value.as_ref()?.get("dedup")?.as_bool())
                == Some(false)
    })
}
