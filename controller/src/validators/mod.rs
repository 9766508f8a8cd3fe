//! Asking a platform's external validator ([`ClusterConfigValidator`]) whether a
//! candidate revision may roll out.
//!
//! # Wire protocol
//!
//! The controller sends one `POST` to `spec.url` per candidate, with
//! `Content-Type: application/json` and the body
//!
//! ```json
//! {"apiVersion": "configrollout.dev/v1alpha1", "kind": "ValidationRequest",
//!  "rollout": {"namespace": "...", "name": "...", "uid": "..."},
//!  "target": {"namespace": "...", "name": "..."},
//!  "digest": "...",
//!  "data": {"key": "value", ...}}
//! ```
//!
//! and the headers
//!
//! - `X-Configrollout-Timestamp: <unix seconds>`, the controller's clock when it sent
//!   the request, always;
//! - `X-Configrollout-Signature: sha256=<hex>` when `spec.hmacSecret` is set: the
//!   lowercase hex HMAC-SHA256, keyed with the Secret's bytes, of the timestamp header's
//!   value, a `.`, and the exact body bytes (`timestamp + "." + body`). A validator
//!   recomputes it over the bytes it received (before parsing them), compares in constant
//!   time, and refuses a timestamp too far from its own clock (a few minutes), so that a
//!   captured request cannot be replayed later.
//!
//! The validator answers HTTP 200 with `{"allowed": bool, "reason": "..."}` (`reason`
//! may be left out; other fields are ignored). The answer is a [`Verdict`]:
//! [`Verdict::Allowed`], [`Verdict::Refused`] with the validator's reason, or
//! [`Verdict::Failed`] when no verdict could be had: no complete answer within
//! `spec.timeoutSeconds` (connecting, sending and reading the whole answer together), a
//! connection or TLS failure, a status other than 200 (a redirect included: none is
//! followed, since it could send the configuration elsewhere), an answer larger than
//! [`MAX_ANSWER_BYTES`], or one that is not that JSON. Callers refuse the candidate on
//! `Failed` too (fail closed), but say that the validator could not be asked rather than
//! that it said no.
//!
//! # What is shown and what is kept quiet
//!
//! The reason lands in a tenant-visible status and on terminals: it is cut to
//! [`MAX_REASON_CHARS`] characters and its control characters and bidirectional
//! overrides are replaced (see [`sanitize_reason`]). A failure's text names only its
//! class ("timed out after 5s", "answered HTTP 503"): never the answer's body, which could
//! echo the configuration, nor the URL. Nothing here logs a configuration value or the
//! validator's reason; logs carry the rollout's and target's names and the digest.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::api::text::is_unsafe_to_show;
use crate::api::{
    ClusterConfigValidatorSpec, DEFAULT_VALIDATOR_TIMEOUT_SECONDS, MAX_VALIDATOR_TIMEOUT_SECONDS,
};
use crate::outbound::{self, CaTrust, Cause, ClientError, ClientOptions, read_bounded};

#[cfg(doc)]
use crate::api::ClusterConfigValidator;

/// `apiVersion` of a request's body.
pub const API_VERSION: &str = "configrollout.dev/v1alpha1";
/// `kind` of a request's body.
pub const KIND: &str = "ValidationRequest";
/// Header carrying the request's Unix time in seconds, part of the signed material.
pub const TIMESTAMP_HEADER: &str = "X-Configrollout-Timestamp";
/// Header carrying `sha256=<hex HMAC-SHA256 of timestamp + "." + body>`.
pub const SIGNATURE_HEADER: &str = "X-Configrollout-Signature";
/// Largest answer body read, in bytes; a longer one is [`Verdict::Failed`].
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Longest reason kept from a validator, in characters.
pub const MAX_REASON_CHARS: usize = 256;
/// The reason of a refusal that gave none.
pub const NO_REASON: &str = "no reason given";

/// What the controller asks a validator about: one candidate revision of one target.
/// Borrowed, so that asking copies nothing but the body it sends.
#[derive(Debug, Clone, Copy)]
pub struct ValidationRequest<'a> {
    /// Namespace of the ConfigRollout.
    pub rollout_namespace: &'a str,
    /// Name of the ConfigRollout.
    pub rollout_name: &'a str,
    /// UID of the ConfigRollout.
    pub rollout_uid: &'a str,
    /// Namespace of the target ConfigMap.
    pub target_namespace: &'a str,
    /// Name of the target ConfigMap.
    pub target_name: &'a str,
    /// Digest of the candidate revision.
    pub digest: &'a str,
    /// The candidate's data.
    pub data: &'a BTreeMap<String, String>,
}

