//! The report of many walks (`ackgap explore --seeds N`, `--shard K/N`,
//! `--json`) as a value that `ackgap merge` reads back: the totals, the
//! failed walks in seed order, and what it was run with (the command, the
//! tool's version, the configuration, the shard), so that reports that
//! cannot be parts of one run are refused.
//!
//! # Design notes
//!
//! The value is `ExploreSummary`; `explore` prints and writes it.

use ackgap::check::Verdict;
use ackgap::explore::shrink::Shrunk;
use ackgap::explore::{Shard, WalkReport};
use serde::{Deserialize, Serialize};

/// What a report of walks is of: the settings every shard of one run
/// shares (the server is where it ran, not what it ran).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ExploreConfig {
    /// `--seed`: the range's first seed.
    pub first_seed: u64,
    /// `--seeds`: the whole range's length (every shard's).
    pub seeds: u64,
    /// `--steps`.
    pub steps_max: usize,
    /// `--queue`: the queue under test.
    pub queue: String,
    /// `--consumer`.
    pub consumer: String,
    /// `--shrink-runs`.
    pub shrink_runs: usize,
}

/// The report of many walks, or of one shard of them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct ExploreSummary {
    /// `explore`.
    pub command: String,
    /// The version of ackgap that ran it.
    pub version: String,
    /// What was run.
    #[serde(flatten)]
    pub config: ExploreConfig,
    /// The part of the range this report covers (absent: all of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// Where it ran.
    pub server: String,
    /// Walks run.
    pub walks: u64,
    /// Steps over every walk.
    pub steps: u64,
    /// Wall time of the walks (ms); of a merged report, the longest
    /// shard's.
    pub elapsed_ms: f64,
    /// Checked steps per second of wall time.
    pub steps_per_s: f64,
    /// The worst walk's verdict (`unknown` when no walk ran).
    pub verdict: Verdict,
    /// Each invariant over the walks: its worst verdict where a walk
    /// exercised it, and how many chances to break it the walks gave
    /// ([`ackgap::check::Tally`]); `not exercised` when none.
    #[serde(default)]
    pub invariants: std::collections::BTreeMap<String, ackgap::check::Tally>,
    /// Valid walks whose consumer duplicated or lost an effect it does not
    /// promise (reported, not judged).
    pub reported: u64,
    /// Every walk whose verdict is not `valid`, in seed order: its report
    /// and `why`, one line.
    pub failed: Vec<FailedWalk>,
    /// The first failing walk shrunk to a minimal counterexample (see
    /// [`minimal`]); absent when nothing failed or nothing was shrunk. Of
    /// a merged report, the one of the lowest seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimal: Option<Minimal>,
}

/// A walk whose verdict is not `valid`: what `merge` and the summary
/// read of it typed, the rest of its [`WalkReport`] carried as JSON (a map
/// of any JSON, which cannot fail to read: flattened, it hides no error's
/// path).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct FailedWalk {
    /// Its seed.
    pub seed: u64,
    /// Its verdict.
    pub verdict: Verdict,
    /// Why it failed, in one line.
    pub why: String,
    /// The command that runs it again.
    pub replay: String,
    /// The rest of its report.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

impl FailedWalk {
    /// `r` as a failed walk of the report.
    fn of(r: &WalkReport) -> FailedWalk {
        let mut rest = match serde_json::to_value(r) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        for typed in ["seed", "verdict", "why", "replay"] {
            rest.remove(typed);
        }
        FailedWalk {
            seed: r.seed,
            verdict: r.verdict,
            why: why(r),
            replay: r.replay.clone(),
            rest,
        }
    }
}

/// A shrunk counterexample as JSON: the seed it was shrunk from, the
/// invariant it breaks, its steps before and after, the replays the
/// shrinker ran, its replay line and the command that runs it
/// (`replay`; the unshrunk walk's command is its failed walk's `replay`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Minimal {
    /// The seed it was shrunk from.
    pub seed: u64,
    /// The invariant it breaks.
    pub invariant: String,
    /// Steps before shrinking.
    pub steps_before: usize,
    /// Steps after.
    pub steps: usize,
    /// Replays the shrinker ran.
    pub shrink_runs: usize,
    /// Its replay line.
    pub line: String,
    /// The command that runs it.
    pub replay: String,
    /// What it does and breaks.
    pub text: String,
}

