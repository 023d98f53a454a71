//! Parallel steps (`l0+l1`) in the exhaustive search: its vocabulary has
//! none, so it does not branch on the orders a parallel step may run in; a
//! path that holds one (a replayed line) steps the model in the written
//! order.

use super::{step_model, DriverConfig, State, Step};

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
