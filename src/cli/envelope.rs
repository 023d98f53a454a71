//! The `--json` reports that `ackgap merge` reads back, as types: what
//! `run`, `mutants` and `chaos --matrix` print with `--json` is one of
//! these serialized, and what `merge` reads is the same type
//! deserialized (`explore`'s is [`super::report::ExploreSummary`]).
//!
//! # Design notes
//!
//! The library's reports are `Serialize` only (their names are
//! `&'static str`), so each part `merge` reads is an owned twin here,
//! made from the library's value field by field (an exhaustive
//! destructuring: a new field fails to compile until it is placed). A
//! part `merge` only carries through (the smoke scenario's report, the
//! exhaustive configurations of a mutants budget, the chaos settings other
//! than seed, duration and jobs) stays JSON.
//!
//! The writers print `serde_json::to_value` of these types, whose maps
//! sort their keys: the bytes are those of the `Value`s patched key by key
//! before.
//!
//! Keys a type does not name are ignored on reading (serde's default, no
//! `deny_unknown_fields`): `merge` compares the tool's versions before it
//! reads a file as its command's type, so a file that reaches the typed
//! read was written by this very type, and an extra key is a hand edit
//! that the merged report drops. A missing or ill-typed key is an error
//! naming its path (`serde_path_to_error`). No reader flattens a part it
//! can fail on: a flattened field's error loses its path.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ackgap::campaign::battery::BatteryReport;
use ackgap::campaign::table::Replayed;
use ackgap::campaign::{CampaignConfig, Cell, Phase, RunReport};
use ackgap::chaos::matrix;
use ackgap::check::Verdict;
use ackgap::explore::line::Rerun;
use ackgap::explore::Shard;
use ackgap::fault::FaultKind;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// This tool's version, which every report names.
pub(super) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `text` read as a `T`; on failure, where in the document (`phases[0].runs`)
/// and what was wrong.
pub(super) fn read<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let document = &mut serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(document).map_err(|e| {
        let path = e.path().to_string();
        match path.as_str() {
            "." => e.into_inner().to_string(),
            _ => format!("at `{path}`: {}", e.into_inner()),
        }
    })?;
    Ok(value)
}

/// What every report says of itself: the command that wrote it, the
/// version of ackgap, and the shard (absent: a whole run). Read first, so
/// that a report of another command or version is refused as such
/// before it is read as this one's.
#[derive(Debug, Deserialize)]
pub(super) struct Head {
    /// `explore`, `run`, `mutants` or `chaos`.
    #[serde(default)]
    pub command: Option<String>,
    /// The version of ackgap that wrote it.
    #[serde(default)]
    pub version: Option<String>,
    /// The part of the run it covers.
    #[serde(default)]
    pub shard: Option<Shard>,
}

/// One column of a campaign's verdict table, as `--json` writes it
/// ([`Phase`]'s fields, owned).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct PhaseJson {
    /// `exhaust`, `smoke`, or a consumer's name.
    pub name: String,
    /// What ran, in words.
    pub what: String,
    /// Runs.
    pub runs: u64,
    /// Steps.
    pub steps: u64,
    /// Wall-clock time (ms).
    pub elapsed_ms: u64,
    /// Every run replays exactly.
    pub exact: bool,
    /// One cell per invariant.
    pub cells: BTreeMap<String, Cell>,
    /// How to run each failing run again (the first few).
    pub failures: Vec<String>,
    /// What each of those did and broke.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counterexamples: Vec<String>,
    /// Wall-clock violations replayed on logical time, by invariant.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replays: BTreeMap<String, Replayed>,
    /// Broken invariants no schedule replayed, with why.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unreduced: BTreeMap<String, String>,
}

impl From<&Phase> for PhaseJson {
    fn from(phase: &Phase) -> PhaseJson {
        let Phase {
            name,
            what,
            runs,
            steps,
            elapsed_ms,
            exact,
            cells,
            failures,
            counterexamples,
            replays,
            unreduced,
        } = phase;
        PhaseJson {
            name: name.clone(),
            what: what.clone(),
            runs: *runs,
            steps: *steps,
            elapsed_ms: *elapsed_ms,
            exact: *exact,
            cells: cells
                .iter()
                .map(|(k, c)| (k.to_string(), c.clone()))
                .collect(),
            failures: failures.clone(),
            counterexamples: counterexamples.clone(),
            replays: replays
                .iter()
                .map(|(k, r)| (k.to_string(), r.clone()))
                .collect(),
            unreduced: unreduced
                .iter()
                .map(|(k, u)| (k.to_string(), u.clone()))
                .collect(),
        }
    }
}

