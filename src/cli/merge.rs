//! `ackgap merge REPORT...`: the `--json` reports of the N shards of one
//! run (`ackgap explore --shard K/N --json`, one per CI machine), combined
//! into the report one machine would have printed for the whole range:
//! the same walks, steps, failed seeds in order (the first failure first),
//! verdict and exit code. Reports of different commands, versions or
//! configurations, a shard missing or given twice, are refused.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ackgap::explore::Shard;

use super::report::{self, ExploreSummary};
use super::{Exit, ExitError};

/// The arguments of `ackgap merge`.
#[derive(Debug, clap::Args)]
pub(super) struct MergeArgs {
    /// The shards' JSON reports (`ackgap explore --shard K/N --json >
    /// FILE`), every K of one N exactly once, in any order.
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
    let mut shards = Vec::new();
    for path in &args.reports {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ExitError::new(Exit::Usage, format!("cannot read {}: {e}", path.display()))
        })?;
        let summary: ExploreSummary = serde_json::from_str(text.trim()).map_err(|e| {
            ExitError::new(
                Exit::Usage,
                format!(
                    "{} is not the JSON report of a shard (ackgap explore --shard K/N --json): {e}",
                    path.display()
                ),
            )
        })?;
        shards.push((path.display().to_string(), summary));
    }
    let merged = merge(shards).map_err(|e| ExitError::new(Exit::Usage, e))?;
    if args.json {
        outln!("{}", serde_json::to_value(&merged)?);
    } else {
        merged.print(started.elapsed().as_secs_f64());
    }
    Ok(merged.verdict.into())
}

/// The one report of `shards` (each named by its file), or why they are
/// not the shards of one run.
fn merge(shards: Vec<(String, ExploreSummary)>) -> Result<ExploreSummary, String> {
    let version = env!("CARGO_PKG_VERSION");
    let (first_name, first) = &shards[0];
    let mut by_index: BTreeMap<u64, &str> = BTreeMap::new();
    let mut count = None;
    for (name, s) in &shards {
        if s.command != "explore" {
            return Err(format!(
                "{name} is a report of `ackgap {}`, which merge does not combine (explore only)",
                s.command
            ));
        }
        if s.version != version {
            return Err(format!(
                "{name} was made by ackgap {}, this is ackgap {version}: merge the reports with the version that made them",
                s.version
            ));
        }
        if s.config != first.config {
            return Err(format!(
                "{name} and {first_name} were made with different configurations: {:?} and {:?}",
                s.config, first.config
            ));
        }
        let Some(shard) = s.shard else {
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
    let mut servers: Vec<&str> = Vec::new();
    for (_, s) in &shards {
        if !servers.contains(&s.server.as_str()) {
            servers.push(&s.server);
        }
    }
    let walks: u64 = shards.iter().map(|(_, s)| s.walks).sum();
    let steps: u64 = shards.iter().map(|(_, s)| s.steps).sum();
    let elapsed_ms = shards.iter().map(|(_, s)| s.elapsed_ms).fold(0.0, f64::max);
    let mut failed: Vec<serde_json::Value> = shards
        .iter()
        .flat_map(|(_, s)| s.failed.iter().cloned())
        .collect();
    failed.sort_by_key(|walk| walk["seed"].as_u64());
    let verdicts = failed.iter().map(|walk| {
        serde_json::from_value(walk["verdict"].clone()).unwrap_or(ackgap::check::Verdict::Unknown)
    });
    let verdict = report::verdict(walks, verdicts.collect::<Vec<_>>().into_iter());
    Ok(ExploreSummary {
        command: first.command.clone(),
        version: version.into(),
        config: first.config.clone(),
        shard: None,
        server: servers.join("; "),
        walks,
        steps,
        elapsed_ms,
        steps_per_s: steps as f64 / (elapsed_ms / 1000.0).max(1e-9),
        verdict,
        reported: shards.iter().map(|(_, s)| s.reported).sum(),
        failed,
    })
}
