//! OAuth 2.1 for upstream MCP servers: logging in, keeping credentials, authorising requests.
//!
//! rmcp's `auth` support does the protocol work: discovery (RFC 9728 protected resource metadata,
//! RFC 8414 and OpenID metadata with the well-known fallbacks, the 2025-03-26 default endpoints),
//! client ID metadata documents, dynamic client registration (RFC 7591), PKCE S256, the RFC 8707
//! `resource` parameter, the RFC 9207 `iss` check, and refreshing a token that has less than
//! `min(30 s, lifetime / 2)` left. This module adds what mcpgw needs around it:
//!
//! - [`OAuthSettings`]: the per-server knobs (scopes, client identity, extra parameters), built
//!   from the configuration by [`OAuthSettings::from_config`].
//! - [`OAuthStore`]: persistence, independent of the backend (in memory here; the gateway's
//!   SQLite store in `gateway::oauth`). rmcp's [`StoredCredentials`] per server; besides them the
//!   [`ClientRegistration`]s per issuer and redirect URI, shared by every server of that issuer,
//!   because rmcp only remembers the client id, and a dynamically registered confidential client
//!   needs its secret to refresh.
//! - [`start_login`] / [`finish_login`]: the authorisation-code flow split at the browser, with a
//!   single-use login state that expires after [`LOGIN_TTL`].
//! - [`AuthorizedClient`]: the Streamable HTTP client for an upstream with stored credentials.
//!   Unlike rmcp's `AuthClient`, concurrent requests rejected with 401 share one refresh (rmcp
//!   refreshes once per rejected request), and a failed refresh is classified
//!   ([`RefreshFailure`]) and acted on: tokens or the registration are deleted when they are dead,
//!   and kept when the failure is transient or another process replaced them meanwhile (a
//!   refresh-token rotation race). Tokens a later login stored for another client are picked up.
//!
//! Every OAuth request (protected resource and authorisation server metadata, registration,
//! token, JWKS, whatever rmcp fetches) goes through [`OAuthSettings::policy`]: one
//! `OAuthHttpClient` built on `netguard::guarded_client_builder` checks each request URL with
//! `netguard::check_url` before sending it, resolves names only to admitted addresses and judges
//! every redirect hop. So does the unauthenticated probe for a challenge, and the MCP requests
//! of an [`AuthorizedClient`]. rmcp's own checks of the host names discovered metadata names
//! still apply on top. A refusal is [`OAuthError::Refused`], with the guard's message.
//!
//! Nothing here logs, prints or `Debug`-formats a token, authorisation code, PKCE verifier or
//! client secret. (rmcp itself logs the authorisation code at `debug` level in
//! `rmcp::transport::auth`; keep that target at `info` or above.)

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use netguard::{Policy, Refusal};
use rmcp::{
    model::ClientJsonRpcMessage,
    transport::{
        auth::{
            AuthorizationCallback, AuthorizationManager, AuthorizationRequest,
            AuthorizationSession, CredentialStore, OAuthClientConfig, OAuthHttpClient,
            OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest,
            WWWAuthenticateParams,
        },
        streamable_http_client::{
            StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
            StreamableHttpResponseLimits,
        },
    },
};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sse_stream::{Error as SseError, Sse};
use url::Url;

use crate::http::SessionAwareClient;

// The rmcp types in this module's API, so that a store or the CLI needs no rmcp dependency.
pub use oauth2::TokenResponse;
pub use rmcp::transport::auth::{
    AuthError, CredentialRefreshGuard, OAuthTokenResponse, StateStore, StoredAuthorizationState,
    StoredCredentials,
};

/// How long a started login may wait for its callback. The state is single-use and refused after
/// this, whatever the store does.
pub const LOGIN_TTL: Duration = Duration::from_secs(10 * 60);

/// The client name sent with dynamic client registration unless the settings say otherwise.
pub const DEFAULT_CLIENT_NAME: &str = "mcpgw";

/// Authorisation request parameters that the flow itself sets; extra parameters may not override
/// them, or PKCE, the state check or the resource binding would silently break.
const RESERVED_AUTHORIZATION_PARAMS: &[&str] = &[
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "resource",
];

/// Token request parameters that the flow itself sets.
const RESERVED_TOKEN_PARAMS: &[&str] = &[
    "grant_type",
    "code",
    "code_verifier",
    "redirect_uri",
    "refresh_token",
    "client_id",
    "client_secret",
    "client_assertion",
    "client_assertion_type",
    "resource",
    "scope",
];

// ---------------------------------------------------------------------------------------------
// Settings

/// How mcpgw authorises against one upstream. Built from the server's `oauth` configuration.
#[derive(Clone)]
pub struct OAuthSettings {
    /// Scopes to request. Empty: let discovery choose (the challenge's `scope`, else the
    /// resource's `scopes_supported`, else none), as the MCP scope-selection strategy says.
    pub scopes: Vec<String>,
    /// A client id registered with the authorisation server out of band. Takes priority over a
    /// client metadata document and dynamic registration.
    pub client_id: Option<String>,
    /// The secret of the pre-registered client, for a confidential client.
    pub client_secret: Option<SecretString>,
    /// HTTPS URL of mcpgw's client ID metadata document, used as the client id when the
    /// authorisation server supports them and no client id is configured.
    pub client_metadata_url: Option<String>,
    /// `client_name` for dynamic client registration.
    pub client_name: String,
    /// Extra query parameters for the authorisation request (for example `prompt` or
    /// `audience`). May not repeat a parameter the flow sets.
    pub authorization_params: BTreeMap<String, String>,
    /// Extra form parameters for token requests (code exchange and refresh). May not repeat a
    /// parameter the flow sets.
    pub token_params: BTreeMap<String, String>,
    /// Where the authorisation server sends the browser back to.
    pub redirect_uri: String,
    /// Where this server's OAuth requests (and an [`AuthorizedClient`]'s MCP requests) may go:
    /// the server's own `netguard` policy. [`OAuthSettings::new`] starts with the strict
    /// default (https to public addresses only); callers set the server's.
    pub policy: Arc<Policy>,
}

/// The redirect URI of settings used only to authorise requests and refresh tokens, when the
/// configuration names none: neither sends it. A login listens on a port of its own and builds
/// its settings with that address.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1/callback";

impl OAuthSettings {
    /// The settings of a server configured with `auth = { type = "oauth", .. }`. `redirect_uri`
    /// is used unless the configuration names one. The client secret is read from its variable
    /// now (a gateway reads it once, when the server first connects).
    ///
    /// `resource` is not honoured yet: rmcp asks for the resource its discovery found (the
    /// server's protected resource metadata), else the server URL; a warning says so.
    pub fn from_config(
        server: &str,
        config: &config::OAuthConfig,
        redirect_uri: &str,
    ) -> Result<Self, OAuthError> {
        let client_secret = config
            .client_secret()
            .map_err(|error| OAuthError::Settings {
                name: "client_secret_env".to_owned(),
                reason: error.to_string(),
            })?;
        if let Some(resource) = &config.resource {
            tracing::warn!(
                server,
                %resource,
                "oauth `resource` is not supported yet; asking for the resource the server's metadata names, else its url"
            );
        }
        let mut settings = Self::new(
            config
                .redirect_uri
                .as_ref()
                .map_or(redirect_uri, |url| url.as_str()),
        );
        settings.scopes = config.scopes.clone();
        settings.client_id = config.client_id.clone();
        settings.client_secret = client_secret;
        settings.client_metadata_url = config.client_metadata_url.as_ref().map(Url::to_string);
        settings.authorization_params = config.authorization_params.clone();
        settings.token_params = config.token_params.clone();
        Ok(settings)
    }

    pub fn new(redirect_uri: impl Into<String>) -> Self {
        Self {
            scopes: Vec::new(),
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            client_name: DEFAULT_CLIENT_NAME.to_owned(),
            authorization_params: BTreeMap::new(),
            token_params: BTreeMap::new(),
            redirect_uri: redirect_uri.into(),
            policy: Arc::new(Policy::default()),
        }
    }

