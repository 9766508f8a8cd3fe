//! The dashboard's actions are the plugin's own commands (`approve`, `abort`, `retry`,
//! `pause`, `resume`), run with the caller's credentials; what they would print is the
//! answer, and a refusal is the API server's answer as the plugin words it.

use hyper::StatusCode;

use crate::CliError;
use crate::approve::Reviewed;
use crate::hub::Hub;
use configrollout_api::annotations::{ABORT_ANNOTATION, RETRY_ANNOTATION};

/// The verbs a POST may name.
pub const VERBS: &[&str] = &["approve", "abort", "retry", "pause", "resume"];

/// The HTTP status that carries a command's failure to the page.
fn status_of(error: &CliError) -> StatusCode {
    match error {
        CliError::Api { code, .. } => {
            StatusCode::from_u16(*code).unwrap_or(StatusCode::BAD_GATEWAY)
        }
        CliError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        CliError::Transport { .. } => StatusCode::BAD_GATEWAY,
        CliError::Config(_) | CliError::Message(_) => StatusCode::CONFLICT,
    }
}

/// Runs `verb` on rollout `namespace/name` with the form's `fields` (`stage`, `reason`,
/// `revision` and `digest` for approve) and returns the status and the text to show.
pub async fn perform(
    hub: &Hub,
    namespace: &str,
    name: &str,
    verb: &str,
    fields: &[(String, String)],
) -> (StatusCode, String) {
    let field = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let hub = hub.in_namespace(namespace);
    let mut lines: Vec<String> = Vec::new();
    let mut say = |line: String| lines.push(line);
    let result = match verb {
        // The form carries the revision and digest of the page the approver read: an
        // approval is never applied to a revision that arrived after it.
        "approve" => match field("revision") {
            Some(revision) => {
                let reviewed = Reviewed {
                    revision,
                    digest: field("digest"),
                };
                hub.approve(name, field("stage"), field("reason"), &reviewed, &mut say)
                    .await
            }
            None => Err(CliError::Message(
                "the approval names no revision: reload the page and approve what it shows"
                    .to_owned(),
            )),
        },
        "abort" => hub.control(name, ABORT_ANNOTATION, &mut say).await,
        "retry" => hub.control(name, RETRY_ANNOTATION, &mut say).await,
        "pause" => hub.pause(name, true, &mut say).await,
        "resume" => hub.pause(name, false, &mut say).await,
        other => Err(CliError::Message(format!("no action {other:?}"))),
    };
    match result {
        Ok(0) => (StatusCode::OK, lines.join("\n")),
        Ok(_) => (StatusCode::CONFLICT, lines.join("\n")),
        Err(error) => {
            let status = status_of(&error);
            lines.push(error.to_string());
            (status, lines.join("\n"))
        }
    }
}
