//! The MCP server clients talk to: rmcp's dual-era server (legacy sessions and 2026-07-28
//! stateless requests on the same handler) with mcpgw's tool surface behind it.
//!
//! Error mapping at this edge, in one place:
//! - a request that cannot be routed (unknown tool name in `tools/call`, arguments that are not
//!   an object) is a JSON-RPC `-32602 invalid params` error with a message saying what to fix;
//! - anything that went wrong while running a tool (upstream down, upstream error, bad meta-tool
//!   input) is a tool result with `isError: true`, because that is what the model can read and
//!   act on;
//! - resources, prompts and completions map theirs in `surface::requests` (JSON-RPC errors
//!   only: there is no result a model could read instead).
//!
//! A call that reaches an OAuth server without a usable token hands the user a sign-in, in the
//! best way the client supports ([`Handoff`]): a URL-mode elicitation, after which the call
//! resumes by itself (2025-11-25 clients that declared `elicitation.url`); an `input_required`
//! result carrying that elicitation, answered by a retry (2026-07-28 clients that declared it);
//! else a tool error with a link. The `-32042` URL-elicitation-required error is not used: a
//! tool error reaches every client, and 2026-07-28 forbids that code.
//!
//! A call's progress, its cancellation and what its upstream asks of the user travel through
//! [`relay`]; list changes reach legacy sessions (from `on_initialized`) and 2026-07-28
//! `subscriptions/listen` streams through `changes`.

// Logging is deprecated by SEP-2577 but still part of every revision mcpgw serves.
#![allow(deprecated)]

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer, ServerHandler,
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequest,
        ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, InputRequest,
        InputRequiredResult, ListToolsResult, LoggingLevel, PaginatedRequestParams,
        ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
        SubscriptionFilter, UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use upstream::{Server, UpstreamError, oauth::LOGIN_TTL};

use crate::{
    Access, AuditRecord, CallDecision, CallOutcome, Gateway, Principal, lock,
    mcp::{listing, meta, relay, result},
    oauth::login::{self, Logins, Waited},
    policy::approval::{self, Answer, DecisionError},
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
}

/// How a sign-in reaches the person behind one `tools/call`.
enum Handoff {
    /// A tool error with a link that starts the sign-in when opened.
    Text,
    /// A 2025-11-25 client that declared `elicitation.url`: `elicitation/create` on its
    /// session, then the call waits for the sign-in and resumes.
    Elicit {
        peer: Peer<RoleServer>,
        ct: CancellationToken,
    },
    /// A 2026-07-28 client that declared `elicitation.url`: an `input_required` result; the
    /// retry (`retry`) carries the answer, and waits for the sign-in.
    InputRequired {
        retry: Option<Retry>,
        ct: CancellationToken,
    },
}

/// The MRTR retry of a call that asked for a sign-in.
struct Retry {
    request_state: String,
    /// The user's answer to the sign-in elicitation, if the retry carries a readable one.
    answer: Option<ElicitationAction>,
}

impl Handoff {
    fn of(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> Self {
        let url_elicitation = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.url.is_some());
        if !url_elicitation {
            return Self::Text;
        }
        let modern = crate::is_modern(context);
        if !modern {
            return Self::Elicit {
                peer: context.peer.clone(),
                ct: context.ct.clone(),
            };
        }
        let retry = request.request_state.as_ref().map(|state| Retry {
            request_state: state.clone(),
            answer: request
                .input_responses
                .as_ref()
                .and_then(|responses| responses.get(login::SIGNIN_INPUT))
                .and_then(|answer| serde_json::from_value::<ElicitResult>(answer.clone()).ok())
                .map(|answer| answer.action),
        });
        Self::InputRequired {
            retry,
            ct: context.ct.clone(),
        }
    }
}

/// How the person behind one `tools/call` can be asked to approve it.
enum Asker {
    /// A 2025-11-25 client with form elicitation: `elicitation/create` on its session.
    Elicit { peer: Peer<RoleServer> },
    /// A 2026-07-28 client with form elicitation: an `input_required` result; `retry` when
    /// this call is the retry that carries the answer.
    InputRequired { retry: Option<ApprovalRetry> },
    /// No way to ask: the call waits for a decision made out of band.
    Wait,
}

/// The MRTR retry of a call that asked for approval.
struct ApprovalRetry {
    id: String,
    answer: Option<ElicitResult>,
}

