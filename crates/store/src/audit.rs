//! The audit log: one row per tool call, newest first on the way out.
//!
//! A row says who called which tool of which server, the SHA-256 of the arguments' canonical
//! JSON (never the arguments: they may hold personal data or secrets), what the gateway decided
//! and how the call ended. Its error message is the gateway's own short summary; the store
//! still scrubs it ([`scrub_error`]) before writing, so a credential that slipped into one
//! (a URL's query, a bearer token, a client key) never reaches the table.
//!
//! Rows are appended, never updated, and deleted only by retention ([`Store::prune_audit`]):
//! those older than a cutoff, then the oldest beyond a row cap, in the order
//! [`Store::audit_entries`] reads them (time, then insertion), so the rows kept are exactly the
//! newest ones a reader sees. Deletion runs in batches of [`AUDIT_PRUNE_BATCH`] rows, each its
//! own short transaction, so a large backlog never holds the write lock for long: the
//! gateway's own audit writes and a running `mcpgw audit` get in between.

use ids::{PrincipalId, QualifiedName, ServerName};
use std::time::{Duration, SystemTime};

use crate::backend::{Record, on_pool};
use crate::time::{from_unix_millis, unix_millis};
use crate::{Store, StoreError};

/// Longest error message kept, in characters.
pub const MAX_AUDIT_ERROR_CHARS: usize = 200;

/// Most rows one `DELETE` of [`Store::prune_audit`] removes: tens of milliseconds of write
/// lock on SQLite, short enough that a waiting writer (its busy timeout is 5 s) never gives up.
pub const AUDIT_PRUNE_BATCH: u32 = 10_000;

/// What the gateway decided about a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallDecision {
    /// Forwarded without asking anyone.
    Allowed,
    /// Forwarded after a person approved it.
    Approved { approver: String },
    /// A person rejected it (`approver` when known).
    Rejected { approver: Option<String> },
    /// The principal's profile does not permit the tool.
    Denied,
    /// The principal was over its calls-per-minute limit.
    RateLimited,
    /// The tool's definition changed and waits to be trusted again.
    Held,
    /// Nobody decided an approval in time.
    TimedOut,
}

impl CallDecision {
    /// The word stored and shown: `allowed`, `approved`, `rejected`, `denied`, `rate_limited`,
    /// `held`, `timed_out`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallDecision::Allowed => "allowed",
            CallDecision::Approved { .. } => "approved",
            CallDecision::Rejected { .. } => "rejected",
            CallDecision::Denied => "denied",
            CallDecision::RateLimited => "rate_limited",
            CallDecision::Held => "held",
            CallDecision::TimedOut => "timed_out",
        }
    }

    /// Who decided, when a person did.
    pub fn approver(&self) -> Option<&str> {
        match self {
            CallDecision::Approved { approver } => Some(approver),
            CallDecision::Rejected { approver } => approver.as_deref(),
            _ => None,
        }
    }

    fn from_row(word: &str, approver: Option<String>) -> Option<CallDecision> {
        Some(match word {
            "allowed" => CallDecision::Allowed,
            "approved" => CallDecision::Approved {
                approver: approver.unwrap_or_default(),
            },
            "rejected" => CallDecision::Rejected { approver },
            "denied" => CallDecision::Denied,
            "rate_limited" => CallDecision::RateLimited,
            "held" => CallDecision::Held,
            "timed_out" => CallDecision::TimedOut,
            _ => return None,
        })
    }
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// The upstream answered with a result.
    Ok,
    /// The upstream answered with a result marked `isError`.
    ToolError,
    /// The upstream could not be reached or failed to answer.
    UpstreamError,
    /// Nothing was sent upstream (denied, rate limited, rejected, invalid arguments...).
    NotRun,
}

impl CallOutcome {
    /// The word stored and shown: `ok`, `tool_error`, `upstream_error`, `not_run`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::ToolError => "tool_error",
            CallOutcome::UpstreamError => "upstream_error",
            CallOutcome::NotRun => "not_run",
        }
    }

    fn from_row(word: &str) -> Option<CallOutcome> {
        Some(match word {
            "ok" => CallOutcome::Ok,
            "tool_error" => CallOutcome::ToolError,
            "upstream_error" => CallOutcome::UpstreamError,
            "not_run" => CallOutcome::NotRun,
            _ => return None,
        })
    }
}

