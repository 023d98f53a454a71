//! `ackgap mutants`: the kill matrix of the checker's mutation test.

use super::envelope::{KillJson, MutantsEnvelope};
use super::progress::Progress;
use super::{start_server, Exit, ExitError};
use ackgap::explore::Shard;
use ackgap::mutants::{self, Budget, Mutant};
use ackgap::server::{Persistence, Server, ServerSpec};

/// `ackgap mutants`.
#[derive(Debug, clap::Args)]
pub struct MutantsArgs {
    /// Where the queue runs: `process`, `container` or a URL.
    #[arg(long, default_value = "process", env = "ACKGAP_SERVER")]
    server: ServerSpec,
    /// Random walks per mutant after the exhaustive phase (0: none).
    #[arg(long, default_value_t = mutants::SEEDS, value_parser = clap::value_parser!(u64).range(0..=super::bounds::SEEDS_MAX))]
    budget_seeds: u64,
    /// Random steps per walk.
    #[arg(long, default_value_t = 50, value_parser = super::count::<1, { super::bounds::STEPS_MAX }>)]
    steps: usize,
    /// Depth of the exhaustive phase's 2-job search; the 1-job search
    /// goes 2 deeper (0: skip the phase).
    #[arg(long, default_value_t = mutants::DEPTH, value_parser = super::count::<0, { super::bounds::DEPTH_MAX }>)]
    depth: usize,
    /// The chaos phase's length per mutant (ms; 0: no chaos phase): every
    /// survivor of the explorers, and every consumer mutant.
    #[arg(long, default_value_t = mutants::CHAOS_MS, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    chaos_ms: u64,
    /// Mutants in flight at once, each on its own queue and connection;
    /// the matrix is the same for every N. Default: the number of cores.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=super::bounds::JOBS_MAX))]
    jobs: Option<u64>,
    /// Run only these mutants (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Run only shard K of N of the mutants asked for (the K-th and every
    /// N-th after it); `ackgap merge` combines the N shards' `--json`
    /// reports into the whole matrix.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Print one JSON object instead of the matrix.
    #[arg(long)]
    json: bool,
    /// Also write the matrix as JUnit XML to FILE: a test case per mutant,
    /// a survivor a failure. An existing FILE is refused.
    #[arg(long, value_name = "FILE")]
    junit: Option<std::path::PathBuf>,
}

/// Runs every mutant asked for until an invariant catches it, and prints
/// the matrix; exits 1 if any survives.
pub(super) async fn run(args: MutantsArgs) -> Result<Exit, ExitError> {
    let asked = mutants::select(&args.only)?;
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    let mutants: Vec<Mutant> = asked
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 % shard.count == shard.index - 1)
        .map(|(_, m)| *m)
        .collect();
    if let Some(path) = &args.junit {
        super::junit::check_path(path)?;
    }
    let mut budget = Budget::full(args.depth, args.budget_seeds);
    budget.steps = args.steps;
    budget.chaos_ms = args.chaos_ms;
    let mut server = start_server(&args.server, Persistence::None).await?;
    if !args.json {
        print_plan(&mutants, &budget, &server);
    }
    let jobs = super::explore::jobs(args.jobs) as usize;
    let mut progress = Progress::of("mutants", "states and walks", "survived", args.json);
    progress.start(mutants.len() as u64);
    // The explorers run `jobs` mutants at a time, with the bar; the chaos
    // phase follows, one mutant at a time, on the whole server.
    let result = mutants::matrix_on(&mut server, &mutants, &budget, jobs, |kill| {
        progress.done(kill.states as u64 + kill.seeds, !kill.killed);
    })
    .await;
    progress.finish();
    let stopped = server.stop().await;
    let matrix = result?;
    stopped.map_err(ExitError::stopping)?;
    if let Some(path) = &args.junit {
        super::junit::write(path, &super::junit::mutants(&matrix))?;
    }
    let report = MutantsEnvelope::of(&asked, &matrix, args.shard)?;
    if args.json {
        outln!("{}", serde_json::to_value(&report)?);
    } else {
        out!("{}", matrix_table(&report));
    }
    Ok(if matrix.survivors().is_empty() {
        Exit::Valid
    } else {
        Exit::Invalid
    })
}