    /// Every problem with these settings, or nothing.
    pub fn validate(&self) -> Result<(), OAuthError> {
        let invalid = |name: &str, reason: String| OAuthError::Settings {
            name: name.to_owned(),
            reason,
        };
        if Url::parse(&self.redirect_uri).is_err() {
            return Err(invalid("redirect_uri", "not an absolute URL".to_owned()));
        }
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Err(invalid(
                "client_secret",
                "a client secret needs the client id it belongs to".to_owned(),
            ));
        }
        if let Some(url) = &self.client_metadata_url {
            let ok = Url::parse(url)
                .is_ok_and(|u| u.scheme() == "https" && u.host_str().is_some() && u.path() != "/");
            if !ok {
                return Err(invalid(
                    "client_metadata_url",
                    "must be an https URL with a path".to_owned(),
                ));
            }
        }
        for (params, reserved, name) in [
            (
                &self.authorization_params,
                RESERVED_AUTHORIZATION_PARAMS,
                "authorization_params",
            ),
            (&self.token_params, RESERVED_TOKEN_PARAMS, "token_params"),
        ] {
            if let Some(key) = params.keys().find(|k| reserved.contains(&k.as_str())) {
                return Err(invalid(
                    name,
                    format!("`{key}` is set by the OAuth flow and cannot be overridden"),
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("scopes", &self.scopes)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[REDACTED]"),
            )
            .field("client_metadata_url", &self.client_metadata_url)
            .field("client_name", &self.client_name)
            .field("authorization_params", &self.authorization_params)
            // Token parameters can carry assertions; show only which are set.
            .field(
                "token_params",
                &self.token_params.keys().collect::<Vec<_>>(),
            )
            .field("redirect_uri", &self.redirect_uri)
            .field("policy", &self.policy)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("oauth setting `{name}` is invalid: {reason}")]
    Settings { name: String, reason: String },
    #[error("authorization server discovery failed: {0}")]
    Discovery(AuthError),
    #[error("client registration failed: {0}")]
    Registration(AuthError),
    #[error("authorization failed: {0}")]
    Authorization(AuthError),
    #[error("the callback is not for this login (state mismatch)")]
    StateMismatch,
    #[error("the login expired after {} minutes; start it again", LOGIN_TTL.as_secs() / 60)]
    LoginExpired,
    #[error("the callback is not an authorization response: {0}")]
    Callback(String),
    #[error("credential store: {0}")]
    Store(String),
    /// The network policy refused a URL the flow needed (the server's, a metadata document,
    /// the token or registration endpoint, a redirect, or an address a name resolved to).
    /// The message names the configuration line that would allow it.
    #[error("{0}")]
    Refused(Refusal),
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
}

impl From<OAuthError> for AuthError {
    fn from(error: OAuthError) -> Self {
        match error {
            OAuthError::Discovery(e)
            | OAuthError::Registration(e)
            | OAuthError::Authorization(e) => e,
            other => AuthError::CredentialStoreError(other.to_string()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Refresh failures

/// What a failed token refresh means for the stored credentials. See [`classify_refresh_error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefreshFailure {
    /// The grant is dead (`invalid_grant`: revoked or expired refresh token, or no refresh token
    /// at all, or another definitive refusal). The tokens are deleted and the user must log in
    /// again; the client registration stays.
    Reauthorize,
    /// The authorisation server no longer knows or accepts this client (`invalid_client`,
    /// `unauthorized_client`). Tokens and the client registration are deleted; the next login
    /// registers again (or, for a configured client id, the configuration must be fixed).
    ClientRejected,
    /// Network failure, server error, unreadable response, store failure: nothing is known about
    /// the grant. The tokens are kept, the failure is reported, no login is asked for.
    Transient,
}

impl RefreshFailure {
    /// Deletes what this failure says is dead.
    pub async fn apply(self, credentials: &ServerCredentials) -> Result<(), OAuthError> {
        match self {
            Self::Reauthorize => credentials.forget_tokens().await,
            Self::ClientRejected => credentials.forget_client().await.map(drop),
            Self::Transient => Ok(()),
        }
    }
}

/// Sorts an error from an rmcp token refresh into what it means for the credentials.
///
/// rmcp reports `invalid_grant` as [`AuthError::TokenRefreshRejected`] and folds a missing
/// refresh token into [`AuthError::AuthorizationRequired`]; every other token-endpoint answer
/// becomes [`AuthError::TokenRefreshFailed`] carrying oauth2's message,
/// `"Server returned error response: <code>[: <description>]"`. The error code is read back
/// from that text: it is the only place rmcp keeps it.
pub fn classify_refresh_error(error: &AuthError) -> RefreshFailure {
    match error {
        AuthError::AuthorizationRequired
        | AuthError::TokenRefreshRejected(_)
        | AuthError::TokenExpired => RefreshFailure::Reauthorize,
        AuthError::TokenRefreshFailed(message) => {
            match token_endpoint_error_code(message).as_deref() {
                Some("invalid_client" | "unauthorized_client") => RefreshFailure::ClientRejected,
                Some("server_error" | "temporarily_unavailable") | None => {
                    RefreshFailure::Transient
                }
                // invalid_grant arrives as TokenRefreshRejected; invalid_request, invalid_scope,
                // unsupported_grant_type and extensions are definitive refusals of this grant.
                Some(_) => RefreshFailure::Reauthorize,
            }
        }
        _ => RefreshFailure::Transient,
    }
}

/// The OAuth error code in oauth2's rendering of a token endpoint error response.
fn token_endpoint_error_code(message: &str) -> Option<String> {
    let rest = message.strip_prefix("Server returned error response: ")?;
    let code = rest.split(':').next()?.trim();
    (!code.is_empty() && code.chars().all(|c| c.is_ascii_graphic()))
        .then(|| code.to_ascii_lowercase())
}

// ---------------------------------------------------------------------------------------------
// Persistence

/// How the client id in a [`ClientRegistration`] was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationMethod {
    /// RFC 7591 dynamic client registration with the authorisation server.
    Dynamic,
}

/// A client registered with an authorisation server, kept so later logins and refreshes use it.
/// Bound to the issuer and redirect URI it was registered with: another authorisation server
/// must never see it (SEP-2352), and another redirect URI needs a new registration. Shared by
/// every server and user of that issuer.
#[derive(Clone, Serialize, Deserialize)]
pub struct ClientRegistration {
    pub method: RegistrationMethod,
    pub client_id: String,
    #[serde(with = "optional_secret")]
    pub client_secret: Option<SecretString>,
    /// The authorisation server's `issuer`; for one that publishes none, a per-server key from
    /// [`ServerCredentials::issuer_key`], so that such a registration is never shared.
    pub issuer: String,
    pub redirect_uri: String,
    pub registered_at: u64,
}

impl fmt::Debug for ClientRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRegistration")
            .field("method", &self.method)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[REDACTED]"),
            )
            .field("issuer", &self.issuer)
            .field("redirect_uri", &self.redirect_uri)
            .field("registered_at", &self.registered_at)
            .finish()
    }
}

/// Serialises a secret for the store (and only there).
mod optional_secret {
    use secrecy::{ExposeSecret, SecretString};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        secret: &Option<SecretString>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match secret {
            Some(secret) => serializer.serialize_some(secret.expose_secret()),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<SecretString>, D::Error> {
        Ok(Option::<String>::deserialize(deserializer)?.map(SecretString::from))
    }
}

/// Where OAuth state lives. Tokens are per server (an implementation serving several users
/// keys them by its user as well, one store value per user); client registrations are per
/// issuer and redirect URI, shared by every server and user of that authorisation server.
/// In memory: [`MemoryOAuthStore`]; the gateway implements it over its SQLite store.
#[async_trait]
pub trait OAuthStore: Send + Sync + 'static {
    /// rmcp's record for `server`: client id, token response, granted scopes, when received,
    /// issuer.
    async fn credentials(&self, server: &str) -> Result<Option<StoredCredentials>, OAuthError>;
    async fn save_credentials(
        &self,
        server: &str,
        credentials: StoredCredentials,
    ) -> Result<(), OAuthError>;
    /// Deletes `server`'s tokens.
    async fn clear_credentials(&self, server: &str) -> Result<(), OAuthError>;
    /// The client registered with `issuer` for `redirect_uri`.
    async fn registration(
        &self,
        issuer: &str,
        redirect_uri: &str,
    ) -> Result<Option<ClientRegistration>, OAuthError>;
    /// The client `client_id` registered with `issuer`, whatever its redirect URI (to refresh
    /// tokens, which need the client's secret but not its redirect URI).
    async fn registration_by_client_id(
        &self,
        issuer: &str,
        client_id: &str,
    ) -> Result<Option<ClientRegistration>, OAuthError>;
    /// Stores a registration, replacing the one for the same issuer and redirect URI.
    async fn save_registration(&self, registration: ClientRegistration) -> Result<(), OAuthError>;
    /// Deletes the registration for `issuer` and `redirect_uri`.
    async fn clear_registration(&self, issuer: &str, redirect_uri: &str) -> Result<(), OAuthError>;
    /// Held across a refresh and the save of its result, so that two refreshes of one server's
    /// credentials (in this process or, for a shared store, in another) do not interleave. The
    /// guard must not be needed by `credentials` or `save_credentials`.
    async fn refresh_guard(
        &self,
        server: &str,
    ) -> Result<Option<CredentialRefreshGuard>, OAuthError> {
        let _ = server;
        Ok(None)
    }
}

/// An [`OAuthStore`] that forgets everything when the process ends.
#[derive(Default)]
pub struct MemoryOAuthStore {
    credentials: Mutex<HashMap<String, StoredCredentials>>,
    /// By (issuer, redirect URI).
    registrations: Mutex<HashMap<(String, String), ClientRegistration>>,
    refresh_locks: RefreshLocks,
}

#[async_trait]
impl OAuthStore for MemoryOAuthStore {
    async fn credentials(&self, server: &str) -> Result<Option<StoredCredentials>, OAuthError> {
        Ok(lock(&self.credentials).get(server).cloned())
    }

    async fn save_credentials(
        &self,
        server: &str,
        credentials: StoredCredentials,
    ) -> Result<(), OAuthError> {
        lock(&self.credentials).insert(server.to_owned(), credentials);
        Ok(())
    }

    async fn clear_credentials(&self, server: &str) -> Result<(), OAuthError> {
        lock(&self.credentials).remove(server);
        Ok(())
    }

    async fn registration(
        &self,
        issuer: &str,
        redirect_uri: &str,
    ) -> Result<Option<ClientRegistration>, OAuthError> {
        let key = (issuer.to_owned(), redirect_uri.to_owned());
        Ok(lock(&self.registrations).get(&key).cloned())
    }

    async fn registration_by_client_id(
        &self,
        issuer: &str,
        client_id: &str,
    ) -> Result<Option<ClientRegistration>, OAuthError> {
        Ok(lock(&self.registrations)
            .values()
            .find(|r| r.issuer == issuer && r.client_id == client_id)
            .cloned())
    }

    async fn save_registration(&self, registration: ClientRegistration) -> Result<(), OAuthError> {
        let key = (
            registration.issuer.clone(),
            registration.redirect_uri.clone(),
        );
        lock(&self.registrations).insert(key, registration);
        Ok(())
    }

