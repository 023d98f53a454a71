//! Bounded exhaustive search: every interleaving of the step vocabulary up
//! to depth D, on a small fixed configuration, breadth first, merging the
//! paths that reach the same state.
//!
//! A state is the model (rows; the indexes follow from them), the workers'
//! local state (the lease each holds, how much of its effect it applied,
//! the stale lease), the logical time, and how often each part of each
//! job's effect was applied (capped at 2): everything a later step's
//! answer can depend on. The search runs on the model alone, which is
//! cheap; each *new* state is then checked against Valkey by replaying the
//! path that reached it from an empty queue through the [`Driver`], with
//! the prefix unchecked (it was checked when its own state was new) and
//! the last step checked for outcome, refinement and structure. Replaying
//! a prefix costs a few round trips per step; restoring a dumped
//! checkpoint would cost about as many for a queue this small, and a
//! replay needs no code that the walks do not already exercise.
//!
//! **Any other queue** ([`Subject::refines`] false: `lmove`, `rpop`, an
//! `exec:` adapter) has no model to search on: the search runs on the
//! queue itself. Each transition is the path to its state replayed from
//! an empty queue, then the step, then a read of the queue, all recorded:
//! **every path's history is judged**, whatever state it reaches, by every
//! checker but no-loss (which asks where jobs ended: that needs the heal).
//! A stale settle the queue accepted is judged on the path that made it,
//! even when that path ends where a refused one does (`done`). The state
//! reached is what the queue reads back
//! ([`crate::adapter::Adapter::read`]: each job's state), the workers'
//! holdings (each lease named by its delivery, the n-th of its job, so
//! that opaque tokens, new on every replay, do not split a state), the
//! logical time, each job's effect count (capped at 2), and what the
//! history told of each job that the read does not: its deliveries and
//! the deadline or ready time last announced (the queue's attempts and
//! deadlines, which a later answer depends on). Paths that reach the same
//! such state are merged. Each new state's path is then run once more,
//! healed and judged by every history checker (as `ackgap replay` judges a
//! line), and with [`ExhaustConfig::check_merged`] every merged one too:
//! the first invalid invariant is the failure, with its replay line. On
//! another queue, a path no healed run judges (a step that changed nothing
//! the state shows, such as an empty lease while another worker holds the
//! only job; a transition into a state seen before) adds its unhealed
//! history's chances to the tally, so that what it judged is counted. Only
//! steps the queue supports are tried, and on a queue that does not refuse
//! a duplicate id (`dedup: false`) no path enqueues an id twice.
//!
//! The vocabulary at each state: enqueue of each job (a duplicate
//! included), and for each worker lease, effect, complete, complete with
//! the reply lost, fail (no delay, and a retry delay of half a lease),
//! extend, crash and stale complete when they have a lease to act on;
//! reap; time passing half a lease; and time passing *to the next
//! deadline* (the earliest lease deadline or ready-at still ahead, when it
//! is not half a lease away): one step passes a deadline, where two
//! half-lease ticks were needed before, so the late stale holder
//! (`e0 l0 t100 r l1 t100 c0`: the reaped worker acts after the next
//! holder's lease has expired too) is 7 steps deep instead of 9. From a
//! time on the half-lease grid, time also passes to one ms short of that
//! deadline and one ms past it (`e0 l0 t99 r`: a reaper a ms early); only
//! from a time on that grid, so that the branching stays bounded. The
//! delayed fail and the boundary ticks come last in a state's vocabulary,
//! so a path found before they were drawn is found first still. Their
//! cost, 2 jobs and 2 workers (model only): depth 6 1,814 → 4,029
//! states, depth 8 12,396 → 37,414 (the delay alone: 1,927 and 13,120).
//!
//! **Parallel steps** ([`ExhaustConfig::parallel`], `ackgap exhaust
//! --parallel`): at each state within the depth the search also tries two
//! callers' calls sent together (`l0+l1`, `c0+l1`, `r+c0`, ...: width 2)
//! as the path's last step. Such a path is run and judged, before healing
//! and healed, but never merged nor searched past: the order the server
//! ran the members in is not the path's to choose, so a replay of it may
//! reach another state. A race shows when its last step is the parallel
//! one (`e0 l0+l1`: a non-atomic lease, two workers handed one job with one
//! token, at depth 2); a race whose harm shows steps later is the walks'
//! (`explore --parallel`).
//!
//! # Design notes
//!
//! On the reference queue, with `judge` (`ackgap run`'s exhaust column,
//! `ackgap exhaust --judge`), each new state's path is also run healed and
//! judged by every history checker.
//!
//! On any other queue the ticks also go to the queue's own earliest
//! announced deadline (one ms short, to it, one past: `boundary_ticks`). The
//! first failure ends the search with its replay line, or, with
//! `ExhaustConfig::keep_going` (`ackgap exhaust`, `run --queue`), each
//! invariant is kept once, on its shortest path (`ExhaustFinding`), and the
//! search goes on (`ackgap exhaust --queue lmove`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use serde::Serialize;

