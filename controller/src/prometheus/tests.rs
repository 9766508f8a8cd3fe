use super::*;
use crate::gates::Credentials;
use crate::gates::verdict::Labels;
use chrono::DateTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

fn limits(max_bytes: usize, max_series: usize) -> ResponseLimits {
    ResponseLimits {
        max_bytes,
        max_series,
    }
}

fn parse(body: &str) -> Result<QueryResult, QueryError> {
    parse_answer(body.as_bytes(), ResponseLimits::default()).map(|answer| answer.result)
}

fn vector_answer(series: usize) -> String {
    let elements: Vec<String> = (0..series)
        .map(|i| format!(r#"{{"metric":{{"pod":"p{i}"}},"value":[1700000000.5,"{i}"]}}"#))
        .collect();
    format!(
        r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
        elements.join(",")
    )
}

/// What the canned server sends after the response head.
enum Body {
    Bytes(&'static str),
    /// Spaces until the client hangs up.
    Endless,
    /// Nothing, with the connection held open.
    Never,
}

/// Serves `head` then `body` to every connection on 127.0.0.1; returns the base URL
/// and the request heads received.
async fn serve(head: String, body: Body) -> (String, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (seen, requests) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut buffer = [0_u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let _ = seen.send(String::from_utf8_lossy(&request).into_owned());
            if stream.write_all(head.as_bytes()).await.is_err() {
                continue;
            }
            match body {
                Body::Bytes(bytes) => {
                    let _ = stream.write_all(bytes.as_bytes()).await;
                }
                Body::Endless => {
                    let chunk = vec![b' '; 64 * 1024];
                    while stream.write_all(&chunk).await.is_ok() {}
                }
                Body::Never => tokio::time::sleep(Duration::from_secs(60)).await,
            }
            let _ = stream.shutdown().await;
        }
    });
    (format!("http://{address}"), requests)
}

fn json_head(content_length: Option<u64>) -> String {
    let length = content_length
        .map(|length| format!("Content-Length: {length}\r\n"))
        .unwrap_or_default();
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}Connection: close\r\n\r\n"
    )
}

fn provider(base: &str, limits: ResponseLimits) -> PrometheusProvider {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = http_client(None).unwrap();
    PrometheusProvider::new(http, Some(base.to_owned()), limits)
}

