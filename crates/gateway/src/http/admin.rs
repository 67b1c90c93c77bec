//! The admin HTTP API, beside `/mcp` (client auth applies; see `client_auth`), with one JSON
//! error shape (`{"error": "..."}`) for every refusal:
//!
//! - `GET /admin/approvals`: the pending approvals the caller may decide (every one for an
//!   admin, its own for any other principal);
//! - `POST /admin/approvals/{id}/approve`, body optional `{"arguments": {...}}` (a JSON object
//!   that replaces the call's arguments);
//! - `POST /admin/approvals/{id}/reject`, body optional `{"reason": "..."}`.
//!
//! - `GET /admin/tools/held`: the tools held because their definition changed; `POST
//!   /admin/tools/approve`, body `{"name": "server__tool"}`: trusts the new definition. Both
//!   for admins only (the local user, or a principal whose profile says `admin = true`).
//!
//! A decision is refused with 403 for a principal that is neither the caller nor an admin,
//! 404 for an unknown id, and 409 when it was already decided or expired.
//!
//! The same operations are routed under `/admin/v1` (see `admin_api`), for administrators only,
//! through these handlers: `POST /admin/v1/approvals/{id}/approve|reject`,
//! `GET /admin/v1/tools/held` and `POST /admin/v1/tools/held/{name}/approve`.

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use ids::{PrincipalId, QualifiedName, ServerName};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use store::{DecideError, Verdict};

use crate::{
    Gateway, http::session_owner::Owners, policy::ApproveError, policy::DecisionError,
    policy::pinning::HeldRow, principal::Principal,
};

/// `GET /metrics` (see [`crate::metrics`]): for admins, as every admin route; sessions are
/// counted from `owners` when scraped.
pub(crate) fn metrics_route(gateway: Arc<Gateway>, owners: Arc<Owners>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state((gateway, owners))
}

async fn metrics(
    State((gateway, owners)): State<(Arc<Gateway>, Arc<Owners>)>,
    caller: Option<Extension<Principal>>,
) -> Response {
    if let Err(refused) = admin_only(&gateway, caller) {
        return refused;
    }
    gateway.metrics().sessions_now(owners.open_now().await);
    (
        [(http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        gateway.metrics_text().await,
    )
        .into_response()
}

pub(crate) fn routes(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/admin/approvals", get(list))
        .route("/admin/approvals/{id}/approve", post(approve))
        .route("/admin/approvals/{id}/reject", post(reject))
        .route("/admin/tools/held", get(held_tools))
        .route("/admin/tools/approve", post(approve_tool))
        .with_state(gateway)
}

fn principal(extension: Option<Extension<Principal>>) -> Principal {
    extension.map_or(Principal::Local, |Extension(p)| p)
}

async fn list(
    State(gateway): State<Arc<Gateway>>,
    caller: Option<Extension<Principal>>,
) -> Response {
    match gateway.pending_approvals(&principal(caller)).await {
        Ok(pending) => {
            Json(json!({"pending": pending.iter().map(ApprovalRow::from).collect::<Vec<_>>()}))
                .into_response()
        }
        Err(refused) => refusal(refused),
    }
}

pub(crate) async fn approve(
    State(gateway): State<Arc<Gateway>>,
    caller: Option<Extension<Principal>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let body = match object_body(&body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let Ok(ApproveBody { arguments }) = serde_json::from_value(Value::Object(body)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "'arguments' must be a JSON object (the tool's arguments); leave it out to keep the caller's",
        );
    };
    decide(
        &gateway,
        &principal(caller),
        &id,
        Verdict::Approve { arguments },
    )
    .await
}

pub(crate) async fn reject(
    State(gateway): State<Arc<Gateway>>,
    caller: Option<Extension<Principal>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let body = match object_body(&body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let Ok(RejectBody { reason }) = serde_json::from_value(Value::Object(body)) else {
        return error(StatusCode::BAD_REQUEST, "'reason' must be a string");
    };
    let reason = reason.map(|reason| reason.chars().take(500).collect());
    decide(
        &gateway,
        &principal(caller),
        &id,
        Verdict::Reject { reason },
    )
    .await
}

async fn decide(gateway: &Gateway, caller: &Principal, id: &str, verdict: Verdict) -> Response {
    match gateway.decide_approval(id, verdict, caller).await {
        Ok(decided) => Json(ApprovalRow::from(&decided)).into_response(),
        Err(refused) => refusal(refused),
    }
}

/// An empty body is `{}`; anything else must be a JSON object.
#[allow(clippy::result_large_err)]
pub(crate) fn object_body(body: &[u8]) -> Result<Map<String, Value>, Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
    }
}

fn refusal(refused: DecisionError) -> Response {
    let status = match &refused {
        DecisionError::NoStore => StatusCode::SERVICE_UNAVAILABLE,
        DecisionError::Forbidden { .. } => StatusCode::FORBIDDEN,
        DecisionError::Decide(DecideError::NotFound { .. }) => StatusCode::NOT_FOUND,
        DecisionError::Decide(DecideError::Store(_)) | DecisionError::Store(_) => {
            tracing::error!(error = %refused, "approvals: database error");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the approvals could not be read or written; try again",
            );
        }
        DecisionError::Decide(_) => StatusCode::CONFLICT,
    };
    error(status, &refused.to_string())
}

