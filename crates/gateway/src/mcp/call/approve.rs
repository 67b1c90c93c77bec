//! The approve step: a call that an `[approval]` rule covers waits for a human decision
//! before it runs (see `policy::approval` for the rules, the form and the waiting). How the
//! person is asked depends on the client ([`Asker`]): a form elicitation on its session, an
//! `input_required` result its retry answers, or nothing, and the call waits for a decision
//! made out of band (`mcpgw approvals approve ID`, `/admin/approvals`).

use std::{collections::BTreeMap, sync::Mutex, time::Duration};

use rmcp::{
    Peer, RoleServer,
    model::{
        CallToolRequestParams, CallToolResult, ElicitRequest, ElicitRequestParams, ElicitResult,
        InputRequest, InputRequiredResult,
    },
    service::RequestContext,
};
use serde_json::{Map, Value};

use super::{Call, Pipeline, Record, Target};
use crate::{
    audit::CallDecision,
    mcp::result,
    policy::approval::{self, Answer, DecisionError},
    sync::lock,
};

/// How the person behind one `tools/call` can be asked to approve it.
pub(crate) enum Asker {
    /// A 2025-11-25 client with form elicitation: `elicitation/create` on its session.
    Elicit { peer: Peer<RoleServer> },
    /// A 2026-07-28 client with form elicitation: an `input_required` result; `retry` when
    /// this call is the retry that carries the answer.
    InputRequired { retry: Option<ApprovalRetry> },
    /// No way to ask: the call waits for a decision made out of band.
    Wait,
}

/// The MRTR retry of a call that asked for approval.
pub(crate) struct ApprovalRetry {
    id: String,
    answer: Option<ElicitResult>,
}

impl Asker {
    pub(crate) fn of(
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Self {
        let form = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            // An empty `elicitation` object means form mode (2025-06-18 compatibility).
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        if !form {
            return Self::Wait;
        }
        if !crate::mcp::is_modern(context) {
            return Self::Elicit {
                peer: context.peer.clone(),
            };
        }
        let retry = request
            .request_state
            .as_deref()
            .and_then(approval::parse_request_state)
            .map(|id| ApprovalRetry {
                id: id.to_owned(),
                answer: request
                    .input_responses
                    .as_ref()
                    .and_then(|responses| responses.get(approval::APPROVAL_INPUT))
                    .and_then(|answer| serde_json::from_value::<ElicitResult>(answer.clone()).ok()),
            });
        Self::InputRequired { retry }
    }
}

/// What the approval step decided.
#[derive(Debug)]
pub(crate) enum Gate {
    /// Run the call, with these arguments (an approver's replacement, or the caller's).
    Proceed(Option<Map<String, Value>>),
    /// Do not run it; this is the answer.
    Stop(CallToolResult),
    /// Ask the 2026-07-28 client; its retry carries the answer.
    Ask(InputRequiredResult),
}

impl Pipeline<'_> {
    /// The approval step of a call: lets it through, stops it, or asks the user.
    pub(crate) async fn approve(
        &self,
        call: &Call<'_>,
        target: &Target,
        arguments: Option<Map<String, Value>>,
    ) -> Gate {
        // A re-attempt (after a sign-in) runs what was approved without asking again.
        if let Some(approved) = lock(&call.approved).clone() {
            return Gate::Proceed(Some(approved));
        }
        let policy = &self.gateway.config().policy.approval;
        if !policy.requires_tool(
            &target.server,
            &target.qualified,
            target.annotations.as_ref(),
        ) {
            return Gate::Proceed(arguments);
        }
        // Boxed: the store's futures are large, and a call needing no approval (the common
        // case) should not carry them.
        Box::pin(self.approval(call, target, arguments)).await
    }

