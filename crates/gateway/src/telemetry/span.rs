//! The spans a traced gateway makes, and the W3C Trace Context they take from a client and
//! give to an upstream.
//!
//! - [`RequestSpan`]: one per client request (kind SERVER), named for the MCP method. Its parent
//!   is the client's trace: the `traceparent` (and `tracestate`) header of the HTTP request if
//!   it holds a valid one, else `params._meta.traceparent` (SEP-414); else a new trace begins.
//!   It travels with the request in rmcp's request extensions, so the steps serving the request
//!   add to it (`mcpgw.server`, `mcpgw.tool`, `mcpgw.decision`) and hang children off it.
//! - [`UpstreamSpan`]: one per request to an upstream (kind CLIENT: `tools/call`,
//!   `resources/read`, `prompts/get`, `completion/complete`), a child of the request's.
//!   Its own context is what the upstream receives ([`UpstreamSpan::trace_context`]), so the
//!   upstream's spans, if it makes any, are its children.
//! - [`SearchSpan`]: one per search (kind INTERNAL): the strategy that answered, how many tools
//!   it found, whether it had to fall back.
//!
//! What never becomes an attribute: arguments, results, search queries, resource URIs, header
//! values, session ids, error texts an upstream wrote, principals other than a client key's
//! name. Names a client sends are cut at [`MAX_NAME`] characters.

use std::{borrow::Cow, collections::HashMap, sync::Arc};

use opentelemetry::{
    Context, KeyValue,
    propagation::{Extractor, TextMapPropagator as _},
    trace::{SpanKind, Status, TraceContextExt as _, Tracer as _},
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolResponse, Extensions, GetPromptResponse, MetaObject, ReadResourceResponse},
    service::RequestContext,
};
use upstream::UpstreamError;

use super::Telemetry;
use crate::{audit::CallDecision, principal::Principal};

/// Longest attribute value taken from a request (a tool or prompt name, a method): MCP's names
/// are at most 128 characters, and nothing a client sends should make a span large.
const MAX_NAME: usize = 128;

/// `mcpgw.outcome` of a request or an upstream call.
const OUTCOME: &str = "mcpgw.outcome";

/// The span of one client request, shared by the steps serving it. Cheap to clone.
#[derive(Clone)]
pub(crate) struct RequestSpan {
    cx: Context,
    telemetry: Arc<Telemetry>,
}

impl RequestSpan {
    /// Starts the span of the request `called` names, its parent the client's trace context.
    pub(crate) fn start(
        telemetry: &Arc<Telemetry>,
        called: Called<'_>,
        context: &RequestContext<RoleServer>,
    ) -> RequestSpan {
        let parent = client_context(&context.extensions, &context.meta);
        Self::begin(telemetry, &called, &parent, context_attributes(context))
    }

    /// The span of `called` under `parent`, with `more` attributes.
    fn begin(
        telemetry: &Arc<Telemetry>,
        called: &Called<'_>,
        parent: &Context,
        more: Vec<KeyValue>,
    ) -> RequestSpan {
        let mut attributes = called.attributes();
        attributes.extend(more);
        let tracer = telemetry.tracer();
        let span = tracer
            .span_builder(called.span_name())
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(tracer, parent);
        RequestSpan {
            cx: parent.with_span(span),
            telemetry: telemetry.clone(),
        }
    }

    /// The span of the request whose extensions these are, if it is traced.
    pub(crate) fn of(extensions: &Extensions) -> Option<RequestSpan> {
        extensions.get::<RequestSpan>().cloned()
    }

    /// The upstream server the request went to.
    pub(crate) fn server(&self, server: &str) {
        self.set(KeyValue::new("mcpgw.server", short(server)));
    }

    /// The catalog tool a `tools/call` ran (a `call_tool` names it in its arguments).
    pub(crate) fn tool(&self, qualified: &str) {
        self.set(KeyValue::new("mcpgw.tool", short(qualified)));
    }

    /// What the gateway decided about a catalog tool call (the audit record's decision).
    pub(crate) fn decision(&self, decision: &CallDecision) {
        self.set(KeyValue::new("mcpgw.decision", decision.as_str()));
    }

