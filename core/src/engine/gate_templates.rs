//! Template gates: a gate that names a GateTemplate or ClusterGateTemplate is resolved
//! here into the gate the engine samples, its args checked against their types and
//! substituted, each escaped for where it lands.
//!
//! Resolution is pure: the controller reads the templates a spec names and hands them
//! over ([`Templates`]); `lint` does the same from files. What a gate used is recorded:
//! the windows of a stage open with the template as it is then ([`record_uses`], in the
//! status's `gateTemplates`), and keep it while they sample ([`effective_spec`]); a
//! template changed meanwhile applies from the next stage's windows. A template that
//! cannot be used (missing, wrong args, a web or job check in a namespace's own template)
//! is an `InvalidSpec` naming the gate's field, unless the gate's open windows still
//! sample with what they recorded: it is refused when the next windows would open.

use std::collections::{BTreeMap, BTreeSet};

use configrollout_api::{
    ArgType, ConfigRolloutSpec, ConfigRolloutStatus, Gate, GateCheck, GateStatus, GateTemplateKind,
    GateTemplateRef, GateTemplateSpec, GateTemplateUse, GateVerdict, ResolvedProbe, StageState,
    parse_duration,
};

use super::validate::SpecError;
use crate::gates::job::{job_problem, walk_strings};
use crate::gates::template::{
    escape_json_string, escape_promql_string, escape_url_component, substitute_args,
};

/// The condition of a job gate's samples: the Job succeeded.
pub const JOB_SUCCEEDED: &str = "result == 1";

/// A template as read, with the generation it had.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateObject {
    /// Its `metadata.generation`.
    pub generation: i64,
    /// Its spec.
    pub spec: GateTemplateSpec,
}

/// The templates a spec names, by kind and name (a GateTemplate's in the rollout's
/// namespace); one absent here does not exist.
pub type Templates = BTreeMap<(TemplateKey, String), TemplateObject>;

/// Which kind a [`Templates`] entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TemplateKey {
    /// A GateTemplate of the rollout's namespace.
    Namespaced,
    /// A ClusterGateTemplate.
    Cluster,
}

impl From<GateTemplateKind> for TemplateKey {
    fn from(kind: GateTemplateKind) -> Self {
        match kind {
            GateTemplateKind::GateTemplate => TemplateKey::Namespaced,
            GateTemplateKind::ClusterGateTemplate => TemplateKey::Cluster,
        }
    }
}

/// The template gates of a spec as their templates are now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolution {
    /// Each template gate's check, its args substituted, by gate name (`revision` and
    /// `stage` empty until windows open with it).
    pub current: BTreeMap<String, GateTemplateUse>,
    /// Why a template gate cannot be resolved, by gate name.
    pub errors: BTreeMap<String, SpecError>,
}

/// The templates `spec` names, for the caller to read: `(kind, name)`.
pub fn named_templates(spec: &ConfigRolloutSpec) -> BTreeSet<(TemplateKey, String)> {
    spec.gates
        .iter()
        .filter_map(|gate| gate.template.as_ref())
        .map(|template| (template.kind.into(), template.name.clone()))
        .collect()
}

/// Resolves every template gate of `spec` (a rollout of `namespace`) with `templates`.
pub fn resolve(spec: &ConfigRolloutSpec, namespace: &str, templates: &Templates) -> Resolution {
    let mut resolution = Resolution::default();
    let mut recorded: usize = 0;
    for (index, gate) in spec.gates.iter().enumerate() {
        let Some(reference) = &gate.template else {
            continue;
        };
        match resolve_one(index, reference, namespace, templates) {
            Ok(use_) => {
                let bytes = serde_json::to_vec(&use_.check).map_or(usize::MAX, |json| json.len());
                recorded = recorded.saturating_add(bytes);
                if recorded > MAX_RECORDED_CHECK_BYTES {
                    resolution.errors.insert(
                        gate.name.clone(),
                        SpecError {
                            field: format!("spec.gates[{index}].template"),
                            message: format!(
                                "the template gates' checks take more than {} KiB, which the \
                                 rollout's status records: fewer template gates, or smaller \
                                 checks (a caBundle, a Job template)",
                                MAX_RECORDED_CHECK_BYTES / 1024
                            ),
                        },
                    );
                    continue;
                }
                resolution.current.insert(
                    gate.name.clone(),
                    GateTemplateUse {
                        gate: gate.name.clone(),
                        ..use_
                    },
                );
            }
            Err(error) => {
                resolution.errors.insert(gate.name.clone(), error);
            }
        }
    }
    resolution
}