    /// [`Pipeline::approve`] for a call the policy says needs approval.
    async fn approval(
        &self,
        call: &Call<'_>,
        target: &Target,
        arguments: Option<Map<String, Value>>,
    ) -> Gate {
        let policy = &self.gateway.config().policy.approval;
        let tool = &target.qualified;
        let Some(store) = self.gateway.store() else {
            call.record
                .note(|r| r.not_run("approval needed; no database"));
            return Gate::Stop(result::tool_error(format!(
                "'{tool}' needs approval, and approvals need the database, which could not be opened; the tool was not run"
            )));
        };
        if let Asker::InputRequired { retry: Some(retry) } = &call.ask
            && let Ok(Some(pending)) = store.approval(&retry.id).await
            && pending.principal == call.access.principal.id()
            && pending.tool == tool
        {
            return self.settle_retry(call, target, pending, retry).await;
        }
        let pending = match store
            .create_approval(store::NewApproval {
                principal: &call.access.principal.id(),
                server: &target.server,
                tool,
                arguments: &arguments.unwrap_or_default(),
                timeout: policy.timeout,
            })
            .await
        {
            Ok(pending) => pending,
            Err(error) => {
                tracing::error!(%error, tool = %tool, "cannot record an approval");
                call.record
                    .note(|r| r.not_run("approval could not be recorded"));
                return Gate::Stop(result::tool_error(format!(
                    "'{tool}' needs approval, which could not be recorded ({error}); the tool was not run"
                )));
            }
        };
        tracing::info!(
            approval = %pending.id,
            tool = %tool,
            principal = %call.access.principal,
            "tool call waits for approval (mcpgw approvals approve {})",
            pending.id
        );
        self.ask(call, target, store, &pending).await
    }

    /// Asks the person as the client allows, else waits for a decision made out of band.
    async fn ask(
        &self,
        call: &Call<'_>,
        target: &Target,
        store: &store::Store,
        pending: &store::Approval,
    ) -> Gate {
        let why = approval::reason(&self.gateway.config().policy.approval, &target.qualified);
        match &call.ask {
            Asker::InputRequired { .. } => {
                if let Some(input) = approval_input(pending, &why) {
                    return Gate::Ask(input);
                }
            }
            Asker::Elicit { peer } => {
                if let Some((message, schema)) = approval::form(pending, &why) {
                    let asking = peer.create_elicitation_with_timeout(
                        ElicitRequestParams::FormElicitationParams {
                            meta: None,
                            message,
                            requested_schema: schema,
                        },
                        Some(approval::remaining(pending.expires_at)),
                    );
                    let waiting = self.gateway.wait_for_decision(
                        store,
                        &pending.id,
                        pending.expires_at,
                        &call.ct,
                    );
                    tokio::select! {
                        answer = asking => match answer {
                            Ok(answer) => {
                                let answer = approval::read_answer(&answer, &pending.arguments);
                                return self.record_answer(call, target, pending, answer).await;
                            }
                            Err(error) => tracing::warn!(
                                approval = %pending.id,
                                %error,
                                "the client did not take the approval form; waiting for a decision out of band"
                            ),
                        },
                        waited = waiting => return self.after_wait(call, target, pending, waited),
                    }
                }
            }
            Asker::Wait => {}
        }
        let waited = self
            .gateway
            .wait_for_decision(store, &pending.id, pending.expires_at, &call.ct)
            .await;
        self.after_wait(call, target, pending, waited)
    }

    /// The retry of a 2026-07-28 call that asked for approval `pending`.
    async fn settle_retry(
        &self,
        call: &Call<'_>,
        target: &Target,
        pending: store::Approval,
        retry: &ApprovalRetry,
    ) -> Gate {
        if pending.status != store::ApprovalStatus::Pending {
            return outcome(&call.record, &call.approved, target, pending);
        }
        if let Some(answer) = &retry.answer {
            let answer = approval::read_answer(answer, &pending.arguments);
            return self.record_answer(call, target, &pending, answer).await;
        }
        // No readable answer: ask again, for the same approval.
        let why = approval::reason(&self.gateway.config().policy.approval, &target.qualified);
        match approval_input(&pending, &why) {
            Some(input) => Gate::Ask(input),
            None => Gate::Stop(result::tool_error(format!(
                "'{}' needs approval {}; approve it with `mcpgw approvals approve {}` and call again",
                target.qualified, pending.id, pending.id
            ))),
        }
    }

