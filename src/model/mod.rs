//! The pure reference model of the queue: the state machine of the Lua
//! scripts in `lua/`, on logical time, with no I/O.
//!
//! The model is the oracle of the refinement check: after every step the
//! explorers run the same operation against a real Valkey and against a
//! [`Model`], and compare the answers and then the whole state (the
//! [`Snapshot`] each side reads back) value for value. So the model follows
//! the scripts, not the design's intent: the order of the argument checks,
//! the order of the branches in each script, the scores each index gets, and
//! the row fields each transition sets or deletes are the scripts' own. Where
//! a script looks odd, the model copies the oddity; a divergence is a finding
//! for one side or the other, not something to smooth over here.
//!
//! Time is always the logical `now_ms` the caller passes (the scripts read
//! `TIME` only when no `now` is given, which the explorers never do).
//!
//! # Cost
//!
//! Exhaustive search clones, hashes and compares states by the million, so
//! the state is only the rows, in a `BTreeMap` (deterministic order, cheap
//! hashing); ids, workers and payloads are shared `Arc`s, so a clone copies
//! no bytes. The two ordered indexes the operations need (pending by ready-at
//! and active by deadline) are kept beside the rows; they are a function of
//! the rows, so equality and hashing look at the rows alone.
//!
//! # Design notes
//!
//! The model's batch operations are loops over its single ones after the
//! same checks, so the oracle is obviously right;
//! `tests/integration/batch.rs` compares batch calls, successive single
//! calls and the model.

mod args;
pub mod durable;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

pub use args::{
    ModelError, BATCH_MAX, ID_BYTES_MAX, MAX_ATTEMPTS_MAX, MS_MAX, REAP_LIMIT_MAX, WORKER_BYTES_MAX,
};

use crate::queue::outcome::{Enqueued, Extended, Failed, JobState, Lease, Reaped, Settled};
use crate::queue::state::{JobRow, Snapshot};

/// One job as the model holds it: the row's fields plus its index score.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Job {
    attempts: u64,
    max_attempts: u64,
    payload: Arc<[u8]>,
    place: Place,
}

/// The job's state together with what only that state carries, so that a
/// worker without a lease or a done job with a score cannot be represented.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Place {
    Pending { ready_at_ms: u64 },
    Active { deadline_ms: u64, worker: Arc<str> },
    Done,
    Dead { died_at_ms: u64 },
}

impl Job {
    /// The job's state, which names the one index it is in.
    pub fn state(&self) -> JobState {
        match self.place {
            Place::Pending { .. } => JobState::Pending,
            Place::Active { .. } => JobState::Active,
            Place::Done => JobState::Done,
            Place::Dead { .. } => JobState::Dead,
        }
    }

    /// The attempts counter: the token of the latest lease, 0 before the
    /// first.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// Leases allowed before the job goes to the dead set.
    pub fn max_attempts(&self) -> u64 {
        self.max_attempts
    }

    /// The payload as enqueued.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The worker holding the lease, while active.
    pub fn worker(&self) -> Option<&str> {
        match &self.place {
            Place::Active { worker, .. } => Some(worker),
            _ => None,
        }
    }

    /// The lease deadline (ms), while active.
    pub fn deadline_ms(&self) -> Option<u64> {
        match self.place {
            Place::Active { deadline_ms, .. } => Some(deadline_ms),
            _ => None,
        }
    }

    /// The job's score in its index (ms): ready-at when pending, the
    /// deadline when active, the time of death when dead; `None` when done
    /// (the done index is a plain set).
    pub fn score_ms(&self) -> Option<u64> {
        match self.place {
            Place::Pending { ready_at_ms } => Some(ready_at_ms),
            Place::Active { deadline_ms, .. } => Some(deadline_ms),
            Place::Done => None,
            Place::Dead { died_at_ms } => Some(died_at_ms),
        }
    }

    /// The row as the `snapshot` script reads it back.
    pub(crate) fn to_row(&self) -> JobRow {
        JobRow {
            state: Some(self.state()),
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            payload: self.payload.to_vec(),
            worker: self.worker().map(str::to_owned),
            deadline_ms: self.deadline_ms(),
        }
    }
}

/// The whole queue: every job's row, and the pending and active indexes
/// ordered as Valkey orders a sorted set (score, then id by bytes).
///
/// Two models are equal, and hash equal, when their rows are: the indexes
/// follow from the rows (see [`Model::check_structure`]).
#[derive(Clone, Debug, Default)]
pub struct Model {
    jobs: BTreeMap<Arc<str>, Job>,
    pending: BTreeSet<(u64, Arc<str>)>,
    active: BTreeSet<(u64, Arc<str>)>,
}

