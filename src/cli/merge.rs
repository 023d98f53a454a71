//! `ackgap merge REPORT...`: the `--json` reports of the N shards of one
//! run (`ackgap explore --shard K/N --json` or `ackgap mutants --shard K/N
//! --json`, one per CI machine), combined into the report one machine
//! would have printed: for walks the same walks, steps, failed seeds in
//! order (the first failure first), verdict and exit code; for mutants the
//! same kill matrix in the order asked for, score and exit code. Reports of different commands, versions or
//! configurations, a shard missing or given twice, are refused.
//!
//! # Design notes
//!
//! It also combines the reports of `run` and of
//! `chaos --matrix --shard K/N`: reports are refused unless they are every
//! shard of one run of one command, version and configuration. `run` and
//! `mutants` print their tables from their JSON reports, so a merged report
//! prints as one run's does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ackgap::chaos::matrix;
use ackgap::check::Verdict;
use ackgap::explore::Shard;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::envelope::{
    self, CellKey, GridConfig, GridEnvelope, GridJson, Head, KillJson, MutantsEnvelope, PhaseJson,
    RunEnvelope, ScoreJson,
};
use super::report::{self, ExploreConfig, ExploreSummary};
use super::{Exit, ExitError};

/// The arguments of `ackgap merge`.
#[derive(Debug, clap::Args)]
pub(super) struct MergeArgs {
    /// The shards' JSON reports (`ackgap explore --shard K/N --json >
    /// FILE`, or `ackgap mutants ...`), every K of one N exactly once, in
    /// any order.
    #[arg(required = true)]
    reports: Vec<PathBuf>,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    json: bool,
}

/// A report as read: the file's name and its text.
type Text = (String, String);

/// Reads, checks and merges the reports; prints the merged report and
/// exits with its verdict's code. Nothing is written but the merged
/// report, on stdout, once every file has been read and checked.
pub(super) fn run(args: MergeArgs) -> Result<Exit, ExitError> {
    let started = std::time::Instant::now();
    let mut texts = Vec::new();
    for path in &args.reports {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ExitError::new(Exit::Usage, format!("cannot read {}: {e}", path.display()))
        })?;
        texts.push((path.display().to_string(), text));
    }
    let usage = |e: String| ExitError::new(Exit::Usage, e);
    let command = check_heads(&texts).map_err(usage)?;
    let json = args.json;
    match command {
        "run" => run_merged(&read_all(&texts, "run --shard K/N").map_err(usage)?, json),
        "chaos" => {
            let parts = read_all(&texts, "chaos --matrix --shard K/N").map_err(usage)?;
            chaos_merged(&parts, json, started)
        }
        "mutants" => {
            let parts = read_all(&texts, "mutants --shard K/N").map_err(usage)?;
            mutants_merged(&parts, json, started)
        }
        _ => {
            let parts = read_all(&texts, "explore --shard K/N").map_err(usage)?;
            check_configs(&parts).map_err(usage)?;
            let merged = merge_explore(parts.into_iter().map(|(_, s)| s).collect());
            if json {
                outln!("{}", serde_json::to_value(&merged)?);
            } else {
                merged.print(started.elapsed().as_secs_f64());
            }
            Ok(merged.verdict.into())
        }
    }
}

/// Every file of `texts` read as the report of `ackgap {what} --json`
/// (`T`), or the first that is not, named with the path of its bad field.
fn read_all<T: Shared>(texts: &[Text], what: &str) -> Result<Vec<(String, T)>, String> {
    texts
        .iter()
        .map(|(name, text)| {
            envelope::read(text)
                .map(|report| (name.clone(), report))
                .map_err(|e| {
                    format!("{name} is not the JSON report of `ackgap {what} --json`: {e}")
                })
        })
        .collect()
}

/// The merged report of `run` shards, printed; the exit code of its verdict.
fn run_merged(parts: &[(String, RunEnvelope)], json: bool) -> Result<Exit, ExitError> {
    check_configs(parts).map_err(|e| ExitError::new(Exit::Usage, e))?;
    let merged = merge_run(parts);
    if json {
        outln!("{}", serde_json::to_value(&merged)?);
    } else {
        // The wall time of the slowest shard: the fleet's.
        super::run::print_campaign(&merged.table(), merged.wall_ms / 1000.0);
    }
    Ok(merged.verdict.into())
}

