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
//!   single-use login state that expires after [`LOGIN_TTL`]; [`finish_handoff`] finishes one in
//!   another process, from the [`LoginHandoff`] of the one that started it (secrets included:
//!   the caller seals it before it leaves the process).
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

mod client;
mod error;
mod guarded;
mod login;
mod refreshes;
mod settings;
mod store;
#[cfg(test)]
mod tests;

pub use client::*;
pub use error::*;
pub use login::*;
pub use refreshes::{RefreshOutcome, refresh_counts};
pub use settings::*;
pub use store::*;

// The rmcp types in this module's API, so that a store or the CLI needs no rmcp dependency.
pub use oauth2::TokenResponse;
pub use rmcp::transport::auth::{
    AuthError, CredentialRefreshGuard, OAuthTokenResponse, StateStore, StoredAuthorizationState,
    StoredCredentials,
};