    async fn clear_registration(&self, issuer: &str, redirect_uri: &str) -> Result<(), OAuthError> {
        lock(&self.registrations).remove(&(issuer.to_owned(), redirect_uri.to_owned()));
        Ok(())
    }

    async fn refresh_guard(
        &self,
        server: &str,
    ) -> Result<Option<CredentialRefreshGuard>, OAuthError> {
        Ok(Some(self.refresh_locks.acquire(server).await))
    }
}

/// In-process refresh serialisation, one async mutex per key: enough for a store that only
/// one process refreshes from. [`OAuthStore::refresh_guard`] implementations can use it.
#[derive(Default)]
pub struct RefreshLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl RefreshLocks {
    /// Waits for and holds the lock named `key` until the guard is dropped.
    pub async fn acquire(&self, key: &str) -> CredentialRefreshGuard {
        let mutex = lock(&self.locks).entry(key.to_owned()).or_default().clone();
        CredentialRefreshGuard::new(mutex.lock_owned().await)
    }
}

/// One server's slice of an [`OAuthStore`].
#[derive(Clone)]
pub struct ServerCredentials {
    store: Arc<dyn OAuthStore>,
    server: Arc<str>,
}

impl fmt::Debug for ServerCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerCredentials")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// What `mcpgw auth status` shows for a server. Holds no secret.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CredentialStatus {
    pub client_id: Option<String>,
    /// How the client was obtained, when mcpgw registered it (`None` for a configured client
    /// id or a client ID metadata document).
    pub registration: Option<RegistrationMethod>,
    pub issuer: Option<String>,
    pub scopes: Vec<String>,
    pub has_access_token: bool,
    pub has_refresh_token: bool,
    /// When the access token expires, if the server said.
    pub expires_at: Option<SystemTime>,
}

impl CredentialStatus {
    pub fn logged_in(&self) -> bool {
        self.has_access_token
    }
}

impl ServerCredentials {
    pub fn new(store: Arc<dyn OAuthStore>, server: &str) -> Self {
        Self {
            store,
            server: server.into(),
        }
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The stored tokens and what they belong to.
    pub async fn credentials(&self) -> Result<Option<StoredCredentials>, OAuthError> {
        self.store.credentials(&self.server).await
    }

    /// The key registrations are stored under for an authorisation server whose metadata says
    /// `issuer`. One without an issuer (the 2025-03-26 default endpoints) gets a key of this
    /// server's own: nothing proves two such servers share an authorisation server, and
    /// offering one's client (and its secret) to the other is what SEP-2352 forbids.
    pub fn issuer_key(&self, issuer: Option<&str>) -> String {
        match issuer {
            Some(issuer) => issuer.to_owned(),
            None => format!("mcpgw:server:{}", self.server),
        }
    }

    /// The stored registration of the client `credentials` were issued to, if mcpgw
    /// registered it.
    pub async fn registration_of(
        &self,
        credentials: &StoredCredentials,
    ) -> Result<Option<ClientRegistration>, OAuthError> {
        let issuer = self.issuer_key(credentials.issuer.as_deref());
        self.store
            .registration_by_client_id(&issuer, &credentials.client_id)
            .await
    }

    pub async fn status(&self) -> Result<CredentialStatus, OAuthError> {
        let Some(credentials) = self.credentials().await? else {
            return Ok(CredentialStatus::default());
        };
        let registration = self.registration_of(&credentials).await?;
        let mut status = CredentialStatus {
            client_id: Some(credentials.client_id.clone()),
            registration: registration.map(|r| r.method),
            issuer: credentials.issuer.clone(),
            scopes: credentials.granted_scopes.clone(),
            ..CredentialStatus::default()
        };
        if let Some(token) = &credentials.token_response {
            status.has_access_token = true;
            status.has_refresh_token = token.refresh_token().is_some();
            status.expires_at = token
                .expires_in()
                .zip(credentials.token_received_at)
                .map(|(lifetime, at)| UNIX_EPOCH + Duration::from_secs(at) + lifetime);
        }
        Ok(status)
    }

    /// Deletes the tokens; the client registration is kept for the next login.
    pub async fn forget_tokens(&self) -> Result<(), OAuthError> {
        self.store.clear_credentials(&self.server).await
    }

    /// Deletes the tokens and the registration of the client they were issued to (`mcpgw auth
    /// logout --forget-client`, or a client the authorisation server no longer accepts).
    /// Returns the forgotten registration, if there was one.
    pub async fn forget_client(&self) -> Result<Option<ClientRegistration>, OAuthError> {
        let registration = match self.credentials().await? {
            Some(credentials) => self.registration_of(&credentials).await?,
            None => None,
        };
        if let Some(registration) = &registration {
            self.store
                .clear_registration(&registration.issuer, &registration.redirect_uri)
                .await?;
        }
        self.forget_tokens().await?;
        Ok(registration)
    }

    async fn save_registration(&self, registration: ClientRegistration) -> Result<(), OAuthError> {
        self.store.save_registration(registration).await
    }

    fn for_rmcp(&self) -> RmcpCredentials {
        RmcpCredentials(self.clone())
    }
}

/// [`ServerCredentials`] seen through rmcp's per-manager [`CredentialStore`].
struct RmcpCredentials(ServerCredentials);

#[async_trait]
impl CredentialStore for RmcpCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.0.credentials().await?)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        Ok(self
            .0
            .store
            .save_credentials(&self.0.server, credentials)
            .await?)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        Ok(self.0.forget_tokens().await?)
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        Ok(self.0.store.refresh_guard(&self.0.server).await?)
    }
}

// ---------------------------------------------------------------------------------------------
// Login state

/// Whether a login state saved at `state.created_at` is past [`LOGIN_TTL`] at `now_epoch_secs`.
/// A state from the future (clock moved back) is treated as expired too.
pub fn login_state_expired(state: &StoredAuthorizationState, now_epoch_secs: u64) -> bool {
    match now_epoch_secs.checked_sub(state.created_at) {
        Some(age) => age > LOGIN_TTL.as_secs(),
        None => true,
    }
}

/// In-memory [`StateStore`] for logins that finish in this process (the CLI's loopback
/// callback). Abandoned states are purged as new ones are saved.
#[derive(Default)]
pub struct MemoryLoginStates {
    states: Mutex<HashMap<String, StoredAuthorizationState>>,
}

#[async_trait]
impl StateStore for MemoryLoginStates {
    async fn save(
        &self,
        csrf_token: &str,
        state: StoredAuthorizationState,
    ) -> Result<(), AuthError> {
        let now = now_epoch_secs();
        let mut states = lock(&self.states);
        states.retain(|_, s| !login_state_expired(s, now));
        states.insert(csrf_token.to_owned(), state);
        Ok(())
    }

    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        Ok(lock(&self.states).get(csrf_token).cloned())
    }

    async fn delete(&self, csrf_token: &str) -> Result<(), AuthError> {
        lock(&self.states).remove(csrf_token);
        Ok(())
    }
}

/// Enforces [`LOGIN_TTL`] over any [`StateStore`]: an expired state is deleted and reported as
/// absent, so the expiry does not depend on each backend remembering to check.
struct ExpiringStates(Arc<dyn StateStore>);

impl ExpiringStates {
    async fn load_at(
        &self,
        csrf_token: &str,
        now_epoch_secs: u64,
    ) -> Result<Option<StoredAuthorizationState>, AuthError> {
        match self.0.load(csrf_token).await? {
            Some(state) if login_state_expired(&state, now_epoch_secs) => {
                self.0.delete(csrf_token).await?;
                Ok(None)
            }
            other => Ok(other),
        }
    }
}

#[async_trait]
impl StateStore for ExpiringStates {
    async fn save(
        &self,
        csrf_token: &str,
        state: StoredAuthorizationState,
    ) -> Result<(), AuthError> {
        self.0.save(csrf_token, state).await
    }

    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        self.load_at(csrf_token, now_epoch_secs()).await
    }

    async fn delete(&self, csrf_token: &str) -> Result<(), AuthError> {
        self.0.delete(csrf_token).await
    }
}

// ---------------------------------------------------------------------------------------------
// Login

/// A login waiting for its callback. Single use: [`finish_login`] consumes it.
pub struct PendingLogin {
    session: AuthorizationSession,
    state: String,
    states: Arc<dyn StateStore>,
    started_at: u64,
    /// The client under the session's manager, to explain a refused token request.
    http: Arc<GuardedOAuthClient>,
}

impl fmt::Debug for PendingLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingLogin")
            .field("started_at", &self.started_at)
            .finish_non_exhaustive()
    }
}

/// What the authorisation server sent back to the redirect URI.
pub enum LoginCallback {
    /// The full redirect URL, as a loopback listener or the user pastes it.
    Url(String),
    /// The parameters, taken apart already.
    Code {
        code: String,
        state: String,
        issuer: Option<String>,
    },
}

impl fmt::Debug for LoginCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL and the code are both the authorisation code in disguise.
        match self {
            Self::Url(_) => f.write_str("LoginCallback::Url([REDACTED])"),
            Self::Code { issuer, .. } => f
                .debug_struct("LoginCallback::Code")
                .field("issuer", issuer)
                .finish_non_exhaustive(),
        }
    }
}

/// The result of a login, without the tokens.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoginOutcome {
    pub client_id: String,
    pub scopes: Vec<String>,
    pub expires_in: Option<Duration>,
    pub has_refresh_token: bool,
}

