//! [`AuthorizedClient`]: the Streamable HTTP client for an upstream with stored credentials,
//! with one shared refresh however many requests a 401 rejects.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
};

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::{
    model::ClientJsonRpcMessage,
    transport::{
        auth::{AuthorizationManager, OAuthClientConfig},
        streamable_http_client::{
            StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
            StreamableHttpResponseLimits,
        },
    },
};
use secrecy::ExposeSecret;
use sse_stream::{Error as SseError, Sse};
use url::Url;

use crate::{lock, transport::streamable_http::SessionAwareClient};

use super::{
    AuthError, RefreshOutcome, TokenResponse, error::*, guarded::*, refreshes, settings::*,
    store::*,
};

/// The Streamable HTTP client for one OAuth-protected upstream: mcpgw's [`SessionAwareClient`]
/// with a bearer token from the stored credentials.
///
/// - Before each request the token is refreshed if it has less than `min(30 s, lifetime / 2)`
///   left (rmcp's rule); requests wait on one per-server lock, so concurrent ones share one
///   refresh.
/// - A 401 to a request that carried a token causes one refresh and one retry. Requests
///   rejected together share that refresh: whoever takes the lock second finds a token other
///   than the one it sent and retries with it.
/// - A failed refresh is classified and applied ([`RefreshFailure`]), and remembered for
///   [`AuthorizedClient::last_refresh_failure`]. A transient failure fails the request and keeps
///   the token; a dead grant sends the request without a token, so the server's 401 challenge
///   comes back to the caller ([`rmcp::service::ClientInitializeError::auth_challenge`]).
/// - Without credentials requests go out unauthenticated: a server that wants a token answers
///   401, and that challenge starts a login ([`start_login`]).
#[derive(Clone)]
pub struct AuthorizedClient {
    inner: SessionAwareClient,
    shared: Arc<Shared>,
}

struct Shared {
    credentials: ServerCredentials,
    settings: OAuthSettings,
    /// The client under the manager, to explain a refused refresh.
    http: Arc<GuardedOAuthClient>,
    /// The rmcp manager, behind the lock every token read and refresh takes.
    manager: tokio::sync::Mutex<Manager>,
    events: Mutex<Events>,
}

struct Manager {
    manager: AuthorizationManager,
    /// The client the manager is set up to refresh for; set lazily once credentials exist,
    /// because a client built before the login has none, and again when a login (perhaps in
    /// another process) stored tokens of another client.
    configured: Option<String>,
}

#[derive(Default)]
struct Events {
    refresh_failure: Option<(RefreshFailure, String)>,
    challenge: Option<String>,
}

impl fmt::Debug for AuthorizedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizedClient")
            .field("server", &self.shared.credentials.server())
            .finish_non_exhaustive()
    }
}

pub(super) type HttpError = <reqwest::Client as StreamableHttpClient>::Error;

impl AuthorizedClient {
    /// A client for `server_url`, whose credentials are in `credentials`. Both its MCP
    /// requests and its OAuth requests are guarded by `settings.policy`: the MCP ones through
    /// the same client as an upstream connection (same-origin redirects), the OAuth ones
    /// through the guarded OAuth client. `server_url` itself must pass the policy.
    pub async fn new(
        server_url: &str,
        settings: &OAuthSettings,
        credentials: ServerCredentials,
    ) -> Result<Self, OAuthError> {
        settings.validate()?;
        let url = Url::parse(server_url).map_err(|e| OAuthError::Settings {
            name: "url".to_owned(),
            reason: e.to_string(),
        })?;
        netguard::check_url(&url, &settings.policy).map_err(OAuthError::Refused)?;
        let mcp_http = crate::transport::http_client(settings.policy.clone())
            .map_err(|e| OAuthError::HttpClient(e.to_string()))?;
        let (mut manager, http) = new_manager(server_url, settings).await?;
        manager.set_credential_store(credentials.for_rmcp());
        let shared = Arc::new(Shared {
            credentials,
            settings: settings.clone(),
            http,
            manager: tokio::sync::Mutex::new(Manager {
                manager,
                configured: None,
            }),
            events: Mutex::new(Events::default()),
        });
        {
            let mut guard = shared.manager.lock().await;
            // Discovery failing now must not cost a still-valid token: it is retried when a
            // refresh is needed.
            if let Err(error) = shared.configure(&mut guard).await {
                let error = shared.http.explain(error, OAuthError::Discovery);
                tracing::warn!(server = shared.credentials.server(), %error, "oauth setup deferred");
            }
        }
        Ok(Self {
            inner: SessionAwareClient::new(mcp_http),
            shared,
        })
    }

    pub fn credentials(&self) -> &ServerCredentials {
        &self.shared.credentials
    }

    /// The last refresh that failed, what it meant, and why; cleared once a token is usable
    /// again.
    pub fn last_refresh_failure(&self) -> Option<(RefreshFailure, String)> {
        lock(&self.shared.events).refresh_failure.clone()
    }