/// A validator's answer about one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The validator accepts the candidate.
    Allowed,
    /// The validator refuses the candidate.
    Refused {
        /// The validator's reason, sanitised (see [`sanitize_reason`]).
        reason: String,
    },
    /// No verdict could be had (timeout, connection error, a status other than 200, an
    /// answer too large or unreadable). Callers refuse the candidate (fail closed) and
    /// say the validator could not be asked.
    Failed {
        /// The class of failure, never the answer's body nor a configuration value.
        why: String,
    },
}

impl Verdict {
    /// Whether the candidate may go on: only on [`Verdict::Allowed`].
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed)
    }
}

/// Why a [`ClusterConfigValidatorSpec`] cannot be used. The text names the field, never
/// its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidatorError {
    /// `spec.url` is not an absolute http(s) URL with a host.
    #[error("spec.url is not an absolute http(s) URL")]
    BadUrl,
    /// `spec.url` is http:// to a host that is not loopback.
    #[error(
        "spec.url must be https://, or http:// to a loopback address (127.0.0.0/8, [::1] or \
         localhost)"
    )]
    NotHttps,
    /// `spec.url` carries a user name or password.
    #[error("spec.url carries credentials (user:password@), which are refused")]
    CredentialsInUrl,
    /// `spec.caBundle` is not PEM certificates.
    #[error("spec.caBundle holds no usable PEM certificate")]
    CaBundle,
    /// The `spec.hmacSecret` key is empty: a signature with it would prove nothing.
    #[error("the key spec.hmacSecret names is empty")]
    EmptyHmacKey,
    /// reqwest could not build a client with these settings.
    #[error("no HTTP client can be built for this validator")]
    Client,
}

/// A [`ClusterConfigValidator`], ready to be asked.
#[derive(Clone)]
pub struct ExternalValidator {
    http: reqwest::Client,
    url: reqwest::Url,
    timeout: Duration,
    hmac_key: Option<Vec<u8>>,
}

impl fmt::Debug for ExternalValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Neither the key nor the URL (which may carry a token in its query).
        f.debug_struct("ExternalValidator")
            .field("timeout", &self.timeout)
            .field("signs", &self.hmac_key.is_some())
            .finish_non_exhaustive()
    }
}

impl ExternalValidator {
    /// A validator for `spec`, signing with `hmac_key` (the bytes of the key
    /// `spec.hmacSecret` names, read by the caller) when given.
    ///
    /// The URL rule of the CRD is checked again (an older CRD may not carry it), more
    /// strictly: `http://` only to a loopback IP or exactly `localhost`. The timeout is
    /// `spec.timeoutSeconds` brought within 1..=[`MAX_VALIDATOR_TIMEOUT_SECONDS`].
    pub fn new(
        spec: &ClusterConfigValidatorSpec,
        hmac_key: Option<Vec<u8>>,
    ) -> Result<Self, ValidatorError> {
        let url = checked_url(&spec.url)?;
        if hmac_key.as_ref().is_some_and(Vec::is_empty) {
            return Err(ValidatorError::EmptyHmacKey);
        }
        let seconds = spec
            .timeout_seconds
            .unwrap_or(DEFAULT_VALIDATOR_TIMEOUT_SECONDS)
            .clamp(1, MAX_VALIDATOR_TIMEOUT_SECONDS);
        let timeout = Duration::from_secs(u64::from(seconds));
        let http = http_client(spec.ca_bundle.as_deref().map(str::as_bytes), timeout)?;
        Ok(Self {
            http,
            url,
            timeout,
            hmac_key,
        })
    }

