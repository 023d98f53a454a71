//! **admission**: a duplicate enqueue is refused and changes nothing, and
//! a job is never delivered that no enqueue admitted or attempted. At most
//! one enqueue per id is acknowledged as `enqueued`, every lease of a job
//! carries the payload of the enqueue that admitted it, and so does every
//! read that shows the job's payload (the protocol's optional `payloads`:
//! a duplicate that overwrote a done job's payload is seen there, where no
//! delivery follows), and — Jepsen's
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
use super::{Op, Ops, Report, Role};
use crate::history::{EventKind, F};

/// Checks admission. Counts: `judged` (enqueues tried), `exercised`
/// (those of an id enqueued before; on a queue that does not promise to
/// refuse them, the payloads compared), `admitted`, `duplicates_refused`,
/// `unexpected` (jobs delivered, settled or read with no enqueue invoked
/// before), `payloads_compared` (deliveries' and reads' payloads judged
/// against the admitted one); and, for a queue that does not promise to refuse duplicates,
/// `dedup_promised=0 duplicate_refusal_judged=0`.
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("admission");
    report.count("unexpected", 0);
    report.count("judged", 0);
    // Duplicate enqueues (of an id enqueued before): the chances to admit
    // a job twice; on a queue that promises no refusal, payloads compared.
    report.count("exercised", 0);
    let dedup = ops.promises_dedup();
    if !dedup {
        report.count("dedup_promised", 0);
        report.count("duplicate_refusal_judged", 0);
    }
    let enqueues = admitted_once(&mut report, ops, dedup);
    nothing_unexpected(&mut report, ops, &enqueues.attempted);
    let allowed = allowed_payloads(ops, dedup, &enqueues.admitted);
    payloads_admitted(&mut report, ops, dedup, &allowed);
    report
}

/// The enqueues of a history, as admission reads them.
struct Enqueues<'a> {
    /// job -> the completion of its first enqueue answered `enqueued`, and
    /// that enqueue's payload.
    admitted: BTreeMap<&'a str, (u64, Option<&'a serde_json::Value>)>,
    /// job -> the index of its first enqueue's invoke.
    attempted: BTreeMap<&'a str, u64>,
}

/// The rule for duplicates: at most one enqueue per id is acknowledged
/// `enqueued` (judged only on a queue that promises to refuse them).
/// Counts every enqueue (`judged`, `exercised`, `admitted`,
/// `duplicates_refused`), and returns what they admitted and attempted.
fn admitted_once<'a>(report: &mut Report, ops: &Ops<'a>, dedup: bool) -> Enqueues<'a> {
    let mut enqueues = Enqueues {
        admitted: BTreeMap::new(),
        attempted: BTreeMap::new(),
    };
    for op in ops.of(F::Enqueue) {
        let job = op.job().unwrap_or_default();
        report.count("judged", 1);
        let again = enqueues.attempted.contains_key(job);
        report.count("exercised", u64::from(dedup && again));
        enqueues.attempted.entry(job).or_insert(op.invoke.index);
        let payload = op.invoke.value.as_ref().and_then(|v| v.get("payload"));
        match op.outcome() {
            Some("enqueued") => {
                report.count("admitted", 1);
                if let Some((first, _)) = enqueues.admitted.get(job) {
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
                    enqueues.admitted.insert(job, (op.end(), payload));
                }
            }
            Some("duplicate") => report.count("duplicates_refused", 1),
            _ => {}
        }
    }
    enqueues
}

/// The rule for unexpected jobs (Jepsen's total-queue *unexpected*): every
/// job leased, settled or found in the final read had an enqueue invoked
/// before.
fn nothing_unexpected(report: &mut Report, ops: &Ops<'_>, attempted: &BTreeMap<&str, u64>) {
    let mut unexpected: BTreeMap<&str, (u64, String)> = BTreeMap::new();
    for op in ops.all() {
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
    let read_at = ops.final_read().map(Op::end);
    for (job, state) in ops.final_states().unwrap_or_default() {
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
}

/// job -> where its payload was admitted, and the payloads it may carry.
type Allowed<'a> = BTreeMap<&'a str, (u64, Vec<&'a serde_json::Value>)>;

/// The payloads each job may carry: its admitted one when an enqueue
/// was acknowledged `enqueued` (on a queue that refuses duplicates
/// nothing else can be its payload: any other enqueue of the id is a
/// duplicate, which changes nothing); else any an enqueue whose outcome
/// is unknown may have admitted (or, on a queue without that refusal,
/// any a message of the id was admitted or maybe admitted with).
fn allowed_payloads<'a>(
    ops: &Ops<'a>,
    dedup: bool,
    admitted: &BTreeMap<&'a str, (u64, Option<&'a serde_json::Value>)>,
) -> Allowed<'a> {
    let mut allowed: Allowed<'a> = BTreeMap::new();
    for op in ops.of(F::Enqueue) {
        let job = op.job().unwrap_or_default();
        let unknown = op.done.is_none_or(|e| e.kind == EventKind::Info);
        if op.outcome() != Some("enqueued") && !unknown {
            continue;
        }
        let Some(payload) = op.invoke.value.as_ref().and_then(|v| v.get("payload")) else {
            continue;
        };
        let entry = allowed.entry(job).or_insert((op.end(), Vec::new()));
        if !entry.1.contains(&payload) {
            entry.1.push(payload);
        }
    }
    if dedup {
        for (job, (at, want)) in admitted {
            if let Some(want) = want {
                allowed.insert(job, (*at, vec![*want]));
            }
        }
    }
    allowed
}

/// The rule for payloads: every lease of a job carries a payload it was
/// admitted with ([`allowed_payloads`]), and so does every read that shows
/// the job's payload.
fn payloads_admitted(report: &mut Report, ops: &Ops<'_>, dedup: bool, allowed: &Allowed<'_>) {
    // Every delivery's payload, and every payload a read shows.
    let mut seen: Vec<(&str, &serde_json::Value, u64, &'static str)> = Vec::new();
    for op in ops.all() {
        let value = op
            .done
            .filter(|_| op.is_ok())
            .and_then(|e| e.value.as_ref());
        match op.f() {
            F::Lease if op.outcome() == Some("leased") => {
                if let Some(got) = value.and_then(|v| v.get("payload")) {
                    seen.push((op.job().unwrap_or_default(), got, op.end(), "leased"));
                }
            }
            F::Read => {
                let payloads = value.and_then(|v| v.get("payloads")?.as_object());
                for (job, got) in payloads.into_iter().flatten() {
                    seen.push((job, got, op.end(), "read"));
                }
            }
            _ => {}
        }
    }
    for (job, got, at, how) in seen {
        let Some((admitted_at, want)) = allowed.get(job) else {
            continue;
        };
        report.count("payloads_compared", 1);
        // On a queue that promises no refusal, the payloads are what
        // admission judges: each comparison is its chance to break.
        report.count("exercised", u64::from(!dedup));
        if want.contains(&got) {
            continue;
        }
        let want: Vec<String> = want.iter().map(|w| w.to_string()).collect();
        report.violate(
            Some(job),
            &[(at, Role::Broke), (*admitted_at, Role::Earlier)],
            format!(
                "{job}: {how} at event {at} with payload {got}, but admitted at event {admitted_at} with {}",
                want.join(" or ")
            ),
        );
    }
}
