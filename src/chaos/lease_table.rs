//! The table of leases in flight that one worker process shares between its
//! tasks: the handler that settles a job, the heartbeat that extends it,
//! shutdown, and — as an event, not a task — a crash.
//!
//! # Why a table with states, not a map of deadlines
//!
//! The queue fences every settle and extend by the lease's token, so a
//! confused worker cannot corrupt the queue. It can still confuse itself:
//! a heartbeat that extends a lease its handler is settling, a handler and a
//! shutdown that both settle one lease (one of them is fenced, and its task
//! reports a loss that did not happen), or a heartbeat that writes back a
//! stale copy of an entry the handler has just removed, so that the entry
//! comes back and shutdown waits for it forever. Random testing rarely hits
//! those windows; `tests/loom_lease_table.rs` checks every interleaving.
//!
//! So each entry is a small state machine, and the table allows only its
//! transitions:
//!
//! ```text
//!   insert ──► Held ──begin_settle──► Settling ──finish_settle──► removed
//!              │  ▲                                              (settled or released)
//!              │  └── begin_extend / finish_extend(Extended) ──┘ (deadline moves)
//!              └──── finish_extend(Fenced) ─────────────────────► removed (lost)
//!   shutdown: every Held entry becomes Settling; its permit goes to the
//!             shutdown task, which releases it.  crash: every entry removed.
//! ```
//!
//! - An entry is keyed by (job id, token). The table remembers the highest
//!   token it has admitted for each job and refuses any insert that is not
//!   newer, so an entry once removed can never be inserted again.
//! - [`LeaseTable::begin_settle`] hands out a [`SettlePermit`] only for a
//!   `Held` entry, and marks it `Settling` in the same critical section: at
//!   most one settle per lease is the table's guarantee, not the callers'.
//! - [`LeaseTable::begin_extend`] hands out an [`ExtendTicket`] only for a
//!   `Held` entry of an open table, and [`LeaseTable::finish_extend`] only
//!   moves the deadline of an entry that is still `Held`: it never writes an
//!   entry back.
//! - Every transition takes a [`Stamp`] from the table's own counter, so a
//!   history (or a loom test) can order the table's decisions: a ticket
//!   issued after a permit, or after a crash, would carry a later stamp.
//!
//! # Use from async tasks
//!
//! The API is plain and synchronous; every method holds the lock for a few
//! map operations and never across a call to the server. Call the server
//! between `begin_*` and `finish_*`. A network round trip therefore sits
//! between a ticket and its extend reaching the server: an extend sent just
//! before a settle may arrive just after it, and the queue's fencing refuses
//! it (the loom tests check exactly that).
//!
//! # Under loom
//!
//! Built with the `loom` feature the lock is loom's, so loom can
//! schedule every interleaving of the table's critical sections (see
//! `ci/loom`). A loom lock works only inside `loom::model`.
//!
//! # Design notes
//!
//! Under the `loom` feature the lock comes from a private `sync` shim.
//!
//! `ci/loom` builds with `--features loom` and ackgap alone at opt-level 2
//! (`--config 'profile.dev.package.ackgap.opt-level=2'`), in the same target
//! directory as the rest of CI, so only ackgap and the two test files
//! compile. It runs `tests/loom_lease_table.rs` (handler, heartbeat,
//! shutdown or crash, and the reaper, against the `Model` behind a loom
//! lock; `LOOM_MAX_PREEMPTIONS=3`) and `tests/loom_model.rs` (two workers
//! with the `marker` consumer and a reaper on the `Model`, healed and
//! checked against DESIGN.md's invariants; small enough to explore without a
//! bound), each a `[[test]]` with `required-features = ["loom"]`, and logs
//! to `target/loom/`.
//!
//! Each loom test file has deliberately broken variants that must be caught
//! (`Mutant` in the table; an unfenced ack, a reaper that ignores deadlines
//! and a split marker in the model test). Passing tests pin the number of
//! interleavings explored, which ARCHITECTURE.md lists under "Features and
//! CI"; a changed count means the scenario changed.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::queue::outcome::Extended;

use self::sync::{Mutex, MutexGuard};

/// The lock the table uses: std's normally, loom's under the `loom` feature.
mod sync {
    #[cfg(feature = "loom")]
    pub(crate) use loom::sync::{Mutex, MutexGuard};
    #[cfg(not(feature = "loom"))]
    pub(crate) use std::sync::{Mutex, MutexGuard};
}

