//! Several replicas of one gateway (`[store] replicas`, `[store] redis`): what this replica
//! tells the others through Redis ([`cluster`]), and what it does when they tell it something.
//!
//! - An approval decided here ([`Gateway::decide_approval`]) is announced; a replica hearing it
//!   wakes its waiting calls, which read the decision from the database.
//! - A server whose tool list this replica fetched because it changed (its `list_changed`, a
//!   reload that started it, a changed definition pinning held first here) is announced; a
//!   replica hearing it lists that server again and rebuilds its catalog, so a changed
//!   definition is held (or served) on every replica at once, not at their next listing.
//! - After Redis comes back this replica may have missed events: it wakes its waiting calls
//!   and lists every ready server again.
//!
//! Invariants: without Redis nothing here runs and each replica behaves as a single gateway
//! does. Publishing never delays the request that caused it (it runs in the background), and
//! a failed publish costs the other replicas latency only: approvals are polled from the
//! database, tool lists fetched periodically.

use std::sync::{Arc, Weak};

use cluster::{Cluster, Event};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::Gateway;

/// The cluster link `store` asks for, if any. A URL the client refuses is logged (without the
/// URL) and the gateway runs alone.
pub(crate) fn connect(store: &config::StoreConfig) -> Option<Cluster> {
    let url = store.redis.as_ref()?;
    match Cluster::connect(url.expose(), cluster::NAMESPACE) {
        Ok(cluster) => Some(cluster),
        Err(error) => {
            tracing::error!(%error, "cannot use [store] redis; this replica runs alone");
            None
        }
    }
}

/// Tells the replicas that approval `id` was decided, for a process that is not a gateway
/// (`mcpgw approvals approve`). `Ok(false)`: no Redis is configured (the waiting call reads
/// the decision at its next poll of the database).
pub async fn announce_approval(
    store: &config::StoreConfig,
    id: &str,
) -> Result<bool, cluster::ClusterError> {
    let Some(url) = &store.redis else {
        return Ok(false);
    };
    let cluster = Cluster::connect(url.expose(), cluster::NAMESPACE)?;
    if !cluster.wait_up(cluster::COMMAND_TIMEOUT * 2).await {
        return Err(cluster::ClusterError::Down);
    }
    cluster
        .publish(&Event::Approval { id: id.to_owned() })
        .await?;
    Ok(true)
}

/// What `/healthz` says of the replicas.
#[derive(Debug, Serialize)]
pub struct ReplicasHealth {
    /// `[store] replicas`.
    pub replicas: u32,
    /// `off` (no Redis configured: one replica), `ok`, or `degraded` (Redis is unreachable:
    /// this replica serves on alone; approvals and catalog changes of other replicas reach it
    /// by polling, its rate limits are its own).
    pub state: &'static str,
    /// Redis, when configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<cluster::ClusterHealth>,
}

impl Gateway {
    /// Tells the other replicas `event`, in the background. Nothing without Redis.
    pub(crate) fn tell_replicas(&self, event: Event) {
        let Some(cluster) = self.cluster.clone() else {
            return;
        };
        tokio::spawn(async move {
            if let Err(error) = cluster.publish(&event).await {
                tracing::debug!(%error, ?event, "could not tell the other replicas");
            }
        });
    }

    /// The replicas' state for `/healthz`.
    pub fn replicas_health(&self) -> ReplicasHealth {
        let replicas = self.config().store.replicas.get();
        match &self.cluster {
            None => ReplicasHealth {
                replicas,
                state: "off",
                redis: None,
            },
            Some(cluster) => ReplicasHealth {
                replicas,
                state: if cluster.is_up() { "ok" } else { "degraded" },
                redis: Some(cluster.health()),
            },
        }
    }
}

/// Spawns a task that hands each event the other replicas send to `handle`, with what `owner`
/// points to, for as long as it lives. Each layer that acts on events (the gateway here, the
/// HTTP listener's sessions, the sign-in endpoints) has its own. A stretch of missed events (this
/// process fell behind, or lost Redis and subscribed again) arrives as one
/// [`Event::Resubscribed`].
pub(crate) fn on_events<T, F, Fut>(cluster: &Cluster, owner: Weak<T>, mut handle: F)
where
    T: Send + Sync + 'static,
    F: FnMut(Arc<T>, Event) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let mut events = cluster.events();
    tokio::spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(_)) => Event::Resubscribed,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let Some(owner) = owner.upgrade() else {
                return;
            };
            handle(owner, event).await;
        }
    });
}

/// Acts on an event of the other replicas that concerns the gateway itself.
pub(crate) fn act(gateway: &Arc<Gateway>, event: Event) {
    match event {
        Event::Approval { id } => {
            tracing::debug!(approval = id, "another replica decided an approval");
            gateway.approval_waiters.wake();
        }
        Event::Server { name } => {
            let Some(server) = gateway.upstreams.get(&name) else {
                return;
            };
            tracing::debug!(server = %name, "another replica saw a change; listing the server again");
            tokio::spawn(relist(gateway.clone(), vec![server]));
        }
        // The HTTP listener's business (`http::session_owner::act`).
        Event::SessionEnded { .. } => {}
        // Heard by the sign-in endpoints' own listener (`oauth::login::hear_replicas`).
        Event::Login { .. } => {}
        Event::Resubscribed => {
            gateway.approval_waiters.wake();
            let ready: Vec<_> = gateway
                .upstreams
                .servers()
                .iter()
                .filter(|server| matches!(server.status().state, upstream::ServerState::Ready))
                .cloned()
                .collect();
            tokio::spawn(relist(gateway.clone(), ready));
        }
    }
}

/// Lists `servers` again (a failed list keeps its last good version) and rebuilds the catalog
/// once if any was listed.
async fn relist(gateway: Arc<Gateway>, servers: Vec<Arc<upstream::Server>>) {
    let listed =
        futures::future::join_all(servers.iter().map(|server| server.refresh_tools())).await;
    if listed.iter().any(Result::is_ok) {
        gateway.refresh_catalog().await;
    }
}
