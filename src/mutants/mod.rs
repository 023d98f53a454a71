//! Mutation testing of the checker: a checker that never fails proves
//! nothing. Each [`Mutant`] is a small, realistic mistake — a script body
//! from `lua/mutants/` in place of a reference one, a client that splits or
//! mistimes the lease ([`adapters`]), a consumer weaker than `marker`, or a
//! mode of a queue ackgap did not write (`tests/adapters/fenced.py`, run as
//! an `exec:` adapter and judged by the history checkers alone: [`exec`]) —
//! and [`kill`] runs the explorers against it until one of the invariants
//! fails:
//!
//! 1. **exhaust**: the bounded exhaustive search ([`crate::explore::exhaust`](mod@crate::explore::exhaust))
//!    on three small configurations: 1 job and 2 workers to depth 8 (a late
//!    stale holder needs a lease, a tick to the deadline, a reap, a second
//!    lease, a tick to its deadline and the stale act: 7 steps), then 2
//!    jobs and 2 workers to depth 6 (two jobs for the split lease's race),
//!    both at max_attempts 2, then 1 job and 2 workers to depth 6 at
//!    max_attempts 3 (a second failure that requeues the job: at 2 it is
//!    dead); each configuration is searched only if those before it found
//!    nothing.
//!    Every transition is checked, those into a state seen before too
//!    ([`ExhaustConfig::check_merged`]): a mutant may agree with the model
//!    on the first path into a state and not on the others. The search
//!    compares the queue with the model, so it sees queue mistakes, not
//!    effects: the consumer mutants skip it.
//! 2. **seeds**: seeded random walks ([`crate::explore::explore_on`]), 50
//!    steps each, judged by every history checker after healing.
//! 3. **chaos** ([`matrix_on`], with [`Budget::chaos_ms`]): every mutant
//!    that survived the first two phases, and every consumer mutant
//!    whatever they found, runs through a short chaos run of its own (the
//!    chaos runner on the wall clock and the server clock, faults from
//!    seed 1, no server kill: the server keeps nothing on disk). A consumer
//!    is what a wall clock breaks first (a guard that expires, a crash
//!    between two calls under real concurrency); the row's
//!    [`Kill::chaos`] says what the run found. Under real concurrency the
//!    seed fixes the faults, not the interleaving: a chaos kill is
//!    reproduced by `ackgap mutants --only NAME`, not by a replay line.
//!
//! The failing schedule is then shrunk ([`crate::explore::shrink`](mod@crate::explore::shrink)) to a
//! 1-minimal counterexample; the invariant reported is the first one the
//! checkers report on that minimal run (history checkers first,
//! `refinement` after them). A counterexample's steps are the ones before
//! healing: the healing (time passes, the reaper runs, `w0` drains) is
//! replayed after them and may be where the failure shows. A
//! mutant that survives the whole budget is a hole in the checker.
//!
//! `ackgap mutants` prints the kill matrix and exits 1 if any mutant
//! survives; `ackgap run` prints the score of the exhaust phase alone.
//!
//! # Design notes
//!
//! A script mutant is a patch, `lua/mutants/NAME.patch`: a unified diff of
//! its base script in `lua/` (its `---` line) that puts the mistake in and
//! the base's header comment out for one that says what it breaks. build.rs
//! applies it to the base at build time, into `OUT_DIR/mutants/NAME.lua`,
//! which [`MUTANTS`] includes: a fix to `lua/reap.lua` reaches the reap
//! mutants, and an edit of the base that the patch no longer fits (its
//! header comment too) stops the build, naming the patch to refresh. One
//! mutant stays a whole file, `lua/mutants/lease_split.lua`: it is not
//! `lease.lua` with a mistake but the claim half of a lease in two calls,
//! with an argument of its own (the id the client picked), whose mistake is
//! in the client ([`adapters::SplitLease`]); as a patch of `lease.lua` it
//! would replace nearly every line, and fail on every edit of it without
//! carrying one.
//!
//! A script mutant is swapped in with `Scripts::with_overrides`. `matrix`
//! kills every mutant it is given, `select` turns `--mutant` names into
//! mutants (or an `UnknownMutant`), and `score` is the fast subset
//! `ackgap run` prints (the reference queue's mutants only).

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::adapter::{Adapter, Reference};
use crate::chaos::runner::{run_with, ChaosConfig, ChaosSubject, Interrupt, OpenAdapter};
use crate::check::{Report, Verdict};
use crate::consumer::{Consumer, Kind as ConsumerKind};
use crate::explore::parallel::in_order;
use crate::explore::{
    exhaust, explore_quiet, shrink, ExhaustConfig, ExploreError, Line, LineConfig, Schedule,
    Shrunk, Subject, SwarmConfig,
};
use crate::queue::client::QueueConfig;
use crate::queue::scripts::Scripts;
use crate::queue::{Queue, QueueError};
use crate::server::Server;

