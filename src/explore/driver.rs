//! The driver: applies each [`Step`] to the pure [`Model`] and to the real
//! Valkey queue on the same logical time, and checks after every step that
//!
//! 1. both answered the same outcome, value for value;
//! 2. **refinement**: the whole queue read back from Valkey equals the
//!    model's state ([`Snapshot`] against [`Model::snapshot`]);
//! 3. **structure**: Valkey's snapshot has no structure problem.
//!
//! The first failed check is a [`Divergence`]. Every step is also recorded
//! in a [`Recorder`] history with the conventions of `ackgap run`
//! ([`crate::campaign`]), so the history checkers judge the run as well.
//!
//! The workers' local state (the lease each one holds, and the one it held
//! before its last crash) lives here: the queue and the model only know
//! tokens. The driver updates it from the *model's* answers, so what the
//! walk does next never depends on the system under test.

use serde::Serialize;
use serde_json::json;

use super::op::Step;
use crate::campaign::{self, close, lease_value};
use crate::history::{Recorder, F};
use crate::model::{Model, ModelError};
use crate::queue::client::EnqueueOptions;
use crate::queue::{
    Enqueued, Extended, Failed, Lease, Queue, QueueError, Reaped, Settled, Snapshot,
};

/// Where logical time starts: not 0, so that a script reading 0 as "unset"
/// would show up.
pub const START_MS: u64 = 1_000;

/// How the driver calls the queue: the settings one swarm configuration
/// fixes for a whole run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DriverConfig {
    /// Workers `w0 .. w{workers-1}`; a step naming another worker is
    /// refused before it runs.
    pub workers: u8,
    /// The lease length of every lease and extend (ms).
    pub lease_ms: u64,
    /// The `max_attempts` of every enqueue.
    pub max_attempts: u64,
    /// The `limit` of every reap.
    pub reap_limit: u64,
}

/// A lease as a worker remembers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Held {
    /// The job id.
    pub id: String,
    /// The fencing token the lease was granted with.
    pub token: u64,
}

/// One worker's local state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Worker {
    /// The lease it holds and acts on.
    pub held: Option<Held>,
    /// The lease it held before its last crash (or that it abandoned by
    /// leasing again): what a stale complete acts on.
    pub stale: Option<Held>,
}

/// What one step answered, on either side.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The enqueue's answer.
    Enqueue(Enqueued),
    /// The lease's answer.
    Lease(Option<Lease>),
    /// A complete's (or stale complete's) answer.
    Complete(Settled),
    /// A fail's answer.
    Fail(Failed),
    /// An extend's answer.
    Extend(Extended),
    /// What the reaper did.
    Reap(Vec<Reaped>),
    /// The script refused the call before any write, with this code
    /// (`EMQKIND`, `EMQARG`).
    Refused {
        /// The error code.
        code: String,
    },
    /// The worker forgot its lease (a local step: nothing was sent).
    Crash,
    /// Logical time moved to `now_ms` (a local step).
    Tick {
        /// The new logical time.
        now_ms: u64,
    },
    /// The worker held no lease to act on: nothing was sent.
    Idle,
}

/// A step after which the model and Valkey disagree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("divergence at step {step_index} ({step}), {check} check: model {model}, valkey {valkey}")]
pub struct Divergence {
    /// The step's position in the schedule, from 0.
    pub step_index: usize,
    /// The step.
    pub step: Step,
    /// Which check failed: `outcome` (the answers differ), `refinement`
    /// (the states read back differ) or `structure` (Valkey's state has a
    /// structure problem).
    pub check: &'static str,
    /// What the model says (only the parts that differ, for a state).
    pub model: String,
    /// What Valkey says.
    pub valkey: String,
}

/// Why a step could not be judged, or was judged wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExploreError {
    /// The model and Valkey disagree: a finding.
    #[error(transparent)]
    Divergence(Box<Divergence>),
    /// Valkey could not answer (unreachable, timeout, protocol error): the
    /// run cannot go on, and says nothing about the queue's correctness.
    #[error("step {step_index} ({step}): {source}")]
    Queue {
        /// The step's position, from 0.
        step_index: usize,
        /// The step.
        step: Step,
        /// What went wrong.
        source: QueueError,
    },
    /// Valkey could not answer outside a step: while the queue was cleared
    /// before the run, or read back after it.
    #[error("{during}: {source}")]
    Setup {
        /// What the explorer was doing.
        during: &'static str,
        /// What went wrong.
        source: QueueError,
    },
    /// The model broke its own invariants: a bug in the model.
    #[error("step {step_index} ({step}): the model broke its own invariants: {problems}")]
    Model {
        /// The step's position, from 0.
        step_index: usize,
        /// The step.
        step: Step,
        /// What [`Model::check_structure`] found.
        problems: String,
    },
    /// The step names a worker the configuration does not have.
    #[error("step {step_index} ({step}): no worker {worker}; this run has {workers}")]
    NoSuchWorker {
        /// The step's position, from 0.
        step_index: usize,
        /// The step.
        step: Step,
        /// The worker named.
        worker: u8,
        /// How many workers the run has.
        workers: u8,
    },
}

