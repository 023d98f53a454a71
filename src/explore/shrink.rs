//! Shrinking: a failing schedule is cut down to a minimal counterexample by
//! delta debugging (Zeller's ddmin) over its step list. Each candidate is
//! replayed whole against the same server, with the same configuration
//! (the queue is cleared first), and kept when it still breaks the same
//! invariant. The result is 1-minimal: removing any single step makes the
//! failure go away.
//!
//! A parallel step (`l0+l1`) is one step to ddmin. After it, each parallel
//! step left is made simpler if the failure stays: a member dropped, or the
//! members run one after the other in the written order (then the failure
//! needed no race); ddmin runs again after any change.
//!
//! A shrunk failure is printed as numbered steps and written under
//! `target/ackgap/failures/`, with the replay line that runs it again
//! (`ackgap replay LINE`).

use std::path::PathBuf;

use super::driver::{ExploreError, Subject};
use super::line::Line;
use super::op::{Schedule, Step};
use super::walk::{run_schedule, SwarmConfig, WalkReport};

/// A shrunk failure.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The invariant the failure breaks (kept while shrinking).
    pub invariant: &'static str,
    /// The minimal schedule's run.
    pub report: WalkReport,
    /// Steps before shrinking.
    pub steps_before: usize,
    /// Replays the shrinker ran.
    pub runs: usize,
}

/// Shrinks `schedule`, which fails on `subject` with `config`, to a
/// 1-minimal schedule that still breaks the invariant of its first finding.
/// At most `runs_max` replays; past that the smallest failing schedule so
/// far is returned. `Ok(None)` if `schedule` does not fail at all.
pub async fn shrink(
    subject: &Subject,
    config: &SwarmConfig,
    schedule: &Schedule,
    runs_max: usize,
) -> Result<Option<Shrunk>, ExploreError> {
    shrink_for(subject, config, schedule, runs_max, None).await
}

/// [`shrink`], keeping `target` when the schedule breaks it (a walk that
/// broke several invariants gives each its own minimal counterexample);
/// else, or with `None`, the invariant of its first finding.
pub async fn shrink_for(
    subject: &Subject,
    config: &SwarmConfig,
    schedule: &Schedule,
    runs_max: usize,
    target: Option<&'static str>,
) -> Result<Option<Shrunk>, ExploreError> {
    let first = run_schedule(subject, config, schedule).await?;
    let found = first.findings();
    let Some(invariant) = target
        .filter(|t| found.iter().any(|(i, _)| i == t))
        .or_else(|| found.first().map(|(i, _)| *i))
    else {
        return Ok(None);
    };
    let mut search = Search {
        invariant,
        runs: 1,
        best: first,
        steps: schedule.steps().to_vec(),
    };
    loop {
        ddmin(subject, config, &mut search, runs_max).await?;
        if !simpler_parallel(subject, config, &mut search, runs_max).await? {
            break;
        }
    }
    Ok(Some(Shrunk {
        invariant,
        report: search.best,
        steps_before: schedule.len(),
        runs: search.runs,
    }))
}

/// A shrink under way: the invariant kept, the replays run, the smallest
/// failing schedule so far and its run.
struct Search {
    invariant: &'static str,
    runs: usize,
    best: WalkReport,
    steps: Vec<Step>,
}

impl Search {
    /// Replays `candidate`; keeps it when it still breaks the invariant.
    async fn try_keep(
        &mut self,
        subject: &Subject,
        config: &SwarmConfig,
        candidate: Vec<Step>,
    ) -> Result<bool, ExploreError> {
        self.runs += 1;
        let report = run_schedule(subject, config, &Schedule(candidate.clone())).await?;
        let kept = report.findings().iter().any(|(i, _)| *i == self.invariant);
        if kept {
            self.steps = candidate;
            self.best = report;
        }
        Ok(kept)
    }
}