    fn set(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    /// Ends the span with what the client was answered.
    pub(crate) fn finish(&self, result: Result<Outcome, &McpError>) {
        let span = self.cx.span();
        match result {
            Ok(outcome) => outcome.record(&span),
            Err(error) => {
                let code = error.code.0.to_string();
                span.set_attribute(KeyValue::new(OUTCOME, "error"));
                span.set_attribute(KeyValue::new("rpc.response.status_code", code.clone()));
                // The code, not the message: an upstream's JSON-RPC error passes through
                // with its own words, which are not the gateway's to export.
                span.set_status(Status::error(format!("JSON-RPC error {code}")));
                span.set_attribute(KeyValue::new("error.type", code));
            }
        }
        span.end();
    }

    /// Ends the span of a request that was never answered (its client went away, or the
    /// gateway stopped first).
    pub(crate) fn abandoned(&self) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(OUTCOME, "abandoned"));
        span.end();
    }

    /// Starts the span of one upstream request, `called` (its upstream names), on `server`
    /// reached over `transport` (`stdio`, `http`, `sse`).
    pub(crate) fn upstream(
        &self,
        called: &Called<'_>,
        server: &str,
        transport: &'static str,
    ) -> UpstreamSpan {
        let name = match called.target {
            Some((_, target)) => format!("{} {}", called.method, short(target)),
            None => called.method.to_owned(),
        };
        let mut attributes = called.attributes();
        attributes.extend([
            KeyValue::new("mcpgw.server", short(server)),
            KeyValue::new("mcpgw.transport", transport),
            KeyValue::new("network.transport", network_transport(transport)),
        ]);
        let tracer = self.telemetry.tracer();
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(tracer, &self.cx);
        UpstreamSpan {
            cx: self.cx.with_span(span),
        }
    }

    /// Starts the span of one search.
    pub(crate) fn search(&self) -> SearchSpan {
        let tracer = self.telemetry.tracer();
        let span = tracer
            .span_builder("search")
            .with_kind(SpanKind::Internal)
            .start_with_context(tracer, &self.cx);
        SearchSpan {
            cx: self.cx.with_span(span),
        }
    }
}

/// The span of one upstream call; it ends when finished or dropped.
pub(crate) struct UpstreamSpan {
    cx: Context,
}

impl UpstreamSpan {
    /// This span's context as the upstream request carries it.
    pub(crate) fn trace_context(&self) -> Option<upstream::TraceContext> {
        let mut fields = HashMap::new();
        TraceContextPropagator::new().inject_context(&self.cx, &mut fields);
        Some(upstream::TraceContext {
            traceparent: fields.remove("traceparent")?,
            tracestate: fields
                .remove("tracestate")
                .filter(|state| !state.is_empty()),
        })
    }

    /// Ends the span with the upstream's answer, or why there is none.
    pub(crate) fn finish(&self, result: Result<Outcome, &UpstreamError>) {
        let span = self.cx.span();
        match result {
            Ok(outcome) => outcome.record(&span),
            Err(error) => {
                span.set_attribute(KeyValue::new(OUTCOME, "upstream_error"));
                span.set_attribute(KeyValue::new("error.type", error_type(error.cause())));
                // The gateway's own words for it (as the audit log keeps), never the
                // upstream's text.
                span.set_status(Status::error(crate::audit::upstream_error_summary(error)));
            }
        }
        span.end();
    }
}

/// The span of one search; it ends when finished or dropped.
pub(crate) struct SearchSpan {
    cx: Context,
}

impl SearchSpan {
    /// Ends the span: `strategy` answered with `results` tools, `degraded` when it fell back
    /// from the one asked for.
    pub(crate) fn finish(&self, strategy: &'static str, results: usize, degraded: bool) {
        let span = self.cx.span();
        span.set_attributes([
            KeyValue::new("mcpgw.search.strategy", strategy),
            KeyValue::new("mcpgw.search.results", results as i64),
            KeyValue::new("mcpgw.search.degraded", degraded),
        ]);
        span.end();
    }
}

/// The client's trace context: a valid `traceparent` header of the HTTP request, else a valid
/// `_meta.traceparent`; an empty context (a new trace) when neither is.
fn client_context(extensions: &Extensions, meta: &MetaObject) -> Context {
    let propagator = TraceContextPropagator::new();
    let valid = |cx: Context| cx.span().span_context().is_valid().then_some(cx);
    let from_header = extensions.get::<http::request::Parts>().and_then(|parts| {
        valid(propagator.extract_with_context(&Context::new(), &Headers(&parts.headers)))
    });
    from_header
        .or_else(|| valid(propagator.extract_with_context(&Context::new(), &Meta(meta))))
        .unwrap_or_default()
}

/// What a request asks for, as its span names it.
pub(crate) struct Called<'a> {
    /// The MCP method; a client's own text for a method no revision defines.
    method: &'a str,
    known: bool,
    /// `gen_ai.tool.name` or `gen_ai.prompt.name`, and the name.
    target: Option<(&'static str, &'a str)>,
}

