//! Opening one rmcp client session over the transport a server is configured with.
//!
//! Era detection: the first connection probes with `server/discover` and falls back to the
//! legacy `initialize` handshake (rmcp's `ClientLifecycleMode::Auto`); the era that worked is
//! remembered by the caller and used directly on every reconnect, so a legacy server does not pay
//! for the probe again. A probe that fails in a way rmcp does not classify (for example a legacy
//! server answering `server/discover` with an empty success) is retried once with `initialize`.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use rmcp::{
    ClientHandler, RoleClient,
    model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion},
    service::{
        ClientLifecycleMode, NotificationContext, RunningService, serve_client_with_lifecycle,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use secrecy::ExposeSecret;
use tokio::sync::mpsc;

use crate::{
    Era, ToolsChanged, UpstreamError,
    sse::{SseClientConfig, SseClientTransport},
    stdio,
};

/// The largest JSON response accepted from an upstream (rmcp's default is 16 MiB).
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// The rmcp client handler mcpgw runs for each upstream session.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    server: String,
    changes: mpsc::UnboundedSender<ToolsChanged>,
}

impl UpstreamClient {
    pub(crate) fn new(server: String, changes: mpsc::UnboundedSender<ToolsChanged>) -> Self {
        Self { server, changes }
    }
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcpgw", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::debug!(server = %self.server, "upstream says its tool list changed");
        let _ = self.changes.send(ToolsChanged {
            server: self.server.clone(),
        });
    }
}

pub(crate) type Session = RunningService<RoleClient, UpstreamClient>;

/// A live session and what was negotiated.
pub(crate) struct Connected {
    pub session: Session,
    pub era: Era,
    pub protocol_version: String,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
}

/// Connects once over the configured transport. `known_era` skips the probe.
pub(crate) async fn connect(
    config: &config::ServerConfig,
    handler: UpstreamClient,
    known_era: Option<Era>,
) -> Result<Connected, UpstreamError> {
    let lifecycle = match known_era {
        Some(Era::Modern) => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        // The legacy HTTP+SSE transport predates `server/discover`; never probe it.
        Some(Era::Legacy) => ClientLifecycleMode::Initialize,
        None if matches!(config.transport, config::Transport::Sse(_)) => {
            ClientLifecycleMode::Initialize
        }
        None => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        },
    };
    let probing = matches!(lifecycle, ClientLifecycleMode::Auto { .. });
    match connect_with(config, handler.clone(), lifecycle).await {
        Err(UpstreamError::Protocol { reason, .. }) if probing => {
            tracing::info!(server = %config.name, %reason, "era probe failed, retrying with initialize");
            connect_with(config, handler, ClientLifecycleMode::Initialize).await
        }
        other => other,
    }
}

async fn connect_with(
    config: &config::ServerConfig,
    handler: UpstreamClient,
    lifecycle: ClientLifecycleMode,
) -> Result<Connected, UpstreamError> {
    let server = config.name.to_string();
    let session = match &config.transport {
        config::Transport::Stdio(stdio_config) => {
            let child = stdio::spawn(&server, stdio_config)?;
            serve_client_with_lifecycle(handler, child, lifecycle).await
        }
        config::Transport::Http(http_config) => {
            let headers = resolve_headers(&server, &http_config.headers)?;
            let mut transport_config =
                StreamableHttpClientTransportConfig::with_uri(http_config.url.as_str())
                    .reinit_on_expired_session(true);
            transport_config.custom_headers = headers
                .into_iter()
                .filter_map(|(k, v)| Some((k?, v)))
                .collect();
            transport_config.max_json_response_size = MAX_RESPONSE_BYTES;
            let transport = StreamableHttpClientTransport::with_client(
                crate::http::SessionAwareClient::new(http_client()),
                transport_config,
            );
            serve_client_with_lifecycle(handler, transport, lifecycle).await
        }
        config::Transport::Sse(http_config) => {
            let headers = resolve_headers(&server, &http_config.headers)?;
            let transport = SseClientTransport::connect(SseClientConfig {
                url: http_config.url.clone(),
                headers,
                client: http_client(),
                connect_timeout: config.timeout,
            })
            .await
            .map_err(|e| UpstreamError::Connect {
                server: server.clone(),
                reason: e.to_string(),
            })?;
            serve_client_with_lifecycle(handler, transport, lifecycle).await
        }
    };
    let session = session.map_err(|e| classify_init_error(&server, e))?;
    let info = session.peer_info();
    let protocol_version = info
        .as_ref()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    let era = if protocol_version.as_str() >= "2026-07-28" {
        Era::Modern
    } else {
        Era::Legacy
    };
    let (server_name, server_version) = info
        .as_ref()
        .and_then(|i| i.server_info.as_ref())
        .map(|s| (Some(s.name.clone()), Some(s.version.clone())))
        .unwrap_or((None, None));
    Ok(Connected {
        session,
        era,
        protocol_version,
        server_name,
        server_version,
    })
}

fn http_client() -> reqwest::Client {
    // Pooled connections idle out quickly: upstreams restart and we must not reuse dead sockets.
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_default()
}

fn resolve_headers(
    server: &str,
    headers: &std::collections::BTreeMap<String, config::Value>,
) -> Result<HeaderMap, UpstreamError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let header_name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| UpstreamError::Header {
                server: server.to_owned(),
                name: name.clone(),
            })?;
        let secret = value.resolve().map_err(|e| UpstreamError::Secret {
            server: server.to_owned(),
            reason: e.to_string(),
        })?;
        let mut header_value =
            HeaderValue::from_str(secret.expose_secret()).map_err(|_| UpstreamError::Header {
                server: server.to_owned(),
                name: name.clone(),
            })?;
        header_value.set_sensitive(value.env_var().is_some());
        map.insert(header_name, header_value);
    }
    Ok(map)
}

fn classify_init_error(server: &str, error: rmcp::service::ClientInitializeError) -> UpstreamError {
    use rmcp::service::ClientInitializeError as E;
    let server = server.to_owned();
    match error {
        E::ConnectionClosed(reason) => UpstreamError::Connect {
            server,
            reason: format!("the server closed the connection during the handshake ({reason})"),
        },
        E::TransportError { error, context } => UpstreamError::Connect {
            server,
            reason: format!("{context}: {}", error.error),
        },
        E::JsonRpcError(data) => UpstreamError::Rpc {
            server,
            code: data.code.0,
            message: data.message.to_string(),
            data: data.data,
        },
        E::Cancelled => UpstreamError::Connect {
            server,
            reason: "cancelled".to_owned(),
        },
        other => UpstreamError::Protocol {
            server,
            reason: other.to_string(),
        },
    }
}
