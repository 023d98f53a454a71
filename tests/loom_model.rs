//! loom: every interleaving of two workers and a reaper on the queue, with
//! the pure [`Model`] as the queue.
//!
//! Built only with the `loom` feature (`required-features` in Cargo.toml);
//! `ci/loom` runs it.
//!
//! The model sits behind one loom lock and each script is one critical
//! section, as each script is atomic on the server. A worker leases, applies
//! the `marker` consumer's effect (marker and effect in one critical
//! section, like `SET marker NX` and the effect in one script), then acks —
//! or crashes in the ack gap. The reaper thread lets one lease length pass,
//! then reaps (two critical sections: a worker may lease in between). After
//! the actors finish, the run heals (time past every deadline, reap, drain)
//! and DESIGN.md's invariants are checked, named as the panics name them: `fenced-settlement`, `settle-once`, `lease-respected`,
//! `effect-once`, `no-loss`, `structure`, and `bounded-retries` (tokens count
//! up by one, never past `max_attempts`).
//!
//! One job with three attempts keeps the state small; the reaper between a
//! lease and its ack is what gives the job to the second worker.
#![cfg(feature = "loom")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use ackgap::model::Model;
use ackgap::queue::{JobState, Settled};
use loom::sync::{Arc, Mutex};
use loom::thread;

const JOB: &str = "JOB-1";
const LEASE_MS: u64 = 10;
const MAX_ATTEMPTS: u64 = 3;

/// Runs `body` under loom with no preemption bound, whatever
/// `LOOM_MAX_PREEMPTIONS` says: the state is small enough to explore every
/// interleaving. Counts them and prints the count when it returns or panics
/// (a caught mutant panics). A test that passes must have explored exactly
/// `pinned` interleavings: a changed count means the scenario changed, and
/// the number in ARCHITECTURE.md with it.
fn explore(name: &'static str, pinned: Option<usize>, body: impl Fn() + Send + Sync + 'static) {
    struct Report {
        name: &'static str,
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
                "loom: {} explored {} interleavings in {:.2} s, no preemption bound ({verdict})",
                self.name,
                self.count.load(Ordering::Relaxed),
                self.start.elapsed().as_secs_f64()
            );
        }
    }
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = None;
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let _report = Report {
        name,
        count: std::sync::Arc::clone(&count),
        start: Instant::now(),
    };
    let counter = std::sync::Arc::clone(&count);
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        body();
    });
    if let Some(pinned) = pinned {
        assert_eq!(
            count.load(Ordering::Relaxed),
            pinned,
            "{name}: the number of interleavings changed"
        );
    }
}

/// Something the queue or the consumer did, in the order it happened.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "workers are named for the panic messages, through Debug"
)]
enum Event {
    Leased {
        worker: &'static str,
        token: u64,
    },
    /// A complete the queue accepted: the token the worker's lease carried,
    /// and the job's current token when it arrived.
    Settled {
        worker: &'static str,
        token: u64,
        current: u64,
    },
    /// The reaper took a lease whose deadline was `deadline_ms` at `now_ms`.
    Reaped {
        deadline_ms: u64,
        now_ms: u64,
    },
    Effect {
        worker: &'static str,
    },
}

/// The queue, its logical clock, the consumer's side (markers and effects,
/// as they would land in Valkey) and the history.
#[derive(Default)]
struct World {
    model: Model,
    now_ms: u64,
    marked: bool,
    effects: u32,
    history: Vec<Event>,
}

/// How the actors may be broken; all `false` is the correct system.
#[derive(Clone, Copy, Debug, Default)]
struct Bugs {
    /// The worker's ack carries the job's current token instead of its own:
    /// a settle without the token check.
    ack_unfenced: bool,
    /// The reaper takes leases up to one lease length before their deadline.
    reaper_ignores_deadline: bool,
    /// The consumer checks the marker in one critical section and sets it
    /// with the effect in a second (like `marker-before` without `NX`).
    marker_split: bool,
}

impl World {
    fn lease(&mut self, worker: &'static str) -> Option<u64> {
        let lease = self.model.lease(worker, LEASE_MS, self.now_ms).unwrap()?;
        self.history.push(Event::Leased {
            worker,
            token: lease.token,
        });
        Some(lease.token)
    }

    /// The `marker` consumer: the marker and the effect together.
    fn effect(&mut self, worker: &'static str) {
        if !self.marked {
            self.marked = true;
            self.effects += 1;
            self.history.push(Event::Effect { worker });
        }
    }

    fn ack(&mut self, worker: &'static str, token: u64, unfenced: bool) {
        let current = self.model.job(JOB).unwrap().attempts();
        let sent = if unfenced { current } else { token };
        if self.model.complete(JOB, sent).unwrap() == Settled::Settled {
            self.history.push(Event::Settled {
                worker,
                token,
                current,
            });
        }
    }

    /// The reaper, at the current time.
    fn reap(&mut self, ignores_deadline: bool) {
        let deadline_ms = self.model.job(JOB).unwrap().deadline_ms();
        let horizon_ms = if ignores_deadline {
            self.now_ms + LEASE_MS
        } else {
            self.now_ms
        };
        if !self.model.reap(10, horizon_ms).unwrap().is_empty() {
            self.history.push(Event::Reaped {
                deadline_ms: deadline_ms.expect("a reaped job was active"),
                now_ms: self.now_ms,
            });
        }
    }
}