/// `shrunk` as the report's minimal counterexample.
pub(super) fn minimal(shrunk: &Shrunk) -> Minimal {
    let r = &shrunk.report;
    Minimal {
        seed: r.seed,
        invariant: shrunk.invariant.to_string(),
        steps_before: shrunk.steps_before,
        steps: shrunk.line().schedule.len(),
        shrink_runs: shrunk.runs,
        line: r.line.clone(),
        replay: r.replay_line_command(),
        text: shrunk.text(),
    }
}

impl ExploreSummary {
    /// The verdict, and after one that is not invalid the invariants no
    /// walk exercised (`valid; not exercised: delay-respected`).
    pub(super) fn verdict_line(&self) -> String {
        ackgap::check::verdict_with(
            self.verdict,
            &ackgap::check::unexercised_of(&self.invariants),
        )
    }

    /// `exercised: no-loss 40, fenced-settlement 3, ...`: the chances each
    /// invariant had to break, over the walks, in the checkers' order.
    pub(super) fn exercised_line(&self) -> String {
        let mut names: Vec<&String> = self.invariants.keys().collect();
        names.sort_by_key(|n| ackgap::check::checker_order(n));
        let parts: Vec<String> = names
            .into_iter()
            .map(|n| format!("{n} {}", self.invariants[n].text()))
            .collect();
        format!("exercised: {}", parts.join(", "))
    }

    /// The report of `reports` (in seed order), walked in `elapsed` s.
    pub(super) fn of(
        config: ExploreConfig,
        shard: Option<Shard>,
        server: &str,
        reports: &[WalkReport],
        shrunk: Option<&Shrunk>,
        elapsed: f64,
    ) -> ExploreSummary {
        let steps: u64 = reports.iter().map(|r| r.steps as u64).sum();
        let failed = reports
            .iter()
            .filter(|r| r.verdict != Verdict::Valid)
            .map(FailedWalk::of)
            .collect();
        let reported = reports
            .iter()
            .filter(|r| r.verdict == Verdict::Valid && !r.findings().is_empty())
            .count() as u64;
        ExploreSummary {
            command: "explore".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            config,
            shard,
            server: server.into(),
            walks: reports.len() as u64,
            steps,
            elapsed_ms: elapsed * 1000.0,
            steps_per_s: steps as f64 / elapsed.max(1e-9),
            verdict: verdict(reports.len() as u64, reports.iter().map(|r| r.verdict)),
            invariants: ackgap::check::tally(reports.iter().map(|r| r.invariants.as_slice())),
            reported,
            failed,
            minimal: shrunk.map(minimal),
        }
    }

    /// The seeds' header, one line per failed walk, and the totals with
    /// the wall time of the whole command (`wall` s).
    pub(super) fn print(&self, wall: f64) {
        let c = &self.config;
        let last = c.first_seed.saturating_add(c.seeds.saturating_sub(1));
        let shard = match self.shard {
            Some(shard) => format!(" (shard {shard}: {} of them)", self.walks),
            None => String::new(),
        };
        outln!(
            "ackgap explore: seeds {}..={last}{shard}, {} steps each, server {}",
            c.first_seed,
            c.steps_max,
            self.server
        );
        for walk in &self.failed {
            outln!(
                "seed {}: {}: {}; replay: {}",
                walk.seed,
                walk.verdict,
                walk.why,
                walk.replay
            );
        }
        let reported = if self.reported > 0 {
            format!(" ({} more with reported effect anomalies)", self.reported)
        } else {
            String::new()
        };
        outln!("{}", self.exercised_line());
        outln!(
            "{} seeds, {} failed;{reported} {} steps in {:.2} s ({:.0} steps/s); verdict: {}; wall time {wall:.2} s",
            self.walks,
            self.failed.len(),
            self.steps,
            self.elapsed_ms / 1000.0,
            self.steps_per_s,
            self.verdict_line()
        );
    }
}

/// The verdict of `walks` walks with these verdicts: the worst; unknown
/// when none ran (nothing was judged).
pub(super) fn verdict(walks: u64, verdicts: impl Iterator<Item = Verdict>) -> Verdict {
    if walks == 0 {
        return Verdict::Unknown;
    }
    verdicts.max().unwrap_or(Verdict::Valid)
}

/// Why a walk failed, in one line: its divergence, or the invariants
/// whose verdict is the walk's (an invalid walk names the broken ones
/// only, not one that merely was not exercised).
fn why(r: &WalkReport) -> String {
    r.divergence.as_ref().map_or_else(
        || {
            r.invariants
                .iter()
                .filter(|i| i.verdict != Verdict::Valid && i.verdict == r.verdict)
                .map(|i| i.invariant)
                .collect::<Vec<_>>()
                .join(", ")
        },
        |d| d.to_string(),
    )
}
