//! The seeded random walk: swarm testing against a real Valkey.
//!
//! One `u64` seed drives everything through one [`ChaCha8Rng`] stream: first
//! the swarm configuration ([`SwarmConfig`]: how many jobs and workers, the
//! lease length, `max_attempts`, the reap limit, and a weight per step kind,
//! some of them zero, as in TigerBeetle's swarm options), then every step.
//! The choices depend only on the seed and the model's answers, never on
//! Valkey's, so a seed names one schedule.
//!
//! After `steps_max` steps the run heals, VOPR-style: time moves past every
//! deadline and ready-at, the reaper takes every expired lease, and worker
//! `w0` drains (lease, complete) until nothing is ready. The healing steps go
//! through the same [`Driver`], so they are checked and recorded too. Then
//! the history checkers judge the run, with two more reports: `refinement`
//! (every step agreed with the model) and `liveness` (every job ended done
//! or dead within the stated number of drain leases).
//!
//! More settings are drawn from a second stream of the same seed (so that
//! a seed's configuration above stays what it was): **real time** (one
//! walk in eight draws `w` steps, in which the server's clock really
//! moves, at most [`REAL_TIME_LEASES`] leases of them, and gets its lease
//! scaled down to 50–100 ms so that it stays short), the **stale-holder
//! options** ([`StaleOptions`], after TigerBeetle VOPR's swarm options):
//! how often a crashed worker comes back late, a tick runs past a whole
//! lease, and a worker whose lease was reaped retries after the next
//! holder's lease has expired too; and, drawn last, **boundary ticks**
//! ([`SwarmConfig::boundary`], one walk in two): a time step lands one ms
//! before, at or one ms after the deadline or ready time announced last,
//! where a reaper or a lease that is a ms early or late shows (the other
//! ticks are whole grains of 25 ms). An option acts only in the
//! state it names, and draws its coin from a stream of its own, so a walk
//! that never reaches such a state runs as it did.
//!
//! The walk draws only the steps whose operations the queue under test
//! supports ([`crate::adapter::Capabilities`]); a given schedule with a step
//! it does not support is refused before anything runs. On a queue that
//! does not refuse a duplicate id (`dedup: false`: a second enqueue is a
//! second message) an enqueue names only an id of the window not enqueued
//! before in the walk, and no enqueue is drawn once there is none; a given
//! schedule that enqueues an id twice is refused. The choice is the walk's,
//! from the capability, so a seed still names one walk, and the replay
//! line's steps name the ids. On a queue with
//! only the server clock the driver turns the walk's ticks into real waits
//! (see [`super::driver`]).
//!
//! # Design notes
//!
//! A failure prints its schedule and the command. Deliberately broken
//! scripts the walks must catch live in `lua/mutants/`. The fresh id of a
//! non-deduplicating queue's enqueue is chosen by `Actors::fresh`; a given
//! schedule with a step the queue does not support is refused with
//! `ExploreError::Unsupported`, before the queue is touched.
//!
//! On the server clock the heal waits until the server's `TIME` is past the
//! latest deadline or ready-at the queue itself reported in any answer
//! (`Driver::wait_past_deadlines`, a nemesis `wait` event; at most
//! `HEAL_WAIT_MAX_MS`, 30 s, beyond which the walk stops with an error): a
//! queue may not honour the lease it is asked for (apalis's leases last
//! whole seconds), and a heal that reaped before they expired would report
//! the jobs lost.
//!
//! A walk stopped by an error keeps its history
//! (`target/ackgap/failures/stopped-QUEUE-seedS-MILLIS.jsonl`,
//! `ExploreError::Stopped`).

use std::collections::BTreeMap;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::driver::{job_id, Divergence, Driver, DriverConfig, ExploreError, Outcome, Subject};
use super::line::{Line, LineConfig};
use super::op::{enqueued, Schedule, Step, StepKind};
use crate::check::{self, Report, Verdict};
use crate::history::{Event, Recorder};
use crate::queue::{JobState, Queue};

mod heal;
mod together;

use heal::{heal, liveness, Drain};

/// Every time and duration the walk draws is a multiple of this (ms), so
/// that ticks land exactly on deadlines often: `deadline <= now` is the
/// boundary the reaper must get right.
pub(crate) const GRAIN_MS: u64 = 25;

/// A weight per step kind: how often the walk picks it among the kinds that
/// can act (a complete needs a worker holding a lease). Zero turns a kind
/// off for the whole run; enqueue and lease are never off. A step that can
/// only answer "nothing" (a duplicate enqueue once every job is in, a lease
/// with no job ready, a reap with no lease out, time passing with no lease
/// out and no job waiting) keeps a weight of at most 1,
/// so that it still happens but does not crowd out the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Weights {
    /// `e`: enqueue (a fresh or a duplicate id).
    pub enqueue: u32,
    /// `l`: lease.
    pub lease: u32,
    /// `c`: complete the held lease.
    pub complete: u32,
    /// `f`: fail the held lease.
    pub fail: u32,
    /// `x`: extend the held lease.
    pub extend: u32,
    /// `k`: crash, forgetting the held lease.
    pub crash: u32,
    /// `s`: complete the lease held before a crash.
    pub stale_complete: u32,
    /// `r`: reap.
    pub reap: u32,
    /// `t`: time passes.
    pub tick: u32,
    /// `a`: apply the next part of the held lease's effect.
    pub effect: u32,
    /// `d`: ack the held lease, and lose the reply.
    pub complete_lost: u32,
    /// `n`: ack the held lease and lease the next job in one call.
    pub complete_next: u32,
    /// `w`: real time passes (only in a walk with [`SwarmConfig::real_time`]).
    pub wait: u32,
}

