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
    /// Samples `query` against the backend `source` names, or the default backend when
    /// it names none.
    fn sample<'a>(&'a self, source: SampleSource<'a>, query: &'a str) -> SampleFuture<'a>;
}

/// Where a sample is taken, resolved by the caller from the Region it read in the same
/// reconcile: a gate never samples a backend its region no longer names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleSource<'a> {
    /// The region a per-region gate samples; `None` for a stage-wide gate.
    pub region: Option<&'a str>,
    /// The Prometheus URL the region names (`spec.prometheus.url`); `None`: the default.
    pub url: Option<&'a str>,
}