pub mod adapters;
pub mod consumers;
pub mod exec;

/// How a mutant breaks the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// One script body replaced: `(script name, mutant body)`.
    Script(&'static str, &'static str),
    /// The lease in two calls ([`adapters::SplitLease`]).
    SplitLease,
    /// The lease on the client's skewed clock ([`adapters::ClientClock`]).
    ClientClock,
    /// The reference queue with a consumer weaker than `marker`.
    Consumer(ConsumerKind),
    /// The reference queue with the `marker` consumer whose marker expires
    /// ([`consumers::MarkerTtl`]): only real time shows it.
    MarkerTtl,
    /// A mode of `tests/adapters/fenced.py`, a queue ackgap did not write,
    /// run as an `exec:` adapter with this flag ([`exec`]): only the
    /// history checkers judge it.
    Exec(&'static str),
}

/// One deliberately broken variant the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mutant {
    /// Its name in the matrix.
    pub name: &'static str,
    /// What it breaks, in a few words.
    pub breaks: &'static str,
    /// The invariants one would expect to catch it, the likeliest first.
    pub expected: &'static [&'static str],
    /// How it is built.
    pub kind: Mutation,
}

macro_rules! body {
    ($file:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/mutants/", $file))
    };
}

/// Every mutant of the reference queue and its consumers, in the matrix's
/// order; [`all`] adds the `exec:` ones ([`exec::EXEC`]).
pub const MUTANTS: [Mutant; 18] = [
    Mutant {
        name: "complete-unfenced",
        breaks: "complete without the token check",
        expected: &["fenced-settlement", "refinement"],
        kind: Mutation::Script("complete", body!("complete_unfenced.lua")),
    },
    Mutant {
        name: "extend-unfenced",
        breaks: "extend without the token check",
        expected: &["fenced-settlement", "refinement"],
        kind: Mutation::Script("extend", body!("extend_unfenced.lua")),
    },
    Mutant {
        name: "fail-unfenced",
        breaks: "fail without the token check",
        expected: &["fenced-settlement", "refinement"],
        kind: Mutation::Script("fail", body!("fail_unfenced.lua")),
    },
    Mutant {
        name: "lease-no-attempts",
        breaks: "lease does not increment attempts (token reuse)",
        expected: &["structure", "fenced-settlement", "refinement"],
        kind: Mutation::Script("lease", body!("lease_no_attempts.lua")),
    },
    Mutant {
        name: "reap-ignores-deadline",
        breaks: "reap takes live leases",
        expected: &["lease-respected"],
        kind: Mutation::Script("reap", body!("reap_ignores_deadline.lua")),
    },
    Mutant {
        name: "reap-deletes-dead",
        breaks: "reap deletes a job at max_attempts instead of moving it to dead",
        expected: &["no-loss", "structure", "refinement"],
        kind: Mutation::Script("reap", body!("reap_deletes_dead.lua")),
    },
    Mutant {
        name: "enqueue-overwrites",
        breaks: "enqueue without the duplicate check",
        expected: &["admission"],
        kind: Mutation::Script("enqueue", body!("enqueue_overwrites.lua")),
    },
    Mutant {
        name: "lease-split",
        breaks: "lease as two calls (pick, then claim): not atomic",
        expected: &[
            "settle-once",
            "fenced-settlement",
            "structure",
            "bounded-retries",
            "refinement",
        ],
        kind: Mutation::SplitLease,
    },
    Mutant {
        name: "lease-client-clock",
        breaks: "lease deadline from the client's skewed clock",
        expected: &["lease-respected", "refinement"],
        kind: Mutation::ClientClock,
    },
    Mutant {
        name: "complete-done-first",
        breaks: "complete writes done, then checks the token and errors (no rollback)",
        expected: &["structure", "fenced-settlement", "refinement"],
        kind: Mutation::Script("complete", body!("complete_done_first.lua")),
    },
    Mutant {
        name: "extend-takes-expired",
        breaks: "extend lets a stale token take over a lease past its deadline",
        expected: &["fenced-settlement", "refinement"],
        kind: Mutation::Script("extend", body!("extend_takes_expired.lua")),
    },
    Mutant {
        name: "reap-one-ms-early",
        breaks: "reap takes a lease one ms before its deadline",
        expected: &["lease-respected", "refinement"],
        kind: Mutation::Script("reap", body!("reap_one_ms_early.lua")),
    },
    Mutant {
        name: "fail-retry-now",
        breaks: "a second failure requeues the job ready at now, answering now + delay",
        expected: &["delay-respected", "refinement"],
        kind: Mutation::Script("fail", body!("fail_retry_now.lua")),
    },
    Mutant {
        name: "lease-reclaims-live",
        breaks: "lease takes an active job when nothing is pending, its deadline unchecked",
        expected: &["lease-exclusive", "refinement"],
        kind: Mutation::Script("lease", body!("lease_reclaims_live.lua")),
    },
    Mutant {
        name: "consumer-naive",
        breaks: "INCR per delivery: no marker at all",
        expected: &["effect-once"],
        kind: Mutation::Consumer(ConsumerKind::Naive),
    },
    Mutant {
        name: "consumer-marker-before",
        breaks: "marker, then effect, in two calls",
        expected: &["effect-once"],
        kind: Mutation::Consumer(ConsumerKind::MarkerBefore),
    },
    Mutant {
        name: "consumer-marker-after",
        breaks: "effect, then marker, in two calls",
        expected: &["effect-once"],
        kind: Mutation::Consumer(ConsumerKind::MarkerAfter),
    },
    Mutant {
        name: "consumer-marker-ttl",
        breaks: "marker with an 80 ms TTL: a late redelivery applies the effect again",
        expected: &["effect-once"],
        kind: Mutation::MarkerTtl,
    },
];