/// How often, in percent (0: never), a walk builds the schedules where a
/// stale holder comes back late: the reaper took a worker's lease, the job
/// was leased again, the newer lease expired too, and only then does the
/// first worker act. Random walks almost never build them on their own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StaleOptions {
    /// A crashed worker comes back late: once the lease it held before its
    /// crash has been granted again and that newer lease has expired, its
    /// stale complete (`s`) is drawn with this chance at each step.
    pub late_return: u32,
    /// A tick (or a real wait) runs past a whole lease: with this chance a
    /// drawn time step lasts a lease and up to one more, so every deadline
    /// set before it passes.
    pub tick_runs: u32,
    /// A paused worker retries: a worker still holding a lease the reaper
    /// took and granted again, the newer lease expired too, retries its
    /// complete, extend or fail with this chance at each step.
    pub stale_retry: u32,
}

impl StaleOptions {
    /// True when every option is off.
    pub fn is_off(&self) -> bool {
        *self == StaleOptions::default()
    }
}

/// The settings one seed chooses for a whole walk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SwarmConfig {
    /// The seed.
    pub seed: u64,
    /// How many job ids are in play at a time (1 to 4): the walk enqueues
    /// from a window of `jobs` consecutive indexes, the next window once
    /// every job of the current one is done or dead.
    pub jobs: u8,
    /// Workers `w0 ..` (1 to 3).
    pub workers: u8,
    /// Lease length (ms, logical time): 50 to 300.
    pub lease_ms: u64,
    /// `max_attempts` of every job (1 to 3).
    pub max_attempts: u64,
    /// `limit` of every reap (1 to 4).
    pub reap_limit: u64,
    /// How often each step kind is picked.
    pub weights: Weights,
    /// The walk draws real-time steps (`w`): its lease was scaled down to
    /// 50–100 ms and [`Weights::wait`] is on.
    pub real_time: bool,
    /// How often the walk builds a late stale holder.
    pub stale: StaleOptions,
    /// How often, in percent (0: never), a time step the walk draws lands
    /// at a boundary instead: one ms before, at or one ms after the
    /// deadline (of a lease or an extend) or ready time (of a fail)
    /// announced last, while it is ahead. A reaper that takes a lease a
    /// ms early, or a lease that takes a job a ms before its ready time,
    /// shows only there: the walk's other ticks are whole grains.
    pub boundary: u32,
}

/// How much real time one walk may wait in its `w` steps, in leases: a
/// `w` is drawn only while the walk has waited less (counted from its
/// steps, not the clock, so a seed still names one walk), and lasts at most
/// what is left. A lease passes a deadline and expires a guard shorter
/// than a lease, and keeps a walk's waits to 50–100 ms (and its heal's,
/// which waits on real time too, to as much again).
pub const REAL_TIME_LEASES: u64 = 1;

/// What `driver`'s walk may still wait in `w` steps (ms).
fn real_time_left(config: &SwarmConfig, driver: &Driver) -> u64 {
    let waited = Schedule(driver.applied().to_vec()).real_time_ms();
    (REAL_TIME_LEASES * config.lease_ms).saturating_sub(waited)
}