fn error_text(answer: Answer) -> String {
    match answer.result {
        QueryResult::Error(text) => text,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// However many samples are asked for at once, the server never sees more than
/// [`MAX_QUERIES_IN_FLIGHT`] queries open; every sample is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_in_flight_are_capped_for_the_whole_controller() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let open = std::sync::Arc::new(AtomicUsize::new(0));
    let most = std::sync::Arc::new(AtomicUsize::new(0));
    let (server_open, server_most) = (open.clone(), most.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (open, most) = (server_open.clone(), server_most.clone());
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0_u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let now_open = open.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now_open, Ordering::SeqCst);
                // Held a while, so that an uncapped controller would pile up here.
                tokio::time::sleep(Duration::from_millis(30)).await;
                let body = SCALAR;
                let head = json_head(Some(body.len() as u64));
                open.fetch_sub(1, Ordering::SeqCst);
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    let provider = std::sync::Arc::new(provider(&base, ResponseLimits::default()));
    let samples = (0..3 * MAX_QUERIES_IN_FLIGHT).map(|_| {
        let provider = provider.clone();
        tokio::spawn(async move { provider.sample(SampleSource::default(), "up").await })
    });
    for answer in futures::future::join_all(samples).await {
        let answer = answer.unwrap();
        assert!(
            !matches!(answer.result, QueryResult::Error(_)),
            "{:?}",
            answer.result
        );
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        (1..=MAX_QUERIES_IN_FLIGHT).contains(&most),
        "{most} queries were open at once"
    );
}

#[tokio::test]
async fn a_vector_answer_comes_from_an_instant_query() {
    let body: &'static str = vector_answer(2).leak();
    let (base, mut requests) = serve(json_head(Some(body.len() as u64)), Body::Bytes(body)).await;
    let provider = provider(&format!("{base}/prom/"), ResponseLimits::default());
    let result = provider
        .sample(SampleSource::default(), "sum(up{job=\"a b\"})")
        .await;
    let expected = QueryResult::Vector(vec![
        (Labels::from([("pod".to_owned(), "p0".to_owned())]), 0.0),
        (Labels::from([("pod".to_owned(), "p1".to_owned())]), 1.0),
    ]);
    assert_eq!(result.result, expected);
    assert_eq!(
        result.evaluated_at,
        DateTime::from_timestamp_millis(1_700_000_000_500)
    );
    let request = requests.recv().await.unwrap();
    let line = request.lines().next().unwrap();
    assert_eq!(
        line,
        "GET /prom/api/v1/query?query=sum%28up%7Bjob%3D%22a+b%22%7D%29&timeout=10000ms HTTP/1.1"
    );
}

#[tokio::test]
async fn a_body_over_the_byte_cap_is_abandoned_unread() {
    let (base, _requests) = serve(json_head(None), Body::Endless).await;
    let provider = provider(&base, limits(64 * 1024, 1000));
    let started = std::time::Instant::now();
    let reason = error_text(
        provider
            .sample(
                SampleSource {
                    region: Some("any"),
                    ..SampleSource::default()
                },
                "up",
            )
            .await,
    );
    assert_eq!(
        reason,
        "Prometheus answer larger than the limit of 65536 bytes"
    );
    assert!(started.elapsed() < QUERY_TIMEOUT, "{:?}", started.elapsed());
}

#[tokio::test]
async fn an_announced_length_over_the_byte_cap_is_refused_before_reading() {
    let (base, _requests) = serve(json_head(Some(1 << 40)), Body::Never).await;
    let provider = provider(&base, ResponseLimits::default());
    let started = std::time::Instant::now();
    let reason = error_text(provider.sample(SampleSource::default(), "up").await);
    assert_eq!(
        reason,
        "Prometheus answer larger than the limit of 4194304 bytes"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_non_json_answer_is_refused_without_its_body() {
    let head = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: 20\r\nConnection: close\r\n\r\n";
    let (base, _requests) = serve(head.to_owned(), Body::Bytes("<h1>secret page</h1>")).await;
    let reason = error_text(
        provider(&base, ResponseLimits::default())
            .sample(SampleSource::default(), "up")
            .await,
    );
    assert_eq!(reason, "Prometheus answered HTTP 502 without JSON");
}

#[tokio::test]
async fn an_unreachable_endpoint_does_not_name_its_url() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let base = format!("http://user:password@{address}/");
    let reason = error_text(
        provider(&base, ResponseLimits::default())
            .sample(SampleSource::default(), "up")
            .await,
    );
    assert_eq!(reason, "Prometheus unreachable");
    let no_url = error_text(
        provider("not a url", ResponseLimits::default())
            .sample(SampleSource::default(), "up")
            .await,
    );
    assert_eq!(no_url, "the Prometheus URL is not a valid http(s) URL");
}

#[tokio::test]
async fn no_endpoint_is_an_error() {
    // Run alone, no other test has installed the provider reqwest needs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let provider = PrometheusProvider::new(http, None, ResponseLimits::default());
    assert_eq!(
        provider
            .sample(
                SampleSource {
                    region: Some("r"),
                    ..SampleSource::default()
                },
                "up"
            )
            .await,
        Answer::from(QueryResult::Error(
            "no Prometheus endpoint configured".to_owned()
        ))
    );
}

#[test]
fn more_series_than_the_cap_are_refused_naming_it() {
    let body = vector_answer(3);
    assert_eq!(
        parse_answer(body.as_bytes(), limits(1 << 20, 2))
            .unwrap_err()
            .to_string(),
        "Prometheus answer has 3 series, over the limit of 2"
    );
    assert!(matches!(
        parse_answer(body.as_bytes(), limits(1 << 20, 3)).map(|answer| answer.result),
        Ok(QueryResult::Vector(series)) if series.len() == 3
    ));
}

#[test]
fn scalar_and_empty_answers_keep_their_meaning() {
    assert_eq!(
        parse(
            r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.25"]}}"#
        ),
        Ok(QueryResult::Scalar(0.25))
    );
    assert_eq!(
        parse(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#),
        Ok(QueryResult::Empty)
    );
}

#[test]
fn special_values_parse_as_floats() {
    let value = |text: &str| {
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"scalar","result":[1,"{text}"]}}}}"#
        );
        match parse(&body) {
            Ok(QueryResult::Scalar(value)) => value,
            other => panic!("{text}: {other:?}"),
        }
    };
    assert!(value("NaN").is_nan());
    assert_eq!(value("+Inf"), f64::INFINITY);
    assert_eq!(value("-Inf"), f64::NEG_INFINITY);
    assert_eq!(value("1e-3"), 0.001);
}

