//! The validator client against real HTTP servers on 127.0.0.1 (hyper), one per test.

use super::*;

use std::future::Future;
use std::time::Instant;

use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::api::LocalSecretKey;
use crate::test_support::{self, Body, Seen, endless, full, redirect, respond, trickle};

const SENTINEL: &str = "SENTINEL-9c1d";
const NOW: i64 = 1_700_000_000;

/// Serves every connection on 127.0.0.1 with `answer`, which gets the request (its
/// whole body read); returns the validator's URL and the requests received, in order.
async fn serve<F, Fut>(answer: F) -> (String, mpsc::UnboundedReceiver<Seen>)
where
    F: Fn(Seen) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let (base, requests) = test_support::serve(answer).await;
    (format!("{base}/validate"), requests)
}

/// A server answering every request with `status` and `body`.
async fn serve_fixed(
    status: StatusCode,
    body: &'static str,
) -> (String, mpsc::UnboundedReceiver<Seen>) {
    serve(move |_| async move { respond(status, body) }).await
}

fn spec(url: &str, timeout_seconds: Option<u32>) -> ClusterConfigValidatorSpec {
    ClusterConfigValidatorSpec {
        url: url.to_owned(),
        ca_bundle: None,
        timeout_seconds,
        hmac_secret: Some(LocalSecretKey {
            name: "validator-hmac".into(),
            key: "key".into(),
        }),
    }
}

fn validator(url: &str) -> ExternalValidator {
    ExternalValidator::new(&spec(url, Some(5)), None).unwrap()
}

fn data() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("feature.enabled".to_owned(), "true".to_owned()),
        ("db.password".to_owned(), SENTINEL.to_owned()),
    ])
}

fn request(data: &BTreeMap<String, String>) -> ValidationRequest<'_> {
    ValidationRequest {
        rollout_namespace: "team-a",
        rollout_name: "checkout",
        rollout_uid: "0b8e6c3e-5d2c-4a37-9d2e-1f3a2b4c5d6e",
        target_namespace: "checkout",
        target_name: "checkout-config",
        digest: "sha256:4f2a",
        data,
    }
}

async fn ask(url: &str) -> Verdict {
    let data = data();
    validator(url).validate(&request(&data), NOW).await
}

fn failed(verdict: Verdict) -> String {
    match verdict {
        Verdict::Failed { why } => why,
        other => panic!("expected Failed, got {other:?}"),
    }
}

fn refused(verdict: Verdict) -> String {
    match verdict {
        Verdict::Refused { reason } => reason,
        other => panic!("expected Refused, got {other:?}"),
    }
}

fn header<'a>(seen: &'a Seen, name: &str) -> Option<&'a str> {
    seen.headers.get(name).map(|value| value.to_str().unwrap())
}

#[tokio::test]
async fn accepts_and_signs_timestamp_dot_body_with_the_key() {
    let (url, mut requests) = serve_fixed(StatusCode::OK, r#"{"allowed": true}"#).await;
    let key = b"platform-hmac-key".to_vec();
    let validator = ExternalValidator::new(&spec(&url, Some(5)), Some(key.clone())).unwrap();
    let data = data();
    assert_eq!(
        validator.validate(&request(&data), NOW).await,
        Verdict::Allowed
    );

    let seen = requests.recv().await.unwrap();
    assert_eq!(header(&seen, "content-type"), Some("application/json"));
    assert_eq!(header(&seen, TIMESTAMP_HEADER), Some("1700000000"));
    // The signature, recomputed here as a validator would: over the exact bytes received.
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(b"1700000000.");
    mac.update(&seen.body);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(header(&seen, SIGNATURE_HEADER), Some(expected.as_str()));
    // Another key, or the body alone, does not give it.
    let mut other = Hmac::<Sha256>::new_from_slice(b"another-key").unwrap();
    other.update(b"1700000000.");
    other.update(&seen.body);
    assert_ne!(
        Some(format!(
            "sha256={}",
            hex::encode(other.finalize().into_bytes())
        ))
        .as_deref(),
        header(&seen, SIGNATURE_HEADER)
    );
    let mut unstamped = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    unstamped.update(&seen.body);
    assert_ne!(
        Some(format!(
            "sha256={}",
            hex::encode(unstamped.finalize().into_bytes())
        ))
        .as_deref(),
        header(&seen, SIGNATURE_HEADER)
    );

    let body: serde_json::Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "apiVersion": "configrollout.dev/v1alpha1",
            "kind": "ValidationRequest",
            "rollout": {
                "namespace": "team-a",
                "name": "checkout",
                "uid": "0b8e6c3e-5d2c-4a37-9d2e-1f3a2b4c5d6e",
            },
            "target": {"namespace": "checkout", "name": "checkout-config"},
            "digest": "sha256:4f2a",
            "data": {"feature.enabled": "true", "db.password": SENTINEL},
        })
    );
    assert_eq!(
        sign(&key, "1700000000", &seen.body).as_deref(),
        Some(expected.as_str())
    );
}

