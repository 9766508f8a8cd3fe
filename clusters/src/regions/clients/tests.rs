use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use configrollout_api::RegionSpec;

const NAMESPACE: &str = "configrollout-system";
/// A self-signed CA certificate (PEM, base64), so that an allowed kubeconfig builds a
/// client.
const CA_DATA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lVYTlNZHRlWjA2a1dhazF3OUVkRkpKOGhWbk9jd0NnWUlLb1pJemowRUF3SXcKRVRFUE1BMEdBMVVFQXd3R2RHVnpkR05oTUI0WERUSTJNVEl3TXpBMk5UZzBORm9YRFRNMk1URXpNREEyTlRnMApORm93RVRFUE1BMEdBMVVFQXd3R2RHVnpkR05oTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFCnJqNzJJRW9EREhuaDd3V3hXbTMrNFVyRUFWazZaTFZRSC83dXFETzNLTkljbktTY01yYWZvdXNod29nOEJqcDkKcndLV0U2R0RzWldZUU16N1lSOVl2YU5UTUZFd0hRWURWUjBPQkJZRUZGdEJ6VEQzWk9SbjYxbnFqY3poY0JtMApwdW9xTUI4R0ExVWRJd1FZTUJhQUZGdEJ6VEQzWk9SbjYxbnFqY3poY0JtMHB1b3FNQThHQTFVZEV3RUIvd1FGCk1BTUJBZjh3Q2dZSUtvWkl6ajBFQXdJRFNBQXdSUUloQUlEcDlGU2FTOVI5NFNiOFFsWFFLL25HS0V6cExBUHoKSmhhUFhDQ1BVNmVqQWlBZ3YxNndHdXdEQlNURElYcEN1MGNkd1l0dEg1cDZQSGNRNVZidm5mWWVwQT09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";

fn unreachable_client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    Client::try_from(config).unwrap()
}

fn secret_ref(region: &str) -> SecretKeyRef {
    SecretKeyRef {
        namespace: NAMESPACE.to_owned(),
        name: format!("{region}-kubeconfig"),
        key: "kubeconfig".to_owned(),
    }
}

fn cache_client(clients: &RegionClients, region: &str, version: &str) {
    clients.cache.lock().unwrap().insert(
        region.to_owned(),
        CachedClient {
            reference: secret_ref(region),
            version: Some(version.to_owned()),
            client: unreachable_client(),
            watches: Arc::new(RegionWatches::new(
                region,
                unreachable_client(),
                tokio::sync::broadcast::channel(1).0,
            )),
        },
    );
}

#[tokio::test]
async fn clients_of_deleted_regions_are_forgotten() {
    let clients = RegionClients::new(unreachable_client(), unreachable_client(), policy(false));
    for name in ["eu-1", "us-1"] {
        cache_client(&clients, name, "1");
    }
    clients.retain(["us-1", "ap-1"]);
    assert_eq!(clients.cached_count(), 1);
    assert!(
        clients
            .cached("us-1", &secret_ref("us-1"), Some("1"))
            .is_some()
    );
    assert!(
        clients
            .cached("eu-1", &secret_ref("eu-1"), Some("1"))
            .is_none()
    );
}

