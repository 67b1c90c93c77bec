//! OAuth for upstreams on the gateway's side: persistence over the store ([`StoreOAuth`]), the
//! sign-ins the gateway starts itself for its clients ([`login`]), the sign-in of the person at
//! this machine that `mcpgw auth login` runs ([`local`]), and the pieces they share (which
//! servers can be signed in to, the browser's return, the status document, the browser's page).
//!
//! Tokens are kept per (server, principal), each principal seeing the store through its own
//! [`StoreOAuth`]; client registrations per (issuer, redirect URI), shared by every server and
//! principal of that authorization server. Everything secret is sealed by the store (tokens,
//! client secrets); the plain columns hold the issuer, the expiry and the registration's public
//! metadata, so `mcpgw auth status` could be shown without the key.
//!
//! The store crate knows nothing of OAuth libraries, so this adapter lives here, where both
//! are in reach: rmcp's credential record is serialised as the store's opaque document.

pub mod callback;
pub mod local;
pub mod login;

use std::{
    fmt,
    sync::{Arc, LazyLock},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use ids::PrincipalId;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use store::Store;
use upstream::oauth::{
    ClientRegistration, CredentialRefreshGuard, CredentialStatus, OAuthError, OAuthStore,
    RefreshLocks, RegistrationMethod, StoredCredentials, TokenResponse,
};
use url::Url;

/// [`OAuthStore`] over the gateway's SQLite store, for one principal.
#[derive(Clone)]
pub struct StoreOAuth {
    store: Store,
    principal: PrincipalId,
}

/// Refreshes are serialised per (server, principal) in this process by these locks (one gateway
/// may hold several [`StoreOAuth`]s on one database), and across processes sharing the
/// database by a lease in the store (see [`StoreOAuth::refresh_guard`]).
static REFRESH_LOCKS: LazyLock<RefreshLocks> = LazyLock::new(RefreshLocks::default);

impl StoreOAuth {
    pub fn new(store: Store, principal: PrincipalId) -> Self {
        Self { store, principal }
    }

    /// The store for the local user, as the trait object the upstream client takes.
    pub fn local(store: Store) -> Arc<dyn OAuthStore> {
        Arc::new(Self::new(store, PrincipalId::local()))
    }

    /// Makes the store of any principal, by id: what [`upstream::Upstreams`] gives each
    /// principal's server of an OAuth upstream.
    pub fn per_principal(store: Store) -> upstream::OAuthStores {
        Arc::new(move |id: &PrincipalId| {
            Arc::new(Self::new(store.clone(), id.clone())) as Arc<dyn OAuthStore>
        })
    }

    /// Opens the configured database for the local user (`mcpgw auth`), failing rather than
    /// running without it as the gateway does.
    pub async fn open_local(
        config: &config::StoreConfig,
    ) -> Result<Arc<dyn OAuthStore>, store::StoreError> {
        Self::open_for(config, PrincipalId::local()).await
    }

    /// [`StoreOAuth::open_local`] for `principal` (`mcpgw auth logout --principal`).
    pub async fn open_for(
        config: &config::StoreConfig,
        principal: PrincipalId,
    ) -> Result<Arc<dyn OAuthStore>, store::StoreError> {
        let store = crate::open_database(config).await?;
        Ok(Arc::new(Self::new(store, principal)))
    }

    pub fn principal(&self) -> &PrincipalId {
        &self.principal
    }
}

/// The plain part of a registration as stored (`oauth_clients.metadata`): never a secret.
#[derive(Serialize, Deserialize)]
struct RegistrationMetadata {
    method: RegistrationMethod,
    registered_at: u64,
}

fn store_error(error: store::StoreError) -> OAuthError {
    OAuthError::Store(error.to_string())
}

fn registration_from(
    issuer: &str,
    redirect_uri: String,
    stored: store::ClientRegistration,
) -> ClientRegistration {
    // Metadata that does not decode (written by a later version) still leaves a usable client.
    let metadata: Option<RegistrationMetadata> = serde_json::from_str(&stored.metadata).ok();
    ClientRegistration {
        method: metadata
            .as_ref()
            .map_or(RegistrationMethod::Dynamic, |m| m.method),
        client_id: stored.client_id,
        client_secret: stored.client_secret,
        issuer: issuer.to_owned(),
        redirect_uri,
        registered_at: metadata.map_or(0, |m| m.registered_at),
    }
}

#[async_trait]
impl OAuthStore for StoreOAuth {
    async fn credentials(&self, server: &str) -> Result<Option<StoredCredentials>, OAuthError> {
        let found = self
            .store
            .credentials(server, self.principal.as_str())
            .await
            .map_err(store_error)?;
        let Some(found) = found else {
            return Ok(None);
        };
        match serde_json::from_str(found.document.expose_secret()) {
            Ok(credentials) => Ok(Some(credentials)),
            // The store's invariant: a value that does not decode is absent. The error names
            // no part of the document (serde's message can quote it).
            Err(_) => {
                tracing::warn!(
                    server,
                    principal = self.principal.as_str(),
                    "stored OAuth credentials do not decode; ignoring them (log in again)"
                );
                Ok(None)
            }
        }
    }

    async fn save_credentials(
        &self,
        server: &str,
        credentials: StoredCredentials,
    ) -> Result<(), OAuthError> {
        let expires_at = credentials
            .token_response
            .as_ref()
            .and_then(TokenResponse::expires_in)
            .zip(credentials.token_received_at)
            .map(|(lifetime, at)| UNIX_EPOCH + Duration::from_secs(at) + lifetime);
        let document = serde_json::to_string(&credentials)
            .map_err(|_| OAuthError::Store("cannot serialise the credentials".to_owned()))?;
        let record = store::Credentials {
            issuer: credentials.issuer.clone().unwrap_or_default(),
            document: SecretString::from(document),
            expires_at,
        };
        self.store
            .put_credentials(server, self.principal.as_str(), &record)
            .await
            .map_err(store_error)
    }

    async fn clear_credentials(&self, server: &str) -> Result<(), OAuthError> {
        self.store
            .delete_credentials(server, self.principal.as_str())
            .await
            .map(drop)
            .map_err(store_error)
    }

    async fn registration(
        &self,
        issuer: &str,
        redirect_uri: &str,
    ) -> Result<Option<ClientRegistration>, OAuthError> {
        let found = self
            .store
            .client_registration(issuer, redirect_uri)
            .await
            .map_err(store_error)?;
        Ok(found.map(|stored| registration_from(issuer, redirect_uri.to_owned(), stored)))
    }

    async fn registration_by_client_id(
        &self,
        issuer: &str,
        client_id: &str,
    ) -> Result<Option<ClientRegistration>, OAuthError> {
        let found = self
            .store
            .find_client_registration(issuer, client_id)
            .await
            .map_err(store_error)?;
        Ok(found.map(|(redirect_uri, stored)| registration_from(issuer, redirect_uri, stored)))
    }

    async fn save_registration(&self, registration: ClientRegistration) -> Result<(), OAuthError> {
        let metadata = serde_json::to_string(&RegistrationMetadata {
            method: registration.method,
            registered_at: registration.registered_at,
        })
        .map_err(|_| OAuthError::Store("cannot serialise the registration".to_owned()))?;
        let stored = store::ClientRegistration {
            client_id: registration.client_id,
            client_secret: registration.client_secret,
            metadata,
        };
        self.store
            .put_client_registration(&registration.issuer, &registration.redirect_uri, &stored)
            .await
            .map_err(store_error)
    }

    async fn clear_registration(&self, issuer: &str, redirect_uri: &str) -> Result<(), OAuthError> {
        self.store
            .delete_client_registration(issuer, redirect_uri)
            .await
            .map(drop)
            .map_err(store_error)
    }

    /// One refresh at a time per (server, principal): in this process by a lock, across the
    /// processes sharing the database (`mcpgw serve`, `mcpgw auth`, another gateway) by a lease
    /// in the store. rmcp loads the stored tokens after taking the guard, so a refresh that
    /// waited uses the refresh token the other one stored, never the one it rotated away.
    async fn refresh_guard(
        &self,
        server: &str,
    ) -> Result<Option<CredentialRefreshGuard>, OAuthError> {
        // U+001F cannot occur in a server name or principal: the key is unambiguous. (Not NUL:
        // PostgreSQL refuses NUL in text, and the lease is a row there.)
        let key = format!("{server}\u{1f}{}", self.principal.as_str());
        let local = REFRESH_LOCKS.acquire(&key).await;
        let lease = RefreshLease::take(&self.store, format!("oauth-refresh\u{1f}{key}")).await?;
        Ok(Some(CredentialRefreshGuard::new((local, lease))))
    }
}

/// How long a refresh's lease lasts: longer than any refresh (bounded by the server's
/// timeout), and the longest a process that died holding one holds the others up.
const REFRESH_LEASE: Duration = Duration::from_secs(60);
/// How long a refresh waits for another process's before it gives up.
const REFRESH_LEASE_WAIT: Duration = Duration::from_secs(70);

/// A refresh's lease in the store, given back when dropped.
struct RefreshLease {
    store: Store,
    key: String,
    holder: String,
}

impl RefreshLease {
    async fn take(store: &Store, key: String) -> Result<Self, OAuthError> {
        static TAKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        // The process id alone is not unique across machines (every container's first
        // process is pid 1): the time this process first took a lease goes with it.
        static PROCESS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let process = PROCESS.get_or_init(|| {
            let started = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!("{}-{started}", std::process::id())
        });
        let holder = format!(
            "{process}:{}",
            TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let deadline = tokio::time::Instant::now() + REFRESH_LEASE_WAIT;
        // Short at first: the lease this process just gave back is released in the background.
        let mut pause = Duration::from_millis(5);
        loop {
            if store
                .try_lease(&key, &holder, REFRESH_LEASE)
                .await
                .map_err(store_error)?
            {
                return Ok(Self {
                    store: store.clone(),
                    key,
                    holder,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(OAuthError::Store(format!(
                    "another mcpgw process has been refreshing these tokens for over {} s",
                    REFRESH_LEASE_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }
}

impl Drop for RefreshLease {
    fn drop(&mut self) {
        let (store, key, holder) = (
            self.store.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.holder),
        );
        // Outside a runtime (the process is ending) the lease simply runs out.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = store.release_lease(&key, &holder).await {
                    tracing::debug!(%error, "could not give a refresh lease back; it runs out");
                }
            });
        }
    }
}

/// Why a name does not name a server mcpgw can sign in to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotAnOAuthServer {
    /// No server of that name; `oauth_servers` are the ones that could be meant.
    Unknown {
        name: String,
        oauth_servers: Vec<String>,
    },
    NotOAuth {
        name: String,
    },
    NotHttp {
        name: String,
    },
}

impl fmt::Display for NotAnOAuthServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown {
                name,
                oauth_servers,
            } if oauth_servers.is_empty() => {
                write!(f, "no server named '{name}' (none is configured for OAuth)")
            }
            Self::Unknown {
                name,
                oauth_servers,
            } => write!(
                f,
                "no server named '{name}' (configured for OAuth: {})",
                oauth_servers.join(", ")
            ),
            Self::NotOAuth { name } => write!(
                f,
                "server '{name}' is not configured for OAuth (hint: give it auth = {{ type = \"oauth\" }})"
            ),
            Self::NotHttp { name } => write!(
                f,
                "server '{name}' does not use the http transport, which OAuth needs"
            ),
        }
    }
}

