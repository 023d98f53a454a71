//! # ackgap
//!
//! A reliable job queue delivers a job one or more times, never zero: a
//! worker leases a job, applies its effect, and may crash before it
//! acknowledges; the reaper then hands the job to another worker. That is the
//! at-least-once bargain. ackgap checks both halves of it against a real
//! Valkey: that the queue loses nothing and lets only the current lease
//! holder settle a job (fencing), and whether a consumer turns redelivery
//! into an effect applied once.
//!
//! ## Your consumer, checked from your own tests
//!
//! Most users bring a job handler of their own (it charges a card, writes a
//! row, sends a mail) and want to know whether *its* effect lands once when
//! the queue delivers a job twice. Wrap it in a [`testing::Handler`] with
//! the store its effects land in, and let a [`testing::Campaign`] run the
//! model checker's seeded walks against it: crashes in the ack gap, lost
//! ack replies, stale leases, the reaper. A broken consumer fails the test
//! with a minimal counterexample and the command that replays it:
//!
//! ```no_run
//! use ackgap::queue::QueueError;
//! use ackgap::testing::{Campaign, Handler, Job, MemoryStore};
//!
//! #[tokio::test]
//! async fn a_credit_lands_once_under_redelivery() {
//!     // One row per credit, keyed by the job id: your own store, counted
//!     // by ackgap at the end of every walk.
//!     let ledger = MemoryStore::new();
//!     let credit = Handler::new("credit", ledger.clone(), move |_conn, job: Job| {
//!         let ledger = ledger.clone();
//!         async move {
//!             // The marker: a unique key on the job id, written with the
//!             // credit in one step. `ledger.add(&job.id)` here (no marker)
//!             // fails the test with a duplicate credit.
//!             ledger.add_once(&job.id);
//!             Ok::<(), QueueError>(())
//!         }
//!     });
//!     Campaign::new(credit).check().await;
//! }
//! ```
//!
//! It takes about a second (16 walks of 40 steps on an embedded Valkey);
//! `ACKGAP_SEEDS=1000 cargo test` runs longer. Your own queue goes behind
//! the [`adapter::Adapter`] trait and into [`testing::Campaign::queue`].
//! The examples (`examples/credit_with_marker.rs`,
//! `examples/credit_without_marker.rs`, `examples/own_queue.rs`) show each
//! case whole; [`testing`] documents the settings.
//!
//! ## The command line: a first scenario
//!
//! Start an embedded server, connect to a queue, and watch the fencing token
//! refuse a stale worker:
//!
//! ```no_run
//! use ackgap::queue::{client::EnqueueOptions, Queue, Settled};
//! use ackgap::server::{Persistence, Server, ServerSpec};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = Server::start(&"process".parse()?, Persistence::None).await?;
//! let queue = Queue::connect(&server.client(), "orders").await?.at(1_000);
//! queue.enqueue("JOB-42", b"charge 10", EnqueueOptions::default()).await?;
//! let stale = queue.lease("w1", 100).await?.expect("a ready job");
//! // w1 stalls past its deadline; the reaper takes the job back.
//! queue.at(1_100).reap(10).await?;
//! let fresh = queue.at(1_100).lease("w2", 100).await?.expect("redelivered");
//! assert!(matches!(queue.complete("JOB-42", stale.token).await?, Settled::Fenced { .. }));
//! assert_eq!(queue.complete("JOB-42", fresh.token).await?, Settled::Settled);
//! # Ok(()) }
//! ```
//!
//! ## Reproducing a failure
//!
//! Every run is driven by one `u64` seed and prints the one command that
//! reproduces it (`ackgap run --seed 3 --server process`). Every operation is
//! recorded as a history (JSON lines under `target/ackgap/`), which
//! `ackgap check FILE` re-judges offline.
//!
//! ## Limits
//!
//! Under real concurrency the seed fixes what the run *does* (jobs, workers,
//! payloads), not which worker wins which lease; the checkers judge whatever
//! interleaving happened. Logical time (`Queue::at`) is for deterministic
//! exploration only; production callers use the server clock.

#![warn(missing_docs)]

pub mod adapter;
pub mod chaos;
pub mod check;
pub mod consumer;
pub mod explore;
pub mod fault;
mod future;
pub mod history;
pub mod model;
pub mod queue;
pub mod report;
pub mod server;
pub mod testing;

// The binary's own: `ackgap bench`, `ackgap run`'s campaign and `ackgap
// mutants`. Public only so that the binary, the integration tests and the
// benches reach them; hidden from the docs and no part of the semver
// promise (ARCHITECTURE.md, "The public API").
#[doc(hidden)]
pub mod bench;
#[doc(hidden)]
pub mod campaign;
#[doc(hidden)]
pub mod mutants;