/// Drives one model and one Valkey queue in lock step.
pub struct Driver {
    queue: Queue,
    model: Model,
    now_ms: u64,
    config: DriverConfig,
    workers: Vec<Worker>,
    recorder: Recorder,
    applied: Vec<Step>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("now_ms", &self.now_ms)
            .field("config", &self.config)
            .field("workers", &self.workers)
            .field("applied", &self.applied.len())
            .finish()
    }
}

impl Driver {
    /// A driver on `queue`, which is cleared first so that it starts, like
    /// the model, empty. Time starts at [`START_MS`].
    pub async fn start(
        queue: &Queue,
        config: DriverConfig,
        recorder: Recorder,
    ) -> Result<Driver, QueueError> {
        queue.clear().await?;
        Ok(Driver {
            queue: queue.on_server_clock(),
            model: Model::new(),
            now_ms: START_MS,
            config,
            workers: vec![Worker::default(); usize::from(config.workers)],
            recorder,
            applied: Vec::new(),
        })
    }

    /// The logical time now (ms).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The model, as it stands after the steps applied so far.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The settings.
    pub fn config(&self) -> DriverConfig {
        self.config
    }

    /// Each worker's local state, by index.
    pub fn workers(&self) -> &[Worker] {
        &self.workers
    }

    /// The steps applied so far (the one that diverged included).
    pub fn applied(&self) -> &[Step] {
        &self.applied
    }