/// One row of the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// When the call arrived (millisecond precision once stored).
    pub at: SystemTime,
    /// `local`, `client:NAME` or `user:SUBJECT`.
    pub principal: PrincipalId,
    pub server: ServerName,
    /// The qualified tool name (`server__tool`).
    pub tool: QualifiedName,
    /// SHA-256 of the arguments' canonical JSON, lower-case hex.
    pub arguments_sha256: String,
    pub decision: CallDecision,
    pub outcome: CallOutcome,
    pub latency: Duration,
    /// The gateway's short summary of what went wrong, if anything did.
    pub error: Option<String>,
}

/// Which rows [`Store::audit_page`] returns: newest first, at most `limit`, every filter given
/// applying at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only this principal's calls (`client:ci`, `local`, ...).
    pub principal: Option<PrincipalId>,
    /// Only calls to this server's tools.
    pub server: Option<ServerName>,
    /// Only calls of this tool (qualified name).
    pub tool: Option<QualifiedName>,
    /// Only calls with this decision ([`CallDecision::as_str`]'s words).
    pub decision: Option<String>,
    /// Only calls with this outcome ([`CallOutcome::as_str`]'s words).
    pub outcome: Option<String>,
    /// Only calls that arrived at or after this time.
    pub since: Option<SystemTime>,
    /// Only calls that arrived before this time.
    pub until: Option<SystemTime>,
    /// Only rows after this one in the order (older): the `next` of the page before.
    pub after: Option<AuditCursor>,
    pub limit: usize,
}

/// Where a page of the audit log ended: the (time, id) of its last row, written `AT_MS.ID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditCursor {
    at_ms: i64,
    id: i64,
}

impl AuditCursor {
    /// A cursor as [`fmt::Display`] wrote it; `None` for anything else.
    pub fn parse(text: &str) -> Option<AuditCursor> {
        let (at_ms, id) = text.split_once('.')?;
        Some(AuditCursor {
            at_ms: at_ms.parse().ok()?,
            id: id.parse().ok()?,
        })
    }
}

impl std::fmt::Display for AuditCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.at_ms, self.id)
    }
}

/// One page of the audit log, and where the next one starts (`None`: this was the last).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub next: Option<AuditCursor>,
}

/// Every decision word an audit row can hold.
pub const DECISION_WORDS: [&str; 7] = [
    "allowed",
    "approved",
    "rejected",
    "denied",
    "rate_limited",
    "held",
    "timed_out",
];

/// Every outcome word an audit row can hold.
pub const OUTCOME_WORDS: [&str; 4] = ["ok", "tool_error", "upstream_error", "not_run"];

impl Store {
    /// Appends `entry` to the audit log. The error message is scrubbed and cut to
    /// [`MAX_AUDIT_ERROR_CHARS`] first.
    pub async fn record_call(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.record_calls(std::slice::from_ref(entry)).await
    }

    /// Appends `entries` to the audit log in one transaction: one trip to the database's writer
    /// for the whole batch, and either every row is written or none is. Each error message is
    /// scrubbed and cut as by [`Store::record_call`].
    pub async fn record_calls(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        on_pool!(&self.pool, pool => {
            if entries.len() <= AUDIT_INSERT_ROWS {
                // One statement is atomic by itself: no transaction's extra round trips.
                insert_calls!(pool, entries)?;
            } else {
                let mut transaction = pool.begin().await?;
                for chunk in entries.chunks(AUDIT_INSERT_ROWS) {
                    insert_calls!(&mut *transaction, chunk)?;
                }
                transaction.commit().await?;
            }
        });
        Ok(())
    }

    /// The tools called successfully most often since `since`, most first (ties by name), at
    /// most `limit`: what exposure `auto` pins when no `pinned` list is configured.
    pub async fn most_called_tools(
        &self,
        since: SystemTime,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let rows: Vec<(String,)> = on_pool!(&self.pool, pool => {
            sqlx::query_as(
                "SELECT tool FROM audit WHERE at_ms >= $1 AND outcome = 'ok'
                 GROUP BY tool ORDER BY COUNT(*) DESC, tool LIMIT $2",
            )
            .bind(unix_millis(since))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?
        });
        Ok(rows.into_iter().map(|(tool,)| tool).collect())
    }

