//! One tool call's traffic between the client and its upstream, beyond request and result:
//! progress, cancellation, and what the upstream asks of the user.
//!
//! - **Progress.** When the client's `tools/call` carries a progress token, the upstream's
//!   `notifications/progress` for the upstream request (sent with a token of rmcp's own) are
//!   relayed with the client's token, in order.
//! - **Log messages.** The upstream's `notifications/message` during the call reach a client
//!   that asked for logs (a legacy session's `logging/setLevel`, a 2026-07-28 request's
//!   `_meta` log level) at that level or more severe, with `logger` as `SERVER` or
//!   `SERVER/LOGGER`, so the client knows which server spoke. A client that asked for none
//!   gets none. The level also goes upstream in the call's `_meta` (a 2026-07-28 server logs
//!   only then).
//! - **Cancellation.** A client's `notifications/cancelled` (or, for a 2026-07-28 HTTP client,
//!   closing the request's stream) cancels the upstream request; so does the gateway's timeout.
//! - **Requests from a legacy upstream** (`elicitation/create`, `sampling/createMessage`): a
//!   2025-11-25 client gets the same request on its session and its answer goes back. A
//!   2026-07-28 client cannot take server requests: it gets an `input_required` result with the
//!   request and a `requestState` (`mcpgw-relay:ID`) naming the upstream call, which keeps
//!   running, parked here; its retry carries the answer, which goes back to the upstream, and
//!   the call goes on. A parked call nobody answers within [`PARK_TTL`] is cancelled upstream.
//! - **`input_required` from a 2026-07-28 upstream**: a 2026-07-28 client gets it as is, with
//!   the upstream's `requestState` wrapped (`mcpgw-upstream:SERVER[:STATE]`) so its retry
//!   reaches that upstream with the answers; a legacy client is asked each input request on its
//!   session, and the gateway retries the upstream with the answers (at most
//!   [`MAX_INPUT_ROUNDS`] rounds).
//!
//! A client that lacks what a request needs (elicitation form or URL mode, sampling) is never
//! asked: a legacy upstream gets `-32601` saying the calling client does not support it, an
//! `input_required` from a modern upstream becomes a tool error.

// Sampling and roots are deprecated by SEP-2577 but still part of every revision relayed.
#![allow(deprecated)]

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hasher},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities,
        CreateMessageRequest, CreateMessageResult, ElicitRequest, ElicitRequestParams,
        ElicitResult, InputRequest, InputRequiredResult, InputResponses, ListRootsResult,
        LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
    },
    service::RequestContext,
};
use serde_json::{Map, Value};
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;
use upstream::{Answer, Ask, Asked, CallOptions, Progress, Server, UpstreamError};

use crate::{
    Gateway,
    audit::AuditRecord,
    mcp::{errors, result},
    principal::Principal,
    sync::lock,
    telemetry::{Called, Outcome, RequestSpan, UpstreamSpan},
};

/// `requestState` of a call parked while its 2026-07-28 client answers the upstream.
pub(crate) const RELAY_STATE_PREFIX: &str = "mcpgw-relay:";
/// `requestState` wrapping a 2026-07-28 upstream's own.
const UPSTREAM_STATE_PREFIX: &str = "mcpgw-upstream:";
/// How long a parked call waits for its client's retry.
pub(crate) const PARK_TTL: Duration = Duration::from_secs(10 * 60);
/// Most `input_required` rounds the gateway drives for a legacy client.
pub(crate) const MAX_INPUT_ROUNDS: usize = 10;
/// Progress notifications buffered per call; beyond, they are dropped rather than stall.
const PROGRESS_BUFFER: usize = 64;
/// Log messages buffered per call; beyond, they are dropped rather than stall.
const LOG_BUFFER: usize = 64;

