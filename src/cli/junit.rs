//! `--junit FILE`: a run's verdicts as JUnit XML, the format CI systems
//! read (Jenkins, GitLab, GitHub's test reporters) and nextest writes,
//! through nextest's own writer, `quick-junit`. One test suite per phase,
//! one test case per invariant in it (per mutant for `ackgap mutants`): an
//! `invalid` verdict is a failure carrying the counterexample and the
//! command that replays it, an `unknown` one an error (nothing was proved
//! either way), a reported-only finding a pass that says what was seen.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ackgap::campaign::RunReport;
use ackgap::check::Verdict;
use ackgap::explore::shrink::Shrunk;
use ackgap::explore::WalkReport;
use ackgap::mutants::Matrix;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::{Exit, ExitError};

/// A test case for `invariant` with verdict `verdict`; `message` and
/// `details` (the counterexample, the replay line) for one that did not
/// pass.
fn case(name: &str, class: &str, verdict: Verdict, message: &str, details: &str) -> TestCase {
    let status = match verdict {
        Verdict::Valid => TestCaseStatus::success(),
        Verdict::Invalid | Verdict::Unknown => {
            let kind = if verdict == Verdict::Invalid {
                NonSuccessKind::Failure
            } else {
                NonSuccessKind::Error
            };
            let mut status = TestCaseStatus::non_success(kind);
            status.set_message(message);
            status.set_type(verdict.to_string());
            status.set_description(details);
            status
        }
    };
    let mut case = TestCase::new(name, status);
    case.set_classname(class);
    if verdict == Verdict::Valid && !details.is_empty() {
        case.set_system_out(details);
    }
    case
}

/// The walks of `ackgap explore`: one suite, one case per invariant, the
/// first walk (in seed order) that broke it as its counterexample; where
/// that walk is the one `shrunk` was shrunk from and it broke the
/// shrunk invariant, the minimal counterexample and its replay line come
/// first, the unshrunk walk after it.
pub(super) fn explore(
    reports: &[WalkReport],
    shrunk: Option<&Shrunk>,
    elapsed: Duration,
) -> Report {
    let mut report = Report::new("ackgap explore");
    let mut suite = TestSuite::new("explore");
    // invariant -> (worst verdict, walks judged, walks not valid, first
    // such walk, what was judged over all walks)
    type Row<'a> = (
        Verdict,
        u64,
        u64,
        Option<&'a WalkReport>,
        Option<(u64, &'static str)>,
    );
    let mut by_invariant: BTreeMap<&str, Row<'_>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for walk in reports {
        for inv in &walk.invariants {
            let entry = by_invariant.entry(inv.invariant).or_insert_with(|| {
                order.push(inv.invariant);
                (Verdict::Valid, 0, 0, None, None)
            });
            if let Some((n, what)) = inv.exercised() {
                entry.4 = Some((entry.4.map_or(0, |(m, _)| m) + n, what));
            }
            // A walk that did not exercise it is not counted.
            if inv.not_exercised() {
                continue;
            }
            entry.0 = entry.0.max(inv.verdict);
            entry.1 += 1;
            if inv.verdict != Verdict::Valid {
                entry.2 += 1;
                entry.3.get_or_insert(walk);
            }
        }
    }
    for name in order {
        let (verdict, runs, bad, first, judged) = by_invariant[name];
        let judged = judged.map_or(String::new(), |(n, what)| {
            format!("; exercised by {n} {what}")
        });
        if runs == 0 {
            // Not exercised in any walk: skipped, but no-loss with no
            // job owed means the walks tested nothing, an error.
            let why = format!("not exercised in any of {} walks", reports.len());
            if name == "no-loss" {
                suite.add_test_case(case(name, "explore", Verdict::Unknown, &why, ""));
            } else {
                let mut case = TestCase::new(name, TestCaseStatus::skipped());
                case.set_classname("explore");
                case.set_system_out(why);
                suite.add_test_case(case);
            }
            continue;
        }
        let minimal = shrunk.filter(|s| {
            first.is_some_and(|walk| walk.seed == s.report.seed) && s.invariant == name
        });
        let (message, details) = match (first, minimal) {
            (Some(walk), Some(shrunk)) => (
                format!(
                    "{verdict} in {bad} of {runs} walks{judged}; first: seed {}, shrunk to {} steps: {}",
                    walk.seed,
                    shrunk.line().schedule.len(),
                    shrunk.report.replay_line_command()
                ),
                format!(
                    "minimal counterexample:\n{}\nunshrunk walk:\n{}",
                    shrunk.text(),
                    walk.failure_text()
                ),
            ),
            (Some(walk), None) => (
                format!(
                    "{verdict} in {bad} of {runs} walks{judged}; first: seed {}",
                    walk.seed
                ),
                format!("{}{}", walk.failure_text(), walk.counterexample_text()),
            ),
            (None, _) => (String::new(), format!("valid in {runs} walks{judged}")),
        };
        suite.add_test_case(case(name, "explore", verdict, &message, &details));
    }
    suite.set_time(elapsed);
    report.add_test_suite(suite);
    report.set_time(elapsed);
    report
}

