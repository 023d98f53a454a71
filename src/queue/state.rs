//! A whole queue read back at one instant: what the checkers and the
//! refinement check compare. The Valkey client builds it from the
//! `snapshot` script; the model builds it from its own state.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::outcome::JobState;

/// One job as the jobs column and the active index hold it (the fields
/// `ID` and `~ID` of `emq:{q}:jobs`; the deadline is its active score).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobRow {
    /// The `state` field. `None` if the field is missing or unknown
    /// (a structure violation).
    pub state: Option<JobState>,
    /// The attempts counter: the token of the latest lease.
    pub attempts: u64,
    /// Leases allowed before the job goes to the dead set.
    pub max_attempts: u64,
    /// The payload as enqueued.
    pub payload: Vec<u8>,
    /// The worker holding the lease, while active.
    pub worker: Option<String>,
    /// The lease deadline (ms), while active.
    pub deadline_ms: Option<u64>,
}

/// Every row and index of one queue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Rows by job id.
    pub rows: BTreeMap<String, JobRow>,
    /// The pending index: id -> ready-at (ms).
    pub pending: BTreeMap<String, u64>,
    /// The active index: id -> lease deadline (ms).
    pub active: BTreeMap<String, u64>,
    /// The done jobs. The server keeps no done index (a done job's state
    /// entry is its place): the snapshot lists the jobs whose entry says
    /// done, and the model its done jobs.
    pub done: BTreeSet<String>,
    /// The dead index: id -> time of death (ms).
    pub dead: BTreeMap<String, u64>,
    /// Columns of the queue that are not hashes: (key, type).
    pub foreign: Vec<(String, String)>,
    /// Ids with a state entry but no job.
    #[serde(default)]
    pub strays: Vec<String>,
}

impl Snapshot {
    /// The indexes that hold `id`, in the order pending, active, done, dead.
    pub(crate) fn indexes_of(&self, id: &str) -> Vec<JobState> {
        let mut out = Vec::new();
        if self.pending.contains_key(id) {
            out.push(JobState::Pending);
        }
        if self.active.contains_key(id) {
            out.push(JobState::Active);
        }
        if self.done.contains(id) {
            out.push(JobState::Done);
        }
        if self.dead.contains_key(id) {
            out.push(JobState::Dead);
        }
        out
    }

    /// Every problem with the queue's structure: a row in no index or in
    /// several, a row whose index disagrees with its state, an index entry
    /// without a row, an active row without worker or deadline (or another
    /// with a worker), a state entry without a job, a key of the wrong type.
    /// Empty when the structure invariant holds.
    pub fn structure_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (id, row) in &self.rows {
            let indexes = self.indexes_of(id);
            match row.state {
                None => problems.push(format!("{id}: row has no valid state")),
                Some(state) => {
                    if indexes != [state] {
                        let names: Vec<&str> = indexes.iter().map(|s| s.as_str()).collect();
                        problems.push(format!(
                            "{id}: state {state} but in indexes [{}]",
                            names.join(", ")
                        ));
                    }
                    if state == JobState::Active {
                        match (row.deadline_ms, self.active.get(id)) {
                            (Some(d), Some(score)) if d == *score => {}
                            (d, score) => problems.push(format!(
                                "{id}: active with row deadline {d:?} but index score {score:?}"
                            )),
                        }
                        if row.worker.is_none() {
                            problems.push(format!("{id}: active without a worker"));
                        }
                    } else if row.worker.is_some() {
                        problems.push(format!("{id}: {state} with a worker"));
                    }
                }
            }
            if row.attempts > row.max_attempts {
                problems.push(format!(
                    "{id}: attempts {} above max_attempts {}",
                    row.attempts, row.max_attempts
                ));
            }
        }
        let indexed = self
            .pending
            .keys()
            .chain(self.active.keys())
            .chain(self.done.iter())
            .chain(self.dead.keys());
        for id in indexed {
            if !self.rows.contains_key(id) {
                problems.push(format!("{id}: index entry without a row"));
            }
        }
        for (key, kind) in &self.foreign {
            problems.push(format!(
                "{key}: a {kind} where a column of the queue belongs"
            ));
        }
        for id in &self.strays {
            problems.push(format!("{id}: a state entry without a job"));
        }
        problems.sort();
        problems.dedup();
        problems
    }
}
