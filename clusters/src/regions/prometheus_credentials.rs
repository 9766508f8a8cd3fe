//! Credentials for a Region's Prometheus (`spec.prometheus.auth`): keys of one Secret in
//! the controller's namespace, where tenants cannot write, as for kubeconfigs
//! ([`super::clients`], which reads, caches and rebuilds them when the Secret changes);
//! and the extra headers its queries carry (`spec.prometheus.headers`), literal or from
//! keys of Secrets in the same namespace.
//!
//! Values are checked before use (sizes bounded, header-safe), and no error quotes them:
//! errors end up in the gate samples of rollout status, which tenants read.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Secret;

use configrollout_api::{
    HEADER_NAME_PATTERN, MAX_PROMETHEUS_HEADER_NAME_LENGTH, MAX_PROMETHEUS_HEADER_VALUE_LENGTH,
    MAX_PROMETHEUS_HEADERS, PrometheusAuth, PrometheusEndpoint, is_forbidden_prometheus_header,
    is_header_name,
};
use configrollout_core::gates::{Authorization, Credentials};

/// Largest bearer token, user name or password accepted.
pub const MAX_CREDENTIAL_BYTES: usize = 16 * 1024;
/// Largest CA bundle accepted.
pub const MAX_CA_BUNDLE_BYTES: usize = 1024 * 1024;

/// Why a Region's Prometheus credentials cannot be had. No variant holds a value from the
/// Secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The Region names a Secret outside the controller's namespace; it is not read.
    #[error(
        "spec.prometheus.auth.secretRef.namespace must be {required} (the controller's \
         namespace), not {namespace}"
    )]
    OutsideControllerNamespace {
        /// The namespace the Region names.
        namespace: String,
        /// The controller's namespace.
        required: String,
    },
    /// The Secret could not be read from the hub.
    #[error("reading Secret {namespace}/{name}: {reason}")]
    Unreadable {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Why (HTTP reason or transport error).
        reason: String,
    },
    /// The Secret has no such key.
    #[error("Secret {namespace}/{name} has no key {key:?}")]
    MissingKey {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The key the Region names.
        key: String,
    },
    /// A header of `spec.prometheus.headers` cannot be sent (what a CRD of this version
    /// refuses, for a hub with an older one).
    #[error("spec.prometheus.headers[{index}]: {problem}")]
    BadHeader {
        /// Its index in the list.
        index: usize,
        /// What is wrong, in words that quote nothing of its value.
        problem: String,
    },
    /// A header's value read from a Secret would go over plain http.
    #[error(
        "spec.prometheus.headers[].valueFrom needs an https spec.prometheus.url: Secret values \
         are never sent in clear"
    )]
    SecretHeaderOverHttp,
    /// The key's value cannot be used for what the Region names it for.
    #[error("Secret {namespace}/{name} key {key:?} {problem}")]
    Unusable {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The key.
        key: String,
        /// What is wrong, in words that quote nothing of the value.
        problem: &'static str,
    },
}

/// What a value is used as, which decides what it may hold.
#[derive(Clone, Copy)]
enum Use {
    /// A bearer token: visible ASCII, no spaces.
    Token,
    /// A basic-auth user name: no `:` (it separates the password), no control characters.
    Username,
    /// A basic-auth password: no control characters.
    Password,
}

/// The names of the Secrets `prometheus` reads, in the controller's namespace: the one
/// its `auth` names and those its headers' `valueFrom` name, each once.
pub fn secrets_named(prometheus: &PrometheusEndpoint) -> BTreeSet<&str> {
    prometheus
        .auth
        .iter()
        .map(|auth| auth.secret_ref.name.as_str())
        .chain(
            prometheus
                .headers
                .iter()
                .filter_map(|header| header.value_from.as_ref())
                .map(|from| from.name.as_str()),
        )
        .collect()
}