    /// The time [`ExternalValidator::validate`] waits at most.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Asks the validator about `request`, stamped and signed at `now_unix` (seconds).
    /// Never panics, and returns within the spec's timeout (connecting, sending and
    /// reading the whole answer together).
    pub async fn validate(&self, request: &ValidationRequest<'_>, now_unix: i64) -> Verdict {
        let outcome =
            match tokio::time::timeout(self.timeout, self.exchange(request, now_unix)).await {
                Ok(outcome) => outcome,
                Err(_) => Err(Failure::TimedOut),
            };
        match outcome {
            Ok(verdict) => {
                tracing::debug!(
                    rollout.namespace = request.rollout_namespace,
                    rollout.name = request.rollout_name,
                    target.namespace = request.target_namespace,
                    target.name = request.target_name,
                    digest = request.digest,
                    allowed = verdict.is_allowed(),
                    "external validator answered"
                );
                verdict
            }
            Err(failure) => {
                let why = failure.describe(self.timeout);
                tracing::debug!(
                    rollout.namespace = request.rollout_namespace,
                    rollout.name = request.rollout_name,
                    target.namespace = request.target_namespace,
                    target.name = request.target_name,
                    digest = request.digest,
                    %why,
                    "external validator gave no verdict"
                );
                Verdict::Failed { why }
            }
        }
    }

    /// One request and its answer, unbounded in time (the caller bounds it).
    async fn exchange(
        &self,
        request: &ValidationRequest<'_>,
        now_unix: i64,
    ) -> Result<Verdict, Failure> {
        let body = serde_json::to_vec(&Wire::from(request)).map_err(|_| Failure::Encode)?;
        let timestamp = now_unix.to_string();
        let mut outgoing = self
            .http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .header(TIMESTAMP_HEADER, timestamp.as_str());
        if let Some(key) = &self.hmac_key {
            let signature = sign(key, &timestamp, &body).ok_or(Failure::Encode)?;
            outgoing = outgoing.header(SIGNATURE_HEADER, signature);
        }
        let mut response = outgoing.body(body).send().await.map_err(transport)?;
        let status = response.status();
        if status.is_redirection() {
            return Err(Failure::Redirect(status.as_u16()));
        }
        if status != reqwest::StatusCode::OK {
            return Err(Failure::Status(status.as_u16()));
        }
        let body = read_bounded(
            &mut response,
            MAX_ANSWER_BYTES,
            || Failure::TooLarge,
            transport,
        )
        .await?;
        let answer = parse_answer(&body).ok_or(Failure::NotAnAnswer)?;
        Ok(if answer.allowed {
            Verdict::Allowed
        } else {
            Verdict::Refused {
                reason: sanitize_reason(answer.reason.as_deref().unwrap_or("")),
            }
        })
    }
}

/// `sha256=<lowercase hex HMAC-SHA256>` of `timestamp + "." + body` under `key`: the
/// [`SIGNATURE_HEADER`] value. `None` only if the MAC cannot be keyed (never for HMAC).
pub fn sign(key: &[u8], timestamp: &str, body: &[u8]) -> Option<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!(
        "sha256={}",
        hex::encode(mac.finalize().into_bytes())
    ))
}

/// A validator's reason as it may be shown: trimmed, cut to [`MAX_REASON_CHARS`]
/// characters (on a character boundary, the last one `…` when cut), each control
/// character or bidirectional embedding, override or isolate replaced by U+FFFD, and
/// [`NO_REASON`] when empty.
pub fn sanitize_reason(raw: &str) -> String {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return NO_REASON.to_owned();
    }
    let cut = trimmed.chars().nth(MAX_REASON_CHARS).is_some();
    let keep = if cut {
        MAX_REASON_CHARS.saturating_sub(1)
    } else {
        MAX_REASON_CHARS
    };
    let mut reason: String = trimmed
        .chars()
        .take(keep)
        .map(|c| if is_unsafe_to_show(c) { '\u{fffd}' } else { c })
        .collect();
    if cut {
        reason.push('…');
    }
    reason
}

/// The body sent, in the order the protocol lists its fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    api_version: &'static str,
    kind: &'static str,
    rollout: WireRollout<'a>,
    target: WireTarget<'a>,
    digest: &'a str,
    data: &'a BTreeMap<String, String>,
}

#[derive(Serialize)]
struct WireRollout<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
}

#[derive(Serialize)]
struct WireTarget<'a> {
    namespace: &'a str,
    name: &'a str,
}

impl<'a> From<&ValidationRequest<'a>> for Wire<'a> {
    fn from(request: &ValidationRequest<'a>) -> Self {
        Self {
            api_version: API_VERSION,
            kind: KIND,
            rollout: WireRollout {
                namespace: request.rollout_namespace,
                name: request.rollout_name,
                uid: request.rollout_uid,
            },
            target: WireTarget {
                namespace: request.target_namespace,
                name: request.target_name,
            },
            digest: request.digest,
            data: request.data,
        }
    }
}