fn error(status: StatusCode, message: &str) -> Response {
    super::errors::plain(status, message)
}

/// `POST /admin/v1/approvals/{id}/approve`: [`approve`], for administrators only.
pub(crate) async fn approve_v1(
    _: Admin,
    gateway: State<Arc<Gateway>>,
    caller: Option<Extension<Principal>>,
    id: Path<String>,
    body: Bytes,
) -> Response {
    approve(gateway, caller, id, body).await
}

/// `POST /admin/v1/approvals/{id}/reject`: [`reject`], for administrators only.
pub(crate) async fn reject_v1(
    _: Admin,
    gateway: State<Arc<Gateway>>,
    caller: Option<Extension<Principal>>,
    id: Path<String>,
    body: Bytes,
) -> Response {
    reject(gateway, caller, id, body).await
}

/// `GET /admin/tools/held` and `GET /admin/v1/tools/held`: the tools held because their
/// definition changed, each with its trusted and its new definition and their diff (admins
/// only).
pub(crate) async fn held_tools(
    State(gateway): State<Arc<Gateway>>,
    principal: Option<Extension<Principal>>,
) -> Response {
    if let Err(refused) = admin_only(&gateway, principal) {
        return refused;
    }
    let held = gateway.held_tools().iter().map(HeldRow::from).collect();
    Json(HeldList { held }).into_response()
}

/// `POST /admin/tools/approve` (`{"name": "server__tool"}`): trusts a held tool's new
/// definition (admins only).
async fn approve_tool(
    State(gateway): State<Arc<Gateway>>,
    principal: Option<Extension<Principal>>,
    body: Bytes,
) -> Response {
    if let Err(refused) = admin_only(&gateway, principal) {
        return refused;
    }
    let name = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|body| body.get("name")?.as_str().map(str::to_owned));
    let Some(name) = name else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object with the qualified tool name: {\"name\": \"server__tool\"}",
        );
    };
    trust(&gateway, &name).await
}

/// `POST /admin/v1/tools/held/{name}/approve`: [`approve_tool`] with the name in the path.
pub(crate) async fn approve_held(
    State(gateway): State<Arc<Gateway>>,
    principal: Option<Extension<Principal>>,
    Path(name): Path<String>,
) -> Response {
    if let Err(refused) = admin_only(&gateway, principal) {
        return refused;
    }
    trust(&gateway, &name).await
}

