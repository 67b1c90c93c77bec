//! Tool calls waiting for a human (`approvals`): created pending by the gateway, decided once
//! by an approver (`mcpgw approvals`, the admin endpoint, or the caller's own elicitation), or
//! ended by the waiting side (timeout, cancellation).
//!
//! - A decision is a conditional `UPDATE ... WHERE status = 'pending' AND expires_ms > now`:
//!   of two approvers racing, on one process or several, exactly one wins; the other is told
//!   who decided first.
//! - Who may decide is the gateway's business (it knows admins and principals); this module
//!   records who did.
//! - Replaced arguments are always a JSON object.

use ids::{PrincipalId, QualifiedName, ServerName};
use std::time::{Duration, SystemTime};

use crate::time::{from_unix_millis, unix_millis};

use serde_json::{Map, Value};

use crate::backend::{Record, on_pool};

use crate::{Store, StoreError};

/// Where an approval stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Rejected,
    /// Nobody decided before the deadline.
    Expired,
    /// The call was abandoned (the client went away) before a decision.
    Cancelled,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> ApprovalStatus {
        match text {
            "approved" => ApprovalStatus::Approved,
            "rejected" => ApprovalStatus::Rejected,
            "expired" => ApprovalStatus::Expired,
            "cancelled" => ApprovalStatus::Cancelled,
            _ => ApprovalStatus::Pending,
        }
    }
}

/// One call that needed approval.
#[derive(Clone, Debug, PartialEq)]
pub struct Approval {
    /// Short and typeable: `mcpgw approvals approve ID`.
    pub id: String,
    /// The caller's principal id (`local`, `client:NAME`, `user:SUB`).
    pub principal: PrincipalId,
    pub server: ServerName,
    /// The qualified tool name.
    pub tool: QualifiedName,
    pub arguments: Map<String, Value>,
    pub created_at: SystemTime,
    pub expires_at: SystemTime,
    /// `Pending` past `expires_at` reads as `Expired`.
    pub status: ApprovalStatus,
    pub decided_by: Option<String>,
    pub decided_at: Option<SystemTime>,
    /// Set when the approver replaced the arguments.
    pub decided_arguments: Option<Map<String, Value>>,
    pub reason: Option<String>,
}

impl Approval {
    /// The arguments the call runs with once approved: the approver's, else the caller's.
    pub fn effective_arguments(&self) -> &Map<String, Value> {
        self.decided_arguments.as_ref().unwrap_or(&self.arguments)
    }
}

/// A new pending approval.
#[derive(Clone, Debug)]
pub struct NewApproval<'a> {
    pub principal: &'a str,
    pub server: &'a str,
    pub tool: &'a str,
    pub arguments: &'a Map<String, Value>,
    pub timeout: Duration,
}

/// What an approver decides.
#[derive(Clone, Debug)]
pub enum Verdict {
    Approve {
        /// Replacement arguments, or `None` to keep the caller's.
        arguments: Option<Map<String, Value>>,
    },
    Reject {
        reason: Option<String>,
    },
}