/// The credentials and headers `prometheus` names, from `secrets` (by name: those
/// [`secrets_named`] lists, read from the controller's `namespace`).
pub fn endpoint_credentials(
    prometheus: &PrometheusEndpoint,
    namespace: &str,
    secrets: &BTreeMap<String, Secret>,
) -> Result<Credentials, CredentialError> {
    let secret = |name: &str| {
        secrets
            .get(name)
            .ok_or_else(|| CredentialError::Unreadable {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                reason: "not read".to_owned(),
            })
    };
    let mut credentials = match &prometheus.auth {
        Some(auth) => credentials_from(auth, secret(&auth.secret_ref.name)?)?,
        None => Credentials::default(),
    };
    if prometheus.headers.len() > usize::try_from(MAX_PROMETHEUS_HEADERS).unwrap_or(usize::MAX) {
        return Err(CredentialError::BadHeader {
            index: prometheus.headers.len().saturating_sub(1),
            problem: format!("at most {MAX_PROMETHEUS_HEADERS} headers can be given"),
        });
    }
    let mut names = BTreeSet::new();
    for (index, header) in prometheus.headers.iter().enumerate() {
        let bad = |problem: String| CredentialError::BadHeader { index, problem };
        if !is_short_header_name(&header.name) {
            return Err(bad(format!(
                "the name is not an HTTP header name of at most \
                 {MAX_PROMETHEUS_HEADER_NAME_LENGTH} characters (pattern {HEADER_NAME_PATTERN})"
            )));
        }
        if is_forbidden_prometheus_header(&header.name) {
            return Err(bad(format!(
                "{} cannot be set: the controller sets it, or it is a credential (use \
                 spec.prometheus.auth) or hop-by-hop",
                header.name
            )));
        }
        if !names.insert(header.name.to_ascii_lowercase()) {
            return Err(bad(format!(
                "{} is named twice (names ignore case)",
                header.name
            )));
        }
        let value = match (&header.value, &header.value_from) {
            (Some(value), None) => {
                let length = u64::try_from(value.len()).unwrap_or(u64::MAX);
                if length > MAX_PROMETHEUS_HEADER_VALUE_LENGTH || !is_header_value(value) {
                    return Err(bad(format!(
                        "the value of {} must be printable ASCII, at most \
                         {MAX_PROMETHEUS_HEADER_VALUE_LENGTH} characters",
                        header.name
                    )));
                }
                value.clone()
            }
            (None, Some(from)) => {
                let unusable = |problem: &'static str| CredentialError::Unusable {
                    namespace: namespace.to_owned(),
                    name: from.name.clone(),
                    key: from.key.clone(),
                    problem,
                };
                let raw = secret(&from.name)?
                    .data
                    .as_ref()
                    .and_then(|data| data.get(&from.key))
                    .ok_or_else(|| CredentialError::MissingKey {
                        namespace: namespace.to_owned(),
                        name: from.name.clone(),
                        key: from.key.clone(),
                    })?;
                if raw.0.len() > MAX_CREDENTIAL_BYTES {
                    return Err(unusable("is larger than 16 KiB"));
                }
                let value = std::str::from_utf8(&raw.0)
                    .map_err(|_| unusable("is not UTF-8 text"))?
                    .trim();
                if value.is_empty() {
                    return Err(unusable("is empty"));
                }
                if !is_header_value(value) {
                    return Err(unusable(
                        "holds characters a header value cannot have (control or non-ASCII \
                         characters)",
                    ));
                }
                credentials.secret_headers = true;
                value.to_owned()
            }
            _ => return Err(bad("set exactly one of value and valueFrom".to_owned())),
        };
        credentials.headers.push((header.name.clone(), value));
    }
    if credentials.secret_headers && !prometheus.url.to_ascii_lowercase().starts_with("https://") {
        return Err(CredentialError::SecretHeaderOverHttp);
    }
    Ok(credentials)
}

/// Whether `name` is an HTTP header name of a length the CRD accepts.
fn is_short_header_name(name: &str) -> bool {
    is_header_name(name)
        && u64::try_from(name.len()).is_ok_and(|length| length <= MAX_PROMETHEUS_HEADER_NAME_LENGTH)
}

/// Whether `value` may be sent as a header's value: printable ASCII, with spaces or tabs
/// only between printable characters.
fn is_header_value(value: &str) -> bool {
    value.trim() == value
        && !value.is_empty()
        && value
            .bytes()
            .all(|byte| byte.is_ascii_graphic() || byte == b' ' || byte == b'\t')
}