/// The merged report of `chaos --matrix` shards, printed; the exit code
/// of its verdict.
fn chaos_merged(
    parts: &[(String, GridEnvelope)],
    json: bool,
    started: std::time::Instant,
) -> Result<Exit, ExitError> {
    check_configs(parts).map_err(|e| ExitError::new(Exit::Usage, e))?;
    let (merged, grid) = merge_chaos(parts);
    let verdict = grid.verdict();
    if json {
        outln!("{}", serde_json::to_value(&merged)?);
        return Ok(verdict.into());
    }
    out!("{}", grid.table());
    out!("\n{}", grid.runs_text());
    let config = &merged.config;
    let mut replay = format!(
        "ackgap chaos --matrix --seed {} --matrix-seeds {} --duration {} --jobs {}",
        config.chaos.seed,
        config.matrix_seeds,
        super::chaos::duration_text(config.chaos.duration_ms),
        config.chaos.jobs
    );
    if !config.matrix_topology.is_empty() {
        replay.push_str(&format!(
            " --matrix-topology {}",
            config.matrix_topology.join(",")
        ));
    }
    outln!(
        "\nverdict: {verdict} (invalid only if a row that promises to keep acknowledged writes lost one)\nfiles in {}\nrerun: {replay}",
        merged.dir
    );
    outln!("wall time {:.2} s", started.elapsed().as_secs_f64());
    Ok(verdict.into())
}

/// The merged kill matrix of `mutants` shards, printed; exits 1 if a
/// mutant survived.
fn mutants_merged(
    parts: &[(String, MutantsEnvelope)],
    json: bool,
    started: std::time::Instant,
) -> Result<Exit, ExitError> {
    check_configs(parts).map_err(|e| ExitError::new(Exit::Usage, e))?;
    let merged = merge_mutants(parts);
    if json {
        outln!("{}", serde_json::to_value(&merged)?);
    } else {
        out!("{}", super::mutants::matrix_table(&merged));
        outln!("wall time {:.2} s", started.elapsed().as_secs_f64());
    }
    Ok(if merged.score.survived.is_empty() {
        Exit::Valid
    } else {
        Exit::Invalid
    })
}

/// A report whose shards `merge` combines: what it was run with, which
/// every shard of one run shares (the command's settings, not where it
/// ran, what it found, nor which shard it is).
trait Shared: DeserializeOwned {
    /// The settings.
    type Config: PartialEq + Serialize;
    /// This report's settings.
    fn config(&self) -> Self::Config;
}

impl Shared for ExploreSummary {
    type Config = ExploreConfig;
    fn config(&self) -> ExploreConfig {
        self.config.clone()
    }
}

/// What a kill matrix was asked for.
#[derive(PartialEq, Serialize)]
struct MutantsConfig {
    mutants: Vec<String>,
    budget: envelope::BudgetJson,
}

impl Shared for MutantsEnvelope {
    type Config = MutantsConfig;
    fn config(&self) -> MutantsConfig {
        MutantsConfig {
            mutants: self.mutants.clone(),
            budget: self.budget.clone(),
        }
    }
}

impl Shared for RunEnvelope {
    type Config = ackgap::campaign::CampaignConfig;
    fn config(&self) -> Self::Config {
        let mut config = self.config.clone();
        config.shard = Shard::WHOLE;
        config
    }
}

impl Shared for GridEnvelope {
    type Config = GridConfig;
    fn config(&self) -> GridConfig {
        GridConfig {
            shard: Shard::WHOLE,
            ..self.config.clone()
        }
    }
}

