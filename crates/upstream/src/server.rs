//! One upstream server: its session, health, negotiated era and last good tool list.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use ids::{PrincipalId, ServerName};
use netguard::Policy;
use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest,
        PaginatedRequestParams, ProgressToken, RequestMetaObject, ServerResult,
    },
    service::{PeerRequestOptions, ServiceError},
};
use serde::Serialize;

use crate::{
    Events, UpstreamError,
    call::{CallOptions, CancelOnDrop, InFlight, Registered},
    connect::{self, Connected, Session, UpstreamClient},
    lock,
    oauth::{
        AuthorizedClient, DEFAULT_REDIRECT_URI, OAuthError, OAuthSettings, OAuthStore,
        ServerCredentials,
    },
    transport::{express::Express, stdio::ChildWatch},
};

mod lists;
mod subscriptions;

pub use lists::Lists;
use subscriptions::Subscriptions;

/// Most pages fetched for one `tools/list`; real servers have been seen returning a cursor that
/// never advances, which would otherwise loop forever.
const MAX_TOOL_PAGES: usize = 100;

/// Longest a tool call may run however much progress it reports (unless the server's own
/// timeout is longer): the spec asks clients to enforce a maximum when progress resets timeouts.
pub const MAX_CALL: Duration = Duration::from_secs(10 * 60);

/// A server's tool list: each tool object exactly as the server sent it, in its order. Each
/// tool is its own `Arc` so that the catalog built from the list shares the definitions
/// (`catalog::ServerTools::tools`) instead of copying them: tool JSON is most of a large
/// catalog's memory.
pub type ToolList = Arc<[Arc<serde_json::Value>]>;

/// Which protocol generation a server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    /// Stateless 2026-07-28: `server/discover`, per-request `_meta`.
    Modern,
    /// Handshake-based (`initialize`), 2025-11-25 and older.
    Legacy,
}

/// As serialised (`modern`, `legacy`): logs and tables use the words the JSON does.
impl std::fmt::Display for Era {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Era::Modern => "modern",
            Era::Legacy => "legacy",
        })
    }
}

/// Health of one server, as shown by `mcpgw servers` and the admin API.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum ServerState {
    /// Never connected yet.
    Idle,
    /// The gateway is making its first connection at start-up; its tools join the catalog
    /// when it is ready.
    Starting,
    Connecting,
    Ready,
    Failed {
        reason: String,
    },
    /// It stopped answering `ping` (see `supervise`): its process was ended and it is being
    /// restarted; calls waiting on it failed with this reason.
    Unresponsive {
        reason: String,
    },
}

impl ServerState {
    /// The state's name as the status document spells it (`ready`, `failed`, ...).
    pub fn word(&self) -> &'static str {
        match self {
            ServerState::Idle => "idle",
            ServerState::Starting => "starting",
            ServerState::Connecting => "connecting",
            ServerState::Ready => "ready",
            ServerState::Failed { .. } => "failed",
            ServerState::Unresponsive { .. } => "unresponsive",
        }
    }
}

/// A snapshot of everything known about one server.
#[derive(Clone, Debug, Serialize)]
pub struct ServerStatus {
    pub name: ServerName,
    #[serde(flatten)]
    pub state: ServerState,
    pub era: Option<Era>,
    pub protocol_version: Option<String>,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    /// What the server said about itself at initialisation (title, description,
    /// instructions); for the search index, not part of the status document.
    #[serde(skip)]
    pub about: crate::connect::About,
    pub tool_count: Option<usize>,
    /// How long the last successful connect took.
    pub connect_ms: Option<u64>,
    /// The reason of the last failure, kept while the server is being reconnected (its state
    /// then says `connecting`) and cleared once it is ready again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip)]
    pub last_change: Option<SystemTime>,
}

struct Live {
    session: Arc<Session>,
    oversized: Option<crate::transport::sse::Oversized>,
    /// The stdio child behind the session.
    child: Option<ChildWatch>,
    /// A legacy stdio session's lane for plain calls (`transport::express`).
    express: Option<Arc<Express>>,
}

/// The liveness pings of the live session (see [`Server::supervise`]).
struct Liveness {
    /// When the last ping was sent.
    last: Instant,
    /// Pings in a row that went unanswered.
    missed: u32,
    /// Whether a ping is waiting for its answer now.
    pinging: bool,
}

/// Requests running now, and when the last one started or ended: what the idle sweep of
/// per-principal sessions goes by.
struct Activity {
    busy: usize,
    last: Instant,
}