    /// Deletes the audit rows older than `older_than`, then, if more than `max_rows` remain,
    /// the oldest beyond the newest `max_rows` (`None` or `Some(0)`: no cap, as `max_rows = 0`
    /// means in the configuration: a cap of no rows at all would be no log). Returns how many
    /// rows were deleted.
    ///
    /// "Oldest" is the order [`Store::audit_entries`] reads in reverse (time, then insertion),
    /// so the rows kept are exactly those `audit_entries` lists first. Rows go oldest first,
    /// [`AUDIT_PRUNE_BATCH`] per statement, each statement its own transaction: a huge backlog
    /// is deleted in many short write locks rather than one long one, and an interrupted prune
    /// has removed the oldest rows. Two prunes at once (the gateway's and `mcpgw audit prune`)
    /// delete the same rows, never more: the cap is a position in the log, not a count.
    pub async fn prune_audit(
        &self,
        older_than: SystemTime,
        max_rows: Option<u64>,
    ) -> Result<u64, StoreError> {
        // Rows before the cutoff: everything up to (cutoff - 1 ms, any id).
        let mut deleted = match unix_millis(older_than).checked_sub(1) {
            Some(last_ms) => self.delete_audit_through(last_ms, i64::MAX).await?,
            None => 0,
        };
        if let Some(max_rows) = max_rows.filter(|&n| n > 0) {
            // The newest row beyond the cap; it and everything older go. `audit_by_time` holds
            // (at_ms, rowid), so this walks the index, no sort.
            let newest_dropped: Option<(i64, i64)> = on_pool!(&self.pool, pool => {
                sqlx::query_as(
                    "SELECT at_ms, id FROM audit ORDER BY at_ms DESC, id DESC LIMIT 1 OFFSET $1",
                )
                .bind(i64::try_from(max_rows).unwrap_or(i64::MAX))
                .fetch_optional(pool)
                .await?
            });
            if let Some((at_ms, id)) = newest_dropped {
                deleted += self.delete_audit_through(at_ms, id).await?;
            }
        }
        Ok(deleted)
    }

    /// Deletes every audit row at or before (`at_ms`, `id`) in log order, oldest first, in
    /// batches of [`AUDIT_PRUNE_BATCH`].
    async fn delete_audit_through(&self, at_ms: i64, id: i64) -> Result<u64, StoreError> {
        let mut deleted = 0;
        loop {
            // A subquery because SQLite's `DELETE ... LIMIT` is a compile-time option the
            // bundled library lacks (and PostgreSQL has none); the row value comparison uses
            // `audit_by_time`.
            let batch = on_pool!(&self.pool, pool => {
                sqlx::query(
                    "DELETE FROM audit WHERE id IN (
                         SELECT id FROM audit WHERE (at_ms, id) <= ($1, $2)
                         ORDER BY at_ms, id LIMIT $3)",
                )
                .bind(at_ms)
                .bind(id)
                .bind(i64::from(AUDIT_PRUNE_BATCH))
                .execute(pool)
                .await?
                .rows_affected()
            });
            deleted += batch;
            if batch < u64::from(AUDIT_PRUNE_BATCH) {
                return Ok(deleted);
            }
        }
    }

    /// The rows `query` selects, newest first. A row this version cannot read (a decision or
    /// outcome written by a newer mcpgw) is skipped and logged.
    pub async fn audit_entries(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.audit_page(query).await?.entries)
    }

    /// One page of the rows `query` selects, newest first, and the cursor of the next page.
    /// Only the filters given become conditions, so SQLite can use the time and principal
    /// indexes (a `? IS NULL OR ...` for each would keep it from them).
    pub async fn audit_page(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        // One row more than asked says whether there is a next page.
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX - 1);
        let mut entries = Vec::with_capacity(query.limit.min(1024));
        let mut last = None;
        let more = on_pool!(&self.pool, pool => {
            let mut sql = sqlx::QueryBuilder::new(
                "SELECT id, at_ms, principal, server, tool, args_sha256, decision, approver,
                        outcome, latency_ms, error
                 FROM audit WHERE 1 = 1",
            );
            let texts = [
                ("principal", query.principal.as_deref()),
                ("server", query.server.as_deref()),
                ("tool", query.tool.as_deref()),
                ("decision", query.decision.as_deref()),
                ("outcome", query.outcome.as_deref()),
            ];
            for (column, value) in texts {
                if let Some(value) = value {
                    sql.push(format_args!(" AND {column} = "))
                        .push_bind(value.to_owned());
                }
            }
            if let Some(since) = query.since {
                sql.push(" AND at_ms >= ").push_bind(unix_millis(since));
            }
            if let Some(until) = query.until {
                sql.push(" AND at_ms < ").push_bind(unix_millis(until));
            }
            if let Some(after) = query.after {
                sql.push(" AND (at_ms, id) < (")
                    .push_bind(after.at_ms)
                    .push(", ")
                    .push_bind(after.id)
                    .push(")");
            }
            sql.push(" ORDER BY at_ms DESC, id DESC LIMIT ")
                .push_bind(limit + 1);
            let rows = sql.build().fetch_all(pool).await?;
            for row in rows.iter().take(query.limit) {
                last = Some(AuditCursor {
                    at_ms: row.int("at_ms")?,
                    id: row.int("id")?,
                });
                if let Some(entry) = audit_row(row)? {
                    entries.push(entry);
                }
            }
            rows.len() > query.limit
        });
        Ok(AuditPage {
            entries,
            next: last.filter(|_| more),
        })
    }
}