/// Whether `parts` (each named by its file) were made with one
/// configuration; if not, which two differ and how.
fn check_configs<T: Shared>(parts: &[(String, T)]) -> Result<(), String> {
    let (first_name, first) = &parts[0];
    let text = |c: &T::Config| serde_json::to_string(c).unwrap_or_else(|e| e.to_string());
    for (name, part) in parts {
        if part.config() != first.config() {
            return Err(format!(
                "{name} and {first_name} were made with different configurations: {} and {}",
                text(&part.config()),
                text(&first.config())
            ));
        }
    }
    Ok(())
}

/// The command of `texts` (each named by its file), read as [`Head`]s, or
/// why they are not the shards of one run: not a report, another command
/// or version, not a shard, a shard missing or given twice. (Their
/// configurations are compared once each is read as its command's report:
/// [`check_configs`].)
fn check_heads(texts: &[Text]) -> Result<&'static str, String> {
    let version = envelope::VERSION;
    let mut heads = Vec::new();
    for (name, text) in texts {
        let head: Head =
            envelope::read(text.trim()).map_err(|e| format!("{name} is not a JSON report: {e}"))?;
        heads.push((name.as_str(), head));
    }
    let (first_name, first) = &heads[0];
    let command = match first.command.as_deref() {
        Some("explore") => "explore",
        Some("mutants") => "mutants",
        Some("run") => "run",
        Some("chaos") => "chaos",
        other => {
            return Err(format!(
                "{first_name} is not the JSON report of a shard of `ackgap explore`, `run`, `mutants` or `chaos --matrix` (command: {})",
                other.unwrap_or("none")
            ))
        }
    };
    let mut by_index: BTreeMap<u64, &str> = BTreeMap::new();
    let mut count = None;
    for (name, head) in &heads {
        if head.command != first.command {
            return Err(format!(
                "{name} is a report of `ackgap {}`, {first_name} of `ackgap {command}`",
                head.command.as_deref().unwrap_or("?")
            ));
        }
        if head.version.as_deref() != Some(version) {
            return Err(format!(
                "{name} was made by ackgap {}, this is ackgap {version}: merge the reports with the version that made them",
                head.version.as_deref().unwrap_or("?")
            ));
        }
        let Some(shard) = head.shard else {
            return Err(format!(
                "{name} is the report of a whole run, not of a shard (--shard K/N)"
            ));
        };
        if *count.get_or_insert(shard.count) != shard.count {
            return Err(format!(
                "{name} is shard {shard}, but {first_name} is of {} shards",
                count.unwrap_or_default()
            ));
        }
        if let Some(other) = by_index.insert(shard.index, name) {
            return Err(format!("{name} and {other} are both shard {shard}"));
        }
    }
    let count = count.unwrap_or(1);
    let missing: Vec<String> = (1..=count)
        .filter(|k| !by_index.contains_key(k))
        .map(|k| Shard { index: k, count }.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(format!("shard(s) {} missing", missing.join(", ")));
    }
    Ok(command)
}

/// The report of the walks of every shard (checked by [`check_heads`]
/// and [`check_configs`]).
fn merge_explore(shards: Vec<ExploreSummary>) -> ExploreSummary {
    let first = &shards[0];
    let mut servers: Vec<&str> = Vec::new();
    for s in &shards {
        if !servers.contains(&s.server.as_str()) {
            servers.push(&s.server);
        }
    }
    let walks: u64 = shards.iter().map(|s| s.walks).sum();
    let steps: u64 = shards.iter().map(|s| s.steps).sum();
    let elapsed_ms = shards.iter().map(|s| s.elapsed_ms).fold(0.0, f64::max);
    let mut failed: Vec<report::FailedWalk> = shards
        .iter()
        .flat_map(|s| s.failed.iter().cloned())
        .collect();
    failed.sort_by_key(|walk| walk.seed);
    let verdicts: Vec<Verdict> = failed.iter().map(|walk| walk.verdict).collect();
    ExploreSummary {
        command: first.command.clone(),
        version: first.version.clone(),
        config: first.config.clone(),
        shard: None,
        server: servers.join("; "),
        walks,
        steps,
        elapsed_ms,
        steps_per_s: steps as f64 / (elapsed_ms / 1000.0).max(1e-9),
        verdict: report::verdict(walks, verdicts.into_iter()),
        invariants: {
            let mut all = std::collections::BTreeMap::new();
            for s in &shards {
                for (name, t) in &s.invariants {
                    all.entry(name.clone())
                        .or_insert_with(ackgap::check::Tally::default)
                        .merge(t);
                }
            }
            all
        },
        reported: shards.iter().map(|s| s.reported).sum(),
        failed,
        minimal: shards
            .iter()
            .filter_map(|s| s.minimal.clone())
            .min_by_key(|m| m.seed),
    }
}

