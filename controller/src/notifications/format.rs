//! One notice, rendered for one sink type into the body of an HTTP request. Pure: no IO,
//! no clock; the caller sends the body, stamped and, when the sink has an HMAC key,
//! signed as the validators sign ([`crate::validators::sign`]).
//!
//! # Wire formats
//!
//! - [`SinkType::Webhook`], `application/json`: `{"apiVersion": "configrollout.dev/v1alpha1",
//!   "kind": "RolloutNotification", "id", "trigger", "rollout": {"namespace", "name",
//!   "uid"}, "revision", "stage", "subject", "reason", "message", "progress", "at",
//!   "action", "link"}`, absent optional fields left out. `id` is the idempotency key:
//!   every delivery of one notice carries the same.
//! - [`SinkType::Slack`], `application/json`: an incoming webhook's `text` (a one-line
//!   summary) and `blocks` (the summary, fields, the message, the commands to act, the
//!   link).
//! - [`SinkType::Teams`], `application/json`: a workflow webhook's message holding one
//!   Adaptive Card 1.4.
//! - [`SinkType::CloudEvents`], `application/cloudevents+json` (structured mode): `id` the
//!   idempotency key, `type` `dev.configrollout.rollout.<trigger in kebab case>`,
//!   `subject` `<namespace>/<name>`, `time` the notice's, `data` the webhook body.
//!
//! # What is shown
//!
//! Only what the notice and the context carry: names, the revision, the stage, counts,
//! reasons and messages (which never hold a configuration value). Every such string is
//! trimmed, rid of control characters and bidirectional overrides (a line break becomes a
//! space) and cut to a bound; Slack's and Teams' markup characters in it are escaped, so
//! that a tenant's message can neither mention `@here` nor make a link. A command line
//! quotes any argument that is not a plain word.

use serde_json::{Map, Value, json};

use crate::api::text::is_unsafe_to_show;
use crate::api::{
    MAX_DASHBOARD_URL_LENGTH, MAX_NOTICE_MESSAGE_CHARS, Notice, NotificationTrigger, SinkType,
};

use crate::api::text::path_segment;

/// `apiVersion` of a webhook body.
pub const API_VERSION: &str = "configrollout.dev/v1alpha1";
/// `kind` of a webhook body.
pub const KIND: &str = "RolloutNotification";
/// Content type of the Webhook, Slack and Teams bodies.
pub const JSON: &str = "application/json";
/// Content type of a structured-mode CloudEvent.
pub const CLOUDEVENTS_JSON: &str = "application/cloudevents+json";
/// Prefix of a CloudEvent's `type`; the trigger in kebab case follows.
pub const CLOUDEVENTS_TYPE_PREFIX: &str = "dev.configrollout.rollout.";
/// Longest name, revision, stage, subject, uid or key kept, in characters.
const MAX_NAME_CHARS: usize = 253;
/// Longest reason kept, in characters.
const MAX_REASON_CHARS: usize = 256;
/// Longest progress kept, in characters.
const MAX_PROGRESS_CHARS: usize = 64;

/// A request body and its content type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The `Content-Type` header's value.
    pub content_type: &'static str,
    /// The exact bytes to send (and sign).
    pub body: Vec<u8>,
}

/// One notice of one rollout, with what a delivery adds to it.
#[derive(Debug, Clone, Copy)]
pub struct NoticeContext<'a> {
    /// Namespace of the ConfigRollout.
    pub namespace: &'a str,
    /// Name of the ConfigRollout.
    pub name: &'a str,
    /// UID of the ConfigRollout.
    pub uid: &'a str,
    /// The notice, from the rollout's outbox.
    pub notice: &'a Notice,
    /// The notice's stable id, e.g. `<uid>.<sequence>`: every delivery of it carries it.
    pub idempotency_key: &'a str,
    /// The sink's dashboard base URL; the notice links to the rollout's page under it.
    pub dashboard_url: Option<&'a str>,
    /// A CloudEvent's `source`, e.g. `configrollout-controller`.
    pub source: &'a str,
}

