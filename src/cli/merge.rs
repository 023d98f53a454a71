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
use std::path::PathBuf;

use ackgap::chaos::matrix;
use ackgap::check::Verdict;
use ackgap::explore::Shard;
use serde_json::Value;

use super::report::{self, ExploreSummary};
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

/// Reads, checks and merges the reports; prints the merged report and
/// exits with its verdict's code.
pub(super) fn run(args: MergeArgs) -> Result<Exit, ExitError> {
    let started = std::time::Instant::now();
    let mut parts = Vec::new();
    for path in &args.reports {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ExitError::new(Exit::Usage, format!("cannot read {}: {e}", path.display()))
        })?;
        let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
            ExitError::new(
                Exit::Usage,
                format!("{} is not a JSON report: {e}", path.display()),
            )
        })?;
        parts.push((path.display().to_string(), value));
    }
    let usage = |e: String| ExitError::new(Exit::Usage, e);
    let command = check_shards(&parts).map_err(usage)?;
    if command == "run" {
        let merged = merge_run(&parts);
        if args.json {
            outln!("{merged}");
        } else {
            // The wall time of the slowest shard: the fleet's.
            let wall = merged["wall_ms"].as_f64().unwrap_or(0.0) / 1000.0;
            super::run::print_campaign(&merged, wall);
        }
        let verdict: Verdict =
            serde_json::from_value(merged["verdict"].clone()).unwrap_or(Verdict::Unknown);
        return Ok(verdict.into());
    }
    if command == "chaos" {
        let (merged, grid) = merge_chaos(&parts);
        let verdict = grid.verdict();
        if args.json {
            outln!("{merged}");
        } else {
            out!("{}", grid.table());
            out!("\n{}", grid.runs_text());
            let config = &merged["config"];
            let mut replay = format!(
                "ackgap chaos --matrix --seed {} --matrix-seeds {} --duration {} --jobs {}",
                config["chaos"]["seed"],
                config["matrix_seeds"],
                super::chaos::duration_text(config["chaos"]["duration_ms"].as_u64().unwrap_or(0)),
                config["chaos"]["jobs"]
            );
            let topologies: Vec<&str> = config["matrix_topology"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !topologies.is_empty() {
                replay.push_str(&format!(" --matrix-topology {}", topologies.join(",")));
            }
            outln!(
                "\nverdict: {verdict} (invalid only if a row that promises to keep acknowledged writes lost one)\nfiles in {}\nrerun: {replay}",
                merged["dir"].as_str().unwrap_or("?")
            );
            outln!("wall time {:.2} s", started.elapsed().as_secs_f64());
        }
        return Ok(verdict.into());
    }
    if command == "mutants" {
        let merged = merge_mutants(&parts);
        if args.json {
            outln!("{merged}");
        } else {
            out!("{}", super::mutants::matrix_table(&merged));
            outln!("wall time {:.2} s", started.elapsed().as_secs_f64());
        }
        let survived = merged["score"]["survived"]
            .as_array()
            .is_some_and(|s| !s.is_empty());
        return Ok(if survived { Exit::Invalid } else { Exit::Valid });
    }
    let mut shards = Vec::new();
    for (name, value) in parts {
        let summary: ExploreSummary = serde_json::from_value(value).map_err(|e| {
            usage(format!(
                "{name} is not the JSON report of explore --shard K/N --json: {e}"
            ))
        })?;
        shards.push(summary);
    }
    let merged = merge_explore(shards);
    if args.json {
        outln!("{}", serde_json::to_value(&merged)?);
    } else {
        merged.print(started.elapsed().as_secs_f64());
    }
    Ok(merged.verdict.into())
}

