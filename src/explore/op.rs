//! The explorers' operation vocabulary: one [`Step`] per thing a producer,
//! a worker, the reaper or the clock can do, and a [`Schedule`] of steps with
//! a compact text form that fits on one line (`e0 e1 l0 t100 r c0`), so that
//! a failing interleaving can be read, pasted and replayed.
//!
//! Steps name jobs and workers by small indexes; the driver turns job `3`
//! into the id `JOB-3` and worker `1` into `w1`. Which lease a worker holds
//! is the explorer's business (see [`super::driver`]), not the model's: the
//! queue only knows tokens, and a worker acting on an old token is exactly
//! what fencing must refuse.
//!
//! # Text form
//!
//! | step | text | meaning |
//! |---|---|---|
//! | `Enqueue { job: 0 }` | `e0` | enqueue `JOB-0` (again: the duplicate case) |
//! | `Lease { worker: 1 }` | `l1` | `w1` asks for a lease |
//! | `Complete { worker: 1 }` | `c1` | `w1` completes the lease it holds |
//! | `Fail { worker: 1, delay_ms: 50 }` | `f1:50` (`f1` when the delay is 0) | `w1` fails its lease, retry after 50 ms |
//! | `Extend { worker: 1 }` | `x1` | `w1` extends the lease it holds |
//! | `Crash { worker: 1 }` | `k1` | `w1` crashes and forgets its lease |
//! | `StaleComplete { worker: 1 }` | `s1` | `w1` completes the lease it held before its crash |
//! | `Effect { worker: 1 }` | `a1` | `w1` applies the next part of its consumer's effect |
//! | `CompleteLost { worker: 1 }` | `d1` | `w1` acks; the script runs but the reply is dropped |
//! | `CompleteNext { worker: 1 }` | `n1` | `w1` acks the lease it holds and leases the next job, in one call (`complete_and_lease`) |
//! | `Reap` | `r` | the reaper runs |
//! | `Tick { ms: 100 }` | `t100` | logical time advances by 100 ms (on a queue with only the server clock, a real wait scaled by the lease: see [`super::driver`]) |
//! | `Wait { ms: 50 }` | `w50` | 50 ms really pass on the server's clock, and logical time advances by the same 50 ms |
//! | `LeaseLost { worker: 0 }` | `u0` | `w0` leases and the reply is lost: the server may have granted a lease no worker holds (an `unknown` answer, as a partition or a dropped reply makes); walks do not draw it, a reduction writes it |
//! | `ServerKill` | `K` | the server is killed (`kill -9`) and restarted under its persistence mode |
//! | `PowerLoss` | `P` | the server loses power (what it did not fsync is lost) and is powered on again |
//! | `Parallel { steps: [Lease { worker: 0 }, Lease { worker: 1 }] }` | `l0+l1` | `w0` and `w1` lease together: both calls are on the wire before either answer is read |
//!
//! A parallel step joins two to [`PARALLEL_MAX`] steps with `+` (no space:
//! it is one token of the schedule, and `+` is shell-safe, so a replay line
//! holds it as is). Its members are steps that make one queue call each
//! (`e`, `l`, `c`, `f`, `x`, `s`, `r`) by different callers: different
//! workers, at most one enqueue (the producer) and one reap (the reaper).
//! A server fault (`K`, `P`) is never a member: it is no caller's call, and
//! the server goes down for every call at once.
//! The driver sends their calls at once; the checkers judge the history
//! (whose invocations overlap), and on the reference queue the model
//! accepts the answers if some order of the members gives them (see
//! [`super::driver`]).
//!
//! A schedule (or a replay line) with a `w` step used real time: keys the
//! server expires on its own clock (a consumer's guard with a TTL, a lock,
//! a `PX`) may have expired in it, and it takes at least the sum of its
//! waits to run.
//!
//! `K` and `P` are the server's own faults (see [`super::server_steps`]):
//! they need a server the explorers own and can kill (`--server process`),
//! and `P` one started with the power-loss shim.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::adapter::Operation;

