//! Legacy HTTP+SSE (protocol 2024-11-05) client transport for rmcp.
//!
//! rmcp removed its SSE client in 0.11, but many upstream servers in the wild
//! (TS SDK `SSEServerTransport`, Python `mcp` `sse_app`, hosted "`/sse`" URLs)
//! still speak only this deprecated transport, so mcpgw needs its own client.
//! [`SseClientTransport`] implements [`Transport<RoleClient>`], so it plugs into
//! `rmcp::ServiceExt::serve` / `serve_client_with_lifecycle` like rmcp's own
//! transports.
//!
//! The wire protocol: the client opens `GET <url>` (`Accept: text/event-stream`);
//! the server's first event is `event: endpoint` whose data is a URI, resolved
//! against the SSE URL; the client POSTs every JSON-RPC message to that URI
//! (the server answers 202 with no meaningful body); everything the server
//! sends arrives as `event: message` on the stream.
//!
//! Protocol corners, and what we do about them:
//! - The endpoint URI is usually relative (`/message?sessionId=…`). An endpoint
//!   on another origin (scheme, host or port) is refused: a hostile or
//!   compromised server could otherwise make us POST our configured headers
//!   (often credentials) anywhere. It is resolved against the configured URL,
//!   not the post-redirect one, as the TS and Python SDK clients do.
//! - The session id in the endpoint query is a bearer capability for the
//!   session, so URLs in errors and logs show no query string.
//! - A 401, on the GET or a POST, is [`SseError::Unauthorized`] with the
//!   `WWW-Authenticate` challenge, so the owner can say whether the server
//!   rejected our credentials or wants OAuth (RFC 9728 `resource_metadata`).
//! - A POST answered 404 means the server forgot the session (restart,
//!   expiry): [`SseError::SessionExpired`], so the owner can reconnect. Some
//!   servers (the reference `server-everything`) never answer a POST for an
//!   unknown session at all, so each POST is bounded by `connect_timeout`: the
//!   server only has to accept the message, the answer comes on the stream.
//! - An event without an `event:` field is a `message` (SSE default type).
//!   Undecodable `message` data is logged and skipped; unknown event types and
//!   repeated `endpoint` events are ignored. There is no resumption in this
//!   protocol: when the stream ends or fails, [`Transport::receive`] returns
//!   `None`, the connection is over and the owner reconnects.
//! - One event may hold at most [`MAX_EVENT_BYTES`] (or the limit given to
//!   [`SseClientTransport::connect_with_limit`]); a larger one ends the
//!   stream, so a hostile server cannot make us buffer without bound.
//! - `sse-stream` 0.2 rejects lines the SSE spec says to ignore (unknown field
//!   names, lines without a colon). Real MCP servers never send them, and
//!   continuing after such an error would silently drop the rest of a chunk,
//!   so they end the stream like any other stream error.
//! - The `reqwest::Client` must not carry a total `timeout`: it would cut the
//!   long-lived GET stream.
//! - The network policy ([`SseClientConfig::policy`]) judges the SSE URL before
//!   the GET and the endpoint before it is used (`netguard::check_url`); the
//!   client must come from `netguard::guarded_client_builder` with the same
//!   policy, which judges resolved addresses and redirects. A refusal is
//!   [`SseError::Refused`], found in request failures too.

use std::{fmt, sync::Arc, time::Duration};

