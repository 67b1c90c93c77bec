//! Human approval of risky tool calls (`[approval]`).
//!
//! A call that needs approval is recorded as a pending approval in the store, then decided in
//! the best way the caller's client allows:
//! - a 2025-11-25 client with form elicitation is asked through `elicitation/create` (tool,
//!   server, arguments; approve or reject; the arguments may be edited);
//! - a 2026-07-28 client with elicitation gets an `input_required` result carrying that form,
//!   and its retry (`requestState` naming the approval) carries the answer;
//! - any other client's call waits for a decision made out of band (`mcpgw approvals`, the
//!   admin endpoint), up to `[approval] timeout_s`, then fails saying so.
//!
//! While a client is asked, the approval stays decidable out of band too: whichever decision
//! is recorded first wins (the store's conditional update), and the loser is told.
//!
//! Invariants:
//! - Fail closed: a call that needs approval and cannot be recorded (no database) is not run;
//!   annotations that cannot be read need approval (see `config::ApprovalConfig::requires`).
//! - A decision is made once, by the caller on its own call or by an admin
//!   ([`may_decide`]); replaced arguments are a JSON object, and are validated against the
//!   tool's input schema again before the call runs.
//! - A 2026-07-28 retry runs the arguments recorded with the approval (or the approver's),
//!   never arguments sent with the retry.

use std::time::{Duration, SystemTime};

use rmcp::model::{ElicitResult, ElicitationAction, ElicitationSchema};
use serde_json::{Map, Value, json};
use store::{Approval, ApprovalStatus, DecideError, Verdict};
use tokio_util::sync::CancellationToken;

use crate::{Gateway, principal::Principal};

/// The key of the approval form in an `input_required` result's `inputRequests`.
pub(crate) const APPROVAL_INPUT: &str = "mcpgw_approval";

const STATE_PREFIX: &str = "mcpgw-approval:";

/// How often a waiting call looks for a decision made by another process (the CLI; another
/// replica when Redis is down or not configured). Decisions made in this process, or announced
/// by another replica through Redis (`replicas`), wake it at once.
const POLL: Duration = Duration::from_millis(300);

/// Wakes the calls waiting in this process when a decision is recorded here.
#[derive(Default)]
pub(crate) struct Waiters(tokio::sync::Notify);

impl Waiters {
    /// Wakes every waiting call of this process, each to read its approval again.
    pub(crate) fn wake(&self) {
        self.0.notify_waiters();
    }
}

/// Why a decision was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("approvals need the database, which could not be opened")]
    NoStore,
    #[error("only the client that made the call, or an admin, may decide approval '{id}'")]
    Forbidden { id: String },
    #[error(transparent)]
    Decide(#[from] DecideError),
    #[error("cannot read the approvals: {0}")]
    Store(#[from] store::StoreError),
}

/// Whether `decider` may decide `approval`: its own call, or any call if it is an admin.
pub fn may_decide(decider: &Principal, approval: &Approval, policy: &config::PolicyConfig) -> bool {
    decider.is_admin(policy) || decider.id() == approval.principal
}

/// The `requestState` of an `input_required` result that asks for approval `id`.
pub(crate) fn request_state(id: &str) -> String {
    format!("{STATE_PREFIX}{id}")
}

/// The approval id of a `requestState` made by [`request_state`].
pub(crate) fn parse_request_state(state: &str) -> Option<&str> {
    state
        .strip_prefix(STATE_PREFIX)
        .filter(|id| !id.is_empty() && id.len() <= 32)
}

/// What the user answered on the approval form.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    Approve(Option<Map<String, Value>>),
    Reject(String),
    /// The form came back unreadable (edited arguments that are not a JSON object).
    Invalid(String),
}

/// Reads an elicitation answer to the approval form. `original` are the arguments shown.
pub(crate) fn read_answer(result: &ElicitResult, original: &Map<String, Value>) -> Answer {
    match result.action {
        ElicitationAction::Decline => return Answer::Reject("declined by the user".to_owned()),
        ElicitationAction::Accept => {}
        _ => return Answer::Reject("dismissed by the user".to_owned()),
    }
    let content = result.content.as_ref().and_then(Value::as_object);
    let decision = content
        .and_then(|c| c.get("decision"))
        .and_then(Value::as_str);
    if decision != Some("approve") {
        return Answer::Reject("rejected by the user".to_owned());
    }
    let edited = content
        .and_then(|c| c.get("arguments"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|text| !text.is_empty());
    let Some(text) = edited else {
        return Answer::Approve(None);
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) if &map == original => Answer::Approve(None),
        Ok(Value::Object(map)) => Answer::Approve(Some(map)),
        Ok(_) => Answer::Invalid("the edited arguments must be a JSON object".to_owned()),
        Err(error) => Answer::Invalid(format!("the edited arguments are not valid JSON ({error})")),
    }
}