    /// Records the caller's own answer to the approval form, then acts on the decision that
    /// stands (an admin may have decided first).
    async fn record_answer(
        &self,
        call: &Call<'_>,
        target: &Target,
        pending: &store::Approval,
        answer: Answer,
    ) -> Gate {
        let verdict = match answer {
            Answer::Approve(arguments) => store::Verdict::Approve { arguments },
            Answer::Reject(reason) | Answer::Invalid(reason) => store::Verdict::Reject {
                reason: Some(reason),
            },
        };
        let decided = match self
            .gateway
            .decide_approval(&pending.id, verdict, &call.access.principal)
            .await
        {
            Ok(decided) => decided,
            Err(DecisionError::Decide(store::DecideError::AlreadyDecided { .. })) => {
                match self.gateway.store().map(|s| s.approval(&pending.id)) {
                    Some(read) => match read.await {
                        Ok(Some(decided)) => decided,
                        _ => {
                            return Gate::Stop(result::tool_error(format!(
                                "approval {} could not be read back; the tool was not run",
                                pending.id
                            )));
                        }
                    },
                    None => return Gate::Stop(result::tool_error("the database went away")),
                }
            }
            Err(error) => {
                return Gate::Stop(result::tool_error(format!(
                    "{error}; '{}' was not run",
                    target.qualified
                )));
            }
        };
        outcome(&call.record, &call.approved, target, decided)
    }

    fn after_wait(
        &self,
        call: &Call<'_>,
        target: &Target,
        pending: &store::Approval,
        waited: approval::Waited,
    ) -> Gate {
        let timeout = self.gateway.config().policy.approval.timeout;
        after_wait(
            &call.record,
            &call.approved,
            target,
            pending,
            waited,
            timeout,
        )
    }
}

/// What waiting for a decision on `pending` came to.
fn after_wait(
    record: &Record,
    approved: &Mutex<Option<Map<String, Value>>>,
    target: &Target,
    pending: &store::Approval,
    waited: approval::Waited,
    timeout: Duration,
) -> Gate {
    let tool = &target.qualified;
    match waited {
        approval::Waited::Decided(decided) => outcome(record, approved, target, *decided),
        approval::Waited::TimedOut => {
            record.note(|r| {
                r.decided(CallDecision::TimedOut)
                    .not_run("no approval decision in time")
            });
            Gate::Stop(result::tool_error(format!(
                "'{tool}' needs approval and no decision came within {} (approval {} expired), so the tool was not run. Call it again; while it waits, an operator approves it with `mcpgw approvals approve ID` (IDs: `mcpgw approvals list`)",
                store::time::duration_words(timeout),
                pending.id
            )))
        }
        approval::Waited::Cancelled => {
            record.note(|r| r.not_run("cancelled while waiting for approval"));
            Gate::Stop(result::tool_error(format!(
                "the call to '{tool}' was cancelled while waiting for approval {}; the tool was not run",
                pending.id
            )))
        }
    }
}

/// Acts on a decided approval; an approval remembers its arguments in `approved`, so a
/// re-attempt of the same call runs them without asking again.
fn outcome(
    record: &Record,
    approved: &Mutex<Option<Map<String, Value>>>,
    target: &Target,
    decided: store::Approval,
) -> Gate {
    let tool = &target.qualified;
    let by = decided.decided_by.as_deref().unwrap_or("an approver");
    match decided.status {
        store::ApprovalStatus::Approved => {
            record.note(|r| {
                r.decided(CallDecision::Approved {
                    approver: by.to_owned(),
                })
            });
            let arguments = decided.effective_arguments().clone();
            *lock(approved) = Some(arguments.clone());
            Gate::Proceed(Some(arguments))
        }
        store::ApprovalStatus::Rejected => {
            record.note(|r| {
                r.decided(CallDecision::Rejected {
                    approver: decided.decided_by.clone(),
                })
                .not_run("rejected")
            });
            let reason = decided
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            Gate::Stop(result::tool_error(format!(
                "the call to '{tool}' was rejected by {by}{reason}; the tool was not run"
            )))
        }
        store::ApprovalStatus::Expired => {
            record.note(|r| {
                r.decided(CallDecision::TimedOut)
                    .not_run("approval expired")
            });
            Gate::Stop(result::tool_error(format!(
                "approval {} for '{tool}' expired before a decision; the tool was not run. Call it again to ask again",
                decided.id
            )))
        }
        _ => Gate::Stop(result::tool_error(format!(
            "approval {} for '{tool}' was cancelled; the tool was not run",
            decided.id
        ))),
    }
}