/// The client behind one `tools/call`, and how to reach it.
pub(crate) struct Caller {
    peer: Peer<RoleServer>,
    capabilities: ClientCapabilities,
    modern: bool,
    progress_token: Option<ProgressToken>,
    /// The least severe log messages this client wants; `None`: no log messages at all.
    log_level: Option<LoggingLevel>,
    ct: CancellationToken,
    /// The tool name as the client called it (`call_tool` in search mode) and who called: a
    /// parked call is resumed only by the same principal calling the same name.
    name: String,
    principal: ids::PrincipalId,
    request_state: Option<String>,
    input_responses: Option<InputResponses>,
    /// The request's span, when the gateway traces: each upstream call gets a child of it.
    trace: Option<RequestSpan>,
}

impl Caller {
    /// The caller of `request`; `session_level` is what a legacy session set with
    /// `logging/setLevel` (a 2026-07-28 request names its own level in `_meta`).
    pub(crate) fn of(
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        principal: &Principal,
        session_level: Option<LoggingLevel>,
    ) -> Self {
        let modern = crate::mcp::is_modern(context);
        Self {
            peer: context.peer.clone(),
            capabilities: context.client_capabilities().unwrap_or_default(),
            modern,
            progress_token: context.meta.get_progress_token(),
            log_level: if modern {
                context.meta.log_level()
            } else {
                session_level
            },
            ct: context.ct.clone(),
            name: request.name.to_string(),
            principal: principal.id(),
            request_state: request.request_state.clone(),
            input_responses: request.input_responses.clone(),
            trace: RequestSpan::of(&context.extensions),
        }
    }

    /// The span of the request this call serves, when the gateway traces.
    pub(crate) fn trace(&self) -> Option<&RequestSpan> {
        self.trace.as_ref()
    }

    /// A caller that takes nothing but the result: no progress token, no log messages, and
    /// nothing an upstream may ask can be answered by it (no elicitation, no sampling). Its
    /// call needs none of [`Running`]'s channels and runs in the caller's own task.
    fn plain(&self) -> bool {
        self.progress_token.is_none()
            && self.log_level.is_none()
            && self.capabilities.elicitation.is_none()
            && self.capabilities.sampling.is_none()
    }

    /// Whether this client declared what `ask` needs.
    fn can_answer(&self, ask: &Ask) -> bool {
        match ask {
            Ask::Elicit(params) => self.can_elicit(params),
            Ask::Sample(_) => self.capabilities.sampling.is_some(),
        }
    }

    fn can_elicit(&self, params: &ElicitRequestParams) -> bool {
        let Some(elicitation) = &self.capabilities.elicitation else {
            return false;
        };
        match params {
            // An empty `elicitation` object means form mode (2025-06-18 compatibility).
            ElicitRequestParams::FormElicitationParams { .. } => {
                elicitation.form.is_some() || elicitation.url.is_none()
            }
            ElicitRequestParams::UrlElicitationParams { .. } => elicitation.url.is_some(),
            _ => false,
        }
    }

