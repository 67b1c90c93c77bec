//! Opening one rmcp client session over the transport a server is configured with.
//!
//! Era detection: the first connection probes with `server/discover` and falls back to the
//! legacy `initialize` handshake (rmcp's `ClientLifecycleMode::Auto`); the era that worked is
//! remembered by the caller and used directly on every reconnect, so a legacy server does not pay
//! for the probe again. A probe that fails in a way rmcp does not classify (for example a legacy
//! server answering `server/discover` with an empty success) is retried once with `initialize`.
//!
//! Credentials: every HTTP and SSE request carries the server's custom `headers` plus the header
//! of its auth strategy, unless a custom header of the same name replaces it (then the strategy's
//! variable is not even read). Values are read from the environment at each connect, held as
//! `SecretString`s, and become header values marked sensitive. Redirects are followed only
//! within the configured origin, so no header, custom ones included, is sent anywhere else
//! (reqwest itself strips only `Authorization` and `Cookie` on a cross-origin redirect).
//!
//! The network policy (the server's `netguard::Policy`: `[network] allow` plus its
//! `allow_private_network`) is applied before anything is sent: the configured URL is checked
//! with `netguard::check_url`, and every HTTP client is built by
//! `netguard::guarded_client_builder`, so host names resolve only to admitted addresses and each
//! redirect hop is judged by the guard before the same-origin rule above. A refusal found
//! anywhere in a failure's chain becomes [`UpstreamError::Refused`], with the guard's message.
//!
//! A server configured for `oauth` (Streamable HTTP only) talks through its
//! [`AuthorizedClient`], which the caller keeps across reconnects: every request carries the
//! stored access token, refreshed as needed. No token is ever a custom header or logged.
//!
//! An HTTP 401 is explained in terms of that configuration: the credentials from `VAR` were
//! rejected, none are configured, or the server wants OAuth (its `WWW-Authenticate` names RFC 9728
//! `resource_metadata`, or the server is configured for OAuth and has no usable sign-in). A token
//! refresh that failed without a verdict on the sign-in is reported as such, without asking for a
//! login.

use std::{error::Error as StdError, sync::Arc};

use config::Auth;
use http::{HeaderMap, HeaderName, HeaderValue};
use ids::{PrincipalId, ServerName};
use netguard::{Policy, Refusal};
// Sampling and logging are deprecated by SEP-2577 but still part of every revision relayed.
#[allow(deprecated)]
use rmcp::{
    ClientHandler, ErrorData as McpError, RoleClient,
    model::{
        ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
        ElicitRequestParams, ElicitResult, Implementation, LoggingMessageNotificationParam,
        ProgressNotificationParam, ProtocolVersion, ResourceUpdatedNotificationParam,
        ServerNotification, SubscriptionFilter,
    },
    service::{
        ClientLifecycleMode, InboundStreamOrigin, NotificationContext, RequestContext,
        RunningService, serve_client_with_lifecycle,
    },
    transport::{
        StreamableHttpClientTransport,
        streamable_http_client::{
            AuthRequiredError, StreamableHttpClientTransportConfig, StreamableHttpError,
        },
    },
};
use secrecy::ExposeSecret;

use crate::{
    Era, Events, ListKind, ResourceUpdated, ToolsChanged, UpstreamError,
    call::{Answer, Ask, InFlight},
    cause,
    oauth::{AuthError, AuthorizedClient},
    transport::{
        self,
        express::Express,
        http_client,
        ordered::{Counted, Turn},
        sse::{Oversized, SseClientConfig, SseClientTransport, SseError},
        stdio::{self, ChildWatch},
    },
};

/// The rmcp client handler mcpgw runs for each upstream session.
///
/// It declares elicitation (form and URL) and sampling: one session serves every client, so
/// whether a request can be answered is decided per request, by the client behind the tool
/// call it belongs to (see [`crate::call`]); a client without the capability gets the server
/// a `-32601` error naming it. Roots are not declared, and `roots/list` gets an empty list:
/// one client's roots must not become every client's. Pings are answered (rmcp's default).
/// Log messages (`notifications/message`) during a call go to its caller, if it asked for
/// them (see [`crate::call`]); others go to mcpgw's log at debug level.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    server: ServerName,
    principal: PrincipalId,
    events: Events,
    /// The tool calls in flight on this server's sessions, shared by every session it opens.
    pub(crate) calls: Arc<InFlight>,
}

impl UpstreamClient {
    pub(crate) fn new(server: ServerName, principal: PrincipalId, events: Events) -> Self {
        Self {
            server,
            principal,
            events,
            calls: Arc::new(InFlight::default()),
        }
    }

    /// Reports that the server's `list` may have changed.
    pub(crate) fn changed(&self, list: ListKind) {
        tracing::debug!(server = %self.server, ?list, "upstream says a list changed");
        let _ = self.events.changes.send(ToolsChanged {
            server: self.server.clone(),
            principal: self.principal.clone(),
            list,
        });
    }

    /// Reports that the server says the resource `uri` changed.
    pub(crate) fn updated(&self, uri: String) {
        tracing::debug!(server = %self.server, %uri, "upstream says a resource changed");
        // Nobody listening is not an error: the gateway may have no subscriber left.
        let _ = self.events.updates.send(ResourceUpdated {
            server: self.server.clone(),
            principal: self.principal.clone(),
            uri,
        });
    }

