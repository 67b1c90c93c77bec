//! The approvals part of the admin HTTP API, beside `/mcp` (client auth applies; see
//! `client_auth`):
//!
//! - `GET /admin/approvals`: the pending approvals the caller may decide (every one for an
//!   admin, its own for any other principal);
//! - `POST /admin/approvals/{id}/approve`, body optional `{"arguments": {...}}` (a JSON object
//!   that replaces the call's arguments);
//! - `POST /admin/approvals/{id}/reject`, body optional `{"reason": "..."}`.
//!
//! A decision is refused with 403 for a principal that is neither the caller nor an admin,
//! 404 for an unknown id, and 409 when it was already decided or expired.

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Map, Value, json};
use store::{DecideError, Verdict};

use crate::{DecisionError, Gateway, Principal};

pub(crate) fn routes(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/admin/approvals", get(list))
        .route("/admin/approvals/{id}/approve", post(approve))
        .route("/admin/approvals/{id}/reject", post(reject))
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
            Json(json!({"pending": pending.iter().map(approval_json).collect::<Vec<_>>()}))
                .into_response()
        }
        Err(refused) => refusal(refused),
    }
}

async fn approve(
    State(gateway): State<Arc<Gateway>>,
    caller: Option<Extension<Principal>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let body = match object_body(&body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let arguments = match body.get("arguments") {
        None => None,
        Some(Value::Object(map)) => Some(map.clone()),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "'arguments' must be a JSON object (the tool's arguments); leave it out to keep the caller's",
            );
        }
    };
    decide(
        &gateway,
        &principal(caller),
        &id,
        Verdict::Approve { arguments },
    )
    .await
}

async fn reject(
    State(gateway): State<Arc<Gateway>>,
    caller: Option<Extension<Principal>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let body = match object_body(&body) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let reason = match body.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(reason)) => Some(reason.chars().take(500).collect()),
        Some(_) => return error(StatusCode::BAD_REQUEST, "'reason' must be a string"),
    };
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
        Ok(decided) => Json(approval_json(&decided)).into_response(),
        Err(refused) => refusal(refused),
    }
}

/// An empty body is `{}`; anything else must be a JSON object.
#[allow(clippy::result_large_err)]
fn object_body(body: &[u8]) -> Result<Map<String, Value>, Response> {
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
    (status, Json(json!({ "error": message }))).into_response()
}

/// One approval as the admin API shows it.
pub fn approval_json(approval: &store::Approval) -> Value {
    let seconds = crate::oauth::unix_seconds;
    json!({
        "id": approval.id,
        "status": approval.status.as_str(),
        "principal": approval.principal,
        "server": approval.server,
        "tool": approval.tool,
        "arguments": approval.arguments,
        "decided_arguments": approval.decided_arguments,
        "created_at": seconds(approval.created_at),
        "expires_at": seconds(approval.expires_at),
        "decided_by": approval.decided_by,
        "decided_at": approval.decided_at.map(seconds),
        "reason": approval.reason,
    })
}