/// Every mutant, in the matrix's order: [`MUTANTS`], then the `exec:`
/// ones ([`exec::EXEC`]).
pub fn all() -> Vec<Mutant> {
    MUTANTS.iter().chain(exec::EXEC).copied().collect()
}

impl Mutant {
    /// The mutant by name.
    pub fn by_name(name: &str) -> Option<Mutant> {
        all().into_iter().find(|m| m.name == name)
    }

    /// The queue under test and the consumer, on queue `queue_name` of
    /// `client`.
    pub async fn subject(
        &self,
        client: &redis::Client,
        queue_name: &str,
    ) -> Result<Subject, QueueError> {
        if let Mutation::Exec(flag) = self.kind {
            return exec_subject(client, queue_name, flag).await;
        }
        let scripts = match self.kind {
            Mutation::Script(script, body) => Scripts::with_overrides(&[(script, body)]),
            Mutation::ClientClock => {
                Scripts::with_overrides(&[("lease", adapters::LEASE_CLIENT_CLOCK)])
            }
            Mutation::SplitLease
            | Mutation::Consumer(_)
            | Mutation::MarkerTtl
            | Mutation::Exec(_) => Scripts::reference(),
        };
        let config = QueueConfig {
            scripts,
            ..Default::default()
        };
        let queue = Queue::connect_with(client, queue_name, config).await?;
        let adapter: Arc<dyn Adapter> = match self.kind {
            Mutation::SplitLease => Arc::new(adapters::SplitLease::new(&queue)),
            Mutation::ClientClock => Arc::new(adapters::ClientClock::new(&queue)),
            Mutation::Script(..)
            | Mutation::Consumer(_)
            | Mutation::MarkerTtl
            | Mutation::Exec(_) => Arc::new(Reference::new(queue.on_server_clock())),
        };
        let consumer: Arc<dyn Consumer> = match self.kind {
            Mutation::Consumer(kind) => Arc::from(kind.consumer()),
            Mutation::MarkerTtl => Arc::new(consumers::MarkerTtl::new()),
            _ => Arc::from(ConsumerKind::Marker.consumer()),
        };
        Ok(Subject::new(adapter, consumer))
    }

    /// True when the exhaustive search can see this mistake: it compares
    /// the queue with the model (an `exec:` queue it searches on the queue
    /// itself, judging every path), and knows nothing of effects.
    pub(crate) fn exhaustible(&self) -> bool {
        !matches!(self.kind, Mutation::Consumer(_) | Mutation::MarkerTtl)
    }
}

