//! A queue of your own under ackgap: hand a factory of [`Adapter`]s to
//! [`Campaign::queue`]. Here the user's queue is a thin client over the
//! reference scripts that also counts the acks it sends (say, for
//! metrics); it must keep everything the reference queue promises. ackgap
//! judges it with the history checkers (no-loss, fenced-settlement,
//! settle-once, ...), since only the reference queue can be compared with
//! the model step by step.
//!
//! A queue written from scratch implements [`Adapter`], every operation
//! (`ackgap::adapter::Reference` is a whole one). A queue that
//! is another queue with a difference, like this one, implements
//! [`Wrapper`] and writes only what differs. Everything either needs comes
//! from `ackgap::adapter`.
//!
//! Run it with `cargo run --example own_queue`; it exits 0 when every
//! invariant held, 1 when one broke.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

// One import for the queue side: the traits, the outcomes, the errors.
use ackgap::adapter::{
    Adapter, BoxFuture, CompleteAndLease, Queue, QueueError, Reference, Settled, Wrapper,
};
use ackgap::consumer::{Kind, Shipped};
use ackgap::testing::Campaign;

/// The user's queue client: the reference queue, plus an ack counter.
struct MyQueue {
    inner: Reference,
    acks: Arc<AtomicU64>,
}

impl MyQueue {
    fn new(queue: &Queue, acks: Arc<AtomicU64>) -> MyQueue {
        MyQueue {
            inner: Reference::new(queue.on_server_clock()),
            acks,
        }
    }
}

// Only what differs from the reference queue: the name and the two calls
// that send an ack. Everything else goes to `inner` as it is.
impl Wrapper for MyQueue {
    fn inner(&self) -> &dyn Adapter {
        &self.inner
    }

    // Not `reference`: the campaign judges this queue by its history alone.
    fn name(&self) -> &str {
        "my-queue"
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        self.acks.fetch_add(1, Ordering::Relaxed);
        self.inner.complete(id, token)
    }

    // The inner queue's `complete_and_lease` does not pass through
    // `complete` above, so it is counted here too.
    fn complete_and_lease<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
        self.acks.fetch_add(1, Ordering::Relaxed);
        self.inner
            .complete_and_lease(id, token, worker, lease_ms, now_ms)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let acks = Arc::new(AtomicU64::new(0));
    let counted = acks.clone();
    let campaign = Campaign::new(Shipped::new(Kind::Marker))
        .queue(move |queue| Arc::new(MyQueue::new(queue, counted.clone())) as Arc<dyn Adapter>);
    let report = match campaign.run().await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("own_queue: the campaign could not run: {e}");
            return ExitCode::from(3);
        }
    };
    print!("{report}");
    println!(
        "own_queue: my-queue sent {} acks",
        acks.load(Ordering::Relaxed)
    );
    if report.holds() {
        println!("own_queue: my-queue kept every invariant");
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
