//! The op index: a history's operations, each invocation paired once with
//! the completion of its process ([`ops`]), and what the checkers ask of
//! them by job, by operation and at the end. [`crate::check::check_all`]
//! builds one [`Ops`] per history and hands it to every checker; the
//! report draws from one too.

use std::collections::{BTreeMap, BTreeSet};

use super::clock::ClockMoves;
use crate::history::{Event, EventKind, F};

/// One operation: an invocation and the event that completed it, if any.
#[derive(Clone, Debug)]
pub struct Op<'a> {
    /// The invoke event.
    pub invoke: &'a Event,
    /// The ok, fail or info that closed it; `None` if the history ends
    /// first (the same as info).
    pub done: Option<&'a Event>,
}

impl<'a> Op<'a> {
    /// The operation.
    pub fn f(&self) -> F {
        self.invoke.f
    }
    /// True when it completed ok.
    pub fn is_ok(&self) -> bool {
        self.done.is_some_and(|e| e.kind == EventKind::Ok)
    }
    /// The job, from the completion if it named one, else the invocation.
    pub fn job(&self) -> Option<&'a str> {
        self.done
            .and_then(|e| e.job.as_deref())
            .or(self.invoke.job.as_deref())
    }
    /// The token, from the completion if it named one, else the invocation.
    pub fn token(&self) -> Option<u64> {
        self.done.and_then(|e| e.token).or(self.invoke.token)
    }
    /// The `outcome` field of an ok completion's value.
    pub fn outcome(&self) -> Option<&'a str> {
        let e = self.done.filter(|e| e.kind == EventKind::Ok)?;
        e.value.as_ref()?.get("outcome")?.as_str()
    }
    /// True for a lease granted by a queue whose tokens only name their
    /// deliveries (`"tokens": "opaque"` in its value): its job's leases are
    /// ordered by the history, not by number.
    pub(crate) fn opaque_token(&self) -> bool {
        let e = self.done.filter(|e| e.kind == EventKind::Ok);
        e.and_then(|e| e.value.as_ref()?.get("tokens")?.as_str()) == Some("opaque")
    }
    /// Index of the completion (or of the invocation if none).
    pub fn end(&self) -> u64 {
        self.done.map_or(self.invoke.index, |e| e.index)
    }
}

/// Pairs every invocation with the next completion by the same process.
pub fn ops(history: &[Event]) -> Vec<Op<'_>> {
    let mut open: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out: Vec<Op<'_>> = Vec::new();
    for e in history {
        match e.kind {
            EventKind::Invoke => {
                open.insert(e.process.as_str(), out.len());
                out.push(Op {
                    invoke: e,
                    done: None,
                });
            }
            _ => {
                if let Some(i) = open.remove(e.process.as_str()) {
                    out[i].done = Some(e);
                }
            }
        }
    }
    out
}

/// The latest `read` of the whole queue: job -> state name.
pub fn final_read(history: &[Event]) -> Option<BTreeMap<String, String>> {
    let all = ops(history);
    states(
        all.iter()
            .rev()
            .find(|op| op.f() == F::Read && op.is_ok())?,
    )
}

/// The jobs a read answered: job -> state name.
fn states(read: &Op<'_>) -> Option<BTreeMap<String, String>> {
    let jobs = read.done?.value.as_ref()?.get("jobs")?.as_object()?;
    Some(
        jobs.iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("?").to_owned()))
            .collect(),
    )
}

/// A history's operations, paired once, with the indexes the checkers
/// share: each job's operations, the final read, whether the queue
/// promises to refuse a duplicate id, where a server clock moved.
#[derive(Debug)]
pub struct Ops<'a> {
    history: &'a [Event],
    /// Every operation, in the order of its invocation ([`ops`]).
    all: Vec<Op<'a>>,
    /// job -> the positions in `all` of its operations ([`Op::job`]).
    by_job: BTreeMap<&'a str, Vec<usize>>,
    /// The position in `all` of the latest read answered ok.
    final_read: Option<usize>,
    moves: ClockMoves,
}

impl<'a> Ops<'a> {
    /// Pairs `history`'s operations and indexes them.
    pub fn new(history: &'a [Event]) -> Ops<'a> {
        let all = ops(history);
        let mut by_job: BTreeMap<&'a str, Vec<usize>> = BTreeMap::new();
        for (i, op) in all.iter().enumerate() {
            if let Some(job) = op.job() {
                by_job.entry(job).or_default().push(i);
            }
        }
        let final_read = all.iter().rposition(|op| op.f() == F::Read && op.is_ok());
        Ops {
            history,
            all,
            by_job,
            final_read,
            moves: ClockMoves::of(history),
        }
    }

    /// The history the operations were paired from.
    pub fn history(&self) -> &'a [Event] {
        self.history
    }

    /// Every operation, in the order of its invocation.
    pub fn all(&self) -> &[Op<'a>] {
        &self.all
    }

