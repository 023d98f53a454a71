//! `ackgap serve-adapter --queue NAME`: a shipped queue served over stdin
//! and stdout by the adapter protocol, so that
//! `--queue 'exec:ackgap serve-adapter --queue lmove'` judges the same
//! queue through a pipe (the protocol's own tests, and its cost).

use super::{Exit, ExitError};

/// The arguments of `ackgap serve-adapter`.
#[derive(Debug, clap::Args)]
pub(super) struct ServeArgs {
    /// The shipped queue to serve: reference, lmove, rpop, streams, or
    /// apalis (built with --features apalis).
    #[arg(long = "queue")]
    queue: String,
}

/// Serves until stdin ends.
pub(super) async fn run(args: ServeArgs) -> Result<Exit, ExitError> {
    if !ackgap::adapter::NAMES.contains(&args.queue.as_str()) {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "unknown --queue {:?}: expected one of {}",
                args.queue,
                ackgap::adapter::NAMES.join(", ")
            ),
        ));
    }
    let input = tokio::io::BufReader::new(tokio::io::stdin());
    let open = ackgap::adapter::serve::shipped(&args.queue);
    ackgap::adapter::serve::serve(input, tokio::io::stdout(), open)
        .await
        .map_err(|e| ExitError::new(Exit::Unavailable, e))?;
    Ok(Exit::Valid)
}