/// One thing that happens to the queue, in the explorers' vocabulary.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Step {
    /// A producer enqueues `JOB-{job}`; an id enqueued before is the
    /// duplicate case.
    Enqueue {
        /// The job index.
        job: u8,
    },
    /// Worker `w{worker}` asks for a lease. A worker holding a lease that
    /// leases again abandons the old one (it becomes its stale lease).
    Lease {
        /// The worker index.
        worker: u8,
    },
    /// Worker `w{worker}` asks for a lease and the reply is lost (a
    /// partition, a dropped reply): the script runs, the history records
    /// `info` (unknown), and the worker holds nothing, so a job it was
    /// granted is held by no one until the reaper takes it back. Walks do
    /// not draw it (a kind drawn is a new draw in every seed's walk); a
    /// reduction writes it for a lease a chaos run answered unknown.
    LeaseLost {
        /// The worker index.
        worker: u8,
    },
    /// The worker completes the lease it holds (nothing happens if it holds
    /// none).
    Complete {
        /// The worker index.
        worker: u8,
    },
    /// The worker fails the lease it holds, asking for a retry after
    /// `delay_ms`.
    Fail {
        /// The worker index.
        worker: u8,
        /// The retry delay (ms).
        delay_ms: u64,
    },
    /// The worker extends the lease it holds by the configured lease length.
    Extend {
        /// The worker index.
        worker: u8,
    },
    /// The worker crashes: it forgets the lease it holds, which becomes its
    /// stale lease.
    Crash {
        /// The worker index.
        worker: u8,
    },
    /// The worker comes back from a crash or a stall and completes the lease
    /// it held before (nothing happens if it had none).
    StaleComplete {
        /// The worker index.
        worker: u8,
    },
    /// The worker applies the next part of its consumer's effect for the
    /// lease it holds (nothing happens if it holds none or has applied every
    /// part). A crash after some parts and before the ack falls *between
    /// parts* or in the *ack gap*.
    Effect {
        /// The worker index.
        worker: u8,
    },
    /// The worker completes the lease it holds (its effect first, like
    /// [`Step::Complete`]), the script runs on the server, and the reply is
    /// lost: the history records `info`, and the worker still holds the
    /// lease, so a later `c` retries the ack (`already_settled` expected)
    /// and a later `k` gives up.
    CompleteLost {
        /// The worker index.
        worker: u8,
    },
    /// The worker completes the lease it holds (its effect first, like
    /// [`Step::Complete`]) and asks for the next lease in the same call
    /// (`complete_and_lease`): the history holds the complete, then the
    /// lease, nothing between them.
    CompleteNext {
        /// The worker index.
        worker: u8,
    },
    /// The reaper runs once.
    Reap,
    /// Logical time advances by `ms`.
    Tick {
        /// How far (ms).
        ms: u64,
    },
    /// `ms` really pass: the driver sleeps, so the server's own clock
    /// moves (keys with a TTL expire), and logical time advances by the
    /// same `ms`. What the step decides stays deterministic; only what
    /// the server's clock expires depends on it.
    Wait {
        /// How long (ms).
        ms: u64,
    },
    /// The server is killed without warning (`kill -9`) and restarted on
    /// its own data, under its persistence mode: what the AOF held
    /// survives (the page cache is kept).
    ServerKill,
    /// The server loses power: every byte it wrote and did not fsync is
    /// lost (the power-loss shim), then it is powered on again on what is
    /// left.
    PowerLoss,
    /// Two to [`PARALLEL_MAX`] steps whose queue calls are sent together,
    /// each before any answer is read (see the module docs for which steps
    /// may be members).
    Parallel {
        /// The members, in the order they are written (not an order they
        /// run in).
        steps: Vec<Step>,
    },
}

/// The most steps one parallel step joins.
pub const PARALLEL_MAX: usize = 4;

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Enqueue { job } => write!(f, "e{job}"),
            Step::Lease { worker } => write!(f, "l{worker}"),
            Step::LeaseLost { worker } => write!(f, "u{worker}"),
            Step::Complete { worker } => write!(f, "c{worker}"),
            Step::Fail {
                worker,
                delay_ms: 0,
            } => write!(f, "f{worker}"),
            Step::Fail { worker, delay_ms } => write!(f, "f{worker}:{delay_ms}"),
            Step::Extend { worker } => write!(f, "x{worker}"),
            Step::Crash { worker } => write!(f, "k{worker}"),
            Step::StaleComplete { worker } => write!(f, "s{worker}"),
            Step::Effect { worker } => write!(f, "a{worker}"),
            Step::CompleteLost { worker } => write!(f, "d{worker}"),
            Step::CompleteNext { worker } => write!(f, "n{worker}"),
            Step::Reap => f.write_str("r"),
            Step::Tick { ms } => write!(f, "t{ms}"),
            Step::Wait { ms } => write!(f, "w{ms}"),
            Step::ServerKill | Step::PowerLoss => write!(f, "{}", self.letter()),
            Step::Parallel { steps } => {
                for (i, step) in steps.iter().enumerate() {
                    if i > 0 {
                        f.write_str("+")?;
                    }
                    write!(f, "{step}")?;
                }
                Ok(())
            }
        }
    }
}

