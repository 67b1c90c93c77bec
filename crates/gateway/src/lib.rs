//! The composition root: upstream connections + catalog + the MCP front end, wired together.
//!
//! [`Gateway`] owns the [`upstream::Upstreams`] and the current [`catalog::Catalog`] snapshot.
//! The snapshot is rebuilt (never mutated) whenever a server's tool list changes, and swapped in
//! atomically, so a search or call always sees one consistent catalog.
//!
//! Architecture invariants:
//! - The front end never blocks on a slow upstream except for a call to that upstream, bounded
//!   by its timeout.
//! - Upstream text is marked as data before it reaches a client.
//! - Errors crossing the MCP edge go through [`front`]'s single mapping; internals never leak.

mod front;
mod meta;
mod result;
mod serve;

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use catalog::{Catalog, ServerTools};
pub use front::Front;
pub use serve::{serve_http, serve_stdio};
use tokio::sync::mpsc;
use upstream::{ToolsChanged, Upstreams};

pub struct Gateway {
    config: config::Config,
    upstreams: Upstreams,
    catalog: RwLock<Arc<Catalog>>,
}

impl Gateway {
    /// Builds the gateway; nothing connects yet. Call [`Gateway::start`] next.
    pub fn new(config: config::Config) -> Arc<Self> {
        let (changes_tx, changes_rx) = mpsc::unbounded_channel();
        let upstreams = Upstreams::new(&config, changes_tx);
        let gateway = Arc::new(Self {
            config,
            upstreams,
            catalog: RwLock::new(Arc::new(Catalog::build(&[]).0)),
        });
        // Hold only a weak reference: the listener ends when the gateway is dropped.
        tokio::spawn(watch_changes(Arc::downgrade(&gateway), changes_rx));
        gateway
    }

    /// Connects every server concurrently and builds the first catalog. Returns when each server
    /// is ready or failed; `on_settled` reports each as it settles.
    pub async fn start(self: &Arc<Self>, on_settled: impl Fn(&upstream::Server) + Send + Sync) {
        self.upstreams.connect_all(on_settled).await;
        self.rebuild_catalog();
        tokio::spawn(retry_failed(Arc::downgrade(self)));
    }

    pub fn config(&self) -> &config::Config {
        &self.config
    }

    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// The current catalog snapshot.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Rebuilds the catalog from every server's last good tool list, in configuration order.
    pub fn rebuild_catalog(&self) {
        let lists: Vec<ServerTools> = self
            .upstreams
            .servers()
            .iter()
            .map(|server| ServerTools {
                server: server.name().to_owned(),
                description: server.config().description.clone(),
                tools: server
                    .tools()
                    .map(|tools| tools.as_ref().clone())
                    .unwrap_or_default(),
            })
            .collect();
        let (catalog, problems) = Catalog::build(&lists);
        for problem in problems {
            tracing::warn!(?problem, "skipped an upstream tool");
        }
        tracing::debug!(tools = catalog.tools().len(), "catalog rebuilt");
        *self
            .catalog
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(catalog);
    }

    /// Ends every upstream session and child process.
    pub async fn shutdown(&self) {
        self.upstreams.shutdown().await;
    }
}

/// First and longest wait between reconnect attempts for a server that is down.
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Reconnects servers that are down, with exponential backoff per server, so a server that was
/// unreachable at startup joins the catalog once it comes up. (A server whose session dropped
/// while idle is reconnected by the next call to it; this loop is for the ones nobody can call
/// because their tools were never listed.)
async fn retry_failed(gateway: std::sync::Weak<Gateway>) {
    let mut next_try: HashMap<String, (Instant, Duration)> = HashMap::new();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        let now = Instant::now();
        for server in gateway.upstreams.servers() {
            let failed = matches!(server.status().state, upstream::ServerState::Failed { .. });
            if !failed {
                next_try.remove(server.name());
                continue;
            }
            let (due, wait) = *next_try
                .entry(server.name().to_owned())
                .or_insert((now + RETRY_FIRST, RETRY_FIRST));
            if now < due {
                continue;
            }
            let wait = (wait * 2).min(RETRY_MAX);
            next_try.insert(server.name().to_owned(), (now + wait, wait));
            let server = server.clone();
            let gateway = gateway.clone();
            tokio::spawn(async move {
                if server.refresh_tools().await.is_ok() {
                    tracing::info!(server = server.name(), "server is back");
                    gateway.rebuild_catalog();
                }
            });
        }
    }
}

async fn watch_changes(
    gateway: std::sync::Weak<Gateway>,
    mut changes: mpsc::UnboundedReceiver<ToolsChanged>,
) {
    while let Some(first) = changes.recv().await {
        // Servers often announce several changes at once: coalesce what is already queued.
        let mut servers = vec![first.server];
        while let Ok(more) = changes.try_recv() {
            if !servers.contains(&more.server) {
                servers.push(more.server);
            }
        }
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        for name in servers {
            if let Some(server) = gateway.upstreams.get(&name) {
                let server = server.clone();
                let gateway = gateway.clone();
                tokio::spawn(async move {
                    if server.refresh_tools().await.is_ok() {
                        gateway.rebuild_catalog();
                    }
                });
            }
        }
    }
}
