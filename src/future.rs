//! The boxed future the crate's object-safe traits return. It lives in a
//! module of its own, below both [`crate::adapter`] and [`crate::consumer`],
//! so that neither imports the other for it; each re-exports it, and a user
//! names it from whichever module they implement.

use std::future::Future;
use std::pin::Pin;

/// A boxed, `Send` future borrowing for `'a`: what [`crate::adapter::Adapter`]
/// and [`crate::consumer::Consumer`] return, since a trait object cannot
/// return `impl Future`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