/// The second stream of `seed`'s generator, for the settings drawn after
/// the first configuration (`stream` 1) and the options' coins during the
/// walk (`stream` 2).
fn side_stream(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

impl SwarmConfig {
    /// The configuration seed `seed` chooses.
    pub fn from_seed(seed: u64) -> SwarmConfig {
        SwarmConfig::draw(seed, &mut ChaCha8Rng::seed_from_u64(seed))
    }

    /// Draws the configuration from the start of the seed's stream.
    fn draw(seed: u64, rng: &mut ChaCha8Rng) -> SwarmConfig {
        let jobs = rng.random_range(1..=4);
        let workers = rng.random_range(1..=3);
        let lease_ms = GRAIN_MS * 2 * rng.random_range(1..=6);
        let max_attempts = rng.random_range(1..=3);
        let reap_limit = rng.random_range(1..=4);
        // Enqueue and lease are always on: without them nothing happens.
        // Every other kind is off for the whole run one time in four.
        let enqueue = rng.random_range(1..=10);
        let lease = rng.random_range(1..=10);
        let mut weight = || {
            if rng.random_ratio(1, 4) {
                0
            } else {
                rng.random_range(1..=10)
            }
        };
        let weights = Weights {
            enqueue,
            lease,
            complete: weight(),
            fail: weight(),
            extend: weight(),
            crash: weight(),
            stale_complete: weight(),
            reap: weight(),
            tick: weight(),
            effect: weight(),
            complete_lost: weight(),
            complete_next: weight(),
            wait: 0,
        };
        let mut config = SwarmConfig {
            seed,
            jobs,
            workers,
            lease_ms,
            max_attempts,
            reap_limit,
            weights,
            real_time: false,
            stale: StaleOptions::default(),
            boundary: 0,
        };
        config.draw_options(&mut side_stream(seed, 1));
        config
    }

    /// Real time and the stale-holder options, from the seed's second
    /// stream: real time for one walk in eight, each option for one in
    /// four.
    fn draw_options(&mut self, rng: &mut ChaCha8Rng) {
        self.real_time = rng.random_ratio(1, 8);
        if self.real_time {
            // A real wait lasts what it says: a lease of 50 to 100 ms keeps
            // a walk of a hundred steps within a second or two.
            self.lease_ms = (self.lease_ms / 3)
                .next_multiple_of(GRAIN_MS)
                .clamp(2 * GRAIN_MS, 4 * GRAIN_MS);
            self.weights.wait = rng.random_range(1..=10);
        }
        let mut option = || {
            if rng.random_ratio(1, 4) {
                rng.random_range(20..=100)
            } else {
                0
            }
        };
        self.stale = StaleOptions {
            late_return: option(),
            tick_runs: option(),
            stale_retry: option(),
        };
        // Drawn last, so that every setting above stays what it was; on
        // for one walk in two.
        self.boundary = if rng.random_ratio(1, 2) {
            rng.random_range(20..=80)
        } else {
            0
        };
    }

    /// The settings a replay line carries.
    pub(crate) fn line_config(&self) -> LineConfig {
        LineConfig {
            jobs: self.jobs,
            workers: self.workers,
            lease_ms: self.lease_ms,
            max_attempts: self.max_attempts,
            reap_limit: self.reap_limit,
        }
    }

    /// A configuration given whole (by a replay line), not drawn: seed 0,
    /// every weight 1.
    pub fn from_line(c: &LineConfig) -> SwarmConfig {
        SwarmConfig {
            seed: 0,
            jobs: c.jobs,
            workers: c.workers,
            lease_ms: c.lease_ms,
            max_attempts: c.max_attempts,
            reap_limit: c.reap_limit,
            weights: Weights {
                enqueue: 1,
                lease: 1,
                complete: 1,
                fail: 1,
                extend: 1,
                crash: 1,
                stale_complete: 1,
                reap: 1,
                tick: 1,
                effect: 1,
                complete_lost: 1,
                complete_next: 1,
                wait: 1,
            },
            real_time: false,
            stale: StaleOptions::default(),
            boundary: 0,
        }
    }

    /// The driver's settings.
    pub fn driver(&self) -> DriverConfig {
        DriverConfig {
            workers: self.workers,
            lease_ms: self.lease_ms,
            max_attempts: self.max_attempts,
            reap_limit: self.reap_limit,
        }
    }
}

/// What one walk (or replay) found.
#[derive(Clone, Debug, Serialize)]
pub struct WalkReport {
    /// The seed.
    pub seed: u64,
    /// The settings the seed chose.
    pub config: SwarmConfig,
    /// The random steps asked for.
    pub steps_max: usize,
    /// The steps run, healing included.
    pub steps: usize,
    /// Every step run, in text form (see [`super::op`]).
    pub schedule: String,
    /// One report per invariant: the history checkers', then `refinement`
    /// and `liveness`.
    pub invariants: Vec<Report>,
    /// The worst verdict.
    pub verdict: Verdict,
    /// The first step where the model and Valkey disagreed, if any.
    pub divergence: Option<Divergence>,
    /// Events recorded in the history.
    pub events: usize,
    /// How long the walk took (ms).
    pub elapsed_ms: f64,
    /// Steps per second.
    pub steps_per_s: f64,
    /// The command that runs this walk again.
    pub replay: String,
    /// What the printed commands add (the server's flags); see
    /// [`Subject::rerun`].
    #[serde(skip)]
    pub rerun: super::line::Rerun,
    /// The replay line of the steps before healing (see [`Line`]):
    /// `ackgap replay LINE` runs them again on any seed-free setup.
    pub line: String,
    /// The queue under test (`--queue`).
    pub queue: String,
    /// The consumer (`--consumer`).
    pub consumer: String,
    /// One line per step run: who did what and what the server answered.
    #[serde(skip)]
    pub log: Vec<String>,
    /// What the workers held when healing began (they stop, as if crashed).
    #[serde(skip)]
    pub heal_note: String,
    /// The recorded history (not serialized: `ackgap run` writes
    /// histories; a walk's is for tests and replays to compare).
    #[serde(skip)]
    pub history: Vec<Event>,
}

impl WalkReport {
    /// What to print when the walk failed: the divergence or the violated
    /// invariants, the schedule and the replay command.
    pub fn failure_text(&self) -> String {
        let mut out = format!(
            "ackgap explore: seed {} is {} after {} steps\n",
            self.seed, self.verdict, self.steps
        );
        if let Some(d) = &self.divergence {
            out.push_str(&format!("  {d}\n"));
        }
        // The refinement report repeats the divergence printed above.
        let judged = self
            .invariants
            .iter()
            .filter(|r| r.verdict != Verdict::Valid && r.invariant != "refinement");
        for r in judged {
            for v in &r.violations {
                out.push_str(&format!("  {}: {v}\n", r.invariant));
                if !v.events.is_empty() {
                    out.push_str(&format!("    {}\n", v.cites()));
                }
            }
        }
        out.push_str(&format!("  schedule: {}\n", self.schedule));
        out.push_str(&self.real_time_note());
        out.push_str(&format!("  replay: {}\n", self.replay));
        out.push_str(&format!("  replay line: {}\n", self.replay_line_command()));
        out
    }

    /// What the run found, as (invariant, why): every violation of an
    /// invalid invariant, and the effects a consumer that promises nothing
    /// duplicated or lost (reported by effect-once, not judged). Empty for
    /// a clean run. The shrinker keeps a candidate when it still finds the
    /// first one's invariant.
    pub fn findings(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for r in &self.invariants {
            if r.verdict == Verdict::Invalid {
                for v in &r.violations {
                    out.push((r.invariant, v.text.clone()));
                }
                if r.violations.is_empty() {
                    out.push((r.invariant, "invalid".into()));
                }
            }
        }
        let effects = self
            .invariants
            .iter()
            .find(|r| r.invariant == "effect-once" && r.verdict == Verdict::Valid);
        if let Some(r) = effects {
            for (count, what) in [("duplicated", "applied more than once"), ("lost", "lost")] {
                let n = r.counts.get(count).copied().unwrap_or(0);
                if n > 0 {
                    out.push((
                        "effect-once",
                        format!(
                            "{n} job(s) with the effect {what} (reported: {} does not promise effect-once)",
                            self.consumer
                        ),
                    ));
                }
            }
        }
        out
    }

    /// The run as a numbered counterexample: each step (who did what, what
    /// the server answered), then which invariant broke and why, and the
    /// command that runs it again.
    pub fn counterexample_text(&self) -> String {
        // A run that found nothing is a replay, not a counterexample.
        let heading = if self.verdict == Verdict::Valid && self.findings().is_empty() {
            "replay"
        } else {
            "counterexample"
        };
        let mut out = format!(
            "{heading} on {} with the {} consumer ({} workers, lease {} ms, max_attempts {}, reap limit {}):\n",
            self.queue,
            self.consumer,
            self.config.workers,
            self.config.lease_ms,
            self.config.max_attempts,
            self.config.reap_limit
        );
        let random = match self.line.rsplit('/').next() {
            None | Some("-") => 0,
            Some(s) => s.split('.').count(),
        };
        for (i, line) in self.log.iter().enumerate() {
            if i == random {
                out.push_str(&format!(
                    "  -- healing: {}time passes, the reaper runs, w0 drains --\n",
                    self.heal_note
                ));
            }
            out.push_str(&format!("  {:>3}. {line}\n", i + 1));
        }
        out.push_str(&self.real_time_note());
        if let Some(d) = &self.divergence {
            out.push_str(&format!("  broke refinement: {d}\n"));
        }
        for (invariant, why) in self.findings() {
            if invariant != "refinement" {
                out.push_str(&format!("  broke {invariant}: {why}\n"));
            }
        }
        out.push_str(&format!("  replay: {}\n", self.replay_line_command()));
        out
    }

    /// A line saying the run used real time (its `w` steps waited on the
    /// server's clock), or nothing.
    pub(crate) fn real_time_note(&self) -> String {
        let Ok(line) = self.line.parse::<Line>() else {
            return String::new();
        };
        match line.schedule.real_time_ms() {
            0 => String::new(),
            ms => format!(
                "  real time: its w steps wait {ms} ms on the server's clock (a replay waits them again)\n"
            ),
        }
    }

    /// `ackgap replay LINE`, with what the printed commands add.
    pub fn replay_line_command(&self) -> String {
        self.rerun.command(&format!(
            "ackgap replay {}",
            super::line::shell_word(&self.line)
        ))
    }
}

/// The command that reproduces the walk of `seed` with `steps_max` steps.
pub fn replay_command(seed: u64, steps_max: usize) -> String {
    format!("ackgap explore --seed {seed} --steps {steps_max}")
}

/// Explores `steps_max` random steps chosen by `seed` on the reference
/// `queue` (cleared first) with the `marker` consumer, heals, and judges
/// the run. A divergence is a finding, reported in
/// [`WalkReport::divergence`] with an `invalid` verdict; `Err` means the run
/// could not be judged (Valkey unreachable, a bug in the model). A failing
/// walk prints its schedule and replay command to stderr.
pub async fn explore(
    queue: &Queue,
    seed: u64,
    steps_max: usize,
) -> Result<WalkReport, ExploreError> {
    explore_on(&Subject::reference(queue), seed, steps_max).await
}

/// [`explore`] on any queue under test and consumer.
pub async fn explore_on(
    subject: &Subject,
    seed: u64,
    steps_max: usize,
) -> Result<WalkReport, ExploreError> {
    explore_unprinted(subject, seed, steps_max).await.map(loud)
}

/// [`explore_on`] without printing a failure: the parallel walks
/// (`super::parallel`) report each walk in seed order instead.
pub(super) async fn explore_unprinted(
    subject: &Subject,
    seed: u64,
    steps_max: usize,
) -> Result<WalkReport, ExploreError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let config = SwarmConfig::draw(seed, &mut rng);
    walk(subject, &config, Some(&mut rng), steps_max, None).await
}

