//! The authorisation-code flow split at the browser: [`start_login`] returns the URL to open
//! and a single-use state that expires after [`LOGIN_TTL`]; [`finish_login`] takes the
//! callback. A login can also be finished by another process: [`PendingLogin::handoff`] is
//! what that process needs ([`LoginHandoff`], secrets included: the caller seals it before it
//! leaves the process), and [`finish_handoff`] exchanges the code with it.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use netguard::{Policy, Refusal};
use rmcp::transport::auth::{
    AuthorizationCallback, AuthorizationManager, AuthorizationMetadata, AuthorizationRequest,
    AuthorizationSession, OAuthClientConfig, WWWAuthenticateParams,
};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::lock;

use super::{
    AuthError, StateStore, StoredAuthorizationState, TokenResponse, error::*, guarded::*,
    settings::*, store::*,
};

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
pub(super) struct ExpiringStates(pub(super) Arc<dyn StateStore>);

impl ExpiringStates {
    pub(super) async fn load_at(
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
    handoff: LoginHandoff,
}

impl PendingLogin {
    /// What another process needs to finish this login: [`finish_handoff`]. It holds the PKCE
    /// verifier (and a client secret, if any): seal it before it leaves the process.
    pub fn handoff(&self) -> &LoginHandoff {
        &self.handoff
    }
}

/// Everything needed to exchange a login's authorisation code without the process that
/// started it: the server, the authorisation server's metadata and the challenge it was
/// discovered from, the client, and rmcp's authorisation state (the PKCE verifier, the
/// expected issuer, the requested scopes). Serialisable; `Debug` shows no secret.
#[derive(Clone, Serialize, Deserialize)]
pub struct LoginHandoff {
    server_url: String,
    /// The `WWW-Authenticate` challenge discovery started from: discovering again from it
    /// gives rmcp the same RFC 8707 `resource` for the token request.
    challenge: Option<String>,
    metadata: AuthorizationMetadata,
    client_id: String,
    client_secret: Option<String>,
    redirect_uri: String,
    scopes: Vec<String>,
    authorization: StoredAuthorizationState,
}

impl LoginHandoff {
    /// The `state` of the authorisation request this login answers.
    pub fn state(&self) -> &str {
        &self.authorization.csrf_token
    }

    /// The redirect URI of the authorisation request.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// When the login started (seconds since the epoch).
    pub fn started_at(&self) -> u64 {
        self.authorization.created_at
    }
}

impl fmt::Debug for LoginHandoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The verifier and the client secret are secrets, the state a bearer value until used.
        f.debug_struct("LoginHandoff")
            .field("server_url", &self.server_url)
            .field("client_id", &self.client_id)
            .field("redirect_uri", &self.redirect_uri)
            .field("scopes", &self.scopes)
            .field("started_at", &self.authorization.created_at)
            .finish_non_exhaustive()
    }
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
    let metadata = resolution.metadata.clone();
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
    let client_id;
    let mut client_secret = None;
    if let Some(configured) = &settings.client_id {
        client_id = configured.clone();
        client_secret = settings
            .client_secret
            .as_ref()
            .map(|s| s.expose_secret().to_owned());
        request = request.with_preregistered_client(configured.clone());
        if let Some(secret) = &settings.client_secret {
            request = request.with_client_secret(secret.expose_secret().to_owned());
        }
    } else if let Some(url) = settings
        .client_metadata_url
        .as_ref()
        .filter(|_| supports_metadata_documents)
    {
        // rmcp uses the document URL as the client id (SEP-991).
        client_id = url.clone();
        request = request.with_client_metadata_url(url.clone());
    } else if let Some(registration) = credentials
        .store
        .registration(&issuer_key, &settings.redirect_uri)
        .await?
    {
        client_id = registration.client_id.clone();
        client_secret = registration
            .client_secret
            .as_ref()
            .map(|s| s.expose_secret().to_owned());
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
        client_id = registered.client_id.clone();
        client_secret = registered.client_secret.clone();
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
    let authorization = states
        .load(&state)
        .await
        .map_err(OAuthError::Authorization)?
        .ok_or_else(|| OAuthError::Callback("the login state was not saved".to_owned()))?;
    let handoff = LoginHandoff {
        server_url: server_url.to_owned(),
        challenge,
        metadata,
        client_id,
        client_secret,
        redirect_uri: settings.redirect_uri.clone(),
        scopes: scopes.clone(),
        authorization,
    };
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
            handoff,
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
        let (code, state, issuer) = callback_parts(callback, &pending.state, pending.started_at)?;
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
    outcome(&pending.session.auth_manager, &token).await
}

/// [`finish_login`] in a process other than the one that started the login, from its
/// [`LoginHandoff`]: the server is discovered again from the same challenge (which gives rmcp
/// the same `resource`), the recorded metadata and client are used for the token request, and
/// the tokens are saved through `credentials`. `settings` are the server's (its network policy
/// and token parameters); the redirect URI is the handoff's.
pub async fn finish_handoff(
    handoff: LoginHandoff,
    settings: &OAuthSettings,
    credentials: &ServerCredentials,
    callback: LoginCallback,
) -> Result<LoginOutcome, OAuthError> {
    let (code, state, issuer) =
        callback_parts(callback, handoff.state(), handoff.authorization.created_at)?;
    let (mut manager, http) = new_manager(&handoff.server_url, settings).await?;
    manager.set_credential_store(credentials.for_rmcp());
    let states = MemoryLoginStates::default();
    states
        .save(&state, handoff.authorization.clone())
        .await
        .map_err(OAuthError::Authorization)?;
    manager.set_state_store(states);
    manager
        .resolve_metadata_from_challenge(handoff.challenge.as_deref())
        .await
        .map_err(|e| http.explain(e, OAuthError::Discovery))?;
    // The endpoints the code was issued for, not whatever discovery says now.
    manager.set_metadata(handoff.metadata.clone());
    let mut client =
        OAuthClientConfig::new(handoff.client_id.clone(), handoff.redirect_uri.clone())
            .with_scopes(handoff.scopes.clone());
    if let Some(secret) = &handoff.client_secret {
        client = client.with_client_secret(secret.clone());
    }
    manager
        .configure_client(client)
        .map_err(OAuthError::Authorization)?;
    let token = manager
        .exchange_code_for_token_with_issuer(&code, &state, issuer.as_deref())
        .await
        .map_err(|e| http.explain(e, OAuthError::Authorization))?;
    outcome(&manager, &token).await
}

/// The code, state and issuer of `callback`, checked against the login's `expected` state and
/// its start time.
fn callback_parts(
    callback: LoginCallback,
    expected: &str,
    started_at: u64,
) -> Result<(String, String, Option<String>), OAuthError> {
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
    if state != expected {
        return Err(OAuthError::StateMismatch);
    }
    if now_epoch_secs().saturating_sub(started_at) > LOGIN_TTL.as_secs() {
        return Err(OAuthError::LoginExpired);
    }
    Ok((code, state, issuer))
}

async fn outcome(
    manager: &AuthorizationManager,
    token: &rmcp::transport::auth::OAuthTokenResponse,
) -> Result<LoginOutcome, OAuthError> {
    let (client_id, _) = manager
        .get_credentials()
        .await
        .map_err(OAuthError::Authorization)?;
    let scopes = manager.get_current_scopes().await;
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
