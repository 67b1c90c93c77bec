//! `tools/call` on a legacy Streamable HTTP session, answered in the request's own task.
//!
//! rmcp runs every request of a session through its session machinery: the HTTP handler hands
//! the message to the session's worker task, the worker to the session's service loop, the
//! loop spawns a task for the handler, and the answer travels back the same way into an SSE
//! stream that `json_reply` then reads back into one JSON body. Each hop is a channel send and
//! a wake-up of another task, often on the other core; together they cost more CPU than the
//! call itself (docs/performance.md has the profile). This layer answers the common case
//! directly: the request's task parses the call once, runs the very same handler
//! ([`Front`], through rmcp's `Service::handle_request`, so every check, limit, approval and
//! audit record is the one the session path runs, and the request's span too) and writes the JSON-RPC answer as one
//! `application/json` body.
//!
//! A session is registered when its handler sees `notifications/initialized`, which rmcp hands
//! over after answering that POST: a call sent at once may still take the session path, and is
//! answered the same. Only calls that cannot need the session's streams take this path: the session negotiated a
//! handshake-era revision, its client declared neither elicitation nor sampling (nothing can
//! be asked of it mid-call), it did not ask for log messages (`logging/setLevel`), and the call
//! carries no progress token. Everything else (other methods, a client that may be asked
//! something, a header rmcp would check or refuse) goes on to rmcp unchanged. A call that has
//! not finished within [`json_reply::HOLD`] is answered as an SSE stream with keep-alive
//! comments, as the session path's answer would be, and a client's `notifications/cancelled`
//! for it cancels it (upstream too). The call runs in a task of its own, so a client that goes
//! away mid-call does not cut it short: it completes and is audited, as on the session path.
//!
//! rmcp closes a session that has seen no message for `[limits] session_idle_s`. Calls
//! answered here never reach the session's worker, so every quarter of that time a call
//! passes a no-op notification ([`KEEP_ALIVE_METHOD`]) to the session, and a busy session stays
//! open exactly as it would if its calls went through rmcp.
//!
//! Rejected: answering every session request here (rmcp's routing of server requests and
//! notifications to the stream of the request that caused them is not reachable from outside
//! it), and a session manager of our own (the whole of rmcp's session state machine again).

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures::stream;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts};
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        ClientJsonRpcMessage, ClientNotification, ClientRequest, CustomNotification, GetExtensions,
        GetMeta, JsonRpcMessage, JsonRpcNotification, JsonRpcRequest, ProtocolVersion, RequestId,
        ServerJsonRpcMessage,
    },
    service::{NotificationContext, Peer, RequestContext, Service as _},
    transport::streamable_http_server::session::{SessionManager, local::LocalSessionManager},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{
    http::json_reply,
    mcp::{Front, Traced},
    metrics::Metrics,
    sync::lock,
};

/// The notification that keeps a session whose calls are answered here from idling out.
/// rmcp passes it to [`Front`], which ignores it (as every handler ignores an unknown
/// notification).
pub(crate) const KEEP_ALIVE_METHOD: &str = "notifications/mcpgw/session_active";

/// How often an SSE answer of a long call carries a keep-alive comment (rmcp's default for
/// its own streams).
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Ended sessions' entries are swept out after this many registrations.
const SWEEP_EVERY: usize = 64;

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// The sessions whose calls may be answered here, by `Mcp-Session-Id`.
pub(crate) struct Direct {
    sessions: RwLock<HashMap<Arc<str>, Arc<Entry>>>,
    manager: Arc<LocalSessionManager>,
    /// A session is told it is in use at least this often (a quarter of rmcp's idle limit).
    touch_every: Duration,
    /// Cancels every call in flight when the listener shuts down.
    shutdown: CancellationToken,
    request_bytes: usize,
    metrics: Arc<Metrics>,
    registered: AtomicUsize,
}

/// One session: its handler (sharing the session's state) and its peer.
struct Entry {
    id: Arc<str>,
    front: Traced,
    peer: Peer<RoleServer>,
    /// The revision the session negotiated, as the `MCP-Protocol-Version` header names it.
    version: String,
    in_flight: Mutex<HashMap<RequestId, CancellationToken>>,
    touched: Mutex<Instant>,
}

/// What a request's body is, as far as this layer cares.
enum Message {
    /// Boxed: a request is large beside the other variants.
    Call(RequestId, Box<ClientRequest>),
    Cancel(RequestId),
    Other,
}

