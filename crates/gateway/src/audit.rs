//! The gateway's side of the audit log: the record of one tool call, and writing it without
//! holding the call up.
//!
//! A record never carries the arguments, only the SHA-256 of their canonical JSON
//! ([`arguments_sha256`]), and never an upstream's own words: an upstream failure is summed up
//! by its kind ([`upstream_error_summary`]), since the message of an `Rpc` error or a transport
//! failure is the upstream's (or reqwest's, with URLs) and may carry anything. The store
//! scrubs the message once more before writing it.
//!
//! Writing is queued ([`writer`]): one task writes the records in batches, as many per
//! transaction as queued meanwhile, so a slow or failing database delays no call and fails
//! none; a failed write is logged at warn, and a record that finds the queue full is dropped
//! and counted (`/healthz`). Without a database the record only reaches the debug log.
//!
//! Retention (`[audit]`): [`prune_periodically`] deletes the rows older than `retention_days`
//! and those beyond the newest `max_rows` a minute after the gateway starts, then every hour,
//! through [`prune_audit_log`], which `mcpgw audit prune` runs once. A failed prune is logged
//! at warn and tried again at the next hour; it never stops the gateway.

use std::sync::Weak;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp::model::CallToolResult;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
pub use store::{CallDecision, CallOutcome};
use upstream::UpstreamError;

use crate::{Gateway, principal::Principal};

mod writer;
pub use writer::{AuditHealth, AuditLog};

/// One tool call as the audit log keeps it. Made by [`AuditRecord::begin`] when the call
/// arrives (which fixes its time and starts its clock), completed as the call goes on, and
/// handed to [`Gateway::audit`] when it ends.
#[derive(Clone, Debug)]
pub struct AuditRecord {
    /// [`Principal::id`]: `local`, `client:NAME` or `user:SUBJECT`.
    pub principal: ids::PrincipalId,
    pub server: ids::ServerName,
    /// The qualified tool name (`server__tool`).
    pub tool: ids::QualifiedName,
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
    /// The time spent waiting for the upstream server, over every round of the call.
    upstream: Duration,
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
            server: server.into(),
            tool: tool.into(),
            arguments_sha256: arguments_sha256(arguments),
            decision: CallDecision::Allowed,
            outcome: CallOutcome::NotRun,
            error: None,
            at: SystemTime::now(),
            started: Instant::now(),
            upstream: Duration::ZERO,
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
    /// Adds `took`, one round of waiting for the upstream server, to the call's upstream time
    /// (the `mcpgw_gateway_call_duration_seconds` histogram is the rest).
    pub fn add_upstream(&mut self, took: Duration) {
        self.upstream += took;
    }

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
    /// Queues `record` for the audit log's writer: never blocks, never fails the call. A
    /// failed write is logged at warn, a full queue drops and counts the record (see
    /// [`writer`]); without a database the record only reaches the debug log.
    pub fn audit(&self, record: AuditRecord) {
        let upstream = record.upstream;
        let entry = record.into_entry();
        // A name the catalog does not list came from the client: not a label value.
        let tool = if self.catalog().get(&entry.tool).is_some() {
            entry.tool.as_str()
        } else {
            crate::metrics::UNLISTED
        };
        self.metrics().call(
            &entry.server,
            tool,
            entry.decision.as_str(),
            entry.outcome.as_str(),
            entry.latency,
            upstream,
        );
        tracing::debug!(
            principal = %entry.principal,
            tool = %entry.tool,
            decision = entry.decision.as_str(),
            outcome = entry.outcome.as_str(),
            latency_ms = entry.latency.as_millis() as u64,
            "tool call"
        );
        self.audit_log.record(entry);
    }

    /// Waits until the audit records of the calls so far are written (at shutdown, before the
    /// store closes; tests, before they read the log).
    pub async fn audit_written(&self) {
        self.audit_log.flush().await;
    }

    /// The audit log's queue and counters, for `/healthz`.
    pub fn audit_health(&self) -> AuditHealth {
        self.audit_log.health()
    }
}