/// The body announcing `context`'s notice to a sink of type `sink`.
pub fn render(sink: SinkType, context: &NoticeContext<'_>) -> Rendered {
    let shown = Shown::of(context);
    let (content_type, value) = match sink {
        SinkType::Webhook => (JSON, webhook(&shown)),
        SinkType::Slack => (JSON, slack(&shown)),
        SinkType::Teams => (JSON, teams(&shown)),
        SinkType::CloudEvents => (CLOUDEVENTS_JSON, cloud_event(&shown, context.source)),
    };
    Rendered {
        content_type,
        body: value.to_string().into_bytes(),
    }
}

/// The `kubectl configrollout` command lines (one per line) that act on the notice, if
/// any: approve that stage of that revision; retry or abort a halt; see why a spec was
/// refused and lint the fix; look at a rollout in trouble. `None` for a stage passed and
/// a rollout complete.
pub fn action_hint(context: &NoticeContext<'_>) -> Option<String> {
    Shown::of(context).action
}

/// The context's strings as they may be shown: cleaned, bounded, absent when empty.
struct Shown {
    id: String,
    trigger: NotificationTrigger,
    namespace: String,
    name: String,
    uid: String,
    revision: Option<String>,
    stage: Option<String>,
    subject: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    progress: Option<String>,
    at: String,
    action: Option<String>,
    link: Option<String>,
}

impl Shown {
    fn of(context: &NoticeContext<'_>) -> Shown {
        let notice = context.notice;
        let optional = |raw: &Option<String>, max: usize| {
            raw.as_deref()
                .map(|raw| clean(raw, max))
                .filter(|text| !text.is_empty())
        };
        let mut shown = Shown {
            id: clean(context.idempotency_key, MAX_NAME_CHARS),
            trigger: notice.trigger,
            namespace: clean(context.namespace, MAX_NAME_CHARS),
            name: clean(context.name, MAX_NAME_CHARS),
            uid: clean(context.uid, MAX_NAME_CHARS),
            revision: optional(&notice.revision, MAX_NAME_CHARS),
            stage: optional(&notice.stage, MAX_NAME_CHARS),
            subject: optional(&notice.subject, MAX_NAME_CHARS),
            reason: optional(&notice.reason, MAX_REASON_CHARS),
            message: optional(&notice.message, MAX_NOTICE_MESSAGE_CHARS),
            progress: optional(&notice.progress, MAX_PROGRESS_CHARS),
            // RFC 3339, UTC.
            at: notice.at.0.to_string(),
            action: None,
            link: None,
        };
        shown.link = context
            .dashboard_url
            .map(|base| clean(base, MAX_DASHBOARD_URL_LENGTH as usize))
            .filter(|base| base.starts_with("https://") || base.starts_with("http://"))
            .map(|base| {
                // The dashboard's route of one rollout's page (`rollout_href` in the plugin).
                format!(
                    "{}/r/{}/{}",
                    base.trim_end_matches('/'),
                    path_segment(&shown.namespace),
                    path_segment(&shown.name)
                )
            });
        let commands = commands(&shown);
        shown.action = (!commands.is_empty()).then(|| commands.join("\n"));
        shown
    }

    /// `namespace/name`, and the revision when known.
    fn head(&self) -> String {
        match &self.revision {
            Some(revision) => format!("{}/{} {revision}", self.namespace, self.name),
            None => format!("{}/{}", self.namespace, self.name),
        }
    }

