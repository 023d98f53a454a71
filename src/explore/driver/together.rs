//! Parallel steps (`l0+l1`, [`Step::Parallel`]): the members' queue calls
//! sent together, every one on the wire before any answer is read.
//!
//! Each worker first does its own part alone (the lease it acts on; for an
//! ack, the parts of its effect not applied yet), then the calls go out at
//! once (`futures_util::future::join_all`) through a gate: the recording
//! layer records each call's invocation, then the call waits at a
//! `tokio::sync::Barrier` until every member's call has been invoked, and
//! only then goes to the queue. Every invocation is thus recorded before
//! any completion, so the history shows the calls overlapping and the
//! checkers judge them as concurrent. (Without the gate a fast server can
//! answer the first call within its first poll, before the second is even
//! invoked: the history would show them one after the other.)
//!
//! The model beside them is sequential, so it is asked in every order of
//! the members (a linearization, as `quickcheck-state-machine`'s
//! `prop_parallel` and `qcheck-lin` do after a sequential prefix): on the
//! reference queue the step is accepted when some order gives exactly the
//! answers the queue gave and the state read back after them; the walk goes
//! on from that order's model. Two orders that both fit give one state (the
//! read back equals both models' snapshots), so there is no set of states
//! to keep. When none fits, the written order's answers are what the
//! divergence shows. On another queue the model is a guide: the first
//! order whose answers resemble the queue's (the same kind, a lease of the
//! same job) is kept, else the written order; the checkers judge.
//!
//! A seed then names its walk only up to the races' outcomes: which worker
//! won a race is the server's choice, and what the walk draws next follows
//! it.

use std::sync::Arc;

use futures_util::future::join_all;
use tokio::sync::Barrier;

use super::{Driver, ExploreError, Held, Outcome, Step};
use crate::adapter::{Adapter, BoxFuture, Wrapper};
use crate::history::Recorded;
use crate::model::Model;
use crate::queue::client::EnqueueOptions;
use crate::queue::{Enqueued, Extended, Failed, Lease, QueueError, Reaped, Settled, Snapshot};

/// What one member sends: nothing (a worker with no lease to act on), or
/// its call on the lease it acts on, if any.
enum Call {
    Idle,
    Send(Option<Held>),
}

impl Driver {
    /// Applies the parallel step `step` of `members` (see the module docs).
    pub(super) async fn apply_together(
        &mut self,
        step_index: usize,
        step: &Step,
        members: &[Step],
    ) -> Result<Outcome, ExploreError> {
        let queue_error = |source: QueueError| ExploreError::Queue {
            step_index,
            step: step.clone(),
            source,
        };
        let mut calls = Vec::new();
        for member in members {
            calls.push(self.prepare(member).await.map_err(queue_error)?);
        }
        // Each call reads nothing back: the read comes after all of them.
        if let Some(reads) = self.subject.adapter.read_back() {
            reads.set_readback(false);
        }
        let valkey = match self.send_together(step_index, members, &calls).await {
            Ok(valkey) => valkey,
            Err(e) => {
                self.log
                    .push(format!("{}: error: {e}", super::describe(step)));
                return Err(queue_error(e));
            }
        };
        self.last_read = None;
        let read = match self.checked && self.subject.refines() {
            true => match self.subject.adapter.read_back() {
                Some(reads) => Some(reads.snapshot().await.map_err(queue_error)?),
                None => None,
            },
            false => None,
        };
        let (order, model) = self.linearize(step_index, members, &calls, &valkey, read.as_ref());
        self.keep_together(members, calls, &order, &model, &valkey)
            .await;
        let told = if self.subject.refines() {
            &model
        } else {
            &valkey
        };
        if let Some(at) = told.iter().filter_map(super::announced).next_back() {
            self.announced_ms = Some(at);
        }
        let each: Vec<String> = (members.iter().zip(&valkey))
            .map(|(m, v)| format!("{} -> {}", super::describe(m), super::answer(v)))
            .collect();
        let note = order_note(members, &order);
        self.log
            .push(format!("together: {}{note}", each.join(" | ")));
        if !self.subject.refines() {
            return Ok(Outcome::Parallel(valkey));
        }
        if !self.checked {
            return Ok(Outcome::Parallel(model));
        }
        self.last_read = read;
        let (model, valkey) = (Outcome::Parallel(model), Outcome::Parallel(valkey));
        self.check(step_index, step, model, valkey, true).await
    }