/// [`explore_on`] without printing a failing walk to stderr: for a caller
/// that reports what it found its own way (the mutants' seeds phase, where
/// a failing walk is the expected finding).
pub async fn explore_quiet(
    subject: &Subject,
    seed: u64,
    steps_max: usize,
) -> Result<WalkReport, ExploreError> {
    explore_unprinted(subject, seed, steps_max).await
}

/// Runs `schedule` instead of drawing steps, with the configuration `seed`
/// chooses, then heals and judges like [`explore`]: how a printed schedule
/// (perhaps edited by hand) is run again.
pub async fn replay(
    queue: &Queue,
    seed: u64,
    schedule: &Schedule,
) -> Result<WalkReport, ExploreError> {
    replay_on(&Subject::reference(queue), seed, schedule).await
}

/// [`replay`] on any queue under test and consumer.
pub async fn replay_on(
    subject: &Subject,
    seed: u64,
    schedule: &Schedule,
) -> Result<WalkReport, ExploreError> {
    let config = SwarmConfig::from_seed(seed);
    walk(subject, &config, None, schedule.len(), Some(schedule))
        .await
        .map(loud)
}

/// Runs `schedule` on `subject` with `config` as given (not drawn from a
/// seed), then heals and judges: what `ackgap replay LINE` and the shrinker
/// run.
pub async fn run_schedule(
    subject: &Subject,
    config: &SwarmConfig,
    schedule: &Schedule,
) -> Result<WalkReport, ExploreError> {
    walk(subject, config, None, schedule.len(), Some(schedule)).await
}

