//! Legacy sessions that roam between replicas: the `Mcp-Session-Id` a client holds carries the
//! session's own state, sealed with the store's secret key, so any replica sharing the store can
//! re-create the session when the client's next request lands there.
//!
//! Only with a shared store (PostgreSQL): there every replica holds the same key. With SQLite
//! the ids stay rmcp's own (one process; nothing to roam to), and a gateway that never meets
//! OAuth still never loads or creates a key.
//!
//! The sealed state is what rmcp needs to replay the handshake (the client's `initialize`
//! parameters: protocol version, capabilities, client info) and what the session is bound to:
//! the principal (its profile and exposure follow from it and the configuration). The id is
//! `g1.` and the base64url of `version || nonce || AES-256-GCM(state) || tag` (a few hundred
//! characters; state over [`MAX_STATE_BYTES`] first loses the client info's optional fields,
//! and a session whose state is still too large keeps rmcp's plain id and does not roam).
//!
//! Inside the gateway a session keeps rmcp's id: [`session_owner`](super::session_owner)
//! translates the client's sealed id to it on the way in, and back on the way out, so the
//! session-bound layers (owners, direct calls) are unchanged. A replica that does not know a
//! sealed id opens it, checks that its principal is the request's, and lets rmcp restore the
//! session under the sealed id itself (rmcp's session store: [`SessionStore::load`] opens the
//! id and hands back the `initialize` parameters, which rmcp replays, `initialized` included).
//! An id that does not open (forged, tampered, another key), or whose principal is another's,
//! gets the very 404 an unknown id gets.
//!
//! A session ended with HTTP DELETE is recorded in the store as ended until the end of its
//! revival window ([`REVIVE_WINDOW`] after it was opened), so no replica revives it; an id
//! older than that window is not revived either (the client gets 404 and, as the protocol
//! requires, starts a new session). The replicas holding a copy of it close theirs: at once
//! when they hear of it through Redis (`cluster::Event::SessionEnded`, which names the session
//! by the digest of its id), else at its next request there ([`ENDED_CHECK_EVERY`]) or when
//! the principal's session cap is reached there (every copy due a check is checked first), and
//! at the latest when it has been idle for `[limits] session_idle_s`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use ids::PrincipalId;
use rmcp::{
    model::InitializeRequestParams,
    transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError},
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::sync::lock;

/// What a sealed session id starts with (format 1).
const PREFIX: &str = "g1.";
/// The most state sealed into an id, in bytes of JSON: the id stays under 3 KiB, well within
/// what proxies accept in one header.
pub(crate) const MAX_STATE_BYTES: usize = 2048;
/// Longer ids are not even decoded.
const MAX_ID_CHARS: usize = 4 * MAX_STATE_BYTES;
/// How long after it was opened a session may be re-created on another replica (and how long
/// a deleted session's record is kept).
pub(crate) const REVIVE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often a session open here is checked against the store's ended sessions: one ended
/// through another replica is refused here at most this long after.
pub(crate) const ENDED_CHECK_EVERY: Duration = Duration::from_secs(5);

/// The state a sealed id carries.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Sealed {
    /// The principal the session is bound to.
    #[serde(rename = "p")]
    pub principal: String,
    /// When it was opened (unix seconds).
    #[serde(rename = "t")]
    pub opened: u64,
    /// The client's `initialize` parameters.
    #[serde(rename = "i")]
    pub initialize: serde_json::Value,
}

/// Roaming sessions of this replica: see the module documentation.
pub(crate) struct Roaming {
    store: store::Store,
    /// `initialize` parameters rmcp handed to the session store, by rmcp's id, until the
    /// answer to that `initialize` seals them into the client's id.
    opened: Mutex<HashMap<String, InitializeRequestParams>>,
    /// The client's sealed id -> rmcp's id, for sessions open on this replica.
    routes: Mutex<HashMap<String, Route>>,
}

/// A session open on this replica.
struct Route {
    /// rmcp's id for it.
    internal: String,
    /// The [`digest`] of the client's id: how the other replicas name it when they end it.
    digest: String,
    /// When the store last said it was not ended elsewhere (or it was opened here).
    checked: Instant,
}

impl Roaming {
    pub(crate) fn new(store: store::Store) -> Roaming {
        Roaming {
            store,
            opened: Mutex::default(),
            routes: Mutex::default(),
        }
    }

    /// Whether `id` is in the sealed format (it may still not open).
    pub(crate) fn is_sealed(id: &str) -> bool {
        id.starts_with(PREFIX)
    }

