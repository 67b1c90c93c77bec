//! Change notifications to connected clients.
//!
//! Who listens: every legacy session (stdio, or an HTTP `Mcp-Session-Id`) from its
//! `notifications/initialized` on, and every 2026-07-28 `subscriptions/listen` stream while it
//! is open. Sessions are held by their `Peer` handle, which does not keep a session alive, and
//! are dropped once their transport is closed; listen streams leave when they end.
//!
//! What they hear: `notifications/tools/list_changed` after a new catalog is published, and
//! only by clients whose `tools/list` result differs from the one they were last told of (a
//! digest per client of the very result it would get: a search-mode client hears only of
//! changes to what it lists; a profile hides changes to tools it does not show). Resource and
//! prompt list changes are passed on once the gateway has listed them again. Changes are
//! coalesced: a burst within [`DEBOUNCE`] is one notification.
//!
//! Resource subscriptions ride on the same listeners: a legacy session's `resources/subscribe`
//! and a listen stream's `resourceSubscriptions` each hold one subscription on the owning
//! upstream ([`upstream::Server::subscribe_resource`], counted there), released when the client
//! unsubscribes, its stream ends or its session is found closed. An upstream's
//! `notifications/resources/updated` reaches, under the URI the client subscribed to, exactly the
//! listeners holding that resource on that upstream session (same server, same principal).

