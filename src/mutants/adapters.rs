//! The two mutants whose mistake lives partly in the client, as adapters
//! around the reference queue: a lease split into two calls
//! ([`SplitLease`], `lua/mutants/lease_split.lua`) and a lease that takes
//! its time from the client's skewed clock ([`ClientClock`],
//! `lua/mutants/lease_client_clock.patch`, applied to `lua/lease.lua` by
//! build.rs; the split lease's claim is a whole script of its own: see
//! [`crate::mutants`]).
//!
//! Both call themselves `reference`: they keep the reference layout, so the
//! driver compares them with the model after every step (refinement), as it
//! does the pure script mutants. The replay line therefore names the
//! reference queue; `ackgap mutants` prints which mutant a line belongs to.
//!
//! Each is a [`Wrapper`] of the reference adapter that overrides what its
//! mistake changes and three things beside, the same in both:
//!
//! - `complete_and_lease`: complete, then this adapter's own lease (the
//!   reference's one script would run the correct lease);
//! - `clear`: the mutant's own state first, if it keeps any;
//! - `read_back`: its own, with the read-back mode off. The mutant lease
//!   goes through a queue of its own, so the reference's pipelined
//!   read-back would miss it and answer the state before it; every
//!   snapshot is a read of its own instead.
//!
//! # Design notes
//!
//! The split lease's pick is prefetched after each lease, so that other
//! workers' steps fall between the halves.

use std::collections::BTreeMap;
use std::sync::Mutex;

use redis::{Script, Value};

use crate::adapter::{
    complete_then_lease, Adapter, BoxFuture, CompleteAndLease, Lease, Queue, QueueError, ReadBack,
    Reference, Wrapper,
};
use crate::queue::scripts::full_text;

/// The claim half of the split lease.
pub(crate) const LEASE_SPLIT: &str = include_str!("../../lua/mutants/lease_split.lua");

/// The lease that trusts the client's clock.
pub(crate) const LEASE_CLIENT_CLOCK: &str =
    include_str!(concat!(env!("OUT_DIR"), "/mutants/lease_client_clock.lua"));

/// How far behind the server the [`ClientClock`] client's clock runs (ms).
pub const CLIENT_SKEW_MS: u64 = 40;

/// A lease in two calls: `ZRANGEBYSCORE` to pick a ready job, then a
/// script that claims the picked id without checking it is still pending.
///
/// To make the gap between the calls something the explorers can put
/// steps into, each worker *prefetches*: right after a lease it picks the
/// job it will claim on its next lease (a common optimisation), and a
/// worker with nothing picked picks and claims at once. Run alone, a worker
/// sees what the atomic lease would give it; with another worker's lease,
/// complete or fail between its pick and its claim, it claims a job that
/// is no longer pending: the classic check-then-act race, in as few as five
/// steps (`e0 e1 l0 l1 l0`).
pub struct SplitLease {
    inner: Reference,
    queue: Queue,
    reads: OwnReads,
    claim: Script,
    picked: Mutex<BTreeMap<String, String>>,
}

impl SplitLease {
    /// The split lease on `queue` (reference scripts otherwise).
    pub fn new(queue: &Queue) -> SplitLease {
        SplitLease {
            inner: Reference::new(queue.on_server_clock()),
            queue: queue.on_server_clock(),
            reads: OwnReads(queue.on_server_clock()),
            claim: Script::new(&full_text(LEASE_SPLIT)),
            picked: Mutex::new(BTreeMap::new()),
        }
    }

    async fn now(&self, now_ms: Option<u64>) -> Result<u64, QueueError> {
        match now_ms {
            Some(now) => Ok(now),
            None => self.queue.server_time_ms().await,
        }
    }

