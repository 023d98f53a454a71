//! [`Adapter::reopen`] on `exec:`: after the server restarted, the child's
//! sessions are opened afresh, so that a library that reconnects only on
//! the error its first call meets (arq's, BullMQ's, Sidekiq's) meets the
//! restarted server on new connections.
//!
//! A child that lists `crash` is sent one for every worker name its
//! requests carried (its sessions: the kits drop a crashed worker's
//! session and open a fresh one on its next request), and keeps its
//! process: what the adapter counts there (BullMQ's tokens are the
//! adapter's own counter) goes on counting. A child that does not list
//! `crash` is started again and said hello, its process state gone: an
//! adapter that keeps tokens in its process must list `crash`, or a token
//! would be granted twice.

use std::sync::atomic::Ordering;

use super::{greeted, lock, Call, Exec, QueueError};
use crate::adapter::{Adapter, Operation};

impl Exec {
    /// Every session afresh: `crash` for each worker name, or a new child.
    pub(super) async fn reopen_sessions(&self) -> Result<(), QueueError> {
        if !self.capabilities().supports(Operation::Crash) {
            return self.respawn().await;
        }
        let names: Vec<String> = lock(&self.shared.names).iter().cloned().collect();
        for name in names {
            self.call(&name, Call::Crash).await?;
        }
        Ok(())
    }

    /// Starts the child again and says hello; the old child is shut down
    /// as the last handle's drop does.
    async fn respawn(&self) -> Result<(), QueueError> {
        let shared = &self.shared;
        let command = shared.name.strip_prefix("exec:").unwrap_or(&shared.name);
        let queue = &shared.queue.keys().name;
        let (guard, _) = greeted(command, queue, &shared.server_url, &shared.options)
            .await
            .map_err(|e| QueueError::Adapter {
                op: "reopen",
                message: e.to_string(),
            })?;
        let clock_ms = self.link().clock_ms.load(Ordering::SeqCst);
        guard.link.clock_ms.store(clock_ms, Ordering::SeqCst);
        let old = std::mem::replace(&mut *lock(&shared.guard), guard);
        // Its drop waits for the child to exit: off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || drop(old)).await;
        Ok(())
    }
}