impl Direct {
    pub(crate) fn new(
        manager: Arc<LocalSessionManager>,
        limits: &config::LimitsConfig,
        shutdown: CancellationToken,
        metrics: Arc<Metrics>,
    ) -> Direct {
        Direct {
            sessions: RwLock::default(),
            manager,
            touch_every: limits.session_idle / 4,
            shutdown,
            request_bytes: limits.request_bytes,
            metrics,
            registered: AtomicUsize::new(0),
        }
    }

    /// Records the session behind `context` (its `notifications/initialized`), if its calls
    /// may be answered here (see the module docs); `front` is its handler.
    pub(crate) fn register(&self, context: &NotificationContext<RoleServer>, front: &Front) {
        let Some(id) = context
            .extensions
            .get::<Parts>()
            .and_then(|parts| parts.headers.get(SESSION_HEADER))
            .and_then(|value| value.to_str().ok())
        else {
            return;
        };
        let Some(info) = context.peer.peer_info() else {
            return;
        };
        let capabilities = &info.capabilities;
        if info.protocol_version >= ProtocolVersion::V_2026_07_28
            || capabilities.elicitation.is_some()
            || capabilities.sampling.is_some()
        {
            return;
        }
        let id: Arc<str> = Arc::from(id);
        let entry = Entry {
            id: id.clone(),
            front: Traced(front.clone()),
            peer: context.peer.clone(),
            version: info.protocol_version.to_string(),
            in_flight: Mutex::default(),
            touched: Mutex::new(Instant::now()),
        };
        let mut sessions = self.sessions.write().unwrap_or_else(|e| e.into_inner());
        if self.registered.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            sessions.retain(|_, entry| !entry.peer.is_transport_closed());
        }
        sessions.insert(id, Arc::new(entry));
    }

    fn forget(&self, id: &str) {
        self.sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// The session of a request this layer may answer, from its headers alone.
    fn candidate(&self, method: &Method, headers: &HeaderMap) -> Option<Arc<Entry>> {
        if method != Method::POST {
            return None;
        }
        let id = headers.get(SESSION_HEADER)?.to_str().ok()?;
        let entry = self
            .sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()?;
        if entry.peer.is_transport_closed() {
            self.forget(id);
            return None;
        }
        let version_ok = headers
            .get(PROTOCOL_VERSION_HEADER)
            .is_none_or(|version| version.as_bytes() == entry.version.as_bytes());
        (version_ok && plain_post(headers)).then_some(entry)
    }

    /// Runs the call `request` (id `id`) of `entry`'s session and answers it.
    async fn answer(
        &self,
        entry: Arc<Entry>,
        id: RequestId,
        mut request: ClientRequest,
        parts: Parts,
    ) -> Response {
        entry.touch(&self.manager, self.touch_every).await;
        let ct = self.shutdown.child_token();
        lock(&entry.in_flight).insert(id.clone(), ct.clone());
        let mut context = RequestContext::new(id.clone(), entry.peer.clone());
        context.ct = ct;
        std::mem::swap(&mut context.meta, request.get_meta_mut());
        std::mem::swap(&mut context.extensions, request.extensions_mut());
        context.extensions.insert(parts);
        self.metrics.direct_call();
        let task = tokio::spawn(async move {
            // Boxed: rmcp's handler future (every method's, the upstream call's within) is
            // large, and a task's future is moved more than once on its way into the task.
            let result = Box::pin(entry.front.handle_request(request, context)).await;
            lock(&entry.in_flight).remove(&id);
            encode(result, id)
        });
        reply(task, json_reply::HOLD, SSE_KEEP_ALIVE).await
    }
}

impl Entry {
    /// Tells rmcp the session is in use, when it was last told more than `every` ago.
    async fn touch(&self, manager: &LocalSessionManager, every: Duration) {
        {
            let mut touched = lock(&self.touched);
            if touched.elapsed() < every {
                return;
            }
            *touched = Instant::now();
        }
        let active = ClientJsonRpcMessage::notification(ClientNotification::CustomNotification(
            CustomNotification::new(KEEP_ALIVE_METHOD, None),
        ));
        if let Err(error) = manager.accept_message(&self.id, active).await {
            tracing::debug!(%error, "could not keep a session open");
        }
    }

