//! The HTTP side: hyper serves, this file routes. Every request must name the dashboard
//! in `Host` and, but for the login URL and the static assets, hold the session cookie
//! (see `session`); a POST must also carry the page's token (see `guard`). Pages are rendered
//! from the watched rollouts; `/stream` and `/r/NS/NAME/stream` are server-sent event
//! streams that send the page's live part again whenever the watch sees a change.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::ResourceExt;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tracing::{debug, warn};

use super::guard::{Guard, TOKEN_HEADER, form_fields};
use super::history::history;
use super::layout::{CSS, JS, page, problem};
use super::list::rollouts_table;
use super::rollout::rollout_live;
use super::session::{Login, Session};
use super::store::Store;
use super::{actions, reads};
use crate::hub::Hub;
use configrollout_api::ConfigRollout;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Connections served at once (each open page holds one for its event stream).
const MAX_CONNECTIONS: usize = 128;
/// Time a client has to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest POST body accepted.
const MAX_BODY: usize = 8 * 1024;
/// Changes arriving this close together are sent as one update.
const COALESCE: Duration = Duration::from_millis(150);
/// A comment on an idle stream, so that a closed page is noticed.
const KEEPALIVE: Duration = Duration::from_secs(15);

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// What every request is served from.
pub struct Dashboard {
    /// The caller's client (and `--request-timeout`).
    pub hub: Hub,
    /// The watched rollouts.
    pub store: Arc<Store>,
    /// Host and token checks.
    pub guard: Guard,
    /// The login token and the session cookie.
    pub session: Session,
    /// Where the rollouts are listed, in words (`all namespaces`, `namespace team`).
    pub scope: String,
}

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed_unsync()
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert("content-security-policy", HeaderValue::from_static(CSP));
    response
}

fn html(status: StatusCode, body: String) -> Response<Body> {
    respond(status, "text/html; charset=utf-8", body)
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    respond(status, "text/plain; charset=utf-8", body)
}

