//! One `tools/call` in flight on an upstream session: the options a caller passes
//! ([`CallOptions`]: a progress sink, a cancellation token, a channel for what the server asks),
//! and the registry the session's client handler uses to route the server's progress
//! notifications and requests back to the call they belong to.
//!
//! Routing rule for a server-to-client request (`elicitation/create`, `sampling/createMessage`):
//! 1. Streamable HTTP tells rmcp which POST's response stream the request arrived on
//!    (`InboundStreamOrigin`, SEP-2260): the call whose upstream request id that is.
//!    A request on the standalone GET stream belongs to no call and is refused.
//! 2. stdio and legacy SSE carry no such association: the request belongs to the one call in
//!    flight on the session. With none, or several (one shared session serves every client),
//!    it is refused with a JSON-RPC error, since answering for the wrong user would be worse.
//!
//! Progress notifications are routed by the progress token rmcp puts on every request it sends.
//! Log messages (`notifications/message`) carry no token, and rmcp does not say which stream a
//! notification arrived on: one belongs to the only call in flight on the server's sessions, if
//! that call asked for logs at or below the message's level; with none or several it belongs to
//! no call (and goes to mcpgw's own log at debug level).
//! `roots/list` is answered by the handler itself (an empty list): a session shared by many
//! clients cannot present one client's roots as everyone's.

// Sampling is deprecated by SEP-2577 but still part of every revision mcpgw relays.
#![allow(deprecated)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rmcp::{
    ErrorData as McpError, RoleClient,
    model::{
        CancelledNotificationParam, ClientCapabilities, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequestParams, ElicitResult, ErrorCode, InputResponses,
        LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
        RequestId,
    },
    service::{InboundStreamOrigin, Peer},
};
use tokio::sync::{mpsc, oneshot};

use crate::{lock, transport::ordered::Backlog};
use tokio_util::sync::CancellationToken;

/// How the caller of [`crate::Server::call_tool_with`] takes part in the call. The default
/// takes no progress, cannot be cancelled and answers nothing the server asks.
#[derive(Default)]
pub struct CallOptions {
    /// Receives the server's `notifications/progress` for this call, in order, never a value
    /// lower than one already sent. Full channels drop notifications rather than stall.
    pub progress: Option<mpsc::Sender<Progress>>,
    /// Receives what the server asks of the user during this call. Without it such requests
    /// get a JSON-RPC error saying the calling client cannot answer.
    pub asks: Option<mpsc::Sender<Asked>>,
    /// Cancelled: the upstream request is cancelled (`notifications/cancelled`) and the call
    /// fails with [`crate::UpstreamError::Cancelled`].
    pub ct: CancellationToken,
    /// A retry after a 2026-07-28 server's `input_required` result: the answers, keyed as the
    /// server keyed its requests.
    pub input_responses: Option<InputResponses>,
    /// A retry after an `input_required` result: the server's `requestState`, unchanged.
    pub request_state: Option<String>,
    /// What the caller behind this call can be asked (elicitation, sampling): a 2026-07-28
    /// server is told so in this request's `_meta`, in place of what the session declared, so
    /// it asks only what can be answered. A legacy session keeps what it declared at
    /// `initialize`.
    pub client_capabilities: Option<ClientCapabilities>,
    /// Receives the server's log messages during this call at `.0` or more severe; `.0` also
    /// goes out as the request's `_meta` log level (a 2026-07-28 server logs only then).
    /// Full channels drop messages rather than stall.
    pub logs: Option<(LoggingLevel, mpsc::Sender<LoggingMessageNotificationParam>)>,
    /// The trace this call belongs to (the caller's span for it): sent in the request's
    /// `params._meta` on every transport, and as HTTP headers too (see [`TraceContext`]).
    pub trace: Option<TraceContext>,
}

impl CallOptions {
    /// Whether the caller wants nothing of the call but its result: no progress, no log
    /// messages, nothing it can be asked, no retry of an `input_required` result. Such a call
    /// may take a stdio session's express lane (`transport::express`).
    pub(crate) fn result_only(&self) -> bool {
        self.progress.is_none()
            && self.asks.is_none()
            && self.logs.is_none()
            && self.input_responses.is_none()
            && self.request_state.is_none()
    }
}

