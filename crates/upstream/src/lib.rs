//! MCP client connections to upstream servers: stdio children, Streamable HTTP, legacy HTTP+SSE.
//!
//! Entry point: [`Upstreams`], built from the enabled servers of a [`config::Config`], and
//! rebuilt from a reloaded one by [`Upstreams::replace`] (unchanged servers kept). Each
//! [`Server`] owns at most one live [`rmcp`] client session, (re)connects it on demand, remembers
//! the protocol era it negotiated, and keeps its last good tool list, and resource, template and
//! prompt lists ([`Lists`]); `resources/read`, `prompts/get` and `completion/complete` go to it
//! like tool calls, but are retried once on a lost session since they only read.
//!
//! A server configured for OAuth calls its upstream as the principal behind each request (the
//! downstream user or client: `local`, `client:NAME`, `user:SUB`), with that principal's tokens
//! over that principal's own session: [`Upstreams::for_principal`] hands out one [`Server`] per
//! (server, principal), made on first use. `local` uses the shared server every other kind of
//! server has. Per-principal sessions idle for [`PRINCIPAL_IDLE`] are closed by
//! [`Upstreams::close_idle`], and at most [`MAX_PRINCIPALS`] principals per server are kept, so
//! a flood of distinct identities cannot exhaust memory or sockets.
//!
//! Architecture invariants:
//! - One server never blocks another: every connect and request is bounded by that server's own
//!   timeout, and servers connect concurrently.
//! - A `tools/call` is sent at most twice, and the second time only when the first attempt never
//!   reached a live session (the session was already gone, or the server answered "unknown session"
//!   before processing). Any other failure is returned, because a retry could repeat a side effect.
//! - A tool call its caller cancels, or that times out at mcpgw, is cancelled upstream
//!   (`notifications/cancelled`; rmcp closes the request's stream on 2026-07-28 HTTP), never
//!   abandoned. Its timeout runs from the server's last sign of life (progress) and stands still
//!   while the user is being asked something ([`Server::call_tool_with`], module `call`).
//! - A server-to-client request reaches only the caller of the call it belongs to (module `call`
//!   has the routing rule); one that cannot be placed gets a JSON-RPC error.
//! - A stdio child runs in its own process group; the group is killed when the session ends, so
//!   grandchildren (`node` under `npx`, `python` under `uvx`) never outlive the gateway.
//! - Every HTTP request goes through a client built by `netguard::guarded_client_builder` with
//!   the server's policy (`[network] allow` plus its `allow_private_network`), and every URL is
//!   checked with `netguard::check_url` before its first request: the configured one, an SSE
//!   endpoint, each OAuth endpoint. A refusal is the server's [`UpstreamError::Refused`].
//! - Secret header and environment values are resolved at connect time and never logged; OAuth
//!   tokens live in the [`oauth::OAuthStore`] the caller provides, are read at each request, and
//!   are never logged either.

mod call;
mod cause;
mod connect;
mod error;
pub mod oauth;
mod server;
pub mod transport;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

pub use call::{Answer, Ask, Asked, CallOptions, Progress, TraceContext};
pub use connect::About;
pub use error::UpstreamError;
use ids::{PrincipalId, ServerName};
use oauth::OAuthStore;
pub use server::{Era, Lists, MAX_CALL, Server, ServerState, ServerStatus, ToolList};
use tokio::sync::{broadcast, mpsc};

/// Most principals with a server of their own for one OAuth upstream. Beyond it the entry of a
/// principal that is idle and disconnected is reused, or the request is refused.
pub const MAX_PRINCIPALS: usize = 1000;
/// How long a per-principal session may go unused before [`Upstreams::close_idle`] closes it.
pub const PRINCIPAL_IDLE: Duration = Duration::from_secs(10 * 60);

/// Makes the OAuth token store of one principal, by principal id.
pub type OAuthStores = Arc<dyn Fn(&PrincipalId) -> Arc<dyn OAuthStore> + Send + Sync>;

/// Every enabled upstream server of one configuration, in configuration order, and the
/// per-principal servers of those configured for OAuth. The set is replaced as a whole when the
/// configuration is reloaded ([`Upstreams::replace`]); readers take a snapshot of it.
pub struct Upstreams {
    set: RwLock<Arc<ServerSet>>,
    oauth: Option<OAuthStores>,
    events: Events,
    max_response_bytes: usize,
}

