use std::path::PathBuf;

use kube::config::Kubeconfig;
use serde_json::{Value, json};

use super::objects::*;
use configrollout_clusters::regions::clients::CredentialPolicy;

const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIBADAKBggqhkjOPQQDAjAjMSEwHwYDVQQDDBhrM3Mtc2Vy\n-----END CERTIFICATE-----\n";
/// `CA_PEM`, base64.
const CA_DATA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lCQURBS0JnZ3Foa2pPUFFRREFqQWpNU0V3SHdZRFZRUUREQmhyTTNNdGMyVnkKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2Vu.c2ln";

fn deploy(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("deploy file");
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("YAML")
        .into_iter()
        .filter(|document| !document.is_null())
        .collect()
}

fn kind<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|document| document["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn value(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).expect("JSON")
}

#[test]
fn cluster_wide_rbac_is_deploy_region_rbac_yaml() {
    let documents = deploy("region-rbac.yaml");
    let rbac = region_rbac(&Scope::ClusterWide);
    assert_eq!(value(&rbac.namespace), *kind(&documents, "Namespace"));
    assert_eq!(
        value(&rbac.service_account),
        *kind(&documents, "ServiceAccount")
    );
    let (role, binding) = rbac.cluster.expect("cluster-wide objects");
    assert_eq!(value(&role), *kind(&documents, "ClusterRole"));
    assert_eq!(value(&binding), *kind(&documents, "ClusterRoleBinding"));
    assert!(rbac.namespaced.is_empty());
    assert_eq!(documents.len(), 4, "every object of the file is built");
}

#[test]
fn namespaced_rbac_is_deploy_region_rbac_namespaced_yaml_in_each_namespace() {
    let documents = deploy("region-rbac-namespaced.yaml");
    let rbac = region_rbac(&Scope::Namespaces(vec!["app".into(), "team-b".into()]));
    assert!(rbac.cluster.is_none(), "no cluster-wide right");
    assert_eq!(rbac.namespaced.len(), 2);
    for ((role, binding), namespace) in rbac.namespaced.iter().zip(["app", "team-b"]) {
        // The file has no metadata.namespace: `kubectl apply -n NS` places it.
        let mut expected_role = kind(&documents, "Role").clone();
        expected_role["metadata"]["namespace"] = json!(namespace);
        let mut expected_binding = kind(&documents, "RoleBinding").clone();
        expected_binding["metadata"]["namespace"] = json!(namespace);
        assert_eq!(value(role), expected_role);
        assert_eq!(value(binding), expected_binding);
    }
    // The ServiceAccount the file's subject names, in the namespace deploy/region-rbac.yaml
    // creates for it.
    let full = deploy("region-rbac.yaml");
    assert_eq!(value(&rbac.namespace), *kind(&full, "Namespace"));
    assert_eq!(value(&rbac.service_account), *kind(&full, "ServiceAccount"));
    let subject = &kind(&documents, "RoleBinding")["subjects"][0];
    assert_eq!(subject["name"], SERVICE_ACCOUNT);
    assert_eq!(subject["namespace"], SERVICE_ACCOUNT_NAMESPACE);
}

#[test]
fn the_job_gate_files_bind_the_same_service_account() {
    for file in [
        "region-rbac-job-gates.yaml",
        "region-rbac-job-gates-namespaced.yaml",
    ] {
        let documents = deploy(file);
        let binding = documents
            .iter()
            .find(|document| {
                document["kind"]
                    .as_str()
                    .is_some_and(|k| k.ends_with("Binding"))
            })
            .expect("a binding");
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": SERVICE_ACCOUNT_NAMESPACE}]),
            "{file}"
        );
    }
}

fn admin_kubeconfig(cluster: &str) -> Kubeconfig {
    Kubeconfig::from_yaml(&format!(
        "apiVersion: v1
kind: Config
clusters:
- name: eu-1
  cluster:
{cluster}
- name: other
  cluster:
    server: https://other.example:6443
contexts:
- name: admin@eu-1
  context: {{cluster: eu-1, user: admin}}
- name: admin@other
  context: {{cluster: other, user: admin}}
current-context: admin@eu-1
users:
- name: admin
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: cloud-cli
      args: [get-token]
"
    ))
    .expect("kubeconfig")
}

