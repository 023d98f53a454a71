//! A queue call's answer as an [`Outcome`], on either side: the model's
//! (a refusal is an outcome), the subject's (a refusal is an outcome, any
//! other error stops the run), and what an outcome granted or announced.

use super::{Extended, Failed, Lease, ModelError, Outcome, QueueError};

/// The model's answer: a refusal is an outcome to compare.
pub(super) fn from_model<T>(
    result: Result<T, ModelError>,
    wrap: impl FnOnce(T) -> Outcome,
) -> Outcome {
    match result {
        Ok(v) => wrap(v),
        Err(e) => Outcome::Refused {
            code: e.code.to_owned(),
        },
    }
}

/// A refusal is an outcome to compare; any other error stops the run.
pub(super) fn from_valkey<T>(
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

/// A `complete_and_lease`'s two halves as one outcome.
pub(super) fn complete_next(
    settled: Result<Outcome, QueueError>,
    next: Result<Outcome, QueueError>,
) -> Result<Outcome, QueueError> {
    Ok(Outcome::CompleteNext {
        settled: Box::new(settled?),
        next: Box::new(next?),
    })
}

/// The deadline (a lease granted, an extend) or ready time (a requeueing
/// fail) an outcome announced, if any.
pub(super) fn announced(outcome: &Outcome) -> Option<u64> {
    match outcome {
        Outcome::Lease(Some(lease)) => Some(lease.deadline_ms),
        Outcome::Extend(Extended::Extended { deadline_ms }) => Some(*deadline_ms),
        Outcome::Fail(Failed::Requeued { ready_at_ms }) => Some(*ready_at_ms),
        Outcome::CompleteNext { next, .. } => announced(next),
        _ => None,
    }
}

/// The lease an outcome granted, if any.
pub(super) fn granted(outcome: &Outcome) -> Option<Lease> {
    match outcome {
        Outcome::Lease(lease) => lease.clone(),
        Outcome::CompleteNext { next, .. } => granted(next),
        _ => None,
    }
}