/// One audit row, or `None` (logged) when this version cannot read its words.
fn audit_row(row: &impl Record) -> Result<Option<AuditEntry>, StoreError> {
    let id = row.int("id")?;
    let decision = row.text("decision")?;
    let outcome = row.text("outcome")?;
    let (Some(decision), Some(outcome)) = (
        CallDecision::from_row(&decision, row.text_opt("approver")?),
        CallOutcome::from_row(&outcome),
    ) else {
        tracing::warn!(
            id,
            decision,
            outcome,
            "skipped an audit row this version cannot read"
        );
        return Ok(None);
    };
    Ok(Some(AuditEntry {
        at: from_unix_millis(row.int("at_ms")?),
        principal: row.text("principal")?.into(),
        server: row.text("server")?.into(),
        tool: row.text("tool")?.into(),
        arguments_sha256: row.text("args_sha256")?,
        decision,
        outcome,
        latency: Duration::from_millis(u64::try_from(row.int("latency_ms")?).unwrap_or(0)),
        error: row.text_opt("error")?,
    }))
}

/// `text` made safe to store: one line, credential-shaped words replaced by `[redacted]`
/// (a client key, a word after `Bearer`, the value of a `key=`/`token=`/`secret=`/... pair,
/// a long run of key-like characters mixing letters and digits), URLs cut to scheme and host,
/// and at most [`MAX_AUDIT_ERROR_CHARS`] characters.
pub fn scrub_error(text: &str) -> String {
    const REDACTED: &str = "[redacted]";
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut out: Vec<String> = Vec::new();
    let mut after_bearer = false;
    for word in flat.split(' ').filter(|w| !w.is_empty()) {
        let scrubbed = if after_bearer {
            REDACTED.to_owned()
        } else if let Some(origin) = url_origin(word) {
            origin
        } else if let Some((name, _)) = word.split_once(['=', ':'])
            && names_a_secret(name)
            && word.len() > name.len() + 1
        {
            format!("{}{REDACTED}", &word[..=name.len()])
        } else if looks_like_a_credential(word) {
            REDACTED.to_owned()
        } else {
            word.to_owned()
        };
        after_bearer = word.eq_ignore_ascii_case("bearer");
        out.push(scrubbed);
    }
    let joined = out.join(" ");
    match joined.char_indices().nth(MAX_AUDIT_ERROR_CHARS) {
        None => joined,
        Some((cut, _)) => {
            let mut short = joined[..cut].to_owned();
            short.push('…');
            short
        }
    }
}

/// `scheme://host[:port]` of a word that contains a URL, dropping user info, path, query and
/// fragment (a query often carries a key or a session id).
fn url_origin(word: &str) -> Option<String> {
    let start = word.find("://")?;
    let scheme_start = word[..start]
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .map_or(0, |i| i + 1);
    let rest = &word[start + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    Some(format!(
        "{}{}://{host}",
        &word[..scheme_start],
        &word[scheme_start..start]
    ))
}

fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "auth",
        "credential",
        "session",
        "signature",
        "sig",
        "code",
    ]
    .iter()
    .any(|secret| name.contains(secret))
}

/// A client key, or 24 and more key-like characters with both letters and digits: the shape
/// of an API key, a token or a hash, not of a word or a tool name.
fn looks_like_a_credential(word: &str) -> bool {
    let word = word.trim_matches(|c: char| matches!(c, '\'' | '"' | ',' | '.' | ';' | ')' | '('));
    if word.contains(crate::CLIENT_KEY_PREFIX) {
        return true;
    }
    word.len() >= 24
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b'/' | b'='))
        && word.bytes().any(|b| b.is_ascii_digit())
        && word.bytes().any(|b| b.is_ascii_alphabetic())
}