/// One lease: the job id and the fencing token the queue granted with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseKey {
    id: Arc<str>,
    token: u64,
}

impl LeaseKey {
    /// The job id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The fencing token: what every settle and extend of this lease carries.
    pub fn token(&self) -> u64 {
        self.token
    }
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.id, self.token)
    }
}

/// The table's logical clock: each transition takes the next value, so
/// stamps order the table's decisions across tasks.
pub type Stamp = u64;

/// Where an entry is in its life; a removed entry has no state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryState {
    /// The worker holds the lease: the heartbeat may extend it and the
    /// handler (or shutdown) may begin to settle it.
    Held,
    /// A settle (complete or fail) is on its way; the holder of the
    /// [`SettlePermit`] finishes it. No extend is allowed any more.
    Settling,
}

/// Whether the table takes new leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Normal operation.
    Open,
    /// [`LeaseTable::shutdown`] was called: no inserts, no extends, no new
    /// settles; settles already begun may finish.
    ShutDown,
    /// [`LeaseTable::crash`] was called: every entry is gone and every later
    /// call is refused.
    Crashed,
}

/// Why the table refused a call. Nothing changed, except where a variant
/// says otherwise.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The table was shut down or crashed.
    #[error("the lease table is {phase:?}")]
    Closed {
        /// The table's phase.
        phase: Phase,
    },
    /// An insert of a token not newer than one the table admitted for the
    /// same job before: the entry would come back from the dead.
    #[error("lease {key} is stale: token {high_water} was admitted for that job already")]
    Stale {
        /// The refused lease.
        key: LeaseKey,
        /// The highest token admitted for the job.
        high_water: u64,
    },
    /// No entry for this lease: it was settled, released, lost or dropped.
    #[error("lease {key} is not in the table")]
    Missing {
        /// The lease asked for.
        key: LeaseKey,
    },
    /// The lease is being settled: no extend, no second settle.
    #[error("lease {key} is being settled")]
    Settling {
        /// The lease asked for.
        key: LeaseKey,
    },
    /// The queue fenced the extend: the lease is lost, and the entry was
    /// removed.
    #[error("lease {key} was fenced by the queue and is lost")]
    Lost {
        /// The lost lease.
        key: LeaseKey,
    },
}

/// The right to send one settle (complete or fail) of one lease, granted
/// once per lease. Keep it across retries of that settle (a retried ack of
/// a settled job answers `AlreadySettled`), then give it back to
/// [`LeaseTable::finish_settle`]; a permit dropped unfinished leaves its
/// entry `Settling` until a crash.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a permit not given back to finish_settle leaves its entry Settling"]
pub struct SettlePermit {
    key: LeaseKey,
    stamp: Stamp,
}

impl SettlePermit {
    /// The lease to settle.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// When the table granted the permit.
    pub fn stamp(&self) -> Stamp {
        self.stamp
    }
}

/// The right to send one extend of one lease, issued only while the entry
/// is `Held`. Give the queue's answer to [`LeaseTable::finish_extend`], or
/// drop the ticket if the answer is unknown.
#[derive(Debug, PartialEq, Eq)]
pub struct ExtendTicket {
    key: LeaseKey,
    stamp: Stamp,
    /// The entry as it was when the ticket was issued; only the
    /// [`Mutant::ExtendWritesBack`] variant uses it.
    seen: Entry,
}

impl ExtendTicket {
    /// The lease to extend.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// When the table issued the ticket.
    pub fn stamp(&self) -> Stamp {
        self.stamp
    }
}

/// Deliberately broken variants of the table that `tests/loom_lease_table.rs`
/// must catch, so the loom tests can be seen to bite (like `lua/mutants/`
/// for the scripts). Never use one outside a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// `begin_settle` checks that the entry is `Held` in one critical
    /// section and marks it `Settling` in a second: two settlers can both
    /// pass the check and both get a permit.
    SettleCheckThenAct,
    /// `begin_extend` issues a ticket for any entry still in the table,
    /// whatever its state: a heartbeat extends a lease being settled.
    ExtendIgnoresState,
    /// `finish_extend` writes back the copy of the entry it read when it
    /// issued the ticket, with the new deadline (a read-modify-write across
    /// the server call): an entry removed meanwhile comes back.
    ExtendWritesBack,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    state: EntryState,
    deadline_ms: u64,
}