use super::driver::{
    job_id, worker_name, Driver, DriverConfig, ExploreError, Held, Subject, Worker, START_MS,
};
use super::line::{Line, LineConfig};
use super::op::{Schedule, Step};
use super::walk::{run_schedule, SwarmConfig};
use crate::check::Verdict;
use crate::history::Recorder;
use crate::model::Model;
mod together;
mod told;
mod unhealed;
use told::{Deliveries, Told};
use unhealed::{found_unhealed, tally_unhealed, unhealed_violations};

/// What the search covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ExhaustConfig {
    /// Jobs `JOB-0 ..`.
    pub jobs: u8,
    /// Workers `w0 ..`.
    pub workers: u8,
    /// The longest path (steps).
    pub depth: usize,
    /// The lease length (ms); time passes half of it per tick.
    pub lease_ms: u64,
    /// `max_attempts` of every job.
    pub max_attempts: u64,
    /// The reap limit.
    pub reap_limit: u64,
    /// Check each new state against Valkey (false: the model alone).
    pub valkey: bool,
    /// Stop with an error past this many states.
    pub states_max: usize,
    /// Also judge each new state's path, healed, with every history
    /// checker (on the reference queue; always on for another queue,
    /// where the checkers are the only judges). Costs a walk per state.
    pub judge: bool,
    /// Also check every transition into a state reached before (off by
    /// default). A state is checked once, through the first path that
    /// reaches it; a queue that agrees with the model on that path may
    /// still answer wrongly on another path into the same model state
    /// (`r f0 l1` checked, `r l1 f0` merged: a stale fail). Checking the
    /// merged transitions too costs a replay per transition instead of per
    /// state; `ackgap mutants` turns it on. On another queue, where every
    /// path's history is judged anyway, it also heals and judges each
    /// merged path's run (a walk per transition instead of per state).
    pub check_merged: bool,
    /// On another queue than the reference, search on past a break, so
    /// that each invariant is reported once, on its shortest path (off by
    /// default: the first break ends the search, as a mutant's kill
    /// needs; `ackgap exhaust` and `run --queue` turn it on).
    pub keep_going: bool,
    /// Also try, at each state within the depth, two callers' calls sent
    /// together (a parallel step at width 2) as the path's last step:
    /// judged, never searched past (see the module docs; off by default).
    /// Needs the server (not with `valkey` off).
    pub parallel: bool,
}

impl ExhaustConfig {
    /// The small fixed configuration: lease 100 ms, max_attempts 2, reap
    /// limit 1, Valkey checks on, at most 5,000,000 states.
    pub fn new(jobs: u8, workers: u8, depth: usize) -> ExhaustConfig {
        ExhaustConfig {
            jobs,
            workers,
            depth,
            lease_ms: 100,
            max_attempts: 2,
            reap_limit: 1,
            valkey: true,
            states_max: 5_000_000,
            check_merged: false,
            judge: false,
            keep_going: false,
            parallel: false,
        }
    }

    fn driver(&self) -> DriverConfig {
        DriverConfig {
            workers: self.workers,
            lease_ms: self.lease_ms,
            max_attempts: self.max_attempts,
            reap_limit: self.reap_limit,
        }
    }
}