impl PartialEq for Model {
    fn eq(&self, other: &Model) -> bool {
        self.jobs == other.jobs
    }
}

impl Eq for Model {}

impl Hash for Model {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.jobs.hash(state);
    }
}

impl Model {
    /// An empty queue.
    pub fn new() -> Model {
        Model::default()
    }

    /// `enqueue.lua`: admits job `id`, pending and ready at
    /// `now_ms + delay_ms`, with no attempts yet. A duplicate id answers
    /// [`Enqueued::Duplicate`] and changes nothing.
    ///
    /// Checks, in order: the id (EMQKIND, then its length), `max_attempts`
    /// in 1..=[`MAX_ATTEMPTS_MAX`], `delay_ms` and `now_ms` in 0..=[`MS_MAX`].
    pub fn enqueue(
        &mut self,
        id: &str,
        payload: &[u8],
        max_attempts: u64,
        delay_ms: u64,
        now_ms: u64,
    ) -> Result<Enqueued, ModelError> {
        args::id(id)?;
        args::int("max_attempts", max_attempts, 1, MAX_ATTEMPTS_MAX)?;
        args::int("delay_ms", delay_ms, 0, MS_MAX)?;
        args::int("now_ms", now_ms, 0, MS_MAX)?;
        if self.jobs.contains_key(id) {
            return Ok(Enqueued::Duplicate);
        }
        let id: Arc<str> = Arc::from(id);
        let ready_at_ms = now_ms + delay_ms;
        self.pending.insert((ready_at_ms, Arc::clone(&id)));
        self.jobs.insert(
            id,
            Job {
                attempts: 0,
                max_attempts,
                payload: Arc::from(payload),
                place: Place::Pending { ready_at_ms },
            },
        );
        Ok(Enqueued::Enqueued)
    }