#[tokio::test]
async fn a_client_is_reused_without_a_read_until_the_watch_sees_its_secret_change() {
    use kube::runtime::watcher::Event;

    // The hub is unreachable: any read of the Secret fails, so a client returned
    // proves no read was made.
    let clients = RegionClients::new(unreachable_client(), unreachable_client(), policy(false));
    let region = Region::new(
        "eu-1",
        RegionSpec {
            kubeconfig_secret_ref: Some(secret_ref("eu-1")),
            ..Default::default()
        },
    );
    cache_client(&clients, "eu-1", "7");
    let secret_meta = |version: &str| PartialObjectMeta::<Secret> {
        metadata: ObjectMeta {
            name: Some("eu-1-kubeconfig".to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            resource_version: Some(version.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };

    // No watch: the Secret is read at each use.
    assert!(matches!(
        clients.client(&region).await,
        Err(ClientError::SecretUnreadable { .. })
    ));

    let (versions, mut writer) = kube::runtime::reflector::store();
    clients.follow_secret_versions(versions);
    // The watch has not seen the Secret yet: read.
    assert!(clients.client(&region).await.is_err());
    // It has, at the version the client was built from: no read.
    writer.apply_watcher_event(&Event::Apply(secret_meta("7")));
    assert!(clients.client(&region).await.is_ok());
    // The kubeconfig was rotated: read (and here fail), never the stale client.
    writer.apply_watcher_event(&Event::Apply(secret_meta("8")));
    assert!(matches!(
        clients.client(&region).await,
        Err(ClientError::SecretUnreadable { .. })
    ));
    // A Region now naming another Secret does not get the client of the first.
    writer.apply_watcher_event(&Event::Apply(secret_meta("7")));
    let mut moved = region.clone();
    moved.spec.kubeconfig_secret_ref = Some(SecretKeyRef {
        key: "other".to_owned(),
        ..secret_ref("eu-1")
    });
    assert!(clients.client(&moved).await.is_err());
    assert!(clients.client(&region).await.is_ok());
}

fn policy(allow_unsafe_kubeconfig: bool) -> CredentialPolicy {
    CredentialPolicy {
        controller_namespace: NAMESPACE.to_owned(),
        allow_unsafe_kubeconfig,
    }
}

/// A kubeconfig with one cluster and one user, extended by `cluster_extra` and
/// `user_extra` (YAML lines at the entries' indentation).
fn kubeconfig(cluster_extra: &str, user_extra: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: eu-west-1
  cluster:
    server: https://eu-west-1.example:6443
{cluster_extra}
users:
- name: ci
  user:
    token: s3cr3t-tok3n-ZZZ
{user_extra}
contexts:
- name: eu-west-1
  context:
    cluster: eu-west-1
    user: ci
current-context: eu-west-1
"
    )
}

fn check(text: &str, policy: &CredentialPolicy) -> Result<Kubeconfig, KubeconfigProblem> {
    parse_kubeconfig(text.as_bytes(), policy)
}

fn assert_refused(text: &str, entry: &str, field: &str) {
    let problem = check(text, &policy(false)).unwrap_err();
    let message = problem.to_string();
    assert_eq!(
        message,
        format!(
            "{entry}: {field} is not allowed (start the controller with \
                 --allow-unsafe-kubeconfig to permit it)"
        )
    );
}

#[test]
fn exec_is_refused() {
    let text = kubeconfig(
        "",
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"cat /etc/passwd\"]",
    );
    assert_refused(&text, r#"users[0] "ci""#, "exec");
    assert!(
        !check(&text, &policy(false))
            .unwrap_err()
            .to_string()
            .contains("/bin/sh")
    );
}

#[test]
fn auth_provider_is_refused() {
    let text = kubeconfig(
        "",
        "    auth-provider:\n      name: gcp\n      config:\n        cmd-path: /bin/sh",
    );
    assert_refused(&text, r#"users[0] "ci""#, "auth-provider");
}

#[test]
fn token_file_is_refused() {
    let text = kubeconfig(
        "",
        "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
    );
    assert_refused(&text, r#"users[0] "ci""#, "tokenFile");
}

#[test]
fn client_certificate_path_is_refused() {
    let text = kubeconfig("", "    client-certificate: /etc/hostname");
    assert_refused(&text, r#"users[0] "ci""#, "client-certificate");
}

#[test]
fn client_key_path_is_refused() {
    let text = kubeconfig("", "    client-key: /etc/hostname");
    assert_refused(&text, r#"users[0] "ci""#, "client-key");
}

#[test]
fn insecure_skip_tls_verify_is_refused() {
    let text = kubeconfig("    insecure-skip-tls-verify: true", "");
    assert_refused(
        &text,
        r#"clusters[0] "eu-west-1""#,
        "insecure-skip-tls-verify",
    );
}

#[test]
fn insecure_skip_tls_verify_false_is_allowed() {
    let text = kubeconfig(
        &format!("    insecure-skip-tls-verify: false\n    certificate-authority-data: {CA_DATA}"),
        "",
    );
    check(&text, &policy(false)).unwrap();
}

#[test]
fn certificate_authority_path_is_refused() {
    let text = kubeconfig("    certificate-authority: /etc/ssl/certs/ca.pem", "");
    assert_refused(&text, r#"clusters[0] "eu-west-1""#, "certificate-authority");
}

#[test]
fn every_user_is_checked_not_only_the_current_contexts() {
    let text = kubeconfig("", "").replace(
        "contexts:",
        "- name: unused\n  user:\n    exec:\n      command: /bin/true\ncontexts:",
    );
    assert_refused(&text, r#"users[1] "unused""#, "exec");
}

#[test]
fn token_and_certificate_authority_data_pass() {
    let text = kubeconfig(&format!("    certificate-authority-data: {CA_DATA}"), "");
    let parsed = check(&text, &policy(false)).unwrap();
    assert_eq!(parsed.auth_infos.len(), 1);
    assert_eq!(parsed.clusters.len(), 1);
}

#[test]
fn the_policy_flag_permits_exec() {
    let text = kubeconfig(
        "",
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws",
    );
    check(&text, &policy(false)).unwrap_err();
    check(&text, &policy(true)).unwrap();
}

#[test]
fn a_long_entry_name_is_shortened_in_the_error() {
    let long = "n".repeat(10_000);
    let text = kubeconfig("", "    exec:\n      command: aws")
        .replace("name: ci", &format!("name: {long}"));
    let message = check(&text, &policy(false)).unwrap_err().to_string();
    assert!(message.len() < 200, "{message}");
}

#[test]
fn an_oversized_kubeconfig_is_refused_unparsed() {
    let text = format!(
        "{}#{}\n",
        kubeconfig("", ""),
        "x".repeat(MAX_KUBECONFIG_BYTES)
    );
    assert_eq!(
        check(&text, &policy(false)).unwrap_err(),
        KubeconfigProblem::TooLarge { size: text.len() }
    );
}

fn secret(data: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("region-eu-west-1".to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "kubeconfig".to_owned(),
            ByteString(data.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

fn reference(namespace: &str) -> SecretKeyRef {
    SecretKeyRef {
        namespace: namespace.to_owned(),
        name: "region-eu-west-1".to_owned(),
        key: "kubeconfig".to_owned(),
    }
}

#[tokio::test]
async fn a_broken_kubeconfig_error_quotes_nothing_from_the_file() {
    let text = "apiVersion: v1\nusers:\n- name: ci\n  user:\n    token: s3cr3t-tok3n-ZZZ\n    \
                    client-key-data: [unclosed, {broken: yaml\n  oops: : :\n";
    let error = refusal(build_client(&reference(NAMESPACE), &secret(text), &policy(false)).await);
    let shown = format!("{error} / {error:?}");
    // kube's own message quotes the lines around the error, token included.
    assert!(
        Kubeconfig::from_yaml(text)
            .unwrap_err()
            .to_string()
            .contains("s3cr3t-tok3n-ZZZ")
    );
    assert!(
        matches!(
            error,
            ClientError::BadKubeconfig {
                problem: KubeconfigProblem::InvalidYamlAt {
                    line: 6,
                    column: 22
                },
                ..
            }
        ),
        "{shown}"
    );
    for fragment in [
        "s3cr3t",
        "tok3n",
        "ZZZ",
        "unclosed",
        "broken",
        "oops",
        "client-key-data",
        "token",
    ] {
        assert!(!shown.contains(fragment), "{fragment:?} leaked: {shown}");
    }
}

#[tokio::test]
async fn a_kubeconfig_with_a_bad_field_type_quotes_nothing_from_the_file() {
    let text = kubeconfig("    insecure-skip-tls-verify: s3cr3t-tok3n-ZZZ", "");
    let error = refusal(build_client(&reference(NAMESPACE), &secret(&text), &policy(false)).await);
    let shown = format!("{error} / {error:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
}

#[tokio::test]
async fn an_unusable_kubeconfig_error_quotes_nothing_from_the_file() {
    // Bad base64 in the CA: kube's own message names the offending byte and its offset.
    let text = kubeconfig("    certificate-authority-data: s3cr3t-tok3n-ZZZ", "");
    let error = refusal(build_client(&reference(NAMESPACE), &secret(&text), &policy(false)).await);
    let shown = format!("{error} / {error:?}");
    assert!(
        matches!(
            error,
            ClientError::BadKubeconfig {
                problem: KubeconfigProblem::Unusable { .. },
                ..
            }
        ),
        "{shown}"
    );
    assert!(
        !shown.contains("s3cr3t") && !shown.contains("ZZZ"),
        "{shown}"
    );
}

#[tokio::test]
async fn an_allowed_kubeconfig_builds_a_client() {
    // The TLS provider the binary installs before building any client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let text = kubeconfig(&format!("    certificate-authority-data: {CA_DATA}"), "");
    build_client(&reference(NAMESPACE), &secret(&text), &policy(false))
        .await
        .unwrap();
}

/// The error of a result whose client (which has no `Debug`) was not expected.
fn refusal<T>(result: Result<T, ClientError>) -> ClientError {
    match result {
        Ok(_) => panic!("a client was built"),
        Err(error) => error,
    }
}

/// Serves one ConfigMap per connection on loopback: `small`, or `huge` with a value
/// just over [`MAX_ANSWER_BYTES`] (valid JSON, so only the bound can refuse it).
async fn one_configmap_server() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0_u8; 8192];
                let read = socket.read(&mut request).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&request[..read]).into_owned();
                let (name, value) = if request.contains("/configmaps/huge") {
                    ("huge", "x".repeat(MAX_ANSWER_BYTES + 1))
                } else {
                    ("small", "1".to_owned())
                };
                let body = format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"app"}},"data":{{"k":"{value}"}}}}"#
                );
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
            });
        }
    });
    address
}

