//! Who may use the dashboard at all: the person who started it. It acts with their
//! credentials, and any other local user (a shared bastion, a CI runner, a sidecar) can
//! reach a loopback port, so nothing is served without a session cookie.
//!
//! The dashboard prints a login URL carrying a random login token on the terminal that
//! started it, as notebook servers do. Opening it sets an `HttpOnly; SameSite=Strict`
//! cookie holding another random secret (never shown, never in a URL), and redirects to
//! the page without the token. Every page, stream and action then needs that cookie; the
//! page's own token (`guard`) still guards each action against cross-site requests.

use super::guard::{random_token, same};

/// The session cookie's name, before the port: browsers share cookies between the ports
/// of one host, so each dashboard's cookie is named after its port, and two dashboards
/// (as two users) in one browser do not log each other out.
pub const COOKIE_PREFIX: &str = "configrollout-dashboard-";

/// The login token and the session secret of one dashboard process.
#[derive(Clone)]
pub struct Session {
    cookie_name: String,
    login: String,
    secret: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Session(<redacted>)")
    }
}

/// What a request's query says about logging in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Login {
    /// No `login` parameter.
    NotAsked,
    /// The right login token: set the cookie.
    Accepted,
    /// A `login` parameter with another value.
    Refused,
}

impl Session {
    /// Fresh, random login token and session secret, for the dashboard on `port`.
    pub fn new(port: u16) -> Result<Session, getrandom::Error> {
        Ok(Session {
            cookie_name: format!("{COOKIE_PREFIX}{port}"),
            login: random_token()?,
            secret: random_token()?,
        })
    }

    /// The query string of the login URL (`login=<token>`).
    pub fn login_query(&self) -> String {
        format!("login={}", self.login)
    }

    /// Whether `query` (a URL's query string) logs in.
    pub fn login(&self, query: &str) -> Login {
        match query
            .split('&')
            .find_map(|pair| pair.strip_prefix("login="))
        {
            None => Login::NotAsked,
            Some(token) if same(token, &self.login) => Login::Accepted,
            Some(_) => Login::Refused,
        }
    }

    /// The `Set-Cookie` value that opens the session.
    pub fn set_cookie(&self) -> String {
        format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/",
            self.cookie_name, self.secret
        )
    }

    /// Whether any of the request's `Cookie` headers holds the session's cookie.
    pub fn holds<'a>(&self, cookie_headers: impl IntoIterator<Item = &'a str>) -> bool {
        cookie_headers
            .into_iter()
            .flat_map(|header| header.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| name == self.cookie_name && same(value, &self.secret))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_login_token_logs_in_and_only_the_cookie_it_sets_is_a_session() {
        let session = Session::new(3100).expect("randomness");
        assert_eq!(session.login(""), Login::NotAsked);
        assert_eq!(session.login("values=1"), Login::NotAsked);
        assert_eq!(session.login(&session.login_query()), Login::Accepted);
        assert_eq!(session.login("login=guess"), Login::Refused);
        assert_eq!(session.login("login="), Login::Refused);

        let set = session.set_cookie();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        let cookie = set.split(';').next().expect("name=value");
        assert!(session.holds([cookie]));
        assert!(session.holds(["theme=dark", &format!("other=1; {cookie}")]));
        assert!(!session.holds([] as [&str; 0]));
        assert!(!session.holds([format!("{COOKIE_PREFIX}3100=guess").as_str()]));
        // The login token is not a session.
        assert!(!session.holds([format!("{COOKIE_PREFIX}3100={}", session.login).as_str()]));
        // The same secret under another port's name is not this dashboard's cookie.
        assert!(!session.holds([cookie.replace("3100=", "3101=").as_str()]));
        // Another dashboard's cookie is not this one's.
        let other = Session::new(3101).expect("randomness");
        assert!(!other.holds([cookie]));
        assert!(
            other
                .set_cookie()
                .starts_with(&format!("{COOKIE_PREFIX}3101="))
        );
    }
}