/// One generation of the server set.
#[derive(Default)]
struct ServerSet {
    servers: Arc<[Arc<Server>]>,
    /// For each server configured for OAuth, by name: its servers for principals other than
    /// `local`, by principal id. Shared with the next set while the server is unchanged.
    principals: HashMap<ServerName, Arc<Mutex<PrincipalServers>>>,
}

type PrincipalServers = HashMap<PrincipalId, Arc<Server>>;

/// What [`Upstreams::replace`] did to the server set.
#[derive(Default)]
pub struct Replaced {
    /// Servers now enabled that were not (new, or enabled), in configuration order.
    pub added: Vec<Arc<Server>>,
    /// Servers whose configuration changed: the new server of each, not connected yet.
    pub changed: Vec<Arc<Server>>,
    /// Servers whose configuration is the same: they keep their sessions.
    pub unchanged: Vec<ServerName>,
    /// Servers no longer enabled (removed, or disabled).
    pub removed: Vec<ServerName>,
    /// Every server taken out of the set (removed ones and the old form of changed ones, with
    /// their per-principal servers): the caller drains them ([`Server::drain`]).
    pub retired: Vec<Arc<Server>>,
}

/// Sent when one of a server's lists may have changed (it said `list_changed`, on a legacy
/// session or a 2026-07-28 `subscriptions/listen` stream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolsChanged {
    pub server: ServerName,
    /// The principal whose session said so ([`PrincipalId::LOCAL`] for a shared server).
    pub principal: PrincipalId,
    /// Which list.
    pub list: ListKind,
}

/// Sent when a server says a resource someone subscribed to changed
/// (`notifications/resources/updated`, on a legacy session or a 2026-07-28 listen stream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceUpdated {
    pub server: ServerName,
    /// The principal whose session said so ([`PrincipalId::LOCAL`] for a shared server).
    pub principal: PrincipalId,
    /// The resource's URI as the server knows it.
    pub uri: String,
}

/// Resource updates buffered for a slow reader of [`Upstreams::resource_updates`]; beyond,
/// the oldest are lost (and the reader told).
const UPDATES_BUFFER: usize = 256;

/// Where a server's sessions report what changed.
#[derive(Clone)]
pub(crate) struct Events {
    pub(crate) changes: mpsc::UnboundedSender<ToolsChanged>,
    pub(crate) updates: broadcast::Sender<ResourceUpdated>,
}

/// The lists a server announces changes of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListKind {
    Tools,
    Resources,
    Prompts,
}

impl Upstreams {
    /// Builds handles for the enabled servers; nothing connects until [`Upstreams::connect_all`]
    /// or the first request. `network` is the global policy (`[network] allow`); each server
    /// connects under `network.for_server(name, allow_private_network)`. `changes` receives a
    /// message whenever a server's tools may differ. `oauth` makes the token store of each
    /// principal, for servers configured for OAuth; without it they cannot connect (and say
    /// why).
    pub fn new(
        config: &config::Config,
        network: &netguard::Policy,
        changes: mpsc::UnboundedSender<ToolsChanged>,
        oauth: Option<OAuthStores>,
    ) -> Self {
        let events = Events {
            changes,
            updates: broadcast::channel(UPDATES_BUFFER).0,
        };
        let upstreams = Self {
            set: RwLock::default(),
            oauth,
            events,
            max_response_bytes: config.policy.limits.response_bytes,
        };
        upstreams.replace(config, network);
        upstreams
    }

    /// Makes the server set `config`'s enabled servers, in its order: a server whose
    /// configuration is the same keeps its [`Server`] (its session, child process, tool list
    /// and per-principal servers); a new or changed one gets a new, unconnected [`Server`];
    /// the ones left out are returned in [`Replaced::retired`] for the caller to drain. New
    /// requests see the new set at once. `[limits] response_bytes` stays as it was when the
    /// set was first made (it is not a setting a reload changes).
    pub fn replace(&self, config: &config::Config, network: &netguard::Policy) -> Replaced {
        let mut slot = self.set.write().unwrap_or_else(|p| p.into_inner());
        let old = slot.clone();
        let mut replaced = Replaced::default();
        let mut servers = Vec::new();
        let mut principals = HashMap::new();
        for wanted in config.enabled_servers() {
            let before = old.servers.iter().find(|s| *s.name() == wanted.name);
            let server = match before {
                Some(server) if server.config() == wanted => {
                    replaced.unchanged.push(wanted.name.clone());
                    server.clone()
                }
                _ => {
                    let server = self.shared_server(wanted, network);
                    match before {
                        Some(_) => replaced.changed.push(server.clone()),
                        None => replaced.added.push(server.clone()),
                    }
                    server
                }
            };
            if matches!(server.config().auth, config::Auth::OAuth(_)) {
                let kept = old
                    .principals
                    .get(server.name())
                    .filter(|_| before.is_some_and(|b| Arc::ptr_eq(b, &server)));
                principals.insert(server.name().clone(), kept.cloned().unwrap_or_default());
            }
            servers.push(server);
        }
        for server in old.servers.iter() {
            if servers.iter().any(|kept| Arc::ptr_eq(kept, server)) {
                continue;
            }
            if !servers.iter().any(|s| s.name() == server.name()) {
                replaced.removed.push(server.name().clone());
            }
            replaced.retired.push(server.clone());
            if let Some(own) = old.principals.get(server.name()) {
                replaced.retired.extend(lock(own).values().cloned());
            }
        }
        *slot = Arc::new(ServerSet {
            servers: servers.into(),
            principals,
        });
        replaced
    }