/// A W3C Trace Context (`traceparent`, and `tracestate` when there is one) that an upstream
/// request carries, as SEP-414 puts it: `params._meta.traceparent` / `tracestate`, unprefixed.
/// Over HTTP the same values also go as the `traceparent` / `tracestate` headers, for servers
/// (and proxies) that read only those. The values are the caller's; this crate only places them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// A request `_meta` holding this context alone.
    pub(crate) fn meta(&self) -> rmcp::model::RequestMetaObject {
        let mut meta = rmcp::model::RequestMetaObject::new();
        self.write(&mut meta);
        meta
    }

    /// Writes this context into a request's `_meta`.
    pub(crate) fn write(&self, meta: &mut rmcp::model::RequestMetaObject) {
        meta.set_traceparent(self.traceparent.clone());
        if let Some(state) = &self.tracestate {
            meta.set_tracestate(state.clone());
        }
    }
}

/// One progress notification of a call, without the upstream's token.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// What the server asks of the user during a call.
#[derive(Debug)]
pub enum Ask {
    Elicit(ElicitRequestParams),
    Sample(CreateMessageRequestParams),
}

/// The user's answer to an [`Ask`] of the same kind.
#[derive(Debug)]
pub enum Answer {
    Elicit(ElicitResult),
    Sample(CreateMessageResult),
}

/// An [`Ask`] waiting for its answer. Dropping `reply` answers the server with an error.
#[derive(Debug)]
pub struct Asked {
    pub ask: Ask,
    pub reply: oneshot::Sender<Result<Answer, McpError>>,
}

/// The tool calls in flight on one server's sessions.
#[derive(Default)]
pub(crate) struct InFlight {
    inner: Mutex<Calls>,
    /// Progress and log messages received and handled, so a result follows them (see
    /// [`crate::ordered`]).
    pub(crate) backlog: Arc<Backlog>,
}

#[derive(Default)]
struct Calls {
    next: u64,
    calls: HashMap<u64, Entry>,
}

struct Entry {
    /// The upstream request id and progress token, once sent.
    request: Option<(RequestId, ProgressToken)>,
    progress: Option<mpsc::Sender<Progress>>,
    last_progress: Option<f64>,
    asks: Option<mpsc::Sender<Asked>>,
    logs: Option<(LoggingLevel, mpsc::Sender<LoggingMessageNotificationParam>)>,
    activity: Arc<Activity>,
}

/// Signs of life of one call, for its timeout: the last progress, and how many questions to
/// the user are open (the server waits for the user then, not the other way round).
pub(crate) struct Activity {
    state: Mutex<(Instant, usize)>,
}

impl Activity {
    fn new() -> Self {
        Self {
            state: Mutex::new((Instant::now(), 0)),
        }
    }

    fn touch(&self) {
        lock(&self.state).0 = Instant::now();
    }

    fn asking(&self, open: bool) {
        let mut state = lock(&self.state);
        state.0 = Instant::now();
        state.1 = if open {
            state.1 + 1
        } else {
            state.1.saturating_sub(1)
        };
    }

    /// When the call times out if nothing else happens: `idle` after the last sign of life,
    /// never while the user is being asked.
    pub(crate) fn deadline(&self, idle: Duration) -> Option<Instant> {
        let (last, open) = *lock(&self.state);
        (open == 0).then(|| last + idle)
    }
}

/// A call's place in [`InFlight`], removed on drop.
pub(crate) struct Registered<'a> {
    registry: &'a InFlight,
    key: u64,
    pub(crate) activity: Arc<Activity>,
}

impl Registered<'_> {
    /// Records the upstream request id and progress token of the call, once sent.
    pub(crate) fn sent(&self, id: RequestId, token: ProgressToken) {
        if let Some(entry) = lock(&self.registry.inner).calls.get_mut(&self.key) {
            entry.request = Some((id, token));
        }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(&self.registry.inner).calls.remove(&self.key);
    }
}

