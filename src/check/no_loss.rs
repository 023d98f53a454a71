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
    let seen = Seen::of(ops.all());
    if seen.unacknowledged > 0 {
        report.count("unacknowledged", seen.unacknowledged);
    }
    report.count("attempted", seen.attempted.len() as u64);
    report.count("acknowledged", seen.acknowledged.len() as u64);
    report.count("proven", seen.proven.len() as u64);
    report.count(
        "judged",
        (seen.acknowledged.len() + seen.proven.len()) as u64,
    );
    let Some(states) = ops.final_states() else {
        report.verdict = Verdict::Unknown;
        report.note("no final read of the queue: cannot tell what was lost".into());
        return report;
    };
    // The read the states come from.
    let read_at = ops.final_read().map_or(0, Op::end);
    acknowledged_ended(&mut report, &seen, &states, read_at);
    proven_ended(&mut report, &seen, &states, read_at);
    recovered(&mut report, &seen, &states);
    no_phantom_done(&mut report, &seen, &states, read_at);
    report
}

/// What no-loss reads off a history's operations.
struct Seen<'a> {
    /// Jobs with an enqueue invoked.
    attempted: BTreeSet<&'a str>,
    /// job -> the completion of its first acknowledged enqueue.
    acknowledged: BTreeMap<&'a str, u64>,
    /// Jobs a lease delivered.
    delivered: BTreeSet<&'a str>,
    /// Not acknowledged, but proven to exist (delivered, or shown by a
    /// read): owed all the same.
    proven: BTreeSet<&'a str>,
    /// job -> the index of a complete that settled it or could have.
    settlers: BTreeMap<&'a str, u64>,
    /// Enqueues whose outcome is unknown.
    unacknowledged: u64,
}

impl<'a> Seen<'a> {
    fn of(all: &[Op<'a>]) -> Seen<'a> {
        let mut seen = Seen {
            attempted: BTreeSet::new(),
            acknowledged: BTreeMap::new(),
            delivered: BTreeSet::new(),
            proven: BTreeSet::new(),
            settlers: BTreeMap::new(),
            unacknowledged: 0,
        };
        // Jobs any read of the queue showed.
        let mut shown = BTreeSet::new();
        for op in all {
            let job = op.job().unwrap_or_default();
            match op.f() {
                F::Enqueue => {
                    seen.attempted.insert(job);
                    match (op.outcome(), op.done.map(|e| e.kind)) {
                        (Some("enqueued"), _) => {
                            seen.acknowledged.entry(job).or_insert(op.end());
                        }
                        (_, Some(EventKind::Info)) | (_, None) => seen.unacknowledged += 1,
                        _ => {}
                    }
                }
                F::Lease if op.outcome() == Some("leased") => {
                    seen.delivered.insert(job);
                }
                F::Complete if could_settle(op) => {
                    seen.settlers.entry(job).or_insert(op.invoke.index);
                }
                F::Read if op.is_ok() => {
                    let jobs = op
                        .done
                        .and_then(|e| e.value.as_ref()?.get("jobs")?.as_object());
                    shown.extend(jobs.into_iter().flat_map(|j| j.keys().map(String::as_str)));
                }
                _ => {}
            }
        }
        seen.proven = seen
            .attempted
            .iter()
            .copied()
            .filter(|id| !seen.acknowledged.contains_key(id))
            .filter(|id| seen.delivered.contains(id) || shown.contains(id))
            .collect();
        seen
    }
}

/// The rule for acknowledged jobs: each ends `done` (settled by a complete
/// that could have) or `dead`; any other end is lost.
fn acknowledged_ended(
    report: &mut Report,
    seen: &Seen<'_>,
    states: &BTreeMap<String, String>,
    read_at: u64,
) {
    for (id, enqueued_at) in &seen.acknowledged {
        match states.get(*id).map(String::as_str) {
            Some("done") if seen.settlers.contains_key(id) => report.count("done", 1),
            Some("done") => {} // a phantom done, reported by `no_phantom_done`
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
}

/// The rule for jobs not acknowledged but proven to exist: each ends
/// `done` or `dead` like an acknowledged one.
fn proven_ended(
    report: &mut Report,
    seen: &Seen<'_>,
    states: &BTreeMap<String, String>,
    read_at: u64,
) {
    for id in &seen.proven {
        match states.get(*id).map(String::as_str) {
            Some("done" | "dead") => {}
            other => {
                report.count("lost", 1);
                report.count(stranded_or_absent(other), 1);
                let how = if seen.delivered.contains(id) {
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
}

/// Counts the jobs recovered: not acknowledged, yet delivered or in the
/// final read (Jepsen's total-queue count; never a violation).
fn recovered(report: &mut Report, seen: &Seen<'_>, states: &BTreeMap<String, String>) {
    for id in seen
        .attempted
        .iter()
        .filter(|id| !seen.acknowledged.contains_key(*id))
    {
        if seen.delivered.contains(id) || states.contains_key(*id) {
            report.count("recovered", 1);
        }
    }
}

/// The rule for the final read's word: a job read `done` was settled by a
/// complete in the history, or could have been; else a phantom done.
fn no_phantom_done(
    report: &mut Report,
    seen: &Seen<'_>,
    states: &BTreeMap<String, String>,
    read_at: u64,
) {
    for (id, state) in states {
        if state == "done" && !seen.settlers.contains_key(id.as_str()) {
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
