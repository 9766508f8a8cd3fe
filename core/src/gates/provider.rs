//! The seam through which a gate sample is taken.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};

use super::verdict::Answer;

/// The future returned by [`GateProvider::sample`]. Boxed so that the trait stays
/// object-safe and the reconcile can hold a `dyn GateProvider`.
pub type SampleFuture<'a> = Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

/// The future returned by [`GateProvider::sample_range`].
pub type SeriesFuture<'a> = Pin<Box<dyn Future<Output = SeriesAnswer> + Send + 'a>>;

/// The span of a range sample: points from `start` to `end`, every `step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Span {
    /// First point.
    pub start: DateTime<Utc>,
    /// Last point (at most).
    pub end: DateTime<Utc>,
    /// Between points.
    pub step: std::time::Duration,
}

/// What a range query returned: the values of its one series, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesAnswer {
    /// The series' values (none when no series matched).
    Points(Vec<f64>),
    /// The query could not be run or its answer not used (several series among them:
    /// a comparison needs one per region).
    Error(String),
    /// The backend warned that the answer may be missing data; not used.
    Partial(String),
}

/// Runs an already rendered query against a region's metrics backend.
///
/// Implementations never fail: a backend error, a timeout or an unreachable endpoint is
/// reported as [`super::QueryResult::Error`], which the engine counts as a query error,
/// so a broken backend can only ever hold a gate closed.
pub trait GateProvider: Send + Sync {
    /// Samples `query` against the backend `source` names, or the default backend when
    /// it names none.
    fn sample<'a>(&'a self, source: SampleSource<'a>, query: &'a str) -> SampleFuture<'a>;

    /// Samples `query` over `span` (a comparison gate's side). A backend that keeps no
    /// history answers with an error, so a comparison gate on it never passes.
    fn sample_range<'a>(
        &'a self,
        source: SampleSource<'a>,
        query: &'a str,
        span: Span,
    ) -> SeriesFuture<'a> {
        let _ = (source, query, span);
        Box::pin(async {
            SeriesAnswer::Error("this gate backend takes no range samples".to_owned())
        })
    }
}

/// Where a sample is taken, resolved by the caller from the Region it read in the same
/// reconcile: a gate never samples a backend its region no longer names.
#[derive(Clone, Copy, Debug, Default)]
pub struct SampleSource<'a> {
    /// The region a per-region gate samples; `None` for a stage-wide gate.
    pub region: Option<&'a str>,
    /// The Prometheus URL the region names (`spec.prometheus.url`); `None`: the default.
    pub url: Option<&'a str>,
    /// What the region's `spec.prometheus.auth` and `spec.prometheus.headers` gave.
    pub access: Access<'a>,
    /// The query was scoped to its namespace's label matchers
    /// (`configrollout.dev/gate-label-matchers`): the backend's own error and warning
    /// texts, which may quote other series' labels, are not passed on, only their kind.
    pub scoped: bool,
}

/// The credentials a sample is taken with.
#[derive(Clone, Copy, Debug, Default)]
pub enum Access<'a> {
    /// None: the region names no `auth` (or the sample goes to the default backend).
    #[default]
    Anonymous,
    /// Those the region's Secret holds.
    With(&'a Credentials),
    /// The region names credentials that cannot be had (the Secret is missing, outside
    /// the controller's namespace, lacks a key...): the sample is a query error saying
    /// why, and is never taken without them.
    Unusable(&'a str),
}

/// Credentials for one Prometheus, read from a Secret, and the extra headers its
/// queries carry. `Debug` shows which parts are present and the headers' names, never a
/// value.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// The `Authorization` to send, if any.
    pub authorization: Option<Authorization>,
    /// PEM certificates: the only roots the server's certificate is checked against.
    pub ca_bundle: Option<Vec<u8>>,
    /// Extra headers (name, value) sent with every query. Values may come from Secrets:
    /// never logged, never shown in an error.
    pub headers: Vec<(String, String)>,
    /// Whether a value of `headers` was read from a Secret: then, like `authorization`,
    /// they are sent over https only.
    pub secret_headers: bool,
}

impl Credentials {
    /// Whether these may only be sent over https: they hold a credential (an
    /// `Authorization` or a header read from a Secret) or a CA bundle (which only https
    /// uses, so an http URL is a mistake).
    pub fn need_https(&self) -> bool {
        self.authorization.is_some() || self.ca_bundle.is_some() || self.secret_headers
    }
}

/// An `Authorization` header's credentials.
#[derive(Clone, PartialEq, Eq)]
pub enum Authorization {
    /// `Bearer <token>`.
    Bearer(String),
    /// `Basic base64(username:password)`.
    Basic {
        /// User name (no `:`).
        username: String,
        /// Password.
        password: String,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("authorization", &self.authorization)
            .field(
                "ca_bundle",
                &self.ca_bundle.as_ref().map(|bundle| bundle.len()),
            )
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(name, _)| shown_header_name(name))
                    .collect::<Vec<_>>(),
            )
            .field("secret_headers", &self.secret_headers)
            .finish()
    }
}

/// A header name as `Debug` shows it: itself when it is one (RFC 9110 `token`), else a
/// placeholder, since whoever wrote `X-Key: <value>` as a name must not find the value in
/// a log.
fn shown_header_name(name: &str) -> &str {
    if configrollout_api::is_header_name(name) {
        name
    } else {
        "(not a header name)"
    }
}

impl fmt::Debug for Authorization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Authorization::Bearer(_) => "Bearer(***)",
            Authorization::Basic { .. } => "Basic(***)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_credential() {
        let credentials = Credentials {
            authorization: Some(Authorization::Basic {
                username: "s3cr3t-user".into(),
                password: "s3cr3t-password".into(),
            }),
            ca_bundle: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
            headers: vec![
                ("X-Scope-OrgID".into(), "s3cr3t-tenant".into()),
                ("X-Key: s3cr3t".into(), "x".into()),
            ],
            secret_headers: true,
        };
        let shown = format!(
            "{credentials:?} {:?}",
            Authorization::Bearer("s3cr3t-token".into())
        );
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("Basic(***)") && shown.contains("Bearer(***)"));
        assert!(shown.contains("X-Scope-OrgID"), "{shown}");
    }
}
