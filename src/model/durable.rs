//! What a crash of the server leaves of the queue, as the model knows it:
//! the states a queue may come back in after a kill -9 or a power loss,
//! under what the server persists ([`Kept`]). The explorers' server steps
//! (`K`, `P`) ask [`Since::recover`] which state the queue read back after
//! the restart is, and go on from it; a queue that comes back in a state the
//! model does not allow is a divergence.
//!
//! # What each mode keeps
//!
//! - **Nothing**: no persistence (`appendonly no`, RDB off): the server
//!   comes back empty, after a kill as after a power loss.
//! - **All**: `appendfsync always`: every write is fsynced before its reply,
//!   so nothing acknowledged is lost, by a kill or a power loss.
//! - **A prefix**: `appendfsync everysec`: the AOF keeps the writes up to
//!   some point and none after: up to its last fsync (a power loss drops
//!   the last second or so of writes), or up to its last write (a kill
//!   keeps the page cache, but a write the server postponed while a fsync
//!   ran is not in the file yet). Each script's writes are one
//!   `MULTI`/`EXEC` in the AOF, and a truncated transaction is not loaded,
//!   so the queue comes back in the state after some step, never half of
//!   one.
//!
//! A prefix is what the model *accepts*: it cannot know when the server
//! last fsynced. Whether an acknowledged job was lost is the history
//! checkers' to say (no-loss): the model goes on from the state the queue
//! came back in, and the walk's final read shows what is gone.

use super::Model;
use crate::queue::state::Snapshot;

/// What a crash of the server keeps of the writes it acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Nothing: the server comes back empty.
    Nothing,
    /// Every acknowledged write.
    All,
    /// The writes up to some point, none after it.
    Prefix,
}

/// The model's states since the server last came up, oldest first: what a
/// crash may take the queue back to.
#[derive(Clone, Debug)]
pub struct Since {
    states: Vec<Model>,
}

impl Since {
    /// The states since `model` (the queue as it came up, or was cleared
    /// and made durable).
    pub fn new(model: &Model) -> Since {
        Since {
            states: vec![model.clone()],
        }
    }

    /// Notes the state after a step (a state equal to the last one is kept
    /// once).
    pub fn note(&mut self, model: &Model) {
        if self.states.last() != Some(model) {
            self.states.push(model.clone());
        }
    }

    /// How many states a crash may go back to.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// True when no state is noted (never: [`Since::new`] notes one).
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The state the queue came back in after a crash that keeps `kept`,
    /// if the model allows `read` (the queue read back after the restart):
    /// the empty queue for [`Kept::Nothing`], the latest state for
    /// [`Kept::All`], the latest state whose snapshot is `read` for
    /// [`Kept::Prefix`]. `None` when `read` is none of them (a finding).
    /// The states since then restart from the one answered.
    pub fn recover(&mut self, kept: Kept, read: &Snapshot) -> Option<Model> {
        let allowed = match kept {
            Kept::Nothing => Some(Model::new()),
            Kept::All => self.states.last().cloned(),
            Kept::Prefix => self
                .states
                .iter()
                .rev()
                .find(|state| state.snapshot() == *read)
                .cloned(),
        }
        .filter(|state| state.snapshot() == *read)?;
        *self = Since::new(&allowed);
        Some(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states() -> (Model, Model, Model) {
        let empty = Model::new();
        let mut one = empty.clone();
        one.enqueue("JOB-0", b"p", 3, 0, 5).unwrap();
        let mut two = one.clone();
        two.enqueue("JOB-1", b"p", 3, 0, 6).unwrap();
        (empty, one, two)
    }

    #[test]
    fn always_keeps_the_latest_state_and_nothing_else() {
        let (empty, one, two) = states();
        let mut since = Since::new(&empty);
        since.note(&one);
        since.note(&two);
        assert_eq!(since.clone().recover(Kept::All, &two.snapshot()), Some(two));
        assert_eq!(since.recover(Kept::All, &one.snapshot()), None);
    }

    #[test]
    fn a_prefix_is_any_state_since_the_server_came_up_and_only_those() {
        let (empty, one, two) = states();
        let mut since = Since::new(&empty);
        since.note(&one);
        since.note(&one);
        assert_eq!(since.len(), 2);
        since.note(&two);
        for state in [&empty, &one, &two] {
            let mut s = since.clone();
            assert_eq!(
                s.recover(Kept::Prefix, &state.snapshot()).as_ref(),
                Some(state)
            );
            assert_eq!(s.len(), 1, "the states restart from the one recovered");
        }
        let mut other = Model::new();
        other.enqueue("JOB-9", b"p", 3, 0, 5).unwrap();
        assert_eq!(since.recover(Kept::Prefix, &other.snapshot()), None);
    }

    #[test]
    fn no_persistence_comes_back_empty() {
        let (empty, one, _) = states();
        let mut since = Since::new(&one);
        assert_eq!(since.clone().recover(Kept::Nothing, &one.snapshot()), None);
        assert_eq!(since.recover(Kept::Nothing, &empty.snapshot()), Some(empty));
    }
}