    /// Cancels the call `id` of this session answered here, if one is running.
    fn cancel(&self, id: &RequestId) {
        if let Some(ct) = lock(&self.in_flight).get(id) {
            ct.cancel();
        }
    }

    fn may_answer(&self) -> bool {
        !self.front.0.logs_requested()
    }
}

/// The layer on `/mcp` (inside the session binding, so the caller owns the session).
pub(crate) async fn layer(
    State(direct): State<Arc<Direct>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() == Method::DELETE
        && let Some(id) = request.headers().get(SESSION_HEADER)
        && let Ok(id) = id.to_str()
    {
        direct.forget(id);
    }
    let Some(entry) = direct.candidate(request.method(), request.headers()) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, direct.request_bytes).await else {
        // Over the limit, or the client went away mid-body; rewritten as rmcp's own 413 is.
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    match classify(&bytes) {
        Message::Call(id, request) if entry.may_answer() && plain_call(&request) => {
            direct.answer(entry, id, *request, parts).await
        }
        Message::Cancel(id) => {
            entry.cancel(&id);
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        _ => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

/// A POST rmcp would take as it is: JSON in, both answer types accepted, no SEP-2243 headers
/// (rmcp checks those against the body).
fn plain_post(headers: &HeaderMap) -> bool {
    let mut json = false;
    let mut sse = false;
    for essence in media_types(headers, &header::ACCEPT) {
        json |= essence.eq_ignore_ascii_case("application/json");
        sse |= essence.eq_ignore_ascii_case("text/event-stream");
    }
    let json_body = media_types(headers, &header::CONTENT_TYPE)
        .any(|essence| essence.eq_ignore_ascii_case("application/json"));
    let standard_headers = headers.keys().any(|name| {
        let name = name.as_str();
        name.starts_with("mcp-param-") || name == "mcp-method" || name == "mcp-name"
    });
    json && sse && json_body && !standard_headers
}

/// The media types (without parameters) a header lists.
fn media_types<'a>(
    headers: &'a HeaderMap,
    name: &header::HeaderName,
) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|item| item.split(';').next().unwrap_or_default().trim())
}

/// A call that needs no stream: no progress token, and no 2026-07-28 request metadata.
fn plain_call(request: &ClientRequest) -> bool {
    let meta = request.get_meta();
    meta.get_progress_token().is_none() && meta.protocol_version().is_none()
}

/// What `body` is; only a body that names `tools/call` or a cancellation is parsed here.
fn classify(body: &[u8]) -> Message {
    let names = |needle: &[u8]| body.windows(needle.len()).any(|window| window == needle);
    if !names(b"tools/call") && !names(b"notifications/cancelled") {
        return Message::Other;
    }
    match serde_json::from_slice::<ClientJsonRpcMessage>(body) {
        Ok(JsonRpcMessage::Request(JsonRpcRequest {
            id,
            request: request @ ClientRequest::CallToolRequest(_),
            ..
        })) => Message::Call(id, Box::new(request)),
        Ok(JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ClientNotification::CancelledNotification(cancelled),
            ..
        })) => cancelled
            .params
            .request_id
            .map_or(Message::Other, Message::Cancel),
        _ => Message::Other,
    }
}

/// The JSON-RPC answer to request `id`.
fn encode(result: Result<rmcp::model::ServerResult, McpError>, id: RequestId) -> Bytes {
    let message: ServerJsonRpcMessage = match result {
        Ok(result) => JsonRpcMessage::response(result, id),
        Err(error) => JsonRpcMessage::error(error, Some(id)),
    };
    match serde_json::to_vec(&message) {
        Ok(bytes) => Bytes::from(bytes),
        Err(error) => {
            tracing::warn!(%error, "could not encode a tool call's answer");
            let failed = McpError::internal_error("the answer could not be encoded", None);
            let message: ServerJsonRpcMessage = JsonRpcMessage::error(failed, None);
            Bytes::from(serde_json::to_vec(&message).unwrap_or_default())
        }
    }
}

/// One JSON body when the call ends within `hold`, else an SSE stream with a keep-alive
/// comment every `keep_alive`.
async fn reply(mut task: JoinHandle<Bytes>, hold: Duration, keep_alive: Duration) -> Response {
    let json = |body: Bytes| {
        let mut response = Response::new(Body::from(body));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    };
    match tokio::time::timeout(hold, &mut task).await {
        Ok(joined) => json(joined.unwrap_or_else(|error| failed(&error))),
        Err(_still_running) => stream_reply(task, keep_alive),
    }
}