/// What the search found.
#[derive(Clone, Debug, Serialize)]
pub struct ExhaustReport {
    /// The configuration.
    pub config: ExhaustConfig,
    /// Distinct states reached (the empty one included).
    pub states: usize,
    /// Transitions tried: (state, step) pairs within the depth.
    pub transitions: usize,
    /// Transitions that reached a state seen before (paths merged).
    pub merged: usize,
    /// Paths whose history was judged before healing, whatever state they
    /// reached (another queue than the reference: every transition tried;
    /// 0 on the reference queue, whose every new state is checked against
    /// the model instead).
    pub paths_judged: u64,
    /// Paths that ended in a parallel step ([`ExhaustConfig::parallel`]),
    /// each run and judged as a leaf.
    pub parallel_paths: u64,
    /// New states per depth, from 0.
    pub states_by_depth: Vec<usize>,
    /// Model steps run.
    pub model_steps: u64,
    /// Valkey steps run (path replays included).
    pub valkey_steps: u64,
    /// Wall time (ms).
    pub elapsed_ms: f64,
    /// Model steps per second (the search alone, without Valkey).
    pub model_steps_per_s: f64,
    /// Valkey steps per second.
    pub valkey_steps_per_s: f64,
    /// The first failure: the path and why.
    pub failure: Option<String>,
    /// The invariant the first failure broke (`refinement` for a
    /// divergence from the model).
    pub invariant: Option<String>,
    /// The replay line of the first failure (`ackgap replay LINE`).
    pub line: Option<String>,
    /// The history checkers' verdicts over every judged state's run, by
    /// invariant. Empty unless histories were judged
    /// ([`ExhaustConfig::judge`], or another queue than the reference).
    pub judged: BTreeMap<&'static str, Judged>,
    /// Every invariant the search broke, once each, with the first path
    /// that broke it (breadth first: a shortest one). On another queue
    /// than the reference the search goes on past a break, so that one
    /// shallow break does not hide the others; on the reference queue it
    /// stops at the first (the first of these).
    pub findings: Vec<ExhaustFinding>,
}

/// One invariant an exhaustive search broke, on its shortest path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExhaustFinding {
    /// The invariant (`refinement` for a divergence from the model).
    pub invariant: String,
    /// The path and why.
    pub failure: String,
    /// The replay line of the path (`ackgap replay LINE`).
    pub line: String,
}

impl ExhaustReport {
    /// Counts a new state, reached at `depth + 1`.
    fn new_state(&mut self, depth: usize) {
        self.states += 1;
        if self.states_by_depth.len() <= depth + 1 {
            self.states_by_depth.push(0);
        }
        self.states_by_depth[depth + 1] += 1;
    }

    /// Notes that `invariant` broke on the path `line` (why: `failure`):
    /// kept when it is the first break of that invariant; the first break
    /// of all is also the report's `failure`, `invariant` and `line`.
    fn found(&mut self, invariant: &str, failure: String, line: String) {
        if self.failure.is_none() {
            self.failure = Some(failure.clone());
            self.invariant = Some(invariant.to_owned());
            self.line = Some(line.clone());
        }
        if !self.findings.iter().any(|f| f.invariant == invariant) {
            self.findings.push(ExhaustFinding {
                invariant: invariant.to_owned(),
                failure,
                line,
            });
        }
    }
}

/// One invariant over the judged runs of a search: its tally (the worst
/// verdict where a run exercised it, the runs that did not, the chances
/// to break it) and how many runs were invalid or unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Judged {
    /// The runs' tally ([`crate::check::Tally`]).
    #[serde(flatten)]
    pub tally: crate::check::Tally,
    /// Runs with an `invalid` verdict.
    pub invalid: u64,
    /// Runs with an `unknown` verdict (not counting those that did not
    /// exercise it).
    pub unknown: u64,
}

impl Judged {
    /// Adds one run's report of the invariant.
    fn add(&mut self, r: &crate::check::Report) {
        self.tally.add(r);
        if !r.not_exercised() {
            self.invalid += u64::from(r.verdict == Verdict::Invalid);
            self.unknown += u64::from(r.verdict == Verdict::Unknown);
        }
    }
}

/// The part of a state the search merges on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    model: Model,
    workers: Vec<Worker>,
    now_ms: u64,
    effects: BTreeMap<(String, usize), u8>,
}