/// `ackgap run`: a suite per phase (the exhaustive search, each
/// consumer's walks, the smoke scenario), a case per invariant judged
/// there.
pub(super) fn run(run: &RunReport) -> Report {
    phases(
        "ackgap run",
        &run.invariants,
        &run.phases,
        Duration::from_millis(run.elapsed_ms),
    )
}

/// `ackgap run --queue Q`: the battery's phases (exhaust, walks, chaos,
/// the durability matrix's columns), like [`run`]'s.
pub(super) fn battery(battery: &ackgap::campaign::battery::BatteryReport) -> Report {
    phases(
        &format!("ackgap run --queue {}", battery.config.queue),
        &battery.invariants,
        &battery.phases,
        Duration::from_millis(battery.elapsed_ms),
    )
}

/// A suite per phase, a case per invariant of `invariants` judged there.
fn phases(
    title: &str,
    invariants: &[&'static str],
    phases: &[ackgap::campaign::Phase],
    elapsed: Duration,
) -> Report {
    let mut report = Report::new(title);
    for phase in phases {
        let mut suite = TestSuite::new(phase.name.as_str());
        for name in invariants {
            let Some(cell) = phase.cells.get(name) else {
                continue;
            };
            let text = cell.text();
            if text == "-" {
                continue;
            }
            if text == ackgap::check::NOT_EXERCISED {
                let mut case = TestCase::new(*name, TestCaseStatus::skipped());
                case.set_classname(phase.name.as_str());
                case.set_system_out(format!(
                    "not exercised in {} runs: no {}",
                    cell.runs,
                    ackgap::check::exercises(name).unwrap_or("chance to break it")
                ));
                suite.add_test_case(case);
                continue;
            }
            let replays: String = phase
                .failures
                .iter()
                .map(|f| format!("{}: {f}\n", if phase.exact { "replay" } else { "rerun" }))
                .collect();
            let details = match cell.verdict {
                Verdict::Valid if cell.reported_only => {
                    format!(
                        "reported, not judged ({} does not promise it): {text}",
                        phase.name
                    )
                }
                Verdict::Valid => String::new(),
                _ => format!(
                    "{}\n{}{replays}",
                    phase.what,
                    phase.counterexamples.join("\n")
                ),
            };
            suite.add_test_case(case(
                name,
                &phase.name,
                cell.verdict,
                &format!("{text} ({} runs)", cell.runs),
                &details,
            ));
        }
        suite.set_time(Duration::from_millis(phase.elapsed_ms));
        report.add_test_suite(suite);
    }
    report.set_time(elapsed);
    report
}

/// `ackgap mutants`: one suite, one case per mutant; a survivor is a
/// failure (the checker missed a broken queue), a kill a pass that keeps
/// its minimal counterexample and the command that runs it again.
pub(super) fn mutants(matrix: &Matrix) -> Report {
    let mut report = Report::new("ackgap mutants");
    let mut suite = TestSuite::new("mutants");
    for k in &matrix.kills {
        let (verdict, message, details) = if k.killed {
            (
                Verdict::Valid,
                String::new(),
                format!(
                    "killed by {} in the {} phase: {}\nline (on the mutant's scripts): {}\nrerun: ackgap mutants --only {}",
                    k.invariant.unwrap_or("-"),
                    k.phase.unwrap_or("-"),
                    k.counterexample.as_deref().unwrap_or("-"),
                    k.line.as_deref().unwrap_or("-"),
                    k.mutant
                ),
            )
        } else {
            (
                Verdict::Invalid,
                format!("survived: the checker missed {}", k.breaks),
                format!(
                    "{} states and {} seeds ran without an invariant failing",
                    k.states, k.seeds
                ),
            )
        };
        let mut case = case(k.mutant, "mutants", verdict, &message, &details);
        case.set_time(Duration::from_secs_f64(k.elapsed_ms / 1000.0));
        suite.add_test_case(case);
    }
    suite.set_time(Duration::from_secs_f64(matrix.elapsed_ms / 1000.0));
    report.add_test_suite(suite);
    report
}

/// Writes `report` to `path`; refuses, before the run, a path that exists
/// (nothing a previous run wrote is overwritten) — see [`check_path`].
pub(super) fn write(path: &Path, report: &Report) -> Result<(), ExitError> {
    let xml = report
        .to_string()
        .map_err(|e| ExitError::new(Exit::Internal, format!("JUnit XML: {e}")))?;
    std::fs::write(path, xml).map_err(|e| {
        ExitError::new(
            Exit::CantCreate,
            format!("cannot write {}: {e}", path.display()),
        )
    })
}

/// A `--junit FILE` that exists already, or whose folder does not, is
/// refused before anything runs.
pub(super) fn check_path(path: &Path) -> Result<(), ExitError> {
    // Only a regular file can be an earlier run's: a device or a pipe
    // (`/dev/stdout`) is written to as asked.
    if path.is_file() || path.is_dir() {
        return Err(ExitError::new(
            Exit::CantCreate,
            format!(
                "--junit {}: it exists (an earlier run's?); remove it or name another file",
                path.display()
            ),
        ));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir {
        if !dir.is_dir() {
            return Err(ExitError::new(
                Exit::CantCreate,
                format!("--junit {}: no folder {}", path.display(), dir.display()),
            ));
        }
    }
    Ok(())
}