async fn walk(
    subject: &Subject,
    config: &SwarmConfig,
    rng: Option<&mut ChaCha8Rng>,
    steps_max: usize,
    given: Option<&Schedule>,
) -> Result<WalkReport, ExploreError> {
    if let Some(schedule) = given {
        refuse_unsupported(subject, schedule)?;
    }
    let started = Instant::now();
    let seed = config.seed;
    let recorder = Recorder::in_memory();
    let mut driver = Driver::start_on(subject, config.driver(), recorder.clone())
        .await
        .map_err(|source| ExploreError::Setup {
            during: "clearing the queue",
            source,
        })?;
    let result: Result<Option<Drain>, ExploreError> =
        take_steps(&mut driver, config, rng, steps_max, given)
            .await
            .map(|()| None);
    let random_steps = driver.applied().len();
    let heal_note = holding_note(&driver);
    let (divergence, drain) = match heal_and_read_back(&mut driver, result).await {
        Ok(read) => read,
        Err(e) => return Err(super::shrink::keep_history(e, &recorder, subject, seed)),
    };
    let events = recorder.events();
    let invariants = judge(
        subject,
        &events,
        driver.applied().len(),
        divergence.as_ref(),
        drain.as_ref(),
    );
    let verdict = check::overall(&invariants);
    let elapsed = started.elapsed();
    let steps = driver.applied().len();
    let line = Line {
        queue: subject.adapter.name().to_owned(),
        consumer: subject.consumer.name().to_owned(),
        config: config.line_config(),
        schedule: Schedule(driver.applied()[..random_steps].to_vec()),
    };
    let report = WalkReport {
        seed,
        queue: subject.adapter.name().to_owned(),
        consumer: subject.consumer.name().to_owned(),
        config: config.clone(),
        steps_max,
        steps,
        schedule: Schedule(driver.applied().to_vec()).to_string(),
        invariants,
        verdict,
        divergence,
        events: events.len(),
        history: events,
        log: driver.log().to_vec(),
        heal_note,
        elapsed_ms: elapsed.as_secs_f64() * 1000.0,
        steps_per_s: steps as f64 / elapsed.as_secs_f64().max(1e-9),
        replay: walk_replay(subject, seed, steps_max, given),
        rerun: subject.rerun.clone(),
        line: line.to_string(),
    };
    Ok(report)
}

/// Refuses `schedule` when one of its steps calls an operation the queue
/// under test does not support, or enqueues an id a second time on a queue
/// that does not refuse duplicates (`dedup: false`), before anything runs.
fn refuse_unsupported(subject: &Subject, schedule: &Schedule) -> Result<(), ExploreError> {
    super::server_steps::refuse(subject.server.as_ref(), subject.adapter.name(), schedule)?;
    let capabilities = subject.adapter.capabilities();
    for (step_index, step) in schedule.steps().iter().enumerate() {
        let before = &schedule.steps()[..step_index];
        for member in step.members() {
            let again = matches!(member, Step::Enqueue { job } if enqueued(before, *job));
            if !capabilities.dedup && again {
                return Err(ExploreError::Unsupported {
                    step_index,
                    step: step.clone(),
                    queue: subject.adapter.name().to_owned(),
                    operation: "a second enqueue of an id (its hello says dedup: false)",
                });
            }
        }
        let mut operations = step.members().iter().flat_map(Step::operations);
        if let Some(op) = operations.find(|op| !capabilities.supports(**op)) {
            return Err(ExploreError::Unsupported {
                step_index,
                step: step.clone(),
                queue: subject.adapter.name().to_owned(),
                operation: op.name(),
            });
        }
    }
    Ok(())
}

/// Applies up to `steps_max` steps to `driver`: `given`'s, else drawn from
/// `rng` (none when neither is); stops at the first error.
async fn take_steps(
    driver: &mut Driver,
    config: &SwarmConfig,
    mut rng: Option<&mut ChaCha8Rng>,
    steps_max: usize,
    given: Option<&Schedule>,
) -> Result<(), ExploreError> {
    let mut coins = side_stream(config.seed, 2);
    for i in 0..steps_max {
        let step = match (given, rng.as_deref_mut()) {
            (Some(schedule), _) => schedule.steps()[i].clone(),
            (None, Some(rng)) => choose(rng, &mut coins, config, driver),
            (None, None) => break,
        };
        driver.apply(&step).await?;
    }
    Ok(())
}

/// Heals after the steps' `result` when they went well, then reads the
/// queue back unless the model and the queue diverged: the divergence or
/// the drain, or the error that stops the walk.
async fn heal_and_read_back(
    driver: &mut Driver,
    mut result: Result<Option<Drain>, ExploreError>,
) -> Result<(Option<Divergence>, Option<Drain>), ExploreError> {
    if result.is_ok() {
        result = heal(driver).await.map(Some);
    }
    let (divergence, drain) = match result {
        Ok(drain) => (None, drain),
        Err(ExploreError::Divergence(d)) => (Some(*d), None),
        Err(e) => return Err(e),
    };
    if divergence.is_none() {
        driver
            .read_back()
            .await
            .map_err(|source| ExploreError::Setup {
                during: "reading the queue back",
                source,
            })?;
    }
    Ok((divergence, drain))
}

/// The walk's invariants: the history checkers', refinement (only on the
/// reference queue) over its `steps` steps, and liveness.
fn judge(
    subject: &Subject,
    events: &[Event],
    steps: usize,
    divergence: Option<&Divergence>,
    drain: Option<&Drain>,
) -> Vec<Report> {
    let mut invariants = check::check_all(events);
    if subject.refines() {
        invariants.push(refinement(steps, divergence));
    }
    invariants.push(liveness(events, drain));
    invariants
}

/// The command that replays the walk: `given`'s schedule, else the seed's
/// walk, with the queue and consumer when they are not the defaults (also
/// what a walk that stopped unjudged prints).
pub fn walk_replay(
    subject: &Subject,
    seed: u64,
    steps_max: usize,
    given: Option<&Schedule>,
) -> String {
    let command = match given {
        Some(schedule) => {
            format!("ackgap explore --seed {seed} --schedule '{schedule}'")
        }
        None => replay_command(seed, steps_max),
    };
    // The defaults go unsaid, so the reference command reads as before.
    let mut flags = String::new();
    if subject.adapter.name() != "reference" {
        flags.push_str(&format!(
            " --queue {}",
            super::line::shell_word(subject.adapter.name())
        ));
    }
    if subject.consumer.name() != "marker" {
        flags.push_str(&format!(" --consumer {}", subject.consumer.name()));
    }
    flags.push_str(
        &subject
            .server
            .as_ref()
            .map_or(String::new(), |s| s.faults_flag()),
    );
    if subject.parallel > 0 && given.is_none() {
        flags.push_str(&format!(" --parallel {}", subject.parallel));
    }
    subject.rerun.command(&(command + &flags))
}

