//! `GateTemplate` (namespaced, a team's own) and `ClusterGateTemplate` (the platform's):
//! a gate's check written once, with typed args, and used by name from any rollout's
//! `spec.gates[].template`. A template defines how a sample is taken (a PromQL query, an
//! HTTP endpoint read with a JSONPath, or a Job run in the region); the rollout keeps the
//! sampling knobs (interval, count, limits, dry run).
//!
//! Only a ClusterGateTemplate may define a `web` or `job` check, or read a Secret: a
//! namespace's own template would let whoever writes in it make the controller call any
//! endpoint, run any image in every region, or send the platform's credentials anywhere.
//! A tenant chooses only the args the platform's template declares.
//!
//! A rollout's gate windows use the template as it was when they opened: a template
//! changed mid-rollout applies from the next stage's windows, and the rollout's status
//! records which generation each gate used (`status.gateTemplates`).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::schema::{self, Rule};
use crate::{
    GateComparison, LocalSecretKey, MAX_CA_BUNDLE_LENGTH, MAX_CONDITION_LENGTH, MAX_QUERY_LENGTH,
};

/// Most args a template declares (and a gate passes).
pub const MAX_TEMPLATE_ARGS: u64 = 16;
/// Longest value of one arg.
pub const MAX_ARG_VALUE_LENGTH: u64 = 253;
/// Longest description.
pub const MAX_TEMPLATE_DESCRIPTION_LENGTH: u64 = 1024;
/// Longest web gate URL.
pub const MAX_WEB_URL_LENGTH: u64 = 2048;
/// Longest web gate request body.
pub const MAX_WEB_BODY_LENGTH: u64 = 8192;
/// Longest JSONPath.
pub const MAX_JSON_PATH_LENGTH: u64 = 512;
/// Most headers a web gate sends.
pub const MAX_WEB_HEADERS: u64 = 8;
/// Longest wait for a web gate's answer, in seconds.
pub const MAX_WEB_TIMEOUT_SECONDS: u32 = 30;
/// A web gate's timeout when it names none, in seconds.
pub const DEFAULT_WEB_TIMEOUT_SECONDS: u32 = 10;
/// Longest a job gate's Job may run, in seconds (one hour).
pub const MAX_JOB_TIMEOUT_SECONDS: u32 = 3600;
/// A job gate's timeout when it names none, in seconds.
pub const DEFAULT_JOB_TIMEOUT_SECONDS: u32 = 600;
/// Largest Job template, in bytes of JSON.
pub const MAX_JOB_TEMPLATE_BYTES: usize = 32 * 1024;

/// A team's gate template, usable by the rollouts of its namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "GateTemplate",
    plural = "gatetemplates",
    namespaced,
    derive = "PartialEq",
    shortname = "gatetmpl",
    category = "configrollout-all",
    doc = "A gate's check written once, with typed args, used by name from the rollouts of \
           its namespace (prometheus checks only; web and job checks are the platform's).",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = template_rules)]
pub struct GateTemplateSpec {
    /// What the check is for, shown by `lint` and the docs of the platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::multiline_text(MAX_TEMPLATE_DESCRIPTION_LENGTH))]
    pub description: Option<String>,
    /// The args a gate passes, used as `{{args.NAME}}` in the check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = args_list)]
    pub args: Vec<TemplateArg>,
    /// The check. Exactly one of its providers is set.
    #[serde(flatten)]
    pub check: GateCheck,
}

/// The platform's gate template, usable by every namespace's rollouts (those its grant
/// allows), and the only kind that may define `web` and `job` checks.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "ClusterGateTemplate",
    plural = "clustergatetemplates",
    derive = "PartialEq",
    shortname = "cgatetmpl",
    category = "configrollout-all",
    doc = "The platform's gate check, with typed args, used by name from any rollout: a \
           PromQL query, an HTTP endpoint read with a JSONPath, or a Job run in the region.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGateTemplateSpec {
    /// The template, as a GateTemplate holds it.
    #[serde(flatten)]
    pub template: GateTemplateSpec,
}

