//! Every answer the HTTP edge makes up itself, in one table: its status, its body shape, and
//! which layer sends it. Two body shapes: a JSON-RPC error object on `/mcp` (clients parse
//! every answer there as JSON-RPC), `{"error": "..."}` on the admin routes and elsewhere.
//! Browser-facing pages (`/oauth/*`, the cli's sign-in callback) are HTML, made by
//! `oauth::browser_page`.
//!
//! | status | JSON-RPC code | when | layer |
//! | ------ | ------------- | ---- | ----- |
//! | 400 | -32600 | Host missing, repeated or unreadable; absolute-form target naming another host | `guard` |
//! | 400 | -32700 | a body that is not JSON | `serve` (rmcp's text rewritten) |
//! | 400 | -32600 | any other 4xx rmcp answers in plain text | `serve` |
//! | 400 | -32020 (header mismatch) | `Mcp-Param-*` headers disagree with the body (SEP-2243) | `param_headers` |
//! | 401 | -32001 | no, unknown or refused client key or token (`WWW-Authenticate` names the metadata) | `client_auth` |
//! | 401 | — | an admin route on an open loopback listener without the admin token | `guard` |
//! | 403 | -32600 | a foreign `Host` or `Origin`; an admin write a browser marks cross- or same-site | `guard` |
//! | 403 | -32001 | a token whose profile is unknown | `client_auth` |
//! | 403/404/409 | — | admin decisions: not yours, unknown id, already decided | `admin` |
//! | 400 | — | an `/admin/v1` read with a bad parameter (missing `q`, `top_k` out of range, unknown server) | `admin_v1` |
//! | 403 | — | an admin route for a principal whose profile is not `admin = true` | `admin`, `admin_v1` |
//! | 404 | text | a session id that does not exist or is another principal's | `session_owner` |
//! | 413 | -32600 | a body over `[limits] request_bytes` | `serve` |
//! | 415 | — | an admin write without `Content-Type: application/json` | `guard` |
//! | 429 | -32000 | a new session past `[limits] max_sessions_per_principal` (`Retry-After`) | `session_owner` |
//! | 503 | -32000 | a new session past `[limits] max_sessions` (`Retry-After`) | `session_owner` |
//! | 503 | -32000 | draining for shutdown (`Retry-After`) | `drain` |
//! | 503 | -32000 | over `[limits] max_connections` (`Retry-After`, written before the request is read) | `serve` |
//! | 503 | -32001 | the client store or the token verifier is unavailable | `client_auth` |

use axum::{
    Json,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// JSON-RPC "invalid request": the request cannot be served as sent.
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "parse error": the body is not JSON.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// Server error range: the gateway cannot take the request now.
pub(crate) const UNAVAILABLE: i64 = -32000;
/// Server error range: who the request comes from could not be established.
pub(crate) const UNAUTHORIZED: i64 = -32001;

/// A JSON-RPC error object with no id (the request was not read, or had none) as the body.
pub(crate) fn json_rpc(status: StatusCode, code: i64, message: &str) -> Response {
    json_rpc_with_id(status, Value::Null, code, message)
}

/// A JSON-RPC error object answering request `id`.
pub(crate) fn json_rpc_with_id(
    status: StatusCode,
    id: Value,
    code: i64,
    message: &str,
) -> Response {
    let body = JsonRpcError {
        jsonrpc: "2.0",
        id,
        error: JsonRpcErrorObject { code, message },
    };
    (status, Json(body)).into_response()
}

/// A JSON-RPC error answer (`/mcp`, and the client authentication in front of every route).
#[derive(Serialize, JsonSchema)]
pub(crate) struct JsonRpcError<'a> {
    /// `2.0`.
    jsonrpc: &'a str,
    /// The request's id, or `null` when it was not read.
    id: Value,
    error: JsonRpcErrorObject<'a>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct JsonRpcErrorObject<'a> {
    code: i64,
    message: &'a str,
}

/// `{"error": message}`: the admin routes' shape, and every other JSON route's.
pub(crate) fn plain(status: StatusCode, message: &str) -> Response {
    let body = Refusal {
        error: message,
        problems: None,
    };
    (status, Json(body)).into_response()
}

/// Every refusal of a JSON route that is not JSON-RPC.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Refusal<'a> {
    /// What was refused and why, in words.
    pub error: &'a str,
    /// A refused server change: each problem the configuration loader found, by key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problems: Option<&'a [String]>,
}

/// A refusal in the shape of the route `path` belongs to: JSON-RPC (`-32600`) on `/mcp`,
/// [`plain`] elsewhere.
pub(crate) fn for_path(path: &str, status: StatusCode, message: &str) -> Response {
    if path == "/mcp" || path.starts_with("/mcp/") {
        json_rpc(status, INVALID_REQUEST, message)
    } else {
        plain(status, message)
    }
}

/// 503 with `Retry-After: retry_after_s` and a JSON-RPC error.
pub(crate) fn unavailable(retry_after_s: &'static str, message: &str) -> Response {
    retry_later(StatusCode::SERVICE_UNAVAILABLE, retry_after_s, message)
}

/// 429 with `Retry-After: retry_after_s` and a JSON-RPC error: this caller holds too much.
pub(crate) fn too_many(retry_after_s: &'static str, message: &str) -> Response {
    retry_later(StatusCode::TOO_MANY_REQUESTS, retry_after_s, message)
}

fn retry_later(status: StatusCode, retry_after_s: &'static str, message: &str) -> Response {
    let mut response = json_rpc(status, UNAVAILABLE, message);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from_static(retry_after_s),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn body(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }

    #[tokio::test]
    async fn refusals_take_the_shape_of_their_route() {
        let mcp = for_path("/mcp", StatusCode::FORBIDDEN, "no");
        assert_eq!(mcp.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            body(mcp).await,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "no"}})
        );
        for path in ["/admin/approvals", "/healthz"] {
            let other = for_path(path, StatusCode::FORBIDDEN, "no");
            assert_eq!(body(other).await, json!({"error": "no"}));
        }
    }

    #[tokio::test]
    async fn unavailable_says_when_to_retry() {
        let response = unavailable("5", "later");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response
                .headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            Some(&b"5"[..])
        );
        assert_eq!(body(response).await["error"]["code"], json!(-32000));
    }
}