pub struct Server {
    config: config::ServerConfig,
    /// Whose session this is: `local` for the server every non-OAuth caller shares, else the
    /// principal id whose OAuth tokens it sends (see [`crate::Upstreams::for_principal`]).
    principal: PrincipalId,
    /// Where this server's connections may go: the global allowlist plus its own
    /// `allow_private_network`, for its transport and its OAuth alike.
    policy: Arc<Policy>,
    /// The largest message accepted from this server (`[limits] response_bytes`).
    max_response_bytes: usize,
    handler: UpstreamClient,
    /// Where an `oauth` server's tokens are kept; `None` when the database could not be opened.
    oauth_store: Option<Arc<dyn OAuthStore>>,
    /// An `oauth` server's client, made on first connect and kept across reconnects, so that
    /// its refresh serialisation and what it learnt (the last challenge, the last refresh
    /// failure) outlive any one session.
    authorized: Mutex<Option<AuthorizedClient>>,
    /// Serialises (re)connects so concurrent callers share one new session.
    connect_lock: tokio::sync::Mutex<()>,
    live: Mutex<Option<Live>>,
    status: Mutex<ServerStatus>,
    /// The last good tool list and when it was fetched.
    tools: Mutex<Option<(Instant, ToolList)>>,
    /// The last good resource, template and prompt lists and when they were fetched.
    lists: Mutex<Option<(Instant, Arc<Lists>)>>,
    /// The resources subscribed to (see `subscriptions`).
    subscriptions: Mutex<Subscriptions>,
    activity: Mutex<Activity>,
    liveness: Mutex<Liveness>,
    /// The last stdio child started, kept after its session is gone so that errors can say how
    /// it ended and what it wrote to stderr.
    child: Mutex<Option<ChildWatch>>,
    /// Set when a reloaded configuration no longer has this server (or changed it): it makes
    /// no new session, so nothing restarts its child after [`Server::drain`] ended it.
    retired: AtomicBool,
}

impl Server {
    pub(crate) fn new(
        config: config::ServerConfig,
        principal: &PrincipalId,
        policy: Arc<Policy>,
        events: Events,
        oauth_store: Option<Arc<dyn OAuthStore>>,
        max_response_bytes: usize,
    ) -> Self {
        let name = config.name.clone();
        Self {
            handler: UpstreamClient::new(name.clone(), principal.clone(), events),
            config,
            principal: principal.clone(),
            policy,
            max_response_bytes,
            oauth_store,
            authorized: Mutex::new(None),
            connect_lock: tokio::sync::Mutex::new(()),
            live: Mutex::new(None),
            status: Mutex::new(ServerStatus {
                name,
                state: ServerState::Idle,
                era: None,
                protocol_version: None,
                server_name: None,
                server_version: None,
                about: Default::default(),
                tool_count: None,
                connect_ms: None,
                last_error: None,
                last_change: None,
            }),
            tools: Mutex::new(None),
            lists: Mutex::new(None),
            subscriptions: Mutex::default(),
            activity: Mutex::new(Activity {
                busy: 0,
                last: Instant::now(),
            }),
            liveness: Mutex::new(Liveness {
                last: Instant::now(),
                missed: 0,
                pinging: false,
            }),
            child: Mutex::new(None),
            retired: AtomicBool::new(false),
        }
    }

    pub fn name(&self) -> &ServerName {
        &self.config.name
    }

    pub fn config(&self) -> &config::ServerConfig {
        &self.config
    }

    /// The principal id this server's session acts for (`local` for the shared one).
    pub fn principal(&self) -> &PrincipalId {
        &self.principal
    }

    pub(crate) fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    pub fn timeout(&self) -> Duration {
        self.config.timeout
    }

    pub fn status(&self) -> ServerStatus {
        lock(&self.status).clone()
    }

    /// Ends `starting`: the server is `ready` if it connected (its tools are in the catalog);
    /// a failed one stays failed.
    pub fn mark_started(&self) {
        let mut status = lock(&self.status);
        if status.state == ServerState::Starting {
            status.state = ServerState::Ready;
            status.last_change = Some(SystemTime::now());
        }
    }

    /// Marks a server that never connected as `starting` (the gateway's first connect is on
    /// its way).
    pub fn mark_starting(&self) {
        let mut status = lock(&self.status);
        if status.state == ServerState::Idle {
            status.state = ServerState::Starting;
        }
    }

    /// The last tool list fetched successfully, raw as the server sent it. Kept while the server
    /// is down so search keeps working.
    pub fn tools(&self) -> Option<ToolList> {
        lock(&self.tools).as_ref().map(|(_, tools)| tools.clone())
    }

    /// [`Server::tools`] with the time it was fetched.
    pub(crate) fn tools_fetched(&self) -> Option<(Instant, ToolList)> {
        lock(&self.tools).clone()
    }

    #[cfg(test)]
    pub(crate) fn set_tools_for_test(&self, tools: Vec<serde_json::Value>) {
        *lock(&self.tools) = Some((Instant::now(), tools.into_iter().map(Arc::new).collect()));
    }

    /// Whether a session is open now.
    pub fn is_connected(&self) -> bool {
        self.current_open().is_some()
    }

    /// How long no request has run on this server at `now`; `None` while one runs.
    pub(crate) fn idle_for(&self, now: Instant) -> Option<Duration> {
        let activity = lock(&self.activity);
        (activity.busy == 0).then(|| now.saturating_duration_since(activity.last))
    }