    /// What `member` sends, once its worker has done its own part: the
    /// lease it acts on (a fail gives it up at once) and, before an ack,
    /// the parts of its effect not applied yet.
    async fn prepare(&mut self, member: &Step) -> Result<Call, QueueError> {
        let held = match member {
            Step::Enqueue { .. } | Step::Reap | Step::Lease { .. } => return Ok(Call::Send(None)),
            _ => match self.acting_on(member) {
                Some(held) => held,
                None => return Ok(Call::Idle),
            },
        };
        let held = match member.worker() {
            Some(w) if matches!(member, Step::Complete { .. } | Step::StaleComplete { .. }) => {
                self.finish_effect(w, held).await?
            }
            _ => held,
        };
        Ok(Call::Send(Some(held)))
    }

    /// Sends every member's call at once, through the gate (see the module
    /// docs), and waits for all the answers: each member's outcome, in the
    /// written order ([`Outcome::Idle`] for one with nothing to send); the
    /// first error that is not a refusal.
    async fn send_together(
        &mut self,
        step_index: usize,
        members: &[Step],
        calls: &[Call],
    ) -> Result<Vec<Outcome>, QueueError> {
        let width = calls.iter().filter(|c| matches!(c, Call::Send(_))).count();
        let gate = Gated {
            inner: Arc::clone(&self.subject.adapter),
            barrier: Barrier::new(width.max(1)),
        };
        let mut gated =
            Recorded::new(Arc::new(gate), &self.recorder, "checker").noting_max_attempts();
        if !self.logical {
            gated = gated.timing_server_clock();
        }
        let recorded = std::mem::replace(&mut self.recorded, gated);
        let answers = self.send_gated(step_index, members, calls).await;
        self.recorded = recorded;
        answers
    }

    /// [`Driver::send_together`]'s calls, through the recording layer the
    /// driver holds now (the gated one).
    async fn send_gated(
        &self,
        step_index: usize,
        members: &[Step],
        calls: &[Call],
    ) -> Result<Vec<Outcome>, QueueError> {
        let sent = members
            .iter()
            .zip(calls)
            .filter_map(|(member, call)| match call {
                Call::Send(held) => Some(self.subject_side(step_index, member, held.as_ref())),
                Call::Idle => None,
            });
        let mut answers = join_all(sent).await.into_iter();
        let mut out = Vec::new();
        for call in calls {
            out.push(match call {
                Call::Idle => Outcome::Idle,
                Call::Send(_) => answers.next().expect("one answer per call")??,
            });
        }
        Ok(out)
    }

    /// Steps the model through the members in the first order that fits
    /// the queue's answers (and, when read, its state: see the module
    /// docs), else in the written order: the order (indexes of `members`)
    /// and the model's outcomes, in the written order. On a server the
    /// explorers own, notes the states a crash may take the queue back to
    /// ([`Driver::note_crash_points`]).
    fn linearize(
        &mut self,
        step_index: usize,
        members: &[Step],
        calls: &[Call],
        valkey: &[Outcome],
        read: Option<&Snapshot>,
    ) -> (Vec<usize>, Vec<Outcome>) {
        let sent: Vec<usize> = (0..members.len())
            .filter(|i| matches!(calls[*i], Call::Send(_)))
            .collect();
        let before = self.model.clone();
        let (mut fitting, mut written) = (Vec::new(), None);
        for order in orders(&sent) {
            self.model = before.clone();
            let mut outcomes = valkey.to_vec();
            let mut states = Vec::new();
            for &i in &order {
                let held = match &calls[i] {
                    Call::Send(held) => held.as_ref(),
                    Call::Idle => None,
                };
                outcomes[i] = self.model_side(step_index, &members[i], held);
                states.push(self.model.clone());
            }
            let fits = if self.subject.refines() {
                outcomes == valkey && read.is_none_or(|read| *read == self.model.snapshot())
            } else {
                outcomes.iter().zip(valkey).all(|(m, v)| resembles(m, v))
            };
            match fits {
                true => fitting.push((order, outcomes, states)),
                false => _ = written.get_or_insert((order, outcomes, states)),
            }
            // Without a server to crash, the first order that fits is all
            // the walk needs.
            if !fitting.is_empty() && self.since.is_none() {
                break;
            }
        }
        let kept = match fitting.is_empty() {
            true => vec![written.expect("one order at least")],
            false => fitting,
        };
        self.note_crash_points(&kept);
        let (order, outcomes, states) = kept.into_iter().next().expect("one order at least");
        self.model = states.last().cloned().unwrap_or(before);
        (order, outcomes)
    }