/// A campaign's columns as `--json` writes them.
pub(super) fn phases(phases: &[Phase]) -> Vec<PhaseJson> {
    phases.iter().map(PhaseJson::from).collect()
}

/// The mutation score, as `mutants --json` and `run --json` write it
/// ([`ackgap::mutants::MutationScore`], owned).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct ScoreJson {
    /// Mutants killed.
    pub killed: usize,
    /// Mutants run.
    pub total: usize,
    /// The survivors' names.
    pub survived: Vec<String>,
    /// Wall time (ms).
    pub elapsed_ms: f64,
}

impl From<&ackgap::mutants::MutationScore> for ScoreJson {
    fn from(score: &ackgap::mutants::MutationScore) -> ScoreJson {
        let ackgap::mutants::MutationScore {
            killed,
            total,
            survived,
            elapsed_ms,
        } = score;
        ScoreJson {
            killed: *killed,
            total: *total,
            survived: survived.iter().map(|s| s.to_string()).collect(),
            elapsed_ms: *elapsed_ms,
        }
    }
}

/// `ackgap run`'s mutation score: measured, or why not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum RunScore {
    /// The score of the fast subset.
    Measured(ScoreJson),
    /// Why it was not measured.
    NotMeasured {
        /// The error, in words.
        error: String,
    },
}

/// `ackgap run --json` (the default campaign, or a shard of it): the
/// library's [`ackgap::campaign::RunReport`] and what the command adds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct RunEnvelope {
    /// `run`.
    pub command: String,
    /// The version of ackgap.
    pub version: String,
    /// The part of the walks this report covers (absent: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// The settings.
    pub config: CampaignConfig,
    /// The rows, in order.
    pub invariants: Vec<String>,
    /// The columns, in order.
    pub phases: Vec<PhaseJson>,
    /// The smoke scenario's report (carried, not read, by `merge`).
    pub smoke: Value,
    /// The worst verdict of any cell.
    pub verdict: Verdict,
    /// The campaign's time (ms).
    pub elapsed_ms: u64,
    /// Where it ran.
    pub server: String,
    /// The command that runs it again.
    pub replay: String,
    /// The server's environment and flags of every pasted line.
    pub rerun: Rerun,
    /// The directory of its files.
    pub dir: String,
    /// The mutation score; absent in a shard but the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutation_score: Option<RunScore>,
    /// The command's wall time (ms).
    pub wall_ms: f64,
}

impl RunEnvelope {
    /// `report` as `ackgap run --json` writes it, before the command fills
    /// in what it adds (server, replay, rerun, dir: empty; no shard, no
    /// score, no wall time).
    pub(super) fn of(report: &RunReport) -> Result<RunEnvelope, serde_json::Error> {
        let RunReport {
            config,
            invariants,
            phases: columns,
            smoke,
            verdict,
            elapsed_ms,
        } = report;
        Ok(RunEnvelope {
            command: "run".into(),
            version: VERSION.into(),
            shard: None,
            config: config.clone(),
            invariants: invariants.iter().map(|i| i.to_string()).collect(),
            phases: phases(columns),
            smoke: serde_json::to_value(smoke)?,
            verdict: *verdict,
            elapsed_ms: *elapsed_ms,
            server: String::new(),
            replay: String::new(),
            rerun: Rerun::default(),
            dir: String::new(),
            mutation_score: None,
            wall_ms: 0.0,
        })
    }

    /// Where the smoke scenario's history went, if it was written.
    pub(super) fn smoke_history(&self) -> Option<&str> {
        self.smoke.get("history").and_then(Value::as_str)
    }
}

