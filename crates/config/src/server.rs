//! Resolved upstream server settings: the name, transport and per-server limits.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use crate::value::looks_secret;
use crate::{Auth, ConfigError, Value};

pub use ids::ServerName;

/// Longest server name ([`ServerName::MAX_LEN`]).
pub const MAX_SERVER_NAME_LEN: usize = ServerName::MAX_LEN;

/// `name` as a [`ServerName`], or the configuration error that says why it is not one.
pub fn parse_server_name(name: &str) -> Result<ServerName, ConfigError> {
    ServerName::parse(name).map_err(|reason| ConfigError::BadServerName {
        name: name.to_owned(),
        reason,
    })
}

/// `ping_s` and `ping_misses` of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    pub every: Duration,
    pub misses: u32,
}

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub name: ServerName,
    pub description: Option<String>,
    pub enabled: bool,
    /// Per-request timeout, 1..=300 s, default 30 s.
    pub timeout: Duration,
    /// How often the tool list is fetched again in the background, for servers that never
    /// announce changes; `None` (`refresh_s = 0`) never. Default one hour.
    pub refresh: Option<Duration>,
    /// Liveness: how often a server with calls in flight is sent `ping` (one idle for long is
    /// pinged at a quarter of that rate), and how many unanswered pings in a row mark it
    /// unresponsive and restart it. `None` (`ping_s = 0`) never. Default every 15 s, 3 misses.
    pub ping: Option<Ping>,
    pub transport: Transport,
    /// Always [`Auth::None`] for stdio servers, which get credentials through `env`.
    pub auth: Auth,
    /// Whether this server's connections (its transport and its OAuth) may reach loopback,
    /// private and carrier-grade NAT addresses without a `[network] allow` entry. Always
    /// `false` for stdio servers, which make no network requests.
    pub allow_private_network: bool,
    /// Whether a changed tool definition is trusted at once instead of held for approval
    /// (tool pinning): for servers the operator controls.
    pub trust_changes: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    Stdio(StdioTransport),
    /// Streamable HTTP (both protocol eras).
    Http(HttpTransport),
    /// Legacy HTTP+SSE.
    Sse(HttpTransport),
}

#[derive(Debug, Clone, PartialEq)]
pub struct StdioTransport {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, Value>,
    /// Working directory; a relative path in the file is resolved against the directory
    /// of the config file, not the directory mcpgw happens to be started from.
    pub cwd: Option<PathBuf>,
}

#[derive(Clone, PartialEq)]
pub struct HttpTransport {
    /// Always `http` or `https`. In mcpgw.toml it holds no password and no secret-looking
    /// query parameter; a JSON file served directly may have them.
    pub url: Url,
    pub headers: BTreeMap<String, Value>,
}

impl HttpTransport {
    /// The custom headers that carry a credential: a name such as `Authorization`,
    /// `X-Api-Key` or `Cookie`, the same rule that keeps their values out of mcpgw.toml.
    pub fn credential_headers(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.headers
            .iter()
            .filter(|(name, _)| looks_secret(name))
            .map(|(name, value)| (name.as_str(), value))
    }
}

/// Hides a url's password and query, where a JSON file served directly may keep a key.
impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut url = self.url.clone();
        if url.password().is_some() {
            // Only fails for urls that cannot have a password, which this one does.
            let _ = url.set_password(Some("<redacted>"));
        }
        if url.query().is_some() {
            url.set_query(Some("<redacted>"));
        }
        f.debug_struct("HttpTransport")
            .field("url", &url.as_str())
            .field("headers", &self.headers)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_debug_hides_url_credentials() {
        let url = Url::parse("https://me:SECRET1@host/mcp?api_key=SECRET2");
        let transport = url.map(|url| HttpTransport {
            url,
            headers: BTreeMap::new(),
        });
        let shown = format!("{transport:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("host/mcp"), "{shown}");
    }

    #[test]
    fn server_name_error_names_the_reason() {
        let err = parse_server_name("a__b").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid server name `a__b`: must not contain `__`, which separates server and tool in qualified tool names"
            )
        );
    }
}
