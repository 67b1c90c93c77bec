//! The upstream crate's error type: what went wrong talking to one server, in plain words.

use std::time::Duration;

/// Messages are lower-case, name the server where it helps, and never contain header or
/// environment values (they may be secrets).
#[derive(Debug, thiserror::Error, Clone)]
pub enum UpstreamError {
    #[error("server '{server}' is disabled in the configuration")]
    Disabled { server: String },
    #[error("could not start '{command}': {reason}")]
    Spawn { command: String, reason: String },
    #[error("secret for server '{server}' is not available: {reason}")]
    Secret { server: String, reason: String },
    #[error("invalid header '{name}' for server '{server}'")]
    Header { server: String, name: String },
    #[error("could not connect to '{server}': {reason}")]
    Connect { server: String, reason: String },
    #[error("'{server}' did not answer within {}s", after.as_secs_f32())]
    Timeout { server: String, after: Duration },
    #[error("connection to '{server}' was lost: {reason}")]
    Closed { server: String, reason: String },
    #[error("'{server}' returned error {code}: {message}")]
    Rpc {
        server: String,
        code: i32,
        message: String,
        data: Option<serde_json::Value>,
    },
    #[error("'{server}' answered with something that is not a valid MCP result: {reason}")]
    Protocol { server: String, reason: String },
}

impl UpstreamError {
    /// True when the failure means the session itself is gone, so that a new session could serve
    /// the request (child exited, transport closed, session id unknown to the server).
    pub(crate) fn session_lost(&self) -> bool {
        matches!(self, UpstreamError::Closed { .. })
    }
}