    /// The history recorded so far.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// Applies `step` to both sides and checks outcome, refinement and
    /// structure. Returns the (agreed) outcome.
    pub async fn apply(&mut self, step: &Step) -> Result<Outcome, ExploreError> {
        let step_index = self.applied.len();
        self.applied.push(step.clone());
        if let Some(worker) = step.worker() {
            if worker >= self.config.workers {
                return Err(ExploreError::NoSuchWorker {
                    step_index,
                    step: step.clone(),
                    worker,
                    workers: self.config.workers,
                });
            }
        }
        let queue_error = |source: QueueError| ExploreError::Queue {
            step_index,
            step: step.clone(),
            source,
        };
        let (model, valkey) = self.run(step_index, step).await.map_err(queue_error)?;
        let diverged = |check: &'static str, model: String, valkey: String| {
            ExploreError::Divergence(Box::new(Divergence {
                step_index,
                step: step.clone(),
                check,
                model,
                valkey,
            }))
        };
        if model != valkey {
            return Err(diverged(
                "outcome",
                format!("{model:?}"),
                format!("{valkey:?}"),
            ));
        }
        self.model
            .check_structure()
            .map_err(|problems| ExploreError::Model {
                step_index,
                step: step.clone(),
                problems,
            })?;
        let read = self.queue.snapshot().await.map_err(queue_error)?;
        let expected = self.model.snapshot();
        if read != expected {
            let (model, valkey) = difference(&expected, &read);
            return Err(diverged("refinement", model, valkey));
        }
        let problems = read.structure_problems();
        if !problems.is_empty() {
            return Err(diverged(
                "structure",
                "no problem".into(),
                problems.join("; "),
            ));
        }
        Ok(model)
    }

    /// Reads the queue back into the history (the final `read` the
    /// checkers need).
    pub async fn record_read(&self) -> Result<(), QueueError> {
        campaign::record_read(&self.queue, &self.recorder).await
    }

    /// Runs `step` on both sides; updates the workers from the model's
    /// answer.
    async fn run(
        &mut self,
        step_index: usize,
        step: &Step,
    ) -> Result<(Outcome, Outcome), QueueError> {
        let now_ms = self.now_ms;
        let queue = self.queue.at(now_ms);
        let rec = self.recorder.clone();
        let cfg = self.config;
        Ok(match *step {
            Step::Enqueue { job } => {
                let id = job_id(job);
                // Each enqueue carries a payload of its own, so that a
                // duplicate that overwrote the first would show.
                let payload = format!("payload-{job}-{step_index}");
                let options = EnqueueOptions {
                    max_attempts: cfg.max_attempts,
                    delay_ms: 0,
                };
                let op = rec.push_invoke_with(
                    "producer",
                    F::Enqueue,
                    Some(&id),
                    json!({ "payload": payload }),
                );
                let valkey = queue.enqueue(&id, payload.as_bytes(), options).await;
                close(&rec, op, &valkey, |e| (None, None, json!({ "outcome": e })));
                let model =
                    self.model
                        .enqueue(&id, payload.as_bytes(), cfg.max_attempts, 0, now_ms);
                (
                    from_model(model, Outcome::Enqueue),
                    from_valkey(valkey, Outcome::Enqueue)?,
                )
            }
            Step::Lease { worker } => {
                let name = worker_name(worker);
                let op = rec.invoke(&name, F::Lease, None, None);
                let valkey = queue.lease(&name, cfg.lease_ms).await;
                close(&rec, op, &valkey, lease_value);
                let model = self.model.lease(&name, cfg.lease_ms, now_ms);
                if let Ok(Some(lease)) = &model {
                    let w = &mut self.workers[usize::from(worker)];
                    if let Some(old) = w.held.take() {
                        w.stale = Some(old);
                    }
                    w.held = Some(Held {
                        id: lease.id.clone(),
                        token: lease.token,
                    });
                }
                (
                    from_model(model, Outcome::Lease),
                    from_valkey(valkey, Outcome::Lease)?,
                )
            }
            Step::Complete { worker } | Step::StaleComplete { worker } => {
                let w = &mut self.workers[usize::from(worker)];
                let stale = matches!(step, Step::StaleComplete { .. });
                let held = if stale {
                    w.stale.clone()
                } else {
                    w.held.clone()
                };
                let Some(held) = held else {
                    return Ok((Outcome::Idle, Outcome::Idle));
                };
                let name = worker_name(worker);
                let op = rec.invoke(&name, F::Complete, Some(&held.id), Some(held.token));
                let valkey = queue.complete(&held.id, held.token).await;
                close(&rec, op, &valkey, |s| {
                    (None, None, campaign::settled_value(s))
                });
                let model = self.model.complete(&held.id, held.token);
                // Whatever the answer, the worker is done with that lease.
                let w = &mut self.workers[usize::from(worker)];
                if stale {
                    w.stale = None;
                } else {
                    w.held = None;
                }
                (
                    from_model(model, Outcome::Complete),
                    from_valkey(valkey, Outcome::Complete)?,
                )
            }
            Step::Fail { worker, delay_ms } => {
                let Some(held) = self.workers[usize::from(worker)].held.take() else {
                    return Ok((Outcome::Idle, Outcome::Idle));
                };
                let name = worker_name(worker);
                let op = rec.invoke(&name, F::Fail, Some(&held.id), Some(held.token));
                let valkey = queue.fail(&held.id, held.token, delay_ms).await;
                close(&rec, op, &valkey, |f| {
                    (None, None, campaign::failed_value(f))
                });
                let model = self.model.fail(&held.id, held.token, delay_ms, now_ms);
                (
                    from_model(model, Outcome::Fail),
                    from_valkey(valkey, Outcome::Fail)?,
                )
            }
            Step::Extend { worker } => {
                let Some(held) = self.workers[usize::from(worker)].held.clone() else {
                    return Ok((Outcome::Idle, Outcome::Idle));
                };
                let name = worker_name(worker);
                let op = rec.invoke(&name, F::Extend, Some(&held.id), Some(held.token));
                let valkey = queue.extend(&held.id, held.token, cfg.lease_ms).await;
                close(&rec, op, &valkey, |x| {
                    (None, None, serde_json::to_value(x).unwrap_or_default())
                });
                let model = self
                    .model
                    .extend(&held.id, held.token, cfg.lease_ms, now_ms);
                (
                    from_model(model, Outcome::Extend),
                    from_valkey(valkey, Outcome::Extend)?,
                )
            }
            Step::Crash { worker } => {
                let w = &mut self.workers[usize::from(worker)];
                let Some(held) = w.held.take() else {
                    return Ok((Outcome::Idle, Outcome::Idle));
                };
                let op = rec.invoke(
                    &worker_name(worker),
                    F::Crash,
                    Some(&held.id),
                    Some(held.token),
                );
                rec.ok(
                    op,
                    None,
                    None,
                    json!({"outcome": "crashed", "holding": held.id}),
                );
                w.stale = Some(held);
                (Outcome::Crash, Outcome::Crash)
            }
            Step::Reap => {
                let op = rec.invoke("reaper", F::Reap, None, None);
                let valkey = queue.reap(cfg.reap_limit).await;
                close(&rec, op, &valkey, |r| {
                    (None, None, json!({"outcome": "reaped", "reaped": r}))
                });
                let model = self.model.reap(cfg.reap_limit, now_ms);
                (
                    from_model(model, Outcome::Reap),
                    from_valkey(valkey, Outcome::Reap)?,
                )
            }
            Step::Tick { ms } => {
                self.now_ms = now_ms.saturating_add(ms);
                let op = rec.invoke("nemesis", F::Fault, None, None);
                rec.ok(
                    op,
                    None,
                    None,
                    json!({"outcome": "tick", "ms": ms, "now_ms": self.now_ms}),
                );
                let outcome = Outcome::Tick {
                    now_ms: self.now_ms,
                };
                (outcome.clone(), outcome)
            }
        })
    }
}