    /// The operations that do `f`, in the order of their invocation.
    pub fn of(&self, f: F) -> impl Iterator<Item = &Op<'a>> {
        self.all.iter().filter(move |op| op.f() == f)
    }

    /// The operations of `job` ([`Op::job`]), in the order of their
    /// invocation.
    pub fn of_job(&self, job: &str) -> impl Iterator<Item = &Op<'a>> {
        let at = self.by_job.get(job).map_or(&[][..], Vec::as_slice);
        at.iter().map(|&i| &self.all[i])
    }

    /// The leases that granted a job (answered `leased`), in the order of
    /// their invocation.
    pub fn granted(&self) -> impl Iterator<Item = &Op<'a>> {
        self.of(F::Lease)
            .filter(|op| op.outcome() == Some("leased"))
    }

    /// The latest read of the whole queue answered ok: the final read.
    pub fn final_read(&self) -> Option<&Op<'a>> {
        self.final_read.map(|i| &self.all[i])
    }

    /// The final read's jobs: job -> state name ([`final_read`]).
    pub fn final_states(&self) -> Option<BTreeMap<String, String>> {
        states(self.final_read()?)
    }

    /// False when a read of the history says the queue does not refuse a
    /// duplicate id (`"dedup": false`, from its hello).
    pub fn promises_dedup(&self) -> bool {
        !self.of(F::Read).any(|op| {
            op.done
                .and_then(|e| e.value.as_ref()?.get("dedup")?.as_bool())
                == Some(false)
        })
    }

    /// True when a server clock may have moved while `op` read the
    /// server's time ([`ClockMoves::straddle`]).
    pub(crate) fn straddle(&self, op: &Op<'_>, before_invoke: bool) -> bool {
        self.moves.straddle(self.history, op, before_invoke)
    }

    /// The invoke indices of those of `calls` whose time read after the
    /// invoke straddles a move of a server clock.
    pub(crate) fn straddling(&self, calls: &[&Op<'_>]) -> BTreeSet<u64> {
        self.moves.straddling(self.history, calls)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::history::Recorder;

    #[test]
    fn the_op_index_pairs_each_invoke_with_its_process_s_completion_and_lists_each_job_s_ops() {
        let rec = Recorder::in_memory();
        let e0 = rec.invoke("p0", F::Enqueue, Some("JOB-0"), None);
        let l0 = rec.invoke("w0", F::Lease, None, None);
        let e1 = rec.invoke("p1", F::Enqueue, Some("JOB-1"), None);
        rec.ok(e1, None, None, json!({"outcome": "enqueued"}));
        rec.ok(e0, None, None, json!({"outcome": "enqueued"}));
        rec.ok(l0, Some("JOB-0"), Some(1), json!({"outcome": "leased"}));
        let c0 = rec.invoke("w0", F::Complete, Some("JOB-0"), Some(1));
        rec.info(c0, "timeout".into());
        let history = rec.events();
        let ops = Ops::new(&history);
        let pairs: Vec<(u64, Option<u64>)> = ops
            .all()
            .iter()
            .map(|op| (op.invoke.index, op.done.map(|e| e.index)))
            .collect();
        assert_eq!(
            pairs,
            [(0, Some(4)), (1, Some(5)), (2, Some(3)), (6, Some(7))]
        );
        let job0: Vec<(F, u64)> = ops
            .of_job("JOB-0")
            .map(|op| (op.f(), op.invoke.index))
            .collect();
        // The lease names its job only in its completion: it is JOB-0's.
        assert_eq!(job0, [(F::Enqueue, 0), (F::Lease, 1), (F::Complete, 6)]);
        assert_eq!(ops.of_job("JOB-9").count(), 0);
        let granted: Vec<u64> = ops.granted().map(|op| op.invoke.index).collect();
        assert_eq!(granted, [1]);
    }

    #[test]
    fn the_final_read_is_the_latest_read_answered_ok_and_a_dedup_false_withdraws_the_promise() {
        let rec = Recorder::in_memory();
        let r = rec.invoke("checker", F::Read, None, None);
        rec.ok(r, None, None, json!({"jobs": {"JOB-0": "done"}}));
        assert!(Ops::new(&rec.events()).promises_dedup());
        let r = rec.invoke("checker", F::Read, None, None);
        rec.ok(
            r,
            None,
            None,
            json!({"jobs": {"JOB-0": "dead"}, "dedup": false}),
        );
        let r = rec.invoke("checker", F::Read, None, None);
        rec.fail(r, "refused".into());
        let history = rec.events();
        let ops = Ops::new(&history);
        assert_eq!(ops.final_read().map(Op::end), Some(3));
        let states = ops.final_states().expect("a final read with jobs");
        assert_eq!(states["JOB-0"], "dead");
        assert_eq!(Some(states), final_read(&history));
        assert!(!ops.promises_dedup());
    }
}
