//! The same consumer as `credit_with_marker`, without the marker: every
//! delivery credits the account again. A worker that crashes after the
//! credit and before its ack (the ack gap) gets the job redelivered, and
//! the account is credited twice. ackgap finds it, shrinks it to a minimal
//! counterexample and prints the command that replays it.
//!
//! Run it with `cargo run --example credit_without_marker`; like `ackgap`,
//! it exits 1 because an invariant (effect-once) broke. That is the
//! expected outcome: `ci/examples` checks for it.

use std::process::ExitCode;

use ackgap::queue::QueueError;
use ackgap::testing::{Campaign, Handler, Job, MemoryStore};

#[tokio::main]
async fn main() -> ExitCode {
    let ledger = MemoryStore::new();
    let credit = Handler::new(
        "credit-without-marker",
        ledger.clone(),
        move |_conn, job: Job| {
            let ledger = ledger.clone();
            async move {
                // INSERT without a unique key: one more row per delivery.
                ledger.add(&job.id);
                Ok::<(), QueueError>(())
            }
        },
    );
    let report = match Campaign::new(credit).run().await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("credit_without_marker: the campaign could not run: {e}");
            return ExitCode::from(3);
        }
    };
    print!("{report}");
    if report.holds() {
        println!("credit_without_marker: no duplicate credit found");
        ExitCode::SUCCESS
    } else {
        println!("credit_without_marker: ackgap found a duplicate credit (exit 1, as expected)");
        ExitCode::from(1)
    }
}