/// Why a decision was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("no approval has the id '{id}'")]
    NotFound { id: String },
    #[error("approval '{id}' was already {} by {by}", status.as_str())]
    AlreadyDecided {
        id: String,
        status: ApprovalStatus,
        by: String,
    },
    #[error("approval '{id}' expired before a decision; the call was not run")]
    Expired { id: String },
    #[error("approval '{id}' was cancelled: the caller stopped waiting")]
    Cancelled { id: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// 10 characters of an unambiguous 31-letter alphabet (no i, l, o, 0, 1): about 49 bits.
fn new_id() -> Result<String, StoreError> {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
    let mut bytes = [0u8; 10];
    aes_gcm::aead::common::getrandom::fill(&mut bytes).map_err(|_| StoreError::Random)?;
    Ok(bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect())
}

fn object(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

const COLUMNS: &str = "id, principal, server, tool, arguments, created_ms, expires_ms, status, \
                       decided_by, decided_ms, decided_arguments, reason";

fn approval(row: &impl Record, now: i64) -> Result<Approval, StoreError> {
    let expires_ms = row.int("expires_ms")?;
    let mut status = ApprovalStatus::parse(&row.text("status")?);
    if status == ApprovalStatus::Pending && expires_ms <= now {
        status = ApprovalStatus::Expired;
    }
    Ok(Approval {
        id: row.text("id")?,
        principal: row.text("principal")?.into(),
        server: row.text("server")?.into(),
        tool: row.text("tool")?.into(),
        arguments: object(&row.text("arguments")?),
        created_at: from_unix_millis(row.int("created_ms")?),
        expires_at: from_unix_millis(expires_ms),
        status,
        decided_by: row.text_opt("decided_by")?,
        decided_at: row.int_opt("decided_ms")?.map(from_unix_millis),
        decided_arguments: row.text_opt("decided_arguments")?.as_deref().map(object),
        reason: row.text_opt("reason")?,
    })
}

impl Store {
    /// Records a pending approval and returns it.
    pub async fn create_approval(&self, new: NewApproval<'_>) -> Result<Approval, StoreError> {
        let now = SystemTime::now();
        let expires = now + new.timeout;
        let arguments = Value::Object(new.arguments.clone()).to_string();
        let id = loop {
            let id = new_id()?;
            let inserted = on_pool!(&self.pool, pool => {
                sqlx::query(
                    "INSERT INTO approvals
                         (id, principal, server, tool, arguments, created_ms, expires_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
                )
                .bind(&id)
                .bind(new.principal)
                .bind(new.server)
                .bind(new.tool)
                .bind(&arguments)
                .bind(unix_millis(now))
                .bind(unix_millis(expires))
                .execute(pool)
                .await?
                .rows_affected()
            });
            if inserted == 1 {
                break id;
            }
        };
        Ok(Approval {
            id,
            principal: new.principal.into(),
            server: new.server.into(),
            tool: new.tool.into(),
            arguments: new.arguments.clone(),
            created_at: from_unix_millis(unix_millis(now)),
            expires_at: from_unix_millis(unix_millis(expires)),
            status: ApprovalStatus::Pending,
            decided_by: None,
            decided_at: None,
            decided_arguments: None,
            reason: None,
        })
    }

    pub async fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        let now = unix_millis(SystemTime::now());
        on_pool!(&self.pool, pool => {
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM approvals WHERE id = $1"
            )))
            .bind(id)
            .fetch_optional(pool)
            .await?;
            row.map(|row| approval(&row, now)).transpose()
        })
    }

    /// Approvals still waiting, oldest first; only `principal`'s when given.
    pub async fn pending_approvals(
        &self,
        principal: Option<&str>,
    ) -> Result<Vec<Approval>, StoreError> {
        let now = unix_millis(SystemTime::now());
        on_pool!(&self.pool, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM approvals
                 WHERE status = 'pending' AND expires_ms > $1 AND ($2 IS NULL OR principal = $2)
                 ORDER BY created_ms, id"
            )))
            .bind(now)
            .bind(principal)
            .fetch_all(pool)
            .await?;
            rows.iter().map(|row| approval(row, now)).collect()
        })
    }

    /// The most recent approvals in any state, newest first (for `mcpgw approvals list --all`).
    pub async fn recent_approvals(&self, limit: u32) -> Result<Vec<Approval>, StoreError> {
        let now = unix_millis(SystemTime::now());
        on_pool!(&self.pool, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM approvals ORDER BY created_ms DESC, id LIMIT $1"
            )))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?;
            rows.iter().map(|row| approval(row, now)).collect()
        })
    }

    /// Records `verdict` on pending approval `id` by `by`, once: a second decision, or one
    /// after the deadline, is refused saying why.
    pub async fn decide_approval(
        &self,
        id: &str,
        verdict: Verdict,
        by: &str,
    ) -> Result<Approval, DecideError> {
        let now = unix_millis(SystemTime::now());
        let (status, arguments, reason) = match verdict {
            Verdict::Approve { arguments } => (
                ApprovalStatus::Approved,
                arguments.map(|a| Value::Object(a).to_string()),
                None,
            ),
            Verdict::Reject { reason } => (ApprovalStatus::Rejected, None, reason),
        };
        let done = on_pool!(&self.pool, pool => {
            sqlx::query(
                "UPDATE approvals
                 SET status = $1, decided_by = $2, decided_ms = $3, decided_arguments = $4,
                     reason = $5
                 WHERE id = $6 AND status = 'pending' AND expires_ms > $3",
            )
            .bind(status.as_str())
            .bind(by)
            .bind(now)
            .bind(arguments)
            .bind(reason)
            .bind(id)
            .execute(pool)
            .await
            .map_err(StoreError::from)?
            .rows_affected()
        });
        let current = self.approval(id).await?;
        let Some(current) = current else {
            return Err(DecideError::NotFound { id: id.to_owned() });
        };
        if done == 1 {
            return Ok(current);
        }
        Err(match current.status {
            ApprovalStatus::Expired => DecideError::Expired { id: id.to_owned() },
            ApprovalStatus::Cancelled => DecideError::Cancelled { id: id.to_owned() },
            status => DecideError::AlreadyDecided {
                id: id.to_owned(),
                status,
                by: current.decided_by.unwrap_or_else(|| "someone".to_owned()),
            },
        })
    }

    /// Ends pending approval `id` without a decision (`Expired` or `Cancelled`); false when it
    /// was no longer pending (a decision won the race: read it with [`Store::approval`]).
    pub async fn end_approval(&self, id: &str, status: ApprovalStatus) -> Result<bool, StoreError> {
        let done = on_pool!(&self.pool, pool => {
            sqlx::query(
                "UPDATE approvals SET status = $1, decided_ms = $2
                 WHERE id = $3 AND status = 'pending'",
            )
            .bind(status.as_str())
            .bind(unix_millis(SystemTime::now()))
            .bind(id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(done == 1)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    async fn pending(store: &Store, principal: &str, timeout: Duration) -> Approval {
        store
            .create_approval(NewApproval {
                principal,
                server: "fs",
                tool: "fs__delete",
                arguments: &args(json!({"path": "/tmp/x"})),
                timeout,
            })
            .await
            .expect("created")
    }

    crate::testing::backend_tests! {
    async fn a_decision_is_made_once(db) {
        let store = db.open().await;
        let first = pending(&store, "client:a", Duration::from_secs(60)).await;
        assert_eq!(first.id.len(), 10);
        assert_eq!(store.pending_approvals(None).await.expect("list").len(), 1);
        assert_eq!(
            store
                .pending_approvals(Some("client:b"))
                .await
                .expect("list")
                .len(),
            0
        );
        let replaced = args(json!({"path": "/tmp/y"}));
        let decided = store
            .decide_approval(
                &first.id,
                Verdict::Approve {
                    arguments: Some(replaced.clone()),
                },
                "local",
            )
            .await
            .expect("decided");
        assert_eq!(decided.status, ApprovalStatus::Approved);
        assert_eq!(decided.effective_arguments(), &replaced);
        assert_eq!(decided.arguments["path"], "/tmp/x");
        let again = store
            .decide_approval(&first.id, Verdict::Reject { reason: None }, "client:b")
            .await
            .expect_err("second decision");
        assert_eq!(
            again.to_string(),
            format!("approval '{}' was already approved by local", first.id)
        );
        assert!(
            !store
                .end_approval(&first.id, ApprovalStatus::Expired)
                .await
                .expect("end")
        );
        assert!(
            store
                .pending_approvals(None)
                .await
                .expect("list")
                .is_empty()
        );
        let missing = store
            .decide_approval("nope", Verdict::Reject { reason: None }, "local")
            .await
            .expect_err("missing");
        assert!(matches!(missing, DecideError::NotFound { .. }));
    }

    async fn an_expired_approval_cannot_be_decided(db) {
        let store = db.open().await;
        let gone = pending(&store, "local", Duration::ZERO).await;
        assert!(
            store
                .pending_approvals(None)
                .await
                .expect("list")
                .is_empty()
        );
        let read = store.approval(&gone.id).await.expect("read").expect("row");
        assert_eq!(read.status, ApprovalStatus::Expired);
        let refused = store
            .decide_approval(&gone.id, Verdict::Approve { arguments: None }, "local")
            .await
            .expect_err("expired");
        assert!(matches!(refused, DecideError::Expired { .. }), "{refused}");

        let waiting = pending(&store, "local", Duration::from_secs(60)).await;
        assert!(
            store
                .end_approval(&waiting.id, ApprovalStatus::Cancelled)
                .await
                .expect("end")
        );
        let refused = store
            .decide_approval(&waiting.id, Verdict::Approve { arguments: None }, "local")
            .await
            .expect_err("cancelled");
        assert!(
            matches!(refused, DecideError::Cancelled { .. }),
            "{refused}"
        );
    }

    /// A decision made through one handle (replica B's admin API) is what another handle
    /// (replica A, holding the waiting call) reads.
    async fn a_decision_on_one_handle_is_seen_by_another(db) {
        let a = db.open().await;
        let b = db.open().await;
        let waiting = pending(&a, "client:ci", Duration::from_secs(60)).await;
        assert_eq!(b.pending_approvals(None).await.expect("list").len(), 1);
        b.decide_approval(&waiting.id, Verdict::Reject { reason: Some("no".into()) }, "local")
            .await
            .expect("decided on b");
        let seen = a.approval(&waiting.id).await.expect("read").expect("row");
        assert_eq!(seen.status, ApprovalStatus::Rejected);
        assert_eq!(seen.reason.as_deref(), Some("no"));
        assert!(a.decide_approval(&waiting.id, Verdict::Approve { arguments: None }, "x").await.is_err());
    }
    }
}