fn resolve_one(
    index: usize,
    reference: &GateTemplateRef,
    namespace: &str,
    templates: &Templates,
) -> Result<GateTemplateUse, SpecError> {
    let field = |name: &str| format!("spec.gates[{index}].template{name}");
    let described = reference.describe(namespace);
    let error = |name: &str, message: String| SpecError {
        field: field(name),
        message,
    };
    let Some(object) = templates.get(&(reference.kind.into(), reference.name.clone())) else {
        return Err(error("", format!("{described} not found")));
    };
    let template = &object.spec;
    let providers = [
        template.check.prometheus.is_some(),
        template.check.web.is_some(),
        template.check.job.is_some(),
    ];
    if providers.iter().filter(|set| **set).count() != 1 {
        return Err(error(
            "",
            format!("{described} sets not exactly one of prometheus, web and job"),
        ));
    }
    if reference.kind == GateTemplateKind::GateTemplate && template.check.prometheus.is_none() {
        return Err(error(
            "",
            format!(
                "{described} defines a web or job check, which only a ClusterGateTemplate may: \
                 a namespace's own template would let it call any endpoint or run any image"
            ),
        ));
    }
    let args = arg_values(reference, template, &described)
        .map_err(|(name, message)| error(&name, message))?;
    let check = substitute(&template.check, &args)
        .map_err(|message| error("", format!("{described}: {message}")))?;
    if let Some(problem) = oversized(&check) {
        return Err(error("", format!("{described}: {problem}")));
    }
    Ok(GateTemplateUse {
        gate: String::new(),
        template: described,
        generation: object.generation,
        revision: String::new(),
        stage: String::new(),
        check,
    })
}

/// Why a check, its args in, cannot be recorded in status (whose schema holds it to the
/// template's own bounds), if so: a long arg, percent-encoded or escaped, can make a
/// field longer than the template itself could be.
fn oversized(check: &GateCheck) -> Option<String> {
    use configrollout_api::{
        MAX_ARG_VALUE_LENGTH, MAX_CONDITION_LENGTH, MAX_QUERY_LENGTH, MAX_WEB_BODY_LENGTH,
        MAX_WEB_URL_LENGTH,
    };
    let mut fields: Vec<(&str, &str, u64)> = Vec::new();
    if let Some(prometheus) = &check.prometheus {
        fields.push(("prometheus.query", &prometheus.query, MAX_QUERY_LENGTH));
        fields.push((
            "prometheus.condition",
            &prometheus.condition,
            MAX_CONDITION_LENGTH,
        ));
    }
    if let Some(web) = &check.web {
        fields.push(("web.url", &web.url, MAX_WEB_URL_LENGTH));
        fields.push(("web.condition", &web.condition, MAX_CONDITION_LENGTH));
        if let Some(body) = &web.body {
            fields.push(("web.body", body, MAX_WEB_BODY_LENGTH));
        }
        for header in &web.headers {
            if let Some(value) = &header.value {
                fields.push(("web.headers[].value", value, MAX_ARG_VALUE_LENGTH * 4));
            }
        }
    }
    fields.into_iter().find_map(|(field, text, max)| {
        let length = u64::try_from(text.chars().count()).unwrap_or(u64::MAX);
        (length > max).then(|| {
            format!("{field} is {length} characters with its args in, more than the {max} allowed")
        })
    })
}

/// The most bytes the checks of a rollout's template gates may take in its status
/// (`status.gateTemplates`), together: the status is one object, written often.
pub const MAX_RECORDED_CHECK_BYTES: usize = 128 * 1024;

/// An arg's value, with its type.
struct ArgValue {
    type_: ArgType,
    value: String,
}

