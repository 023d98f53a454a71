//! The verdict table of `ackgap run`: rows the invariants, columns the
//! phases (the exhaustive search, each consumer's walks, the smoke
//! scenario), each cell one invariant over the runs of one phase.
//!
//! # Design notes
//!
//! The table has a `Phase` per column and a `Cell` per invariant (worst
//! verdict, runs, summed counts; effect-once of a consumer that does not
//! promise it is `reported_only`). New columns or fields go here; the
//! mutation score is added beside the report by the command
//! (`src/cli/run.rs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::check::{Report, Verdict};

/// One cell of the verdict table: one invariant over the runs of one phase.
/// Read back from a report's JSON (`ackgap merge`, the table `ackgap run`
/// prints from it), it says the same words.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The worst verdict of any run.
    pub verdict: Verdict,
    /// Runs judged.
    pub runs: u64,
    /// Runs with an `invalid` verdict.
    pub invalid: u64,
    /// Runs with an `unknown` verdict.
    pub unknown: u64,
    /// True when the invariant is reported, not judged, for this phase
    /// (effect-once for a consumer that does not promise it): its
    /// findings are expected, not failures.
    pub reported_only: bool,
    /// Each count of the invariant's reports, summed over the runs.
    pub counts: BTreeMap<String, u64>,
    /// For a sampled cell that broke: how many times its broken runs were
    /// run again with the same seed (`ackgap run --queue`'s battery), and
    /// in how many of those reruns the invariant broke again. A cell that
    /// broke and never again is [`Cell::seen_once`]. Not counted in
    /// `runs`: the cell's other figures are its first runs'.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reruns: u64,
    /// Reruns in which the invariant broke again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub again: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Default for Cell {
    fn default() -> Cell {
        Cell {
            verdict: Verdict::Valid,
            runs: 0,
            invalid: 0,
            unknown: 0,
            reported_only: false,
            counts: BTreeMap::new(),
            reruns: 0,
            again: 0,
        }
    }
}

impl Cell {
    /// The cell of an exhaustive search's invariant: its verdict and runs,
    /// and the chances the runs gave it to break as its `exercised` count.
    pub(crate) fn of_search(judged: &crate::explore::exhaust::Judged) -> Cell {
        Cell {
            verdict: judged.tally.verdict,
            runs: judged.tally.runs,
            invalid: judged.invalid,
            unknown: judged.unknown,
            reported_only: false,
            counts: judged
                .tally
                .exercised
                .map(|n| BTreeMap::from([("exercised".to_owned(), n)]))
                .unwrap_or_default(),
            reruns: 0,
            again: 0,
        }
    }

    pub(crate) fn add(&mut self, report: &Report, reported_only: bool) {
        self.runs += 1;
        // A run that did not exercise the invariant adds its counts (an
        // `exercised` of 0), not an unknown: the cell is `not exercised`
        // when no run exercised it.
        if !report.not_exercised() {
            self.verdict = self.verdict.max(report.verdict);
            self.invalid += u64::from(report.verdict == Verdict::Invalid);
            self.unknown += u64::from(report.verdict == Verdict::Unknown);
        }
        self.reported_only = reported_only;
        for (k, v) in &report.counts {
            *self.counts.entry((*k).to_owned()).or_default() += v;
        }
    }

    /// The situations in which the invariant could have broken, summed
    /// over the runs ([`crate::check::Report::exercised`]); `None` for an
    /// invariant that does not count them.
    pub fn exercised(&self) -> Option<u64> {
        self.counts
            .get("exercised")
            .or_else(|| self.counts.get("judged"))
            .copied()
    }

    /// True when the cell broke in one wall-clock run and in none of the
    /// reruns of that run: the checker's verdict on that run's history
    /// stands, but no rerun showed it again, so its cause is not traced.
    pub fn seen_once(&self) -> bool {
        self.verdict == Verdict::Invalid && self.reruns > 0 && self.again == 0
    }

