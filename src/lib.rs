//! # ackgap
//!
//! A reliable job queue delivers a job one or more times, never zero: a
//! worker leases a job, applies its effect, and may crash before it
//! acknowledges; the reaper then hands the job to another worker. That is the
//! at-least-once bargain. ackgap checks both halves of it against a real
//! Valkey: that the queue loses nothing and lets only the current lease
//! holder settle a job (fencing), and — in later parts — that a consumer turns
//! redelivery into an effect applied once.
//!
//! ## A first scenario
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

pub mod adapter;
pub mod campaign;
pub mod check;
pub mod cli;
pub mod consumer;
pub mod explore;
pub mod history;
pub mod model;
pub mod queue;
pub mod server;