    /// The first half: the ready pending job with the lowest score.
    async fn pick(&self, now: u64) -> Result<Option<String>, QueueError> {
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&self.queue.keys().pending)
            .arg("-inf")
            .arg(now)
            .arg("LIMIT")
            .arg(0)
            .arg(1)
            .query_async(&mut self.queue.connection())
            .await
            .map_err(|e| QueueError::from_redis("lease", e))?;
        Ok(ids.into_iter().next())
    }

    /// The second half: claims `id`, whatever became of it since the pick.
    async fn claim(
        &self,
        id: &str,
        worker: &str,
        lease_ms: u64,
        now: u64,
    ) -> Result<Option<Lease>, QueueError> {
        let keys = self.queue.keys();
        let reply: Value = self
            .claim
            .key(&keys.pending)
            .key(&keys.active)
            .key(&keys.jobs)
            .arg(worker)
            .arg(lease_ms)
            .arg(now)
            .arg(id)
            .invoke_async(&mut self.queue.connection())
            .await
            .map_err(|e| QueueError::from_redis("lease", e))?;
        match reply {
            Value::Nil => Ok(None),
            other => crate::queue::client::parse_lease("lease", &other).map(Some),
        }
    }

    fn picked(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.picked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wrapper for SplitLease {
    fn inner(&self) -> &dyn Adapter {
        &self.inner
    }

    // The reference layout: compared with the model (see the module docs).
    fn name(&self) -> &str {
        "reference"
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move {
            let now = self.now(now_ms).await?;
            let prefetched = self.picked().remove(worker);
            let id = match prefetched {
                Some(id) => Some(id),
                None => self.pick(now).await?,
            };
            let Some(id) = id else {
                return Ok(None);
            };
            let lease = self.claim(&id, worker, lease_ms, now).await?;
            // The first half of this worker's next lease.
            if let Some(next) = self.pick(now).await? {
                self.picked().insert(worker.to_owned(), next);
            }
            Ok(lease)
        })
    }

    fn complete_and_lease<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
        complete_then_lease(self, id, token, worker, lease_ms, now_ms)
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        self.picked().clear();
        self.inner.clear()
    }

    fn read_back(&self) -> Option<&dyn ReadBack> {
        Some(&self.reads)
    }
}

/// A lease whose deadline comes from the client's clock, which runs
/// [`CLIENT_SKEW_MS`] behind the server's. On the server clock path
/// (`now_ms = None`) the client sends its own wall clock, skewed; on the
/// explorers' logical time, the logical `now` stands for the server clock
/// and the client sends `now - skew`. Every other script is the
/// reference, on the server clock.
pub struct ClientClock {
    inner: Reference,
    queue: Queue,
    reads: OwnReads,
}

impl ClientClock {
    /// `queue` must carry `lease_client_clock.lua` as its lease script
    /// (see [`super::Mutant::subject`]).
    pub fn new(queue: &Queue) -> ClientClock {
        ClientClock {
            inner: Reference::new(queue.on_server_clock()),
            queue: queue.on_server_clock(),
            reads: OwnReads(queue.on_server_clock()),
        }
    }
}

impl Wrapper for ClientClock {
    fn inner(&self) -> &dyn Adapter {
        &self.inner
    }

    // The reference layout: compared with the model (see the module docs).
    fn name(&self) -> &str {
        "reference"
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move {
            let client_now = match now_ms {
                Some(now) => now,
                None => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            }
            .saturating_sub(CLIENT_SKEW_MS);
            self.queue.at(client_now).lease(worker, lease_ms).await
        })
    }

    fn complete_and_lease<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
        complete_then_lease(self, id, token, worker, lease_ms, now_ms)
    }

    fn read_back(&self) -> Option<&dyn ReadBack> {
        Some(&self.reads)
    }
}

/// The mutants' read-back: every snapshot a read of its own, the
/// read-back mode never on (see the module docs).
struct OwnReads(Queue);

impl ReadBack for OwnReads {
    fn snapshot(&self) -> BoxFuture<'_, Result<crate::queue::Snapshot, QueueError>> {
        Box::pin(self.0.snapshot())
    }

    fn set_readback(&self, _on: bool) {}
}
