//! One [`ClusterNotificationSink`], ready to send to: its URL checked, its Secrets read,
//! its HTTP client bounded by its timeout.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use reqwest::header::{HeaderName, HeaderValue};

use crate::api::{
    ClusterNotificationSink, DEFAULT_SINK_TIMEOUT_SECONDS, LocalSecretKey,
    MAX_SINK_TIMEOUT_SECONDS, SinkType, is_reserved_header,
};
use crate::reconcile::api_call;
use crate::validators::{self, Failure, SIGNATURE_HEADER, TIMESTAMP_HEADER};

use super::format::Rendered;

/// Header carrying a notice's idempotency key (`<rollout uid>.<notice number>`): the same
/// on every delivery of one notice, so that a receiver drops repeats.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// Why a sink cannot be sent to. The text names fields and Secrets, never their values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// No ClusterNotificationSink of that name.
    #[error("no ClusterNotificationSink named {0}")]
    Missing(String),
    /// A Secret key the sink names cannot be read.
    #[error("{field}: Secret {namespace}/{name} has no key {key}")]
    Secret {
        /// The field naming it.
        field: &'static str,
        /// The controller's namespace.
        namespace: String,
        /// The Secret.
        name: String,
        /// The key.
        key: String,
    },
    /// The hub could not be asked.
    #[error("reading Secret {0}: the hub did not answer")]
    Hub(String),
    /// The URL, the CA bundle or a header is not usable.
    #[error("{0}")]
    Invalid(String),
}

/// A sink's client.
#[derive(Clone)]
pub struct SinkClient {
    type_: SinkType,
    http: reqwest::Client,
    url: reqwest::Url,
    timeout: Duration,
    hmac_key: Option<Vec<u8>>,
    headers: Vec<(HeaderName, HeaderValue)>,
    dashboard_url: Option<String>,
}

impl fmt::Debug for SinkClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Neither the URL (a Slack webhook's is its credential) nor the keys.
        f.debug_struct("SinkClient")
            .field("type", &self.type_)
            .field("timeout", &self.timeout)
            .field("signs", &self.hmac_key.is_some())
            .field("headers", &self.headers.len())
            .finish_non_exhaustive()
    }
}

impl SinkClient {
    /// The client of `sink`, its Secrets read from the controller's `namespace`.
    pub async fn resolve(
        hub: &kube::Client,
        namespace: &str,
        sink: &ClusterNotificationSink,
    ) -> Result<Self, SinkError> {
        let spec = &sink.spec;
        let mut secrets = SecretReader {
            api: Api::namespaced(hub.clone(), namespace),
            namespace,
            read: BTreeMap::new(),
        };
        let url_text = match (&spec.url, &spec.url_secret) {
            (Some(url), None) => url.clone(),
            (None, Some(reference)) => {
                let bytes = secrets.key("spec.urlSecret", reference).await?;
                String::from_utf8(bytes)
                    .map(|text| text.trim().to_owned())
                    .map_err(|_| SinkError::Invalid("spec.urlSecret is not UTF-8".to_owned()))?
            }
            _ => {
                return Err(SinkError::Invalid(
                    "exactly one of spec.url and spec.urlSecret is set".to_owned(),
                ));
            }
        };
        let url = validators::checked_url(&url_text).map_err(|error| {
            SinkError::Invalid(error.to_string().replace("spec.url", "the sink's URL"))
        })?;
        let hmac_key = match &spec.hmac_secret {
            None => None,
            Some(reference) => {
                let key = secrets.key("spec.hmacSecret", reference).await?;
                if key.is_empty() {
                    return Err(SinkError::Invalid(
                        "the key spec.hmacSecret names is empty".to_owned(),
                    ));
                }
                Some(key)
            }
        };
        let mut headers = Vec::with_capacity(spec.headers.len());
        for header in &spec.headers {
            if is_reserved_header(&header.name) {
                return Err(SinkError::Invalid(format!(
                    "spec.headers: the controller sets {} itself",
                    header.name
                )));
            }
            let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| {
                SinkError::Invalid(format!(
                    "spec.headers: {:?} is not a header name",
                    header.name
                ))
            })?;
            let bytes = secrets
                .key("spec.headers[].valueFrom", &header.value_from)
                .await?;
            let mut value = HeaderValue::from_bytes(trim_ascii(&bytes)).map_err(|_| {
                SinkError::Invalid(format!(
                    "spec.headers: the value of {} is not a header value",
                    header.name
                ))
            })?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        let seconds = spec
            .timeout_seconds
            .unwrap_or(DEFAULT_SINK_TIMEOUT_SECONDS)
            .clamp(1, MAX_SINK_TIMEOUT_SECONDS);
        let timeout = Duration::from_secs(u64::from(seconds));
        let http = validators::http_client(spec.ca_bundle.as_deref().map(str::as_bytes), timeout)
            .map_err(|error| {
            SinkError::Invalid(error.to_string().replace("validator", "sink"))
        })?;
        Ok(Self {
            type_: spec.type_,
            http,
            url,
            timeout,
            hmac_key,
            headers,
            dashboard_url: spec.dashboard_url.clone(),
        })
    }