use std::{
    collections::{HashMap, HashSet},
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use rmcp::{Peer, RoleServer, service::SubscriptionSink};
use tokio::sync::mpsc;
use upstream::{ListKind, ResourceUpdated, Server};

use crate::{Gateway, principal::Principal, sync::lock};

/// Changes within this window after the first are announced together.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(250);

/// The clients to tell about changes.
pub(crate) struct Listeners {
    inner: Mutex<Inner>,
    kick: mpsc::UnboundedSender<ListKind>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    listeners: HashMap<u64, Listener>,
}

struct Listener {
    target: Target,
    principal: Principal,
    /// The fingerprint of the tool list this client was last told of; `None` when it does not
    /// want to hear about tools.
    tools: Option<u64>,
    /// The resources this client subscribed to, by the URI it knows.
    resources: HashMap<String, Held>,
}

/// One subscription held on an upstream for a client.
pub(crate) struct Held {
    pub(crate) upstream: Arc<Server>,
    /// The resource's URI on the upstream.
    pub(crate) original: String,
}

impl Held {
    /// Gives the subscription back to the upstream (in the background).
    fn release(self) {
        tokio::spawn(async move { self.upstream.unsubscribe_resource(&self.original).await });
    }

    fn matches(&self, update: &ResourceUpdated) -> bool {
        self.original == update.uri
            && self.upstream.name() == update.server
            && self.upstream.principal() == update.principal
    }
}

#[derive(Clone)]
enum Target {
    Session(Peer<RoleServer>),
    Subscription(SubscriptionSink),
}

impl Listeners {
    /// The registry, and the receiving end [`deliver`] reads.
    pub(crate) fn new() -> (Self, mpsc::UnboundedReceiver<ListKind>) {
        let (kick, kicked) = mpsc::unbounded_channel();
        (
            Self {
                inner: Mutex::new(Inner::default()),
                kick,
            },
            kicked,
        )
    }

    /// A list may have changed: its listeners hear of it after [`DEBOUNCE`].
    pub(crate) fn changed(&self, list: ListKind) {
        let _ = self.kick.send(list);
    }

    /// Adds a legacy session, knowing the tool list `principal` sees now.
    pub(crate) fn add_session(
        &self,
        gateway: &Arc<Gateway>,
        peer: Peer<RoleServer>,
        principal: Principal,
    ) -> u64 {
        let tools = Some(fingerprint(gateway, &principal));
        self.add(Listener {
            target: Target::Session(peer),
            principal,
            tools,
            resources: HashMap::new(),
        })
    }

    /// Adds a `subscriptions/listen` stream, holding the subscriptions in `resources`; remove
    /// it with [`Listeners::remove`] when it ends.
    pub(crate) fn add_subscription(
        &self,
        gateway: &Arc<Gateway>,
        sink: SubscriptionSink,
        principal: Principal,
        tools: bool,
        resources: HashMap<String, Held>,
    ) -> u64 {
        let tools = tools.then(|| fingerprint(gateway, &principal));
        self.add(Listener {
            target: Target::Subscription(sink),
            principal,
            tools,
            resources,
        })
    }

    /// Removes a listener and gives back the subscriptions it held.
    pub(crate) fn remove(&self, id: u64) {
        let removed = lock(&self.inner).listeners.remove(&id);
        if let Some(listener) = removed {
            listener.resources.into_values().for_each(Held::release);
        }
    }

    /// Records that listener `id` holds a subscription to `shown`. When it is unknown (a
    /// session that never initialized, or is gone) or already holds one, `held` is given back
    /// at once; the answer says whether it was kept.
    pub(crate) fn hold(&self, id: Option<u64>, shown: String, held: Held) -> bool {
        let mut inner = lock(&self.inner);
        let listener = id.and_then(|id| inner.listeners.get_mut(&id));
        match listener {
            Some(listener) if !listener.resources.contains_key(&shown) => {
                listener.resources.insert(shown, held);
                true
            }
            _ => {
                drop(inner);
                held.release();
                false
            }
        }
    }

    /// Listener `id` no longer wants `shown`; false when it held no such subscription.
    pub(crate) fn unhold(&self, id: Option<u64>, shown: &str) -> bool {
        let held = {
            let mut inner = lock(&self.inner);
            id.and_then(|id| inner.listeners.get_mut(&id))
                .and_then(|listener| listener.resources.remove(shown))
        };
        held.map(Held::release).is_some()
    }

    /// Passes an upstream's resource update to the listeners holding that resource.
    pub(crate) fn resource_updated(&self, update: &ResourceUpdated) {
        let mut sends = Vec::new();
        {
            let mut inner = lock(&self.inner);
            prune(&mut inner);
            for listener in inner.listeners.values() {
                for (shown, held) in &listener.resources {
                    if held.matches(update) {
                        sends.push((listener.target.clone(), shown.clone()));
                    }
                }
            }
        }
        for (target, shown) in sends {
            tokio::spawn(async move {
                let sent = match &target {
                    Target::Session(peer) => peer
                        .notify_resource_updated(
                            rmcp::model::ResourceUpdatedNotificationParam::new(shown),
                        )
                        .await
                        .map_err(|error| error.to_string()),
                    Target::Subscription(sink) => sink
                        .notify_resource_updated(shown)
                        .await
                        .map_err(|error| error.to_string()),
                };
                if let Err(error) = sent {
                    tracing::debug!(%error, "could not pass on a resource update");
                }
            });
        }
    }

    fn add(&self, listener: Listener) -> u64 {
        let mut inner = lock(&self.inner);
        inner.next += 1;
        let id = inner.next;
        inner.listeners.insert(id, listener);
        id
    }

    /// Tells every listener what changed in `lists` for it, and forgets closed sessions.
    fn announce(&self, gateway: &Arc<Gateway>, lists: &HashSet<ListKind>) {
        let mut seen: HashMap<ids::PrincipalId, u64> = HashMap::new();
        let mut sends = Vec::new();
        {
            let mut inner = lock(&self.inner);
            prune(&mut inner);
            for listener in inner.listeners.values_mut() {
                let mut kinds = Vec::new();
                if lists.contains(&ListKind::Tools)
                    && let Some(known) = listener.tools
                {
                    let now = *seen
                        .entry(listener.principal.id())
                        .or_insert_with(|| fingerprint(gateway, &listener.principal));
                    if now != known {
                        listener.tools = Some(now);
                        kinds.push(ListKind::Tools);
                    }
                }
                kinds.extend(
                    [ListKind::Resources, ListKind::Prompts]
                        .into_iter()
                        .filter(|kind| lists.contains(kind)),
                );
                if !kinds.is_empty() {
                    sends.push((listener.target.clone(), kinds));
                }
            }
        }
        for (target, kinds) in sends {
            // One task per client: a slow one must not hold up the others.
            tokio::spawn(async move {
                for kind in kinds {
                    send(&target, kind).await;
                }
            });
        }
    }
}

async fn send(target: &Target, kind: ListKind) {
    let outcome = match (target, kind) {
        (Target::Session(peer), ListKind::Tools) => peer.notify_tool_list_changed().await,
        (Target::Session(peer), ListKind::Resources) => peer.notify_resource_list_changed().await,
        (Target::Session(peer), ListKind::Prompts) => peer.notify_prompt_list_changed().await,
        (Target::Subscription(sink), kind) => {
            let sent = match kind {
                ListKind::Tools => sink.notify_tool_list_changed().await,
                ListKind::Resources => sink.notify_resource_list_changed().await,
                ListKind::Prompts => sink.notify_prompt_list_changed().await,
            };
            // A list the stream did not ask for is not an error.
            return match sent {
                Ok(()) | Err(rmcp::service::SubscriptionSendError::NotificationNotAccepted(_)) => {}
                Err(error) => tracing::debug!(%error, "could not notify a listen stream"),
            };
        }
    };
    if let Err(error) = outcome {
        tracing::debug!(%error, ?kind, "could not notify a session");
    }
}

/// Forgets closed sessions, giving back their subscriptions.
fn prune(inner: &mut Inner) {
    let closed: Vec<u64> = inner
        .listeners
        .iter()
        .filter(|(_, listener)| match &listener.target {
            Target::Session(peer) => peer.is_transport_closed(),
            Target::Subscription(_) => false,
        })
        .map(|(id, _)| *id)
        .collect();
    for id in closed {
        if let Some(listener) = inner.listeners.remove(&id) {
            listener.resources.into_values().for_each(Held::release);
        }
    }
}

/// Passes every upstream resource update on. Ends with the gateway.
pub(crate) async fn deliver_updates(
    gateway: Weak<Gateway>,
    mut updates: tokio::sync::broadcast::Receiver<ResourceUpdated>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let update = match updates.recv().await {
            Ok(update) => update,
            Err(RecvError::Lagged(lost)) => {
                tracing::warn!(lost, "resource updates were lost: too many at once");
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        gateway.listeners.resource_updated(&update);
    }
}

/// Announces changes as they come, coalesced over [`DEBOUNCE`]. Ends with the gateway.
pub(crate) async fn deliver(
    gateway: Weak<Gateway>,
    mut changes: mpsc::UnboundedReceiver<ListKind>,
) {
    while let Some(first) = changes.recv().await {
        // A debounce window, not a readiness wait: what else changes meanwhile goes along.
        tokio::time::sleep(DEBOUNCE).await;
        let mut lists = HashSet::from([first]);
        while let Ok(more) = changes.try_recv() {
            lists.insert(more);
        }
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        gateway.listeners.announce(&gateway, &lists);
    }
}

/// A digest of the `tools/list` `principal` gets now.
fn fingerprint(gateway: &Arc<Gateway>, principal: &Principal) -> u64 {
    let listed = crate::mcp::listing::visible_tools(gateway, &gateway.access(principal.clone()));
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(&listed)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}
