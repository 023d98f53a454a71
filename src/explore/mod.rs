//! The model checker's explorers: schedules of steps run against the pure
//! [`crate::model::Model`] and a real Valkey in lock step.
//!
//! - [`op`]: the step vocabulary and a schedule's one-line text form;
//! - [`driver`]: applies a step to both sides and checks outcome,
//!   refinement and structure after each one, recording a history;
//! - [`walk`]: the seeded random walk (swarm configuration, steps, heal,
//!   drain) behind `ackgap explore`;
//! - [`exhaust`](mod@exhaust): bounded exhaustive search, every
//!   interleaving up to a depth on the model, breadth first, paths to the
//!   same state merged, each new state checked on Valkey (`ackgap exhaust`);
//! - [`shrink`](mod@shrink): delta debugging (ddmin) of a failing schedule
//!   to a 1-minimal counterexample, written under `target/ackgap/failures/`;
//! - [`line`](mod@line): the replay line, one shell-safe token naming the
//!   queue, the consumer, the configuration and the schedule
//!   (`ackgap replay LINE`);
//! - [`parallel`]: many walks at once (`--jobs`), each on a queue of its
//!   own, reported in seed order; a seed range cut into shards
//!   (`--shard K/N`);
//! - [`server_steps`]: the server's own faults as steps (`K` kill -9,
//!   `P` power loss) on a server the explorers own ([`OwnedServer`]);
//! - [`deliveries`](mod@deliveries): one job delivered N times to a
//!   consumer, deliveries against effects (`ackgap deliveries`).
//!
//! Every walk is named by its seed and prints the command that runs it
//! again: `ackgap explore --seed S --steps N`.

pub mod deliveries;
mod difference;
pub mod driver;
pub mod exhaust;
pub mod line;
pub mod op;
pub mod parallel;
pub mod reduce;
pub mod server_steps;
pub mod shrink;
pub mod walk;

pub use deliveries::{deliveries, DeliveriesReport};
pub use driver::{Divergence, Driver, DriverConfig, ExploreError, Outcome, Subject};
pub use exhaust::{exhaust, ExhaustConfig, ExhaustReport};
pub use line::{Line, LineConfig};
pub use op::{ParseError, Schedule, Step};
pub use parallel::{
    walk_seeds, walk_seeds_spread, PrintFailures, SeedError, Seeds, Shard, WalkObserver,
};
pub use server_steps::OwnedServer;
pub use shrink::{shrink, shrink_for, Shrunk};
pub use walk::{
    explore, explore_on, explore_quiet, replay, replay_command, replay_on, run_schedule,
    walk_replay, SwarmConfig, WalkReport, Weights,
};