    /// The cell's verdict in words: `valid`, `INVALID k/n` (with `again
    /// a/r` when its broken runs were rerun; `seen once k/n, again 0/r`
    /// when no rerun broke it), `unknown k/n`, `not exercised` (no run gave the invariant a chance to break), `-`
    /// (not run here), or the expected findings (`37 dup 5 lost`) of an
    /// invariant reported only.
    pub fn text(&self) -> String {
        match self.verdict {
            _ if self.runs == 0 => "-".into(),
            Verdict::Valid if self.exercised() == Some(0) => crate::check::NOT_EXERCISED.into(),
            Verdict::Invalid if self.seen_once() => format!(
                "seen once {}/{}, again 0/{}",
                self.invalid, self.runs, self.reruns
            ),
            Verdict::Invalid if self.reruns > 0 => format!(
                "INVALID {}/{}, again {}/{}",
                self.invalid, self.runs, self.again, self.reruns
            ),
            Verdict::Invalid => format!("INVALID {}/{}", self.invalid, self.runs),
            Verdict::Unknown => format!("unknown {}/{}", self.unknown, self.runs),
            Verdict::Valid if self.reported_only => {
                let dup = self.counts.get("duplicated").copied().unwrap_or(0);
                let lost = self.counts.get("lost").copied().unwrap_or(0);
                match (dup, lost) {
                    (0, 0) => "none seen".into(),
                    (d, 0) => format!("{d} dup"),
                    (0, l) => format!("{l} lost"),
                    (d, l) => format!("{d} dup {l} lost"),
                }
            }
            Verdict::Valid => "valid".into(),
        }
    }

    /// The cell as a table prints it: [`Cell::text`] and, beside a
    /// verdict, how many times the runs exercised the invariant (`valid
    /// (12)`).
    pub fn text_with_count(&self) -> String {
        let text = self.text();
        match self.exercised() {
            Some(n) if n > 0 && self.runs > 0 => format!("{text} ({n})"),
            _ => text,
        }
    }
}

/// One column of the verdict table.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// The column's name: `exhaust`, `smoke`, or a consumer's name (its
    /// random walks).
    pub name: String,
    /// What ran, in words.
    pub what: String,
    /// Runs (walks, searches, scenarios).
    pub runs: u64,
    /// Steps run against the server (for the smoke scenario: its history's
    /// events).
    pub steps: u64,
    /// Wall-clock time (ms).
    pub elapsed_ms: u64,
    /// True when every run of the column is exact: an explorer on logical
    /// time, whose runs replay to the same history, so a second run gives
    /// the same cells; false for one wall-clock sample (chaos, a queue on
    /// real time).
    pub exact: bool,
    /// One cell per invariant, by name.
    pub cells: BTreeMap<&'static str, Cell>,
    /// How to run each failing run again (the first few): each line is
    /// pasteable as it stands, with the server's environment and flags
    /// (`ackgap run` adds them to the library's bare lines of its own
    /// campaign, which knows no server).
    pub failures: Vec<String>,
    /// What each of those failing runs did and broke, as
    /// [`crate::explore::WalkReport::failure_text`] says it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counterexamples: Vec<String>,
    /// For a wall-clock column: each broken invariant's violation pinned
    /// down on logical time ([`crate::explore::reduce`]), by invariant.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub replays: BTreeMap<&'static str, Replayed>,
    /// For a wall-clock column: each broken invariant that no schedule
    /// read off its history replayed exactly, with why (what each order's
    /// schedule broke instead, the calls that overlapped, what was
    /// dropped), by invariant.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unreduced: BTreeMap<&'static str, String>,
}

/// A wall-clock finding replayed exactly: read off the run's history,
/// shrunk, and run again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replayed {
    /// The replay command, pasteable (`ackgap replay LINE --server …`).
    pub line: String,
    /// Steps read off the history, before shrinking.
    pub read: usize,
    /// Steps after shrinking.
    pub steps: usize,
    /// Runs of the shrunk replay that broke the invariant again.
    pub reproduced: usize,
    /// Runs of the shrunk replay.
    pub runs: usize,
}

impl Replayed {
    /// `read off the history (N steps), shrunk to M; broke it in K of R
    /// runs`.
    pub fn describe(&self) -> String {
        format!(
            "read off the run's history ({} steps), shrunk to {}; the replay broke it in {} of {} runs",
            self.read, self.steps, self.reproduced, self.runs
        )
    }
}

impl Phase {
    pub(crate) fn new(name: &str, what: String) -> Phase {
        Phase {
            name: name.to_owned(),
            what,
            runs: 0,
            steps: 0,
            elapsed_ms: 0,
            exact: false,
            cells: BTreeMap::new(),
            failures: Vec::new(),
            counterexamples: Vec::new(),
            replays: BTreeMap::new(),
            unreduced: BTreeMap::new(),
        }
    }

    pub(crate) fn add(&mut self, reports: &[Report], effect_once_promised: bool) {
        for r in reports {
            let reported_only = r.invariant == "effect-once" && !effect_once_promised;
            self.cells
                .entry(r.invariant)
                .or_default()
                .add(r, reported_only);
        }
    }

    /// The worst verdict of the column.
    pub fn verdict(&self) -> Verdict {
        self.cells
            .values()
            .map(|c| c.verdict)
            .max()
            .unwrap_or(Verdict::Unknown)
    }
}