    async fn progress(&self, progress: Progress) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut params = ProgressNotificationParam::new(token.clone(), progress.progress);
        params.total = progress.total;
        params.message = progress.message;
        if let Err(error) = self.peer.notify_progress(params).await {
            tracing::debug!(%error, "could not relay progress to the client");
        }
    }

    /// What an upstream may ask this client through the gateway: its elicitation and
    /// sampling, nothing else (roots are the gateway's to answer, and empty).
    fn relayable(&self) -> ClientCapabilities {
        let mut relayable = ClientCapabilities::default();
        relayable
            .elicitation
            .clone_from(&self.capabilities.elicitation);
        relayable.sampling.clone_from(&self.capabilities.sampling);
        relayable
    }

    async fn log(&self, server: &str, mut message: LoggingMessageNotificationParam) {
        message.logger = Some(logger_name(server, message.logger.as_deref()));
        if let Err(error) = self.peer.notify_logging_message(message).await {
            tracing::debug!(%error, "could not relay a log message to the client");
        }
    }

    /// Asks this (legacy) client on its session.
    async fn answer(&self, ask: Ask) -> Result<Answer, McpError> {
        let answered = async {
            match ask {
                Ask::Elicit(params) => self
                    .peer
                    .create_elicitation(params)
                    .await
                    .map(Answer::Elicit),
                Ask::Sample(params) => self.peer.create_message(params).await.map(Answer::Sample),
            }
        };
        tokio::select! {
            answer = answered => answer.map_err(errors::client_failed),
            () = self.ct.cancelled() => Err(errors::cancelled("the call")),
        }
    }

    /// The upstream's own retry state, when this call retries an `input_required` result of
    /// `server` passed through to this client. A call with `inputResponses` and no
    /// `requestState` at all passes them on as they are: a server may ask without keeping
    /// state, and reads only the answers it knows (SEP-2322).
    fn upstream_retry(&self, server: &str) -> Option<(InputResponses, Option<String>)> {
        let Some(state) = self.request_state.as_deref() else {
            return self
                .input_responses
                .clone()
                .map(|responses| (responses, None));
        };
        let rest = state.strip_prefix(UPSTREAM_STATE_PREFIX)?;
        let (named, state) = match rest.split_once(':') {
            Some((named, state)) => (named, Some(state.to_owned())),
            None => (rest, None),
        };
        (named == server).then(|| (self.input_responses.clone().unwrap_or_default(), state))
    }
}

/// The `logger` a client sees for a message of `server`'s: the server's name first.
fn logger_name(server: &str, logger: Option<&str>) -> String {
    match logger {
        Some(logger) if !logger.is_empty() => format!("{server}/{logger}"),
        _ => server.to_owned(),
    }
}

/// What running a call through the relay came to.
pub(crate) enum Relayed {
    /// The upstream's final answer, or why there is none.
    Done(Result<CallToolResponse, UpstreamError>),
    /// What the 2026-07-28 client must answer before retrying.
    Input(InputRequiredResult),
    /// A result made here (the client cannot answer what the upstream needs).
    Result(CallToolResult),
}

/// Calls `tool` (its upstream name) on `server` for `caller`, relaying as the module docs say.
/// `audit` is the call's record: when the call is parked it goes with it, and is written when
/// the parked call ends.
pub(crate) async fn call(
    gateway: &Arc<Gateway>,
    server: &Arc<Server>,
    tool: &str,
    arguments: Option<Map<String, Value>>,
    caller: &Caller,
    audit: &Mutex<Option<AuditRecord>>,
) -> Relayed {
    let mut retry = caller.upstream_retry(server.name());
    for _ in 0..MAX_INPUT_ROUNDS {
        let started = std::time::Instant::now();
        let driven = if caller.plain() {
            Driven::Done(call_plain(server, tool, arguments.clone(), retry.take(), caller).await)
        } else {
            let running = Running::start(
                server.clone(),
                tool,
                arguments.clone(),
                retry.take(),
                caller,
            );
            // Boxed, as `answer_inputs` below: a plain call's future need not carry them.
            Box::pin(drive(gateway, running, caller, || lock(audit).take())).await
        };
        let took = started.elapsed();
        gateway.metrics().upstream_call(server.name(), took);
        if let Some(record) = lock(audit).as_mut() {
            record.add_upstream(took);
        }
        let input = match driven {
            Driven::Done(Ok(CallToolResponse::InputRequired(input))) => input,
            Driven::Done(other) => return Relayed::Done(other),
            Driven::Parked(input) => return Relayed::Input(input),
        };
        if caller.modern {
            return pass_through(server.name(), caller, input);
        }
        match Box::pin(answer_inputs(server.name(), caller, input)).await {
            Ok(answers) => retry = Some(answers),
            Err(result) => return Relayed::Result(result),
        }
    }
    Relayed::Result(result::tool_error(format!(
        "'{}' asked for input more than {MAX_INPUT_ROUNDS} times in one call; mcpgw stopped it",
        server.name()
    )))
}

