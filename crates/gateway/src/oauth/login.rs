//! Sign-ins the gateway starts itself, each for one principal (the caller: `local`, or the client
//! or user an HTTP request authenticated as): from `GET /oauth/start`, when a tool call meets
//! an OAuth server without a usable token, or from the web console's Sign in button (for the
//! principal its session is signed in as). The browser comes back to the gateway's own HTTP
//! listener (`/oauth/callback`), which finishes the login and stores the tokens under that
//! principal, where its upstream session reads them; a login the console started then sends the
//! browser back to the console's page.
//!
//! - A login's `state` is single use and refused after [`LOGIN_TTL`]. It carries no secret: the
//!   PKCE verifier stays in this process ([`MemoryLoginStates`] and the pending session), and
//!   with replicas (`[store] redis`) leaves it only sealed with the store's secret key, to
//!   Redis ([`SharedLogin`]), so that the browser's return may land on any replica. There the
//!   take from Redis (`GETDEL`) is what makes a login single use across replicas: a replica that
//!   does not know the `state` finishes the login from Redis (the code exchanged with the
//!   handoff, the tokens stored in the shared database), and announces it to the others, whose
//!   waiting calls resume and whose copy of the login is dropped. A login recorded only here
//!   (Redis was down when it started), or found here while Redis is down, finishes here as
//!   without replicas.
//! - The callback is not authenticated (a browser carries no client key): whose tokens it stores
//!   is what the pending login recorded when it started, found by its `state`, never anything
//!   the browser sends.
//! - The endpoints are served only on a loopback listener. The browser comes back over the
//!   listener's plain HTTP, and OAuth 2.1 (with RFC 8252 for native apps) lets an
//!   authorization server accept an `http` redirect URI only on a loopback address; the
//!   callback itself cannot be authenticated, so on a shared address anyone who learnt a
//!   pending `state` could complete that login with their own authorization code, signing
//!   someone else's principal in to their account. Elsewhere they answer 403 and say why, and
//!   tool calls point at `mcpgw auth login` instead. That a request names this listener in its `Host` (so
//!   a web page cannot reach them through a DNS name rebound to 127.0.0.1) is the request
//!   guard's check (`http::guard`), made for every route.
//! - Finished logins are announced per (server, principal) ([`Logins::watch`]), so a tool call
//!   that handed out a sign-in link can wait for it and resume, and one user's sign-in wakes no
//!   other user's call.
//!
//! Nothing here logs a token, code or verifier; authorisation URLs are not logged either.

use std::{
    collections::HashMap,
    fmt,
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant, SystemTime},
};

use axum::{
    Extension, Json, Router,
    extract::{RawQuery, State},
    http::{StatusCode, Uri, header},
    response::{Html, IntoResponse, Response},
    routing::get,
};
use base64::Engine as _;
use ids::ServerName;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use upstream::oauth::{
    LOGIN_TTL, LoginCallback, LoginHandoff, LoginOutcome, MemoryLoginStates, OAuthSettings,
    PendingLogin, RefreshLocks, ServerCredentials, StateStore, finish_handoff, finish_login,
    start_login,
};
use url::Url;

use super::{
    NotAnOAuthServer, StoreOAuth, browser_page, browser_page_back, oauth_server, oauth_servers,
    unix_seconds,
};
use crate::{Gateway, principal::Principal, sync::lock};

/// Where the browser comes back to, unless a server's configuration names its own
/// `redirect_uri` on the gateway's address.
pub const CALLBACK_PATH: &str = "/oauth/callback";
const START_PATH: &str = "/oauth/start";
const STATUS_PATH: &str = "/oauth/status";
/// Paths a configured `redirect_uri` cannot take over.
const RESERVED_PATHS: &[&str] = &["/mcp", "/healthz", START_PATH, STATUS_PATH];

/// Most logins waiting for their browser at once, whoever they are for; the oldest is dropped
/// beyond this, so clients that keep starting logins cannot grow the table.
const MAX_PENDING: usize = 256;
/// A waiting login is handed out again rather than a new one started while it is younger than
/// this, so that a burst of calls (or reloads of `/oauth/start`) of one principal shares one
/// login.
const REUSE_FOR: Duration = Duration::from_secs(LOGIN_TTL.as_secs() / 2);
/// Longest discovery and client registration may take when a login starts.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The key of the sign-in request in an `input_required` result's `inputRequests`.
pub(crate) const SIGNIN_INPUT: &str = "signin";
const REQUEST_STATE_PREFIX: &str = "mcpgw-signin:";

/// The sign-ins of one gateway: logins waiting for their browser, and what became of them.
pub struct Logins {
    site: Result<Site, Unavailable>,
    /// rmcp's record of each started login (the PKCE verifier): memory only; another replica
    /// finishes a login from its sealed copy in Redis, not from this.
    states: Arc<dyn StateStore>,
    pending: Mutex<Table<PendingLogin>>,
    /// By (server, principal id).
    finished: Mutex<HashMap<(String, ids::PrincipalId), watch::Sender<Finished>>>,
    /// One login start per (server, principal) at a time: concurrent calls share the first
    /// one's login.
    starting: RefreshLocks,
}

/// Why this gateway cannot take a browser's return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Serving stdio: there is no HTTP listener.
    NoListener,
    /// The HTTP listener is on a network address (see the module documentation).
    NotLoopback,
}

impl Unavailable {
    fn reason(self) -> &'static str {
        match self {
            Self::NoListener => {
                "this gateway has no HTTP listener for the browser to come back to; sign in with `mcpgw auth login NAME`"
            }
            Self::NotLoopback => {
                "sign-in through the gateway is served only on a loopback address: the browser comes back to it over plain HTTP, which OAuth 2.1 allows only to a loopback redirect URI. Sign in with `mcpgw auth login NAME` on the gateway's machine"
            }
        }
    }
}

/// The listener the browser comes back to.
#[derive(Clone, Debug)]
struct Site {
    addr: SocketAddr,
    /// Paths of configured `redirect_uri`s on this address other than [`CALLBACK_PATH`].
    extra_paths: Vec<String>,
}

impl Site {
    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Whether a browser sent to `uri` arrives at this listener, on a path it serves.
    fn serves(&self, uri: &Url) -> bool {
        let host_ok = match uri.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip) == self.addr.ip(),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip) == self.addr.ip(),
            Some(url::Host::Domain(name)) => {
                name.eq_ignore_ascii_case("localhost") && self.addr.ip().is_loopback()
            }
            None => false,
        };
        host_ok
            && uri.scheme() == "http"
            && uri.port_or_known_default() == Some(self.addr.port())
            && !RESERVED_PATHS.contains(&uri.path())
    }
}