/// Prints a failing walk's schedule and replay command to stderr.
fn loud(report: WalkReport) -> WalkReport {
    if report.verdict != Verdict::Valid {
        // A closed stderr loses the message, never the report.
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(report.failure_text().as_bytes());
    }
    report
}

/// The leases workers still hold when healing begins, in words: they never
/// act on them again, as if they had crashed there.
fn holding_note(driver: &Driver) -> String {
    let parts = driver.subject().consumer.parts();
    let mut out = String::new();
    for (i, w) in driver.workers().iter().enumerate() {
        if let Some(h) = &w.held {
            out.push_str(&format!(
                "w{i} stops holding {} token {} ({}); ",
                h.id,
                h.token,
                super::driver::crash_point(h.parts_done, parts)
            ));
        }
    }
    out
}

/// Picks the next step: a stale holder's late act when an option fires,
/// else a kind by weight among those that can act, then its arguments.
/// Time passes when no kind can act. The options flip their coins from
/// `coins`, never from `rng`.
fn choose(
    rng: &mut ChaCha8Rng,
    coins: &mut ChaCha8Rng,
    config: &SwarmConfig,
    driver: &Driver,
) -> Step {
    if let Some(step) = late_stale_holder(coins, config, driver) {
        return step;
    }
    // The server's faults, only when its owner asks (no coin otherwise).
    if let Some(step) = driver.subject().server.as_ref().and_then(|s| s.draw(coins)) {
        return step;
    }
    // Parallel steps, only with --parallel (no coin otherwise).
    if let Some(step) = together::draw(coins, config, driver) {
        return step;
    }
    let actors = actors(config, driver);
    let kinds = kind_weights(config, driver, &actors);
    // Draws from `rng` in the order the seeds pin: the kind, then its
    // arguments.
    let kind = pick_kind(rng, &kinds);
    let step = arguments(rng, config, kind, &actors);
    let step = match step {
        Step::Tick { ms } | Step::Wait { ms } => {
            let ms = match boundary_tick(coins, config, driver) {
                Some(ms) => ms,
                // A run of time past a whole lease: every deadline set
                // before it passes.
                None if coin(coins, config.stale.tick_runs) => {
                    ms.max(config.lease_ms)
                        + GRAIN_MS * coins.random_range(0..=config.lease_ms / GRAIN_MS)
                }
                None => ms,
            };
            if step.is_real_time() {
                Step::Wait { ms }
            } else {
                Step::Tick { ms }
            }
        }
        step => step,
    };
    match step {
        // A wait lasts at most what the walk may still wait.
        Step::Wait { ms } => Step::Wait {
            ms: ms.min(real_time_left(config, driver)),
        },
        step => step,
    }
}

/// With [`SwarmConfig::boundary`]'s chance, the time step to a boundary:
/// one ms short of the deadline or ready time announced last, to it, or
/// one ms past it (`None`, and no draw, when the option is off or nothing
/// announced is ahead). The coins come from `coins`, never from the
/// walk's own stream.
fn boundary_tick(coins: &mut ChaCha8Rng, config: &SwarmConfig, driver: &Driver) -> Option<u64> {
    if config.boundary == 0 {
        return None;
    }
    let ahead = driver.announced_ahead_ms()? - driver.now_ms();
    if !coin(coins, config.boundary) {
        return None;
    }
    // One short, to it, one past: ahead is at least 1.
    let ms = ahead + coins.random_range(0..3u64) - 1;
    (ms > 0).then_some(ms)
}

/// True with `percent` chance (never for 0, and then no draw).
fn coin(coins: &mut ChaCha8Rng, percent: u32) -> bool {
    percent > 0 && coins.random_range(0..100) < percent
}

/// True when the stale holders are judged by what the queue answered
/// (its leases and their deadlines), not by the model: a queue on logical
/// time that the model does not describe, whose order of leases (which
/// job a lease takes) may not be the model's.
fn told_by_the_queue(driver: &Driver) -> bool {
    !driver.subject().refines() && !driver.on_server_clock()
}

/// True when the lease of token `token` on job `id` is stale and so is the
/// one granted after it: the job was leased again (its attempts passed the
/// token) and that newer lease is not live either (the job is no longer
/// active, or its deadline has passed).
fn superseded_and_expired(driver: &Driver, id: &str, token: u64) -> bool {
    if told_by_the_queue(driver) {
        return driver
            .superseding_deadline(id, token)
            .is_some_and(|deadline| deadline <= driver.now_ms());
    }
    let Some(job) = driver.model().job(id) else {
        return false;
    };
    job.attempts() > driver.delivery(id, token)
        && job
            .deadline_ms()
            .is_none_or(|deadline| deadline <= driver.now_ms())
}

/// How far (ms) the newer lease that superseded token `token` on job `id`
/// is from its deadline, when the job was leased again and that lease is
/// still live: the time step that makes the stale holder a late one.
fn newer_lease_left(driver: &Driver, id: &str, token: u64) -> Option<u64> {
    if told_by_the_queue(driver) {
        let deadline = driver.superseding_deadline(id, token)?;
        return (deadline > driver.now_ms()).then(|| deadline - driver.now_ms());
    }
    let job = driver.model().job(id)?;
    let deadline = job.deadline_ms()?;
    (job.attempts() > driver.delivery(id, token) && deadline > driver.now_ms())
        .then(|| deadline - driver.now_ms())
}