impl InFlight {
    /// Registers a call before it is sent, so that a request arriving at once finds it.
    pub(crate) fn register(&self, options: &CallOptions) -> Registered<'_> {
        let activity = Arc::new(Activity::new());
        let mut inner = lock(&self.inner);
        inner.next += 1;
        let key = inner.next;
        inner.calls.insert(
            key,
            Entry {
                request: None,
                progress: options.progress.clone(),
                last_progress: None,
                asks: options.asks.clone(),
                logs: options.logs.clone(),
                activity: activity.clone(),
            },
        );
        Registered {
            registry: self,
            key,
            activity,
        }
    }

    /// Hands one progress notification to the call it belongs to; false when none does.
    pub(crate) fn progress(&self, params: &ProgressNotificationParam) -> bool {
        let mut inner = lock(&self.inner);
        let Some(entry) = inner.calls.values_mut().find(|entry| {
            entry
                .request
                .as_ref()
                .is_some_and(|(_, token)| *token == params.progress_token)
        }) else {
            return false;
        };
        entry.activity.touch();
        // rmcp handles each notification in a task of its own, so they may arrive out of
        // order; progress must only increase.
        if entry
            .last_progress
            .is_some_and(|last| params.progress <= last)
        {
            return true;
        }
        entry.last_progress = Some(params.progress);
        if let Some(sink) = &entry.progress {
            let _ = sink.try_send(Progress {
                progress: params.progress,
                total: params.total,
                message: params.message.clone(),
            });
        }
        true
    }

    /// Hands one log message to the call it belongs to (see the module docs); false when it
    /// belongs to none. A call that asked for no logs, or for more severe ones, drops it.
    pub(crate) fn log(&self, params: &LoggingMessageNotificationParam) -> bool {
        let inner = lock(&self.inner);
        let mut sent = inner.calls.values().filter(|entry| entry.request.is_some());
        let (Some(entry), None) = (sent.next(), sent.next()) else {
            return false;
        };
        if let Some((level, sink)) = &entry.logs
            && severity(params.level) >= severity(*level)
        {
            let _ = sink.try_send(params.clone());
        }
        true
    }

    /// The call a server-to-client request belongs to (see the module docs), as the channel
    /// to its caller and its activity.
    fn route(
        &self,
        origin: Option<&InboundStreamOrigin>,
        what: &str,
    ) -> Result<(mpsc::Sender<Asked>, Arc<Activity>), McpError> {
        let inner = lock(&self.inner);
        let entry = match origin {
            Some(InboundStreamOrigin::OutboundRequest(id)) => inner
                .calls
                .values()
                .find(|entry| entry.request.as_ref().is_some_and(|(sent, _)| sent == id)),
            Some(InboundStreamOrigin::Unassociated) => None,
            None => match inner.calls.len() {
                1 => inner.calls.values().next(),
                0 => None,
                _ => {
                    return Err(McpError::invalid_params(
                        format!(
                            "{what} arrived while several tool calls run on this session, and this transport does not say which one asked; mcpgw cannot tell whose user to ask"
                        ),
                        None,
                    ));
                }
            },
        };
        let Some(entry) = entry else {
            return Err(McpError::invalid_params(
                format!(
                    "{what} must be sent during a tool call (mcpgw relays it to the client that made the call)"
                ),
                None,
            ));
        };
        match &entry.asks {
            Some(asks) => Ok((asks.clone(), entry.activity.clone())),
            None => Err(not_supported(what)),
        }
    }

    /// Asks the caller of the call `origin` points at, and waits for the answer (or for the
    /// server to cancel its request).
    pub(crate) async fn ask(
        &self,
        origin: Option<&InboundStreamOrigin>,
        ask: Ask,
        ct: &CancellationToken,
    ) -> Result<Answer, McpError> {
        let what = match &ask {
            Ask::Elicit(_) => "elicitation/create",
            Ask::Sample(_) => "sampling/createMessage",
        };
        let (asks, activity) = self.route(origin, what)?;
        let (reply, answer) = oneshot::channel();
        activity.asking(true);
        let answered = async {
            asks.send(Asked { ask, reply })
                .await
                .map_err(|_| not_supported(what))?;
            answer.await.map_err(|_| not_supported(what))?
        };
        let outcome = tokio::select! {
            outcome = answered => outcome,
            () = ct.cancelled() => Err(McpError::new(ErrorCode::INTERNAL_ERROR, format!("{what} was cancelled by the server"), None)),
        };
        activity.asking(false);
        outcome
    }
}

/// The rank of `level`, least severe first (RFC 5424 order, as MCP's).
pub(crate) fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The error a server gets when nobody behind the call can answer it.
pub(crate) fn not_supported(what: &str) -> McpError {
    McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("{what} is not supported by the client calling through mcpgw"),
        None,
    )
}

/// Sends `notifications/cancelled` for an upstream request unless disarmed: a call dropped
/// (its caller went away, its task was cancelled) is cancelled upstream, not abandoned.
pub(crate) struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    reason: &'static str,
}

impl CancelOnDrop {
    pub(crate) fn new(peer: Peer<RoleClient>, id: RequestId) -> Self {
        Self {
            peer,
            id: Some(id),
            reason: "request abandoned by mcpgw",
        }
    }

    /// Cancels now, with `reason` (the request is then known to be gone).
    pub(crate) fn cancel(mut self, reason: &'static str) {
        self.reason = reason;
    }