    /// The receiver's format.
    pub fn type_(&self) -> SinkType {
        self.type_
    }

    /// The dashboard base URL notifications link to.
    pub fn dashboard_url(&self) -> Option<&str> {
        self.dashboard_url.as_deref()
    }

    /// POSTs `rendered`, stamped and signed at `now_unix`, and waits at most the sink's
    /// timeout for an answer. `Err` names the class of failure (never the answer).
    pub async fn send(
        &self,
        rendered: &Rendered,
        idempotency_key: &str,
        now_unix: i64,
    ) -> Result<(), String> {
        let attempt = async {
            let timestamp = now_unix.to_string();
            let mut request = self
                .http
                .post(self.url.clone())
                .header(reqwest::header::CONTENT_TYPE, rendered.content_type)
                .header(TIMESTAMP_HEADER, timestamp.as_str())
                .header(IDEMPOTENCY_HEADER, idempotency_key);
            if let Some(key) = &self.hmac_key {
                let signature =
                    validators::sign(key, &timestamp, &rendered.body).ok_or(Failure::Encode)?;
                request = request.header(SIGNATURE_HEADER, signature);
            }
            for (name, value) in &self.headers {
                request = request.header(name.clone(), value.clone());
            }
            let response = request
                .body(rendered.body.clone())
                .send()
                .await
                .map_err(validators::transport)?;
            let status = response.status();
            // The answer's body is not read: nothing in it matters, and it may be large.
            drop(response);
            if status.is_success() {
                Ok(())
            } else if status.is_redirection() {
                Err(Failure::Redirect(status.as_u16()))
            } else {
                Err(Failure::Status(status.as_u16()))
            }
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(failure)) => Err(failure.describe(self.timeout)),
            Err(_) => Err(Failure::TimedOut.describe(self.timeout)),
        }
    }
}

fn trim_ascii(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// Reads the keys a sink names from Secrets of the controller's namespace, each Secret
/// once.
struct SecretReader<'a> {
    api: Api<Secret>,
    namespace: &'a str,
    read: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
}

impl SecretReader<'_> {
    async fn key(
        &mut self,
        field: &'static str,
        reference: &LocalSecretKey,
    ) -> Result<Vec<u8>, SinkError> {
        if !self.read.contains_key(&reference.name) {
            let secret = api_call(
                "read notification sink Secret",
                self.api.get_opt(&reference.name),
            )
            .await
            .map_err(|_| SinkError::Hub(format!("{}/{}", self.namespace, reference.name)))?;
            let data = secret.and_then(|secret| secret.data).map(|data| {
                data.into_iter()
                    .map(|(key, value)| (key, value.0))
                    .collect::<BTreeMap<_, _>>()
            });
            self.read.insert(reference.name.clone(), data);
        }
        self.read
            .get(&reference.name)
            .and_then(Option::as_ref)
            .and_then(|data| data.get(&reference.key))
            .cloned()
            .ok_or_else(|| SinkError::Secret {
                field,
                namespace: self.namespace.to_owned(),
                name: reference.name.clone(),
                key: reference.key.clone(),
            })
    }
}
