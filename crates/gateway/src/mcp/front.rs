//! The MCP server clients talk to: rmcp's dual-era server (legacy sessions and 2026-07-28
//! stateless requests on the same handler) with mcpgw's tool surface behind it.
//!
//! This file only translates: a `tools/call` is read once into an [`Invocation`], limited,
//! and either answered here (the meta-tools `search_tools` and `get_tool_details`) or run by
//! the call pipeline (`mcp::call`), for passthrough names and `call_tool` alike. Resources,
//! prompts and completions go to `surface::requests`; list changes reach legacy sessions (from
//! `on_initialized`) and 2026-07-28 `subscriptions/listen` streams through `changes`. Every
//! JSON-RPC error is made in `mcp::errors`; anything that went wrong while running a tool is a
//! tool result with `isError: true`, which the model can read and act on.

// Logging is deprecated by SEP-2577 but still part of every revision mcpgw serves.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
        ListToolsResult, LoggingLevel, PaginatedRequestParams, ServerCapabilities, ServerConfig,
        SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
        UnsubscribeRequestParams,
    },
    service::{NotificationContext, Peer, RequestContext, SubscriptionContext},
};
use serde_json::{Map, Value};

use crate::{
    Gateway,
    audit::CallDecision,
    http::direct::Direct,
    mcp::{
        call::{self, Call, Invocation, Malformed, Pipeline},
        errors, listing, meta, relay, result,
    },
    oauth::login::Logins,
    policy::access::Access,
    principal::Principal,
    sync::lock,
    telemetry::RequestSpan,
};

/// One front-end handler; cheap to clone, one per HTTP session or stdio connection.
#[derive(Clone)]
pub struct Front {
    gateway: Arc<Gateway>,
    logins: Arc<Logins>,
    /// What this legacy session set with `logging/setLevel`; `None` until it does, and until
    /// then it gets no log messages (the spec lets a server pick its default; silence is the
    /// one that cannot flood a client that never asked).
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    /// This legacy session's entry among the change listeners, from its
    /// `notifications/initialized` on; its resource subscriptions are held there.
    listener: Arc<Mutex<Option<u64>>>,
    /// Where this session's plain calls are answered without rmcp's session machinery (HTTP
    /// listeners only; see `http::direct`).
    direct: Option<Arc<Direct>>,
}

impl Front {
    /// A handler on `gateway`; `logins` starts sign-ins and takes the browser's return.
    pub fn new(gateway: Arc<Gateway>, logins: Arc<Logins>) -> Self {
        Self {
            gateway,
            logins,
            log_level: Arc::default(),
            listener: Arc::default(),
            direct: None,
        }
    }

    /// This handler, its session's plain calls answered by `direct` once it is initialized.
    pub(crate) fn with_direct(mut self, direct: Arc<Direct>) -> Self {
        self.direct = Some(direct);
        self
    }

    pub(crate) fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Whether this legacy session asked for log messages (`logging/setLevel`).
    pub(crate) fn logs_requested(&self) -> bool {
        lock(&self.log_level).is_some()
    }

    /// `search_tools`: among the servers and tools the caller may see; `trace` is the
    /// request's span, when the gateway traces.
    async fn search(
        &self,
        access: &Access<'_>,
        arguments: &Map<String, Value>,
        trace: Option<&RequestSpan>,
    ) -> CallToolResult {
        let catalog = self.gateway.catalog();
        let known: Vec<&str> = catalog
            .servers()
            .into_iter()
            .filter(|server| access.permits_server(server))
            .collect();
        let mut search = match meta::parse_search(&known, arguments) {
            Ok(search) => search,
            Err(error) => return error,
        };
        search.filter.tools = access.allowed_tools();
        let include = match meta::parse_include(arguments) {
            Ok(include) => include,
            Err(error) => return error,
        };
        if include.resources || include.prompts {
            return crate::mcp::surface::search(
                &self.gateway,
                access,
                &known,
                &search,
                include,
                trace,
            )
            .await;
        }
        let mut found = self.gateway.search_in(&search, trace).await;
        found
            .starting
            .retain(|server| access.permits_server(server));
        meta::render_search(&known, &search, &found)
    }

