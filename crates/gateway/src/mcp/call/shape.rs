//! The shape step: what the relay brought back, as the client is to receive it, noted in the
//! call's audit record.
//!
//! - a result is checked and marked as the upstream's untrusted output (`result::from_upstream`);
//! - an upstream's JSON-RPC error reaches a client that called the tool by its own name as that
//!   error (as it would without the gateway), and reaches `call_tool` as a tool error;
//! - a 401 from a server configured for OAuth is a sign-in to hand out;
//! - any other failure is a tool error saying what went wrong, never the upstream's raw text
//!   in the audit log.

use rmcp::{
    ErrorData as McpError,
    model::{CallToolResult, InputRequiredResult},
};
use upstream::UpstreamError;

use super::{Record, Via};
use crate::mcp::{errors, relay::Relayed, result};

/// A relayed call, shaped.
#[derive(Debug)]
pub(crate) enum Shaped {
    Done(CallToolResult),
    /// An upstream's JSON-RPC error, for a client that called the tool directly.
    Failed(McpError),
    /// The client must answer and retry.
    Input(InputRequiredResult),
    /// The server is configured for OAuth and has no usable token.
    SignIn(UpstreamError),
}

/// Shapes what calling `tool` on `server` (configured for OAuth when `oauth`) brought back.
pub(crate) fn shape(
    relayed: Relayed,
    server: &str,
    tool: &str,
    oauth: bool,
    via: Via,
    limits: &config::LimitsConfig,
    record: &Record,
) -> Shaped {
    let error = match relayed {
        Relayed::Done(Ok(response)) => {
            let result = result::from_upstream(server, response, limits);
            record.note(|r| r.answered(&result));
            return Shaped::Done(result);
        }
        Relayed::Input(input) => return Shaped::Input(input),
        Relayed::Result(result) => {
            record.note(|r| r.answered(&result));
            return Shaped::Done(result);
        }
        Relayed::Done(Err(error)) => error,
    };
    if oauth && matches!(error, UpstreamError::OAuthRequired { .. }) {
        tracing::info!(%server, %tool, "tool call needs a sign-in");
        return Shaped::SignIn(error);
    }
    tracing::warn!(%server, %tool, %error, "tool call failed");
    record.note(|r| r.upstream_failed(&error));
    match error {
        UpstreamError::Rpc {
            code,
            message,
            data,
            ..
        } if via == Via::Direct => Shaped::Failed(errors::upstream_rpc(code, message, data)),
        error => Shaped::Done(result::upstream_failure(&error)),
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolResponse, ContentBlock};
    use store::CallOutcome;

    use super::*;
    use crate::{audit::AuditRecord, principal::Principal};

    fn record() -> Record {
        let record = Record::default();
        record.begin(AuditRecord::begin(
            &Principal::Local,
            "everything",
            "everything__echo",
            None,
        ));
        record
    }

    fn rpc_error() -> Relayed {
        Relayed::Done(Err(UpstreamError::Rpc {
            server: "everything".into(),
            code: -32602,
            message: "no such resource".into(),
            data: None,
        }))
    }

    fn run(relayed: Relayed, oauth: bool, via: Via, record: &Record) -> Shaped {
        let limits = config::LimitsConfig::default();
        shape(relayed, "everything", "echo", oauth, via, &limits, record)
    }

    #[test]
    fn a_result_is_marked_untrusted_and_recorded_as_answered() {
        let record = record();
        let done = Relayed::Done(Ok(CallToolResponse::Complete(CallToolResult::success(
            vec![ContentBlock::text("Echo: hi")],
        ))));
        let Shaped::Done(result) = run(done, false, Via::Direct, &record) else {
            panic!("a result");
        };
        let text = format!("{:?}", result.content);
        assert!(
            text.contains("untrusted output of MCP server 'everything'"),
            "{text}"
        );
        assert_eq!(record.peek().map(|r| r.outcome), Some(CallOutcome::Ok));
    }

    #[test]
    fn an_upstream_json_rpc_error_passes_through_only_to_a_direct_caller() {
        let record = record();
        match run(rpc_error(), false, Via::Direct, &record) {
            Shaped::Failed(error) => {
                assert_eq!(error.code.0, -32602);
                assert_eq!(error.message, "no such resource");
            }
            other => panic!("{other:?}"),
        }
        match run(rpc_error(), false, Via::CallTool, &record) {
            Shaped::Done(result) => assert_eq!(result.is_error, Some(true)),
            other => panic!("{other:?}"),
        }
        let audited = record.peek().expect("a record");
        assert_eq!(audited.outcome, CallOutcome::UpstreamError);
        assert!(
            !audited
                .error
                .unwrap_or_default()
                .contains("no such resource"),
            "the upstream's words stay out of the audit log"
        );
    }

    #[test]
    fn a_401_is_a_sign_in_only_for_a_server_configured_for_oauth() {
        let needs = || {
            Relayed::Done(Err(UpstreamError::OAuthRequired {
                server: "everything".into(),
            }))
        };
        let record = record();
        assert!(matches!(
            run(needs(), true, Via::Direct, &record),
            Shaped::SignIn(_)
        ));
        assert!(matches!(
            run(needs(), false, Via::Direct, &record),
            Shaped::Done(result) if result.is_error == Some(true)
        ));
    }
}
