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

use std::{
    collections::{HashMap, HashSet},
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use rmcp::{Peer, RoleServer, service::SubscriptionSink};
use tokio::sync::mpsc;
use upstream::ListKind;

use crate::{Gateway, Principal};

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
        })
    }

    /// Adds a `subscriptions/listen` stream; remove it with [`Listeners::remove`] when it ends.
    pub(crate) fn add_subscription(
        &self,
        gateway: &Arc<Gateway>,
        sink: SubscriptionSink,
        principal: Principal,
        tools: bool,
    ) -> u64 {
        let tools = tools.then(|| fingerprint(gateway, &principal));
        self.add(Listener {
            target: Target::Subscription(sink),
            principal,
            tools,
        })
    }

    pub(crate) fn remove(&self, id: u64) {
        lock(&self.inner).listeners.remove(&id);
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
        let mut seen: HashMap<String, u64> = HashMap::new();
        let mut sends = Vec::new();
        {
            let mut inner = lock(&self.inner);
            inner
                .listeners
                .retain(|_, listener| match &listener.target {
                    Target::Session(peer) => !peer.is_transport_closed(),
                    Target::Subscription(_) => true,
                });
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
    let listed = crate::front::listed_tools(gateway, principal.clone());
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(&listed)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
