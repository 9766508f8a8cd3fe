//! Credentials for a Region's Prometheus (`spec.prometheus.auth`): keys of one Secret in
//! the controller's namespace, where tenants cannot write, as for kubeconfigs
//! ([`super::clients`], which reads, caches and rebuilds them when the Secret changes).
//!
//! Values are checked before use (sizes bounded, header-safe), and no error quotes them:
//! errors end up in the gate samples of rollout status, which tenants read.

use k8s_openapi::api::core::v1::Secret;

use configrollout_api::PrometheusAuth;
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
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;
    use configrollout_api::SecretRef;

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
}
