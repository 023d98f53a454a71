//! The model checker's explorers: schedules of steps run against the pure
//! [`crate::model::Model`] and a real Valkey in lock step.
//!
//! - [`op`]: the step vocabulary and a schedule's one-line text form;
//! - [`driver`]: applies a step to both sides and checks outcome,
//!   refinement and structure after each one, recording a history;
//! - [`walk`]: the seeded random walk (swarm configuration, steps, heal,
//!   drain) behind `ackgap explore`.
//!
//! Every walk is named by its seed and prints the command that runs it
//! again: `ackgap explore --seed S --steps N`.

pub mod driver;
pub mod op;
pub mod walk;

pub use driver::{Divergence, Driver, DriverConfig, ExploreError, Outcome};
pub use op::{ParseError, Schedule, Step};
pub use walk::{explore, replay, replay_command, SwarmConfig, WalkReport, Weights};