/// The model-side stepper: the driver's semantics on the model alone,
/// without the history. Returns false when the step does nothing (an idle
/// worker).
fn step_model(s: &mut State, step: &Step, cfg: &DriverConfig, parts: usize) -> bool {
    let now = s.now_ms;
    match *step {
        Step::Enqueue { job } => {
            let payload = Driver::payload(true, job, 0);
            let _ = s
                .model
                .enqueue(&job_id(job), payload.as_bytes(), cfg.max_attempts, 0, now);
        }
        Step::Lease { worker } => {
            if let Ok(Some(lease)) = s.model.lease(&worker_name(worker), cfg.lease_ms, now) {
                let w = &mut s.workers[usize::from(worker)];
                if let Some(old) = w.held.take() {
                    w.stale = Some(old);
                }
                w.held = Some(Held::from(lease));
            }
        }
        // Not in the search's vocabulary (a reduction's step): the job is
        // leased to no worker that knows it.
        Step::LeaseLost { worker } => {
            let _ = s.model.lease(&worker_name(worker), cfg.lease_ms, now);
        }
        Step::Effect { worker } => {
            let w = &mut s.workers[usize::from(worker)];
            let Some(h) = w.held.as_mut().filter(|h| h.parts_done < parts) else {
                return false;
            };
            let n = s.effects.entry((h.id.clone(), h.parts_done)).or_default();
            *n = (*n + 1).min(2);
            h.parts_done += 1;
        }
        Step::Complete { worker }
        | Step::StaleComplete { worker }
        | Step::CompleteLost { worker }
        | Step::CompleteNext { worker } => return complete_model(s, step, worker, cfg, parts),
        Step::Parallel { ref steps } => return together::parallel_model(s, steps, cfg, parts),
        Step::Fail { worker, delay_ms } => {
            let Some(h) = s.workers[usize::from(worker)].held.take() else {
                return false;
            };
            let _ = s.model.fail(&h.id, h.token, delay_ms, now);
        }
        Step::Extend { worker } => {
            let Some(h) = s.workers[usize::from(worker)].held.clone() else {
                return false;
            };
            let _ = s.model.extend(&h.id, h.token, cfg.lease_ms, now);
        }
        Step::Crash { worker } => {
            let w = &mut s.workers[usize::from(worker)];
            let Some(h) = w.held.take() else {
                return false;
            };
            w.stale = Some(h);
        }
        Step::Reap => _ = s.model.reap(cfg.reap_limit, now),
        Step::Tick { ms } | Step::Wait { ms } => s.now_ms = now.saturating_add(ms),
        // Not in the search's vocabulary: the server's faults are walks'.
        Step::ServerKill | Step::PowerLoss => return false,
    }
    true
}

/// [`step_model`] for the completes of `worker` (stale, reply lost, next
/// leased): the rest of the effect applied first. False when the worker
/// holds no lease to complete.
fn complete_model(
    s: &mut State,
    step: &Step,
    worker: u8,
    cfg: &DriverConfig,
    parts: usize,
) -> bool {
    let now = s.now_ms;
    let stale = matches!(step, Step::StaleComplete { .. });
    let lost = matches!(step, Step::CompleteLost { .. });
    let next = matches!(step, Step::CompleteNext { .. });
    let w = &mut s.workers[usize::from(worker)];
    let slot = if stale { &mut w.stale } else { &mut w.held };
    let Some(mut h) = slot.take() else {
        return false;
    };
    while h.parts_done < parts {
        let n = s.effects.entry((h.id.clone(), h.parts_done)).or_default();
        *n = (*n + 1).min(2);
        h.parts_done += 1;
    }
    let _ = s.model.complete(&h.id, h.token);
    if lost {
        *slot = Some(h);
    } else if next {
        // The same call leases the next job.
        if let Ok(Some(lease)) = s.model.lease(&worker_name(worker), cfg.lease_ms, now) {
            *slot = Some(Held::from(lease));
        }
    }
    true
}

/// The steps that can act in `s`.
fn vocabulary(s: &State, c: &ExhaustConfig, parts: usize) -> Vec<Step> {
    let mut out: Vec<Step> = (0..c.jobs).map(|job| Step::Enqueue { job }).collect();
    for worker in 0..c.workers {
        let w = &s.workers[usize::from(worker)];
        out.push(Step::Lease { worker });
        if let Some(h) = &w.held {
            if h.parts_done < parts {
                out.push(Step::Effect { worker });
            }
            out.push(Step::Complete { worker });
            out.push(Step::CompleteLost { worker });
            out.push(Step::Fail {
                worker,
                delay_ms: 0,
            });
            out.push(Step::Extend { worker });
            out.push(Step::Crash { worker });
        }
        if w.stale.is_some() {
            out.push(Step::StaleComplete { worker });
        }
    }
    out.push(Step::Reap);
    out.push(Step::Tick { ms: c.lease_ms / 2 });
    let ahead = to_next_deadline(s);
    if let Some(ms) = ahead.filter(|ms| *ms != c.lease_ms / 2) {
        out.push(Step::Tick { ms });
    }
    // A fail with a retry delay of half a lease: a queue that makes a
    // job ready earlier than the ready time it answers shows only after
    // a delay. (Last, as the boundary ticks: the paths found before they
    // were drawn are found first still.)
    for worker in 0..c.workers {
        if s.workers[usize::from(worker)].held.is_some() {
            out.push(Step::Fail {
                worker,
                delay_ms: c.lease_ms / 2,
            });
        }
    }
    // A ms either side of the next deadline or ready time: the boundary a
    // reaper or a lease may cross a ms too early or too late; only from a
    // time on the half-lease grid (a path goes off it once, then back by
    // the ticks above), which keeps the states bounded.
    let on_grid = (s.now_ms - START_MS).is_multiple_of((c.lease_ms / 2).max(1));
    if let Some(ahead) = ahead.filter(|_| on_grid) {
        for ms in [ahead - 1, ahead + 1] {
            let tick = Step::Tick { ms };
            if ms > 0 && !out.contains(&tick) {
                out.push(tick);
            }
        }
    }
    out
}