/// Rows one `INSERT` of [`Store::record_calls`] writes: 10 bound values each, well under
/// SQLite's limit of 32,766 per statement (and PostgreSQL's 65,535).
const AUDIT_INSERT_ROWS: usize = 200;

/// Executes `$entries` (at most [`AUDIT_INSERT_ROWS`]) as one multi-row `INSERT` on
/// `$executor`, of either backend: one statement, so one trip to the database however many
/// rows. A macro so the builder's backend comes from the executor.
macro_rules! insert_calls {
    ($executor:expr, $entries:expr) => {{
        let mut insert = sqlx::QueryBuilder::new(
            "INSERT INTO audit (at_ms, principal, server, tool, args_sha256, decision, approver,
                                outcome, latency_ms, error) ",
        );
        insert.push_values($entries, |mut row, entry| {
            row.push_bind(unix_millis(entry.at))
                .push_bind(entry.principal.as_str())
                .push_bind(entry.server.as_str())
                .push_bind(entry.tool.as_str())
                .push_bind(entry.arguments_sha256.as_str())
                .push_bind(entry.decision.as_str())
                .push_bind(entry.decision.approver())
                .push_bind(entry.outcome.as_str())
                .push_bind(i64::try_from(entry.latency.as_millis()).unwrap_or(i64::MAX))
                .push_bind(entry.error.as_deref().map(scrub_error));
        });
        // Not kept prepared: the text differs with the row count, and sqlx would cache one
        // statement per batch size (megabytes of SQLite memory after a load).
        insert.build().persistent(false).execute($executor).await
    }};
}
use insert_calls;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    use crate::testing::TestDb;

    fn entry(principal: &str, at_ms: u64, decision: CallDecision) -> AuditEntry {
        AuditEntry {
            at: UNIX_EPOCH + Duration::from_millis(at_ms),
            principal: principal.into(),
            server: "fs".into(),
            tool: "fs__read".into(),
            arguments_sha256: "ab".repeat(32),
            decision,
            outcome: CallOutcome::Ok,
            latency: Duration::from_millis(12),
            error: None,
        }
    }

    fn query(principal: Option<&str>, since_ms: Option<u64>, limit: usize) -> AuditQuery {
        AuditQuery {
            principal: principal.map(PrincipalId::from),
            since: since_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            limit,
            ..AuditQuery::default()
        }
    }

    crate::testing::backend_tests! {
    async fn entries_come_back_newest_first_and_filtered(db) {
        let store = db.open().await;
        let written = [
            entry("local", 1_000, CallDecision::Allowed),
            entry(
                "client:ci",
                2_000,
                CallDecision::Approved {
                    approver: "local".into(),
                },
            ),
            entry("client:ci", 3_000, CallDecision::RateLimited),
            entry("user:ann", 3_000, CallDecision::Rejected { approver: None }),
        ];
        for entry in &written {
            store.record_call(entry).await.expect("record");
        }
        let all = store
            .audit_entries(&query(None, None, 10))
            .await
            .expect("query");
        // Same time: the later insert first.
        assert_eq!(
            all,
            [
                written[3].clone(),
                written[2].clone(),
                written[1].clone(),
                written[0].clone()
            ]
        );
        let ci = store
            .audit_entries(&query(Some("client:ci"), None, 10))
            .await
            .expect("query");
        assert_eq!(ci, [written[2].clone(), written[1].clone()]);
        let recent = store
            .audit_entries(&query(None, Some(2_000), 10))
            .await
            .expect("query");
        assert_eq!(recent.len(), 3);
        let both = store
            .audit_entries(&query(Some("client:ci"), Some(2_500), 10))
            .await
            .expect("query");
        assert_eq!(both, [written[2].clone()]);
        let one = store
            .audit_entries(&query(None, None, 1))
            .await
            .expect("query");
        assert_eq!(one, [written[3].clone()]);
        assert!(
            store
                .audit_entries(&query(Some("nobody"), None, 10))
                .await
                .expect("query")
                .is_empty()
        );
    }

    async fn pages_follow_each_other_under_every_filter(db) {
        let store = db.open().await;
        let mut written = Vec::new();
        for i in 0..7u64 {
            let mut row = entry(
                if i % 2 == 0 { "local" } else { "client:ci" },
                1_000 + i,
                CallDecision::Allowed,
            );
            if i == 3 {
                row.server = "git".into();
                row.tool = "git__git_status".into();
                row.decision = CallDecision::Denied;
                row.outcome = CallOutcome::NotRun;
            }
            store.record_call(&row).await.expect("record");
            written.push(row);
        }
        // Three pages of three, newest first, the last one short and without a next.
        let mut query = AuditQuery {
            limit: 3,
            ..AuditQuery::default()
        };
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let page = store.audit_page(&query).await.expect("page");
            pages += 1;
            seen.extend(page.entries);
            let Some(next) = page.next else { break };
            let text = next.to_string();
            query.after = Some(AuditCursor::parse(&text).expect("cursor reads back"));
        }
        assert_eq!(pages, 3);
        written.reverse();
        assert_eq!(seen, written);
        assert_eq!(AuditCursor::parse("12"), None);
        assert_eq!(AuditCursor::parse("a.b"), None);

        let only = |query: AuditQuery| {
            let store = store.clone();
            async move { store.audit_page(&query).await.expect("page").entries }
        };
        let git = only(AuditQuery {
            server: Some("git".into()),
            limit: 10,
            ..AuditQuery::default()
        })
        .await;
        assert_eq!(git.len(), 1);
        assert_eq!(git[0].tool, "git__git_status");
        for query in [
            AuditQuery {
                tool: Some("git__git_status".into()),
                limit: 10,
                ..AuditQuery::default()
            },
            AuditQuery {
                decision: Some("denied".into()),
                limit: 10,
                ..AuditQuery::default()
            },
            AuditQuery {
                outcome: Some("not_run".into()),
                limit: 10,
                ..AuditQuery::default()
            },
        ] {
            assert_eq!(only(query.clone()).await, git, "{query:?}");
        }
        // A time window: [1002, 1005) holds rows 2, 3 and 4.
        let window = only(AuditQuery {
            since: Some(UNIX_EPOCH + Duration::from_millis(1_002)),
            until: Some(UNIX_EPOCH + Duration::from_millis(1_005)),
            limit: 10,
            ..AuditQuery::default()
        })
        .await;
        assert_eq!(window.len(), 3);
        let ci_ok = only(AuditQuery {
            principal: Some("client:ci".into()),
            outcome: Some("ok".into()),
            limit: 10,
            ..AuditQuery::default()
        })
        .await;
        assert_eq!(ci_ok.len(), 2, "rows 1 and 5 (row 3 did not run)");
    }

    async fn every_decision_and_outcome_round_trips(db) {
        let store = db.open().await;
        let decisions = [
            CallDecision::Allowed,
            CallDecision::Approved {
                approver: "client:ops".into(),
            },
            CallDecision::Rejected {
                approver: Some("local".into()),
            },
            CallDecision::Rejected { approver: None },
            CallDecision::Denied,
            CallDecision::RateLimited,
            CallDecision::Held,
            CallDecision::TimedOut,
        ];
        let outcomes = [
            CallOutcome::Ok,
            CallOutcome::ToolError,
            CallOutcome::UpstreamError,
            CallOutcome::NotRun,
        ];
        let mut written = Vec::new();
        for (i, decision) in decisions.iter().enumerate() {
            let mut e = entry("local", i as u64, decision.clone());
            e.outcome = outcomes[i % outcomes.len()];
            e.error = Some(format!("error {i}"));
            store.record_call(&e).await.expect("record");
            written.push(e);
        }
        let mut read = store
            .audit_entries(&query(None, None, 100))
            .await
            .expect("query");
        read.reverse();
        assert_eq!(read, written);
    }

    async fn unreadable_rows_are_skipped(db) {
        let store = db.open().await;
        store
            .record_call(&entry("local", 1, CallDecision::Allowed))
            .await
            .expect("record");
        store
            .exec(
                "INSERT INTO audit (at_ms, principal, server, tool, args_sha256, decision, outcome,
                                    latency_ms) VALUES (2, 'local', 's', 's__t', '', 'vetoed', 'ok', 0)",
            )
            .await;
        let read = store
            .audit_entries(&query(None, None, 10))
            .await
            .expect("query");
        assert_eq!(read.len(), 1);
    }

    async fn stored_errors_are_scrubbed(db) {
        let store = db.open().await;
        let mut e = entry("local", 1, CallDecision::Allowed);
        e.error = Some("401 from https://u:p@api.example/x?key=s3cr3t with Bearer abc".into());
        store.record_call(&e).await.expect("record");
        let read = store
            .audit_entries(&query(None, None, 1))
            .await
            .expect("query");
        assert_eq!(
            read[0].error.as_deref(),
            Some("401 from https://api.example with Bearer [redacted]")
        );
    }

    }

    /// Writes one row per time in `at_ms` (in that order) to a fresh database of `db`'s backend
    /// and returns a store on it (and the database, which must outlive it).
    async fn store_with_rows(db: &TestDb, at_ms: &[u64]) -> (Store, TestDb) {
        let fresh = TestDb::new(db.backend()).await;
        let store = fresh.open().await;
        for (i, &ms) in at_ms.iter().enumerate() {
            let mut e = entry("local", ms, CallDecision::Allowed);
            e.tool = format!("fs__t{i}").into();
            store.record_call(&e).await.expect("record");
        }
        (store, fresh)
    }

    /// The tools of the rows left, newest first (`fs__tN` for the Nth row written).
    async fn tools_left(store: &Store) -> Vec<String> {
        store
            .audit_entries(&query(None, None, 1000))
            .await
            .expect("query")
            .into_iter()
            .map(|e| e.tool.into_string())
            .collect()
    }

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    crate::testing::backend_tests! {
    async fn pruning_by_age_deletes_rows_before_the_cutoff_only(db) {
        let (store, _db) = store_with_rows(&db, &[1_000, 2_000, 2_999, 3_000, 4_000]).await;
        assert_eq!(store.prune_audit(at(3_000), None).await.expect("prune"), 3);
        assert_eq!(tools_left(&store).await, ["fs__t4", "fs__t3"]);
        // Nothing older is left: a second run deletes nothing.
        assert_eq!(store.prune_audit(at(3_000), None).await.expect("prune"), 0);
        assert_eq!(tools_left(&store).await, ["fs__t4", "fs__t3"]);
    }

    async fn pruning_by_count_keeps_the_newest_rows(db) {
        // Written out of time order, with a tie at 2_000: the later insert counts as newer,
        // as `audit_entries` shows it.
        let (store, _db) = store_with_rows(&db, &[5_000, 1_000, 2_000, 2_000, 4_000, 3_000]).await;
        assert_eq!(
            tools_left(&store).await,
            ["fs__t0", "fs__t4", "fs__t5", "fs__t3", "fs__t2", "fs__t1"]
        );
        assert_eq!(store.prune_audit(at(0), Some(4)).await.expect("prune"), 2);
        assert_eq!(
            tools_left(&store).await,
            ["fs__t0", "fs__t4", "fs__t5", "fs__t3"]
        );
        // The cap cuts between the two rows of the same millisecond.
        assert_eq!(store.prune_audit(at(0), Some(3)).await.expect("prune"), 1);
        assert_eq!(tools_left(&store).await, ["fs__t0", "fs__t4", "fs__t5"]);
        assert_eq!(store.prune_audit(at(0), Some(3)).await.expect("prune"), 0);
        assert_eq!(store.prune_audit(at(0), Some(1)).await.expect("prune"), 2);
        assert_eq!(tools_left(&store).await, ["fs__t0"]);
    }

    async fn pruning_by_age_and_count_applies_both(db) {
        let (store, _db) = store_with_rows(&db, &[1_000, 2_000, 3_000, 4_000, 5_000, 6_000]).await;
        // Age removes two, then the cap of three removes one more.
        assert_eq!(
            store.prune_audit(at(3_000), Some(3)).await.expect("prune"),
            3
        );
        assert_eq!(tools_left(&store).await, ["fs__t5", "fs__t4", "fs__t3"]);
        // The cap alone would keep five; age still takes what is too old.
        let (store, _db) = store_with_rows(&db, &[1_000, 2_000, 3_000, 4_000, 5_000, 6_000]).await;
        assert_eq!(
            store.prune_audit(at(3_000), Some(5)).await.expect("prune"),
            2
        );
        assert_eq!(tools_left(&store).await.len(), 4);
    }

    async fn pruning_with_nothing_to_delete_deletes_nothing(db) {
        let empty = db.open().await;
        assert_eq!(
            empty
                .prune_audit(SystemTime::now(), Some(10))
                .await
                .expect("prune"),
            0
        );
        let (store, _db) = store_with_rows(&db, &[5_000, 6_000]).await;
        assert_eq!(
            store.prune_audit(at(5_000), Some(2)).await.expect("prune"),
            0
        );
        assert_eq!(tools_left(&store).await, ["fs__t1", "fs__t0"]);
    }

    async fn zero_or_no_cap_and_the_epoch_keep_everything(db) {
        let (store, _db) = store_with_rows(&db, &[0, 1, 2_000, 3_000]).await;
        // A cap of 0 is no cap (the configuration's `max_rows = 0`), never "delete all".
        assert_eq!(
            store.prune_audit(UNIX_EPOCH, Some(0)).await.expect("prune"),
            0
        );
        assert_eq!(store.prune_audit(UNIX_EPOCH, None).await.expect("prune"), 0);
        assert_eq!(tools_left(&store).await.len(), 4);
    }

    async fn a_backlog_larger_than_a_batch_is_deleted_completely(db) {
        let store = db.open().await;
        let batch = u64::from(AUDIT_PRUNE_BATCH);
        let rows = 2 * batch + batch / 2;
        on_pool!(&store.pool, pool => {
            sqlx::query(
                "WITH RECURSIVE n(i) AS (SELECT CAST(1 AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < $1)
                 INSERT INTO audit (at_ms, principal, server, tool, args_sha256, decision, outcome,
                                    latency_ms)
                 SELECT i, 'local', 'fs', 'fs__old', '', 'allowed', 'ok', 0 FROM n",
            )
            .bind(i64::try_from(rows).expect("small"))
            .execute(pool)
            .await
            .expect("insert");
        });
        let mut newest = entry("local", rows + 10, CallDecision::Allowed);
        newest.tool = "fs__new".into();
        store.record_call(&newest).await.expect("record");
        // By age: every old row, in three statements.
        assert_eq!(
            store.prune_audit(at(rows + 1), None).await.expect("prune"),
            rows
        );
        assert_eq!(tools_left(&store).await, ["fs__new"]);
    }

    }

    #[tokio::test]
    async fn sqlite_pruning_walks_the_time_index() {
        let store = Store::open_in_memory().await.expect("store");
        for (sql, binds) in [
            (
                "EXPLAIN QUERY PLAN DELETE FROM audit WHERE id IN (
                     SELECT id FROM audit WHERE (at_ms, id) <= (?, ?)
                     ORDER BY at_ms, id LIMIT ?)",
                3,
            ),
            (
                "EXPLAIN QUERY PLAN SELECT at_ms, id FROM audit
                 ORDER BY at_ms DESC, id DESC LIMIT 1 OFFSET ?",
                1,
            ),
        ] {
            let mut plan = sqlx::query_as::<_, (i64, i64, i64, String)>(sql);
            for _ in 0..binds {
                plan = plan.bind(1_i64);
            }
            let plan: Vec<String> = plan
                .fetch_all(match &store.pool {
                    crate::backend::Pool::Sqlite(pool) => pool,
                    crate::backend::Pool::Postgres(_) => unreachable!("an in-memory store"),
                })
                .await
                .expect("plan")
                .into_iter()
                .map(|(_, _, _, detail)| detail)
                .collect();
            let plan = plan.join("\n");
            assert!(plan.contains("INDEX audit_by_time"), "{sql}\n{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}\n{plan}");
        }
    }

    #[test]
    fn scrubbing_removes_credential_shapes_and_keeps_words() {
        let check = |input: &str, expect: &str| assert_eq!(scrub_error(input), expect, "{input}");
        check(
            "'fs' did not answer within 30s",
            "'fs' did not answer within 30s",
        );
        check(
            "connection to 'git' was lost: transport closed",
            "connection to 'git' was lost: transport closed",
        );
        check(
            "error sending request for url (http://127.0.0.1:9/mcp?session=abc)",
            "error sending request for url (http://127.0.0.1:9",
        );
        check("used key mcpgw_AbCdEf012345", "used key [redacted]");
        check(
            "token=abc api_key:xyz secret=",
            "token=[redacted] api_key:[redacted] secret=",
        );
        check(
            "sent ghp_0123456789abcdefABCDEF0123 upstream",
            "sent [redacted] upstream",
        );
        check(
            "tool everything__get_resource_reference failed",
            "tool everything__get_resource_reference failed",
        );
        check("line one\nline two", "line one line two");
        let long = "word ".repeat(100);
        let scrubbed = scrub_error(&long);
        assert_eq!(scrubbed.chars().count(), MAX_AUDIT_ERROR_CHARS + 1);
        assert!(scrubbed.ends_with('…'));
    }
}
