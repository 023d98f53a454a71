//! loom: every interleaving of the worker's lease table
//! (`src/chaos/lease_table.rs`) under its handler, heartbeat, shutdown or
//! crash, and the queue's reaper.
//!
//! Built only with the `loom` feature (`required-features` in Cargo.toml);
//! `ci/loom` runs it with a preemption bound.
//!
//! The queue is the pure [`Model`] behind a loom lock, one critical section
//! per script, on logical time: the handler's settle and the heartbeat's
//! extend reach it fenced by the lease's token, as they reach Valkey. It
//! logs every settle and extend that arrives, with the table's stamp on the
//! permit or ticket that allowed it, so the checks can order the table's
//! decisions. The properties, named as the panics name them:
//!
//! - `at-most-one-settle`: one lease, at most one settle sent.
//! - `no-extend-after-settle`: no extend ticket issued after the settle
//!   permit (an extend sent before a settle may still arrive after it; the
//!   queue fences it).
//! - `no-extend-after-close`: no extend ticket issued after a shutdown or a
//!   crash.
//! - `no-resurrection`: an entry removed (settled, released, lost, dropped)
//!   is never in the table again.
//! - `empty-after-shutdown`: once every task is done the table is empty.
//! - `handler-view`: the handler believes it settled the job exactly when
//!   the queue has it done.
//! - `fenced-settlement` (the queue's side): once a settle was accepted or
//!   the reaper took the lease, nothing more of that lease is accepted.
#![cfg(feature = "loom")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use ackgap::chaos::lease_table::{LeaseKey, LeaseTable, Mutant, Refused, Stamp};
use ackgap::model::Model;
use ackgap::queue::{Extended, JobState, Settled};
use loom::sync::{Arc, Mutex};
use loom::thread;

const JOB: &str = "JOB-1";
const LEASE_MS: u64 = 10;

/// The preemption bound when `LOOM_MAX_PREEMPTIONS` is not set, and the one
/// the pinned interleaving counts were measured at.
const PREEMPTIONS_PINNED: usize = 3;

/// Runs `body` under loom, counting the interleavings explored, and prints
/// the count when it returns or panics (a caught mutant panics). At the
/// pinned bound, a test that passes must have explored exactly `pinned`
/// interleavings: a changed count means the scenario changed, and the
/// number in ARCHITECTURE.md with it.
fn explore(name: &'static str, pinned: Option<usize>, body: impl Fn() + Send + Sync + 'static) {
    struct Report {
        name: &'static str,
        bound: Option<usize>,
        count: std::sync::Arc<AtomicUsize>,
        start: Instant,
    }
    impl Drop for Report {
        fn drop(&mut self) {
            let verdict = if std::thread::panicking() {
                "caught"
            } else {
                "passed"
            };
            println!(
                "loom: {} explored {} interleavings in {:.2} s, preemption bound {:?} ({verdict})",
                self.name,
                self.count.load(Ordering::Relaxed),
                self.start.elapsed().as_secs_f64(),
                self.bound,
            );
        }
    }
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        // Four threads without a bound would run for hours.
        builder.preemption_bound = Some(PREEMPTIONS_PINNED);
    }
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let report = Report {
        name,
        bound: builder.preemption_bound,
        count: std::sync::Arc::clone(&count),
        start: Instant::now(),
    };
    let counter = std::sync::Arc::clone(&count);
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        body();
    });
    if let (Some(pinned), Some(PREEMPTIONS_PINNED)) = (pinned, report.bound) {
        assert_eq!(
            count.load(Ordering::Relaxed),
            pinned,
            "{name}: the number of interleavings changed"
        );
    }
}

/// What reached the queue, in the order it arrived.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "settlers are named for the panic messages, through Debug"
)]
enum Arrival {
    Settle {
        by: &'static str,
        stamp: Stamp,
        accepted: bool,
    },
    Extend {
        stamp: Stamp,
        accepted: bool,
    },
    Reap {
        taken: bool,
    },
}

/// The queue: the model, its logical clock, and what arrived.
struct Queue {
    model: Model,
    now_ms: u64,
    arrivals: Vec<Arrival>,
}

impl Queue {
    /// One job, leased to this worker with token 1 at time 0.
    fn leased() -> Queue {
        let mut model = Model::new();
        model.enqueue(JOB, b"p", 3, 0, 0).unwrap();
        let lease = model.lease("w1", LEASE_MS, 0).unwrap().unwrap();
        assert_eq!(lease.token, 1);
        Queue {
            model,
            now_ms: 0,
            arrivals: Vec::new(),
        }
    }

