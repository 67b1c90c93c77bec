//! The upstream crate's error type: what went wrong talking to one server, in plain words.

use std::time::Duration;

use ids::ServerName;

/// Messages are lower-case, name the server where it helps, and never contain header or
/// environment values (they may be secrets).
#[derive(Debug, thiserror::Error, Clone)]
pub enum UpstreamError {
    #[error("server '{server}' is disabled in the configuration")]
    Disabled { server: ServerName },
    #[error("could not start '{command}': {reason}")]
    Spawn { command: String, reason: String },
    #[error("secret for server '{server}' is not available: {reason}")]
    Secret { server: ServerName, reason: String },
    #[error("invalid header '{name}' for server '{server}'")]
    Header { server: ServerName, name: String },
    #[error("could not connect to '{server}': {reason}")]
    Connect { server: ServerName, reason: String },
    /// mcpgw's network policy (`[network] allow`, `allow_private_network`) refused a URL or an
    /// address this server's connection needed: its configured URL, an SSE endpoint, a redirect,
    /// what its host name resolved to, or an OAuth endpoint. `refusal` is the guard's message,
    /// which names the configuration line that would allow it; nothing was sent.
    #[error("network policy blocks '{server}': {refusal}")]
    Refused { server: ServerName, refusal: String },
    #[error("'{server}' did not answer within {}s", after.as_secs_f32())]
    Timeout { server: ServerName, after: Duration },
    /// The caller cancelled the request; the server was told (`notifications/cancelled`).
    #[error("the request to '{server}' was cancelled")]
    Cancelled { server: ServerName },
    #[error("connection to '{server}' was lost: {reason}")]
    Closed { server: ServerName, reason: String },
    #[error("'{server}' returned error {code}: {message}")]
    Rpc {
        server: ServerName,
        code: i32,
        message: String,
        data: Option<serde_json::Value>,
    },
    #[error("'{server}' answered with something that is not a valid MCP result: {reason}")]
    Protocol { server: ServerName, reason: String },
    /// One message from the server was larger than `[limits] response_bytes`: it was not read
    /// past the limit, and the request it answered failed.
    #[error(
        "'{server}' sent a response larger than the {} limit ([limits] response_bytes); it was not read",
        human_bytes(.limit)
    )]
    ResponseTooLarge { server: ServerName, limit: usize },
    /// HTTP 401 to the credentials mcpgw sent. `credential` says where they came from: the
    /// environment variable (`GITHUB_TOKEN`), or `header X-Api-Key` for an inline value.
    #[error(
        "server '{server}' rejected the credentials from {credential} (HTTP 401){}",
        oauth_note(.server, .oauth_offered)
    )]
    CredentialsRejected {
        server: ServerName,
        credential: String,
        /// The 401 pointed at OAuth protected resource metadata (RFC 9728).
        oauth_offered: bool,
    },
    /// HTTP 401 when no credential was configured, and the server did not point at OAuth.
    #[error(
        "server '{server}' requires credentials (HTTP 401) and none are configured (hint: give it auth = {{ type = \"bearer\", env = \"VAR\" }} or the header its documentation names)"
    )]
    CredentialsMissing { server: ServerName },
    /// HTTP 401 pointing at OAuth protected resource metadata (RFC 9728), or any 401 for a
    /// server configured for OAuth: a (new) sign-in is needed.
    #[error("server '{server}' answered HTTP 401: OAuth required, run `mcpgw auth login {server}`")]
    OAuthRequired { server: ServerName },
    /// The access token was due for a refresh and the refresh failed without a verdict on the
    /// grant (network, server error, unreadable answer): the sign-in is kept, no login asked for.
    #[error(
        "server '{server}': the OAuth access token could not be refreshed ({reason}); the sign-in is kept and the next request tries again"
    )]
    OAuthRefresh { server: ServerName, reason: String },
    /// OAuth cannot work for this server as things stand (no database for its tokens, an
    /// unusable setting).
    #[error("OAuth for server '{server}' is not usable: {reason}")]
    OAuthUnavailable { server: ServerName, reason: String },
    /// Every one of the per-principal sessions an OAuth server may have is in use (see
    /// `Upstreams::for_principal`): a new principal must wait until one is idle.
    #[error(
        "server '{server}' already has sessions for {limit} principals, the most it keeps; try again in a few minutes"
    )]
    TooManyPrincipals { server: ServerName, limit: usize },
    /// A stdio server stopped answering `ping` (SIGSTOPped, deadlocked, swapping): mcpgw ended
    /// its process group and starts it again. `reason` says how many pings went unanswered.
    #[error("server '{server}' is unresponsive: {reason}; mcpgw is restarting it")]
    Unresponsive { server: ServerName, reason: String },
    /// `cause`, with what the stdio child adds to it: how it ended and the end of its stderr
    /// (scrubbed), e.g. a Python server's `ModuleNotFoundError` and `exit status 1`.
    #[error("{cause}; {words}")]
    Child {
        cause: Box<UpstreamError>,
        words: String,
    },
}

/// `1.0 MiB`, `64.0 KiB`, `512 bytes`.
fn human_bytes(bytes: &usize) -> String {
    const KIB: f64 = 1024.0;
    let n = *bytes as f64;
    if n >= KIB * KIB {
        format!("{:.1} MiB", n / (KIB * KIB))
    } else if n >= KIB {
        format!("{:.1} KiB", n / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// What to add when a server that rejected static credentials also offers OAuth.
fn oauth_note(server: &str, offered: &bool) -> String {
    if *offered {
        format!("; it also accepts OAuth, see `mcpgw auth login {server}`")
    } else {
        String::new()
    }
}

impl UpstreamError {
    /// True when the failure means the session itself is gone, so that a new session could serve
    /// the request (child exited, transport closed, session id unknown to the server).
    pub(crate) fn session_lost(&self) -> bool {
        match self {
            UpstreamError::Child { cause, .. } => cause.session_lost(),
            other => matches!(other, UpstreamError::Closed { .. }),
        }
    }

    /// The error without what a stdio child added to it ([`UpstreamError::Child`]).
    pub fn cause(&self) -> &UpstreamError {
        match self {
            UpstreamError::Child { cause, .. } => cause.cause(),
            other => other,
        }
    }

    /// True when the server refused mcpgw's credentials, or mcpgw has none it can send: the
    /// server is unusable until that changes, whatever the state of the session.
    pub fn is_auth_failure(&self) -> bool {
        matches!(
            self.cause(),
            UpstreamError::CredentialsRejected { .. }
                | UpstreamError::CredentialsMissing { .. }
                | UpstreamError::OAuthRequired { .. }
                | UpstreamError::OAuthRefresh { .. }
                | UpstreamError::OAuthUnavailable { .. }
        )
    }
}