/// The gate's args checked against the template's declarations, defaults filled in.
fn arg_values(
    reference: &GateTemplateRef,
    template: &GateTemplateSpec,
    described: &str,
) -> Result<BTreeMap<String, ArgValue>, (String, String)> {
    let declared: Vec<&str> = template.args.iter().map(|arg| arg.name.as_str()).collect();
    if let Some(unknown) = reference
        .args
        .keys()
        .find(|name| !declared.contains(&name.as_str()))
    {
        return Err((
            format!(".args.{unknown}"),
            format!(
                "{described} declares no arg {unknown} (it declares: {})",
                if declared.is_empty() {
                    "none".to_owned()
                } else {
                    declared.join(", ")
                }
            ),
        ));
    }
    let mut values = BTreeMap::new();
    for arg in &template.args {
        let Some(value) = reference.args.get(&arg.name).or(arg.default.as_ref()) else {
            return Err((
                ".args".to_owned(),
                format!("{described} needs arg {} (it has no default)", arg.name),
            ));
        };
        if let Some(problem) = type_problem(arg.type_, value) {
            return Err((format!(".args.{}", arg.name), problem));
        }
        values.insert(
            arg.name.clone(),
            ArgValue {
                type_: arg.type_,
                value: value.clone(),
            },
        );
    }
    Ok(values)
}

/// Why `value` is not of `type_`; never quotes it (a value may be refused for holding
/// control characters a terminal would act on).
fn type_problem(type_: ArgType, value: &str) -> Option<String> {
    if value
        .chars()
        .any(configrollout_api::text::is_unsafe_to_show)
    {
        return Some(
            "holds a control character or a bidirectional override, which no terminal should \
             show"
                .to_owned(),
        );
    }
    match type_ {
        ArgType::String => None,
        ArgType::Number => match value.trim().parse::<f64>() {
            Ok(number) if number.is_finite() => None,
            _ => Some("is not a finite decimal number (type Number)".to_owned()),
        },
        ArgType::Duration => parse_duration(value)
            .err()
            .map(|_| "is not a duration such as 30s, 5m or 1h30m (type Duration)".to_owned()),
    }
}

/// The check with every `{{args.NAME}}` replaced, escaped for where it lands.
fn substitute(check: &GateCheck, args: &BTreeMap<String, ArgValue>) -> Result<GateCheck, String> {
    let raw = |name: &str| args.get(name).map(|arg| arg.value.clone());
    let escaped = |escape: fn(&str) -> String| {
        move |name: &str| {
            args.get(name).map(|arg| match arg.type_ {
                ArgType::String => escape(&arg.value),
                ArgType::Number | ArgType::Duration => arg.value.trim().to_owned(),
            })
        }
    };
    // A condition takes numbers only: text there could rewrite the platform's check.
    let number = |name: &str| {
        args.get(name).map(|arg| match arg.type_ {
            ArgType::Number => arg.value.trim().to_owned(),
            // Not a number: left as an expression the condition grammar refuses.
            ArgType::String | ArgType::Duration => "\u{0}".to_owned(),
        })
    };
    let in_field =
        |field: &'static str| move |error: crate::gates::TemplateError| format!("{field}: {error}");
    let condition = |text: &str, field: &'static str| -> Result<String, String> {
        let rendered = substitute_args(text, number).map_err(in_field(field))?;
        if rendered.contains('\u{0}') {
            return Err(format!(
                "{field}: only Number args may be used in a condition"
            ));
        }
        Ok(rendered)
    };
    let mut resolved = GateCheck::default();
    if let Some(prometheus) = &check.prometheus {
        let mut prometheus = prometheus.clone();
        prometheus.query = substitute_args(&prometheus.query, escaped(escape_promql_string))
            .map_err(in_field("prometheus.query"))?;
        if !prometheus.condition.is_empty() {
            prometheus.condition = condition(&prometheus.condition, "prometheus.condition")?;
        }
        resolved.prometheus = Some(prometheus);
    }
    if let Some(web) = &check.web {
        let mut web = web.clone();
        if let Some(problem) = url_placeholder_problem(&web.url) {
            return Err(format!("web.url: {problem}"));
        }
        // A value that is a path segment of its own, `.` or `..` (or their escapes, which
        // URL parsers decode), would move the request to another path of the host.
        let dot_segment = std::cell::RefCell::new(None);
        substitute_args(&web.url, |name| {
            let arg = args.get(name)?;
            if matches!(arg.value.trim(), "." | "..") {
                dot_segment
                    .borrow_mut()
                    .get_or_insert_with(|| name.to_owned());
            }
            Some(String::new())
        })
        .map_err(in_field("web.url"))?;
        if let Some(name) = dot_segment.into_inner() {
            return Err(format!(
                "web.url: arg {name} is `.` or `..`, which would change the endpoint's path"
            ));
        }
        web.url = substitute_args(&web.url, escaped(escape_url_component))
            .map_err(in_field("web.url"))?;
        if let Some(body) = &web.body {
            web.body = Some(
                substitute_args(body, escaped(escape_json_string)).map_err(in_field("web.body"))?,
            );
        }
        for header in &mut web.headers {
            if let Some(value) = &header.value {
                header.value = Some(substitute_args(value, raw).map_err(in_field("web.headers"))?);
            }
        }
        web.condition = condition(&web.condition, "web.condition")?;
        resolved.web = Some(web);
    }
    if let Some(job) = &check.job {
        let mut job = job.clone();
        let mut failure = None;
        walk_strings(
            &mut job.template,
            &mut |text| match substitute_args(text, raw) {
                Ok(rendered) => *text = rendered,
                Err(error) => {
                    failure.get_or_insert_with(|| format!("job.template: {error}"));
                }
            },
        );
        if let Some(failure) = failure {
            return Err(failure);
        }
        if let Some(problem) = job_problem(&job.template) {
            return Err(format!("job.template: {problem}"));
        }
        resolved.job = Some(job);
    }
    Ok(resolved)
}