/// The id of job index `job`.
pub fn job_id(job: u8) -> String {
    format!("JOB-{job}")
}

/// The name of worker index `worker`.
pub fn worker_name(worker: u8) -> String {
    format!("w{worker}")
}

fn from_model<T>(result: Result<T, ModelError>, wrap: impl FnOnce(T) -> Outcome) -> Outcome {
    match result {
        Ok(v) => wrap(v),
        Err(e) => Outcome::Refused {
            code: e.code.to_owned(),
        },
    }
}

/// A refusal is an outcome to compare; any other error stops the run.
fn from_valkey<T>(
    result: Result<T, QueueError>,
    wrap: impl FnOnce(T) -> Outcome,
) -> Result<Outcome, QueueError> {
    match result {
        Ok(v) => Ok(wrap(v)),
        Err(QueueError::Kind { .. }) => Ok(Outcome::Refused {
            code: "EMQKIND".into(),
        }),
        Err(QueueError::BadArgument { .. }) => Ok(Outcome::Refused {
            code: "EMQARG".into(),
        }),
        Err(e) => Err(e),
    }
}

/// The parts of two snapshots that differ, as (model, valkey) text.
fn difference(model: &Snapshot, valkey: &Snapshot) -> (String, String) {
    use std::collections::{BTreeMap, BTreeSet};
    use std::fmt::Debug;

    fn maps<V: PartialEq + Debug>(
        name: &str,
        a: &BTreeMap<String, V>,
        b: &BTreeMap<String, V>,
        out: &mut (Vec<String>, Vec<String>),
    ) {
        let ids: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for id in ids {
            let (x, y) = (a.get(id), b.get(id));
            if x != y {
                out.0.push(format!("{name}[{id}]={x:?}"));
                out.1.push(format!("{name}[{id}]={y:?}"));
            }
        }
    }

    let mut out = (Vec::new(), Vec::new());
    maps("rows", &model.rows, &valkey.rows, &mut out);
    maps("pending", &model.pending, &valkey.pending, &mut out);
    maps("active", &model.active, &valkey.active, &mut out);
    maps("dead", &model.dead, &valkey.dead, &mut out);
    if model.done != valkey.done {
        out.0.push(format!("done={:?}", model.done));
        out.1.push(format!("done={:?}", valkey.done));
    }
    if model.foreign != valkey.foreign {
        out.0.push(format!("foreign={:?}", model.foreign));
        out.1.push(format!("foreign={:?}", valkey.foreign));
    }
    (out.0.join("; "), out.1.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::JobState;

    #[test]
    fn a_difference_names_only_the_entries_that_differ() {
        let mut model = Model::new();
        model.enqueue("JOB-0", b"p", 3, 0, 5).unwrap();
        model.enqueue("JOB-1", b"p", 3, 0, 5).unwrap();
        let a = model.snapshot();
        let mut b = a.clone();
        b.pending.insert("JOB-1".into(), 9);
        b.rows.get_mut("JOB-1").unwrap().state = Some(JobState::Done);
        let (m, v) = difference(&a, &b);
        assert!(!m.contains("JOB-0") && !v.contains("JOB-0"), "{m} / {v}");
        assert!(m.contains("pending[JOB-1]=Some(5)"), "{m}");
        assert!(v.contains("pending[JOB-1]=Some(9)"), "{v}");
        assert!(v.contains("Done"), "{v}");
        assert_eq!(difference(&a, &a), (String::new(), String::new()));
    }
}