/// The subject of an `exec:` mutant: fenced.py with `flag` on queue
/// `queue_name` of `client`'s server, the `marker` consumer.
async fn exec_subject(
    client: &redis::Client,
    queue_name: &str,
    flag: &str,
) -> Result<Subject, QueueError> {
    let broke = |message: String| QueueError::Adapter {
        op: "hello",
        message,
    };
    let queue = Queue::connect_with(client, queue_name, QueueConfig::default()).await?;
    let spec = exec::spec(flag).map_err(broke)?;
    let url = exec::url_of(client).map_err(broke)?;
    let adapter = crate::adapter::open(&spec, &queue, &url)
        .await
        .map_err(|e| broke(e.to_string()))?;
    Ok(Subject::new(
        adapter,
        Arc::from(ConsumerKind::Marker.consumer()),
    ))
}

/// How hard to try before a mutant counts as survived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// The exhaustive phase's configurations, searched in order (empty:
    /// skip the phase).
    pub exhaust: Vec<ExhaustConfig>,
    /// Seeds `0 .. seeds` of random walks (0: skip the phase).
    pub seeds: u64,
    /// Random steps per walk.
    pub steps: usize,
    /// Replays the shrinker may run per counterexample.
    pub shrink_runs: usize,
    /// The chaos phase's length per mutant (ms; 0: skip the phase). Only
    /// [`matrix_on`], which has a server to fault, runs it.
    pub chaos_ms: u64,
}

impl Budget {
    /// What `ackgap mutants` runs with `depth` [`DEPTH`] and `seeds`
    /// [`SEEDS`], its defaults: exhaust 1 job, 2 workers, depth
    /// `depth + 2`, and 2 jobs, 2 workers, depth `depth`, both at
    /// max_attempts 2, then 1 job, 2 workers, depth `depth` at
    /// max_attempts 3 (a job's second failure requeues it only there:
    /// at 2 it is dead), then up to `seeds` walks of 50 steps, shrinking
    /// with at most 300 replays.
    pub fn full(depth: usize, seeds: u64) -> Budget {
        let exhaust = [(1, depth + 2, 2), (2, depth, 2), (1, depth, 3)]
            .into_iter()
            .filter(|_| depth > 0)
            .map(|(jobs, depth, max_attempts)| {
                let mut c = ExhaustConfig::new(jobs, 2, depth);
                c.max_attempts = max_attempts;
                c.states_max = 100_000;
                c.check_merged = true;
                c
            })
            .collect();
        Budget {
            exhaust,
            seeds,
            steps: 50,
            shrink_runs: 300,
            chaos_ms: CHAOS_MS,
        }
    }

    /// The fast subset `ackgap run` reports (about 7 s here): the
    /// exhaustive phase alone, one level shallower (1 job to depth 7, 2
    /// jobs to depth 5, 1 job at max_attempts 3 to depth 5), so the
    /// consumer mutants are not scored.
    pub fn fast() -> Budget {
        Budget {
            chaos_ms: 0,
            ..Budget::full(5, 0)
        }
    }
}

/// The chaos phase's length per mutant by default (ms): a few seconds.
pub const CHAOS_MS: u64 = 2_000;

/// The exhaustive phase's depth by default (`ackgap mutants --depth`):
/// see [`Budget::full`].
pub const DEPTH: usize = 6;

/// The random walks per mutant by default (`ackgap mutants
/// --budget-seeds`), of 50 steps each.
pub const SEEDS: u64 = 200;

/// What a mutant's chaos run found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChaosKill {
    /// An invariant broke (or a consumer that promises nothing duplicated
    /// or lost an effect).
    pub killed: bool,
    /// The first invariant that broke.
    pub invariant: Option<&'static str>,
    /// What it saw.
    pub why: Option<String>,
    /// The chaos seed.
    pub seed: u64,
    /// Wall time (ms).
    pub elapsed_ms: f64,
}

