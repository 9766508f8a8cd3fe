//! How single values are printed: API times, phases, a condition's reason, a gate's name,
//! and text tenants wrote, made safe to show on a terminal.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use configrollout_api::{GateStatus, RolloutPhase, SampleComparison};

/// An API time as the plugin prints it: RFC 3339, in seconds, UTC.
pub fn time(at: &Time) -> String {
    at.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(super) fn phase_name(phase: Option<RolloutPhase>) -> String {
    phase.map_or_else(|| "-".to_owned(), |phase| format!("{phase:?}"))
}

pub(super) fn reason_and_message(condition: Option<&Condition>) -> String {
    match condition {
        Some(c) if c.message.is_empty() => c.reason.clone(),
        Some(c) => format!("{}: {}", c.reason, printable(&c.message)),
        None => "no reason recorded".to_owned(),
    }
}

/// `text` safe to print on one line of someone's terminal: status messages echo what
/// tenants wrote (a selector, a query, a region's error), and a control character
/// (ESC, CR, a line break) would let one tenant clear or overwrite the screen of everyone
/// who lists rollouts; a bidirectional override would reorder what follows it. Each is
/// shown as U+FFFD.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    use configrollout_api::text::is_unsafe_to_show;
    if !text.chars().any(is_unsafe_to_show) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| if is_unsafe_to_show(c) { '\u{fffd}' } else { c })
            .collect(),
    )
}

pub(super) fn gate_label(gate: &GateStatus) -> String {
    match &gate.region {
        Some(region) => format!("{} ({region})", gate.name),
        None => gate.name.clone(),
    }
}

/// Both sides of a comparison gate's sample on one line, e.g. `canary median 0.5 (IQR
/// 0.01, 10 points) vs baseline 0 (IQR 0, 20 points; regions eu-2, eu-3): p 3.2e-9,
/// change +inf%`. Raw: callers make it safe for where they show it.
pub fn comparison_summary(comparison: &SampleComparison) -> String {
    let side = |side: &configrollout_api::ComparisonSide| {
        format!(
            "{} (IQR {}, {} points",
            side.median.as_deref().unwrap_or("-"),
            side.spread.as_deref().unwrap_or("-"),
            side.points
        )
    };
    format!(
        "canary median {}) vs baseline {}; {}): U {}, p {}, change {}",
        side(&comparison.canary),
        side(&comparison.baseline),
        comparison.baseline_source,
        comparison.statistic.as_deref().unwrap_or("-"),
        comparison.p_value.as_deref().unwrap_or("-"),
        comparison.change.as_deref().unwrap_or("-"),
    )
}
