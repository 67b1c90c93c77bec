//! Sessions bound to the principal that opened them. The `Mcp-Session-Id` rmcp hands out on
//! `initialize` is recorded with the caller's principal; a later request (POST, GET or DELETE)
//! on that id from any other principal gets the very 404 an unknown id gets, so a client
//! cannot use, end or even learn of another's session. A DELETE that ends a session answers
//! 204 (rmcp says 202, which SDK clients take for a failure), one of an unknown id 404.
//!
//! Runs on `/mcp` inside client auth (it reads the [`Principal`] that `client_auth` put into
//! the request). Bindings are dropped when their session is deleted, and the ones whose
//! session rmcp has ended (idle expiry, shutdown) are swept out every [`SWEEP_EVERY`] new
//! sessions, so the table never holds many more entries than rmcp holds sessions.
//!
//! Caps (`[limits]`): a session that would take the gateway past `max_sessions` is closed at
//! once and answered 503, one past its principal's `max_sessions_per_principal` 429, both with
//! `Retry-After` (ended sessions are swept out first, so only live ones count; with roaming
//! sessions, so are the copies of sessions ended through another replica). Without them a
//! flood of bare `initialize` requests grew memory without bound.
//!
//! With replicas, a session ended here is announced to the others (through Redis, by the
//! digest of its id; `roaming`), which close their copies of it at once ([`act`]).
//!
//! Rejected: a session manager of our own wrapping rmcp's `LocalSessionManager` (the trait
//! does not see the request's principal), and comparing the principal in the MCP handler
//! (a GET stream and a DELETE never reach it).

use ids::PrincipalId;
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use cluster::{Cluster, Event};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::transport::streamable_http_server::session::{
    SessionManager, local::LocalSessionManager,
};

use super::roaming::{self, Roaming};
use crate::{metrics::Metrics, principal::Principal, sync::lock};

const SESSION_HEADER: &str = "mcp-session-id";
/// A sweep of ended sessions' bindings runs after this many new sessions.
const SWEEP_EVERY: usize = 256;
/// What rmcp answers for an unknown session (rewritten to a JSON-RPC error downstream, like
/// rmcp's own).
const NOT_FOUND_TEXT: &str = "Not Found: Session not found";

/// The principal (its [`Principal::id`]) of every live session.
pub(crate) struct Owners {
    sessions: Arc<LocalSessionManager>,
    owners: Mutex<HashMap<String, PrincipalId>>,
    /// Where sessions opened are counted.
    metrics: Arc<Metrics>,
    opened: AtomicUsize,
    max_sessions: usize,
    max_per_principal: usize,
    /// Sealed session ids, with a shared store.
    roaming: Option<Arc<Roaming>>,
    /// The other replicas, told of the sessions ended here (with Redis).
    cluster: Option<Cluster>,
}

/// Where a request on a sealed session id goes.
enum Entry {
    /// The session is open here under rmcp's id.
    Here(String),
    /// Not open here but the id opens, is the request principal's and was not ended: rmcp
    /// re-creates the session under the client's id.
    Revive,
    /// A DELETE of a session not open here, recorded as ended: answered 204.
    Ended,
    /// Answered by this response (404, or 503 when the end of a session cannot be recorded).
    Refused(Response),
}

/// Which session cap a new session would pass.
#[derive(Debug, PartialEq, Eq)]
enum Over {
    All,
    Principal,
}

impl Owners {
    pub(crate) fn new(
        sessions: Arc<LocalSessionManager>,
        limits: &config::LimitsConfig,
        metrics: Arc<Metrics>,
        roaming: Option<Arc<Roaming>>,
        cluster: Option<Cluster>,
    ) -> Owners {
        Owners {
            roaming,
            cluster,
            sessions,
            metrics,
            owners: Mutex::new(HashMap::new()),
            opened: AtomicUsize::new(0),
            max_sessions: limits.max_sessions,
            max_per_principal: limits.max_sessions_per_principal,
        }
    }

    /// The cap session number `held + 1` (of `principal`'s `of_principal + 1`) would pass.
    fn over(&self, principal: &PrincipalId) -> Option<Over> {
        let owners = lock(&self.owners);
        if owners.len() >= self.max_sessions {
            return Some(Over::All);
        }
        let held = owners.values().filter(|owner| *owner == principal).count();
        (held >= self.max_per_principal).then_some(Over::Principal)
    }