/// `ackgap run --queue Q --json`: the library's
/// [`ackgap::campaign::battery::BatteryReport`] and what the command adds
/// (not read by `merge`: a battery is not sharded).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct BatteryEnvelope {
    /// `run`.
    pub command: String,
    /// The version of ackgap.
    pub version: String,
    /// The battery's settings.
    pub config: Value,
    /// The rows, in order.
    pub invariants: Vec<String>,
    /// The columns, in order.
    pub phases: Vec<PhaseJson>,
    /// The findings report's path (Markdown; the HTML beside it).
    pub findings: String,
    /// The durability matrix's cells.
    pub durability: Value,
    /// The phases not run, and why.
    pub skipped: Vec<String>,
    /// The worst promised verdict.
    pub verdict: Verdict,
    /// Wall-clock time (ms).
    pub elapsed_ms: u64,
    /// The user's app the adapter ran with (`--app`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<Value>,
    /// Where it ran.
    pub server: String,
    /// The server's environment and flags of every pasted line.
    pub rerun: Rerun,
    /// The command that ran it.
    pub replay: String,
}

impl BatteryEnvelope {
    /// `report` as `ackgap run --queue Q --json` writes it, before the
    /// command fills in what it adds (the findings report's path, server,
    /// rerun, replay: empty).
    pub(super) fn of(report: &BatteryReport) -> Result<BatteryEnvelope, serde_json::Error> {
        let BatteryReport {
            config,
            invariants,
            phases: columns,
            findings: _,
            durability,
            skipped,
            verdict,
            elapsed_ms,
            app,
        } = report;
        Ok(BatteryEnvelope {
            command: "run".into(),
            version: VERSION.into(),
            config: serde_json::to_value(config)?,
            invariants: invariants.iter().map(|i| i.to_string()).collect(),
            phases: phases(columns),
            findings: String::new(),
            durability: serde_json::to_value(durability)?,
            skipped: skipped.clone(),
            verdict: *verdict,
            elapsed_ms: *elapsed_ms,
            app: app.as_ref().map(serde_json::to_value).transpose()?,
            server: String::new(),
            rerun: Rerun::default(),
            replay: String::new(),
        })
    }
}

/// How hard each mutant was tried ([`ackgap::mutants::Budget`]; its
/// exhaustive configurations carried as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct BudgetJson {
    /// The exhaustive phase's configurations.
    pub exhaust: Vec<Value>,
    /// Random walks per mutant.
    pub seeds: u64,
    /// Steps per walk.
    pub steps: usize,
    /// Replays the shrinker may run.
    pub shrink_runs: usize,
    /// The chaos phase's length per mutant (ms).
    pub chaos_ms: u64,
}

impl TryFrom<&ackgap::mutants::Budget> for BudgetJson {
    type Error = serde_json::Error;

    fn try_from(budget: &ackgap::mutants::Budget) -> Result<BudgetJson, serde_json::Error> {
        let ackgap::mutants::Budget {
            exhaust,
            seeds,
            steps,
            shrink_runs,
            chaos_ms,
        } = budget;
        Ok(BudgetJson {
            exhaust: exhaust
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()?,
            seeds: *seeds,
            steps: *steps,
            shrink_runs: *shrink_runs,
            chaos_ms: *chaos_ms,
        })
    }
}

/// What a mutant's chaos run found ([`ackgap::mutants::ChaosKill`], owned).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct ChaosKillJson {
    /// An invariant broke.
    pub killed: bool,
    /// The first invariant that broke.
    pub invariant: Option<String>,
    /// What it saw.
    pub why: Option<String>,
    /// The chaos seed.
    pub seed: u64,
    /// Wall time (ms).
    pub elapsed_ms: f64,
}

/// One row of the kill matrix ([`ackgap::mutants::Kill`], owned).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct KillJson {
    /// The mutant.
    pub mutant: String,
    /// What it breaks.
    pub breaks: String,
    /// Caught within the budget.
    pub killed: bool,
    /// The invariant the minimal counterexample breaks.
    pub invariant: Option<String>,
    /// The invariants one would expect.
    pub expected: Vec<String>,
    /// Killed by one of `expected`.
    pub as_expected: bool,
    /// The phase that found it.
    pub phase: Option<String>,
    /// States the exhaustive search reached.
    pub states: usize,
    /// Walks run.
    pub seeds: u64,
    /// The minimal counterexample's steps.
    pub steps: Option<usize>,
    /// The minimal counterexample.
    pub counterexample: Option<String>,
    /// Its replay line.
    pub line: Option<String>,
    /// Steps before shrinking.
    pub steps_before: Option<usize>,
    /// Wall time (ms).
    pub elapsed_ms: f64,
    /// What the chaos phase found, when it ran.
    pub chaos: Option<ChaosKillJson>,
}

