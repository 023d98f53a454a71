//! **no-loss**: every job whose enqueue was acknowledged ends, after faults
//! heal and workers drain, `done` or `dead`. Judged on the last read of the
//! whole queue; without one the verdict is unknown.

use std::collections::BTreeSet;

use super::{final_read, ops, Report, Verdict};
use crate::history::{Event, EventKind, F};

/// Checks no-loss. Counts: `acknowledged`, `done`, `dead`, `lost`, and
/// `unacknowledged` (enqueues whose outcome is unknown: not counted lost).
pub fn check(history: &[Event]) -> Report {
    let mut report = Report::new("no-loss");
    for name in ["acknowledged", "done", "dead", "lost"] {
        report.count(name, 0);
    }
    let mut acknowledged = BTreeSet::new();
    for op in ops(history) {
        if op.f() != F::Enqueue {
            continue;
        }
        match (op.outcome(), op.done.map(|e| e.kind)) {
            (Some("enqueued"), _) => {
                acknowledged.insert(op.job().unwrap_or_default().to_owned());
            }
            (_, Some(EventKind::Info)) | (_, None) => report.count("unacknowledged", 1),
            _ => {}
        }
    }
    report.count("acknowledged", acknowledged.len() as u64);
    let Some(states) = final_read(history) else {
        report.verdict = Verdict::Unknown;
        report
            .violations
            .push("no final read of the queue: cannot tell what was lost".into());
        return report;
    };
    for id in &acknowledged {
        match states.get(id).map(String::as_str) {
            Some("done") => report.count("done", 1),
            Some("dead") => report.count("dead", 1),
            other => {
                report.count("lost", 1);
                report.violate(format!(
                    "{id}: enqueue acknowledged, but at the end it is {}",
                    other.unwrap_or("absent")
                ));
            }
        }
    }
    report
}
