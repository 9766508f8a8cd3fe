//! `Region`: one target cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::schema::{self, Rule};

/// Longest Prometheus URL accepted.
pub const MAX_URL_LENGTH: u64 = 2048;

/// A cluster that rollouts can target. Its labels are what stage selectors match.
// Several print columns share `type_ = "string"`, which clippy mistakes for a repeated
// attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "Region",
    plural = "regions",
    status = "RegionStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "cregion",
    category = "configrollout",
    doc = "A regional Kubernetes cluster that ConfigRollouts publish to.",
    printcolumn(
        name = "Reachable",
        type_ = "boolean",
        json_path = ".status.reachable",
        description = "Whether the API server answered last time"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.serverVersion",
        description = "Kubernetes version of the region"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RegionSpec {
    /// Secret holding a kubeconfig for the region. Absent: the cluster the controller
    /// runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<SecretKeyRef>,
    /// Prometheus serving this region's metrics. Absent: the controller's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusEndpoint>,
}

/// A key of a Secret in the controller's cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Namespace of the Secret.
    #[schemars(transform = schema::dns_label("spec.kubeconfigSecretRef.namespace"))]
    pub namespace: String,
    /// Name of the Secret.
    #[schemars(transform = schema::dns_subdomain("spec.kubeconfigSecretRef.name"))]
    pub name: String,
    /// Key in the Secret's data.
    #[schemars(length(min = 1), transform = secret_key_rules)]
    pub key: String,
}

fn secret_key_rules(schema: &mut Schema) {
    schema::set(schema, "maxLength", schema::CONFIG_MAP_KEY_MAX_LENGTH);
    schema::add_rules(
        schema,
        &[Rule::new(
            format!(
                "self.matches({})",
                schema::cel_str(schema::CONFIG_MAP_KEY_PATTERN)
            ),
            "spec.kubeconfigSecretRef.key must be a valid Secret key \
             (letters, digits, '-', '_' and '.')",
        )],
    );
}

/// Where to query Prometheus, and with which credentials.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = endpoint_rules)]
pub struct PrometheusEndpoint {
    /// Base URL, e.g. `https://prometheus.eu-1.example:9090`. It may not carry
    /// credentials (`user:password@`): a Region is readable by everyone who reads
    /// Regions; give them in `auth`.
    #[schemars(transform = url_rules)]
    pub url: String,
    /// Credentials for this Prometheus, from a Secret in the controller's namespace.
    /// Needs an `https` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<PrometheusAuth>,
}

/// Credentials for a region's Prometheus: keys of one Secret in the controller's
/// namespace (as `spec.kubeconfigSecretRef`). A bearer token or a user name and
/// password, and/or a CA bundle that replaces the system's roots for this server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = auth_rules)]
pub struct PrometheusAuth {
    /// The Secret holding the credentials.
    pub secret_ref: SecretRef,
    /// Key of the bearer token (`Authorization: Bearer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = secret_key("spec.prometheus.auth.bearerTokenKey"))]
    pub bearer_token_key: Option<String>,
    /// Key of the basic-auth user name (with `passwordKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = secret_key("spec.prometheus.auth.usernameKey"))]
    pub username_key: Option<String>,
    /// Key of the basic-auth password (with `usernameKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = secret_key("spec.prometheus.auth.passwordKey"))]
    pub password_key: Option<String>,
    /// Key of a PEM CA bundle: the only roots the server's certificate is checked
    /// against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = secret_key("spec.prometheus.auth.caKey"))]
    pub ca_key: Option<String>,
}

/// A Secret in the controller's cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// Namespace of the Secret: the controller's.
    #[schemars(transform = schema::dns_label("spec.prometheus.auth.secretRef.namespace"))]
    pub namespace: String,
    /// Name of the Secret.
    #[schemars(transform = schema::dns_subdomain("spec.prometheus.auth.secretRef.name"))]
    pub name: String,
}

/// A Secret key field named `field`.
fn secret_key(field: &'static str) -> impl FnMut(&mut Schema) {
    move |schema| {
        schema::set(schema, "minLength", 1);
        schema::set(schema, "maxLength", schema::CONFIG_MAP_KEY_MAX_LENGTH);
        schema::add_rules(
            schema,
            &[Rule::new(
                format!(
                    "self.matches({})",
                    schema::cel_str(schema::CONFIG_MAP_KEY_PATTERN)
                ),
                format!("{field} must be a valid Secret key (letters, digits, '-', '_' and '.')"),
            )],
        );
    }
}

/// The scheme and authority of a URL, when it has userinfo: an `@` before the first `/`,
/// `?` or `#` after `://`. The URL library of Kubernetes' CEL has no accessor for it.
const USERINFO_PATTERN: &str = "^[^:/?#]*://[^/?#]*@";

fn url_rules(schema: &mut Schema) {
    schema::set(schema, "maxLength", MAX_URL_LENGTH);
    schema::add_rules(
        schema,
        &[
            Rule::new(
                "isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHost() != ''",
                "spec.prometheus.url must be an absolute http or https URL",
            ),
            Rule::new(
                format!("!self.matches({})", schema::cel_str(USERINFO_PATTERN)),
                "spec.prometheus.url must not carry credentials (user:password@): \
                 give them in spec.prometheus.auth",
            ),
        ],
    );
}

fn endpoint_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[Rule::new(
            "!has(self.auth) || self.url.lowerAscii().startsWith('https://')",
            "spec.prometheus.auth needs an https spec.prometheus.url: credentials are never \
             sent in clear",
        )
        .at(".url")],
    );
}

fn auth_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[
            Rule::new(
                "has(self.usernameKey) == has(self.passwordKey)",
                "spec.prometheus.auth: set usernameKey and passwordKey together",
            ),
            Rule::new(
                "!(has(self.bearerTokenKey) && has(self.usernameKey))",
                "spec.prometheus.auth: set bearerTokenKey or usernameKey and passwordKey, not both",
            ),
            Rule::new(
                "has(self.bearerTokenKey) || has(self.usernameKey) || has(self.caKey)",
                "spec.prometheus.auth must name at least one key: bearerTokenKey, \
                 usernameKey and passwordKey, or caKey",
            ),
        ],
    );
}

/// What the controller last saw of the region.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegionStatus {
    /// The `metadata.generation` this status reflects: the last probe's. Until the
    /// controller first probes the region it reads 0 (the CRD's default), so tools that
    /// compare it with `metadata.generation` (kstatus, Argo CD) wait for that probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Whether its API server answered the last contact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
    /// Kubernetes version reported by its API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// Last error contacting it (no secrets, no configuration values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When its API server last answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_contact_time: Option<Time>,
    /// kstatus conditions: `Ready` (its API server answered the last probe), and the
    /// abnormal-true `Stalled` (it did not: the reason is `Unreachable`, the message the
    /// error) and `Reconciling` (never true after a probe: a probe decides at once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::conditions_list)]
    pub conditions: Vec<Condition>,
}