    /// Waits until every notification for a call received before this one has been handled
    /// (bounded), so logs and progress reach the caller in the order the server sent them.
    async fn wait_turn(&self, context: &NotificationContext<RoleClient>) {
        if let Some(Turn(turn)) = context.extensions.get::<Turn>() {
            self.calls.backlog.settle(*turn).await;
        }
    }
}

/// The capabilities mcpgw declares to every upstream.
fn client_capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({
        "elicitation": {"form": {}, "url": {}},
        "sampling": {},
    }))
    .unwrap_or_default()
}

#[allow(deprecated)]
impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            client_capabilities(),
            Implementation::new("mcpgw", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed(ListKind::Tools);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed(ListKind::Resources);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed(ListKind::Prompts);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updated(params.uri);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.wait_turn(&context).await;
        if !self.calls.progress(&params) {
            tracing::debug!(server = %self.server, token = ?params.progress_token, "progress for no call in flight");
        }
        self.calls.backlog.handled();
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.wait_turn(&context).await;
        if !self.calls.log(&params) {
            tracing::debug!(server = %self.server, level = ?params.level, logger = ?params.logger, data = %params.data, "upstream log message outside a call");
        }
        self.calls.backlog.handled();
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let origin = context.extensions.get::<InboundStreamOrigin>();
        match self
            .calls
            .ask(origin, Ask::Elicit(request), &context.ct)
            .await?
        {
            Answer::Elicit(result) => Ok(result),
            Answer::Sample(_) => Err(McpError::internal_error(
                "the client answered an elicitation with a sampling result",
                None,
            )),
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let origin = context.extensions.get::<InboundStreamOrigin>();
        match self
            .calls
            .ask(origin, Ask::Sample(params), &context.ct)
            .await?
        {
            Answer::Sample(result) => Ok(result),
            Answer::Elicit(_) => Err(McpError::internal_error(
                "the client answered a sampling request with an elicitation result",
                None,
            )),
        }
    }
}

/// Keeps a `subscriptions/listen` stream open on a 2026-07-28 session for the lists whose
/// changes the server announces (its only way to say them), and reports each change like a
/// legacy server's notification. Ends with the session.
pub(crate) fn listen_for_changes(session: &Session, handler: UpstreamClient) {
    let Some(info) = session.peer_info() else {
        return;
    };
    let capabilities = &info.capabilities;
    let mut filter = SubscriptionFilter::default();
    if capabilities.tools.as_ref().and_then(|t| t.list_changed) == Some(true) {
        filter.tools_list_changed = Some(true);
    }
    if capabilities.resources.as_ref().and_then(|r| r.list_changed) == Some(true) {
        filter.resources_list_changed = Some(true);
    }
    if capabilities.prompts.as_ref().and_then(|p| p.list_changed) == Some(true) {
        filter.prompts_list_changed = Some(true);
    }
    if filter == SubscriptionFilter::default() {
        return;
    }
    let peer = session.peer().clone();
    tokio::spawn(async move {
        let mut subscription = match peer.listen(filter).await {
            Ok(subscription) => subscription,
            Err(error) => {
                tracing::info!(server = %handler.server, %error, "server refused subscriptions/listen; its changes are found by the periodic refresh");
                return;
            }
        };
        loop {
            match subscription.next().await {
                Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                    handler.changed(ListKind::Tools)
                }
                Ok(Some(ServerNotification::ResourceListChangedNotification(_))) => {
                    handler.changed(ListKind::Resources)
                }
                Ok(Some(ServerNotification::PromptListChangedNotification(_))) => {
                    handler.changed(ListKind::Prompts)
                }
                Ok(Some(ServerNotification::ResourceUpdatedNotification(updated))) => {
                    handler.updated(updated.params.uri)
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(server = %handler.server, %error, "subscription ended");
                    break;
                }
            }
        }
    });
}

pub(crate) type Session = RunningService<RoleClient, UpstreamClient>;

/// Whether `session` negotiated 2026-07-28 (stateless, per-request `_meta`) or later.
pub(crate) fn is_modern(session: &Session) -> bool {
    session
        .peer()
        .peer_info()
        .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28)
}

/// A live session and what was negotiated.
/// What a server says about itself when it initialises: untrusted text, for the search index
/// (a server without a configured description is found by it), never shown to a model as an
/// instruction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct About {
    pub title: Option<String>,
    pub description: Option<String>,
    pub instructions: Option<String>,
}

pub(crate) struct Connected {
    pub session: Session,
    pub era: Era,
    pub protocol_version: String,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    /// What the server says about itself at initialisation: `serverInfo.title`,
    /// `serverInfo.description` and the result's `instructions`.
    pub about: About,
    /// Legacy SSE only: whether the stream ended on an event over the size limit.
    pub oversized: Option<Oversized>,
    /// stdio only: the lane for plain calls past rmcp's service loop.
    pub express: Option<Arc<Express>>,
}

