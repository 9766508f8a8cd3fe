//! How single values are printed: API times, phases, a condition's reason, a gate's name,
//! and text tenants wrote, made safe to show on a terminal.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use configrollout_api::{GateStatus, RolloutPhase};

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