/// Deletes the audit rows outside `retention` as of `now` (see [`store::Store::prune_audit`]);
/// returns how many went. Nothing is asked of the store when both bounds are off.
pub async fn prune_audit_log(
    store: &store::Store,
    retention: &config::AuditConfig,
    now: SystemTime,
) -> Result<u64, store::StoreError> {
    if !retention.prunes() {
        return Ok(0);
    }
    // No age limit: the epoch, before which no call was made.
    let older_than = retention
        .retention
        .and_then(|age| now.checked_sub(age))
        .unwrap_or(UNIX_EPOCH);
    store.prune_audit(older_than, retention.max_rows).await
}

/// When the gateway prunes its audit log.
#[derive(Clone, Copy, Debug)]
struct PruneSchedule {
    /// After start: not at once, so that a large first prune does not compete with the
    /// connects and the embedding cache for the database (and one-shot commands, which start
    /// a gateway too, end before it).
    first: Duration,
    every: Duration,
    /// How often the task checks that the gateway still exists, so it ends soon after it.
    tick: Duration,
}

const PRUNE_SCHEDULE: PruneSchedule = PruneSchedule {
    first: Duration::from_secs(60),
    every: Duration::from_secs(3600),
    tick: Duration::from_secs(60),
};

/// Prunes the audit log by `[audit]` a minute after start, then every hour. Holds only a weak
/// reference, and ends with the gateway; returns at once without a database or when retention
/// is off.
pub(crate) async fn prune_periodically(gateway: Weak<Gateway>) {
    prune_on(gateway, PRUNE_SCHEDULE).await
}

async fn prune_on(gateway: Weak<Gateway>, schedule: PruneSchedule) {
    let retention = match gateway.upgrade() {
        Some(gateway) if gateway.store.is_some() && gateway.config().audit.prunes() => {
            gateway.config().audit
        }
        _ => return,
    };
    let mut due = Instant::now() + schedule.first;
    // A scheduling tick, not a readiness wait: it checks the gateway is still there.
    let mut tick = tokio::time::interval(schedule.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Only the store is kept while pruning: the gateway may go meanwhile.
        let Some(store) = gateway.upgrade().and_then(|gateway| gateway.store.clone()) else {
            return;
        };
        if Instant::now() < due {
            continue;
        }
        match prune_audit_log(&store, &retention, SystemTime::now()).await {
            Ok(0) => tracing::debug!("audit log pruned: nothing to remove"),
            Ok(removed) => tracing::info!(
                removed,
                retention_days = retention.retention_days(),
                max_rows = retention.max_rows,
                "audit log pruned"
            ),
            Err(error) => {
                tracing::warn!(%error, "cannot prune the audit log; trying again in an hour")
            }
        }
        due = Instant::now() + schedule.every;
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
        UpstreamError::Unresponsive { .. } => {
            "the server stopped answering pings and is being restarted".to_owned()
        }
        // Never the child's stderr: it may hold anything.
        UpstreamError::Child { cause, .. } => upstream_error_summary(cause),
    }
}

fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f32())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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

    const DAY: Duration = Duration::from_secs(86_400);

    /// A store holding one row per age in `ages` (tool `fs__tN` for the Nth), newest last.
    async fn store_with_rows(now: SystemTime, ages: &[Duration]) -> store::Store {
        let store = store::Store::open_in_memory().await.expect("store");
        for (i, age) in ages.iter().enumerate() {
            let mut record =
                AuditRecord::begin(&Principal::Local, "fs", &format!("fs__t{i}"), None);
            record.at = now - *age;
            store
                .record_call(&record.into_entry())
                .await
                .expect("record");
        }
        store
    }

    async fn tools_left(store: &store::Store) -> Vec<String> {
        store
            .audit_entries(&store::AuditQuery {
                limit: 100,
                ..Default::default()
            })
            .await
            .expect("read")
            .into_iter()
            .map(|entry| entry.tool.into_string())
            .collect()
    }

    fn audit_config(toml: &str) -> config::AuditConfig {
        config::parse_toml(toml, std::path::Path::new("t.toml"))
            .expect("config")
            .audit
    }

    #[tokio::test]
    async fn pruning_applies_the_configured_age_and_row_cap() {
        let now = SystemTime::now();
        let ages = [100 * DAY, 2 * DAY, DAY / 2, Duration::ZERO];
        let check = |toml: &'static str, removed: u64, left: &'static [&'static str]| async move {
            let store = store_with_rows(now, &ages).await;
            let config = audit_config(toml);
            assert_eq!(
                prune_audit_log(&store, &config, now).await.expect("prune"),
                removed,
                "{toml}"
            );
            assert_eq!(tools_left(&store).await, left, "{toml}");
        };
        // The defaults: 90 days, a million rows.
        check("", 1, &["fs__t3", "fs__t2", "fs__t1"]).await;
        check("[audit]\nretention_days = 1\n", 2, &["fs__t3", "fs__t2"]).await;
        check(
            "[audit]\nretention_days = 0\nmax_rows = 1\n",
            3,
            &["fs__t3"],
        )
        .await;
        check(
            "[audit]\nretention_days = 1\nmax_rows = 1\n",
            3,
            &["fs__t3"],
        )
        .await;
        check(
            "[audit]\nretention_days = 0\nmax_rows = 0\n",
            0,
            &["fs__t3", "fs__t2", "fs__t1", "fs__t0"],
        )
        .await;
    }

    fn soon() -> PruneSchedule {
        PruneSchedule {
            first: Duration::ZERO,
            every: Duration::from_secs(3600),
            tick: Duration::from_millis(10),
        }
    }

    #[tokio::test]
    async fn the_gateway_prunes_soon_after_start_and_the_task_ends_with_it() {
        let now = SystemTime::now();
        let store = store_with_rows(
            now,
            &[3 * DAY, Duration::from_secs(3 * 3600), Duration::ZERO],
        )
        .await;
        let config = config::parse_toml(
            "[audit]\nretention_days = 1\nmax_rows = 1\n",
            std::path::Path::new("t.toml"),
        )
        .expect("config");
        let gateway = Gateway::new(config, Some(store.clone()));
        let task = tokio::spawn(prune_on(Arc::downgrade(&gateway), soon()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while tools_left(&store).await.len() > 1 {
            assert!(Instant::now() < deadline, "the audit log was not pruned");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(tools_left(&store).await, ["fs__t2"]);
        assert!(
            !task.is_finished(),
            "the task keeps running with the gateway"
        );
        drop(gateway);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the task ends with the gateway")
            .expect("the task did not panic");
    }

    #[tokio::test]
    async fn a_failed_prune_leaves_the_gateway_alone() {
        let store = store_with_rows(SystemTime::now(), &[3 * DAY]).await;
        store.close().await;
        let config = config::parse_toml("", std::path::Path::new("t.toml")).expect("config");
        let gateway = Gateway::new(config, Some(store));
        let task = tokio::spawn(prune_on(Arc::downgrade(&gateway), soon()));
        // The prune fails at once (the store is closed): the task logs it and carries on. (A
        // sleep, as nothing signals a task that keeps running.)
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!task.is_finished());
        drop(gateway);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the task ends with the gateway")
            .expect("the task did not panic");
    }

    #[tokio::test]
    async fn nothing_is_scheduled_without_a_store_or_with_retention_off() {
        let config = config::parse_toml("", std::path::Path::new("t.toml")).expect("config");
        let without_store = Gateway::new(config, None);
        let off = config::parse_toml(
            "[audit]\nretention_days = 0\nmax_rows = 0\n",
            std::path::Path::new("t.toml"),
        )
        .expect("config");
        let store = store::Store::open_in_memory().await.expect("store");
        let retention_off = Gateway::new(off, Some(store));
        for gateway in [&without_store, &retention_off] {
            tokio::time::timeout(
                Duration::from_secs(5),
                prune_on(Arc::downgrade(gateway), soon()),
            )
            .await
            .expect("returns at once");
        }
    }
}