    /// Records session `id`, just opened by `principal`, unless that passes a cap: then the
    /// session is closed again and the answer says which cap.
    async fn admit(&self, id: &str, principal: PrincipalId) -> Result<(), Response> {
        if let Some(over) = self.over(&principal) {
            self.sweep().await;
            if self.over(&principal).is_some() {
                self.close_ended_copies((over == Over::Principal).then_some(&principal))
                    .await;
            }
        }
        let Some(over) = self.over(&principal) else {
            self.record(id, principal).await;
            return Ok(());
        };
        let _ = self.sessions.close_session(&id.into()).await;
        tracing::warn!(%principal, ?over, "refused a new MCP session over the session cap");
        Err(match over {
            Over::All => super::errors::unavailable(
                "30",
                &format!(
                    "mcpgw holds as many MCP sessions as it may ([limits] max_sessions = {}); retry later, or end sessions you no longer use",
                    self.max_sessions
                ),
            ),
            Over::Principal => super::errors::too_many(
                "30",
                &format!(
                    "you hold as many MCP sessions as one client may ([limits] max_sessions_per_principal = {}); end one (HTTP DELETE) or retry later",
                    self.max_per_principal
                ),
            ),
        })
    }

    fn owner(&self, id: &str) -> Option<PrincipalId> {
        lock(&self.owners).get(id).cloned()
    }

    async fn record(&self, id: &str, principal: PrincipalId) {
        let open = {
            let mut owners = lock(&self.owners);
            owners.insert(id.to_owned(), principal);
            owners.len()
        };
        self.metrics.session_opened(open);
        if self.opened.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep().await;
        }
    }

    fn forget(&self, id: &str) {
        lock(&self.owners).remove(id);
    }

    /// Closes the copies of roaming sessions (of `principal`, or anyone's) that were ended
    /// through another replica, among those due a check against the store: the fallback for an
    /// announcement missed (Redis down), so a principal at its cap here is not held there by
    /// sessions it has ended. At most one query per session per `ENDED_CHECK_EVERY`.
    async fn close_ended_copies(&self, principal: Option<&PrincipalId>) {
        let Some(roaming) = &self.roaming else {
            return;
        };
        for (client_id, internal) in roaming.due() {
            if principal.is_some_and(|p| self.owner(&internal).as_ref() != Some(p)) {
                continue;
            }
            match roaming.ended(&client_id).await {
                Ok(true) => {
                    roaming.forget(&client_id);
                    let _ = self.sessions.close_session(&internal.as_str().into()).await;
                    self.forget(&internal);
                }
                Ok(false) => roaming.checked(&client_id),
                // The store cannot answer: leave the rest for the next time.
                Err(_) => return,
            }
        }
    }

    /// Closes the copy held here of the session ended through another replica whose client id
    /// has digest `digest`, if there is one.
    async fn ended_elsewhere(&self, digest: &str) {
        let Some(internal) = self
            .roaming
            .as_ref()
            .and_then(|roaming| roaming.forget_digest(digest))
        else {
            return;
        };
        let _ = self.sessions.close_session(&internal.as_str().into()).await;
        self.forget(&internal);
        tracing::debug!("closed a session another replica ended");
    }

    /// Tells the other replicas that the session the client calls `client_id` was ended.
    fn announce_end(&self, client_id: &str) {
        let Some(cluster) = self.cluster.clone() else {
            return;
        };
        let event = Event::SessionEnded {
            digest: roaming::digest(client_id),
        };
        tokio::spawn(async move {
            if let Err(error) = cluster.publish(&event).await {
                tracing::debug!(%error, "could not tell the other replicas that a session ended");
            }
        });
    }

    /// Drops the bindings of sessions rmcp no longer has.
    async fn sweep(&self) {
        let live = self.sessions.sessions.read().await;
        lock(&self.owners).retain(|id, _| live.contains_key(id.as_str()));
        if let Some(roaming) = &self.roaming {
            roaming.retain(|internal| live.contains_key(internal));
        }
    }

    /// Where a request of `principal` on sealed session id `id` goes (module `roaming`).
    async fn enter(
        &self,
        roaming: &Roaming,
        id: &str,
        principal: &PrincipalId,
        deleting: bool,
    ) -> Entry {
        if let Some((internal, recheck)) = roaming.route(id) {
            let live = self
                .sessions
                .has_session(&internal.as_str().into())
                .await
                .unwrap_or(false);
            // Ended through another replica: closed here too. A store that cannot answer
            // leaves a live session alone.
            let ended = live && recheck && matches!(roaming.ended(id).await, Ok(true));
            if live && !ended {
                if recheck {
                    roaming.checked(id);
                }
                return Entry::Here(internal);
            }
            roaming.forget(id);
            if ended {
                let _ = self.sessions.close_session(&internal.as_str().into()).await;
                self.forget(&internal);
                return Entry::Refused(not_found());
            }
        }
        let Some(state) = roaming.open(id) else {
            tracing::debug!("a session id that does not open: answered as unknown");
            return Entry::Refused(not_found());
        };
        if state.principal != principal.as_str() {
            tracing::warn!(%principal, "refused a sealed session id of another principal");
            return Entry::Refused(not_found());
        }
        match roaming.ended(id).await {
            Ok(false) => {}
            Ok(true) => return Entry::Refused(not_found()),
            // Not revived unchecked: it may have been ended.
            Err(error) => {
                tracing::warn!(%error, "cannot check whether a session was ended: not re-creating it");
                return Entry::Refused(super::errors::unavailable(
                    "5",
                    "the session cannot be re-created now (the database is unreachable); retry",
                ));
            }
        }
        if !deleting {
            return Entry::Revive;
        }
        match roaming.end(id, state.opened).await {
            Ok(()) => {
                self.announce_end(id);
                Entry::Ended
            }
            Err(error) => {
                tracing::warn!(%error, "cannot record the end of a session");
                Entry::Refused(super::errors::unavailable(
                    "5",
                    "the session's end cannot be recorded now (the database is unreachable); retry",
                ))
            }
        }
    }

    /// How many sessions are open now (those ended since the last look are dropped first).
    pub(crate) async fn open_now(&self) -> usize {
        self.sweep().await;
        self.len()
    }

    fn len(&self) -> usize {
        lock(&self.owners).len()
    }
}