/// One row of the kill matrix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Kill {
    /// The mutant.
    pub mutant: &'static str,
    /// What it breaks.
    pub breaks: &'static str,
    /// Caught by some invariant within the budget.
    pub killed: bool,
    /// The invariant the minimal counterexample breaks (the first one
    /// reported).
    pub invariant: Option<&'static str>,
    /// The invariants one would expect.
    pub expected: &'static [&'static str],
    /// Killed by one of [`Kill::expected`].
    pub as_expected: bool,
    /// `exhaust` or `seeds`: the phase that found it.
    pub phase: Option<&'static str>,
    /// States the exhaustive search reached, or walks run, before it
    /// found the failure (or in all, for a survivor).
    pub states: usize,
    /// Walks run (the failing one included).
    pub seeds: u64,
    /// The minimal counterexample's steps.
    pub steps: Option<usize>,
    /// The minimal counterexample, in the schedule's text form.
    pub counterexample: Option<String>,
    /// Its replay line (it names the reference queue: rerun it on the
    /// mutant with `ackgap mutants --only NAME`).
    pub line: Option<String>,
    /// Steps before shrinking.
    pub steps_before: Option<usize>,
    /// Wall time for this mutant (ms).
    pub elapsed_ms: f64,
    /// What the chaos phase found, when it ran (see [`matrix_on`]).
    pub chaos: Option<ChaosKill>,
}

/// The whole matrix.
#[derive(Clone, Debug, Serialize)]
pub struct Matrix {
    /// One row per mutant.
    pub kills: Vec<Kill>,
    /// The budget each mutant had.
    pub budget: Budget,
    /// Wall time (ms).
    pub elapsed_ms: f64,
}

/// The headline number: how many mutants the checker killed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MutationScore {
    /// Mutants killed.
    pub killed: usize,
    /// Mutants run.
    pub total: usize,
    /// The survivors' names.
    pub survived: Vec<&'static str>,
    /// Wall time (ms).
    pub elapsed_ms: f64,
}

impl Matrix {
    /// The survivors.
    pub fn survivors(&self) -> Vec<&'static str> {
        self.kills
            .iter()
            .filter(|k| !k.killed)
            .map(|k| k.mutant)
            .collect()
    }

    /// The score.
    pub fn score(&self) -> MutationScore {
        MutationScore {
            killed: self.kills.iter().filter(|k| k.killed).count(),
            total: self.kills.len(),
            survived: self.survivors(),
            elapsed_ms: self.elapsed_ms,
        }
    }
}

/// Why a mutant could not be judged (not a survival: the run said
/// nothing).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MutantsError {
    /// The server could not be reached.
    #[error("mutant {mutant}: {source}")]
    Queue {
        /// The mutant.
        mutant: &'static str,
        /// Why.
        source: QueueError,
    },
    /// An explorer could not run.
    #[error("mutant {mutant}: {source}")]
    Explore {
        /// The mutant.
        mutant: &'static str,
        /// Why.
        source: ExploreError,
    },
    /// The chaos phase could not run.
    #[error("mutant {mutant}: the chaos phase: {why}")]
    Chaos {
        /// The mutant.
        mutant: &'static str,
        /// Why.
        why: String,
    },
}

/// Runs the explorers against `mutant` on `client` within `budget`.
pub async fn kill(
    client: &redis::Client,
    mutant: &Mutant,
    budget: &Budget,
) -> Result<Kill, MutantsError> {
    let started = Instant::now();
    let explore_err = |source| MutantsError::Explore {
        mutant: mutant.name,
        source,
    };
    let subject = mutant
        .subject(client, &format!("ackgap-mutant-{}", mutant.name))
        .await
        .map_err(|source| MutantsError::Queue {
            mutant: mutant.name,
            source,
        })?;
    let mut row = Kill {
        mutant: mutant.name,
        breaks: mutant.breaks,
        killed: false,
        invariant: None,
        expected: mutant.expected,
        as_expected: false,
        phase: None,
        states: 0,
        seeds: 0,
        steps: None,
        counterexample: None,
        line: None,
        steps_before: None,
        elapsed_ms: 0.0,
        chaos: None,
    };
    let mut found = exhaust_phase(&subject, mutant, budget, &mut row)
        .await
        .map_err(explore_err)?;
    if found.is_none() {
        found = seeds_phase(&subject, budget, &mut row)
            .await
            .map_err(explore_err)?;
    }
    if let Some((phase, config, schedule)) = found {
        let shrunk = shrink(&subject, &config, &schedule, budget.shrink_runs)
            .await
            .map_err(explore_err)?;
        if let Some(shrunk) = shrunk {
            record_kill(&mut row, mutant, phase, &shrunk);
        }
    }
    row.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    Ok(row)
}