/// Connects once over the configured transport, under `policy` (this server's). `known_era`
/// skips the probe. `oauth` is the client of a server configured for OAuth (Streamable HTTP
/// only): requests go through it and carry its access token. `max_response_bytes`
/// (`[limits] response_bytes`) caps each message the server sends over Streamable HTTP (a JSON
/// body or one SSE event) and legacy SSE (one event); a larger one fails the request it
/// answers. Stdio keeps rmcp's fixed 16 MiB per line: its child-process transport offers no
/// setting.
pub(crate) async fn connect(
    config: &config::ServerConfig,
    policy: &Arc<Policy>,
    handler: UpstreamClient,
    known_era: Option<Era>,
    oauth: Option<&AuthorizedClient>,
    max_response_bytes: usize,
    child: &mut Option<ChildWatch>,
) -> Result<Connected, UpstreamError> {
    let lifecycle = match known_era {
        Some(Era::Modern) => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        // The legacy HTTP+SSE transport predates `server/discover`; never probe it.
        Some(Era::Legacy) => ClientLifecycleMode::Initialize,
        None if matches!(config.transport, config::Transport::Sse(_)) => {
            ClientLifecycleMode::Initialize
        }
        None => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        },
    };
    let probing = matches!(lifecycle, ClientLifecycleMode::Auto { .. });
    match connect_with(
        config,
        policy,
        handler.clone(),
        lifecycle,
        oauth,
        max_response_bytes,
        child,
    )
    .await
    {
        Err(UpstreamError::Protocol { reason, .. }) if probing => {
            tracing::info!(server = %config.name, %reason, "era probe failed, retrying with initialize");
            connect_with(
                config,
                policy,
                handler,
                ClientLifecycleMode::Initialize,
                oauth,
                max_response_bytes,
                child,
            )
            .await
        }
        other => other,
    }
}

async fn connect_with(
    config: &config::ServerConfig,
    policy: &Arc<Policy>,
    handler: UpstreamClient,
    lifecycle: ClientLifecycleMode,
    oauth: Option<&AuthorizedClient>,
    max_response_bytes: usize,
    child: &mut Option<ChildWatch>,
) -> Result<Connected, UpstreamError> {
    let server = config.name.clone();
    let backlog = handler.calls.backlog.clone();
    let mut oversized = None;
    let mut express = None;
    if let config::Transport::Http(http_config) | config::Transport::Sse(http_config) =
        &config.transport
    {
        // IP literals must be judged here: reqwest connects to them without asking the
        // guard's resolver.
        netguard::check_url(&http_config.url, policy)
            .map_err(|refusal| refused(config, &refusal))?;
    }
    let session = match &config.transport {
        config::Transport::Stdio(stdio_config) => {
            let spawned = stdio::spawn(&server, stdio_config)?;
            *child = Some(spawned.watch());
            express = Some(spawned.express());
            serve_client_with_lifecycle(handler, Counted::new(spawned, backlog), lifecycle).await
        }
        config::Transport::Http(http_config) => {
            let headers = request_headers(config, http_config)?;
            let mut transport_config =
                StreamableHttpClientTransportConfig::with_uri(http_config.url.as_str())
                    .reinit_on_expired_session(true);
            transport_config.custom_headers = headers
                .into_iter()
                .filter_map(|(k, v)| Some((k?, v)))
                .collect();
            transport_config.max_json_response_size = max_response_bytes;
            transport_config.max_sse_event_size = max_response_bytes;
            match oauth {
                Some(client) => {
                    let transport = Counted::new(
                        StreamableHttpClientTransport::with_client(
                            client.clone(),
                            transport_config,
                        ),
                        backlog,
                    );
                    serve_client_with_lifecycle(handler, transport, lifecycle).await
                }
                None => {
                    let client =
                        http_client(policy.clone()).map_err(|e| client_error(&server, &e))?;
                    let transport = Counted::new(
                        StreamableHttpClientTransport::with_client(
                            transport::streamable_http::SessionAwareClient::new(client),
                            transport_config,
                        ),
                        backlog,
                    );
                    serve_client_with_lifecycle(handler, transport, lifecycle).await
                }
            }
        }
        config::Transport::Sse(http_config) => {
            let headers = request_headers(config, http_config)?;
            let client = http_client(policy.clone()).map_err(|e| client_error(&server, &e))?;
            let transport = SseClientTransport::connect_with_limit(
                SseClientConfig {
                    url: http_config.url.clone(),
                    headers,
                    client,
                    policy: policy.clone(),
                    connect_timeout: config.timeout,
                },
                max_response_bytes,
            )
            .await
            .map_err(|e| {
                refused_in(config, &e)
                    .or_else(|| unauthorized(config, &e))
                    .unwrap_or_else(|| UpstreamError::Connect {
                        server: server.clone(),
                        reason: match &e {
                            SseError::HttpStatus { status, .. } => cause::http_status(
                                status.as_u16(),
                                status.canonical_reason().unwrap_or(""),
                                &http_config.url,
                                "",
                            ),
                            _ => e.to_string(),
                        },
                    })
            })?;
            oversized = Some(transport.oversized());
            serve_client_with_lifecycle(handler, Counted::new(transport, backlog), lifecycle).await
        }
    };
    let session = session.map_err(|e| classify_init_error(config, e))?;
    let info = session.peer_info();
    let protocol_version = info
        .as_ref()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    let era = if protocol_version.as_str() >= "2026-07-28" {
        Era::Modern
    } else {
        Era::Legacy
    };
    let (server_name, server_version) = info
        .as_ref()
        .and_then(|i| i.server_info.as_ref())
        .map(|s| (Some(s.name.clone()), Some(s.version.clone())))
        .unwrap_or((None, None));
    let about = About {
        title: info
            .as_ref()
            .and_then(|i| i.server_info.as_ref())
            .and_then(|s| s.title.clone()),
        description: info
            .as_ref()
            .and_then(|i| i.server_info.as_ref())
            .and_then(|s| s.description.clone()),
        instructions: info.as_ref().and_then(|i| i.instructions.clone()),
    };
    Ok(Connected {
        session,
        era,
        protocol_version,
        server_name,
        server_version,
        about,
        oversized,
        express,
    })
}