/// How a gate's sample is taken: exactly one provider.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateCheck {
    /// A PromQL query judged by a condition or compared with its baseline, as an inline
    /// gate's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusCheck>,
    /// An HTTP endpoint whose JSON answer, read with a JSONPath, is judged by a
    /// condition (ClusterGateTemplate only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<WebCheck>,
    /// A Job run in the region sampled; its success or failure is the sample
    /// (ClusterGateTemplate only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobCheck>,
}

/// One arg of a template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateArg {
    /// Name, used as `{{args.NAME}}`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-zA-Z][a-zA-Z0-9_]*$"))]
    pub name: String,
    /// What a value must be: `String` (default), `Number` (a finite decimal) or
    /// `Duration` (`30s`, `5m`).
    #[serde(default, rename = "type")]
    pub type_: ArgType,
    /// The value when a gate passes none; without one, the arg is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(MAX_ARG_VALUE_LENGTH))]
    pub default: Option<String>,
    /// What the arg means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(MAX_TEMPLATE_DESCRIPTION_LENGTH))]
    pub description: Option<String>,
}

/// The type of an arg's value.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ArgType {
    /// Any single-line text; escaped for where it lands (a PromQL string, a URL, JSON).
    #[default]
    String,
    /// A finite decimal number, e.g. `0.01`.
    Number,
    /// A duration, e.g. `30s` or `5m`.
    Duration,
}

/// A PromQL check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusCheck {
    /// PromQL; `{{args.NAME}}`, `{{region}}`, `{{revision}}` and `{{stage}}` are
    /// replaced before querying.
    #[schemars(length(min = 1), transform = schema::multiline_text(MAX_QUERY_LENGTH))]
    pub query: String,
    /// When a sample is successful, e.g. `result < {{args.threshold}}`. Exactly one of
    /// `condition` and `compare`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(transform = schema::multiline_text(MAX_CONDITION_LENGTH))]
    pub condition: String,
    /// Judge against the regions not yet updated instead of a condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<GateComparison>,
}

/// An HTTP check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebCheck {
    /// The endpoint: `https://...`, or `http://` to a loopback address. Placeholders
    /// (`{{args.NAME}}`, `{{region}}`, ...) may appear in its path and query only, and
    /// are percent-encoded: no arg moves the request to another host.
    #[schemars(length(min = 1), transform = web_url_rules)]
    pub url: String,
    /// `GET` (default) or `POST`.
    #[serde(default)]
    pub method: WebMethod,
    /// Headers sent, each a literal value or a Secret key in the controller's namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(MAX_WEB_HEADERS))]
    pub headers: Vec<WebHeader>,
    /// A `POST`'s JSON body; placeholders are escaped as JSON string content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::multiline_text(MAX_WEB_BODY_LENGTH))]
    pub body: Option<String>,
    /// RFC 9535 JSONPath to the answer's number (`$.data.errorRatio`); a boolean counts
    /// as 1 or 0, a numeric string as its number, several matches as a vector.
    #[schemars(length(min = 1), transform = schema::max_length(MAX_JSON_PATH_LENGTH))]
    pub json_path: String,
    /// When a sample is successful, e.g. `result < {{args.threshold}}`.
    #[schemars(length(min = 1), transform = schema::multiline_text(MAX_CONDITION_LENGTH))]
    pub condition: String,
    /// How long the whole request may take, in seconds (default 10, at most 30); past
    /// it the sample is a query error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_WEB_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<u32>,
    /// PEM CA certificates: the only roots the endpoint's certificate is checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(MAX_CA_BUNDLE_LENGTH))]
    pub ca_bundle: Option<String>,
}

/// An HTTP method of a web check.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum WebMethod {
    /// `GET`.
    #[default]
    #[serde(rename = "GET")]
    Get,
    /// `POST`, with `body`.
    #[serde(rename = "POST")]
    Post,
}

