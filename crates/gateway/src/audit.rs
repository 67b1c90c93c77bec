//! The gateway's side of the audit log: the record of one tool call, and writing it without
//! holding the call up.
//!
//! A record never carries the arguments, only the SHA-256 of their canonical JSON
//! ([`arguments_sha256`]), and never an upstream's own words: an upstream failure is summed up
//! by its kind ([`upstream_error_summary`]), since the message of an `Rpc` error or a transport
//! failure is the upstream's (or reqwest's, with URLs) and may carry anything. The store
//! scrubs the message once more before writing it.
//!
//! Writing is spawned: a slow or failing database delays no call and fails none; a failed
//! write is logged at warn. Without a database the record only reaches the debug log.

use std::time::{Duration, Instant, SystemTime};

use rmcp::model::CallToolResult;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
pub use store::{CallDecision, CallOutcome};
use upstream::UpstreamError;

use crate::{Gateway, Principal};

/// One tool call as the audit log keeps it. Made by [`AuditRecord::begin`] when the call
/// arrives (which fixes its time and starts its clock), completed as the call goes on, and
/// handed to [`Gateway::audit`] when it ends.
#[derive(Clone, Debug)]
pub struct AuditRecord {
    /// [`Principal::id`]: `local`, `client:NAME` or `user:SUBJECT`.
    pub principal: String,
    pub server: String,
    /// The qualified tool name (`server__tool`).
    pub tool: String,
    /// [`arguments_sha256`] of the call's arguments.
    pub arguments_sha256: String,
    /// [`CallDecision::Allowed`] until set otherwise.
    pub decision: CallDecision,
    /// [`CallOutcome::NotRun`] until set otherwise.
    pub outcome: CallOutcome,
    /// A short message the gateway wrote; never an upstream's text.
    pub error: Option<String>,
    at: SystemTime,
    started: Instant,
}

impl AuditRecord {
    /// The record of a call arriving now: decision `allowed`, outcome `not_run`.
    pub fn begin(
        principal: &Principal,
        server: &str,
        tool: &str,
        arguments: Option<&Map<String, Value>>,
    ) -> AuditRecord {
        AuditRecord {
            principal: principal.id(),
            server: server.to_owned(),
            tool: tool.to_owned(),
            arguments_sha256: arguments_sha256(arguments),
            decision: CallDecision::Allowed,
            outcome: CallOutcome::NotRun,
            error: None,
            at: SystemTime::now(),
            started: Instant::now(),
        }
    }

    /// Sets what the gateway decided.
    pub fn decided(mut self, decision: CallDecision) -> AuditRecord {
        self.decision = decision;
        self
    }

    /// The upstream answered with `result`: outcome `ok`, or `tool_error` when it is marked
    /// `isError` (the tool's message itself is not kept).
    pub fn answered(mut self, result: &CallToolResult) -> AuditRecord {
        if result.is_error == Some(true) {
            self.outcome = CallOutcome::ToolError;
            self.error = Some("the tool reported an error".to_owned());
        } else {
            self.outcome = CallOutcome::Ok;
        }
        self
    }

    /// Reaching the upstream failed: outcome `upstream_error`, with the failure's kind.
    pub fn upstream_failed(mut self, error: &UpstreamError) -> AuditRecord {
        self.outcome = CallOutcome::UpstreamError;
        self.error = Some(upstream_error_summary(error));
        self
    }

    /// Nothing was sent upstream: outcome `not_run`, with the gateway's reason (`"invalid
    /// arguments"`, `"not in the profile"`, ...). Write the reason yourself; do not pass on
    /// text that came from a client or an upstream.
    pub fn not_run(mut self, reason: impl Into<String>) -> AuditRecord {
        self.outcome = CallOutcome::NotRun;
        self.error = Some(reason.into());
        self
    }

    /// The store's row for this record, its latency measured now.
    fn into_entry(self) -> store::AuditEntry {
        store::AuditEntry {
            at: self.at,
            latency: self.started.elapsed(),
            principal: self.principal,
            server: self.server,
            tool: self.tool,
            arguments_sha256: self.arguments_sha256,
            decision: self.decision,
            outcome: self.outcome,
            error: self.error,
        }
    }
}

impl Gateway {
    /// Writes `record` to the audit log in the background: never blocks, never fails the
    /// call. A failed write is logged at warn; without a database the record is dropped.
    pub fn audit(&self, record: AuditRecord) {
        let entry = record.into_entry();
        tracing::debug!(
            principal = %entry.principal,
            tool = %entry.tool,
            decision = entry.decision.as_str(),
            outcome = entry.outcome.as_str(),
            latency_ms = entry.latency.as_millis() as u64,
            "tool call"
        );
        let Some(store) = self.store.clone() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(tool = %entry.tool, "cannot write an audit record outside the runtime");
            return;
        };
        self.audit_writes.spawn_on(
            async move {
                if let Err(error) = store.record_call(&entry).await {
                    tracing::warn!(%error, tool = %entry.tool, principal = %entry.principal, "cannot write an audit record");
                }
            },
            &runtime,
        );
    }

    /// Waits for the audit records being written (at shutdown, before the store closes).
    pub async fn audit_written(&self) {
        self.audit_writes.close();
        self.audit_writes.wait().await;
        self.audit_writes.reopen();
    }
}