#[test]
fn a_prometheus_error_keeps_only_a_bounded_text() {
    assert_eq!(
        parse(
            r#"{"status":"error","errorType":"bad_data","error":"parse error: unexpected\nend"}"#
        ),
        Err(QueryError::Prometheus {
            error_type: "bad_data".to_owned(),
            message: "parse error: unexpected end".to_owned(),
        })
    );
    let long = format!(
        r#"{{"status":"error","errorType":"{}","error":"{}"}}"#,
        "t".repeat(100),
        "é".repeat(10_000)
    );
    let reason = parse(&long).unwrap_err().to_string();
    assert!(reason.chars().count() < 300, "{}", reason.len());
    assert!(reason.ends_with('…'));
}

#[test]
fn range_vectors_and_strings_are_refused() {
    let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"],[2,"2"]]}]}}"#;
    assert_eq!(parse(matrix), Err(QueryError::RangeVector));
    let string = r#"{"status":"success","data":{"resultType":"string","result":[1,"hello"]}}"#;
    assert_eq!(
        parse(string).unwrap_err().to_string(),
        "the query returned a string result; gates need an instant vector or scalar"
    );
}

#[test]
fn a_malformed_answer_is_located_not_quoted() {
    let reason =
        parse(r#"{"status":"success","data":{"resultType":"scalar","result":[1,"secret-value"]}}"#)
            .unwrap_err()
            .to_string();
    assert!(
        reason.starts_with("malformed Prometheus answer: unexpected shape at line 1"),
        "{reason}"
    );
    assert!(!reason.contains("secret"), "{reason}");
    let reason = parse("<html>secret</html>").unwrap_err().to_string();
    assert!(
        reason.starts_with("malformed Prometheus answer: not JSON"),
        "{reason}"
    );
    assert!(!reason.contains("secret"), "{reason}");
    assert_eq!(
        parse(r#"{"status":"success"}"#),
        Err(QueryError::Malformed("no data".to_owned()))
    );
}

#[test]
fn an_answer_with_warnings_is_partial_whatever_its_data() {
    let with = |warnings: &str, data: &str| {
        parse(&format!(
            r#"{{"status":"success","data":{data},"warnings":{warnings}}}"#
        ))
    };
    let scalar = r#"{"resultType":"scalar","result":[1700000000,"0"]}"#;
    let empty = r#"{"resultType":"vector","result":[]}"#;
    assert_eq!(
        with(r#"["store eu-1 unavailable"]"#, scalar),
        Ok(QueryResult::Partial(
            "Prometheus warned that the answer may be incomplete: store eu-1 unavailable".into()
        ))
    );
    let many = format!(r#"["{}", "second"]"#, "x".repeat(10_000));
    match with(&many, empty) {
        Ok(QueryResult::Partial(reason)) => {
            assert!(reason.contains("(2 warnings)"), "{reason}");
            assert!(
                reason.chars().count() < 300 && reason.ends_with('…'),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // No warnings, or an empty or null list: the answer is whole.
    assert_eq!(with("[]", scalar), Ok(QueryResult::Scalar(0.0)));
    assert_eq!(with("null", scalar), Ok(QueryResult::Scalar(0.0)));
    // A refusal of the query's shape still says what is wrong with the query.
    let matrix = r#"{"resultType":"matrix","result":[]}"#;
    assert_eq!(with(r#"["w"]"#, matrix), Err(QueryError::RangeVector));
}

#[test]
fn every_answer_keeps_the_time_it_was_evaluated_at() {
    let vector = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod":"a"},"value":[1700000002.25,"1"]},
            {"metric":{"pod":"b"},"value":[1700000001.5,"2"]}]}}"#;
    let answer = parse_answer(vector.as_bytes(), ResponseLimits::default()).unwrap();
    assert_eq!(
        answer.evaluated_at,
        DateTime::from_timestamp_millis(1_700_000_001_500),
        "the oldest sample's time"
    );
    let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}"#;
    assert_eq!(
        parse_answer(scalar.as_bytes(), ResponseLimits::default())
            .unwrap()
            .evaluated_at,
        DateTime::from_timestamp(1_700_000_000, 0)
    );
    let partial = r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]},"warnings":["w"]}"#;
    assert!(
        parse_answer(partial.as_bytes(), ResponseLimits::default())
            .unwrap()
            .evaluated_at
            .is_some()
    );
    // A timestamp that is no time is a malformed answer, never a time of 0 or now.
    for bad in [r#""1700000000""#, "1e300", "-1e300", "null"] {
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"scalar","result":[{bad},"1"]}}}}"#
        );
        assert!(
            matches!(parse(&body), Err(QueryError::Malformed(_))),
            "{bad}: {:?}",
            parse(&body)
        );
    }
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let (elsewhere, mut followed) =
        serve(json_head(None), Body::Bytes(r#"{"status":"success"}"#)).await;
    for status in [
        "301 Moved Permanently",
        "302 Found",
        "307 Temporary Redirect",
    ] {
        let head = format!(
            "HTTP/1.1 {status}\r\nLocation: {elsewhere}/api/v1/query?query=vector(0)\r\n\
                 Content-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let (base, _requests) = serve(head, Body::Bytes("")).await;
        let reason = error_text(
            provider(&base, ResponseLimits::default())
                .sample(SampleSource::default(), "up")
                .await,
        );
        let code = &status[..3];
        assert_eq!(
            reason,
            format!("Prometheus answered with a redirect (HTTP {code}), which is not followed")
        );
    }
    assert!(followed.try_recv().is_err(), "the redirect was followed");
}

/// An https server on 127.0.0.1 with `testdata/server.crt` (signed by
/// `testdata/ca.crt`), answering every request with `body`; returns its base URL and
/// the request heads it received.
async fn serve_tls(body: &'static str) -> (String, mpsc::UnboundedReceiver<String>) {
    let acceptor = crate::test_support::tls_acceptor();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (seen, requests) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let Ok(mut stream) = acceptor.accept(stream).await else {
                continue;
            };
            let mut request = Vec::new();
            let mut buffer = [0_u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let _ = seen.send(String::from_utf8_lossy(&request).into_owned());
            let head = json_head(Some(body.len() as u64));
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    (format!("https://127.0.0.1:{}", address.port()), requests)
}

const SCALAR: &str =
    r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.5"]}}"#;

/// Samples `query` from `url`, as a region naming that URL and `access`.
async fn sample_as_region(url: &str, access: Access<'_>) -> Answer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider =
        PrometheusProvider::new(http_client(None).unwrap(), None, ResponseLimits::default());
    provider
        .sample(
            SampleSource {
                region: Some("eu-1"),
                url: Some(url),
                access,
                scoped: false,
            },
            "up",
        )
        .await
}

fn header<'a>(request: &'a str, name: &str) -> Option<&'a str> {
    request.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

#[tokio::test]
async fn a_regions_ca_bundle_is_the_only_trust_for_its_server() {
    let (base, mut requests) = serve_tls(SCALAR).await;
    let trusting = |bundle: &[u8]| Credentials {
        ca_bundle: Some(bundle.to_vec()),
        ..Credentials::default()
    };
    let ours = trusting(include_bytes!("testdata/ca.crt"));
    let answer = sample_as_region(&base, Access::With(&ours)).await;
    assert_eq!(answer.result, QueryResult::Scalar(0.5));
    assert!(requests.recv().await.is_some());

    // The system's roots do not know the lab's CA, and another CA is not it.
    let untrusted = "Prometheus TLS handshake failed: its certificate is not trusted \
                         (spec.prometheus.auth.caKey) or not valid for its host";
    let unknown = sample_as_region(&base, Access::Anonymous).await;
    assert_eq!(error_text(unknown), untrusted);
    let other = trusting(include_bytes!("testdata/other-ca.crt"));
    let refused = sample_as_region(&base, Access::With(&other)).await;
    assert_eq!(error_text(refused), untrusted);
    let not_pem = trusting(b"not a certificate");
    assert_eq!(
        error_text(sample_as_region(&base, Access::With(&not_pem)).await),
        "Prometheus credentials: the CA bundle holds no PEM certificate"
    );
    assert!(
        requests.try_recv().is_err(),
        "no request reached the server"
    );
}

#[tokio::test]
async fn credentials_go_in_the_authorization_header_over_https_only() {
    let (base, mut requests) = serve_tls(SCALAR).await;
    let ca = include_bytes!("testdata/ca.crt").to_vec();
    let bearer = Credentials {
        authorization: Some(Authorization::Bearer("t0ken-s3cr3t".into())),
        ca_bundle: Some(ca.clone()),
        ..Credentials::default()
    };
    let answer = sample_as_region(&base, Access::With(&bearer)).await;
    assert_eq!(answer.result, QueryResult::Scalar(0.5));
    let request = requests.recv().await.unwrap();
    assert_eq!(
        header(&request, "authorization"),
        Some("Bearer t0ken-s3cr3t")
    );

    let basic = Credentials {
        authorization: Some(Authorization::Basic {
            username: "prom-reader".into(),
            password: "pa55:word".into(),
        }),
        ca_bundle: Some(ca),
        ..Credentials::default()
    };
    let answer = sample_as_region(&format!("{base}/prefix/"), Access::With(&basic)).await;
    assert_eq!(answer.result, QueryResult::Scalar(0.5));
    let request = requests.recv().await.unwrap();
    // base64("prom-reader:pa55:word")
    assert_eq!(
        header(&request, "authorization"),
        Some("Basic cHJvbS1yZWFkZXI6cGE1NTp3b3Jk")
    );
    assert!(
        request.starts_with("GET /prefix/api/v1/query?"),
        "{request}"
    );

    // Never over plain http, never from the URL, never without the Secret's.
    let (plain, mut plain_requests) =
        serve(json_head(Some(SCALAR.len() as u64)), Body::Bytes(SCALAR)).await;
    assert_eq!(
        error_text(sample_as_region(&plain, Access::With(&bearer)).await),
        "spec.prometheus.auth needs an https spec.prometheus.url: credentials are never sent in clear"
    );
    let with_userinfo = plain.replace("http://", "http://reader:s3cr3t@");
    assert_eq!(
        error_text(sample_as_region(&with_userinfo, Access::Anonymous).await),
        "spec.prometheus.url carries credentials (user:password@), which are refused: give them in spec.prometheus.auth"
    );
    assert_eq!(
        error_text(
            sample_as_region(
                &plain,
                Access::Unusable("Secret configrollout-system/p has no key token")
            )
            .await
        ),
        "Prometheus credentials: Secret configrollout-system/p has no key token"
    );
    assert!(plain_requests.try_recv().is_err(), "a request went out");
    assert!(requests.try_recv().is_err(), "a request went out");
}

const HEADER_SECRET: &str = "k3y-s3cr3t-81f0";

#[tokio::test]
async fn a_regions_headers_are_sent_with_every_query() {
    // A literal tenant header goes over plain http too.
    let (plain, mut plain_requests) =
        serve(json_head(Some(SCALAR.len() as u64)), Body::Bytes(SCALAR)).await;
    let tenant = Credentials {
        headers: vec![
            ("X-Scope-OrgID".into(), "team-a|team-b".into()),
            ("X-Extra".into(), "one two".into()),
        ],
        ..Credentials::default()
    };
    let answer = sample_as_region(&plain, Access::With(&tenant)).await;
    assert_eq!(answer.result, QueryResult::Scalar(0.5));
    let request = plain_requests.recv().await.unwrap();
    assert_eq!(header(&request, "x-scope-orgid"), Some("team-a|team-b"));
    assert_eq!(header(&request, "x-extra"), Some("one two"));
    assert_eq!(header(&request, "accept"), Some("application/json"));
    assert_eq!(header(&request, "authorization"), None);

    // Beside credentials, and with a value from a Secret, over https.
    let (base, mut requests) = serve_tls(SCALAR).await;
    let keyed = Credentials {
        authorization: Some(Authorization::Bearer("t0ken".into())),
        ca_bundle: Some(include_bytes!("testdata/ca.crt").to_vec()),
        headers: vec![
            ("X-Scope-OrgID".into(), "team-a".into()),
            ("X-Api-Key".into(), HEADER_SECRET.into()),
        ],
        secret_headers: true,
    };
    let answer = sample_as_region(&base, Access::With(&keyed)).await;
    assert_eq!(answer.result, QueryResult::Scalar(0.5));
    let request = requests.recv().await.unwrap();
    assert_eq!(header(&request, "x-api-key"), Some(HEADER_SECRET));
    assert_eq!(header(&request, "x-scope-orgid"), Some("team-a"));
    assert_eq!(header(&request, "authorization"), Some("Bearer t0ken"));
    let debug = format!("{keyed:?}");
    assert!(!debug.contains(HEADER_SECRET), "{debug}");
    assert!(debug.contains("X-Api-Key"), "{debug}");
}

#[tokio::test]
async fn a_header_from_a_secret_goes_over_https_only_and_no_error_shows_a_value() {
    let (plain, mut plain_requests) =
        serve(json_head(Some(SCALAR.len() as u64)), Body::Bytes(SCALAR)).await;
    let keyed = |name: &str, value: String| Credentials {
        headers: vec![(name.to_owned(), value)],
        secret_headers: true,
        ..Credentials::default()
    };
    assert_eq!(
        error_text(
            sample_as_region(
                &plain,
                Access::With(&keyed("X-Api-Key", HEADER_SECRET.into()))
            )
            .await
        ),
        "spec.prometheus.headers[].valueFrom needs an https spec.prometheus.url: Secret values \
         are never sent in clear"
    );
    assert!(plain_requests.try_recv().is_err(), "a request went out");

    // What a hub with an older CRD lets through is refused here, quoting no value.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let https = format!("https://{closed}");
    let cases = [
        (
            keyed("X-Api-Key", format!("{HEADER_SECRET}\r\nInjected: 1")),
            "Prometheus credentials: spec.prometheus.headers: the value of x-api-key is not a \
             valid header value",
        ),
        (
            keyed(&format!("X-Api-Key: {HEADER_SECRET}"), "x".into()),
            "Prometheus credentials: spec.prometheus.headers: a name is not an HTTP header name",
        ),
        (
            keyed("Authorization", format!("Bearer {HEADER_SECRET}")),
            "Prometheus credentials: spec.prometheus.headers: authorization cannot be set",
        ),
        (
            keyed("X-Api-Key", HEADER_SECRET.into()),
            "Prometheus unreachable",
        ),
    ];
    for (credentials, expected) in cases {
        let text = error_text(sample_as_region(&https, Access::With(&credentials)).await);
        assert_eq!(text, expected);
        let debug = format!("{credentials:?}");
        assert!(!debug.contains(HEADER_SECRET), "{debug}");
    }
}

#[tokio::test]
async fn a_refusal_of_the_credentials_says_so() {
    for status in ["401 Unauthorized", "403 Forbidden"] {
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: 6\r\nConnection: close\r\n\r\n"
        );
        let (base, _requests) = serve(head, Body::Bytes("denied")).await;
        let reason = error_text(
            provider(&base, ResponseLimits::default())
                .sample(SampleSource::default(), "up")
                .await,
        );
        assert_eq!(
            reason,
            format!(
                "Prometheus refused the request (HTTP {}): check spec.prometheus.auth",
                &status[..3]
            )
        );
    }
}

fn span(seconds: i64, step_ms: u64) -> Span {
    let start = DateTime::from_timestamp_millis(1_700_000_000_250).unwrap();
    Span {
        start,
        end: start + chrono::TimeDelta::seconds(seconds),
        step: Duration::from_millis(step_ms),
    }
}

#[tokio::test]
async fn a_comparison_side_comes_from_a_range_query_over_its_span() {
    let body: &'static str = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"region":"eu-1"},"values":[[1700000000.25,"0.5"],[1700000002.25,"NaN"],[1700000004.25,"1e-3"]]}]}}"#;
    let (base, mut requests) = serve(json_head(Some(body.len() as u64)), Body::Bytes(body)).await;
    let provider = provider(&format!("{base}/prom"), ResponseLimits::default());
    let answer = provider
        .sample_range(SampleSource::default(), "sum(x)", span(4, 2000))
        .await;
    let SeriesAnswer::Points(points) = answer else {
        panic!("expected points, got {answer:?}");
    };
    assert_eq!(points.len(), 3);
    assert_eq!((points[0], points[2]), (0.5, 0.001));
    assert!(points[1].is_nan(), "NaN is kept for the judgement to drop");
    let request = requests.recv().await.unwrap();
    assert_eq!(
        request.lines().next().unwrap(),
        "GET /prom/api/v1/query_range?query=sum%28x%29&start=1700000000.250&end=1700000004.250\
         &step=2000ms&timeout=10000ms HTTP/1.1"
    );
}

#[test]
fn a_range_answer_of_several_series_is_refused_asking_for_an_aggregation() {
    let two = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"a"},"values":[[1,"1"]]},{"metric":{"pod":"b"},"values":[[1,"2"]]}]}}"#;
    let error = parse_series(two.as_bytes(), ResponseLimits::default()).unwrap_err();
    assert_eq!(error, QueryError::SeveralSeries(2));
    assert!(error.to_string().contains("aggregate it"), "{error}");
    let none = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
    assert_eq!(
        parse_series(none.as_bytes(), ResponseLimits::default()),
        Ok(SeriesAnswer::Points(Vec::new()))
    );
    let vector = vector_answer(1);
    assert!(matches!(
        parse_series(vector.as_bytes(), ResponseLimits::default()),
        Err(QueryError::UnsupportedType(_))
    ));
    let warned = r#"{"status":"success","warnings":["store down"],"data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}"#;
    assert!(matches!(
        parse_series(warned.as_bytes(), ResponseLimits::default()),
        Ok(SeriesAnswer::Partial(_))
    ));
}