/// How far (ms) the earliest lease deadline or ready-at still ahead of
/// `s`'s time is: a tick of that long passes it (a deadline at `now` has
/// expired).
fn to_next_deadline(s: &State) -> Option<u64> {
    s.model
        .jobs()
        .filter_map(|(_, job)| match job.state() {
            crate::queue::JobState::Pending | crate::queue::JobState::Active => job.score_ms(),
            _ => None,
        })
        .filter(|at| *at > s.now_ms)
        .min()
        .map(|at| at - s.now_ms)
}

/// Searches every interleaving up to `config.depth` on the reference
/// queue of `subject` (whose consumer the workers run), checking each new
/// state against Valkey unless `config.valkey` is off.
pub async fn exhaust(
    subject: &Subject,
    config: ExhaustConfig,
) -> Result<ExhaustReport, ExploreError> {
    if !subject.refines() {
        return exhaust_blind(subject, config).await;
    }
    let started = Instant::now();
    let cfg = config.driver();
    let parts = subject.consumer.parts();
    let root = root_state(&config);
    // Each state's path is kept as (parent index, step), to replay it.
    let mut seen: HashMap<State, usize> = HashMap::new();
    let mut parent: Vec<Option<(usize, Step)>> = vec![None];
    seen.insert(root.clone(), 0);
    let mut frontier: VecDeque<(State, usize, usize)> = VecDeque::from([(root, 0, 0)]);
    let mut report = root_report(config);
    let mut model_time = std::time::Duration::ZERO;
    let mut valkey_time = std::time::Duration::ZERO;
    while let Some((state, index, depth)) = frontier.pop_front() {
        if depth >= config.depth {
            continue;
        }
        for step in vocabulary(&state, &config, parts) {
            let t = Instant::now();
            let mut next = state.clone();
            let acted = step_model(&mut next, &step, &cfg, parts);
            report.model_steps += 1;
            model_time += t.elapsed();
            if !acted {
                continue;
            }
            report.transitions += 1;
            if seen.contains_key(&next) {
                report.merged += 1;
                if config.valkey && config.check_merged {
                    let mut path = path_to(&parent, index);
                    path.push(step);
                    let failed =
                        check_on_valkey(subject, &cfg, path, &next, &mut report, &mut valkey_time)
                            .await?;
                    if failed {
                        return Ok(finish(report, started, model_time, valkey_time));
                    }
                }
                continue;
            }
            if seen.len() >= config.states_max {
                return Err(states_max_reached(seen.len(), depth, &config));
            }
            let new = parent.len();
            parent.push(Some((index, step)));
            seen.insert(next.clone(), new);
            report.new_state(depth);
            let path = (&parent[..], new);
            if check_new(subject, &config, path, &next, &mut report, &mut valkey_time).await? {
                return Ok(finish(report, started, model_time, valkey_time));
            }
            frontier.push_back((next, new, depth + 1));
        }
        let leaves = together::judge_leaves(
            subject,
            &config,
            (&parent, index),
            &state,
            &mut report,
            &mut valkey_time,
        );
        if leaves.await? {
            return Ok(finish(report, started, model_time, valkey_time));
        }
    }
    Ok(finish(report, started, model_time, valkey_time))
}

/// Checks the path to new state `index` (built from `parent` only when
/// `config.valkey`) on Valkey, and judges its run (with `config.judge`),
/// adding the time to `valkey_time`: true when it failed.
async fn check_new(
    subject: &Subject,
    config: &ExhaustConfig,
    (parent, index): (&[Option<(usize, Step)>], usize),
    next: &State,
    report: &mut ExhaustReport,
    valkey_time: &mut std::time::Duration,
) -> Result<bool, ExploreError> {
    if !config.valkey {
        return Ok(false);
    }
    let path = path_to(parent, index);
    let cfg = config.driver();
    if check_on_valkey(subject, &cfg, path.clone(), next, report, valkey_time).await? {
        return Ok(true);
    }
    if !config.judge {
        return Ok(false);
    }
    let t = Instant::now();
    let judged = judge_path(subject, config, &path, report).await?;
    *valkey_time += t.elapsed();
    Ok(judged)
}