/// Trusts the held tool `name`'s new definition: what was trusted, or why not.
async fn trust(gateway: &Gateway, name: &str) -> Response {
    match gateway.approve_tool(name).await {
        Ok(held) => Json(Trusted {
            sha256: crate::policy::pinning::hex(&held.hash),
            approved: held.qualified,
            server: held.server,
        })
        .into_response(),
        Err(ApproveError::NotHeld(_)) => error(
            StatusCode::NOT_FOUND,
            &format!("no held tool named '{name}'"),
        ),
        Err(ApproveError::NoStore) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "tool pinning is off: the database could not be opened",
        ),
        Err(ApproveError::Store(store_error)) => {
            tracing::error!(error = %store_error, "cannot approve a held tool");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the approval could not be recorded; try again",
            )
        }
    }
}

/// A handler argument that admits administrators only: extracting it runs [`admin_only`], so a
/// route that takes it answers 403 to anyone else before its handler starts.
pub(crate) struct Admin;

impl axum::extract::FromRequestParts<Arc<Gateway>> for Admin {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        gateway: &Arc<Gateway>,
    ) -> Result<Self, Response> {
        let caller = parts.extensions.get::<Principal>().cloned().map(Extension);
        admin_only(gateway, caller).map(|()| Admin)
    }
}

/// The local user, or a principal whose profile says `admin = true`; else 403.
#[allow(clippy::result_large_err)]
pub(crate) fn admin_only(
    gateway: &Gateway,
    principal: Option<Extension<Principal>>,
) -> Result<(), Response> {
    let principal = self::principal(principal);
    if principal.is_admin(&gateway.config().policy) {
        Ok(())
    } else {
        Err(error(
            StatusCode::FORBIDDEN,
            &format!(
                "{principal} is not an administrator: the admin endpoints need a profile with admin = true"
            ),
        ))
    }
}

/// One approval as the admin API shows it.
pub fn approval_json(approval: &store::Approval) -> Value {
    serde_json::to_value(ApprovalRow::from(approval)).unwrap_or_default()
}

/// A call that waits, or waited, for a person.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ApprovalRow {
    pub id: String,
    /// `pending`, `approved`, `rejected`, `expired` or `cancelled`.
    pub status: &'static str,
    pub principal: PrincipalId,
    pub server: ServerName,
    pub tool: QualifiedName,
    /// The arguments the caller sent.
    pub arguments: Map<String, Value>,
    /// The arguments an approver gave in their place, if any.
    pub decided_arguments: Option<Map<String, Value>>,
    /// Unix seconds.
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    /// Why it was rejected.
    pub reason: Option<String>,
}

impl From<&store::Approval> for ApprovalRow {
    fn from(approval: &store::Approval) -> ApprovalRow {
        let seconds = crate::oauth::unix_seconds;
        ApprovalRow {
            id: approval.id.clone(),
            status: approval.status.as_str(),
            principal: approval.principal.clone(),
            server: approval.server.clone(),
            tool: approval.tool.clone(),
            arguments: approval.arguments.clone(),
            decided_arguments: approval.decided_arguments.clone(),
            created_at: seconds(approval.created_at),
            expires_at: seconds(approval.expires_at),
            decided_by: approval.decided_by.clone(),
            decided_at: approval.decided_at.map(seconds),
            reason: approval.reason.clone(),
        }
    }
}

/// `POST /admin/v1/approvals/{id}/approve`'s body; an empty body is `{}`.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct ApproveBody {
    /// The tool's arguments, in place of the caller's; left out, the caller's run.
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
}

/// `POST /admin/v1/approvals/{id}/reject`'s body; an empty body is `{}`.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct RejectBody {
    /// Why, told to the caller (at most 500 characters are kept).
    #[serde(default)]
    pub reason: Option<String>,
}

/// The tools held because their definitions changed.
#[derive(Serialize, JsonSchema)]
pub(crate) struct HeldList {
    pub held: Vec<HeldRow>,
}

/// A held tool's new definition, trusted.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Trusted {
    /// The tool's qualified name.
    pub approved: QualifiedName,
    pub server: ServerName,
    /// The SHA-256 of the definition now trusted.
    pub sha256: String,
}