/// What is about to run, and on which server.
fn print_plan(mutants: &[Mutant], budget: &Budget, server: &Server) {
    outln!(
        "ackgap mutants: {} mutants on {}; exhaust {}, then up to {} seeds of {} steps; {}",
        mutants.len(),
        server.describe(),
        if budget.exhaust.is_empty() {
            "off".into()
        } else {
            budget
                .exhaust
                .iter()
                .map(|e| format!("{}j{}w depth {}", e.jobs, e.workers, e.depth))
                .collect::<Vec<_>>()
                .join(" + ")
        },
        budget.seeds,
        budget.steps,
        if budget.chaos_ms > 0 {
            format!(
                "then {} ms of chaos for each survivor and each consumer mutant",
                budget.chaos_ms
            )
        } else {
            "chaos not used".into()
        }
    );
}

/// The kill matrix of a `--json` report (its `kills`, `score` and
/// `elapsed_ms`, as `ackgap mutants` writes them and `ackgap merge`
/// combines them): one row per mutant, the minimal counterexamples, and
/// the score.
pub(super) fn matrix_table(report: &MutantsEnvelope) -> String {
    let kills = &report.kills;
    let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    // The names' column as wide as the longest (the `exec:` rows' are
    // longer than the others).
    let w = kills
        .iter()
        .map(|k| k.mutant.len())
        .max()
        .unwrap_or(0)
        .max(23);
    let mut out = format!(
        "{:<w$} {:<8} {:<18} {:>5}  {:<7} {:>12} {:>8}  {}\n",
        "mutant", "result", "by", "steps", "phase", "effort", "time", "chaos"
    );
    for k in kills {
        let chaos = match &k.chaos {
            None => "-".to_owned(),
            Some(c) if c.killed => format!("killed by {}", text(&c.invariant)),
            Some(_) => "nothing found".to_owned(),
        };
        out.push_str(&format!(
            "{:<w$} {:<8} {:<18} {:>5}  {:<7} {:>12} {:>7.1}s  {chaos}\n",
            k.mutant,
            match (k.killed, k.as_expected) {
                (true, true) => "killed",
                (true, false) => "killed*",
                _ => "SURVIVED",
            },
            text(&k.invariant),
            k.steps.map_or("-".into(), |n| n.to_string()),
            text(&k.phase),
            effort(k, report.budget.chaos_ms),
            k.elapsed_ms / 1000.0
        ));
    }
    out.push_str("counterexamples (minimal, 1-minimal by delta debugging):\n");
    for k in kills {
        if let (Some(c), Some(before)) = (&k.counterexample, k.steps_before) {
            out.push_str(&format!("  {:<w$} {c}   (from {before} steps)\n", k.mutant));
        }
    }
    let score = &report.score;
    let unexpected = kills.iter().filter(|k| k.killed && !k.as_expected).count();
    out.push_str(&format!(
        "{}/{} killed in {:.1} s{}{}\n",
        score.killed,
        score.total,
        report.elapsed_ms / 1000.0,
        if unexpected > 0 {
            format!("; {unexpected} by an unexpected invariant (*)")
        } else {
            String::new()
        },
        if score.survived.is_empty() {
            String::new()
        } else {
            format!("; SURVIVED: {}", score.survived.join(", "))
        }
    ));
    out
}

/// What it took to find mutant `k` (or to give up): the states searched,
/// the walks run, or the chaos phase's `chaos_ms`.
fn effort(k: &KillJson, chaos_ms: u64) -> String {
    match k.phase.as_deref() {
        Some("exhaust") => format!("{} states", k.states),
        Some("chaos") => format!("{chaos_ms} ms"),
        Some(_) => format!("{} seeds", k.seeds),
        None if k.seeds > 0 => format!("{} seeds", k.seeds),
        None => format!("{} states", k.states),
    }
}