#[tokio::test]
async fn a_range_of_too_many_points_is_refused_before_asking() {
    let provider = provider("http://127.0.0.1:9", ResponseLimits::default());
    let answer = provider
        .sample_range(SampleSource::default(), "sum(x)", span(3600, 1000))
        .await;
    assert_eq!(
        answer,
        SeriesAnswer::Error(QueryError::TooManyPoints.to_string())
    );
}

/// Prometheus's answer to `up * on(job) group_left up` over two tenants' series.
const DUPLICATE_SERIES: &str = r#"{"status":"error","errorType":"execution","error":"found duplicate series for the match group {job=\"x\"} on the right hand-side of the operation: [{__name__=\"up\", job=\"x\", namespace=\"tenant-b\"}, {__name__=\"up\", job=\"x\", namespace=\"tenant-a\"}];many-to-many matching not allowed: matching labels must be unique on one side"}"#;

fn scoped() -> SampleSource<'static> {
    SampleSource {
        scoped: true,
        ..SampleSource::default()
    }
}

#[tokio::test]
async fn a_scoped_query_keeps_only_the_kind_of_a_prometheus_error() {
    let head = json_head(Some(DUPLICATE_SERIES.len() as u64));
    let (base, _requests) = serve(head, Body::Bytes(DUPLICATE_SERIES)).await;
    let provider = provider(&base, ResponseLimits::default());
    let reason = error_text(
        provider
            .sample(scoped(), "up * on(job) group_left up")
            .await,
    );
    assert!(reason.starts_with("Prometheus error execution"), "{reason}");
    for quoted in ["tenant-b", "job=", "namespace=", "duplicate", "{"] {
        assert!(!reason.contains(quoted), "{quoted} in {reason}");
    }
    let range = provider
        .sample_range(scoped(), "sum(x)", span(4, 2000))
        .await;
    let SeriesAnswer::Error(reason) = range else {
        panic!("expected an error, got {range:?}");
    };
    assert!(reason.starts_with("Prometheus error execution"), "{reason}");
    assert!(!reason.contains("tenant-b"), "{reason}");
    // Unscoped, the message is kept (bounded), as before.
    let unscoped = error_text(provider.sample(SampleSource::default(), "up").await);
    assert!(unscoped.contains("duplicate series"), "{unscoped}");
}