    /// Connects if needed and fetches the full tool list (all pages), then the resource,
    /// template and prompt lists ([`Server::refresh_lists`]).
    pub async fn refresh_tools(&self) -> Result<ToolList, UpstreamError> {
        let result = self
            .with_session(
                true,
                |session| async move { list_all_tools(&session).await },
            )
            .await;
        match result {
            Ok(tools) => {
                let tools: ToolList = tools.into_iter().map(Arc::new).collect();
                *lock(&self.tools) = Some((Instant::now(), tools.clone()));
                lock(&self.status).tool_count = Some(tools.len());
                // Whoever lists the tools wants the rest of the server's surface too; a list
                // that fails is logged and keeps its last good version.
                let _ = self.refresh_lists().await;
                Ok(tools)
            }
            Err(error) => {
                self.set_state(ServerState::Failed {
                    reason: error.to_string(),
                });
                Err(error)
            }
        }
    }

    /// Calls one tool by its upstream name. Retried once only when the session was found dead
    /// before the request could be processed; see the crate invariants.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<CallToolResponse, UpstreamError> {
        self.call_tool_with(name, arguments, CallOptions::default())
            .await
    }

    /// [`Server::call_tool`] with a caller taking part: progress goes to `options.progress`,
    /// what the server asks goes to `options.asks`, and cancelling `options.ct` cancels the
    /// upstream request (`notifications/cancelled`) and fails the call with
    /// [`UpstreamError::Cancelled`].
    ///
    /// The call times out after the server's timeout without a sign of life: progress
    /// restarts the clock, and it stands still while the user is being asked something. No
    /// call runs longer than [`MAX_CALL`] (or the timeout, if longer). A call that times out
    /// is cancelled upstream, not abandoned.
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
        options: CallOptions,
    ) -> Result<CallToolResponse, UpstreamError> {
        let name = name.to_owned();
        let calls = self.handler.calls.clone();
        let idle = self.config.timeout;
        let plain = options.result_only();
        let options = Arc::new(options);
        let response = self
            .with_session_bounded(false, None, move |session| {
                let express = plain.then(|| self.express_for(&session)).flatten();
                let mut params = CallToolRequestParams::new(name.clone());
                params.arguments = arguments.clone();
                params.input_responses = options.input_responses.clone();
                params.request_state = options.request_state.clone();
                // A legacy server ignores the key; a 2026-07-28 one logs only when it is there.
                if let Some((level, _)) = &options.logs {
                    params.meta.get_or_insert_default().set_log_level(*level);
                }
                if let Some(trace) = &options.trace {
                    trace.write(params.meta.get_or_insert_default());
                }
                let calls = calls.clone();
                let options = options.clone();
                async move {
                    match express {
                        Some(express) => {
                            call_express(&express, &session, &calls, params, &options, idle).await
                        }
                        None => {
                            // Boxed: rmcp's request future is large and an express call never
                            // runs it.
                            Box::pin(call_once(&session, &calls, params, &options, idle)).await
                        }
                    }
                }
            })
            .await?;
        // HTTP and SSE responses are held to the limit as they are read; a stdio message only
        // to rmcp's own line limit (16 MiB), so its result is measured here.
        let limit = self.max_response_bytes;
        let oversized = matches!(self.config.transport, config::Transport::Stdio(_))
            && match &response {
                CallToolResponse::Complete(result) => exceeds(result, limit),
                CallToolResponse::InputRequired(result) => exceeds(result, limit),
                CallToolResponse::Task(result) => exceeds(result, limit),
                _ => false,
            };
        if oversized {
            return Err(UpstreamError::ResponseTooLarge {
                server: self.name().to_owned(),
                limit: self.max_response_bytes,
            });
        }
        Ok(response)
    }

    /// The express lane of `session`, when it is the live session and has one.
    fn express_for(&self, session: &Arc<Session>) -> Option<Arc<Express>> {
        lock(&self.live)
            .as_ref()
            .filter(|live| Arc::ptr_eq(&live.session, session))
            .and_then(|live| live.express.clone())
    }

    /// Ends the session (and the child process group, for stdio).
    pub async fn disconnect(&self) {
        let live = lock(&self.live).take();
        if let Some(live) = live {
            close_session(live.session).await;
        }
    }

    /// Takes the server out of service, as a reloaded configuration that removed or changed
    /// it asks: no new session is made from now on (a request needing one fails with
    /// [`UpstreamError::Disabled`]), the requests running now get up to `grace` to finish,
    /// then the session ends (and a stdio child's process group with it).
    pub async fn drain(&self, grace: Duration) {
        self.retired.store(true, Ordering::SeqCst);
        // A connect under way finishes first; none starts after it.
        drop(self.connect_lock.lock().await);
        let deadline = Instant::now() + grace;
        // A bounded poll: requests end on their own schedule and say nothing when they do.
        while lock(&self.activity).busy > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.disconnect().await;
    }

    /// Ends the session if no request has run for longer than `idle` at `now`; true when a
    /// session was closed. The check and the take happen under the activity lock, so a request
    /// starting meanwhile either keeps the session or connects a new one.
    pub(crate) async fn disconnect_if_idle(&self, now: Instant, idle: Duration) -> bool {
        let live = {
            let activity = lock(&self.activity);
            let idle_long =
                activity.busy == 0 && now.saturating_duration_since(activity.last) > idle;
            if !idle_long {
                return false;
            }
            lock(&self.live).take()
        };
        match live {
            Some(live) => {
                close_session(live.session).await;
                true
            }
            None => false,
        }
    }

    /// Runs `op` on a live session, connecting first when needed. When the session turns out to
    /// be dead, a new one is made and `op` retried once: always when `idempotent`, otherwise only
    /// if the session was already closed before `op` was sent.
    async fn with_session<T, F, Fut>(&self, idempotent: bool, op: F) -> Result<T, UpstreamError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ServiceError>>,
    {
        self.with_session_bounded(idempotent, Some(self.config.timeout), op)
            .await
    }

    /// [`Server::with_session`] with the bound on `op` given: `None` when `op` keeps time
    /// itself (a tool call, whose clock follows the server's signs of life).
    async fn with_session_bounded<T, F, Fut>(
        &self,
        idempotent: bool,
        bound: Option<Duration>,
        op: F,
    ) -> Result<T, UpstreamError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ServiceError>>,
    {
        let _busy = Busy::start(self);
        let mut retried = false;
        loop {
            let session = self.session().await?;
            let was_open = !session.is_closed() && !session.peer().is_transport_closed();
            let outcome = match bound {
                Some(timeout) => match tokio::time::timeout(timeout, op(session.clone())).await {
                    Ok(result) => result.map_err(|e| self.classify(e)),
                    Err(_) => Err(UpstreamError::Timeout {
                        server: self.name().to_owned(),
                        after: timeout,
                    }),
                },
                None => op(session.clone()).await.map_err(|e| self.classify(e)),
            };
            // A legacy SSE stream ended by an oversized event reads as a lost connection; say
            // what happened instead. Not a lost session for the retry below: the same request
            // would only get the same answer. The dead session is replaced on the next call.
            let outcome = outcome.map_err(|error| match error {
                UpstreamError::Closed { .. } if self.ended_oversized(&session) => {
                    UpstreamError::ResponseTooLarge {
                        server: self.name().to_owned(),
                        limit: self.max_response_bytes,
                    }
                }
                other => other,
            });
            let outcome = outcome.map_err(|error| self.explain_lost(error));
            match outcome {
                Err(error) if error.session_lost() && !retried => {
                    Box::pin(self.drop_session(&session)).await;
                    // A non-idempotent request already sent to a live session may have been
                    // processed before the session died: report instead of repeating it.
                    if !idempotent && was_open {
                        return Err(error);
                    }
                    tracing::info!(server = %self.name(), %error, "session lost, reconnecting once");
                    retried = true;
                }
                Err(error) => {
                    if error.session_lost() {
                        Box::pin(self.drop_session(&session)).await;
                    }
                    // Refused credentials make the server unusable although the session lives
                    // on: say so in its state (`/healthz`, `servers list`), and let the
                    // background retry notice when a new login makes it work again.
                    if error.is_auth_failure() {
                        self.set_state(ServerState::Failed {
                            reason: error.to_string(),
                        });
                    }
                    return Err(error);
                }
                Ok(value) => {
                    if matches!(lock(&self.status).state, ServerState::Failed { .. }) {
                        self.set_state(ServerState::Ready);
                    }
                    return Ok(value);
                }
            }
        }
    }

    /// The live session, connecting (once, shared by concurrent callers) when there is none.
    async fn session(&self) -> Result<Arc<Session>, UpstreamError> {
        if let Some(session) = self.current_open() {
            return Ok(session);
        }
        let _guard = self.connect_lock.lock().await;
        if let Some(session) = self.current_open() {
            return Ok(session);
        }
        if self.retired.load(Ordering::SeqCst) {
            return Err(UpstreamError::Disabled {
                server: self.name().to_owned(),
            });
        }
        // Boxed: the connect future is large, and inline it would be part of (and moved with)
        // every call's future although a call almost never connects.
        Box::pin(self.connect_locked()).await
    }

    /// A new session's facts, in the server's status.
    fn record_connected(&self, connected: &Connected, started: Instant) {
        let mut status = lock(&self.status);
        // A server starting with the gateway is `ready` once its tools are published
        // (`Server::mark_started`), so `/healthz` never says ready before search can find it.
        if status.state != ServerState::Starting {
            status.state = ServerState::Ready;
        }
        status.last_error = None;
        status.era = Some(connected.era);
        status.protocol_version = Some(connected.protocol_version.clone());
        status.server_name = connected.server_name.clone();
        status.server_version = connected.server_version.clone();
        status.about = connected.about.clone();
        status.connect_ms = Some(started.elapsed().as_millis() as u64);
        status.last_change = Some(SystemTime::now());
    }

    /// [`Server::session`]'s connect, under its `connect_lock`.
    async fn connect_locked(&self) -> Result<Arc<Session>, UpstreamError> {
        // A dead session is replaced; the old one is closed so its child group is killed.
        let stale = lock(&self.live).take();
        if let Some(stale) = stale {
            close_session(stale.session).await;
        }
        // A first connection at start-up stays `starting`, so `/healthz` can tell it from a
        // reconnect.
        if lock(&self.status).state != ServerState::Starting {
            self.set_state(ServerState::Connecting);
        }
        let started = Instant::now();
        let known_era = lock(&self.status).era;
        let timeout = self.config.timeout;
        let mut spawned = None;
        let connecting = async {
            let oauth = self.authorized_client().await?;
            connect::connect(
                &self.config,
                &self.policy,
                self.handler.clone(),
                known_era,
                oauth.as_ref(),
                self.max_response_bytes,
                &mut spawned,
            )
            .await
        };
        let result = tokio::time::timeout(timeout, connecting)
            .await
            .unwrap_or_else(|_| {
                Err(UpstreamError::Timeout {
                    server: self.name().to_owned(),
                    after: timeout,
                })
            });
        if spawned.is_some() {
            lock(&self.child).clone_from(&spawned);
        }
        let connected: Connected = match result {
            Ok(connected) => connected,
            Err(error) => {
                let error = with_child_words(error, spawned.as_ref()).await;
                self.set_state(ServerState::Failed {
                    reason: error.to_string(),
                });
                return Err(error);
            }
        };
        self.record_connected(&connected, started);
        let session = Arc::new(connected.session);
        tracing::info!(
            server = %self.name(),
            era = %connected.era,
            ms = started.elapsed().as_millis() as u64,
            "upstream connected"
        );
        if connected.era == Era::Modern {
            connect::listen_for_changes(&session, self.handler.clone());
        }
        *lock(&self.live) = Some(Live {
            session: session.clone(),
            oversized: connected.oversized,
            child: spawned,
            // A 2026-07-28 request carries `_meta` rmcp adds; only legacy calls go express.
            express: connected.express.filter(|_| connected.era == Era::Legacy),
        });
        *lock(&self.liveness) = Liveness {
            last: Instant::now(),
            missed: 0,
            pinging: false,
        };
        self.resubscribe(&session);
        Ok(session)
    }

    /// The client of a server configured for OAuth, made on first use; `None` for any other
    /// server. Called with the connect lock held, so it is made once.
    async fn authorized_client(&self) -> Result<Option<AuthorizedClient>, UpstreamError> {
        let config::Auth::OAuth(oauth) = &self.config.auth else {
            return Ok(None);
        };
        if let Some(client) = lock(&self.authorized).clone() {
            return Ok(Some(client));
        }
        let server = self.name();
        let unavailable = |reason: String| UpstreamError::OAuthUnavailable {
            server: server.to_owned(),
            reason,
        };
        // Configuration validation refuses oauth on anything but Streamable HTTP.
        let config::Transport::Http(http) = &self.config.transport else {
            return Err(unavailable(
                "OAuth needs the Streamable HTTP transport".to_owned(),
            ));
        };
        let store = self.oauth_store.clone().ok_or_else(|| {
            unavailable(
                "the database that keeps its tokens could not be opened (see the warning at startup)"
                    .to_owned(),
            )
        })?;
        let mut settings = OAuthSettings::from_config(server, oauth, DEFAULT_REDIRECT_URI)
            .map_err(|e| unavailable(e.to_string()))?;
        settings.policy = self.policy.clone();
        let client = AuthorizedClient::new(
            http.url.as_str(),
            &settings,
            ServerCredentials::new(store, server),
        )
        .await
        .map_err(|e| match e {
            OAuthError::Refused(refusal) => connect::refused(&self.config, &refusal),
            other => unavailable(other.to_string()),
        })?;
        *lock(&self.authorized) = Some(client.clone());
        Ok(Some(client))
    }

    fn current_open(&self) -> Option<Arc<Session>> {
        let live = lock(&self.live);
        let session = &live.as_ref()?.session;
        (!session.is_closed() && !session.peer().is_transport_closed()).then(|| session.clone())
    }

    async fn drop_session(&self, session: &Arc<Session>) {
        let taken = {
            let mut live = lock(&self.live);
            match live.as_ref() {
                Some(current) if Arc::ptr_eq(&current.session, session) => live.take(),
                _ => None,
            }
        };
        if let Some(taken) = taken {
            // An unresponsive server keeps saying so until it is back.
            if !matches!(lock(&self.status).state, ServerState::Unresponsive { .. }) {
                let reason = match taken.child.as_ref().and_then(ChildWatch::words) {
                    Some(words) => format!("connection lost; {words}"),
                    None => "connection lost".to_owned(),
                };
                self.set_state(ServerState::Failed { reason });
            }
            close_session(taken.session).await;
        }
    }

    /// Whether `session` is the live one and its SSE stream ended on an oversized event.
    fn ended_oversized(&self, session: &Arc<Session>) -> bool {
        lock(&self.live).as_ref().is_some_and(|live| {
            Arc::ptr_eq(&live.session, session)
                && live.oversized.as_ref().is_some_and(|o| o.happened())
        })
    }

    /// A lost session's error, saying why it was lost when that is known: the server was found
    /// unresponsive (and is being restarted), or its process ended (how, and the end of its
    /// stderr).
    fn explain_lost(&self, error: UpstreamError) -> UpstreamError {
        if !error.session_lost() {
            return error;
        }
        if let ServerState::Unresponsive { reason } = &lock(&self.status).state {
            return UpstreamError::Unresponsive {
                server: self.name().to_owned(),
                reason: reason.clone(),
            };
        }
        let child = lock(&self.child).clone();
        match child.filter(|child| child.exit().is_some()) {
            Some(child) => match child.words() {
                Some(words) => UpstreamError::Child {
                    cause: Box::new(error),
                    words,
                },
                None => error,
            },
            None => error,
        }
    }

    /// One round of supervision, run about four times a second by the gateway: notices a stdio
    /// child that has ended (logged at WARN with its exit status; the state says `failed` with
    /// the end of its stderr, and the gateway's retry loop restarts it with backoff), and sends
    /// a liveness `ping` when one is due: every `ping_s` while calls are in flight, every four
    /// `ping_s` once the server has been idle that long. After `ping_misses` unanswered pings in
    /// a row the server is `unresponsive`: its process group is killed, the calls waiting on it
    /// fail at once with that reason, and it is restarted.
    pub fn supervise(self: &Arc<Self>) {
        let ended = {
            let live = lock(&self.live);
            live.as_ref()
                .and_then(|live| live.child.as_ref())
                .filter(|child| child.exit().is_some())
                .cloned()
        };
        if let Some(child) = ended {
            self.child_ended(&child);
            return;
        }
        let Some(ping) = self.config.ping else {
            return;
        };
        let Some(session) = self.current_open() else {
            return;
        };
        let now = Instant::now();
        let (busy, idle) = {
            let activity = lock(&self.activity);
            (
                activity.busy > 0,
                now.saturating_duration_since(activity.last),
            )
        };
        let every = if busy { ping.every } else { ping.every * 4 };
        {
            let mut liveness = lock(&self.liveness);
            if liveness.pinging
                || now.saturating_duration_since(liveness.last) < every
                || (!busy && idle < every)
            {
                return;
            }
            liveness.pinging = true;
            liveness.last = now;
        }
        let server = Arc::clone(self);
        tokio::spawn(async move { server.ping(session, ping).await });
    }

    /// Takes down the session of a stdio child that has ended, saying so.
    fn child_ended(&self, child: &ChildWatch) {
        let taken = {
            let mut live = lock(&self.live);
            match live.as_ref().and_then(|live| live.child.as_ref()) {
                Some(current) if current.pid == child.pid => live.take(),
                _ => None,
            }
        };
        let Some(taken) = taken else {
            return;
        };
        let exit = child.exit().unwrap_or_default();
        let words = child
            .words()
            .unwrap_or_else(|| format!("the process ended with {exit}"));
        tracing::warn!(
            server = %self.name(),
            pid = child.pid,
            %exit,
            "stdio upstream exited; it is restarted with backoff"
        );
        self.set_state(ServerState::Failed {
            reason: format!("the server process stopped: {words}"),
        });
        tokio::spawn(close_session(taken.session));
    }

    /// Sends one liveness ping on `session` and counts the answer (see [`Server::supervise`]).
    async fn ping(&self, session: Arc<Session>, ping: config::Ping) {
        // Anything the server sends meanwhile (progress, a log message) is a sign of life too.
        let heard = self.handler.calls.backlog.received();
        let request = ClientRequest::PingRequest(Default::default());
        let answer = tokio::time::timeout(ping.every, session.peer().send_request(request)).await;
        let alive = match answer {
            // An error the server sent is an answer.
            Ok(Ok(_)) | Ok(Err(ServiceError::McpError(_))) => true,
            // The session ended meanwhile: not this check's business.
            Ok(Err(_)) => {
                lock(&self.liveness).pinging = false;
                return;
            }
            Err(_) => self.handler.calls.backlog.received() != heard,
        };
        let missed = {
            let mut liveness = lock(&self.liveness);
            liveness.pinging = false;
            liveness.missed = if alive { 0 } else { liveness.missed + 1 };
            liveness.missed
        };
        if missed < ping.misses {
            if missed > 0 {
                tracing::info!(
                    server = %self.name(),
                    missed,
                    "upstream did not answer a ping"
                );
            }
            return;
        }
        lock(&self.liveness).missed = 0;
        let reason = format!(
            "it did not answer {missed} pings in a row ({}s each)",
            ping.every.as_secs_f32()
        );
        tracing::warn!(
            server = %self.name(),
            %reason,
            "upstream unresponsive; ending its process and restarting it"
        );
        let taken = {
            let mut live = lock(&self.live);
            match live.as_ref() {
                Some(current) if Arc::ptr_eq(&current.session, &session) => live.take(),
                _ => None,
            }
        };
        self.set_state(ServerState::Unresponsive { reason });
        drop(session);
        if let Some(taken) = taken {
            // A stopped process cannot read its stdin EOF: kill its group outright. Ending the
            // session fails the calls waiting on it.
            if let Some(child) = &taken.child {
                child.kill();
            }
            close_session(taken.session).await;
        }
    }

    fn set_state(&self, state: ServerState) {
        let mut status = lock(&self.status);
        match &state {
            ServerState::Failed { reason } | ServerState::Unresponsive { reason } => {
                status.last_error = Some(reason.clone());
            }
            ServerState::Ready => status.last_error = None,
            _ => {}
        }
        status.state = state;
        status.last_change = Some(SystemTime::now());
    }

    fn classify(&self, error: ServiceError) -> UpstreamError {
        let server = self.name().to_owned();
        match error {
            ServiceError::McpError(data) => UpstreamError::Rpc {
                server,
                code: data.code.0,
                message: data.message.to_string(),
                data: data.data,
            },
            ServiceError::TransportClosed => UpstreamError::Closed {
                server,
                reason: "transport closed".to_owned(),
            },
            ServiceError::TransportSend(e)
                if crate::connect::response_too_large(e.error.as_ref()) =>
            {
                UpstreamError::ResponseTooLarge {
                    server,
                    limit: self.max_response_bytes,
                }
            }
            ServiceError::TransportSend(e) => {
                // A reconnect or redirect the network policy refused (a name rebound to a
                // private address, a redirect elsewhere) says which line would allow it.
                if let Some(refused) = crate::connect::refused_in(&self.config, e.error.as_ref()) {
                    return refused;
                }
                // A 401 mid-session (token revoked or expired) or a failed token refresh says
                // what to do about it.
                if let Some(failure) = crate::connect::auth_failure(&self.config, e.error.as_ref())
                {
                    return failure;
                }
                let reason = e.error.to_string();
                if reason.contains("closed")
                    || reason.contains("expired")
                    || reason.contains("Session")
                {
                    UpstreamError::Closed { server, reason }
                } else {
                    UpstreamError::Connect { server, reason }
                }
            }
            ServiceError::Timeout { timeout } => UpstreamError::Timeout {
                server,
                after: timeout,
            },
            ServiceError::Cancelled { .. } => UpstreamError::Cancelled { server },
            other => UpstreamError::Protocol {
                server,
                reason: other.to_string(),
            },
        }
    }
}