/// A 2026-07-28 upstream's `input_required`, as the 2026-07-28 client is to see it.
fn pass_through(server: &str, caller: &Caller, mut input: InputRequiredResult) -> Relayed {
    let unanswerable = input
        .input_requests
        .iter()
        .flatten()
        .find_map(|(_, request)| missing_capability(caller, request));
    if let Some(missing) = unanswerable {
        return Relayed::Result(result::tool_error(format!(
            "'{server}' needs {missing} from the user during this call, which this client does not support"
        )));
    }
    input.request_state = Some(match input.request_state.take() {
        Some(state) => format!("{UPSTREAM_STATE_PREFIX}{server}:{state}"),
        None => format!("{UPSTREAM_STATE_PREFIX}{server}"),
    });
    Relayed::Input(input)
}

/// What `request` needs that `caller` did not declare, in words.
fn missing_capability(caller: &Caller, request: &InputRequest) -> Option<&'static str> {
    match request {
        InputRequest::Elicitation(request) if !caller.can_elicit(&request.params) => {
            Some("an answer to a form or a URL (elicitation)")
        }
        InputRequest::CreateMessage(_) if caller.capabilities.sampling.is_none() => {
            Some("a model completion (sampling)")
        }
        InputRequest::ListRoots(_) if caller.capabilities.roots.is_none() => {
            Some("the client's roots")
        }
        InputRequest::Elicitation(_)
        | InputRequest::CreateMessage(_)
        | InputRequest::ListRoots(_) => None,
        _ => Some("an input of a kind mcpgw does not know"),
    }
}

/// Asks a legacy client every input request of a 2026-07-28 upstream's `input_required`, for
/// the retry; a tool error when it cannot or will not answer.
async fn answer_inputs(
    server: &str,
    caller: &Caller,
    input: InputRequiredResult,
) -> Result<(InputResponses, Option<String>), CallToolResult> {
    let mut responses = InputResponses::new();
    for (key, request) in input.input_requests.unwrap_or_default() {
        if let Some(missing) = missing_capability(caller, &request) {
            return Err(result::tool_error(format!(
                "'{server}' needs {missing} from the user during this call, which this client does not support"
            )));
        }
        let answer = match request {
            InputRequest::Elicitation(request) => caller
                .answer(Ask::Elicit(request.params))
                .await
                .and_then(answer_value),
            InputRequest::CreateMessage(request) => caller
                .answer(Ask::Sample(request.params))
                .await
                .and_then(answer_value),
            // Roots are never shared with an upstream (one session serves every client).
            _ => serde_json::to_value(ListRootsResult::default()).map_err(errors::unreadable),
        };
        match answer {
            Ok(value) => {
                responses.insert(key, value);
            }
            Err(error) => {
                return Err(result::tool_error(format!(
                    "'{server}' asked the user for input, and the client did not answer: {}",
                    error.message
                )));
            }
        }
    }
    Ok((responses, input.request_state))
}

/// The wire value of an answer, for `inputResponses`.
fn answer_value(answer: Answer) -> Result<Value, McpError> {
    match answer {
        Answer::Elicit(result) => serde_json::to_value(result),
        Answer::Sample(result) => serde_json::to_value(result),
    }
    .map_err(errors::unreadable)
}

/// A retry's answers and upstream state, as [`CallOptions`] takes them.
fn split_retry(
    retry: Option<(InputResponses, Option<String>)>,
) -> (Option<InputResponses>, Option<String>) {
    match retry {
        Some((responses, state)) => (Some(responses), state),
        None => (None, None),
    }
}

/// The span of `caller`'s call of `tool` on `server`, when the gateway traces.
fn upstream_span(server: &Server, tool: &str, caller: &Caller) -> Option<UpstreamSpan> {
    caller.trace.as_ref().map(|trace| {
        let called = Called::tool("tools/call", tool);
        trace.upstream(&called, server.name(), crate::telemetry::transport(server))
    })
}

