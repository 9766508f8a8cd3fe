//! The rendered bodies, parsed back as JSON.

use super::*;

use hmac::{Hmac, Mac};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use sha2::Sha256;

use crate::validators::{SIGNATURE_HEADER, TIMESTAMP_HEADER};

const UID: &str = "0b7c6f1e-2d3a-4c5b-9e8f-7a6b5c4d3e2f";
const KEY: &str = "0b7c6f1e-2d3a-4c5b-9e8f-7a6b5c4d3e2f.7";

fn notice(trigger: NotificationTrigger) -> Notice {
    Notice {
        sequence: 7,
        trigger,
        sinks: Vec::new(),
        revision: Some("r4".into()),
        stage: Some("prod".into()),
        subject: None,
        reason: Some("AwaitingApproval".into()),
        message: Some("stage prod waits for a StageApproval".into()),
        progress: Some("2/5".into()),
        at: Time(Timestamp::from_second(1_700_000_000).unwrap()),
    }
}

fn context<'a>(notice: &'a Notice, dashboard_url: Option<&'a str>) -> NoticeContext<'a> {
    NoticeContext {
        namespace: "payments",
        name: "limits",
        uid: UID,
        notice,
        idempotency_key: KEY,
        dashboard_url,
        source: "configrollout-controller",
    }
}

fn parsed(rendered: &Rendered) -> Value {
    serde_json::from_slice(&rendered.body).unwrap()
}

fn rendered(sink: SinkType, notice: &Notice) -> Value {
    let rendered = render(sink, &context(notice, Some("https://dash.example/")));
    parsed(&rendered)
}

/// Every string anywhere in `value`, concatenated.
fn all_text(value: &Value) -> String {
    match value {
        Value::String(text) => format!("{text}\n"),
        Value::Array(items) => items.iter().map(all_text).collect(),
        Value::Object(fields) => fields.values().map(all_text).collect(),
        _ => String::new(),
    }
}

#[test]
fn the_webhook_body_has_the_documented_fields() {
    let notice = notice(NotificationTrigger::AwaitingApproval);
    let rendered = render(
        SinkType::Webhook,
        &context(&notice, Some("https://dash.example/")),
    );
    assert_eq!(rendered.content_type, "application/json");
    let body = parsed(&rendered);
    assert_eq!(body["apiVersion"], "configrollout.dev/v1alpha1");
    assert_eq!(body["kind"], "RolloutNotification");
    assert_eq!(body["id"], KEY);
    assert_eq!(body["trigger"], "AwaitingApproval");
    assert_eq!(
        body["rollout"],
        json!({"namespace": "payments", "name": "limits", "uid": UID})
    );
    assert_eq!(body["revision"], "r4");
    assert_eq!(body["stage"], "prod");
    assert_eq!(body["reason"], "AwaitingApproval");
    assert_eq!(body["message"], "stage prod waits for a StageApproval");
    assert_eq!(body["progress"], "2/5");
    assert_eq!(body["at"], "2023-11-14T22:13:20Z");
    assert_eq!(
        body["action"],
        "kubectl configrollout approve limits -n payments --stage prod --revision r4"
    );
    assert_eq!(body["link"], "https://dash.example/r/payments/limits");
    // Absent optional fields are left out, not null.
    assert!(body.get("subject").is_none(), "{body}");
}

#[test]
fn absent_fields_and_no_dashboard_leave_no_keys() {
    let mut notice = notice(NotificationTrigger::Complete);
    notice.revision = None;
    notice.stage = None;
    notice.reason = None;
    notice.message = Some(" \u{7} ".into());
    notice.progress = None;
    let body = parsed(&render(SinkType::Webhook, &context(&notice, None)));
    for absent in [
        "revision", "stage", "subject", "reason", "message", "progress", "action", "link",
    ] {
        assert!(body.get(absent).is_none(), "{absent} in {body}");
    }
    let teams = parsed(&render(SinkType::Teams, &context(&notice, None)));
    assert_eq!(
        teams["attachments"][0]["content"]["actions"],
        json!([]),
        "{teams}"
    );
}

