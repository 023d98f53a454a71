//! **structure**: every row is in exactly the index its state names, no
//! index entry lacks a row, and attempts never decrease. The queue adapter
//! reports the problems it sees at each read; this checker also requires
//! the tokens granted to each job to increase strictly, unless the queue
//! declared them opaque (each lease's value says `"tokens": "opaque"`):
//! then only a token granted twice to one job is a violation.

use std::collections::BTreeMap;

use super::{Ops, Report, Role};
use crate::history::F;

/// Checks structure. Counts: `reads`, `problems`.
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("structure");
    report.count("judged", 0);
    // Each job's granted leases so far: (invoke index, completion index,
    // token).
    let mut granted: BTreeMap<&str, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for op in ops.all() {
        match op.f() {
            F::Read if op.is_ok() => {
                report.count("reads", 1);
                report.count("judged", 1);
                let problems = op
                    .done
                    .and_then(|e| e.value.as_ref()?.get("problems")?.as_array().cloned())
                    .unwrap_or_default();
                for p in problems {
                    report.count("problems", 1);
                    report.violate(
                        None,
                        &[(op.end(), Role::Broke)],
                        format!("read at event {}: {}", op.end(), p.as_str().unwrap_or("?")),
                    );
                }
            }
            F::Lease if op.outcome() == Some("leased") => {
                let (Some(job), Some(token)) = (op.job(), op.token()) else {
                    continue;
                };
                let (invoked, end) = (op.invoke.index, op.end());
                let leases = granted.entry(job).or_default();
                // Two grants of one token are a reuse whatever their order.
                // A lowered token is a violation only when the earlier lease
                // was answered before this one was invoked: leases in flight
                // together ran on the server in either order (a delayed
                // request may run after a later one).
                // Opaque tokens (a random lock token) only name their
                // delivery: no order to check, a reuse still is one.
                let opaque = op.opaque_token();
                let clash = leases.iter().find(|(_, prev_end, prev)| {
                    *prev == token || (!opaque && *prev > token && *prev_end < invoked)
                });
                if let Some((_, at, prev)) = clash {
                    let why = if *prev == token {
                        "the same token granted twice (attempts reused)"
                    } else {
                        "that lease was answered before this one was invoked (attempts decreased)"
                    };
                    report.violate(
                        Some(job),
                        &[(end, Role::Broke), (*at, Role::Earlier)],
                        format!(
                            "{job}: lease at event {end} granted token {token}, not above token {prev} granted at event {at}: {why}"
                        ),
                    );
                }
                leases.push((invoked, end, token));
            }
            _ => {}
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::check::Verdict;
    use crate::history::{Event, Pending, Recorder};

    /// The checker over `history`'s op index, as `check_all` runs it.
    fn check(history: &[Event]) -> Report {
        super::check(&Ops::new(history))
    }

    /// Lease `op` of JOB-0 answered with `token`.
    fn lease(rec: &Recorder, op: Pending, token: u64) {
        rec.ok(
            op,
            Some("JOB-0"),
            Some(token),
            json!({"outcome": "leased", "deadline_ms": 100}),
        );
    }

    #[test]
    fn a_lower_token_answered_while_a_higher_one_was_in_flight_is_no_violation() {
        // w3's request was delayed: the server ran w0's (token 2) first,
        // then w3's (token 3), whose answer came last.
        let rec = Recorder::in_memory();
        let slow = rec.invoke("w3", F::Lease, None, None);
        let fast = rec.invoke("w0", F::Lease, None, None);
        lease(&rec, fast, 2);
        lease(&rec, slow, 3);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{r:?}");
    }

    #[test]
    fn a_lower_token_invoked_after_a_higher_one_was_answered_is_a_violation() {
        let rec = Recorder::in_memory();
        let first = rec.invoke("w3", F::Lease, None, None);
        lease(&rec, first, 3);
        let second = rec.invoke("w0", F::Lease, None, None);
        lease(&rec, second, 2);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
        assert!(r.violations[0].text.contains("attempts decreased"), "{r:?}");
    }

    #[test]
    fn one_token_granted_twice_is_a_violation_even_in_flight_together() {
        let rec = Recorder::in_memory();
        let a = rec.invoke("w3", F::Lease, None, None);
        let b = rec.invoke("w0", F::Lease, None, None);
        lease(&rec, b, 2);
        lease(&rec, a, 2);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
        assert!(r.violations[0].text.contains("attempts reused"), "{r:?}");
    }
}