    /// What happened, in one line of plain words.
    fn summary(&self) -> String {
        use NotificationTrigger as T;
        let head = self.head();
        let stage = self.stage.as_deref().unwrap_or("?");
        let subject = self.subject.as_deref().unwrap_or("?");
        let in_stage = self
            .stage
            .as_deref()
            .map(|stage| format!(" in stage {stage}"))
            .unwrap_or_default();
        let progress = self
            .progress
            .as_deref()
            .map(|progress| format!(" ({progress})"))
            .unwrap_or_default();
        let because = self
            .reason
            .as_deref()
            .or(self.message.as_deref())
            .map(|why| format!(": {why}"))
            .unwrap_or_default();
        match self.trigger {
            T::AwaitingApproval => format!("{head}: stage {stage} awaits approval{progress}"),
            T::StillAwaitingApproval => {
                format!("{head}: stage {stage} still awaits approval{progress}")
            }
            T::StagePassed => format!("{head}: stage {stage} passed{progress}"),
            T::Halted => format!("{head} halted{in_stage}{because}"),
            T::RollingBack => format!("{head} rolling back{because}"),
            T::RolledBack => format!("{head} rolled back"),
            T::Complete => format!("{head} complete{progress}"),
            T::GateFailing => format!("{head}: gate {subject} failing{in_stage}"),
            T::GateInconclusive => format!("{head}: gate {subject} inconclusive{in_stage}"),
            T::DriftDetected => format!("{head}: drift in region {subject}"),
            T::RegionUnreachable => format!("{head}: region {subject} unreachable"),
            T::SpecRefused => format!("{head}: spec refused{because}"),
        }
    }
}

/// The command lines that act on `shown`'s notice, as the plugin's CLI takes them.
fn commands(shown: &Shown) -> Vec<String> {
    use NotificationTrigger as T;
    let target = format!(
        "{} -n {}",
        shell_word(&shown.name),
        shell_word(&shown.namespace)
    );
    let run = |verb: &str| format!("kubectl configrollout {verb} {target}");
    match shown.trigger {
        T::AwaitingApproval | T::StillAwaitingApproval => {
            let mut approve = run("approve");
            if let Some(stage) = &shown.stage {
                approve.push_str(&format!(" --stage {}", shell_word(stage)));
            }
            if let Some(revision) = &shown.revision {
                approve.push_str(&format!(" --revision {}", shell_word(revision)));
            }
            vec![approve]
        }
        T::Halted => vec![run("retry"), run("abort")],
        T::SpecRefused => vec![
            run("status"),
            "kubectl configrollout lint -f FILE".to_owned(),
        ],
        T::RollingBack
        | T::RolledBack
        | T::GateFailing
        | T::GateInconclusive
        | T::DriftDetected
        | T::RegionUnreachable => vec![run("get")],
        T::StagePassed | T::Complete => Vec::new(),
    }
}

/// The webhook body, also a CloudEvent's `data`: raw (cleaned) strings, no markup.
fn webhook(shown: &Shown) -> Value {
    let mut body = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "id": shown.id,
        "trigger": shown.trigger.as_str(),
        "rollout": {"namespace": shown.namespace, "name": shown.name, "uid": shown.uid},
        "at": shown.at,
    });
    if let Value::Object(fields) = &mut body {
        for (key, value) in [
            ("revision", &shown.revision),
            ("stage", &shown.stage),
            ("subject", &shown.subject),
            ("reason", &shown.reason),
            ("message", &shown.message),
            ("progress", &shown.progress),
            ("action", &shown.action),
            ("link", &shown.link),
        ] {
            insert(fields, key, value);
        }
    }
    body
}

fn insert(fields: &mut Map<String, Value>, key: &str, value: &Option<String>) {
    if let Some(value) = value {
        fields.insert(key.to_owned(), Value::String(value.clone()));
    }
}

/// A structured-mode CloudEvent whose `data` is the webhook body.
fn cloud_event(shown: &Shown, source: &str) -> Value {
    json!({
        "specversion": "1.0",
        "id": shown.id,
        "source": clean(source, MAX_NAME_CHARS),
        "type": format!("{CLOUDEVENTS_TYPE_PREFIX}{}", kebab(shown.trigger.as_str())),
        "subject": format!("{}/{}", shown.namespace, shown.name),
        "time": shown.at,
        "datacontenttype": JSON,
        "data": webhook(shown),
    })
}

