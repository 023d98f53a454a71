//! How long the queue was unavailable during each slot migration of a run
//! (a kind that moves the queue's slot: `reshard`, `reshard-classic`),
//! read from the history alone.
//!
//! A migration's window ends when the nemesis records it fired and began
//! `took_ms` earlier. Within it, the queue was unavailable for the longest
//! stretch in which no queue call (an enqueue, lease, complete, fail,
//! extend, reap or read of any process; a consumer's effect is not the
//! queue's) completed with an answer (`ok`), counting from the window's
//! start and to its end. A queue that serves every call through the
//! migration has a stretch about as long as one call; one that is refused
//! until the slot's owner changes has the whole window.
//!
//! # Design notes
//!
//! The report lists the windows in `ChaosReport::migrations`.

use serde::Serialize;

use crate::history::{Action, Event, EventKind, F};

/// One migration, and the queue's calls during it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MigrationWindow {
    /// `atomic` or `classic`.
    pub kind: String,
    /// The slot moved.
    pub slot: u64,
    /// From which primary to which.
    pub from: String,
    /// To which primary.
    pub to: String,
    /// When the migration began and ended (ms of the history).
    pub start_ms: u64,
    /// See `start_ms`.
    pub end_ms: u64,
    /// Queue calls that completed with an answer within the window.
    pub answered: u64,
    /// Queue calls that completed with an error within the window (a
    /// refusal, or an unknown outcome).
    pub failed: u64,
    /// The longest stretch of the window without an answered queue call.
    pub unavailable_ms: u64,
}

impl MigrationWindow {
    /// One line for the report.
    pub fn describe(&self) -> String {
        format!(
            "{} migration of slot {} from {} to {} ({} ms, at {} ms): the longest stretch \
             without an answered queue call {} ms; {} calls answered, {} failed",
            self.kind,
            self.slot,
            self.from,
            self.to,
            self.end_ms - self.start_ms,
            self.start_ms,
            self.unavailable_ms,
            self.answered,
            self.failed
        )
    }
}

/// Whether `f` is a call of the queue itself.
fn queue_call(f: &F) -> bool {
    matches!(
        f,
        F::Enqueue | F::Lease | F::Complete | F::Fail | F::Extend | F::Reap | F::Read
    )
}

/// Every migration the history records, in order, with the queue's calls
/// during it.
pub fn migration_windows(events: &[Event]) -> Vec<MigrationWindow> {
    let mut done: Vec<u64> = events
        .iter()
        .filter(|e| e.kind == EventKind::Ok && queue_call(&e.f) && e.process != "nemesis")
        .map(|e| e.time_ms)
        .collect();
    done.sort_unstable();
    events
        .iter()
        .filter_map(|e| {
            let fault = e.fault()?;
            if fault.action != Action::Fired || !fault.fault.spec().moves_slot {
                return None;
            }
            let hit = fault.hit()?;
            let took = hit["took_ms"].as_u64()?;
            let (start, end) = (e.time_ms.saturating_sub(took), e.time_ms);
            let inside: Vec<u64> = done
                .iter()
                .copied()
                .filter(|t| (start..=end).contains(t))
                .collect();
            let mut last = start;
            let mut longest = 0;
            for t in inside.iter().copied().chain([end]) {
                longest = longest.max(t - last);
                last = t;
            }
            let failed = events
                .iter()
                .filter(|c| {
                    matches!(c.kind, EventKind::Fail | EventKind::Info)
                        && queue_call(&c.f)
                        && (start..=end).contains(&c.time_ms)
                })
                .count() as u64;
            Some(MigrationWindow {
                kind: hit["kind"].as_str().unwrap_or("atomic").to_owned(),
                slot: hit["slot"].as_u64()?,
                from: hit["from"].as_str()?.to_owned(),
                to: hit["to"].as_str()?.to_owned(),
                start_ms: start,
                end_ms: end,
                answered: inside.len() as u64,
                failed,
                unavailable_ms: longest,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(time_ms: u64, process: &str, kind: EventKind, f: F) -> Event {
        Event::bare(time_ms, process, kind, f)
    }

    fn migration(end_ms: u64, took_ms: u64) -> Event {
        Event {
            value: Some(
                json!({"action": "fired", "fault": "reshard-classic", "hit": {
                "kind": "classic", "slot": 7, "from": "a", "to": "b", "keys": 4, "took_ms": took_ms}}),
            ),
            ..event(end_ms, "nemesis", EventKind::Ok, F::Fault)
        }
    }

    #[test]
    fn the_longest_stretch_without_an_answered_queue_call_is_the_migration_s_unavailability() {
        let events = vec![
            event(90, "w0", EventKind::Ok, F::Lease),
            event(110, "w0", EventKind::Ok, F::Complete),
            // An effect is the consumer's, not the queue's.
            event(150, "w1", EventKind::Ok, F::Effect),
            event(160, "w1", EventKind::Fail, F::Lease),
            event(180, "producer", EventKind::Ok, F::Enqueue),
            migration(200, 100),
            event(210, "w0", EventKind::Ok, F::Lease),
        ];
        let windows = migration_windows(&events);
        assert_eq!(windows.len(), 1);
        let w = &windows[0];
        assert_eq!((w.start_ms, w.end_ms), (100, 200));
        // 100 → 110 → 180 → 200: the stretch from 110 to 180.
        assert_eq!(w.unavailable_ms, 70);
        assert_eq!((w.answered, w.failed), (2, 1));
        assert_eq!(w.kind, "classic");
    }

    #[test]
    fn a_migration_without_an_answered_call_was_unavailable_for_its_whole_window() {
        let events = vec![
            event(120, "w0", EventKind::Info, F::Complete),
            migration(300, 250),
        ];
        let w = &migration_windows(&events)[0];
        assert_eq!(w.unavailable_ms, 250);
        assert_eq!((w.answered, w.failed), (0, 1));
    }

    #[test]
    fn other_faults_are_not_migrations() {
        let mut other = migration(300, 250);
        other.value.as_mut().unwrap()["fault"] = json!("server-kill");
        assert!(migration_windows(&[other]).is_empty());
    }
}