/// Counts one request as running on its server from creation to drop, so that the idle sweep
/// never closes a session under it.
pub(crate) struct Busy<'a>(&'a Server);

impl<'a> Busy<'a> {
    pub(crate) fn start(server: &'a Server) -> Self {
        let mut activity = lock(&server.activity);
        activity.busy += 1;
        activity.last = Instant::now();
        drop(activity);
        Self(server)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut activity = lock(&self.0.activity);
        activity.busy = activity.busy.saturating_sub(1);
        activity.last = Instant::now();
    }
}

async fn list_all_tools(session: &Session) -> Result<Vec<serde_json::Value>, ServiceError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..MAX_TOOL_PAGES {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = session.peer().list_tools(params).await?;
        for tool in page.tools {
            // Keep the tool exactly as sent; the catalog reads what it needs.
            if let Ok(value) = serde_json::to_value(&tool) {
                tools.push(value);
            }
        }
        match page.next_cursor {
            Some(next) if seen.insert(next.clone()) => cursor = Some(next),
            Some(next) => {
                tracing::warn!(cursor = %next, "upstream repeated a tools/list cursor; stopping");
                break;
            }
            None => break,
        }
    }
    Ok(tools)
}

/// Sends one `tools/call` on `session` and waits for its answer, relaying what `options` asks
/// for (see [`Server::call_tool_with`]).
async fn call_once(
    session: &Session,
    calls: &InFlight,
    params: CallToolRequestParams,
    options: &CallOptions,
    idle: Duration,
) -> Result<CallToolResponse, ServiceError> {
    let registered = calls.register(options);
    let peer = session.peer().clone();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let mut request_options = PeerRequestOptions::no_options();
    if let Some(capabilities) = &options.client_capabilities
        && connect::is_modern(session)
    {
        let mut meta = RequestMetaObject::new();
        meta.set_client_capabilities(capabilities.clone());
        request_options = request_options.with_meta(meta);
    }
    let handle = peer
        .send_request_with_option(request, request_options)
        .await?;
    registered.sent(handle.id.clone(), handle.progress_token.clone());
    let cancel = CancelOnDrop::new(peer, handle.id.clone());
    let result = wait(handle.await_response(), &registered, options, idle, cancel).await;
    // The progress and log messages sent before the result reach the caller first.
    calls.backlog.settle(calls.backlog.received()).await;
    call_tool_response(result?)
}