    /// `get_tool_details`: a tool outside the caller's profile reads as unknown.
    fn details(&self, access: &Access<'_>, arguments: &Map<String, Value>) -> CallToolResult {
        let catalog = self.gateway.catalog();
        match arguments.get("name").and_then(Value::as_str) {
            Some(target) if access.get(&catalog, target).is_none() => {
                result::tool_error(access.unknown_tool_message(&catalog, target))
            }
            // Found and permitted, or no name (`details` says what is missing).
            _ => meta::details(&catalog, arguments),
        }
    }

    /// This session's listener (list changes, resource updates), registered by whichever comes
    /// first: `notifications/initialized`, or a request that needs it. rmcp handles a session's
    /// notifications and requests in tasks of their own, so a `resources/subscribe` that a
    /// client sends right after `initialized` may be handled first. One per session: a
    /// repeated `initialized` keeps it.
    fn session_listener(&self, peer: Peer<RoleServer>, principal: Principal) -> u64 {
        *lock(&self.listener).get_or_insert_with(|| {
            self.gateway
                .listeners
                .add_session(&self.gateway, peer, principal)
        })
    }
}

/// How long a 2026-07-28 client may reuse a `tools/list` result (`ttlMs`). Clients that listen
/// hear of changes at once; the others list again within a minute.
const LIST_TTL_MS: u64 = 60_000;

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        // `listChanged`: legacy sessions get `notifications/tools/list_changed`, 2026-07-28
        // clients the same through `subscriptions/listen` (see `changes`), when what they list
        // differs.
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new("mcpgw", env!("CARGO_PKG_VERSION")));
        crate::mcp::surface::requests::declare(&mut info.capabilities);
        // Profiles may give a client passthrough; the instructions speak of the meta-tools,
        // which most clients see.
        if self.gateway.config().gateway.exposure != config::Exposure::Passthrough {
            info = info.with_instructions(
                "mcpgw fronts several MCP servers. Use search_tools to find a tool, \
                 get_tool_details to read its schema, and call_tool to run it.",
            );
        }
        info
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        crate::mcp::surface::requests::list_resources(&self.gateway, request, &context)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        crate::mcp::surface::requests::list_resource_templates(&self.gateway, request, &context)
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        crate::mcp::surface::requests::read_resource(&self.gateway, request, &context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        crate::mcp::surface::requests::list_prompts(&self.gateway, request, &context)
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        crate::mcp::surface::requests::get_prompt(&self.gateway, request, &context).await
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        crate::mcp::surface::requests::complete(&self.gateway, request, &context).await
    }

    /// `logging/setLevel`: the level of the upstreams' log messages relayed to this session's
    /// calls (see [`relay`]). 2026-07-28 removed the method (a request names its level in
    /// `_meta`), so such a request gets `-32601` as for any unknown method.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if crate::mcp::is_modern(&context) {
            return Err(errors::method_not_found("logging/setLevel"));
        }
        *lock(&self.log_level) = Some(request.level);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let access = self.gateway.access(Principal::of(&context.extensions));
        let mut listed =
            ListToolsResult::with_all_items(listing::visible_tools(&self.gateway, &access));
        if crate::mcp::is_modern(&context) {
            // The list depends on the caller's profile; listeners hear of changes at once.
            listed.cache_scope = Some(CacheScope::Private);
            listed.ttl_ms = Some(LIST_TTL_MS);
        }
        Ok(listed)
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let access = self.gateway.access(Principal::of(&context.extensions));
        let search = access.exposure() == config::Exposure::Search;
        let invocation = Invocation::parse(&request.name, request.arguments.take(), search);
        let trace = RequestSpan::of(&context.extensions);
        if let Some(refused) = call::limit(&self.gateway, &access.principal, &invocation).await {
            if let Some(trace) = &trace {
                trace.decision(&CallDecision::RateLimited);
            }
            return Ok(CallToolResponse::Complete(refused));
        }
        let level = *lock(&self.log_level);
        let caller = relay::Caller::of(&request, &context, &access.principal, level);
        // The retry of a call parked while its upstream waits for this client's answer.
        if let Some(parked) = request
            .request_state
            .as_deref()
            .and_then(|state| state.strip_prefix(relay::RELAY_STATE_PREFIX))
        {
            return relay::resume(&self.gateway, parked, &caller).await;
        }
        let complete = |result| Ok(CallToolResponse::Complete(result));
        match invocation {
            Invocation::Search(arguments) => {
                complete(self.search(&access, &arguments, trace.as_ref()).await)
            }
            Invocation::Details(arguments) => complete(self.details(&access, &arguments)),
            Invocation::Malformed(Malformed::NoName) => {
                complete(result::tool_error("call_tool needs a 'name' string"))
            }
            Invocation::Malformed(Malformed::ArgumentsNotObject) => {
                Err(errors::call_tool_arguments())
            }
            Invocation::Tool(tool) => {
                let call = Call::new(&request, &context, access, caller, tool.via);
                let pipeline = Pipeline {
                    gateway: &self.gateway,
                    logins: &self.logins,
                };
                pipeline.run(tool, &call).await
            }
        }
    }

    /// A legacy session starts listening for list changes (see `changes`).
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(direct) = &self.direct {
            direct.register(&context, self);
        }
        let principal = Principal::of(&context.extensions);
        self.session_listener(context.peer, principal);
    }

    /// `resources/subscribe` (legacy sessions; 2026-07-28 names resources in
    /// `subscriptions/listen`): `notifications/resources/updated` for this URI from now on.
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let modern = crate::mcp::is_modern(&context);
        if modern {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "resources/subscribe: name the resource in subscriptions/listen",
                None,
            ));
        }
        let listener =
            self.session_listener(context.peer.clone(), Principal::of(&context.extensions));
        let held = crate::mcp::surface::requests::hold_resource(
            &self.gateway,
            Principal::of(&context.extensions),
            &request.uri,
            false,
        )
        .await?;
        // Subscribing twice is one subscription.
        self.gateway
            .listeners
            .hold(Some(listener), request.uri, held);
        Ok(())
    }

    /// `resources/unsubscribe`; a URI this session did not subscribe to is no error.
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let listener = *lock(&self.listener);
        self.gateway.listeners.unhold(listener, &request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp narrows this to what was asked for and what `get_info` advertises.
        let mut accepted = SubscriptionFilter::builder()
            .tools_list_changed()
            .resources_list_changed()
            .prompts_list_changed()
            .build();
        accepted
            .resource_subscriptions
            .clone_from(&requested.resource_subscriptions);
        Some(accepted)
    }

    /// A 2026-07-28 `subscriptions/listen` stream: list changes until the client closes it.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let principal = Principal::of(&context.request_context().extensions);
        let tools = context.accepted().tools_list_changed == Some(true);
        let mut resources = std::collections::HashMap::new();
        for shown in context.accepted().resource_subscriptions.iter().flatten() {
            // The stream is acknowledged already: a resource that cannot be subscribed to is
            // left out (and said in the log), the others still work.
            match crate::mcp::surface::requests::hold_resource(
                &self.gateway,
                principal.clone(),
                shown,
                true,
            )
            .await
            {
                Ok(held) => {
                    resources.insert(shown.clone(), held);
                }
                Err(error) => {
                    tracing::info!(uri = %shown, error = %error.message, "a listen stream's resource subscription failed");
                }
            }
        }
        let id = self.gateway.listeners.add_subscription(
            &self.gateway,
            context.sink().clone(),
            principal,
            tools,
            resources,
        );
        context.cancelled().await;
        self.gateway.listeners.remove(id);
        Ok(())
    }
}
