//! `ackgap mutants`: the kill matrix of the checker's mutation test.

use ackgap::mutants::{self, Budget, Matrix, Mutant};
use ackgap::server::{Persistence, Server, ServerSpec};

use super::progress::Progress;
use super::{start_server, Exit, ExitError};

/// `ackgap mutants`.
#[derive(Debug, clap::Args)]
pub struct MutantsArgs {
    /// Where the queue runs: `process`, `container` or a URL.
    #[arg(long, default_value = "process", env = "ACKGAP_SERVER")]
    server: ServerSpec,
    /// Random walks per mutant after the exhaustive phase (0: none).
    #[arg(long, default_value_t = 200)]
    budget_seeds: u64,
    /// Random steps per walk.
    #[arg(long, default_value_t = 50)]
    steps: usize,
    /// Depth of the exhaustive phase's 2-job search; the 1-job search
    /// goes 3 deeper (0: skip the phase).
    #[arg(long, default_value_t = 6)]
    depth: usize,
    /// Mutants in flight at once, each on its own queue and connection;
    /// the matrix is the same for every N. Default: the number of cores.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    jobs: Option<u64>,
    /// Run only these mutants (repeatable).
    #[arg(long)]
    only: Vec<String>,
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
    let mutants = mutants::select(&args.only)?;
    if let Some(path) = &args.junit {
        super::junit::check_path(path)?;
    }
    let mut budget = Budget::full(args.depth, args.budget_seeds);
    budget.steps = args.steps;
    let server = start_server(&args.server, Persistence::None).await?;
    if !args.json {
        print_plan(&mutants, &budget, &server);
    }
    let jobs = super::explore::jobs(args.jobs) as usize;
    let mut progress = Progress::of("mutants", "states and walks", "survived", args.json);
    progress.start(mutants.len() as u64);
    let result = mutants::matrix_jobs(&server.client(), &mutants, &budget, jobs, |kill| {
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
    if args.json {
        let value = serde_json::json!({
            "kills": matrix.kills,
            "budget": matrix.budget,
            "score": matrix.score(),
            "elapsed_ms": matrix.elapsed_ms,
        });
        outln!("{value}");
    } else {
        out!("{}", matrix_table(&matrix));
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
        "ackgap mutants: {} mutants on {}; exhaust {}, then up to {} seeds of {} steps; chaos not used",
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
        budget.steps
    );
}

/// The kill matrix: one row per mutant, the minimal counterexamples, and
/// the score.
fn matrix_table(matrix: &Matrix) -> String {
    let mut out = format!(
        "{:<23} {:<8} {:<18} {:>5}  {:<7} {:>12} {:>8}\n",
        "mutant", "result", "by", "steps", "phase", "effort", "time"
    );
    for k in &matrix.kills {
        let effort = match k.phase {
            Some("exhaust") => format!("{} states", k.states),
            Some(_) => format!("{} seeds", k.seeds),
            None if k.seeds > 0 => format!("{} seeds", k.seeds),
            None => format!("{} states", k.states),
        };
        out.push_str(&format!(
            "{:<23} {:<8} {:<18} {:>5}  {:<7} {:>12} {:>7.1}s\n",
            k.mutant,
            match (k.killed, k.as_expected) {
                (true, true) => "killed",
                (true, false) => "killed*",
                (false, _) => "SURVIVED",
            },
            k.invariant.unwrap_or("-"),
            k.steps.map_or("-".into(), |n| n.to_string()),
            k.phase.unwrap_or("-"),
            effort,
            k.elapsed_ms / 1000.0
        ));
    }
    out.push_str("counterexamples (minimal, 1-minimal by delta debugging):\n");
    for k in &matrix.kills {
        if let (Some(c), Some(before)) = (&k.counterexample, k.steps_before) {
            out.push_str(&format!("  {:<23} {c}   (from {before} steps)\n", k.mutant));
        }
    }
    let s = matrix.score();
    let unexpected = matrix
        .kills
        .iter()
        .filter(|k| k.killed && !k.as_expected)
        .count();
    out.push_str(&format!(
        "{}/{} killed in {:.1} s{}{}\n",
        s.killed,
        s.total,
        matrix.elapsed_ms / 1000.0,
        if unexpected > 0 {
            format!("; {unexpected} by an unexpected invariant (*)")
        } else {
            String::new()
        },
        if s.survived.is_empty() {
            String::new()
        } else {
            format!("; SURVIVED: {}", s.survived.join(", "))
        }
    ));
    out
}