#[tokio::test]
async fn a_regions_answer_over_the_bound_is_refused() {
    let address = one_configmap_server().await;
    let config = Config::new(format!("http://{address}").parse().unwrap());
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(bounded_client(config.clone()).unwrap(), "app");
    let small = configmaps.get("small").await.unwrap();
    assert_eq!(small.data.unwrap()["k"], "1");
    let error = configmaps.get("huge").await.unwrap_err();
    assert!(
        format!("{error:?}").contains("LengthLimitError"),
        "{error:?}"
    );
    // The same answer through a client without the bound is read in full.
    let unbounded: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(Client::try_from(config).unwrap(), "app");
    let huge = unbounded.get("huge").await.unwrap();
    assert_eq!(huge.data.unwrap()["k"].len(), MAX_ANSWER_BYTES + 1);
}

fn unreachable_hub() -> Client {
    // Port 9 (discard) on loopback: any request the code under test made would fail
    // as SecretUnreadable, which the assertions tell apart from a refusal.
    let config = Config::new("http://127.0.0.1:9".parse().unwrap());
    Client::try_from(config).unwrap()
}

fn region(namespace: &str) -> Region {
    Region::new(
        "eu-west-1",
        RegionSpec {
            kubeconfig_secret_ref: Some(reference(namespace)),
            prometheus: None,
        },
    )
}