    /// The sealed id for the session rmcp just opened as `internal` for `principal`, recorded
    /// as its route; `None` (the session keeps `internal`) when there is nothing to seal or it
    /// cannot be sealed.
    pub(crate) fn seal_new(&self, internal: &str, principal: &PrincipalId) -> Option<String> {
        let params = lock(&self.opened).remove(internal)?;
        let mut initialize = serde_json::to_value(&params).ok()?;
        let opened = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut state = Sealed {
            principal: principal.to_string(),
            opened,
            initialize: initialize.clone(),
        };
        let mut json = serde_json::to_vec(&state).ok()?;
        if json.len() > MAX_STATE_BYTES {
            // Keep what the handshake needs: the client info's name and version.
            if let Some(info) = initialize
                .get_mut("clientInfo")
                .and_then(|info| info.as_object_mut())
            {
                info.retain(|key, _| key == "name" || key == "version");
            }
            state.initialize = initialize;
            json = serde_json::to_vec(&state).ok()?;
        }
        if json.len() > MAX_STATE_BYTES {
            tracing::info!(
                bytes = json.len(),
                "a session's state is too large to seal into its id: it stays on this replica"
            );
            return None;
        }
        let sealed = match self.store.seal_session(&json) {
            Ok(sealed) => sealed,
            Err(error) => {
                tracing::warn!(%error, "cannot seal a session id: the session stays on this replica");
                return None;
            }
        };
        let id = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(sealed));
        self.add_route(&id, internal);
        Some(id)
    }

    /// Forgets what rmcp stored for `internal` if no sealed id was made of it.
    pub(crate) fn discard(&self, internal: &str) {
        lock(&self.opened).remove(internal);
    }

    /// rmcp's id for the session the client calls `id`, if it was opened or revived here, and
    /// whether it is time to check that it was not ended elsewhere ([`Roaming::checked`]).
    pub(crate) fn route(&self, id: &str) -> Option<(String, bool)> {
        lock(&self.routes).get(id).map(|route| {
            (
                route.internal.clone(),
                route.checked.elapsed() >= ENDED_CHECK_EVERY,
            )
        })
    }

    /// Records that the store said, just now, that session `id` was not ended.
    pub(crate) fn checked(&self, id: &str) {
        if let Some(route) = lock(&self.routes).get_mut(id) {
            route.checked = Instant::now();
        }
    }

    /// Records that the session the client calls `id` lives here as rmcp's `internal`.
    pub(crate) fn add_route(&self, id: &str, internal: &str) {
        let route = Route {
            internal: internal.to_owned(),
            digest: digest(id),
            checked: Instant::now(),
        };
        lock(&self.routes).insert(id.to_owned(), route);
    }

    /// Forgets the route of `id`.
    pub(crate) fn forget(&self, id: &str) {
        lock(&self.routes).remove(id);
    }

    /// Forgets the route of the session whose client id has digest `digest` (ended through
    /// another replica), and returns rmcp's id for it if it was open here.
    pub(crate) fn forget_digest(&self, digest: &str) -> Option<String> {
        let mut routes = lock(&self.routes);
        let id = routes
            .iter()
            .find_map(|(id, route)| (route.digest == digest).then(|| id.clone()))?;
        routes.remove(&id).map(|route| route.internal)
    }

    /// The sessions open here (client id, rmcp's id) whose last check against the store's
    /// ended sessions is older than [`ENDED_CHECK_EVERY`].
    pub(crate) fn due(&self) -> Vec<(String, String)> {
        lock(&self.routes)
            .iter()
            .filter(|(_, route)| route.checked.elapsed() >= ENDED_CHECK_EVERY)
            .map(|(id, route)| (id.clone(), route.internal.clone()))
            .collect()
    }

    /// Drops the routes whose rmcp session is not `live`.
    pub(crate) fn retain(&self, live: impl Fn(&str) -> bool) {
        lock(&self.routes).retain(|_, route| live(&route.internal));
    }

    /// The state sealed in `id`, if it opens under this store's key and is within its
    /// revival window.
    pub(crate) fn open(&self, id: &str) -> Option<Sealed> {
        let body = id.strip_prefix(PREFIX)?;
        if body.len() > MAX_ID_CHARS {
            return None;
        }
        let sealed = URL_SAFE_NO_PAD.decode(body).ok()?;
        let json = match self.store.open_session(&sealed) {
            Ok(json) => json?,
            Err(error) => {
                tracing::warn!(%error, "cannot open a sealed session id");
                return None;
            }
        };
        let state: Sealed = serde_json::from_slice(&json).ok()?;
        let opened = UNIX_EPOCH + Duration::from_secs(state.opened);
        let age = SystemTime::now().duration_since(opened).unwrap_or_default();
        (age <= REVIVE_WINDOW).then_some(state)
    }

    /// Whether the session the client calls `id` was ended (HTTP DELETE) on any replica.
    pub(crate) async fn ended(&self, id: &str) -> Result<bool, store::StoreError> {
        self.store.session_ended(&digest(id)).await
    }

    /// Records the session the client calls `id`, opened at `opened`, as ended on every
    /// replica.
    pub(crate) async fn end(&self, id: &str, opened: u64) -> Result<(), store::StoreError> {
        let until = UNIX_EPOCH + Duration::from_secs(opened) + REVIVE_WINDOW;
        self.store.end_session(&digest(id), until).await
    }

    /// The rmcp session store that hands the sealed state to rmcp.
    pub(crate) fn session_store(self: &Arc<Self>) -> Arc<dyn SessionStore> {
        Arc::new(Store(self.clone()))
    }
}