/// A login handed out: the URL to open and how long it is good for.
#[derive(Clone, Debug)]
pub struct Started {
    pub server: ServerName,
    pub authorization_url: String,
    pub redirect_uri: String,
    pub expires_at: SystemTime,
    /// When [`Started::expires_at`] passes, on the monotonic clock.
    pub deadline: Instant,
}

/// Why a sign-in could not be started.
#[derive(Debug)]
pub enum LoginError {
    Unavailable(Unavailable),
    NotOAuth(NotAnOAuthServer),
    NoStore,
    /// The server's configured `redirect_uri` leads somewhere this gateway does not listen.
    ForeignRedirect {
        server: ServerName,
        redirect_uri: String,
        origin: String,
    },
    Start {
        server: ServerName,
        reason: String,
    },
}

impl fmt::Display for LoginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(why) => f.write_str(why.reason()),
            Self::NotOAuth(why) => write!(f, "{why}"),
            Self::NoStore => f.write_str(
                "the database that keeps sign-ins could not be opened (see the warning at startup)",
            ),
            Self::ForeignRedirect {
                server,
                redirect_uri,
                origin,
            } => write!(
                f,
                "server '{server}' is configured with redirect_uri = \"{redirect_uri}\", which this gateway ({origin}) does not serve; sign in with `mcpgw auth login {server}`"
            ),
            Self::Start { server, reason } => {
                write!(f, "cannot start the sign-in to '{server}': {reason}")
            }
        }
    }
}

impl LoginError {
    fn status(&self) -> StatusCode {
        match self {
            Self::Unavailable(_) => StatusCode::FORBIDDEN,
            Self::NotOAuth(NotAnOAuthServer::Unknown { .. }) => StatusCode::NOT_FOUND,
            Self::NotOAuth(_) => StatusCode::BAD_REQUEST,
            Self::NoStore => StatusCode::SERVICE_UNAVAILABLE,
            Self::ForeignRedirect { .. } => StatusCode::CONFLICT,
            Self::Start { .. } => StatusCode::BAD_GATEWAY,
        }
    }
}

/// What became of one (server, principal)'s logins so far. `serial` counts finished logins (either way);
/// `signed_in` is the serial of the last that succeeded.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Finished {
    pub(crate) serial: u64,
    signed_in: u64,
    failure: Option<String>,
}

/// How a wait for a sign-in ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Waited {
    SignedIn,
    Failed(String),
    TimedOut,
    Cancelled,
}

impl Logins {
    /// Sign-ins whose browser comes back to the HTTP listener at `addr`; unavailable unless
    /// `addr` is a loopback address. Configured redirect URIs on `addr` are served as well.
    pub fn for_listener(addr: SocketAddr, config: &config::Config) -> Self {
        let site = if addr.ip().is_loopback() {
            let mut site = Site {
                addr,
                extra_paths: Vec::new(),
            };
            site.extra_paths = oauth_servers(config)
                .filter_map(|server| match &server.auth {
                    config::Auth::OAuth(oauth) => oauth.redirect_uri.clone(),
                    _ => None,
                })
                .filter(|uri| site.serves(uri) && uri.path() != CALLBACK_PATH)
                .map(|uri| uri.path().to_owned())
                .collect();
            Ok(site)
        } else {
            Err(Unavailable::NotLoopback)
        };
        Self::new(site)
    }

    /// No sign-ins through the gateway (stdio).
    pub fn without_listener() -> Self {
        Self::new(Err(Unavailable::NoListener))
    }

    fn new(site: Result<Site, Unavailable>) -> Self {
        Self {
            site,
            states: Arc::new(MemoryLoginStates::default()),
            pending: Mutex::new(Table::default()),
            finished: Mutex::new(HashMap::new()),
            starting: RefreshLocks::default(),
        }
    }

    /// Whether this gateway can take a browser's return, and so hand out sign-ins.
    pub fn available(&self) -> bool {
        self.site.is_ok()
    }

    /// The link that starts a sign-in to `server` when opened in a browser: nothing is started
    /// (or registered with the authorization server) until someone opens it, and it does not
    /// expire. `None` when this gateway cannot take the browser's return (for this server: its
    /// configured `redirect_uri` may lead elsewhere).
    pub fn start_link(&self, config: &config::Config, server: &str) -> Option<String> {
        let site = self.site.as_ref().ok()?;
        if let Ok((_, oauth)) = oauth_server(config, server)
            && let Some(configured) = &oauth.redirect_uri
            && !site.serves(configured)
        {
            return None;
        }
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("server", server)
            .append_pair("redirect", "1")
            .finish();
        Some(format!("{}{START_PATH}?{query}", site.origin()))
    }

    /// `server`'s URL and OAuth settings for a sign-in through this listener: its redirect URI
    /// (this listener's callback unless configured) must be one this listener serves, and
    /// discovery and registration run under the server's network policy, as its requests do.
    fn settings(
        &self,
        gateway: &Gateway,
        server: &str,
    ) -> Result<(Url, OAuthSettings), LoginError> {
        let site = self
            .site
            .as_ref()
            .map_err(|why| LoginError::Unavailable(*why))?;
        let config = gateway.config();
        let (url, oauth) = oauth_server(&config, server).map_err(LoginError::NotOAuth)?;
        let start_error = |reason: String| LoginError::Start {
            server: server.into(),
            reason,
        };
        let default_redirect = format!("{}{CALLBACK_PATH}", site.origin());
        let mut settings = OAuthSettings::from_config(server, oauth, &default_redirect)
            .map_err(|e| start_error(e.to_string()))?;
        let private = gateway
            .config()
            .server(server)
            .is_some_and(|s| s.allow_private_network);
        settings.policy = Arc::new(gateway.network.for_server(server, private));
        let redirect_uri = Url::parse(&settings.redirect_uri)
            .map_err(|_| start_error("the redirect URI is not a URL".to_owned()))?;
        if !site.serves(&redirect_uri) {
            return Err(LoginError::ForeignRedirect {
                server: server.into(),
                redirect_uri: settings.redirect_uri.clone(),
                origin: site.origin(),
            });
        }
        Ok((url.clone(), settings))
    }

    /// Starts a login to `server` for `principal`, or hands out the one already waiting for its
    /// browser if it is young enough. The tokens it brings are stored for `principal`.
    pub async fn begin(
        &self,
        gateway: &Gateway,
        server: &str,
        principal: &Principal,
    ) -> Result<Started, LoginError> {
        self.begin_returning(gateway, server, principal, None).await
    }

