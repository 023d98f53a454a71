//! What the search on another queue judges of a path before healing it:
//! every invariant but no-loss, and the chances a path no healed run
//! judges adds to the tally.

use super::{line_of, ExhaustConfig, ExhaustReport, Schedule, Step, Subject};
use crate::check::{Report, Verdict};

/// The invariants a path's history is judged by before healing: every
/// checker but no-loss, which asks where each job ended (a job active when
/// the path stops is not lost; the healed run of a new state judges it).
fn judged_unhealed(invariant: &str) -> bool {
    invariant != "no-loss"
}

/// Every invariant a path's unhealed `reports` (every checker's, of its
/// events) say it broke, each with why.
pub(super) fn unhealed_violations(reports: &[Report]) -> Vec<(&'static str, String)> {
    reports
        .iter()
        .filter(|r| judged_unhealed(r.invariant) && r.verdict == Verdict::Invalid)
        .map(|r| {
            let why = r
                .violations
                .first()
                .map_or_else(|| "invalid".to_owned(), |v| v.text.clone());
            (r.invariant, why)
        })
        .collect()
}

/// Adds the unhealed `reports` of a path that no healed run judges (a
/// step that changed nothing the state shows, a transition into a state
/// seen before) to `report.judged`: their chances to break each invariant
/// judged unhealed that counts its chances. An empty lease while another
/// worker holds the only job is such a step, and lease-exclusive's chance.
pub(super) fn tally_unhealed(report: &mut ExhaustReport, reports: &[Report]) {
    for r in reports {
        if judged_unhealed(r.invariant) && r.exercised().is_some() {
            report.judged.entry(r.invariant).or_default().add(r);
        }
    }
}

/// Writes each of `broken`, what `path`'s unhealed history broke, into
/// `report` as a finding with its replay line.
pub(super) fn found_unhealed(
    report: &mut ExhaustReport,
    subject: &Subject,
    config: &ExhaustConfig,
    path: &[Step],
    broken: &[(&'static str, String)],
) {
    for (invariant, why) in broken {
        let failure = format!("{}: {invariant}: {why}", Schedule(path.to_vec()));
        let line = line_of(subject, config, path.to_vec()).to_string();
        report.found(invariant, failure, line);
    }
}
