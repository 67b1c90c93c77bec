//! MCP client connections to upstream servers: stdio children, Streamable HTTP, legacy HTTP+SSE.
//!
//! Entry point: [`Upstreams`], built from the enabled servers of a [`config::Config`]. Each
//! [`Server`] owns at most one live [`rmcp`] client session, (re)connects it on demand, remembers
//! the protocol era it negotiated, and keeps its last good tool list.
//!
//! Architecture invariants:
//! - One server never blocks another: every connect and request is bounded by that server's own
//!   timeout, and servers connect concurrently.
//! - A `tools/call` is sent at most twice, and the second time only when the first attempt never
//!   reached a live session (the session was already gone, or the server answered "unknown session"
//!   before processing). Any other failure is returned, because a retry could repeat a side effect.
//! - A stdio child runs in its own process group; the group is killed when the session ends, so
//!   grandchildren (`node` under `npx`, `python` under `uvx`) never outlive the gateway.
//! - Every HTTP request goes through a client built by `netguard::guarded_client_builder` with
//!   the server's policy (`[network] allow` plus its `allow_private_network`), and every URL is
//!   checked with `netguard::check_url` before its first request: the configured one, an SSE
//!   endpoint, each OAuth endpoint. A refusal is the server's [`UpstreamError::Refused`].
//! - Secret header and environment values are resolved at connect time and never logged; OAuth
//!   tokens live in the [`oauth::OAuthStore`] the caller provides, are read at each request, and
//!   are never logged either.

mod connect;
mod error;
mod http;
pub mod oauth;
mod server;
pub mod sse;
mod stdio;

use std::sync::Arc;

pub use error::UpstreamError;
use oauth::OAuthStore;
pub use server::{Era, Server, ServerState, ServerStatus};
use tokio::sync::mpsc;

/// Every enabled upstream server of one configuration, in configuration order.
pub struct Upstreams {
    servers: Vec<Arc<Server>>,
}

/// Sent when a server's tool list may have changed (it reconnected, or said `list_changed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolsChanged {
    pub server: String,
}

impl Upstreams {
    /// Builds handles for the enabled servers; nothing connects until [`Upstreams::connect_all`]
    /// or the first request. `network` is the global policy (`[network] allow`); each server
    /// connects under `network.for_server(name, allow_private_network)`. `changes` receives a
    /// message whenever a server's tools may differ. `oauth` keeps the tokens of servers
    /// configured for OAuth; without it they cannot connect (and say why).
    pub fn new(
        config: &config::Config,
        network: &netguard::Policy,
        changes: mpsc::UnboundedSender<ToolsChanged>,
        oauth: Option<Arc<dyn OAuthStore>>,
    ) -> Self {
        let servers = config
            .servers
            .iter()
            .filter(|s| s.enabled)
            .map(|s| {
                let policy = Arc::new(network.for_server(s.name.as_str(), s.allow_private_network));
                Arc::new(Server::new(
                    s.clone(),
                    policy,
                    changes.clone(),
                    oauth.clone(),
                    config.policy.limits.response_bytes,
                ))
            })
            .collect();
        Self { servers }
    }

    pub fn servers(&self) -> &[Arc<Server>] {
        &self.servers
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.name() == name)
    }

    /// Connects every server concurrently and fetches its tool list. Returns when each server is
    /// ready or has failed (each bounded by its own timeout); failures are recorded in the
    /// server's state, never returned, so one dead server cannot fail the others.
    /// `on_settled` is called as each server settles (for progress display).
    pub async fn connect_all(&self, on_settled: impl Fn(&Server) + Send + Sync) {
        let on_settled = &on_settled;
        let tasks = self.servers.iter().map(|server| async move {
            // The error is already in the server's state.
            let _ = server.refresh_tools().await;
            on_settled(server);
        });
        futures::future::join_all(tasks).await;
    }

    /// Ends every session and child process group. Safe to call more than once.
    pub async fn shutdown(&self) {
        let tasks = self.servers.iter().map(|s| s.disconnect());
        futures::future::join_all(tasks).await;
    }
}
