//! Every JSON-RPC error the MCP edge sends, in one table. Anything that went wrong while
//! running a tool is a tool result with `isError: true` instead (the model can read and act
//! on it; see `mcp::result`); a JSON-RPC error is for a request that cannot be served at all.
//!
//! | code     | when |
//! | -------- | ---- |
//! | `-32602` | unknown tool, prompt, cursor or completion reference; arguments of `call_tool` that are not an object; a resource not found on 2026-07-28 |
//! | `-32002` | a resource not found on a legacy revision |
//! | `-32601` | `logging/setLevel` on 2026-07-28; an upstream's request the calling client cannot answer |
//! | `-32603` | the client went away or cancelled; an upstream failure outside `tools/call` |
//! | upstream's own | an upstream's JSON-RPC error, to a client that called the tool (or resource, prompt) directly; codes the spec reserves for other meanings are mapped to `-32603` |
//!
//! Transport-level answers (unparseable body, body too large, wrong content type) are made
//! by the HTTP edge (`http::serve`), with the JSON-RPC error object these use.

use rmcp::{ErrorData as McpError, ServiceError, model::ErrorCode};
use upstream::UpstreamError;

/// A `tools/call` of a name this caller cannot call: it does not exist, or is outside the
/// caller's profile (the two read the same). `message` names the closest tools.
pub(crate) fn unknown_tool(message: String) -> McpError {
    McpError::invalid_params(message, None)
}

/// `call_tool`'s `arguments` is neither an object nor null.
pub(crate) fn call_tool_arguments() -> McpError {
    McpError::invalid_params("call_tool: 'arguments' must be a JSON object", None)
}

/// A request whose parameters name nothing this gateway serves (a prompt, a cursor, a kind of
/// completion reference, a server no longer configured).
pub(crate) fn invalid_params(message: impl Into<String>) -> McpError {
    McpError::invalid_params(message.into(), None)
}

/// Resource `uri` is not served: `-32002` on legacy revisions, `-32602` on 2026-07-28.
pub(crate) fn resource_not_found(uri: &str, modern: bool) -> McpError {
    let message = format!("resource not found: {uri}");
    if modern {
        McpError::invalid_params(message, None)
    } else {
        McpError::resource_not_found(message, None)
    }
}

/// A method this revision of the protocol does not have, or a request the client did not
/// declare it could answer.
pub(crate) fn method_not_found(message: impl Into<String>) -> McpError {
    McpError::new(ErrorCode::METHOD_NOT_FOUND, message.into(), None)
}

/// The client cancelled, or stopped answering, while the gateway waited for it.
pub(crate) fn cancelled(what: &str) -> McpError {
    McpError::internal_error(format!("{what} was cancelled by the client"), None)
}

/// The client failed to answer a request the gateway relayed to it.
pub(crate) fn client_failed(error: ServiceError) -> McpError {
    match error {
        ServiceError::McpError(error) => error,
        other => McpError::internal_error(format!("the client did not answer: {other}"), None),
    }
}

/// The client's answer could not be read as the type it had to be.
pub(crate) fn unreadable(error: serde_json::Error) -> McpError {
    McpError::internal_error(format!("unreadable answer: {error}"), None)
}

/// An upstream's JSON-RPC error, unchanged, for a client that called the tool by its own
/// name (as it would get it without the gateway).
pub(crate) fn upstream_rpc(
    code: i32,
    message: String,
    data: Option<serde_json::Value>,
) -> McpError {
    McpError::new(ErrorCode(code), message, data)
}

/// `error` from `server` while running `what` (a resource read, prompt, completion), as the
/// caller gets it: an upstream's JSON-RPC error keeps its code and data when the code means
/// the same here, prefixed with the server; any other failure is `-32603` naming the server.
pub(crate) fn from_upstream(
    server: &str,
    what: &str,
    error: UpstreamError,
    modern: bool,
) -> McpError {
    tracing::info!(server, request = what, %error, "upstream request failed");
    match error {
        UpstreamError::Rpc {
            code,
            message,
            data,
            ..
        } => {
            let code = match code {
                -32002 if modern => ErrorCode::INVALID_PARAMS.0,
                -32602 | -32002 | -32603 | -32019..=-32000 => code,
                code if !(-32768..=-32000).contains(&code) => code,
                _ => ErrorCode::INTERNAL_ERROR.0,
            };
            McpError::new(
                ErrorCode(code),
                format!("server '{server}': {message}"),
                data,
            )
        }
        other => {
            let message = other.to_string();
            // Most failures name their server already; a spawn failure names the command.
            match message.contains(&format!("'{server}'")) {
                true => McpError::internal_error(message, None),
                false => McpError::internal_error(format!("server '{server}': {message}"), None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc(code: i32) -> UpstreamError {
        UpstreamError::Rpc {
            server: "files".into(),
            code,
            message: "nope".into(),
            data: None,
        }
    }

    #[test]
    fn upstream_codes_keep_their_meaning_or_become_internal_errors() {
        let code = |code, modern| {
            from_upstream("files", "resources/read", rpc(code), modern)
                .code
                .0
        };
        assert_eq!(code(-32602, false), -32602);
        assert_eq!(code(-32002, false), -32002);
        assert_eq!(code(-32002, true), -32602, "2026-07-28 has no -32002");
        assert_eq!(
            code(-32601, false),
            -32603,
            "a reserved code with another meaning here"
        );
        assert_eq!(code(-32700, false), -32603);
        assert_eq!(code(42, false), 42, "application codes pass");
        let message = from_upstream("files", "x", rpc(-32602), false).message;
        assert_eq!(message, "server 'files': nope");
    }

    #[test]
    fn other_failures_name_the_server_once() {
        let timeout = UpstreamError::Timeout {
            server: "files".into(),
            after: std::time::Duration::from_secs(3),
        };
        let error = from_upstream("files", "prompts/get", timeout, false);
        assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
        assert_eq!(
            error.message.matches("'files'").count(),
            1,
            "{}",
            error.message
        );
    }

    #[test]
    fn resources_not_found_follow_the_revision() {
        assert_eq!(resource_not_found("a://b", false).code.0, -32002);
        assert_eq!(resource_not_found("a://b", true).code.0, -32602);
    }
}
