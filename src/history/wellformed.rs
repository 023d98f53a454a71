//! A history's grammar, checked before any checker judges it.
//!
//! The checkers pair every invocation with the next completion of its
//! process and read the queue's last `read` as the final state. On a
//! history that breaks the grammar that pairing is silently wrong: with an
//! index reused, a stale settle after a reap can pass; a history reversed
//! line by line gives dozens of false violations. So a history is judged
//! only if it is well formed, and refused otherwise with the event and the
//! rule it breaks ([`Rule`]), never judged.
//!
//! Gaps between indexes are allowed (a history cut down by hand still
//! reads); an invoke left open when the history ends is allowed too (the
//! process crashed or the run stopped: Jepsen reads it as `info`).
//!
//! # Design notes
//!
//! The rules (`validate`, `Rule`): indexes strictly increasing; every
//! completion answering an open invoke of its process (same operation, job
//! and token); one open invoke per process; the fields each operation needs;
//! nothing after the final read. The reader checks them, so every reader of
//! a `.jsonl` (`ackgap check`, the HTML report) refuses an ill-formed
//! history with its line and rule; `check::check_all` checks them too.

use std::collections::BTreeMap;

use super::{Event, EventKind, F};

/// A rule of a history's grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// Event indexes increase strictly: no index repeats, none goes back.
    IndexOrder,
    /// An `ok`, `fail` or `info` answers an open invoke of its process.
    CompletionWithoutInvoke,
    /// A process has at most one operation open: no second invoke before
    /// the first is completed.
    InvokeWhileOpen,
    /// A completion is of the operation its process invoked: the same `f`,
    /// and the same job and token where the invoke named them.
    CompletionMismatch,
    /// An operation names what its kind requires: a job for an enqueue,
    /// effect, complete, fail, extend or crash; a token for all of these
    /// but the enqueue; a job and a token for a lease answered `leased`.
    MissingField,
    /// Nothing happens after the final read (the last `read` answered ok):
    /// a verdict on the queue's end state must see the whole run.
    AfterFinalRead,
}

impl Rule {
    /// The rule's name, as an error prints it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::IndexOrder => "index-order",
            Rule::CompletionWithoutInvoke => "completion-without-invoke",
            Rule::InvokeWhileOpen => "invoke-while-open",
            Rule::CompletionMismatch => "completion-mismatch",
            Rule::MissingField => "missing-field",
            Rule::AfterFinalRead => "after-final-read",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// Why a history is not well formed: the first event that breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{rule}: {detail}")]
pub struct IllFormed {
    /// The event's position in the history, from 0 (its line, from 1, in
    /// a file without blank lines is `position + 1`).
    pub position: usize,
    /// The rule it breaks.
    pub rule: Rule,
    /// What is wrong, in words, with the indexes it rests on.
    pub detail: String,
}

/// The position of the final read's completion: the last `read` answered
/// ok.
fn final_read(events: &[Event]) -> Option<usize> {
    events
        .iter()
        .rposition(|e| e.f == F::Read && e.kind == EventKind::Ok)
}

/// Describes `e` for an error: `w1 invoke complete JOB-1 (index 7)`.
fn show(e: &Event) -> String {
    let kind = match e.kind {
        EventKind::Invoke => "invoke",
        EventKind::Ok => "ok",
        EventKind::Fail => "fail",
        EventKind::Info => "info",
    };
    let f = serde_json::to_value(e.f)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", e.f));
    match &e.job {
        Some(job) => format!("{} {kind} {f} {job} (index {})", e.process, e.index),
        None => format!("{} {kind} {f} (index {})", e.process, e.index),
    }
}

/// The field `e` lacks, if its kind requires one.
fn missing_field(e: &Event) -> Option<&'static str> {
    let needs_job = matches!(
        e.f,
        F::Enqueue | F::Effect | F::Complete | F::Fail | F::Extend | F::Crash
    );
    let needs_token = needs_job && e.f != F::Enqueue;
    if e.kind == EventKind::Invoke {
        if needs_job && e.job.is_none() {
            return Some("job");
        }
        if needs_token && e.token.is_none() {
            return Some("token");
        }
    }
    let leased = e.f == F::Lease
        && e.kind == EventKind::Ok
        && e.value.as_ref().and_then(|v| v.get("outcome")?.as_str()) == Some("leased");
    if leased && e.job.is_none() {
        return Some("job");
    }
    if leased && e.token.is_none() {
        return Some("token");
    }
    None
}

