//! Checkers: one file per invariant, each a pure function of a history,
//! composed into a verdict. They read nothing but events, so they judge any
//! queue behind the adapter trait, not only the reference one; a job's token
//! is whatever the queue granted with its lease.
//!
//! # Design notes
//!
//! `check_all` pairs a history's operations once, into the op index
//! [`Ops`] (each invocation with its process's completion; each job's
//! operations, the final read, the dedup promise, the clock's moves), and
//! hands it to every checker. A checker judges each rule of its invariant
//! in a function of its own and returns a `Report` with a verdict, counts
//! and violations; `check_all` composes them, and the worst verdict wins. `check::judge`
//! runs one checker: a checker that panics is `unknown` under its own name,
//! with the panic's message. `check_all` also checks that the history is
//! well formed: an ill-formed history gets the one report `well-formed`
//! (unknown) and no verdict on the queue.
//!
//! Jepsen's total-queue counts sit under DESIGN.md's names: lost, recovered
//! and phantom done (a job read `done` that no complete could have settled)
//! in no-loss, unexpected in admission, duplicated in settle-once (reported,
//! never a failure).
//!
//! Each report counts what it judged (`judged`) and the situations in which
//! the invariant could have broken (`exercised`: stale settles after a reap
//! or a newer lease, redeliveries, duplicate enqueues, redeliveries after an
//! effect, jobs at their bound, lease calls made while another lease was live; `check::exercises` says them in words). An
//! invariant with none is `unknown` and reads `not exercised`, never
//! `valid`, and `check::overall` leaves it out of the run's verdict (no-loss
//! excepted), which names it instead (`check::verdict_line`). `check::Tally`
//! sums an invariant over runs (explore's `--json` `invariants`, merged by
//! `ackgap merge`); `--require-exercised` turns a valid run with a required
//! invariant not exercised into exit 2.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::history::{validate, Event};

pub mod admission;
pub mod bounded_retries;
pub mod delay_respected;
pub mod effect_once;
pub mod fenced_settlement;
pub mod lease_exclusive;
pub mod lease_respected;
pub mod no_loss;
pub mod ops;
pub mod settle_once;
pub mod structure;
pub mod violation;

pub use ops::{final_read, ops, Op, Ops};
pub use violation::{Cited, Role, Violation};

#[cfg(test)]
pub(crate) mod canary;
pub(crate) mod clock;

/// The outcome of one checker, or of all of them: the worst one wins.
///
/// Deliberately exhaustive (not `#[non_exhaustive]`): the three verdicts
/// are Jepsen's, ordered valid < unknown < invalid, and they map one to one
/// onto the exit codes 0, 2 and 1. A caller that matches every verdict
/// should be made to think again if a fourth ever appears.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The invariant held on this history.
    #[default]
    Valid,
    /// The history does not say (no final read, a checker that could not
    /// run).
    Unknown,
    /// The invariant was broken; the report says where.
    Invalid,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Verdict::Valid => "valid",
            Verdict::Unknown => "unknown",
            Verdict::Invalid => "invalid",
        })
    }
}

/// What one checker found: a verdict, counts, and each violation as data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The invariant's name, as DESIGN.md spells it (`no-loss`, ...).
    pub invariant: &'static str,
    /// valid, invalid or unknown.
    pub verdict: Verdict,
    /// Counts that explain the verdict (`lost`, `refused_stale`, ...).
    pub counts: BTreeMap<&'static str, u64>,
    /// Each violation: its job, the events it rests on with their roles,
    /// and its sentence ([`Violation`]).
    pub violations: Vec<Violation>,
}

impl Report {
    fn new(invariant: &'static str) -> Report {
        Report {
            invariant,
            verdict: Verdict::Valid,
            counts: BTreeMap::new(),
            violations: Vec::new(),
        }
    }

    fn count(&mut self, name: &'static str, n: u64) {
        *self.counts.entry(name).or_default() += n;
    }

    /// How many things the invariant judged (its `judged` count), and
    /// what they are in words ([`judges`]); `None` for a report that
    /// counts none (liveness, refinement).
    pub fn judged(&self) -> Option<(u64, &'static str)> {
        Some((*self.counts.get("judged")?, judges(self.invariant)?))
    }

    /// How many situations the run gave the invariant to break in (its
    /// `exercised` count, or its `judged` count for an invariant whose
    /// every judged thing is such a chance), and what they are in words
    /// ([`exercises`]); `None` for a report that counts none.
    pub fn exercised(&self) -> Option<(u64, &'static str)> {
        let n = self
            .counts
            .get("exercised")
            .or_else(|| self.counts.get("judged"))?;
        Some((*n, exercises(self.invariant)?))
    }

    /// True when the run gave the invariant no chance to break: its
    /// verdict is unknown, never a vacuous valid ([`check_all`]).
    pub fn not_exercised(&self) -> bool {
        self.verdict == Verdict::Unknown && self.exercised().is_some_and(|(n, _)| n == 0)
    }

    /// The verdict as a report's line shows it: `not exercised` when the
    /// run gave the invariant no chance to break.
    pub fn verdict_text(&self) -> String {
        if self.not_exercised() {
            NOT_EXERCISED.into()
        } else {
            self.verdict.to_string()
        }
    }