/// The kill matrix of every shard (checked by [`check_heads`] and
/// [`check_configs`]): the kills in the order the mutants were asked for,
/// the score over them.
fn merge_mutants(parts: &[(String, MutantsEnvelope)]) -> MutantsEnvelope {
    let first = &parts[0].1;
    let mut kills: Vec<KillJson> = parts
        .iter()
        .flat_map(|(_, p)| p.kills.iter().cloned())
        .collect();
    kills.sort_by_key(|k| {
        first
            .mutants
            .iter()
            .position(|name| *name == k.mutant)
            .unwrap_or(usize::MAX)
    });
    let elapsed_ms = parts.iter().map(|(_, p)| p.elapsed_ms).fold(0.0, f64::max);
    let score = ScoreJson {
        killed: kills.iter().filter(|k| k.killed).count(),
        total: kills.len(),
        survived: kills
            .iter()
            .filter(|k| !k.killed)
            .map(|k| k.mutant.clone())
            .collect(),
        elapsed_ms,
    };
    MutantsEnvelope {
        kills,
        score,
        elapsed_ms,
        shard: None,
        ..first.clone()
    }
}

/// The seed in a grid history's name (`grid-...-seedS.jsonl`).
fn history_seed(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(".jsonl")?
        .rsplit("-seed")
        .next()?
        .parse()
        .ok()
}

/// A cell of the matrix with no run yet, its dial's `effects_confirmed`.
fn empty_cell(cell: &matrix::Cell, effects_confirmed: bool) -> matrix::CellResult {
    matrix::CellResult {
        cell: cell.clone(),
        promise: matrix::promise(cell),
        runs: 0,
        fired: 0,
        lost: 0,
        broken: Vec::new(),
        verdict: Verdict::Valid,
        effects_confirmed,
        effects_short: 0,
        histories: Vec::new(),
        reports: Vec::new(),
        invariant_reports: Vec::new(),
        replays: Vec::new(),
        verdicts: Vec::new(),
    }
}

/// `c`, one shard's row of a cell, added to `r`, the whole run's: runs,
/// fires and losses summed, broken invariants joined, the worst verdict,
/// each run's history, report, reproduce line and verdict appended.
fn add_cell(r: &mut matrix::CellResult, c: &envelope::CellJson) {
    r.runs += c.runs;
    r.fired += c.fired;
    r.lost += c.lost;
    r.effects_short += c.effects_short;
    for b in &c.broken {
        if !r.broken.contains(b) {
            r.broken.push(b.clone());
        }
    }
    r.verdict = r.verdict.max(c.verdict);
    for (i, history) in c.histories.iter().enumerate() {
        r.histories.push(history.clone());
        r.reports
            .push(c.reports.get(i).cloned().unwrap_or_default());
        r.replays
            .push(c.replays.get(i).cloned().unwrap_or_default());
        r.verdicts
            .push(c.verdicts.get(i).copied().unwrap_or(Verdict::Unknown));
    }
}

/// `c`'s broken invariants sorted and its runs in seed order.
fn sort_runs(c: &mut matrix::CellResult) {
    c.broken.sort();
    let mut runs: Vec<(PathBuf, PathBuf, String, Verdict)> = c
        .histories
        .drain(..)
        .zip(c.reports.drain(..))
        .zip(c.replays.drain(..))
        .zip(c.verdicts.drain(..))
        .map(|(((h, p), l), v)| (h, p, l, v))
        .collect();
    runs.sort_by_key(|(h, ..)| history_seed(h));
    for (h, p, l, v) in runs {
        c.histories.push(h);
        c.reports.push(p);
        c.replays.push(l);
        c.verdicts.push(v);
    }
}

