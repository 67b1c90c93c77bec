//! One `tools/call` of a catalog tool, as a sequence of steps, each in its own file with its
//! own tests:
//!
//! ```text
//! invocation   name and arguments read once (meta-tool or catalog tool; how refusals reach the client)
//! limit        calls per minute, every tools/call counted
//! resolve      name -> catalog tool, the caller's profile checked once
//! record       the audit record begins (one per resolved call)
//! validate     arguments against the input schema
//! approve      an [approval] rule's human decision
//! relay        the upstream call, with progress, cancellation and what the upstream asks
//! shape        the answer as the client receives it
//! record       the audit record is written (Record::finish, one place)
//! ```
//!
//! `front` (the rmcp adapter) reads the invocation, applies the limit and answers the
//! meta-tools; [`Pipeline::run`] does the rest for passthrough names and `call_tool` alike. A
//! 401 from a server configured for OAuth leaves the sequence for a sign-in ([`sign_in`]),
//! which re-enters it at validate once the user is signed in.
//!
//! Why plain functions and not a tower `Service` stack: the steps borrow the call (its access,
//! its handle on the client) and end early with different kinds of answer (a JSON-RPC error
//! for a direct call, a tool error through `call_tool`, an `input_required` for an approval
//! or a sign-in), and a sign-in re-enters the sequence. As a sequence of calls in
//! [`Pipeline::attempt`] every exit is visible in one screen and each step is a function that
//! tests call directly; a `Service` per step would box a future per step per call and move the
//! early exits into response types.
//!
//! JSON-RPC errors at this edge are made in one place, `mcp::errors`.

use std::sync::{Arc, Mutex};

use catalog::{Catalog, ToolEntry};
use ids::{QualifiedName, ServerName};
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolRequestParams, CallToolResponse, CallToolResult, InputRequiredResult},
    service::RequestContext,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use upstream::{Server, UpstreamError};

use crate::{
    Gateway,
    audit::AuditRecord,
    audit::CallDecision,
    mcp::{errors, relay, result},
    oauth::login::Logins,
    policy::access::Access,
};

mod approve;
mod invocation;
mod limit;
mod record;
mod resolve;
mod shape;
mod sign_in;
mod validate;

pub(crate) use approve::Asker;
pub(crate) use invocation::{Invocation, Malformed, ToolCall, Via};
pub(crate) use limit::limit;
pub(crate) use record::Record;
pub(crate) use sign_in::Handoff;

use approve::Gate;
use resolve::{Resolution, resolve};
use shape::{Shaped, shape};
use validate::{Whose, validate};

/// One catalog tool call as it goes through the gateway: who calls, and how to reach them.
pub(crate) struct Call<'a> {
    pub(crate) access: Access<'a>,
    pub(crate) handoff: Handoff,
    pub(crate) ask: Asker,
    pub(crate) ct: CancellationToken,
    /// The client as the upstream call reaches it: progress, cancellation, what the upstream
    /// asks (see [`relay`]).
    pub(crate) caller: relay::Caller,
    /// The arguments a human approved, once approved: a re-attempt (after a sign-in) runs
    /// these without asking again.
    pub(crate) approved: Mutex<Option<Map<String, Value>>>,
    pub(crate) record: Record,
    pub(crate) via: Via,
}

impl<'a> Call<'a> {
    pub(crate) fn new(
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        access: Access<'a>,
        caller: relay::Caller,
        via: Via,
    ) -> Self {
        Call {
            access,
            handoff: Handoff::of(request, context),
            ask: Asker::of(request, context),
            ct: context.ct.clone(),
            caller,
            approved: Mutex::new(None),
            record: Record::default(),
            via,
        }
    }

    /// The answer to a name this caller cannot call (unknown, or outside its profile).
    fn refuse(&self, catalog: &Catalog, name: &str) -> Attempt {
        let message = self.access.unknown_tool_message(catalog, name);
        match self.via {
            Via::Direct => Attempt::Failed(errors::unknown_tool(message)),
            Via::CallTool => Attempt::Done(result::tool_error(message)),
        }
    }
}

/// The tool a call runs, copied out of the catalog snapshot.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) qualified: QualifiedName,
    pub(crate) server: ServerName,
    pub(crate) upstream_name: String,
    pub(crate) annotations: Option<Value>,
}

impl Target {
    fn of(entry: &ToolEntry) -> Target {
        Target {
            qualified: entry.qualified.clone(),
            server: entry.server.clone(),
            upstream_name: entry.upstream_name.clone(),
            annotations: entry.annotations().cloned(),
        }
    }
}

/// What resolution found to run.
pub(crate) enum Found {
    Listed(Target),
    /// An OAuth server whose tools are not listed yet (see [`Resolution::Unlisted`]).
    Unlisted(ServerName),
}

impl Found {
    fn server(&self) -> &str {
        match self {
            Found::Listed(target) => &target.server,
            Found::Unlisted(server) => server,
        }
    }
}

