//! Parallel steps (`l0+l1`) in the exhaustive search.
//!
//! With [`super::ExhaustConfig::parallel`] the search also tries, at each
//! state within the depth, two callers' calls sent together as the path's
//! **last** step, at width 2 (two members): two leases when a job is ready,
//! a lease beside another worker's complete or fail, two holders' settles,
//! a stale complete beside the holder's, and the reaper beside the settle
//! of a lease that has expired. Such a path is a leaf: it is run and judged
//! (before healing, and healed by every history checker; on the reference
//! queue the driver accepts the answers if some order of the members gives
//! them), never merged and never searched past, because the order the
//! server ran the members in is not the path's to choose: replayed, the
//! same path may reach another state, and a prefix must replay to the one
//! the search recorded. So a race the search finds has a parallel step as
//! its last step (`e0 l0+l1`: the non-atomic lease, at depth 2); a race
//! whose harm shows only steps later is the walks' (`explore --parallel`).
//!
//! A path the search reaches otherwise (a replayed line with a parallel
//! step inside it) steps the model in the written order
//! ([`parallel_model`]).

use std::time::Instant;

use super::{
    judge_path, path_to, step_model, DriverConfig, ExhaustConfig, ExhaustReport, State, Step,
};
use crate::explore::driver::{ExploreError, Subject};
use crate::queue::JobState;

/// Runs and judges each parallel leaf at `state`, reached by `path` (with
/// `config.parallel` and the server), its time counted as the server's:
/// true when one broke an invariant and the search stops there.
pub(super) async fn judge_leaves(
    subject: &Subject,
    config: &ExhaustConfig,
    (parent, index): (&[Option<(usize, Step)>], usize),
    state: &State,
    report: &mut ExhaustReport,
    valkey_time: &mut std::time::Duration,
) -> Result<bool, ExploreError> {
    if !(config.valkey && config.parallel) {
        return Ok(false);
    }
    let path = path_to(parent, index);
    for step in parallel_leaves(state) {
        let mut leaf = path.clone();
        leaf.push(step);
        report.parallel_paths += 1;
        let t = Instant::now();
        let broke = judge_path(subject, config, &leaf, report).await?;
        *valkey_time += t.elapsed();
        if broke && !config.keep_going {
            return Ok(true);
        }
    }
    Ok(false)
}

/// [`step_model`] for the members of a parallel step, in the written
/// order: false when none did anything.
pub(super) fn parallel_model(
    s: &mut State,
    steps: &[Step],
    cfg: &DriverConfig,
    parts: usize,
) -> bool {
    let mut any = false;
    for member in steps {
        any |= step_model(s, member, cfg, parts);
    }
    any
}

/// The parallel steps tried as leaves at `s` (see the module docs), in a
/// fixed order. `s.model` is the model's (on another queue, the guide the
/// search keeps beside it): it says whether a job is ready to lease and
/// whether a held lease has expired.
pub(super) fn parallel_leaves(s: &State) -> Vec<Step> {
    let now = s.now_ms;
    let ready = s.model.jobs().any(|(_, job)| {
        job.state() == JobState::Pending && job.score_ms().is_some_and(|at| at <= now)
    });
    let expired = |id: &str| {
        s.model.jobs().any(|(j, job)| {
            j == id && job.state() == JobState::Active && job.score_ms().is_some_and(|at| at <= now)
        })
    };
    // Each worker's calls: a lease when it is idle, its settles when it
    // holds one, and its stale complete when it has a stale lease.
    let calls: Vec<Vec<Step>> = s
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let worker = u8::try_from(i).unwrap_or(u8::MAX);
            let mut out = Vec::new();
            match &w.held {
                None => out.push(Step::Lease { worker }),
                Some(_) => {
                    out.push(Step::Complete { worker });
                    out.push(Step::Fail {
                        worker,
                        delay_ms: 0,
                    });
                }
            }
            if w.stale.is_some() {
                out.push(Step::StaleComplete { worker });
            }
            out
        })
        .collect();
    let mut out = Vec::new();
    for (i, mine) in calls.iter().enumerate() {
        for theirs in &calls[i + 1..] {
            for a in mine {
                for b in theirs {
                    let leases = [a, b]
                        .iter()
                        .filter(|m| matches!(m, Step::Lease { .. }))
                        .count();
                    // Two leases race only for a ready job.
                    if leases == 2 && !ready {
                        continue;
                    }
                    out.push(Step::Parallel {
                        steps: vec![a.clone(), b.clone()],
                    });
                }
            }
        }
    }
    // The reaper beside the settle of a lease it may take.
    for (i, w) in s.workers.iter().enumerate() {
        if w.held.as_ref().is_some_and(|h| expired(&h.id)) {
            let worker = u8::try_from(i).unwrap_or(u8::MAX);
            out.push(Step::Parallel {
                steps: vec![Step::Reap, Step::Complete { worker }],
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::driver::{Held, Worker, START_MS};
    use crate::model::Model;
    use std::collections::BTreeMap;

    fn state(workers: Vec<Worker>) -> State {
        State {
            model: Model::new(),
            workers,
            now_ms: START_MS,
            effects: BTreeMap::new(),
        }
    }

    fn held(id: &str) -> Option<Held> {
        Some(Held {
            id: id.into(),
            token: 1,
            payload: Vec::new(),
            parts_done: 0,
        })
    }

    fn text(steps: &[Step]) -> Vec<String> {
        steps.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn two_idle_workers_race_their_leases_only_for_a_ready_job() {
        let mut s = state(vec![Worker::default(); 2]);
        assert!(parallel_leaves(&s).is_empty(), "no job: nothing to race");
        let _ = s.model.enqueue("JOB-0", b"p", 2, 0, START_MS);
        assert_eq!(text(&parallel_leaves(&s)), ["l0+l1"]);
    }

    #[test]
    fn a_holder_races_its_settles_against_the_idle_worker_s_lease_and_the_reaper_only_once_its_lease_expired(
    ) {
        let mut s = state(vec![Worker::default(); 2]);
        let _ = s.model.enqueue("JOB-0", b"p", 2, 0, START_MS);
        let lease = s.model.lease("w0", 100, START_MS).unwrap().unwrap();
        s.workers[0].held = Some(Held::from(lease));
        assert_eq!(text(&parallel_leaves(&s)), ["c0+l1", "f0+l1"]);
        s.now_ms += 100;
        assert_eq!(text(&parallel_leaves(&s)), ["c0+l1", "f0+l1", "r+c0"]);
        s.workers[1].held = held("JOB-1");
        s.workers[1].stale = held("JOB-0");
        assert_eq!(
            text(&parallel_leaves(&s)),
            ["c0+c1", "c0+f1", "c0+s1", "f0+c1", "f0+f1", "f0+s1", "r+c0"]
        );
    }
}
