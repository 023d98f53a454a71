//! **bounded-retries**: a job is leased at most `max_attempts` times, and
//! once dead it is never leased again. `max_attempts` comes from the
//! invocation of the enqueue that admitted the job (its value's
//! `max_attempts`); without it only the second half is judged. A job dies
//! by a fail answered `dead` or by a reap that sent it `to: dead`. "Again"
//! is in real time: a lease invoked after the death completed. A lease in
//! flight across the death (its reply held back, as the chaos proxy's
//! `delay-reply` does, while the reaper takes its expired lease to dead)
//! may have been granted before it, and is the very lease the death ended.

use std::collections::{BTreeMap, BTreeSet};

use super::{Op, Ops, Report, Role};
use crate::history::F;

/// Checks bounded-retries. Counts: `judged` and `leases` (leases
/// granted), `exercised` (jobs that reached their max_attempts or died),
/// `dead`, `unbounded` (leased jobs whose `max_attempts` the history does
/// not say).
///
/// The operations are replayed in the order of their completions.
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("bounded-retries");
    for name in ["judged", "exercised", "leases", "dead"] {
        report.count(name, 0);
    }
    let mut all: Vec<&Op<'_>> = ops.all().iter().collect();
    all.sort_by_key(|op| op.end());
    let mut jobs = Jobs::default();
    for op in all {
        match op.f() {
            F::Enqueue if op.outcome() == Some("enqueued") => jobs.admit(op),
            F::Lease if op.outcome() == Some("leased") => jobs.lease(&mut report, op),
            F::Fail if op.outcome() == Some("dead") => {
                if let Some(job) = op.job() {
                    jobs.die(&mut report, job, op.end());
                }
            }
            F::Reap if op.is_ok() => {
                let reaped = op
                    .done
                    .and_then(|e| e.value.as_ref()?.get("reaped")?.as_array().cloned())
                    .unwrap_or_default();
                for r in reaped {
                    let to = r.get("to").and_then(|v| v.as_str());
                    if let (Some(id), Some("dead")) = (r.get("id").and_then(|v| v.as_str()), to) {
                        jobs.die(&mut report, id, op.end());
                    }
                }
            }
            _ => {}
        }
    }
    report.count("exercised", jobs.at_bound.len() as u64);
    report
}

/// The replay's state, job by job.
#[derive(Default)]
struct Jobs {
    /// job -> its `max_attempts`, from the enqueue that admitted it.
    max: BTreeMap<String, u64>,
    /// job -> leases granted so far.
    leases: BTreeMap<String, u64>,
    /// job -> the completion of its first death.
    dead_at: BTreeMap<String, u64>,
    /// Jobs that reached their max_attempts or died: the only ones a
    /// lease too many can follow.
    at_bound: BTreeSet<String>,
}

impl Jobs {
    /// An admitted enqueue: its job's `max_attempts`, if it says one.
    fn admit(&mut self, op: &Op<'_>) {
        let m = op
            .invoke
            .value
            .as_ref()
            .and_then(|v| v.get("max_attempts")?.as_u64());
        if let (Some(job), Some(m)) = (op.job(), m) {
            self.max.insert(job.to_owned(), m);
        }
    }

    /// A granted lease, judged by both rules.
    fn lease(&mut self, report: &mut Report, op: &Op<'_>) {
        let Some(job) = op.job() else { return };
        report.count("leases", 1);
        report.count("judged", 1);
        let n = self.leases.entry(job.to_owned()).or_default();
        *n += 1;
        let n = *n;
        if self.max.get(job).is_some_and(|m| n >= *m) {
            self.at_bound.insert(job.to_owned());
        }
        self.within_max_attempts(report, op, job, n);
        self.not_after_death(report, op, job);
    }

    /// The first rule: lease `n` of `job` is within its `max_attempts`.
    fn within_max_attempts(&self, report: &mut Report, op: &Op<'_>, job: &str, n: u64) {
        match self.max.get(job) {
            Some(m) if n > *m => report.violate(
                Some(job),
                &[(op.end(), Role::Broke)],
                format!(
                    "{job}: lease {n} (event {}) beyond max_attempts {m}",
                    op.end()
                ),
            ),
            Some(_) => {}
            None if n == 1 => report.count("unbounded", 1),
            None => {}
        }
    }

    /// The second rule: a lease of `job` invoked after it died is one too
    /// many.
    fn not_after_death(&self, report: &mut Report, op: &Op<'_>, job: &str) {
        if let Some(at) = self.dead_at.get(job).filter(|at| op.invoke.index > **at) {
            report.violate(
                Some(job),
                &[(op.end(), Role::Broke), (*at, Role::Earlier)],
                format!(
                    "{job}: leased at event {} after it died at event {at}",
                    op.end()
                ),
            );
        }
    }

    /// `job` died (a fail answered `dead`, or a reap that sent it to
    /// dead) at event `at`.
    fn die(&mut self, report: &mut Report, job: &str, at: u64) {
        report.count("dead", 1);
        self.at_bound.insert(job.to_owned());
        self.dead_at.entry(job.to_owned()).or_insert(at);
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

    fn lease(rec: &Recorder, job: &str, token: u64) {
        let op = rec.invoke("w0", F::Lease, None, None);
        rec.ok(op, Some(job), Some(token), json!({"outcome": "leased"}));
    }

    #[test]
    fn a_job_leased_past_max_attempts_or_after_dying_is_a_violation() {
        let rec = Recorder::in_memory();
        let op = rec.push_invoke_with(
            "producer",
            F::Enqueue,
            Some("JOB-0"),
            json!({"payload": "p", "max_attempts": 1}),
        );
        rec.ok(op, None, None, json!({"outcome": "enqueued"}));
        lease(&rec, "JOB-0", 1);
        assert_eq!(check(&rec.events()).verdict, Verdict::Valid);
        let op = rec.invoke("reaper", F::Reap, None, None);
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "reaped", "reaped": [{"id": "JOB-0", "to": "dead"}]}),
        );
        lease(&rec, "JOB-0", 2);
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Invalid);
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
        assert_eq!(r.counts["dead"], 1);
    }

    #[test]
    fn a_lease_in_flight_when_its_job_died_is_not_a_lease_after_death() {
        // The lease's reply is held back past its deadline; the reaper
        // takes that expired lease to dead; then the reply arrives.
        let rec = Recorder::in_memory();
        let op = rec.push_invoke_with(
            "producer",
            F::Enqueue,
            Some("JOB-0"),
            json!({"payload": "p", "max_attempts": 1}),
        );
        rec.ok(op, None, None, json!({"outcome": "enqueued"}));
        let held = rec.invoke("w0", F::Lease, None, None);
        let op = rec.invoke("reaper", F::Reap, None, None);
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "reaped", "reaped": [{"id": "JOB-0", "to": "dead"}]}),
        );
        rec.ok(held, Some("JOB-0"), Some(1), json!({"outcome": "leased"}));
        let r = check(&rec.events());
        assert_eq!(r.verdict, Verdict::Valid, "{:?}", r.violations);
        // One invoked after the death completed is one.
        lease(&rec, "JOB-0", 2);
        assert_eq!(check(&rec.events()).verdict, Verdict::Invalid);
    }
}