impl Asker {
    fn of(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> Self {
        let form = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            // An empty `elicitation` object means form mode (2025-06-18 compatibility).
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        if !form {
            return Self::Wait;
        }
        let modern = crate::is_modern(context);
        if !modern {
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

/// One `tools/call` as it goes through the gateway: who calls, and how to reach them.
struct Call<'a> {
    access: Access<'a>,
    handoff: Handoff,
    ask: Asker,
    ct: CancellationToken,
    /// The client as the upstream call reaches it: progress, cancellation, what the upstream
    /// asks (see [`relay`]).
    caller: relay::Caller,
    /// The arguments a human approved, once approved: a re-attempt (after a sign-in) runs
    /// these without asking again.
    approved: Mutex<Option<Map<String, Value>>>,
    /// The audit record of the catalog tool call, written when the call ends.
    audit: Mutex<Option<AuditRecord>>,
    /// The client called the tool by its own name (passthrough), not through the `call_tool`
    /// meta-tool: an upstream's JSON-RPC error then reaches it as that error, as it would
    /// without the gateway. Through `call_tool` it is a tool error the model can read.
    direct: std::sync::atomic::AtomicBool,
}

impl Call<'_> {
    /// Updates the audit record, if this call keeps one.
    fn note(&self, update: impl FnOnce(AuditRecord) -> AuditRecord) {
        let mut slot = lock(&self.audit);
        if let Some(record) = slot.take() {
            *slot = Some(update(record));
        }
    }
}

/// The tool a call is about, copied out of the catalog snapshot.
struct Target {
    qualified: String,
    server: String,
    annotations: Option<Value>,
}

/// What the approval step decided.
enum Gate {
    Proceed(Option<Map<String, Value>>),
    Stop(CallToolResult),
    Ask(InputRequiredResult),
}

/// One try at running a catalog tool.
enum Attempt {
    Done(CallToolResult),
    /// An upstream's JSON-RPC error, for a client that called the tool directly.
    Failed(McpError),
    /// The caller must answer (approve the call) and retry.
    Input(InputRequiredResult),
    /// The tool's server is configured for OAuth and has no usable token.
    SignIn {
        server: Arc<Server>,
        error: UpstreamError,
    },
}

impl Front {
    /// A handler on `gateway`; `logins` starts sign-ins and takes the browser's return.
    pub fn new(gateway: Arc<Gateway>, logins: Arc<Logins>) -> Self {
        Self {
            gateway,
            logins,
            log_level: Arc::default(),
            listener: Arc::default(),
        }
    }

    /// Runs catalog tool `qualified` for `call`, handing a needed sign-in or approval to the
    /// user as the client allows.
    async fn call_catalog(
        &self,
        qualified: &str,
        arguments: Option<Map<String, Value>>,
        call: &Call<'_>,
    ) -> Result<CallToolResponse, McpError> {
        let server = server_of(&self.gateway.catalog(), qualified).unwrap_or_default();
        *lock(&call.audit) = Some(AuditRecord::begin(
            &call.access.principal,
            &server,
            qualified,
            arguments.as_ref(),
        ));
        let response = self
            .call_catalog_unaudited(qualified, arguments, call)
            .await;
        let record = lock(&call.audit).take();
        // A call that asked its client to approve is recorded when the retry settles it; an
        // unknown name is no tool call to record.
        let asked = matches!(response, Ok(CallToolResponse::InputRequired(_)));
        let unknown = matches!(&response, Err(e) if e.code == rmcp::model::ErrorCode::INVALID_PARAMS)
            && record.as_ref().is_some_and(|r| {
                r.decision == CallDecision::Allowed && r.outcome == CallOutcome::NotRun
            });
        if let Some(record) = record
            && !asked
            && !unknown
        {
            self.gateway.audit(record);
        }
        response
    }

    async fn call_catalog_unaudited(
        &self,
        qualified: &str,
        arguments: Option<Map<String, Value>>,
        call: &Call<'_>,
    ) -> Result<CallToolResponse, McpError> {
        if let Handoff::InputRequired {
            retry: Some(retry),
            ct,
        } = &call.handoff
            && let Some(settled) = self
                .settle_retry(qualified, retry, ct, &call.access.principal)
                .await
        {
            call.note(|r| r.not_run("sign-in not completed"));
            return Ok(CallToolResponse::Complete(settled));
        }
        match self.attempt(qualified, arguments.clone(), call).await? {
            Attempt::Done(result) => Ok(CallToolResponse::Complete(result)),
            Attempt::Failed(error) => Err(error),
            Attempt::Input(input) => Ok(CallToolResponse::InputRequired(input)),
            Attempt::SignIn { server, error } => {
                call.note(|r| r.not_run("sign-in needed"));
                self.sign_in(&server, &error, qualified, arguments, call)
                    .await
            }
        }
    }

    /// Looks the tool up, checks the caller's profile and the arguments, gets the call
    /// approved where a rule says so, and calls the tool's server.
    async fn attempt(
        &self,
        qualified: &str,
        arguments: Option<Map<String, Value>>,
        call: &Call<'_>,
    ) -> Result<Attempt, McpError> {
        let mut catalog = self.gateway.catalog();
        if let Some(entry) = catalog.get(qualified)
            && !call.access.permits(entry)
        {
            call.note(|r| {
                r.decided(CallDecision::Denied)
                    .not_run("not in the caller's profile")
            });
            return Err(McpError::invalid_params(
                call.access.unknown_tool_message(&catalog, qualified),
                None,
            ));
        }
        if catalog.get(qualified).is_none() {
            // The tools of an OAuth server not signed in to were never listed: try it now, and
            // if it still wants a sign-in, hand one out rather than say "unknown tool".
            let Some(shared) = self
                .oauth_server_without_tools(&catalog, qualified)
                .filter(|server| call.access.permits_server(server.name()))
            else {
                return Err(McpError::invalid_params(
                    call.access.unknown_tool_message(&catalog, qualified),
                    None,
                ));
            };
            // Listed by the caller's own session: their first listing fills the catalog.
            let server = match self.upstream_for(shared.name(), call) {
                Ok(server) => server.unwrap_or(shared),
                Err(error) => {
                    call.note(|r| r.upstream_failed(&error));
                    return Ok(Attempt::Done(result::upstream_failure(&error)));
                }
            };
            match server.refresh_tools().await {
                Ok(_) => {
                    self.gateway.refresh_catalog().await;
                    catalog = self.gateway.catalog();
                }
                Err(error) if needs_sign_in(&server, &error) => {
                    return Ok(Attempt::SignIn { server, error });
                }
                Err(error) => {
                    call.note(|r| r.upstream_failed(&error));
                    return Ok(Attempt::Done(result::upstream_failure(&error)));
                }
            }
        }
        let Some(entry) = call.access.get(&catalog, qualified) else {
            if self
                .gateway
                .held_tools()
                .iter()
                .any(|held| held.qualified == qualified)
            {
                call.note(|r| {
                    r.decided(CallDecision::Held)
                        .not_run("definition changed; held until approved")
                });
            }
            return Err(McpError::invalid_params(
                call.access.unknown_tool_message(&catalog, qualified),
                None,
            ));
        };
        let server = match self.upstream_for(&entry.server, call) {
            Ok(Some(server)) => server,
            Ok(None) => {
                return Ok(Attempt::Done(result::tool_error(format!(
                    "server '{}' is not configured any more",
                    entry.server
                ))));
            }
            Err(error) => {
                call.note(|r| r.upstream_failed(&error));
                return Ok(Attempt::Done(result::upstream_failure(&error)));
            }
        };
        // Invalid arguments come back as a tool error the model can read and correct
        // (SEP-1303), before anything reaches the upstream.
        match catalog.validate_arguments(qualified, arguments.as_ref()) {
            Ok(catalog::Validation::Unvalidated {
                reason,
                first: true,
            }) => {
                tracing::warn!(tool = %qualified, %reason, "input schema unusable; forwarding its calls unvalidated");
            }
            Ok(_) => {}
            Err(errors) => {
                call.note(|r| r.not_run("invalid arguments"));
                return Ok(Attempt::Done(result::tool_error(format!(
                    "invalid arguments for '{qualified}' (nothing was sent to the server):\n{errors}"
                ))));
            }
        }
        let upstream_name = entry.upstream_name.clone();
        let server_name = entry.server.clone();
        let target = Target {
            qualified: entry.qualified.clone(),
            server: entry.server.clone(),
            annotations: entry.annotations().cloned(),
        };
        let original = arguments.clone();
        let arguments = match self.gate(call, &target, arguments).await {
            Gate::Proceed(arguments) => arguments,
            Gate::Stop(result) => return Ok(Attempt::Done(result)),
            Gate::Ask(input) => return Ok(Attempt::Input(input)),
        };
        // An approver's replacement arguments are checked like the caller's were.
        if arguments != original
            && let Err(errors) = catalog.validate_arguments(qualified, arguments.as_ref())
        {
            call.note(|r| r.not_run("approved arguments invalid"));
            return Ok(Attempt::Done(result::tool_error(format!(
                "the approved arguments for '{qualified}' are invalid (nothing was sent to the server):\n{errors}"
            ))));
        }
        drop(catalog);
        let relayed = relay::call(
            &self.gateway,
            &server,
            &upstream_name,
            arguments,
            &call.caller,
            &call.audit,
        )
        .await;
        match relayed {
            relay::Relayed::Done(Ok(response)) => {
                let result = result::from_upstream(
                    &server_name,
                    response,
                    &self.gateway.config().policy.limits,
                );
                call.note(|r| r.answered(&result));
                Ok(Attempt::Done(result))
            }
            relay::Relayed::Input(input) => Ok(Attempt::Input(input)),
            relay::Relayed::Result(result) => {
                call.note(|r| r.answered(&result));
                Ok(Attempt::Done(result))
            }
            relay::Relayed::Done(Err(error)) if needs_sign_in(&server, &error) => {
                tracing::info!(server = %server_name, tool = %upstream_name, "tool call needs a sign-in");
                Ok(Attempt::SignIn { server, error })
            }
            relay::Relayed::Done(Err(error)) => {
                tracing::warn!(server = %server_name, tool = %upstream_name, %error, "tool call failed");
                call.note(|r| r.upstream_failed(&error));
                match error {
                    UpstreamError::Rpc {
                        code,
                        message,
                        data,
                        ..
                    } if call.direct.load(std::sync::atomic::Ordering::Relaxed) => Ok(
                        Attempt::Failed(McpError::new(rmcp::model::ErrorCode(code), message, data)),
                    ),
                    error => Ok(Attempt::Done(result::upstream_failure(&error))),
                }
            }
        }
    }

    /// Server `name` as the caller calls it: for an OAuth server, the caller's own session with
    /// the caller's tokens (see `upstream::Upstreams::for_principal`); else the shared one.
    fn upstream_for(
        &self,
        name: &str,
        call: &Call<'_>,
    ) -> Result<Option<Arc<Server>>, UpstreamError> {
        self.gateway
            .upstreams()
            .for_principal(name, &call.access.principal.id())
    }

    /// The server behind `qualified` (`server__tool`) when it is configured for OAuth and none
    /// of its tools is in `catalog`: never listed (no sign-in yet), or listed a moment ago and
    /// not yet published.
    fn oauth_server_without_tools(
        &self,
        catalog: &catalog::Catalog,
        qualified: &str,
    ) -> Option<Arc<Server>> {
        let (name, _) = qualified.split_once(catalog::naming::SEPARATOR)?;
        let server = self.gateway.upstreams().get(name)?;
        let oauth = matches!(server.config().auth, config::Auth::OAuth(_));
        let listed = catalog.tools().iter().any(|tool| tool.server == name);
        (oauth && !listed).then(|| server.clone())
    }

    /// Hands the user a sign-in to `server` and, where the client allows, waits for it and runs
    /// the call.
    async fn sign_in(
        &self,
        server: &Arc<Server>,
        error: &UpstreamError,
        qualified: &str,
        arguments: Option<Map<String, Value>>,
        call: &Call<'_>,
    ) -> Result<CallToolResponse, McpError> {
        let handoff = &call.handoff;
        let name = server.name();
        let principal = &call.access.principal;
        let complete = |result| Ok(CallToolResponse::Complete(result));
        if !self.logins.available() {
            // No listener for the browser to come back to: whatever the client could take,
            // the server's own failure says what to run (`mcpgw auth login`, which signs in
            // the local user); another principal can only ask the operator.
            if *principal == Principal::Local {
                return complete(result::upstream_failure(error));
            }
            return complete(result::tool_error(format!(
                "tool call failed: {}; this gateway has no sign-in endpoint to send you to (ask its operator)",
                failure(error, name, principal)
            )));
        }
        let (peer, ct) = match handoff {
            Handoff::Text => return complete(self.sign_in_text(server, error, principal).await),
            Handoff::Elicit { peer, ct } => (peer, ct),
            Handoff::InputRequired { .. } => {
                let serial = self.logins.watch(name, principal).borrow().serial;
                let started = match self.logins.begin(&self.gateway, name, principal).await {
                    Ok(started) => started,
                    Err(why) => {
                        return complete(not_started(&failure(error, name, principal), &why));
                    }
                };
                let request = InputRequest::Elicitation(ElicitRequest::new(
                    ElicitRequestParams::UrlElicitationParams {
                        meta: None,
                        message: sign_in_message(name, qualified),
                        url: started.authorization_url,
                        elicitation_id: elicitation_id(name, serial),
                    },
                ));
                return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                    Some(BTreeMap::from([(login::SIGNIN_INPUT.to_owned(), request)])),
                    Some(login::request_state(name, serial)),
                )));
            }
        };