    /// [`Logins::begin`] for the web console: the page the browser lands on when the login
    /// finishes sends it on to `back` (a path of the console), where the sign-in shows.
    pub(crate) async fn begin_returning(
        &self,
        gateway: &Gateway,
        server: &str,
        principal: &Principal,
        back: Option<&'static str>,
    ) -> Result<Started, LoginError> {
        let (url, settings) = self.settings(gateway, server)?;
        let store = gateway.store().cloned().ok_or(LoginError::NoStore)?;
        let start_error = |reason: String| LoginError::Start {
            server: server.into(),
            reason,
        };
        let principal = principal.id();
        // NUL cannot occur in a server name or principal id: the key is unambiguous.
        let _one_start_at_a_time = self
            .starting
            .acquire(&format!("{server}\0{principal}"))
            .await;
        if let Some(started) = self
            .pending()
            .reuse(server, &principal, Instant::now(), back)
        {
            return Ok(started);
        }
        let oauth = StoreOAuth::new(store.clone(), ids::PrincipalId::new(principal.as_str()));
        let credentials = ServerCredentials::new(Arc::new(oauth), server);
        let starting = start_login(
            url.as_str(),
            &settings,
            &credentials,
            self.states.clone(),
            None,
        );
        let (authorization_url, login) = tokio::time::timeout(START_TIMEOUT, starting)
            .await
            .map_err(|_| {
                start_error(format!(
                    "discovery and registration took over {} s",
                    START_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| start_error(e.to_string()))?;
        let state = super::callback::state_of(&authorization_url)
            .ok_or_else(|| start_error("the authorization URL carries no state".to_owned()))?;
        let shared = match &gateway.cluster {
            Some(cluster) => {
                let shared = SharedLogin {
                    server: server.into(),
                    principal: principal.clone(),
                    back: back.map(str::to_owned),
                    login: login.handoff().clone(),
                };
                shared.put(cluster, &store, &state).await
            }
            None => false,
        };
        let pending = Pending {
            server: server.into(),
            principal: principal.clone(),
            state,
            started: Instant::now(),
            started_at: SystemTime::now(),
            authorization_url,
            redirect_uri: settings.redirect_uri.clone(),
            back,
            shared,
            login,
        };
        let started = pending.started();
        self.pending().insert(pending, Instant::now());
        tracing::info!(
            server,
            %principal,
            redirect_uri = %settings.redirect_uri,
            "sign-in started; waiting up to {} minutes for the browser",
            LOGIN_TTL.as_secs() / 60
        );
        Ok(started)
    }

    /// The announcements of `principal`'s finished logins to `server`. The receiver has seen
    /// the current value: [`wait_for_sign_in`] with its `serial` waits for the next login to
    /// finish.
    pub(crate) fn watch(&self, server: &str, principal: &Principal) -> watch::Receiver<Finished> {
        let mut finished = lock(&self.finished);
        // A channel nobody watches that never announced anything is what a new one would be:
        // dropping those keeps calls of principals who never finish a sign-in from growing
        // the map. The others stay, since a retry compares against their serial.
        finished.retain(|_, sender| {
            sender.receiver_count() > 0 || *sender.borrow() != Finished::default()
        });
        finished
            .entry((server.to_owned(), principal.id()))
            .or_insert_with(|| watch::channel(Finished::default()).0)
            .subscribe()
    }

    fn announce(&self, server: &str, principal: &str, outcome: Result<(), String>) {
        let mut finished = lock(&self.finished);
        let sender = finished
            .entry((server.to_owned(), principal.into()))
            .or_insert_with(|| watch::channel(Finished::default()).0);
        sender.send_modify(|f| {
            f.serial += 1;
            match outcome {
                Ok(()) => {
                    f.signed_in = f.serial;
                    f.failure = None;
                }
                Err(reason) => f.failure = Some(reason),
            }
        });
    }

    /// The browser's return: finishes the login its `state` names, once, and says how it went
    /// on a page for the browser. A successful sign-in reconnects the server in the background,
    /// so its tools join the catalog if they were never listed.
    pub async fn finish(
        &self,
        gateway: &Arc<Gateway>,
        path: &str,
        query: &str,
    ) -> (StatusCode, String) {
        let Some(state) = url::form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "state")
            .map(|(_, v)| v.into_owned())
        else {
            return (
                StatusCode::BAD_REQUEST,
                browser_page(
                    "This is where the browser comes back after signing in to a server behind mcpgw; this request carries no sign-in.",
                ),
            );
        };
        let Some(claimed) = self.claim(gateway, &state).await else {
            return (
                StatusCode::BAD_REQUEST,
                browser_page(&format!(
                    "This sign-in is unknown, already used or expired: a sign-in link works once, for {} minutes. Start it again.",
                    LOGIN_TTL.as_secs() / 60
                )),
            );
        };
        let (server, principal) = (claimed.server.clone(), claimed.principal.clone());
        let back = claimed.back.clone();
        let outcome = match Url::parse(&claimed.redirect_uri) {
            Ok(mut url) if url.path() == path => {
                url.set_query(Some(query));
                self.exchange(gateway, claimed, url.into()).await
            }
            _ => Err(format!(
                "the browser came back to {path}, not to the redirect URI of this sign-in"
            )),
        };
        let failure = outcome.as_ref().err().cloned();
        self.announce(&server, &principal, failure.clone().map_or(Ok(()), Err));
        gateway.tell_replicas(cluster::Event::Login {
            server: server.clone(),
            principal: principal.clone(),
            failure,
        });
        match outcome {
            Ok(outcome) => {
                tracing::info!(%server, %principal, scopes = %outcome.scopes.join(" "), "signed in");
                list_after_sign_in(gateway, &server, &principal);
                let done = format!("Signed in to '{server}'.");
                let page = match back {
                    Some(back) => browser_page_back(&done, &back, true),
                    None => browser_page(&format!("{done} You can close this tab.")),
                };
                (StatusCode::OK, page)
            }
            Err(reason) => {
                tracing::warn!(%server, %principal, %reason, "sign-in failed");
                let failed = format!("Signing in to '{server}' failed: {reason}.");
                let page = match back {
                    Some(back) => browser_page_back(&failed, &back, false),
                    None => browser_page(&format!("{failed} You can close this tab.")),
                };
                (StatusCode::BAD_REQUEST, page)
            }
        }
    }

    /// The login `state` names, taken once: from this process's table, and with replicas from
    /// Redis, whose take is the authority on whether the login was used (on any replica). A
    /// login of this process that was never recorded in Redis (it was down then), or found here
    /// while Redis is down, is finished here as without replicas.
    async fn claim(&self, gateway: &Gateway, state: &str) -> Option<Claimed> {
        let here = self.pending().take(state, Instant::now());
        let shared = here.as_ref().is_none_or(|pending| pending.shared);
        let Some(cluster) = gateway.cluster.as_ref().filter(|_| shared) else {
            return here.map(Claimed::here);
        };
        let taken = match cluster.take_auth_state(state).await {
            Ok(taken) => taken,
            Err(error) => {
                if here.is_some() {
                    tracing::warn!(%error, "redis unreachable: finishing this replica's sign-in without it");
                }
                return here.map(Claimed::here);
            }
        };
        let taken = taken?;
        if let Some(here) = here {
            // Started here: the rmcp session in memory finishes it, no discovery again.
            return Some(Claimed::here(here));
        }
        let store = gateway.store()?;
        match SharedLogin::open(store, state, &taken) {
            Some(shared) => Some(Claimed::shared(shared)),
            None => {
                tracing::warn!(
                    "ignoring a sign-in recorded by another replica that does not open (another secret key?)"
                );
                None
            }
        }
    }

    /// Exchanges the code of the `callback` URL for the tokens of a claimed login.
    async fn exchange(
        &self,
        gateway: &Gateway,
        claimed: Claimed,
        callback: String,
    ) -> Result<LoginOutcome, String> {
        let callback = LoginCallback::Url(callback);
        match claimed.login {
            Login::Here(login) => finish_login(*login, callback)
                .await
                .map_err(|e| e.to_string()),
            Login::Shared(handoff) => {
                let (_, settings) = self
                    .settings(gateway, &claimed.server)
                    .map_err(|e| e.to_string())?;
                let store = gateway
                    .store()
                    .cloned()
                    .ok_or(LoginError::NoStore.to_string())?;
                let oauth = StoreOAuth::new(store, claimed.principal.clone());
                let credentials = ServerCredentials::new(Arc::new(oauth), &claimed.server);
                finish_handoff(*handoff, &settings, &credentials, callback)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Every server configured for OAuth with `principal`'s sign-in (never a token), and
    /// whether a login of theirs is waiting for its browser.
    pub async fn status(
        &self,
        gateway: &Gateway,
        principal: &Principal,
    ) -> Result<Vec<Value>, LoginError> {
        let store = gateway.store().cloned().ok_or(LoginError::NoStore)?;
        let id = principal.id();
        let oauth: Arc<dyn upstream::oauth::OAuthStore> =
            Arc::new(StoreOAuth::new(store, ids::PrincipalId::new(id.as_str())));
        let mut rows = Vec::new();
        for server in oauth_servers(&gateway.config()) {
            let name = server.name.as_str();
            let mut row = match ServerCredentials::new(oauth.clone(), name).status().await {
                Ok(status) => super::status_json(name, &status),
                Err(error) => json!({"server": name, "error": error.to_string()}),
            };
            row["principal"] = json!(id);
            row["login_pending"] = json!(self.pending().waiting(name, &id, Instant::now()));
            rows.push(row);
        }
        Ok(rows)
    }

    fn pending(&self) -> MutexGuard<'_, Table<PendingLogin>> {
        lock(&self.pending)
    }

    /// Whether a login of `principal` to `server` is waiting for its browser.
    pub(crate) fn waiting(&self, server: &str, principal: &Principal) -> bool {
        self.pending()
            .waiting(server, &principal.id(), Instant::now())
    }

    /// Whether the HTTP edge should refuse this request, and why.
    pub(crate) fn refusal(&self) -> Option<&'static str> {
        self.site.as_ref().err().map(|why| why.reason())
    }

    fn is_callback_path(&self, path: &str) -> bool {
        path == CALLBACK_PATH
            || self
                .site
                .as_ref()
                .is_ok_and(|site| site.extra_paths.iter().any(|p| p == path))
    }
}

/// Lists `server` again for `principal` after a sign-in, in the background, so its tools join
/// the catalog if they were never listed.
fn list_after_sign_in(gateway: &Arc<Gateway>, server: &str, principal: &ids::PrincipalId) {
    let Ok(Some(upstream)) = gateway.upstreams().for_principal(server, principal) else {
        return;
    };
    let gateway = gateway.clone();
    tokio::spawn(async move {
        let listed = upstream.refresh_tools().await.is_ok();
        // The local user's list is the catalog's; another principal's joins it only when the
        // catalog has none of this server's tools yet.
        let first = !gateway
            .catalog()
            .tools()
            .iter()
            .any(|tool| tool.server == upstream.name());
        if listed && (upstream.principal() == ids::PrincipalId::LOCAL || first) {
            gateway.refresh_catalog().await;
        }
    });
}

/// Hears the sign-ins other replicas finished, while `logins` lives: each is announced here as
/// if it had finished here (a call waiting for it resumes), this replica's logins of the same
/// (server, principal) are dropped (the one finished elsewhere may have been one of them, now
/// used), and a successful one lists the server again. Nothing without Redis.
pub(crate) fn hear_replicas(gateway: &Arc<Gateway>, logins: &Arc<Logins>) {
    let Some(cluster) = &gateway.cluster else {
        return;
    };
    let gateway = Arc::downgrade(gateway);
    crate::replicas::on_events(cluster, Arc::downgrade(logins), move |logins, event| {
        let gateway = gateway.upgrade();
        async move {
            let (
                Some(gateway),
                cluster::Event::Login {
                    server,
                    principal,
                    failure,
                },
            ) = (gateway, event)
            else {
                return;
            };
            tracing::debug!(%server, %principal, "another replica finished a sign-in");
            logins.pending().forget(&server, &principal);
            let signed_in = failure.is_none();
            logins.announce(&server, &principal, failure.map_or(Ok(()), Err));
            if signed_in {
                list_after_sign_in(&gateway, &server, &principal);
            }
        }
    });
}

/// Waits until a login of the watched server finishes after `after` (a [`Finished::serial`]),
/// until `deadline`, or until `ct` is cancelled.
pub(crate) async fn wait_for_sign_in(
    finished: &mut watch::Receiver<Finished>,
    after: u64,
    deadline: Instant,
    ct: &CancellationToken,
) -> Waited {
    loop {
        {
            let now = finished.borrow_and_update();
            if now.signed_in > after {
                return Waited::SignedIn;
            }
            if now.serial > after {
                return Waited::Failed(now.failure.clone().unwrap_or_default());
            }
        }
        tokio::select! {
            changed = finished.changed() => if changed.is_err() {
                return Waited::TimedOut;
            },
            () = tokio::time::sleep_until(deadline.into()) => return Waited::TimedOut,
            () = ct.cancelled() => return Waited::Cancelled,
        }
    }
}

/// The `requestState` of an `input_required` result that asked for a sign-in to `server`
/// after `serial` logins had finished. A handle, not a credential: it grants nothing (the
/// retried call is authorised as any other), so a forged one is at worst ignored.
pub(crate) fn request_state(server: &str, serial: u64) -> String {
    format!("{REQUEST_STATE_PREFIX}{serial}:{server}")
}

/// The server and serial of a `requestState` made by [`request_state`].
pub(crate) fn parse_request_state(state: &str) -> Option<(&str, u64)> {
    let (serial, server) = state.strip_prefix(REQUEST_STATE_PREFIX)?.split_once(':')?;
    Some((server, serial.parse().ok()?))
}

// ---------------------------------------------------------------------------------------------
// Waiting logins

struct Pending<L> {
    server: ServerName,
    /// Whose tokens the login brings: the principal id that started it.
    principal: ids::PrincipalId,
    /// The `state` of the authorization request: the key the callback is matched by.
    state: String,
    started: Instant,
    started_at: SystemTime,
    authorization_url: String,
    redirect_uri: String,
    /// Where the browser goes once the login is done (a console page), if anywhere.
    back: Option<&'static str>,
    /// Whether the login is recorded in Redis too, for any replica to finish; then Redis's
    /// take decides whether it is still unused.
    shared: bool,
    login: L,
}

/// A login taken for its callback: started here (rmcp's session in memory) or by another
/// replica (its handoff, from Redis).
struct Claimed {
    server: ServerName,
    principal: ids::PrincipalId,
    redirect_uri: String,
    back: Option<String>,
    login: Login,
}

/// Both boxed: rmcp's session and the handoff are each kilobytes.
enum Login {
    Here(Box<PendingLogin>),
    Shared(Box<LoginHandoff>),
}

impl Claimed {
    fn here(pending: Pending<PendingLogin>) -> Self {
        Self {
            server: pending.server,
            principal: pending.principal,
            redirect_uri: pending.redirect_uri,
            back: pending.back.map(str::to_owned),
            login: Login::Here(Box::new(pending.login)),
        }
    }

    fn shared(shared: SharedLogin) -> Self {
        Self {
            server: shared.server,
            principal: shared.principal,
            redirect_uri: shared.login.redirect_uri().to_owned(),
            back: shared.back,
            login: Login::Shared(Box::new(shared.login)),
        }
    }
}

/// A login as Redis keeps it, for whichever replica the browser comes back to: whose it is,
/// where the browser goes afterwards, and what finishing it takes (the PKCE verifier among
/// it). Sealed with the store's secret key, bound to the login's `state`, before it leaves the
/// process; `Debug` shows no secret.
#[derive(Debug, Serialize, Deserialize)]
struct SharedLogin {
    server: ServerName,
    principal: ids::PrincipalId,
    back: Option<String>,
    login: LoginHandoff,
}

impl SharedLogin {
    /// The sealed text kept in Redis under `state`.
    fn seal(&self, store: &store::Store, state: &str) -> Option<String> {
        let json = serde_json::to_vec(self).ok()?;
        let sealed = store.seal_login(state, &json).ok()?;
        Some(base64::engine::general_purpose::STANDARD_NO_PAD.encode(sealed))
    }

    /// Opens what [`SharedLogin::seal`] made for `state`; `None` when it does not open.
    fn open(store: &store::Store, state: &str, text: &str) -> Option<SharedLogin> {
        let sealed = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(text)
            .ok()?;
        let json = store.open_login(state, &sealed).ok()??;
        serde_json::from_slice(&json).ok()
    }

    /// Records this login in Redis under `state` for [`cluster::AUTH_STATE_TTL`]; whether it
    /// was. Not recorded (Redis down), the login can still finish on this replica.
    async fn put(&self, cluster: &cluster::Cluster, store: &store::Store, state: &str) -> bool {
        let Some(sealed) = self.seal(store, state) else {
            tracing::warn!(server = %self.server, "cannot seal the sign-in for the other replicas; it finishes only here");
            return false;
        };
        match cluster.put_auth_state(state, &sealed).await {
            Ok(put) => put,
            Err(error) => {
                tracing::warn!(server = %self.server, %error, "sign-in not shared with the other replicas; its browser must come back to this one");
                false
            }
        }
    }
}

impl<L> Pending<L> {
    fn started(&self) -> Started {
        Started {
            server: self.server.clone(),
            authorization_url: self.authorization_url.clone(),
            redirect_uri: self.redirect_uri.clone(),
            expires_at: self.started_at + LOGIN_TTL,
            deadline: self.started + LOGIN_TTL,
        }
    }

    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.started) >= LOGIN_TTL
    }
}

/// Logins waiting for their browser, oldest first. Generic over the login so that the rules
/// (single use, expiry, reuse, bound) are tested without an authorization server.
struct Table<L> {
    entries: Vec<Pending<L>>,
}

impl<L> Default for Table<L> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<L> Table<L> {
    fn purge(&mut self, now: Instant) {
        self.entries.retain(|p| !p.expired(now));
    }