    /// Notes, on a server the explorers own, the states a crash after a
    /// parallel step may take the queue back to ([`crash_points`]).
    fn note_crash_points(&mut self, kept: &[Ran]) {
        if let Some(since) = &mut self.since {
            for state in crash_points(kept) {
                since.note(state);
            }
        }
    }

    /// The workers' bookkeeping after a parallel step, member by member in
    /// the order the model took them; and the deadlines the queue
    /// announced, and on the server clock its lease length.
    async fn keep_together(
        &mut self,
        members: &[Step],
        calls: Vec<Call>,
        order: &[usize],
        model: &[Outcome],
        valkey: &[Outcome],
    ) {
        let mut calls: Vec<Option<Call>> = calls.into_iter().map(Some).collect();
        for &i in order {
            let (Some(w), Some(Call::Send(held))) = (members[i].worker(), calls[i].take()) else {
                continue;
            };
            let answer = Ok(valkey[i].clone());
            self.keep(usize::from(w), &members[i], held, &model[i], &answer);
        }
        for outcome in valkey {
            self.note_deadline(outcome);
            self.learn_lease(outcome).await;
        }
    }
}

/// The queue under test behind a gate: each queue call waits until
/// `barrier` has seen every call of the parallel step (each recorded as
/// invoked before it reaches here), then goes on.
struct Gated {
    inner: Arc<dyn Adapter>,
    barrier: Barrier,
}

impl Wrapper for Gated {
    fn inner(&self) -> &dyn Adapter {
        &*self.inner
    }

    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        Box::pin(async move {
            self.barrier.wait().await;
            self.inner.enqueue(id, payload, options, now_ms).await
        })
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move {
            self.barrier.wait().await;
            self.inner.lease(worker, lease_ms, now_ms).await
        })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(async move {
            self.barrier.wait().await;
            self.inner.complete(id, token).await
        })
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Box::pin(async move {
            self.barrier.wait().await;
            self.inner.fail(id, token, retry_delay_ms, now_ms).await
        })
    }

    fn extend<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        Box::pin(async move {
            self.barrier.wait().await;
            self.inner.extend(id, token, lease_ms, now_ms).await
        })
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(async move {
            self.barrier.wait().await;
            self.inner.reap(limit, now_ms).await
        })
    }
}

/// An order the model ran a parallel step's members in: the order
/// (indexes of the members), the outcomes (in the written order), and the
/// model's state after each member, in that order.
type Ran = (Vec<usize>, Vec<Outcome>, Vec<Model>);

/// The states a crash after a parallel step may take the queue back to,
/// in the order to note them: the state after each member, in every order
/// in `kept` that ends where the first does (the server ran one of them;
/// which, the answers do not say), the first order's last state last.
/// Under `appendfsync everysec` the AOF may end between two members'
/// scripts, so the states between them are states the queue may come
/// back in.
fn crash_points(kept: &[Ran]) -> Vec<&Model> {
    let Some(last) = kept.first().and_then(|(_, _, states)| states.last()) else {
        return Vec::new();
    };
    let ends_there = |states: &Vec<Model>| {
        states
            .last()
            .is_some_and(|end| end.snapshot() == last.snapshot())
    };
    let mut out: Vec<&Model> = kept
        .iter()
        .filter(|(_, _, states)| ends_there(states))
        .flat_map(|(_, _, states)| states)
        .collect();
    out.push(last);
    out
}

