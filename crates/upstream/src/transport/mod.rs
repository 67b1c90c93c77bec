//! The transports under an upstream session, and the HTTP client they share.
//!
//! - [`stdio`]: a child process in its own process group, stderr into the log.
//! - [`express`]: plain `tools/call`s on a stdio session, written and answered past rmcp's
//!   service loop.
//! - [`streamable_http`]: the HTTP client under rmcp's Streamable HTTP transport, which
//!   recognises a restarted server's session rejection and makes every 401 look the same.
//! - [`sse`]: the legacy HTTP+SSE client rmcp lacks.
//! - [`ordered`]: a wrapper over any of them that counts the notifications a call must see
//!   before its result.
//!
//! [`http_client`] is the one HTTP client of a server's connections, for its MCP requests
//! (Streamable HTTP, SSE, and those of its OAuth client). [`trace_headers`] are the headers
//! both HTTP transports add to a request that carries a trace context.

use std::{sync::Arc, time::Duration};

use http::{HeaderName, HeaderValue};
use netguard::Policy;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcMessage};

pub(crate) mod express;
pub(crate) mod ordered;
pub mod sse;
pub(crate) mod stdio;
pub(crate) mod streamable_http;

/// The HTTP client of one server's connections (Streamable HTTP, SSE, and the MCP requests of
/// its OAuth client): guarded by `policy`, redirects judged by the guard and then kept on the
/// configured origin. There is no fallback to an unguarded client when building fails.
pub(crate) fn http_client(policy: Arc<Policy>) -> Result<reqwest::Client, reqwest::Error> {
    // Pooled connections idle out quickly: upstreams restart and we must not reuse dead sockets.
    netguard::guarded_client_builder(policy.clone())
        .pool_idle_timeout(Duration::from_secs(30))
        .redirect(netguard::redirect_policy(policy, same_origin_redirects))
        .build()
}

/// The `traceparent` and `tracestate` headers of a request whose `params._meta` carries a W3C
/// Trace Context ([`crate::TraceContext`] put it there): the same values, for HTTP servers that
/// read the headers. Empty for anything else; a value that is no valid header is left out.
pub(crate) fn trace_headers(message: &ClientJsonRpcMessage) -> Vec<(HeaderName, HeaderValue)> {
    let JsonRpcMessage::Request(request) = message else {
        return Vec::new();
    };
    let request = &request.request;
    // A request read from JSON keeps its `_meta` in its extensions; one built here keeps it in
    // its params (where `TraceContext::write` puts it) until it is serialised.
    let in_params = match request {
        ClientRequest::CallToolRequest(call) => call.params.meta.as_ref(),
        ClientRequest::ReadResourceRequest(read) => read.params.meta.as_ref(),
        ClientRequest::GetPromptRequest(get) => get.params.meta.as_ref(),
        ClientRequest::CompleteRequest(complete) => complete.params.meta.as_ref(),
        _ => None,
    };
    let Some(meta) = [in_params, Some(request.get_meta())]
        .into_iter()
        .flatten()
        .find(|meta| meta.get_traceparent().is_some())
    else {
        return Vec::new();
    };
    let Some(traceparent) = meta.get_traceparent() else {
        return Vec::new();
    };
    let fields = [
        (HeaderName::from_static("traceparent"), Some(traceparent)),
        (HeaderName::from_static("tracestate"), meta.get_tracestate()),
    ];
    fields
        .into_iter()
        .filter_map(|(name, value)| Some((name, HeaderValue::from_str(value?).ok()?)))
        .collect()
}

/// reqwest's default limit of 10 redirects, but only within the origin first asked: the
/// request carries credentials, custom headers included, that belong to that origin alone. A
/// redirect elsewhere is not followed; the caller sees the 3xx.
fn same_origin_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let same_origin = attempt
        .previous()
        .first()
        .is_some_and(|first| first.origin() == attempt.url().origin());
    if !same_origin {
        tracing::warn!(
            status = %attempt.status(),
            to = %attempt.url().origin().ascii_serialization(),
            "not following a redirect away from the configured origin"
        );
        attempt.stop()
    } else if attempt.previous().len() > 10 {
        attempt.error("too many redirects")
    } else {
        attempt.follow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_of(message: &str) -> Vec<(String, String)> {
        let message: ClientJsonRpcMessage = serde_json::from_str(message).expect("a message");
        trace_headers(&message)
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("?").to_owned()))
            .collect()
    }

    #[test]
    fn a_requests_trace_context_becomes_its_headers() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","_meta":{{"traceparent":"{parent}","tracestate":"a=1"}}}}}}"#
        );
        assert_eq!(
            headers_of(&call),
            [
                ("traceparent".to_owned(), parent.to_owned()),
                ("tracestate".to_owned(), "a=1".to_owned())
            ]
        );
        // As the gateway builds it: the context in the params.
        let mut params = rmcp::model::CallToolRequestParams::new("t");
        let context = crate::TraceContext {
            traceparent: parent.to_owned(),
            tracestate: None,
        };
        context.write(params.meta.get_or_insert_default());
        let built = ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params)),
            rmcp::model::RequestId::Number(1),
        );
        let headers: Vec<_> = trace_headers(&built)
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("?").to_owned()))
            .collect();
        assert_eq!(headers, [("traceparent".to_owned(), parent.to_owned())]);
        let no_state = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","_meta":{{"traceparent":"{parent}"}}}}}}"#
        );
        assert_eq!(headers_of(&no_state).len(), 1);
    }

    #[test]
    fn a_resource_read_or_prompt_built_here_sends_its_context_too() {
        let context = crate::TraceContext {
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
            tracestate: Some("a=1".to_owned()),
        };
        let mut read = rmcp::model::ReadResourceRequestParams::new("demo://x");
        read.meta = Some(context.meta());
        let mut prompt = rmcp::model::GetPromptRequestParams::new("p");
        prompt.meta = Some(context.meta());
        for request in [
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(read)),
            ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(prompt)),
        ] {
            let message = ClientJsonRpcMessage::request(request, rmcp::model::RequestId::Number(2));
            let names: Vec<String> = trace_headers(&message)
                .into_iter()
                .map(|(name, _)| name.to_string())
                .collect();
            assert_eq!(names, ["traceparent", "tracestate"]);
        }
    }

    #[test]
    fn messages_without_a_trace_context_get_no_headers() {
        assert!(
            headers_of(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#)
                .is_empty()
        );
        assert!(headers_of(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_empty());
        // Not a header value: left out rather than sent broken.
        assert!(
            headers_of(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"traceparent":"a\u0001b"}}}"#
            )
            .is_empty()
        );
    }
}
