//! Every client request inside its span, when the gateway traces (`telemetry`).
//!
//! [`Traced`] is the handler rmcp serves, on both listeners and on the direct call path
//! (`http::direct`): [`Front`] with each request method run inside a [`RequestSpan`], and every
//! other method handed to [`Front`] as it is. The span rides in the request's extensions
//! ([`RequestSpan::of`]) to the steps that add to it: the call pipeline (server, tool,
//! decision), `relay` (the upstream call's child span) and search. Without tracing a request
//! costs one `None` check more.
//!
//! Why a wrapper that restates rmcp's `ServerHandler` method by method (as rmcp's own `Arc` and
//! `Box` wrappers do): rmcp's Streamable HTTP service takes a `ServerHandler`, not any
//! `Service`, so a wrapper around the dispatch (`Service::handle_request`) cannot be served
//! there; and spans in `Front`'s own methods would miss the requests rmcp answers for it
//! (`initialize`, `ping`, `server/discover`). Every method is delegated, those `Front` leaves to
//! rmcp's defaults too, so the wrapper never changes an answer.

// Logging and `resources/subscribe` are deprecated by SEP-2577 but still served (see `front`).
#![allow(deprecated)]

use std::{borrow::Cow, future::Future};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CancelledNotificationParam,
        CompleteRequestParams, CompleteResult, ConstString, CustomNotification, CustomRequest,
        CustomResult, DiscoverResult, GetPromptRequestParams, GetPromptResponse,
        GetSkillRequestParams, GetSkillResult, GetTaskParams, GetTaskResult,
        InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
        ListResourcesResult, ListSkillsResult, ListToolsResult, PaginatedRequestParams,
        ProgressNotificationParam, ProtocolVersion, ReadResourceDirectoryRequestParams,
        ReadResourceDirectoryResult, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
        SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool,
        UnsubscribeRequestParams, UpdateTaskParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};

use crate::{
    mcp::Front,
    telemetry::{Called, Outcome, RequestSpan},
};

use rmcp::model::{
    CallToolRequestMethod as CallTool, CancelTaskMethod as CancelTask,
    CompleteRequestMethod as Complete, DiscoverRequestMethod as Discover,
    GetPromptRequestMethod as GetPrompt, GetSkillRequestMethod as GetSkill,
    GetTaskMethod as GetTask, InitializeResultMethod as Initialize,
    ListPromptsRequestMethod as ListPrompts, ListResourceTemplatesRequestMethod as ListTemplates,
    ListResourcesRequestMethod as ListResources, ListSkillsRequestMethod as ListSkills,
    ListToolsRequestMethod as ListTools, PingRequestMethod as Ping,
    ReadResourceDirectoryRequestMethod as ReadDirectory, ReadResourceRequestMethod as ReadResource,
    SetLevelRequestMethod as SetLevel, SubscribeRequestMethod as Subscribe,
    SubscriptionsListenRequestMethod as Listen, UnsubscribeRequestMethod as Unsubscribe,
    UpdateTaskMethod as UpdateTask,
};

/// [`Front`], with a span around each request when the gateway traces.
#[derive(Clone)]
pub struct Traced(pub(crate) Front);

impl Traced {
    /// Answers `request` with `handle`, inside the span of the request `describe` names when
    /// the gateway traces; `outcome` says what the answer was, for the span. Nothing of the
    /// request is read or copied when it does not.
    async fn traced<R, T, F>(
        &self,
        request: R,
        mut context: RequestContext<RoleServer>,
        describe: fn(&R) -> Called<'_>,
        handle: impl FnOnce(R, RequestContext<RoleServer>) -> F,
        outcome: fn(&T) -> Outcome,
    ) -> Result<T, McpError>
    where
        F: Future<Output = Result<T, McpError>>,
    {
        let Some(telemetry) = self.0.gateway().telemetry() else {
            return handle(request, context).await;
        };
        let span = RequestSpan::start(telemetry, describe(&request), &context);
        context.extensions.insert(span.clone());
        // A request whose future is dropped (its client went away) still ends its span.
        let mut unfinished = Unfinished(Some(span));
        let result = handle(request, context).await;
        if let Some(span) = unfinished.0.take() {
            span.finish(result.as_ref().map(outcome));
        }
        result
    }
}

/// The span of a request still being answered; dropped early, it ends as abandoned.
struct Unfinished(Option<RequestSpan>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(span) = self.0.take() {
            span.abandoned();
        }
    }
}

