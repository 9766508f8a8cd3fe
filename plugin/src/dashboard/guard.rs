//! What keeps other websites from driving the dashboard: the dashboard acts with the
//! caller's credentials, so a page elsewhere that the caller visits must not be able to
//! post to it (CSRF) nor read it through a name that resolves to loopback (DNS
//! rebinding).
//!
//! - Every request must name the dashboard itself in `Host` (its loopback names and the
//!   port it listens on), so a rebound name is refused.
//! - A POST must carry the per-process random token the dashboard's own pages hold, in
//!   the `X-Dashboard-Token` header (a custom header is never sent cross-site without a
//!   CORS preflight, which the dashboard never grants), and, when the browser sends
//!   `Origin`, that origin must be the dashboard's.

/// The header that carries the token on a POST.
pub const TOKEN_HEADER: &str = "x-dashboard-token";

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `Host` is missing or names something else.
    #[error("this dashboard answers only to {allowed}; the request named host {found:?}")]
    Host {
        /// The host names accepted.
        allowed: String,
        /// The Host header received.
        found: String,
    },
    /// `Origin` is another site.
    #[error("actions are accepted only from the dashboard's own pages, not from {0:?}")]
    Origin(String),
    /// The token is missing or wrong.
    #[error("the page's token is missing or stale: reload the page")]
    Token,
}

/// The hosts a dashboard answers to and its token.
#[derive(Clone, Debug)]
pub struct Guard {
    hosts: Vec<String>,
    token: String,
}

/// A fresh token: 32 random bytes, hex.
pub fn random_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

/// Compares in time independent of where the first difference is.
pub(super) fn same(left: &str, right: &str) -> bool {
    left.len() == right.len()
        && left
            .bytes()
            .zip(right.bytes())
            .fold(0_u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

impl Guard {
    /// A guard for a server listening on `address` (`ip:port` as bound), with `token`.
    /// Loopback listeners also answer to `localhost:port`.
    pub fn new(address: std::net::SocketAddr, token: String) -> Guard {
        let port = address.port();
        let mut hosts = vec![address.to_string()];
        if address.ip().is_loopback() {
            hosts.push(format!("localhost:{port}"));
            hosts.push(format!("127.0.0.1:{port}"));
            hosts.push(format!("[::1]:{port}"));
        }
        hosts.dedup();
        Guard { hosts, token }
    }

    /// The token pages embed.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Checks the `Host` header of any request.
    pub fn check_host(&self, host: Option<&str>) -> Result<(), Refusal> {
        let found = host.unwrap_or_default();
        if self
            .hosts
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(found))
        {
            Ok(())
        } else {
            Err(Refusal::Host {
                allowed: self.hosts.join(", "),
                found: found.to_owned(),
            })
        }
    }

    /// Checks a POST: `Host`, `Origin` when sent, and the token.
    pub fn check_post(
        &self,
        host: Option<&str>,
        origin: Option<&str>,
        token: Option<&str>,
    ) -> Result<(), Refusal> {
        self.check_host(host)?;
        if let Some(origin) = origin {
            let own = self
                .hosts
                .iter()
                .any(|allowed| origin.eq_ignore_ascii_case(&format!("http://{allowed}")));
            if !own {
                return Err(Refusal::Origin(origin.to_owned()));
            }
        }
        match token {
            Some(token) if same(token, &self.token) => Ok(()),
            _ => Err(Refusal::Token),
        }
    }
}

/// The fields of an `application/x-www-form-urlencoded` body, in order.
pub fn form_fields(body: &str) -> Vec<(String, String)> {
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut index = 0;
        while index < bytes.len() {
            match bytes[index] {
                b'+' => out.push(b' '),
                b'%' if index + 2 < bytes.len() => {
                    let hex = |byte: u8| char::from(byte).to_digit(16);
                    match (hex(bytes[index + 1]), hex(bytes[index + 2])) {
                        (Some(high), Some(low)) => {
                            out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                            index += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                byte => out.push(byte),
            }
            index += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    body.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => (decode(key), decode(value)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        Guard::new("127.0.0.1:3100".parse().expect("address"), "t0k".to_owned())
    }

    #[test]
    fn only_the_dashboards_own_host_names_are_answered() {
        let guard = guard();
        for host in ["127.0.0.1:3100", "localhost:3100", "LOCALHOST:3100"] {
            assert_eq!(guard.check_host(Some(host)), Ok(()), "{host}");
        }
        for host in [
            None,
            Some("evil.example:3100"),
            Some("127.0.0.1:3101"),
            Some("localhost"),
        ] {
            assert!(
                matches!(guard.check_host(host), Err(Refusal::Host { .. })),
                "{host:?}"
            );
        }
    }

    #[test]
    fn a_post_needs_the_token_and_no_foreign_origin() {
        let guard = guard();
        let host = Some("127.0.0.1:3100");
        assert_eq!(guard.check_post(host, None, Some("t0k")), Ok(()));
        assert_eq!(
            guard.check_post(host, Some("http://localhost:3100"), Some("t0k")),
            Ok(())
        );
        assert_eq!(
            guard.check_post(host, Some("https://evil.example"), Some("t0k")),
            Err(Refusal::Origin("https://evil.example".to_owned()))
        );
        assert_eq!(guard.check_post(host, None, None), Err(Refusal::Token));
        assert_eq!(
            guard.check_post(host, None, Some("t0j")),
            Err(Refusal::Token)
        );
        assert!(matches!(
            guard.check_post(Some("rebound.example:3100"), None, Some("t0k")),
            Err(Refusal::Host { .. })
        ));
    }

    #[test]
    fn tokens_are_random() {
        let first = random_token().expect("token");
        assert_eq!(first.len(), 64);
        assert_ne!(first, random_token().expect("token"));
    }

    #[test]
    fn form_bodies_are_decoded() {
        assert_eq!(
            form_fields("stage=prod&reason=looks+good%21%20%C3%A9&empty="),
            vec![
                ("stage".to_owned(), "prod".to_owned()),
                ("reason".to_owned(), "looks good! é".to_owned()),
                ("empty".to_owned(), String::new()),
            ]
        );
        assert_eq!(
            form_fields("a=%zz&b=%4"),
            vec![
                ("a".to_owned(), "%zz".to_owned()),
                ("b".to_owned(), "%4".to_owned())
            ]
        );
    }
}
