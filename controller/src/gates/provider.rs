//! The seam through which a gate sample is taken.

use std::future::Future;
use std::pin::Pin;

use super::verdict::QueryResult;

/// The future returned by [`GateProvider::sample`]. Boxed so that the trait stays
/// object-safe and the reconcile can hold a `dyn GateProvider`.
pub type SampleFuture<'a> = Pin<Box<dyn Future<Output = QueryResult> + Send + 'a>>;

/// Runs an already rendered query against a region's metrics backend.
///
/// Implementations never fail: a backend error, a timeout or an unreachable endpoint is
/// reported as [`QueryResult::Error`], which the verdict turns into Inconclusive, so a
/// broken backend can only ever hold a gate closed.
pub trait GateProvider: Send + Sync {
    /// Samples `query` against `region`'s backend (which may differ from the default),
    /// or the default backend for a stage-wide gate (`region` is `None`).
    fn sample<'a>(&'a self, region: Option<&'a str>, query: &'a str) -> SampleFuture<'a>;
}