#[test]
fn only_a_scoped_source_drops_the_prometheus_message() {
    let error = || QueryError::Prometheus {
        error_type: "bad_data".to_owned(),
        message: "parse error near {namespace=\"tenant-b\"}".to_owned(),
    };
    assert_eq!(
        error().for_source(scoped()),
        QueryError::ScopedPrometheus {
            error_type: "bad_data".to_owned()
        }
    );
    assert_eq!(error().for_source(SampleSource::default()), error());
    assert_eq!(
        QueryError::Timeout.for_source(scoped()),
        QueryError::Timeout
    );
}

#[tokio::test]
async fn a_scoped_query_does_not_pass_on_warning_text() {
    const WARNED: &str = r#"{"status":"success","warnings":["store {namespace=\"tenant-b\"} down"],"data":{"resultType":"scalar","result":[1700000000,"1"]}}"#;
    let (base, _requests) = serve(json_head(Some(WARNED.len() as u64)), Body::Bytes(WARNED)).await;
    let provider = provider(&base, ResponseLimits::default());
    let answer = provider.sample(scoped(), "scalar(x)").await;
    let QueryResult::Partial(reason) = answer.result else {
        panic!("expected a partial answer, got {:?}", answer.result);
    };
    assert!(!reason.contains("tenant-b"), "{reason}");
    assert!(reason.contains("incomplete"), "{reason}");
    let unscoped = provider.sample(SampleSource::default(), "scalar(x)").await;
    assert!(
        matches!(&unscoped.result, QueryResult::Partial(reason) if reason.contains("tenant-b")),
        "{:?}",
        unscoped.result
    );
}