/// A failure a phase found: the phase's name, and the configuration and
/// schedule that show it, to shrink.
type Found = (&'static str, SwarmConfig, Schedule);

/// The exhaustive phase: every configuration of `budget` in turn (none when
/// the mutant is not exhaustible) until one fails; adds the states it saw
/// to `row`.
async fn exhaust_phase(
    subject: &Subject,
    mutant: &Mutant,
    budget: &Budget,
    row: &mut Kill,
) -> Result<Option<Found>, ExploreError> {
    let mut found: Option<Found> = None;
    let configs = budget.exhaust.iter().filter(|_| mutant.exhaustible());
    for &config in configs {
        if found.is_some() {
            break;
        }
        let report = exhaust(subject, config).await?;
        row.states += report.states;
        // The failure reads `SCHEDULE: why`; exhaust's steps carry no
        // `: ` of their own (a fail's delay is `f0:50`, no space).
        if let Some(path) = report
            .failure
            .as_deref()
            .and_then(|f| f.split_once(": "))
            .and_then(|(path, _)| Schedule::parse(path).ok())
        {
            let swarm = SwarmConfig::from_line(&LineConfig {
                jobs: config.jobs,
                workers: config.workers,
                lease_ms: config.lease_ms,
                max_attempts: config.max_attempts,
                reap_limit: config.reap_limit,
            });
            found = Some(("exhaust", swarm, path));
        }
    }
    Ok(found)
}

/// The seeded phase: `budget`'s seeds in turn until a walk finds
/// something; counts the seeds walked in `row`.
async fn seeds_phase(
    subject: &Subject,
    budget: &Budget,
    row: &mut Kill,
) -> Result<Option<Found>, ExploreError> {
    for seed in 0..budget.seeds {
        row.seeds = seed + 1;
        let report = explore_quiet(subject, seed, budget.steps).await?;
        if !report.findings().is_empty() {
            let line: Line = report.line.parse().expect("a report's line parses");
            return Ok(Some(("seeds", report.config.clone(), line.schedule)));
        }
    }
    Ok(None)
}

/// Writes the kill of `mutant` in `phase` into `row`, from the minimal run
/// `shrunk`.
fn record_kill(row: &mut Kill, mutant: &Mutant, phase: &'static str, shrunk: &Shrunk) {
    let line = shrunk.line();
    row.killed = true;
    // The first invariant the minimal run reports (the shrinker
    // kept the first one of the longer run, which may be a
    // weaker symptom of the same mistake).
    let invariant = shrunk
        .report
        .findings()
        .first()
        .map_or(shrunk.invariant, |(i, _)| *i);
    row.invariant = Some(invariant);
    row.as_expected = mutant.expected.contains(&invariant);
    row.phase = Some(phase);
    row.steps = Some(line.schedule.len());
    // A failure that shows only while healing (time passes, the
    // reaper runs, w0 drains) says so.
    let in_heal = shrunk
        .report
        .divergence
        .as_ref()
        .is_some_and(|d| d.step_index >= line.schedule.len());
    row.counterexample = Some(format!(
        "{}{}",
        line.schedule,
        if in_heal { " + heal" } else { "" }
    ));
    row.line = Some(line.to_string());
    row.steps_before = Some(shrunk.steps_before);
}

/// Runs every mutant of `mutants` on `client`, one after the other.
pub async fn matrix(
    client: &redis::Client,
    mutants: &[Mutant],
    budget: &Budget,
) -> Result<Matrix, MutantsError> {
    matrix_jobs(client, mutants, budget, 1, |_| {}).await
}

/// [`matrix`] with `jobs` mutants in flight at once (each on its own queue
/// and connection), `each` told of every kill in the order of `mutants`;
/// the matrix is the same for any number of jobs (but the times).
pub async fn matrix_jobs(
    client: &redis::Client,
    mutants: &[Mutant],
    budget: &Budget,
    jobs: usize,
    mut each: impl FnMut(&Kill),
) -> Result<Matrix, MutantsError> {
    let started = Instant::now();
    let (shared, list, shared_budget) = (client.clone(), mutants.to_vec(), budget.clone());
    let one = move |_job: usize, i: u64| {
        let (client, mutant, budget) = (shared.clone(), list[i as usize], shared_budget.clone());
        async move { kill(&client, &mutant, &budget).await }
    };
    let kills = in_order(jobs, mutants.len() as u64, one, |k| {
        each(k);
        std::ops::ControlFlow::Continue(())
    })
    .await
    .map_err(|(_, e)| e)?;
    Ok(Matrix {
        kills,
        budget: budget.clone(),
        elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

/// [`matrix_jobs`] with the chaos phase: once the explorers are done
/// with every mutant (`jobs` at a time), every mutant they did not kill,
/// and every consumer mutant, runs [`Budget::chaos_ms`] of chaos on
/// `server`, one after the other (a chaos run pauses and cuts the whole
/// server; see the module docs). A survivor the chaos run kills is killed
/// in the phase `chaos`. `each` is told of every row the explorers finish.
pub async fn matrix_on(
    server: &mut Server,
    mutants: &[Mutant],
    budget: &Budget,
    jobs: usize,
    each: impl FnMut(&Kill),
) -> Result<Matrix, MutantsError> {
    let mut matrix = matrix_jobs(&server.client(), mutants, budget, jobs, each).await?;
    let started = Instant::now();
    for (row, mutant) in matrix.kills.iter_mut().zip(mutants) {
        if budget.chaos_ms > 0 && (!row.killed || !mutant.exhaustible()) {
            let t = Instant::now();
            let found = chaos(server, mutant, budget.chaos_ms, 1).await?;
            if !row.killed && found.killed {
                row.killed = true;
                row.invariant = found.invariant;
                row.as_expected = found
                    .invariant
                    .is_some_and(|i| mutant.expected.contains(&i));
                row.phase = Some("chaos");
                row.counterexample = Some(format!(
                    "chaos seed {}, {} ms: {}",
                    found.seed,
                    budget.chaos_ms,
                    found.why.clone().unwrap_or_default()
                ));
            }
            row.chaos = Some(found);
            row.elapsed_ms += t.elapsed().as_secs_f64() * 1000.0;
        }
    }
    matrix.elapsed_ms += started.elapsed().as_secs_f64() * 1000.0;
    Ok(matrix)
}

/// One chaos run of `ms` on `mutant` (seed `seed`) on `server`: its queue
/// opened for each worker on its fault-proxy URL, its consumer; every
/// fault but the server kill.
pub async fn chaos(
    server: &mut Server,
    mutant: &Mutant,
    ms: u64,
    seed: u64,
) -> Result<ChaosKill, MutantsError> {
    let started = Instant::now();
    let name = format!("ackgap-mutant-chaos-{}", mutant.name);
    let client = server.client();
    let subject = mutant
        .subject(&client, &name)
        .await
        .map_err(|source| MutantsError::Queue {
            mutant: mutant.name,
            source,
        })?;
    let m = *mutant;
    let queue_name = name.clone();
    let open: OpenAdapter = Arc::new(move |url: String| {
        let name = queue_name.clone();
        Box::pin(async move {
            let client = redis::Client::open(url).map_err(|e| e.to_string())?;
            let subject = m.subject(&client, &name).await.map_err(|e| e.to_string())?;
            Ok(subject.adapter)
        })
    });
    let chaos_error = |e: String| MutantsError::Chaos {
        mutant: mutant.name,
        why: e,
    };
    // What the server runs (a URL takes no pause), without its kill.
    let faults = "all,-server-kill"
        .parse::<crate::chaos::schedule::FaultSet>()
        .map_err(|e| chaos_error(e.to_string()))?
        .on(&crate::chaos::fault::Shape::of(server));
    let cfg = ChaosConfig {
        duration_ms: ms,
        jobs: usize::try_from((ms / 25).max(20)).unwrap_or(20),
        lease_ms: 200,
        faults,
        queue: subject.adapter.name().to_owned(),
        queue_name: name,
        ..ChaosConfig::new(seed)
    };
    let chaos_subject = ChaosSubject {
        open,
        consumer: Arc::clone(&subject.consumer),
    };
    let report = run_with(
        server,
        cfg,
        Some(chaos_subject),
        None,
        None,
        Interrupt::new(),
    )
    .await
    .map_err(|e| chaos_error(e.to_string()))?;
    let found = chaos_finding(&report.invariants);
    Ok(ChaosKill {
        killed: found.is_some(),
        invariant: found.as_ref().map(|(i, _)| *i),
        why: found.map(|(_, why)| why),
        seed,
        elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

/// The first invalid invariant of a chaos run, or the effects a consumer
/// that promises nothing duplicated or lost (reported by effect-once).
fn chaos_finding(invariants: &[Report]) -> Option<(&'static str, String)> {
    if let Some(r) = invariants.iter().find(|r| r.verdict == Verdict::Invalid) {
        let why = r
            .violations
            .first()
            .map_or_else(|| "invalid".into(), |v| v.text.clone());
        return Some((r.invariant, why));
    }
    let r = invariants
        .iter()
        .find(|r| r.invariant == "effect-once" && r.verdict == Verdict::Valid)?;
    let dup = r.counts.get("duplicated").copied().unwrap_or(0);
    let lost = r.counts.get("lost").copied().unwrap_or(0);
    (dup + lost > 0).then(|| {
        (
            "effect-once",
            format!("{dup} job(s) with the effect applied more than once, {lost} lost (reported)"),
        )
    })
}

/// The mutation score of every mutant the exhaustive phase can see, with
/// `budget`: what `ackgap run` prints so that every run shows the checker
/// can still fail.
pub async fn score(client: &redis::Client, budget: &Budget) -> Result<MutationScore, MutantsError> {
    score_jobs(client, budget, 1, |_| {}).await
}

/// [`score`] with `jobs` mutants in flight at once, `each` told of every
/// kill in order; the score is the same for any number of jobs.
pub async fn score_jobs(
    client: &redis::Client,
    budget: &Budget,
    jobs: usize,
    each: impl FnMut(&Kill),
) -> Result<MutationScore, MutantsError> {
    let mutants = score_mutants(budget);
    Ok(matrix_jobs(client, &mutants, budget, jobs, each)
        .await?
        .score())
}

/// The mutants [`score`] runs with `budget`.
pub fn score_mutants(budget: &Budget) -> Vec<Mutant> {
    // The reference queue's mutants only: the `exec:` rows run a child
    // each and belong to `ackgap mutants`.
    MUTANTS
        .iter()
        .filter(|m| budget.seeds > 0 || m.exhaustible())
        .copied()
        .collect()
}

/// A `--only` name that names no mutant.
#[derive(Debug, thiserror::Error)]
#[error("unknown mutant {name:?}: expected one of {}", all().iter().map(|m| m.name).collect::<Vec<_>>().join(", "))]
pub struct UnknownMutant {
    /// The name asked for.
    pub name: String,
}

/// The mutants `names` names, in that order; every mutant when `names` is
/// empty.
pub fn select(names: &[String]) -> Result<Vec<Mutant>, UnknownMutant> {
    if names.is_empty() {
        return Ok(all());
    }
    names
        .iter()
        .map(|name| Mutant::by_name(name).ok_or_else(|| UnknownMutant { name: name.clone() }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::scripts::REFERENCE;

    /// The lines of a Lua body that are code: trimmed, without blank lines
    /// and `--` comments.
    fn code(body: &str) -> Vec<&str> {
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("--"))
            .collect()
    }

    /// Each script mutant (a patch build.rs applied to its base script)
    /// says in its leading comment that it is a MUTANT of that script, its
    /// code is not the base's, and at most 10 of its lines of code are not
    /// lines of the base: one mistake in the base, not a script of its own.
    #[test]
    fn every_script_mutant_is_its_base_script_with_a_small_change_and_says_so() {
        let mut mutants: Vec<(&str, &str, &str)> = MUTANTS
            .iter()
            .filter_map(|m| match m.kind {
                Mutation::Script(script, body) => Some((m.name, script, body)),
                _ => None,
            })
            .collect();
        mutants.push(("lease-client-clock", "lease", adapters::LEASE_CLIENT_CLOCK));
        assert_eq!(mutants.len(), 13);
        for (name, script, body) in mutants {
            let base = REFERENCE
                .iter()
                .find(|s| s.name == script)
                .unwrap_or_else(|| panic!("{name}: no reference script {script}"))
                .body;
            let comment: String = body
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                comment.starts_with("-- MUTANT") && comment.contains(&format!("{script}.lua")),
                "{name}: its leading comment must say it is a MUTANT of {script}.lua"
            );
            let (mine, theirs) = (code(body), code(base));
            assert_ne!(mine, theirs, "{name}: its code is {script}.lua's");
            let new: Vec<_> = mine.iter().filter(|l| !theirs.contains(l)).collect();
            assert!(
                !new.is_empty() && new.len() <= 10,
                "{name}: {} lines of code that {script}.lua does not have: {new:#?}",
                new.len()
            );
        }
    }
}