#[derive(Debug)]
struct Inner {
    entries: BTreeMap<LeaseKey, Entry>,
    /// The highest token admitted per job: one `u64` per job the table has
    /// ever seen, which is what makes removal final.
    high_water: BTreeMap<Arc<str>, u64>,
    phase: Phase,
    clock: Stamp,
}

impl Inner {
    fn tick(&mut self) -> Stamp {
        self.clock += 1;
        self.clock
    }

    fn open(&self) -> Result<(), Refused> {
        match self.phase {
            Phase::Open => Ok(()),
            phase => Err(Refused::Closed { phase }),
        }
    }

    fn held(&self, key: &LeaseKey) -> Result<&Entry, Refused> {
        match self.entries.get(key) {
            None => Err(Refused::Missing { key: key.clone() }),
            Some(entry) if entry.state == EntryState::Settling => {
                Err(Refused::Settling { key: key.clone() })
            }
            Some(entry) => Ok(entry),
        }
    }
}

/// The leases one worker process holds; share it behind an `Arc`.
#[derive(Debug)]
pub struct LeaseTable {
    inner: Mutex<Inner>,
    mutant: Option<Mutant>,
}

impl Default for LeaseTable {
    fn default() -> LeaseTable {
        LeaseTable::new()
    }
}

impl LeaseTable {
    /// An empty, open table.
    pub fn new() -> LeaseTable {
        LeaseTable {
            inner: Mutex::new(Inner {
                entries: BTreeMap::new(),
                high_water: BTreeMap::new(),
                phase: Phase::Open,
                clock: 0,
            }),
            mutant: None,
        }
    }

