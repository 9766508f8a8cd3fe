//! What a region's kubeconfig may ask for ([`CredentialPolicy`]) and what is wrong with
//! one ([`KubeconfigProblem`]), in words that quote nothing from the file, including the
//! translation of parser and kube errors into such words.

use std::fmt;

use kube::config::{Kubeconfig, KubeconfigError};

/// Largest kubeconfig read from a Secret. Real ones are a few KiB; the bound keeps a
/// hostile or mistaken Secret from costing the parser more than that.
pub const MAX_KUBECONFIG_BYTES: usize = 1024 * 1024;
/// Longest user or cluster name quoted in an error, so a refusal stays short in status.
const MAX_QUOTED_NAME_CHARS: usize = 63;

/// What a Region's kubeconfig Secret may be and what the kubeconfig may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialPolicy {
    /// The only namespace kubeconfig Secrets are read from: the controller's own, where
    /// tenants cannot write.
    pub controller_namespace: String,
    /// Permit `exec`, `auth-provider`, `tokenFile`, file paths and
    /// `insecure-skip-tls-verify: true` (`--allow-unsafe-kubeconfig`).
    pub allow_unsafe_kubeconfig: bool,
}

impl CredentialPolicy {
    /// Refuses the first user or cluster asking for what this policy does not allow.
    ///
    /// Every entry is checked, not only those of the current context: which entries kube
    /// uses depends on its context selection rules, and a file that is safe whatever
    /// they are needs no reasoning about them.
    pub fn check(&self, kubeconfig: &Kubeconfig) -> Result<(), KubeconfigProblem> {
        if self.allow_unsafe_kubeconfig {
            return Ok(());
        }
        for (index, named) in kubeconfig.auth_infos.iter().enumerate() {
            let Some(user) = named.auth_info.as_ref() else {
                continue;
            };
            let refused = [
                (user.exec.is_some(), UnsafeField::Exec),
                (user.auth_provider.is_some(), UnsafeField::AuthProvider),
                (user.token_file.is_some(), UnsafeField::TokenFile),
                (
                    user.client_certificate.is_some(),
                    UnsafeField::ClientCertificate,
                ),
                (user.client_key.is_some(), UnsafeField::ClientKey),
            ];
            if let Some((_, field)) = refused.into_iter().find(|(present, _)| *present) {
                return Err(KubeconfigProblem::NotAllowed {
                    entry: KubeconfigEntry::new("users", index, &named.name),
                    field,
                });
            }
        }
        for (index, named) in kubeconfig.clusters.iter().enumerate() {
            let Some(cluster) = named.cluster.as_ref() else {
                continue;
            };
            let refused = [
                (
                    cluster.insecure_skip_tls_verify == Some(true),
                    UnsafeField::InsecureSkipTlsVerify,
                ),
                (
                    cluster.certificate_authority.is_some(),
                    UnsafeField::CertificateAuthority,
                ),
            ];
            if let Some((_, field)) = refused.into_iter().find(|(present, _)| *present) {
                return Err(KubeconfigProblem::NotAllowed {
                    entry: KubeconfigEntry::new("clusters", index, &named.name),
                    field,
                });
            }
        }
        Ok(())
    }
}

/// What is wrong with a kubeconfig. No variant holds text from the file other than an
/// entry's (shortened) name, so neither `Display` nor `Debug` can leak a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigProblem {
    /// Larger than [`MAX_KUBECONFIG_BYTES`]; not parsed.
    #[error("it is {size} bytes, more than the {MAX_KUBECONFIG_BYTES} allowed")]
    TooLarge {
        /// Its size in bytes.
        size: usize,
    },
    /// Not UTF-8 text.
    #[error("not UTF-8")]
    NotUtf8,
    /// The parser refused it at a known place.
    #[error("invalid YAML or a wrong field type at line {line} column {column}")]
    InvalidYamlAt {
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
    },
    /// The parser refused it without saying where.
    #[error("invalid YAML or a wrong field type")]
    InvalidYaml,
    /// An entry asks for something the [`CredentialPolicy`] does not allow.
    #[error(
        "{entry}: {field} is not allowed (start the controller with \
         --allow-unsafe-kubeconfig to permit it)"
    )]
    NotAllowed {
        /// The user or cluster entry.
        entry: KubeconfigEntry,
        /// The field it sets.
        field: UnsafeField,
    },
    /// It parses and is allowed, but kube cannot build a client from it. The reason is a
    /// fixed text: kube's own messages may quote the file (a server or proxy URL with
    /// credentials, bytes of a base64 key) or name files of the controller's pod.
    #[error("{reason}")]
    Unusable {
        /// A fixed description.
        reason: &'static str,
    },
}