/// Why a web check's URL template cannot be used: a placeholder in its scheme, host or
/// port would let an arg (or a region's name) choose where the request goes.
fn url_placeholder_problem(url: &str) -> Option<String> {
    let after_scheme = url.find("://").map_or(0, |at| at.saturating_add(3));
    let authority_end = url
        .get(after_scheme..)
        .and_then(|rest| rest.find(['/', '?', '#']))
        .map_or(url.len(), |at| at.saturating_add(after_scheme));
    url.get(..authority_end)
        .is_some_and(|head| head.contains("{{"))
        .then(|| "placeholders may appear in the path and query only, never in the host".to_owned())
}

/// The stage (by name) whose windows of `gate` sample now: a stage verifying or baking
/// with a running window of it.
fn sampling_stage<'s>(status: &'s ConfigRolloutStatus, gate: &str) -> Option<&'s str> {
    status
        .stages
        .iter()
        .filter(|stage| matches!(stage.state, StageState::Verifying | StageState::Baking))
        .find(|stage| stage.gates.iter().any(|window| running(window, gate)))
        .map(|stage| stage.name.as_str())
}

fn running(window: &GateStatus, gate: &str) -> bool {
    window.name == gate && window.verdict == Some(GateVerdict::Running)
}

/// The use a gate's sampling windows recorded, if they are still sampling.
fn recorded_use<'s>(status: &'s ConfigRolloutStatus, gate: &str) -> Option<&'s GateTemplateUse> {
    let stage = sampling_stage(status, gate)?;
    let revision = status.revision.as_deref()?;
    status
        .gate_templates
        .iter()
        .find(|use_| use_.gate == gate && use_.stage == stage && use_.revision == revision)
}

/// `spec` with every template gate replaced by what it samples: the check its sampling
/// windows recorded when they opened, or else its template's now. Also the errors of
/// the gates that have neither (the others' templates may be fixed before their next
/// windows open).
pub fn effective_spec(
    spec: &ConfigRolloutSpec,
    status: &ConfigRolloutStatus,
    resolution: &Resolution,
) -> (ConfigRolloutSpec, Vec<SpecError>) {
    let mut effective = spec.clone();
    let mut errors = Vec::new();
    for gate in &mut effective.gates {
        if gate.template.is_none() {
            continue;
        }
        let check = match recorded_use(status, &gate.name) {
            Some(recorded) => &recorded.check,
            None => match resolution.current.get(&gate.name) {
                Some(current) => &current.check,
                None => {
                    if let Some(error) = resolution.errors.get(&gate.name) {
                        errors.push(error.clone());
                    }
                    continue;
                }
            },
        };
        apply(gate, check);
    }
    (effective, errors)
}

/// `gate` as it samples `check`: what the windows opening with it are shaped by.
pub(super) fn sampling(gate: &Gate, check: &GateCheck) -> Gate {
    let mut gate = gate.clone();
    apply(&mut gate, check);
    gate
}