    fn complete(&mut self, key: &LeaseKey, stamp: Stamp) -> Settled {
        let answer = self.model.complete(key.id(), key.token()).unwrap();
        self.arrivals.push(Arrival::Settle {
            by: "handler",
            stamp,
            accepted: answer == Settled::Settled,
        });
        answer
    }

    fn release(&mut self, key: &LeaseKey, stamp: Stamp) {
        let answer = self.model.fail(key.id(), key.token(), 0, self.now_ms);
        self.arrivals.push(Arrival::Settle {
            by: "shutdown",
            stamp,
            accepted: !matches!(answer, Ok(ackgap::queue::Failed::Fenced { .. })),
        });
    }

    fn extend(&mut self, key: &LeaseKey, stamp: Stamp) -> Extended {
        let answer = self
            .model
            .extend(key.id(), key.token(), LEASE_MS, self.now_ms)
            .unwrap();
        self.arrivals.push(Arrival::Extend {
            stamp,
            accepted: matches!(answer, Extended::Extended { .. }),
        });
        answer
    }

    /// Time passes one lease length and the reaper runs: a lease not
    /// extended since time 0 has expired.
    fn reap(&mut self) {
        self.now_ms += LEASE_MS;
        let taken = !self.model.reap(10, self.now_ms).unwrap().is_empty();
        self.arrivals.push(Arrival::Reap { taken });
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Close {
    Shutdown,
    Crash,
}

#[derive(Clone, Copy, Debug)]
struct Scenario {
    mutant: Option<Mutant>,
    close: Close,
    reaper: bool,
    beats: usize,
}

/// One interleaving: the handler settles, the heartbeat extends `beats`
/// times, the closer shuts down (releasing what is held) or crashes, the
/// reaper maybe takes the lease back; then every property is checked.
fn run(s: Scenario) {
    let queue = Arc::new(Mutex::new(Queue::leased()));
    let table = Arc::new(match s.mutant {
        Some(m) => LeaseTable::mutant(m),
        None => LeaseTable::new(),
    });
    let key = table.insert(JOB, 1, LEASE_MS).unwrap();

    // The handler: did its work, settles. Answers what it believes
    // happened, and whether it removed the entry.
    let handler = {
        let (queue, table, key) = (Arc::clone(&queue), Arc::clone(&table), key.clone());
        thread::spawn(move || match table.begin_settle(&key) {
            Ok(permit) => {
                let answer = queue.lock().unwrap().complete(&key, permit.stamp());
                let removed = table.finish_settle(permit);
                (Some(answer), removed)
            }
            Err(_) => (None, false),
        })
    };
    let heartbeat = {
        let (queue, table, key) = (Arc::clone(&queue), Arc::clone(&table), key.clone());
        thread::spawn(move || {
            let mut lost = false;
            for _ in 0..s.beats {
                let Ok(ticket) = table.begin_extend(&key) else {
                    break;
                };
                let answer = queue.lock().unwrap().extend(&key, ticket.stamp());
                lost |= matches!(
                    table.finish_extend(ticket, &answer),
                    Err(Refused::Lost { .. })
                );
            }
            lost
        })
    };
    // The closer: answers its stamp and whether it removed the entry.
    let closer = {
        let (queue, table) = (Arc::clone(&queue), Arc::clone(&table));
        thread::spawn(move || match s.close {
            Close::Shutdown => {
                let (stamp, permits) = table.shutdown();
                let mut removed = false;
                for permit in permits {
                    queue.lock().unwrap().release(permit.key(), permit.stamp());
                    removed |= table.finish_settle(permit);
                }
                (stamp, removed)
            }
            Close::Crash => {
                let (stamp, dropped) = table.crash();
                (stamp, dropped > 0)
            }
        })
    };
    let reaper = s.reaper.then(|| {
        let queue = Arc::clone(&queue);
        thread::spawn(move || queue.lock().unwrap().reap())
    });

    let (handler_view, handler_removed) = handler.join().unwrap();
    let heartbeat_lost = heartbeat.join().unwrap();
    let (close_stamp, closer_removed) = closer.join().unwrap();
    if let Some(reaper) = reaper {
        reaper.join().unwrap();
    }

    let queue = queue.lock().unwrap();
    let arrivals = &queue.arrivals;
    let settles: Vec<Stamp> = arrivals
        .iter()
        .filter_map(|a| match a {
            Arrival::Settle { stamp, .. } => Some(*stamp),
            _ => None,
        })
        .collect();
    let extends = arrivals.iter().filter_map(|a| match a {
        Arrival::Extend { stamp, .. } => Some(*stamp),
        _ => None,
    });

    assert!(
        settles.len() <= 1,
        "at-most-one-settle: lease {key} was settled {} times: {arrivals:?}",
        settles.len()
    );
    for extend in extends {
        for settle in &settles {
            assert!(
                extend < *settle,
                "no-extend-after-settle: lease {key} got an extend ticket (stamp {extend}) \
                 after its settle permit (stamp {settle}): {arrivals:?}"
            );
        }
        assert!(
            extend < close_stamp,
            "no-extend-after-close: lease {key} got an extend ticket (stamp {extend}) after \
             the {:?} (stamp {close_stamp}): {arrivals:?}",
            s.close
        );
    }
    // The queue's side: once a settle was accepted or the reaper took the
    // lease, nothing more of this lease is accepted.
    let mut over = None;
    for arrival in arrivals {
        let accepted = match arrival {
            Arrival::Settle { accepted, .. } | Arrival::Extend { accepted, .. } => *accepted,
            Arrival::Reap { .. } => false,
        };
        assert!(
            !(accepted && over.is_some()),
            "fenced-settlement: {arrival:?} accepted after {over:?}: {arrivals:?}"
        );
        if matches!(
            arrival,
            Arrival::Settle { accepted: true, .. } | Arrival::Reap { taken: true }
        ) {
            over = Some(arrival);
        }
    }
    let removed = handler_removed || closer_removed || heartbeat_lost;
    if removed {
        assert_eq!(
            table.state(&key),
            None,
            "no-resurrection: lease {key} is in the table again after its removal: {arrivals:?}"
        );
    }
    assert!(
        table.is_empty(),
        "empty-after-shutdown: {} entries left (removed: {removed}): {arrivals:?}",
        table.len()
    );
    let done = queue.model.job(JOB).unwrap().state() == JobState::Done;
    assert_eq!(
        handler_view == Some(Settled::Settled),
        done,
        "handler-view: the handler saw {handler_view:?}, the queue has the job done: {done}: \
         {arrivals:?}"
    );
    queue.model.check_structure().unwrap();
}

#[test]
fn handler_heartbeat_and_shutdown_settle_a_lease_once_and_leave_the_table_empty() {
    explore("lease_table/shutdown", Some(7_040), || {
        run(Scenario {
            mutant: None,
            close: Close::Shutdown,
            reaper: false,
            beats: 2,
        })
    });
}

#[test]
fn with_the_reaper_the_handlers_view_still_matches_the_queue() {
    explore("lease_table/shutdown+reaper", Some(76_574), || {
        run(Scenario {
            mutant: None,
            close: Close::Shutdown,
            reaper: true,
            beats: 1,
        })
    });
}

#[test]
fn after_a_crash_no_extend_is_issued_and_the_reaper_takes_the_lease() {
    explore("lease_table/crash+reaper", Some(79_589), || {
        run(Scenario {
            mutant: None,
            close: Close::Crash,
            reaper: true,
            beats: 2,
        })
    });
}

#[test]
#[should_panic(expected = "at-most-one-settle")]
fn a_settle_permit_checked_and_taken_in_two_critical_sections_is_caught() {
    explore("lease_table/mutant SettleCheckThenAct", None, || {
        run(Scenario {
            mutant: Some(Mutant::SettleCheckThenAct),
            close: Close::Shutdown,
            reaper: false,
            beats: 1,
        })
    });
}

#[test]
#[should_panic(expected = "no-extend-after-settle")]
fn a_heartbeat_that_ignores_the_entry_state_is_caught() {
    explore("lease_table/mutant ExtendIgnoresState", None, || {
        run(Scenario {
            mutant: Some(Mutant::ExtendIgnoresState),
            close: Close::Shutdown,
            reaper: false,
            beats: 1,
        })
    });
}

#[test]
#[should_panic(expected = "no-resurrection")]
fn an_extend_that_writes_back_its_stale_copy_is_caught() {
    explore("lease_table/mutant ExtendWritesBack", None, || {
        run(Scenario {
            mutant: Some(Mutant::ExtendWritesBack),
            close: Close::Crash,
            reaper: false,
            beats: 1,
        })
    });
}