/// The answer read.
#[derive(Deserialize)]
struct Answer {
    allowed: bool,
    #[serde(default)]
    reason: Option<String>,
}

/// `body` as an [`Answer`]: a JSON object (serde would take a struct from an array too:
/// `[true]` is no answer), whose `allowed` is a boolean and `reason`, when there, a
/// string or null. The parser's error is dropped: it may quote the body.
fn parse_answer(body: &[u8]) -> Option<Answer> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    serde_json::from_value(serde_json::Value::Object(object)).ok()
}

/// Why no verdict was had; [`Failure::describe`] is all that is ever shown of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    TimedOut,
    ConnectionRefused,
    Tls,
    Unreachable,
    Redirect(u16),
    Status(u16),
    CutOff,
    TooLarge,
    NotAnAnswer,
    RequestFailed,
    Encode,
}

impl Failure {
    pub(crate) fn describe(self, timeout: Duration) -> String {
        match self {
            Self::TimedOut => format!("timed out after {}s", timeout.as_secs()),
            Self::ConnectionRefused => "connection refused".to_owned(),
            Self::Tls => "TLS handshake failed: the validator's certificate is not trusted \
                          (spec.caBundle) or not valid for its host"
                .to_owned(),
            Self::Unreachable => "could not connect".to_owned(),
            Self::Redirect(status) => {
                format!("answered HTTP {status}, a redirect, which is not followed")
            }
            Self::Status(status) => format!("answered HTTP {status}"),
            Self::CutOff => "answer cut off".to_owned(),
            Self::TooLarge => format!("answer larger than {} KiB", MAX_ANSWER_BYTES / 1024),
            Self::NotAnAnswer => "answer is not {allowed, reason} JSON".to_owned(),
            Self::RequestFailed => "request failed".to_owned(),
            Self::Encode => "request could not be encoded".to_owned(),
        }
    }
}

/// `raw` if it is an https URL, or an http one to a loopback host, without credentials.
pub(crate) fn checked_url(raw: &str) -> Result<reqwest::Url, ValidatorError> {
    let mut url = reqwest::Url::parse(raw).map_err(|_| ValidatorError::BadUrl)?;
    if url.cannot_be_a_base() {
        return Err(ValidatorError::BadUrl);
    }
    // The URL parser has normalised the host: an IPv4 address in dotted form (whatever
    // form it was written in), an IPv6 one in brackets, a domain in lowercase.
    let host = url.host_str().ok_or(ValidatorError::BadUrl)?;
    let loopback = match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
    {
        Ok(address) => address.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => return Err(ValidatorError::NotHttps),
        _ => return Err(ValidatorError::BadUrl),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ValidatorError::CredentialsInUrl);
    }
    url.set_fragment(None);
    Ok(url)
}

/// The client one validator is asked through: bounded by `timeout`, following no
/// redirect, trusting `ca_bundle`'s certificates (PEM) in addition to the system's roots.
pub(crate) fn http_client(
    ca_bundle: Option<&[u8]>,
    timeout: Duration,
) -> Result<reqwest::Client, ValidatorError> {
    outbound::http_client(ClientOptions {
        ca_bundle: ca_bundle.map(|pem| (pem, CaTrust::AddedToSystem)),
        connect_timeout: Some(timeout),
        timeout: Some(timeout),
    })
    .map_err(|error| match error {
        ClientError::CaBundle => ValidatorError::CaBundle,
        ClientError::Build => ValidatorError::Client,
    })
}

/// A reqwest failure as a class (the error's own text names the URL).
pub(crate) fn transport(error: reqwest::Error) -> Failure {
    if error.is_timeout() {
        return Failure::TimedOut;
    }
    let cause = Cause::of(&error);
    if error.is_connect() {
        match cause {
            Cause::Tls => Failure::Tls,
            Cause::Refused => Failure::ConnectionRefused,
            Cause::TimedOut => Failure::TimedOut,
            Cause::Other => Failure::Unreachable,
        }
    } else if cause == Cause::Tls {
        Failure::Tls
    } else if cause == Cause::TimedOut {
        Failure::TimedOut
    } else if error.is_body() || error.is_decode() {
        Failure::CutOff
    } else {
        Failure::RequestFailed
    }
}

#[cfg(test)]
mod tests;