/// A kind of [`Step`], without its arguments: what the walk draws by
/// weight before it draws the arguments. Every match on it is exhaustive,
/// so a kind added here and forgotten where steps are drawn, built or
/// checked for support does not compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// [`Step::Enqueue`].
    Enqueue,
    /// [`Step::Lease`].
    Lease,
    /// [`Step::LeaseLost`].
    LeaseLost,
    /// [`Step::Complete`].
    Complete,
    /// [`Step::Fail`].
    Fail,
    /// [`Step::Extend`].
    Extend,
    /// [`Step::Crash`].
    Crash,
    /// [`Step::StaleComplete`].
    StaleComplete,
    /// [`Step::Effect`].
    Effect,
    /// [`Step::CompleteLost`].
    CompleteLost,
    /// [`Step::CompleteNext`].
    CompleteNext,
    /// [`Step::Reap`].
    Reap,
    /// [`Step::Tick`].
    Tick,
    /// [`Step::Wait`].
    Wait,
    /// [`Step::ServerKill`].
    ServerKill,
    /// [`Step::PowerLoss`].
    PowerLoss,
    /// [`Step::Parallel`].
    Parallel,
}

impl StepKind {
    /// The letter of the kind's text form (`e`, `l`, `c`, ..., `r`, `t`).
    pub fn letter(self) -> char {
        match self {
            StepKind::Enqueue => 'e',
            StepKind::Lease => 'l',
            StepKind::LeaseLost => 'u',
            StepKind::Complete => 'c',
            StepKind::Fail => 'f',
            StepKind::Extend => 'x',
            StepKind::Crash => 'k',
            StepKind::StaleComplete => 's',
            StepKind::Effect => 'a',
            StepKind::CompleteLost => 'd',
            StepKind::CompleteNext => 'n',
            StepKind::Reap => 'r',
            StepKind::Tick => 't',
            StepKind::Wait => 'w',
            StepKind::ServerKill => 'K',
            StepKind::PowerLoss => 'P',
            StepKind::Parallel => '+',
        }
    }

    /// The queue operations a step of this kind calls (see
    /// [`Step::operations`]); a parallel step's are its members'.
    pub fn operations(self) -> &'static [Operation] {
        match self {
            StepKind::Enqueue => &[Operation::Enqueue],
            StepKind::Lease | StepKind::LeaseLost => &[Operation::Lease],
            StepKind::Complete | StepKind::StaleComplete | StepKind::CompleteLost => {
                &[Operation::Complete]
            }
            StepKind::CompleteNext => &[Operation::Complete, Operation::Lease],
            StepKind::Fail => &[Operation::Fail],
            StepKind::Extend => &[Operation::Extend],
            StepKind::Reap => &[Operation::Reap],
            StepKind::Crash
            | StepKind::Effect
            | StepKind::Tick
            | StepKind::Wait
            | StepKind::ServerKill
            | StepKind::PowerLoss
            | StepKind::Parallel => &[],
        }
    }
}

/// The step of a worker's letter (`l u c x k s a d n`) for `worker`.
fn worker_step(letter: char, worker: u8) -> Step {
    match letter {
        'l' => Step::Lease { worker },
        'u' => Step::LeaseLost { worker },
        'c' => Step::Complete { worker },
        'x' => Step::Extend { worker },
        'k' => Step::Crash { worker },
        's' => Step::StaleComplete { worker },
        'a' => Step::Effect { worker },
        'd' => Step::CompleteLost { worker },
        _ => Step::CompleteNext { worker },
    }
}

/// Why a step or a schedule could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("step {position} {token:?}: {reason}")]
pub struct ParseError {
    /// The step's position in the schedule, from 0.
    pub position: usize,
    /// The text of the step.
    pub token: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Step {
    /// The queue operations the step calls (none for a local step: a
    /// crash, an effect, time passing; a parallel step's are its
    /// members': see [`Step::members`]). The explorers draw only steps
    /// whose operations the queue under test supports, and refuse to
    /// replay one that it does not.
    pub fn operations(&self) -> &'static [Operation] {
        self.kind().operations()
    }

