//! The two listeners: stdio (one client, the local user) and Streamable HTTP (`/mcp`, with
//! `/healthz`, the sign-in endpoints `/oauth/*`, the admin routes (`/admin/*`, the admin API
//! `/admin/v1/*`, `/metrics`), the console (`/ui`) and the protected-resource metadata beside
//! it). Layers, outermost first: the request guard (`guard`: Host, Origin, the admin routes'
//! rules) in front of everything, client auth (`client_auth`), and on `/mcp` the session
//! binding (`session_owner`), `Mcp-Param-*` checks and JSON replies.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{Json, Router, routing::get};
use rmcp::{
    ServiceExt,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

use crate::{
    Gateway,
    http::{
        client_auth::{self, ClientAccess},
        direct::{self, Direct},
        drain::{self, Drain},
        errors,
        guard::{Guard, admin_token_path},
        roaming::Roaming,
        session_owner::{self, Owners},
    },
    mcp::{Front, Traced},
    oauth::login::{self, Logins},
};

/// Serves one client over stdin/stdout until it disconnects or `shutdown` fires.
/// Nothing but protocol may be written to stdout: logging goes to stderr (set up by the cli).
pub async fn serve_stdio(gateway: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    // The browser has nowhere to come back to: sign-ins go through `mcpgw auth login`.
    let front = Traced(Front::new(gateway, Arc::new(Logins::without_listener())));
    let running = front
        .serve_with_ct(rmcp::transport::stdio(), shutdown.child_token())
        .await
        .context("stdio client did not start an MCP session")?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "stdio client session ended");
    Ok(())
}

/// Serves Streamable HTTP on `listener` until `shutdown` fires, with client auth as
/// [`ClientAccess::decide`] rules (an error if the listener must not start). Stops at once,
/// without a drain.
pub async fn serve_http(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let access = ClientAccess::decide(&gateway, listener.local_addr()?).await?;
    let now = shutdown.child_token();
    serve_http_with(gateway, listener, access, shutdown, now).await
}

/// [`serve_http`] with client auth already decided (the cli decides before connecting the
/// upstreams, so a listener that must not start fails at once), and a drain: when `shutdown`
/// fires, new MCP requests get 503 with `Retry-After` while those in flight finish, for at most
/// `[limits] shutdown_grace_s`; `now` (a second signal) ends the drain at once.
///
/// Connections are served by hyper directly rather than `axum::serve`, which offers neither a
/// connection cap nor a header-read timeout: at most `[limits] max_connections` are open at
/// once (one more is answered 503 and closed, before any authentication), a connection has
/// `header_timeout_s` to send each request's headers (hyper's timer runs whenever a request is
/// awaited, so this also closes idle keep-alive connections; `idle_timeout_s` bounds them when
/// longer header timeouts are configured), and `TCP_NODELAY` is set on every accepted socket.
pub async fn serve_http_with(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    access: ClientAccess,
    shutdown: CancellationToken,
    now: CancellationToken,
) -> anyhow::Result<()> {
    let local: SocketAddr = listener.local_addr()?;
    log_listening(&gateway, local, &access);
    let limits = gateway.config().policy.limits.clone();
    let sessions_end = CancellationToken::new();
    let drain = Drain::default();
    let app = app(gateway, local, access, &sessions_end, drain.clone());
    let stop_accepting = CancellationToken::new();
    // One permit per open connection: at most `max_connections`, and all of them back once
    // every connection has closed.
    let open = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let accepting = tokio::spawn(accept(
        listener,
        app,
        limits.clone(),
        stop_accepting.clone(),
        open.clone(),
    ));
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = now.cancelled() => {}
    }
    if !now.is_cancelled() {
        drain.begin();
        tracing::info!(
            in_flight = drain.in_flight(),
            grace_s = limits.shutdown_grace.as_secs(),
            "draining: new MCP requests get 503 while those in flight finish"
        );
        tokio::select! {
            () = drain.idle() => tracing::info!("drained: no request in flight"),
            () = tokio::time::sleep(limits.shutdown_grace) => tracing::warn!(
                in_flight = drain.in_flight(),
                "shutdown grace period over; ending the requests still in flight"
            ),
            () = now.cancelled() => tracing::warn!(
                in_flight = drain.in_flight(),
                "second signal; ending the requests still in flight"
            ),
        }
    }
    stop_accepting.cancel();
    sessions_end.cancel();
    let _ = accepting.await;
    // Connections close once their last response is written; a client that does not read
    // keeps nobody waiting for long.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(Duration::from_secs(2), open.acquire_many(all))
        .await
        .is_err()
    {
        tracing::debug!("connections still open after 2 s; dropping them");
    }
    Ok(())
}

