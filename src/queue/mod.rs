//! The reference queue: the Lua scripts as values, the key layout, the typed
//! async client, and the outcomes both the client and the model return.

pub mod client;
pub mod durability;
pub mod keys;
pub mod outcome;
pub mod refusal;
pub mod scripts;
pub mod state;

pub use client::{CompleteAndLease, Queue, QueueError, BATCH_MAX};
pub use durability::Durability;
pub use keys::Keys;
pub use outcome::{Enqueued, Extended, Failed, JobState, Lease, Reaped, Settled};
pub use refusal::{environment_refusal, Refusal};
pub use state::{JobRow, Snapshot};
