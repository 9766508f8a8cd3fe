//! `ClusterNotificationSink`: where the controller tells people about rollouts (a
//! webhook, a Slack or Teams channel, a CloudEvents broker). Cluster-scoped, so that only
//! a platform admin chooses where the controller sends anything: a tenant's rollout names
//! a sink its namespace's grant allows (annotation `configrollout.dev/notification-sinks`
//! on its hub Namespace), never a URL.
//!
//! A notification carries names, the revision, its keyed digest, counts, reasons and
//! links; never a configuration value. The wire formats are documented in the
//! controller's `notifications` module.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use crate::LocalSecretKey;

/// Longest wait for a sink's answer, in seconds, that a sink may ask for.
pub const MAX_SINK_TIMEOUT_SECONDS: u32 = 30;
/// A sink's timeout, in seconds, when it sets none.
pub const DEFAULT_SINK_TIMEOUT_SECONDS: u32 = 5;
/// Most headers a sink may add to each request.
pub const MAX_SINK_HEADERS: u64 = 8;
/// Longest dashboard URL a sink may link to.
pub const MAX_DASHBOARD_URL_LENGTH: u64 = 2048;

/// A place notifications are delivered to, defined by the platform.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "ClusterNotificationSink",
    plural = "clusternotificationsinks",
    derive = "PartialEq",
    shortname = "cnsink",
    category = "configrollout-all",
    doc = "Where the controller delivers notifications about rollouts; rollouts subscribe to it by name.",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = sink_rules)]
pub struct ClusterNotificationSinkSpec {
    /// The receiver's format.
    #[serde(rename = "type")]
    pub type_: SinkType,
    /// Where notifications are POSTed: `https://...`, or `http://` to a loopback address.
    /// Exactly one of `url` and `urlSecret` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = crate::config_validator::url_rules)]
    pub url: Option<String>,
    /// A Secret key in the controller's namespace holding the URL, for receivers whose
    /// URL is itself the credential (Slack and Teams webhooks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_secret: Option<LocalSecretKey>,
    /// PEM CA certificates that sign the receiver's certificate, in addition to the
    /// system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(crate::MAX_CA_BUNDLE_LENGTH))]
    pub ca_bundle: Option<String>,
    /// How long to wait for an answer, in seconds (default 5, at most 30); no answer in
    /// time is a failed attempt, retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_SINK_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<u32>,
    /// A Secret key in the controller's namespace holding the HMAC-SHA256 key that signs
    /// each request (`X-Configrollout-Signature` over the timestamp and the body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac_secret: Option<LocalSecretKey>,
    /// Headers added to each request, their values read from Secrets in the controller's
    /// namespace (an `Authorization` token, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(MAX_SINK_HEADERS))]
    pub headers: Vec<SinkHeader>,
    /// The dashboard's base URL; notifications link to the rollout there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(MAX_DASHBOARD_URL_LENGTH))]
    pub dashboard_url: Option<String>,
}

/// A receiver's format.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SinkType {
    /// A JSON body (`kind: RolloutNotification`), for any HTTP receiver.
    Webhook,
    /// A Slack incoming webhook: a readable message.
    Slack,
    /// A Microsoft Teams workflow webhook: an Adaptive Card.
    Teams,
    /// A CloudEvent over HTTP, structured mode (`application/cloudevents+json`).
    CloudEvents,
}

impl SinkType {
    /// The name as written in a spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Webhook => "Webhook",
            Self::Slack => "Slack",
            Self::Teams => "Teams",
            Self::CloudEvents => "CloudEvents",
        }
    }
}

/// A header whose value a Secret holds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SinkHeader {
    /// The header's name, e.g. `Authorization`. The headers the controller sets itself
    /// (`Content-Type`, `Content-Length`, `Host`, `X-Configrollout-*`) cannot be named.
    #[schemars(transform = header_name_rules)]
    pub name: String,
    /// The Secret key holding its value.
    pub value_from: LocalSecretKey,
}

fn sink_rules(schema: &mut schemars::Schema) {
    schema::add_rules(
        schema,
        &[schema::Rule::new(
            "has(self.url) != has(self.urlSecret)",
            "spec: exactly one of url and urlSecret is set",
        )],
    );
}

/// Whether `name` is a header the controller sets itself, which a sink may not replace.
pub fn is_reserved_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "content-type" | "content-length" | "host" | "transfer-encoding" | "connection"
    ) || lower.starts_with("x-configrollout-")
}

fn header_name_rules(schema: &mut schemars::Schema) {
    schema::set(schema, "maxLength", 128);
    schema::set(schema, "pattern", "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$");
    schema::add_rules(
        schema,
        &[schema::Rule::new(
            "!(self.lowerAscii() in ['content-type', 'content-length', 'host', \
             'transfer-encoding', 'connection']) && \
             !self.lowerAscii().startsWith('x-configrollout-')",
            "spec.headers[].name: the controller sets this header itself",
        )],
    );
}