/// Starts the authorisation-code flow for the server at `server_url`: discovers the
/// authorisation server (from `challenge`, the `WWW-Authenticate` value of a 401 or 403 when
/// there is one, else by probing the server), picks the client identity in the order the MCP
/// specification gives (the configured client id; a client ID metadata document if the server
/// supports them; dynamic registration, reusing one stored for this issuer and redirect URI or
/// storing the new one), and returns the URL to open in a browser.
///
/// Scopes follow the MCP scope-selection strategy (rmcp's), extended as SEP-2350 asks: a new
/// authorisation requests the union of what was granted before (by this issuer), what is
/// configured or discovered, and what the challenge asks for.
pub async fn start_login(
    server_url: &str,
    settings: &OAuthSettings,
    credentials: &ServerCredentials,
    states: Arc<dyn StateStore>,
    challenge: Option<&str>,
) -> Result<(String, PendingLogin), OAuthError> {
    settings.validate()?;
    let base_url = Url::parse(server_url).map_err(|e| OAuthError::Settings {
        name: "url".to_owned(),
        reason: e.to_string(),
    })?;
    netguard::check_url(&base_url, &settings.policy).map_err(OAuthError::Refused)?;
    let (mut manager, http) = new_manager(server_url, settings).await?;
    manager.set_credential_store(credentials.for_rmcp());
    manager.set_state_store(ExpiringStates(states.clone()));

    let challenge = match challenge {
        Some(challenge) => Some(challenge.to_owned()),
        None => probe_challenge(&base_url, &settings.policy)
            .await
            .map_err(OAuthError::Refused)?,
    };
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| http.explain(e, OAuthError::Discovery))?;
    if !resolution.source.is_discovered() {
        tracing::warn!(
            server = credentials.server(),
            "no OAuth metadata published; using the 2025-03-26 default endpoints"
        );
    }
    let issuer = resolution.metadata.issuer.clone();
    let supports_metadata_documents = resolution
        .metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    manager.set_metadata(resolution.metadata);

    let granted = credentials
        .credentials()
        .await?
        .filter(|c| c.token_response.is_some() && c.issuer == issuer)
        .map(|c| c.granted_scopes)
        .unwrap_or_default();
    let chosen = if settings.scopes.is_empty() {
        manager.select_scopes(None, &[])
    } else {
        settings.scopes.clone()
    };
    let challenged = challenge
        .as_deref()
        .and_then(|c| WWWAuthenticateParams::parse(c, &base_url).scope)
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let scopes = union_scopes([granted, chosen, challenged]);

    let mut request = AuthorizationRequest::new(settings.redirect_uri.clone())
        .with_client_name(settings.client_name.clone())
        .with_scopes(scopes.clone());
    let issuer_key = credentials.issuer_key(issuer.as_deref());
    if let Some(client_id) = &settings.client_id {
        request = request.with_preregistered_client(client_id.clone());
        if let Some(secret) = &settings.client_secret {
            request = request.with_client_secret(secret.expose_secret().to_owned());
        }
    } else if let Some(url) = settings
        .client_metadata_url
        .as_ref()
        .filter(|_| supports_metadata_documents)
    {
        // rmcp uses the document URL as the client id (SEP-991).
        request = request.with_client_metadata_url(url.clone());
    } else if let Some(registration) = credentials
        .store
        .registration(&issuer_key, &settings.redirect_uri)
        .await?
    {
        request = request.with_preregistered_client(registration.client_id.clone());
        if let Some(secret) = &registration.client_secret {
            request = request.with_client_secret(secret.expose_secret().to_owned());
        }
    } else {
        // Registered here rather than inside rmcp's session so that the registration,
        // secret included, can be stored: rmcp keeps only the client id.
        let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let registered = manager
            .register_client(&settings.client_name, &settings.redirect_uri, &scope_refs)
            .await
            .map_err(|e| http.explain(e, OAuthError::Registration))?;
        let registration = ClientRegistration {
            method: RegistrationMethod::Dynamic,
            client_id: registered.client_id.clone(),
            client_secret: registered.client_secret.clone().map(SecretString::from),
            issuer: issuer_key,
            redirect_uri: settings.redirect_uri.clone(),
            registered_at: now_epoch_secs(),
        };
        credentials.save_registration(registration).await?;
        request = request.with_preregistered_client(registered.client_id);
        if let Some(secret) = registered.client_secret {
            request = request.with_client_secret(secret);
        }
    }

    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| http.explain(e, OAuthError::Authorization))?;
    let url = add_query_params(
        session.get_authorization_url(),
        &settings.authorization_params,
    )?;
    let state = Url::parse(&url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned())
        })
        .ok_or_else(|| OAuthError::Callback("the authorization URL has no state".to_owned()))?;
    tracing::info!(
        server = credentials.server(),
        scopes = %scopes.join(" "),
        "login started"
    );
    Ok((
        url,
        PendingLogin {
            session,
            state,
            states,
            started_at: now_epoch_secs(),
            http,
        },
    ))
}

/// Exchanges the authorisation code for tokens, which rmcp saves through the store. Checks the
/// state against this login and the `iss` parameter against the discovered issuer (RFC 9207).
/// The login state is deleted whatever the outcome.
pub async fn finish_login(
    pending: PendingLogin,
    callback: LoginCallback,
) -> Result<LoginOutcome, OAuthError> {
    let result = async {
        let (code, state, issuer) = match callback {
            LoginCallback::Url(url) => {
                let parsed = Url::parse(&url).map_err(|e| OAuthError::Callback(e.to_string()))?;
                if let Some((_, error)) = parsed.query_pairs().find(|(k, _)| k == "error") {
                    return Err(OAuthError::Callback(format!(
                        "the authorization server answered `{error}`"
                    )));
                }
                let callback = AuthorizationCallback::from_redirect_url(&url)
                    .map_err(|e| OAuthError::Callback(e.to_string()))?;
                (callback.code, callback.csrf_token, callback.issuer)
            }
            LoginCallback::Code {
                code,
                state,
                issuer,
            } => (code, state, issuer),
        };
        if state != pending.state {
            return Err(OAuthError::StateMismatch);
        }
        if now_epoch_secs().saturating_sub(pending.started_at) > LOGIN_TTL.as_secs() {
            return Err(OAuthError::LoginExpired);
        }
        pending
            .session
            .handle_callback_with_issuer(&code, &state, issuer.as_deref())
            .await
            .map_err(|e| pending.http.explain(e, OAuthError::Authorization))
    }
    .await;
    // Single use, whatever happened: rmcp keeps the state when the issuer check fails, so that
    // the genuine callback can still arrive, but this login is consumed.
    let _ = pending.states.delete(&pending.state).await;
    let token = result?;
    let (client_id, _) = pending
        .session
        .get_credentials()
        .await
        .map_err(OAuthError::Authorization)?;
    let scopes = pending.session.auth_manager.get_current_scopes().await;
    Ok(LoginOutcome {
        client_id,
        scopes,
        expires_in: token.expires_in(),
        has_refresh_token: token.refresh_token().is_some(),
    })
}

/// Asks the server for its `WWW-Authenticate` challenge with one unauthenticated, side-effect
/// free request. rmcp's own probe is a GET, which Streamable HTTP servers may answer with 405
/// before any authentication; a POST of `server/discover` reaches the authentication layer.
/// `Ok(None)` when there is no challenge to be had (discovery goes on without one); `Err` when
/// the network policy refused the request, which discovery would run into too.
async fn probe_challenge(
    server_url: &Url,
    policy: &Arc<Policy>,
) -> Result<Option<String>, Refusal> {
    netguard::check_url(server_url, policy)?;
    let Ok(client) = netguard::guarded_client_builder(policy.clone())
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    else {
        return Ok(None);
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }},
    });
    let response = client
        .post(server_url.clone())
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "server/discover")
        .json(&body)
        .send()
        .await;
    let response = match response {
        Ok(response) => response,
        Err(error) => {
            return match Refusal::find_in(&error) {
                Some(refusal) => Err(refusal.clone().at(server_url)),
                None => Ok(None),
            };
        }
    };
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned))
}

// ---------------------------------------------------------------------------------------------
// Authorised requests

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

