//! **structure**: every row is in exactly the index its state names, no
//! index entry lacks a row, and attempts never decrease. The queue adapter
//! reports the problems it sees at each read; this checker also requires
//! the tokens granted to each job to increase strictly.

use std::collections::BTreeMap;

use super::{ops, Report};
use crate::history::{Event, F};

/// Checks structure. Counts: `reads`, `problems`.
pub fn check(history: &[Event]) -> Report {
    let mut report = Report::new("structure");
    let mut last_token: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for op in ops(history) {
        match op.f() {
            F::Read if op.is_ok() => {
                report.count("reads", 1);
                let problems = op
                    .done
                    .and_then(|e| e.value.as_ref()?.get("problems")?.as_array().cloned())
                    .unwrap_or_default();
                for p in problems {
                    report.count("problems", 1);
                    report.violate(format!(
                        "read at event {}: {}",
                        op.end(),
                        p.as_str().unwrap_or("?")
                    ));
                }
            }
            F::Lease if op.outcome() == Some("leased") => {
                let (Some(job), Some(token)) = (op.job(), op.token()) else {
                    continue;
                };
                if let Some((prev, at)) = last_token.get(job) {
                    if token <= *prev {
                        report.violate(format!(
                            "{job}: lease at event {} granted token {token}, not above token {prev} granted at event {at} (attempts decreased or were reused)",
                            op.end()
                        ));
                    }
                }
                last_token.insert(job, (token, op.end()));
            }
            _ => {}
        }
    }
    report
}