/// One `tools/call` on a stdio session's express lane, from a caller that wants only its
/// result (so nothing is waited for before it, unlike [`call_once`]).
async fn call_express(
    express: &Arc<Express>,
    session: &Session,
    calls: &InFlight,
    params: CallToolRequestParams,
    options: &CallOptions,
    idle: Duration,
) -> Result<CallToolResponse, ServiceError> {
    // Registered, so the server's requests during the call are refused as the caller's, and
    // its progress keeps the call alive.
    let registered = calls.register(options);
    let (id, mut pending) = express.call(params).await?;
    registered.sent(id.clone(), ProgressToken(id.clone()));
    let cancel = CancelOnDrop::new(session.peer().clone(), id);
    wait(pending.outcome(), &registered, options, idle, cancel).await
}

/// Waits for a sent call's `response`: cancelled upstream (through `cancel`) when the caller
/// cancels, or when nothing was heard of it for `idle` (see [`call::Activity`]) or it ran past
/// the longest a call may take.
async fn wait<T>(
    response: impl Future<Output = Result<T, ServiceError>>,
    registered: &Registered<'_>,
    options: &CallOptions,
    idle: Duration,
    cancel: CancelOnDrop,
) -> Result<T, ServiceError> {
    tokio::pin!(response);
    let started = Instant::now();
    let limit = started + MAX_CALL.max(idle);
    let result = loop {
        let deadline = registered
            .activity
            .deadline(idle)
            .map_or(limit, |deadline| deadline.min(limit));
        tokio::select! {
            result = &mut response => break result,
            () = options.ct.cancelled() => {
                cancel.cancel("cancelled by the client");
                return Err(ServiceError::Cancelled { reason: Some("cancelled by the client".to_owned()) });
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                let now = Instant::now();
                let expired = now >= limit
                    || registered.activity.deadline(idle).is_some_and(|deadline| now >= deadline);
                if expired {
                    cancel.cancel("timed out at mcpgw");
                    return Err(ServiceError::Timeout { timeout: idle });
                }
            }
        }
    };
    cancel.disarm();
    result
}