    /// `judged N WORDS; exercised M WORDS;` for a report that counts what
    /// it judged (the second part only when it counts its chances apart).
    pub fn judged_text(&self) -> Option<String> {
        let (n, what) = self.judged()?;
        let mut text = format!("judged {n} {what};");
        if let (Some(_), Some((m, chances))) = (self.counts.get("exercised"), self.exercised()) {
            text.push_str(&format!(" exercised by {m} {chances};"));
        }
        Some(text)
    }

    /// Records a violation about `job` resting on `events`, said as
    /// `text`, and makes the verdict invalid.
    fn violate(&mut self, job: Option<&str>, events: &[(u64, Role)], text: String) {
        self.verdict = Verdict::Invalid;
        self.violations
            .push(Violation::new(self.invariant, job, events, text));
    }

    /// Records why the invariant could not be judged (the verdict is the
    /// caller's to set): a violation with no job and no event.
    pub fn note(&mut self, text: String) {
        self.violations
            .push(Violation::new(self.invariant, None, &[], text));
    }
}

/// What each invariant of [`check_all`] judges, in words, counted by its
/// report's `judged` count.
pub fn judges(invariant: &str) -> Option<&'static str> {
    Some(match invariant {
        "no-loss" => "jobs owed (acknowledged, or proven to exist)",
        "fenced-settlement" => "settles tried",
        "settle-once" => "deliveries",
        "admission" => "enqueues tried",
        "structure" => "reads of the queue",
        "effect-once" => "final reads with effects",
        "bounded-retries" => "leases",
        "lease-respected" => "reaps judged against a deadline",
        "lease-exclusive" => "lease calls with a time, judged against the live leases",
        "delay-respected" => "leases judged against an announced ready time",
        _ => return None,
    })
}

/// A verdict's text when the run gave the invariant no chance to break.
pub const NOT_EXERCISED: &str = "not exercised";

/// The situations in which each invariant of [`check_all`] could have
/// broken, in words, counted by [`Report::exercised`]: when there were
/// none the verdict is unknown and reads `not exercised`, never valid.
pub fn exercises(invariant: &str) -> Option<&'static str> {
    Some(match invariant {
        "no-loss" => "jobs owed (acknowledged, or proven to exist)",
        "fenced-settlement" => "settles sent after their lease was reaped or leased again",
        "settle-once" => "redeliveries",
        "admission" => "duplicate enqueues (payloads compared where dedup is not promised)",
        "structure" => "reads of the queue",
        "effect-once" => "redeliveries of a job whose effect was tried",
        "bounded-retries" => "jobs that reached their max_attempts or died",
        "lease-respected" => "reaps judged against a deadline",
        "lease-exclusive" => "lease calls made while another lease was live",
        "delay-respected" => "leases judged against an announced ready time",
        _ => return None,
    })
}

/// An invariant that held where it could not have broken is unknown (not
/// exercised), not valid.
fn unknown_if_not_exercised(mut report: Report) -> Report {
    if report.verdict == Verdict::Valid && report.exercised().is_some_and(|(n, _)| n == 0) {
        report.verdict = Verdict::Unknown;
    }
    report
}

/// The names of `reports` the run did not exercise
/// ([`Report::not_exercised`]), in order.
pub fn unexercised(reports: &[Report]) -> Vec<&'static str> {
    reports
        .iter()
        .filter(|r| r.not_exercised())
        .map(|r| r.invariant)
        .collect()
}

/// A run's verdict line: the verdict ([`overall`]), and after a verdict
/// that is not invalid the invariants not exercised (`valid; not
/// exercised: delay-respected`).
pub fn verdict_line(reports: &[Report]) -> String {
    verdict_with(overall(reports), &unexercised(reports))
}

/// `verdict`, and after one that is not invalid the invariants `missing`
/// names (`valid; not exercised: delay-respected`).
pub fn verdict_with(verdict: Verdict, missing: &[&str]) -> String {
    if verdict == Verdict::Invalid || missing.is_empty() {
        verdict.to_string()
    } else {
        format!("{verdict}; {NOT_EXERCISED}: {}", missing.join(", "))
    }
}

/// One invariant over many runs (walks, paths, seeds): the worst verdict
/// of the runs that exercised it, and how much they did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// The worst verdict of a run that exercised it (valid when none did:
    /// see [`Tally::exercised`]).
    pub verdict: Verdict,
    /// Runs judged.
    pub runs: u64,
    /// Runs that did not exercise it ([`Report::not_exercised`]).
    pub not_exercised: u64,
    /// The chances to break it, summed over the runs
    /// ([`Report::exercised`]); 0 means `not exercised`, none an invariant
    /// that does not count them (liveness, refinement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exercised: Option<u64>,
}

impl Tally {
    /// Adds one run's report of the invariant.
    pub fn add(&mut self, report: &Report) {
        self.runs += 1;
        if let Some((n, _)) = report.exercised() {
            self.exercised = Some(self.exercised.unwrap_or(0) + n);
        }
        if report.not_exercised() {
            self.not_exercised += 1;
        } else {
            self.verdict = self.verdict.max(report.verdict);
        }
    }