impl std::error::Error for NotAnOAuthServer {}

/// The URL and OAuth settings of server `name`, which must be an `http` server configured for
/// OAuth: what `mcpgw auth login` and the gateway's own sign-ins start from.
pub fn oauth_server<'a>(
    config: &'a config::Config,
    name: &str,
) -> Result<(&'a Url, &'a config::OAuthConfig), NotAnOAuthServer> {
    let Some(server) = config.server(name) else {
        return Err(NotAnOAuthServer::Unknown {
            name: name.to_owned(),
            oauth_servers: oauth_servers(config).map(|s| s.name.to_string()).collect(),
        });
    };
    let config::Auth::OAuth(oauth) = &server.auth else {
        return Err(NotAnOAuthServer::NotOAuth {
            name: name.to_owned(),
        });
    };
    // Validation allows oauth only on Streamable HTTP.
    let config::Transport::Http(http) = &server.transport else {
        return Err(NotAnOAuthServer::NotHttp {
            name: name.to_owned(),
        });
    };
    Ok((&http.url, oauth))
}

/// Every server configured for OAuth, in configuration order.
pub fn oauth_servers(config: &config::Config) -> impl Iterator<Item = &config::ServerConfig> {
    config
        .servers
        .iter()
        .filter(|s| matches!(s.auth, config::Auth::OAuth(_)))
}

