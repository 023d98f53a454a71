//! The walk's parallel steps ([`Step::Parallel`]): with the subject's
//! [`Subject::parallel`](crate::explore::Subject::parallel) chance, a step
//! is two callers' calls sent together (width 2; a schedule may hold up to
//! [`PARALLEL_MAX`](crate::explore::op::PARALLEL_MAX)).
//!
//! Each caller that can act offers one call: a worker holding a lease its
//! complete, fail or extend (by the walk's weights) or, rarely, a lease; a
//! worker holding a stale lease its stale complete; any other worker a
//! lease; the reaper a reap while a lease is out; the producer an enqueue.
//! Two of them are drawn. The coins come from the walk's side stream (as
//! the stale-holder options' do), never from its own: a walk with the
//! chance at 0 draws nothing here, and every seed's walk is what it was.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::queue::JobState;

use super::{actors, arguments, coin, kind_weights, Driver, Step, StepKind, SwarmConfig, GRAIN_MS};

/// The members a parallel step joins in a walk.
const WIDTH: usize = 2;

/// A parallel step, when the coin says so and two callers can act.
pub(super) fn draw(coins: &mut ChaCha8Rng, config: &SwarmConfig, driver: &Driver) -> Option<Step> {
    if !coin(coins, driver.subject().parallel) {
        return None;
    }
    let actors = actors(config, driver);
    let kinds = kind_weights(config, driver, &actors);
    let weight = |kind: StepKind| {
        kinds
            .iter()
            .find(|(_, k)| *k == kind)
            .map_or(0, |(w, _)| *w)
    };
    let mut offers = Vec::new();
    for worker in 0..config.workers {
        let mut choices = vec![(1, StepKind::Lease)];
        if actors.holding.contains(&worker) {
            choices.extend(
                [StepKind::Complete, StepKind::Fail, StepKind::Extend].map(|k| (weight(k), k)),
            );
        } else if actors.stale.contains(&worker) {
            choices.push((weight(StepKind::StaleComplete), StepKind::StaleComplete));
        }
        let step = match pick(coins, &choices) {
            StepKind::Complete => Step::Complete { worker },
            StepKind::Extend => Step::Extend { worker },
            StepKind::StaleComplete => Step::StaleComplete { worker },
            StepKind::Fail => Step::Fail {
                worker,
                delay_ms: GRAIN_MS * coins.random_range(0..=config.lease_ms / GRAIN_MS),
            },
            _ => Step::Lease { worker },
        };
        offers.push(step);
    }
    let out = driver
        .model()
        .jobs()
        .any(|(_, job)| job.state() == JobState::Active);
    if out && weight(StepKind::Reap) > 0 {
        offers.push(Step::Reap);
    }
    if weight(StepKind::Enqueue) > 0 {
        offers.push(arguments(coins, config, StepKind::Enqueue, &actors));
    }
    if offers.len() < WIDTH {
        return None;
    }
    let mut members = Vec::new();
    while members.len() < WIDTH {
        members.push(offers.swap_remove(coins.random_range(0..offers.len())));
    }
    Step::parallel(members).ok()
}

/// A kind drawn by weight from `choices` (the first when every weight is
/// 0).
fn pick(coins: &mut ChaCha8Rng, choices: &[(u32, StepKind)]) -> StepKind {
    let total: u32 = choices.iter().map(|(w, _)| w).sum();
    if total == 0 {
        return choices[0].1;
    }
    let mut at = coins.random_range(0..total);
    for &(w, kind) in choices {
        if at < w {
            return kind;
        }
        at -= w;
    }
    choices[0].1
}