impl<'a> Called<'a> {
    /// A request of a method MCP defines.
    pub(crate) fn method(method: &'static str) -> Called<'a> {
        Called {
            method,
            known: true,
            target: None,
        }
    }

    /// A `tools/call` of `tool`, as the client named it.
    pub(crate) fn tool(method: &'static str, tool: &'a str) -> Called<'a> {
        Called {
            target: Some(("gen_ai.tool.name", tool)),
            ..Called::method(method)
        }
    }

    /// A `prompts/get` of `prompt`.
    pub(crate) fn prompt(method: &'static str, prompt: &'a str) -> Called<'a> {
        Called {
            target: Some(("gen_ai.prompt.name", prompt)),
            ..Called::method(method)
        }
    }

    /// A method no revision defines, as the client wrote it.
    pub(crate) fn custom(method: &'a str) -> Called<'a> {
        Called {
            method,
            known: false,
            target: None,
        }
    }

    /// The method, which names the span; a method the client made up is not a span name.
    fn span_name(&self) -> Cow<'static, str> {
        match self.known {
            true => self.method.to_owned().into(),
            false => "custom method".into(),
        }
    }

    /// `mcp.method.name`, and the tool or prompt named.
    fn attributes(&self) -> Vec<KeyValue> {
        let mut attributes = vec![KeyValue::new("mcp.method.name", short(self.method))];
        if self.method == "tools/call" {
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        if let Some((key, name)) = self.target {
            attributes.push(KeyValue::new(key, short(name)));
        }
        attributes
    }
}

/// What a request was answered, as far as its span says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// A tool result with `isError: true`.
    ToolError,
    /// An `input_required` result: the client is to answer and retry.
    InputRequired,
}

impl Outcome {
    /// Says on `span` what the request (or the upstream call) was answered.
    fn record(self, span: &opentelemetry::trace::SpanRef<'_>) {
        match self {
            Outcome::ToolError => {
                span.set_attribute(KeyValue::new(OUTCOME, "tool_error"));
                span.set_attribute(KeyValue::new("error.type", "tool_error"));
                span.set_status(Status::error("the tool call ended with isError"));
            }
            Outcome::InputRequired => {
                span.set_attribute(KeyValue::new(OUTCOME, "input_required"));
            }
            Outcome::Ok => span.set_attribute(KeyValue::new(OUTCOME, "ok")),
        }
    }

    /// What a `tools/call` was answered.
    pub(crate) fn of_call(response: &CallToolResponse) -> Outcome {
        match response {
            CallToolResponse::Complete(result) if result.is_error == Some(true) => {
                Outcome::ToolError
            }
            CallToolResponse::InputRequired(_) => Outcome::InputRequired,
            _ => Outcome::Ok,
        }
    }

    /// What a `resources/read` was answered.
    pub(crate) fn of_read(response: &ReadResourceResponse) -> Outcome {
        match response {
            ReadResourceResponse::InputRequired(_) => Outcome::InputRequired,
            _ => Outcome::Ok,
        }
    }

    /// What a `prompts/get` was answered.
    pub(crate) fn of_prompt(response: &GetPromptResponse) -> Outcome {
        match response {
            GetPromptResponse::InputRequired(_) => Outcome::InputRequired,
            _ => Outcome::Ok,
        }
    }
}

/// The request id, protocol revision, transport and (for a client key) the client's name.
fn context_attributes(context: &RequestContext<RoleServer>) -> Vec<KeyValue> {
    let over_http = context.extensions.get::<http::request::Parts>().is_some();
    let mut attributes = vec![
        KeyValue::new("jsonrpc.request.id", short(&context.id.to_string())),
        KeyValue::new("network.transport", if over_http { "tcp" } else { "pipe" }),
    ];
    if let Some(version) = context.protocol_version() {
        attributes.push(KeyValue::new("mcp.protocol.version", version.to_string()));
    }
    if let Principal::Client(name) = Principal::of(&context.extensions) {
        attributes.push(KeyValue::new("mcpgw.client", name));
    }
    attributes
}

/// `network.transport` of an upstream transport: a pipe to a child, else TCP.
fn network_transport(transport: &str) -> &'static str {
    match transport {
        "stdio" => "pipe",
        _ => "tcp",
    }
}