type HttpError = <reqwest::Client as StreamableHttpClient>::Error;

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
        let mcp_http = crate::connect::http_client(settings.policy.clone())
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
        let mut error = match guard.manager.get_access_token().await {
            Ok(token) => {
                lock(&self.shared.events).refresh_failure = None;
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
                        lock(&self.shared.events).refresh_failure = None;
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
        match guard.manager.refresh_token().await {
            Ok(token) => {
                lock(&self.shared.events).refresh_failure = None;
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
            return Ok(Settled::Replaced(token.access_token().secret().to_owned()));
        }
        tracing::warn!(server, ?failure, %error, "token refresh failed");
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

// ---------------------------------------------------------------------------------------------
// Plumbing

/// An rmcp manager for `server_url` whose every OAuth request goes through a
/// [`GuardedOAuthClient`] under `settings.policy`, and that client, to explain refusals.
async fn new_manager(
    server_url: &str,
    settings: &OAuthSettings,
) -> Result<(AuthorizationManager, Arc<GuardedOAuthClient>), OAuthError> {
    let http = Arc::new(GuardedOAuthClient::new(settings)?);
    let manager = AuthorizationManager::new_with_oauth_http_client(
        server_url,
        http.clone() as Arc<dyn OAuthHttpClient>,
    )
    .await
    .map_err(OAuthError::Discovery)?;
    Ok((manager, http))
}

/// Bound on an OAuth request when rmcp suggests none (rmcp's own default).
const OAUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest OAuth response body read (rmcp's own limit): metadata, tokens and registrations are
/// small, and a hostile server must not make us buffer without bound.
const MAX_OAUTH_BODY_BYTES: usize = 1024 * 1024;

/// rmcp's [`OAuthHttpClient`] under the network policy: every request URL is checked with
/// `netguard::check_url` first (rmcp's default client would catch IP literals only for
/// discovered URLs), and both reqwest clients come from `netguard::guarded_client_builder`, so
/// names resolve only to admitted addresses and every redirect hop is judged. It also adds the
/// configured `token_params` to token requests: rmcp offers no other hook into them.
///
/// rmcp stringifies some failures (a token request's becomes "Request failed"), losing the
/// refusal; the last refusal is kept so that callers can still say what was refused.
struct GuardedOAuthClient {
    policy: Arc<Policy>,
    /// Follows redirects (at most ten, each judged); for requests rmcp lets follow.
    follow: reqwest::Client,
    /// Follows none; rmcp handles (same-origin) redirects itself where it wants them.
    stop: reqwest::Client,
    token_params: Vec<(String, String)>,
    /// The refusal of the last request, if it was refused.
    refused: Mutex<Option<Refusal>>,
}

impl GuardedOAuthClient {
    fn new(settings: &OAuthSettings) -> Result<Self, OAuthError> {
        let build = |builder: reqwest::ClientBuilder| {
            builder
                .build()
                .map_err(|e| OAuthError::HttpClient(e.to_string()))
        };
        let policy = settings.policy.clone();
        Ok(Self {
            follow: build(netguard::guarded_client_builder(policy.clone()))?,
            stop: build(
                netguard::guarded_client_builder(policy.clone())
                    .redirect(reqwest::redirect::Policy::none()),
            )?,
            policy,
            token_params: settings
                .token_params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            refused: Mutex::new(None),
        })
    }

    /// The refusal of the last request, if the network policy refused it.
    fn last_refusal(&self) -> Option<Refusal> {
        lock(&self.refused).clone()
    }

    /// `error` as an [`OAuthError`]: [`OAuthError::Refused`] when the network policy refused
    /// the request behind it (found in its chain, or the last request's), else `otherwise`.
    fn explain(&self, error: AuthError, otherwise: fn(AuthError) -> OAuthError) -> OAuthError {
        match Refusal::find_in(&error)
            .cloned()
            .or_else(|| self.last_refusal())
        {
            Some(refusal) => OAuthError::Refused(refusal),
            None => otherwise(error),
        }
    }

    async fn send(
        &self,
        request: OAuthHttpRequest,
    ) -> Result<oauth2::HttpResponse, OAuthHttpClientError> {
        let OAuthHttpRequest {
            mut request,
            redirect_policy,
            timeout,
            ..
        } = request;
        add_token_params(&mut request, &self.token_params);
        let mut request = reqwest::Request::try_from(request)?;
        netguard::check_url(request.url(), &self.policy).inspect_err(|refusal| {
            tracing::warn!(%refusal, "oauth request refused");
        })?;
        *request.timeout_mut() = Some(timeout.unwrap_or(OAUTH_TIMEOUT));
        let client = match redirect_policy {
            OAuthHttpRedirectPolicy::Follow => &self.follow,
            // `Stop`, and whatever a later rmcp adds: not following is the safe reading.
            _ => &self.stop,
        };
        let url = request.url().clone();
        let response =
            client
                .execute(request)
                .await
                .map_err(|error| match Refusal::find_in(&error) {
                    Some(refusal) => Box::new(refusal.clone().at(&url)) as OAuthHttpClientError,
                    None => Box::new(error),
                })?;
        let mut builder = oauth2::http::Response::builder()
            .status(response.status())
            .version(response.version());
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            if chunk.len() > MAX_OAUTH_BODY_BYTES - body.len() {
                return Err(
                    format!("OAuth response body exceeds {MAX_OAUTH_BODY_BYTES} bytes").into(),
                );
            }
            body.extend_from_slice(&chunk);
        }
        Ok(builder.body(body)?)
    }
}

impl OAuthHttpClient for GuardedOAuthClient {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            *lock(&self.refused) = None;
            let result = self.send(request).await;
            if let Err(error) = &result
                && let Some(refusal) = Refusal::find_in(error.as_ref())
            {
                *lock(&self.refused) = Some(refusal.clone());
            }
            result
        })
    }
}

/// Adds the configured parameters to token requests (code exchange and refresh).
fn add_token_params(request: &mut oauth2::HttpRequest, params: &[(String, String)]) {
    let is_form = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if request.method() != http::Method::POST || !is_form {
        return;
    }
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(request.body())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let grant = pairs
        .iter()
        .find(|(k, _)| k == "grant_type")
        .map(|(_, v)| v.as_str());
    if !matches!(grant, Some("authorization_code" | "refresh_token")) {
        return;
    }
    for (key, value) in params {
        if !pairs.iter().any(|(k, _)| k == key) {
            pairs.push((key.clone(), value.clone()));
        }
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&pairs)
        .finish();
    request.headers_mut().remove(http::header::CONTENT_LENGTH);
    *request.body_mut() = body.into_bytes();
}

/// `url` with `params` appended to its query; a parameter already present is left alone.
fn add_query_params(url: &str, params: &BTreeMap<String, String>) -> Result<String, OAuthError> {
    if params.is_empty() {
        return Ok(url.to_owned());
    }
    let mut parsed = Url::parse(url).map_err(|e| OAuthError::Authorization(e.into()))?;
    let present: Vec<String> = parsed.query_pairs().map(|(k, _)| k.into_owned()).collect();
    {
        let mut query = parsed.query_pairs_mut();
        for (key, value) in params {
            if !present.contains(key) {
                query.append_pair(key, value);
            }
        }
    }
    Ok(parsed.into())
}