/// The approval form: what is asked, and the schema of the answer (`None` only if rmcp
/// stopped accepting the schema, in which case the call waits for an out-of-band decision).
pub(crate) fn form(approval: &Approval, why: &str) -> Option<(String, ElicitationSchema)> {
    let arguments = serde_json::to_string_pretty(&Value::Object(approval.arguments.clone()))
        .unwrap_or_else(|_| "{}".to_owned());
    let message = format!(
        "Approve this tool call?\n\nTool: {}\nServer: {}\nArguments:\n{arguments}\n\n{why} \
         (approval {}). Choose approve or reject; you may edit the arguments (a JSON object) \
         before approving.",
        approval.tool, approval.server, approval.id
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "enum": ["approve", "reject"],
            },
            "arguments": {
                "type": "string",
                "title": "Arguments (JSON object)",
                "description": "What the tool receives; edit to change it.",
                "default": serde_json::to_string(&Value::Object(approval.arguments.clone())).unwrap_or_default(),
            },
        },
        "required": ["decision"],
    });
    let schema = serde_json::from_value::<ElicitationSchema>(schema).ok()?;
    Some((message, schema))
}

/// Why a call needs approval, in words for the approver.
pub(crate) fn reason(config: &config::ApprovalConfig, qualified: &str) -> String {
    if config
        .rules
        .iter()
        .any(|rule| rule.tools.iter().any(|p| p.matches(qualified)))
    {
        "An approval rule covers this tool".to_owned()
    } else {
        "The tool is marked destructive (destructiveHint)".to_owned()
    }
}

/// How waiting for a decision ended.
pub(crate) enum Waited {
    Decided(Box<Approval>),
    TimedOut,
    Cancelled,
}

impl Gateway {
    /// Approvals `viewer` may see and decide: every pending one for an admin, else its own.
    pub async fn pending_approvals(
        &self,
        viewer: &Principal,
    ) -> Result<Vec<Approval>, DecisionError> {
        let store = self.store().ok_or(DecisionError::NoStore)?;
        let own = viewer.id();
        let filter = (!viewer.is_admin(&self.config().policy)).then_some(own.as_str());
        Ok(store.pending_approvals(filter).await?)
    }

    /// Records `verdict` on approval `id` for `decider`, once; wakes the waiting call.
    pub async fn decide_approval(
        &self,
        id: &str,
        verdict: Verdict,
        decider: &Principal,
    ) -> Result<Approval, DecisionError> {
        let store = self.store().ok_or(DecisionError::NoStore)?;
        let Some(approval) = store.approval(id).await? else {
            return Err(DecideError::NotFound { id: id.to_owned() }.into());
        };
        if !may_decide(decider, &approval, &self.config().policy) {
            tracing::warn!(approval = id, decider = %decider, "approval decision refused: not the caller nor an admin");
            return Err(DecisionError::Forbidden { id: id.to_owned() });
        }
        let decided = store.decide_approval(id, verdict, &decider.id()).await?;
        tracing::info!(
            approval = id,
            tool = %decided.tool,
            status = decided.status.as_str(),
            by = %decider,
            "approval decided"
        );
        self.approval_waiters.wake();
        // The decision is in the database already: the event only wakes the replica holding
        // the call at once, rather than at its next poll.
        self.tell_replicas(cluster::Event::Approval { id: id.to_owned() });
        Ok(decided)
    }

    /// Waits until approval `id` is decided (here or by another process), its deadline passes
    /// (then it is marked expired), or `ct` fires (then it is marked cancelled).
    pub(crate) async fn wait_for_decision(
        &self,
        store: &store::Store,
        id: &str,
        deadline: SystemTime,
        ct: &CancellationToken,
    ) -> Waited {
        loop {
            let woken = self.approval_waiters.0.notified();
            match store.approval(id).await {
                Ok(Some(approval)) if approval.status == ApprovalStatus::Pending => {}
                Ok(Some(approval)) if approval.status == ApprovalStatus::Expired => {
                    return self.end(store, id, ApprovalStatus::Expired).await;
                }
                Ok(Some(approval)) if approval.status == ApprovalStatus::Cancelled => {
                    return Waited::Cancelled;
                }
                Ok(Some(approval)) => return Waited::Decided(Box::new(approval)),
                Ok(None) => return Waited::Cancelled,
                Err(error) => {
                    // Keep waiting: the database may come back before the deadline.
                    tracing::warn!(approval = id, %error, "cannot read an approval; still waiting");
                }
            }
            let left = deadline
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            if left.is_zero() {
                return self.end(store, id, ApprovalStatus::Expired).await;
            }
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(POLL.min(left)) => {}
                () = ct.cancelled() => return self.end(store, id, ApprovalStatus::Cancelled).await,
            }
        }
    }

    /// Ends a pending approval without a decision; if a decision won the race, that decision.
    async fn end(&self, store: &store::Store, id: &str, status: ApprovalStatus) -> Waited {
        match store.end_approval(id, status).await {
            Ok(true) | Err(_) => {
                if status == ApprovalStatus::Expired {
                    Waited::TimedOut
                } else {
                    Waited::Cancelled
                }
            }
            Ok(false) => match store.approval(id).await {
                Ok(Some(approval))
                    if matches!(
                        approval.status,
                        ApprovalStatus::Approved | ApprovalStatus::Rejected
                    ) =>
                {
                    Waited::Decided(Box::new(approval))
                }
                _ if status == ApprovalStatus::Expired => Waited::TimedOut,
                _ => Waited::Cancelled,
            },
        }
    }
}