    /// The last `WWW-Authenticate` challenge (401 or 403) an upstream answered with; pass it to
    /// [`start_login`].
    pub fn last_challenge(&self) -> Option<String> {
        lock(&self.shared.events).challenge.clone()
    }

    /// The token for the next request, refreshed first when near expiry. `None`: no usable
    /// credentials, send unauthenticated. `Err`: a transient failure; the token is kept.
    async fn access_token(&self) -> Result<Option<String>, AuthError> {
        let mut guard = self.shared.manager.lock().await;
        let started = now_epoch_secs();
        // Under the lock: a refresh sent from here on is this request's.
        self.shared.http.take_refresh_sent();
        let mut error = match guard.manager.get_access_token().await {
            Ok(token) => {
                self.shared.usable_again();
                return Ok(Some(token));
            }
            Err(error) => error,
        };
        if !self.shared.has_token().await {
            return Ok(None);
        }
        // A refresh was due but the manager could not refresh for these tokens (no client
        // known when it was built, discovery failed then, or a new login stored another
        // client's tokens): configure it now and ask again.
        let before = guard.configured.clone();
        match self.shared.configure(&mut guard).await {
            Ok(true) if guard.configured != before => {
                match guard.manager.get_access_token().await {
                    Ok(token) => {
                        self.shared.usable_again();
                        return Ok(Some(token));
                    }
                    Err(again) => error = again,
                }
            }
            Ok(true) => {}
            // rmcp dropped tokens minted by another issuer.
            Ok(false) => return Ok(None),
            Err(setup) => error = setup,
        }
        Ok(self
            .shared
            .refresh_failed(error, started, None)
            .await?
            .token())
    }

    /// After the server rejected `sent`: a token to retry with, or `None` when there is none.
    async fn token_after_rejection(&self, sent: &str) -> Result<Option<String>, AuthError> {
        let mut guard = self.shared.manager.lock().await;
        let started = now_epoch_secs();
        // Under the refresh guard (with a shared store, a lease every replica takes): a
        // refresh another process finished while this request was rejected is seen here, and
        // its token used, instead of refreshing once more with the rotated refresh token.
        let _refreshing = self.shared.credentials.refresh_guard().await?;
        match self.shared.stored_token().await? {
            // Someone refreshed while this request was in flight.
            Some(stored) if stored != sent => return Ok(Some(stored)),
            Some(_) => {}
            None => return Ok(None),
        }
        match self.shared.configure(&mut guard).await {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(error) => {
                let settled = self
                    .shared
                    .refresh_failed(error, started, Some(sent))
                    .await?;
                return Ok(settled.token());
            }
        }
        match super::store::with_guard_held(guard.manager.refresh_token()).await {
            Ok(token) => {
                lock(&self.shared.events).refresh_failure = None;
                refreshes::count(RefreshOutcome::Ok);
                self.shared.http.take_refresh_sent();
                tracing::info!(
                    server = self.shared.credentials.server(),
                    "access token refreshed"
                );
                Ok(Some(token.access_token().secret().to_owned()))
            }
            Err(error) => Ok(self
                .shared
                .refresh_failed(error, started, Some(sent))
                .await?
                .token()),
        }
    }

    async fn with_token<T, F, Fut>(
        &self,
        explicit: Option<String>,
        call: F,
    ) -> Result<T, StreamableHttpError<HttpError>>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<HttpError>>>,
    {
        // A caller-supplied token is not ours to refresh.
        let token = match explicit {
            Some(token) => return self.observe(call(Some(token)).await),
            None => self.access_token().await?,
        };
        let result = self.observe(call(token.clone()).await);
        match (result, token) {
            (Err(StreamableHttpError::AuthRequired(challenge)), Some(sent)) => {
                match self.token_after_rejection(&sent).await? {
                    Some(fresh) => self.observe(call(Some(fresh)).await),
                    None => Err(StreamableHttpError::AuthRequired(challenge)),
                }
            }
            (result, _) => result,
        }
    }
}

impl AuthorizedClient {
    /// Remembers the challenge of a 401 or 403 for [`AuthorizedClient::last_challenge`].
    fn observe<T>(
        &self,
        result: Result<T, StreamableHttpError<HttpError>>,
    ) -> Result<T, StreamableHttpError<HttpError>> {
        if let Some(challenge) = result.as_ref().err().and_then(|e| e.auth_challenge()) {
            lock(&self.shared.events).challenge = Some(challenge.to_owned());
        }
        result
    }
}