/// What records an ended session, and names it to the other replicas: the SHA-256 of its id,
/// so neither the record nor the message says anything of it.
pub(crate) fn digest(id: &str) -> String {
    Sha256::digest(id.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// rmcp's view: `store` is called with each new session's `initialize` parameters (kept until
/// [`Roaming::seal_new`]), `load` with an id this replica does not know (it opens the id).
struct Store(Arc<Roaming>);

#[async_trait::async_trait]
impl SessionStore for Store {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(state) = self.0.open(session_id) else {
            return Ok(None);
        };
        let params: InitializeRequestParams = serde_json::from_value(state.initialize)?;
        Ok(Some(SessionState::new(params)))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        lock(&self.0.opened).insert(session_id.to_owned(), state.initialize_params.clone());
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.0.discard(session_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(client: serde_json::Value) -> InitializeRequestParams {
        serde_json::from_value(serde_json::json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"roots": {"listChanged": true}},
            "clientInfo": client,
        }))
        .expect("params")
    }

    async fn roaming() -> Arc<Roaming> {
        Arc::new(Roaming::new(
            store::Store::open_in_memory().await.expect("store"),
        ))
    }

    #[tokio::test]
    async fn a_sealed_id_opens_on_the_same_key_only_and_carries_the_handshake() {
        let here = roaming().await;
        let store = here.session_store();
        let state = SessionState::new(params(serde_json::json!({"name": "c", "version": "1"})));
        store.store("rmcp-1", &state).await.expect("stored");
        let alice = PrincipalId::from("client:alice");
        let id = here.seal_new("rmcp-1", &alice).expect("sealed");
        assert!(
            id.starts_with(PREFIX) && id.len() < 600,
            "{} chars",
            id.len()
        );
        assert!(
            id.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "visible ASCII"
        );
        assert_eq!(here.route(&id), Some(("rmcp-1".to_owned(), false)));
        let opened = here.open(&id).expect("opens");
        assert_eq!(opened.principal, "client:alice");
        let loaded = store.load(&id).await.expect("load").expect("state");
        assert_eq!(loaded.initialize_params.client_info.name, "c");
        assert_eq!(
            loaded.initialize_params.protocol_version.to_string(),
            "2025-06-18"
        );
        // Another key, a changed character, a plain id: nothing.
        let elsewhere = roaming().await;
        assert!(elsewhere.open(&id).is_none());
        assert!(
            elsewhere
                .session_store()
                .load(&id)
                .await
                .expect("load")
                .is_none()
        );
        let mut tampered = id.clone().into_bytes();
        let i = tampered.len() - 5;
        tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
        assert!(
            here.open(&String::from_utf8(tampered).expect("ascii"))
                .is_none()
        );
        assert!(here.open("0b9c7a5e-0000-4000-8000-000000000000").is_none());
        assert!(
            here.open(&format!("{PREFIX}{}", "A".repeat(MAX_ID_CHARS + 4)))
                .is_none()
        );
    }

    #[tokio::test]
    async fn oversized_client_info_is_trimmed_to_name_and_version() {
        let here = roaming().await;
        let store = here.session_store();
        let big = "x".repeat(MAX_STATE_BYTES);
        let state = SessionState::new(params(
            serde_json::json!({"name": "c", "version": "1", "title": big}),
        ));
        store.store("rmcp-2", &state).await.expect("stored");
        let id = here
            .seal_new("rmcp-2", &PrincipalId::from("local"))
            .expect("sealed after trimming");
        let loaded = store.load(&id).await.expect("load").expect("state");
        assert_eq!(loaded.initialize_params.client_info.title, None);
        // Nothing left to trim: the session keeps rmcp's id.
        let huge = params(serde_json::json!({"name": big, "version": "1"}));
        store
            .store("rmcp-3", &SessionState::new(huge))
            .await
            .expect("stored");
        assert_eq!(here.seal_new("rmcp-3", &PrincipalId::from("local")), None);
    }

    #[tokio::test]
    async fn ended_sessions_are_recorded_by_digest() {
        let here = roaming().await;
        assert!(!here.ended("g1.abc").await.expect("store"));
        here.end(
            "g1.abc",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("now")
                .as_secs(),
        )
        .await
        .expect("recorded");
        assert!(here.ended("g1.abc").await.expect("store"));
        assert!(!here.ended("g1.abd").await.expect("store"));
    }
}
