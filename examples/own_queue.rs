//! A queue of your own under ackgap: implement the [`Adapter`] trait and
//! hand a factory to [`Campaign::queue`]. Here the user's queue is a thin
//! client over the reference scripts that also counts the acks it sends
//! (say, for metrics); it must keep everything the reference queue
//! promises. ackgap judges it with the history checkers (no-loss,
//! fenced-settlement, settle-once, ...), since only the reference queue
//! can be compared with the model step by step.
//!
//! Run it with `cargo run --example own_queue`; it exits 0 when every
//! invariant held, 1 when one broke.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ackgap::adapter::{read_of, Adapter, Read};
use ackgap::consumer::{BoxFuture, Kind, Shipped};
use ackgap::queue::client::EnqueueOptions;
use ackgap::queue::{Enqueued, Extended, Failed, Keys, Lease, Queue, QueueError, Reaped, Settled};
use ackgap::testing::{Campaign, ConnectionManager};

/// The user's queue client.
struct MyQueue {
    queue: Queue,
    acks: Arc<AtomicU64>,
}

impl MyQueue {
    fn new(queue: &Queue, acks: Arc<AtomicU64>) -> MyQueue {
        MyQueue {
            queue: queue.on_server_clock(),
            acks,
        }
    }

    /// The explorers run on logical time (`Some`); production on the
    /// server clock (`None`).
    fn clock(&self, now_ms: Option<u64>) -> Queue {
        match now_ms {
            Some(now) => self.queue.at(now),
            None => self.queue.on_server_clock(),
        }
    }
}

impl Adapter for MyQueue {
    fn name(&self) -> &str {
        "my-queue"
    }

    fn keys(&self) -> &Keys {
        self.queue.keys()
    }

    fn connection(&self) -> ConnectionManager {
        self.queue.connection()
    }

    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        Box::pin(async move { self.clock(now_ms).enqueue(id, payload, options).await })
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move { self.clock(now_ms).lease(worker, lease_ms).await })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(async move {
            self.acks.fetch_add(1, Ordering::Relaxed);
            self.queue.complete(id, token).await
        })
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Box::pin(async move { self.clock(now_ms).fail(id, token, retry_delay_ms).await })
    }

    fn extend<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        Box::pin(async move { self.clock(now_ms).extend(id, token, lease_ms).await })
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(async move { self.clock(now_ms).reap(limit).await })
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(async move { Ok(read_of(&self.queue.snapshot().await?)) })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move { self.queue.clear().await.map(|_| ()) })
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
