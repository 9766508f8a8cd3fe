//! `kubectl configrollout dashboard`: a local web UI on the caller's kubeconfig, and
//! nothing else. It can show and do exactly what the caller may: every read and every
//! action is an API call with their credentials, and a refusal is shown as the API server
//! words it. It listens on loopback by default; pages carry a per-process random token
//! that actions must send back, and requests must name the dashboard in `Host`, so a
//! website the caller visits can neither drive it nor read it.
//!
//! Pure, unit-tested renderings: `html` (escaping), `layout` (the page shell),
//! `list` (the Rollouts table), `rollout` (one rollout's live view), `chart` (a gate
//! window as SVG), `timeline` (Events), `history` (revisions and key diffs), `guard`
//! (Host, Origin and token checks, form decoding). With IO: `store` (the watch),
//! `reads` (Events and stored revisions), `actions` (the plugin's commands) and
//! `server` (routes and event streams). Assets are embedded (`assets/`).

mod actions;
pub mod chart;
pub mod guard;
pub mod history;
pub mod html;
pub mod layout;
pub mod list;
mod reads;
pub mod rollout;
mod server;
pub mod session;
mod store;
pub mod timeline;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use kube::api::{Api, ListParams};

use super::hub::Hub;
use super::{CliError, EXIT_COMPLETE};
use configrollout_api::ConfigRollout;

/// Serves the dashboard until interrupted. `namespaced`: the caller named a namespace
/// (`-n`), so only its rollouts are shown; otherwise every namespace when the caller
/// may list rollouts cluster-wide, else the context's namespace.
pub(super) async fn run(
    hub: Hub,
    namespaced: bool,
    address: IpAddr,
    port: u16,
) -> Result<u8, CliError> {
    let (api, scope): (Api<ConfigRollout>, String) = if namespaced {
        (
            Api::namespaced(hub.client.clone(), &hub.namespace),
            format!("namespace {}", hub.namespace),
        )
    } else {
        let all: Api<ConfigRollout> = Api::all(hub.client.clone());
        match hub
            .call(
                "listing configrollouts in every namespace",
                all.list(&ListParams::default().limit(1)),
            )
            .await
        {
            Ok(_) => (all, "all namespaces".to_owned()),
            Err(CliError::Api { code: 403, .. }) => (
                Api::namespaced(hub.client.clone(), &hub.namespace),
                format!("namespace {}", hub.namespace),
            ),
            Err(error) => return Err(error),
        }
    };
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(address, port))
        .await
        .map_err(|e| CliError::Message(format!("listening on {address}:{port}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::Message(format!("listening on {address}:{port}: {e}")))?;
    let token = guard::random_token()
        .map_err(|e| CliError::Message(format!("drawing the dashboard's token: {e}")))?;
    let session = session::Session::new(bound.port())
        .map_err(|e| CliError::Message(format!("drawing the dashboard's login token: {e}")))?;
    let login_query = session.login_query();
    let user = hub
        .whoami()
        .await
        .unwrap_or_else(|_| "(your kubeconfig's user)".to_owned());
    if !address.is_loopback() {
        eprintln!(
            "warning: listening on {address}, not loopback: whoever reaches it acts as {user}"
        );
    }
    let store = store::Store::spawn(api);
    let dashboard = Arc::new(server::Dashboard {
        hub,
        store,
        guard: guard::Guard::new(bound, token),
        session,
        scope: scope.clone(),
    });
    println!(
        "kubectl configrollout dashboard: http://{bound}/?{login_query} (as {user}, rollouts in {scope}; \
         open this URL: it logs your browser in and is the only way in; Ctrl-C stops it)"
    );
    tokio::select! {
        () = server::serve(listener, dashboard) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(EXIT_COMPLETE)
}