fn tool_called(request: &CallToolRequestParams) -> Called<'_> {
    Called::tool(CallTool::VALUE, &request.name)
}

fn prompt_called(request: &GetPromptRequestParams) -> Called<'_> {
    Called::prompt(GetPrompt::VALUE, &request.name)
}

fn custom_called(request: &CustomRequest) -> Called<'_> {
    Called::custom(&request.method)
}

fn answered<T>(_: &T) -> Outcome {
    Outcome::Ok
}

impl ServerHandler for Traced {
    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        let describe = |_: &()| Called::method(Ping::VALUE);
        let handle = |(), cx| self.0.ping(cx);
        self.traced((), context, describe, handle, answered).await
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let handle = |request, cx| self.0.initialize(request, cx);
        let describe = |_: &_| Called::method(Initialize::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    fn negotiate_initialize(
        &self,
        request: &InitializeRequestParams,
    ) -> Result<InitializeResult, McpError> {
        self.0.negotiate_initialize(request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        ServerHandler::supported_protocol_versions(&self.0)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let describe = |_: &()| Called::method(Discover::VALUE);
        let handle = |(), cx| self.0.discover(cx);
        self.traced((), context, describe, handle, answered).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let handle = |request, cx| self.0.complete(request, cx);
        let describe = |_: &_| Called::method(Complete::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let handle = |request, cx| self.0.set_level(request, cx);
        let describe = |_: &_| Called::method(SetLevel::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let handle = |request, cx| self.0.get_prompt(request, cx);
        self.traced(request, context, prompt_called, handle, Outcome::of_prompt)
            .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let handle = |request, cx| self.0.list_prompts(request, cx);
        let describe = |_: &_| Called::method(ListPrompts::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let handle = |request, cx| self.0.list_resources(request, cx);
        let describe = |_: &_| Called::method(ListResources::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let handle = |request, cx| self.0.list_resource_templates(request, cx);
        let describe = |_: &_| Called::method(ListTemplates::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let handle = |request, cx| self.0.read_resource(request, cx);
        let describe = |_: &_| Called::method(ReadResource::VALUE);
        self.traced(request, context, describe, handle, Outcome::of_read)
            .await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.0.accepted_subscription_filter(requested)
    }

    /// A `subscriptions/listen` stream's span lasts as long as the stream.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let Some(telemetry) = self.0.gateway().telemetry() else {
            return self.0.listen(context).await;
        };
        let called = Called::method(Listen::VALUE);
        let span = RequestSpan::start(telemetry, called, context.request_context());
        let mut unfinished = Unfinished(Some(span));
        let result = self.0.listen(context).await;
        if let Some(span) = unfinished.0.take() {
            span.finish(result.as_ref().map(answered));
        }
        result
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let handle = |request, cx| self.0.subscribe(request, cx);
        let describe = |_: &_| Called::method(Subscribe::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let handle = |request, cx| self.0.unsubscribe(request, cx);
        let describe = |_: &_| Called::method(Unsubscribe::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let handle = |request, cx| self.0.call_tool(request, cx);
        self.traced(request, context, tool_called, handle, Outcome::of_call)
            .await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let handle = |request, cx| self.0.list_tools(request, cx);
        let describe = |_: &_| Called::method(ListTools::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.0.get_tool(name)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let handle = |request, cx| self.0.on_custom_request(request, cx);
        self.traced(request, context, custom_called, handle, answered)
            .await
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        self.0.on_cancelled(notification, context).await
    }

    async fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        self.0.on_progress(notification, context).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.0.on_initialized(context).await
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.0.on_roots_list_changed(context).await
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) {
        self.0.on_custom_notification(notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.0)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let handle = |request, cx| self.0.get_task(request, cx);
        let describe = |_: &_| Called::method(GetTask::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let handle = |request, cx| self.0.update_task(request, cx);
        let describe = |_: &_| Called::method(UpdateTask::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let handle = |request, cx| self.0.cancel_task(request, cx);
        let describe = |_: &_| Called::method(CancelTask::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        let handle = |request, cx| self.0.list_skills(request, cx);
        let describe = |_: &_| Called::method(ListSkills::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        let handle = |request, cx| self.0.get_skill(request, cx);
        let describe = |_: &_| Called::method(GetSkill::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }

    async fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceDirectoryResult, McpError> {
        let handle = |request, cx| self.0.read_resource_directory(request, cx);
        let describe = |_: &_| Called::method(ReadDirectory::VALUE);
        self.traced(request, context, describe, handle, answered)
            .await
    }
}
