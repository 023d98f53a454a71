//! `ackgap check FILE`: re-judge a stored history offline, like Jepsen's
//! `analyze`.

use std::path::PathBuf;

use ackgap::check;

use super::{print_invariants, Exit, ExitError};

/// The arguments of `ackgap check`.
#[derive(Debug, clap::Args)]
pub(super) struct CheckArgs {
    /// The history file (JSON lines, as `ackgap run` writes).
    file: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    require: super::RequireExercised,
}

/// Reads the history, judges it, prints the table (or JSON).
pub(super) fn run(args: CheckArgs) -> Result<Exit, ExitError> {
    let events =
        ackgap::history::read_file(&args.file).map_err(|e| ExitError::new(Exit::Usage, e))?;
    // An empty file is not a history with nothing in it to judge: it is
    // the wrong file, or a run that wrote nothing.
    if events.is_empty() {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "{}: no event: an empty file is not a history (every run's history starts with its first operation)",
                args.file.display()
            ),
        ));
    }
    let reports = check::check_all(&events);
    let verdict = check::overall(&reports);
    // A chaos history's slot migrations, read the same way as the run did.
    let migrations = ackgap::chaos::runner::migration_windows(&events);
    if args.json {
        let value = serde_json::json!({"file": args.file, "events": events.len(),
                                        "verdict": verdict, "invariants": reports,
                                        "migrations": migrations});
        outln!("{value}");
    } else {
        outln!("{}: {} events\n", args.file.display(), events.len());
        for m in &migrations {
            outln!("{}", m.describe());
        }
        print_invariants(&reports);
        outln!(
            "\nverdict: {}",
            check::verdict_with(verdict, &check::unexercised(&reports))
        );
    }
    Ok(args.require.apply(verdict, &check::unexercised(&reports)))
}
