//! Where a server's clock moved under a time the history read from it.
//!
//! On the server clock (the chaos runner; an explorer without logical
//! time) a lease's `now_ms`, a reap's `now_ms` and `before_ms` and a
//! delayed enqueue's `before_ms` are the server's `TIME`, read in a call
//! of their own beside the script: an upper or a lower bound of the
//! script's clock *if the clock only went forward in between*. A fault
//! that moves a clock ([`crate::fault::Spec::moves_clock`]: a clock jump
//! and its heal, a skewed failover) breaks that: a script that ran on the
//! jumped clock and a `TIME` read after the heal disagree by the jump, and
//! a checker that compared them would report a violation that did not
//! happen. [`ClockMoves`] knows where each such move may have happened
//! (from the index the nemesis read before it acted, `from_index`, to its
//! own event) and tells a checker whether a timed operation straddles one:
//! then its time is not judged. Where the nodes' clocks disagree for a
//! whole window (a cluster whose primary's clock jumped alone; a skewed
//! failover), a `TIME` read on another node than the script's says
//! nothing of it, and the whole window counts as a move.
//!
//! A history written before `from_index` was recorded brackets each move
//! from the nemesis's previous inject, heal or disarm (its loop is
//! sequential, so the action began after that event): sound, wider.

use std::collections::BTreeSet;

use super::Op;
use crate::fault::FaultKind;
use crate::history::{Action, Event, EventKind, FaultEvent, F};

/// The spans of a history's events within which a server clock may have
/// moved.
#[derive(Debug, Default)]
pub(crate) struct ClockMoves {
    /// Inclusive spans of event indices.
    spans: Vec<(u64, u64)>,
}

impl ClockMoves {
    /// Reads the moves of `history`: every inject or heal (done, or
    /// failed) of a fault kind that moves a clock; and, where the nodes'
    /// clocks disagree for the fault's whole window (a cluster's primary
    /// jumped alone, its `hit` naming the `node`; a skewed failover's
    /// replicas ahead of their primary), the whole window: a `TIME` read
    /// on one node says nothing of a script's clock on another.
    pub(crate) fn of(history: &[Event]) -> ClockMoves {
        let mut spans = Vec::new();
        // The nemesis loop's last inject, heal or disarm.
        let mut loop_event: Option<u64> = None;
        // Injected and not healed yet: (kind, from, clocks disagree).
        let mut open: Vec<(FaultKind, u64, bool)> = Vec::new();
        for e in history {
            if e.f != F::Fault || e.process != "nemesis" {
                continue;
            }
            let Some(event) = fault_of(e) else { continue };
            let kind = event.fault;
            if event.action == Action::Fired {
                let one_node = event.hit().is_some_and(|hit| hit.get("node").is_some());
                if let Some(o) = open.iter_mut().rev().find(|o| o.0 == kind) {
                    o.2 |= one_node;
                }
                continue;
            }
            let previous = loop_event.replace(e.index);
            if !moves_clock(kind) || event.action == Action::Disarm {
                continue;
            }
            let from = event
                .detail
                .get("from_index")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or_else(|| previous.map_or(0, |p| p + 1));
            spans.push((from, e.index));
            match event.action {
                Action::Inject => open.push((kind, from, kind == FaultKind::SkewFailover)),
                _ => {
                    if let Some(at) = open.iter().position(|o| o.0 == kind) {
                        let (_, from, disagree) = open.remove(at);
                        if disagree {
                            spans.push((from, e.index));
                        }
                    }
                }
            }
        }
        // A window the history never saw healed lasts to its end.
        for (_, from, disagree) in open {
            if disagree {
                spans.push((from, u64::MAX));
            }
        }
        ClockMoves { spans }
    }

    /// True when no clock moved in the history.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// True when a clock may have moved between events `from` and `to`
    /// (inclusive).
    fn within(&self, from: u64, to: u64) -> bool {
        self.spans.iter().any(|&(a, b)| a <= to && from <= b)
    }

    /// True when a clock may have moved while `op` read the server's time:
    /// from its invocation to its completion, or, when `before_invoke`
    /// (a `TIME` read before the invoke was recorded), from the event
    /// after its process's previous one. An op that never completed
    /// straddles everything after it.
    pub(crate) fn straddle(&self, history: &[Event], op: &Op<'_>, before_invoke: bool) -> bool {
        if self.spans.is_empty() {
            return false;
        }
        let end = op.done.map_or(u64::MAX, |e| e.index);
        let start = match before_invoke {
            false => op.invoke.index,
            true => previous_of_process(history, op.invoke).map_or(0, |i| i + 1),
        };
        self.within(start, end)
    }