/// The stale-holder options' step, when one fires: a crashed worker's late
/// stale complete, or a paused worker's late complete, extend or fail; or,
/// while the lease that superseded such a worker's is still live, time
/// passing to its deadline, so that the worker's act comes late.
fn late_stale_holder(
    coins: &mut ChaCha8Rng,
    config: &SwarmConfig,
    driver: &Driver,
) -> Option<Step> {
    let options = config.stale;
    if options.late_return == 0 && options.stale_retry == 0 {
        return None;
    }
    let supports = |step: &Step| {
        step.operations()
            .iter()
            .all(|op| driver.capabilities().supports(*op))
    };
    for (i, w) in driver.workers().iter().enumerate() {
        let worker = u8::try_from(i).ok()?;
        let waiting = [
            (&w.stale, options.late_return),
            (&w.held, options.stale_retry),
        ]
        .into_iter()
        .filter_map(|(h, p)| {
            let h = h.as_ref()?;
            Some((newer_lease_left(driver, &h.id, h.token)?, p))
        })
        .find(|(_, p)| *p > 0);
        if let Some((ms, p)) = waiting {
            if coin(coins, p) {
                return Some(Step::Tick { ms });
            }
        }
        let late = |h: &Option<super::driver::Held>| {
            h.as_ref()
                .is_some_and(|h| superseded_and_expired(driver, &h.id, h.token))
        };
        let stale = Step::StaleComplete { worker };
        if late(&w.stale) && supports(&stale) && coin(coins, options.late_return) {
            return Some(stale);
        }
        if late(&w.held) && coin(coins, options.stale_retry) {
            let acts = [
                Step::Complete { worker },
                Step::Extend { worker },
                Step::Fail {
                    worker,
                    delay_ms: 0,
                },
            ];
            let step = acts[coins.random_range(0..acts.len())].clone();
            if supports(&step) {
                return Some(step);
            }
        }
    }
    None
}

/// Who a step can name now: workers by what they hold, and the window of
/// jobs to enqueue from.
struct Actors {
    /// Workers that hold a lease.
    holding: Vec<u8>,
    /// Workers that hold a stale lease.
    stale: Vec<u8>,
    /// Workers that hold a lease whose effect is not yet wholly applied.
    applying: Vec<u8>,
    /// The first job of the window.
    first: u8,
    /// The last job of the window.
    last: u8,
    /// The jobs of the window an enqueue may name: `None` on a queue that
    /// refuses a duplicate id (any of them; a second enqueue tests the
    /// refusal), else those never enqueued in this walk (a second enqueue
    /// would be a second message, and prove nothing).
    fresh: Option<Vec<u8>>,
}

/// Who a step can name in the state of `driver`.
fn actors(config: &SwarmConfig, driver: &Driver) -> Actors {
    let holding: Vec<u8> = (0..config.workers)
        .filter(|w| driver.workers()[usize::from(*w)].held.is_some())
        .collect();
    let stale: Vec<u8> = (0..config.workers)
        .filter(|w| driver.workers()[usize::from(*w)].stale.is_some())
        .collect();
    let first = window(config, driver);
    let last = first.saturating_add(config.jobs - 1);
    let parts = driver.subject().consumer.parts();
    let applying: Vec<u8> = (0..config.workers)
        .filter(|w| {
            driver.workers()[usize::from(*w)]
                .held
                .as_ref()
                .is_some_and(|h| h.parts_done < parts)
        })
        .collect();
    let fresh = (!driver.capabilities().dedup).then(|| {
        (first..=last)
            .filter(|job| !enqueued(driver.applied(), *job))
            .collect()
    });
    Actors {
        holding,
        stale,
        applying,
        first,
        last,
        fresh,
    }
}

/// The weight of every step kind now: zero for a kind that cannot act, at
/// most one for a kind that can but would do nothing useful.
fn kind_weights(config: &SwarmConfig, driver: &Driver, actors: &Actors) -> [(u32, StepKind); 13] {
    let Actors {
        holding,
        stale,
        applying,
        first,
        last,
        fresh,
    } = actors;
    let (first, last) = (*first, *last);
    let w = config.weights;
    let held = |weight: u32| if holding.is_empty() { 0 } else { weight };
    let model = driver.model();
    let now_ms = driver.now_ms();
    let all_in = (first..=last).all(|job| model.job(&job_id(job)).is_some());
    let ready = model
        .jobs()
        .any(|(_, job)| job.state() == JobState::Pending && job.score_ms() <= Some(now_ms));
    let out = model.jobs().any(|(_, job)| job.state() == JobState::Active);
    let later = model
        .jobs()
        .any(|(_, job)| job.state() == JobState::Pending && job.score_ms() > Some(now_ms));
    let rarely = |weight: u32, useful: bool| if useful { weight } else { weight.min(1) };
    let enqueue = match fresh {
        None => rarely(w.enqueue, !all_in),
        Some(fresh) if fresh.is_empty() => 0,
        Some(_) => w.enqueue,
    };
    let kinds = [
        (enqueue, StepKind::Enqueue),
        (rarely(w.lease, ready), StepKind::Lease),
        (held(w.complete), StepKind::Complete),
        (held(w.fail), StepKind::Fail),
        (held(w.extend), StepKind::Extend),
        (held(w.crash), StepKind::Crash),
        (
            if stale.is_empty() {
                0
            } else {
                w.stale_complete
            },
            StepKind::StaleComplete,
        ),
        (rarely(w.reap, out), StepKind::Reap),
        (rarely(w.tick, out || later), StepKind::Tick),
        (
            if applying.is_empty() { 0 } else { w.effect },
            StepKind::Effect,
        ),
        (held(w.complete_lost), StepKind::CompleteLost),
        (held(w.complete_next), StepKind::CompleteNext),
        // Last, and 0 in a walk without real time: such a walk draws as
        // before.
        (
            if real_time_left(config, driver) < GRAIN_MS {
                0
            } else {
                rarely(w.wait, out || later)
            },
            StepKind::Wait,
        ),
    ];
    // Only what the queue under test supports is drawn (every kind, on the
    // reference queue: its walks are drawn as before).
    let capabilities = driver.capabilities();
    kinds.map(|(weight, kind)| {
        let supported = kind
            .operations()
            .iter()
            .all(|op| capabilities.supports(*op));
        (if supported { weight } else { 0 }, kind)
    })
}