    fn insert(&mut self, pending: Pending<L>, now: Instant) {
        self.purge(now);
        if self.entries.len() >= MAX_PENDING {
            self.entries.remove(0);
        }
        self.entries.push(pending);
    }

    /// Removes and returns the live login with this `state`: a second callback finds nothing.
    fn take(&mut self, state: &str, now: Instant) -> Option<Pending<L>> {
        self.purge(now);
        let index = self.entries.iter().position(|p| p.state == state)?;
        Some(self.entries.remove(index))
    }

    /// The login of `principal` to `server` still young enough to hand out again, if any; it
    /// now sends its browser on to `back` when one is given (the console's button may reuse a
    /// login a tool call started).
    fn reuse(
        &mut self,
        server: &str,
        principal: &str,
        now: Instant,
        back: Option<&'static str>,
    ) -> Option<Started> {
        let pending = self.entries.iter_mut().rev().find(|p| {
            p.server == server
                && p.principal == principal
                && now.saturating_duration_since(p.started) < REUSE_FOR
        })?;
        if back.is_some() {
            pending.back = back;
        }
        Some(pending.started())
    }

    /// Drops the logins of `principal` to `server` (one of theirs finished on another replica).
    fn forget(&mut self, server: &str, principal: &str) {
        self.entries
            .retain(|p| p.server != server || p.principal != principal);
    }

