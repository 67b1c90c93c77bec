//! What can go wrong with OAuth ([`OAuthError`]), and what a failed token refresh means for the
//! stored credentials ([`RefreshFailure`], [`classify_refresh_error`]).

use netguard::Refusal;
use serde::Serialize;

use super::{AuthError, settings::*, store::*};

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
