//! The typed payload of a fault event: what the chaos runner's nemesis
//! writes in the `value` of a `fault` operation (`{"fault": KIND,
//! "action": ACTION, "target": WHO, ...detail}`), read back by
//! [`Event::fault`](super::Event::fault). The readers (the report, the
//! runner's error watch, its migration, liveness and marker findings)
//! match its [`FaultKind`] and [`Action`], never a name.
//!
//! # Design notes
//!
//! The JSONL is unchanged: serde writes the struct into the event's
//! `value` (a JSON object, its keys in order), so the bytes are those of
//! the histories written before it, and those histories read back. The
//! explorers' ticks and waits are `fault` operations too, of the
//! nemesis, with `{"outcome": "tick"}`: not a fault event, so
//! `Event::fault` answers `None` for them, and for a value it cannot
//! read (a kind this build does not know).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fault::FaultKind;

/// What a fault event says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Injected: armed on a worker or the proxy, or done on the server;
    /// `detail` holds `at_ms` and `duration_ms` (the schedule's).
    Inject,
    /// It hit something: `detail["hit"]` says what (a job, a slot, a
    /// clock's jump).
    Fired,
    /// Its window ended and it was undone; `detail` says how.
    Heal,
    /// Armed and never fired: taken back at the end of the faults phase.
    Disarm,
}

/// One fault event: its kind, what happened, whom it hit and the rest as
/// recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// The kind, by its name (`clock-jump`).
    pub fault: FaultKind,
    /// Inject, fired, heal or disarm.
    pub action: Action,
    /// The worker it hits (`w3`), or `server`; written `null` when none.
    #[serde(default)]
    pub target: Option<String>,
    /// Everything else the event records (`duration_ms`, `hit`,
    /// `jumped_ms`, `rejoined`, ...), as written.
    #[serde(flatten)]
    pub detail: Map<String, Value>,
}

impl FaultEvent {
    /// An event of `fault` and `action` at `target`, with `detail` (a
    /// JSON object; anything else adds nothing).
    pub fn new(
        fault: FaultKind,
        action: Action,
        target: Option<&str>,
        detail: Value,
    ) -> FaultEvent {
        FaultEvent {
            fault,
            action,
            target: target.map(str::to_owned),
            detail: match detail {
                Value::Object(map) => map,
                _ => Map::new(),
            },
        }
    }

    /// The window the schedule gave it (`duration_ms` of its inject), 0
    /// when none.
    pub fn duration_ms(&self) -> u64 {
        self.detail
            .get("duration_ms")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    /// What it hit (`detail["hit"]`), when it says.
    pub fn hit(&self) -> Option<&Value> {
        self.detail.get("hit")
    }

    /// The event as the history writes it.
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a fault event serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::record::Process;
    use crate::history::{read, Recorder, F};

    /// A fault event's line, byte for byte as `ackgap chaos` wrote it before
    /// the payload was typed (from a run of `--seed 1 --faults
    /// all,clock-jump,power-loss`).
    const WRITTEN_BEFORE: [&str; 3] = [
        r#"{"action":"inject","at_ms":734,"duration_ms":1644,"fault":"clock-jump","target":"server"}"#,
        r#"{"action":"fired","fault":"clock-jump","hit":{"jumped_ms":1644,"offset_ms":1644},"target":"server"}"#,
        r#"{"action":"heal","fault":"clock-jump","jumped_ms":-1644,"offset_ms":0,"target":"server"}"#,
    ];

    #[test]
    fn a_fault_event_is_written_as_before_and_reads_back_typed() {
        let rec = Recorder::in_memory();
        let nemesis = Process::new(&rec, "nemesis");
        let kind = FaultKind::ClockJump;
        let server = Some("server");
        let events = [
            FaultEvent::new(
                kind,
                Action::Inject,
                server,
                serde_json::json!({"at_ms": 734, "duration_ms": 1644}),
            ),
            FaultEvent::new(
                kind,
                Action::Fired,
                server,
                serde_json::json!({"hit": {"jumped_ms": 1644, "offset_ms": 1644}}),
            ),
            FaultEvent::new(
                kind,
                Action::Heal,
                server,
                serde_json::json!({"jumped_ms": -1644, "offset_ms": 0}),
            ),
        ];
        for e in &events {
            nemesis.fault(Ok(e.clone()));
        }
        let written = rec.events();
        let oks: Vec<_> = written.iter().filter(|e| e.value.is_some()).collect();
        for (e, before) in oks.iter().zip(WRITTEN_BEFORE) {
            assert_eq!(
                serde_json::to_string(e.value.as_ref().unwrap()).unwrap(),
                before
            );
        }
        let typed: Vec<FaultEvent> = oks.iter().filter_map(|e| e.fault()).collect();
        assert_eq!(typed, events);
        assert_eq!(typed[0].duration_ms(), 1644);
        // A line written before reads back as the same typed event.
        let line = format!(
            r#"{{"v":1,"index":0,"time_ms":5,"process":"nemesis","type":"invoke","f":"fault"}}
{{"v":1,"index":1,"time_ms":5,"process":"nemesis","type":"ok","f":"fault","value":{}}}"#,
            WRITTEN_BEFORE[1]
        );
        let back = read(line.as_bytes(), "h.jsonl").unwrap();
        assert_eq!(back[1].f, F::Fault);
        assert_eq!(back[1].fault(), Some(events[1].clone()));
    }

    #[test]
    fn a_tick_of_the_explorers_and_an_unknown_kind_are_no_fault_event() {
        let rec = Recorder::in_memory();
        let nemesis = Process::new(&rec, "nemesis");
        nemesis.done(
            F::Fault,
            None,
            None,
            serde_json::json!({"outcome": "tick", "ms": 5}),
        );
        nemesis.done(
            F::Fault,
            None,
            None,
            serde_json::json!({"fault": "meteor-strike", "action": "inject", "target": "server"}),
        );
        assert!(rec.events().iter().all(|e| e.fault().is_none()));
    }
}
