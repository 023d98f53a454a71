//! **no-loss**: every job whose enqueue was acknowledged ends, after faults
//! heal and workers drain, `done` or `dead`. Judged on the last read of the
//! whole queue; without one the verdict is unknown.
//!
//! Like Jepsen's total-queue checker it also counts the jobs *recovered*:
//! enqueues whose outcome was unknown (or refused as a duplicate of an
//! earlier attempt) that showed up anyway, delivered by a lease or present
//! in the final read. Recovered is counted, not a failure.
//!
//! A job whose enqueue was not acknowledged but that the history proves
//! existed — a lease delivered it, or a read of the queue showed it — is
//! *owed* the same as an acknowledged one: it was recovered, and it must
//! still end `done` or `dead`; one that vanishes after is lost, named.
//!
//! The final read is not trusted on its own word: a job read `done` must
//! have been settled by a complete in the history, or could have been (a
//! complete answered ok and not refused, or whose answer is unknown). A
//! job read `done` that no complete could have settled is a *phantom done*
//! and a violation: the queue claims work that nobody did, which hides a
//! loss as well as any other.

use std::collections::{BTreeMap, BTreeSet};

use super::{Op, Ops, Report, Role, Verdict};
use crate::history::{EventKind, F};

/// True when `op` is a complete that settled its job or could have: ok
/// and not refused (`fenced`, `missing`), or with an unknown outcome.
pub(crate) fn could_settle(op: &Op<'_>) -> bool {
    if op.f() != F::Complete {
        return false;
    }
    match op.done.map(|e| e.kind) {
        None | Some(EventKind::Info) => true,
        Some(EventKind::Ok) => !matches!(op.outcome(), Some("fenced" | "missing")),
        Some(EventKind::Fail | EventKind::Invoke) => false,
    }
}

/// Checks no-loss. Counts: `attempted` (jobs with an enqueue invoked),
/// `acknowledged`, `done`, `dead`, `lost`, `recovered`, `phantom_done`,
/// `unacknowledged` (enqueues whose outcome is unknown: not counted
/// lost unless proven), `proven` (of those, jobs a lease or a read shows
/// existed: owed like an acknowledged job) and `judged` (the jobs owed:
/// acknowledged or proven).
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("no-loss");
    for name in [
        "attempted",
        "acknowledged",
        "done",
        "dead",
        "lost",
        "recovered",
        "phantom_done",
    ] {
        report.count(name, 0);
    }
    let all = ops.all();
    let mut attempted = BTreeSet::new();
    // job -> the completion of its first acknowledged enqueue.
    let mut acknowledged: BTreeMap<&str, u64> = BTreeMap::new();
    let mut delivered = BTreeSet::new();
    // Jobs any read of the queue showed.
    let mut seen = BTreeSet::new();
    // job -> the index of a complete that settled it or could have.
    let mut settlers: BTreeMap<&str, u64> = BTreeMap::new();
    for op in all {
        let job = op.job().unwrap_or_default();
        match op.f() {
            F::Enqueue => {
                attempted.insert(job);
                match (op.outcome(), op.done.map(|e| e.kind)) {
                    (Some("enqueued"), _) => {
                        acknowledged.entry(job).or_insert(op.end());
                    }
                    (_, Some(EventKind::Info)) | (_, None) => report.count("unacknowledged", 1),
                    _ => {}
                }
            }
            F::Lease if op.outcome() == Some("leased") => {
                delivered.insert(job);
            }
            F::Complete if could_settle(op) => {
                settlers.entry(job).or_insert(op.invoke.index);
            }
            F::Read if op.is_ok() => {
                let jobs = op
                    .done
                    .and_then(|e| e.value.as_ref()?.get("jobs")?.as_object());
                seen.extend(jobs.into_iter().flat_map(|j| j.keys().map(String::as_str)));
            }
            _ => {}
        }
    }
    report.count("attempted", attempted.len() as u64);
    report.count("acknowledged", acknowledged.len() as u64);
    // Not acknowledged, but proven to exist: owed all the same.
    let proven: BTreeSet<&str> = attempted
        .iter()
        .copied()
        .filter(|id| !acknowledged.contains_key(id))
        .filter(|id| delivered.contains(id) || seen.contains(id))
        .collect();
    report.count("proven", proven.len() as u64);
    report.count("judged", (acknowledged.len() + proven.len()) as u64);
    let Some(states) = ops.final_states() else {
        report.verdict = Verdict::Unknown;
        report.note("no final read of the queue: cannot tell what was lost".into());
        return report;
    };
    // The read the states come from.
    let read_at = ops.final_read().map_or(0, Op::end);
    for (id, enqueued_at) in &acknowledged {
        match states.get(*id).map(String::as_str) {
            Some("done") if settlers.contains_key(id) => report.count("done", 1),
            Some("done") => {} // a phantom done, reported below
            Some("dead") => report.count("dead", 1),
            other => {
                report.count("lost", 1);
                report.count(stranded_or_absent(other), 1);
                report.violate(
                    Some(id),
                    &[(*enqueued_at, Role::Enqueued), (read_at, Role::FinalRead)],
                    format!(
                        "{id}: enqueue acknowledged, but at the end it is {}",
                        at_the_end(other)
                    ),
                );
            }
        }
    }
    for id in &proven {
        match states.get(*id).map(String::as_str) {
            Some("done" | "dead") => {}
            other => {
                report.count("lost", 1);
                report.count(stranded_or_absent(other), 1);
                let how = if delivered.contains(id) {
                    "leased"
                } else {
                    "read"
                };
                report.violate(
                    Some(id),
                    &[(read_at, Role::FinalRead)],
                    format!(
                        "{id}: enqueue not acknowledged, but the history proves it existed ({how}), and at the end it is {}",
                        at_the_end(other)
                    ),
                );
            }
        }
    }
    for id in attempted
        .iter()
        .filter(|id| !acknowledged.contains_key(*id))
    {
        if delivered.contains(id) || states.contains_key(*id) {
            report.count("recovered", 1);
        }
    }
    for (id, state) in &states {
        if state == "done" && !settlers.contains_key(id.as_str()) {
            report.count("phantom_done", 1);
            report.violate(
                Some(id),
                &[(read_at, Role::FinalRead)],
                format!(
                    "{id}: read done at the end, but no complete in the history settled it or could have (a phantom done)"
                ),
            );
        }
    }
    report
}

/// Which of the two a job owed and not finished is (DESIGN.md: a job still
/// there but never finished after the drain is reported apart from one
/// that is gone): `stranded` when the final read still holds it in an
/// index (pending or active), `absent` when it does not (no state, or a
/// word of the queue's own for a job it holds nowhere: `vanished`, rpop's
/// `taken`). Both count as `lost`: neither ended done or dead.
fn stranded_or_absent(state: Option<&str>) -> &'static str {
    match state {
        Some("pending" | "active") => "stranded",
        _ => "absent",
    }
}

/// The final state of a job owed and not finished, as a violation says it.
fn at_the_end(state: Option<&str>) -> String {
    match (state, stranded_or_absent(state)) {
        (Some(s), "stranded") => format!(
            "{s} (stranded: the queue still holds it, and the heal and the drain did not finish it)"
        ),
        (Some(s), _) => format!("{s} (absent: the queue holds it nowhere)"),
        (None, _) => "absent (gone from the queue)".into(),
    }
}
