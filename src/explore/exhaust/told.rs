//! What a path's history says beyond the queue's read, for the search on
//! another queue than the reference: each lease named by its delivery
//! (opaque tokens, new on every replay, do not split a state) and each
//! job's deliveries and last announced deadline or ready time.

use std::collections::{BTreeMap, HashMap};

use super::{Held, Worker};

/// What a path's history says of one job beyond the queue's read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Told {
    /// Leases granted.
    pub(super) deliveries: u64,
    /// The deadline (a lease or an extend) or ready time (a fail) the
    /// queue last answered for it.
    pub(super) at_ms: Option<u64>,
}

/// Each lease of a path's history named by its delivery: the n-th lease
/// granted of its job. A queue's tokens may be opaque (a random lock
/// token), new on every replay of the same path; the delivery they name
/// is not.
pub(super) struct Deliveries {
    /// (job, token) -> the delivery it names, from 1.
    ordinal: HashMap<(String, u64), u64>,
    pub(super) told: BTreeMap<String, Told>,
}

impl Deliveries {
    pub(super) fn of(events: &[crate::history::Event]) -> Deliveries {
        use crate::history::F;
        let mut out = Deliveries {
            ordinal: HashMap::new(),
            told: BTreeMap::new(),
        };
        for op in crate::check::ops(events) {
            let Some(job) = op.job() else { continue };
            let at = |field: &str| op.done.and_then(|e| e.value.as_ref()?.get(field)?.as_u64());
            match (op.f(), op.outcome()) {
                (F::Lease, Some("leased")) => {
                    let told = out.told.entry(job.to_owned()).or_default();
                    told.deliveries += 1;
                    told.at_ms = at("deadline_ms");
                    if let Some(token) = op.token() {
                        out.ordinal.insert((job.to_owned(), token), told.deliveries);
                    }
                }
                (F::Extend, Some("extended")) => {
                    out.told.entry(job.to_owned()).or_default().at_ms = at("deadline_ms");
                }
                (F::Fail, Some("requeued")) => {
                    out.told.entry(job.to_owned()).or_default().at_ms = at("ready_at_ms");
                }
                _ => {}
            }
        }
        out
    }

    /// `w` with each lease's token replaced by the delivery it names.
    pub(super) fn name(&self, w: &Worker) -> Worker {
        let name = |h: &Held| Held {
            token: self
                .ordinal
                .get(&(h.id.clone(), h.token))
                .copied()
                .unwrap_or(0),
            ..h.clone()
        };
        Worker {
            held: w.held.as_ref().map(name),
            stale: w.stale.as_ref().map(name),
        }
    }
}

/// The ticks to the earliest deadline or ready time the queue announced
/// that is still ahead of `now_ms`: one ms short of it, to it, and one
/// ms past it.
pub(super) fn boundary_ticks(told: &BTreeMap<String, Told>, now_ms: u64) -> Vec<u64> {
    let Some(ahead) = told
        .values()
        .filter_map(|t| t.at_ms)
        .filter(|at| *at > now_ms)
        .min()
        .map(|at| at - now_ms)
    else {
        return Vec::new();
    };
    [ahead - 1, ahead, ahead + 1]
        .into_iter()
        .filter(|ms| *ms > 0)
        .collect()
}