/// Checks that `events` are a well-formed history; the error names the
/// first event that breaks a rule.
pub fn validate(events: &[Event]) -> Result<(), IllFormed> {
    let last_read = final_read(events);
    // process -> position of its open invoke.
    let mut open: BTreeMap<&str, usize> = BTreeMap::new();
    let mut previous: Option<&Event> = None;
    for (position, e) in events.iter().enumerate() {
        let refuse = |rule: Rule, detail: String| {
            Err(IllFormed {
                position,
                rule,
                detail,
            })
        };
        if let Some(p) = previous.filter(|p| e.index <= p.index) {
            let how = if e.index == p.index {
                "repeats"
            } else {
                "goes back from"
            };
            return refuse(
                Rule::IndexOrder,
                format!("{} {how} index {} of the event before", show(e), p.index),
            );
        }
        previous = Some(e);
        if let Some(read) = last_read.filter(|read| position > *read) {
            return refuse(
                Rule::AfterFinalRead,
                format!(
                    "{} comes after the final read (index {})",
                    show(e),
                    events[read].index
                ),
            );
        }
        if let Some(field) = missing_field(e) {
            return refuse(Rule::MissingField, format!("{} names no {field}", show(e)));
        }
        if e.kind == EventKind::Invoke {
            if let Some(at) = open.insert(e.process.as_str(), position) {
                return refuse(
                    Rule::InvokeWhileOpen,
                    format!("{} while {} is still open", show(e), show(&events[at])),
                );
            }
            continue;
        }
        let Some(at) = open.remove(e.process.as_str()) else {
            return refuse(
                Rule::CompletionWithoutInvoke,
                format!("{} answers no open invoke of {}", show(e), e.process),
            );
        };
        if let Some(detail) = mismatch(&events[at], e) {
            return refuse(Rule::CompletionMismatch, detail);
        }
    }
    Ok(())
}

/// Why completion `e` is not of the operation `invoke` opened (another
/// `f`, or another job or token where both name one), if it is not.
fn mismatch(invoke: &Event, e: &Event) -> Option<String> {
    let differs = |a: Option<&str>, b: Option<&str>| a.is_some() && b.is_some() && a != b;
    let token_differs = invoke.token.is_some() && e.token.is_some() && invoke.token != e.token;
    if invoke.f != e.f || differs(invoke.job.as_deref(), e.job.as_deref()) || token_differs {
        return Some(format!(
            "{} does not answer {} (token {:?} against {:?})",
            show(e),
            show(invoke),
            e.token,
            invoke.token
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::history::Recorder;

    /// enqueue, lease, complete, read: a clean history of one job.
    fn clean() -> Vec<Event> {
        let rec = Recorder::in_memory();
        let op = rec.push_invoke_with("producer", F::Enqueue, Some("JOB-1"), json!({}));
        rec.ok(op, None, None, json!({"outcome": "enqueued"}));
        let op = rec.invoke("w1", F::Lease, None, None);
        rec.ok(op, Some("JOB-1"), Some(1), json!({"outcome": "leased"}));
        let op = rec.invoke("w1", F::Complete, Some("JOB-1"), Some(1));
        rec.ok(op, None, None, json!({"outcome": "settled"}));
        let op = rec.invoke("checker", F::Read, None, None);
        rec.ok(op, None, None, json!({"jobs": {"JOB-1": "done"}}));
        rec.events()
    }

    fn rule(events: &[Event]) -> (usize, Rule) {
        let err = validate(events).unwrap_err();
        (err.position, err.rule)
    }

    #[test]
    fn a_recorded_history_is_well_formed() {
        assert_eq!(validate(&clean()), Ok(()));
    }

    #[test]
    fn a_repeated_or_backward_index_is_refused() {
        let mut h = clean();
        h[3].index = 2;
        assert_eq!(rule(&h), (3, Rule::IndexOrder));
        let mut h = clean();
        h[3].index = 1;
        assert_eq!(rule(&h), (3, Rule::IndexOrder));
    }

    #[test]
    fn a_reversed_history_is_refused_at_its_first_line() {
        let mut h = clean();
        h.reverse();
        assert_eq!(rule(&h), (0, Rule::CompletionWithoutInvoke));
        // Without its first line it goes back at once.
        assert_eq!(rule(&h[1..]), (1, Rule::IndexOrder));
    }

    #[test]
    fn a_completion_with_no_open_invoke_is_refused() {
        let mut h = clean();
        h.remove(2);
        assert_eq!(rule(&h), (2, Rule::CompletionWithoutInvoke));
    }

    #[test]
    fn a_second_invoke_of_an_open_process_is_refused() {
        let rec = Recorder::in_memory();
        let _first = rec.invoke("w1", F::Lease, None, None);
        let _second = rec.invoke("w1", F::Lease, None, None);
        assert_eq!(rule(&rec.events()), (1, Rule::InvokeWhileOpen));
    }

    #[test]
    fn a_completion_of_another_operation_is_refused() {
        let mut h = clean();
        h[5].token = Some(2);
        assert_eq!(rule(&h), (5, Rule::CompletionMismatch));
        let mut h = clean();
        h[5].f = F::Fail;
        assert_eq!(rule(&h), (5, Rule::CompletionMismatch));
    }

    #[test]
    fn an_event_after_the_final_read_is_refused() {
        let mut h = clean();
        let mut late = h[0].clone();
        late.index = 8;
        late.process = "p2".into();
        h.push(late);
        assert_eq!(rule(&h), (8, Rule::AfterFinalRead));
    }

    #[test]
    fn a_lease_granted_without_its_job_is_refused() {
        let mut h = clean();
        h[3].job = None;
        assert_eq!(rule(&h), (3, Rule::MissingField));
    }

    #[test]
    fn an_invoke_left_open_at_the_end_and_gaps_in_indexes_are_allowed() {
        let mut h = clean();
        h.truncate(5);
        h[4].index = 40;
        assert_eq!(validate(&h), Ok(()));
    }
}