#[tokio::test]
async fn without_a_key_nothing_is_signed_but_the_request_is_stamped() {
    let (url, mut requests) =
        serve_fixed(StatusCode::OK, r#"{"allowed": true, "reason": "fine"}"#).await;
    assert_eq!(ask(&url).await, Verdict::Allowed);
    let seen = requests.recv().await.unwrap();
    assert_eq!(header(&seen, SIGNATURE_HEADER), None);
    assert_eq!(header(&seen, TIMESTAMP_HEADER), Some("1700000000"));
}

#[tokio::test]
async fn refuses_with_the_validators_reason() {
    let (url, _) = serve_fixed(
        StatusCode::OK,
        r#"{"allowed": false, "reason": "db.pool.size must be at most 64", "extra": 1}"#,
    )
    .await;
    assert_eq!(refused(ask(&url).await), "db.pool.size must be at most 64");
}

#[tokio::test]
async fn a_refusals_reason_is_sanitised() {
    let (url, _) = serve_fixed(
        StatusCode::OK,
        r#"{"allowed": false, "reason": "\u001b[31mred\u001b[0m and \u202Eevil\u2066"}"#,
    )
    .await;
    assert_eq!(
        refused(ask(&url).await),
        "\u{fffd}[31mred\u{fffd}[0m and \u{fffd}evil\u{fffd}"
    );

    let long = format!(r#"{{"allowed": false, "reason": "{}"}}"#, "é".repeat(1000));
    let (url, _) = serve(move |_| {
        let long = long.clone();
        async move { respond(StatusCode::OK, long) }
    })
    .await;
    let reason = refused(ask(&url).await);
    assert_eq!(reason.chars().count(), MAX_REASON_CHARS);
    assert!(reason.ends_with('…'), "{reason}");
    assert!(reason.starts_with("éé"));

    for empty in [
        r#"{"allowed": false}"#,
        r#"{"allowed": false, "reason": null}"#,
        r#"{"allowed": false, "reason": "  \n "}"#,
    ] {
        let (url, _) = serve_fixed(StatusCode::OK, empty).await;
        assert_eq!(refused(ask(&url).await), NO_REASON, "{empty}");
    }
}

#[test]
fn sanitize_reason_caps_on_a_char_boundary_and_replaces_what_may_not_be_shown() {
    assert_eq!(sanitize_reason("\u{1b}[31m"), "\u{fffd}[31m");
    assert_eq!(
        sanitize_reason("a\rb\u{7}c\u{85}d"),
        "a\u{fffd}b\u{fffd}c\u{fffd}d"
    );
    assert_eq!(
        sanitize_reason("x\u{202A}\u{202E}\u{2066}\u{2069}y"),
        "x\u{fffd}\u{fffd}\u{fffd}\u{fffd}y"
    );
    assert_eq!(sanitize_reason(""), NO_REASON);
    let exactly = "a".repeat(MAX_REASON_CHARS);
    assert_eq!(sanitize_reason(&exactly), exactly);
    let over = "a".repeat(1000);
    let cut = sanitize_reason(&over);
    assert_eq!(cut.chars().count(), MAX_REASON_CHARS);
    assert_eq!(cut, format!("{}…", "a".repeat(MAX_REASON_CHARS - 1)));
    // Four-byte characters: cut between characters, never inside one.
    let emoji = sanitize_reason(&"🦀".repeat(300));
    assert_eq!(emoji.chars().count(), MAX_REASON_CHARS);
}

#[tokio::test]
async fn a_validator_that_never_answers_times_out() {
    let (url, _) = serve(|_| std::future::pending::<Response<Body>>()).await;
    let validator = ExternalValidator::new(&spec(&url, Some(1)), None).unwrap();
    let data = data();
    let started = Instant::now();
    let why = failed(validator.validate(&request(&data), NOW).await);
    let took = started.elapsed();
    assert_eq!(why, "timed out after 1s");
    assert!(took < Duration::from_secs(4), "took {took:?}");
}

#[tokio::test]
async fn a_body_that_trickles_forever_still_times_out() {
    // Head at once, then a byte a second: the timeout covers reading the whole body.
    let (url, _) = serve(|_| async { trickle(Duration::from_millis(300)) }).await;
    let validator = ExternalValidator::new(&spec(&url, Some(1)), None).unwrap();
    let data = data();
    let started = Instant::now();
    assert_eq!(
        failed(validator.validate(&request(&data), NOW).await),
        "timed out after 1s"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn a_server_error_is_failed_with_its_status_only() {
    let (url, _) = serve_fixed(StatusCode::INTERNAL_SERVER_ERROR, "boom: stack trace").await;
    assert_eq!(failed(ask(&url).await), "answered HTTP 500");
    // 200 only: another success status is no verdict either.
    let (url, _) = serve_fixed(StatusCode::ACCEPTED, r#"{"allowed": true}"#).await;
    assert_eq!(failed(ask(&url).await), "answered HTTP 202");
}

#[tokio::test]
async fn a_redirect_is_failed_and_never_followed() {
    let (elsewhere, mut followed) = serve_fixed(StatusCode::OK, r#"{"allowed": true}"#).await;
    for status in [StatusCode::FOUND, StatusCode::TEMPORARY_REDIRECT] {
        let location = elsewhere.clone();
        let (url, mut requests) = serve(move |_| {
            let location = location.clone();
            async move { redirect(status, &location) }
        })
        .await;
        let why = failed(ask(&url).await);
        assert_eq!(
            why,
            format!(
                "answered HTTP {}, a redirect, which is not followed",
                status.as_u16()
            )
        );
        assert!(requests.recv().await.is_some());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(followed.try_recv().is_err(), "the redirect was followed");
}

#[tokio::test]
async fn an_oversized_answer_is_failed() {
    // Announced too large: refused before a byte of it is read.
    let (url, _) = serve(|_| async {
        let padding = " ".repeat(MAX_ANSWER_BYTES);
        respond(
            StatusCode::OK,
            format!(r#"{{"allowed": false, "reason": "x"}}{padding}"#),
        )
    })
    .await;
    assert_eq!(failed(ask(&url).await), "answer larger than 64 KiB");

    // Chunked and endless: abandoned as soon as it passes the cap (were it buffered
    // whole first, this would time out instead).
    let (url, _) = serve(|_| async { endless(16 * 1024) }).await;
    let started = Instant::now();
    assert_eq!(failed(ask(&url).await), "answer larger than 64 KiB");
    assert!(started.elapsed() < Duration::from_secs(4));

    // Just under the cap is read.
    let (url, _) = serve(|_| async {
        let answer = r#"{"allowed": true}"#;
        let padding = " ".repeat(MAX_ANSWER_BYTES - answer.len());
        respond(StatusCode::OK, format!("{answer}{padding}"))
    })
    .await;
    assert_eq!(ask(&url).await, Verdict::Allowed);
}

#[tokio::test]
async fn an_answer_that_is_not_the_json_is_failed() {
    for garbage in [
        "<html>bad gateway</html>",
        r#"{"allowed": "yes"}"#,
        r#"{"reason": "no allowed field"}"#,
        r#"{"allowed": false, "reason": 42}"#,
        r#"[true]"#,
        r#"[false, "a reason"]"#,
        "true",
        "",
        r#"{"allowed": true"#,
    ] {
        let (url, _) = serve_fixed(StatusCode::OK, garbage).await;
        assert_eq!(
            failed(ask(&url).await),
            "answer is not {allowed, reason} JSON",
            "{garbage}"
        );
    }
}

#[tokio::test]
async fn a_closed_port_is_connection_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    assert_eq!(
        failed(ask(&format!("http://{address}/")).await),
        "connection refused"
    );
}

/// Whatever a validator echoes back of the request (as an error page, an unreadable
/// answer, a wrongly typed field, an oversized body, a redirect's target), no verdict's
/// text carries a configuration value.
#[tokio::test]
async fn no_verdict_text_carries_a_config_value_even_when_the_server_echoes_it() {
    type Echo = fn(Bytes) -> Response<Body>;
    let echoes: [Echo; 7] = [
        |body| respond(StatusCode::INTERNAL_SERVER_ERROR, body),
        |body| respond(StatusCode::BAD_REQUEST, body),
        |body| respond(StatusCode::OK, body),
        |_| respond(StatusCode::OK, format!(r#"{{"allowed": "{SENTINEL}"}}"#)),
        |_| {
            respond(
                StatusCode::OK,
                format!(r#"{{"allowed": false, "reason": {{"{SENTINEL}": 1}}}}"#),
            )
        },
        |body| {
            let mut big = body.to_vec();
            while big.len() <= MAX_ANSWER_BYTES {
                big.extend_from_slice(&body);
            }
            respond(StatusCode::OK, big)
        },
        |body| {
            let location = format!("http://127.0.0.1:9/{}", hex::encode(&body));
            Response::builder()
                .status(StatusCode::FOUND)
                .header("location", location)
                .header("x-echo", SENTINEL)
                .body(full(body))
                .unwrap()
        },
    ];
    for echo in echoes {
        let (url, mut requests) = serve(move |seen: Seen| async move { echo(seen.body) }).await;
        let verdict = ask(&url).await;
        let seen = requests.recv().await.unwrap();
        assert!(
            String::from_utf8_lossy(&seen.body).contains(SENTINEL),
            "the value was sent"
        );
        assert!(matches!(verdict, Verdict::Failed { .. }), "{verdict:?}");
        let text = format!("{verdict:?}");
        assert!(!text.contains(SENTINEL), "{text}");
        assert!(!text.contains("9c1d"), "{text}");
    }
}

#[test]
fn new_refuses_urls_the_crd_rule_refuses_and_more() {
    for (url, error) in [
        ("http://validator.example/v", ValidatorError::NotHttps),
        ("http://10.0.0.7:8080/v", ValidatorError::NotHttps),
        // The CRD rule's prefix match would let these through.
        ("http://127.0.0.1.evil.example/v", ValidatorError::NotHttps),
        ("http://localhost.evil.example/v", ValidatorError::NotHttps),
        ("http://[::1].evil.example/v", ValidatorError::BadUrl),
        ("ftp://validator.example/v", ValidatorError::BadUrl),
        ("file:///etc/passwd", ValidatorError::BadUrl),
        ("validator.example/v", ValidatorError::BadUrl),
        ("", ValidatorError::BadUrl),
        (
            "https://user:pw@validator.example/v",
            ValidatorError::CredentialsInUrl,
        ),
    ] {
        assert_eq!(
            ExternalValidator::new(&spec(url, None), None).err(),
            Some(error.clone()),
            "{url}"
        );
        assert!(!error.to_string().contains("evil"));
    }
    for url in [
        "https://validator.example/v",
        "http://127.0.0.1:8080/v",
        "http://127.0.0.2/v",
        "http://[::1]:8080/v",
        "http://localhost:8080/v",
        "http://LOCALHOST/v",
    ] {
        assert!(
            ExternalValidator::new(&spec(url, None), None).is_ok(),
            "{url}"
        );
    }
}

#[test]
fn new_refuses_an_unusable_ca_bundle_or_an_empty_key() {
    let mut bad_ca = spec("https://validator.example/v", None);
    bad_ca.ca_bundle = Some("not a certificate".into());
    assert_eq!(
        ExternalValidator::new(&bad_ca, None).err(),
        Some(ValidatorError::CaBundle)
    );
    let mut good_ca = bad_ca.clone();
    good_ca.ca_bundle = Some(include_str!("../prometheus/testdata/ca.crt").into());
    assert!(ExternalValidator::new(&good_ca, None).is_ok());
    assert_eq!(
        ExternalValidator::new(&spec("https://validator.example/v", None), Some(Vec::new())).err(),
        Some(ValidatorError::EmptyHmacKey)
    );
}

#[test]
fn the_timeout_is_the_specs_within_bounds() {
    let timeout = |seconds| {
        ExternalValidator::new(&spec("https://validator.example/v", seconds), None)
            .unwrap()
            .timeout()
    };
    assert_eq!(
        timeout(None),
        Duration::from_secs(u64::from(DEFAULT_VALIDATOR_TIMEOUT_SECONDS))
    );
    assert_eq!(timeout(Some(7)), Duration::from_secs(7));
    assert_eq!(timeout(Some(0)), Duration::from_secs(1));
    assert_eq!(
        timeout(Some(3600)),
        Duration::from_secs(u64::from(MAX_VALIDATOR_TIMEOUT_SECONDS))
    );
}

#[test]
fn debug_shows_neither_the_key_nor_the_url() {
    let validator = ExternalValidator::new(
        &spec("https://validator.example/v?token=abc", None),
        Some(b"secret-key-bytes".to_vec()),
    )
    .unwrap();
    let debug = format!("{validator:?}");
    assert!(!debug.contains("secret"), "{debug}");
    assert!(!debug.contains("token"), "{debug}");
}

#[tokio::test]
async fn https_trusts_the_specs_ca_bundle() {
    let (base, _) =
        test_support::serve_tls(|_| async { respond(StatusCode::OK, r#"{"allowed": true}"#) })
            .await;
    let url = format!("{base}/validate");
    let data = data();
    let mut trusting = spec(&url, Some(5));
    trusting.ca_bundle = Some(include_str!("../prometheus/testdata/ca.crt").into());
    let validator = ExternalValidator::new(&trusting, None).unwrap();
    assert_eq!(
        validator.validate(&request(&data), NOW).await,
        Verdict::Allowed
    );

    let untrusted = "TLS handshake failed: the validator's certificate is not trusted \
                     (spec.caBundle) or not valid for its host";
    let mut other = trusting.clone();
    other.ca_bundle = Some(include_str!("../prometheus/testdata/other-ca.crt").into());
    let validator = ExternalValidator::new(&other, None).unwrap();
    assert_eq!(
        failed(validator.validate(&request(&data), NOW).await),
        untrusted
    );
}