impl From<&ackgap::mutants::Kill> for KillJson {
    fn from(kill: &ackgap::mutants::Kill) -> KillJson {
        let ackgap::mutants::Kill {
            mutant,
            breaks,
            killed,
            invariant,
            expected,
            as_expected,
            phase,
            states,
            seeds,
            steps,
            counterexample,
            line,
            steps_before,
            elapsed_ms,
            chaos,
        } = kill;
        let owned = |s: &Option<&str>| s.map(str::to_owned);
        KillJson {
            mutant: mutant.to_string(),
            breaks: breaks.to_string(),
            killed: *killed,
            invariant: owned(invariant),
            expected: expected.iter().map(|e| e.to_string()).collect(),
            as_expected: *as_expected,
            phase: owned(phase),
            states: *states,
            seeds: *seeds,
            steps: *steps,
            counterexample: counterexample.clone(),
            line: line.clone(),
            steps_before: *steps_before,
            elapsed_ms: *elapsed_ms,
            chaos: chaos.as_ref().map(|c| ChaosKillJson {
                killed: c.killed,
                invariant: owned(&c.invariant),
                why: c.why.clone(),
                seed: c.seed,
                elapsed_ms: c.elapsed_ms,
            }),
        }
    }
}

/// `ackgap mutants --json`: the kill matrix, or a shard of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct MutantsEnvelope {
    /// `mutants`.
    pub command: String,
    /// The version of ackgap.
    pub version: String,
    /// Every mutant asked for (of every shard), in order.
    pub mutants: Vec<String>,
    /// This report's rows.
    pub kills: Vec<KillJson>,
    /// How hard each mutant was tried.
    pub budget: BudgetJson,
    /// The score over `kills`.
    pub score: ScoreJson,
    /// Wall time (ms).
    pub elapsed_ms: f64,
    /// The part of the mutants this report covers (absent: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

impl MutantsEnvelope {
    /// The report of `matrix`, run for `asked` (of every shard), as `shard`.
    pub(super) fn of(
        asked: &[ackgap::mutants::Mutant],
        matrix: &ackgap::mutants::Matrix,
        shard: Option<Shard>,
    ) -> Result<MutantsEnvelope, serde_json::Error> {
        Ok(MutantsEnvelope {
            command: "mutants".into(),
            version: VERSION.into(),
            mutants: asked.iter().map(|m| m.name.to_owned()).collect(),
            kills: matrix.kills.iter().map(KillJson::from).collect(),
            budget: BudgetJson::try_from(&matrix.budget)?,
            score: ScoreJson::from(&matrix.score()),
            elapsed_ms: matrix.elapsed_ms,
            shard,
        })
    }
}

/// The chaos settings of a matrix: what `merge` reads of them typed, the
/// rest ([`ackgap::chaos::runner::ChaosConfig`]'s other fields) carried
/// as JSON. The rest is flattened: it is a map of any JSON, which cannot
/// fail to read, so no error loses its path there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct ChaosJson {
    /// The first seed.
    pub seed: u64,
    /// The faults phase's length (ms).
    pub duration_ms: u64,
    /// Jobs enqueued per run.
    pub jobs: usize,
    /// The other settings.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

impl ChaosJson {
    /// `config` as the matrix's JSON has it.
    pub(super) fn of(
        config: &ackgap::chaos::runner::ChaosConfig,
    ) -> Result<ChaosJson, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(config)?)
    }
}

/// What a matrix was run with (`config` of `chaos --matrix --json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct GridConfig {
    /// The chaos settings every cell ran.
    pub chaos: ChaosJson,
    /// `--matrix-seeds`.
    pub matrix_seeds: u64,
    /// `--matrix-topology` (empty: all).
    pub matrix_topology: Vec<String>,
    /// The shard (`1/1`: the whole matrix).
    pub shard: Shard,
}

/// Which cell of the matrix a row is ([`matrix::Cell`] as it is written).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct CellKey {
    /// The persistence mode.
    pub persistence: String,
    /// The topology.
    pub topology: String,
    /// The durability dial.
    pub durability: String,
    /// The fault.
    pub fault: FaultKind,
}

