//! A consumer that credits an account once per job, however often the job
//! is delivered: the credit and its marker (a unique key on the job id)
//! are written in one atomic step. ackgap finds no duplicate credit.
//!
//! Run it with `cargo run --example credit_with_marker`; it exits 0 when
//! every invariant held, 1 when one broke (as `ackgap` does).

use std::process::ExitCode;

use ackgap::queue::QueueError;
use ackgap::testing::{Campaign, Handler, Job, MemoryStore};

#[tokio::main]
async fn main() -> ExitCode {
    // The ledger: one row per credit, keyed by the job id. In a real
    // service this is a table with a unique index on `job_id`.
    let ledger = MemoryStore::new();
    let credit = Handler::new(
        "credit-with-marker",
        ledger.clone(),
        move |_conn, job: Job| {
            let ledger = ledger.clone();
            async move {
                // INSERT .. ON CONFLICT (job_id) DO NOTHING: a redelivery finds
                // the row and credits nothing.
                ledger.add_once(&job.id);
                Ok::<(), QueueError>(())
            }
        },
    );
    let report = match Campaign::new(credit).run().await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("credit_with_marker: the campaign could not run: {e}");
            return ExitCode::from(3);
        }
    };
    print!("{report}");
    if report.holds() {
        println!("credit_with_marker: every credit landed once");
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