/// What a report was run with, which every shard of one run shares: the
/// command's settings, not where it ran or what it found.
fn config(command: &str, value: &Value) -> Value {
    let keys: &[&str] = match command {
        "explore" => &[
            "first_seed",
            "seeds",
            "steps_max",
            "queue",
            "consumer",
            "shrink_runs",
        ],
        "mutants" => &["mutants", "budget"],
        _ => {
            let mut config = value["config"].clone();
            if let Some(map) = config.as_object_mut() {
                map.remove("shard");
            }
            return config;
        }
    };
    keys.iter()
        .map(|k| (k.to_string(), value[*k].clone()))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The command of `parts` (each named by its file), or why they are not
/// the shards of one run: another command, version or configuration, not a
/// shard, a shard missing or given twice.
fn check_shards(parts: &[(String, Value)]) -> Result<&'static str, String> {
    let version = env!("CARGO_PKG_VERSION");
    let (first_name, first) = &parts[0];
    let command = match first["command"].as_str() {
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
    for (name, value) in parts {
        if value["command"] != first["command"] {
            return Err(format!(
                "{name} is a report of `ackgap {}`, {first_name} of `ackgap {command}`",
                value["command"].as_str().unwrap_or("?")
            ));
        }
        if value["version"] != version {
            return Err(format!(
                "{name} was made by ackgap {}, this is ackgap {version}: merge the reports with the version that made them",
                value["version"]
            ));
        }
        if config(command, value) != config(command, first) {
            return Err(format!(
                "{name} and {first_name} were made with different configurations: {} and {}",
                config(command, value),
                config(command, first)
            ));
        }
        let shard: Option<Shard> = serde_json::from_value(value["shard"].clone()).ok();
        let Some(shard) = shard else {
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

/// The report of the walks of every shard (checked by [`check_shards`]).
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
    let mut failed: Vec<Value> = shards
        .iter()
        .flat_map(|s| s.failed.iter().cloned())
        .collect();
    failed.sort_by_key(|walk| walk["seed"].as_u64());
    let verdicts: Vec<Verdict> = failed
        .iter()
        .map(|walk| serde_json::from_value(walk["verdict"].clone()).unwrap_or(Verdict::Unknown))
        .collect();
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
            .min_by_key(|m| m["seed"].as_u64()),
    }
}

/// The kill matrix of every shard (checked by [`check_shards`]): the
/// kills in the order the mutants were asked for, the score over them.
fn merge_mutants(parts: &[(String, Value)]) -> Value {
    let first = &parts[0].1;
    let order: Vec<&str> = first["mutants"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut kills: Vec<Value> = parts
        .iter()
        .flat_map(|(_, v)| v["kills"].as_array().cloned().unwrap_or_default())
        .collect();
    kills.sort_by_key(|k| {
        order
            .iter()
            .position(|name| k["mutant"] == *name)
            .unwrap_or(usize::MAX)
    });
    let elapsed_ms = parts
        .iter()
        .filter_map(|(_, v)| v["elapsed_ms"].as_f64())
        .fold(0.0, f64::max);
    let killed = kills.iter().filter(|k| k["killed"] == true).count();
    let survived: Vec<Value> = kills
        .iter()
        .filter(|k| k["killed"] != true)
        .map(|k| k["mutant"].clone())
        .collect();
    serde_json::json!({
        "command": "mutants",
        "version": first["version"],
        "mutants": first["mutants"],
        "kills": kills,
        "budget": first["budget"],
        "score": {
            "killed": killed,
            "total": kills.len(),
            "survived": survived,
            "elapsed_ms": elapsed_ms,
        },
        "elapsed_ms": elapsed_ms,
    })
}

/// The seed in a grid history's name (`grid-...-seedS.jsonl`).
fn history_seed(path: &Value) -> Option<u64> {
    let name = path.as_str()?.rsplit('/').next()?;
    name.strip_suffix(".jsonl")?
        .rsplit("-seed")
        .next()?
        .parse()
        .ok()
}

/// The chaos matrix of every shard (checked by [`check_shards`]): each
/// cell's runs, fires and losses summed over the shards, its broken
/// invariants and histories joined, its verdict the worst, the cells in
/// the matrix's order; the report, and the grid its table and verdict
/// come from.
fn merge_chaos(parts: &[(String, Value)]) -> (Value, matrix::Grid) {
    let first = &parts[0].1;
    let mut results: Vec<(usize, matrix::CellResult)> = Vec::new();
    let all = matrix::cells();
    for (_, value) in parts {
        for c in value["grid"]["cells"].as_array().into_iter().flatten() {
            let Some(at) = all
                .iter()
                .position(|cell| serde_json::to_value(cell).ok().as_ref() == Some(&c["cell"]))
            else {
                continue;
            };
            if !results.iter().any(|(i, _)| *i == at) {
                results.push((
                    at,
                    matrix::CellResult {
                        cell: all[at].clone(),
                        promise: matrix::promise(&all[at]),
                        runs: 0,
                        fired: 0,
                        lost: 0,
                        broken: Vec::new(),
                        verdict: Verdict::Valid,
                        effects_confirmed: c["effects_confirmed"].as_bool().unwrap_or(false),
                        effects_short: 0,
                        histories: Vec::new(),
                        reports: Vec::new(),
                        invariant_reports: Vec::new(),
                        replays: Vec::new(),
                        verdicts: Vec::new(),
                    },
                ));
            }
            let Some((_, r)) = results.iter_mut().find(|(i, _)| *i == at) else {
                continue;
            };
            r.runs += c["runs"].as_u64().unwrap_or(0) as usize;
            r.fired += c["fired"].as_u64().unwrap_or(0);
            r.lost += c["lost"].as_u64().unwrap_or(0) as usize;
            r.effects_short += c["effects_short"].as_u64().unwrap_or(0);
            for b in c["broken"].as_array().into_iter().flatten() {
                let b = b.as_str().unwrap_or("?").to_string();
                if !r.broken.contains(&b) {
                    r.broken.push(b);
                }
            }
            r.verdict = r.verdict.max(verdict_of(&c["verdict"]));
            // Each run's history, report, reproduce line and verdict, in
            // seed order over the shards.
            let column =
                |name: &str| -> Vec<Value> { c[name].as_array().cloned().unwrap_or_default() };
            let (reports, replays, verdicts) =
                (column("reports"), column("replays"), column("verdicts"));
            for (i, h) in column("histories").iter().enumerate() {
                let Some(history) = h.as_str() else { continue };
                let text = |v: &[Value]| v.get(i).and_then(Value::as_str).map(str::to_owned);
                r.histories.push(PathBuf::from(history));
                r.reports
                    .push(PathBuf::from(text(&reports).unwrap_or_default()));
                r.replays.push(text(&replays).unwrap_or_default());
                r.verdicts
                    .push(verdicts.get(i).map_or(Verdict::Unknown, verdict_of));
            }
        }
    }
    results.sort_by_key(|(at, _)| *at);
    let mut cells: Vec<matrix::CellResult> = results.into_iter().map(|(_, r)| r).collect();
    for c in &mut cells {
        c.broken.sort();
        let mut runs: Vec<(PathBuf, PathBuf, String, Verdict)> = c
            .histories
            .drain(..)
            .zip(c.reports.drain(..))
            .zip(c.replays.drain(..))
            .zip(c.verdicts.drain(..))
            .map(|(((h, p), l), v)| (h, p, l, v))
            .collect();
        runs.sort_by_key(|(h, ..)| history_seed(&Value::from(h.display().to_string())));
        for (h, p, l, v) in runs {
            c.histories.push(h);
            c.reports.push(p);
            c.replays.push(l);
            c.verdicts.push(v);
        }
    }
    let config = &first["config"];
    let mut chaos =
        ackgap::chaos::runner::ChaosConfig::new(config["chaos"]["seed"].as_u64().unwrap_or(0));
    chaos.duration_ms = config["chaos"]["duration_ms"].as_u64().unwrap_or(0);
    let grid = matrix::Grid {
        config: chaos,
        seeds: config["matrix_seeds"].as_u64().unwrap_or(0),
        cells,
    };
    let mut merged = first.clone();
    let mut value = serde_json::to_value(&grid).unwrap_or_default();
    // The shards' own configuration, not the stand-in the table needs.
    value["config"] = first["grid"]["config"].clone();
    merged["grid"] = value;
    merged["verdict"] = serde_json::to_value(grid.verdict()).unwrap_or_default();
    merged["config"]["shard"] = serde_json::to_value(Shard::WHOLE).unwrap_or_default();
    merged["shard"] = Value::Null;
    let mut by_shard: Vec<&Value> = parts.iter().map(|(_, v)| v).collect();
    by_shard.sort_by_key(|v| v["shard"]["index"].as_u64());
    for key in ["dir", "html"] {
        let joined: Vec<&str> = by_shard.iter().filter_map(|v| v[key].as_str()).collect();
        merged[key] = joined.join("; ").into();
    }
    (merged, grid)
}

/// The seed a walk's reproduce command names (`--seed S`).
fn seed_of(command: &str) -> Option<u64> {
    let mut words = command.split_whitespace();
    words.by_ref().find(|w| *w == "--seed")?;
    words.next()?.parse().ok()
}

/// The verdict in `value` (`"valid"`, ...), unknown if none.
fn verdict_of(value: &Value) -> Verdict {
    serde_json::from_value(value.clone()).unwrap_or(Verdict::Unknown)
}

/// The campaign of every shard (checked by [`check_shards`]): the
/// exhaustive search, the smoke scenario and the mutation score of shard
/// 1 (every shard runs the first two alike; only shard 1 the score), each
/// consumer's walks summed cell by cell, the first failing walks in seed
/// order.
fn merge_run(parts: &[(String, Value)]) -> Value {
    let values: Vec<&Value> = parts.iter().map(|(_, v)| v).collect();
    let first = values
        .iter()
        .find(|v| v["shard"]["index"] == 1)
        .copied()
        .unwrap_or(values[0]);
    let mut merged = first.clone();
    let empty = Vec::new();
    let mut verdict = Verdict::Valid;
    let mut phases = Vec::new();
    for phase in first["phases"].as_array().unwrap_or(&empty) {
        let name = &phase["name"];
        let mut phase = phase.clone();
        if name != "exhaust" && name != "smoke" {
            let all: Vec<&Value> = values
                .iter()
                .flat_map(|v| v["phases"].as_array().unwrap_or(&empty))
                .filter(|p| p["name"] == *name)
                .collect();
            merge_phase(&mut phase, &all);
        }
        let phase_verdict = phase["cells"]
            .as_object()
            .and_then(|cells| cells.values().map(|c| verdict_of(&c["verdict"])).max())
            .unwrap_or(Verdict::Unknown);
        verdict = verdict.max(phase_verdict);
        phases.push(phase);
    }
    merged["phases"] = phases.into();
    merged["verdict"] = serde_json::to_value(verdict).unwrap_or_default();
    merged["elapsed_ms"] = values
        .iter()
        .filter_map(|v| v["elapsed_ms"].as_u64())
        .max()
        .unwrap_or(0)
        .into();
    merged["wall_ms"] = values
        .iter()
        .filter_map(|v| v["wall_ms"].as_f64())
        .fold(0.0, f64::max)
        .into();
    merged["config"]["shard"] = serde_json::to_value(Shard::WHOLE).unwrap_or_default();
    if let Some(map) = merged.as_object_mut() {
        map.remove("shard");
    }
    let mut servers: Vec<&str> = Vec::new();
    for v in &values {
        let server = v["server"].as_str().unwrap_or("?");
        if !servers.contains(&server) {
            servers.push(server);
        }
    }
    merged["server"] = servers.join("; ").into();
    merged
}

/// `phase` (shard 1's column of one consumer) made the column of the
/// whole run from `all` the shards' columns of that consumer.
fn merge_phase(phase: &mut Value, all: &[&Value]) {
    let sum = |key: &str| all.iter().filter_map(|p| p[key].as_u64()).sum::<u64>();
    phase["runs"] = sum("runs").into();
    phase["steps"] = sum("steps").into();
    phase["elapsed_ms"] = all
        .iter()
        .filter_map(|p| p["elapsed_ms"].as_u64())
        .max()
        .unwrap_or(0)
        .into();
    if let Some(what) = phase["what"].as_str() {
        let whole = what.split(" (shard ").next().unwrap_or(what).to_owned();
        phase["what"] = whole.into();
    }
    // The first failing walks (at most 3, as one run keeps): each shard
    // kept its own first ones, so the whole run's are among them.
    let mut failures: Vec<(Option<u64>, Value, Value)> = Vec::new();
    for p in all {
        let commands = p["failures"].as_array().cloned().unwrap_or_default();
        let texts = p["counterexamples"].as_array().cloned().unwrap_or_default();
        for (i, command) in commands.into_iter().enumerate() {
            let seed = seed_of(command.as_str().unwrap_or(""));
            failures.push((seed, command, texts.get(i).cloned().unwrap_or_default()));
        }
    }
    failures.sort_by_key(|(seed, _, _)| *seed);
    failures.truncate(3);
    phase["failures"] = failures
        .iter()
        .map(|f| f.1.clone())
        .collect::<Vec<_>>()
        .into();
    let texts: Vec<Value> = failures
        .into_iter()
        .map(|f| f.2)
        .filter(|t| !t.is_null())
        .collect();
    if let Some(map) = phase.as_object_mut() {
        map.remove("counterexamples");
        if !texts.is_empty() {
            map.insert("counterexamples".into(), texts.into());
        }
    }
    let mut cells = serde_json::Map::new();
    for p in all {
        for (name, cell) in p["cells"].as_object().into_iter().flatten() {
            let merged = cells.entry(name.clone()).or_insert_with(|| {
                let mut c = cell.clone();
                for key in ["runs", "invalid", "unknown"] {
                    c[key] = 0.into();
                }
                c["counts"] = serde_json::json!({});
                c["verdict"] = "valid".into();
                c
            });
            for key in ["runs", "invalid", "unknown"] {
                merged[key] =
                    (merged[key].as_u64().unwrap_or(0) + cell[key].as_u64().unwrap_or(0)).into();
            }
            let worst = verdict_of(&merged["verdict"]).max(verdict_of(&cell["verdict"]));
            merged["verdict"] = serde_json::to_value(worst).unwrap_or_default();
            for (k, n) in cell["counts"].as_object().into_iter().flatten() {
                let total = merged["counts"][k].as_u64().unwrap_or(0) + n.as_u64().unwrap_or(0);
                merged["counts"][k] = total.into();
            }
        }
    }
    phase["cells"] = cells.into();
}