    /// An empty table with a deliberate bug (see [`Mutant`]).
    pub fn mutant(mutant: Mutant) -> LeaseTable {
        LeaseTable {
            mutant: Some(mutant),
            ..LeaseTable::new()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A task that panicked inside a critical section left no half-made
        // transition (each one is a few map operations), so the table stays
        // usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a lease the queue just granted, `Held` until `deadline_ms`.
    /// Refused once the table is closed, and for a token not newer than one
    /// admitted for the same job before. To know that, the table keeps the
    /// highest token of every job it has seen: one id and one `u64` per job
    /// for the life of the table (a crash starts a new table).
    pub fn insert(&self, id: &str, token: u64, deadline_ms: u64) -> Result<LeaseKey, Refused> {
        let mut inner = self.lock();
        inner.open()?;
        let key = match inner.high_water.get_key_value(id) {
            Some((_, &high_water)) if token <= high_water => {
                return Err(Refused::Stale {
                    key: LeaseKey {
                        id: Arc::from(id),
                        token,
                    },
                    high_water,
                })
            }
            Some((id, _)) => LeaseKey {
                id: Arc::clone(id),
                token,
            },
            None => LeaseKey {
                id: Arc::from(id),
                token,
            },
        };
        inner.high_water.insert(Arc::clone(&key.id), token);
        inner.tick();
        let entry = Entry {
            state: EntryState::Held,
            deadline_ms,
        };
        inner.entries.insert(key.clone(), entry);
        Ok(key)
    }

    /// Issues the ticket for one extend of a `Held` lease of an open table.
    pub fn begin_extend(&self, key: &LeaseKey) -> Result<ExtendTicket, Refused> {
        let mut inner = self.lock();
        let seen = if self.mutant == Some(Mutant::ExtendIgnoresState) {
            match inner.entries.get(key) {
                Some(entry) => entry.clone(),
                None => return Err(Refused::Missing { key: key.clone() }),
            }
        } else {
            inner.open()?;
            inner.held(key)?.clone()
        };
        Ok(ExtendTicket {
            key: key.clone(),
            stamp: inner.tick(),
            seen,
        })
    }

    /// Records the queue's answer to the extend `ticket` allowed.
    ///
    /// `Extended` moves the deadline of an entry that is still `Held` and
    /// answers it; an entry that began settling, or was removed, is left as
    /// it is (`Settling`, `Missing`, `Closed`). `Fenced` or `Missing` from
    /// the queue means the lease is lost: a `Held` entry is removed and the
    /// answer is [`Refused::Lost`].
    pub fn finish_extend(&self, ticket: ExtendTicket, answer: &Extended) -> Result<u64, Refused> {
        let mut inner = self.lock();
        let key = ticket.key;
        if let (Some(Mutant::ExtendWritesBack), Extended::Extended { deadline_ms }) =
            (self.mutant, answer)
        {
            let entry = Entry {
                deadline_ms: *deadline_ms,
                ..ticket.seen
            };
            inner.entries.insert(key, entry);
            inner.tick();
            return Ok(*deadline_ms);
        }
        inner.open()?;
        inner.held(&key)?;
        inner.tick();
        match answer {
            Extended::Extended { deadline_ms } => {
                let entry = inner.entries.get_mut(&key).expect("held just above");
                entry.deadline_ms = *deadline_ms;
                Ok(*deadline_ms)
            }
            _ => {
                inner.entries.remove(&key);
                Err(Refused::Lost { key })
            }
        }
    }

    /// Grants the one permit to settle a `Held` lease, and marks it
    /// `Settling` in the same critical section. Refused once the table is
    /// closed: shutdown has taken the permits of the leases still held.
    pub fn begin_settle(&self, key: &LeaseKey) -> Result<SettlePermit, Refused> {
        if self.mutant == Some(Mutant::SettleCheckThenAct) {
            {
                let inner = self.lock();
                inner.open()?;
                inner.held(key)?;
            }
            let mut inner = self.lock();
            return match inner.entries.get_mut(key) {
                Some(entry) => {
                    entry.state = EntryState::Settling;
                    Ok(SettlePermit {
                        key: key.clone(),
                        stamp: inner.tick(),
                    })
                }
                None => Err(Refused::Missing { key: key.clone() }),
            };
        }
        let mut inner = self.lock();
        inner.open()?;
        inner.held(key)?;
        inner.entries.get_mut(key).expect("held just above").state = EntryState::Settling;
        Ok(SettlePermit {
            key: key.clone(),
            stamp: inner.tick(),
        })
    }

    /// Ends the settle `permit` allowed, whatever the queue answered
    /// (settled, requeued, dead, fenced, or unknown and given up): the entry
    /// is removed for good. Answers whether it was still there (after a
    /// crash it is not).
    pub fn finish_settle(&self, permit: SettlePermit) -> bool {
        let mut inner = self.lock();
        inner.tick();
        inner.entries.remove(&permit.key).is_some()
    }

    /// Begins a graceful shutdown: closes the table (no inserts, extends or
    /// new settles) and hands over the permits of every lease still `Held`,
    /// which the caller releases (`fail` with no delay) and finishes. Leases
    /// already `Settling` stay with their settlers; once all permits are
    /// finished the table is empty. Answers the shutdown's stamp and the
    /// permits, in key order.
    pub fn shutdown(&self) -> (Stamp, Vec<SettlePermit>) {
        let mut inner = self.lock();
        if inner.phase == Phase::Open {
            inner.phase = Phase::ShutDown;
        }
        let stamp = inner.tick();
        let mut permits = Vec::new();
        for (key, entry) in inner.entries.iter_mut() {
            if entry.state == EntryState::Held {
                entry.state = EntryState::Settling;
                permits.push(key.clone());
            }
        }
        let permits = permits
            .into_iter()
            .map(|key| SettlePermit {
                key,
                stamp: inner.tick(),
            })
            .collect();
        (stamp, permits)
    }

    /// The process died: every entry is dropped (the queue's reaper takes
    /// the leases back after their deadlines) and every later call is
    /// refused. Answers the crash's stamp and how many entries were dropped.
    pub fn crash(&self) -> (Stamp, usize) {
        let mut inner = self.lock();
        inner.phase = Phase::Crashed;
        let dropped = inner.entries.len();
        inner.entries.clear();
        (inner.tick(), dropped)
    }

    /// The state of one lease; `None` once it is removed.
    pub fn state(&self, key: &LeaseKey) -> Option<EntryState> {
        self.lock().entries.get(key).map(|entry| entry.state)
    }

    /// The deadline the table last recorded for one lease.
    pub fn deadline_ms(&self, key: &LeaseKey) -> Option<u64> {
        self.lock().entries.get(key).map(|entry| entry.deadline_ms)
    }

    /// The leases a heartbeat should extend: every `Held` entry, with its
    /// deadline, in key order.
    pub fn held(&self) -> Vec<(LeaseKey, u64)> {
        let inner = self.lock();
        inner
            .entries
            .iter()
            .filter(|(_, entry)| entry.state == EntryState::Held)
            .map(|(key, entry)| (key.clone(), entry.deadline_ms))
            .collect()
    }

    /// The number of entries, `Held` or `Settling`.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.lock().entries.is_empty()
    }

    /// Whether the table is open, shut down or crashed.
    pub fn phase(&self) -> Phase {
        self.lock().phase
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::queue::outcome::JobState;

    const FENCED: Extended = Extended::Fenced {
        current: 2,
        state: JobState::Active,
    };

    fn extended(deadline_ms: u64) -> Extended {
        Extended::Extended { deadline_ms }
    }

    #[test]
    fn a_lease_is_held_extended_settled_and_removed() {
        let table = LeaseTable::new();
        let key = table.insert("JOB-1", 1, 100).unwrap();
        assert_eq!((key.id(), key.token()), ("JOB-1", 1));
        assert_eq!(table.state(&key), Some(EntryState::Held));
        let ticket = table.begin_extend(&key).unwrap();
        assert_eq!(table.finish_extend(ticket, &extended(200)), Ok(200));
        assert_eq!(table.deadline_ms(&key), Some(200));
        let permit = table.begin_settle(&key).unwrap();
        assert_eq!(table.state(&key), Some(EntryState::Settling));
        assert!(table.finish_settle(permit));
        assert_eq!(table.state(&key), None);
        assert!(table.is_empty());
    }

    #[test]
    fn a_lease_gets_one_settle_permit() {
        let table = LeaseTable::new();
        let key = table.insert("JOB-1", 1, 100).unwrap();
        let permit = table.begin_settle(&key).unwrap();
        assert_eq!(
            table.begin_settle(&key),
            Err(Refused::Settling { key: key.clone() })
        );
        assert!(table.finish_settle(permit));
        assert_eq!(
            table.begin_settle(&key),
            Err(Refused::Missing { key: key.clone() })
        );
    }

    #[test]
    fn no_extend_is_issued_or_applied_once_a_settle_began() {
        let table = LeaseTable::new();
        let key = table.insert("JOB-1", 1, 100).unwrap();
        let early = table.begin_extend(&key).unwrap();
        let permit = table.begin_settle(&key).unwrap();
        assert!(early.stamp() < permit.stamp());
        assert_eq!(
            table.begin_extend(&key),
            Err(Refused::Settling { key: key.clone() })
        );
        // The extend sent before the settle comes back after it: the table
        // keeps its deadline and its state.
        assert_eq!(
            table.finish_extend(early, &extended(500)),
            Err(Refused::Settling { key: key.clone() })
        );
        assert_eq!(table.deadline_ms(&key), Some(100));
        assert!(table.finish_settle(permit));
    }

    #[test]
    fn an_extend_answered_after_removal_does_not_bring_the_entry_back() {
        let table = LeaseTable::new();
        let key = table.insert("JOB-1", 1, 100).unwrap();
        let ticket = table.begin_extend(&key).unwrap();
        let permit = table.begin_settle(&key).unwrap();
        assert!(table.finish_settle(permit));
        assert_eq!(
            table.finish_extend(ticket, &extended(500)),
            Err(Refused::Missing { key: key.clone() })
        );
        assert!(table.is_empty());
    }

    #[test]
    fn a_removed_lease_cannot_be_inserted_again() {
        let table = LeaseTable::new();
        let key = table.insert("JOB-1", 2, 100).unwrap();
        let permit = table.begin_settle(&key).unwrap();
        assert!(table.finish_settle(permit));
        for token in [1, 2] {
            assert!(matches!(
                table.insert("JOB-1", token, 100),
                Err(Refused::Stale { high_water: 2, .. })
            ));
        }
        assert!(table.is_empty());
        // A newer lease of the same job is a new entry.
        let newer = table.insert("JOB-1", 3, 100).unwrap();
        assert_eq!(table.state(&newer), Some(EntryState::Held));
    }

    #[test]
    fn a_fenced_extend_loses_a_held_lease() {
        let table = LeaseTable::new();
        let key = table.insert("JOB-1", 1, 100).unwrap();
        let ticket = table.begin_extend(&key).unwrap();
        assert_eq!(
            table.finish_extend(ticket, &FENCED),
            Err(Refused::Lost { key: key.clone() })
        );
        assert_eq!(
            table.begin_settle(&key),
            Err(Refused::Missing { key: key.clone() })
        );
        assert!(table.is_empty());
    }

    #[test]
    fn shutdown_takes_the_permits_of_held_leases_and_leaves_settling_ones() {
        let table = LeaseTable::new();
        let settling = table.insert("JOB-1", 1, 100).unwrap();
        let held = table.insert("JOB-2", 1, 100).unwrap();
        let permit = table.begin_settle(&settling).unwrap();
        let (stamp, permits) = table.shutdown();
        assert_eq!(table.phase(), Phase::ShutDown);
        assert_eq!(permits.len(), 1);
        assert_eq!(permits[0].key(), &held);
        assert!(permits[0].stamp() > stamp);
        let closed = Err(Refused::Closed {
            phase: Phase::ShutDown,
        });
        assert_eq!(table.begin_extend(&held).map(|_| ()), closed);
        assert_eq!(table.begin_settle(&held).map(|_| ()), closed);
        assert_eq!(table.insert("JOB-3", 1, 100).map(|_| ()), closed);
        assert!(table.held().is_empty());
        assert_eq!(table.len(), 2);
        for permit in permits {
            assert!(table.finish_settle(permit));
        }
        assert!(table.finish_settle(permit));
        assert!(table.is_empty());
    }

    #[test]
    fn a_crash_drops_every_entry_and_refuses_everything_after() {
        let table = LeaseTable::new();
        let key = table.insert("JOB-1", 1, 100).unwrap();
        let other = table.insert("JOB-2", 4, 100).unwrap();
        let ticket = table.begin_extend(&key).unwrap();
        let permit = table.begin_settle(&other).unwrap();
        let (stamp, dropped) = table.crash();
        assert!(stamp > permit.stamp());
        assert_eq!(dropped, 2);
        assert!(table.is_empty());
        let crashed = Refused::Closed {
            phase: Phase::Crashed,
        };
        assert_eq!(
            table.finish_extend(ticket, &extended(500)),
            Err(crashed.clone())
        );
        assert!(!table.finish_settle(permit));
        assert_eq!(table.begin_extend(&key).map(|_| ()), Err(crashed.clone()));
        assert_eq!(table.insert("JOB-3", 1, 1).map(|_| ()), Err(crashed));
        assert!(table.is_empty());
        // A shutdown after a crash leaves it crashed.
        assert!(table.shutdown().1.is_empty());
        assert_eq!(table.phase(), Phase::Crashed);
    }

    #[test]
    fn held_lists_what_the_heartbeat_should_extend() {
        let table = LeaseTable::new();
        let a = table.insert("JOB-a", 1, 100).unwrap();
        let b = table.insert("JOB-b", 1, 300).unwrap();
        let permit = table.begin_settle(&a).unwrap();
        assert_eq!(table.held(), vec![(b, 300)]);
        assert!(table.finish_settle(permit));
    }

    #[test]
    fn mutants_misbehave_even_in_one_thread_where_they_can() {
        // ExtendIgnoresState: a ticket for a lease being settled.
        let table = LeaseTable::mutant(Mutant::ExtendIgnoresState);
        let key = table.insert("JOB-1", 1, 100).unwrap();
        let permit = table.begin_settle(&key).unwrap();
        assert!(table.begin_extend(&key).is_ok());
        assert!(table.finish_settle(permit));

        // ExtendWritesBack: the entry comes back after its removal.
        let table = LeaseTable::mutant(Mutant::ExtendWritesBack);
        let key = table.insert("JOB-1", 1, 100).unwrap();
        let ticket = table.begin_extend(&key).unwrap();
        let permit = table.begin_settle(&key).unwrap();
        assert!(table.finish_settle(permit));
        assert_eq!(table.finish_extend(ticket, &extended(500)), Ok(500));
        assert_eq!(table.state(&key), Some(EntryState::Held));

        // SettleCheckThenAct needs a second thread between its two critical
        // sections; alone it behaves (tests/loom_lease_table.rs catches it).
        let table = LeaseTable::mutant(Mutant::SettleCheckThenAct);
        let key = table.insert("JOB-1", 1, 100).unwrap();
        let permit = table.begin_settle(&key).unwrap();
        assert!(table.begin_settle(&key).is_err());
        assert!(table.finish_settle(permit));
    }
}