/// Whether `error`'s chain says a response went over the size limit: rmcp's Streamable HTTP
/// client fails a request with "HTTP response body exceeded the maximum size of N bytes" or
/// "SSE event exceeded the maximum size of N bytes". Matched on the words because the error
/// type is generic over the HTTP client (ours, and the OAuth one).
pub(crate) fn response_too_large(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.to_string().contains("exceeded the maximum size of") {
            return true;
        }
        current = error.source();
    }
    false
}

fn client_error(server: &ServerName, error: &reqwest::Error) -> UpstreamError {
    UpstreamError::Connect {
        server: server.clone(),
        reason: format!("cannot build the HTTP client: {error}"),
    }
}

/// This server's [`UpstreamError::Refused`] for `refusal`, naming the configured origin when
/// the refusal names no URL (a resolver refusal sees only a host name).
pub(crate) fn refused(config: &config::ServerConfig, refusal: &Refusal) -> UpstreamError {
    let refusal = match &config.transport {
        config::Transport::Http(http) | config::Transport::Sse(http) => {
            refusal.clone().at(&http.url)
        }
        config::Transport::Stdio(_) => refusal.clone(),
    };
    UpstreamError::Refused {
        server: config.name.clone(),
        refusal: refusal.to_string(),
    }
}

/// The network policy's refusal somewhere in `error`'s chain, as this server's error.
pub(crate) fn refused_in(
    config: &config::ServerConfig,
    error: &(dyn StdError + 'static),
) -> Option<UpstreamError> {
    refusal_in(error).map(|refusal| refused(config, refusal))
}

/// The first [`Refusal`] in `error`'s chain. rmcp's `StreamableHttpError::Client` and our
/// `SseError::Refused` do not expose what they wrap as a source, so they are opened here.
fn refusal_in<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a Refusal> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(refusal) = error.downcast_ref::<Refusal>() {
            return Some(refusal);
        }
        if let Some(StreamableHttpError::Client(inner)) =
            error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return Refusal::find_in(inner);
        }
        if let Some(SseError::Refused(refusal)) = error.downcast_ref::<SseError>() {
            return Some(refusal);
        }
        current = error.source();
    }
    None
}

/// Every header sent on every request: the custom headers, then the auth strategy's header
/// unless a custom header already has its name (the documented override).
fn request_headers(
    config: &config::ServerConfig,
    http_config: &config::HttpTransport,
) -> Result<HeaderMap, UpstreamError> {
    let server = &config.name;
    let mut map = HeaderMap::new();
    for (name, value) in &http_config.headers {
        let header_name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| UpstreamError::Header {
                server: server.clone(),
                name: name.clone(),
            })?;
        let secret = value.resolve().map_err(|e| UpstreamError::Secret {
            server: server.clone(),
            reason: e.to_string(),
        })?;
        let mut header_value =
            HeaderValue::from_str(secret.expose_secret()).map_err(|_| UpstreamError::Header {
                server: server.clone(),
                name: name.clone(),
            })?;
        // All of them: a plain value from a served JSON file may be a credential too, and
        // sensitivity only keeps values out of `Debug` and HPACK tables.
        header_value.set_sensitive(true);
        map.insert(header_name, header_value);
    }
    let overridden = config
        .auth
        .header_name()
        .and_then(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .is_some_and(|name| map.contains_key(name));
    if overridden {
        tracing::debug!(
            %server,
            auth = %config.auth,
            "a custom header replaces the auth strategy's header"
        );
    } else if let Some((name, value)) = strategy_header(server, &config.auth)? {
        map.insert(name, value);
    }
    Ok(map)
}

/// The header of a `bearer` or `header` strategy, read from the environment now. `oauth`
/// sends none from here: its access token comes from the OAuth flow.
fn strategy_header(
    server: &ServerName,
    auth: &Auth,
) -> Result<Option<(HeaderName, HeaderValue)>, UpstreamError> {
    let credential = auth.credential().map_err(|e| UpstreamError::Secret {
        server: server.clone(),
        reason: e.to_string(),
    })?;
    let Some(credential) = credential else {
        return Ok(None);
    };
    let name =
        HeaderName::from_bytes(credential.name.as_bytes()).map_err(|_| UpstreamError::Header {
            server: server.clone(),
            name: credential.name.clone(),
        })?;
    let mut value = HeaderValue::from_str(credential.value.expose_secret()).map_err(|_| {
        UpstreamError::Secret {
            server: server.clone(),
            reason: format!(
                "environment variable {} holds characters that cannot be sent in an HTTP header",
                auth.env_var().unwrap_or("?")
            ),
        }
    })?;
    value.set_sensitive(true);
    Ok(Some((name, value)))
}

