//! The resource, prompt and completion requests, as the front end's `ServerHandler` runs them:
//! the caller's profile first (a server it may not see is one that does not exist), then the
//! snapshot for routing, then the owning upstream, as the caller's principal.
//!
//! Error mapping (JSON-RPC errors: there is no result a model could read instead):
//! - a URI or prompt name that names nothing the caller may see: resource not found (`-32002`
//!   for 2025-11-25 and older, `-32602` for 2026-07-28, which retired `-32002`), or
//!   `-32602` "unknown prompt";
//! - an upstream's own JSON-RPC error keeps its code when it is one a client can act on
//!   (`-32602`, `-32002` as above, `-32603`, the implementation-defined `-32000..-32019`,
//!   anything outside the reserved range); any other code, such as a protocol-level one that
//!   would be taken as the gateway's own, becomes `-32603`. The message names the server;
//! - the upstream down, timed out or refusing: `-32603`, in plain words.
//!
//! Contents are passed through unchanged but for URIs (see [`super`]): resources are data the
//! client application chose to read and prompts are templates the user picked, so unlike a tool
//! result they carry no untrusted-output marker, which would corrupt them.

use std::sync::Arc;

use ids::ServerName;
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CacheScope, CompleteRequestParams, CompleteResult, ContentBlock, ErrorCode,
        GetPromptRequestParams, GetPromptResponse, GetPromptResult, JsonObject, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, MetaObject, PaginatedRequestParams,
        PromptsCapability, ReadResourceRequestParams, ReadResourceResponse, Reference,
        ResourceContents, ResourcesCapability, ResultType, ServerCapabilities,
    },
    service::RequestContext,
};
use serde::de::DeserializeOwned;
use upstream::{Server, UpstreamError};

use super::{PAGE_SIZE, Surface, page};
use crate::{
    Gateway,
    mcp::is_modern,
    mcp::{changes::Held, errors},
    policy::access::Access,
    principal::Principal,
    telemetry::{Called, Outcome, RequestSpan, UpstreamSpan},
};

/// Adds the `resources`, `prompts` and `completions` capabilities: every upstream's are served.
/// `listChanged`: an upstream's change rebuilds the snapshot, then clients are told (`changes`).
pub(crate) fn declare(capabilities: &mut ServerCapabilities) {
    let mut resources = ResourcesCapability::default();
    resources.list_changed = Some(true);
    // Subscribing to a resource of a server without subscriptions is refused, naming why.
    resources.subscribe = Some(true);
    capabilities.resources = Some(resources);
    let mut prompts = PromptsCapability::default();
    prompts.list_changed = Some(true);
    capabilities.prompts = Some(prompts);
    capabilities.completions = Some(JsonObject::new());
}