#[tokio::test]
async fn a_secret_in_another_namespace_is_refused_unread() {
    let clients = RegionClients::new(unreachable_hub(), unreachable_hub(), policy(true));
    let error = refusal(clients.client(&region("team-a")).await);
    assert!(
        matches!(error, ClientError::SecretOutsideControllerNamespace { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "spec.kubeconfigSecretRef.namespace must be configrollout-system \
             (the controller's namespace), not team-a"
    );
}

#[tokio::test]
async fn a_secret_in_the_controller_namespace_is_read() {
    let clients = RegionClients::new(unreachable_hub(), unreachable_hub(), policy(false));
    let error = refusal(clients.client(&region(NAMESPACE)).await);
    assert!(
        matches!(error, ClientError::SecretUnreadable { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn literal_prometheus_headers_need_no_secret_and_others_are_read_in_the_controller_namespace()
{
    use configrollout_api::{HeaderSecretKey, PrometheusEndpoint, PrometheusHeader};

    let clients = RegionClients::new(unreachable_hub(), unreachable_hub(), policy(false));
    let with_headers = |headers: Vec<PrometheusHeader>| {
        Region::new(
            "eu-west-1",
            RegionSpec {
                kubeconfig_secret_ref: None,
                prometheus: Some(PrometheusEndpoint {
                    url: "https://mimir.example".to_owned(),
                    auth: None,
                    headers,
                }),
            },
        )
    };
    let tenant = with_headers(vec![PrometheusHeader {
        name: "X-Scope-OrgID".to_owned(),
        value: Some("team-a".to_owned()),
        value_from: None,
    }]);
    let credentials = clients
        .prometheus_credentials(&tenant)
        .await
        .expect("headers are named")
        .expect("no Secret is read");
    assert_eq!(
        credentials.headers,
        [("X-Scope-OrgID".to_owned(), "team-a".to_owned())]
    );
    assert!(!credentials.need_https());

    let keyed = with_headers(vec![PrometheusHeader {
        name: "X-Api-Key".to_owned(),
        value: None,
        value_from: Some(HeaderSecretKey {
            name: "gateway-keys".to_owned(),
            key: "eu-west-1".to_owned(),
        }),
    }]);
    let error = clients
        .prometheus_credentials(&keyed)
        .await
        .expect("headers are named")
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("reading Secret configrollout-system/gateway-keys: "),
        "{error}"
    );
    assert!(
        clients
            .prometheus_credentials(&region(NAMESPACE))
            .await
            .is_none()
    );
}