impl From<&matrix::Cell> for CellKey {
    fn from(cell: &matrix::Cell) -> CellKey {
        CellKey {
            persistence: cell.persistence.to_string(),
            topology: cell.topology.to_string(),
            durability: cell.durability.to_string(),
            fault: cell.fault,
        }
    }
}

/// One cell's result ([`matrix::CellResult`], owned; its invariant reports
/// are not written).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct CellJson {
    /// The cell.
    pub cell: CellKey,
    /// What Valkey documents for it.
    pub promise: String,
    /// Runs made.
    pub runs: usize,
    /// Fires of its fault.
    pub fired: u64,
    /// Acknowledged jobs lost.
    pub lost: usize,
    /// Invariants some run broke.
    pub broken: Vec<String>,
    /// The worst verdict.
    pub verdict: Verdict,
    /// The consumer's effects confirmed by the dial.
    pub effects_confirmed: bool,
    /// Effect writes confirmed short.
    pub effects_short: u64,
    /// Each run's history.
    pub histories: Vec<PathBuf>,
    /// Each run's HTML report.
    pub reports: Vec<PathBuf>,
    /// Each run's rerun command.
    pub replays: Vec<String>,
    /// Each run's verdict.
    pub verdicts: Vec<Verdict>,
}

impl From<&matrix::CellResult> for CellJson {
    fn from(result: &matrix::CellResult) -> CellJson {
        let matrix::CellResult {
            cell,
            promise,
            runs,
            fired,
            lost,
            broken,
            verdict,
            effects_confirmed,
            effects_short,
            histories,
            invariant_reports: _,
            reports,
            replays,
            verdicts,
        } = result;
        CellJson {
            cell: CellKey::from(cell),
            promise: promise.to_string(),
            runs: *runs,
            fired: *fired,
            lost: *lost,
            broken: broken.clone(),
            verdict: *verdict,
            effects_confirmed: *effects_confirmed,
            effects_short: *effects_short,
            histories: histories.clone(),
            reports: reports.clone(),
            replays: replays.clone(),
            verdicts: verdicts.clone(),
        }
    }
}

/// The matrix's results ([`matrix::Grid`] as it is written).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct GridJson {
    /// The configuration every cell ran.
    pub config: ChaosJson,
    /// Seeds per cell.
    pub seeds: u64,
    /// Each cell's result, in the matrix's order.
    pub cells: Vec<CellJson>,
}

impl GridJson {
    /// `grid` as it is written.
    pub(super) fn of(grid: &matrix::Grid) -> Result<GridJson, serde_json::Error> {
        Ok(GridJson {
            config: ChaosJson::of(&grid.config)?,
            seeds: grid.seeds,
            cells: grid.cells.iter().map(CellJson::from).collect(),
        })
    }
}