/// Delta debugging over `search`'s steps, to a 1-minimal schedule (or
/// `runs_max` replays).
async fn ddmin(
    subject: &Subject,
    config: &SwarmConfig,
    search: &mut Search,
    runs_max: usize,
) -> Result<(), ExploreError> {
    let mut n = 2usize;
    while search.steps.len() >= 2 && search.runs < runs_max {
        let steps = search.steps.clone();
        let chunk = steps.len().div_ceil(n);
        let mut reduced = false;
        // Try each complement (the steps without one chunk); ddmin's
        // subset tests rarely help with schedules, whose steps depend on
        // what came before.
        let mut start = 0;
        while start < steps.len() && search.runs < runs_max {
            let end = (start + chunk).min(steps.len());
            let candidate: Vec<Step> = steps[..start]
                .iter()
                .chain(&steps[end..])
                .cloned()
                .collect();
            if search.try_keep(subject, config, candidate).await? {
                n = (n - 1).max(2);
                reduced = true;
                break;
            }
            start = end;
        }
        if !reduced {
            if n >= steps.len() {
                break;
            }
            n = (2 * n).min(steps.len());
        }
    }
    Ok(())
}

/// Tries each parallel step of `search` simpler: each member dropped, then
/// the members one after the other. True when one was kept.
async fn simpler_parallel(
    subject: &Subject,
    config: &SwarmConfig,
    search: &mut Search,
    runs_max: usize,
) -> Result<bool, ExploreError> {
    for i in 0..search.steps.len() {
        let members = search.steps[i].members().to_vec();
        if members.len() < 2 {
            continue;
        }
        let mut simpler: Vec<Vec<Step>> = (0..members.len())
            .map(|drop| {
                let mut rest = members.clone();
                rest.remove(drop);
                vec![Step::parallel(rest.clone()).unwrap_or_else(|_| rest[0].clone())]
            })
            .collect();
        simpler.push(members);
        for replacement in simpler {
            if search.runs >= runs_max {
                return Ok(false);
            }
            let mut candidate = search.steps.clone();
            candidate.splice(i..=i, replacement);
            if search.try_keep(subject, config, candidate).await? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Writes `shrunk`'s counterexample under `dir` (normally
/// `target/ackgap/failures/`) as `QUEUE-CONSUMER-INVARIANT-HASH.txt`, and
/// returns the path.
pub fn write_failure(dir: &std::path::Path, shrunk: &Shrunk) -> std::io::Result<PathBuf> {
    let r = &shrunk.report;
    // FNV-1a of the line: the same counterexample overwrites its own file.
    let hash = r.line.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let queue = file_word(&r.queue);
    let path = dir.join(format!(
        "{queue}-{}-{}-{:08x}.txt",
        r.consumer, shrunk.invariant, hash as u32
    ));
    std::fs::create_dir_all(dir)?;
    std::fs::write(&path, shrunk.text())?;
    Ok(path)
}

impl Shrunk {
    /// The counterexample as printed: numbered steps, the broken invariant,
    /// the replay command.
    pub fn text(&self) -> String {
        format!(
            "{}  (shrunk from {} to {} steps in {} replays)\n",
            self.report.counterexample_text(),
            self.steps_before,
            self.line().schedule.len(),
            self.runs
        )
    }

    /// The replay line of the minimal schedule.
    pub fn line(&self) -> Line {
        self.report.line.parse().expect("a report's line parses")
    }
}

/// `name` as a piece of a file name: an `exec:` queue's name is a
/// command, so only a file name's characters are kept (others become `_`),
/// at most 48.
pub(super) fn file_word(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect()
}

/// The directory failures are written to.
pub fn failures_dir() -> PathBuf {
    PathBuf::from("target/ackgap/failures")
}

/// A walk that stopped unjudged (an adapter that broke the protocol, a
/// server gone) keeps its history: written as JSON lines to
/// `target/ackgap/failures/stopped-QUEUE-seedS-MILLIS.jsonl`, where `ackgap check`
/// and a reader can see how far it got.
pub(crate) fn keep_history(
    error: ExploreError,
    recorder: &crate::history::Recorder,
    subject: &Subject,
    seed: u64,
) -> ExploreError {
    let events = recorder.events();
    let dir = failures_dir();
    // Named by the time too: a later stopped walk of the same seed does not
    // overwrite this one.
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let path = dir.join(format!(
        "stopped-{}-seed{seed}-{millis}.jsonl",
        file_word(subject.adapter.name())
    ));
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::to_string(e).ok())
        .map(|line| line + "\n")
        .collect();
    let written = !events.is_empty()
        && std::fs::create_dir_all(&dir).is_ok()
        && std::fs::write(&path, text).is_ok();
    ExploreError::Stopped {
        source: Box::new(error),
        history: written.then_some(path),
    }
}