use futures::{StreamExt, stream::BoxStream};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use netguard::{Policy, Refusal};
use rmcp::{
    RoleClient,
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use sse_stream::{Sse, SseStream};
use url::Url;

/// Largest accepted SSE event (all its lines, without line terminators).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Default for [`SseClientConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How many bytes of a POST answer we read (and discard) so the connection
/// can be reused; past that we just drop it.
const POST_BODY_DRAIN_LIMIT: usize = 64 * 1024;

/// How much of a `WWW-Authenticate` header is kept in [`SseError::Unauthorized`].
pub const MAX_CHALLENGE_CHARS: usize = 2048;

/// How much of undecodable message data goes into a log line.
const LOGGED_DATA_CHARS: usize = 200;

/// Where and how to connect.
#[derive(Clone)]
pub struct SseClientConfig {
    /// The SSE URL (`GET`), e.g. `http://127.0.0.1:3001/sse`.
    pub url: Url,
    /// Sent on the GET and on every POST. May hold secrets: values are never
    /// logged nor put into errors.
    pub headers: HeaderMap,
    /// Must not have a total `timeout` set (it would cut the stream). Built by
    /// `netguard::guarded_client_builder` with [`SseClientConfig::policy`].
    pub client: reqwest::Client,
    /// What the SSE URL and the endpoint the server names must pass.
    pub policy: Arc<Policy>,
    /// Bounds the GET plus the wait for the `endpoint` event, and separately
    /// each POST until the server accepts the message.
    pub connect_timeout: Duration,
}

impl SseClientConfig {
    /// A config with no extra headers and [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn new(url: Url, client: reqwest::Client, policy: Arc<Policy>) -> Self {
        Self {
            url,
            headers: HeaderMap::new(),
            client,
            policy,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

impl fmt::Debug for SseClientConfig {
    // Hand-written: `HeaderMap`'s Debug would print the (secret) values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseClientConfig")
            .field("url", &redact(&self.url))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("policy", &self.policy)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// Everything that can go wrong with a legacy SSE connection.
///
/// URLs are shown without userinfo and query (the query holds the session id);
/// header values never appear.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    #[error("request to {url} failed: {reason}")]
    Request { url: String, reason: String },
    /// The network policy refused the SSE URL, the endpoint, a redirect or a resolved
    /// address; nothing was sent there. The refusal shows origins only.
    #[error("{0}")]
    Refused(Refusal),
    #[error("{url} answered http {status}")]
    HttpStatus { url: String, status: StatusCode },
    /// HTTP 401, on the GET or a POST. `challenge` is the `WWW-Authenticate` header (at most
    /// [`MAX_CHALLENGE_CHARS`]), which says whether the server wants OAuth (RFC 9728).
    #[error("{url} answered http 401 Unauthorized")]
    Unauthorized {
        url: String,
        challenge: Option<String>,
    },
    #[error("{url} is not an sse stream (content-type {content_type})")]
    NotEventStream { url: String, content_type: String },
    #[error("no response from {url} within {timeout:?}")]
    ConnectTimeout { url: String, timeout: Duration },
    #[error("no endpoint event from {url} within {timeout:?}")]
    EndpointTimeout { url: String, timeout: Duration },
    #[error("sse stream from {url} ended before the endpoint event")]
    NoEndpoint { url: String },
    #[error("endpoint event carries no uri")]
    EmptyEndpoint,
    #[error("endpoint event carries an invalid uri: {0}")]
    InvalidEndpoint(url::ParseError),
    #[error("endpoint origin {endpoint} differs from the sse url origin {sse}, refused")]
    CrossOriginEndpoint { endpoint: String, sse: String },
    #[error("reading the sse stream failed: {reason}")]
    Read { reason: String },
    #[error("sse event larger than {limit} bytes")]
    EventTooLarge { limit: usize },
    #[error("malformed sse stream: {0}")]
    Malformed(sse_stream::Error),
    #[error("session expired: {url} answered http 404")]
    SessionExpired { url: String },
    #[error("post to {url} not accepted within {timeout:?}")]
    PostTimeout { url: String, timeout: Duration },
    #[error("cannot encode message: {0}")]
    Encode(serde_json::Error),
    #[error("transport closed")]
    Closed,
}

/// A connected legacy HTTP+SSE session: the open event stream plus the
/// endpoint that takes our messages.
pub struct SseClientTransport {
    /// `None` once the stream ended, failed or was closed.
    events: Option<EventStream>,
    /// `None` once closed.
    poster: Option<Arc<Poster>>,
    oversized: Oversized,
}

/// Whether a transport's stream ended on an event over the size limit. A handle taken with
/// [`SseClientTransport::oversized`] before the transport is handed to rmcp stays readable
/// after: rmcp only sees the stream end, and its callers only "transport closed".
#[derive(Clone, Debug, Default)]
pub struct Oversized(Arc<std::sync::atomic::AtomicBool>);

impl Oversized {
    pub fn happened(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl SseClientTransport {
    /// A handle saying, once the stream has ended, whether an oversized event ended it.
    pub fn oversized(&self) -> Oversized {
        self.oversized.clone()
    }

    /// Opens the stream and waits (at most `connect_timeout`) for the
    /// `endpoint` event.
    pub async fn connect(config: SseClientConfig) -> Result<Self, SseError> {
        Self::connect_with_limit(config, MAX_EVENT_BYTES).await
    }

    /// [`SseClientTransport::connect`] with at most `max_event_bytes` per event instead of
    /// [`MAX_EVENT_BYTES`].
    pub async fn connect_with_limit(
        config: SseClientConfig,
        max_event_bytes: usize,
    ) -> Result<Self, SseError> {
        let SseClientConfig {
            url,
            headers,
            client,
            policy,
            connect_timeout,
        } = config;
        netguard::check_url(&url, &policy).map_err(SseError::Refused)?;
        let shown = redact(&url);
        let deadline = tokio::time::Instant::now() + connect_timeout;

        let mut get_headers = sensitive(headers.clone());
        get_headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        get_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        let request = client.get(url.clone()).headers(get_headers).send();
        let response = match tokio::time::timeout_at(deadline, request).await {
            Err(_) => {
                return Err(SseError::ConnectTimeout {
                    url: shown,
                    timeout: connect_timeout,
                });
            }
            Ok(Err(error)) => return Err(request_error(&url, &shown, error)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED {
            return Err(SseError::Unauthorized {
                url: shown,
                challenge: challenge(response.headers()),
            });
        }
        if !status.is_success() {
            return Err(SseError::HttpStatus { url: shown, status });
        }
        if !is_event_stream(response.headers()) {
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|value| truncate(&String::from_utf8_lossy(value.as_bytes()), 64).to_owned())
                .unwrap_or_else(|| "none".to_owned());
            return Err(SseError::NotEventStream {
                url: shown,
                content_type,
            });
        }

        let mut events = event_stream(response, max_event_bytes);
        let data = match tokio::time::timeout_at(deadline, wait_for_endpoint(&mut events)).await {
            Err(_) => {
                return Err(SseError::EndpointTimeout {
                    url: shown,
                    timeout: connect_timeout,
                });
            }
            Ok(Err(error)) => return Err(error),
            Ok(Ok(None)) => return Err(SseError::NoEndpoint { url: shown }),
            Ok(Ok(Some(data))) => data,
        };
        let endpoint = resolve_endpoint(&url, &data)?;
        // Same origin as the checked URL, so the same verdict today; checked anyway, as every
        // URL learned at run time is.
        netguard::check_url(&endpoint, &policy).map_err(SseError::Refused)?;
        tracing::debug!(url = %shown, endpoint = %redact(&endpoint), "sse session open");

        let mut post_headers = sensitive(headers);
        post_headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(Self {
            oversized: Oversized::default(),
            events: Some(events),
            poster: Some(Arc::new(Poster {
                client,
                shown: redact(&endpoint),
                endpoint,
                headers: post_headers,
                timeout: connect_timeout,
            })),
        })
    }
}

impl fmt::Debug for SseClientTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseClientTransport")
            .field("open", &self.events.is_some())
            .field("endpoint", &self.poster.as_ref().map(|p| &p.shown))
            .finish()
    }
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let poster = self.poster.clone();
        async move {
            let poster = poster.ok_or(SseError::Closed)?;
            poster.post(&item).await
        }
    }

    // Cancel-safe, as rmcp's serve loop polls it inside `select!`: the only
    // await is `next()` on the stream, which keeps its own buffer.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let next = self.events.as_mut()?.next().await;
            match next {
                None => {
                    tracing::debug!("sse stream ended");
                    self.events = None;
                    return None;
                }
                Some(Err(error)) => {
                    let error = from_stream_error(error);
                    if matches!(error, SseError::EventTooLarge { .. }) {
                        self.oversized
                            .0
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    tracing::warn!(%error, "sse stream failed; connection over");
                    self.events = None;
                    return None;
                }
                Some(Ok(event)) => {
                    if let Some(message) = decode(event) {
                        return Some(message);
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), SseError> {
        // Dropping the stream closes the GET, which ends the session server-side.
        self.events = None;
        self.poster = None;
        Ok(())
    }
}

type EventStream = BoxStream<'static, Result<Sse, sse_stream::Error>>;

struct Poster {
    client: reqwest::Client,
    endpoint: Url,
    /// `endpoint` as it may appear in errors and logs.
    shown: String,
    headers: HeaderMap,
    timeout: Duration,
}

impl Poster {
    async fn post(&self, message: &TxJsonRpcMessage<RoleClient>) -> Result<(), SseError> {
        let body = serde_json::to_vec(message).map_err(SseError::Encode)?;
        let mut headers = self.headers.clone();
        for (name, value) in super::trace_headers(message) {
            headers.insert(name, value);
        }
        let exchange = async {
            let mut response = self
                .client
                .post(self.endpoint.clone())
                .headers(headers)
                .body(body)
                .send()
                .await
                .map_err(|error| request_error(&self.endpoint, &self.shown, error))?;
            let status = response.status();
            if status == StatusCode::NOT_FOUND {
                return Err(SseError::SessionExpired {
                    url: self.shown.clone(),
                });
            }
            if status == StatusCode::UNAUTHORIZED {
                return Err(SseError::Unauthorized {
                    url: self.shown.clone(),
                    challenge: challenge(response.headers()),
                });
            }
            if !status.is_success() {
                return Err(SseError::HttpStatus {
                    url: self.shown.clone(),
                    status,
                });
            }
            // The answer travels on the stream; the body ("Accepted") is noise.
            let mut drained = 0;
            while let Ok(Some(chunk)) = response.chunk().await {
                drained += chunk.len();
                if drained > POST_BODY_DRAIN_LIMIT {
                    break;
                }
            }
            Ok(())
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| SseError::PostTimeout {
                url: self.shown.clone(),
                timeout: self.timeout,
            })?
    }
}

fn event_stream(response: reqwest::Response, max_event_bytes: usize) -> EventStream {
    let mut limit = EventSizeLimit::new(max_event_bytes);
    let bytes = response.bytes_stream().flat_map(move |chunk| {
        let items = match chunk {
            Err(error) => vec![Err(SseError::Read {
                reason: render(&error.without_url()),
            })],
            // Hand over what precedes the offending byte, so that complete
            // events in the same chunk are still delivered, then fail.
            Ok(chunk) => match limit.feed(&chunk) {
                Ok(()) => vec![Ok(chunk)],
                Err(at) => vec![
                    Ok(chunk.slice(..at)),
                    Err(SseError::EventTooLarge { limit: limit.limit }),
                ],
            },
        };
        futures::stream::iter(items)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

/// Returns the data of the first `endpoint` event, `None` if the stream ends first.
async fn wait_for_endpoint(events: &mut EventStream) -> Result<Option<String>, SseError> {
    while let Some(event) = events.next().await {
        let event = event.map_err(from_stream_error)?;
        match event.event.as_deref() {
            Some("endpoint") => return Ok(Some(event.data.unwrap_or_default())),
            None | Some("message") if event.data.is_some() => {
                // The spec makes `endpoint` the first event; nothing can be
                // waiting for an answer yet, so there is nothing to keep.
                tracing::warn!("sse message before the endpoint event dropped");
            }
            _ => {}
        }
    }
    Ok(None)
}

fn resolve_endpoint(sse_url: &Url, data: &str) -> Result<Url, SseError> {
    let data = data.trim();
    if data.is_empty() {
        return Err(SseError::EmptyEndpoint);
    }
    let endpoint = sse_url.join(data).map_err(SseError::InvalidEndpoint)?;
    // Opaque origins (data:, file:, …) never compare equal, so they are refused too.
    if endpoint.origin() != sse_url.origin() {
        return Err(SseError::CrossOriginEndpoint {
            endpoint: endpoint.origin().ascii_serialization(),
            sse: sse_url.origin().ascii_serialization(),
        });
    }
    Ok(endpoint)
}

fn decode(event: Sse) -> Option<RxJsonRpcMessage<RoleClient>> {
    match event.event.as_deref() {
        None | Some("message") => {
            let data = event.data?;
            match serde_json::from_str(&data) {
                Ok(message) => Some(message),
                Err(error) => {
                    tracing::warn!(
                        %error,
                        data = truncate(&data, LOGGED_DATA_CHARS),
                        "skipping undecodable sse message"
                    );
                    None
                }
            }
        }
        Some("endpoint") => {
            tracing::debug!("ignoring repeated endpoint event");
            None
        }
        Some(other) => {
            tracing::debug!(
                event = truncate(other, 64),
                "ignoring unknown sse event type"
            );
            None
        }
    }
}

/// A failed request to `url` (shown as `shown`): the guard's refusal when it is behind the
/// failure (a resolved address or a redirect hop), else the error and its sources.
fn request_error(url: &Url, shown: &str, error: reqwest::Error) -> SseError {
    match Refusal::find_in(&error) {
        Some(refusal) => SseError::Refused(refusal.clone().at(url)),
        None => SseError::Request {
            url: shown.to_owned(),
            reason: crate::cause::explain(&error, url)
                .unwrap_or_else(|| render(&error.without_url())),
        },
    }
}

/// The `WWW-Authenticate` header of a 401, if it is text.
fn challenge(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::WWW_AUTHENTICATE)?.to_str().ok()?;
    Some(truncate(value, MAX_CHALLENGE_CHARS).to_owned())
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("text/event-stream"))
}

fn from_stream_error(error: sse_stream::Error) -> SseError {
    match error {
        // Our own byte-stream errors (read failure, size limit) come back boxed.
        sse_stream::Error::Body(inner) => match inner.downcast::<SseError>() {
            Ok(error) => *error,
            Err(other) => SseError::Read {
                reason: render(other.as_ref()),
            },
        },
        other => SseError::Malformed(other),
    }
}

/// Counts the bytes of the event being received (line terminators excluded)
/// and fails once they exceed the limit. Works on raw chunks, before
/// `sse-stream` buffers anything, so neither a long line nor a long event can
/// grow its buffers past the limit.
struct EventSizeLimit {
    limit: usize,
    pending: usize,
    at_line_start: bool,
    after_cr: bool,
}

impl EventSizeLimit {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            pending: 0,
            at_line_start: true,
            after_cr: false,
        }
    }

    /// `Err(offset)` of the first byte past the limit.
    fn feed(&mut self, chunk: &[u8]) -> Result<(), usize> {
        for (offset, &byte) in chunk.iter().enumerate() {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                // Second half of a CRLF terminator.
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    if self.at_line_start {
                        // A blank line ends the event.
                        self.pending = 0;
                    }
                    self.at_line_start = true;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.at_line_start = false;
                    self.pending += 1;
                    if self.pending > self.limit {
                        return Err(offset);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Marks every value sensitive, so that a stray `Debug` (ours, reqwest's,
/// hyper's) prints `Sensitive` instead of a secret.
fn sensitive(mut headers: HeaderMap) -> HeaderMap {
    for value in headers.values_mut() {
        value.set_sensitive(true);
    }
    headers
}

/// `scheme://host[:port]/path`, without userinfo, query (session ids, keys)
/// and fragment.
fn redact(url: &Url) -> String {
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(url.path());
    if url.query().is_some() {
        shown.push_str("?<redacted>");
    }
    shown
}

/// An error and its sources, joined with `: ` (rmcp shows only the top one).
fn render(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn truncate(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use std::{
        net::SocketAddr,
        path::{Path, PathBuf},
        process::Stdio,
        time::Instant,
    };

    use rmcp::{
        model::CallToolRequestParams,
        service::{ClientLifecycleMode, serve_client_with_lifecycle},
    };
    use serde_json::{Value, json};
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::{TcpListener, TcpStream},
        sync::mpsc,
        task::JoinSet,
    };

    use super::*;

    const SECRET: &str = "Bearer s3cret-token-value";

    // ---- against the real reference server -------------------------------

    #[tokio::test]
    async fn sse_everything_server_initialize_list_and_call() {
        let peer = EverythingServer::start().await;
        let work = async {
            let transport =
                SseClientTransport::connect(config(peer.url(), Duration::from_secs(10)))
                    .await
                    .expect("connect to server-everything over sse");
            let client =
                serve_client_with_lifecycle((), transport, ClientLifecycleMode::Initialize)
                    .await
                    .expect("legacy initialize over sse");
            let info = client.peer_info().expect("server info after initialize");
            assert!(
                info.protocol_version.has_initialize(),
                "{:?}",
                info.protocol_version
            );

            let tools = client.list_all_tools().await.expect("tools/list");
            let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
            assert!(names.contains(&"echo"), "tools: {names:?}");

            let echo = client
                .call_tool(
                    CallToolRequestParams::new("echo")
                        .with_arguments(object(json!({"message": "hi"}))),
                )
                .await
                .expect("tools/call echo");
            assert_eq!(texts(&echo), ["Echo: hi"]);

            let sum = client
                .call_tool(
                    CallToolRequestParams::new("get-sum")
                        .with_arguments(object(json!({"a": 2, "b": 3}))),
                )
                .await
                .expect("tools/call get-sum");
            assert_eq!(texts(&sum), ["The sum of 2 and 3 is 5."]);

            client.cancel().await.expect("clean shutdown");
        };
        tokio::time::timeout(Duration::from_secs(60), work)
            .await
            .expect("whole exchange within 60 s");
        peer.stop().await;
    }

    fn object(value: Value) -> serde_json::Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn texts(result: &rmcp::model::CallToolResult) -> Vec<&str> {
        result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
            .collect()
    }

    /// `server-everything` in `sse` mode on a free loopback port; killed on drop.
    struct EverythingServer {
        child: tokio::process::Child,
        port: u16,
    }

    impl EverythingServer {
        async fn start() -> Self {
            let peers = std::env::var_os("MCPGW_PEERS")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.peers"));
            let script =
                peers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
            assert!(
                script.is_file(),
                "{} missing: cd {} && npm install @modelcontextprotocol/server-everything (or set MCPGW_PEERS)",
                script.display(),
                peers.display(),
            );
            let port = free_port();
            let log = tempfile::NamedTempFile::new().expect("temp file for the server log");
            let mut child = tokio::process::Command::new("node")
                .arg(&script)
                .arg("sse")
                .env("PORT", port.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log.reopen().expect("reopen log"))
                .kill_on_drop(true)
                .spawn()
                .expect("spawn node (is node on PATH?)");

            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(status) = child.try_wait().expect("poll child") {
                    panic!(
                        "server-everything exited with {status}: {}",
                        read(log.path())
                    );
                }
                if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "server-everything not listening on 127.0.0.1:{port} after 30 s: {}",
                    read(log.path())
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Self { child, port }
        }

        fn url(&self) -> Url {
            Url::parse(&format!("http://127.0.0.1:{}/sse", self.port)).expect("valid url")
        }

        async fn stop(mut self) {
            let _ = self.child.kill().await;
        }
    }

    impl Drop for EverythingServer {
        fn drop(&mut self) {
            // Also covers a panicking test; `kill_on_drop` alone would do, this
            // keeps working if the child is ever moved out.
            let _ = self.child.start_kill();
        }
    }

    fn free_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        listener.local_addr().expect("local addr").port()
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    // ---- faults, against a hand-written fake ------------------------------

    #[tokio::test]
    async fn sse_to_a_loopback_server_not_allowed_sends_nothing() {
        let mut fake =
            FakeServer::start(|_| Script::sse("event: endpoint\ndata: /m\n\n").keep_open()).await;
        let policy = Arc::new(Policy::default().for_server("legacy", false));
        let error = SseClientTransport::connect(guarded_config(
            fake.url("/sse?key=abc"),
            Duration::from_secs(5),
            policy,
        ))
        .await
        .expect_err("refused");
        assert_eq!(
            error.to_string(),
            format!(
                "refused http://{addr}: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'legacy'",
                addr = fake.addr
            )
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(300), fake.requests.recv())
                .await
                .is_err(),
            "a request reached the refused server"
        );

        // https to a name passes the URL check; the name resolves to loopback, which the
        // guard's resolver refuses before any connection is made.
        let by_name =
            Url::parse(&format!("https://localhost:{}/sse", fake.addr.port())).expect("url");
        let error = SseClientTransport::connect(guarded_config(
            by_name,
            Duration::from_secs(5),
            Arc::new(Policy::default().for_server("legacy", false)),
        ))
        .await
        .expect_err("refused at resolution");
        let message = error.to_string();
        assert!(matches!(error, SseError::Refused(_)), "{error:?}");
        assert!(
            message.starts_with(&format!(
                "refused https://localhost:{}: localhost resolves to ",
                fake.addr.port()
            )) && message.contains("(loopback); to allow it, add \"localhost\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'legacy'"),
            "{message}"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(300), fake.requests.recv())
                .await
                .is_err(),
            "a request reached the refused server"
        );
    }

    #[tokio::test]
    async fn sse_rejects_non_event_stream_content_type() {
        let fake =
            FakeServer::start(|_| Script::get("200 OK", "application/json", r#"{"ok":true}"#))
                .await;
        let error = connect_err(fake.url("/sse?key=abc")).await;
        assert!(
            matches!(error, SseError::NotEventStream { .. }),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "http://{}/sse?<redacted> is not an sse stream (content-type application/json)",
                fake.addr
            )
        );
    }

    #[tokio::test]
    async fn sse_reports_http_status_with_url_without_secrets() {
        let fake = FakeServer::start(|_| Script::get("401 Unauthorized", "text/plain", "no")).await;
        let error = connect_err(fake.url("/sse")).await;
        assert_eq!(
            error.to_string(),
            format!("http://{}/sse answered http 401 Unauthorized", fake.addr)
        );
        assert!(
            matches!(
                error,
                SseError::Unauthorized {
                    challenge: None,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(!format!("{error} {error:?}").contains("s3cret"));
        let fake = FakeServer::start(|_| Script::get("500 Oops", "text/plain", "no")).await;
        let error = connect_err(fake.url("/sse")).await;
        assert!(
            matches!(error, SseError::HttpStatus { status, .. } if status == 500),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn sse_401_keeps_the_challenge_on_get_and_post() {
        // The fake writes the content type verbatim, so a second header rides along.
        let fake = FakeServer::start(|_| {
            Script::get(
                "401 Unauthorized",
                "text/plain\r\nwww-authenticate: Bearer resource_metadata=\"http://x/.well-known/oauth-protected-resource\"",
                "no",
            )
        })
        .await;
        let error = connect_err(fake.url("/sse")).await;
        let SseError::Unauthorized { challenge, .. } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(
            challenge.as_deref(),
            Some(r#"Bearer resource_metadata="http://x/.well-known/oauth-protected-resource""#)
        );

        let fake = FakeServer::start(|_| {
            Script::sse("event: endpoint\ndata: /messages?sessionId=abc\n\n")
                .keep_open()
                .post_statuses(&[401])
        })
        .await;
        let mut transport =
            SseClientTransport::connect(config(fake.url("/sse"), Duration::from_secs(5)))
                .await
                .expect("connect");
        let error = transport.send(ping(1)).await.expect_err("401 fails");
        assert_eq!(
            error.to_string(),
            format!(
                "http://{}/messages?<redacted> answered http 401 Unauthorized",
                fake.addr
            )
        );
        assert!(
            matches!(
                error,
                SseError::Unauthorized {
                    challenge: None,
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn sse_times_out_without_endpoint_event() {
        let fake =
            FakeServer::start(|_| Script::sse(": hello\n\nevent: other\ndata: x\n\n").keep_open())
                .await;
        let started = Instant::now();
        let error =
            SseClientTransport::connect(config(fake.url("/sse"), Duration::from_millis(300)))
                .await
                .expect_err("must time out");
        let elapsed = started.elapsed();
        assert_eq!(
            error.to_string(),
            format!(
                "no endpoint event from http://{}/sse within 300ms",
                fake.addr
            )
        );
        assert!(
            elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(5),
            "{elapsed:?}"
        );
    }

    #[tokio::test]
    async fn sse_reports_stream_closed_before_endpoint() {
        let fake = FakeServer::start(|_| Script::sse("event: message\ndata: {}\n\n")).await;
        let error = connect_err(fake.url("/sse")).await;
        assert!(matches!(error, SseError::NoEndpoint { .. }), "{error:?}");
    }

    #[tokio::test]
    async fn sse_refuses_cross_origin_endpoint() {
        let fake = FakeServer::start(|_| {
            Script::sse("event: endpoint\ndata: http://evil.example:8080/collect?sessionId=1\n\n")
                .keep_open()
        })
        .await;
        let error = connect_err(fake.url("/sse")).await;
        assert_eq!(
            error.to_string(),
            format!(
                "endpoint origin http://evil.example:8080 differs from the sse url origin http://{}, refused",
                fake.addr
            )
        );
    }

    #[tokio::test]
    async fn sse_skips_garbage_message_and_delivers_next() {
        let fake = FakeServer::start(|_| {
            Script::sse(concat!(
                "event: endpoint\ndata: /messages?sessionId=abc\n\n",
                "event: message\ndata: {not json\n\n",
                "event: surprise\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/list_changed\"}\n\n",
                ": keep-alive comment\n\n",
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n",
                "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\r\n\r\n",
            ))
        })
        .await;
        let mut transport =
            SseClientTransport::connect(config(fake.url("/sse"), Duration::from_secs(5)))
                .await
                .expect("connect");
        let first = receive_json(&mut transport).await;
        assert_eq!(
            first["method"], "notifications/tools/list_changed",
            "{first}"
        );
        let second = receive_json(&mut transport).await;
        assert_eq!(second["id"], 7, "{second}");
        // The fake closed the stream: the connection is over.
        assert!(transport.receive().await.is_none());
        assert!(transport.receive().await.is_none());
    }

    #[tokio::test]
    async fn sse_posts_to_endpoint_with_headers_and_reports_expired_session() {
        let mut fake = FakeServer::start(|_| {
            Script::sse("event: endpoint\ndata: /messages?sessionId=abc\n\n")
                .keep_open()
                .post_statuses(&[202, 500, 404])
        })
        .await;
        let mut transport =
            SseClientTransport::connect(config(fake.url("/sse"), Duration::from_secs(5)))
                .await
                .expect("connect");
        let get = fake.next_request().await;
        assert_eq!((get.method.as_str(), get.target.as_str()), ("GET", "/sse"));
        assert_eq!(get.header("accept"), Some("text/event-stream"));
        assert_eq!(get.header("authorization"), Some(SECRET));

        transport.send(ping(1)).await.expect("202 is accepted");
        let post = fake.next_request().await;
        assert_eq!(
            (post.method.as_str(), post.target.as_str()),
            ("POST", "/messages?sessionId=abc")
        );
        assert_eq!(post.header("authorization"), Some(SECRET));
        assert_eq!(post.header("content-type"), Some("application/json"));
        let body: Value = serde_json::from_str(&post.body).expect("json body");
        assert_eq!(body, json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));

        let error = transport.send(ping(2)).await.expect_err("500 fails");
        assert_eq!(
            error.to_string(),
            format!(
                "http://{}/messages?<redacted> answered http 500 Internal Server Error",
                fake.addr
            )
        );
        let error = transport.send(ping(3)).await.expect_err("404 fails");
        assert!(
            matches!(error, SseError::SessionExpired { .. }),
            "{error:?}"
        );
        assert!(
            !format!("{error} {error:?}").contains("abc"),
            "session id leaked: {error:?}"
        );

        transport.close().await.expect("close");
        assert!(matches!(
            transport.send(ping(4)).await,
            Err(SseError::Closed)
        ));
        assert!(transport.receive().await.is_none());
    }

    #[tokio::test]
    async fn sse_post_that_is_never_answered_times_out() {
        let fake = FakeServer::start(|_| {
            Script::sse("event: endpoint\ndata: /messages?sessionId=abc\n\n")
                .keep_open()
                .post_statuses(&[0])
        })
        .await;
        let mut transport =
            SseClientTransport::connect(config(fake.url("/sse"), Duration::from_millis(500)))
                .await
                .expect("connect");
        let error = transport.send(ping(1)).await.expect_err("no answer");
        assert!(matches!(error, SseError::PostTimeout { .. }), "{error:?}");
    }

    #[tokio::test]
    async fn sse_oversized_event_ends_the_stream() {
        let big = format!("event: message\ndata: \"{}\"\n\n", "x".repeat(4096));
        let fake = FakeServer::start(move |_| {
            Script::sse(&format!(
                "event: endpoint\ndata: /m\n\n{}{big}{}",
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n",
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/prompts/list_changed\"}\n\n",
            ))
            .keep_open()
        })
        .await;
        let mut transport = SseClientTransport::connect_with_limit(
            config(fake.url("/sse"), Duration::from_secs(5)),
            1024,
        )
        .await
        .expect("connect");
        let first = receive_json(&mut transport).await;
        assert_eq!(first["method"], "notifications/tools/list_changed");
        // The stream is still open on the fake's side; only the limit ends it.
        let next = tokio::time::timeout(Duration::from_secs(5), transport.receive())
            .await
            .expect("limit ends the stream promptly");
        assert!(
            next.is_none(),
            "oversized event must end the stream, got {next:?}"
        );
    }

    #[test]
    fn event_size_limit_counts_per_event_across_chunks() {
        fn check(limit: usize, chunks: &[&str], ok: bool) {
            let mut counter = EventSizeLimit::new(limit);
            let result = chunks
                .iter()
                .try_for_each(|chunk| counter.feed(chunk.as_bytes()));
            assert_eq!(result.is_ok(), ok, "limit {limit}, chunks {chunks:?}");
        }
        check(10, &["data: 1234\n\n", "data: 1234\n\n"], true);
        check(10, &["data: 12345\n\n"], false);
        check(10, &["data: 12", "345\n\n"], false);
        check(12, &["data:1\n", "data:2\n", "\n"], true);
        check(12, &["data:1\n", "data:23\n", "\n"], false);
        check(10, &["data: 1234\r\n\r\n", "data: 1234\r", "\n\r\n"], true);
        check(10, &["data: 1234\r\r", "data: 1234\n\n"], true);
        check(10, &["data: 1234\r", "\n", "data: 1\n\n"], false);
    }

    #[test]
    fn endpoint_resolution_and_origin_check() {
        fn check(data: &str, expect: Result<&str, &str>) {
            let sse = Url::parse("http://127.0.0.1:3001/mcp/sse?key=1").expect("url");
            let got = resolve_endpoint(&sse, data)
                .map(String::from)
                .map_err(|e| e.to_string());
            assert_eq!(
                got.as_deref().map_err(String::as_str),
                expect,
                "data {data:?}"
            );
        }
        check(
            "/message?sessionId=a",
            Ok("http://127.0.0.1:3001/message?sessionId=a"),
        );
        check(
            "messages/?session_id=b",
            Ok("http://127.0.0.1:3001/mcp/messages/?session_id=b"),
        );
        check(" http://127.0.0.1:3001/m \n", Ok("http://127.0.0.1:3001/m"));
        check(
            "http://127.0.0.1:3002/m",
            Err(
                "endpoint origin http://127.0.0.1:3002 differs from the sse url origin http://127.0.0.1:3001, refused",
            ),
        );
        check(
            "https://127.0.0.1:3001/m",
            Err(
                "endpoint origin https://127.0.0.1:3001 differs from the sse url origin http://127.0.0.1:3001, refused",
            ),
        );
        check(
            "//localhost:3001/m",
            Err(
                "endpoint origin http://localhost:3001 differs from the sse url origin http://127.0.0.1:3001, refused",
            ),
        );
        check(
            "data:text/plain,x",
            Err(
                "endpoint origin null differs from the sse url origin http://127.0.0.1:3001, refused",
            ),
        );
        check("", Err("endpoint event carries no uri"));
        check(
            "http://[::1",
            Err("endpoint event carries an invalid uri: invalid IPv6 address"),
        );
    }

    #[test]
    fn config_debug_hides_header_values() {
        let config = config(
            Url::parse("http://u:pw@127.0.0.1/sse?k=v").expect("url"),
            Duration::from_secs(1),
        );
        let shown = format!("{config:?}");
        assert!(
            shown.contains("authorization") && shown.contains("http://127.0.0.1/sse?<redacted>"),
            "{shown}"
        );
        assert!(
            !shown.contains("s3cret") && !shown.contains("pw") && !shown.contains("k=v"),
            "{shown}"
        );
    }

    // ---- helpers ----------------------------------------------------------

    /// The fakes and the reference server listen on loopback, which the policy names.
    fn config(url: Url, connect_timeout: Duration) -> SseClientConfig {
        let policy = Arc::new(Policy::parse(["127.0.0.1"]).expect("rule parses"));
        guarded_config(url, connect_timeout, policy)
    }

    fn guarded_config(url: Url, connect_timeout: Duration, policy: Arc<Policy>) -> SseClientConfig {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static(SECRET));
        SseClientConfig {
            url,
            headers,
            client: netguard::guarded_client_builder(policy.clone())
                .build()
                .expect("client builds"),
            policy,
            connect_timeout,
        }
    }

    async fn connect_err(url: Url) -> SseError {
        let error = SseClientTransport::connect(config(url, Duration::from_secs(5)))
            .await
            .expect_err("connect must fail");
        assert!(
            !format!("{error} {error:?}").contains("s3cret"),
            "header value leaked: {error:?}"
        );
        error
    }

    async fn receive_json(transport: &mut SseClientTransport) -> Value {
        let message = tokio::time::timeout(Duration::from_secs(5), transport.receive())
            .await
            .expect("a message within 5 s")
            .expect("stream still open");
        serde_json::to_value(&message).expect("message serializes")
    }

    fn ping(id: i64) -> TxJsonRpcMessage<RoleClient> {
        serde_json::from_value(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .expect("ping message")
    }

    /// What the fake answers: the GET with a fixed response, POSTs with the
    /// next status in line (202 once they run out, 0 = never answer).
    #[derive(Clone)]
    struct Script {
        get_status: &'static str,
        get_content_type: &'static str,
        get_body: String,
        keep_open: bool,
        post_statuses: Vec<u16>,
    }

    impl Script {
        fn get(status: &'static str, content_type: &'static str, body: &str) -> Self {
            Self {
                get_status: status,
                get_content_type: content_type,
                get_body: body.to_owned(),
                keep_open: false,
                post_statuses: Vec::new(),
            }
        }

        fn sse(body: &str) -> Self {
            Self::get("200 OK", "text/event-stream", body)
        }

        fn keep_open(mut self) -> Self {
            self.keep_open = true;
            self
        }

        fn post_statuses(mut self, statuses: &[u16]) -> Self {
            self.post_statuses = statuses.to_vec();
            self
        }
    }

    #[derive(Debug)]
    struct Recorded {
        method: String,
        target: String,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Recorded {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_str())
        }
    }

    /// A raw-HTTP/1.1 server on 127.0.0.1 playing a [`Script`].
    struct FakeServer {
        addr: SocketAddr,
        requests: mpsc::UnboundedReceiver<Recorded>,
        task: tokio::task::JoinHandle<()>,
    }

    impl FakeServer {
        async fn start(script: impl FnOnce(SocketAddr) -> Script) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
            let addr = listener.local_addr().expect("fake addr");
            let script = script(addr);
            let (tx, requests) = mpsc::unbounded_channel();
            let task = tokio::spawn(async move {
                let statuses = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from(
                    script.post_statuses.clone(),
                )));
                let mut connections = JoinSet::new();
                while let Ok((stream, _)) = listener.accept().await {
                    connections.spawn(serve_connection(
                        stream,
                        script.clone(),
                        statuses.clone(),
                        tx.clone(),
                    ));
                }
            });
            Self {
                addr,
                requests,
                task,
            }
        }

        fn url(&self, path: &str) -> Url {
            Url::parse(&format!("http://{}{path}", self.addr)).expect("fake url")
        }

        async fn next_request(&mut self) -> Recorded {
            tokio::time::timeout(Duration::from_secs(5), self.requests.recv())
                .await
                .expect("a request within 5 s")
                .expect("fake still running")
        }
    }

    impl Drop for FakeServer {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn serve_connection(
        mut stream: TcpStream,
        script: Script,
        statuses: Arc<std::sync::Mutex<std::collections::VecDeque<u16>>>,
        requests: mpsc::UnboundedSender<Recorded>,
    ) {
        let mut buffer = Vec::new();
        let head_end = loop {
            if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
                break at;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or_default().split(' ');
        let method = request_line.next().unwrap_or_default().to_owned();
        let target = request_line.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        let mut body = buffer[head_end + 4..].to_vec();
        while body.len() < length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        let is_get = method == "GET";
        let _ = requests.send(Recorded {
            method,
            target,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        });

        if is_get {
            let response = format!(
                "HTTP/1.1 {}\r\ncontent-type: {}\r\nconnection: close\r\n\r\n{}",
                script.get_status, script.get_content_type, script.get_body
            );
            if stream.write_all(response.as_bytes()).await.is_err() {
                return;
            }
            if script.keep_open {
                // Hold the stream until the client goes away.
                let mut sink = [0u8; 1024];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            }
        } else {
            let status = statuses
                .lock()
                .map(|mut s| s.pop_front())
                .ok()
                .flatten()
                .unwrap_or(202);
            if status == 0 {
                let mut sink = [0u8; 1024];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
            let response = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: 8\r\nconnection: close\r\n\r\nAccepted"
            );
            let _ = stream.write_all(response.as_bytes()).await;
        }
        let _ = stream.shutdown().await;
    }
}
