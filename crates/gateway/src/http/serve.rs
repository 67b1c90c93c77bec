//! The two listeners: stdio (one client, the local user) and Streamable HTTP (`/mcp`, with
//! `/healthz`, the sign-in endpoints `/oauth/*` and the protected-resource metadata beside it;
//! client keys are checked by `client_auth`).

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use axum::{Json, Router, routing::get, serve::ListenerExt as _};
use rmcp::{
    ServiceExt,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

use crate::{
    Front, Gateway,
    http::client_auth::{self, ClientAccess},
    oauth::login::{self, Logins},
};

/// Serves one client over stdin/stdout until it disconnects or `shutdown` fires.
/// Nothing but protocol may be written to stdout: logging goes to stderr (set up by the cli).
pub async fn serve_stdio(gateway: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    // The browser has nowhere to come back to: sign-ins go through `mcpgw auth login`.
    let front = Front::new(gateway, Arc::new(Logins::without_listener()));
    let running = front
        .serve_with_ct(rmcp::transport::stdio(), shutdown.child_token())
        .await
        .context("stdio client did not start an MCP session")?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "stdio client session ended");
    Ok(())
}

/// Serves Streamable HTTP on `listener` until `shutdown` fires, with client auth as
/// [`ClientAccess::decide`] rules (an error if the listener must not start).
pub async fn serve_http(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let access = ClientAccess::decide(&gateway, listener.local_addr()?).await?;
    serve_http_with(gateway, listener, access, shutdown).await
}

/// [`serve_http`] with client auth already decided (the cli decides before connecting the
/// upstreams, so a listener that must not start fails at once).
pub async fn serve_http_with(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    access: ClientAccess,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let local: SocketAddr = listener.local_addr()?;
    let keys = access.requires_keys();
    let app = http_app(gateway, local, access, &shutdown);
    tracing::info!(
        %local,
        client_keys = if keys { "required" } else { "not required (loopback)" },
        "serving MCP over Streamable HTTP at http://{local}/mcp"
    );
    // Every response is written as soon as it is ready: without TCP_NODELAY, Nagle holds the
    // second small write of a response (an SSE body's next event, the chunked body's end)
    // until the client's delayed ACK, about 40 ms on every call of a keep-alive client.
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on an accepted connection");
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("HTTP server failed")?;
    Ok(())
}

/// The app [`serve_http_with`] serves for a listener bound to `local`, without the listener:
/// the fuzz targets drive it with `tower::ServiceExt::oneshot`. Sessions end when `shutdown`
/// fires.
pub fn http_app(
    gateway: Arc<Gateway>,
    local: SocketAddr,
    access: ClientAccess,
    shutdown: &CancellationToken,
) -> Router {
    let logins = Arc::new(Logins::for_listener(local, gateway.config()));
    let factory_gateway = gateway.clone();
    let factory_logins = logins.clone();
    // Larger request bodies on `/mcp` get 413 (`[limits] request_bytes`).
    let request_bytes = gateway.config().policy.limits.request_bytes;
    // No SSE priming events: they tell a client where to resume a broken stream, and no event
    // store keeps streams to resume from. A 2026-07-28 request whose answer needs no stream
    // gets one JSON body (rmcp's `json_response`); a session's, from `json_reply`.
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.child_token())
        .with_max_request_body_bytes(request_bytes)
        .with_sse_retry(None)
        .with_json_response(true);
    if !local.ip().is_loopback() {
        // Host validation guards a loopback listener against DNS rebinding; on a network address
        // the operator's own Host names are not known, and client keys are required there.
        mcp_config = mcp_config.disable_allowed_hosts();
    }
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.sse_retry = None;
    let service = StreamableHttpService::new(
        move || Ok(Front::new(factory_gateway.clone(), factory_logins.clone())),
        Arc::new(sessions),
        mcp_config,
    );
    let health_gateway = gateway.clone();
    // The sign-in routes are added after the JSON-RPC error mapping: they answer browsers.
    let app = Router::new()
        .nest_service("/mcp", service)
        .route_layer(axum::middleware::from_fn(
            crate::http::json_reply::prefer_json,
        ))
        // SEP-2243: `Mcp-Param-*` headers against the tools/call body, before rmcp reads it.
        .route_layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            crate::mcp::param_headers::check,
        ))
        .layer(axum::middleware::map_response(move |response| {
            transport_errors_as_json_rpc(response, request_bytes)
        }))
        .route(
            "/healthz",
            get(move || {
                let gateway = health_gateway.clone();
                async move { Json(health(&gateway)) }
            }),
        )
        .merge(login::routes(gateway.clone(), logins))
        .merge(crate::http::admin::routes(gateway.clone()));
    client_auth::apply(app, access, local)
}

/// rmcp answers transport-level failures (unparseable body, body over the limit, wrong
/// content type) with plain text. Clients expect a JSON-RPC error object, so those answers are
/// rewritten here, keeping the status and rmcp's message. This is the HTTP edge's one mapping:
/// 413 -> -32600 (too large), a body that is not JSON -> 400 / -32700 (parse error), any other
/// 4xx without a JSON body -> -32600 (invalid request).
async fn transport_errors_as_json_rpc(
    response: axum::response::Response,
    request_bytes: usize,
) -> axum::response::Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if !status.is_client_error() || is_json || status == http::StatusCode::UNAUTHORIZED {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // These bodies are short texts written by rmcp; cap the read anyway.
    let text = axum::body::to_bytes(body, 16 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let (status, code, message) = if status == http::StatusCode::PAYLOAD_TOO_LARGE {
        (
            status,
            -32600,
            format!(
                "request body is larger than the {} limit ([limits] request_bytes)",
                crate::mcp::result::human_bytes(request_bytes)
            ),
        )
    } else if text.contains("deserialize") || text.contains("parse") {
        (
            http::StatusCode::BAD_REQUEST,
            -32700,
            format!("parse error: {text}"),
        )
    } else {
        (status, -32600, text)
    };
    parts.status = status;
    parts.headers.remove(http::header::CONTENT_LENGTH);
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    });
    axum::response::Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}

fn health(gateway: &Gateway) -> serde_json::Value {
    let held = gateway.held_tools();
    let servers: Vec<_> = gateway
        .upstreams()
        .servers()
        .iter()
        .map(|server| {
            let mut status = serde_json::to_value(server.status()).unwrap_or_default();
            // Tools held for approval (pinning) are not in `tools`: say how many there are.
            status["held"] = held
                .iter()
                .filter(|tool| tool.server == server.name())
                .count()
                .into();
            status
        })
        .collect();
    serde_json::json!({
        "tools": gateway.catalog().tools().len(),
        "servers": servers,
        "audit": gateway.audit_health(),
    })
}
