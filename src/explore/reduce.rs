//! From a wall-clock history to an exact replay: the operations on the job
//! a violation names, written as explorer steps in an order the history
//! allows, the time between them as ticks, run on logical time on a fresh
//! queue and kept when they break the same invariant; then shrunk as a
//! walk is shrunk, and run again to count how often the replay fails.
//!
//! A chaos run's `rerun:` line runs its seed again on the wall clock and
//! may not find the same thing; the replay line this module gives runs the
//! same steps at the same logical instants every time.
//!
//! # Design notes
//!
//! - Which operations: every operation on the violation's job (its
//!   enqueues, the leases that granted it, the settles, extends and effects
//!   carrying one of its tokens, the crashes of a worker holding it) and
//!   the reaps whose reply names it. A heartbeat's process (`w3-hb2`) is its
//!   worker's (`w3`). Operations on other jobs are left out: they are what a
//!   shrink would remove first. A clock jump forward of the server
//!   (`clock-jump`, fired) is time passing at once: a tick of its size; a
//!   kill -9 (`server-kill`) is `K` and a power loss `P`, on a server the
//!   explorers own ([`server_faults`] says what the reduction needs).
//! - Which order: an operation took effect somewhere between its
//!   invocation and its completion. Two orders are tried, each a
//!   linearization when no two kept operations overlap: by completion
//!   (a reply read late, after a newer lease: the stale settle that chaos
//!   finds), then by invocation. When two kept calls of different callers
//!   overlapped on the wire, a third schedule sends them together: by
//!   invocation, each overlapping pair joined into one parallel step
//!   (`l0+l1`, both calls on the wire before either answer is read: a
//!   non-atomic lease's race). When a lease was answered unknown while
//!   the job was owed (a partition, a dropped reply: it may have taken the
//!   job), a fourth schedule writes it as a lease whose reply is lost
//!   (`u0`, by invocation). The overlaps and the unknown leases are named
//!   when no order reproduces the violation.
//! - What a step can say: the explorer's workers hold one lease and keep
//!   one stale one (a worker that leases again or crashes keeps the old
//!   lease as its stale lease). A settle carrying the held token is `c`,
//!   `f`, `x`; a complete carrying the stale token is `s`; anything else
//!   (a stale fail or extend, a token older than the stale one) has no
//!   step and is listed as dropped.
//! - Time: the tick before a step is the wall-clock time between the two
//!   operations' chosen instants (completion or invocation), on the lease
//!   length the chaos run used, so a deadline passed in the history is
//!   passed in the replay.

use std::collections::BTreeMap;
use std::fmt;

use crate::check::{ops, Op, Violation};
use crate::history::{Action, Event, EventKind, F};
use crate::server::{Instruments, Persistence, Server, ServerSpec};

use super::driver::{ExploreError, Subject};
use super::line::LineConfig;
use super::op::{Schedule, Step};
use super::shrink::{shrink_for, Shrunk};
use super::walk::{run_schedule, SwarmConfig};

/// The instant of an operation a schedule is ordered by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// Each operation where its reply came (a reply read late lands after
    /// what overtook it).
    Completion,
    /// Each operation where it was sent.
    Invocation,
    /// Each operation where it was sent, and two calls of different
    /// callers that overlapped on the wire joined into one parallel step
    /// (`l0+l1`): both sent before either answer is read, as they were.
    Together,
    /// Each operation where it was sent, and each lease answered unknown
    /// while the job was owed (a partition, a dropped reply, a server
    /// down) written as a lease whose reply is lost (`u0`): the server
    /// may have granted the job to a worker that never knew.
    Unknown,
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Order::Completion => "by completion",
            Order::Invocation => "by invocation",
            Order::Together => "by invocation, overlapping calls as parallel steps",
            Order::Unknown => "by invocation, leases answered unknown as lost replies",
        })
    }
}

