//! `Region`: one target cluster.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::schema::{self, Rule};

/// Longest Prometheus URL accepted.
pub const MAX_URL_LENGTH: u64 = 2048;
/// Most extra headers a Region's Prometheus queries may carry (`spec.prometheus.headers`).
pub const MAX_PROMETHEUS_HEADERS: u64 = 8;
/// Longest header name in `spec.prometheus.headers`.
pub const MAX_PROMETHEUS_HEADER_NAME_LENGTH: u64 = 128;
/// Longest literal header value (`spec.prometheus.headers[].value`).
pub const MAX_PROMETHEUS_HEADER_VALUE_LENGTH: u64 = 1024;
/// Headers `spec.prometheus.headers` may not name (lower case): those the controller
/// frames the request with, `Authorization` (credentials go in `spec.prometheus.auth`,
/// which never sends them in clear) and the hop-by-hop ones, which a proxy would drop or
/// act on.
pub const FORBIDDEN_PROMETHEUS_HEADERS: [&str; 14] = [
    "accept",
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "host",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];
/// An HTTP header name (RFC 9110 `token`).
pub const HEADER_NAME_PATTERN: &str = "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";
/// A literal header value: printable ASCII, spaces inside only.
pub const PROMETHEUS_HEADER_VALUE_PATTERN: &str = "^[!-~]([ -~]*[!-~])?$";

/// Whether `name` is an HTTP header name: one or more RFC 9110 `tchar`s, as
/// [`HEADER_NAME_PATTERN`] says.
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte))
}

/// Whether `spec.prometheus.headers` may not name `name` (any case): see
/// [`FORBIDDEN_PROMETHEUS_HEADERS`].
pub fn is_forbidden_prometheus_header(name: &str) -> bool {
    FORBIDDEN_PROMETHEUS_HEADERS
        .iter()
        .any(|forbidden| forbidden.eq_ignore_ascii_case(name))
}

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
    category = "configrollout-all",
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
    /// Extra headers sent with every query, e.g. `X-Scope-OrgID` for a Mimir, Cortex or
    /// Thanos tenant (at most 8, each named once). `Authorization`, `Host`, `Accept`,
    /// `Content-Length`, `Content-Type` and hop-by-hop headers cannot be named. A value
    /// read from a Secret (`valueFrom`) needs an `https` URL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = headers_rules)]
    pub headers: Vec<PrometheusHeader>,
}

/// A header sent with every query to a region's Prometheus: a literal `value` (a tenant
/// id, say) or one read from a Secret (`valueFrom`). Values are never logged nor shown.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = header_rules)]
pub struct PrometheusHeader {
    /// The header's name, e.g. `X-Scope-OrgID`.
    #[schemars(transform = header_name_rules)]
    pub name: String,
    /// The value, for one that is no secret: printable ASCII, at most 1024 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = header_value_rules)]
    pub value: Option<String>,
    /// A key of a Secret in the controller's namespace holding the value (the one
    /// `auth.secretRef` names, or another); surrounding white space is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<HeaderSecretKey>,
}

/// A key of a Secret in the controller's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderSecretKey {
    /// Name of the Secret.
    #[schemars(transform = schema::dns_subdomain("spec.prometheus.headers[].valueFrom.name"))]
    pub name: String,
    /// Key in the Secret's data.
    #[schemars(transform = secret_key("spec.prometheus.headers[].valueFrom.key"))]
    pub key: String,
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
        &[
            Rule::new(
                "!has(self.auth) || self.url.lowerAscii().startsWith('https://')",
                "spec.prometheus.auth needs an https spec.prometheus.url: credentials are never \
                 sent in clear",
            )
            .at(".url"),
            Rule::new(
                "!has(self.headers) || self.headers.all(h, !has(h.valueFrom)) || \
                 self.url.lowerAscii().startsWith('https://')",
                "spec.prometheus.headers[].valueFrom needs an https spec.prometheus.url: Secret \
                 values are never sent in clear",
            )
            .at(".url"),
        ],
    );
}

fn headers_rules(schema: &mut Schema) {
    schema::set(schema, "maxItems", MAX_PROMETHEUS_HEADERS);
    schema::add_rules(
        schema,
        &[Rule::new(
            "self.all(h, self.exists_one(o, o.name.lowerAscii() == h.name.lowerAscii()))",
            "spec.prometheus.headers: each header is named once (names ignore case)",
        )],
    );
}

fn header_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[Rule::new(
            "has(self.value) != has(self.valueFrom)",
            "spec.prometheus.headers[]: set exactly one of value and valueFrom",
        )],
    );
}

fn header_name_rules(schema: &mut Schema) {
    schema::set(schema, "minLength", 1);
    schema::set(schema, "maxLength", MAX_PROMETHEUS_HEADER_NAME_LENGTH);
    let forbidden = FORBIDDEN_PROMETHEUS_HEADERS
        .iter()
        .map(|name| schema::cel_str(name))
        .collect::<Vec<_>>()
        .join(", ");
    schema::add_rules(
        schema,
        &[
            Rule::new(
                format!("self.matches({})", schema::cel_str(HEADER_NAME_PATTERN)),
                "spec.prometheus.headers[].name must be an HTTP header name (letters, digits \
                 and !#$%&'*+-.^_`|~)",
            ),
            Rule::new(
                format!("!(self.lowerAscii() in [{forbidden}])"),
                "spec.prometheus.headers[].name cannot be Authorization (use \
                 spec.prometheus.auth), Host, Accept, Content-Length, Content-Type or a \
                 hop-by-hop header",
            ),
        ],
    );
}

fn header_value_rules(schema: &mut Schema) {
    schema::set(schema, "maxLength", MAX_PROMETHEUS_HEADER_VALUE_LENGTH);
    schema::add_rules(
        schema,
        &[Rule::new(
            format!(
                "self.matches({})",
                schema::cel_str(PROMETHEUS_HEADER_VALUE_PATTERN)
            ),
            "spec.prometheus.headers[].value must be printable ASCII, without leading or \
             trailing spaces",
        )],
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