    /// The steps this one is made of: a parallel step's members, else the
    /// step itself.
    pub fn members(&self) -> &[Step] {
        match self {
            Step::Parallel { steps } => steps,
            step => std::slice::from_ref(step),
        }
    }

    /// The step's kind: what the walk draws before its arguments.
    pub fn kind(&self) -> StepKind {
        match self {
            Step::Enqueue { .. } => StepKind::Enqueue,
            Step::Lease { .. } => StepKind::Lease,
            Step::LeaseLost { .. } => StepKind::LeaseLost,
            Step::Complete { .. } => StepKind::Complete,
            Step::Fail { .. } => StepKind::Fail,
            Step::Extend { .. } => StepKind::Extend,
            Step::Crash { .. } => StepKind::Crash,
            Step::StaleComplete { .. } => StepKind::StaleComplete,
            Step::Effect { .. } => StepKind::Effect,
            Step::CompleteLost { .. } => StepKind::CompleteLost,
            Step::CompleteNext { .. } => StepKind::CompleteNext,
            Step::Reap => StepKind::Reap,
            Step::Tick { .. } => StepKind::Tick,
            Step::Wait { .. } => StepKind::Wait,
            Step::ServerKill => StepKind::ServerKill,
            Step::PowerLoss => StepKind::PowerLoss,
            Step::Parallel { .. } => StepKind::Parallel,
        }
    }

    /// The letter of the step's text form (`e`, `l`, `c`, ..., `r`, `t`).
    pub fn letter(&self) -> char {
        self.kind().letter()
    }

    /// Parses one step's text form (see the module docs).
    pub fn parse(token: &str) -> Result<Step, ParseError> {
        Step::parse_token(token, 0)
    }

    /// Parses the step at `position` of a schedule: a parallel step when
    /// it holds a `+`.
    fn parse_token(token: &str, position: usize) -> Result<Step, ParseError> {
        match token.contains('+') {
            true => Step::parse_parallel(token, position),
            false => Step::parse_at(token, position),
        }
    }

    fn parse_at(token: &str, position: usize) -> Result<Step, ParseError> {
        let bad = |reason: String| ParseError {
            position,
            token: token.to_owned(),
            reason,
        };
        let mut chars = token.chars();
        let letter = chars.next().ok_or_else(|| bad("empty step".into()))?;
        let rest = chars.as_str();
        let index = |text: &str, what: &str| -> Result<u8, ParseError> {
            text.parse::<u8>()
                .map_err(|_| bad(format!("{what} must be an index in 0..=255, got {text:?}")))
        };
        // A duration the queue accepts (`EMQ_MAX_MS`); a wait (real time)
        // at most WAIT_MS_MAX.
        let number = |text: &str, what: &str| -> Result<u64, ParseError> {
            let max = if letter == 'w' { WAIT_MS_MAX } else { MS_MAX };
            text.parse::<u64>()
                .ok()
                .filter(|ms| *ms <= max)
                .ok_or_else(|| {
                    bad(format!(
                        "{what} must be a number of ms in 0..={max}, got {text:?}"
                    ))
                })
        };
        Ok(match letter {
            'e' => Step::Enqueue {
                job: index(rest, "the job")?,
            },
            'l' | 'u' | 'c' | 'x' | 'k' | 's' | 'a' | 'd' | 'n' => {
                worker_step(letter, index(rest, "the worker")?)
            }
            'f' => {
                let (worker, delay) = rest.split_once(':').unwrap_or((rest, "0"));
                Step::Fail {
                    worker: index(worker, "the worker")?,
                    delay_ms: number(delay, "the retry delay")?,
                }
            }
            'r' | 'K' | 'P' if rest.is_empty() => bare(letter),
            'r' | 'K' | 'P' => return Err(bad(format!("{letter} takes no argument"))),
            't' => Step::Tick {
                ms: number(rest, "a tick")?,
            },
            'w' => Step::Wait {
                ms: number(rest, "a wait")?,
            },
            other => {
                let steps = "e l u c f x k s a d n r t w K P (A+B: together)";
                return Err(bad(format!("unknown step {other:?}; steps are {steps}")));
            }
        })
    }