/// One server-sent event carrying `data` (each line its own `data:` field). A browser
/// ends a line at CR, LF or CRLF alike, so all three are split on: a bare CR in text a
/// tenant wrote cannot start a field of its own (`data: ALL COMPLETE`, `event: ...`).
pub fn sse_event(data: &str) -> String {
    let mut out = String::with_capacity(data.len() + 16);
    for line in data.replace("\r\n", "\n").split(['\r', '\n']) {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// Whether `since`, the version a rollout page says it shows, can be one: a
/// resourceVersion as the API server writes them (digits, bounded), so that a crafted
/// query is neither echoed into a page nor kept.
fn valid_since(since: &str) -> bool {
    !since.is_empty() && since.len() <= 32 && since.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A stream response that sends `render()` at once, then again after each change of
/// the store when it differs from what was sent last; `render` returns `None` when it
/// knows nothing changed for it.
fn stream<F, Fut>(mut changes: watch::Receiver<u64>, render: F) -> Response<Body>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Option<String>> + Send,
{
    struct State<F> {
        changes: watch::Receiver<u64>,
        render: F,
        last: Option<String>,
    }
    changes.mark_changed();
    let state = State {
        changes,
        render,
        last: None,
    };
    let frames = futures::stream::unfold(state, |mut state| async move {
        loop {
            tokio::select! {
                changed = state.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                () = tokio::time::sleep(KEEPALIVE) => {
                    let ping = Frame::data(Bytes::from_static(b": keep-alive\n\n"));
                    return Some((Ok::<_, Infallible>(ping), state));
                }
            }
            if state.last.is_some() {
                tokio::time::sleep(COALESCE).await;
            }
            state.changes.borrow_and_update();
            let Some(view) = (state.render)().await else {
                continue;
            };
            if state.last.as_deref() != Some(view.as_str()) {
                let frame = Frame::data(Bytes::from(sse_event(&view)));
                state.last = Some(view);
                return Some((Ok(frame), state));
            }
        }
    });
    let mut response = respond(StatusCode::OK, "text/event-stream", Bytes::new());
    *response.body_mut() = BodyExt::boxed_unsync(StreamBody::new(frames));
    response
}

fn list_view(dashboard: &Dashboard) -> String {
    let rollouts = dashboard.store.all();
    let refs: Vec<&ConfigRollout> = rollouts.iter().collect();
    let mut view = rollouts_table(&refs, &dashboard.scope);
    if let Some(error) = dashboard.store.last_error() {
        view.insert_str(
            0,
            &format!(
                r#"<p class="refusal">watching configrollouts: {}</p>"#,
                super::html::escape(&error)
            ),
        );
    }
    view
}

/// A rollout's path, split: `/r/NS/NAME[/rest]`.
fn rollout_path(path: &str) -> Option<(String, String, Option<String>)> {
    let mut parts = path.strip_prefix("/r/")?.split('/');
    let valid = |part: &str| {
        !part.is_empty()
            && part.len() <= 253
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let namespace = parts.next().filter(|p| valid(p))?;
    let name = parts.next().filter(|p| valid(p))?;
    let rest = parts.next().map(str::to_owned);
    if parts.next().is_some() {
        return None;
    }
    Some((namespace.to_owned(), name.to_owned(), rest))
}

async fn rollout_view(dashboard: &Dashboard, rollout: &ConfigRollout) -> String {
    let events = reads::events(&dashboard.hub, rollout).await;
    rollout_live(rollout, &events)
}

async fn route(dashboard: Arc<Dashboard>, request: Request<Incoming>) -> Response<Body> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Err(refusal) = dashboard.guard.check_host(host.as_deref()) {
        return text(StatusCode::MISDIRECTED_REQUEST, format!("{refusal}\n"));
    }
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    if let Some(refused) = session_refusal(&dashboard.session, &request, &path, &query) {
        return refused;
    }
    match (request.method().clone(), path.as_str()) {
        (Method::GET, "/") => {
            let view = list_view(&dashboard);
            html(
                StatusCode::OK,
                page("Rollouts", dashboard.guard.token(), "/stream", &view, ""),
            )
        }
        (Method::GET, "/stream") => {
            let changes = dashboard.store.subscribe();
            let source = dashboard.clone();
            stream(changes, move || {
                let view = list_view(&source);
                async move { Some(view) }
            })
        }
        (Method::GET, "/assets/dashboard.css") => {
            respond(StatusCode::OK, "text/css; charset=utf-8", CSS)
        }
        (Method::GET, "/assets/dashboard.js") => {
            respond(StatusCode::OK, "text/javascript; charset=utf-8", JS)
        }
        (Method::GET, _) => match rollout_path(&path) {
            Some((namespace, name, None)) => {
                // The watch may not have listed it yet (just started): ask once.
                let rollout = match dashboard.store.get(&namespace, &name) {
                    Some(rollout) => Some(rollout),
                    None => dashboard
                        .hub
                        .in_namespace(&namespace)
                        .rollout(&name)
                        .await
                        .ok(),
                };
                let Some(rollout) = rollout else {
                    return html(
                        StatusCode::NOT_FOUND,
                        problem(
                            &format!("{namespace}/{name}"),
                            &format!(
                                "no configrollout {namespace}/{name} among those you may list ({})",
                                dashboard.scope
                            ),
                        ),
                    );
                };
                let show_values = query.split('&').any(|pair| pair == "values=1");
                let (live, diffs) = tokio::join!(
                    rollout_view(&dashboard, &rollout),
                    reads::diffs(&dashboard.hub, &rollout)
                );
                let rest = history(&rollout, &diffs, show_values);
                // The stream is told which version the page shows, so that it does not
                // replace the live part with the same view as soon as it connects (which
                // would take a form from under the cursor of someone who already clicked).
                let mut stream_href =
                    format!("{}/stream", super::html::rollout_href(&namespace, &name));
                if let Some(version) = rollout.resource_version().filter(|v| valid_since(v)) {
                    stream_href.push_str("?since=");
                    stream_href.push_str(&version);
                }
                html(
                    StatusCode::OK,
                    page(
                        &format!("{namespace}/{name}"),
                        dashboard.guard.token(),
                        &stream_href,
                        &live,
                        &rest,
                    ),
                )
            }
            Some((namespace, name, Some(rest))) if rest == "stream" => {
                let changes = dashboard.store.subscribe();
                let source = dashboard.clone();
                let mut last_version: Option<String> = query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("since="))
                    .filter(|since| valid_since(since))
                    .map(str::to_owned);
                stream(changes, move || {
                    let source = source.clone();
                    let rollout = source.store.get(&namespace, &name);
                    let version = rollout.as_ref().and_then(|r| r.resource_version());
                    let unchanged = version.is_some() && version == last_version;
                    last_version = version;
                    let gone = format!(
                        r#"<p class="refusal">configrollout {namespace}/{name} is gone (deleted, or you may no longer list it)</p>"#
                    );
                    async move {
                        match rollout {
                            _ if unchanged => None,
                            Some(rollout) => Some(rollout_view(&source, &rollout).await),
                            None => Some(gone),
                        }
                    }
                })
            }
            _ => text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
        },
        (Method::POST, _) => {
            let header_text = |name: &str| {
                request
                    .headers()
                    .get(name)
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned)
            };
            let origin = header_text(header::ORIGIN.as_str());
            let token = header_text(TOKEN_HEADER);
            if let Err(refusal) =
                dashboard
                    .guard
                    .check_post(host.as_deref(), origin.as_deref(), token.as_deref())
            {
                return text(StatusCode::FORBIDDEN, format!("{refusal}\n"));
            }
            let Some((namespace, name, Some(verb))) = rollout_path(&path) else {
                return text(StatusCode::NOT_FOUND, "not found\n".to_owned());
            };
            if !actions::VERBS.contains(&verb.as_str()) {
                return text(StatusCode::NOT_FOUND, format!("no action {verb:?}\n"));
            }
            let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => {
                    return text(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "the form is too large\n".to_owned(),
                    );
                }
            };
            let fields = form_fields(&String::from_utf8_lossy(&body));
            let (status, answer) =
                actions::perform(&dashboard.hub, &namespace, &name, &verb, &fields).await;
            text(status, answer + "\n")
        }
        _ => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".to_owned(),
        ),
    }
}