/// `error.type` of a failed upstream call: the JSON-RPC code the upstream answered, else the
/// kind of failure.
fn error_type(error: &UpstreamError) -> Cow<'static, str> {
    let kind = match error {
        UpstreamError::Rpc { code, .. } => return code.to_string().into(),
        UpstreamError::Timeout { .. } => "timeout",
        UpstreamError::Cancelled { .. } => "cancelled",
        UpstreamError::Closed { .. } | UpstreamError::Unresponsive { .. } => "connection_lost",
        UpstreamError::Connect { .. } | UpstreamError::Spawn { .. } => "connect",
        UpstreamError::Refused { .. } => "network_policy",
        UpstreamError::ResponseTooLarge { .. } => "response_too_large",
        UpstreamError::Protocol { .. } => "protocol",
        UpstreamError::CredentialsRejected { .. }
        | UpstreamError::CredentialsMissing { .. }
        | UpstreamError::OAuthRequired { .. }
        | UpstreamError::OAuthRefresh { .. }
        | UpstreamError::OAuthUnavailable { .. } => "unauthorized",
        _ => "upstream_error",
    };
    kind.into()
}

/// `text` cut to [`MAX_NAME`] characters.
fn short(text: &str) -> String {
    match text.char_indices().nth(MAX_NAME) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// An HTTP request's headers as a propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// A request's `_meta` as a propagator reads it (SEP-414: unprefixed `traceparent`,
/// `tracestate`).
struct Meta<'a>(&'a MetaObject);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use opentelemetry::trace::{Status, TraceId};
    use opentelemetry_sdk::{
        error::OTelSdkResult,
        trace::{SpanData, SpanExporter},
    };

    use super::*;

    /// Every span ended, as the exporter received it.
    #[derive(Clone, Debug, Default)]
    struct Collected(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Collected {
        fn export(
            &self,
            batch: Vec<SpanData>,
        ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
            crate::sync::lock(&self.0).extend(batch);
            std::future::ready(Ok(()))
        }
    }

    impl Collected {
        fn named(&self, name: &str) -> SpanData {
            crate::sync::lock(&self.0)
                .iter()
                .find(|span| span.name == name)
                .cloned()
                .unwrap_or_else(|| panic!("no span {name}"))
        }
    }

    fn attribute(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const OTHER: &str = "0af7651916cd43dd8448eb211c80319c";

    fn parent(trace: &str, span: &str) -> String {
        format!("00-{trace}-{span}-01")
    }

    /// The trace id `client_context` picks for these headers and `_meta`, if any.
    fn picked(headers: &[(&str, &str)], meta: &[(&str, &str)]) -> Option<String> {
        let mut extensions = Extensions::new();
        if !headers.is_empty() {
            let mut request = http::Request::builder();
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let (parts, ()) = request.body(()).expect("request").into_parts();
            extensions.insert(parts);
        }
        let mut object = MetaObject::new();
        for (key, value) in meta {
            object.insert((*key).to_owned(), (*value).into());
        }
        let cx = client_context(&extensions, &object);
        let span = cx.span();
        let found = span.span_context();
        found.is_valid().then(|| found.trace_id().to_string())
    }

    #[test]
    fn the_header_is_the_parent_else_meta_else_a_new_trace() {
        let header = parent(TRACE, "00f067aa0ba902b7");
        let meta = parent(OTHER, "b7ad6b7169203331");
        assert_eq!(
            picked(&[("traceparent", &header)], &[("traceparent", &meta)]).as_deref(),
            Some(TRACE),
            "the header wins"
        );
        assert_eq!(
            picked(&[], &[("traceparent", &meta)]).as_deref(),
            Some(OTHER)
        );
        assert_eq!(
            picked(
                &[("traceparent", "00-nonsense-01")],
                &[("traceparent", &meta)]
            )
            .as_deref(),
            Some(OTHER),
            "an unreadable header does not hide a good `_meta`"
        );
        assert_eq!(picked(&[("x-other", "1")], &[]), None);
        let zeros = parent("00000000000000000000000000000000", "00f067aa0ba902b7");
        assert_eq!(picked(&[], &[("traceparent", &zeros)]), None);
    }

    fn traced() -> (Arc<Telemetry>, Collected) {
        let collected = Collected::default();
        (Telemetry::with_exporter(collected.clone()), collected)
    }

    fn remote(traceparent: &str, tracestate: &str) -> Context {
        let mut fields = HashMap::new();
        fields.insert("traceparent".to_owned(), traceparent.to_owned());
        fields.insert("tracestate".to_owned(), tracestate.to_owned());
        TraceContextPropagator::new().extract_with_context(&Context::new(), &fields)
    }

    #[test]
    fn an_upstream_call_is_a_child_whose_own_context_goes_upstream() {
        let (telemetry, collected) = traced();
        let client = remote(&parent(TRACE, "00f067aa0ba902b7"), "vendor=x");
        let called = Called::tool("tools/call", "call_tool");
        let request = RequestSpan::begin(&telemetry, &called, &client, Vec::new());
        request.server("everything");
        request.tool("everything__echo");
        let upstream = request.upstream(&Called::tool("tools/call", "echo"), "everything", "stdio");
        let sent = upstream.trace_context().expect("a context to send");
        upstream.finish(Ok(Outcome::of_call(&CallToolResponse::Complete(
            Default::default(),
        ))));
        request.finish(Ok(Outcome::Ok));

        let request = collected.named("tools/call");
        let call = collected.named("tools/call echo");
        assert_eq!(
            request.span_context.trace_id(),
            TraceId::from_hex(TRACE).expect("id")
        );
        assert_eq!(request.parent_span_id.to_string(), "00f067aa0ba902b7");
        assert_eq!(request.span_kind, SpanKind::Server);
        assert_eq!(call.span_kind, SpanKind::Client);
        assert_eq!(call.parent_span_id, request.span_context.span_id());
        assert_eq!(
            sent.traceparent,
            parent(TRACE, &call.span_context.span_id().to_string())
        );
        assert_eq!(sent.tracestate.as_deref(), Some("vendor=x"));
        for (key, value) in [
            ("gen_ai.tool.name", "call_tool"),
            ("mcpgw.tool", "everything__echo"),
            ("mcpgw.server", "everything"),
            ("mcpgw.outcome", "ok"),
        ] {
            assert_eq!(attribute(&request, key).as_deref(), Some(value), "{key}");
        }
        assert_eq!(
            attribute(&call, "mcpgw.transport").as_deref(),
            Some("stdio")
        );
        assert_eq!(
            attribute(&call, "network.transport").as_deref(),
            Some("pipe")
        );
    }

    #[test]
    fn failures_are_recorded_by_kind_never_in_the_upstreams_words() {
        let (telemetry, collected) = traced();
        let request = RequestSpan::begin(
            &telemetry,
            &Called::tool("tools/call", "a__b"),
            &Context::new(),
            Vec::new(),
        );
        let upstream = request.upstream(&Called::tool("tools/call", "b"), "a", "http");
        upstream.finish(Err(&UpstreamError::Rpc {
            server: "a".into(),
            code: -32603,
            message: "upstream words sk-12345".to_owned(),
            data: None,
        }));
        let refused = McpError::invalid_params("upstream words sk-12345", None);
        request.finish(Err(&refused));

        let request = collected.named("tools/call");
        let call = collected.named("tools/call b");
        assert_eq!(attribute(&call, "error.type").as_deref(), Some("-32603"));
        assert_eq!(
            attribute(&call, "mcpgw.outcome").as_deref(),
            Some("upstream_error")
        );
        assert_eq!(attribute(&request, "error.type").as_deref(), Some("-32602"));
        assert_eq!(
            attribute(&request, "mcpgw.outcome").as_deref(),
            Some("error")
        );
        assert!(
            matches!(&request.status, Status::Error { description } if description == "JSON-RPC error -32602")
        );
        let exported = format!("{:?}", crate::sync::lock(&collected.0));
        assert!(!exported.contains("sk-12345"), "{exported}");
    }

    #[test]
    fn a_tool_error_and_an_abandoned_request_say_so() {
        let (telemetry, collected) = traced();
        let begin = |tool| {
            RequestSpan::begin(
                &telemetry,
                &Called::tool("tools/call", tool),
                &Context::new(),
                Vec::new(),
            )
        };
        begin("failing").finish(Ok(Outcome::ToolError));
        begin("gone").abandoned();
        let spans = crate::sync::lock(&collected.0).clone();
        let of = |tool: &str| {
            spans
                .iter()
                .find(|span| attribute(span, "gen_ai.tool.name").as_deref() == Some(tool))
                .cloned()
                .expect("span")
        };
        assert_eq!(
            attribute(&of("failing"), "error.type").as_deref(),
            Some("tool_error")
        );
        assert_eq!(
            attribute(&of("gone"), "mcpgw.outcome").as_deref(),
            Some("abandoned")
        );
    }

    #[test]
    fn names_a_client_makes_up_stay_out_of_span_names_and_are_cut() {
        let custom = Called::custom("x/my-own-method");
        assert_eq!(custom.span_name(), "custom method");
        let long = "n".repeat(300);
        let tool = Called::tool("tools/call", &long);
        let attributes = tool.attributes();
        let name = attributes
            .iter()
            .find(|kv| kv.key.as_str() == "gen_ai.tool.name")
            .map(|kv| kv.value.to_string())
            .unwrap_or_default();
        assert_eq!(name.len(), MAX_NAME);
        assert_eq!(short("é".repeat(200).as_str()).chars().count(), MAX_NAME);
    }
}