/// The chaos matrix of every shard (checked by [`check_heads`] and
/// [`check_configs`]): each cell's runs, fires and losses summed over the
/// shards, its broken invariants and histories joined, its verdict the
/// worst, the cells in the matrix's order; the report, and the grid its
/// table and verdict come from.
fn merge_chaos(parts: &[(String, GridEnvelope)]) -> (GridEnvelope, matrix::Grid) {
    let first = &parts[0].1;
    let all = matrix::cells();
    let keys: Vec<CellKey> = all.iter().map(CellKey::from).collect();
    let mut results: Vec<(usize, matrix::CellResult)> = Vec::new();
    for c in parts.iter().flat_map(|(_, p)| &p.grid.cells) {
        let Some(at) = keys.iter().position(|key| *key == c.cell) else {
            continue;
        };
        if !results.iter().any(|(i, _)| *i == at) {
            results.push((at, empty_cell(&all[at], c.effects_confirmed)));
        }
        if let Some((_, r)) = results.iter_mut().find(|(i, _)| *i == at) {
            add_cell(r, c);
        }
    }
    results.sort_by_key(|(at, _)| *at);
    let mut cells: Vec<matrix::CellResult> = results.into_iter().map(|(_, r)| r).collect();
    cells.iter_mut().for_each(sort_runs);
    // A stand-in configuration: the table and the verdict need its seed
    // and duration; the report keeps the shards' own.
    let mut chaos = ackgap::chaos::runner::ChaosConfig::new(first.config.chaos.seed);
    chaos.duration_ms = first.config.chaos.duration_ms;
    let grid = matrix::Grid {
        config: chaos,
        seeds: first.config.matrix_seeds,
        cells,
    };
    let mut by_shard: Vec<&GridEnvelope> = parts.iter().map(|(_, p)| p).collect();
    by_shard.sort_by_key(|p| p.shard.map(|s| s.index));
    let joined =
        |f: fn(&GridEnvelope) -> &str| by_shard.iter().map(|p| f(p)).collect::<Vec<_>>().join("; ");
    let merged = GridEnvelope {
        config: GridConfig {
            shard: Shard::WHOLE,
            ..first.config.clone()
        },
        shard: None,
        grid: GridJson {
            config: first.grid.config.clone(),
            seeds: grid.seeds,
            cells: grid.cells.iter().map(envelope::CellJson::from).collect(),
        },
        verdict: grid.verdict(),
        dir: joined(|p| &p.dir),
        html: joined(|p| &p.html),
        ..first.clone()
    };
    (merged, grid)
}

/// The seed a walk's reproduce command names (`--seed S`).
fn seed_of(command: &str) -> Option<u64> {
    let mut words = command.split_whitespace();
    words.by_ref().find(|w| *w == "--seed")?;
    words.next()?.parse().ok()
}

/// The worst verdict of a column's cells, unknown if it has none.
fn column_verdict(phase: &PhaseJson) -> Verdict {
    phase
        .cells
        .values()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Unknown)
}

/// The campaign of every shard (checked by [`check_heads`] and
/// [`check_configs`]): the exhaustive search, the smoke scenario and the
/// mutation score of shard 1 (every shard runs the first two alike; only
/// shard 1 the score), each consumer's walks summed cell by cell, the
/// first failing walks in seed order.
fn merge_run(parts: &[(String, RunEnvelope)]) -> RunEnvelope {
    let reports: Vec<&RunEnvelope> = parts.iter().map(|(_, r)| r).collect();
    let first = reports
        .iter()
        .find(|r| r.shard.map(|s| s.index) == Some(1))
        .copied()
        .unwrap_or(reports[0]);
    let mut merged = first.clone();
    for phase in &mut merged.phases {
        if phase.name != "exhaust" && phase.name != "smoke" {
            let all: Vec<&PhaseJson> = reports
                .iter()
                .flat_map(|r| &r.phases)
                .filter(|p| p.name == phase.name)
                .collect();
            merge_phase(phase, &all);
        }
    }
    merged.verdict = merged
        .phases
        .iter()
        .map(column_verdict)
        .fold(Verdict::Valid, Verdict::max);
    merged.elapsed_ms = reports.iter().map(|r| r.elapsed_ms).max().unwrap_or(0);
    merged.wall_ms = reports.iter().map(|r| r.wall_ms).fold(0.0, f64::max);
    merged.config.shard = Shard::WHOLE;
    merged.shard = None;
    let mut servers: Vec<&str> = Vec::new();
    for r in &reports {
        if !servers.contains(&r.server.as_str()) {
            servers.push(&r.server);
        }
    }
    merged.server = servers.join("; ");
    merged
}