    /// The invoke indices of those of `calls` that straddle a move
    /// ([`ClockMoves::straddle`], their time read after the invoke).
    pub(crate) fn straddling(&self, history: &[Event], calls: &[&Op<'_>]) -> BTreeSet<u64> {
        calls
            .iter()
            .filter(|op| self.straddle(history, op, false))
            .map(|op| op.invoke.index)
            .collect()
    }
}

/// The fault event `e` records, done or failed (a failed one that kept
/// its event, [`crate::history::record::Process::fault_failed`]).
fn fault_of(e: &Event) -> Option<FaultEvent> {
    match e.kind {
        EventKind::Ok => e.fault(),
        EventKind::Fail => serde::Deserialize::deserialize(e.value.as_ref()?).ok(),
        _ => None,
    }
}

fn moves_clock(kind: FaultKind) -> bool {
    kind.spec().moves_clock
}

/// The index of the event of `event`'s process just before it in
/// `history` (sorted by index), if any.
fn previous_of_process(history: &[Event], event: &Event) -> Option<u64> {
    let at = history.partition_point(|e| e.index < event.index);
    history[..at]
        .iter()
        .rev()
        .find(|e| e.process == event.process)
        .map(|e| e.index)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::check::ops;
    use crate::history::record::Process;
    use crate::history::Recorder;

    fn jump(rec: &Recorder, action: Action, detail: serde_json::Value) {
        let event = FaultEvent::new(FaultKind::ClockJump, action, Some("server"), detail);
        Process::new(rec, "nemesis").fault(Ok(event));
    }

    fn lease(rec: &Recorder, w: &str) {
        let op = rec.invoke(w, F::Lease, None, None);
        rec.ok(
            op,
            Some("JOB-0"),
            Some(1),
            json!({"outcome": "leased", "now_ms": 1}),
        );
    }

    #[test]
    fn a_lease_whose_time_read_straddles_a_clock_heal_is_told_and_one_after_it_is_not() {
        let rec = Recorder::in_memory();
        lease(&rec, "w0"); // 0, 1
        let from = rec.next_index();
        let op = rec.invoke("w1", F::Lease, None, None); // 2: in flight...
        jump(&rec, Action::Heal, json!({"from_index": from})); // 3, 4: ...as the clock moved
        rec.ok(
            op,
            Some("JOB-0"),
            Some(2),
            json!({"outcome": "leased", "now_ms": 1}),
        ); // 5
        lease(&rec, "w0"); // 6, 7
        let history = rec.events();
        let moves = ClockMoves::of(&history);
        let leases: Vec<_> = ops(&history)
            .into_iter()
            .filter(|o| o.f() == F::Lease)
            .collect();
        let told: Vec<bool> = leases
            .iter()
            .map(|o| moves.straddle(&history, o, false))
            .collect();
        assert_eq!(told, [false, true, false]);
    }

    #[test]
    fn a_time_read_before_the_invoke_is_bracketed_from_the_process_s_previous_event() {
        let rec = Recorder::in_memory();
        lease(&rec, "w0"); // 0, 1
        jump(&rec, Action::Inject, json!({"from_index": 2})); // 2, 3
        lease(&rec, "w0"); // 4, 5: its TIME, read before 4, may precede the jump
        let history = rec.events();
        let moves = ClockMoves::of(&history);
        let all = ops(&history);
        let second = all.iter().filter(|o| o.f() == F::Lease).nth(1).unwrap();
        assert!(moves.straddle(&history, second, true));
        assert!(!moves.straddle(&history, second, false));
    }

    #[test]
    fn without_from_index_a_move_is_bracketed_from_the_nemesis_s_previous_action() {
        let rec = Recorder::in_memory();
        jump(&rec, Action::Inject, json!({})); // 0, 1
        lease(&rec, "w0"); // 2, 3
        jump(&rec, Action::Heal, json!({})); // 4, 5
        lease(&rec, "w0"); // 6, 7
        let history = rec.events();
        let moves = ClockMoves::of(&history);
        assert_eq!(moves.spans, [(0, 1), (2, 5)]);
    }

    #[test]
    fn a_cluster_s_primary_jumped_alone_makes_its_whole_window_a_move() {
        let rec = Recorder::in_memory();
        jump(&rec, Action::Inject, json!({"from_index": 0})); // 0, 1
        let hit = json!({"hit": {"jumped_ms": 900, "node": 7001, "offset_ms": 900}});
        jump(&rec, Action::Fired, hit); // 2, 3
        lease(&rec, "w0"); // 4, 5: on the jumped primary, `TIME` maybe not
        jump(&rec, Action::Heal, json!({"from_index": 6})); // 6, 7
        let history = rec.events();
        let moves = ClockMoves::of(&history);
        assert_eq!(moves.spans, [(0, 1), (6, 7), (0, 7)]);
        let all = ops(&history);
        let lease = all.iter().find(|o| o.f() == F::Lease).unwrap();
        assert!(moves.straddle(&history, lease, false));
    }

    #[test]
    fn a_failed_clock_move_keeps_its_kind_and_counts_as_a_move() {
        let rec = Recorder::in_memory();
        let event = FaultEvent::new(
            FaultKind::ClockJump,
            Action::Heal,
            Some("server"),
            json!({"from_index": 0}),
        );
        Process::new(&rec, "nemesis").fault_failed(event, "the clock file".into());
        let moves = ClockMoves::of(&rec.events());
        assert_eq!(moves.spans, [(0, 1)]);
    }

    #[test]
    fn faults_that_move_no_clock_bracket_nothing() {
        let rec = Recorder::in_memory();
        let event = FaultEvent::new(
            FaultKind::ServerKill,
            Action::Inject,
            Some("server"),
            json!({}),
        );
        Process::new(&rec, "nemesis").fault(Ok(event));
        assert!(ClockMoves::of(&rec.events()).is_empty());
    }
}