/// The state the search starts from: an empty queue, idle workers, the
/// start of time, no effect applied.
fn root_state(config: &ExhaustConfig) -> State {
    State {
        model: Model::new(),
        workers: vec![Worker::default(); usize::from(config.workers)],
        now_ms: START_MS,
        effects: BTreeMap::new(),
    }
}

/// The report of a search that has seen only the root state.
fn root_report(config: ExhaustConfig) -> ExhaustReport {
    ExhaustReport {
        config,
        states: 1,
        transitions: 0,
        merged: 0,
        paths_judged: 0,
        parallel_paths: 0,
        states_by_depth: vec![1],
        model_steps: 0,
        valkey_steps: 0,
        elapsed_ms: 0.0,
        model_steps_per_s: 0.0,
        valkey_steps_per_s: 0.0,
        failure: None,
        invariant: None,
        line: None,
        judged: BTreeMap::new(),
        findings: Vec::new(),
    }
}

/// Checks `path`, which reaches `next`, against Valkey, adding its time to
/// `valkey_time` and its steps to `report`: true when it failed, the
/// failure written into `report`.
async fn check_on_valkey(
    subject: &Subject,
    cfg: &DriverConfig,
    path: Vec<Step>,
    next: &State,
    report: &mut ExhaustReport,
    valkey_time: &mut std::time::Duration,
) -> Result<bool, ExploreError> {
    let t = Instant::now();
    let checked = check_path(subject, cfg, &path, next).await;
    *valkey_time += t.elapsed();
    report.valkey_steps += path.len() as u64;
    if let Err(why) = checked? {
        let config = report.config;
        let failure = format!("{}: {why}", Schedule(path.clone()));
        report.found(
            "refinement",
            failure,
            line_of(subject, &config, path).to_string(),
        );
        return Ok(true);
    }
    Ok(false)
}

/// The replay line of `path` on `subject` with `config`'s settings.
fn line_of(subject: &Subject, config: &ExhaustConfig, path: Vec<Step>) -> Line {
    Line {
        queue: subject.adapter.name().to_owned(),
        consumer: subject.consumer.name().to_owned(),
        config: line_config(config),
        schedule: Schedule(path),
    }
}

/// The settings a replay line of the search carries.
pub(crate) fn line_config(config: &ExhaustConfig) -> LineConfig {
    LineConfig {
        jobs: config.jobs,
        workers: config.workers,
        lease_ms: config.lease_ms,
        max_attempts: config.max_attempts,
        reap_limit: config.reap_limit,
    }
}

/// Runs `path` on `subject` as a replay line runs (checked, healed, read
/// back) and judges it with every history checker; adds the verdicts to
/// `report.judged`. True when an invariant the subject promises is
/// invalid: the failure is written into `report`.
async fn judge_path(
    subject: &Subject,
    config: &ExhaustConfig,
    path: &[Step],
    report: &mut ExhaustReport,
) -> Result<bool, ExploreError> {
    let swarm = SwarmConfig::from_line(&line_config(config));
    let schedule = Schedule(path.to_vec());
    let run = run_schedule(subject, &swarm, &schedule).await?;
    report.valkey_steps += run.steps as u64;
    for r in &run.invariants {
        report.judged.entry(r.invariant).or_default().add(r);
    }
    let mut broke = false;
    for (invariant, why) in run.findings() {
        let invalid = run
            .invariants
            .iter()
            .any(|r| r.invariant == invariant && r.verdict == Verdict::Invalid);
        if invalid {
            broke = true;
            report.found(
                invariant,
                format!("{schedule}: {invariant}: {why}"),
                run.line.clone(),
            );
        }
    }
    Ok(broke)
}

/// The part of a state the search on another queue merges on: what the
/// queue reads back (each job's state, and its payload when the queue
/// reads payloads), the workers (each lease named by its delivery, not by
/// its token: see [`Deliveries`]), the time, the effects, and what the
/// history so far says of each job that the queue's read does not:
/// how often it was delivered and the deadline or ready time the queue
/// last announced for it. Two paths merge only when a later step's answer
/// and a later checker's verdict cannot tell them apart by any of these:
/// a job delivered twice is not merged with one delivered once (the
/// queue's attempts, which its read does not show), and a lease extended
/// is not merged with one that was not.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct BlindState {
    jobs: BTreeMap<String, String>,
    payloads: BTreeMap<String, String>,
    workers: Vec<Worker>,
    now_ms: u64,
    effects: BTreeMap<String, u64>,
    told: BTreeMap<String, Told>,
}