    /// A parallel step's text: members joined by `+`, each a step that
    /// may run in parallel (see the module docs), by callers all
    /// different.
    fn parse_parallel(token: &str, position: usize) -> Result<Step, ParseError> {
        let bad = |reason: String| ParseError {
            position,
            token: token.to_owned(),
            reason,
        };
        let steps = token
            .split('+')
            .map(|member| match Step::parse_at(member, position) {
                Ok(step) => Ok(step),
                Err(e) => Err(bad(format!("member {member:?}: {}", e.reason))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Step::parallel(steps).map_err(bad)
    }

    /// A parallel step of `steps`, or why they cannot run in parallel:
    /// fewer than two or more than [`PARALLEL_MAX`], a member that is not
    /// one queue call (`e l c f x s r`; a server fault `K` or `P` is no
    /// caller's call), or two members by one caller.
    pub fn parallel(steps: Vec<Step>) -> Result<Step, String> {
        if !(2..=PARALLEL_MAX).contains(&steps.len()) {
            return Err(format!(
                "a parallel step joins 2 to {PARALLEL_MAX} steps with '+', got {}",
                steps.len()
            ));
        }
        let mut callers = std::collections::BTreeSet::new();
        for step in &steps {
            let caller = match step {
                Step::Enqueue { .. } => "the producer".to_owned(),
                Step::Reap => "the reaper".to_owned(),
                Step::Lease { worker }
                | Step::Complete { worker }
                | Step::Fail { worker, .. }
                | Step::Extend { worker }
                | Step::StaleComplete { worker } => format!("worker {worker}"),
                fault if fault.is_server_fault() => {
                    return Err(format!(
                        "{fault} is a server fault, not a caller's queue call: it cannot run in \
                         parallel (write it as a step of its own, before or after the parallel step)"
                    ))
                }
                other => {
                    return Err(format!(
                        "{other} cannot run in parallel: members are e l c f x s r, one queue call each"
                    ))
                }
            };
            if !callers.insert(caller.clone()) {
                return Err(format!(
                    "two members by {caller}: the members of a parallel step are by different callers"
                ));
            }
        }
        Ok(Step::Parallel { steps })
    }

    /// The worker this step is about, if any (none for a parallel step:
    /// see [`Step::workers`]).
    pub fn worker(&self) -> Option<u8> {
        match self {
            Step::Lease { worker }
            | Step::LeaseLost { worker }
            | Step::Complete { worker }
            | Step::Fail { worker, .. }
            | Step::Extend { worker }
            | Step::Crash { worker }
            | Step::StaleComplete { worker }
            | Step::Effect { worker }
            | Step::CompleteLost { worker }
            | Step::CompleteNext { worker } => Some(*worker),
            Step::Enqueue { .. }
            | Step::Reap
            | Step::Tick { .. }
            | Step::Wait { .. }
            | Step::ServerKill
            | Step::PowerLoss
            | Step::Parallel { .. } => None,
        }
    }

    /// Every worker this step is about: a parallel step's members'.
    pub fn workers(&self) -> Vec<u8> {
        self.members().iter().filter_map(Step::worker).collect()
    }

    /// True for a fault of the server itself (`K`, `P`): it needs a server
    /// the explorers own ([`super::server_steps`]).
    pub fn is_server_fault(&self) -> bool {
        matches!(self, Step::ServerKill | Step::PowerLoss)
    }

    /// True for a step in which real time passes (`w`): a schedule with
    /// one used the server's clock.
    pub(crate) fn is_real_time(&self) -> bool {
        matches!(self, Step::Wait { .. })
    }
}

/// The step of a letter that takes no argument (`r`, `K`, `P`).
fn bare(letter: char) -> Step {
    match letter {
        'K' => Step::ServerKill,
        'P' => Step::PowerLoss,
        _ => Step::Reap,
    }
}

impl FromStr for Step {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Step, ParseError> {
        Step::parse(s)
    }
}

/// True when `steps` enqueue `JOB-{job}`, alone or in a parallel step.
pub(crate) fn enqueued(steps: &[Step], job: u8) -> bool {
    let mut members = steps.iter().flat_map(Step::members);
    members.any(|step| *step == Step::Enqueue { job })
}

/// The longest retry delay or tick of a step, in ms: the longest duration
/// the scripts accept (`EMQ_MAX_MS` in `lua/prelude.lua`).
pub const MS_MAX: u64 = 1_000_000_000_000_000;
/// The longest wait (`w`, real time) of a step, in ms: ten minutes.
pub const WAIT_MS_MAX: u64 = 600_000;

/// A sequence of steps: what one exploration did, or what a replay does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Schedule(pub Vec<Step>);

impl Schedule {
    /// Parses a schedule's text form: steps separated by whitespace.
    pub fn parse(text: &str) -> Result<Schedule, ParseError> {
        // A byte-order mark (a file saved by an editor, pasted with
        // `"$(cat FILE)"`) is not part of the first step.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        text.split_whitespace()
            .enumerate()
            .map(|(position, token)| Step::parse_token(token, position))
            .collect::<Result<Vec<_>, _>>()
            .map(Schedule)
    }

    /// The steps.
    pub fn steps(&self) -> &[Step] {
        &self.0
    }

    /// How many steps.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no steps.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The real time its `w` steps wait (ms): 0 for a schedule on logical
    /// time alone.
    pub fn real_time_ms(&self) -> u64 {
        self.0
            .iter()
            .map(|step| match step {
                Step::Wait { ms } => *ms,
                _ => 0,
            })
            .fold(0, u64::saturating_add)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{step}")?;
        }
        Ok(())
    }
}

impl FromStr for Schedule {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Schedule, ParseError> {
        Schedule::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_after_a_byte_order_mark_parses_as_without_it() {
        let text = "e0 l1 c1 t50";
        assert_eq!(
            Schedule::parse(&format!("\u{feff}{text}\n")).unwrap(),
            Schedule::parse(text).unwrap()
        );
    }

    #[test]
    fn a_steps_letter_is_the_first_of_its_text_and_names_its_operations() {
        let schedule =
            Schedule::parse("e0 l1 u1 c1 f1:25 x1 k1 s1 a1 d1 n1 r t50 w25 K P").unwrap();
        for step in schedule.steps() {
            assert_eq!(step.to_string().chars().next(), Some(step.letter()));
        }
        assert_eq!(Step::Reap.operations(), [Operation::Reap]);
        assert!(Step::Tick { ms: 5 }.operations().is_empty());
        assert!(Step::Wait { ms: 5 }.operations().is_empty());
        assert_eq!(schedule.real_time_ms(), 25);
        let next = Step::CompleteNext { worker: 0 };
        assert_eq!(next.operations(), [Operation::Complete, Operation::Lease]);
        // The sixteen steps are sixteen kinds with sixteen letters.
        let kinds: std::collections::BTreeSet<char> =
            schedule.steps().iter().map(|s| s.kind().letter()).collect();
        assert_eq!(kinds.len(), 16);
        assert!(Step::ServerKill.operations().is_empty() && Step::PowerLoss.worker().is_none());
        for step in schedule.steps() {
            assert_eq!(step.kind().operations(), step.operations());
        }
    }

    fn every_kind() -> Schedule {
        Schedule(vec![
            Step::Enqueue { job: 0 },
            Step::Enqueue { job: 255 },
            Step::Lease { worker: 0 },
            Step::LeaseLost { worker: 1 },
            Step::Complete { worker: 1 },
            Step::Fail {
                worker: 2,
                delay_ms: 0,
            },
            Step::Fail {
                worker: 2,
                delay_ms: 50,
            },
            Step::Extend { worker: 0 },
            Step::Crash { worker: 1 },
            Step::StaleComplete { worker: 1 },
            Step::Effect { worker: 2 },
            Step::CompleteLost { worker: 0 },
            Step::CompleteNext { worker: 1 },
            Step::Reap,
            Step::Tick { ms: 0 },
            Step::Tick { ms: MS_MAX },
            Step::Wait { ms: 50 },
            Step::ServerKill,
            Step::PowerLoss,
        ])
    }

    #[test]
    fn every_step_kind_round_trips_through_display_and_parse() {
        let schedule = every_kind();
        let text = schedule.to_string();
        assert_eq!(
            text,
            "e0 e255 l0 u1 c1 f2 f2:50 x0 k1 s1 a2 d0 n1 r t0 t1000000000000000 w50 K P"
        );
        assert_eq!(Schedule::parse(&text), Ok(schedule.clone()));
        for step in schedule.steps() {
            assert_eq!(step.to_string().parse::<Step>().as_ref(), Ok(step));
        }
    }

    #[test]
    fn the_example_schedule_parses_and_prints_back_unchanged() {
        let text = "e0 e1 l0 t100 r c0";
        let schedule: Schedule = text.parse().unwrap();
        assert_eq!(schedule.len(), 6);
        assert_eq!(schedule.steps()[3], Step::Tick { ms: 100 });
        assert_eq!(schedule.to_string(), text);
    }

    #[test]
    fn whitespace_between_steps_is_free_and_an_empty_schedule_is_valid() {
        let schedule = Schedule::parse("  e0\n\tl0   c0 ").unwrap();
        assert_eq!(schedule.to_string(), "e0 l0 c0");
        assert!(Schedule::parse("").unwrap().is_empty());
    }

    #[test]
    fn a_parallel_step_round_trips_and_names_its_members_and_workers() {
        let text = "e0 l0+l1 c1+f0:50+r e1+x2";
        let schedule = Schedule::parse(text).unwrap();
        assert_eq!(schedule.len(), 4);
        assert_eq!(
            schedule.steps()[1],
            Step::Parallel {
                steps: vec![Step::Lease { worker: 0 }, Step::Lease { worker: 1 }]
            }
        );
        assert_eq!(schedule.to_string(), text);
        let two = &schedule.steps()[2];
        assert_eq!(two.kind(), StepKind::Parallel);
        assert_eq!(two.members().len(), 3);
        assert_eq!(two.workers(), vec![1, 0]);
        assert_eq!(two.worker(), None);
        assert_eq!(schedule.steps()[0].members(), &schedule.steps()[..1]);
    }

    #[test]
    fn a_parallel_step_of_one_caller_twice_or_of_a_local_step_is_refused() {
        for bad in [
            "l0+l0",
            "l0+c0",
            "e0+e1",
            "r+r",
            "l0+k1",
            "l0+t5",
            "l0+a1",
            "l0+d1",
            "l0+n1",
            "l0+",
            "+l0",
            "l0",
            "l0+l1+l2+l3+l4",
            "l0+l1+l0",
        ] {
            let parsed = Step::parse(bad);
            if bad == "l0" {
                assert!(parsed.is_ok());
                continue;
            }
            assert!(parsed.is_err(), "{bad} parsed as {parsed:?}");
        }
        let err = Schedule::parse("e0 l0+l0").unwrap_err();
        assert_eq!((err.position, err.token.as_str()), (1, "l0+l0"));
        assert!(err.reason.contains("different callers"), "{}", err.reason);
        assert!(Step::parse("l0+l1+l2+l3").is_ok());
    }

    #[test]
    fn server_faults_and_parallel_steps_round_trip_in_one_schedule() {
        let text = "e0 e1 l0+l1 K c0+f1:50 P e2+r l2 w25 K";
        let schedule = Schedule::parse(text).unwrap();
        assert_eq!(schedule.to_string(), text);
        assert_eq!(Schedule::parse(&schedule.to_string()), Ok(schedule.clone()));
        let steps = schedule.steps();
        assert_eq!(
            (&steps[3], &steps[5], &steps[9]),
            (&Step::ServerKill, &Step::PowerLoss, &Step::ServerKill)
        );
        assert_eq!(steps[2].kind(), StepKind::Parallel);
        assert!(!steps[2].is_server_fault() && steps[3].is_server_fault());
    }

    #[test]
    fn a_server_fault_is_refused_as_a_member_of_a_parallel_step() {
        for bad in ["l0+K", "K+l0", "P+r", "e0+l1+P", "K+P"] {
            let err = Step::parse(bad).unwrap_err();
            assert!(err.reason.contains("server fault"), "{bad}: {}", err.reason);
            assert!(
                err.reason.contains("cannot run in parallel"),
                "{bad}: {}",
                err.reason
            );
        }
        let err = Schedule::parse("e0 l0 c0+K").unwrap_err();
        assert_eq!((err.position, err.token.as_str()), (2, "c0+K"));
        assert_eq!(
            Step::parallel(vec![Step::Lease { worker: 0 }, Step::PowerLoss])
                .map_err(|e| e.starts_with("P is a server fault")),
            Err(true)
        );
    }

    #[test]
    fn a_bad_step_is_refused_naming_its_position_and_text() {
        let err = Schedule::parse("e0 l0 q1").unwrap_err();
        assert_eq!((err.position, err.token.as_str()), (2, "q1"));
        for bad in [
            "e", "e256", "l-1", "t", "tx", "f0:", "f0:x", "r1", "c", "w", "w-5", "K1", "P0", "k",
        ] {
            assert!(Step::parse(bad).is_err(), "{bad} parsed");
        }
    }
}
