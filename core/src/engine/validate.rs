//! What the schema's CEL rules cannot check: the condition grammar, query placeholders and
//! PromQL syntax (every query rendered with sample values and parsed), duration semantics
//! and selector operators. Any error here is reported as the `InvalidSpec` condition and
//! the engine touches no region.

use std::collections::BTreeMap;
use std::fmt;

use super::clock::spec_duration;
use crate::gates::{Condition, TemplateValues, check_template, render, uses_placeholder};
use configrollout_api::{
    COMPANION_SUFFIX, Ceiling, ConfigRolloutSpec, DEADLINE_CEILING, GATE_INTERVAL_CEILING,
    GATE_INTERVAL_FLOOR, GateComparison, INITIAL_DELAY_CEILING, MAX_COMPARISON_POINTS,
    MAX_CONSUMERS, MAX_DATA_KEYS, MAX_GATE_COUNT, MAX_GATE_LIMIT, MAX_GATES, MAX_PARALLEL,
    MAX_REVISION_HISTORY_LIMIT, MAX_STAGES, MAX_TARGET_NAME_LENGTH, MIN_COMPARISON_SAMPLES,
    PAUSE_CEILING, Pause, parse_duration,
};

use super::label_selector::{requirement_is_valid, server_selector};

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

/// What is wrong with a comparison gate's knobs, by field under `compare`.
fn comparison_problems(compare: &GateComparison) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let window = duration_problem(&compare.window, Positive::Yes, GATE_INTERVAL_CEILING)
        .or_else(|| interval_floor_problem(&compare.window, GATE_INTERVAL_FLOOR));
    let step = duration_problem(&compare.step, Positive::Yes, GATE_INTERVAL_CEILING)
        .or_else(|| interval_floor_problem(&compare.step, GATE_INTERVAL_FLOOR));
    if let Some(problem) = &window {
        problems.push(("window", problem.clone()));
    }
    if let Some(problem) = &step {
        problems.push(("step", problem.clone()));
    }
    let counts = [
        ("tolerancePercent", compare.tolerance_percent, 0, 10_000),
        ("confidencePercent", compare.confidence_percent, 50, 99),
        (
            "minSamples",
            compare.min_samples,
            MIN_COMPARISON_SAMPLES,
            MAX_COMPARISON_POINTS,
        ),
    ];
    for (name, value, min, max) in counts {
        if let Some(problem) = count_problem(value, min, max) {
            problems.push((name, problem));
        }
    }
    if window.is_none()
        && step.is_none()
        && let (Some(window), Some(step)) =
            (spec_duration(&compare.window), spec_duration(&compare.step))
    {
        let points = comparison_points(window, step);
        if points > i64::from(MAX_COMPARISON_POINTS) {
            problems.push((
                "step",
                format!(
                    "{} over a window of {} gives {points} points per region, more than \
                     {MAX_COMPARISON_POINTS}: lengthen the step",
                    compare.step, compare.window
                ),
            ));
        } else if points < i64::from(compare.min_samples) {
            problems.push((
                "window",
                format!(
                    "{} at a step of {} gives {points} points per region, fewer than minSamples \
                     {}: every sample would be Inconclusive",
                    compare.window, compare.step, compare.min_samples
                ),
            ));
        }
    }
    for region in &compare.baseline_regions {
        if let Some(problem) = text_problem(region) {
            problems.push(("baselineRegions", problem));
        }
    }
    problems
}

/// Points a range over `window` every `step` holds: both ends included.
pub(crate) fn comparison_points(window: chrono::TimeDelta, step: chrono::TimeDelta) -> i64 {
    let step = step.num_milliseconds().max(1);
    window
        .num_milliseconds()
        .max(0)
        .checked_div(step)
        .unwrap_or(0)
        .saturating_add(1)
}

/// What is wrong with a template gate's web or job check once its args are in:
/// `(field, problem)`.
fn probe_problems(probe: &configrollout_api::ResolvedProbe) -> Vec<(String, String)> {
    use configrollout_api::ResolvedProbe;
    let mut problems = Vec::new();
    match probe {
        ResolvedProbe::Web(web) => {
            let texts = std::iter::once(("web.url", web.url.as_str()))
                .chain(web.body.as_deref().map(|body| ("web.body", body)))
                .chain(
                    web.headers
                        .iter()
                        .filter_map(|header| Some(("web.headers", header.value.as_deref()?))),
                );
            for (name, text) in texts {
                if let Err(error) = check_template(text) {
                    problems.push((name.to_owned(), error.to_string()));
                }
            }
            if let Err(error) = crate::gates::JsonPathQuery::parse(&web.json_path) {
                problems.push(("web.jsonPath".to_owned(), error.to_string()));
            }
        }
        ResolvedProbe::Job(job) => {
            let mut template = job.template.clone();
            let mut problem = None;
            crate::gates::job::walk_strings(&mut template, &mut |text| {
                if let Err(error) = check_template(text) {
                    problem.get_or_insert_with(|| error.to_string());
                }
            });
            if let Some(problem) = problem.or_else(|| crate::gates::job::job_problem(&template)) {
                problems.push(("job.template".to_owned(), problem));
            }
        }
    }
    problems
}