/// The HTTP 401 somewhere in `error`'s chain, explained for this server; `None` when the
/// failure was something else.
pub(crate) fn unauthorized(
    config: &config::ServerConfig,
    error: &(dyn StdError + 'static),
) -> Option<UpstreamError> {
    let challenge = challenge_in(error)?;
    let server = config.name.clone();
    let oauth_offered = has_resource_metadata(&challenge);
    if matches!(config.auth, Auth::OAuth(_)) {
        return Some(UpstreamError::OAuthRequired { server });
    }
    let sources = credential_sources(config);
    Some(if !sources.is_empty() {
        UpstreamError::CredentialsRejected {
            server,
            credential: sources.join(" and "),
            oauth_offered,
        }
    } else if oauth_offered {
        UpstreamError::OAuthRequired { server }
    } else {
        UpstreamError::CredentialsMissing { server }
    })
}

/// What an authentication failure somewhere in `error`'s chain means for this server: an HTTP
/// 401 ([`unauthorized`]), or an OAuth token refresh that failed without a verdict on the grant
/// (a dead grant is not an error here: the request goes out without a token and the server's
/// 401 says the rest).
pub(crate) fn auth_failure(
    config: &config::ServerConfig,
    error: &(dyn StdError + 'static),
) -> Option<UpstreamError> {
    if let Some(unauthorized) = unauthorized(config, error) {
        return Some(unauthorized);
    }
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(auth) = error.downcast_ref::<AuthError>() {
            let reason = match auth {
                // Its own wording ("OAuth token refresh failed: ...") repeats the message's.
                AuthError::TokenRefreshFailed(why) => why.clone(),
                other => other.to_string(),
            };
            return Some(UpstreamError::OAuthRefresh {
                server: config.name.clone(),
                reason,
            });
        }
        current = error.source();
    }
    None
}

/// The `WWW-Authenticate` of a 401 in the chain (empty when the server sent none).
fn challenge_in(error: &(dyn StdError + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(error) = current {
        // `http` turns every Streamable HTTP 401 into `AuthRequired`.
        if let Some(auth) = error.downcast_ref::<AuthRequiredError>() {
            return Some(auth.www_authenticate_header.clone());
        }
        if let Some(SseError::Unauthorized { challenge, .. }) = error.downcast_ref::<SseError>() {
            return Some(challenge.clone().unwrap_or_default());
        }
        current = error.source();
    }
    None
}

/// Where the credentials sent to this server came from, as named in messages: the strategy's
/// variable unless a custom header replaced it, then every credential-like custom header (its
/// variable, or `header NAME` for an inline value).
fn credential_sources(config: &config::ServerConfig) -> Vec<String> {
    let (config::Transport::Http(http) | config::Transport::Sse(http)) = &config.transport else {
        return Vec::new();
    };
    let overridden = config
        .auth
        .header_name()
        .is_some_and(|name| http.headers.keys().any(|k| k.eq_ignore_ascii_case(name)));
    let strategy = config.auth.env_var().filter(|_| !overridden);
    strategy
        .map(str::to_owned)
        .into_iter()
        .chain(
            http.credential_headers()
                .map(|(name, value)| match value.env_var() {
                    Some(var) => var.to_owned(),
                    None => format!("header {name}"),
                }),
        )
        .collect()
}

/// Whether a `WWW-Authenticate` value has a `resource_metadata` auth-param (RFC 9728 section
/// 5.1), the sign that the server is an OAuth protected resource. Quoted strings are skipped,
/// so a `resource_metadata=` inside another parameter's value does not count.
fn has_resource_metadata(challenge: &str) -> bool {
    let bytes = challenge.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b if is_token_byte(b) => {
                let start = i;
                while i < bytes.len() && is_token_byte(bytes[i]) {
                    i += 1;
                }
                let word = &challenge[start..i];
                let rest = challenge[i..].trim_start_matches([' ', '\t']);
                if rest.starts_with('=') && word.eq_ignore_ascii_case("resource_metadata") {
                    return true;
                }
            }
            _ => i += 1,
        }
    }
    false
}

/// RFC 9110 `tchar`, minus `=` which never appears in a parameter name anyway.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn classify_init_error(
    config: &config::ServerConfig,
    error: rmcp::service::ClientInitializeError,
) -> UpstreamError {
    use rmcp::service::ClientInitializeError as E;
    if let Some(error) = init_refused(config, &error) {
        return error;
    }
    if let Some(error) = init_unauthorized(config, &error) {
        return error;
    }
    let server = config.name.clone();
    match error {
        E::ConnectionClosed(reason) => UpstreamError::Connect {
            server,
            reason: format!("the server closed the connection during the handshake ({reason})"),
        },
        E::TransportError { error, context } => UpstreamError::Connect {
            server,
            reason: match &config.transport {
                config::Transport::Http(http) | config::Transport::Sse(http) => {
                    cause::explain(error.error.as_ref(), &http.url)
                }
                config::Transport::Stdio(_) => None,
            }
            .unwrap_or_else(|| format!("{context}: {}", error.error)),
        },
        E::JsonRpcError(data) => UpstreamError::Rpc {
            server,
            code: data.code.0,
            message: data.message.to_string(),
            data: data.data,
        },
        E::Cancelled => UpstreamError::Connect {
            server,
            reason: "cancelled".to_owned(),
        },
        other => UpstreamError::Protocol {
            server,
            reason: other.to_string(),
        },
    }
}

/// A network policy refusal behind a failed handshake, in either phase of the era probe.
fn init_refused(
    config: &config::ServerConfig,
    error: &rmcp::service::ClientInitializeError,
) -> Option<UpstreamError> {
    use rmcp::service::ClientInitializeError as E;
    match error {
        E::TransportError { error, .. } => refused_in(config, error.error.as_ref()),
        E::LegacyFallbackFailed { discover, fallback } => {
            init_refused(config, fallback).or_else(|| init_refused(config, discover))
        }
        _ => None,
    }
}

