//! A connection test of one server, alone: the handshake and one tool listing on a session of
//! its own, which then ends (a stdio child is stopped). What `mcpgw servers test NAME` prints
//! and `POST /admin/v1/servers/{name}/test` answers, from this one function, in one JSON shape
//! ([`ServerTest::report`]).
//!
//! The session is never the running gateway's: a test of a server that is serving calls does
//! not disturb them, and a disabled server can be tested before it is enabled.

use std::time::{Duration, Instant};

use ids::ServerName;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

/// What a connection test found.
pub struct ServerTest {
    pub server: ServerName,
    /// What the server negotiated and its tool names, or why the test failed.
    pub result: Result<Connected, upstream::UpstreamError>,
    /// From the start of the connection to the end of the listing.
    pub elapsed: Duration,
}

/// A server that answered the test.
pub struct Connected {
    /// Its state after the listing: era, protocol version, `serverInfo`, connect time.
    pub status: upstream::ServerStatus,
    pub tools: Vec<String>,
}

impl ServerTest {
    pub fn ok(&self) -> bool {
        self.result.is_ok()
    }

    /// What `mcpgw servers test NAME --json` prints and the admin API answers.
    pub fn report(&self) -> TestReport {
        let total_ms = u64::try_from(self.elapsed.as_millis()).unwrap_or(u64::MAX);
        let server = self.server.clone();
        match &self.result {
            Ok(Connected { status, tools }) => TestReport::Answered(Answered {
                server,
                ok: true,
                era: status.era.map(|era| era.to_string()),
                protocol_version: status.protocol_version.clone(),
                server_info: ServerInfo {
                    name: status.server_name.clone(),
                    version: status.server_version.clone(),
                },
                tool_count: tools.len(),
                tools: tools.clone(),
                connect_ms: status.connect_ms,
                total_ms,
            }),
            Err(error) => TestReport::Failed(Failed {
                server,
                ok: false,
                error: error.to_string(),
                total_ms,
            }),
        }
    }
}

/// A connection test's report: what the server answered, or why the test failed (`ok` says
/// which).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum TestReport {
    Answered(Answered),
    Failed(Failed),
}

/// A server that answered the handshake and the listing.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Answered {
    pub server: ServerName,
    /// `true`.
    pub ok: bool,
    /// `modern` or `legacy`.
    pub era: Option<String>,
    pub protocol_version: Option<String>,
    /// The upstream's `serverInfo`.
    pub server_info: ServerInfo,
    pub tool_count: usize,
    /// The tools' names.
    pub tools: Vec<String>,
    pub connect_ms: Option<u64>,
    /// From the start of the connection to the end of the listing.
    pub total_ms: u64,
}

/// A server that did not answer the test.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Failed {
    pub server: ServerName,
    /// `false`.
    pub ok: bool,
    /// Why, in words.
    pub error: String,
    pub total_ms: u64,
}

/// An upstream's `serverInfo`, as much of it as it sent.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ServerInfo {
    pub name: Option<String>,
    pub version: Option<String>,
}

/// Connects to `server` alone (enabled or not) under `config`'s network policy, lists its
/// tools and disconnects. `store` gives a server configured for OAuth its tokens (the local
/// user's); it is not closed here.
pub async fn test_server(
    config: &config::Config,
    mut server: config::ServerConfig,
    store: Option<store::Store>,
) -> ServerTest {
    // Testing a disabled server is a legitimate question; answer it.
    server.enabled = true;
    let name = server.name.clone();
    let mut config = config.clone();
    config.servers = vec![server];
    let network = config.network.policy();
    // Nobody listens: a test publishes no catalog.
    let (changes, _ignored) = mpsc::unbounded_channel();
    let oauth = store.map(crate::oauth::StoreOAuth::per_principal);
    let upstreams = upstream::Upstreams::new(&config, &network, changes, oauth);
    let started = Instant::now();
    // `Upstreams` holds every enabled server, so this is always there.
    let result = match upstreams.get(&name) {
        Some(upstream) => connect(&upstream).await,
        None => Err(upstream::UpstreamError::Disabled {
            server: name.clone(),
        }),
    };
    let elapsed = started.elapsed();
    upstreams.shutdown().await;
    ServerTest {
        server: name,
        result,
        elapsed,
    }
}

async fn connect(upstream: &upstream::Server) -> Result<Connected, upstream::UpstreamError> {
    let tools = upstream.refresh_tools().await?;
    Ok(Connected {
        status: upstream.status(),
        tools: tools
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect(),
    })
}