/// Makes `gate` sample `check`.
fn apply(gate: &mut Gate, check: &GateCheck) {
    if let Some(prometheus) = &check.prometheus {
        gate.query.clone_from(&prometheus.query);
        gate.condition.clone_from(&prometheus.condition);
        gate.compare.clone_from(&prometheus.compare);
        gate.probe = None;
    } else if let Some(web) = &check.web {
        gate.query.clear();
        gate.condition.clone_from(&web.condition);
        gate.compare = None;
        gate.probe = Some(ResolvedProbe::Web(web.clone()));
    } else if let Some(job) = &check.job {
        gate.query.clear();
        JOB_SUCCEEDED.clone_into(&mut gate.condition);
        gate.compare = None;
        gate.probe = Some(ResolvedProbe::Job(job.clone()));
    }
}

/// Records, as the windows of stage `stage` of `revision` open, the check each of its
/// template gates samples: `current` (the templates now). Returns a line for each gate
/// whose template changed since the windows before recorded it, for an Event.
pub(super) fn record_uses(
    status: &mut ConfigRolloutStatus,
    spec_gates: &[Gate],
    stage_gates: &[String],
    current: &BTreeMap<String, GateTemplateUse>,
    revision: &str,
    stage: &str,
) -> Vec<String> {
    let mut changes = Vec::new();
    let opening = spec_gates
        .iter()
        .filter(|gate| gate.template.is_some() && stage_gates.contains(&gate.name));
    for gate in opening {
        let Some(now) = current.get(&gate.name) else {
            continue;
        };
        let entry = GateTemplateUse {
            revision: revision.to_owned(),
            stage: stage.to_owned(),
            ..now.clone()
        };
        match status
            .gate_templates
            .iter_mut()
            .find(|use_| use_.gate == gate.name)
        {
            Some(previous) => {
                if previous.template != entry.template || previous.generation != entry.generation {
                    changes.push(format!(
                        "gate {} uses {} generation {} from stage {stage} of {revision} (was {} \
                         generation {})",
                        gate.name,
                        entry.template,
                        entry.generation,
                        previous.template,
                        previous.generation
                    ));
                }
                *previous = entry;
            }
            None => status.gate_templates.push(entry),
        }
    }
    // Gates no longer in the spec, or no longer templated, keep no entry.
    status.gate_templates.retain(|use_| {
        spec_gates
            .iter()
            .any(|gate| gate.name == use_.gate && gate.template.is_some())
    });
    changes
}