    /// A new shared (local principal's) server for `config`.
    fn shared_server(
        &self,
        config: &config::ServerConfig,
        network: &netguard::Policy,
    ) -> Arc<Server> {
        let policy =
            Arc::new(network.for_server(config.name.as_str(), config.allow_private_network));
        Arc::new(Server::new(
            config.clone(),
            &PrincipalId::local(),
            policy,
            self.events.clone(),
            self.oauth
                .as_ref()
                .map(|stores| stores(&PrincipalId::local())),
            self.max_response_bytes,
        ))
    }

    /// The current server set.
    fn set(&self) -> Arc<ServerSet> {
        self.set.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every server's `notifications/resources/updated`, from now on.
    pub fn resource_updates(&self) -> broadcast::Receiver<ResourceUpdated> {
        self.events.updates.subscribe()
    }

    /// The shared server of each enabled server (for OAuth servers, the local principal's),
    /// as the set is now.
    pub fn servers(&self) -> Arc<[Arc<Server>]> {
        self.set().servers.clone()
    }

    /// The shared server named `name` (for an OAuth server, the local principal's).
    pub fn get(&self, name: &str) -> Option<Arc<Server>> {
        self.set()
            .servers
            .iter()
            .find(|s| s.name() == name)
            .cloned()
    }

    /// The server `name` as `principal` (an id: `local`, `client:NAME`, `user:SUB`) calls it:
    /// the shared one, unless `name` is configured for OAuth and `principal` is not `local`;
    /// then the principal's own, made on first use with the principal's token store. `None`
    /// when no enabled server has that name; an error when the server already keeps
    /// [`MAX_PRINCIPALS`] principals and none of them can make room.
    pub fn for_principal(
        &self,
        name: &str,
        principal: &PrincipalId,
    ) -> Result<Option<Arc<Server>>, UpstreamError> {
        let set = self.set();
        let Some(shared) = set.servers.iter().find(|s| s.name() == name) else {
            return Ok(None);
        };
        let Some(own) = set.principals.get(name).filter(|_| !principal.is_local()) else {
            return Ok(Some(shared.clone()));
        };
        let mut own = lock(own);
        if let Some(server) = own.get(principal) {
            return Ok(Some(server.clone()));
        }
        if own.len() >= MAX_PRINCIPALS && !make_room(&mut own, Instant::now()) {
            tracing::warn!(
                server = name,
                limit = MAX_PRINCIPALS,
                "refused a session for one more principal"
            );
            return Err(UpstreamError::TooManyPrincipals {
                server: shared.name().clone(),
                limit: MAX_PRINCIPALS,
            });
        }
        let server = Arc::new(Server::new(
            shared.config().clone(),
            principal,
            shared.policy().clone(),
            self.events.clone(),
            self.oauth.as_ref().map(|stores| stores(principal)),
            self.max_response_bytes,
        ));
        own.insert(principal.clone(), server.clone());
        Ok(Some(server))
    }

    /// Ends `principal`'s session with server `name` (after its sign-out): the next call
    /// connects again, with whatever credentials the principal's store has then. For the local
    /// user that is the shared session. Whether there was one.
    pub async fn forget_principal(&self, name: &str, principal: &PrincipalId) -> bool {
        if principal.is_local() {
            let Some(shared) = self.get(name) else {
                return false;
            };
            let connected = shared.is_connected();
            shared.disconnect().await;
            return connected;
        }
        let set = self.set();
        let Some(own) = set.principals.get(name) else {
            return false;
        };
        let removed = lock(own).remove(principal);
        match removed {
            Some(server) => {
                server.disconnect().await;
                true
            }
            None => false,
        }
    }

    /// The tool list to show for server `name`: the shared server's last good one, else the
    /// most recent any principal's server fetched (an OAuth server the local user never signed
    /// in to is listed through its other users).
    pub fn latest_tools(&self, name: &str) -> Option<ToolList> {
        let shared = self.get(name)?;
        if let Some(tools) = shared.tools() {
            return Some(tools);
        }
        lock(self.set().principals.get(name)?)
            .values()
            .filter_map(|server| server.tools_fetched())
            .max_by_key(|(fetched, _)| *fetched)
            .map(|(_, tools)| tools)
    }

    /// The resource, template and prompt lists to show for server `name`, chosen like
    /// [`Upstreams::latest_tools`].
    pub fn latest_lists(&self, name: &str) -> Option<Arc<Lists>> {
        let shared = self.get(name)?;
        if let Some(lists) = shared.lists() {
            return Some(lists);
        }
        lock(self.set().principals.get(name)?)
            .values()
            .filter_map(|server| server.lists_fetched())
            .max_by_key(|(fetched, _)| *fetched)
            .map(|(_, lists)| lists)
    }

    /// Closes the per-principal sessions no request has used for [`PRINCIPAL_IDLE`]; the next
    /// request of their principal connects again. Returns how many were closed. Cheap enough
    /// to call every minute.
    pub async fn close_idle(&self) -> usize {
        self.close_idle_at(Instant::now()).await
    }

    async fn close_idle_at(&self, now: Instant) -> usize {
        let candidates: Vec<Arc<Server>> = self
            .set()
            .principals
            .values()
            .flat_map(|own| {
                lock(own)
                    .values()
                    .filter(|s| s.is_connected())
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut closed = 0;
        for server in candidates {
            if server.disconnect_if_idle(now, PRINCIPAL_IDLE).await {
                tracing::debug!(
                    server = %server.name(),
                    principal = %server.principal(),
                    "closed an idle per-principal session"
                );
                closed += 1;
            }
        }
        closed
    }

    /// Marks every server that never connected `starting`, before [`Upstreams::connect_all`]
    /// runs in the background.
    pub fn mark_starting(&self) {
        for server in self.servers().iter() {
            server.mark_starting();
        }
    }

    /// Connects every server concurrently and fetches its tool list. Returns when each server is
    /// ready or has failed (each bounded by its own timeout); failures are recorded in the
    /// server's state, never returned, so one dead server cannot fail the others.
    /// `on_settled` is called as each server settles (for progress display).
    pub async fn connect_all(&self, on_settled: impl Fn(&Server) + Send + Sync) {
        let on_settled = &on_settled;
        let servers = self.servers();
        let tasks = servers.iter().map(|server| async move {
            // The error is already in the server's state.
            let _ = server.refresh_tools().await;
            on_settled(server);
        });
        futures::future::join_all(tasks).await;
    }

    /// Ends every session (per-principal ones too) and child process group. Safe to call more
    /// than once.
    pub async fn shutdown(&self) {
        let set = self.set();
        let mut all = set.servers.to_vec();
        for own in set.principals.values() {
            all.extend(lock(own).values().cloned());
        }
        let tasks = all.iter().map(|s| s.disconnect());
        futures::future::join_all(tasks).await;
    }
}

/// Drops the entry of one principal that nobody holds, has no session and runs nothing, the
/// longest idle first; false when every entry is in use.
fn make_room(own: &mut HashMap<PrincipalId, Arc<Server>>, now: Instant) -> bool {
    let evictable = own
        .iter()
        .filter(|(_, server)| Arc::strong_count(server) == 1 && !server.is_connected())
        .filter_map(|(principal, server)| Some((principal, server.idle_for(now)?)))
        .max_by_key(|(_, idle)| *idle)
        .map(|(principal, _)| principal.clone());
    match evictable {
        Some(principal) => own.remove(&principal).is_some(),
        None => false,
    }
}

/// Locks a std mutex, recovering the data if a panicking thread poisoned it: the maps kept
/// here stay consistent between statements.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
        [[servers]]
        name = "docs"
        auth = { type = "oauth" }
        transport = { type = "http", url = "https://docs.example/mcp" }

        [[servers]]
        name = "plain"
        transport = { type = "http", url = "https://plain.example/mcp" }
    "#;

    /// Upstreams over [`CONFIG`], and the principal ids the store factory was asked for.
    fn upstreams() -> (Upstreams, Arc<Mutex<Vec<String>>>) {
        let config = config::parse_toml(CONFIG, std::path::Path::new("t.toml")).expect("config");
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let stores: OAuthStores = Arc::new(move |principal: &PrincipalId| {
            lock(&seen).push(principal.to_string());
            Arc::new(oauth::MemoryOAuthStore::default()) as Arc<dyn OAuthStore>
        });
        let (changes, _) = mpsc::unbounded_channel();
        let network = config.network.policy();
        (
            Upstreams::new(&config, &network, changes, Some(stores)),
            asked,
        )
    }

    fn server(upstreams: &Upstreams, name: &str, principal: &str) -> Arc<Server> {
        upstreams
            .for_principal(name, &PrincipalId::new(principal))
            .expect("room")
            .expect("configured")
    }

    #[test]
    fn each_principal_gets_its_own_oauth_server_and_shares_the_others() {
        let (upstreams, asked) = upstreams();
        assert_eq!(
            *lock(&asked),
            ["local", "local"],
            "one store per shared server"
        );
        let shared_docs = upstreams.get("docs").expect("docs").clone();

        let alice = server(&upstreams, "docs", "client:alice");
        let bob = server(&upstreams, "docs", "client:bob");
        assert!(!Arc::ptr_eq(&alice, &bob));
        assert!(!Arc::ptr_eq(&alice, &shared_docs));
        assert_eq!(alice.principal(), "client:alice");
        assert!(Arc::ptr_eq(
            &alice,
            &server(&upstreams, "docs", "client:alice")
        ));
        assert!(Arc::ptr_eq(
            &server(&upstreams, "docs", "local"),
            &shared_docs
        ));
        assert_eq!(
            *lock(&asked),
            ["local", "local", "client:alice", "client:bob"],
            "a principal's store is made once, on first use"
        );

        // A server without OAuth has one session for everyone.
        let plain = upstreams.get("plain").expect("plain").clone();
        assert!(Arc::ptr_eq(
            &server(&upstreams, "plain", "client:alice"),
            &plain
        ));
        assert_eq!(plain.principal(), ids::PrincipalId::LOCAL);
        assert!(
            upstreams
                .for_principal("nope", &PrincipalId::new("client:alice"))
                .expect("no error")
                .is_none()
        );
    }

    #[test]
    fn principals_per_server_are_bounded_and_idle_entries_make_room() {
        let (upstreams, _) = upstreams();
        let held: Vec<Arc<Server>> = (0..MAX_PRINCIPALS)
            .map(|i| server(&upstreams, "docs", &format!("user:{i}")))
            .collect();
        let Err(refused) = upstreams.for_principal("docs", &PrincipalId::new("user:one-more"))
        else {
            panic!("a principal beyond the bound was admitted");
        };
        assert_eq!(
            refused.to_string(),
            format!(
                "server 'docs' already has sessions for {MAX_PRINCIPALS} principals, the most it keeps; try again in a few minutes"
            )
        );
        // Known principals and other servers are unaffected.
        assert!(Arc::ptr_eq(&server(&upstreams, "docs", "user:7"), &held[7]));
        server(&upstreams, "plain", "user:one-more");

        // Once nobody holds an entry (no call, no session), a newcomer takes its place.
        drop(held);
        let newcomer = server(&upstreams, "docs", "user:one-more");
        assert_eq!(newcomer.principal(), "user:one-more");
        assert_eq!(
            lock(&upstreams.set().principals["docs"]).len(),
            MAX_PRINCIPALS
        );
    }

    #[test]
    fn tools_come_from_the_shared_server_else_the_latest_principal_listing() {
        let (upstreams, _) = upstreams();
        assert!(upstreams.latest_tools("docs").is_none());
        let alice = server(&upstreams, "docs", "client:alice");
        let bob = server(&upstreams, "docs", "client:bob");
        alice.set_tools_for_test(vec![serde_json::json!({"name": "old"})]);
        bob.set_tools_for_test(vec![serde_json::json!({"name": "new"})]);
        let latest = upstreams.latest_tools("docs").expect("listed");
        assert_eq!(latest[0]["name"], "new");

        upstreams
            .get("docs")
            .expect("docs")
            .set_tools_for_test(vec![serde_json::json!({"name": "local"})]);
        assert_eq!(
            upstreams.latest_tools("docs").expect("listed")[0]["name"],
            "local"
        );
        assert!(upstreams.latest_tools("plain").is_none());
    }

    #[test]
    fn lists_come_from_the_shared_server_else_the_latest_principal_listing() {
        let (upstreams, _) = upstreams();
        assert!(upstreams.latest_lists("docs").is_none());
        let prompts = |name: &str| Lists {
            prompts: vec![serde_json::json!({"name": name})],
            ..Lists::default()
        };
        server(&upstreams, "docs", "client:alice").set_lists_for_test(prompts("old"));
        server(&upstreams, "docs", "client:bob").set_lists_for_test(prompts("new"));
        assert_eq!(
            upstreams.latest_lists("docs").expect("listed").prompts[0]["name"],
            "new"
        );
        upstreams
            .get("docs")
            .expect("docs")
            .set_lists_for_test(prompts("local"));
        assert_eq!(
            upstreams.latest_lists("docs").expect("listed").prompts[0]["name"],
            "local"
        );
        assert!(upstreams.latest_lists("plain").is_none());
    }

    #[tokio::test]
    async fn a_running_request_keeps_its_server_from_counting_as_idle() {
        let (upstreams, _) = upstreams();
        let alice = server(&upstreams, "docs", "client:alice");
        let later = Instant::now() + PRINCIPAL_IDLE + Duration::from_secs(1);
        assert!(alice.idle_for(later).is_some_and(|d| d > PRINCIPAL_IDLE));
        {
            let _running = server::Busy::start(&alice);
            assert_eq!(alice.idle_for(later), None);
            assert!(!alice.disconnect_if_idle(later, PRINCIPAL_IDLE).await);
        }
        let idle = alice.idle_for(later).expect("idle again");
        assert!(idle <= PRINCIPAL_IDLE + Duration::from_secs(1), "{idle:?}");
        // Nothing connected: nothing to close.
        assert_eq!(upstreams.close_idle_at(later).await, 0);
        upstreams.shutdown().await;
    }

    #[test]
    fn replace_keeps_unchanged_servers_and_retires_the_rest() {
        let (upstreams, _) = upstreams();
        let plain = upstreams.get("plain").expect("plain");
        let docs = upstreams.get("docs").expect("docs");
        let alice = server(&upstreams, "docs", "client:alice");
        let reloaded = config::parse_toml(
            r#"
            [[servers]]
            name = "plain"
            transport = { type = "http", url = "https://plain.example/mcp" }

            [[servers]]
            name = "docs"
            auth = { type = "oauth" }
            timeout_s = 5
            transport = { type = "http", url = "https://docs.example/mcp" }

            [[servers]]
            name = "new"
            transport = { type = "http", url = "https://new.example/mcp" }

            [[servers]]
            name = "off"
            enabled = false
            transport = { type = "http", url = "https://off.example/mcp" }
            "#,
            std::path::Path::new("t.toml"),
        )
        .expect("config");
        let replaced = upstreams.replace(&reloaded, &reloaded.network.policy());

        assert_eq!(replaced.unchanged, ["plain"]);
        let names = |servers: &[Arc<Server>]| {
            servers
                .iter()
                .map(|s| s.name().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&replaced.changed), ["docs"]);
        assert_eq!(names(&replaced.added), ["new"]);
        assert!(replaced.removed.is_empty());
        assert_eq!(
            names(&upstreams.servers()),
            ["plain", "docs", "new"],
            "file order"
        );
        assert!(Arc::ptr_eq(&upstreams.get("plain").expect("plain"), &plain));
        let new_docs = upstreams.get("docs").expect("docs");
        assert!(!Arc::ptr_eq(&new_docs, &docs));
        assert_eq!(new_docs.timeout(), Duration::from_secs(5));
        // The old docs and its principal's server are retired; the principal gets a new one.
        assert_eq!(replaced.retired.len(), 2);
        assert!(replaced.retired.iter().any(|s| Arc::ptr_eq(s, &docs)));
        assert!(replaced.retired.iter().any(|s| Arc::ptr_eq(s, &alice)));
        assert!(!Arc::ptr_eq(
            &server(&upstreams, "docs", "client:alice"),
            &alice
        ));

        let empty = config::parse_toml("", std::path::Path::new("t.toml")).expect("config");
        let removed = upstreams.replace(&empty, &empty.network.policy());
        assert_eq!(removed.removed, ["plain", "docs", "new"]);
        assert!(upstreams.servers().is_empty());
        assert!(upstreams.get("plain").is_none());
    }
}