    /// Adds another tally of the same invariant (a shard's).
    pub fn merge(&mut self, other: &Tally) {
        self.verdict = self.verdict.max(other.verdict);
        self.runs += other.runs;
        self.not_exercised += other.not_exercised;
        self.exercised = match (self.exercised, other.exercised) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
    }

    /// True when runs ran and not one exercised the invariant.
    pub fn is_not_exercised(&self) -> bool {
        self.runs > 0 && self.not_exercised == self.runs
    }

    /// `valid (12)`, `INVALID (3)`, `not exercised`: the verdict in words
    /// and the chances to break it.
    pub fn text(&self) -> String {
        match self.exercised {
            _ if self.is_not_exercised() => NOT_EXERCISED.into(),
            Some(n) => format!("{} ({n})", self.verdict),
            None => self.verdict.to_string(),
        }
    }
}

/// Every invariant's tally over `runs`, each a run's reports.
pub fn tally<'a>(runs: impl IntoIterator<Item = &'a [Report]>) -> BTreeMap<String, Tally> {
    let mut out: BTreeMap<String, Tally> = BTreeMap::new();
    for reports in runs {
        for r in reports {
            out.entry(r.invariant.to_owned()).or_default().add(r);
        }
    }
    out
}

/// The invariants of `tallies` that no run exercised, in [`CHECKERS`]'
/// order (others after, by name).
pub fn unexercised_of(tallies: &BTreeMap<String, Tally>) -> Vec<&str> {
    let mut names: Vec<&str> = tallies
        .iter()
        .filter(|(_, t)| t.is_not_exercised())
        .map(|(n, _)| n.as_str())
        .collect();
    names.sort_by_key(|n| checker_order(n));
    names
}

/// Where `invariant` comes in [`CHECKERS`]' order (after all of them when
/// it is none of theirs: liveness, refinement).
pub fn checker_order(invariant: &str) -> usize {
    CHECKERS
        .iter()
        .position(|(c, _)| *c == invariant)
        .unwrap_or(usize::MAX)
}

/// The one report of a history that is not well formed
/// ([`crate::history::validate`]): `well-formed`, unknown, with the event
/// and the rule it breaks. Such a history is refused, never judged.
pub fn refused(history: &[Event], why: &crate::history::IllFormed) -> Report {
    let index = history.get(why.position).map_or(0, |e| e.index);
    let mut report = Report::new("well-formed");
    report.verdict = Verdict::Unknown;
    report.count("position", why.position as u64);
    report.violations.push(Violation::new(
        "well-formed",
        None,
        &[(index, Role::Broke)],
        format!(
            "event {} (index {index}) breaks the history's grammar, so no invariant is judged: {why}",
            why.position + 1
        ),
    ));
    report
}

/// Every checker, in a stable order, on a well-formed history; on one
/// that is not, the single report [`refused`] and no verdict on the queue.
pub fn check_all(history: &[Event]) -> Vec<Report> {
    if let Err(why) = validate(history) {
        return vec![refused(history, &why)];
    }
    let ops = Ops::new(history);
    CHECKERS
        .iter()
        .map(|(invariant, check)| unknown_if_not_exercised(judge(invariant, || check(&ops))))
        .collect()
}

/// A checker: a pure function of a well-formed history, read through its
/// op index ([`Ops`], built once by [`check_all`]).
pub(crate) type Checker = fn(&Ops<'_>) -> Report;

/// The checkers of [`check_all`], each under its invariant's name, in
/// the order they report.
pub const CHECKERS: [(&str, Checker); 10] = [
    ("no-loss", no_loss::check),
    ("fenced-settlement", fenced_settlement::check),
    ("settle-once", settle_once::check),
    ("admission", admission::check),
    ("structure", structure::check),
    ("effect-once", effect_once::check),
    ("bounded-retries", bounded_retries::check),
    ("lease-respected", lease_respected::check),
    ("lease-exclusive", lease_exclusive::check),
    ("delay-respected", delay_respected::check),
];

/// Runs one checker of `invariant`; one that panics is `unknown` under
/// its own name, with the panic's message (Jepsen's rule: a checker that
/// crashes says nothing about the queue, and says so).
pub fn judge(invariant: &'static str, check: impl FnOnce() -> Report) -> Report {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with no message".into());
        let mut report = Report::new(invariant);
        report.verdict = Verdict::Unknown;
        report.count("checker_panicked", 1);
        report.note(format!(
            "the {invariant} checker panicked, so its verdict is unknown: {message}"
        ));
        report
    })
}

/// The worst verdict of `reports`: invalid over unknown over valid. An
/// invariant not exercised does not make the run unknown (the verdict line
/// names it, [`verdict_line`]), except `no-loss`: a run that acknowledged
/// no job tested nothing, and is never valid.
pub fn overall(reports: &[Report]) -> Verdict {
    reports
        .iter()
        .filter(|r| !r.not_exercised() || r.invariant == "no-loss")
        .map(|r| r.verdict)
        .max()
        .unwrap_or(Verdict::Unknown)
}