/// Whether a gate samples each region of its stage (a query or web check that uses
/// `{{region}}`, and every job check, which runs in a region), or the stage once.
pub fn samples_per_region(gate: &Gate) -> bool {
    use crate::gates::uses_placeholder;
    match &gate.probe {
        None => uses_placeholder(&gate.query, "region"),
        Some(ResolvedProbe::Job(_)) => true,
        Some(ResolvedProbe::Web(web)) => {
            uses_placeholder(&web.url, "region")
                || web
                    .body
                    .as_deref()
                    .is_some_and(|body| uses_placeholder(body, "region"))
                || web.headers.iter().any(|header| {
                    header
                        .value
                        .as_deref()
                        .is_some_and(|value| uses_placeholder(value, "region"))
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec_with(template: serde_json::Value) -> ConfigRolloutSpec {
        serde_json::from_value(json!({
            "target": {"namespace": "app", "name": "limits"},
            "data": {"k": "v"},
            "gates": [{"name": "g", "template": template}],
            "stages": [{"name": "canary", "regions": {"names": ["c1"]}, "gates": ["g"]}],
        }))
        .unwrap()
    }

    fn templates(spec: serde_json::Value) -> Templates {
        Templates::from([(
            (TemplateKey::Cluster, "t".to_owned()),
            TemplateObject {
                generation: 7,
                spec: serde_json::from_value(spec).unwrap(),
            },
        )])
    }

    fn resolved(args: serde_json::Value, template: serde_json::Value) -> Result<GateCheck, String> {
        let spec = spec_with(json!({"name": "t", "args": args}));
        let resolution = resolve(&spec, "app", &templates(template));
        match resolution.current.get("g") {
            Some(use_) => Ok(use_.check.clone()),
            None => Err(resolution.errors["g"].to_string()),
        }
    }

    #[test]
    fn a_string_arg_cannot_close_the_promql_string_it_lands_in() {
        let check = resolved(
            json!({"job": r#"x"} or vector(1) or up{a=""#}),
            json!({
                "args": [{"name": "job"}],
                "prometheus": {"query": "up{job=\"{{args.job}}\"}", "condition": "result == 1"},
            }),
        )
        .unwrap();
        assert_eq!(
            check.prometheus.unwrap().query,
            r#"up{job="x\"} or vector(1) or up{a=\""}"#
        );
    }

    #[test]
    fn only_number_args_go_into_a_condition() {
        let template = json!({
            "args": [{"name": "limit"}],
            "prometheus": {"query": "up", "condition": "result < {{args.limit}}"},
        });
        let error = resolved(json!({"limit": "1 or result > 0"}), template).unwrap_err();
        assert!(
            error.contains("only Number args may be used in a condition"),
            "{error}"
        );
    }

    #[test]
    fn typed_args_are_checked_and_never_quoted() {
        let template = json!({
            "args": [{"name": "window", "type": "Duration"}],
            "prometheus": {"query": "rate(up[{{args.window}}])", "condition": "result == 1"},
        });
        assert_eq!(
            resolved(json!({"window": "5m"}), template.clone())
                .unwrap()
                .prometheus
                .unwrap()
                .query,
            "rate(up[5m])"
        );
        let error = resolved(json!({"window": "5m]) or vector(1"}), template.clone()).unwrap_err();
        assert!(error.contains("is not a duration"), "{error}");
        assert!(
            !error.contains("vector"),
            "the value is never quoted: {error}"
        );
        let error = resolved(json!({"window": "5m\u{1b}[2J"}), template).unwrap_err();
        assert!(error.contains("control character"), "{error}");
    }

    #[test]
    fn job_args_replace_strings_and_cannot_add_fields() {
        let check = resolved(
            json!({"target": "\", \"privileged\": true, \"x\": \""}),
            json!({
                "args": [{"name": "target"}],
                "job": {"template": {"template": {"spec": {
                    "containers": [{"name": "c", "image": "i", "args": ["{{args.target}}"]}],
                }}}},
            }),
        )
        .unwrap();
        let job = check.job.unwrap();
        assert_eq!(
            job.template["template"]["spec"]["containers"][0]["args"][0],
            "\", \"privileged\": true, \"x\": \""
        );
        assert_eq!(
            job.template["template"]["spec"]["containers"][0]
                .as_object()
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn a_web_arg_cannot_move_the_request_to_another_path_nor_overflow_the_status() {
        let template = json!({
            "args": [{"name": "team"}],
            "web": {
                "url": "https://status.internal/teams/{{args.team}}/errors",
                "jsonPath": "$.ratio",
                "condition": "result < 1",
            },
        });
        for value in ["..", "."] {
            let error = resolved(json!({"team": value}), template.clone()).unwrap_err();
            assert!(
                error.contains("would change the endpoint's path"),
                "{error}"
            );
        }
        let url = resolved(json!({"team": "a/../b"}), template.clone())
            .unwrap()
            .web
            .unwrap()
            .url;
        assert_eq!(url, "https://status.internal/teams/a%2F..%2Fb/errors");
        // 253 characters that percent-encode to nine bytes each: longer than a URL may be.
        let long: String = std::iter::repeat_n('\u{4e2d}', 253).collect();
        let error = resolved(json!({"team": long}), template.clone()).unwrap_err();
        assert!(
            error.contains("web.url is") && error.contains("more than the 2048 allowed"),
            "{error}"
        );
        let error = resolved(json!({"team": "a\u{202e}b"}), template).unwrap_err();
        assert!(error.contains("bidirectional override"), "{error}");
    }

    #[test]
    fn a_job_template_that_is_not_a_job_spec_is_refused() {
        let error = resolved(
            json!({}),
            json!({"job": {"template": {"template": {"spec": {"containers": []}}}}}),
        )
        .unwrap_err();
        assert!(error.contains("a Job needs a container"), "{error}");
        let error = resolved(
            json!({}),
            json!({"job": {"template": {"parallelism": "many"}}}),
        )
        .unwrap_err();
        assert!(error.contains("not a batch/v1 JobSpec"), "{error}");
    }
}
