//! Fuzzes the JSON-RPC front end over HTTP: arbitrary bytes as the body of a request to `/mcp`
//! on the gateway's real app (`gateway::http_app`: rmcp's Streamable HTTP service with mcpgw's
//! layers), on a gateway without upstream servers, sent with `tower::ServiceExt::oneshot` (no
//! TCP).
//!
//! The first two bytes pick the headers and the method; the rest is the body:
//! - byte 0, bits 0-1: `Content-Type` (JSON, JSON with charset, text/plain, none);
//!   bits 2-3: `Accept` (both, JSON only, SSE only, none); bits 4-6: `MCP-Protocol-Version`
//!   (none, each known version, garbage); bit 7: send the body inside a session opened by a
//!   valid `initialize` first, so that session-bound requests reach mcpgw's handlers;
//! - byte 1, bits 0-1: `Host` (the listener's address, `localhost`, a foreign host, none:
//!   the request guard answers the last two 403 and 400);
//!   bits 2-3: method (POST, POST, DELETE, GET); bit 4: an unknown `Mcp-Session-Id`
//!   (ignored when bit 7 of byte 0 opened a session); bit 5: `Mcp-Method` and `Mcp-Name`
//!   mirrored from the body, as 2026-07-28 clients send them.
//!
//! Invariant: no panic (libFuzzer aborts on any, spawned tasks included), no 5xx status, and
//! every response body ends (a body that never does trips libFuzzer's `-timeout`).

#![no_main]

use std::{net::SocketAddr, path::Path, sync::LazyLock};

use axum::{Router, body::Body};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The address the app believes it listens on (loopback: no client keys, Host validation on).
const LOCAL: &str = "127.0.0.1:18790";
/// Largest response body read; the gateway's answers to one message are far smaller.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

const PROTOCOL_VERSIONS: [Option<&str>; 8] = [
    None,
    Some("2024-11-05"),
    Some("2025-03-26"),
    Some("2025-06-18"),
    Some("2025-11-25"),
    Some("2026-07-28"),
    Some("1999-01-01"),
    Some("not a version"),
];

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

struct Harness {
    runtime: Runtime,
    app: Router,
}

/// One runtime and one app for the whole run: building the gateway per input would measure
/// its construction, not the front end. Current-thread, so each input's work (spawned session
/// tasks included) runs while that input is being sent.
static HARNESS: LazyLock<Harness> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let app = runtime.block_on(async {
        let config = config::parse_toml("", Path::new("fuzz.toml")).expect("empty config is valid");
        let gateway = gateway::Gateway::new(config, None);
        let local: SocketAddr = LOCAL.parse().expect("socket address");
        // Never cancelled: sessions end by DELETE (see `close_session`).
        let shutdown = CancellationToken::new();
        let access =
            gateway::ClientAccess::Open(gateway::AdminToken::generate().expect("admin token"));
        gateway::http_app(gateway, local, access, &shutdown)
    });
    Harness { runtime, app }
});

fuzz_target!(|data: &[u8]| {
    let (flags, body) = match data {
        [a, b, body @ ..] => ([*a, *b], body),
        _ => return,
    };
    let harness = &*HARNESS;
    harness.runtime.block_on(run(&harness.app, flags, body));
});

