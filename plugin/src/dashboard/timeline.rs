//! A rollout's Events as a timeline, newest first. The controller's Events carry names,
//! counts and digests, never values; they are shown as recorded, escaped.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Event;

use super::html::escape;

/// One Event as the timeline shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLine {
    /// When it last happened, RFC 3339 in seconds.
    pub at: String,
    /// `Normal` or `Warning`.
    pub kind: String,
    /// The Event's reason.
    pub reason: String,
    /// The Event's message.
    pub message: String,
    /// How many times it happened.
    pub count: i32,
}

impl EventLine {
    /// The line for a core/v1 Event (as `kubectl get events` reads events.k8s.io ones).
    pub fn from_event(event: &Event) -> EventLine {
        let at = event
            .series
            .as_ref()
            .and_then(|series| series.last_observed_time.as_ref())
            .map(|at| at.0)
            .or_else(|| event.event_time.as_ref().map(|at| at.0))
            .or_else(|| event.last_timestamp.as_ref().map(|at| at.0))
            .or_else(|| event.first_timestamp.as_ref().map(|at| at.0))
            .or_else(|| event.metadata.creation_timestamp.as_ref().map(|at| at.0));
        EventLine {
            at: at.map_or_else(
                || "-".to_owned(),
                |at| at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            ),
            kind: event.type_.clone().unwrap_or_else(|| "Normal".to_owned()),
            reason: event.reason.clone().unwrap_or_default(),
            message: event.message.clone().unwrap_or_default(),
            count: event
                .series
                .as_ref()
                .and_then(|series| series.count)
                .or(event.count)
                .unwrap_or(1)
                .max(1),
        }
    }
}

/// The timeline: `events` newest first, or why they could not be read.
pub fn timeline(events: &Result<Vec<EventLine>, String>) -> String {
    let mut out = String::from(r#"<section class="timeline"><h2>Events</h2>"#);
    match events {
        Err(why) => {
            let _ = write!(out, r#"<p class="refusal">{}</p>"#, escape(why));
        }
        Ok(events) if events.is_empty() => out.push_str(r#"<p class="empty">no events</p>"#),
        Ok(events) => {
            let mut sorted: Vec<&EventLine> = events.iter().collect();
            sorted.sort_by(|a, b| b.at.cmp(&a.at));
            out.push_str("<ol>");
            for event in sorted {
                let class = if event.kind == "Warning" {
                    "warning"
                } else {
                    "normal"
                };
                let times = if event.count > 1 {
                    format!(" <span class=\"times\">×{}</span>", event.count)
                } else {
                    String::new()
                };
                let _ = write!(
                    out,
                    r#"<li class="event {class}"><time>{}</time> <b>{}</b>{times} {}</li>"#,
                    escape(&event.at),
                    escape(&event.reason),
                    escape(&event.message)
                );
            }
            out.push_str("</ol>");
        }
    }
    out.push_str("</section>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: &str, kind: &str, reason: &str) -> EventLine {
        EventLine {
            at: at.to_owned(),
            kind: kind.to_owned(),
            reason: reason.to_owned(),
            message: "gate <errors> failed".to_owned(),
            count: 1,
        }
    }

    #[test]
    fn newest_first_warnings_marked_and_escaped() {
        let html = timeline(&Ok(vec![
            line("2026-01-01T10:00:00Z", "Normal", "RevisionDeclared"),
            line("2026-01-01T10:05:00Z", "Warning", "GateFailed"),
        ]));
        let declared = html.find("RevisionDeclared").expect("first");
        let failed = html.find("GateFailed").expect("second");
        assert!(failed < declared, "{html}");
        assert!(html.contains(r#"<li class="event warning">"#), "{html}");
        assert!(html.contains("gate &lt;errors&gt; failed"), "{html}");
    }

    #[test]
    fn a_refusal_is_shown() {
        let html = timeline(&Err("events is forbidden".to_owned()));
        assert!(html.contains("events is forbidden"));
    }
}