#[test]
fn the_controller_kubeconfig_has_the_server_the_ca_and_a_static_token_only() {
    let admin = admin_kubeconfig(&format!(
        "    server: https://eu-1.example:6443\n    certificate-authority-data: {CA_DATA}\n    tls-server-name: api.eu-1.internal"
    ));
    let access = cluster_access(&admin, None, None).expect("access");
    assert_eq!(access.server, "https://eu-1.example:6443");
    assert_eq!(access.ca_pem.as_deref(), Some(CA_PEM.as_bytes()));
    let text = controller_kubeconfig("eu-1", &access, TOKEN).expect("kubeconfig");
    let built = Kubeconfig::from_yaml(&text).expect("parses");
    // The controller's own check, with its default policy.
    let policy = CredentialPolicy {
        controller_namespace: "configrollout-system".into(),
        allow_unsafe_kubeconfig: false,
    };
    policy.check(&built).expect("the controller takes it");
    assert_eq!(built.current_context.as_deref(), Some("eu-1"));
    let cluster = built.clusters[0].cluster.as_ref().expect("cluster");
    assert_eq!(cluster.server.as_deref(), Some("https://eu-1.example:6443"));
    assert_eq!(cluster.certificate_authority_data.as_deref(), Some(CA_DATA));
    assert_eq!(
        cluster.tls_server_name.as_deref(),
        Some("api.eu-1.internal")
    );
    assert_eq!(built.auth_infos.len(), 1);
    let user = built.auth_infos[0].auth_info.as_ref().expect("user");
    assert!(user.exec.is_none() && user.auth_provider.is_none());
    assert!(user.token_file.is_none() && user.client_certificate.is_none());
    assert!(
        !text.contains("exec") && !text.contains("cloud-cli"),
        "{text}"
    );
    assert_eq!(value(&built)["users"][0]["user"]["token"], TOKEN);
}

#[test]
fn server_and_context_can_be_chosen_and_a_ca_file_is_embedded() {
    let dir = std::env::temp_dir().join(format!("region-add-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, CA_PEM).expect("ca");
    let admin = admin_kubeconfig(&format!(
        "    server: https://127.0.0.1:6443\n    certificate-authority: {}",
        ca.display()
    ));
    let access = cluster_access(&admin, None, Some("https://eu-1.internal:443")).expect("access");
    assert_eq!(access.server, "https://eu-1.internal:443");
    assert_eq!(access.ca_pem.as_deref(), Some(CA_PEM.as_bytes()));
    let text = controller_kubeconfig("eu-1", &access, TOKEN).expect("kubeconfig");
    assert!(text.contains(CA_DATA), "the file's CA is embedded: {text}");
    assert!(!text.contains("ca.crt"), "no file path: {text}");

    let other = cluster_access(&admin, Some("admin@other"), None).expect("access");
    assert_eq!(other.server, "https://other.example:6443");
    assert_eq!(other.ca_pem, None);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unusable_cluster_entries_are_refused() {
    let admin = admin_kubeconfig("    server: https://eu-1.example:6443");
    let error = cluster_access(&admin, Some("nope"), None).expect_err("no context");
    assert!(error.contains("no context \"nope\""), "{error}");

    let insecure = admin_kubeconfig(
        "    server: https://eu-1.example:6443\n    insecure-skip-tls-verify: true",
    );
    let error = cluster_access(&insecure, None, None).expect_err("insecure");
    assert!(error.contains("skips TLS verification"), "{error}");

    let plain = admin_kubeconfig("    server: http://eu-1.example:8080");
    let error = cluster_access(&plain, None, None).expect_err("http");
    assert!(error.contains("not https"), "{error}");

    let garbage = admin_kubeconfig(
        "    server: https://eu-1.example:6443\n    certificate-authority-data: bm90IGEgY2VydA==",
    );
    let error = cluster_access(&garbage, None, None).expect_err("no PEM");
    assert!(error.contains("no PEM certificate"), "{error}");

    let mut no_current = admin_kubeconfig("    server: https://eu-1.example:6443");
    no_current.current_context = None;
    let error = cluster_access(&no_current, None, None).expect_err("no current context");
    assert!(error.contains("--region-context"), "{error}");
}

#[test]
fn the_secret_and_the_region_are_what_the_controller_reads() {
    let secret = kubeconfig_secret("eu-1", "configrollout-system", "kubeconfig text");
    assert_eq!(
        secret.metadata.name.as_deref(),
        Some("region-eu-1-kubeconfig")
    );
    assert_eq!(
        secret.metadata.namespace.as_deref(),
        Some("configrollout-system")
    );
    let data = secret.data.expect("data");
    assert_eq!(data[KUBECONFIG_KEY].0, b"kubeconfig text");

    let labels = vec![("tier".to_owned(), "canary".to_owned())];
    let region = region_object(
        "eu-1",
        "configrollout-system",
        &labels,
        Some("https://p:9090"),
    )
    .expect("a Region");
    assert_eq!(
        value(&region),
        json!({
            "apiVersion": "configrollout.dev/v1alpha1",
            "kind": "Region",
            "metadata": {"name": "eu-1", "labels": {"tier": "canary"}},
            "spec": {
                "kubeconfigSecretRef": {
                    "namespace": "configrollout-system",
                    "name": "region-eu-1-kubeconfig",
                    "key": "kubeconfig",
                },
                "prometheus": {"url": "https://p:9090"},
            },
        })
    );
    let bare = region_object("eu-1", "configrollout-system", &[], None).expect("a Region");
    assert_eq!(value(&bare)["metadata"], json!({"name": "eu-1"}));
    assert!(value(&bare)["spec"].get("prometheus").is_none());
}