    pub(crate) fn disarm(mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let reason = self.reason;
        tracing::debug!(request = %id, reason, "cancelling an upstream request");
        runtime.spawn(async move {
            let params = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            let _ = peer.notify_cancelled(params).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::NumberOrString;

    use super::*;

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    fn progress(n: i64, value: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(token(n), value)
    }

    #[test]
    fn progress_reaches_its_call_only_and_never_goes_back() {
        let registry = InFlight::default();
        let (tx, mut rx) = mpsc::channel(8);
        let call = registry.register(&CallOptions {
            progress: Some(tx),
            ..CallOptions::default()
        });
        assert!(!registry.progress(&progress(7, 1.0)), "not sent yet");
        call.sent(RequestId::Number(3), token(7));
        assert!(registry.progress(&progress(7, 1.0)));
        assert!(registry.progress(&progress(7, 0.5)), "known, but stale");
        assert!(registry.progress(&progress(7, 2.0)));
        assert!(!registry.progress(&progress(8, 3.0)), "another token");
        let seen: Vec<f64> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|p| p.progress)
            .collect();
        assert_eq!(seen, [1.0, 2.0]);
        drop(call);
        assert!(
            !registry.progress(&progress(7, 9.0)),
            "unregistered on drop"
        );
    }

    #[test]
    fn log_messages_reach_the_only_call_at_its_level() {
        let registry = InFlight::default();
        let (tx, mut rx) = mpsc::channel(8);
        let log = |level| LoggingMessageNotificationParam::new(level, "note".into());
        assert!(
            !registry.log(&log(LoggingLevel::Error)),
            "no call in flight"
        );
        let call = registry.register(&CallOptions {
            logs: Some((LoggingLevel::Warning, tx)),
            ..CallOptions::default()
        });
        assert!(!registry.log(&log(LoggingLevel::Error)), "not sent yet");
        call.sent(RequestId::Number(1), token(1));
        for level in [
            LoggingLevel::Info,
            LoggingLevel::Warning,
            LoggingLevel::Emergency,
        ] {
            assert!(registry.log(&log(level)));
        }
        let seen: Vec<LoggingLevel> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|m| m.level)
            .collect();
        assert_eq!(seen, [LoggingLevel::Warning, LoggingLevel::Emergency]);
        let other = registry.register(&CallOptions::default());
        other.sent(RequestId::Number(2), token(2));
        assert!(
            !registry.log(&log(LoggingLevel::Error)),
            "two calls: nobody can tell whose"
        );
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn requests_are_routed_by_stream_else_to_the_only_call() {
        let registry = InFlight::default();
        let (asks, _rx) = mpsc::channel(1);
        let with_asks = || CallOptions {
            asks: Some(asks.clone()),
            ..CallOptions::default()
        };
        let route = |origin: Option<&InboundStreamOrigin>| {
            registry
                .route(origin, "elicitation/create")
                .map(|_| ())
                .map_err(|e| (e.code, e.message.to_string()))
        };
        assert!(route(None).is_err(), "no call in flight");
        let first = registry.register(&with_asks());
        first.sent(RequestId::Number(1), token(1));
        assert_eq!(route(None), Ok(()), "the only call");
        let second = registry.register(&CallOptions::default());
        second.sent(RequestId::Number(2), token(2));
        let (code, message) = route(None).expect_err("ambiguous");
        assert_eq!(code, ErrorCode::INVALID_PARAMS);
        assert!(message.contains("several tool calls"), "{message}");
        let to = |n| InboundStreamOrigin::OutboundRequest(RequestId::Number(n));
        assert_eq!(route(Some(&to(1))), Ok(()), "by stream");
        let (code, message) = route(Some(&to(2))).expect_err("no asks channel");
        assert_eq!(code, ErrorCode::METHOD_NOT_FOUND);
        assert!(message.contains("not supported by the client"), "{message}");
        assert!(route(Some(&InboundStreamOrigin::Unassociated)).is_err());
        assert!(route(Some(&to(9))).is_err(), "unknown request");
    }

    #[test]
    fn an_open_question_stops_the_clock() {
        let activity = Activity::new();
        let idle = Duration::from_secs(5);
        assert!(activity.deadline(idle).is_some());
        activity.asking(true);
        assert_eq!(activity.deadline(idle), None);
        activity.asking(false);
        let deadline = activity.deadline(idle).expect("running again");
        assert!(deadline > Instant::now() + Duration::from_secs(4));
    }
}
