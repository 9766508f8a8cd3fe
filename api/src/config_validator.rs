//! `ClusterConfigValidator`: an HTTP endpoint the platform runs to judge a candidate
//! revision (AWS AppConfig's Lambda validators). Cluster-scoped so that only a platform
//! admin chooses where the controller sends a configuration: a tenant's ConfigSchema
//! names a validator, never a URL.
//!
//! The controller POSTs (`Content-Type: application/json`)
//! `{"apiVersion": "configrollout.dev/v1alpha1", "kind": "ValidationRequest",
//! "rollout": {"namespace": ..., "name": ..., "uid": ...}, "target": {"namespace": ...,
//! "name": ...}, "digest": ..., "data": {key: value, ...}}` with the header
//! `X-Configrollout-Timestamp: <unix seconds>` and, when `hmacSecret` is set,
//! `X-Configrollout-Signature: sha256=<hex HMAC-SHA256>` computed with the Secret's key
//! over the timestamp header's value, a `.`, and the exact body bytes
//! (`timestamp + "." + body`): a validator recomputes it over the bytes it received and
//! refuses a timestamp far from its own clock, so that a captured request cannot be
//! replayed. It reads `{"allowed": bool, "reason": "..."}` from an HTTP 200 answer of at
//! most 64 KiB; no redirect is followed. Anything else (an error, a status other than
//! 200, a timeout, an answer it cannot read) refuses the candidate. The client is
//! `configrollout::validators` in the controller crate.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;

/// Longest wait for a validator's answer, in seconds, that a validator may ask for.
pub const MAX_VALIDATOR_TIMEOUT_SECONDS: u32 = 30;
/// A validator's timeout, in seconds, when it sets none.
pub const DEFAULT_VALIDATOR_TIMEOUT_SECONDS: u32 = 5;
/// Longest validator URL.
pub const MAX_VALIDATOR_URL_LENGTH: u64 = 2048;
/// Longest PEM CA bundle a validator may carry.
pub const MAX_CA_BUNDLE_LENGTH: u64 = 65536;

/// An external validator, defined by the platform.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "ClusterConfigValidator",
    plural = "clusterconfigvalidators",
    derive = "PartialEq",
    shortname = "ccfgvalidator",
    category = "configrollout-all",
    doc = "An HTTP endpoint the platform runs that accepts or refuses candidate revisions.",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfigValidatorSpec {
    /// Where the candidate is POSTed: `https://...`, or `http://` to a loopback address.
    #[schemars(length(min = 1), transform = url_rules)]
    pub url: String,
    /// PEM CA certificates that sign the validator's certificate, in addition to the
    /// system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(MAX_CA_BUNDLE_LENGTH))]
    pub ca_bundle: Option<String>,
    /// How long to wait for the answer, in seconds (default 5, at most 30); no answer
    /// in time refuses the candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_VALIDATOR_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<u32>,
    /// A Secret in the controller's namespace whose key holds the HMAC-SHA256 key that
    /// signs each request (its timestamp and body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac_secret: Option<LocalSecretKey>,
}

/// A key of a Secret in the controller's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalSecretKey {
    /// Name of the Secret.
    #[schemars(transform = schema::dns_subdomain("spec.hmacSecret.name"))]
    pub name: String,
    /// Key in the Secret's data.
    #[schemars(length(min = 1), transform = schema::max_length(schema::CONFIG_MAP_KEY_MAX_LENGTH))]
    pub key: String,
}

/// The URL rule of the controller's outbound endpoints (validators, notification sinks):
/// https, or http to a loopback address.
pub(crate) fn url_rules(schema: &mut schemars::Schema) {
    schema::set(schema, "maxLength", MAX_VALIDATOR_URL_LENGTH);
    schema::add_rules(
        schema,
        &[schema::Rule::new(
            "self.startsWith('https://') || self.startsWith('http://127.0.0.1') || \
             self.startsWith('http://[::1]') || self.startsWith('http://localhost')",
            "spec.url: https://, or http:// to a loopback address",
        )],
    );
}
