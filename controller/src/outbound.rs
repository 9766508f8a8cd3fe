//! What the controller's outbound HTTP clients share: the Prometheus gate provider
//! ([`crate::prometheus`]), the `web` gate ([`crate::web_gate`]), the external
//! validators ([`crate::validators`]) and the notification sinks
//! ([`crate::notifications`]).
//!
//! Each caller keeps its own errors and their texts (they land in tenant-visible
//! statuses, worded for the field a tenant or admin can fix); what is here is only what
//! is the same for all of them: a client that follows no redirect and trusts a CA bundle
//! ([`http_client`]), a cache of such clients by bundle ([`CaClients`]), the class of a
//! transport failure without its text ([`Cause`], [`tls_failure`]), and a body read
//! abandoned as soon as it passes a cap ([`read_bounded`]).

#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// How a client given a CA bundle trusts servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CaTrust {
    /// Only the bundle's certificates: the system's roots are not trusted.
    Only,
    /// The bundle's certificates in addition to the system's roots.
    AddedToSystem,
}

/// What a client is built with; [`ClientOptions::default`] trusts the system's roots
/// and bounds nothing in time (each request is then bounded by its caller).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClientOptions<'a> {
    /// PEM certificates, and how they are trusted.
    pub ca_bundle: Option<(&'a [u8], CaTrust)>,
    /// How long connecting may take.
    pub connect_timeout: Option<Duration>,
    /// How long a whole request may take.
    pub timeout: Option<Duration>,
}

/// Why no client could be built; each caller words it for its own field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientError {
    /// The CA bundle is not PEM or holds no certificate.
    CaBundle,
    /// reqwest refused the settings.
    Build,
}

/// A client following no redirect (one could lead anywhere, https to http included),
/// built with `options`.
pub(crate) fn http_client(options: ClientOptions<'_>) -> Result<reqwest::Client, ClientError> {
    // reqwest is built without a provider and panics when none is installed; the
    // binaries install ring, as here (a no-op when one is installed already).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    if let Some(timeout) = options.connect_timeout {
        builder = builder.connect_timeout(timeout);
    }
    if let Some(timeout) = options.timeout {
        builder = builder.timeout(timeout);
    }
    if let Some((pem, trust)) = options.ca_bundle {
        let certificates =
            reqwest::Certificate::from_pem_bundle(pem).map_err(|_| ClientError::CaBundle)?;
        if certificates.is_empty() {
            return Err(ClientError::CaBundle);
        }
        builder = match trust {
            CaTrust::Only => builder.tls_certs_only(certificates),
            CaTrust::AddedToSystem => builder.tls_certs_merge(certificates),
        };
    }
    builder.build().map_err(|_| ClientError::Build)
}

/// Clients built for CA bundles, one per distinct bundle (by its SHA-256), so that a
/// bundle's connections are pooled; past [`CaClients::MAX`] they are all dropped and
/// built again on use.
#[derive(Default)]
pub(crate) struct CaClients {
    clients: Mutex<HashMap<[u8; 32], reqwest::Client>>,
}

impl CaClients {
    /// Most clients kept.
    pub(crate) const MAX: usize = 64;

    /// The client for `bundle`: the one kept, else `build(bundle)`, kept when built.
    pub(crate) fn get_or_build<E>(
        &self,
        bundle: &[u8],
        build: impl FnOnce(&[u8]) -> Result<reqwest::Client, E>,
    ) -> Result<reqwest::Client, E> {
        let key: [u8; 32] = Sha256::digest(bundle).into();
        if let Some(client) = self
            .clients
            .lock()
            .ok()
            .and_then(|clients| clients.get(&key).cloned())
        {
            return Ok(client);
        }
        let client = build(bundle)?;
        if let Ok(mut clients) = self.clients.lock() {
            if clients.len() >= Self::MAX {
                clients.clear();
            }
            clients.insert(key, client.clone());
        }
        Ok(client)
    }
}

/// What lies at the bottom of a transport error, as far as an error's text cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// TLS refused the server (its certificate, mostly).
    Tls,
    /// The connection was refused.
    Refused,
    /// The operating system timed the connection out.
    TimedOut,
    /// Anything else.
    Other,
}

impl Cause {
    /// The first of TLS, a refused connection or an I/O timeout found down `error`'s
    /// sources.
    pub(crate) fn of(error: &(dyn std::error::Error + 'static)) -> Self {
        for error in sources(error) {
            if error.downcast_ref::<rustls::Error>().is_some() {
                return Self::Tls;
            }
            if let Some(io) = error.downcast_ref::<std::io::Error>() {
                match io.kind() {
                    std::io::ErrorKind::ConnectionRefused => return Self::Refused,
                    std::io::ErrorKind::TimedOut => return Self::TimedOut,
                    _ => {}
                }
            }
        }
        Self::Other
    }
}

/// Whether TLS refused the server somewhere down `error`'s sources.
pub(crate) fn tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    sources(error).any(|error| error.downcast_ref::<rustls::Error>().is_some())
}

/// `error` and its sources, I/O errors' wrapped errors included (an I/O error's `source`
/// skips the error it wraps), at most 16 deep.
fn sources<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    /// How deep into an error's sources to look.
    const MAX_DEPTH: usize = 16;
    std::iter::successors(Some(error), |error| {
        match error.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        }
    })
    .take(MAX_DEPTH)
}

/// Reads the body chunk by chunk, giving up with `too_large()` as soon as it passes
/// `max_bytes` (or at once when its announced length does); a failed read is
/// `transport(error)`.
pub(crate) async fn read_bounded<E>(
    response: &mut reqwest::Response,
    max_bytes: usize,
    too_large: impl Fn() -> E,
    transport: impl Fn(reqwest::Error) -> E,
) -> Result<Vec<u8>, E> {
    let announced = response.content_length();
    if announced.is_some_and(|length| length > u64::try_from(max_bytes).unwrap_or(u64::MAX)) {
        return Err(too_large());
    }
    let capacity = announced
        .and_then(|length| usize::try_from(length).ok())
        .unwrap_or(0)
        .min(max_bytes);
    let mut body = Vec::with_capacity(capacity);
    while let Some(chunk) = response.chunk().await.map_err(&transport)? {
        if chunk.len() > max_bytes.saturating_sub(body.len()) {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_is_found_inside_an_io_error() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(Cause::of(&refused), Cause::Refused);
        let wrapped = std::io::Error::other(rustls::Error::DecryptError);
        assert_eq!(Cause::of(&wrapped), Cause::Tls);
        assert!(tls_failure(&wrapped));
        let other = std::io::Error::other("nothing known");
        assert_eq!(Cause::of(&other), Cause::Other);
        assert!(!tls_failure(&other));
    }

    #[test]
    fn a_bundle_without_a_certificate_builds_no_client() {
        for trust in [CaTrust::Only, CaTrust::AddedToSystem] {
            let options = ClientOptions {
                ca_bundle: Some((b"not a certificate", trust)),
                ..ClientOptions::default()
            };
            assert_eq!(http_client(options).err(), Some(ClientError::CaBundle));
        }
        let ca = include_bytes!("prometheus/testdata/ca.crt");
        let options = ClientOptions {
            ca_bundle: Some((ca, CaTrust::Only)),
            ..ClientOptions::default()
        };
        assert!(http_client(options).is_ok());
    }
}