/// What to answer instead of serving the request, if anything: the login URL sets the
/// cookie and redirects to the page without the token; anything else but the static
/// assets needs the cookie.
fn session_refusal(
    session: &Session,
    request: &Request<Incoming>,
    path: &str,
    query: &str,
) -> Option<Response<Body>> {
    match session.login(query) {
        Login::Accepted if request.method() == Method::GET => {
            let mut response = text(StatusCode::SEE_OTHER, "logged in\n".to_owned());
            let headers = response.headers_mut();
            if let Ok(location) = HeaderValue::from_str(path) {
                headers.insert(header::LOCATION, location);
            }
            if let Ok(cookie) = HeaderValue::from_str(&session.set_cookie()) {
                headers.insert(header::SET_COOKIE, cookie);
            }
            return Some(response);
        }
        Login::Accepted | Login::Refused => {
            return Some(text(
                StatusCode::FORBIDDEN,
                "this login link is not this dashboard's: open the URL `kubectl configrollout \
                 dashboard` printed when it started\n"
                    .to_owned(),
            ));
        }
        Login::NotAsked => {}
    }
    let cookies = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok());
    if path.starts_with("/assets/") || session.holds(cookies) {
        return None;
    }
    Some(text(
        StatusCode::UNAUTHORIZED,
        "not logged in: open the URL `kubectl configrollout dashboard` printed when it \
         started (it carries a login token); the dashboard acts as the person who started it \
         and serves no one else\n"
            .to_owned(),
    ))
}

/// Serves until the process is interrupted.
pub async fn serve(listener: TcpListener, dashboard: Arc<Dashboard>) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .keep_alive(true);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = connections.clone().acquire_owned().await else {
            break;
        };
        match listener.accept().await {
            Ok((stream, peer)) => {
                let dashboard = dashboard.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let dashboard = dashboard.clone();
                    async move { Ok::<_, Infallible>(route(dashboard, request).await) }
                });
                let connection = http.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        debug!(%peer, %error, "dashboard connection ended badly");
                    }
                    drop(permit);
                });
            }
            Err(error) => {
                warn!(%error, "accepting a dashboard connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_is_its_own_data_field() {
        assert_eq!(sse_event("<p>a</p>"), "data: <p>a</p>\n\n");
        assert_eq!(sse_event("a\r\nb"), "data: a\ndata: b\n\n");
        // A bare CR ends a line in the browser: it never starts a field of its own.
        let event = sse_event("a\rdata: ALL COMPLETE\revent: x");
        assert_eq!(
            event,
            "data: a\ndata: data: ALL COMPLETE\ndata: event: x\n\n"
        );
        assert!(
            event
                .lines()
                .all(|line| line.is_empty() || line.starts_with("data: "))
        );
    }

    #[test]
    fn only_a_resource_version_is_taken_as_since() {
        assert!(valid_since("123456"));
        assert!(!valid_since(""));
        assert!(!valid_since("1\"><script>"));
        assert!(!valid_since(&"9".repeat(33)));
    }

    #[test]
    fn rollout_paths_accept_names_only() {
        assert_eq!(
            rollout_path("/r/team/app"),
            Some(("team".to_owned(), "app".to_owned(), None))
        );
        assert_eq!(
            rollout_path("/r/team/app/approve"),
            Some((
                "team".to_owned(),
                "app".to_owned(),
                Some("approve".to_owned())
            ))
        );
        for bad in [
            "/r/team",
            "/r/Team/app",
            "/r/team/app/x/y",
            "/r/../app",
            "/x/team/app",
        ] {
            assert_eq!(rollout_path(bad), None, "{bad}");
        }
    }
}