/// The search on a queue that is not the reference (see the module docs):
/// each transition replayed on the queue and its history judged, states
/// merged by what the queue reads back and what the history told, each
/// new state's run healed and judged by every history checker.
async fn exhaust_blind(
    subject: &Subject,
    config: ExhaustConfig,
) -> Result<ExhaustReport, ExploreError> {
    let started = Instant::now();
    let cfg = config.driver();
    let mut report = root_report(config);
    let (root, root_model, _) = replay_blind(subject, &cfg, &[]).await?;
    let mut seen: HashMap<BlindState, ()> = HashMap::from([(root.clone(), ())]);
    let mut frontier: VecDeque<(Vec<Step>, BlindState, Model, usize)> =
        VecDeque::from([(Vec::new(), root, root_model, 0)]);
    // The whole search is the queue's time: no model search of its own.
    let failed = |report: ExhaustReport| {
        finish(
            report,
            started,
            std::time::Duration::ZERO,
            started.elapsed(),
        )
    };
    while let Some((path, state, model, depth)) = frontier.pop_front() {
        if depth >= config.depth {
            continue;
        }
        let steps = blind_vocabulary(subject, &config, &path, &state, model);
        for step in steps {
            let leaf = matches!(step, Step::Parallel { .. });
            let mut next_path = path.clone();
            next_path.push(step);
            let (next, next_model, events) = replay_blind(subject, &cfg, &next_path).await?;
            report.valkey_steps += next_path.len() as u64;
            // Every path is judged, whatever state it reaches: a stale
            // settle accepted may end where a refused one does.
            report.paths_judged += 1;
            report.parallel_paths += u64::from(leaf);
            let reports = crate::check::check_all(&events);
            let broken = unhealed_violations(&reports);
            found_unhealed(&mut report, subject, &config, &next_path, &broken);
            if !broken.is_empty() || leaf {
                // The same path run healed and judged by every checker, as
                // a new state's is: the judged runs then count every
                // invariant it breaks, what only the heal shows (a second
                // settle, a job left unfinished) included, so that the
                // table and the findings name the same invariants. A path
                // ending in a parallel step is judged so too, and never
                // searched past: a replay of it may reach another state.
                let judged = judge_path(subject, &config, &next_path, &mut report).await?;
                if (judged || !broken.is_empty()) && !config.keep_going {
                    return Ok(failed(report));
                }
                // Searched on: a deeper path may break another invariant.
                // This path is not extended (what follows a break is
                // judged from a broken state).
                continue;
            }
            if next == state {
                // The step did nothing the state shows (an idle worker,
                // nothing to reap): its history is judged as it ran.
                tally_unhealed(&mut report, &reports);
                continue;
            }
            report.transitions += 1;
            if seen.contains_key(&next) {
                report.merged += 1;
                if !config.check_merged {
                    tally_unhealed(&mut report, &reports);
                } else if judge_path(subject, &config, &next_path, &mut report).await?
                    && !config.keep_going
                {
                    return Ok(failed(report));
                }
                continue;
            }
            if seen.len() >= config.states_max {
                return Err(states_max_reached(seen.len(), depth, &config));
            }
            seen.insert(next.clone(), ());
            report.new_state(depth);
            if judge_path(subject, &config, &next_path, &mut report).await? {
                if !config.keep_going {
                    return Ok(failed(report));
                }
                // Its healed run broke something: searched on, but not
                // from this state.
                continue;
            }
            frontier.push_back((next_path, next, next_model, depth + 1));
        }
    }
    Ok(failed(report))
}

/// The steps tried from `state`, reached by `path`, in the search on
/// another queue: the model's search's vocabulary, from the workers the
/// queue left and the model beside it (`model`: a guide, whose deadlines
/// say where the next deadline is), the ticks to the queue's own announced
/// boundaries, and the parallel leaves, less what the queue does not
/// support and a second enqueue of an id on a queue without dedup.
fn blind_vocabulary(
    subject: &Subject,
    config: &ExhaustConfig,
    path: &[Step],
    state: &BlindState,
    model: Model,
) -> Vec<Step> {
    let capabilities = subject.adapter.capabilities();
    let parts = subject.consumer.parts();
    // The vocabulary of the model's search, from the workers the queue
    // left and the model beside it (a guide: its deadlines say where
    // the next deadline is), less what the queue does not support.
    let guide = State {
        model,
        workers: state.workers.clone(),
        now_ms: state.now_ms,
        effects: BTreeMap::new(),
    };
    // On a queue that does not refuse a duplicate id, an id is
    // enqueued once per path: a second enqueue is a second message.
    let again = |step: &Step| {
        matches!(step, Step::Enqueue { .. }) && !capabilities.dedup && path.contains(step)
    };
    // (Its fails with a retry delay are what delay-respected, this
    // queue's only judge of a ready time, judges a lease against.)
    let mut steps = vocabulary(&guide, config, parts);
    // Time to the queue's own next deadline or ready time, as it
    // announced it (a queue may not honour the lease it is asked for:
    // RQ counts in whole seconds), and to either side of it by a ms:
    // the boundary a reaper or a lease may cross too early or too late.
    for ms in told::boundary_ticks(&state.told, state.now_ms) {
        let tick = Step::Tick { ms };
        if !steps.contains(&tick) {
            steps.push(tick);
        }
    }
    // The parallel leaves (with `parallel`), after the steps: a path
    // ending in one is judged, not searched past.
    if config.parallel {
        steps.extend(together::parallel_leaves(&guide));
    }
    steps
        .into_iter()
        .filter(|step| {
            step.operations()
                .iter()
                .all(|op| capabilities.supports(*op))
                && !again(step)
        })
        .collect()
}