/// One try at running a catalog tool.
pub(crate) enum Attempt {
    Done(CallToolResult),
    /// A JSON-RPC error, for a client that called the tool directly.
    Failed(McpError),
    /// The caller must answer (approve the call, or what the upstream asks) and retry.
    Input(InputRequiredResult),
    /// The tool's server is configured for OAuth and has no usable token.
    SignIn {
        server: Arc<Server>,
        error: UpstreamError,
    },
}

impl Attempt {
    /// The response for an attempt that needs no sign-in.
    fn respond(self) -> Result<CallToolResponse, McpError> {
        match self {
            Attempt::Done(result) => Ok(CallToolResponse::Complete(result)),
            Attempt::Failed(error) => Err(error),
            Attempt::Input(input) => Ok(CallToolResponse::InputRequired(input)),
            Attempt::SignIn { error, .. } => {
                Ok(CallToolResponse::Complete(result::upstream_failure(&error)))
            }
        }
    }
}

/// The steps after the limit, for one gateway and sign-in endpoint.
pub(crate) struct Pipeline<'a> {
    pub(crate) gateway: &'a Arc<Gateway>,
    pub(crate) logins: &'a Logins,
}

impl Pipeline<'_> {
    /// Runs `tool` for `call`, from resolution to the audit record.
    pub(crate) async fn run(
        &self,
        tool: ToolCall,
        call: &Call<'_>,
    ) -> Result<CallToolResponse, McpError> {
        let catalog = self.gateway.catalog();
        let found = match resolve(&catalog, &tool.name, &CallerRules::of(self.gateway, call)) {
            Resolution::Tool(entry) => Found::Listed(Target::of(entry)),
            Resolution::Unlisted { server } => Found::Unlisted(server),
            Resolution::Hidden(entry) => {
                self.audit_refusal(call, &tool, &entry.server, CallDecision::Denied);
                return call.refuse(&catalog, &tool.name).respond();
            }
            Resolution::Held { server } => {
                self.audit_refusal(call, &tool, &server, CallDecision::Held);
                return call.refuse(&catalog, &tool.name).respond();
            }
            Resolution::Unknown => return call.refuse(&catalog, &tool.name).respond(),
        };
        drop(catalog);
        if let Some(trace) = call.caller.trace() {
            trace.server(found.server());
            trace.tool(&tool.name);
        }
        call.record.begin(AuditRecord::begin(
            &call.access.principal,
            found.server(),
            &tool.name,
            tool.arguments.as_ref(),
        ));
        let response = self.run_found(&tool, &found, call).await;
        // The record is read only for a traced call: untraced, this costs nothing.
        if let Some(trace) = call.caller.trace()
            && let Some(decision) = call.record.decision()
        {
            trace.decision(&decision);
        }
        call.record.finish(self.gateway, &response);
        response
    }

    async fn run_found(
        &self,
        tool: &ToolCall,
        found: &Found,
        call: &Call<'_>,
    ) -> Result<CallToolResponse, McpError> {
        if let Some(settled) = self.settle_sign_in(found.server(), call).await {
            call.record.note(|r| r.not_run("sign-in not completed"));
            return Ok(CallToolResponse::Complete(settled));
        }
        match self.attempt(tool, found, call).await? {
            Attempt::SignIn { server, error } => {
                call.record.note(|r| r.not_run("sign-in needed"));
                Box::pin(self.sign_in(&server, &error, tool, found, call)).await
            }
            attempt => attempt.respond(),
        }
    }

    /// Validate, approve, relay, shape: one try at running the call.
    async fn attempt(
        &self,
        tool: &ToolCall,
        found: &Found,
        call: &Call<'_>,
    ) -> Result<Attempt, McpError> {
        let (catalog, target) = match found {
            Found::Listed(target) => (self.gateway.catalog(), target.clone()),
            Found::Unlisted(server) => {
                match Box::pin(self.list_now(server, &tool.name, call)).await {
                    Ok(listed) => listed,
                    Err(attempt) => return Ok(attempt),
                }
            }
        };
        let server = match self.upstream_for(&target.server, call) {
            Ok(server) => server,
            Err(attempt) => return Ok(attempt),
        };
        let given = tool.arguments.as_ref();
        if let Err(message) = validate(&catalog, &tool.name, given, Whose::Caller) {
            call.record.note(|r| r.not_run("invalid arguments"));
            return Ok(Attempt::Done(result::tool_error(message)));
        }
        let arguments = match self.approve(call, &target, tool.arguments.clone()).await {
            Gate::Proceed(arguments) => arguments,
            Gate::Stop(result) => return Ok(Attempt::Done(result)),
            Gate::Ask(input) => return Ok(Attempt::Input(input)),
        };
        // An approver's replacement arguments are checked like the caller's were.
        if arguments.as_ref() != given
            && let Err(message) =
                validate(&catalog, &tool.name, arguments.as_ref(), Whose::Approver)
        {
            call.record
                .note(|r| r.not_run("approved arguments invalid"));
            return Ok(Attempt::Done(result::tool_error(message)));
        }
        drop(catalog);
        let relayed = relay::call(
            self.gateway,
            &server,
            &target.upstream_name,
            arguments,
            &call.caller,
            call.record.slot(),
        )
        .await;
        let limits = &self.gateway.config().policy.limits;
        let oauth = sign_in::is_oauth(&server);
        let (name, upstream) = (&target.server, &target.upstream_name);
        Ok(
            match shape(
                relayed,
                name,
                upstream,
                oauth,
                call.via,
                limits,
                &call.record,
            ) {
                Shaped::Done(result) => Attempt::Done(result),
                Shaped::Failed(error) => Attempt::Failed(error),
                Shaped::Input(input) => Attempt::Input(input),
                Shaped::SignIn(error) => Attempt::SignIn { server, error },
            },
        )
    }

    /// Lists the tools of OAuth server `server` now (with the caller's own session and
    /// tokens), then resolves `name` among them. `Err` is how the attempt ends instead.
    async fn list_now(
        &self,
        server: &str,
        name: &str,
        call: &Call<'_>,
    ) -> Result<(Arc<Catalog>, Target), Attempt> {
        let upstream = self.upstream_for(server, call)?;
        match upstream.refresh_tools().await {
            // Listed by the caller's own session: their first listing fills the catalog.
            Ok(_) => self.gateway.refresh_catalog().await,
            Err(error) if sign_in::needs_sign_in(&upstream, &error) => {
                return Err(Attempt::SignIn {
                    server: upstream,
                    error,
                });
            }
            Err(error) => {
                call.record.note(|r| r.upstream_failed(&error));
                return Err(Attempt::Done(result::upstream_failure(&error)));
            }
        }
        let catalog = self.gateway.catalog();
        let rules = CallerRules::of(self.gateway, call);
        let target = match resolve(&catalog, name, &rules) {
            Resolution::Tool(entry) => Target::of(entry),
            _ => {
                // Still no such tool: no call to record.
                call.record.discard();
                return Err(call.refuse(&catalog, name));
            }
        };
        Ok((catalog, target))
    }

    /// Server `name` as the caller calls it: for an OAuth server, the caller's own session with
    /// the caller's tokens (see `upstream::Upstreams::for_principal`); else the shared one.
    fn upstream_for(&self, name: &str, call: &Call<'_>) -> Result<Arc<Server>, Attempt> {
        let principal = call.access.principal.id();
        match self.gateway.upstreams().for_principal(name, &principal) {
            Ok(Some(server)) => Ok(server),
            Ok(None) => Err(Attempt::Done(result::tool_error(format!(
                "server '{name}' is not configured any more"
            )))),
            Err(error) => {
                call.record.note(|r| r.upstream_failed(&error));
                Err(Attempt::Done(result::upstream_failure(&error)))
            }
        }
    }

    /// Records a call refused at resolution (the refusal itself says "unknown tool").
    fn audit_refusal(&self, call: &Call<'_>, tool: &ToolCall, server: &str, why: CallDecision) {
        let reason = match why {
            CallDecision::Held => "definition changed; held until approved",
            _ => "not in the caller's profile",
        };
        if let Some(trace) = call.caller.trace() {
            trace.server(server);
            trace.decision(&why);
        }
        self.gateway.audit(
            AuditRecord::begin(
                &call.access.principal,
                server,
                &tool.name,
                tool.arguments.as_ref(),
            )
            .decided(why)
            .not_run(reason),
        );
    }
}