#[test]
fn a_cloud_event_is_structured_mode_with_the_webhook_body_as_data() {
    let notice = notice(NotificationTrigger::AwaitingApproval);
    let rendered = render(
        SinkType::CloudEvents,
        &context(&notice, Some("https://dash.example")),
    );
    assert_eq!(rendered.content_type, "application/cloudevents+json");
    let event = parsed(&rendered);
    assert_eq!(event["specversion"], "1.0");
    assert_eq!(event["id"], KEY);
    assert_eq!(event["source"], "configrollout-controller");
    assert_eq!(event["type"], "dev.configrollout.rollout.awaiting-approval");
    assert_eq!(event["subject"], "payments/limits");
    assert_eq!(event["time"], "2023-11-14T22:13:20Z");
    assert_eq!(event["datacontenttype"], "application/json");
    let webhook = rendered_webhook(&notice);
    assert_eq!(event["data"], webhook);
}

fn rendered_webhook(notice: &Notice) -> Value {
    parsed(&render(
        SinkType::Webhook,
        &context(notice, Some("https://dash.example")),
    ))
}

#[test]
fn every_trigger_has_a_kebab_case_event_type_and_a_summary() {
    for trigger in NotificationTrigger::ALL {
        let event = rendered(SinkType::CloudEvents, &notice(trigger));
        let kind = event["type"].as_str().unwrap();
        let suffix = kind.strip_prefix(CLOUDEVENTS_TYPE_PREFIX).unwrap();
        assert!(
            suffix.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
            "{kind}"
        );
        let slack = rendered(SinkType::Slack, &notice(trigger));
        assert!(
            slack["text"]
                .as_str()
                .unwrap()
                .starts_with("payments/limits r4"),
            "{slack}"
        );
    }
    assert_eq!(kebab("StillAwaitingApproval"), "still-awaiting-approval");
    assert_eq!(kebab("SpecRefused"), "spec-refused");
}

