//! ackgap's integration tests, gathered in one test binary (as ripgrep
//! gathers its own): each file of this folder is a module named for the
//! area it checks, and a test's full name is `area::claim` (or
//! `area::claim::backend` for the server matrix). One binary is one compile
//! and one link instead of thirteen, on a 2-core machine the biggest part of
//! the suite's build. loom's tests stay apart (`tests/loom_*.rs`): they need
//! the `loom` feature, which swaps the lease table's lock.

// The server matrix, `matrix!` and fresh queue names, shared by the areas
// below (textual macro scope: it comes first).
#[macro_use]
mod common;

mod adapters;
// apalis-redis under test (its contract and CLI runs need `--features apalis`).
mod apalis;
mod apps; // --app: the user's own Celery, RQ, Dramatiq or arq app, a verdict per setting
mod artifacts;
mod batch;
mod battery; // run --queue Q's durability matrix: its column, its cells, their lines
mod bullmq; // the protocol document's examples, and lmove-python judged as lmove in process
mod capabilities; // what a hello promises (dedup, optional operations) decides what is sent
mod chaos;
mod chaos_watch; // a slow server told from a dead one; a run whose schedule slipped says so
mod cli;
mod cluster; // --server cluster and replicated under explore and exhaust
mod deliveries;
mod exits; // the exit-code table, a test per row; no panic on a closed stdout
mod explore;
mod faults; // power loss (the LD_PRELOAD shim) and clock jumps (libfaketime), server level
mod hostile;
mod hostile_tool;
mod house;
mod mutants;
mod no_undone_write; // healthy paths leave the AOF and the replication offsets where they were
mod parallel_steps; // l0+l1: calls sent together, either order accepted, a non-atomic lease caught
mod proptest_queue;
mod protocol;
mod queue;
mod queues; // every adapter of adapters/*/adapter.toml: conformance, a dead worker's job, explore, chaos // the adapter protocol (exec:): a broken adapter, serve-adapter, the CLI
mod replicated; // replicas, the durability dial, failover faults
mod scale; // --jobs, --shard and merge, progress on a terminal
mod server_steps; // the server's own faults as explorer steps: K (kill -9), P (power loss)
mod servers;
mod shipped; // --queue NAME: the adapters the binary carries, outside the checkout
mod streams;
mod timeline; // the HTML report read as a document: rings, colours, overview, lanes
mod user;
mod verdict;
mod verdict_auth;