/// The facts every card lists, in order: label and value.
fn facts(shown: &Shown) -> Vec<(&'static str, String)> {
    let mut facts = vec![("Rollout", format!("{}/{}", shown.namespace, shown.name))];
    for (label, value) in [
        ("Revision", &shown.revision),
        ("Stage", &shown.stage),
        ("Subject", &shown.subject),
        ("Progress", &shown.progress),
        ("Reason", &shown.reason),
    ] {
        if let Some(value) = value {
            facts.push((label, value.clone()));
        }
    }
    facts
}

/// A Slack incoming webhook's message; every string is escaped for mrkdwn.
fn slack(shown: &Shown) -> Value {
    let summary = slack_escape(&shown.summary());
    let fields: Vec<Value> = facts(shown)
        .into_iter()
        .map(|(label, value)| {
            json!({"type": "mrkdwn", "text": format!("*{label}*\n{}", slack_escape(&value))})
        })
        .collect();
    let mut blocks = vec![
        json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("*{summary}*")}}),
        json!({"type": "section", "fields": fields}),
    ];
    if let Some(message) = &shown.message {
        blocks.push(
            json!({"type": "section", "text": {"type": "mrkdwn", "text": slack_escape(message)}}),
        );
    }
    if let Some(action) = &shown.action {
        let lines: Vec<String> = action
            .lines()
            .map(|line| format!("`{}`", slack_escape(line)))
            .collect();
        blocks.push(
            json!({"type": "context", "elements": [{"type": "mrkdwn", "text": lines.join("\n")}]}),
        );
    }
    if let Some(link) = &shown.link {
        let text = format!("<{}|Open in the dashboard>", slack_escape(link));
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": text}}));
    }
    json!({"text": summary, "blocks": blocks})
}

/// A Teams workflow webhook's message: one Adaptive Card; every string is escaped for its
/// markdown.
fn teams(shown: &Shown) -> Value {
    let facts: Vec<Value> = facts(shown)
        .into_iter()
        .map(|(label, value)| json!({"title": label, "value": teams_escape(&value)}))
        .collect();
    let mut body = vec![
        json!({"type": "TextBlock", "text": teams_escape(&shown.summary()), "weight": "Bolder", "size": "Medium", "wrap": true}),
        json!({"type": "FactSet", "facts": facts}),
    ];
    if let Some(message) = &shown.message {
        body.push(json!({"type": "TextBlock", "text": teams_escape(message), "wrap": true}));
    }
    for line in shown.action.iter().flat_map(|action| action.lines()) {
        body.push(json!({"type": "TextBlock", "text": teams_escape(line), "fontType": "Monospace", "wrap": true}));
    }
    let actions: Vec<Value> = shown
        .link
        .iter()
        .map(
            |link| json!({"type": "Action.OpenUrl", "title": "Open in the dashboard", "url": link}),
        )
        .collect();
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": body,
                "actions": actions,
            },
        }],
    })
}

/// `raw` as it may be shown: trimmed, each line break or tab a space, every other control
/// character and bidirectional embedding, override or isolate removed, cut to `max`
/// characters (the last one `…` when cut).
fn clean(raw: &str, max: usize) -> String {
    let kept: String = raw
        .chars()
        .filter_map(|c| match c {
            c if c.is_whitespace() && is_unsafe_to_show(c) => Some(' '),
            c if is_unsafe_to_show(c) => None,
            c => Some(c),
        })
        .collect();
    let trimmed = kept.trim();
    if trimmed.chars().nth(max).is_none() {
        return trimmed.to_owned();
    }
    let mut cut: String = trimmed.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Slack's mrkdwn control characters escaped: no mention, link or entity survives.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The markdown characters that make a link (`[t](u)`, `<u>`) or a date function
/// (`{{DATE(...)}}`) in an Adaptive Card, backslash-escaped.
fn teams_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '[' | ']' | '<' | '>' | '{' | '}') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `word` as one shell word: as is when plain, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '/' | ':' | '@'));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `AwaitingApproval` as `awaiting-approval`.
fn kebab(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (index, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && index > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