/// A worker: lease, effect, then ack unless it crashes in the ack gap.
fn worker(
    world: &Arc<Mutex<World>>,
    name: &'static str,
    crashes: bool,
    bugs: Bugs,
) -> thread::JoinHandle<()> {
    let world = Arc::clone(world);
    thread::spawn(move || {
        let Some(token) = world.lock().unwrap().lease(name) else {
            return;
        };
        if bugs.marker_split {
            let unmarked = !world.lock().unwrap().marked;
            if unmarked {
                let mut w = world.lock().unwrap();
                w.marked = true;
                w.effects += 1;
                w.history.push(Event::Effect { worker: name });
            }
        } else {
            world.lock().unwrap().effect(name);
        }
        if crashes {
            return;
        }
        world.lock().unwrap().ack(name, token, bugs.ack_unfenced);
    })
}

/// One interleaving of worker `w1` (acks), worker `w2` (crashes in the ack
/// gap) and the reaper, then heal and check.
fn run(bugs: Bugs) {
    let mut model = Model::new();
    model.enqueue(JOB, b"p", MAX_ATTEMPTS, 0, 0).unwrap();
    let world = Arc::new(Mutex::new(World {
        model,
        ..World::default()
    }));
    let w1 = worker(&world, "w1", false, bugs);
    let w2 = worker(&world, "w2", true, bugs);
    let reaper = {
        let world = Arc::clone(&world);
        thread::spawn(move || {
            // One lease length passes (a lease granted at 0 expires), then
            // the reaper runs; a lease granted in between is live.
            world.lock().unwrap().now_ms += LEASE_MS;
            world.lock().unwrap().reap(bugs.reaper_ignores_deadline);
        })
    };
    w1.join().unwrap();
    w2.join().unwrap();
    reaper.join().unwrap();

    let mut w = world.lock().unwrap();
    // Heal: time passes every deadline, the reaper runs, a healthy worker
    // drains the queue.
    w.now_ms += 100 * LEASE_MS;
    let now_ms = w.now_ms;
    w.model.reap(10, now_ms).unwrap();
    while let Some(token) = w.lease("healer") {
        w.effect("healer");
        w.ack("healer", token, false);
    }
    check(&w);
}

fn check(w: &World) {
    let history = &w.history;
    let mut settled = 0;
    let mut done_seen = false;
    let mut last_token = 0;
    for event in history {
        match *event {
            Event::Settled { token, current, .. } => {
                assert_eq!(
                    token, current,
                    "fenced-settlement: a settle carrying token {token} was accepted while \
                     token {current} was current: {history:?}"
                );
                settled += 1;
                done_seen = true;
            }
            Event::Leased { token, .. } => {
                assert!(
                    !done_seen,
                    "settle-once: {JOB} was leased again after it was done: {history:?}"
                );
                assert!(
                    token == last_token + 1 && token <= MAX_ATTEMPTS,
                    "bounded-retries: lease with token {token} after token {last_token}: \
                     {history:?}"
                );
                last_token = token;
            }
            Event::Reaped {
                deadline_ms,
                now_ms,
            } => assert!(
                deadline_ms <= now_ms,
                "lease-respected: the reaper took a lease with deadline {deadline_ms} at \
                 {now_ms}: {history:?}"
            ),
            Event::Effect { .. } => {}
        }
    }
    assert!(
        settled <= 1,
        "settle-once: {JOB} became done {settled} times: {history:?}"
    );
    let state = w.model.job(JOB).unwrap().state();
    assert!(
        w.effects <= 1 && (state != JobState::Done || w.effects == 1),
        "effect-once: {JOB} is {state} with {} effects: {history:?}",
        w.effects
    );
    assert!(
        matches!(state, JobState::Done | JobState::Dead),
        "no-loss: after healing {JOB} is {state}: {history:?}"
    );
    if let Err(problems) = w.model.check_structure() {
        panic!("structure: {problems}: {history:?}");
    }
}

#[test]
fn two_workers_and_a_reaper_keep_every_invariant() {
    explore("model/two workers and a reaper", Some(132_702), || {
        run(Bugs::default())
    });
}

#[test]
#[should_panic(expected = "fenced-settlement")]
fn an_ack_without_the_token_check_is_caught() {
    explore("model/mutant ack_unfenced", None, || {
        run(Bugs {
            ack_unfenced: true,
            ..Bugs::default()
        })
    });
}

#[test]
#[should_panic(expected = "lease-respected")]
fn a_reaper_that_ignores_deadlines_is_caught() {
    explore("model/mutant reaper_ignores_deadline", None, || {
        run(Bugs {
            reaper_ignores_deadline: true,
            ..Bugs::default()
        })
    });
}

#[test]
#[should_panic(expected = "effect-once")]
fn a_marker_checked_and_set_in_two_critical_sections_is_caught() {
    explore("model/mutant marker_split", None, || {
        run(Bugs {
            marker_split: true,
            ..Bugs::default()
        })
    });
}