    /// `lease.lua`: takes the pending job with the lowest ready-at that is
    /// ready (`ready_at_ms <= now_ms`), ties broken by id; increments its
    /// attempts, which become the token; makes it active for `worker` until
    /// `now_ms + lease_ms`. `None` when no pending job is ready.
    ///
    /// Checks, in order: `worker` of 1..=[`WORKER_BYTES_MAX`] bytes,
    /// `lease_ms` in 1..=[`MS_MAX`], `now_ms` in 0..=[`MS_MAX`].
    pub fn lease(
        &mut self,
        worker: &str,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Option<Lease>, ModelError> {
        args::worker(worker)?;
        args::int("lease_ms", lease_ms, 1, MS_MAX)?;
        args::int("now_ms", now_ms, 0, MS_MAX)?;
        match self.pending.first() {
            Some((ready_at_ms, _)) if *ready_at_ms <= now_ms => {}
            _ => return Ok(None),
        }
        let (_, id) = self.pending.pop_first().expect("checked just above");
        let job = self.jobs.get_mut(&*id).expect("a pending entry has a row");
        job.attempts += 1;
        let deadline_ms = now_ms + lease_ms;
        job.place = Place::Active {
            deadline_ms,
            worker: Arc::from(worker),
        };
        let lease = Lease {
            id: id.to_string(),
            token: job.attempts,
            deadline_ms,
            payload: job.payload.to_vec(),
        };
        self.active.insert((deadline_ms, id));
        Ok(Some(lease))
    }

    /// `complete.lua`: settles the lease carrying `token`. The script checks
    /// `attempts == token` first and the state second: with the current
    /// token an active job becomes done ([`Settled::Settled`]) and a done job
    /// answers [`Settled::AlreadySettled`]; everything else (another token,
    /// or the current token of a pending or dead job) is
    /// [`Settled::Fenced`] and changes nothing.
    ///
    /// Checks, in order: the id, `token` in 1..=[`MS_MAX`].
    pub fn complete(&mut self, id: &str, token: u64) -> Result<Settled, ModelError> {
        args::id(id)?;
        args::int("token", token, 1, MS_MAX)?;
        let Some((key, job)) = self.jobs.get_key_value(id) else {
            return Ok(Settled::Missing);
        };
        let deadline_ms = match job.place {
            Place::Active { deadline_ms, .. } if job.attempts == token => deadline_ms,
            Place::Done if job.attempts == token => return Ok(Settled::AlreadySettled),
            _ => {
                return Ok(Settled::Fenced {
                    current: job.attempts,
                    state: job.state(),
                })
            }
        };
        self.active.remove(&(deadline_ms, Arc::clone(key)));
        self.jobs.get_mut(id).expect("looked up above").place = Place::Done;
        Ok(Settled::Settled)
    }

    /// `fail.lua`: gives up the lease carrying `token`. Only the current
    /// token of an active job is accepted (otherwise [`Failed::Fenced`],
    /// nothing changed). On the last allowed attempt
    /// (`attempts >= max_attempts`) the job dies at `now_ms`
    /// ([`Failed::Dead`]); otherwise it is pending again, ready at
    /// `now_ms + retry_delay_ms` ([`Failed::Requeued`]).
    ///
    /// Checks, in order: the id, `token` in 1..=[`MS_MAX`],
    /// `retry_delay_ms` and `now_ms` in 0..=[`MS_MAX`].
    pub fn fail(
        &mut self,
        id: &str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: u64,
    ) -> Result<Failed, ModelError> {
        args::id(id)?;
        args::int("token", token, 1, MS_MAX)?;
        args::int("retry_delay_ms", retry_delay_ms, 0, MS_MAX)?;
        args::int("now_ms", now_ms, 0, MS_MAX)?;
        let Some((key, job)) = self.jobs.get_key_value(id) else {
            return Ok(Failed::Missing);
        };
        let deadline_ms = match job.place {
            Place::Active { deadline_ms, .. } if job.attempts == token => deadline_ms,
            _ => {
                return Ok(Failed::Fenced {
                    current: job.attempts,
                    state: job.state(),
                })
            }
        };
        let key = Arc::clone(key);
        self.active.remove(&(deadline_ms, Arc::clone(&key)));
        let job = self.jobs.get_mut(id).expect("looked up above");
        if job.attempts >= job.max_attempts {
            job.place = Place::Dead { died_at_ms: now_ms };
            return Ok(Failed::Dead);
        }
        let ready_at_ms = now_ms + retry_delay_ms;
        job.place = Place::Pending { ready_at_ms };
        self.pending.insert((ready_at_ms, key));
        Ok(Failed::Requeued { ready_at_ms })
    }

    /// `extend.lua`: a heartbeat. Only the current token of an active job is
    /// accepted (otherwise [`Extended::Fenced`], nothing changed); the
    /// deadline becomes `now_ms + lease_ms`, which may be earlier than the
    /// old one, and a lease past its deadline that the reaper has not taken
    /// may still be extended.
    ///
    /// Checks, in order: the id, `token` in 1..=[`MS_MAX`], `lease_ms` in
    /// 1..=[`MS_MAX`], `now_ms` in 0..=[`MS_MAX`].
    pub fn extend(
        &mut self,
        id: &str,
        token: u64,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Extended, ModelError> {
        args::id(id)?;
        args::int("token", token, 1, MS_MAX)?;
        args::int("lease_ms", lease_ms, 1, MS_MAX)?;
        args::int("now_ms", now_ms, 0, MS_MAX)?;
        let Some((key, job)) = self.jobs.get_key_value(id) else {
            return Ok(Extended::Missing);
        };
        let old_deadline_ms = match job.place {
            Place::Active { deadline_ms, .. } if job.attempts == token => deadline_ms,
            _ => {
                return Ok(Extended::Fenced {
                    current: job.attempts,
                    state: job.state(),
                })
            }
        };
        let deadline_ms = now_ms + lease_ms;
        if deadline_ms != old_deadline_ms {
            let key = Arc::clone(key);
            self.active.remove(&(old_deadline_ms, Arc::clone(&key)));
            self.active.insert((deadline_ms, key));
        }
        if let Some(Job {
            place: Place::Active { deadline_ms: d, .. },
            ..
        }) = self.jobs.get_mut(id)
        {
            *d = deadline_ms;
        }
        Ok(Extended::Extended { deadline_ms })
    }

    /// `reap.lua`: takes up to `limit` active jobs whose deadline has passed
    /// (`deadline_ms <= now_ms`), in (deadline, id) order, and sends each to
    /// the dead set at `now_ms` once `attempts >= max_attempts`, else back
    /// to pending, ready at `now_ms`. Attempts are unchanged; the lease's
    /// worker and deadline are dropped. Answers what it did, in that order.
    ///
    /// Checks, in order: `limit` in 1..=[`REAP_LIMIT_MAX`], `now_ms` in
    /// 0..=[`MS_MAX`].
    pub fn reap(&mut self, limit: u64, now_ms: u64) -> Result<Vec<Reaped>, ModelError> {
        args::int("limit", limit, 1, REAP_LIMIT_MAX)?;
        args::int("now_ms", now_ms, 0, MS_MAX)?;
        let mut reaped = Vec::new();
        // Taking the first expired entry one at a time visits the same ids
        // in the same order as the script's single ZRANGEBYSCORE: reaping one
        // job never touches another job's active entry.
        while (reaped.len() as u64) < limit {
            match self.active.first() {
                Some((deadline_ms, _)) if *deadline_ms <= now_ms => {}
                _ => break,
            }
            let (_, id) = self.active.pop_first().expect("checked just above");
            let job = self.jobs.get_mut(&*id).expect("an active entry has a row");
            let to = if job.attempts >= job.max_attempts {
                job.place = Place::Dead { died_at_ms: now_ms };
                JobState::Dead
            } else {
                job.place = Place::Pending {
                    ready_at_ms: now_ms,
                };
                self.pending.insert((now_ms, Arc::clone(&id)));
                JobState::Pending
            };
            reaped.push(Reaped {
                id: id.to_string(),
                to,
            });
        }
        Ok(reaped)
    }

    /// `enqueue_batch.lua`: [`Model::enqueue`] of each `(id, payload)` in
    /// order, with the same options, at one instant; an id present already,
    /// or earlier in the batch, answers [`Enqueued::Duplicate`].
    ///
    /// Checks, in order, before any change: the count in
    /// 1..=[`BATCH_MAX`], `max_attempts`, `delay_ms`, `now_ms`, then every
    /// id. One refusal refuses the whole batch and changes nothing.
    pub fn enqueue_batch<I: AsRef<str>, P: AsRef<[u8]>>(
        &mut self,
        jobs: &[(I, P)],
        max_attempts: u64,
        delay_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<Enqueued>, ModelError> {
        args::int("count", jobs.len() as u64, 1, BATCH_MAX)?;
        args::int("max_attempts", max_attempts, 1, MAX_ATTEMPTS_MAX)?;
        args::int("delay_ms", delay_ms, 0, MS_MAX)?;
        args::int("now_ms", now_ms, 0, MS_MAX)?;
        for (id, _) in jobs {
            args::id(id.as_ref())?;
        }
        jobs.iter()
            .map(|(id, payload)| {
                self.enqueue(
                    id.as_ref(),
                    payload.as_ref(),
                    max_attempts,
                    delay_ms,
                    now_ms,
                )
            })
            .collect()
    }

    /// `lease_batch.lua`: up to `count` successive [`Model::lease`] calls at
    /// `now_ms`, stopping at the first that finds no ready job.
    ///
    /// Checks, in order: `worker`, `lease_ms`, `count` in
    /// 1..=[`BATCH_MAX`], `now_ms`.
    pub fn lease_batch(
        &mut self,
        worker: &str,
        lease_ms: u64,
        count: u64,
        now_ms: u64,
    ) -> Result<Vec<Lease>, ModelError> {
        args::worker(worker)?;
        args::int("lease_ms", lease_ms, 1, MS_MAX)?;
        args::int("count", count, 1, BATCH_MAX)?;
        args::int("now_ms", now_ms, 0, MS_MAX)?;
        let mut leases = Vec::new();
        while (leases.len() as u64) < count {
            match self.lease(worker, lease_ms, now_ms)? {
                Some(lease) => leases.push(lease),
                None => break,
            }
        }
        Ok(leases)
    }

    /// `complete_batch.lua`: [`Model::complete`] of each `(id, token)` in
    /// order, each fenced on its own token with its own answer.
    ///
    /// Checks, in order, before any change: the count in
    /// 1..=[`BATCH_MAX`], then each pair's id and token.
    pub fn complete_batch<I: AsRef<str>>(
        &mut self,
        leases: &[(I, u64)],
    ) -> Result<Vec<Settled>, ModelError> {
        args::int("count", leases.len() as u64, 1, BATCH_MAX)?;
        for (id, token) in leases {
            args::id(id.as_ref())?;
            args::int("token", *token, 1, MS_MAX)?;
        }
        leases
            .iter()
            .map(|(id, token)| self.complete(id.as_ref(), *token))
            .collect()
    }

    /// `fail_batch.lua`: [`Model::fail`] of each `(id, token)` in order at
    /// `now_ms`, each fenced on its own token with its own answer.
    ///
    /// Checks, in order, before any change: the count in
    /// 1..=[`BATCH_MAX`], `retry_delay_ms`, `now_ms`, then each pair's id and
    /// token.
    pub fn fail_batch<I: AsRef<str>>(
        &mut self,
        leases: &[(I, u64)],
        retry_delay_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<Failed>, ModelError> {
        args::int("count", leases.len() as u64, 1, BATCH_MAX)?;
        args::int("retry_delay_ms", retry_delay_ms, 0, MS_MAX)?;
        args::int("now_ms", now_ms, 0, MS_MAX)?;
        for (id, token) in leases {
            args::id(id.as_ref())?;
            args::int("token", *token, 1, MS_MAX)?;
        }
        leases
            .iter()
            .map(|(id, token)| self.fail(id.as_ref(), *token, retry_delay_ms, now_ms))
            .collect()
    }

    /// The whole queue as the `snapshot` script reads it back from Valkey:
    /// every row, every index with its scores, and no foreign keys.
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for (id, job) in &self.jobs {
            let id = id.to_string();
            match job.place {
                Place::Pending { ready_at_ms } => {
                    snapshot.pending.insert(id.clone(), ready_at_ms);
                }
                Place::Active { deadline_ms, .. } => {
                    snapshot.active.insert(id.clone(), deadline_ms);
                }
                Place::Done => {
                    snapshot.done.insert(id.clone());
                }
                Place::Dead { died_at_ms } => {
                    snapshot.dead.insert(id.clone(), died_at_ms);
                }
            }
            snapshot.rows.insert(id, job.to_row());
        }
        snapshot
    }

    /// The job called `id`, if it was ever enqueued (jobs are never removed).
    pub fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id)
    }

    /// Every job, by id in byte order.
    pub fn jobs(&self) -> impl Iterator<Item = (&str, &Job)> + '_ {
        self.jobs.iter().map(|(id, job)| (&**id, job))
    }