/// Resolution's rules for one caller: its profile, the held tools, the OAuth servers.
struct CallerRules<'a> {
    gateway: &'a Gateway,
    access: &'a Access<'a>,
}

impl<'a> CallerRules<'a> {
    fn of(gateway: &'a Gateway, call: &'a Call<'a>) -> Self {
        CallerRules {
            gateway,
            access: &call.access,
        }
    }
}

impl resolve::Rules for CallerRules<'_> {
    fn permits(&self, entry: &ToolEntry) -> bool {
        self.access.permits(entry)
    }

    fn permits_server(&self, server: &str) -> bool {
        self.access.permits_server(server)
    }

    fn held(&self, name: &str) -> Option<ServerName> {
        // A held tool's annotations are not trusted yet: a profile that needs a hint to admit
        // it does not see it.
        let profile = self.access.profile.as_ref();
        self.gateway
            .held_tools()
            .iter()
            .find(|tool| {
                tool.qualified == name
                    && profile.is_none_or(|p| p.permits(&tool.server, &tool.qualified, None, None))
            })
            .map(|tool| tool.server.clone())
    }

    fn is_oauth(&self, server: &str) -> bool {
        self.gateway
            .upstreams()
            .get(server)
            .is_some_and(|server| sign_in::is_oauth(&server))
    }
}

/// The server a tool name belongs to: its catalog entry's (bare names under `prefix =
/// "when-needed"` included), else the `server` part of a `server__tool` name, else empty.
pub(crate) fn server_of(catalog: &Catalog, name: &str) -> ServerName {
    match catalog.get(name) {
        Some(entry) => entry.server.clone(),
        None => name
            .split_once(catalog::naming::SEPARATOR)
            .map(|(server, _)| ServerName::from(server))
            .unwrap_or_default(),
    }
}