/// One server's sign-in as `mcpgw auth status --json` and `GET /oauth/status` show it: what
/// was granted, by whom, until when; never a token.
pub fn status_json(name: &str, status: &CredentialStatus) -> serde_json::Value {
    let now = unix_seconds(SystemTime::now());
    let expires_at = status.expires_at.map(unix_seconds);
    serde_json::json!({
        "server": name,
        "logged_in": status.logged_in(),
        "issuer": status.issuer,
        "client_id": status.client_id,
        "registration": status.registration,
        "scopes": status.scopes,
        "has_refresh_token": status.has_refresh_token,
        "expires_at": expires_at,
        "expires_in_s": expires_at.map(|at| at - now),
    })
}

pub use store::time::unix_seconds;

/// The page a browser is shown when it comes back from the authorization server: one
/// paragraph of `text`, escaped (it may quote what the authorization server sent).
pub fn browser_page(text: &str) -> String {
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>mcpgw</title></head>\n<body><p>{}</p></body></html>\n",
        escape(text)
    )
}

/// [`browser_page`] for a sign-in the web console started, with a link back to `back`, the
/// console's page of sign-ins; a successful one (`at_once`) sends the browser there by itself.
/// A refresh, not a redirect: the browser arrives here from the authorization server's site,
/// and a redirect would keep that cross-site navigation going, on which the console's
/// `SameSite=Strict` cookie is not sent; the refresh is this page's own navigation, same-site,
/// so the console opens signed in. A failure stays on this page, which says why.
pub fn browser_page_back(text: &str, back: &str, at_once: bool) -> String {
    let back = escape(back);
    let refresh = if at_once {
        format!("<meta http-equiv=\"refresh\" content=\"0; url={back}\">")
    } else {
        String::new()
    };
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">{refresh}<title>mcpgw</title></head>\n<body><p>{}</p><p><a href=\"{back}\">Back to the console</a></p></body></html>\n",
        escape(text)
    )
}