    fn waiting(&self, server: &str, principal: &str, now: Instant) -> bool {
        self.entries
            .iter()
            .any(|p| p.server == server && p.principal == principal && !p.expired(now))
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

type Shared = (Arc<Gateway>, Arc<Logins>);

/// `/oauth/start`, `/oauth/callback` (and any configured redirect path on this address) and
/// `/oauth/status`.
pub(crate) fn routes(gateway: Arc<Gateway>, logins: Arc<Logins>) -> Router {
    Router::new()
        .route(START_PATH, get(start))
        .route(CALLBACK_PATH, get(callback))
        .route(STATUS_PATH, get(status))
        .fallback(other)
        .with_state((gateway, logins))
}

fn json_error(status: StatusCode, message: &str) -> Response {
    (status, no_store(), Json(json!({ "error": message }))).into_response()
}

fn page(status: StatusCode, html: String) -> Response {
    (status, no_store(), Html(html)).into_response()
}

fn no_store() -> [(header::HeaderName, &'static str); 1] {
    [(header::CACHE_CONTROL, "no-store")]
}

/// `GET /oauth/start?server=NAME[&redirect=1]`: a sign-in URL as JSON, or a redirect to it,
/// for the principal the request authenticated as (`local` on an open listener).
async fn start(
    State((gateway, logins)): State<Shared>,
    principal: Option<Extension<Principal>>,
    RawQuery(query): RawQuery,
) -> Response {
    let principal = principal.map_or(Principal::Local, |Extension(p)| p);
    if let Some(why) = logins.refusal() {
        return json_error(StatusCode::FORBIDDEN, why);
    }
    let params: HashMap<String, String> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let Some(server) = params.get("server").filter(|s| !s.is_empty()) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "name the server to sign in to: /oauth/start?server=NAME",
        );
    };
    let redirect = params
        .get("redirect")
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "yes"));
    match logins.begin(&gateway, server, &principal).await {
        Ok(started) if redirect => (
            StatusCode::FOUND,
            [
                (header::LOCATION, started.authorization_url),
                (header::CACHE_CONTROL, "no-store".to_owned()),
            ],
        )
            .into_response(),
        Ok(started) => {
            let expires_at = unix_seconds(started.expires_at);
            let now = unix_seconds(SystemTime::now());
            (
                no_store(),
                Json(json!({
                    "server": started.server,
                    "authorization_url": started.authorization_url,
                    "redirect_uri": started.redirect_uri,
                    "expires_at": expires_at,
                    "expires_in_s": expires_at - now,
                })),
            )
                .into_response()
        }
        Err(error) => {
            if !matches!(error, LoginError::NotOAuth(_)) {
                tracing::warn!(server = %server, %error, "sign-in not started");
            }
            json_error(error.status(), &error.to_string())
        }
    }
}