/// A user or cluster of a kubeconfig, as an error names it: `users[0] "ci"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeconfigEntry {
    /// `users` or `clusters`.
    pub list: &'static str,
    /// Position in that list.
    pub index: usize,
    /// Its name, shortened to a bounded length.
    pub name: String,
}

impl KubeconfigEntry {
    fn new(list: &'static str, index: usize, name: &str) -> Self {
        Self {
            list,
            index,
            name: name.chars().take(MAX_QUOTED_NAME_CHARS).collect(),
        }
    }
}

impl fmt::Display for KubeconfigEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}] {:?}", self.list, self.index, self.name)
    }
}

/// A kubeconfig field the controller refuses unless `--allow-unsafe-kubeconfig` is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsafeField {
    /// `users[].user.exec`: runs a command in the controller's pod.
    Exec,
    /// `users[].user.auth-provider`: provider plugins may run commands (`cmd-path`).
    AuthProvider,
    /// `users[].user.tokenFile`: reads a file of the controller's pod as the token.
    TokenFile,
    /// `users[].user.client-certificate`: a file path.
    ClientCertificate,
    /// `users[].user.client-key`: a file path.
    ClientKey,
    /// `clusters[].cluster.insecure-skip-tls-verify: true`: any server is believed.
    InsecureSkipTlsVerify,
    /// `clusters[].cluster.certificate-authority`: a file path.
    CertificateAuthority,
}

impl fmt::Display for UnsafeField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exec => "exec",
            Self::AuthProvider => "auth-provider",
            Self::TokenFile => "tokenFile",
            Self::ClientCertificate => "client-certificate",
            Self::ClientKey => "client-key",
            Self::InsecureSkipTlsVerify => "insecure-skip-tls-verify",
            Self::CertificateAuthority => "certificate-authority",
        })
    }
}

/// Only the position of a parse error: the parser's message quotes the offending text,
/// which may be a token.
pub(super) fn yaml_problem(error: &KubeconfigError) -> KubeconfigProblem {
    match error {
        KubeconfigError::Parse(parse) => match parse.location() {
            Some(at) if at.line() > 0 => KubeconfigProblem::InvalidYamlAt {
                line: at.line(),
                column: at.column(),
            },
            _ => KubeconfigProblem::InvalidYaml,
        },
        KubeconfigError::KindMismatch | KubeconfigError::ApiVersionMismatch => {
            KubeconfigProblem::Unusable {
                reason: "its YAML documents disagree on kind or apiVersion",
            }
        }
        _ => KubeconfigProblem::InvalidYaml,
    }
}

/// A fixed text per kube configuration error: several of them carry names, URLs, paths
/// or decoding details taken from the file.
pub(super) fn config_problem(error: &KubeconfigError) -> KubeconfigProblem {
    let reason = match error {
        KubeconfigError::CurrentContextNotSet => "it sets no current-context",
        KubeconfigError::LoadContext(_) => "its current-context names no context in the file",
        KubeconfigError::LoadClusterOfContext(_) => {
            "the current context names no cluster in the file"
        }
        KubeconfigError::MissingClusterUrl => "the current context's cluster has no server",
        KubeconfigError::ParseClusterUrl(_) => {
            "the current context's cluster server is not a valid URL"
        }
        KubeconfigError::ParseProxyUrl(_) => "the current context's proxy-url is not a valid URL",
        KubeconfigError::LoadCertificateAuthority(_) => {
            "the certificate authority cannot be loaded (certificate-authority-data must be base64)"
        }
        KubeconfigError::ParseCertificates(_) => {
            "the certificate authority is not PEM-encoded certificates"
        }
        KubeconfigError::LoadClientCertificate(_) => {
            "the client certificate cannot be loaded (client-certificate-data must be base64, \
             and given with client-key-data)"
        }
        KubeconfigError::LoadClientKey(_) => {
            "the client key cannot be loaded (client-key-data must be base64, and given with \
             client-certificate-data)"
        }
        _ => "no client configuration can be built from it",
    };
    KubeconfigProblem::Unusable { reason }
}

/// A fixed text per client build error: kube's messages may quote the proxy URL (which
/// can hold credentials), TLS material errors or credential plugin output.
pub(super) fn client_problem(error: &kube::Error) -> KubeconfigProblem {
    let reason = match error {
        kube::Error::InferKubeconfig(error) => return config_problem(error),
        kube::Error::RustlsTls(_) => {
            "its TLS material is not usable (certificate authority, client certificate or key)"
        }
        kube::Error::Auth(_) => "its credentials are not usable",
        kube::Error::ProxyProtocolUnsupported { .. }
        | kube::Error::ProxyProtocolDisabled { .. } => {
            "its proxy-url uses a protocol this controller does not support"
        }
        _ => "no client can be built from it",
    };
    KubeconfigProblem::Unusable { reason }
}