/// Time left until `deadline`, for an elicitation's own timeout.
pub(crate) fn remaining(deadline: SystemTime) -> Duration {
    deadline
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn answer(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        let mut result = ElicitResult::new(action);
        result.content = content;
        result
    }

    #[test]
    fn answers_are_read_strictly() {
        let original = object(json!({"path": "/tmp/a"}));
        let read = |result: ElicitResult| read_answer(&result, &original);
        assert_eq!(
            read(answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "approve"}))
            )),
            Answer::Approve(None)
        );
        assert_eq!(
            read(answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "approve", "arguments": "{\"path\": \"/tmp/a\"}"}))
            )),
            Answer::Approve(None)
        );
        assert_eq!(
            read(answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "approve", "arguments": "{\"path\": \"/tmp/b\"}"}))
            )),
            Answer::Approve(Some(object(json!({"path": "/tmp/b"}))))
        );
        assert!(matches!(
            read(answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "approve", "arguments": "null"}))
            )),
            Answer::Invalid(_)
        ));
        assert!(matches!(
            read(answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "approve", "arguments": "{oops"}))
            )),
            Answer::Invalid(_)
        ));
        for rejected in [
            answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "reject"})),
            ),
            answer(ElicitationAction::Accept, None),
            answer(ElicitationAction::Decline, None),
            answer(ElicitationAction::Cancel, None),
        ] {
            assert!(matches!(read(rejected), Answer::Reject(_)));
        }
    }

    #[test]
    fn request_states_round_trip_and_reject_strangers() {
        assert_eq!(parse_request_state(&request_state("abc")), Some("abc"));
        assert_eq!(parse_request_state("mcpgw-signin:x:1"), None);
        assert_eq!(parse_request_state("mcpgw-approval:"), None);
    }

    #[test]
    fn the_form_converts_to_an_elicitation_schema() {
        let approval = Approval {
            id: "abc".into(),
            principal: "local".into(),
            server: "fs".into(),
            tool: "fs__rm".into(),
            arguments: object(json!({"path": "/x"})),
            created_at: SystemTime::now(),
            expires_at: SystemTime::now(),
            status: ApprovalStatus::Pending,
            decided_by: None,
            decided_at: None,
            decided_arguments: None,
            reason: None,
        };
        let (message, schema) = form(&approval, "why").expect("form");
        assert!(
            message.contains("fs__rm") && message.contains("/x"),
            "{message}"
        );
        let schema = serde_json::to_value(&schema).expect("schema");
        assert_eq!(
            schema["properties"]["decision"]["enum"],
            json!(["approve", "reject"])
        );
        assert_eq!(schema["required"], json!(["decision"]));
    }

    #[test]
    fn admins_and_callers_may_decide() {
        let policy = config::PolicyConfig {
            profiles: vec![config::Profile {
                name: "ops".into(),
                servers: vec![],
                allow: vec![],
                deny: vec![],
                read_only: false,
                destructive: true,
                exposure: None,
                pinned: None,
                clients: vec!["root".into()],
                admin: true,
                calls_per_minute: None,
            }],
            ..Default::default()
        };
        let approval = |principal: &str| Approval {
            id: "a".into(),
            principal: principal.into(),
            server: "s".into(),
            tool: "s__t".into(),
            arguments: Map::new(),
            created_at: SystemTime::now(),
            expires_at: SystemTime::now(),
            status: ApprovalStatus::Pending,
            decided_by: None,
            decided_at: None,
            decided_arguments: None,
            reason: None,
        };
        let alice = Principal::Client("alice".into());
        assert!(may_decide(&alice, &approval("client:alice"), &policy));
        assert!(!may_decide(&alice, &approval("client:bob"), &policy));
        assert!(may_decide(
            &Principal::Client("root".into()),
            &approval("client:bob"),
            &policy
        ));
        assert!(may_decide(
            &Principal::Local,
            &approval("client:bob"),
            &policy
        ));
    }
}