    /// The model's own invariants; `Err` lists every problem found, joined
    /// by `"; "`. A problem here is a bug in the model, never in Valkey.
    ///
    /// Beyond the design's structure invariant (each job in exactly the
    /// index its state names, with the score its row implies, and no index
    /// entry without a row), this checks what the scripts imply for valid
    /// inputs: ids carry the brand and fit in 512 bytes; `max_attempts` is
    /// in range; `attempts <= max_attempts`; a pending job has an attempt
    /// left; an active, done or dead job has been leased; a dead job has
    /// used every attempt; an active job's worker is 1 to 256 bytes.
    pub fn check_structure(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        let (mut pending, mut active) = (0, 0);
        for (id, job) in &self.jobs {
            if args::id(id).is_err() {
                problems.push(format!("{id:?}: not a valid job id"));
            }
            if !(1..=MAX_ATTEMPTS_MAX).contains(&job.max_attempts) {
                problems.push(format!(
                    "{id}: max_attempts {} out of range",
                    job.max_attempts
                ));
            }
            if job.attempts > job.max_attempts {
                problems.push(format!(
                    "{id}: attempts {} above max_attempts {}",
                    job.attempts, job.max_attempts
                ));
            }
            let leased = job.attempts >= 1;
            match &job.place {
                Place::Pending { ready_at_ms } => {
                    pending += 1;
                    if !self.pending.contains(&(*ready_at_ms, Arc::clone(id))) {
                        problems.push(format!("{id}: pending at {ready_at_ms} but not indexed so"));
                    }
                    if job.attempts >= job.max_attempts {
                        problems.push(format!("{id}: pending with no attempt left"));
                    }
                }
                Place::Active {
                    deadline_ms,
                    worker,
                } => {
                    active += 1;
                    if !self.active.contains(&(*deadline_ms, Arc::clone(id))) {
                        problems.push(format!(
                            "{id}: active until {deadline_ms} but not indexed so"
                        ));
                    }
                    if args::worker(worker).is_err() {
                        problems.push(format!("{id}: worker {worker:?} not 1 to 256 bytes"));
                    }
                    if !leased {
                        problems.push(format!("{id}: active but never leased"));
                    }
                }
                Place::Done => {
                    if !leased {
                        problems.push(format!("{id}: done but never leased"));
                    }
                }
                Place::Dead { .. } => {
                    if job.attempts != job.max_attempts {
                        problems.push(format!(
                            "{id}: dead after {} of {} attempts",
                            job.attempts, job.max_attempts
                        ));
                    }
                }
            }
        }
        // Every row's entry is present and entries are distinct by id, so
        // equal counts mean no entry without a row (or with a stale score).
        if self.pending.len() != pending {
            problems.push(format!(
                "pending index has {} entries for {pending} pending jobs",
                self.pending.len()
            ));
        }
        if self.active.len() != active {
            problems.push(format!(
                "active index has {} entries for {active} active jobs",
                self.active.len()
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}