/// The layer: see the module documentation.
pub(crate) async fn bind(
    State(owners): State<Arc<Owners>>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = request
        .extensions()
        .get::<Principal>()
        .map_or_else(|| Principal::Local.id(), Principal::id);
    let deleting = request.method() == Method::DELETE;
    let mut id = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // A sealed id (the client's) is rmcp's id here once translated; a revived session keeps
    // the client's id inside too.
    let mut sealed = None;
    let mut revived = false;
    if let (Some(roaming), Some(client_id)) = (&owners.roaming, id.clone())
        && Roaming::is_sealed(&client_id)
    {
        match owners
            .enter(roaming, &client_id, &principal, deleting)
            .await
        {
            Entry::Here(internal) => {
                if let Ok(value) = HeaderValue::from_str(&internal) {
                    request.headers_mut().insert(SESSION_HEADER, value);
                }
                id = Some(internal);
            }
            Entry::Revive => revived = true,
            Entry::Ended => return StatusCode::NO_CONTENT.into_response(),
            Entry::Refused(response) => return response,
        }
        sealed = Some(client_id);
    }
    if let Some(id) = &id {
        match owners.owner(id) {
            Some(owner) if owner != principal => {
                tracing::warn!(%principal, "refused a request on another principal's session");
                return not_found();
            }
            // rmcp answers 202 to a DELETE of any id; an unknown one is 404 here, like a
            // foreign one, so the two cannot be told apart.
            None if deleting
                && !owners
                    .sessions
                    .has_session(&id.as_str().into())
                    .await
                    .unwrap_or(false) =>
            {
                return not_found();
            }
            _ => {}
        }
    }
    let mut response = next.run(request).await;
    match (id, &owners.roaming) {
        (None, roaming) => {
            let opened = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if let Some(opened) = opened {
                let client_id = roaming
                    .as_ref()
                    .and_then(|roaming| roaming.seal_new(&opened, &principal));
                if let Err(refused) = owners.admit(&opened, principal).await {
                    if let (Some(roaming), Some(client_id)) = (roaming, &client_id) {
                        roaming.forget(client_id);
                    }
                    return refused;
                }
                if let Some(value) = client_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
                    response.headers_mut().insert(SESSION_HEADER, value);
                }
            }
        }
        (Some(id), roaming) if deleting && response.status().is_success() => {
            owners.forget(&id);
            if let (Some(roaming), Some(client_id)) = (roaming, &sealed) {
                roaming.forget(client_id);
                let recorded = match roaming.open(client_id) {
                    Some(state) => roaming.end(client_id, state.opened).await,
                    None => Ok(()),
                };
                match recorded {
                    Ok(()) => owners.announce_end(client_id),
                    Err(error) => {
                        tracing::warn!(%error, "cannot record the end of a session: another replica could revive it")
                    }
                }
            }
            response = StatusCode::NO_CONTENT.into_response();
        }
        (Some(id), Some(roaming)) if revived && response.status().is_success() => {
            if let Err(refused) = owners.admit(&id, principal).await {
                return refused;
            }
            roaming.add_route(&id, &id);
            tracing::info!("re-created a session opened on another replica");
        }
        (Some(_), _) => {}
    }
    if let Some(client_id) = &sealed
        && response.headers().contains_key(SESSION_HEADER)
        && let Ok(value) = HeaderValue::from_str(client_id)
    {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

fn not_found() -> Response {
    let mut response = Response::new(Body::from(NOT_FOUND_TEXT));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// Closes this replica's copy of a session another replica announces it ended. Missed
/// announcements are caught later ([`Owners::close_ended_copies`]).
pub(crate) async fn act(owners: Arc<Owners>, event: Event) {
    if let Event::SessionEnded { digest } = event {
        owners.ended_elsewhere(&digest).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bindings_of_ended_sessions_are_swept_out() {
        let sessions = Arc::new(LocalSessionManager::default());
        let owners = Owners::new(
            sessions.clone(),
            &config::LimitsConfig::default(),
            Arc::default(),
            None,
            None,
        );
        let (live, _transport) = sessions.create_session().await.expect("session");
        let (ended, _transport) = sessions.create_session().await.expect("session");
        owners.record(&live, "client:alice".into()).await;
        owners.record(&ended, "client:bob".into()).await;
        sessions.close_session(&ended).await.expect("closed");
        for i in 0..SWEEP_EVERY - 2 {
            owners.record(&format!("gone-{i}"), "local".into()).await;
        }
        assert_eq!(owners.len(), 1, "swept after {SWEEP_EVERY} sessions");
        assert_eq!(owners.owner(&live).as_deref(), Some("client:alice"));
        assert_eq!(owners.owner(&ended), None);
    }

    #[tokio::test]
    async fn sessions_past_a_cap_are_closed_and_refused() {
        let sessions = Arc::new(LocalSessionManager::default());
        let limits = config::LimitsConfig {
            max_sessions: 3,
            max_sessions_per_principal: 2,
            ..config::LimitsConfig::default()
        };
        let owners = Owners::new(sessions.clone(), &limits, Arc::default(), None, None);
        let mut open = Vec::new();
        for _ in 0..4 {
            let (id, transport) = sessions.create_session().await.expect("session");
            open.push((id, transport));
        }
        let alice = PrincipalId::from("client:alice");
        assert!(owners.admit(&open[0].0, alice.clone()).await.is_ok());
        assert!(owners.admit(&open[1].0, alice.clone()).await.is_ok());
        let refused = owners
            .admit(&open[2].0, alice.clone())
            .await
            .expect_err("alice's third session");
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            refused
                .headers()
                .contains_key(axum::http::header::RETRY_AFTER)
        );
        assert!(
            !sessions.has_session(&open[2].0).await.unwrap_or(true),
            "the refused session is closed again"
        );
        let bob = PrincipalId::from("client:bob");
        assert!(owners.admit(&open[3].0, bob.clone()).await.is_ok());
        let (fifth, _transport) = sessions.create_session().await.expect("session");
        let full = owners
            .admit(&fifth, bob)
            .await
            .expect_err("over max_sessions");
        assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
        // An ended session frees its place.
        let _ = sessions.close_session(&open[0].0).await;
        let (sixth, _transport) = sessions.create_session().await.expect("session");
        assert!(owners.admit(&sixth, alice).await.is_ok());
    }
}