/// `resources/list`: the resources of the servers the caller may see, a page at a time.
pub(crate) fn list_resources(
    gateway: &Gateway,
    request: Option<PaginatedRequestParams>,
    context: &RequestContext<RoleServer>,
) -> Result<ListResourcesResult, McpError> {
    let surface = gateway.surface();
    let (items, next) = visible_page(gateway, surface.resources(), request, context)?;
    let mut result = ListResourcesResult::with_all_items(items);
    result.next_cursor = next;
    Ok(result.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
}

/// `resources/templates/list`, like [`list_resources`].
pub(crate) fn list_resource_templates(
    gateway: &Gateway,
    request: Option<PaginatedRequestParams>,
    context: &RequestContext<RoleServer>,
) -> Result<ListResourceTemplatesResult, McpError> {
    let surface = gateway.surface();
    let (items, next) = visible_page(gateway, surface.templates(), request, context)?;
    let mut result = ListResourceTemplatesResult::with_all_items(items);
    result.next_cursor = next;
    Ok(result.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
}

/// `prompts/list`, like [`list_resources`].
pub(crate) fn list_prompts(
    gateway: &Gateway,
    request: Option<PaginatedRequestParams>,
    context: &RequestContext<RoleServer>,
) -> Result<ListPromptsResult, McpError> {
    let surface = gateway.surface();
    let access = gateway.access(Principal::of(&context.extensions));
    let visible: Vec<_> = surface
        .prompts()
        .iter()
        .filter(|prompt| access.permits_server(&prompt.server))
        .collect();
    let (prompts, next) = paged(visible, request)?;
    let mut result = ListPromptsResult::with_all_items(
        prompts
            .into_iter()
            .filter_map(|prompt| typed(&prompt.shown))
            .collect(),
    );
    result.next_cursor = next;
    Ok(result.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
}

/// `resources/read`: routed by the namespaced URI; the contents' URIs are namespaced again.
pub(crate) async fn read_resource(
    gateway: &Gateway,
    request: ReadResourceRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<ReadResourceResponse, McpError> {
    let modern = is_modern(context);
    let access = gateway.access(Principal::of(&context.extensions));
    let surface = gateway.surface();
    let unknown = || not_found(&request.uri, modern);
    let Some((server, original)) = surface.route(&request.uri) else {
        return Err(unknown());
    };
    if !access.permits_server(server) {
        return Err(unknown());
    }
    let server = server.to_owned();
    let Some(upstream) = upstream_for(gateway, &access, &server, modern)? else {
        return Err(unknown());
    };
    let mut params = request.clone();
    params.uri = original.into_owned();
    let span = upstream_span(
        context,
        &Called::method("resources/read"),
        &server,
        &upstream,
    );
    let trace = span.as_ref().and_then(UpstreamSpan::trace_context);
    let answer = tokio::select! {
        answer = upstream.read_resource(params, trace.as_ref()) => answer,
        () = context.ct.cancelled() => return Err(cancelled()),
    };
    if let Some(span) = &span {
        span.finish(answer.as_ref().map(Outcome::of_read));
    }
    match answer {
        Ok(ReadResourceResponse::Complete(mut result)) => {
            for contents in &mut result.contents {
                namespace_contents(&surface, &server, contents);
            }
            // What a caller may read depends on who it is (profiles, per-principal sessions).
            result.cache_scope = Some(CacheScope::Private);
            result.ttl_ms = Some(result.ttl_ms.unwrap_or(0));
            // A legacy upstream sends no `resultType`; 2026-07-28 clients need it (rmcp drops it
            // again for legacy clients).
            result.result_type = Some(ResultType::COMPLETE);
            drop_server_info(&mut result.meta);
            Ok(ReadResourceResponse::Complete(result))
        }
        Ok(other) => Ok(other),
        Err(error) => Err(failed(&server, "resources/read", error, modern)),
    }
}

/// A subscription for `principal` to the resource a client knows as `shown`: on the upstream
/// that serves it to this caller, under its URI there (see `changes`).
pub(crate) async fn hold_resource(
    gateway: &Gateway,
    principal: Principal,
    shown: &str,
    modern: bool,
) -> Result<Held, McpError> {
    let access = gateway.access(principal);
    let surface = gateway.surface();
    let unknown = || not_found(shown, modern);
    let Some((server, original)) = surface.route(shown) else {
        return Err(unknown());
    };
    if !access.permits_server(server) {
        return Err(unknown());
    }
    let server = server.to_owned();
    let original = original.into_owned();
    let Some(upstream) = upstream_for(gateway, &access, &server, modern)? else {
        return Err(unknown());
    };
    upstream
        .subscribe_resource(&original)
        .await
        .map_err(|error| failed(&server, "resources/subscribe", error, modern))?;
    Ok(Held { upstream, original })
}

/// `prompts/get`: routed by the prompt's name; embedded resources and resource links in the
/// messages get namespaced URIs.
pub(crate) async fn get_prompt(
    gateway: &Gateway,
    request: GetPromptRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<GetPromptResponse, McpError> {
    let modern = is_modern(context);
    let access = gateway.access(Principal::of(&context.extensions));
    let surface = gateway.surface();
    let Some(prompt) = surface
        .prompt(&request.name)
        .filter(|prompt| access.permits_server(&prompt.server))
    else {
        return Err(unknown_prompt(&request.name));
    };
    let Some(upstream) = upstream_for(gateway, &access, &prompt.server, modern)? else {
        return Err(unknown_prompt(&request.name));
    };
    let mut params = request.clone();
    params.name = prompt.upstream_name.clone();
    let called = Called::prompt("prompts/get", &prompt.upstream_name);
    let span = upstream_span(context, &called, &prompt.server, &upstream);
    let trace = span.as_ref().and_then(UpstreamSpan::trace_context);
    let answer = tokio::select! {
        answer = upstream.get_prompt(params, trace.as_ref()) => answer,
        () = context.ct.cancelled() => return Err(cancelled()),
    };
    if let Some(span) = &span {
        span.finish(answer.as_ref().map(Outcome::of_prompt));
    }
    match answer {
        Ok(GetPromptResponse::Complete(mut result)) => {
            namespace_messages(&surface, &prompt.server, &mut result);
            result.result_type = Some(ResultType::COMPLETE);
            drop_server_info(&mut result.meta);
            Ok(GetPromptResponse::Complete(result))
        }
        Ok(other) => Ok(other),
        Err(error) => Err(failed(&prompt.server, "prompts/get", error, modern)),
    }
}

/// `completion/complete`: `ref/prompt` routed by the prompt's name, `ref/resource` by the
/// template's (or resource's) namespaced URI. An upstream without completions completes
/// nothing.
pub(crate) async fn complete(
    gateway: &Gateway,
    request: CompleteRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CompleteResult, McpError> {
    let modern = is_modern(context);
    let access = gateway.access(Principal::of(&context.extensions));
    let surface = gateway.surface();
    let mut params = request.clone();
    let server = match &mut params.r#ref {
        Reference::Prompt(reference) => {
            let Some(prompt) = surface
                .prompt(&reference.name)
                .filter(|prompt| access.permits_server(&prompt.server))
            else {
                return Err(unknown_prompt(&reference.name));
            };
            reference.name = prompt.upstream_name.clone();
            prompt.server.clone()
        }
        Reference::Resource(reference) => {
            let Some((server, original)) = surface
                .route(&reference.uri)
                .filter(|(server, _)| access.permits_server(server))
            else {
                return Err(not_found(&reference.uri, modern));
            };
            let server = ServerName::from(server);
            reference.uri = original.into_owned();
            server
        }
        _ => {
            return Err(errors::invalid_params(
                "completion/complete: unknown kind of ref",
            ));
        }
    };
    let Some(upstream) = upstream_for(gateway, &access, &server, modern)? else {
        return Err(errors::invalid_params(format!(
            "server '{server}' is not configured any more"
        )));
    };
    let called = Called::method("completion/complete");
    let span = upstream_span(context, &called, &server, &upstream);
    let trace = span.as_ref().and_then(UpstreamSpan::trace_context);
    let answer = tokio::select! {
        answer = upstream.complete(params, trace.as_ref()) => answer,
        () = context.ct.cancelled() => return Err(cancelled()),
    };
    if let Some(span) = &span {
        span.finish(answer.as_ref().map(|_| Outcome::Ok));
    }
    match answer {
        Ok(mut result) => {
            result.result_type = Some(ResultType::COMPLETE);
            drop_server_info(&mut result.meta);
            Ok(result)
        }
        Err(UpstreamError::Rpc { code, .. }) if code == ErrorCode::METHOD_NOT_FOUND.0 => {
            Ok(CompleteResult::default())
        }
        Err(error) => Err(failed(&server, "completion/complete", error, modern)),
    }
}

/// The span of the request `called` to `server` (reached through `upstream`) made for the
/// client request of `context`, when the gateway traces; the client request's span learns the
/// server.
fn upstream_span(
    context: &RequestContext<RoleServer>,
    called: &Called<'_>,
    server: &str,
    upstream: &Server,
) -> Option<UpstreamSpan> {
    let trace = RequestSpan::of(&context.extensions)?;
    trace.server(server);
    Some(trace.upstream(called, server, crate::telemetry::transport(upstream)))
}

/// The caller's page of `items` (those of servers it may see), as rmcp types.
fn visible_page<T: DeserializeOwned>(
    gateway: &Gateway,
    items: &[super::Item],
    request: Option<PaginatedRequestParams>,
    context: &RequestContext<RoleServer>,
) -> Result<(Vec<T>, Option<String>), McpError> {
    let access = gateway.access(Principal::of(&context.extensions));
    let visible: Vec<&super::Item> = items
        .iter()
        .filter(|item| access.permits_server(&item.server))
        .collect();
    let (items, next) = paged(visible, request)?;
    Ok((
        items
            .into_iter()
            .filter_map(|item| typed(&item.shown))
            .collect(),
        next,
    ))
}

fn paged<T>(
    items: Vec<T>,
    request: Option<PaginatedRequestParams>,
) -> Result<(Vec<T>, Option<String>), McpError> {
    let cursor = request.and_then(|r| r.cursor);
    page(items, cursor.as_deref(), PAGE_SIZE).map_err(|_| {
        errors::invalid_params("invalid cursor: pass the nextCursor of the previous page unchanged")
    })
}

/// An upstream object as the rmcp type clients are sent; one that does not fit is left out
/// (it would not survive serialisation either).
fn typed<T: DeserializeOwned>(shown: &serde_json::Value) -> Option<T> {
    serde_json::from_value(shown.clone())
        .inspect_err(|error| tracing::debug!(%error, "upstream list item left out"))
        .ok()
}

/// The upstream `server` as the caller's principal calls it.
fn upstream_for(
    gateway: &Gateway,
    access: &Access<'_>,
    server: &str,
    modern: bool,
) -> Result<Option<Arc<Server>>, McpError> {
    gateway
        .upstreams()
        .for_principal(server, &access.principal.id())
        .map_err(|error| failed(server, "session", error, modern))
}

/// Embedded resources and resource links of a prompt's messages, under namespaced URIs.
fn namespace_messages(surface: &Surface, server: &str, result: &mut GetPromptResult) {
    for message in &mut result.messages {
        match &mut message.content {
            ContentBlock::Resource(embedded) => {
                namespace_contents(surface, server, &mut embedded.resource);
            }
            ContentBlock::ResourceLink(link) => link.uri = surface.show_uri(server, &link.uri),
            _ => {}
        }
    }
}

fn namespace_contents(surface: &Surface, server: &str, contents: &mut ResourceContents) {
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => {
            *uri = surface.show_uri(server, uri);
        }
        // A kind of contents this rmcp does not know has no URI it could rewrite.
        _ => {}
    }
}

/// Removes the upstream's `serverInfo` stamp from a result's `_meta`: the client talks to
/// mcpgw, and a stamp naming the upstream would tell it otherwise.
fn drop_server_info(meta: &mut Option<MetaObject>) {
    if let Some(object) = meta {
        object.remove("io.modelcontextprotocol/serverInfo");
        if object.is_empty() {
            *meta = None;
        }
    }
}

fn not_found(uri: &str, modern: bool) -> McpError {
    errors::resource_not_found(uri, modern)
}

fn unknown_prompt(name: &str) -> McpError {
    errors::invalid_params(format!(
        "unknown prompt '{name}'; prompts/list shows the prompts there are"
    ))
}

fn cancelled() -> McpError {
    errors::cancelled("the request")
}

/// `error` from `server` while running `what`, as the caller gets it (see `mcp::errors`).
fn failed(server: &str, what: &str, error: UpstreamError, modern: bool) -> McpError {
    errors::from_upstream(server, what, error, modern)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc(code: i32) -> UpstreamError {
        UpstreamError::Rpc {
            server: "s".into(),
            code,
            message: "nope".to_owned(),
            data: None,
        }
    }

    #[test]
    fn upstream_codes_a_client_can_act_on_are_kept_and_others_become_internal() {
        let code = |error, modern| failed("s", "test", error, modern).code.0;
        assert_eq!(code(rpc(-32002), false), -32002);
        assert_eq!(code(rpc(-32002), true), -32602);
        assert_eq!(code(rpc(-32602), true), -32602);
        assert_eq!(code(rpc(-32001), false), -32001);
        assert_eq!(code(rpc(42), false), 42);
        assert_eq!(code(rpc(-32022), true), -32603, "a protocol-level code");
        assert_eq!(code(rpc(-32601), false), -32603);
        let timeout = UpstreamError::Timeout {
            server: "s".into(),
            after: std::time::Duration::from_secs(3),
        };
        let error = failed("s", "test", timeout, false);
        assert_eq!(error.code.0, -32603);
        assert_eq!(error.message, "'s' did not answer within 3s");
        assert_eq!(
            failed("s", "test", rpc(-32002), false).message,
            "server 's': nope"
        );
    }
}