/// Says where the listener serves and, on an open loopback listener, the file holding the admin
/// token. Never the token itself: a log may be shipped off the machine (`--log-format json`);
/// the text banner shows it to the person at the terminal, and the CLI reads the file.
fn log_listening(gateway: &Gateway, local: SocketAddr, access: &ClientAccess) {
    match access.admin_token() {
        Some(_) => tracing::info!(
            %local,
            client_keys = "not required (loopback)",
            admin_token_file = %admin_token_path(&gateway.config().store).display(),
            "serving MCP over Streamable HTTP at http://{local}/mcp; the admin routes need the admin token (header X-Mcpgw-Admin-Token) from admin_token_file"
        ),
        None => tracing::info!(
            %local,
            client_keys = "required",
            "serving MCP over Streamable HTTP at http://{local}/mcp"
        ),
    }
}

/// Accepts connections until `stop` fires, serving each in a task of its own that holds one
/// permit of `open` (so at most `max_connections` at once).
async fn accept(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: config::LimitsConfig,
    stop: CancellationToken,
    open: Arc<tokio::sync::Semaphore>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout.min(limits.idle_timeout))
        .keep_alive(true);
    let service = hyper_util::service::TowerToHyperService::new(app);
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors (EMFILE) and the like: let connections close first.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Every response is written as soon as it is ready: without TCP_NODELAY, Nagle holds
        // the second small write of a response (an SSE body's next event, the chunked body's
        // end) until the client's delayed ACK, about 40 ms on every call of a keep-alive
        // client.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on an accepted connection");
        }
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            continue;
        };
        let connection = http
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service.clone())
            .with_upgrades();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                    return;
                }
                () = stop.cancelled() => {}
            }
            // Idle keep-alive connections close now; one in the middle of a response finishes it.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
}

/// Answers a connection beyond `max_connections` with 503 and closes it, without reading it.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: application/json\r\ncontent-length: 84\r\nconnection: close\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"too many connections\"}}";
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(BUSY).await;
        let _ = stream.shutdown().await;
    })
    .await;
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
    app(gateway, local, access, shutdown, Drain::default())
}

/// [`http_app`] with `drain` counting and, once it begins, refusing MCP requests.
fn app(
    gateway: Arc<Gateway>,
    local: SocketAddr,
    access: ClientAccess,
    shutdown: &CancellationToken,
    drain: Drain,
) -> Router {
    let logins = Arc::new(Logins::for_listener(local, &gateway.config()));
    crate::oauth::login::hear_replicas(&gateway, &logins);
    // Larger request bodies on `/mcp` get 413 (`[limits] request_bytes`).
    let request_bytes = gateway.config().policy.limits.request_bytes;
    let (service, owners, direct) = mcp_service(&gateway, &logins, shutdown);
    let metrics = crate::http::admin::metrics_route(gateway.clone(), owners.clone());
    let health_gateway = gateway.clone();
    let health_drain = drain.clone();
    // The sign-in routes are added after the JSON-RPC error mapping: they answer browsers.
    let app = Router::new()
        .nest_service("/mcp", service)
        .route_layer(axum::middleware::from_fn(
            crate::http::json_reply::prefer_json,
        ))
        // Plain tool calls of a legacy session, answered without rmcp's session machinery.
        .route_layer(axum::middleware::from_fn_with_state(direct, direct::layer))
        // SEP-2243: `Mcp-Param-*` headers against the tools/call body, before rmcp reads it.
        .route_layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            crate::mcp::param_headers::check,
        ))
        // Inside client auth, which names the principal a session is bound to.
        .route_layer(axum::middleware::from_fn_with_state(
            owners,
            session_owner::bind,
        ))
        // Outermost on `/mcp`: a request refused while draining costs nothing more.
        .route_layer(axum::middleware::from_fn_with_state(
            drain.clone(),
            drain::layer,
        ))
        .layer(axum::middleware::map_response(move |response| {
            transport_errors_as_json_rpc(response, request_bytes)
        }))
        .route(
            "/healthz",
            get(move || {
                let gateway = health_gateway.clone();
                let drain = health_drain.clone();
                async move {
                    let mut health = health(&gateway);
                    health["in_flight"] = drain.in_flight().into();
                    health["draining"] = drain.is_draining().into();
                    Json(health)
                }
            }),
        )
        .merge(login::routes(gateway.clone(), logins.clone()))
        .merge(crate::http::admin::routes(gateway.clone()))
        .merge(crate::http::admin_api::routes(
            gateway.clone(),
            logins.clone(),
        ))
        .merge(crate::http::console::routes(
            gateway.clone(),
            access.admin_token().cloned(),
            logins,
        ))
        .merge(metrics);
    let guard = Guard::new(
        local,
        &gateway.config().gateway,
        access.admin_token().cloned(),
    );
    guard.apply(client_auth::apply(app, access, local))
}