async fn run(app: &Router, flags: [u8; 2], body: &[u8]) {
    let session = if flags[0] & 0x80 != 0 {
        Some(open_session(app).await)
    } else if flags[1] & 0x10 != 0 {
        Some("00000000-0000-0000-0000-000000000000".to_owned())
    } else {
        None
    };
    let method = match (flags[1] >> 2) & 0b11 {
        2 => Method::DELETE,
        3 => Method::GET,
        _ => Method::POST,
    };
    let mut request = Request::builder().method(method.clone()).uri("/mcp");
    request = match flags[1] & 0b11 {
        0 => request.header(http::header::HOST, LOCAL),
        1 => request.header(http::header::HOST, "localhost"),
        2 => request.header(http::header::HOST, "attacker.example:80"),
        _ => request,
    };
    request = match flags[0] & 0b11 {
        0 => request.header(http::header::CONTENT_TYPE, "application/json"),
        1 => request.header(
            http::header::CONTENT_TYPE,
            "application/json; charset=utf-8",
        ),
        2 => request.header(http::header::CONTENT_TYPE, "text/plain"),
        _ => request,
    };
    request = match (flags[0] >> 2) & 0b11 {
        0 => request.header(http::header::ACCEPT, "application/json, text/event-stream"),
        1 => request.header(http::header::ACCEPT, "application/json"),
        2 => request.header(http::header::ACCEPT, "text/event-stream"),
        _ => request,
    };
    if let Some(version) = PROTOCOL_VERSIONS[usize::from((flags[0] >> 4) & 0b111)] {
        request = request.header("mcp-protocol-version", version);
    }
    if let Some(id) = &session {
        request = request.header("mcp-session-id", id.as_str());
    }
    if flags[1] & 0x20 != 0 {
        for (name, value) in mirrored_headers(body) {
            request = request.header(name, value);
        }
    }
    let request = request
        .body(Body::from(body.to_vec()))
        .expect("request from fixed parts");
    let response = send(app, request).await;
    // A GET inside a session is the standalone SSE stream, open until the session ends: only
    // its status is checked. Every other body must end.
    let keeps_open = method == Method::GET && response.status() == StatusCode::OK;
    if !keeps_open {
        read_body(response).await;
    }
    if let Some(id) = session.filter(|_| flags[0] & 0x80 != 0) {
        close_session(app, &id).await;
    }
}

/// Sends `request` and checks the one status-level invariant.
async fn send(app: &Router, request: Request<Body>) -> Response<Body> {
    let what = format!("{} {:?}", request.method(), request.headers());
    let response = app
        .clone()
        .oneshot(request)
        .await
        .expect("Router is infallible");
    assert!(
        !response.status().is_server_error(),
        "{what} answered {}",
        response.status()
    );
    response
}

async fn read_body(response: Response<Body>) -> Vec<u8> {
    axum::body::to_bytes(response.into_body(), MAX_RESPONSE_BYTES)
        .await
        .map(|bytes| bytes.to_vec())
        .unwrap_or_default()
}

/// The `Mcp-Method` and `Mcp-Name` headers a 2026-07-28 client mirrors from a request's body
/// (SEP-2243). A name that cannot be a header value as it is is left out (clients would send
/// it base64-wrapped).
fn mirrored_headers(body: &[u8]) -> Vec<(&'static str, HeaderValue)> {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return Vec::new();
    };
    let mut headers = Vec::new();
    headers.extend(
        HeaderValue::from_str(method)
            .ok()
            .map(|v| ("mcp-method", v)),
    );
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return headers,
    };
    let name = message
        .get("params")
        .and_then(|params| params.get(key))
        .and_then(Value::as_str)
        .and_then(|name| HeaderValue::from_str(name).ok());
    headers.extend(name.map(|v| ("mcp-name", v)));
    headers
}

fn post(body: &str, session: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/mcp")
        .header(http::header::HOST, LOCAL)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream");
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    request
        .body(Body::from(body.to_owned()))
        .expect("request from fixed parts")
}

/// A session as a client opens one: `initialize`, then `notifications/initialized`.
async fn open_session(app: &Router) -> String {
    let response = send(app, post(INITIALIZE, None)).await;
    assert_eq!(response.status(), StatusCode::OK, "initialize failed");
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("initialize answered without a session id")
        .to_owned();
    read_body(response).await;
    let response = send(app, post(INITIALIZED, Some(&id))).await;
    read_body(response).await;
    id
}

/// Ends the session, so sessions do not pile up over millions of inputs. The fuzzed request
/// may have ended it already (a DELETE); then this one is answered 404.
async fn close_session(app: &Router, id: &str) {
    let request = Request::delete("/mcp")
        .header(http::header::HOST, LOCAL)
        .header("mcp-session-id", id)
        .body(Body::empty())
        .expect("request from fixed parts");
    let response = send(app, request).await;
    read_body(response).await;
}
