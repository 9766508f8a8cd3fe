//! What the schema's CEL rules cannot check: the condition grammar, query placeholders and
//! PromQL syntax (every query rendered with sample values and parsed), duration semantics
//! and selector operators. Any error here is reported as the `InvalidSpec` condition and
//! the engine touches no region.

use std::collections::BTreeMap;
use std::fmt;

use crate::api::{ConfigRolloutSpec, Pause};
use crate::gates::{Condition, TemplateValues, check_template, render};

use super::clock::spec_duration;
use super::selection::{requirement_is_valid, server_selector};

/// One problem with a spec, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// JSON path of the field, e.g. `spec.gates[0].condition`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem the schema cannot catch, in field order.
pub fn validate(spec: &ConfigRolloutSpec) -> Vec<SpecError> {
    let mut errors = Vec::new();
    let mut report = |field: String, message: String| errors.push(SpecError { field, message });

    for (index, gate) in spec.gates.iter().enumerate() {
        let field = |name: &str| format!("spec.gates[{index}].{name}");
        if let Err(error) = Condition::parse(&gate.condition) {
            report(field("condition"), error.to_string());
        }
        if let Err(error) = check_template(&gate.query) {
            report(field("query"), error.to_string());
        } else if let Some(problem) = promql_problem(&gate.query) {
            report(field("query"), problem);
        }
        match spec_duration(&gate.interval) {
            Some(interval) if interval > chrono::TimeDelta::zero() => {}
            _ => report(field("interval"), "must be a positive duration".into()),
        }
        if let Some(delay) = &gate.initial_delay
            && spec_duration(delay).is_none()
        {
            report(field("initialDelay"), "must be a duration".into());
        }
        if gate.count < 1 {
            report(field("count"), "must be at least 1".into());
        }
        if gate.failure_limit < 0 || gate.inconclusive_limit < 0 {
            report(field("failureLimit"), "limits must not be negative".into());
        }
    }

    if let Some(deadline) = &spec.progress_deadline
        && !is_positive_duration(deadline)
    {
        report(
            "spec.progressDeadline".to_owned(),
            "must be a positive duration".into(),
        );
    }
    for (index, stage) in spec.stages.iter().enumerate() {
        let field = |name: &str| format!("spec.stages[{index}].{name}");
        if stage.max_parallel < 1 {
            report(field("maxParallel"), "must be at least 1".into());
        }
        if let Some(Pause { duration }) = &stage.pause
            && spec_duration(duration).is_none()
        {
            report(field("pause.duration"), "must be a duration".into());
        }
        if let Some(deadline) = &stage.progress_deadline
            && !is_positive_duration(deadline)
        {
            report(
                field("progressDeadline"),
                "must be a positive duration".into(),
            );
        }
        for gate in &stage.gates {
            if !spec.gates.iter().any(|declared| &declared.name == gate) {
                report(field("gates"), format!("gate `{gate}` is not declared"));
            }
        }
        let requirements = stage
            .regions
            .selector
            .iter()
            .flat_map(|selector| selector.match_expressions.iter().flatten());
        for requirement in requirements {
            if !requirement_is_valid(requirement) {
                report(
                    field("regions.selector.matchExpressions"),
                    format!(
                        "operator `{}` on key `{}` is not In/NotIn with values or \
                         Exists/DoesNotExist without",
                        requirement.operator, requirement.key
                    ),
                );
            }
        }
    }

    for (index, consumer) in spec.consumers.iter().enumerate() {
        if consumer.selector.as_ref().is_some_and(|selector| {
            selector
                .match_labels
                .as_ref()
                .is_none_or(BTreeMap::is_empty)
                && selector
                    .match_expressions
                    .as_ref()
                    .is_none_or(Vec::is_empty)
        }) {
            report(
                format!("spec.consumers[{index}].selector"),
                "must not be empty: an empty selector matches every workload of the namespace"
                    .into(),
            );
        }
        // Consumers are listed with the selector sent to each region's apiserver: what it
        // would refuse, or read differently, is refused here, before any region is read.
        if let Some(Err(error)) = consumer.selector.as_ref().map(server_selector) {
            report(
                format!("spec.consumers[{index}].selector.{}", error.field),
                error.message,
            );
        }
        if let Some(query) = &consumer.activation_query {
            let problem = match check_template(query) {
                Err(error) => Some(error.to_string()),
                Ok(()) => promql_problem(query),
            };
            if let Some(problem) = problem {
                report(format!("spec.consumers[{index}].activationQuery"), problem);
            }
        }
    }

    if let Some(Pause { duration }) = &spec.strategy.contract.pause
        && spec_duration(duration).is_none()
    {
        report(
            "spec.strategy.contract.pause.duration".into(),
            "must be a duration".into(),
        );
    }
    errors
}

/// Values a template is rendered with before it is parsed: the names the controller would
/// substitute, escaped the same way.
const SAMPLE_VALUES: TemplateValues<'static> = TemplateValues {
    region: "region-1",
    revision: "r1",
    stage: "canary",
};

/// Why `query` (a well-formed template), rendered, is not a PromQL query whose result a
/// gate can judge: unparsable, or a range vector or string rather than an instant vector
/// or scalar. `None` when it is fine.
fn promql_problem(query: &str) -> Option<String> {
    use promql_parser::parser::parse;
    use promql_parser::parser::value::ValueType;
    let rendered = render(query, &SAMPLE_VALUES).ok()?;
    match parse(&rendered) {
        Err(error) => Some(format!("not valid PromQL: {error}")),
        Ok(expression) => match expression.value_type() {
            ValueType::Vector | ValueType::Scalar => None,
            ValueType::Matrix => Some(
                "is a range vector (such as `x[5m]`): a gate needs an instant vector or a \
                 scalar, e.g. `rate(x[5m])`"
                    .to_owned(),
            ),
            ValueType::String => {
                Some("is a string: a gate needs an instant vector or a scalar".to_owned())
            }
        },
    }
}

fn is_positive_duration(text: &str) -> bool {
    spec_duration(text).is_some_and(|duration| duration > chrono::TimeDelta::zero())
}