/// A kind drawn by weight from `kinds` (one draw), or a tick when none
/// can act (no draw).
fn pick_kind(rng: &mut ChaCha8Rng, kinds: &[(u32, StepKind); 13]) -> StepKind {
    let total: u32 = kinds.iter().map(|(weight, _)| weight).sum();
    let mut kind = StepKind::Tick;
    if total > 0 {
        let mut pick = rng.random_range(0..total);
        for &(weight, k) in kinds {
            if pick < weight {
                kind = k;
                break;
            }
            pick -= weight;
        }
    }
    kind
}

/// The step of `kind` with its arguments drawn: which worker, job, delay.
fn arguments(rng: &mut ChaCha8Rng, config: &SwarmConfig, kind: StepKind, actors: &Actors) -> Step {
    let Actors {
        holding,
        stale,
        applying,
        first,
        last,
        fresh,
    } = actors;
    let (first, last) = (*first, *last);
    let grains = config.lease_ms / GRAIN_MS;
    match kind {
        StepKind::Enqueue => Step::Enqueue {
            job: match fresh {
                None => rng.random_range(first..=last),
                Some(fresh) => any(rng, fresh),
            },
        },
        // A worker that holds a lease rarely asks for another: mostly an
        // idle one does, so that leases of one job overlap across workers.
        StepKind::Lease => {
            let idle: Vec<u8> = (0..config.workers)
                .filter(|w| !holding.contains(w))
                .collect();
            let worker = if idle.is_empty() || rng.random_ratio(1, 8) {
                rng.random_range(0..config.workers)
            } else {
                any(rng, &idle)
            };
            Step::Lease { worker }
        }
        StepKind::Complete => Step::Complete {
            worker: any(rng, holding),
        },
        // The worker is drawn before the delay (fields in written order).
        StepKind::Fail => Step::Fail {
            worker: any(rng, holding),
            delay_ms: GRAIN_MS * rng.random_range(0..=grains),
        },
        StepKind::Extend => Step::Extend {
            worker: any(rng, holding),
        },
        StepKind::Crash => Step::Crash {
            worker: any(rng, holding),
        },
        StepKind::StaleComplete => Step::StaleComplete {
            worker: any(rng, stale),
        },
        StepKind::Effect => Step::Effect {
            worker: any(rng, applying),
        },
        StepKind::CompleteNext => Step::CompleteNext {
            worker: any(rng, holding),
        },
        StepKind::CompleteLost => Step::CompleteLost {
            worker: any(rng, holding),
        },
        StepKind::Reap => Step::Reap,
        StepKind::ServerKill => Step::ServerKill,
        StepKind::PowerLoss => Step::PowerLoss,
        StepKind::Parallel | StepKind::LeaseLost => unreachable!("together::draw; u never"),
        StepKind::Wait => Step::Wait {
            ms: GRAIN_MS * rng.random_range(1..=2 * grains),
        },
        StepKind::Tick => Step::Tick {
            ms: GRAIN_MS * rng.random_range(1..=2 * grains),
        },
    }
}

/// The first job index of the window the walk enqueues from: `jobs`
/// consecutive indexes, which move on once every job in them is done or
/// dead, so that a long walk keeps finding work (up to index 255).
fn window(config: &SwarmConfig, driver: &Driver) -> u8 {
    let finished = |job: u8| {
        driver
            .model()
            .job(&job_id(job))
            .is_some_and(|j| matches!(j.state(), JobState::Done | JobState::Dead))
    };
    let mut first: u8 = 0;
    while let Some(next) = first.checked_add(config.jobs) {
        if next.checked_add(config.jobs - 1).is_none() || !(first..next).all(finished) {
            break;
        }
        first = next;
    }
    first
}

/// One of `of`, which is not empty.
fn any(rng: &mut ChaCha8Rng, of: &[u8]) -> u8 {
    of[rng.random_range(0..of.len())]
}

fn refinement(steps: usize, divergence: Option<&Divergence>) -> Report {
    let mut counts = BTreeMap::new();
    let checked = match divergence {
        Some(d) => d.step_index,
        None => steps,
    };
    counts.insert("steps_agreed", checked as u64);
    Report {
        invariant: "refinement",
        verdict: if divergence.is_some() {
            Verdict::Invalid
        } else {
            Verdict::Valid
        },
        counts,
        violations: divergence
            .map(|d| check::Violation::new("refinement", None, &[], d.to_string()))
            .into_iter()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_chooses_the_same_configuration_within_its_ranges() {
        for seed in 0..200 {
            let c = SwarmConfig::from_seed(seed);
            assert_eq!(c, SwarmConfig::from_seed(seed));
            assert!((1..=4).contains(&c.jobs), "{c:?}");
            assert!((1..=3).contains(&c.workers), "{c:?}");
            assert!((1..=3).contains(&c.max_attempts), "{c:?}");
            assert!((1..=4).contains(&c.reap_limit), "{c:?}");
            assert!(c.lease_ms.is_multiple_of(GRAIN_MS) && (50..=300).contains(&c.lease_ms));
        }
    }

    #[test]
    fn some_seeds_turn_a_step_kind_off() {
        let off = (0..50)
            .map(SwarmConfig::from_seed)
            .filter(|c| c.weights.complete == 0 || c.weights.reap == 0)
            .count();
        assert!(off > 0 && off < 50, "{off}");
    }

    #[test]
    fn the_replay_command_names_the_seed_and_the_steps() {
        assert_eq!(
            replay_command(7, 200),
            "ackgap explore --seed 7 --steps 200"
        );
    }
}