/// Replays `path` on `subject` from an empty queue, unchecked, reads the
/// state it reached (the read recorded, so the checkers judge it), and
/// answers that state, the guiding model's, and the path's history.
async fn replay_blind(
    subject: &Subject,
    cfg: &DriverConfig,
    path: &[Step],
) -> Result<(BlindState, Model, Vec<crate::history::Event>), ExploreError> {
    let setup = |during| move |source| ExploreError::Setup { during, source };
    let mut driver = Driver::start_on(subject, *cfg, Recorder::in_memory())
        .await
        .map_err(setup("clearing the queue"))?;
    driver.set_fixed_payloads(true);
    driver.set_checked(false);
    for step in path {
        driver.apply(step).await?;
    }
    let (read, counts) = driver
        .read_with_effects()
        .await
        .map_err(setup("reading the queue"))?;
    let effects = counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(id, n)| (id, n.min(2)))
        .collect();
    let events = driver.recorder().events();
    let deliveries = Deliveries::of(&events);
    let state = BlindState {
        jobs: read.jobs,
        payloads: read.payloads,
        workers: driver
            .workers()
            .iter()
            .map(|w| deliveries.name(w))
            .collect(),
        now_ms: driver.now_ms(),
        effects,
        told: deliveries.told,
    };
    Ok((state, driver.model().clone(), events))
}

/// The error of a search that has seen `seen` states, at `depth`, when
/// the next would pass `config.states_max`.
fn states_max_reached(seen: usize, depth: usize, config: &ExhaustConfig) -> ExploreError {
    ExploreError::Limit {
        what: format!(
            "exhaustive search: {} states reached at depth {}, past states_max {}; lower the depth or raise the limit",
            seen,
            depth + 1,
            config.states_max
        ),
    }
}

/// `report` with its elapsed time and its model and Valkey step rates.
fn finish(
    mut report: ExhaustReport,
    started: Instant,
    model: std::time::Duration,
    valkey: std::time::Duration,
) -> ExhaustReport {
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    report.model_steps_per_s = report.model_steps as f64 / model.as_secs_f64().max(1e-9);
    report.valkey_steps_per_s = report.valkey_steps as f64 / valkey.as_secs_f64().max(1e-9);
    report
}

fn path_to(parent: &[Option<(usize, Step)>], mut index: usize) -> Vec<Step> {
    let mut out = Vec::new();
    while let Some((up, step)) = &parent[index] {
        out.push(step.clone());
        index = *up;
    }
    out.reverse();
    out
}

/// Replays `path` on Valkey from an empty queue, checking the last step,
/// and compares the driver's state with the search's. `Ok(Err(why))` is a
/// finding.
async fn check_path(
    subject: &Subject,
    cfg: &DriverConfig,
    path: &[Step],
    expected: &State,
) -> Result<Result<(), String>, ExploreError> {
    let mut driver = Driver::start_on(subject, *cfg, Recorder::in_memory())
        .await
        .map_err(|source| ExploreError::Setup {
            during: "clearing the queue",
            source,
        })?;
    driver.set_fixed_payloads(true);
    for (i, step) in path.iter().enumerate() {
        driver.set_checked(i + 1 == path.len());
        match driver.apply(step).await {
            Ok(_) => {}
            Err(ExploreError::Divergence(d)) => return Ok(Err(d.to_string())),
            Err(e) => return Err(e),
        }
    }
    if driver.model() != &expected.model || driver.workers() != expected.workers.as_slice() {
        return Ok(Err(
            "the search's stepper and the driver disagree on the state".into(),
        ));
    }
    Ok(Ok(()))
}
