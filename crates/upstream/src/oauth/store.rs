//! OAuth persistence, independent of the backend: the [`OAuthStore`] trait (rmcp's
//! credentials per server, [`ClientRegistration`]s per issuer and redirect URI), the in-memory
//! [`MemoryOAuthStore`], and one server's view of it ([`ServerCredentials`]).

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use rmcp::transport::auth::CredentialStore;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::lock;

use super::{AuthError, CredentialRefreshGuard, StoredCredentials, TokenResponse, error::*};

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
    pub(super) store: Arc<dyn OAuthStore>,
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

tokio::task_local! {
    /// Set while a caller holds these credentials' refresh guard itself
    /// ([`ServerCredentials::refresh_guard`]): rmcp's refresh, run inside, must not wait for
    /// the guard its own caller holds.
    static GUARD_HELD: ();
}

/// Runs `work` (a refresh through rmcp) for a caller that holds the refresh guard already.
pub(super) async fn with_guard_held<F: std::future::Future>(work: F) -> F::Output {
    GUARD_HELD.scope((), work).await
}

impl ServerCredentials {
    /// The guard two refreshes of these credentials take (in this process or, with a shared
    /// store, in any): held by a caller that must see another's refresh before deciding to
    /// refresh itself. Run the refresh itself through [`with_guard_held`].
    pub(super) async fn refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, OAuthError> {
        self.store.refresh_guard(&self.server).await
    }

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

    pub(super) async fn save_registration(
        &self,
        registration: ClientRegistration,
    ) -> Result<(), OAuthError> {
        self.store.save_registration(registration).await
    }

    pub(super) fn for_rmcp(&self) -> RmcpCredentials {
        RmcpCredentials(self.clone())
    }
}

/// [`ServerCredentials`] seen through rmcp's per-manager [`CredentialStore`].
pub(super) struct RmcpCredentials(ServerCredentials);

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
        if GUARD_HELD.try_with(|()| ()).is_ok() {
            return Ok(None);
        }
        Ok(self.0.store.refresh_guard(&self.0.server).await?)
    }
}