/// `ackgap chaos --matrix --json`: the matrix, or a shard of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct GridEnvelope {
    /// `chaos`.
    pub command: String,
    /// The version of ackgap.
    pub version: String,
    /// What it was run with.
    pub config: GridConfig,
    /// The shard (written `null` for a whole matrix).
    #[serde(default)]
    pub shard: Option<Shard>,
    /// The cells.
    pub grid: GridJson,
    /// The matrix's verdict.
    pub verdict: Verdict,
    /// Its files' directory (of a merged report, each shard's, `; `).
    pub dir: String,
    /// Its `grid.html` (of a merged report, each shard's, `; `).
    pub html: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackgap::campaign::{CampaignConfig, SmokeConfig, SmokeReport};

    /// A campaign's report as the library returns it: two columns, one
    /// with a failing walk and its counterexample, a sharded config.
    fn run_report() -> RunReport {
        let cell = Cell {
            verdict: Verdict::Invalid,
            runs: 3,
            invalid: 1,
            counts: BTreeMap::from([("duplicated".to_string(), 2)]),
            ..Cell::default()
        };
        let column = |name: &str, failures: Vec<String>| Phase {
            name: name.into(),
            what: format!("{name} walks (shard 1/2)"),
            runs: 3,
            steps: 90,
            elapsed_ms: 12,
            exact: true,
            cells: BTreeMap::from([("no-loss", cell.clone())]),
            counterexamples: failures.iter().map(|f| format!("what {f} did")).collect(),
            failures,
            replays: BTreeMap::new(),
            unreduced: BTreeMap::from([("no-loss", "no order replayed it".to_string())]),
        };
        let mut config = CampaignConfig::new(1, 6);
        config.shard = Shard { index: 1, count: 2 };
        RunReport {
            config,
            invariants: vec!["no-loss", "settle-once"],
            phases: vec![
                column("exhaust", Vec::new()),
                column("naive", vec!["ackgap explore --seed 3".into()]),
            ],
            smoke: SmokeReport {
                config: SmokeConfig::from_seed(1),
                jobs: Vec::new(),
                invariants: Vec::new(),
                verdict: Verdict::Valid,
                events: 40,
                elapsed_ms: 7,
                history: Some(PathBuf::from("target/run-1.jsonl")),
            },
            verdict: Verdict::Invalid,
            elapsed_ms: 99,
        }
    }

    #[test]
    fn a_run_envelope_written_by_the_writer_reads_back_through_merge_s_reader_with_the_library_s_keys(
    ) {
        let report = run_report();
        let mut written = RunEnvelope::of(&report).unwrap();
        written.shard = Some(report.config.shard);
        written.rerun = Rerun {
            env: "ACKGAP_VALKEY_SERVER=/bin/valkey ".into(),
            flags: " --server process".into(),
        };
        written.mutation_score = Some(RunScore::NotMeasured {
            error: "no server".into(),
        });
        written.wall_ms = 1234.5;
        let text = serde_json::to_value(&written).unwrap().to_string();
        let read: RunEnvelope = read(&text).unwrap();
        assert_eq!(read, written);
        // The library's report is in it key for key, as when the command
        // patched its keys onto the report's JSON.
        let value: Value = serde_json::from_str(&text).unwrap();
        let library = serde_json::to_value(&report).unwrap();
        for (key, field) in library.as_object().unwrap() {
            assert_eq!(&value[key], field, "{key}");
        }
        assert_eq!(value["rerun"]["flags"], " --server process");
        assert_eq!(value["mutation_score"]["error"], "no server");
        assert_eq!(value["shard"], serde_json::json!({"index": 1, "count": 2}));
    }

    #[test]
    fn a_mutants_envelope_reads_back_with_the_library_s_kills_budget_and_score() {
        let kill = ackgap::mutants::Kill {
            mutant: "complete-unfenced",
            breaks: "fencing",
            killed: true,
            invariant: Some("fenced-settlement"),
            expected: &["fenced-settlement"],
            as_expected: true,
            phase: Some("exhaust"),
            states: 40,
            seeds: 0,
            steps: Some(4),
            counterexample: Some("e0 l0 c0".into()),
            line: None,
            steps_before: Some(9),
            elapsed_ms: 3.5,
            chaos: None,
        };
        let matrix = ackgap::mutants::Matrix {
            kills: vec![kill],
            budget: ackgap::mutants::Budget::fast(),
            elapsed_ms: 3.5,
        };
        let asked = ackgap::mutants::select(&["complete-unfenced".to_string()]).unwrap();
        let written = MutantsEnvelope::of(&asked, &matrix, None).unwrap();
        let value = serde_json::to_value(&written).unwrap();
        assert_eq!(value["kills"], serde_json::to_value(&matrix.kills).unwrap());
        assert_eq!(
            value["budget"],
            serde_json::to_value(&matrix.budget).unwrap()
        );
        assert_eq!(
            value["score"],
            serde_json::to_value(matrix.score()).unwrap()
        );
        assert!(value.get("shard").is_none(), "a whole run names no shard");
        let read: MutantsEnvelope = read(&value.to_string()).unwrap();
        assert_eq!(read, written);
    }

    #[test]
    fn a_malformed_report_is_an_error_naming_the_path_of_the_bad_field() {
        let mut value = serde_json::to_value(RunEnvelope::of(&run_report()).unwrap()).unwrap();
        value["phases"][1]["cells"]["no-loss"]["runs"] = "three".into();
        let error = read::<RunEnvelope>(&value.to_string()).unwrap_err();
        assert!(
            error.starts_with("at `phases[1].cells.no-loss.runs`: invalid type: string"),
            "{error}"
        );
        value["phases"][1]["cells"]["no-loss"]["runs"] = 3.into();
        value.as_object_mut().unwrap().remove("dir");
        let error = read::<RunEnvelope>(&value.to_string()).unwrap_err();
        assert!(error.contains("missing field `dir`"), "{error}");
    }
}