/// `text` safe in HTML text and double-quoted attributes.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// Signs `principal` (an id: `local`, `client:NAME`, `user:SUBJECT`) out of `server`: its
/// stored tokens are deleted and its own session with the server ends. Whether it had either.
/// What `DELETE /admin/v1/connections/...` and the console's Sign out button do.
pub(crate) async fn sign_out(
    gateway: &crate::Gateway,
    store: &Store,
    server: &str,
    principal: &str,
) -> Result<bool, store::StoreError> {
    let deleted = store.delete_credentials(server, principal).await?;
    let ended = gateway
        .upstreams()
        .forget_principal(server, &PrincipalId::new(principal))
        .await;
    Ok(deleted || ended)
}

#[cfg(test)]
mod tests {
    use upstream::oauth::{OAuthTokenResponse, ServerCredentials};

    use super::*;

    const ISSUER: &str = "https://as.example";

    #[test]
    fn the_browser_page_escapes_and_may_send_the_browser_back() {
        assert!(
            browser_page("failed: <x> & 'y'")
                .contains("<p>failed: &lt;x&gt; &amp; &#39;y&#39;</p>")
        );
        let back = browser_page_back("Signed in to 'docs'.", "/ui/connections", true);
        assert!(
            back.contains("<meta http-equiv=\"refresh\" content=\"0; url=/ui/connections\">"),
            "{back}"
        );
        assert!(back.contains("<a href=\"/ui/connections\">Back to the console</a>"));
        assert!(back.contains("Signed in to &#39;docs&#39;."));
        let failed = browser_page_back("Signing in failed.", "/ui/connections", false);
        assert!(!failed.contains("refresh") && failed.contains("Back to the console"));
    }