/// The credentials `auth` names, from `secret` (the one its `secretRef` names).
pub fn credentials_from(
    auth: &PrometheusAuth,
    secret: &Secret,
) -> Result<Credentials, CredentialError> {
    let reference = &auth.secret_ref;
    let unusable = |key: &str, problem: &'static str| CredentialError::Unusable {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        key: key.to_owned(),
        problem,
    };
    let bytes = |key: &str| -> Result<&[u8], CredentialError> {
        secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .map(|value| value.0.as_slice())
            .ok_or_else(|| CredentialError::MissingKey {
                namespace: reference.namespace.clone(),
                name: reference.name.clone(),
                key: key.to_owned(),
            })
    };
    let text = |key: &str, usage: Use| -> Result<String, CredentialError> {
        let raw = bytes(key)?;
        if raw.len() > MAX_CREDENTIAL_BYTES {
            return Err(unusable(key, "is larger than 16 KiB"));
        }
        let value = std::str::from_utf8(raw)
            .map_err(|_| unusable(key, "is not UTF-8 text"))?
            // A value written from a file usually ends with a newline; Prometheus's own
            // `*_file` settings drop surrounding whitespace too.
            .trim();
        if value.is_empty() {
            return Err(unusable(key, "is empty"));
        }
        let allowed = match usage {
            Use::Token => value.bytes().all(|byte| byte.is_ascii_graphic()),
            Use::Username => !value.contains(':') && !value.chars().any(char::is_control),
            Use::Password => !value.chars().any(char::is_control),
        };
        if !allowed {
            return Err(unusable(
                key,
                match usage {
                    Use::Token => {
                        "holds characters a bearer token cannot have (spaces, \
                                   control or non-ASCII characters)"
                    }
                    Use::Username => {
                        "holds ':' or control characters, which a basic-auth \
                                      user name cannot have"
                    }
                    Use::Password => "holds control characters",
                },
            ));
        }
        Ok(value.to_owned())
    };
    let authorization = match (
        &auth.bearer_token_key,
        &auth.username_key,
        &auth.password_key,
    ) {
        (Some(token), None, None) => Some(Authorization::Bearer(text(token, Use::Token)?)),
        (None, Some(username), Some(password)) => Some(Authorization::Basic {
            username: text(username, Use::Username)?,
            password: text(password, Use::Password)?,
        }),
        (None, None, None) => None,
        // The schema refuses these; a hub with an older CRD gets the same answer here.
        (Some(_), _, _) => {
            return Err(unusable(
                auth.bearer_token_key.as_deref().unwrap_or_default(),
                "is named with usernameKey/passwordKey: set a bearer token or a user name \
                 and password, not both",
            ));
        }
        (None, Some(key), None) | (None, None, Some(key)) => {
            return Err(unusable(
                key,
                "is named without its pair: set usernameKey and passwordKey together",
            ));
        }
    };
    let ca_bundle = match &auth.ca_key {
        Some(key) => {
            let raw = bytes(key)?;
            if raw.len() > MAX_CA_BUNDLE_BYTES {
                return Err(unusable(key, "is larger than 1 MiB"));
            }
            Some(raw.to_vec())
        }
        None => None,
    };
    if authorization.is_none() && ca_bundle.is_none() {
        return Err(CredentialError::Unusable {
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
            key: String::new(),
            problem: "is not named: spec.prometheus.auth names no key",
        });
    }
    Ok(Credentials {
        authorization,
        ca_bundle,
        ..Credentials::default()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;
    use configrollout_api::{HeaderSecretKey, PrometheusHeader, SecretRef};

    fn auth() -> PrometheusAuth {
        PrometheusAuth {
            secret_ref: SecretRef {
                namespace: "configrollout-system".into(),
                name: "eu-1-prometheus".into(),
            },
            bearer_token_key: None,
            username_key: None,
            password_key: None,
            ca_key: None,
        }
    }

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(key, value)| ((*key).to_owned(), ByteString(value.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_bearer_token_or_a_user_and_password_and_a_ca_come_from_their_keys() {
        let bearer = PrometheusAuth {
            bearer_token_key: Some("token".into()),
            ca_key: Some("ca.crt".into()),
            ..auth()
        };
        let credentials = credentials_from(
            &bearer,
            &secret(&[("token", b"abc.def-123\n"), ("ca.crt", b"PEM")]),
        )
        .unwrap();
        assert_eq!(
            credentials,
            Credentials {
                authorization: Some(Authorization::Bearer("abc.def-123".into())),
                ca_bundle: Some(b"PEM".to_vec()),
                ..Credentials::default()
            }
        );
        let basic = PrometheusAuth {
            username_key: Some("username".into()),
            password_key: Some("password".into()),
            ..auth()
        };
        let credentials = credentials_from(
            &basic,
            &secret(&[("username", b"reader"), ("password", b"pa ss:word\r\n")]),
        )
        .unwrap();
        assert_eq!(
            credentials.authorization,
            Some(Authorization::Basic {
                username: "reader".into(),
                password: "pa ss:word".into(),
            })
        );
        assert_eq!(credentials.ca_bundle, None);
        let ca_only = PrometheusAuth {
            ca_key: Some("ca.crt".into()),
            ..auth()
        };
        let credentials = credentials_from(&ca_only, &secret(&[("ca.crt", b"PEM")])).unwrap();
        assert_eq!(credentials.authorization, None);
    }

    #[test]
    fn unusable_values_are_refused_without_being_quoted() {
        let bearer = PrometheusAuth {
            bearer_token_key: Some("token".into()),
            ..auth()
        };
        let basic = PrometheusAuth {
            username_key: Some("username".into()),
            password_key: Some("password".into()),
            ..auth()
        };
        let long = vec![b'a'; MAX_CREDENTIAL_BYTES + 1];
        let cases: [(&PrometheusAuth, Secret, &str); 7] = [
            (
                &bearer,
                secret(&[]),
                "Secret configrollout-system/eu-1-prometheus has no key \"token\"",
            ),
            (
                &bearer,
                secret(&[("token", b"s3cr3t with space")]),
                "key \"token\" holds characters a bearer token cannot have",
            ),
            (
                &bearer,
                secret(&[("token", b" \n")]),
                "key \"token\" is empty",
            ),
            (
                &bearer,
                secret(&[("token", b"s3cr3t\xff")]),
                "key \"token\" is not UTF-8 text",
            ),
            (
                &bearer,
                secret(&[("token", long.as_slice())]),
                "key \"token\" is larger than 16 KiB",
            ),
            (
                &basic,
                secret(&[("username", b"s3cr3t:user"), ("password", b"p")]),
                "key \"username\" holds ':'",
            ),
            (
                &basic,
                secret(&[("username", b"u"), ("password", b"s3cr3t\x07")]),
                "key \"password\" holds control characters",
            ),
        ];
        for (auth, secret, expected) in cases {
            let error = credentials_from(auth, &secret).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains("s3cr3t"), "{error}");
        }
        let big_ca = vec![b'-'; MAX_CA_BUNDLE_BYTES + 1];
        let ca = PrometheusAuth {
            ca_key: Some("ca.crt".into()),
            ..auth()
        };
        assert!(
            credentials_from(&ca, &secret(&[("ca.crt", big_ca.as_slice())]))
                .unwrap_err()
                .to_string()
                .ends_with("key \"ca.crt\" is larger than 1 MiB")
        );
        // What the schema refuses is refused here too, for a hub with an older CRD.
        let both = PrometheusAuth {
            bearer_token_key: Some("token".into()),
            username_key: Some("username".into()),
            password_key: Some("password".into()),
            ..auth()
        };
        assert!(
            credentials_from(&both, &secret(&[("token", b"t")]))
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        let half = PrometheusAuth {
            username_key: Some("username".into()),
            ..auth()
        };
        assert!(
            credentials_from(&half, &secret(&[("username", b"u")]))
                .unwrap_err()
                .to_string()
                .contains("set usernameKey and passwordKey together")
        );
        assert!(
            credentials_from(&auth(), &secret(&[]))
                .unwrap_err()
                .to_string()
                .contains("names no key")
        );
    }

    fn literal(name: &str, value: &str) -> PrometheusHeader {
        PrometheusHeader {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn from_secret(name: &str, secret: &str, key: &str) -> PrometheusHeader {
        PrometheusHeader {
            name: name.into(),
            value: None,
            value_from: Some(HeaderSecretKey {
                name: secret.into(),
                key: key.into(),
            }),
        }
    }

    fn endpoint(
        auth: Option<PrometheusAuth>,
        headers: Vec<PrometheusHeader>,
    ) -> PrometheusEndpoint {
        PrometheusEndpoint {
            url: "https://mimir.eu-1.example/prometheus".into(),
            auth,
            headers,
        }
    }

    fn read(secrets: &[(&str, Secret)]) -> BTreeMap<String, Secret> {
        secrets
            .iter()
            .map(|(name, secret)| ((*name).to_owned(), secret.clone()))
            .collect()
    }

    const NAMESPACE: &str = "configrollout-system";

    #[test]
    fn headers_come_literal_or_from_the_auth_secret_or_another() {
        let prometheus = endpoint(
            Some(PrometheusAuth {
                bearer_token_key: Some("token".into()),
                ..auth()
            }),
            vec![
                literal("X-Scope-OrgID", "team-a|team-b"),
                from_secret("X-Api-Key", "eu-1-prometheus", "api-key"),
                from_secret("X-Other", "gateway-keys", "eu-1"),
            ],
        );
        assert_eq!(
            secrets_named(&prometheus).into_iter().collect::<Vec<_>>(),
            ["eu-1-prometheus", "gateway-keys"]
        );
        let secrets = read(&[
            (
                "eu-1-prometheus",
                secret(&[("token", b"t0ken"), ("api-key", b" k3y value\n")]),
            ),
            ("gateway-keys", secret(&[("eu-1", b"other")])),
        ]);
        let credentials = endpoint_credentials(&prometheus, NAMESPACE, &secrets).unwrap();
        assert_eq!(
            credentials.authorization,
            Some(Authorization::Bearer("t0ken".into()))
        );
        assert_eq!(
            credentials.headers,
            [
                ("X-Scope-OrgID".to_owned(), "team-a|team-b".to_owned()),
                ("X-Api-Key".to_owned(), "k3y value".to_owned()),
                ("X-Other".to_owned(), "other".to_owned()),
            ]
        );
        assert!(credentials.secret_headers && credentials.need_https());

        // Literal headers alone: no Secret, and http is fine.
        let tenant = PrometheusEndpoint {
            url: "http://mimir.monitoring:8080/prometheus".into(),
            ..endpoint(None, vec![literal("X-Scope-OrgID", "team-a")])
        };
        assert!(secrets_named(&tenant).is_empty());
        let credentials = endpoint_credentials(&tenant, NAMESPACE, &BTreeMap::new()).unwrap();
        assert_eq!(credentials.headers.len(), 1);
        assert!(!credentials.need_https());
    }

    #[test]
    fn unusable_headers_are_refused_without_quoting_a_value() {
        let keys = secret(&[
            ("ok", b"fine"),
            ("bad", b"s3cr3t\r\nInjected: 1"),
            ("blank", b" \n"),
            ("latin", "s3cr3t\u{e9}".as_bytes()),
        ]);
        let secrets = read(&[("keys", keys)]);
        let cases: Vec<(Vec<PrometheusHeader>, &str)> = vec![
            (
                vec![from_secret("X-Key", "keys", "bad")],
                "Secret configrollout-system/keys key \"bad\" holds characters a header value \
                 cannot have",
            ),
            (
                vec![from_secret("X-Key", "keys", "latin")],
                "key \"latin\" holds characters a header value cannot have",
            ),
            (
                vec![from_secret("X-Key", "keys", "blank")],
                "key \"blank\" is empty",
            ),
            (
                vec![from_secret("X-Key", "keys", "missing")],
                "Secret configrollout-system/keys has no key \"missing\"",
            ),
            (
                vec![from_secret("X-Key", "unread", "ok")],
                "reading Secret configrollout-system/unread: not read",
            ),
            (
                vec![literal("Authorization", "Bearer s3cr3t")],
                "spec.prometheus.headers[0]: Authorization cannot be set",
            ),
            (
                vec![literal("X-A", "1"), literal("transfer-encoding", "chunked")],
                "spec.prometheus.headers[1]: transfer-encoding cannot be set",
            ),
            (
                vec![literal("Authorization: Bearer s3cr3t", "x")],
                "spec.prometheus.headers[0]: the name is not an HTTP header name",
            ),
            (
                vec![literal("X-Tenant", "a"), literal("x-tenant", "b")],
                "spec.prometheus.headers[1]: x-tenant is named twice",
            ),
            (
                vec![literal("X-Tenant", "s3cr3t\n")],
                "spec.prometheus.headers[0]: the value of X-Tenant must be printable ASCII",
            ),
            (
                vec![PrometheusHeader {
                    value: Some("s3cr3t".into()),
                    ..from_secret("X-Key", "keys", "ok")
                }],
                "set exactly one of value and valueFrom",
            ),
            (
                (0..9).map(|i| literal(&format!("X-{i}"), "v")).collect(),
                "at most 8 headers",
            ),
        ];
        for (headers, expected) in cases {
            let error = endpoint_credentials(&endpoint(None, headers), NAMESPACE, &secrets)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains("s3cr3t"), "{error}");
        }
        // A Secret's value over http is refused; a literal one is not.
        let over_http = PrometheusEndpoint {
            url: "http://mimir.monitoring:8080".into(),
            ..endpoint(None, vec![from_secret("X-Key", "keys", "ok")])
        };
        assert_eq!(
            endpoint_credentials(&over_http, NAMESPACE, &secrets),
            Err(CredentialError::SecretHeaderOverHttp)
        );
    }
}