/// `phase` (shard 1's column of one consumer) made the column of the
/// whole run from `all` the shards' columns of that consumer.
fn merge_phase(phase: &mut PhaseJson, all: &[&PhaseJson]) {
    phase.runs = all.iter().map(|p| p.runs).sum();
    phase.steps = all.iter().map(|p| p.steps).sum();
    phase.elapsed_ms = all.iter().map(|p| p.elapsed_ms).max().unwrap_or(0);
    if let Some((whole, _)) = phase.what.split_once(" (shard ") {
        phase.what = whole.to_owned();
    }
    // The first failing walks (at most 3, as one run keeps): each shard
    // kept its own first ones, so the whole run's are among them.
    let mut failures: Vec<(Option<u64>, String, Option<String>)> = Vec::new();
    for p in all {
        for (i, command) in p.failures.iter().enumerate() {
            let text = p.counterexamples.get(i).cloned();
            failures.push((seed_of(command), command.clone(), text));
        }
    }
    failures.sort_by_key(|(seed, _, _)| *seed);
    failures.truncate(3);
    phase.failures = failures.iter().map(|f| f.1.clone()).collect();
    phase.counterexamples = failures.into_iter().filter_map(|f| f.2).collect();
    let mut cells: BTreeMap<String, ackgap::campaign::Cell> = BTreeMap::new();
    for (name, cell) in all.iter().flat_map(|p| &p.cells) {
        let merged = cells
            .entry(name.clone())
            .or_insert_with(|| ackgap::campaign::Cell {
                verdict: Verdict::Valid,
                runs: 0,
                invalid: 0,
                unknown: 0,
                counts: BTreeMap::new(),
                ..cell.clone()
            });
        merged.runs += cell.runs;
        merged.invalid += cell.invalid;
        merged.unknown += cell.unknown;
        merged.verdict = merged.verdict.max(cell.verdict);
        for (k, n) in &cell.counts {
            *merged.counts.entry(k.clone()).or_insert(0) += n;
        }
    }
    phase.cells = cells;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_shard_is_refused_naming_its_file_and_the_path_of_the_bad_field() {
        let shard = |k: u64, runs: serde_json::Value| {
            serde_json::json!({
                "command": "mutants", "version": envelope::VERSION,
                "shard": {"index": k, "count": 2},
                "mutants": ["complete-unfenced"], "kills": [],
                "budget": {"exhaust": [], "seeds": 0, "steps": 50, "shrink_runs": 300, "chaos_ms": runs},
                "score": {"killed": 0, "total": 0, "survived": [], "elapsed_ms": 1.0},
                "elapsed_ms": 1.0,
            })
            .to_string()
        };
        let texts = vec![
            ("one.json".to_string(), shard(1, 0.into())),
            ("two.json".to_string(), shard(2, "soon".into())),
        ];
        assert_eq!(check_heads(&texts), Ok("mutants"));
        let error = read_all::<MutantsEnvelope>(&texts, "mutants --shard K/N").unwrap_err();
        assert!(
            error.starts_with("two.json is not the JSON report of `ackgap mutants --shard K/N --json`: at `budget.chaos_ms`: invalid type: string \"soon\""),
            "{error}"
        );
        let texts = [texts[0].clone(), ("two.json".into(), shard(2, 0.into()))];
        let parts = read_all::<MutantsEnvelope>(&texts, "mutants --shard K/N").unwrap();
        assert_eq!(check_configs(&parts), Ok(()));
    }
}