/// A header of a web check: a literal value, or a Secret key's.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = header_rules)]
pub struct WebHeader {
    /// The header's name, e.g. `Authorization` or `X-Scope-OrgID`.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    )]
    pub name: String,
    /// A literal value (placeholders allowed; never a credential: it is shown in the
    /// rollouts' status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(MAX_ARG_VALUE_LENGTH * 4))]
    pub value: Option<String>,
    /// A Secret key in the controller's namespace holding the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<LocalSecretKey>,
}

/// A Job check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobCheck {
    /// A `batch/v1` JobSpec. Placeholders in its strings are replaced as they are
    /// (an arg cannot change the Job's shape). The controller sets `backoffLimit` 0,
    /// `restartPolicy: Never`, a deadline and a TTL where the template sets none, and
    /// labels the Job; it never reads the Job's logs.
    #[schemars(transform = any_object)]
    pub template: serde_json::Value,
    /// How long a Job may run, in seconds (default 600, at most 3600); past it the
    /// sample is a query error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_JOB_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<u32>,
}

/// Which kind of template a gate uses.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum GateTemplateKind {
    /// A GateTemplate in the rollout's namespace.
    GateTemplate,
    /// A ClusterGateTemplate (the default).
    #[default]
    ClusterGateTemplate,
}

/// A gate's use of a template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateTemplateRef {
    /// `ClusterGateTemplate` (default) or `GateTemplate` (in the rollout's namespace).
    #[serde(default)]
    pub kind: GateTemplateKind,
    /// Name of the template.
    #[schemars(transform = schema::dns_subdomain("spec.gates[].template.name"))]
    pub name: String,
    /// Values of the template's args, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = arg_values)]
    pub args: BTreeMap<String, String>,
}

impl GateTemplateRef {
    /// `ClusterGateTemplate error-ratio`, `GateTemplate team-a/latency`.
    pub fn describe(&self, namespace: &str) -> String {
        match self.kind {
            GateTemplateKind::ClusterGateTemplate => format!("ClusterGateTemplate {}", self.name),
            GateTemplateKind::GateTemplate => format!("GateTemplate {namespace}/{}", self.name),
        }
    }
}

fn template_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[Rule::new(
            "[has(self.prometheus), has(self.web), has(self.job)].filter(x, x).size() == 1",
            "spec: set exactly one of prometheus, web and job",
        )
        .reason("FieldValueRequired")],
    );
}

fn args_list(schema: &mut Schema) {
    schema::set(schema, "maxItems", MAX_TEMPLATE_ARGS);
    schema::set(schema, "x-kubernetes-list-type", "map");
    schema::set(schema, "x-kubernetes-list-map-keys", json!(["name"]));
}

fn arg_values(schema: &mut Schema) {
    schema::set(schema, "maxProperties", MAX_TEMPLATE_ARGS);
    if let Some(values) = schema
        .as_object_mut()
        .and_then(|object| object.get_mut("additionalProperties"))
        .and_then(serde_json::Value::as_object_mut)
    {
        values.insert("maxLength".to_owned(), json!(MAX_ARG_VALUE_LENGTH));
    }
}

fn header_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[Rule::new(
            "has(self.value) != has(self.valueFrom)",
            "headers[]: set exactly one of value and valueFrom",
        )],
    );
}

fn web_url_rules(schema: &mut Schema) {
    schema::set(schema, "maxLength", MAX_WEB_URL_LENGTH);
    schema::add_rules(
        schema,
        &[Rule::new(
            "self.startsWith('https://') || self.startsWith('http://127.0.0.1') || \
             self.startsWith('http://[::1]') || self.startsWith('http://localhost')",
            "web.url: https://, or http:// to a loopback address",
        )],
    );
}

/// A free-form object kept as written (a JobSpec, checked by the controller).
fn any_object(schema: &mut Schema) {
    let description = schema.get("description").cloned();
    let mut object = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some(description) = description {
        object.insert("description".to_owned(), description);
    }
    *schema = Schema::from(object);
}