impl Shared {
    /// Tells the manager which client the stored tokens belong to (rmcp's
    /// `initialize_from_store`, which also drops tokens from another issuer), plus the client
    /// secret rmcp does not store. Returns whether the manager can now refresh. Does nothing
    /// when it is already set up for the stored tokens' client.
    async fn configure(&self, guard: &mut Manager) -> Result<bool, AuthError> {
        let stored = self.credentials.credentials().await?;
        let Some(credentials) = stored.filter(|c| c.token_response.is_some()) else {
            return Ok(false);
        };
        if guard.configured.as_deref() == Some(credentials.client_id.as_str()) {
            return Ok(true);
        }
        guard.configured = None;
        if !guard.manager.initialize_from_store().await? {
            return Ok(false);
        }
        let secret = if self.settings.client_id.as_deref() == Some(credentials.client_id.as_str()) {
            self.settings.client_secret.clone()
        } else {
            self.credentials
                .registration_of(&credentials)
                .await?
                .and_then(|r| r.client_secret)
        };
        if let Some(secret) = secret {
            guard.manager.configure_client(
                OAuthClientConfig::new(
                    credentials.client_id.clone(),
                    self.settings.redirect_uri.clone(),
                )
                .with_client_secret(secret.expose_secret().to_owned()),
            )?;
        }
        guard.configured = Some(credentials.client_id);
        Ok(true)
    }

    /// A token is usable again: the last failure is over, and a refresh rmcp made on the way
    /// (ahead of expiry) is counted.
    fn usable_again(&self) {
        lock(&self.events).refresh_failure = None;
        if self.http.take_refresh_sent() {
            refreshes::count(RefreshOutcome::Ok);
        }
    }

    async fn stored_token(&self) -> Result<Option<String>, AuthError> {
        Ok(self
            .credentials
            .credentials()
            .await?
            .and_then(|c| c.token_response)
            .map(|t| t.access_token().secret().to_owned()))
    }

    async fn has_token(&self) -> bool {
        self.stored_token().await.is_ok_and(|t| t.is_some())
    }

    /// Classifies, applies and records a refresh that failed, having started at `started`
    /// (unix seconds); `rejected` is the access token the server refused, if that is what
    /// caused the refresh. `Err`: transient, the request fails and the tokens are kept.
    ///
    /// A refresh token is single-use with most servers, so when two processes sharing the
    /// database (`mcpgw serve` and `mcpgw tools`) refresh at once, one is refused with
    /// `invalid_grant`. Its tokens are not dead, they were replaced: tokens stored since the
    /// refresh started (other than the one refused) are used rather than deleted.
    async fn refresh_failed(
        &self,
        error: AuthError,
        started: u64,
        rejected: Option<&str>,
    ) -> Result<Settled, AuthError> {
        // Whatever rmcp sent on the way is this failure's, not a later success's.
        self.http.take_refresh_sent();
        let failure = classify_refresh_error(&error);
        // rmcp words a refused token request "Request failed"; the guard says why. The
        // classification stays that of the original error (transient: nothing is known about
        // the grant).
        let error = match self.http.last_refusal() {
            Some(refusal) if failure == RefreshFailure::Transient => {
                AuthError::TokenRefreshFailed(refusal.to_string())
            }
            _ => error,
        };
        let server = self.credentials.server();
        if failure != RefreshFailure::Transient
            && let Ok(Some(stored)) = self.credentials.credentials().await
            && let Some(token) = &stored.token_response
            && stored.token_received_at.is_some_and(|at| at >= started)
            && rejected != Some(token.access_token().secret().as_str())
        {
            tracing::info!(
                server,
                "tokens were replaced while refreshing; using the new ones"
            );
            lock(&self.events).refresh_failure = None;
            refreshes::count(RefreshOutcome::Replaced);
            return Ok(Settled::Replaced(token.access_token().secret().to_owned()));
        }
        tracing::warn!(server, ?failure, %error, "token refresh failed");
        refreshes::count(RefreshOutcome::Failed(failure));
        if let Err(store_error) = failure.apply(&self.credentials).await {
            tracing::warn!(server, %store_error, "could not delete dead credentials");
        }
        lock(&self.events).refresh_failure = Some((failure, error.to_string()));
        match failure {
            RefreshFailure::Transient => Err(error),
            RefreshFailure::Reauthorize | RefreshFailure::ClientRejected => Ok(Settled::Dead),
        }
    }
}

/// What a refresh that failed for good leaves to send.
enum Settled {
    /// The credentials were dead and are deleted: the request goes out without a token.
    Dead,
    /// Another process stored newer tokens meanwhile: this access token.
    Replaced(String),
}

impl Settled {
    fn token(self) -> Option<String> {
        match self {
            Settled::Dead => None,
            Settled::Replaced(token) => Some(token),
        }
    }
}

impl StreamableHttpClient for AuthorizedClient {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<HttpError>> {
        self.with_token(auth_header, |token| {
            self.inner.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<HttpError>> {
        self.with_token(auth_header, |token| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<HttpError>> {
        self.with_token(auth_header, |token| {
            self.inner.delete_session(
                uri.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<HttpError>> {
        self.with_token(auth_header, |token| {
            self.inner.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<HttpError>> {
        self.with_token(auth_header, |token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