/// Every problem the schema cannot catch, in field order.
pub fn validate(spec: &ConfigRolloutSpec) -> Vec<SpecError> {
    let mut errors = Vec::new();
    let mut report = |field: String, message: String| errors.push(SpecError { field, message });

    for (index, gate) in spec.gates.iter().enumerate() {
        let field = |name: &str| format!("spec.gates[{index}].{name}");
        // A template gate is checked as its template resolved (see `gate_templates`);
        // one that did not resolve is reported there, once.
        let unresolved = gate.template.is_some() && gate.query.is_empty() && gate.probe.is_none();
        let template_field = |name: &str| format!("spec.gates[{index}].template ({name})");
        if let Some(probe) = &gate.probe {
            for (name, problem) in probe_problems(probe) {
                report(template_field(&name), problem);
            }
        }
        if unresolved {
            // Nothing to check but the knobs below.
        } else if gate.template.is_some() && !gate.condition.is_empty() && gate.compare.is_none() {
            if let Err(error) = Condition::parse(&gate.condition) {
                report(template_field("condition"), error.to_string());
            }
        } else {
            match &gate.compare {
                None => {
                    if let Some(problem) = text_problem(&gate.condition) {
                        report(field("condition"), problem);
                    } else if let Err(error) = Condition::parse(&gate.condition) {
                        report(field("condition"), error.to_string());
                    }
                }
                Some(_) if !gate.condition.is_empty() => report(
                    field("condition"),
                    "set exactly one of condition and compare".to_owned(),
                ),
                Some(compare) => {
                    for (name, problem) in comparison_problems(compare) {
                        report(field(&format!("compare.{name}")), problem);
                    }
                    if uses_placeholder(&gate.query, "revision") {
                        report(
                            field("query"),
                            "a comparison gate's query cannot use {{revision}}: its baseline runs \
                         the previous revision, which the query would not select"
                                .to_owned(),
                        );
                    }
                    if !uses_placeholder(&gate.query, "region") {
                        report(
                            field("query"),
                            "a comparison gate's query must use {{region}}, so that it can be \
                         asked of the regions not yet updated"
                                .to_owned(),
                        );
                    }
                }
            }
        }
        let query_field = |name: &str| {
            if gate.template.is_some() {
                template_field(&format!("prometheus.{name}"))
            } else {
                field(name)
            }
        };
        if unresolved || gate.probe.is_some() {
            // No query of its own.
        } else if let Some(problem) = text_problem(&gate.query) {
            report(query_field("query"), problem);
        } else if let Err(error) = check_template(&gate.query) {
            report(query_field("query"), error.to_string());
        } else if let Some(problem) = promql_problem(&gate.query) {
            report(query_field("query"), problem);
        }
        if let Some(problem) =
            duration_problem(&gate.interval, Positive::Yes, GATE_INTERVAL_CEILING)
                .or_else(|| interval_floor_problem(&gate.interval, GATE_INTERVAL_FLOOR))
        {
            report(field("interval"), problem);
        }
        if let Some(problem) = gate
            .initial_delay
            .as_deref()
            .and_then(|delay| duration_problem(delay, Positive::No, INITIAL_DELAY_CEILING))
        {
            report(field("initialDelay"), problem);
        }
        let counts = [
            ("count", gate.count, 1, MAX_GATE_COUNT),
            ("failureLimit", gate.failure_limit, 0, MAX_GATE_LIMIT),
            (
                "inconclusiveLimit",
                gate.inconclusive_limit,
                0,
                MAX_GATE_LIMIT,
            ),
            (
                "consecutiveErrorLimit",
                gate.consecutive_error_limit,
                1,
                MAX_GATE_LIMIT,
            ),
        ];
        for (name, value, min, max) in counts {
            if let Some(problem) = count_problem(value, min, max) {
                report(field(name), problem);
            }
        }
    }

    if let Some(problem) = spec
        .progress_deadline
        .as_deref()
        .and_then(|deadline| duration_problem(deadline, Positive::Yes, DEADLINE_CEILING))
    {
        report("spec.progressDeadline".to_owned(), problem);
    }
    for (index, stage) in spec.stages.iter().enumerate() {
        let field = |name: &str| format!("spec.stages[{index}].{name}");
        if let Some(problem) = count_problem(stage.max_parallel, 1, MAX_PARALLEL) {
            report(field("maxParallel"), problem);
        }
        if let Some(problem) = stage
            .pause
            .as_ref()
            .and_then(|Pause { duration }| duration_problem(duration, Positive::No, PAUSE_CEILING))
        {
            report(field("pause.duration"), problem);
        }
        if let Some(problem) = stage
            .progress_deadline
            .as_deref()
            .and_then(|deadline| duration_problem(deadline, Positive::Yes, DEADLINE_CEILING))
        {
            report(field("progressDeadline"), problem);
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

    for (index, subscription) in spec.notifications.iter().enumerate() {
        let field = |name: &str| format!("spec.notifications[{index}].{name}");
        let earlier = &spec.notifications[..index];
        if earlier.iter().any(|other| other.sink == subscription.sink) {
            report(
                field("sink"),
                format!("sink {} is subscribed twice", subscription.sink),
            );
        }
        if let Some(problem) = subscription
            .remind_after
            .as_deref()
            .and_then(|after| duration_problem(after, Positive::Yes, PAUSE_CEILING))
        {
            report(field("remindAfter"), problem);
        }
    }

    for (index, consumer) in spec.consumers.iter().enumerate() {
        // A selector must ask for something: `{}`, or only NotIn / DoesNotExist on keys a
        // tenant can make up, matches every workload of the namespace.
        if consumer.selector.as_ref().is_some_and(|selector| {
            let labels = selector
                .match_labels
                .as_ref()
                .is_some_and(|labels| !labels.is_empty());
            let asks = selector
                .match_expressions
                .iter()
                .flatten()
                .any(|requirement| matches!(requirement.operator.as_str(), "In" | "Exists"));
            !labels && !asks
        }) {
            report(
                format!("spec.consumers[{index}].selector"),
                "must name a label it requires (matchLabels, or an In or Exists expression): \
                 a selector of only NotIn or DoesNotExist, like an empty one, matches every \
                 workload of the namespace"
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
            let problem = text_problem(query).or_else(|| match check_template(query) {
                Err(error) => Some(error.to_string()),
                Ok(()) => promql_problem(query),
            });
            if let Some(problem) = problem {
                report(format!("spec.consumers[{index}].activationQuery"), problem);
            }
        }
    }

    if let Some(problem) = spec
        .strategy
        .contract
        .pause
        .as_ref()
        .and_then(|Pause { duration }| duration_problem(duration, Positive::No, PAUSE_CEILING))
    {
        report("spec.strategy.contract.pause.duration".into(), problem);
    }
    let lengths = [
        ("spec.stages", spec.stages.len(), MAX_STAGES),
        ("spec.gates", spec.gates.len(), MAX_GATES),
        ("spec.consumers", spec.consumers.len(), MAX_CONSUMERS),
        (
            "spec.data",
            spec.data.as_ref().map_or(0, BTreeMap::len),
            MAX_DATA_KEYS,
        ),
    ];
    if spec.target.name.ends_with(COMPANION_SUFFIX) {
        report(
            "spec.target.name".to_owned(),
            format!("must not end with {COMPANION_SUFFIX}: reserved for the state of targets"),
        );
    }
    if spec.target.name.len() > MAX_TARGET_NAME_LENGTH {
        report(
            "spec.target.name".to_owned(),
            format!("must be at most {MAX_TARGET_NAME_LENGTH} characters"),
        );
    }
    if spec.stages.is_empty() {
        report(
            "spec.stages".to_owned(),
            "must have at least 1 entry".into(),
        );
    }
    for (field, length, max) in lengths {
        if u64::try_from(length).map_or(true, |length| length > max) {
            report(field.to_owned(), format!("must have at most {max} entries"));
        }
    }
    if !(1..=MAX_REVISION_HISTORY_LIMIT).contains(&spec.revision_history_limit) {
        report(
            "spec.revisionHistoryLimit".into(),
            format!("must be between 1 and {MAX_REVISION_HISTORY_LIMIT}"),
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
/// A character tenant text may not hold (see [`configrollout_api::text`]), named by code point.
fn text_problem(text: &str) -> Option<String> {
    configrollout_api::text::first_refused_in_multiline(text)
        .map(|(index, c)| configrollout_api::text::refused_character_message(index, c))
}

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

/// Whether a duration field may be zero.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Positive {
    Yes,
    No,
}

/// What is wrong with a duration field's text: not a duration, zero where it must be
/// positive, or over its ceiling. `None` when it is fine.
fn duration_problem(text: &str, positive: Positive, ceiling: Ceiling) -> Option<String> {
    let Ok(duration) = parse_duration(text) else {
        return Some("must be a duration such as 500ms, 30s, 5m or 1h30m".to_owned());
    };
    if positive == Positive::Yes && duration.is_zero() {
        return Some("must be a positive duration".to_owned());
    }
    (!ceiling.admits(duration)).then(|| format!("must be at most {}", ceiling.text()))
}

/// What is wrong with a gate interval the grammar accepts: below `floor` (the schema's
/// second, or a controller's higher `--min-gate-interval`). `None` when it is fine or
/// does not parse (the grammar check reports that).
pub fn interval_floor_problem(text: &str, floor: std::time::Duration) -> Option<String> {
    let interval = parse_duration(text).ok()?;
    (interval < floor).then(|| {
        format!(
            "must be at least {} (each sample is a query and a status write)",
            configrollout_api::schema::floor_text(floor)
        )
    })
}

/// What is wrong with a count field: outside `min..=max`. `None` when it is fine.
fn count_problem(value: i32, min: i32, max: i32) -> Option<String> {
    if value < min {
        Some(format!("must be at least {min}"))
    } else if value > max {
        Some(format!("must be at most {max}"))
    } else {
        None
    }
}