/// The answer of a long call: keep-alive comments until the call ends, then its message.
fn stream_reply(task: JoinHandle<Bytes>, keep_alive: Duration) -> Response {
    let events = stream::unfold(Some(task), move |task| async move {
        let mut task = task?;
        tokio::select! {
            joined = &mut task => {
                let message = joined.unwrap_or_else(|error| failed(&error));
                let mut event = Vec::with_capacity(message.len() + 8);
                event.extend_from_slice(b"data: ");
                event.extend_from_slice(&message);
                event.extend_from_slice(b"\n\n");
                Some((Ok::<_, Infallible>(Bytes::from(event)), None))
            }
            () = tokio::time::sleep(keep_alive) => {
                Some((Ok(Bytes::from_static(b":\n\n")), Some(task)))
            }
        }
    });
    let mut response = Response::new(Body::from_stream(events));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The answer when the call's task failed (it panicked: a bug, said as an internal error).
fn failed(error: &tokio::task::JoinError) -> Bytes {
    tracing::error!(%error, "a tool call's task failed");
    let message: ServerJsonRpcMessage = JsonRpcMessage::error(
        McpError::internal_error("the gateway failed while running the call", None),
        None,
    );
    Bytes::from(serde_json::to_vec(&message).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    header::HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect()
    }

    const ACCEPT_BOTH: (&str, &str) = ("accept", "application/json, text/event-stream");
    const JSON_BODY: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn only_a_post_rmcp_takes_as_it_is_qualifies() {
        assert!(plain_post(&headers(&[ACCEPT_BOTH, JSON_BODY])));
        assert!(plain_post(&headers(&[
            ("accept", "application/json;q=0.9"),
            ("accept", "text/event-stream"),
            ("content-type", "application/json; charset=utf-8"),
        ])));
        // rmcp answers these 406 / 415: it still does.
        assert!(!plain_post(&headers(&[
            ("accept", "application/json"),
            JSON_BODY
        ])));
        assert!(!plain_post(&headers(&[("accept", "*/*"), JSON_BODY])));
        assert!(!plain_post(&headers(&[
            ACCEPT_BOTH,
            ("content-type", "text/plain")
        ])));
        // SEP-2243 headers are checked against the body by rmcp.
        assert!(!plain_post(&headers(&[
            ACCEPT_BOTH,
            JSON_BODY,
            ("mcp-param-path", "/tmp")
        ])));
    }

    #[test]
    fn only_calls_and_cancellations_are_parsed() {
        let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a__b","arguments":{}}}"#;
        assert!(matches!(
            classify(call),
            Message::Call(RequestId::Number(7), _)
        ));
        let cancel =
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x"}}"#;
        assert!(matches!(
            classify(cancel),
            Message::Cancel(RequestId::String(_))
        ));
        let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert!(matches!(classify(list), Message::Other));
        // A body that only mentions the method, or is not JSON-RPC, is rmcp's to answer.
        let other =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"tools/call"}}"#;
        assert!(matches!(classify(other), Message::Other));
        assert!(matches!(classify(b"tools/call{"), Message::Other));
    }

    #[test]
    fn a_call_with_a_progress_token_or_modern_metadata_takes_the_session_path() {
        let parse = |body: &str| match classify(body.as_bytes()) {
            Message::Call(_, request) => request,
            _ => panic!("not a call: {body}"),
        };
        assert!(plain_call(&parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"other":1}}}"#
        )));
        assert!(!plain_call(&parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":"p"}}}"#
        )));
        assert!(!plain_call(&parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#
        )));
    }

    #[tokio::test]
    async fn a_long_call_is_answered_as_a_stream_with_its_message_last() {
        let task = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
        });
        let hold = Duration::from_millis(20);
        let response = reply(task, hold, Duration::from_millis(50)).await;
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(":\n\n"), "keep-alives first: {text:?}");
        assert!(
            text.ends_with("\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"),
            "the answer last, as one event: {text:?}"
        );
        assert_eq!(text.matches("data:").count(), 1, "{text:?}");
    }

    #[tokio::test]
    async fn a_quick_call_is_one_json_body() {
        let task = tokio::spawn(async { Bytes::from_static(b"{}") });
        let response = reply(task, json_reply::HOLD, SSE_KEEP_ALIVE).await;
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .expect("body");
        assert_eq!(&body[..], b"{}");
    }
}