/// Every order of `items` (at most [`crate::explore::op::PARALLEL_MAX`]:
/// 24 orders), the given order first.
fn orders(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (k, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(k);
        for mut tail in orders(&rest) {
            tail.insert(0, *first);
            out.push(tail);
        }
    }
    out
}

/// True when the model's outcome `model` is the queue's `valkey` but for
/// what the model cannot know of another queue (tokens, deadlines): the
/// same kind of answer, and a lease of the same job or of none.
fn resembles(model: &Outcome, valkey: &Outcome) -> bool {
    match (model, valkey) {
        (Outcome::Lease(m), Outcome::Lease(v)) => {
            m.as_ref().map(|l| &l.id) == v.as_ref().map(|l| &l.id)
        }
        (m, v) => std::mem::discriminant(m) == std::mem::discriminant(v),
    }
}

/// The order the model took the members in, in words, when it is not the
/// written one: ` (as if w1 leases, then w0 leases)`.
fn order_note(members: &[Step], order: &[usize]) -> String {
    if order.windows(2).all(|w| w[0] < w[1]) {
        return String::new();
    }
    let each: Vec<String> = order.iter().map(|i| members[*i].to_string()).collect();
    format!(" (as if {})", each.join(" then "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::durable::{Kept, Since};

    #[test]
    fn every_order_of_the_members_is_tried_once_the_written_one_first() {
        assert_eq!(orders(&[0, 1]), vec![vec![0, 1], vec![1, 0]]);
        let three = orders(&[0, 1, 2]);
        assert_eq!(three.len(), 6);
        assert_eq!(three[0], vec![0, 1, 2]);
        let distinct: std::collections::BTreeSet<_> = three.iter().collect();
        assert_eq!(distinct.len(), 6);
        assert_eq!(orders(&[2]), vec![vec![2]]);
        assert_eq!(orders(&[0, 1, 2, 3]).len(), 24);
    }

    #[test]
    fn a_crash_after_a_parallel_step_may_leave_either_members_state_alone() {
        // e1+l0 with JOB-0 pending: both orders give the same answers (w0
        // leases JOB-0, JOB-1 is admitted) and end in one state, but after
        // the first member the queue holds JOB-0 and JOB-1 pending in one
        // order, JOB-0 leased alone in the other.
        let mut before = Model::new();
        before.enqueue("JOB-0", b"p", 3, 0, 5).unwrap();
        let (mut admitted, mut leased) = (before.clone(), before.clone());
        admitted.enqueue("JOB-1", b"p", 3, 0, 5).unwrap();
        leased.lease("w0", 100, 5).unwrap();
        let (mut first, mut second) = (admitted.clone(), leased.clone());
        first.lease("w0", 100, 5).unwrap();
        second.enqueue("JOB-1", b"p", 3, 0, 5).unwrap();
        assert_eq!(first.snapshot(), second.snapshot());
        let kept = vec![
            (vec![0, 1], vec![], vec![admitted.clone(), first.clone()]),
            (vec![1, 0], vec![], vec![leased.clone(), second]),
        ];
        let points = crash_points(&kept);
        assert_eq!(
            points.last(),
            Some(&&first),
            "the walk goes on from the first order's end"
        );
        let mut since = Since::new(&before);
        for state in &points {
            since.note(state);
        }
        for state in [&before, &admitted, &leased, &first] {
            let back = since.clone().recover(Kept::Prefix, &state.snapshot());
            assert!(
                back.is_some(),
                "a prefix ending in {:?} refused",
                state.snapshot()
            );
        }
        // An order that ends elsewhere is not the server's: its states are
        // not noted.
        let mut other = leased.clone();
        other.enqueue("JOB-2", b"p", 3, 0, 5).unwrap();
        let elsewhere = vec![kept[0].clone(), (vec![1, 0], vec![], vec![other.clone()])];
        assert!(!crash_points(&elsewhere).contains(&&other));
        assert!(crash_points(&[]).is_empty());
    }
}