#[test]
fn summaries_say_what_happened_in_plain_words() {
    let summary = |trigger, reason: Option<&str>| {
        let mut notice = notice(trigger);
        notice.reason = reason.map(str::to_owned);
        notice.subject = Some("eu-west".into());
        rendered(SinkType::Slack, &notice)["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        summary(NotificationTrigger::AwaitingApproval, None),
        "payments/limits r4: stage prod awaits approval (2/5)"
    );
    assert_eq!(
        summary(NotificationTrigger::Halted, Some("GateFailed")),
        "payments/limits r4 halted in stage prod: GateFailed"
    );
    assert_eq!(
        summary(NotificationTrigger::RolledBack, None),
        "payments/limits r4 rolled back"
    );
    assert_eq!(
        summary(NotificationTrigger::Complete, None),
        "payments/limits r4 complete (2/5)"
    );
    assert_eq!(
        summary(NotificationTrigger::RegionUnreachable, None),
        "payments/limits r4: region eu-west unreachable"
    );
}

#[test]
fn slack_has_text_and_blocks_and_escapes_tenant_markup() {
    let mut notice = notice(NotificationTrigger::Halted);
    notice.message = Some("<@here> look & see <https://evil.example|click>".into());
    notice.reason = Some("Bad<!channel>".into());
    let rendered = render(
        SinkType::Slack,
        &context(&notice, Some("https://dash.example")),
    );
    assert_eq!(rendered.content_type, "application/json");
    let slack = parsed(&rendered);
    assert_eq!(
        slack["text"],
        "payments/limits r4 halted in stage prod: Bad&lt;!channel&gt;"
    );
    let blocks = slack["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "section");
    assert_eq!(blocks[0]["text"]["type"], "mrkdwn");
    assert!(
        blocks[1]["fields"]
            .as_array()
            .unwrap()
            .contains(&json!({"type": "mrkdwn", "text": "*Rollout*\npayments/limits"})),
        "{slack}"
    );
    let text = all_text(&slack);
    assert!(
        text.contains("&lt;@here&gt; look &amp; see &lt;https://evil.example|click&gt;"),
        "{text}"
    );
    assert!(
        !text.contains("<@here>") && !text.contains("<!channel>"),
        "{text}"
    );
    assert!(
        text.contains(
            "`kubectl configrollout retry limits -n payments`\n`kubectl configrollout abort limits -n payments`"
        ),
        "{text}"
    );
    assert!(
        text.contains("<https://dash.example/r/payments/limits|Open in the dashboard>"),
        "{text}"
    );
}

#[test]
fn teams_is_one_adaptive_card_with_facts_command_and_link() {
    let mut notice = notice(NotificationTrigger::AwaitingApproval);
    notice.message = Some("see [here](https://evil.example) {{DATE(x)}}".into());
    let rendered = render(
        SinkType::Teams,
        &context(&notice, Some("https://dash.example")),
    );
    assert_eq!(rendered.content_type, "application/json");
    let teams = parsed(&rendered);
    assert_eq!(teams["type"], "message");
    let attachment = &teams["attachments"][0];
    assert_eq!(
        attachment["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert_eq!(attachment["contentUrl"], Value::Null);
    let card = &attachment["content"];
    assert_eq!(
        card["$schema"],
        "http://adaptivecards.io/schemas/adaptive-card.json"
    );
    assert_eq!(card["type"], "AdaptiveCard");
    assert_eq!(card["version"], "1.4");
    let body = card["body"].as_array().unwrap();
    assert_eq!(body[0]["type"], "TextBlock");
    assert_eq!(body[0]["weight"], "Bolder");
    assert_eq!(body[0]["wrap"], true);
    assert_eq!(body[1]["type"], "FactSet");
    let titles: Vec<&str> = body[1]["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|fact| fact["title"].as_str().unwrap())
        .collect();
    assert_eq!(
        titles,
        ["Rollout", "Revision", "Stage", "Progress", "Reason"]
    );
    assert_eq!(
        body[2]["text"],
        r"see \[here\](https://evil.example) \{\{DATE(x)\}\}"
    );
    assert_eq!(body[3]["fontType"], "Monospace");
    assert_eq!(
        body[3]["text"],
        "kubectl configrollout approve limits -n payments --stage prod --revision r4"
    );
    assert_eq!(
        card["actions"],
        json!([{
            "type": "Action.OpenUrl",
            "title": "Open in the dashboard",
            "url": "https://dash.example/r/payments/limits",
        }])
    );
}

#[test]
fn control_characters_and_bidi_overrides_are_removed_everywhere() {
    let mut notice = notice(NotificationTrigger::Halted);
    notice.message = Some("line one\r\nline\u{1b}[2J two \u{202E}evil\u{2066}".into());
    notice.reason = Some("Gate\u{7}Failed\u{85}".into());
    notice.stage = Some("pr\u{202D}od".into());
    for sink in [
        SinkType::Webhook,
        SinkType::Slack,
        SinkType::Teams,
        SinkType::CloudEvents,
    ] {
        let value = rendered(sink, &notice);
        let text = all_text(&value);
        let unsafe_char = text.chars().find(|c| *c != '\n' && is_unsafe_to_show(*c));
        assert_eq!(unsafe_char, None, "{sink:?}: {text:?}");
        assert!(text.contains("GateFailed"), "{sink:?}: {text:?}");
    }
    let webhook = rendered(SinkType::Webhook, &notice);
    assert_eq!(webhook["message"], "line one  line[2J two evil");
    assert_eq!(webhook["stage"], "prod");
}

#[test]
fn long_messages_are_cut_to_their_bound() {
    let mut notice = notice(NotificationTrigger::Halted);
    notice.message = Some("é".repeat(2000));
    notice.reason = Some("R".repeat(2000));
    let webhook = rendered(SinkType::Webhook, &notice);
    let message = webhook["message"].as_str().unwrap();
    assert_eq!(message.chars().count(), MAX_NOTICE_MESSAGE_CHARS);
    assert!(message.ends_with('…'));
    assert_eq!(
        webhook["reason"].as_str().unwrap().chars().count(),
        MAX_REASON_CHARS
    );
    assert_eq!(clean("  short  ", 5), "short");
    assert_eq!(clean("exactly", 7), "exactly");
    assert_eq!(clean("too long", 4), "too…");
}

#[test]
fn action_hints_are_the_plugin_command_lines() {
    let hint = |trigger| action_hint(&context(&notice(trigger), None));
    // `kubectl configrollout approve NAME -n NAMESPACE --stage STAGE --revision REVISION`
    // (plugin/src/args.rs: Command::Approve; -n is the global namespace flag).
    let approve = "kubectl configrollout approve limits -n payments --stage prod --revision r4";
    assert_eq!(
        hint(NotificationTrigger::AwaitingApproval).as_deref(),
        Some(approve)
    );
    assert_eq!(
        hint(NotificationTrigger::StillAwaitingApproval).as_deref(),
        Some(approve)
    );
    assert_eq!(
        hint(NotificationTrigger::Halted).as_deref(),
        Some(
            "kubectl configrollout retry limits -n payments\n\
             kubectl configrollout abort limits -n payments"
        )
    );
    let refused = hint(NotificationTrigger::SpecRefused).unwrap();
    assert!(
        refused.contains("kubectl configrollout lint -f FILE"),
        "{refused}"
    );
    assert!(
        refused.contains("kubectl configrollout status limits -n payments"),
        "{refused}"
    );
    assert_eq!(
        hint(NotificationTrigger::GateFailing).as_deref(),
        Some("kubectl configrollout get limits -n payments")
    );
    assert_eq!(hint(NotificationTrigger::Complete), None);
    assert_eq!(hint(NotificationTrigger::StagePassed), None);
}

#[test]
fn a_command_quotes_what_is_not_a_plain_word() {
    let mut notice = notice(NotificationTrigger::AwaitingApproval);
    notice.stage = Some("prod; rm -rf ~".into());
    notice.revision = Some("it's".into());
    assert_eq!(
        action_hint(&context(&notice, None)).as_deref(),
        Some(
            "kubectl configrollout approve limits -n payments --stage 'prod; rm -rf ~' \
             --revision 'it'\\''s'"
        )
    );
}

#[test]
fn a_dashboard_link_needs_an_http_base_and_encodes_the_names() {
    let notice = notice(NotificationTrigger::Complete);
    let link = |base| rendered_with(&notice, base)["link"].clone();
    assert_eq!(
        link("https://dash.example/base//"),
        "https://dash.example/base/r/payments/limits"
    );
    assert_eq!(link("javascript:alert(1)"), Value::Null);
    assert_eq!(link("  "), Value::Null);
    let mut odd = context(&notice, Some("http://127.0.0.1:3100"));
    odd.name = "a/b c";
    assert_eq!(
        parsed(&render(SinkType::Webhook, &odd))["link"],
        "http://127.0.0.1:3100/r/payments/a%2Fb%20c"
    );
}

fn rendered_with(notice: &Notice, base: &str) -> Value {
    parsed(&render(SinkType::Webhook, &context(notice, Some(base))))
}

/// The validators' signer, which notifications sign with too.
fn signature(key: &[u8], timestamp: &str, body: &[u8]) -> String {
    crate::validators::sign(key, timestamp, body).unwrap()
}

#[test]
fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
    // RFC 4231's data holds no ".", so it cannot be split into timestamp and body: these
    // vectors were computed independently, with Python's hmac module:
    // hmac.new(key, b"1700000000." + body, hashlib.sha256).hexdigest().
    assert_eq!(
        signature(b"Jefe", "1700000000", br#"{"kind":"RolloutNotification"}"#),
        "sha256=03195eb2b8b41dbe9a056c0311aaae780e958fe8d8ecfe9024a2c93c2bce14c6"
    );
    // A key longer than SHA-256's block is hashed first.
    assert_eq!(
        signature(&[b'k'; 100], "1700000000", b"body"),
        "sha256=2defc100e3c9242d415387665cef3b691aba8f4600bb534d82dc474f16dd5a25"
    );
    // And the hmac crate agrees on RFC 4231 case 2 itself.
    let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
    mac.update(b"what do ya want for nothing?");
    assert_eq!(
        hex::encode(mac.finalize().into_bytes()),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(SIGNATURE_HEADER, "X-Configrollout-Signature");
    assert_eq!(TIMESTAMP_HEADER, "X-Configrollout-Timestamp");
}

#[test]
fn the_signature_covers_the_rendered_body() {
    let notice = notice(NotificationTrigger::Halted);
    let rendered = render(SinkType::Webhook, &context(&notice, None));
    let mut mac = Hmac::<Sha256>::new_from_slice(b"secret").unwrap();
    mac.update(b"1700000000.");
    mac.update(&rendered.body);
    assert_eq!(
        signature(b"secret", "1700000000", &rendered.body),
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    );
}