/// The call of a [`Caller::plain`] caller, in the caller's task: the upstream's progress and
/// log messages have nowhere to go, and what it asks is refused by the upstream crate with the
/// same error [`drive`] gives a client that cannot answer. The caller's cancellation cancels
/// the upstream request; so does dropping this future (the upstream crate's own guard).
async fn call_plain(
    server: &Server,
    tool: &str,
    arguments: Option<Map<String, Value>>,
    retry: Option<(InputResponses, Option<String>)>,
    caller: &Caller,
) -> Result<CallToolResponse, UpstreamError> {
    let (input_responses, request_state) = split_retry(retry);
    let span = upstream_span(server, tool, caller);
    let options = CallOptions {
        ct: caller.ct.child_token(),
        input_responses,
        request_state,
        client_capabilities: Some(ClientCapabilities::default()),
        trace: span.as_ref().and_then(UpstreamSpan::trace_context),
        ..CallOptions::default()
    };
    let result = server.call_tool_with(tool, arguments, options).await;
    if let Some(span) = &span {
        span.finish(result.as_ref().map(Outcome::of_call));
    }
    result
}

/// One upstream call running in a task of its own (so that it can outlive the request that
/// started it, parked), with its progress and questions.
struct Running {
    server: Arc<Server>,
    task: JoinHandle<Result<CallToolResponse, UpstreamError>>,
    progress: mpsc::Receiver<Progress>,
    logs: mpsc::Receiver<LoggingMessageNotificationParam>,
    asks: mpsc::Receiver<Asked>,
    /// Cancels the upstream request; also when this is dropped.
    cancel: CancellationToken,
    /// The upstream call's span, when the gateway traces; ends with the call.
    span: Option<UpstreamSpan>,
}

enum Step {
    Done(Result<CallToolResponse, UpstreamError>),
    Asked(Asked),
}

impl Running {
    fn start(
        server: Arc<Server>,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        retry: Option<(InputResponses, Option<String>)>,
        caller: &Caller,
    ) -> Self {
        let (progress_tx, progress) = mpsc::channel(PROGRESS_BUFFER);
        let (logs_tx, logs) = mpsc::channel(LOG_BUFFER);
        let (asks_tx, asks) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let (input_responses, request_state) = split_retry(retry);
        let span = upstream_span(&server, tool, caller);
        let options = CallOptions {
            progress: Some(progress_tx),
            asks: Some(asks_tx),
            ct: cancel.clone(),
            input_responses,
            request_state,
            logs: caller.log_level.map(|level| (level, logs_tx)),
            client_capabilities: Some(caller.relayable()),
            trace: span.as_ref().and_then(UpstreamSpan::trace_context),
        };
        let task = {
            let server = server.clone();
            let tool = tool.to_owned();
            tokio::spawn(async move { server.call_tool_with(&tool, arguments, options).await })
        };
        Self {
            server,
            task,
            progress,
            logs,
            asks,
            cancel,
            span,
        }
    }

    /// Relays progress and log messages to `caller` until the call ends or asks something. A
    /// cancelled caller cancels the upstream call. The call's span ends with it.
    async fn next(&mut self, caller: &Caller) -> Step {
        let step = self.step(caller).await;
        if let (Step::Done(result), Some(span)) = (&step, &self.span) {
            span.finish(result.as_ref().map(Outcome::of_call));
        }
        step
    }

