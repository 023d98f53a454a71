//! **settle-once**: a job becomes `done` at most once and is never leased
//! again afterwards. Duplicate *deliveries* are counted, not judged: that is
//! what at-least-once means.

use std::collections::BTreeMap;

use super::{Ops, Report, Role};
use crate::history::F;

/// Checks settle-once. Counts: `settled`, `deliveries`,
/// `duplicate_deliveries` (leases beyond the first per job: Jepsen's
/// duplicated count) and `duplicated` (jobs delivered more than once).
/// Both are reported, never a violation: that is at-least-once.
pub fn check(ops: &Ops<'_>) -> Report {
    let mut report = Report::new("settle-once");
    let mut settled_at: BTreeMap<&str, u64> = BTreeMap::new();
    let mut deliveries: BTreeMap<&str, u64> = BTreeMap::new();
    let all = ops.all();
    for op in all {
        if op.f() == F::Complete && op.outcome() == Some("settled") {
            let job = op.job().unwrap_or_default();
            report.count("settled", 1);
            if let Some(first) = settled_at.get(job) {
                report.violate(
                    Some(job),
                    &[(*first, Role::First), (op.end(), Role::Second)],
                    format!(
                        "{job}: settled as done twice (events {first} and {})",
                        op.end()
                    ),
                );
            } else {
                settled_at.insert(job, op.end());
            }
        }
    }
    for op in all {
        if op.f() != F::Lease || op.outcome() != Some("leased") {
            continue;
        }
        let job = op.job().unwrap_or_default();
        *deliveries.entry(job).or_default() += 1;
        if let Some(at) = settled_at.get(job) {
            if *at < op.invoke.index {
                report.violate(
                    Some(job),
                    &[(op.end(), Role::Broke), (*at, Role::Earlier)],
                    format!(
                        "{job}: leased to {} at event {} after it was settled as done at event {at}",
                        op.invoke.process,
                        op.end()
                    ),
                );
            }
        }
    }
    let total: u64 = deliveries.values().sum();
    report.count("deliveries", total);
    report.count("judged", total);
    report.count("duplicate_deliveries", total - deliveries.len() as u64);
    // Redeliveries: the only deliveries a second settle can follow.
    report.count("exercised", total - deliveries.len() as u64);
    let duplicated = deliveries.values().filter(|n| **n > 1).count();
    report.count("duplicated", duplicated as u64);
    report
}