/// From a Region's `spec.prometheus` as a platform writes it, through the Secret reader,
/// to the request Prometheus receives: the literal tenant header and the one from the
/// auth Secret are sent beside its token, over https trusting its CA.
#[tokio::test]
async fn a_regions_spec_headers_reach_its_prometheus() {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;

    use crate::api::PrometheusEndpoint;
    use crate::regions::prometheus_credentials::{endpoint_credentials, secrets_named};

    let (base, mut requests) = serve_tls(SCALAR).await;
    let region: PrometheusEndpoint = serde_json::from_value(serde_json::json!({
        "url": format!("{base}/prometheus"),
        "auth": {
            "secretRef": {"namespace": "configrollout-system", "name": "eu-1-prometheus"},
            "bearerTokenKey": "token",
            "caKey": "ca.crt",
        },
        "headers": [
            {"name": "X-Scope-OrgID", "value": "team-a"},
            {"name": "X-Api-Key", "valueFrom": {"name": "eu-1-prometheus", "key": "api-key"}},
        ],
    }))
    .unwrap();
    let api_key = format!("{HEADER_SECRET}\n");
    let data: &[(&str, &[u8])] = &[
        ("token", b"t0ken"),
        ("ca.crt", include_bytes!("testdata/ca.crt")),
        ("api-key", api_key.as_bytes()),
    ];
    let secret = Secret {
        data: Some(
            data.iter()
                .map(|(key, value)| ((*key).to_owned(), ByteString(value.to_vec())))
                .collect(),
        ),
        ..Secret::default()
    };
    let secrets: BTreeMap<String, Secret> = secrets_named(&region)
        .into_iter()
        .map(|name| (name.to_owned(), secret.clone()))
        .collect();
    let credentials = endpoint_credentials(&region, "configrollout-system", &secrets).unwrap();
    let answer = sample_as_region(&region.url, Access::With(&credentials)).await;
    assert_eq!(answer.result, QueryResult::Scalar(0.5));
    let request = requests.recv().await.unwrap();
    assert!(
        request.starts_with("GET /prometheus/api/v1/query?"),
        "{request}"
    );
    assert_eq!(header(&request, "x-scope-orgid"), Some("team-a"));
    assert_eq!(header(&request, "x-api-key"), Some(HEADER_SECRET));
    assert_eq!(header(&request, "authorization"), Some("Bearer t0ken"));
    assert!(!format!("{credentials:?}").contains(HEADER_SECRET));
}