    async fn step(&mut self, caller: &Caller) -> Step {
        loop {
            tokio::select! {
                biased;
                Some(progress) = self.progress.recv() => caller.progress(progress).await,
                Some(message) = self.logs.recv() => caller.log(self.server.name(), message).await,
                Some(asked) = self.asks.recv() => return Step::Asked(asked),
                () = caller.ct.cancelled() => {
                    self.cancel.cancel();
                    // The task ends at once: it only sends `notifications/cancelled`.
                    let _ = (&mut self.task).await;
                    return Step::Done(Err(UpstreamError::Cancelled { server: self.server.name().to_owned() }));
                }
                joined = &mut self.task => {
                    // Progress sent just before the result goes first.
                    while let Ok(progress) = self.progress.try_recv() {
                        caller.progress(progress).await;
                    }
                    while let Ok(message) = self.logs.try_recv() {
                        caller.log(self.server.name(), message).await;
                    }
                    return Step::Done(joined.unwrap_or_else(|error| Err(UpstreamError::Protocol {
                        server: self.server.name().to_owned(),
                        reason: format!("the call's task failed: {error}"),
                    })));
                }
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

enum Driven {
    Done(Result<CallToolResponse, UpstreamError>),
    Parked(InputRequiredResult),
}

/// Runs `running` for `caller` until it ends, answering what it asks: on the session of a
/// legacy caller, by parking it for a 2026-07-28 one. `audit` hands over the call's audit
/// record when it is parked.
async fn drive(
    gateway: &Arc<Gateway>,
    mut running: Running,
    caller: &Caller,
    audit: impl FnOnce() -> Option<AuditRecord>,
) -> Driven {
    loop {
        let asked = match running.next(caller).await {
            Step::Done(result) => return Driven::Done(result),
            Step::Asked(asked) => asked,
        };
        if !caller.can_answer(&asked.ask) {
            let what = match &asked.ask {
                Ask::Elicit(_) => "elicitation/create",
                Ask::Sample(_) => "sampling/createMessage",
            };
            tracing::info!(
                server = %running.server.name(),
                what,
                "the calling client cannot answer the server's request"
            );
            let _ = asked.reply.send(Err(errors::method_not_found(format!(
                "{what} is not supported by the client calling through mcpgw"
            ))));
            continue;
        }
        if caller.modern {
            let (id, input) = gateway.parked.park(running, asked, caller, audit());
            expire_later(Arc::downgrade(gateway), id);
            return Driven::Parked(input);
        }
        let answer = caller.answer(asked.ask).await;
        let _ = asked.reply.send(answer);
    }
}

/// Calls parked while their 2026-07-28 clients answer what the upstream asked.
#[derive(Default)]
pub(crate) struct Parked {
    calls: Mutex<HashMap<String, ParkedCall>>,
    serial: AtomicU64,
}

struct ParkedCall {
    running: Running,
    /// The input request's key, what it asks, and where the answer goes.
    key: String,
    elicit: bool,
    reply: oneshot::Sender<Result<Answer, McpError>>,
    /// The `input_required` result, to ask again when a retry carries no answer.
    input: InputRequiredResult,
    name: String,
    principal: ids::PrincipalId,
    audit: Option<AuditRecord>,
}

impl Parked {
    /// Parks `running`, waiting on `asked`, and returns what the client is to answer.
    fn park(
        &self,
        running: Running,
        asked: Asked,
        caller: &Caller,
        audit: Option<AuditRecord>,
    ) -> (String, InputRequiredResult) {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let id = format!("{serial}-{:016x}", random_u64());
        let key = format!("mcpgw-relay-{serial}");
        let (request, elicit) = match asked.ask {
            Ask::Elicit(params) => (InputRequest::Elicitation(ElicitRequest::new(params)), true),
            Ask::Sample(params) => (
                InputRequest::CreateMessage(CreateMessageRequest::new(params)),
                false,
            ),
        };
        let input = InputRequiredResult::new(
            Some([(key.clone(), request)].into_iter().collect()),
            Some(format!("{RELAY_STATE_PREFIX}{id}")),
        );
        self.put(
            id.clone(),
            ParkedCall {
                running,
                key,
                elicit,
                reply: asked.reply,
                input: input.clone(),
                name: caller.name.clone(),
                principal: caller.principal.clone(),
                audit,
            },
        );
        (id, input)
    }

    fn put(&self, id: String, call: ParkedCall) {
        lock(&self.calls).insert(id, call);
    }

    /// The parked call `id`, if `caller` may resume it.
    fn take(&self, id: &str, caller: &Caller) -> Option<ParkedCall> {
        let mut calls = lock(&self.calls);
        let call = calls.get(id)?;
        if call.principal != caller.principal || call.name != caller.name {
            return None;
        }
        calls.remove(id)
    }

    /// Removes the parked call `id` whatever its owner (its time is up).
    fn expire(&self, id: &str) -> Option<ParkedCall> {
        lock(&self.calls).remove(id)
    }
}

/// Ends the parked call `id` if it is still parked after [`PARK_TTL`].
fn expire_later(gateway: std::sync::Weak<Gateway>, id: String) {
    tokio::spawn(async move {
        // A timer for one entry, not a readiness wait.
        tokio::time::sleep(PARK_TTL).await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        if let Some(call) = gateway.parked.expire(&id) {
            let server = call.running.server.name().to_owned();
            tracing::info!(
                %server,
                "a parked call was not resumed in time; cancelled upstream"
            );
            if let Some(record) = call.audit {
                gateway.audit(record.upstream_failed(&UpstreamError::Cancelled { server }));
            }
        }
    });
}

/// Resumes the parked call a 2026-07-28 client's retry names (`requestState` `mcpgw-relay:ID`).
pub(crate) async fn resume(
    gateway: &Arc<Gateway>,
    id: &str,
    caller: &Caller,
) -> Result<CallToolResponse, McpError> {
    let Some(parked) = gateway.parked.take(id, caller) else {
        return Ok(CallToolResponse::Complete(result::tool_error(
            "the input this retry answers is no longer awaited (it was answered already, or waited longer than 10 minutes and the call was cancelled); call the tool again",
        )));
    };
    let answer = caller
        .input_responses
        .as_ref()
        .and_then(|responses| responses.get(&parked.key))
        .and_then(|value| {
            if parked.elicit {
                serde_json::from_value::<ElicitResult>(value.clone())
                    .ok()
                    .map(Answer::Elicit)
            } else {
                serde_json::from_value::<CreateMessageResult>(value.clone())
                    .ok()
                    .map(Answer::Sample)
            }
        });
    let Some(answer) = answer else {
        // No readable answer: ask again.
        let input = parked.input.clone();
        gateway.parked.put(id.to_owned(), parked);
        return Ok(CallToolResponse::InputRequired(input));
    };
    let ParkedCall {
        running,
        reply,
        audit,
        ..
    } = parked;
    let _ = reply.send(Ok(answer));
    let server = running.server.clone();
    let audit = Mutex::new(audit);
    let driven = drive(gateway, running, caller, || lock(&audit).take()).await;
    let record = lock(&audit).take();
    match driven {
        Driven::Parked(input) => Ok(CallToolResponse::InputRequired(input)),
        Driven::Done(Ok(CallToolResponse::InputRequired(input))) => {
            match pass_through(server.name(), caller, input) {
                Relayed::Input(input) => Ok(CallToolResponse::InputRequired(input)),
                _ => Ok(CallToolResponse::Complete(result::tool_error(format!(
                    "'{}' needs input this client cannot give",
                    server.name()
                )))),
            }
        }
        Driven::Done(Ok(response)) => {
            let result =
                result::from_upstream(server.name(), response, &gateway.config().policy.limits);
            if let Some(record) = record {
                gateway.audit(record.answered(&result));
            }
            Ok(CallToolResponse::Complete(result))
        }
        Driven::Done(Err(error)) => {
            if let Some(record) = record {
                gateway.audit(record.upstream_failed(&error));
            }
            Ok(CallToolResponse::Complete(result::upstream_failure(&error)))
        }
    }
}

/// 64 unpredictable bits from the standard library's randomly keyed hasher: parked call ids
/// are bound to their principal anyway, this only keeps them unguessable.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    hasher.finish()
}