/// rmcp's Streamable HTTP service for `/mcp`, the session owners bound to its sessions, and
/// the sessions whose plain calls are answered directly.
fn mcp_service(
    gateway: &Arc<Gateway>,
    logins: &Arc<Logins>,
    shutdown: &CancellationToken,
) -> (
    StreamableHttpService<Traced, LocalSessionManager>,
    Arc<Owners>,
    Arc<Direct>,
) {
    let limits = &gateway.config().policy.limits;
    // No SSE priming events: they tell a client where to resume a broken stream, and no event
    // store keeps streams to resume from. A 2026-07-28 request whose answer needs no stream
    // gets one JSON body (rmcp's `json_response`); a session's, from `json_reply`. Host and
    // Origin are the guard's, for every route alike (rmcp's check covered `/mcp` only).
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.child_token())
        .with_max_request_body_bytes(limits.request_bytes)
        .with_sse_retry(None)
        .with_json_response(true)
        .disable_allowed_hosts();
    // With a store shared by replicas, legacy sessions carry their sealed state in their ids
    // and any replica re-creates them (`roaming`).
    let roaming = gateway
        .store()
        .filter(|store| store.backend() == store::Backend::Postgres)
        .map(|store| Arc::new(Roaming::new(store.clone())));
    if let Some(roaming) = &roaming {
        mcp_config.session_store = Some(roaming.session_store());
    }
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.sse_retry = None;
    // An unused session is closed after `[limits] session_idle_s` (rmcp's default is 5 min).
    sessions.session_config.keep_alive = Some(limits.session_idle);
    let sessions = Arc::new(sessions);
    let owners = Arc::new(Owners::new(
        sessions.clone(),
        limits,
        gateway.metrics().clone(),
        roaming.clone(),
        gateway.cluster.clone(),
    ));
    // Copies of sessions ended through another replica are closed as it announces them.
    if let (Some(cluster), Some(_)) = (&gateway.cluster, &roaming) {
        crate::replicas::on_events(cluster, Arc::downgrade(&owners), session_owner::act);
    }
    let direct = Arc::new(Direct::new(
        sessions.clone(),
        limits,
        shutdown.child_token(),
        gateway.metrics().clone(),
    ));
    let (factory_gateway, factory_logins, factory_direct) =
        (gateway.clone(), logins.clone(), direct.clone());
    let service = StreamableHttpService::new(
        move || {
            Ok(Traced(
                Front::new(factory_gateway.clone(), factory_logins.clone())
                    .with_direct(factory_direct.clone()),
            ))
        },
        sessions,
        mcp_config,
    );
    (service, owners, direct)
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
    let (parts, body) = response.into_parts();
    // These bodies are short texts written by rmcp; cap the read anyway.
    let text = axum::body::to_bytes(body, 16 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let (status, code, message) = if status == http::StatusCode::PAYLOAD_TOO_LARGE {
        (
            status,
            errors::INVALID_REQUEST,
            format!(
                "request body is larger than the {} limit ([limits] request_bytes)",
                crate::mcp::result::human_bytes(request_bytes)
            ),
        )
    } else if text.contains("deserialize") || text.contains("parse") {
        (
            http::StatusCode::BAD_REQUEST,
            errors::PARSE_ERROR,
            format!("parse error: {text}"),
        )
    } else {
        (status, errors::INVALID_REQUEST, text)
    };
    let mut answer = errors::json_rpc(status, code, &message);
    // rmcp's own headers (none carry the body's length once it is rewritten) stay.
    for (name, value) in &parts.headers {
        if name != http::header::CONTENT_LENGTH && name != http::header::CONTENT_TYPE {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    answer
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
        "reload": gateway.reload_status(),
        "replicas": gateway.replicas_health(),
    })
}