/// A schedule read off a history for one job.
#[derive(Clone, Debug)]
pub struct Extraction {
    /// The order the steps follow.
    pub order: Order,
    /// The steps (before shrinking).
    pub schedule: Schedule,
    /// The replay line's settings: one job, the workers seen, the chaos
    /// run's lease and max_attempts.
    pub config: LineConfig,
    /// The history's process behind each worker index (`w0` is the
    /// first).
    pub workers: Vec<String>,
    /// Operations on the job no step can say, in words.
    pub dropped: Vec<String>,
    /// Pairs of kept operations of two processes whose calls overlapped on
    /// the wire (events `invoke..completion` of each), in words.
    pub overlaps: Vec<String>,
    /// Ticks added before reaps, past the deadlines the replay's queue
    /// announced (`stretched`), in ms; 0 when none was needed.
    pub stretched_ms: u64,
}

/// The worker a process is: a heartbeat (`w3-hb2`) is its worker's.
fn worker_of(process: &str) -> &str {
    process.split_once("-hb").map_or(process, |(w, _)| w)
}

/// The job ids a reap's reply names.
fn reaped<'a>(op: &Op<'a>) -> Vec<&'a str> {
    let Some(done) = op.done.filter(|e| e.kind == EventKind::Ok) else {
        return Vec::new();
    };
    let Some(list) = done
        .value
        .as_ref()
        .and_then(|v| v.get("reaped")?.as_array())
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|r| r.get("id").and_then(|i| i.as_str()).or(r.as_str()))
        .collect()
}

/// How far a clock jump moved the server's clock forward (a `clock-jump`
/// fault that fired), in ms: on logical time, time passing at once. A jump
/// back (its heal) has no step: logical time only moves forward.
fn jumped_ms(event: &Event) -> Option<u64> {
    let fault = event.fault()?;
    let jumped = fault.detail.get("hit")?.get("jumped_ms")?.as_i64()?;
    (fault.fault == crate::fault::FaultKind::ClockJump && fault.action == Action::Fired)
        .then_some(u64::try_from(jumped).ok()?)
        .filter(|ms| *ms > 0)
}

/// The step a server fault that fired is (`server-kill`: `K`, a kill -9
/// and a restart; `power-loss`: `P`): the explorers take these two.
fn server_fault(event: &Event) -> Option<Step> {
    let fault = event.fault()?;
    if fault.action != Action::Fired {
        return None;
    }
    match fault.fault {
        crate::fault::FaultKind::ServerKill => Some(Step::ServerKill),
        crate::fault::FaultKind::PowerLoss => Some(Step::PowerLoss),
        _ => None,
    }
}

/// What a reduction of `history` needs of its server: `(kill, power
/// loss)`, true when a step of that fault may be read off it (a server the
/// explorers own, [`super::OwnedServer`]; the power-loss shim).
pub fn server_faults(history: &[Event]) -> (bool, bool) {
    let steps: Vec<Step> = history.iter().filter_map(server_fault).collect();
    (
        steps.contains(&Step::ServerKill),
        steps.contains(&Step::PowerLoss),
    )
}

/// Starts the server a reduction of `history` runs on: one whose clock
/// the explorers own ([`Server::start_for_explorers`]), or, when the
/// history holds a kill or a power loss a step may say, a server with the
/// power-loss shim where needed, to be lent to the subject
/// ([`super::OwnedServer`]; its queues that read the server's clock then
/// run on real time, as `explore` with server steps does).
pub async fn start_server(
    spec: &ServerSpec,
    persistence: Persistence,
    history: &[Event],
) -> Result<Server, crate::server::ServerError> {
    match server_faults(history) {
        (false, false) => Ok(Server::start_for_explorers(spec, persistence).await?.0),
        (_, power_loss) => {
            let instruments = Instruments {
                power_loss,
                clock: false,
            };
            Server::start_instrumented(spec, persistence, instruments).await
        }
    }
}

