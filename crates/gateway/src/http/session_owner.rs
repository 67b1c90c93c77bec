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

use axum::{
    body::Body,
    extract::{Request, State},
    http::{Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::transport::streamable_http_server::session::{
    SessionManager, local::LocalSessionManager,
};

use crate::{Principal, lock};

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
    opened: AtomicUsize,
}

impl Owners {
    pub(crate) fn new(sessions: Arc<LocalSessionManager>) -> Owners {
        Owners {
            sessions,
            owners: Mutex::new(HashMap::new()),
            opened: AtomicUsize::new(0),
        }
    }

    fn owner(&self, id: &str) -> Option<PrincipalId> {
        lock(&self.owners).get(id).cloned()
    }

    async fn record(&self, id: &str, principal: PrincipalId) {
        lock(&self.owners).insert(id.to_owned(), principal);
        if self.opened.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep().await;
        }
    }

    fn forget(&self, id: &str) {
        lock(&self.owners).remove(id);
    }

    /// Drops the bindings of sessions rmcp no longer has.
    async fn sweep(&self) {
        let live = self.sessions.sessions.read().await;
        lock(&self.owners).retain(|id, _| live.contains_key(id.as_str()));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.owners).len()
    }
}

/// The layer: see the module documentation.
pub(crate) async fn bind(
    State(owners): State<Arc<Owners>>,
    request: Request,
    next: Next,
) -> Response {
    let principal = request
        .extensions()
        .get::<Principal>()
        .map_or_else(|| Principal::Local.id(), Principal::id);
    let deleting = request.method() == Method::DELETE;
    let id = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
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
    match id {
        None => {
            let opened = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if let Some(opened) = opened {
                owners.record(&opened, principal).await;
            }
        }
        Some(id) if deleting && response.status().is_success() => {
            owners.forget(&id);
            response = StatusCode::NO_CONTENT.into_response();
        }
        Some(_) => {}
    }
    response
}

fn not_found() -> Response {
    let mut response = Response::new(Body::from(NOT_FOUND_TEXT));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bindings_of_ended_sessions_are_swept_out() {
        let sessions = Arc::new(LocalSessionManager::default());
        let owners = Owners::new(sessions.clone());
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
}
