//! Resolved upstream server settings: the name, transport and per-server limits.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use url::Url;

use crate::value::looks_secret;
use crate::{Auth, ConfigError, Value};

/// Longest server name. Short because it prefixes every qualified tool name, and those are
/// capped at 64 characters by clients.
pub const MAX_SERVER_NAME_LEN: usize = 32;

/// A server name that is valid by construction: 1..=32 of `[A-Za-z0-9_-]`, no `__`, and no
/// leading or trailing `_`, so that `server__tool` always splits back unambiguously.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ServerName(String);

impl ServerName {
    pub fn new(name: &str) -> Result<ServerName, ConfigError> {
        match name_problem(name) {
            None => Ok(ServerName(name.to_owned())),
            Some(reason) => Err(ConfigError::BadServerName {
                name: name.to_owned(),
                reason,
            }),
        }
    }

    /// The closest valid name to `raw`: bad characters become `-`, runs of `-`/`_` collapse
    /// (so no `__`), the ends are trimmed of `-`/`_`, at most [`MAX_SERVER_NAME_LEN`]
    /// characters, and `server` if nothing is left. Used for names written by other tools
    /// (`mcpServers` JSON, eval sets).
    pub fn sanitize(raw: &str) -> ServerName {
        let mut name = String::new();
        for c in raw.chars() {
            let c = if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            };
            if (c == '_' || c == '-') && name.ends_with(c) {
                continue;
            }
            name.push(c);
        }
        let trim = |s: &str| s.trim_matches(['-', '_']).to_owned();
        let name = trim(&name);
        let name = trim(name.get(..MAX_SERVER_NAME_LEN).unwrap_or(&name));
        if name.is_empty() {
            ServerName("server".to_owned())
        } else {
            ServerName(name)
        }
    }

    /// `name`, or `name-2`, `name-3`, ... (its stem shortened to fit) when `taken` has it.
    pub fn unused(name: &str, taken: &[String]) -> String {
        if !taken.iter().any(|t| t == name) {
            return name.to_owned();
        }
        (2..)
            .map(|n| {
                let suffix = format!("-{n}");
                let keep = MAX_SERVER_NAME_LEN - suffix.len();
                let stem = name
                    .get(..keep)
                    .unwrap_or(name)
                    .trim_end_matches(['_', '-']);
                format!("{stem}{suffix}")
            })
            .find(|candidate| !taken.contains(candidate))
            .unwrap_or_else(|| name.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why `name` is not a valid server name, if it is not.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Some(format!(
            "contains {c:?}; only letters, digits, `-` and `_` are allowed"
        ));
    }
    if name.len() > MAX_SERVER_NAME_LEN {
        return Some(format!(
            "is {} characters long; at most {MAX_SERVER_NAME_LEN} are allowed",
            name.len()
        ));
    }
    if name.contains("__") {
        return Some(
            "must not contain `__`, which separates server and tool in qualified tool names".into(),
        );
    }
    if name.starts_with('_') || name.ends_with('_') {
        return Some(
            "must not start or end with `_`, which would run into the `__` separator".into(),
        );
    }
    None
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ServerName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for ServerName {
    fn borrow(&self) -> &str {
        &self.0
    }
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
    fn server_name_accepts_only_valid_names() {
        let valid = [
            "a",
            "github",
            "my-docs",
            "my_docs",
            "A1",
            "-x-",
            &"a".repeat(32),
        ];
        let invalid = ["", "a b", "a.b", "a__b", "_a", "a_", "ü", &"a".repeat(33)];
        for name in valid {
            assert_eq!(
                ServerName::new(name).ok().as_ref().map(ServerName::as_str),
                Some(name)
            );
        }
        for name in invalid {
            assert!(
                ServerName::new(name).is_err(),
                "{name:?} should be rejected"
            );
        }
    }

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
        let err = ServerName::new("a__b").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid server name `a__b`: must not contain `__`, which separates server and tool in qualified tool names"
            )
        );
    }
}