/// Why `schedule`, shrunk on `subject`, would not replay as it ran here:
/// its queue follows the server's clock and ran on real time (the server
/// was started without libfaketime for the history's kill or power
/// loss), and the shrinker took its server steps out, so the line, pasted,
/// runs on logical time: what broke here is not claimed of it.
fn replays_elsewhere(subject: &Subject, schedule: &Schedule) -> Option<&'static str> {
    let caps = subject.adapter.capabilities();
    let steps = schedule.steps().iter().any(Step::is_server_fault);
    let real_time_here = subject.server.is_some() && subject.clock.is_none();
    (caps.follows_clock && caps.logical_time && real_time_here && !steps).then_some(
        "shrunk to no kill or power loss: pasted, the line runs on logical time, \
         while it was shrunk on the server clock (a server without libfaketime, for the kill): \
         not claimed",
    )
}

/// What one worker of the schedule holds, in history tokens.
#[derive(Default, Clone, Copy)]
struct Hold {
    held: Option<u64>,
    stale: Option<u64>,
}

impl Hold {
    /// The worker leases again or crashes: the held lease becomes stale.
    fn abandon(&mut self) {
        if self.held.is_some() {
            self.stale = self.held.take();
        }
    }
}

/// The operations on `job` a step can be made of, with the instant each is
/// ordered by.
fn relevant<'a>(history: &'a [Event], job: &str, order: Order) -> Vec<(u64, u64, Op<'a>)> {
    let mut kept: Vec<(u64, u64, Op<'a>)> = Vec::new();
    for op in ops(history) {
        let Some(done) = op.done else { continue };
        let on_job = match op.f() {
            F::Reap => reaped(&op).contains(&job),
            F::Lease => op.is_ok() && op.job() == Some(job) && op.token().is_some(),
            F::Enqueue | F::Complete | F::Fail | F::Extend | F::Effect | F::Crash => {
                op.job() == Some(job) && done.kind != EventKind::Fail
            }
            F::Fault => jumped_ms(done).is_some() || server_fault(done).is_some(),
            _ => false,
        };
        if !on_job {
            continue;
        }
        let (index, time) = match order {
            Order::Completion => (done.index, done.time_ms),
            Order::Invocation | Order::Together | Order::Unknown => {
                (op.invoke.index, op.invoke.time_ms)
            }
        };
        kept.push((index, time, op));
    }
    kept.sort_by_key(|(index, _, _)| *index);
    if order == Order::Unknown {
        let unknown = unknown_lease_ops(history, &kept);
        kept.extend(
            unknown
                .into_iter()
                .map(|op| (op.invoke.index, op.invoke.time_ms, op)),
        );
        kept.sort_by_key(|(index, _, _)| *index);
    }
    kept
}

/// A lease with no known answer: answered `info`, or never answered.
fn unknown_answer(op: &Op<'_>) -> bool {
    op.done.is_none_or(|e| e.kind == EventKind::Info)
}

/// Leases answered unknown while the job was owed (after its first
/// enqueue, before its last kept operation), in words: any of them may
/// have taken the job ([`Order::Unknown`] writes them as `u` steps).
fn unknown_leases(history: &[Event], kept: &[(u64, u64, Op<'_>)]) -> Vec<String> {
    unknown_lease_ops(history, kept)
        .iter()
        .map(|op| {
            format!(
                "{}: answered unknown, it may have taken the job (written as a lease whose reply is lost, `u`, {})",
                describe_op(op),
                Order::Unknown
            )
        })
        .collect()
}

/// The leases answered unknown while the job was owed: after the first
/// kept operation was sent, before the last one ended.
fn unknown_lease_ops<'a>(history: &'a [Event], kept: &[(u64, u64, Op<'a>)]) -> Vec<Op<'a>> {
    let (Some(first), Some(last)) = (kept.first(), kept.last()) else {
        return Vec::new();
    };
    let (from, to) = (first.2.invoke.index, last.2.end());
    ops(history)
        .into_iter()
        .filter(|op| op.f() == F::Lease && op.invoke.index > from && op.invoke.index < to)
        .filter(unknown_answer)
        .collect()
}

/// The step `op` is for worker `worker` holding `hold` (history tokens),
/// updating `hold`; `None` when no step says it.
fn step_for(op: &Op<'_>, worker: Option<u8>, hold: Option<&mut Hold>) -> Option<Step> {
    let token = op.token();
    match (op.f(), worker, hold) {
        (F::Enqueue, _, _) => Some(Step::Enqueue { job: 0 }),
        (F::Fault, _, _) => op
            .done
            .and_then(|e| server_fault(e).or_else(|| jumped_ms(e).map(|ms| Step::Tick { ms }))),
        (F::Reap, _, _) => Some(Step::Reap),
        // A lease answered unknown (kept only by `Order::Unknown`): the
        // worker holds nothing new.
        (F::Lease, Some(worker), _) if unknown_answer(op) => Some(Step::LeaseLost { worker }),
        (F::Lease, Some(worker), Some(hold)) => {
            hold.abandon();
            hold.held = token;
            Some(Step::Lease { worker })
        }
        (F::Crash, Some(worker), Some(hold)) if hold.held == token => {
            hold.abandon();
            Some(Step::Crash { worker })
        }
        (F::Complete, Some(worker), Some(hold)) if hold.held == token => {
            hold.held = None;
            Some(Step::Complete { worker })
        }
        (F::Complete, Some(worker), Some(hold)) if hold.stale == token => {
            hold.stale = None;
            Some(Step::StaleComplete { worker })
        }
        (F::Fail, Some(worker), Some(hold)) if hold.held == token => {
            hold.held = None;
            let delay_ms = op
                .invoke
                .value
                .as_ref()
                .and_then(|v| v.get("delay_ms")?.as_u64())
                .unwrap_or(0);
            Some(Step::Fail { worker, delay_ms })
        }
        (F::Extend, Some(worker), Some(hold)) if hold.held == token => {
            Some(Step::Extend { worker })
        }
        (F::Effect, Some(worker), Some(hold)) if hold.held == token => {
            Some(Step::Effect { worker })
        }
        _ => None,
    }
}

/// `op` in words: its process, operation, token and events.
fn describe_op(op: &Op<'_>) -> String {
    format!(
        "{} {:?} token {} (events {}..{})",
        op.invoke.process,
        op.f(),
        op.token().map_or("-".into(), |t| t.to_string()),
        op.invoke.index,
        op.end()
    )
}

/// The two operations in words when two processes' calls overlapped on
/// the wire.
fn overlap(prev: &Op<'_>, op: &Op<'_>) -> Option<String> {
    let apart = prev.invoke.process == op.invoke.process
        || prev.end() < op.invoke.index
        || op.end() < prev.invoke.index;
    (!apart).then(|| format!("{} and {}", describe_op(prev), describe_op(op)))
}

/// The worker index of `op`'s process among `workers` (added when new);
/// none for the producer's, the reaper's and a fault's operations.
fn worker_index(workers: &mut Vec<String>, op: &Op<'_>) -> Option<usize> {
    if matches!(op.f(), F::Enqueue | F::Reap | F::Fault) {
        return None;
    }
    let process = worker_of(&op.invoke.process);
    Some(
        workers
            .iter()
            .position(|w| w == process)
            .unwrap_or_else(|| {
                workers.push(process.to_owned());
                workers.len() - 1
            }),
    )
}

/// Joins `step` to the last of `steps` as one parallel step, sent at the
/// later call's send, `apart_ms` after the earlier's: the earlier call was
/// still on the wire then, so it may have taken effect there (the time
/// between them goes before). False (nothing changed) when they may not
/// run together.
fn join_last(steps: &mut Vec<Step>, step: &Step, apart_ms: u64) -> bool {
    let Some(together) = joined(steps.last(), step) else {
        return false;
    };
    steps.pop();
    if apart_ms > 0 {
        match steps.last_mut() {
            Some(Step::Tick { ms }) => *ms += apart_ms,
            _ => steps.push(Step::Tick { ms: apart_ms }),
        }
    }
    steps.push(together);
    true
}

/// `step` joined to `last` (a step or a parallel step) as one parallel
/// step, when they may run together (queue calls of different callers,
/// at most [`super::op::PARALLEL_MAX`]).
fn joined(last: Option<&Step>, step: &Step) -> Option<Step> {
    let mut members = match last? {
        Step::Parallel { steps } => steps.clone(),
        single => vec![single.clone()],
    };
    members.push(step.clone());
    Step::parallel(members).ok()
}

/// Reads a schedule for `job` off `history`, in `order`, on a lease of
/// `lease_ms`. An error when the history holds no enqueue of the job.
fn extract(
    history: &[Event],
    job: &str,
    lease_ms: u64,
    order: Order,
) -> Result<Extraction, String> {
    let kept = relevant(history, job, order);
    let max_attempts = kept
        .iter()
        .filter(|(_, _, op)| op.f() == F::Enqueue)
        .find_map(|(_, _, op)| op.invoke.value.as_ref()?.get("max_attempts")?.as_u64())
        .ok_or_else(|| {
            format!("{job}: the history holds no enqueue of it with its max_attempts")
        })?;
    let mut workers: Vec<String> = Vec::new();
    let mut holds: BTreeMap<usize, Hold> = BTreeMap::new();
    let mut steps: Vec<Step> = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    let mut overlaps: Vec<String> = Vec::new();
    let mut last: Option<(u64, &Op<'_>)> = None;
    if order != Order::Unknown {
        dropped.extend(unknown_leases(history, &kept));
    }
    for (_, time, op) in &kept {
        let worker = worker_index(&mut workers, op);
        let w = worker.map(|i| u8::try_from(i).unwrap_or(u8::MAX));
        let Some(step) = step_for(op, w, worker.map(|i| holds.entry(i).or_default())) else {
            dropped.push(format!("{}: no step says it", describe_op(op)));
            continue;
        };
        if let Some((prev_time, prev)) = last {
            let overlapped = overlap(prev, op);
            if order == Order::Together
                && overlapped.is_some()
                && join_last(&mut steps, &step, time.saturating_sub(prev_time))
            {
                last = Some((*time, op));
                continue;
            }
            if *time > prev_time {
                steps.push(Step::Tick {
                    ms: time - prev_time,
                });
            }
            overlaps.extend(overlapped);
        }
        last = Some((*time, op));
        steps.push(step);
    }
    Ok(Extraction {
        order,
        schedule: Schedule(steps),
        config: LineConfig {
            jobs: 1,
            workers: u8::try_from(workers.len().max(1)).unwrap_or(u8::MAX),
            lease_ms,
            max_attempts,
            reap_limit: 1,
        },
        workers,
        dropped,
        overlaps,
        stretched_ms: 0,
    })
}

/// `schedule` with the time before each of its reaps that took nothing in
/// `run` (its replay's history) stretched just past the latest deadline
/// the queue announced before it (a lease's or an extend's): each reap
/// kept took the job in the history read, and a replay's lease may be
/// longer than the wall clock's (a queue that rounds a lease up to whole
/// seconds). The schedule and the ms added, or `None` when no reap needs
/// it. Reaps of the replay's heal, after the schedule's own, are not
/// counted.
fn stretched(schedule: &Schedule, run: &[Event]) -> Option<(Schedule, u64)> {
    let mut deadline: Option<u64> = None;
    let mut extra: Vec<u64> = Vec::new();
    for e in run.iter().filter(|e| e.kind == EventKind::Ok) {
        let value = e.value.as_ref();
        let field = |key: &str| value.and_then(|v| v.get(key)?.as_u64());
        match e.f {
            F::Lease | F::Extend => deadline = field("deadline_ms").or(deadline),
            F::Reap => {
                let took = value
                    .and_then(|v| v.get("reaped")?.as_array())
                    .is_some_and(|r| !r.is_empty());
                let late = match (took, deadline, field("now_ms")) {
                    (false, Some(d), Some(now)) if d >= now => d - now + 1,
                    _ => 0,
                };
                extra.push(late);
                if took {
                    deadline = None;
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<Step> = Vec::new();
    let mut reaps = extra.into_iter();
    let mut added = 0;
    for step in schedule.steps() {
        if *step == Step::Reap {
            let late = reaps.next().unwrap_or(0);
            if late > 0 {
                added += late;
                match out.last_mut() {
                    Some(Step::Tick { ms }) => *ms += late,
                    _ => out.push(Step::Tick { ms: late }),
                }
            }
        }
        out.push(step.clone());
    }
    (added > 0).then_some((Schedule(out), added))
}

/// A violation pinned down on logical time.
#[derive(Clone, Debug)]
pub struct Reduced {
    /// The invariant, the same as the chaos run's.
    pub invariant: &'static str,
    /// The job of the history it was read for.
    pub job: String,
    /// The schedule read off the history that broke it.
    pub extraction: Extraction,
    /// The shrunk replay.
    pub shrunk: Shrunk,
    /// Runs of the shrunk replay that broke the invariant, of `confirm`.
    pub reproduced: usize,
    /// Runs of the shrunk replay.
    pub confirm: usize,
}

impl Reduced {
    /// One paragraph for people: the schedule, its lengths, the counts.
    pub fn describe(&self) -> String {
        format!(
            "{} of {}: {} steps read off the history ({}, workers {}{}), shrunk to {} in {} replays; \
             the replay broke {} in {} of {} runs",
            self.invariant,
            self.job,
            self.extraction.schedule.len(),
            self.extraction.order,
            self.extraction.workers.join(" "),
            match self.extraction.stretched_ms {
                0 => String::new(),
                ms => format!("; {ms} ms added before reaps, past the replay's deadlines"),
            },
            self.shrunk.line().schedule.len(),
            self.shrunk.runs,
            self.invariant,
            self.reproduced,
            self.confirm
        )
    }
}

/// Why a violation could not be pinned down: each order tried, what its
/// schedule broke instead, the overlapping calls, the dropped operations.
#[derive(Clone, Debug)]
pub struct NotReduced {
    /// The invariant.
    pub invariant: &'static str,
    /// The job, if the violation named one.
    pub job: Option<String>,
    /// Why, in words (one line per order tried, then the rest).
    pub why: Vec<String>,
}

impl fmt::Display for NotReduced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {}: not reduced to a replay",
            self.invariant,
            self.job.as_deref().unwrap_or("no job")
        )?;
        for w in &self.why {
            write!(f, "\n    {w}")?;
        }
        Ok(())
    }
}

/// Notes of each kind (overlaps, dropped operations) a reduction that
/// failed shows.
const NOTES_SHOWN: usize = 3;

/// How many times a schedule's ticks before reaps are stretched.
const STRETCHES: usize = 3;

/// Runs `extraction`'s schedule (its ticks before reaps stretched when
/// the replay's deadlines need it); when it breaks `invariant`, shrinks it
/// and runs the replay `confirm` times. `Err` with a line saying what it
/// broke instead.
async fn try_extraction(
    subject: &Subject,
    extraction: Extraction,
    invariant: &'static str,
    job: &str,
    runs_max: usize,
    confirm: usize,
) -> Result<Result<Reduced, String>, ExploreError> {
    let order = extraction.order;
    let mut extraction = extraction;
    let config = SwarmConfig::from_line(&extraction.config);
    let mut first = run_schedule(subject, &config, &extraction.schedule).await?;
    // A reap that took nothing where the history's took the job: past the
    // replay's own deadlines, at most a few times (an extend may move one).
    for _ in 0..STRETCHES {
        if first.findings().iter().any(|(i, _)| *i == invariant) {
            break;
        }
        let Some((longer, added)) = stretched(&extraction.schedule, &first.history) else {
            break;
        };
        extraction.schedule = longer;
        extraction.stretched_ms += added;
        first = run_schedule(subject, &config, &extraction.schedule).await?;
    }
    let found = first.findings();
    if !found.iter().any(|(i, _)| *i == invariant) {
        let broke: Vec<&str> = found.iter().map(|(i, _)| *i).collect();
        let what = match broke.is_empty() {
            true => "valid".to_owned(),
            false => format!("broke only {}", broke.join(", ")),
        };
        let steps = extraction.schedule.len();
        return Ok(Err(format!(
            "{order}: {steps} steps, {what}: {}",
            first.line
        )));
    }
    let schedule = &extraction.schedule;
    let Some(shrunk) = shrink_for(subject, &config, schedule, runs_max, Some(invariant)).await?
    else {
        return Ok(Err(format!(
            "{order}: the schedule broke it once, then not"
        )));
    };
    let line = shrunk.line();
    if let Some(why) = replays_elsewhere(subject, &line.schedule) {
        return Ok(Err(format!("{order}: {why}: {}", shrunk.report.line)));
    }
    let mut reproduced = 0;
    for _ in 0..confirm {
        let again = run_schedule(subject, &config, &line.schedule).await?;
        if again.findings().iter().any(|(i, _)| *i == invariant) {
            reproduced += 1;
        }
    }
    Ok(Ok(Reduced {
        invariant,
        job: job.to_owned(),
        extraction,
        shrunk,
        reproduced,
        confirm,
    }))
}

/// True when `order`'s schedule is the one by invocation, tried already:
/// parallel steps only where two kept calls overlapped (`notes` of the
/// orders before say so), lost replies only where a lease was answered
/// unknown.
fn adds_nothing(order: Order, notes: &std::collections::BTreeSet<String>) -> bool {
    let adds = |what: &str| notes.iter().any(|n| n.contains(what));
    match order {
        Order::Together => !adds("overlapped on the wire"),
        Order::Unknown => !adds("answered unknown"),
        Order::Completion | Order::Invocation => false,
    }
}

/// Pins `violation` of `history` down on `subject` (a fresh queue on
/// logical time, the chaos run's queue and consumer): each order's
/// schedule is run; the first that breaks the same invariant is shrunk
/// (at most `runs_max` replays) and its replay run `confirm` times more.
pub async fn reduce(
    subject: &Subject,
    history: &[Event],
    violation: &Violation,
    lease_ms: u64,
    runs_max: usize,
    confirm: usize,
) -> Result<Result<Reduced, NotReduced>, ExploreError> {
    let invariant = violation.invariant;
    let not = |why: Vec<String>| NotReduced {
        invariant,
        job: violation.job.clone(),
        why,
    };
    let Some(job) = violation.job.as_deref() else {
        return Ok(Err(not(vec!["the violation names no job".into()])));
    };
    let mut why = Vec::new();
    let mut notes = std::collections::BTreeSet::new();
    for order in [
        Order::Completion,
        Order::Invocation,
        Order::Together,
        Order::Unknown,
    ] {
        let extraction = match extract(history, job, lease_ms, order) {
            Ok(e) => e,
            Err(e) => return Ok(Err(not(vec![e]))),
        };
        let overlaps = extraction
            .overlaps
            .iter()
            .map(|o| format!("overlapped on the wire: {o}"));
        let dropped = extraction.dropped.iter().map(|d| format!("dropped: {d}"));
        let more: Vec<String> = overlaps.chain(dropped).collect();
        if adds_nothing(order, &notes) {
            continue;
        }
        // A run that stopped (an adapter that lost its server at a kill
        // and did not come back) is this order's answer, not the end of
        // the reduction.
        match try_extraction(subject, extraction, invariant, job, runs_max, confirm).await {
            Ok(Ok(reduced)) => return Ok(Ok(reduced)),
            Ok(Err(line)) => why.push(line),
            Err(e) => why.push(format!("{order}: the replay stopped: {e}")),
        }
        notes.extend(more);
    }
    // The first few of each kind, and how many more: a run under a
    // power loss answers dozens of leases unknown.
    for kind in ["overlapped on the wire", "dropped"] {
        let all: Vec<String> = notes
            .iter()
            .filter(|n| n.starts_with(kind))
            .cloned()
            .collect();
        let more = all.len().saturating_sub(NOTES_SHOWN);
        why.extend(all.into_iter().take(NOTES_SHOWN));
        if more > 0 {
            why.push(format!("{kind}: … and {more} more"));
        }
    }
    Ok(Err(not(why)))
}

#[cfg(test)]
mod tests;