/// `GET /oauth/callback?code=...&state=...[&iss=...]`: the browser's return.
async fn callback(State((gateway, logins)): State<Shared>, uri: Uri) -> Response {
    finish_page(&gateway, &logins, &uri).await
}

async fn finish_page(gateway: &Arc<Gateway>, logins: &Logins, uri: &Uri) -> Response {
    if let Some(why) = logins.refusal() {
        return page(StatusCode::FORBIDDEN, browser_page(why));
    }
    let (status, html) = logins
        .finish(gateway, uri.path(), uri.query().unwrap_or_default())
        .await;
    page(status, html)
}

/// `GET /oauth/status`: every OAuth server's sign-in of the caller, as `mcpgw auth status
/// --json` shows the local user's.
async fn status(
    State((gateway, logins)): State<Shared>,
    principal: Option<Extension<Principal>>,
) -> Response {
    if let Some(why) = logins.refusal() {
        return json_error(StatusCode::FORBIDDEN, why);
    }
    let principal = principal.map_or(Principal::Local, |Extension(p)| p);
    match logins.status(&gateway, &principal).await {
        Ok(rows) => (no_store(), Json(Value::Array(rows))).into_response(),
        Err(error) => json_error(error.status(), &error.to_string()),
    }
}

/// A configured `redirect_uri` on this address with a path of its own; anything else is 404.
async fn other(
    State((gateway, logins)): State<Shared>,
    method: axum::http::Method,
    uri: Uri,
) -> Response {
    if method == axum::http::Method::GET && logins.is_callback_path(uri.path()) {
        return finish_page(&gateway, &logins, &uri).await;
    }
    StatusCode::NOT_FOUND.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(server: &str, state: &str, started: Instant) -> Pending<()> {
        pending_for(server, "local", state, started)
    }

    fn pending_for(server: &str, principal: &str, state: &str, started: Instant) -> Pending<()> {
        Pending {
            server: server.into(),
            principal: principal.into(),
            state: state.to_owned(),
            started,
            started_at: SystemTime::now(),
            authorization_url: format!("https://as.example/authorize?state={state}"),
            redirect_uri: "http://127.0.0.1:8931/oauth/callback".to_owned(),
            back: None,
            shared: false,
            login: (),
        }
    }

    /// A shared login as another replica would read it, with `verifier` as its PKCE verifier
    /// and `secret` as its client secret.
    fn shared_login(state: &str, verifier: &str, secret: &str) -> SharedLogin {
        serde_json::from_value(json!({
            "server": "docs",
            "principal": "client:alice",
            "back": "/ui/connections",
            "login": {
                "server_url": "https://docs.example/mcp",
                "challenge": null,
                "metadata": {
                    "authorization_endpoint": "https://as.example/authorize",
                    "token_endpoint": "https://as.example/token",
                    "issuer": "https://as.example"
                },
                "client_id": "client-1",
                "client_secret": secret,
                "redirect_uri": "http://127.0.0.1:8931/oauth/callback",
                "scopes": ["read"],
                "authorization": {
                    "pkce_verifier": verifier,
                    "csrf_token": state,
                    "created_at": 1
                }
            }
        }))
        .expect("a shared login")
    }

    #[tokio::test]
    async fn a_shared_login_opens_under_its_key_and_state_only() {
        let store = store::Store::open_in_memory().await.expect("store");
        let other = store::Store::open_in_memory().await.expect("store");
        let login = shared_login("st-1", "verifier-0123456789", "client-secret-42");
        let sealed = login.seal(&store, "st-1").expect("sealed");
        for secret in ["verifier-0123456789", "client-secret-42", "client:alice"] {
            assert!(!sealed.contains(secret), "{secret} readable in Redis");
        }
        let opened = SharedLogin::open(&store, "st-1", &sealed).expect("opens");
        assert_eq!(opened.server, "docs");
        assert_eq!(opened.principal, "client:alice");
        assert_eq!(opened.back.as_deref(), Some("/ui/connections"));
        assert_eq!(opened.login.state(), "st-1");
        assert_eq!(
            opened.login.redirect_uri(),
            "http://127.0.0.1:8931/oauth/callback"
        );
        assert!(
            SharedLogin::open(&other, "st-1", &sealed).is_none(),
            "another replica's key"
        );
        assert!(
            SharedLogin::open(&store, "st-2", &sealed).is_none(),
            "under another state"
        );
        let mut tampered = sealed.clone().into_bytes();
        tampered[10] = if tampered[10] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).expect("ascii");
        assert!(SharedLogin::open(&store, "st-1", &tampered).is_none());
        assert!(SharedLogin::open(&store, "st-1", "not base64!").is_none());
    }

    #[test]
    fn a_shared_login_shows_no_secret_in_debug() {
        let login = shared_login("st-1", "verifier-0123456789", "client-secret-42");
        let shown = format!("{login:?}");
        assert!(
            shown.contains("docs") && shown.contains("client-1"),
            "{shown}"
        );
        for secret in ["verifier-0123456789", "client-secret-42", "st-1"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }

    #[test]
    fn a_login_finished_elsewhere_is_dropped_here() {
        let now = Instant::now();
        let mut table = Table::default();
        table.insert(pending_for("docs", "client:alice", "s-a", now), now);
        table.insert(pending_for("docs", "client:bob", "s-b", now), now);
        table.forget("docs", "client:alice");
        assert!(!table.waiting("docs", "client:alice", now));
        assert!(table.take("s-a", now).is_none());
        assert!(
            table.waiting("docs", "client:bob", now),
            "another principal's stays"
        );
    }

    #[test]
    fn a_login_state_is_taken_once() {
        let now = Instant::now();
        let mut table = Table::default();
        table.insert(pending("docs", "s-1", now), now);
        assert!(table.take("forged", now).is_none());
        assert!(table.waiting("docs", "local", now));
        assert_eq!(
            table.take("s-1", now).map(|p| p.server).as_deref(),
            Some("docs")
        );
        assert!(table.take("s-1", now).is_none(), "single use");
        assert!(!table.waiting("docs", "local", now));
    }

    #[test]
    fn a_login_state_expires_after_ten_minutes() {
        let start = Instant::now();
        let mut table = Table::default();
        table.insert(pending("docs", "s-1", start), start);
        let later = start + LOGIN_TTL + Duration::from_secs(1);
        assert!(!table.waiting("docs", "local", later));
        assert!(table.take("s-1", later).is_none());
        assert!(table.entries.is_empty(), "expired logins are dropped");
    }

    #[test]
    fn a_young_login_is_handed_out_again_an_older_one_is_not() {
        let start = Instant::now();
        let mut table = Table::default();
        table.insert(pending("docs", "s-1", start), start);
        let soon = start + Duration::from_secs(60);
        let again = table.reuse("docs", "local", soon, None).expect("reused");
        assert!(again.authorization_url.ends_with("state=s-1"));
        assert_eq!(again.deadline, start + LOGIN_TTL);
        assert!(
            table.reuse("wiki", "local", soon, None).is_none(),
            "per server"
        );
        assert!(
            table.reuse("docs", "client:bob", soon, None).is_none(),
            "per principal"
        );
        assert!(!table.waiting("docs", "client:bob", soon));
        assert!(
            table
                .reuse("docs", "local", start + REUSE_FOR, None)
                .is_none()
        );
        // Still waiting (and its callback still accepted) until it expires.
        assert!(table.waiting("docs", "local", start + REUSE_FOR));
    }

    #[test]
    fn a_reused_login_takes_the_consoles_way_back() {
        let now = Instant::now();
        let mut table = Table::default();
        table.insert(pending("docs", "s-1", now), now);
        assert!(table.reuse("docs", "local", now, None).is_some());
        assert_eq!(
            table.entries[0].back, None,
            "a tool call's login shows its own page"
        );
        assert!(
            table
                .reuse("docs", "local", now, Some("/ui/connections"))
                .is_some()
        );
        assert!(table.reuse("docs", "local", now, None).is_some());
        assert_eq!(
            table.take("s-1", now).and_then(|p| p.back),
            Some("/ui/connections"),
            "once the console's button reused it, the browser goes back to the console"
        );
    }

    #[test]
    fn a_login_belongs_to_the_principal_that_started_it() {
        let now = Instant::now();
        let mut table = Table::default();
        table.insert(pending_for("docs", "client:alice", "s-a", now), now);
        table.insert(pending_for("docs", "client:bob", "s-b", now), now);
        let alice = table
            .reuse("docs", "client:alice", now, None)
            .expect("alice's");
        assert!(alice.authorization_url.ends_with("state=s-a"));
        // The callback's state alone names whose tokens it brings.
        let taken = table.take("s-b", now).expect("bob's");
        assert_eq!(taken.principal, "client:bob");
        assert!(table.waiting("docs", "client:alice", now));
        assert!(!table.waiting("docs", "client:bob", now));
    }

    #[test]
    fn waiting_logins_are_bounded_oldest_dropped() {
        let now = Instant::now();
        let mut table = Table::default();
        for i in 0..MAX_PENDING + 3 {
            table.insert(pending("docs", &format!("s-{i}"), now), now);
        }
        assert_eq!(table.entries.len(), MAX_PENDING);
        assert!(table.take("s-0", now).is_none());
        assert!(table.take(&format!("s-{}", MAX_PENDING + 2), now).is_some());
    }

    #[test]
    fn redirect_uris_served_by_the_listener() {
        let site = Site {
            addr: "127.0.0.1:8931".parse().expect("addr"),
            extra_paths: Vec::new(),
        };
        let check = |uri: &str, expect: bool| {
            assert_eq!(site.serves(&Url::parse(uri).expect("url")), expect, "{uri}");
        };
        check("http://127.0.0.1:8931/oauth/callback", true);
        check("http://localhost:8931/cb", true);
        check("http://127.0.0.1:8932/oauth/callback", false);
        check("http://[::1]:8931/oauth/callback", false);
        check("https://127.0.0.1:8931/oauth/callback", false);
        check("http://127.0.0.1:8931/mcp", false);
        check("http://127.0.0.1:8931/oauth/start", false);
    }

    #[test]
    fn request_states_round_trip_and_refuse_others() {
        let state = request_state("docs", 7);
        assert_eq!(parse_request_state(&state), Some(("docs", 7)));
        assert_eq!(parse_request_state("mcpgw-signin:x:docs"), None);
        assert_eq!(parse_request_state("someone-else"), None);
    }

    #[tokio::test]
    async fn a_wait_ends_with_the_next_finished_login() {
        let logins = Logins::without_listener();
        let ct = CancellationToken::new();
        let far = Instant::now() + Duration::from_secs(30);

        let mut finished = logins.watch("docs", &Principal::Local);
        let after = finished.borrow().serial;
        logins.announce("wiki", "local", Ok(()));
        // Another principal's sign-in to the same server wakes nobody here.
        logins.announce("docs", "client:bob", Ok(()));
        logins.announce(
            "docs",
            "local",
            Err("the authorization server answered `access_denied`".into()),
        );
        assert_eq!(
            wait_for_sign_in(&mut finished, after, far, &ct).await,
            Waited::Failed("the authorization server answered `access_denied`".into())
        );

        // A success that happened before the wait began still counts.
        let after = finished.borrow().serial;
        logins.announce("docs", "local", Ok(()));
        assert_eq!(
            wait_for_sign_in(&mut finished, after, far, &ct).await,
            Waited::SignedIn
        );

        // A failure after a success since `after`: the success wins.
        logins.announce("docs", "local", Err("late".into()));
        assert_eq!(
            wait_for_sign_in(&mut finished, after, far, &ct).await,
            Waited::SignedIn
        );

        let after = finished.borrow().serial;
        let soon = Instant::now() + Duration::from_millis(50);
        assert_eq!(
            wait_for_sign_in(&mut finished, after, soon, &ct).await,
            Waited::TimedOut
        );
        ct.cancel();
        assert_eq!(
            wait_for_sign_in(&mut finished, after, far, &ct).await,
            Waited::Cancelled
        );
    }

    #[test]
    fn watches_of_principals_that_never_signed_in_are_not_kept() {
        let logins = Logins::without_listener();
        for i in 0..100 {
            drop(logins.watch("docs", &Principal::Client(format!("c{i}"))));
        }
        logins.announce("docs", "client:signed", Ok(()));
        let _held = logins.watch("docs", &Principal::Client("held".to_owned()));
        let kept: Vec<(String, ids::PrincipalId)> =
            lock(&logins.finished).keys().cloned().collect();
        assert_eq!(kept.len(), 2, "{kept:?}");
        // The one that announced keeps its serial for a later retry to compare against.
        assert_eq!(
            logins
                .watch("docs", &Principal::Client("signed".to_owned()))
                .borrow()
                .serial,
            1
        );
    }

    #[test]
    fn the_start_link_exists_only_with_a_loopback_listener() {
        let config = config::parse_toml("", std::path::Path::new("t.toml")).expect("config");
        let local = Logins::for_listener("127.0.0.1:8931".parse().expect("addr"), &config);
        assert_eq!(
            local.start_link(&config, "docs").as_deref(),
            Some("http://127.0.0.1:8931/oauth/start?server=docs&redirect=1")
        );
        let shared = Logins::for_listener("10.1.2.3:8931".parse().expect("addr"), &config);
        assert!(shared.start_link(&config, "docs").is_none());
        assert!(
            Logins::without_listener()
                .start_link(&config, "docs")
                .is_none()
        );
    }

    /// Serves the sign-in routes of a gateway without servers or store, with `logins` built
    /// for `claimed` (the address the gateway believes it listens on), on a loopback port.
    async fn serve_routes(claimed: Option<SocketAddr>) -> SocketAddr {
        let config = config::parse_toml("", std::path::Path::new("t.toml")).expect("config");
        let gateway = Gateway::new(config, None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let logins = Logins::for_listener(claimed.unwrap_or(addr), &gateway.config());
        let app = routes(gateway, Arc::new(logins));
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    async fn fetch(addr: SocketAddr, path: &str) -> (u16, String) {
        let response = reqwest::get(format!("http://{addr}{path}"))
            .await
            .expect("reachable");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    #[tokio::test]
    async fn a_gateway_on_a_network_address_refuses_every_sign_in_endpoint() {
        let addr = serve_routes(Some("10.1.2.3:8931".parse().expect("addr"))).await;
        for path in [
            "/oauth/start?server=docs",
            "/oauth/start?server=docs&redirect=1",
            "/oauth/status",
            "/oauth/callback?code=c&state=s",
        ] {
            let (status, body) = fetch(addr, path).await;
            assert_eq!(status, 403, "{path}: {body}");
            assert!(
                body.contains("served only on a loopback address")
                    && body.contains("mcpgw auth login"),
                "{path}: {body}"
            );
        }
    }

    #[tokio::test]
    async fn a_loopback_gateway_answers_what_it_can() {
        let addr = serve_routes(None).await;
        let (status, body) = fetch(addr, "/oauth/start?server=docs").await;
        assert_eq!(status, 404, "{body}");
        assert!(
            body.contains("no server named 'docs' (none is configured for OAuth)"),
            "{body}"
        );
        let (status, body) = fetch(addr, "/oauth/status").await;
        assert_eq!(status, 503, "no database: {body}");
        let (status, body) = fetch(addr, "/oauth/callback?code=c&state=forged").await;
        assert_eq!(status, 400);
        assert!(body.contains("unknown, already used or expired"), "{body}");
        let (status, _) = fetch(addr, "/elsewhere").await;
        assert_eq!(status, 404);
    }

    #[test]
    fn a_configured_redirect_uri_on_the_listener_is_served_too() {
        let toml = r#"
            [[servers]]
            name = "docs"
            auth = { type = "oauth", redirect_uri = "http://127.0.0.1:8931/cb" }
            transport = { type = "http", url = "https://docs.example/mcp" }

            [[servers]]
            name = "wiki"
            auth = { type = "oauth", redirect_uri = "http://127.0.0.1:9999/cb2" }
            transport = { type = "http", url = "https://wiki.example/mcp" }
        "#;
        let config = config::parse_toml(toml, std::path::Path::new("t.toml")).expect("config");
        let logins = Logins::for_listener("127.0.0.1:8931".parse().expect("addr"), &config);
        assert!(logins.is_callback_path(CALLBACK_PATH));
        assert!(logins.is_callback_path("/cb"));
        assert!(!logins.is_callback_path("/cb2"), "another port: not ours");
        assert!(!logins.is_callback_path("/mcp"));
        assert!(logins.start_link(&config, "docs").is_some());
        assert!(
            logins.start_link(&config, "wiki").is_none(),
            "its browser would come back elsewhere"
        );
    }
}
