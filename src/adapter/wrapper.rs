//! Wrapping an adapter: change one or two operations of a queue under test
//! and keep the rest as they are.
//!
//! # Design notes
//!
//! `Wrapper` is the public, default-forwarding way to wrap an adapter:
//! implement `Wrapper::inner` and override only what changes; a blanket impl
//! makes every `Wrapper` an `Adapter`. The mutants' adapters, `testing`'s
//! clearing queue and `examples/own_queue.rs` use it.

use redis::aio::ConnectionManager;

use super::{Adapter, BoxFuture, Capabilities, Read, ReadBack};
use crate::queue::client::EnqueueOptions;
use crate::queue::{
    CompleteAndLease, Enqueued, Extended, Failed, Keys, Lease, QueueError, Reaped, Settled,
};

/// An [`Adapter`] made of another one: every operation goes to
/// [`Wrapper::inner`] unless the wrapper overrides it. Implement this
/// instead of [`Adapter`] when a queue is another queue with a difference
/// (a client-side mistake, a counter, a recorder, a hook on `clear`): a
/// blanket impl makes every `Wrapper` an `Adapter`, so the wrapper writes
/// only the methods it changes.
///
/// ```no_run
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// use ackgap::adapter::{Adapter, BoxFuture, QueueError, Reference, Settled, Wrapper};
///
/// /// The reference queue, counting the acks it is sent.
/// struct Counted {
///     inner: Reference,
///     acks: AtomicU64,
/// }
///
/// impl Wrapper for Counted {
///     fn inner(&self) -> &dyn Adapter {
///         &self.inner
///     }
///
///     fn complete<'a>(
///         &'a self,
///         id: &'a str,
///         token: u64,
///     ) -> BoxFuture<'a, Result<Settled, QueueError>> {
///         self.acks.fetch_add(1, Ordering::Relaxed);
///         self.inner.complete(id, token)
///     }
/// }
/// ```
///
/// Two things to know:
///
/// - [`Wrapper::complete_and_lease`] forwards to the inner adapter's, which
///   calls the *inner* `complete` and `lease`, not the wrapper's. A wrapper
///   that overrides `complete` or `lease` overrides it too, usually with
///   [`complete_then_lease`](super::complete_then_lease)`(self, ..)` (its
///   own two calls, one after the other) or with its change followed by
///   the inner call.
/// - [`Wrapper::read_back`] forwards too, so a wrapper of the reference
///   queue keeps its one-round-trip read-back. A wrapper that sends queue
///   calls of its own, not through the inner adapter, overrides it with a
///   [`ReadBack`] whose `set_readback` does nothing and whose every
///   snapshot is a read of its own: the inner read-back would miss its
///   calls and answer a stale snapshot.
///
/// Because `Wrapper` and `Adapter` name the same methods, a call such as
/// `counted.name()` on a concrete wrapper type with both traits in scope is
/// ambiguous: call it through the trait (`Adapter::name(&counted)`) or on an
/// `Arc<dyn Adapter>`, as the harness does.
pub trait Wrapper: Send + Sync {
    /// The adapter every operation not overridden goes to.
    fn inner(&self) -> &dyn Adapter;

    /// See [`Adapter::name`]. A wrapper that is no longer the queue it
    /// wraps should say so: only a queue named `reference` is compared with
    /// the model after every step.
    fn name(&self) -> &str {
        self.inner().name()
    }

    /// See [`Adapter::capabilities`].
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }

    /// See [`Adapter::keys`].
    fn keys(&self) -> &Keys {
        self.inner().keys()
    }

    /// See [`Adapter::connection`].
    fn connection(&self) -> ConnectionManager {
        self.inner().connection()
    }

    /// See [`Adapter::enqueue`].
    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        self.inner().enqueue(id, payload, options, now_ms)
    }

    /// See [`Adapter::lease`].
    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        self.inner().lease(worker, lease_ms, now_ms)
    }

    /// See [`Adapter::complete`].
    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        self.inner().complete(id, token)
    }

    /// See [`Adapter::fail`].
    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        self.inner().fail(id, token, retry_delay_ms, now_ms)
    }

    /// See [`Adapter::extend`].
    fn extend<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        self.inner().extend(id, token, lease_ms, now_ms)
    }

    /// See [`Adapter::complete_and_lease`]. Forwards to the inner adapter's
    /// (one round trip on the reference queue), which does not pass through
    /// an overridden `complete` or `lease`: see the trait docs.
    fn complete_and_lease<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
        self.inner()
            .complete_and_lease(id, token, worker, lease_ms, now_ms)
    }

    /// See [`Adapter::reap`].
    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        self.inner().reap(limit, now_ms)
    }

    /// See [`Adapter::read`].
    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        self.inner().read()
    }

    /// See [`Adapter::clear`].
    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        self.inner().clear()
    }

    /// See [`Adapter::crash`].
    fn crash<'a>(&'a self, worker: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        self.inner().crash(worker)
    }

    /// See [`Adapter::reopen`].
    fn reopen(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        self.inner().reopen()
    }

    /// See [`Adapter::read_back`]; the trait docs say when to override it.
    fn read_back(&self) -> Option<&dyn ReadBack> {
        self.inner().read_back()
    }

    /// See [`Adapter::set_clock`].
    fn set_clock(&self, clock_ms: Option<u64>) {
        self.inner().set_clock(clock_ms)
    }
}

/// Every [`Wrapper`] is an [`Adapter`]: each operation is the wrapper's
/// (its override, or its default that forwards to the inner adapter). This
/// impl does not collide with an `Adapter` impl of a concrete type, here
/// or in a user's crate, as long as that type is not also a `Wrapper`.
impl<W: Wrapper> Adapter for W {
    fn name(&self) -> &str {
        Wrapper::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        Wrapper::capabilities(self)
    }

    fn app(&self) -> Option<super::App> {
        self.inner().app()
    }

    fn keys(&self) -> &Keys {
        Wrapper::keys(self)
    }

    fn connection(&self) -> ConnectionManager {
        Wrapper::connection(self)
    }

    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        Wrapper::enqueue(self, id, payload, options, now_ms)
    }

    fn lease<'a>(
        &'a self,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Wrapper::lease(self, worker, lease_ms, now_ms)
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Wrapper::complete(self, id, token)
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Wrapper::fail(self, id, token, retry_delay_ms, now_ms)
    }

    fn extend<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        Wrapper::extend(self, id, token, lease_ms, now_ms)
    }

    fn complete_and_lease<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<CompleteAndLease, QueueError>> {
        Wrapper::complete_and_lease(self, id, token, worker, lease_ms, now_ms)
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Wrapper::reap(self, limit, now_ms)
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Wrapper::read(self)
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Wrapper::clear(self)
    }

    fn crash<'a>(&'a self, worker: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        Wrapper::crash(self, worker)
    }

    fn reopen(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Wrapper::reopen(self)
    }

    fn read_back(&self) -> Option<&dyn ReadBack> {
        Wrapper::read_back(self)
    }

    fn set_clock(&self, clock_ms: Option<u64>) {
        Wrapper::set_clock(self, clock_ms)
    }
}
