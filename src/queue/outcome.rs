//! Typed outcomes of the queue's scripts, shared by the Valkey client and the
//! pure model so that the two can be compared value for value.

use serde::{Deserialize, Serialize};

/// Where a job is: each state names exactly one index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// In the `pending` sorted set, scored by its ready-at time.
    Pending,
    /// In the `active` sorted set, scored by its lease deadline.
    Active,
    /// In the `done` set.
    Done,
    /// In the `dead` sorted set (the morgue), scored by its time of death.
    Dead,
}

impl JobState {
    /// The name the scripts store in the row's `state` field.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Active => "active",
            JobState::Done => "done",
            JobState::Dead => "dead",
        }
    }

    /// Parses the row's `state` field; `None` for anything else.
    pub fn parse(s: &str) -> Option<JobState> {
        Some(match s {
            "pending" => JobState::Pending,
            "active" => JobState::Active,
            "done" => JobState::Done,
            "dead" => JobState::Dead,
            _ => return None,
        })
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to `enqueue`. Non-exhaustive like the other answers: the
/// queues ackgap did not write (streams, apalis, `exec:`) may admit a job
/// in a way these two do not name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Enqueued {
    /// The job was admitted: a row and a pending entry were written.
    Enqueued,
    /// A job with this id exists already; nothing changed.
    Duplicate,
}

/// A granted lease. `token` is the job's `attempts` after the increment: the
/// fencing token every settle of this lease must carry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// The job id (carries the `JOB` brand).
    pub id: String,
    /// The fencing token: the job's attempts counter after this lease.
    pub token: u64,
    /// The lease deadline in milliseconds, on the server clock unless a
    /// logical `now` was passed.
    pub deadline_ms: u64,
    /// The job's payload as enqueued.
    pub payload: Vec<u8>,
}

/// The answer to `complete`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
#[non_exhaustive]
pub enum Settled {
    /// The lease was current: the job is now done.
    Settled,
    /// The job is done already with this very token: an ack retried after a
    /// lost reply. Not an error, and nothing changed.
    AlreadySettled,
    /// Refused, nothing changed: the token is not the current token of an
    /// active job.
    Fenced {
        /// The job's attempts counter (its current token).
        current: u64,
        /// The job's state when the settle arrived.
        state: JobState,
    },
    /// No job has this id.
    Missing,
}

/// The answer to `fail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
#[non_exhaustive]
pub enum Failed {
    /// The job is pending again, ready at `ready_at_ms`.
    Requeued {
        /// When the job becomes ready again (ms).
        ready_at_ms: u64,
    },
    /// That was the last allowed attempt: the job is in the dead set.
    Dead,
    /// Refused, nothing changed (see [`Settled::Fenced`]).
    Fenced {
        /// The job's attempts counter.
        current: u64,
        /// The job's state when the fail arrived.
        state: JobState,
    },
    /// No job has this id.
    Missing,
}

/// The answer to `extend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
#[non_exhaustive]
pub enum Extended {
    /// The lease now ends at `deadline_ms`.
    Extended {
        /// The new deadline (ms).
        deadline_ms: u64,
    },
    /// Refused, nothing changed (see [`Settled::Fenced`]).
    Fenced {
        /// The job's attempts counter.
        current: u64,
        /// The job's state when the extend arrived.
        state: JobState,
    },
    /// No job has this id.
    Missing,
}

/// Where the reaper sent one expired lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Reaped {
    /// The job whose lease had expired.
    pub id: String,
    /// `Pending` (another attempt is allowed) or `Dead` (attempts reached
    /// `max_attempts`).
    pub to: JobState,
}
