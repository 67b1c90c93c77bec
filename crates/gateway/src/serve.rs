//! The two listeners: stdio (one client, the local user) and Streamable HTTP (`/mcp`).

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use axum::{Json, Router, routing::get};
use rmcp::{
    ServiceExt,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

use crate::{Front, Gateway};

/// Largest request body accepted on `/mcp`; larger ones get 413.
pub const MAX_REQUEST_BODY_BYTES: usize = 5 * 1024 * 1024;

/// Serves one client over stdin/stdout until it disconnects or `shutdown` fires.
/// Nothing but protocol may be written to stdout: logging goes to stderr (set up by the cli).
pub async fn serve_stdio(gateway: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let front = Front::new(gateway);
    let running = front
        .serve_with_ct(rmcp::transport::stdio(), shutdown.child_token())
        .await
        .context("stdio client did not start an MCP session")?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "stdio client session ended");
    Ok(())
}

/// Serves Streamable HTTP on `listener` until `shutdown` fires.
pub async fn serve_http(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let local: SocketAddr = listener.local_addr()?;
    let factory_gateway = gateway.clone();
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.child_token())
        .with_max_request_body_bytes(MAX_REQUEST_BODY_BYTES);
    if !local.ip().is_loopback() {
        // Host validation guards a loopback listener against DNS rebinding; on a network address
        // the operator's own Host names are not known yet (client auth arrives with profiles).
        mcp_config = mcp_config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(Front::new(factory_gateway.clone())),
        Arc::new(LocalSessionManager::default()),
        mcp_config,
    );
    let health_gateway = gateway.clone();
    let app = Router::new()
        .nest_service("/mcp", service)
        .route(
            "/healthz",
            get(move || {
                let gateway = health_gateway.clone();
                async move { Json(health(&gateway)) }
            }),
        );
    tracing::info!(%local, "serving MCP over Streamable HTTP at http://{local}/mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("HTTP server failed")?;
    Ok(())
}

fn health(gateway: &Gateway) -> serde_json::Value {
    let servers: Vec<_> = gateway
        .upstreams()
        .servers()
        .iter()
        .map(|s| s.status())
        .collect();
    serde_json::json!({
        "tools": gateway.catalog().tools().len(),
        "servers": servers,
    })
}