/// The `input_required` result asking a 2026-07-28 client to approve `pending`.
fn approval_input(pending: &store::Approval, why: &str) -> Option<InputRequiredResult> {
    let (message, schema) = approval::form(pending, why)?;
    let request = InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        },
    ));
    Some(InputRequiredResult::new(
        Some(BTreeMap::from([(
            approval::APPROVAL_INPUT.to_owned(),
            request,
        )])),
        Some(approval::request_state(&pending.id)),
    ))
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use serde_json::json;
    use store::{ApprovalStatus, CallOutcome};

    use super::*;
    use crate::{audit::AuditRecord, principal::Principal};

    fn target() -> Target {
        Target {
            qualified: "files__delete".into(),
            server: "files".into(),
            upstream_name: "delete".into(),
            annotations: None,
        }
    }

    fn approval(status: ApprovalStatus) -> store::Approval {
        let arguments = json!({"path": "/tmp/a"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        store::Approval {
            id: "k3x9".into(),
            principal: "local".into(),
            server: "files".into(),
            tool: "files__delete".into(),
            arguments,
            created_at: SystemTime::now(),
            expires_at: SystemTime::now(),
            status,
            decided_by: Some("admin".into()),
            decided_at: Some(SystemTime::now()),
            decided_arguments: None,
            reason: Some("not today".into()),
        }
    }

    fn record() -> Record {
        let record = Record::default();
        record.begin(AuditRecord::begin(
            &Principal::Local,
            "files",
            "files__delete",
            None,
        ));
        record
    }

    #[test]
    fn an_approval_runs_the_approvers_arguments_and_remembers_them() {
        let (record, approved) = (record(), Mutex::new(None));
        let mut decided = approval(ApprovalStatus::Approved);
        let replaced = json!({"path": "/tmp/b"}).as_object().cloned();
        decided.decided_arguments = replaced.clone();
        match outcome(&record, &approved, &target(), decided) {
            Gate::Proceed(arguments) => assert_eq!(arguments, replaced),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            *lock(&approved),
            replaced,
            "a re-attempt does not ask again"
        );
        assert_eq!(
            record.peek().map(|r| r.decision),
            Some(CallDecision::Approved {
                approver: "admin".into()
            })
        );
    }

    #[test]
    fn a_rejection_stops_the_call_and_says_who_and_why() {
        let (record, approved) = (record(), Mutex::new(None));
        let Gate::Stop(result) = outcome(
            &record,
            &approved,
            &target(),
            approval(ApprovalStatus::Rejected),
        ) else {
            panic!("stopped");
        };
        let text = format!("{:?}", result.content);
        assert!(text.contains("rejected by admin (not today)"), "{text}");
        let audited = record.peek().expect("record");
        assert!(matches!(audited.decision, CallDecision::Rejected { .. }));
        assert_eq!(audited.outcome, CallOutcome::NotRun);
        assert!(lock(&approved).is_none());
    }

    #[test]
    fn no_decision_in_time_and_cancellation_stop_the_call() {
        let (record, approved) = (record(), Mutex::new(None));
        let pending = approval(ApprovalStatus::Pending);
        let timeout = Duration::from_secs(120);
        let Gate::Stop(result) = after_wait(
            &record,
            &approved,
            &target(),
            &pending,
            approval::Waited::TimedOut,
            timeout,
        ) else {
            panic!("stopped");
        };
        let text = format!("{:?}", result.content);
        assert!(text.contains("approval k3x9 expired"), "{text}");
        assert_eq!(
            record.peek().map(|r| r.decision),
            Some(CallDecision::TimedOut)
        );
        let cancelled = after_wait(
            &record,
            &approved,
            &target(),
            &pending,
            approval::Waited::Cancelled,
            timeout,
        );
        assert!(matches!(cancelled, Gate::Stop(_)));
    }

    #[test]
    fn a_2026_client_is_asked_with_a_form_it_answers_on_retry() {
        let pending = approval(ApprovalStatus::Pending);
        let input = approval_input(&pending, "a rule requires approval").expect("a form");
        assert_eq!(
            input.request_state.as_deref(),
            Some(approval::request_state("k3x9").as_str())
        );
        assert!(
            input
                .input_requests
                .is_some_and(|r| r.contains_key(approval::APPROVAL_INPUT))
        );
    }
}