    fn token(access: &str) -> OAuthTokenResponse {
        serde_json::from_value(serde_json::json!({
            "access_token": access, "token_type": "Bearer", "expires_in": 60, "refresh_token": "rt-secret",
        }))
        .expect("token response")
    }

    fn registration(client_id: &str, redirect_uri: &str) -> ClientRegistration {
        ClientRegistration {
            method: RegistrationMethod::Dynamic,
            client_id: client_id.to_owned(),
            client_secret: Some(SecretString::from("cs-secret")),
            issuer: ISSUER.to_owned(),
            redirect_uri: redirect_uri.to_owned(),
            registered_at: 42,
        }
    }

    #[tokio::test]
    async fn credentials_round_trip_per_server_and_principal() {
        let store = Store::open_in_memory().await.expect("store");
        let local = StoreOAuth::new(store.clone(), PrincipalId::local());
        let other = StoreOAuth::new(store.clone(), PrincipalId::new("alice"));
        let credentials = StoredCredentials::new(
            "c1".into(),
            Some(token("at-1")),
            vec!["read".into()],
            Some(100),
        )
        .with_issuer(Some(ISSUER.into()));
        local
            .save_credentials("docs", credentials)
            .await
            .expect("save");

        let back = local
            .credentials("docs")
            .await
            .expect("load")
            .expect("stored");
        assert_eq!(back.client_id, "c1");
        assert_eq!(back.granted_scopes, vec!["read".to_owned()]);
        assert_eq!(back.issuer.as_deref(), Some(ISSUER));
        let access = back.token_response.expect("token");
        assert_eq!(access.access_token().secret(), "at-1");
        assert!(other.credentials("docs").await.expect("load").is_none());
        assert!(local.credentials("wiki").await.expect("load").is_none());

        // The plain columns carry the issuer and the expiry, for listing without the key.
        let listed = store.list_credentials().await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].server.as_str(), listed[0].principal.as_str()),
            ("docs", "local")
        );
        assert_eq!(listed[0].issuer, ISSUER);
        assert_eq!(
            listed[0].expires_at,
            Some(UNIX_EPOCH + Duration::from_secs(160))
        );

        local.clear_credentials("docs").await.expect("clear");
        assert!(local.credentials("docs").await.expect("load").is_none());
    }

    #[tokio::test]
    async fn registrations_are_shared_by_issuer_and_redirect_uri() {
        let store = Store::open_in_memory().await.expect("store");
        let local = StoreOAuth::new(store.clone(), PrincipalId::local());
        let alice = StoreOAuth::new(store, PrincipalId::new("alice"));
        local
            .save_registration(registration("c1", "http://127.0.0.1:8765/callback"))
            .await
            .expect("save");

        // Another principal (and any server of this issuer) finds it, secret included.
        let found = alice
            .registration(ISSUER, "http://127.0.0.1:8765/callback")
            .await
            .expect("load")
            .expect("shared");
        assert_eq!(found.client_id, "c1");
        assert_eq!(
            found.client_secret.as_ref().map(|s| s.expose_secret()),
            Some("cs-secret")
        );
        assert_eq!(found.method, RegistrationMethod::Dynamic);
        assert_eq!(found.registered_at, 42);
        assert!(
            alice
                .registration(ISSUER, "http://127.0.0.1:9999/callback")
                .await
                .expect("load")
                .is_none(),
            "another redirect URI needs its own registration"
        );
        assert!(
            alice
                .registration(
                    "https://elsewhere.example",
                    "http://127.0.0.1:8765/callback"
                )
                .await
                .expect("load")
                .is_none(),
            "another issuer never sees it"
        );
        let by_id = alice
            .registration_by_client_id(ISSUER, "c1")
            .await
            .expect("load")
            .expect("found by client id");
        assert_eq!(by_id.redirect_uri, "http://127.0.0.1:8765/callback");

        alice
            .clear_registration(ISSUER, "http://127.0.0.1:8765/callback")
            .await
            .expect("clear");
        assert!(
            local
                .registration(ISSUER, "http://127.0.0.1:8765/callback")
                .await
                .expect("load")
                .is_none()
        );
    }

    #[tokio::test]
    async fn logout_forgets_the_client_of_the_tokens_only() {
        let store = Store::open_in_memory().await.expect("store");
        let oauth = StoreOAuth::local(store);
        oauth
            .save_registration(registration("c1", "http://127.0.0.1:1/callback"))
            .await
            .expect("save");
        oauth
            .save_registration(registration("c2", "http://127.0.0.1:2/callback"))
            .await
            .expect("save");
        oauth
            .save_credentials(
                "docs",
                StoredCredentials::new("c2".into(), Some(token("at")), vec![], Some(1))
                    .with_issuer(Some(ISSUER.into())),
            )
            .await
            .expect("save");
        let credentials = ServerCredentials::new(oauth.clone(), "docs");
        let status = credentials.status().await.expect("status");
        assert!(status.logged_in());
        assert_eq!(status.registration, Some(RegistrationMethod::Dynamic));

        let forgotten = credentials.forget_client().await.expect("forget");
        assert_eq!(forgotten.map(|r| r.client_id).as_deref(), Some("c2"));
        assert!(credentials.credentials().await.expect("load").is_none());
        assert!(
            oauth
                .registration(ISSUER, "http://127.0.0.1:1/callback")
                .await
                .expect("load")
                .is_some(),
            "another client of the issuer stays"
        );
    }

    #[tokio::test]
    async fn refreshes_are_serialised_across_processes_sharing_the_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mcpgw.db");
        // Two handles on one file, as two processes have. Within one process the lock of
        // `refresh_guard` serialises first; across processes only the lease can.
        let gateway = Store::open(&path).await.expect("store");
        let cli = Store::open(&path).await.expect("store");
        let key = || "oauth-refresh\u{1f}docs\u{1f}local".to_owned();
        let lease = RefreshLease::take(&gateway, key()).await.expect("lease");
        let quick = Duration::from_millis(500);
        assert!(
            tokio::time::timeout(quick, RefreshLease::take(&cli, key()))
                .await
                .is_err(),
            "the other process waits while one refreshes"
        );
        assert!(
            tokio::time::timeout(
                quick,
                RefreshLease::take(&cli, "oauth-refresh\u{1f}wiki\u{1f}local".into())
            )
            .await
            .is_ok(),
            "another server is not held up"
        );
        drop(lease);
        let taken = tokio::time::timeout(Duration::from_secs(5), RefreshLease::take(&cli, key()))
            .await
            .expect("the lease is given back when the refresh ends");
        assert!(taken.is_ok());
    }

    #[tokio::test]
    async fn refreshes_of_one_server_and_principal_are_serialised() {
        let store = Store::open_in_memory().await.expect("store");
        let oauth = StoreOAuth::new(store.clone(), PrincipalId::local());
        let guard = oauth.refresh_guard("docs").await.expect("guard");
        // Another server, or another principal, is not held up.
        let other = StoreOAuth::new(store, PrincipalId::new("alice"));
        let quick = Duration::from_millis(200);
        assert!(
            tokio::time::timeout(quick, oauth.refresh_guard("wiki"))
                .await
                .is_ok()
        );
        assert!(
            tokio::time::timeout(quick, other.refresh_guard("docs"))
                .await
                .is_ok()
        );
        assert!(
            tokio::time::timeout(quick, oauth.refresh_guard("docs"))
                .await
                .is_err(),
            "a second refresh of docs waits"
        );
        drop(guard);
        assert!(
            tokio::time::timeout(quick, oauth.refresh_guard("docs"))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn undecodable_credentials_are_absent() {
        let store = Store::open_in_memory().await.expect("store");
        store
            .put_credentials(
                "docs",
                "local",
                &store::Credentials {
                    issuer: ISSUER.into(),
                    document: SecretString::from("not json"),
                    expires_at: None,
                },
            )
            .await
            .expect("put");
        let oauth = StoreOAuth::new(store, PrincipalId::local());
        assert!(oauth.credentials("docs").await.expect("load").is_none());
    }

    #[test]
    fn the_browser_page_escapes_what_it_quotes() {
        let page = browser_page("failed: the authorization server answered `<script>&'\"`");
        assert!(
            page.contains(
                "failed: the authorization server answered `&lt;script&gt;&amp;&#39;&quot;`"
            ),
            "{page}"
        );
        assert!(!page.contains("<script>"));
    }
}