        let mut finished = self.logins.watch(name, principal);
        let serial = finished.borrow().serial;
        let started = match self.logins.begin(&self.gateway, name, principal).await {
            Ok(started) => started,
            Err(why) => return complete(not_started(&failure(error, name, principal), &why)),
        };
        let url = match url::Url::parse(&started.authorization_url) {
            Ok(url) => url,
            Err(_) => {
                return complete(open_this(
                    &failure(error, name, principal),
                    name,
                    &started.authorization_url,
                ));
            }
        };
        let remaining = started.deadline.saturating_duration_since(Instant::now());
        let asking = peer.elicit_url_with_timeout(
            sign_in_message(name, qualified),
            url,
            elicitation_id(name, serial),
            Some(remaining),
        );
        let answer = tokio::select! {
            answer = asking => answer,
            () = ct.cancelled() => return complete(not_signed_in(name, Waited::Cancelled)),
        };
        match answer {
            Ok(ElicitationAction::Accept) => {}
            Ok(action) => return complete(refused(name, &action)),
            Err(why) => {
                tracing::warn!(server = name, error = %why, "the client did not take the sign-in elicitation");
                return complete(open_this(
                    &failure(error, name, principal),
                    name,
                    &started.authorization_url,
                ));
            }
        }
        match login::wait_for_sign_in(&mut finished, serial, started.deadline, ct).await {
            Waited::SignedIn => match self.attempt(qualified, arguments, call).await? {
                Attempt::Done(result) => complete(result),
                Attempt::Failed(error) => Err(error),
                Attempt::Input(input) => Ok(CallToolResponse::InputRequired(input)),
                Attempt::SignIn { server, error } => {
                    complete(self.sign_in_text(&server, &error, principal).await)
                }
            },
            other => complete(not_signed_in(name, other)),
        }
    }

    /// The retry of a call that asked a 2026-07-28 client for a sign-in: waits for the sign-in
    /// it accepted. `None` lets the call go ahead (signed in, or a `requestState` that is not
    /// ours, or not about this tool's server: then the call runs as if new).
    async fn settle_retry(
        &self,
        qualified: &str,
        retry: &Retry,
        ct: &CancellationToken,
        principal: &Principal,
    ) -> Option<CallToolResult> {
        let (name, serial) = login::parse_request_state(&retry.request_state)?;
        let tool_server = server_of(&self.gateway.catalog(), qualified)?;
        if tool_server != name {
            return None;
        }
        match retry.answer.as_ref()? {
            ElicitationAction::Accept => {}
            action => return Some(refused(name, action)),
        }
        let mut finished = self.logins.watch(name, principal);
        let deadline = Instant::now() + LOGIN_TTL;
        match login::wait_for_sign_in(&mut finished, serial, deadline, ct).await {
            Waited::SignedIn => None,
            other => Some(not_signed_in(name, other)),
        }
    }

    /// The tool error a client that cannot take an elicitation gets: the server's failure and,
    /// where the gateway can take the browser's return, where to sign in. The local user gets
    /// a link that starts the sign-in when opened; anyone else the authorization URL of a
    /// sign-in started now for them, since a browser sends no client key and so could not
    /// open `/oauth/start` as them.
    async fn sign_in_text(
        &self,
        server: &Server,
        error: &UpstreamError,
        principal: &Principal,
    ) -> CallToolResult {
        let Some(link) = self.logins.start_link(self.gateway.config(), server.name()) else {
            return result::upstream_failure(error);
        };
        if *principal == Principal::Local {
            return open_this(
                &failure(error, server.name(), principal),
                server.name(),
                &link,
            );
        }
        match self
            .logins
            .begin(&self.gateway, server.name(), principal)
            .await
        {
            Ok(started) => open_this(
                &failure(error, server.name(), principal),
                server.name(),
                &started.authorization_url,
            ),
            Err(why) => not_started(&failure(error, server.name(), principal), &why),
        }
    }

    async fn call_meta(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        call: &Call<'_>,
    ) -> Result<CallToolResponse, McpError> {
        let catalog = self.gateway.catalog();
        let access = &call.access;
        let complete = |result| Ok(CallToolResponse::Complete(result));
        match name {
            meta::SEARCH_TOOLS => {
                let known: Vec<&str> = catalog
                    .servers()
                    .into_iter()
                    .filter(|server| access.permits_server(server))
                    .collect();
                let mut search = match meta::parse_search(&known, &arguments) {
                    Ok(search) => search,
                    Err(error) => return complete(error),
                };
                search.filter.tools = access.allowed_tools();
                let include = match meta::parse_include(&arguments) {
                    Ok(include) => include,
                    Err(error) => return complete(error),
                };
                if include.resources || include.prompts {
                    let found = crate::mcp::surface::search(
                        &self.gateway,
                        access,
                        &known,
                        &search,
                        include,
                    );
                    return complete(found.await);
                }
                let mut found = self.gateway.search(&search).await;
                found
                    .starting
                    .retain(|server| access.permits_server(server));
                complete(meta::render_search(&known, &search, &found))
            }
            meta::GET_TOOL_DETAILS => {
                let target = arguments.get("name").and_then(Value::as_str);
                match target {
                    Some(target) if access.get(&catalog, target).is_none() => complete(
                        result::tool_error(access.unknown_tool_message(&catalog, target)),
                    ),
                    // Found and permitted, or no name (`details` says what is missing).
                    _ => complete(meta::details(&catalog, &arguments)),
                }
            }
            meta::CALL_TOOL => {
                let Some(target) = arguments.get("name").and_then(Value::as_str) else {
                    return complete(result::tool_error("call_tool needs a 'name' string"));
                };
                let inner = match arguments.get("arguments") {
                    None | Some(Value::Null) => None,
                    Some(Value::Object(map)) => Some(map.clone()),
                    Some(_) => {
                        return Err(McpError::invalid_params(
                            "call_tool: 'arguments' must be a JSON object",
                            None,
                        ));
                    }
                };
                let hidden = match catalog.get(target) {
                    Some(entry) => !access.permits(entry),
                    None => self
                        .oauth_server_without_tools(&catalog, target)
                        .is_none_or(|server| !access.permits_server(server.name())),
                };
                if hidden {
                    if catalog.get(target).is_some() {
                        self.gateway.audit(
                            AuditRecord::begin(
                                &access.principal,
                                &catalog
                                    .get(target)
                                    .map(|e| e.server.clone())
                                    .unwrap_or_default(),
                                target,
                                inner.as_ref(),
                            )
                            .decided(CallDecision::Denied)
                            .not_run("not in the caller's profile"),
                        );
                    }
                    return complete(result::tool_error(
                        access.unknown_tool_message(&catalog, target),
                    ));
                }
                drop(catalog);
                self.call_catalog(target, inner, call).await
            }
            _ => unreachable_meta(name),
        }
    }

    /// The approval step of a call: lets it through, stops it, or asks the user (see
    /// [`approval`]).
    async fn gate(
        &self,
        call: &Call<'_>,
        target: &Target,
        arguments: Option<Map<String, Value>>,
    ) -> Gate {
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
        let tool = &target.qualified;
        let Some(store) = self.gateway.store() else {
            call.note(|r| r.not_run("approval needed; no database"));
            return Gate::Stop(result::tool_error(format!(
                "'{tool}' needs approval, and approvals need the database, which could not be opened; the tool was not run"
            )));
        };
        let principal = call.access.principal.id();
        if let Asker::InputRequired { retry: Some(retry) } = &call.ask
            && let Ok(Some(pending)) = store.approval(&retry.id).await
            && pending.principal == principal
            && &pending.tool == tool
        {
            return self
                .settle_approval_retry(call, target, pending, retry)
                .await;
        }
        let shown = arguments.clone().unwrap_or_default();
        let pending = match store
            .create_approval(store::NewApproval {
                principal: &principal,
                server: &target.server,
                tool,
                arguments: &shown,
                timeout: policy.timeout,
            })
            .await
        {
            Ok(pending) => pending,
            Err(error) => {
                tracing::error!(%error, tool = %tool, "cannot record an approval");
                call.note(|r| r.not_run("approval could not be recorded"));
                return Gate::Stop(result::tool_error(format!(
                    "'{tool}' needs approval, which could not be recorded ({error}); the tool was not run"
                )));
            }
        };
        let why = approval::reason(policy, tool);
        tracing::info!(
            approval = %pending.id,
            tool = %tool,
            principal = %principal,
            "tool call waits for approval (mcpgw approvals approve {})",
            pending.id
        );
        match &call.ask {
            Asker::InputRequired { .. } => {
                if let Some(input) = approval_input(&pending, &why) {
                    return Gate::Ask(input);
                }
            }
            Asker::Elicit { peer } => {
                if let Some((message, schema)) = approval::form(&pending, &why) {
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
                                return self.record_answer(call, target, &pending, answer).await;
                            }
                            Err(error) => tracing::warn!(
                                approval = %pending.id,
                                %error,
                                "the client did not take the approval form; waiting for a decision out of band"
                            ),
                        },
                        waited = waiting => return self.after_wait(call, target, &pending, waited),
                    }
                }
            }
            Asker::Wait => {}
        }
        let waited = self
            .gateway
            .wait_for_decision(store, &pending.id, pending.expires_at, &call.ct)
            .await;
        self.after_wait(call, target, &pending, waited)
    }

    /// The retry of a 2026-07-28 call that asked for approval `pending`.
    async fn settle_approval_retry(
        &self,
        call: &Call<'_>,
        target: &Target,
        pending: store::Approval,
        retry: &ApprovalRetry,
    ) -> Gate {
        match pending.status {
            store::ApprovalStatus::Pending => match &retry.answer {
                Some(answer) => {
                    let answer = approval::read_answer(answer, &pending.arguments);
                    self.record_answer(call, target, &pending, answer).await
                }
                // No readable answer: ask again, for the same approval.
                None => {
                    let why =
                        approval::reason(&self.gateway.config().policy.approval, &target.qualified);
                    match approval_input(&pending, &why) {
                        Some(input) => Gate::Ask(input),
                        None => Gate::Stop(result::tool_error(format!(
                            "'{}' needs approval {}; approve it with `mcpgw approvals approve {}` and call again",
                            target.qualified, pending.id, pending.id
                        ))),
                    }
                }
            },
            _ => self.outcome(call, target, pending),
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
        match self
            .gateway
            .decide_approval(&pending.id, verdict, &call.access.principal)
            .await
        {
            Ok(decided) => self.outcome(call, target, decided),
            Err(DecisionError::Decide(store::DecideError::AlreadyDecided { .. })) => {
                match self.gateway.store().map(|s| s.approval(&pending.id)) {
                    Some(read) => match read.await {
                        Ok(Some(decided)) => self.outcome(call, target, decided),
                        _ => Gate::Stop(result::tool_error(format!(
                            "approval {} could not be read back; the tool was not run",
                            pending.id
                        ))),
                    },
                    None => Gate::Stop(result::tool_error("the database went away")),
                }
            }
            Err(error) => Gate::Stop(result::tool_error(format!(
                "{error}; '{}' was not run",
                target.qualified
            ))),
        }
    }

    fn after_wait(
        &self,
        call: &Call<'_>,
        target: &Target,
        pending: &store::Approval,
        waited: approval::Waited,
    ) -> Gate {
        let tool = &target.qualified;
        match waited {
            approval::Waited::Decided(decided) => self.outcome(call, target, *decided),
            approval::Waited::TimedOut => {
                call.note(|r| {
                    r.decided(CallDecision::TimedOut)
                        .not_run("no approval decision in time")
                });
                let timeout = self.gateway.config().policy.approval.timeout;
                Gate::Stop(result::tool_error(format!(
                    "'{tool}' needs approval and no decision came within {} (approval {} expired), so the tool was not run. Call it again; while it waits, an operator approves it with `mcpgw approvals approve ID` (IDs: `mcpgw approvals list`)",
                    approval::duration_words(timeout),
                    pending.id
                )))
            }
            approval::Waited::Cancelled => {
                call.note(|r| r.not_run("cancelled while waiting for approval"));
                Gate::Stop(result::tool_error(format!(
                    "the call to '{tool}' was cancelled while waiting for approval {}; the tool was not run",
                    pending.id
                )))
            }
        }
    }

    /// Acts on a decided approval.
    fn outcome(&self, call: &Call<'_>, target: &Target, decided: store::Approval) -> Gate {
        let tool = &target.qualified;
        let by = decided.decided_by.as_deref().unwrap_or("an approver");
        match decided.status {
            store::ApprovalStatus::Approved => {
                call.note(|r| {
                    r.decided(CallDecision::Approved {
                        approver: by.to_owned(),
                    })
                });
                let arguments = decided.effective_arguments().clone();
                *lock(&call.approved) = Some(arguments.clone());
                Gate::Proceed(Some(arguments))
            }
            store::ApprovalStatus::Rejected => {
                call.note(|r| {
                    r.decided(CallDecision::Rejected {
                        approver: decided.decided_by.clone(),
                    })
                    .not_run("rejected")
                });
                Gate::Stop(result::tool_error(format!(
                    "the call to '{tool}' was rejected by {by}{}; the tool was not run",
                    decided
                        .reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )))
            }
            store::ApprovalStatus::Expired => {
                call.note(|r| {
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
}

/// The server a tool name belongs to: its catalog entry's (bare names under `prefix =
/// "when-needed"` included), else the `server` part of a `server__tool` name.
fn server_of(catalog: &catalog::Catalog, name: &str) -> Option<String> {
    match catalog.get(name) {
        Some(entry) => Some(entry.server.clone()),
        None => name
            .split_once(catalog::naming::SEPARATOR)
            .map(|(server, _)| server.to_owned()),
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

/// Whether `error` from `server` is one a sign-in cures: the server is configured for OAuth
/// (mcpgw knows how to sign in to it) and answered 401 without a usable token.
fn needs_sign_in(server: &Server, error: &UpstreamError) -> bool {
    matches!(error, UpstreamError::OAuthRequired { .. })
        && matches!(server.config().auth, config::Auth::OAuth(_))
}

/// What the user is shown with the sign-in URL.
fn sign_in_message(server: &str, tool: &str) -> String {
    format!(
        "mcpgw needs you to sign in to the MCP server '{server}' to run {tool}. Open the link to \
         authorise mcpgw for '{server}'; the call goes on once you are signed in."
    )
}

/// Unique per server and sign-in round (2025-11-25 requires one; 2026-07-28 dropped it).
fn elicitation_id(server: &str, serial: u64) -> String {
    format!("mcpgw-signin-{server}-{serial}")
}

/// Why a call needs a sign-in, in words for `principal`: the server's failure for the local
/// user (it names `mcpgw auth login`, which signs the local user in); for anyone else, who
/// cannot run that command for themselves, that the server needs their own sign-in.
fn failure(error: &UpstreamError, server: &str, principal: &Principal) -> String {
    if *principal == Principal::Local {
        error.to_string()
    } else {
        format!("server '{server}' needs you to sign in (OAuth) before mcpgw can call it for you")
    }
}

/// The failure, then the URL to open. For the local user the failure comes first: it also
/// names `mcpgw auth login`, the way that works without this link.
fn open_this(error: &str, server: &str, url: &str) -> CallToolResult {
    result::tool_error(format!(
        "tool call failed: {error}\nOpen this URL to authorise mcpgw for server '{server}':\n{url}\nthen call the tool again."
    ))
}

fn not_started(error: &str, why: &login::LoginError) -> CallToolResult {
    tracing::warn!(%why, "cannot hand out a sign-in");
    result::tool_error(format!(
        "tool call failed: {error}\n(mcpgw could not start the sign-in itself: {why})"
    ))
}

/// The user said no to the sign-in (`decline`), or dismissed it (`cancel`).
fn refused(server: &str, action: &ElicitationAction) -> CallToolResult {
    let what = match action {
        ElicitationAction::Decline => "declined",
        _ => "cancelled",
    };
    result::tool_error(format!(
        "signing in to '{server}' was {what}, so the tool was not called; call it again to be asked again"
    ))
}

fn not_signed_in(server: &str, waited: Waited) -> CallToolResult {
    result::tool_error(match waited {
        Waited::SignedIn => format!("signed in to '{server}'"),
        Waited::Failed(reason) => format!(
            "signing in to '{server}' failed ({reason}), so the tool was not called; call it again to get a new sign-in link"
        ),
        Waited::TimedOut => format!(
            "no sign-in to '{server}' arrived within {} minutes, so the tool was not called; call it again to get a new sign-in link",
            LOGIN_TTL.as_secs() / 60
        ),
        Waited::Cancelled => format!(
            "the call was cancelled while waiting for the sign-in to '{server}'; the tool was not called"
        ),
    })
}

fn unreachable_meta(name: &str) -> Result<CallToolResponse, McpError> {
    Err(McpError::invalid_params(
        format!("unknown tool '{name}'"),
        None,
    ))
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
        if crate::is_modern(&context) {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "logging/setLevel",
                None,
            ));
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
        if crate::is_modern(&context) {
            // The list depends on the caller's profile; listeners hear of changes at once.
            listed.cache_scope = Some(CacheScope::Private);
            listed.ttl_ms = Some(LIST_TTL_MS);
        }
        Ok(listed)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let principal = Principal::of(&context.extensions);
        let call = Call {
            caller: relay::Caller::of(&request, &context, &principal, *lock(&self.log_level)),
            access: self.gateway.access(principal),
            handoff: Handoff::of(&request, &context),
            ask: Asker::of(&request, &context),
            ct: context.ct.clone(),
            approved: Mutex::new(None),
            audit: Mutex::new(None),
            direct: std::sync::atomic::AtomicBool::new(true),
        };
        let name = request.name.as_ref();
        let is_meta_mode = call.access.exposure() == config::Exposure::Search;
        // Every tools/call counts, meta-tools included: searches cost the gateway too.
        if let Err(retry_after) = self.gateway.check_rate(&call.access.principal) {
            tracing::info!(principal = %call.access.principal, tool = name, "rate limited");
            let arguments = request.arguments.as_ref();
            let target = match name {
                meta::CALL_TOOL if is_meta_mode => arguments.and_then(|a| {
                    let tool = a.get("name").and_then(Value::as_str)?;
                    Some((tool, a.get("arguments").and_then(Value::as_object)))
                }),
                meta::SEARCH_TOOLS | meta::GET_TOOL_DETAILS if is_meta_mode => None,
                other => Some((other, arguments)),
            };
            if let Some((tool, arguments)) = target {
                let server = server_of(&self.gateway.catalog(), tool).unwrap_or_default();
                self.gateway.audit(
                    AuditRecord::begin(&call.access.principal, &server, tool, arguments)
                        .decided(CallDecision::RateLimited)
                        .not_run("over the calls-per-minute limit"),
                );
            }
            return Ok(CallToolResponse::Complete(result::rate_limited(
                retry_after,
            )));
        }
        // The retry of a call parked while its upstream waits for this client's answer.
        if let Some(parked) = request
            .request_state
            .as_deref()
            .and_then(|state| state.strip_prefix(relay::RELAY_STATE_PREFIX))
        {
            return relay::resume(&self.gateway, parked, &call.caller).await;
        }
        let is_meta = matches!(
            name,
            meta::SEARCH_TOOLS | meta::GET_TOOL_DETAILS | meta::CALL_TOOL
        );
        if is_meta && is_meta_mode {
            call.direct
                .store(false, std::sync::atomic::Ordering::Relaxed);
            self.call_meta(name, request.arguments.unwrap_or_default(), &call)
                .await
        } else {
            // Qualified names are also callable directly in search mode: clients that cached a
            // name from get_tool_details may call it as a normal tool.
            self.call_catalog(name, request.arguments, &call).await
        }
    }

    /// A legacy session starts listening for list changes (see `changes`).
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let principal = Principal::of(&context.extensions);
        let id = self
            .gateway
            .listeners
            .add_session(&self.gateway, context.peer, principal);
        // A repeated `initialized` replaces the entry rather than leave one behind.
        if let Some(old) = lock(&self.listener).replace(id) {
            self.gateway.listeners.remove(old);
        }
    }

    /// `resources/subscribe` (legacy sessions; 2026-07-28 names resources in
    /// `subscriptions/listen`): `notifications/resources/updated` for this URI from now on.
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let modern = crate::is_modern(&context);
        if modern {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "resources/subscribe: name the resource in subscriptions/listen",
                None,
            ));
        }
        let Some(listener) = *lock(&self.listener) else {
            return Err(McpError::invalid_request(
                "resources/subscribe before notifications/initialized",
                None,
            ));
        };
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
