//! **admission**: a duplicate enqueue is refused and changes nothing. At
//! most one enqueue per id is acknowledged as `enqueued`, and every lease of
//! a job carries the payload of the enqueue that admitted it.

use std::collections::BTreeMap;

use super::{ops, Report};
use crate::history::{Event, F};

/// Checks admission. Counts: `admitted`, `duplicates_refused`.
pub fn check(history: &[Event]) -> Report {
    let mut report = Report::new("admission");
    let mut admitted: BTreeMap<&str, (u64, Option<&serde_json::Value>)> = BTreeMap::new();
    let all = ops(history);
    for op in &all {
        if op.f() != F::Enqueue {
            continue;
        }
        let job = op.job().unwrap_or_default();
        let payload = op.invoke.value.as_ref().and_then(|v| v.get("payload"));
        match op.outcome() {
            Some("enqueued") => {
                report.count("admitted", 1);
                if let Some((first, _)) = admitted.get(job) {
                    report.violate(format!(
                        "{job}: admitted twice (events {first} and {})",
                        op.end()
                    ));
                } else {
                    admitted.insert(job, (op.end(), payload));
                }
            }
            Some("duplicate") => report.count("duplicates_refused", 1),
            _ => {}
        }
    }
    for op in &all {
        if op.f() != F::Lease || op.outcome() != Some("leased") {
            continue;
        }
        let job = op.job().unwrap_or_default();
        let got = op.done.and_then(|e| e.value.as_ref()?.get("payload"));
        if let Some((at, Some(want))) = admitted.get(job) {
            if got.is_some_and(|g| g != *want) {
                report.violate(format!(
                    "{job}: leased at event {} with payload {} but admitted at event {at} with {}",
                    op.end(),
                    got.expect("checked"),
                    want
                ));
            }
        }
    }
    report
}