/// An authentication failure behind a failed handshake, in either phase of the era probe.
fn init_unauthorized(
    config: &config::ServerConfig,
    error: &rmcp::service::ClientInitializeError,
) -> Option<UpstreamError> {
    use rmcp::service::ClientInitializeError as E;
    match error {
        E::TransportError { error, .. } => auth_failure(config, error.error.as_ref()),
        E::LegacyFallbackFailed { discover, fallback } => {
            init_unauthorized(config, fallback).or_else(|| init_unauthorized(config, discover))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn server(toml: &str) -> config::ServerConfig {
        let config = config::parse_toml(toml, Path::new("mcpgw.toml"));
        match config.map(|mut c| c.servers.remove(0)) {
            Ok(server) => server,
            Err(err) => panic!("{err}"),
        }
    }

    /// `name: value` lines of the headers a server sends; Cargo sets CARGO_PKG_NAME for the
    /// test binary, so it stands in for a token without touching the environment.
    fn sent(toml: &str) -> String {
        let server = server(toml);
        let (config::Transport::Http(http) | config::Transport::Sse(http)) = &server.transport
        else {
            panic!("not an http server");
        };
        match request_headers(&server, http) {
            Ok(headers) => {
                let mut lines: Vec<String> = headers
                    .iter()
                    .map(|(name, value)| {
                        assert!(value.is_sensitive(), "{name} is not marked sensitive");
                        format!("{name}: {}", value.to_str().unwrap_or("<binary>"))
                    })
                    .collect();
                lines.sort();
                lines.join("\n")
            }
            Err(err) => format!("error: {err}"),
        }
    }

    const URL: &str = r#"url = "http://127.0.0.1:1/mcp""#;

    #[test]
    fn strategy_header_is_sent_with_custom_headers_on_top() {
        assert_eq!(
            sent(&format!(
                "[[servers]]\nname = \"gh\"\nauth = {{ type = \"bearer\", env = \"CARGO_PKG_NAME\" }}\ntransport = {{ type = \"http\", {URL}, headers = {{ X-Team = \"infra\" }} }}\n"
            )),
            "authorization: Bearer mcpgw-upstream\nx-team: infra"
        );
        assert_eq!(
            sent(&format!(
                "[[servers]]\nname = \"k\"\nauth = {{ type = \"header\", name = \"X-Api-Key\", env = \"CARGO_PKG_NAME\" }}\ntransport = {{ type = \"sse\", {URL} }}\n"
            )),
            "x-api-key: mcpgw-upstream"
        );
        assert_eq!(
            sent(&format!(
                "[[servers]]\nname = \"t\"\nauth = {{ type = \"header\", name = \"Authorization\", scheme = \"Token\", env = \"CARGO_PKG_NAME\" }}\ntransport = {{ type = \"http\", {URL} }}\n"
            )),
            "authorization: Token mcpgw-upstream"
        );
        assert_eq!(
            sent(&format!(
                "[[servers]]\nname = \"o\"\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", {URL} }}\n"
            )),
            ""
        );
    }

    #[test]
    fn custom_header_replaces_the_strategy_whose_variable_is_then_not_read() {
        assert_eq!(
            sent(&format!(
                "[[servers]]\nname = \"gh\"\nauth = {{ type = \"bearer\", env = \"MCPGW_TEST_UNSET_9F2A\" }}\ntransport = {{ type = \"http\", {URL}, headers = {{ authorization = {{ env = \"CARGO_PKG_NAME\", prefix = \"Basic \" }} }} }}\n"
            )),
            "authorization: Basic mcpgw-upstream"
        );
    }

    #[test]
    fn missing_variable_is_a_secret_error_naming_it() {
        assert_eq!(
            sent(&format!(
                "[[servers]]\nname = \"gh\"\nauth = {{ type = \"bearer\", env = \"MCPGW_TEST_UNSET_9F2A\" }}\ntransport = {{ type = \"http\", {URL} }}\n"
            )),
            "error: secret for server 'gh' is not available: environment variable MCPGW_TEST_UNSET_9F2A is not set (hint: export MCPGW_TEST_UNSET_9F2A before starting mcpgw)"
        );
    }

    /// Answers every request on `listener` with `response`, counting the requests.
    async fn answer(
        listener: tokio::net::TcpListener,
        response: String,
        count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer).await;
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    }

    #[tokio::test]
    async fn redirects_are_followed_only_within_the_origin() {
        use std::sync::{Arc, atomic::AtomicUsize, atomic::Ordering};
        let bind = || tokio::net::TcpListener::bind("127.0.0.1:0");
        let (elsewhere, origin) = (bind().await.expect("bind"), bind().await.expect("bind"));
        let (elsewhere_addr, origin_addr) = (
            elsewhere.local_addr().expect("addr"),
            origin.local_addr().expect("addr"),
        );
        let elsewhere_hits = Arc::new(AtomicUsize::new(0));
        let origin_hits = Arc::new(AtomicUsize::new(0));
        let redirect = |to: String| {
            format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
        };
        let away = tokio::spawn(answer(
            elsewhere,
            redirect(format!("http://127.0.0.1:{}/x", origin_addr.port())),
            elsewhere_hits.clone(),
        ));
        // The origin redirects to another port on the same host: another origin.
        let home = tokio::spawn(answer(
            origin,
            redirect(format!("http://{elsewhere_addr}/collect")),
            origin_hits.clone(),
        ));
        let loopback = Arc::new(Policy::parse(["127.0.0.1"]).expect("rule parses"));
        let response = http_client(loopback)
            .expect("client builds")
            .get(format!("http://{origin_addr}/mcp"))
            .header("x-api-key", "k")
            .send()
            .await
            .expect("the 307 itself is the answer");
        assert_eq!(response.status(), http::StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(origin_hits.load(Ordering::SeqCst), 1);
        assert_eq!(
            elsewhere_hits.load(Ordering::SeqCst),
            0,
            "followed across origins"
        );
        away.abort();
        home.abort();
    }

    #[tokio::test]
    async fn a_redirect_to_an_address_the_policy_refuses_is_not_followed() {
        use std::sync::{atomic::AtomicUsize, atomic::Ordering};
        let bind = || tokio::net::TcpListener::bind("127.0.0.1:0");
        let (elsewhere, origin) = (bind().await.expect("bind"), bind().await.expect("bind"));
        let (elsewhere_port, origin_port) = (
            elsewhere.local_addr().expect("addr").port(),
            origin.local_addr().expect("addr").port(),
        );
        let elsewhere_hits = Arc::new(AtomicUsize::new(0));
        let away = tokio::spawn(answer(
            elsewhere,
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned(),
            elsewhere_hits.clone(),
        ));
        let home = tokio::spawn(answer(
            origin,
            format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{elsewhere_port}/x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            ),
            Arc::new(AtomicUsize::new(0)),
        ));
        // Only the configured server's own port is allowed.
        let policy = Arc::new(
            Policy::parse([format!("127.0.0.1:{origin_port}")])
                .expect("rule parses")
                .for_server("dev", false),
        );
        let error = http_client(policy)
            .expect("client builds")
            .get(format!("http://127.0.0.1:{origin_port}/mcp"))
            .send()
            .await
            .expect_err("the hop is refused");
        let refusal = netguard::Refusal::find_in(&error).expect("the refusal is the cause");
        assert_eq!(
            refusal.to_string(),
            format!(
                "refused http://127.0.0.1:{elsewhere_port}: 127.0.0.1 is allowed on port {origin_port} only, not {elsewhere_port}; to allow it, add \"127.0.0.1:{elsewhere_port}\" to [network] allow in mcpgw.toml"
            )
        );
        assert_eq!(elsewhere_hits.load(Ordering::SeqCst), 0);
        away.abort();
        home.abort();
    }

    async fn connect_refused(toml: &str, policy: Policy) -> UpstreamError {
        let server = server(toml);
        let policy =
            Arc::new(policy.for_server(server.name.as_str(), server.allow_private_network));
        let events = Events {
            changes: tokio::sync::mpsc::unbounded_channel().0,
            updates: tokio::sync::broadcast::channel(1).0,
        };
        let handler = UpstreamClient::new(server.name.clone(), PrincipalId::local(), events);
        match connect(
            &server,
            &policy,
            handler,
            None,
            None,
            1024 * 1024,
            &mut None,
        )
        .await
        {
            Ok(_) => panic!("connected"),
            Err(error) => error,
        }
    }

    #[tokio::test]
    async fn a_server_the_policy_refuses_fails_with_the_line_to_add() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        for kind in ["http", "sse"] {
            let error = connect_refused(
                &format!(
                    "[[servers]]\nname = \"dev\"\ntransport = {{ type = \"{kind}\", url = \"http://127.0.0.1:{port}/mcp?session=s3cret\" }}\n"
                ),
                Policy::default(),
            )
            .await;
            assert!(matches!(error, UpstreamError::Refused { .. }), "{error:?}");
            assert_eq!(
                error.to_string(),
                format!(
                    "network policy blocks 'dev': refused http://127.0.0.1:{port}: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'"
                )
            );
        }
        // https to a name that resolves to loopback: refused by the guard's resolver, inside
        // rmcp's transport, and still reported as the refusal.
        let error = connect_refused(
            &format!(
                "[[servers]]\nname = \"dev\"\ntransport = {{ type = \"http\", url = \"https://localhost:{port}/mcp\" }}\n"
            ),
            Policy::default(),
        )
        .await;
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "network policy blocks 'dev': refused https://localhost:{port}: localhost resolves to "
            )) && message.ends_with("(loopback); to allow it, add \"localhost\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'"),
            "{message}"
        );
        assert!(
            listener.accept().is_err(),
            "nothing may have connected to the refused server"
        );
    }

    #[test]
    fn resource_metadata_is_found_only_as_a_parameter() {
        let check = |challenge: &str, expected: bool| {
            assert_eq!(has_resource_metadata(challenge), expected, "{challenge}");
        };
        check(
            r#"Bearer resource_metadata="https://x/.well-known/oauth-protected-resource""#,
            true,
        );
        check(
            r#"Bearer error="invalid_token", Resource_Metadata = "https://x/m""#,
            true,
        );
        check(
            r#"Basic realm="x", Bearer resource_metadata=https://x/m"#,
            true,
        );
        check(r#"Bearer realm="resource_metadata=x""#, false);
        check(r#"Bearer realm="a \" resource_metadata=x""#, false);
        check(r#"Bearer error="invalid_token""#, false);
        check("Bearer resource_metadata_url=x", false);
        check("", false);
    }

    fn explain(toml: &str, challenge: &str) -> String {
        let server = server(toml);
        let error = AuthRequiredError::new(challenge.to_owned());
        match unauthorized(&server, &error) {
            Some(error) => error.to_string(),
            None => "not a 401".to_owned(),
        }
    }

    #[test]
    fn a_401_is_explained_by_the_server_configuration() {
        const OAUTH: &str =
            r#"Bearer resource_metadata="https://x/.well-known/oauth-protected-resource""#;
        let bearer = format!(
            "[[servers]]\nname = \"gh\"\nauth = {{ type = \"bearer\", env = \"GITHUB_TOKEN\" }}\ntransport = {{ type = \"http\", {URL} }}\n"
        );
        assert_eq!(
            explain(&bearer, ""),
            "server 'gh' rejected the credentials from GITHUB_TOKEN (HTTP 401)"
        );
        assert_eq!(
            explain(&bearer, OAUTH),
            "server 'gh' rejected the credentials from GITHUB_TOKEN (HTTP 401); it also accepts OAuth, see `mcpgw auth login gh`"
        );
        let header = format!(
            "[[servers]]\nname = \"k\"\nauth = {{ type = \"header\", name = \"X-Api-Key\", env = \"API_KEY\" }}\ntransport = {{ type = \"sse\", {URL}, headers = {{ Cookie = {{ env = \"SESSION_COOKIE\" }}, X-Team = \"infra\" }} }}\n"
        );
        assert_eq!(
            explain(&header, r#"Bearer error="invalid_token""#),
            "server 'k' rejected the credentials from API_KEY and SESSION_COOKIE (HTTP 401)"
        );
        let overridden = format!(
            "[[servers]]\nname = \"o\"\nauth = {{ type = \"bearer\", env = \"UNUSED\" }}\ntransport = {{ type = \"http\", {URL}, headers = {{ Authorization = {{ env = \"OVERRIDE\", prefix = \"Bearer \" }} }} }}\n"
        );
        assert_eq!(
            explain(&overridden, ""),
            "server 'o' rejected the credentials from OVERRIDE (HTTP 401)"
        );
        let none = format!("[[servers]]\nname = \"n\"\ntransport = {{ type = \"http\", {URL} }}\n");
        assert_eq!(
            explain(&none, OAUTH),
            "server 'n' answered HTTP 401: OAuth required, run `mcpgw auth login n`"
        );
        assert_eq!(
            explain(&none, ""),
            r#"server 'n' requires credentials (HTTP 401) and none are configured (hint: give it auth = { type = "bearer", env = "VAR" } or the header its documentation names)"#
        );
        let oauth = format!(
            "[[servers]]\nname = \"z\"\nauth = {{ type = \"oauth\", scopes = [\"read\"] }}\ntransport = {{ type = \"http\", {URL} }}\n"
        );
        assert_eq!(
            explain(&oauth, ""),
            "server 'z' answered HTTP 401: OAuth required, run `mcpgw auth login z`"
        );
    }

    #[test]
    fn a_transient_refresh_failure_keeps_the_sign_in_and_asks_for_no_login() {
        let server = server(&format!(
            "[[servers]]\nname = \"docs\"\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", {URL} }}\n"
        ));
        let refresh: rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error> =
            AuthError::TokenRefreshFailed(
                "Server returned error response: temporarily_unavailable".into(),
            )
            .into();
        let init = rmcp::service::ClientInitializeError::TransportError {
            error: rmcp::transport::DynamicTransportError::from_parts(
                "test",
                std::any::TypeId::of::<()>(),
                Box::new(refresh),
            ),
            context: "send initialize request".into(),
        };
        let message = classify_init_error(&server, init).to_string();
        assert_eq!(
            message,
            "server 'docs': the OAuth access token could not be refreshed (Server returned error response: temporarily_unavailable); the sign-in is kept and the next request tries again"
        );
        assert!(!message.contains("auth login"), "{message}");
    }

    #[test]
    fn a_401_is_found_behind_transport_wrappers() {
        let server = server(&format!(
            "[[servers]]\nname = \"gh\"\nauth = {{ type = \"bearer\", env = \"GITHUB_TOKEN\" }}\ntransport = {{ type = \"sse\", {URL} }}\n"
        ));
        let sse = SseError::Unauthorized {
            url: "http://127.0.0.1:1/sse".into(),
            challenge: None,
        };
        assert!(matches!(
            unauthorized(&server, &sse),
            Some(UpstreamError::CredentialsRejected { .. })
        ));
        let other = SseError::Closed;
        assert!(unauthorized(&server, &other).is_none());

        let streamable: rmcp::transport::streamable_http_client::StreamableHttpError<
            reqwest::Error,
        > = rmcp::transport::streamable_http_client::StreamableHttpError::AuthRequired(
            AuthRequiredError::new(String::new()),
        );
        let init = rmcp::service::ClientInitializeError::TransportError {
            error: rmcp::transport::DynamicTransportError::from_parts(
                "test",
                std::any::TypeId::of::<()>(),
                Box::new(streamable),
            ),
            context: "send initialize request".into(),
        };
        assert_eq!(
            classify_init_error(&server, init).to_string(),
            "server 'gh' rejected the credentials from GITHUB_TOKEN (HTTP 401)"
        );
    }
}