/// Lower-case hex SHA-256 of the arguments' canonical JSON: object keys sorted, no
/// whitespace, strings and numbers as serde_json writes them. Absent arguments hash like `{}`,
/// which is what the tool receives either way. Equal arguments give equal hashes whatever the
/// order their keys arrived in, so the log can show repeated calls without holding any value.
pub fn arguments_sha256(arguments: Option<&Map<String, Value>>) -> String {
    let mut canonical = String::new();
    match arguments {
        Some(map) => write_object(map, &mut canonical),
        None => canonical.push_str("{}"),
    }
    let digest = Sha256::digest(canonical.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    hex
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        // Scalars: serde_json's compact form (a string is quoted and escaped).
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    // Sorted here rather than trusting the map: with serde_json's `preserve_order` (enabled
    // by any crate in the tree) a Map keeps arrival order.
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(key.clone()).to_string());
        out.push(':');
        write_canonical(value, out);
    }
    out.push('}');
}

/// What went wrong reaching an upstream, by kind only: no upstream message, URL or reason
/// text, which may hold anything (an echoed argument, a URL with a key in its query).
pub fn upstream_error_summary(error: &UpstreamError) -> String {
    match error {
        UpstreamError::Disabled { .. } => "the server is disabled".to_owned(),
        UpstreamError::Spawn { .. } => "the server's command could not start".to_owned(),
        UpstreamError::Secret { .. } => "a secret for the server is not available".to_owned(),
        UpstreamError::Header { .. } => "a header for the server is invalid".to_owned(),
        UpstreamError::Connect { .. } => "could not connect".to_owned(),
        UpstreamError::Refused { .. } => "refused by the network policy".to_owned(),
        UpstreamError::Timeout { after, .. } => {
            format!("no answer within {}", seconds(*after))
        }
        UpstreamError::Closed { .. } => "the connection was lost".to_owned(),
        UpstreamError::Cancelled { .. } => "cancelled".to_owned(),
        UpstreamError::Rpc { code, .. } => format!("the server returned error {code}"),
        UpstreamError::Protocol { .. } => {
            "the server's answer is not a valid MCP result".to_owned()
        }
        UpstreamError::ResponseTooLarge { .. } => {
            "the server's response was over [limits] response_bytes".to_owned()
        }
        UpstreamError::CredentialsRejected { .. } => {
            "the server rejected the credentials (HTTP 401)".to_owned()
        }
        UpstreamError::CredentialsMissing { .. } => {
            "the server requires credentials (HTTP 401)".to_owned()
        }
        UpstreamError::OAuthRequired { .. } => "an OAuth sign-in is required".to_owned(),
        UpstreamError::OAuthRefresh { .. } => "the OAuth token could not be refreshed".to_owned(),
        UpstreamError::OAuthUnavailable { .. } => "OAuth is not usable for the server".to_owned(),
        UpstreamError::TooManyPrincipals { .. } => {
            "the server has sessions for as many principals as it keeps".to_owned()
        }
    }
}

fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f32())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hash(value: Value) -> String {
        arguments_sha256(value.as_object())
    }

    #[test]
    fn argument_hashes_ignore_key_order_and_whitespace_only() {
        // SHA-256 of `{}`.
        let empty = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
        assert_eq!(arguments_sha256(None), empty);
        assert_eq!(hash(json!({})), empty);
        // SHA-256 of `{"a":1,"b":[true,null,"x"]}`.
        assert_eq!(
            hash(json!({"b": [true, null, "x"], "a": 1})),
            "eca8cfb31ab74533e1eb2f4c74d2d55dfe3c79ac704787e54be8647ea7777eb1"
        );
        assert_eq!(
            hash(json!({"x": {"b": 1, "a": 2}})),
            hash(json!({"x": {"a": 2, "b": 1}}))
        );
        assert_ne!(hash(json!({"a": 1})), hash(json!({"a": "1"})));
        assert_ne!(hash(json!({"a": [1, 2]})), hash(json!({"a": [2, 1]})));
        assert_eq!(hash(json!({"a": 1})).len(), 64);
    }

    #[test]
    fn upstream_summaries_leave_the_upstream_text_out() {
        let rpc = UpstreamError::Rpc {
            server: "fs".into(),
            code: -32000,
            message: "token=s3cret rejected".into(),
            data: None,
        };
        assert_eq!(
            upstream_error_summary(&rpc),
            "the server returned error -32000"
        );
        let closed = UpstreamError::Connect {
            server: "fs".into(),
            reason: "error sending request for url (https://x/?key=s3cret)".into(),
        };
        assert_eq!(upstream_error_summary(&closed), "could not connect");
        let timeout = UpstreamError::Timeout {
            server: "fs".into(),
            after: Duration::from_millis(2500),
        };
        assert_eq!(upstream_error_summary(&timeout), "no answer within 2.5s");
    }

    #[test]
    fn a_record_follows_the_call() {
        let arguments = json!({"path": "/etc/passwd"});
        let record = AuditRecord::begin(
            &Principal::Client("ci".into()),
            "fs",
            "fs__read",
            arguments.as_object(),
        );
        assert_eq!(record.principal, "client:ci");
        assert_eq!(record.decision, CallDecision::Allowed);
        assert_eq!(record.outcome, CallOutcome::NotRun);
        let ok = record
            .clone()
            .answered(&CallToolResult::success(Vec::new()));
        assert_eq!((ok.outcome, ok.error), (CallOutcome::Ok, None));
        let failed = record.clone().answered(&CallToolResult::error(Vec::new()));
        assert_eq!(failed.outcome, CallOutcome::ToolError);
        let limited = record
            .decided(CallDecision::RateLimited)
            .not_run("rate limit");
        let entry = limited.into_entry();
        assert_eq!(entry.decision, CallDecision::RateLimited);
        assert_eq!(entry.outcome, CallOutcome::NotRun);
        assert_eq!(entry.error.as_deref(), Some("rate limit"));
        assert!(!format!("{entry:?}").contains("passwd"));
    }
}