/// Whether `value` serialises to more than `limit` bytes of JSON; stops counting once it does.
fn exceeds(value: &impl Serialize, limit: usize) -> bool {
    struct Count {
        bytes: usize,
        limit: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes += buf.len();
            if self.bytes > self.limit {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Count { bytes: 0, limit }, value).is_err()
}

/// A `tools/call` answer as the response it is. rmcp parses results as an untagged union, so a
/// result may arrive as another variant of the same shape.
pub(crate) fn call_tool_response(result: ServerResult) -> Result<CallToolResponse, ServiceError> {
    match result {
        ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
        ServerResult::InputRequiredResult(result) => Ok(CallToolResponse::InputRequired(result)),
        ServerResult::CreateTaskResult(result) => Ok(CallToolResponse::Task(result)),
        ServerResult::EmptyResult(_) => Ok(CallToolResponse::Complete(CallToolResult::default())),
        other => serde_json::to_value(&other)
            .ok()
            .and_then(|value| serde_json::from_value::<CallToolResult>(value).ok())
            .map(CallToolResponse::Complete)
            .ok_or(ServiceError::UnexpectedResponse),
    }
}

/// `error`, from a connect that started `child`, with what the child adds: how it ended (a
/// crash on start-up is given a moment to finish ending) and the end of its stderr. A connect
/// that timed out gives only the stderr: the child is killed because of the timeout.
async fn with_child_words(error: UpstreamError, child: Option<&ChildWatch>) -> UpstreamError {
    let Some(child) = child else {
        return error;
    };
    let words = if matches!(error, UpstreamError::Timeout { .. }) {
        let tail = child.stderr_tail();
        (!tail.is_empty()).then(|| format!("the end of its stderr:\n{}", tail.join("\n")))
    } else {
        child.exited_within(Duration::from_millis(500)).await;
        child.words()
    };
    match words {
        Some(words) => UpstreamError::Child {
            cause: Box::new(error),
            words,
        },
        None => error,
    }
}

async fn close_session(session: Arc<Session>) {
    match Arc::try_unwrap(session) {
        Ok(mut session) => {
            let _ = session.close_with_timeout(Duration::from_secs(3)).await;
        }
        // Someone still holds it (an in-flight call); cancelling the token ends the service
        // loop, which drops the transport and kills the child group.
        Err(session) => session.cancellation_token().cancel(),
    }
}