/// The scopes of all `parts`, each once, in first-seen order.
fn union_scopes<const N: usize>(parts: [Vec<String>; N]) -> Vec<String> {
    let mut scopes: Vec<String> = Vec::new();
    for scope in parts.into_iter().flatten() {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    scopes
}

fn now_epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use oauth2::{CsrfToken, PkceCodeVerifier};

    use super::*;

    fn settings() -> OAuthSettings {
        OAuthSettings::new("http://127.0.0.1:8765/callback")
    }

    #[test]
    fn handles_can_move_between_tasks() {
        fn check<T: Send + Sync>() {}
        check::<PendingLogin>();
        check::<AuthorizedClient>();
        check::<ServerCredentials>();
    }

    #[test]
    fn refresh_errors_are_classified_by_what_they_mean_for_the_grant() {
        fn check(error: AuthError, expect: RefreshFailure) {
            let text = error.to_string();
            assert_eq!(classify_refresh_error(&error), expect, "{text}");
        }
        // rmcp's rendering of an oauth2 ServerResponse error is "Server returned error response: …".
        let server = |body: &str| {
            AuthError::TokenRefreshFailed(format!("Server returned error response: {body}"))
        };
        check(
            AuthError::TokenRefreshRejected(
                "Server returned error response: invalid_grant: token revoked".into(),
            ),
            RefreshFailure::Reauthorize,
        );
        check(
            AuthError::AuthorizationRequired,
            RefreshFailure::Reauthorize,
        );
        check(server("invalid_client"), RefreshFailure::ClientRejected);
        check(
            server("unauthorized_client: client disabled"),
            RefreshFailure::ClientRejected,
        );
        check(server("invalid_scope: no"), RefreshFailure::Reauthorize);
        check(
            server("unsupported_grant_type"),
            RefreshFailure::Reauthorize,
        );
        check(server("server_error: try later"), RefreshFailure::Transient);
        check(server("temporarily_unavailable"), RefreshFailure::Transient);
        check(
            AuthError::TokenRefreshFailed("Request failed".into()),
            RefreshFailure::Transient,
        );
        check(
            AuthError::TokenRefreshFailed("Failed to parse server response".into()),
            RefreshFailure::Transient,
        );
        // A network message that merely mentions a code is not a server verdict.
        check(
            AuthError::TokenRefreshFailed("connect error: invalid_client".into()),
            RefreshFailure::Transient,
        );
        check(
            AuthError::CredentialStoreError("disk full".into()),
            RefreshFailure::Transient,
        );
        check(
            AuthError::InternalError("OAuth client not configured".into()),
            RefreshFailure::Transient,
        );
    }

    /// Whether the registration at (`issuer`, the test redirect URI) and `server`'s tokens
    /// are stored.
    async fn stored(credentials: &ServerCredentials, issuer: &str) -> (bool, bool) {
        let registration = credentials
            .store
            .registration(issuer, "http://127.0.0.1/cb")
            .await
            .expect("registration");
        let tokens = credentials.credentials().await.expect("credentials");
        (registration.is_some(), tokens.is_some())
    }

    #[tokio::test]
    async fn refresh_failures_delete_only_what_is_dead() {
        let store: Arc<dyn OAuthStore> = Arc::new(MemoryOAuthStore::default());
        let credentials = ServerCredentials::new(store, "docs");
        // Tokens without an issuer: their registration lives under the server's own key.
        let issuer = credentials.issuer_key(None);
        assert_eq!(issuer, "mcpgw:server:docs");
        let seed = || async {
            credentials
                .save_registration(ClientRegistration {
                    method: RegistrationMethod::Dynamic,
                    client_id: "c1".into(),
                    client_secret: None,
                    issuer: issuer.clone(),
                    redirect_uri: "http://127.0.0.1/cb".into(),
                    registered_at: 0,
                })
                .await
                .expect("save registration");
            credentials
                .store
                .save_credentials(
                    "docs",
                    StoredCredentials::new("c1".into(), None, vec![], None),
                )
                .await
                .expect("save credentials");
        };

        seed().await;
        RefreshFailure::Transient
            .apply(&credentials)
            .await
            .expect("apply");
        assert_eq!(stored(&credentials, &issuer).await, (true, true));

        RefreshFailure::Reauthorize
            .apply(&credentials)
            .await
            .expect("apply");
        assert_eq!(stored(&credentials, &issuer).await, (true, false));

        seed().await;
        RefreshFailure::ClientRejected
            .apply(&credentials)
            .await
            .expect("apply");
        assert_eq!(stored(&credentials, &issuer).await, (false, false));
    }

    #[tokio::test]
    async fn registrations_are_shared_by_issuer_and_redirect_uri() {
        let store: Arc<dyn OAuthStore> = Arc::new(MemoryOAuthStore::default());
        let docs = ServerCredentials::new(store.clone(), "docs");
        let wiki = ServerCredentials::new(store.clone(), "wiki");
        let registration = |issuer: &str, client_id: &str| ClientRegistration {
            method: RegistrationMethod::Dynamic,
            client_id: client_id.into(),
            client_secret: Some(SecretString::from("s")),
            issuer: issuer.into(),
            redirect_uri: "http://127.0.0.1/cb".into(),
            registered_at: 0,
        };
        docs.save_registration(registration("https://as.example", "shared"))
            .await
            .expect("save");
        // Another server of the same authorisation server finds it, with its secret.
        let found = store
            .registration(
                &wiki.issuer_key(Some("https://as.example")),
                "http://127.0.0.1/cb",
            )
            .await
            .expect("load")
            .expect("shared registration");
        assert_eq!(found.client_id, "shared");
        assert!(found.client_secret.is_some());
        // Issuer-less servers never share one.
        assert_ne!(docs.issuer_key(None), wiki.issuer_key(None));

        // Tokens find their client by id, whatever its redirect URI.
        let tokens = StoredCredentials::new("shared".into(), None, vec![], None)
            .with_issuer(Some("https://as.example".into()));
        assert!(wiki.registration_of(&tokens).await.expect("load").is_some());
        let foreign = StoredCredentials::new("shared".into(), None, vec![], None)
            .with_issuer(Some("https://other.example".into()));
        assert!(
            wiki.registration_of(&foreign)
                .await
                .expect("load")
                .is_none()
        );
    }

    fn login_state(created_at: u64) -> StoredAuthorizationState {
        let mut state = StoredAuthorizationState::new(
            &PkceCodeVerifier::new("v".repeat(43)),
            &CsrfToken::new("s".into()),
        );
        state.created_at = created_at;
        state
    }

    #[test]
    fn login_state_expires_after_ten_minutes() {
        let now = 1_000_000;
        assert!(!login_state_expired(&login_state(now), now));
        assert!(!login_state_expired(&login_state(now - 600), now));
        assert!(login_state_expired(&login_state(now - 601), now));
        assert!(
            login_state_expired(&login_state(now + 5), now),
            "from the future"
        );
    }

    #[tokio::test]
    async fn an_expired_login_state_is_deleted_on_load() {
        let inner = Arc::new(MemoryLoginStates::default());
        let states = ExpiringStates(inner.clone());
        let now = now_epoch_secs();
        states.save("fresh", login_state(now)).await.expect("save");
        states
            .save("stale", login_state(now - 601))
            .await
            .expect("save");

        assert!(states.load_at("fresh", now).await.expect("load").is_some());
        assert!(states.load_at("stale", now).await.expect("load").is_none());
        assert!(
            inner.load("stale").await.expect("load").is_none(),
            "deleted"
        );
    }

    #[tokio::test]
    async fn memory_login_states_purge_abandoned_logins() {
        let states = MemoryLoginStates::default();
        let now = now_epoch_secs();
        states
            .save("old", login_state(now - 3600))
            .await
            .expect("save");
        states.save("new", login_state(now)).await.expect("save");
        assert!(states.load("old").await.expect("load").is_none());
        assert!(states.load("new").await.expect("load").is_some());
    }

    #[test]
    fn extra_authorization_params_are_appended_not_overridden() {
        let url =
            "https://as.example/authorize?response_type=code&client_id=c&state=s&prompt=login";
        let params = BTreeMap::from([
            ("audience".to_owned(), "api://x y".to_owned()),
            ("prompt".to_owned(), "consent".to_owned()),
        ]);
        let merged = add_query_params(url, &params).expect("valid URL");
        assert_eq!(
            merged,
            "https://as.example/authorize?response_type=code&client_id=c&state=s&prompt=login&audience=api%3A%2F%2Fx+y"
        );
        assert_eq!(
            add_query_params(url, &BTreeMap::new()).expect("valid URL"),
            url
        );
    }

    #[test]
    fn settings_refuse_to_override_the_flow() {
        let mut s = settings();
        assert!(s.validate().is_ok());
        s.authorization_params.insert("state".into(), "x".into());
        let error = s.validate().expect_err("reserved");
        assert_eq!(
            error.to_string(),
            "oauth setting `authorization_params` is invalid: `state` is set by the OAuth flow and cannot be overridden"
        );

        let mut s = settings();
        s.token_params.insert("code_verifier".into(), "x".into());
        assert!(s.validate().is_err());

        let mut s = settings();
        s.client_secret = Some(SecretString::from("hunter2"));
        assert!(s.validate().is_err(), "secret without client id");

        let mut s = settings();
        s.client_metadata_url = Some("http://example.com/client.json".into());
        assert!(s.validate().is_err(), "metadata document must be https");
    }

    #[test]
    fn debug_output_hides_secrets() {
        let mut s = settings();
        s.client_id = Some("client".into());
        s.client_secret = Some(SecretString::from("hunter2"));
        s.token_params
            .insert("assertion".into(), "eyJsecret".into());
        let text = format!("{s:?}");
        assert!(
            !text.contains("hunter2") && !text.contains("eyJsecret"),
            "{text}"
        );
        assert!(text.contains("assertion"), "{text}");

        let registration = ClientRegistration {
            method: RegistrationMethod::Dynamic,
            client_id: "c".into(),
            client_secret: Some(SecretString::from("hunter2")),
            issuer: "https://as.example".into(),
            redirect_uri: "http://127.0.0.1/cb".into(),
            registered_at: 0,
        };
        assert!(!format!("{registration:?}").contains("hunter2"));
        let callback = LoginCallback::Url("http://127.0.0.1/cb?code=abc123&state=s".into());
        assert!(!format!("{callback:?}").contains("abc123"));
        let callback = LoginCallback::Code {
            code: "abc123".into(),
            state: "s".into(),
            issuer: None,
        };
        assert!(!format!("{callback:?}").contains("abc123"));
    }

    #[test]
    fn registration_round_trips_through_the_store_format() {
        let registration = ClientRegistration {
            method: RegistrationMethod::Dynamic,
            client_id: "c".into(),
            client_secret: Some(SecretString::from("s3")),
            issuer: "https://as.example".into(),
            redirect_uri: "http://127.0.0.1/cb".into(),
            registered_at: 7,
        };
        let json = serde_json::to_string(&registration).expect("serialize");
        let back: ClientRegistration = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(
            back.client_secret.map(|s| s.expose_secret().to_owned()),
            Some("s3".into())
        );
        assert_eq!(back.issuer, "https://as.example");
    }

    fn token_request(body: &str) -> oauth2::HttpRequest {
        oauth2::http::Request::builder()
            .method("POST")
            .uri("https://as.example/token")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.as_bytes().to_vec())
            .expect("request")
    }

    #[test]
    fn token_params_go_on_code_and_refresh_requests_only() {
        let params = vec![
            ("audience".to_owned(), "api".to_owned()),
            ("resource".to_owned(), "https://evil".to_owned()),
        ];
        let mut request =
            token_request("grant_type=refresh_token&refresh_token=r&resource=https%3A%2F%2Fmcp");
        add_token_params(&mut request, &params);
        assert_eq!(
            String::from_utf8_lossy(request.body()),
            "grant_type=refresh_token&refresh_token=r&resource=https%3A%2F%2Fmcp&audience=api"
        );

        let mut request = token_request("grant_type=client_credentials");
        add_token_params(&mut request, &params);
        assert_eq!(
            String::from_utf8_lossy(request.body()),
            "grant_type=client_credentials"
        );
    }

    #[test]
    fn scope_union_keeps_first_seen_order() {
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            union_scopes([
                s(&["mcp:basic"]),
                s(&["mcp:basic", "profile"]),
                s(&["mcp:write"])
            ]),
            s(&["mcp:basic", "profile", "mcp:write"])
        );
        assert!(union_scopes([Vec::new(), Vec::new()]).is_empty());
    }

    /// An authorisation server and an MCP endpoint on one loopback port. The endpoint accepts
    /// only the token the server issued last; the token endpoint answers refreshes as told.
    struct Fake {
        url: String,
        refreshes: Arc<std::sync::atomic::AtomicUsize>,
        registrations: Arc<std::sync::atomic::AtomicUsize>,
        accepted: Arc<Mutex<String>>,
        answer: Arc<Mutex<(u16, serde_json::Value)>>,
    }

    async fn fake(accepted: &str) -> Fake {
        use axum::{
            Json, Router,
            http::{HeaderMap, StatusCode, header},
            response::IntoResponse,
            routing::{get, post},
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let refreshes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let registrations = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = Arc::new(Mutex::new(accepted.to_owned()));
        let answer = Arc::new(Mutex::new((
            200,
            serde_json::json!({"access_token": "new", "token_type": "Bearer", "expires_in": 3600}),
        )));
        let prm =
            serde_json::json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]});
        let metadata = serde_json::json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": format!("{base}/token"),
            "registration_endpoint": format!("{base}/register"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        });
        let challenge =
            format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
        let app = Router::new()
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                get(move || async move { Json(prm) }),
            )
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || async move { Json(metadata) }),
            )
            .route("/register", {
                let registrations = registrations.clone();
                post(move || async move {
                    registrations.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let body = serde_json::json!({
                        "client_id": "dyn-1", "client_secret": "dyn-secret", "redirect_uris": [],
                    });
                    (StatusCode::CREATED, Json(body))
                })
            })
            .route("/token", {
                let (refreshes, accepted, answer) =
                    (refreshes.clone(), accepted.clone(), answer.clone());
                post(move || async move {
                    refreshes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // Latency, so that requests rejected together overlap the refresh.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let (status, body) = lock(&answer).clone();
                    if let Some(token) = body.get("access_token").and_then(|t| t.as_str()) {
                        *lock(&accepted) = token.to_owned();
                    }
                    (StatusCode::from_u16(status).expect("status"), Json(body))
                })
            })
            .route("/mcp", {
                let accepted = accepted.clone();
                post(move |headers: HeaderMap| async move {
                    let expected = format!("Bearer {}", lock(&accepted));
                    let sent = headers
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok());
                    if sent == Some(expected.as_str()) {
                        Json(serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
                            .into_response()
                    } else {
                        (
                            StatusCode::UNAUTHORIZED,
                            [(header::WWW_AUTHENTICATE, challenge.clone())],
                        )
                            .into_response()
                    }
                })
            });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Fake {
            url: format!("{base}/mcp"),
            refreshes,
            registrations,
            accepted,
            answer,
        }
    }

    impl Fake {
        fn issuer(&self) -> String {
            self.url.trim_end_matches("/mcp").to_owned()
        }

        /// Credentials for client `c1` holding access token `token`, received `age` ago.
        async fn seed(&self, credentials: &ServerCredentials, token: &str, age: Duration) {
            self.seed_client(credentials, "c1", token, age).await
        }

        /// Credentials for client `client_id` holding access token `token`, received `age`
        /// ago, and that client's registration.
        async fn seed_client(
            &self,
            credentials: &ServerCredentials,
            client_id: &str,
            token: &str,
            age: Duration,
        ) {
            let response = serde_json::from_value(serde_json::json!({
                "access_token": token, "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt",
            }))
            .expect("token response");
            let received = now_epoch_secs() - age.as_secs();
            let stored =
                StoredCredentials::new(client_id.into(), Some(response), vec![], Some(received))
                    .with_issuer(Some(self.issuer()));
            credentials
                .store
                .save_credentials(credentials.server(), stored)
                .await
                .expect("seed credentials");
            credentials
                .save_registration(ClientRegistration {
                    method: RegistrationMethod::Dynamic,
                    client_id: client_id.into(),
                    client_secret: None,
                    issuer: self.issuer(),
                    redirect_uri: "http://127.0.0.1:1/callback".into(),
                    registered_at: 0,
                })
                .await
                .expect("seed registration");
        }

        /// Whether the seeded registration and any tokens are stored.
        async fn stored(&self, credentials: &ServerCredentials) -> (bool, bool) {
            let registration = credentials
                .store
                .registration(&self.issuer(), "http://127.0.0.1:1/callback")
                .await
                .expect("registration");
            let tokens = credentials.credentials().await.expect("credentials");
            (registration.is_some(), tokens.is_some())
        }

        fn refreshes(&self) -> usize {
            self.refreshes.load(std::sync::atomic::Ordering::SeqCst)
        }

        async fn client(&self, credentials: &ServerCredentials) -> AuthorizedClient {
            AuthorizedClient::new(
                &self.url,
                &loopback(OAuthSettings::new("http://127.0.0.1:1/callback")),
                credentials.clone(),
            )
            .await
            .expect("client")
        }
    }

    /// `settings` under a policy that admits the loopback fake.
    fn loopback(mut settings: OAuthSettings) -> OAuthSettings {
        settings.policy = Arc::new(Policy::parse(["127.0.0.1"]).expect("rule parses"));
        settings
    }

    fn memory_credentials() -> ServerCredentials {
        ServerCredentials::new(Arc::new(MemoryOAuthStore::default()), "docs")
    }

    async fn ping(
        client: &AuthorizedClient,
        url: &str,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<HttpError>> {
        let message: ClientJsonRpcMessage = serde_json::from_value(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .expect("message");
        client
            .post_message(url.into(), message, None, None, HashMap::new())
            .await
    }

    async fn ping_concurrently(client: &AuthorizedClient, url: &str, n: usize) -> usize {
        let calls = (0..n).map(|_| ping(client, url));
        futures::future::join_all(calls)
            .await
            .into_iter()
            .filter(|r| r.is_ok())
            .count()
    }

    #[tokio::test]
    async fn concurrent_requests_with_an_expiring_token_share_one_refresh() {
        let fake = fake("unused").await;
        let credentials = memory_credentials();
        // Received an hour ago with a one-hour lifetime: past rmcp's 30 s margin.
        fake.seed(&credentials, "old", Duration::from_secs(3600))
            .await;
        let client = fake.client(&credentials).await;

        assert_eq!(ping_concurrently(&client, &fake.url, 8).await, 8);
        assert_eq!(fake.refreshes(), 1);
        let stored = credentials
            .credentials()
            .await
            .expect("load")
            .expect("credentials");
        let token = stored.token_response.expect("token");
        assert_eq!(token.access_token().secret(), "new");
        assert_eq!(
            token.refresh_token().map(|t| t.secret().as_str()),
            Some("rt"),
            "a refresh response without a refresh token keeps the old one"
        );
    }

    #[tokio::test]
    async fn tokens_of_a_later_login_are_refreshed_for_their_own_client() {
        let fake = fake("old").await;
        let credentials = memory_credentials();
        fake.seed(&credentials, "old", Duration::ZERO).await;
        let client = fake.client(&credentials).await;
        assert!(ping(&client, &fake.url).await.is_ok());

        // Another process logs in again, as another client; its token is due for a refresh.
        // Refreshing it as the client this one was set up for would fail and delete it.
        fake.seed_client(&credentials, "c2", "old", Duration::from_secs(3600))
            .await;
        assert!(ping(&client, &fake.url).await.is_ok());
        assert_eq!(fake.refreshes(), 1);
        let stored = credentials
            .credentials()
            .await
            .expect("load")
            .expect("kept");
        assert_eq!(stored.client_id, "c2");
        let token = stored.token_response.expect("token");
        assert_eq!(token.access_token().secret(), "new");
        assert_eq!(client.last_refresh_failure(), None);
    }

    #[tokio::test]
    async fn requests_rejected_together_refresh_once_and_retry() {
        // The server has revoked "old" although it has not expired.
        let fake = fake("revoked-on-the-server").await;
        let credentials = memory_credentials();
        fake.seed(&credentials, "old", Duration::ZERO).await;
        let client = fake.client(&credentials).await;

        assert_eq!(ping_concurrently(&client, &fake.url, 8).await, 8);
        assert_eq!(fake.refreshes(), 1);
        assert!(
            client
                .last_challenge()
                .is_some_and(|c| c.contains("resource_metadata"))
        );
        assert_eq!(client.last_refresh_failure(), None);
    }

    #[tokio::test]
    async fn a_rejected_refresh_token_deletes_the_tokens_and_keeps_the_client() {
        let fake = fake("unused").await;
        *lock(&fake.answer) = (400, serde_json::json!({"error": "invalid_grant"}));
        let credentials = memory_credentials();
        fake.seed(&credentials, "old", Duration::from_secs(3600))
            .await;
        let client = fake.client(&credentials).await;

        let error = ping(&client, &fake.url).await.expect_err("no usable token");
        assert!(
            error.auth_challenge().is_some(),
            "the server's challenge comes back: {error}"
        );
        assert_eq!(fake.stored(&credentials).await, (true, false));
        assert_eq!(
            client.last_refresh_failure().map(|(f, _)| f),
            Some(RefreshFailure::Reauthorize)
        );
    }

    #[tokio::test]
    async fn a_refresh_that_lost_to_another_process_uses_the_winners_tokens() {
        let fake = fake("unused").await;
        // Another process used the refresh token first: this refresh is refused.
        *lock(&fake.answer) = (400, serde_json::json!({"error": "invalid_grant"}));
        let credentials = memory_credentials();
        fake.seed(&credentials, "old", Duration::from_secs(3600))
            .await;
        let client = fake.client(&credentials).await;
        // While this refresh is in flight, the other process stores what it was given.
        let other_process = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            *lock(&fake.accepted) = "winner".into();
            let token = serde_json::from_value(serde_json::json!({
                "access_token": "winner", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt2",
            }))
            .expect("token response");
            let stored =
                StoredCredentials::new("c1".into(), Some(token), vec![], Some(now_epoch_secs()))
                    .with_issuer(Some(fake.issuer()));
            credentials.store.save_credentials("docs", stored).await
        };
        let (result, saved) = tokio::join!(ping(&client, &fake.url), other_process);
        saved.expect("save");
        assert_eq!(fake.refreshes(), 1);
        assert!(result.is_ok(), "{:?}", result.err());
        let stored = credentials
            .credentials()
            .await
            .expect("load")
            .expect("the winner's tokens are kept");
        let token = stored.token_response.expect("token");
        assert_eq!(token.access_token().secret(), "winner");
        assert_eq!(client.last_refresh_failure(), None);
    }

    #[tokio::test]
    async fn a_rejected_client_deletes_the_registration_too() {
        let fake = fake("unused").await;
        *lock(&fake.answer) = (401, serde_json::json!({"error": "invalid_client"}));
        let credentials = memory_credentials();
        fake.seed(&credentials, "old", Duration::from_secs(3600))
            .await;
        let client = fake.client(&credentials).await;

        assert!(ping(&client, &fake.url).await.is_err());
        assert_eq!(fake.stored(&credentials).await, (false, false));
        assert_eq!(
            client.last_refresh_failure().map(|(f, _)| f),
            Some(RefreshFailure::ClientRejected)
        );
    }

    #[tokio::test]
    async fn a_server_error_during_refresh_keeps_the_token() {
        let fake = fake("unused").await;
        *lock(&fake.answer) = (503, serde_json::json!({"error": "temporarily_unavailable"}));
        let credentials = memory_credentials();
        fake.seed(&credentials, "old", Duration::from_secs(3600))
            .await;
        let client = fake.client(&credentials).await;

        let error = ping(&client, &fake.url).await.expect_err("refresh failed");
        assert!(matches!(error, StreamableHttpError::Auth(_)), "{error}");
        assert!(error.auth_challenge().is_none(), "no login prompt");
        let stored = credentials.credentials().await.expect("load");
        assert!(stored.is_some_and(|c| c.token_response.is_some()));
        assert_eq!(
            client.last_refresh_failure().map(|(f, _)| f),
            Some(RefreshFailure::Transient)
        );
        // The next request tries again and succeeds once the server is back.
        *lock(&fake.answer) = (
            200,
            serde_json::json!({"access_token": "new", "token_type": "Bearer", "expires_in": 3600}),
        );
        assert!(ping(&client, &fake.url).await.is_ok());
        assert_eq!(fake.refreshes(), 2);
        assert_eq!(client.last_refresh_failure(), None);
        assert_eq!(*lock(&fake.accepted), "new");
    }

    #[tokio::test]
    async fn login_registers_once_and_consumes_its_state_even_when_forged() {
        let fake = fake("unused").await;
        let credentials = memory_credentials();
        let states = Arc::new(MemoryLoginStates::default());
        let mut settings = loopback(OAuthSettings::new("http://127.0.0.1:1/callback"));
        settings
            .authorization_params
            .insert("prompt".into(), "consent".into());

        let (url, pending) = start_login(&fake.url, &settings, &credentials, states.clone(), None)
            .await
            .expect("start");
        let url = Url::parse(&url).expect("authorization URL");
        let param = |name: &str| {
            url.query_pairs()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        };
        assert_eq!(param("client_id").as_deref(), Some("dyn-1"));
        assert_eq!(param("prompt").as_deref(), Some("consent"));
        assert_eq!(param("code_challenge_method").as_deref(), Some("S256"));
        assert_eq!(param("resource").as_deref(), Some(fake.url.as_str()));
        let state = param("state").expect("state");
        assert!(states.load(&state).await.expect("load").is_some());
        let registration = credentials
            .store
            .registration(&fake.issuer(), "http://127.0.0.1:1/callback")
            .await
            .expect("load")
            .expect("dynamic registration stored");
        assert_eq!(registration.client_id, "dyn-1");
        assert!(registration.client_secret.is_some());
        assert_eq!(registration.issuer, fake.issuer());

        let forged = LoginCallback::Code {
            code: "c".into(),
            state: "forged".into(),
            issuer: None,
        };
        let error = finish_login(pending, forged)
            .await
            .expect_err("foreign state");
        assert!(matches!(error, OAuthError::StateMismatch), "{error}");
        assert!(
            states.load(&state).await.expect("load").is_none(),
            "single use"
        );

        let (url, _pending) = start_login(&fake.url, &settings, &credentials, states, None)
            .await
            .expect("second start");
        assert!(url.contains("client_id=dyn-1"));
        assert_eq!(
            fake.registrations.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the stored registration is reused"
        );
    }

    /// A protected resource on loopback whose metadata sends mcpgw to `elsewhere`, a second
    /// loopback port nothing is listening for: as its authorisation server, or (with
    /// `token_only`) as the token endpoint of an authorisation server on the resource's port.
    async fn pointing_elsewhere(elsewhere: u16, token_only: bool) -> String {
        use axum::{
            Json, Router,
            http::StatusCode,
            response::IntoResponse,
            routing::{get, post},
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let other = format!("http://127.0.0.1:{elsewhere}");
        let authorization_server = if token_only {
            base.clone()
        } else {
            other.clone()
        };
        let prm = serde_json::json!({
            "resource": format!("{base}/mcp"),
            "authorization_servers": [authorization_server],
        });
        let metadata = serde_json::json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": format!("{other}/token"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        });
        let challenge =
            format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
        let app = Router::new()
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                get(move || async move { Json(prm) }),
            )
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || async move { Json(metadata) }),
            )
            .route(
                "/mcp",
                post(move || async move {
                    (
                        StatusCode::UNAUTHORIZED,
                        [(axum::http::header::WWW_AUTHENTICATE, challenge)],
                    )
                        .into_response()
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("{base}/mcp")
    }

    /// A loopback port that counts as "elsewhere": it must never be connected to.
    fn sink() -> (std::net::TcpListener, u16) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        (listener, port)
    }

    /// Settings under a policy that names only the resource server's port.
    fn only_port_of(url: &str) -> OAuthSettings {
        let port = Url::parse(url).ok().and_then(|u| u.port()).expect("a port");
        let mut settings = OAuthSettings::new("http://127.0.0.1:1/callback");
        settings.policy = Arc::new(
            Policy::parse([format!("127.0.0.1:{port}")])
                .expect("rule parses")
                .for_server("docs", false),
        );
        settings
    }

    #[tokio::test]
    async fn login_refuses_an_authorization_server_the_policy_does_not_allow() {
        let (sink, elsewhere) = sink();
        let url = pointing_elsewhere(elsewhere, false).await;
        let settings = only_port_of(&url);
        let error = start_login(
            &url,
            &settings,
            &memory_credentials(),
            Arc::new(MemoryLoginStates::default()),
            None,
        )
        .await
        .expect_err("refused");
        let port = Url::parse(&url).ok().and_then(|u| u.port()).expect("port");
        assert!(matches!(error, OAuthError::Refused(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!(
                "refused http://127.0.0.1:{elsewhere}: 127.0.0.1 is allowed on port {port} only, not {elsewhere}; to allow it, add \"127.0.0.1:{elsewhere}\" to [network] allow in mcpgw.toml"
            )
        );
        assert!(sink.accept().is_err(), "the refused server was contacted");

        // The same login with the server's own URL refused says so before any request.
        let mut strict = settings.clone();
        strict.policy = Arc::new(Policy::default().for_server("docs", false));
        let error = start_login(
            &url,
            &strict,
            &memory_credentials(),
            Arc::new(MemoryLoginStates::default()),
            None,
        )
        .await
        .expect_err("refused");
        assert!(
            error
                .to_string()
                .starts_with(&format!("refused http://127.0.0.1:{port}: ")),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_refresh_at_a_token_endpoint_the_policy_refuses_keeps_the_token_and_says_why() {
        let (sink, elsewhere) = sink();
        let url = pointing_elsewhere(elsewhere, true).await;
        let credentials = memory_credentials();
        let issuer = url.trim_end_matches("/mcp").to_owned();
        let response = serde_json::from_value(serde_json::json!({
            "access_token": "old", "token_type": "Bearer", "expires_in": 60, "refresh_token": "rt",
        }))
        .expect("token response");
        let stored = StoredCredentials::new(
            "c1".into(),
            Some(response),
            vec![],
            Some(now_epoch_secs() - 3600),
        )
        .with_issuer(Some(issuer));
        credentials
            .store
            .save_credentials("docs", stored)
            .await
            .expect("seed");
        let client = AuthorizedClient::new(&url, &only_port_of(&url), credentials.clone())
            .await
            .expect("client");

        assert!(
            ping(&client, &url).await.is_err(),
            "the refresh cannot happen"
        );
        let (failure, reason) = client.last_refresh_failure().expect("a recorded failure");
        assert_eq!(failure, RefreshFailure::Transient);
        assert!(
            reason.contains(&format!(
                "refused http://127.0.0.1:{elsewhere}: 127.0.0.1 is allowed on port "
            )),
            "{reason}"
        );
        assert!(
            credentials.credentials().await.expect("read").is_some(),
            "a refusal says nothing about the grant: the tokens are kept"
        );
        assert!(sink.accept().is_err(), "the refused server was contacted");
    }

    #[tokio::test]
    async fn status_shows_no_secret_and_reads_expiry() {
        let store: Arc<dyn OAuthStore> = Arc::new(MemoryOAuthStore::default());
        let credentials = ServerCredentials::new(store.clone(), "docs");
        assert!(!credentials.status().await.expect("status").logged_in());

        let token: OAuthTokenResponse = serde_json::from_value(
            serde_json::json!({"access_token": "at", "token_type": "Bearer", "expires_in": 60, "refresh_token": "rt"}),
        )
        .expect("token");
        store
            .save_credentials(
                "docs",
                StoredCredentials::new("c1".into(), Some(token), vec!["mcp".into()], Some(100)),
            )
            .await
            .expect("save");
        let status = credentials.status().await.expect("status");
        assert!(status.logged_in() && status.has_refresh_token);
        assert_eq!(status.client_id.as_deref(), Some("c1"));
        assert_eq!(
            status.expires_at,
            Some(UNIX_EPOCH + Duration::from_secs(160))
        );
        let json = serde_json::to_string(&status).expect("json");
        assert!(!json.contains("\"at\"") && !json.contains("rt\""), "{json}");
    }
}
