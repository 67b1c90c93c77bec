//! The composition root: upstream connections + catalog + the MCP front end, wired together.
//!
//! [`Gateway`] owns the [`upstream::Upstreams`] and the current [`catalog::Catalog`] snapshot.
//! The snapshot is rebuilt (never mutated) whenever a server's tool list changes, and swapped in
//! atomically, so a search or call always sees one consistent catalog. Every upstream's resources,
//! templates and prompts are kept the same way, in a [`surface`] snapshot rebuilt with it. The
//! configuration is a snapshot too ([`Gateway::config`]), replaced as a whole by a reload
//! ([`Gateway::apply`], module `reload`), so a request reads one configuration throughout.
//!
//! Architecture invariants:
//! - The front end never blocks on a slow upstream except for a call to that upstream, bounded
//!   by its timeout.
//! - Upstream tool output is marked as data before it reaches a client (resource contents and
//!   prompts are not: the client or user chose them, and a marker would corrupt them).
//! - Errors crossing the MCP edge go through [`front`]'s single mapping; internals never leak.
//! - A client hears of a tool-list change (`changes`) only after the catalog that shows it is
//!   published, and only when its own `tools/list` would differ.
//! - What an upstream asks of the user during a call reaches only the client that made the call
//!   (`relay`); a call a client cancels is cancelled upstream.

mod audit;
mod config_file;
mod http;
mod mcp;
pub mod metrics;
pub mod oauth;
pub mod overview;
mod policy;
mod principal;
pub mod probe;
pub mod records;
mod reload;
mod replicas;
mod search;
mod semantic;
mod sync;
mod telemetry;

use std::{
    collections::HashMap,
    sync::{
        Arc, OnceLock, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

pub use self::http::{
    ADMIN_KEY_VAR, ADMIN_TOKEN_FILE, ADMIN_TOKEN_HEADER, AdminClient, AdminToken, ClientAccess,
    RESOURCE_METADATA_PATH, Unanswered, Written, admin_token_path, approval_json, http_app,
    serve_http, serve_http_with, serve_stdio,
};
pub use audit::{
    AuditRecord, CallDecision, CallOutcome, arguments_sha256, prune_audit_log,
    upstream_error_summary,
};
use catalog::{Catalog, SearchRequest, ServerTools};
pub use config_file::{ChangeError, Changed, FileChange, ServerChange, change_file};
use ids::ServerName;
pub use mcp::Front;
use mcp::{changes, meta, relay, surface};
pub use policy::access::{self, Access};
pub use policy::{ApproveError, DecisionError, HeldTool, held_json, may_decide};
use policy::{approval, limits, pinning};
pub use principal::Principal;
pub use probe::{ServerTest, test_server};
pub use reload::{RESTART_ONLY, ReloadError, ReloadReport, ReloadStatus};
pub use replicas::{ReplicasHealth, announce_approval};
pub use search::{Found, FoundTool, Search};
pub use semantic::Semantic;
use telemetry::RequestSpan;
pub use telemetry::{Destination, Telemetry};

use tokio::sync::mpsc;
use upstream::{ListKind, ToolsChanged, Upstreams};

/// Longest a search waits for its query to be embedded before answering with BM25 alone.
const QUERY_EMBED_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the first vector or hybrid search waits for the tool embeddings being computed: a
/// small or cached catalog is embedded within moments, so its first search has vectors;
/// thousands of new tools take minutes, and BM25 serves meanwhile. Waiting here rather than
/// before serving lets a stdio client's handshake be answered at once.
const FIRST_SEARCH_WAIT: Duration = Duration::from_secs(10);

pub struct Gateway {
    /// The running configuration; replaced as a whole by a reload ([`Gateway::apply`]).
    config: RwLock<Arc<config::Config>>,
    /// Reloads: one at a time, and how the last one went (`/healthz`).
    reloads: reload::Reloads,
    /// Changes to the configuration file (`config_file`): one at a time, from reading the file
    /// to applying what was written.
    config_writes: tokio::sync::Mutex<()>,
    /// The database: the embedding cache and the OAuth tokens of upstreams.
    store: Option<store::Store>,
    /// The global network policy (`[network] allow`), built once: each upstream connects under
    /// its `for_server` form, the remote embedder under it as it is.
    network: Arc<netguard::Policy>,
    upstreams: Upstreams,
    /// The published snapshot and the generation it was built for; a slow embedding of an
    /// older generation never replaces a newer catalog.
    catalog: RwLock<(u64, Arc<Catalog>)>,
    generation: AtomicU64,
    semantic: OnceLock<Option<Arc<Semantic>>>,
    /// One catalog build at a time (short: lists, pins, index).
    publishing: tokio::sync::Mutex<()>,
    /// One embedding at a time: a change notice that arrives while the tools are being embedded
    /// waits, then finds them in the cache instead of embedding them all a second time. A new
    /// catalog is published before this is taken, so it never waits for an older embedding.
    refreshing: tokio::sync::Mutex<()>,
    /// How many refreshes are running, for [`Gateway::embedded`].
    refreshes: tokio::sync::watch::Sender<usize>,
    /// Tool pinning: the held tools and the pins generation the catalog was checked against.
    pins: pinning::Pins,
    /// The most used tools by the audit log, for exposure `auto`'s pinned tools; read at each
    /// catalog refresh.
    most_used: RwLock<Arc<Vec<String>>>,
    /// Calls per minute per principal (`[limits]`, profiles' `calls_per_minute`).
    rate_limiter: limits::RateLimiter,
    /// The audit log's queue and writer; [`Gateway::audit_written`] waits for it.
    audit_log: audit::AuditLog,
    /// Each profile's allowed tools for the current catalog generation.
    profile_sets: access::ProfileSets,
    /// Calls in this process waiting for an approval decision.
    approval_waiters: approval::Waiters,
    /// The other replicas, through Redis (`[store] redis`); `None` alone.
    cluster: Option<cluster::Cluster>,
    /// Connected clients to tell about list changes.
    listeners: changes::Listeners,
    /// Upstream calls waiting for a 2026-07-28 client's answer to what the upstream asked.
    parked: relay::Parked,
    /// Whether a search already waited for the tool embeddings ([`FIRST_SEARCH_WAIT`]).
    first_search_waited: std::sync::atomic::AtomicBool,
    /// Every upstream's resources, templates and prompts as clients see them; rebuilt with the
    /// catalog and when a server's lists change.
    surface: RwLock<Arc<surface::Surface>>,
    /// What `/metrics` serves.
    metrics: Arc<metrics::Metrics>,
    /// Where spans go, when tracing is on ([`Gateway::trace_with`]); unset, nothing is traced.
    telemetry: OnceLock<Arc<Telemetry>>,
}

impl Gateway {
    /// Opens the configured store, then builds the gateway on it ([`Gateway::new`]). Without
    /// the store the gateway still runs: it re-embeds at each start, and servers configured for
    /// OAuth fail, saying why.
    pub async fn open(config: config::Config) -> Arc<Self> {
        let store = open_store(&config.store).await;
        Self::new(config, store)
    }

    /// Builds the gateway; nothing connects yet. Call [`Gateway::start`] next. The store must
    /// be open before any upstream connects: OAuth servers read their tokens from it.
    pub fn new(config: config::Config, store: Option<store::Store>) -> Arc<Self> {
        let (changes_tx, changes_rx) = mpsc::unbounded_channel();
        let oauth = store.clone().map(oauth::StoreOAuth::per_principal);
        let network = Arc::new(config.network.policy());
        let upstreams = Upstreams::new(&config, &network, changes_tx, oauth);
        let (listeners, announcements) = changes::Listeners::new();
        let audit_log = audit::AuditLog::new(store.clone());
        let cluster = replicas::connect(&config.store);
        let gateway = Arc::new(Self {
            config: RwLock::new(Arc::new(config)),
            reloads: reload::Reloads::default(),
            config_writes: tokio::sync::Mutex::new(()),
            store,
            network,
            upstreams,
            catalog: RwLock::new((0, Arc::new(Catalog::build(&[]).0))),
            generation: AtomicU64::new(0),
            semantic: OnceLock::new(),
            publishing: tokio::sync::Mutex::new(()),
            refreshing: tokio::sync::Mutex::new(()),
            refreshes: tokio::sync::watch::Sender::new(0),
            pins: pinning::Pins::default(),
            most_used: RwLock::new(Arc::new(Vec::new())),
            rate_limiter: limits::RateLimiter::new(),
            audit_log,
            profile_sets: access::ProfileSets::default(),
            approval_waiters: approval::Waiters::default(),
            cluster,
            listeners,
            parked: relay::Parked::default(),
            first_search_waited: std::sync::atomic::AtomicBool::new(false),
            surface: RwLock::new(Arc::new(surface::Surface::default())),
            metrics: Arc::new(metrics::Metrics::new()),
            telemetry: OnceLock::new(),
        });
        // Hold only a weak reference: the listener ends when the gateway is dropped.
        tokio::spawn(watch_changes(Arc::downgrade(&gateway), changes_rx));
        tokio::spawn(changes::deliver(Arc::downgrade(&gateway), announcements));
        if let Some(cluster) = &gateway.cluster {
            replicas::on_events(
                cluster,
                Arc::downgrade(&gateway),
                |gateway, event| async move {
                    replicas::act(&gateway, event);
                },
            );
        }
        tokio::spawn(changes::deliver_updates(
            Arc::downgrade(&gateway),
            gateway.upstreams.resource_updates(),
        ));
        gateway
    }

    /// Connects every server concurrently and publishes the first catalog. Returns when each
    /// server is ready or failed and the lexical catalog is published; `on_settled` reports
    /// each server as it settles. The embedder loads while the servers connect. Tool
    /// embeddings are computed in the background: with thousands of new tools they take
    /// minutes, and BM25 serves meanwhile (searches say "tool embeddings not ready").
    /// [`Gateway::embedded`] waits for them. For one-shot commands, which want every server.
    pub async fn start(self: &Arc<Self>, on_settled: impl Fn(&upstream::Server) + Send + Sync) {
        self.start_with(on_settled, false).await
    }

    /// Starts the gateway for serving: returns at once, with every server `starting`; each
    /// server joins the catalog as soon as it is ready (a new catalog is published and clients
    /// are told the tool list changed), so one that hangs at start-up holds back nobody but
    /// itself. `on_settled` reports each server as it settles.
    pub fn start_serving(
        self: &Arc<Self>,
        on_settled: impl Fn(&upstream::Server) + Send + Sync + 'static,
    ) {
        self.upstreams.mark_starting();
        let gateway = Arc::clone(self);
        tokio::spawn(async move { gateway.start_with(on_settled, true).await });
    }

    /// [`Gateway::start`]; `incremental`: publish a catalog as each server becomes ready and
    /// once the embedder is loaded, rather than once when all have settled.
    async fn start_with(
        self: &Arc<Self>,
        on_settled: impl Fn(&upstream::Server) + Send + Sync,
        incremental: bool,
    ) {
        tokio::spawn(retry_failed(Arc::downgrade(self)));
        tokio::spawn(supervise(Arc::downgrade(self)));
        tokio::spawn(close_idle_sessions(Arc::downgrade(self)));
        tokio::spawn(refresh_periodically(Arc::downgrade(self)));
        tokio::spawn(pinning::watch_approvals(Arc::downgrade(self)));
        tokio::spawn(audit::prune_periodically(Arc::downgrade(self)));
        let semantic = async {
            let semantic =
                Semantic::load(&self.config().retrieval, &self.network, self.store.clone())
                    .await
                    .map(Arc::new);
            let loaded = semantic.is_some();
            let _ = self.semantic.set(semantic);
            if incremental && loaded {
                let gateway = Arc::clone(self);
                tokio::spawn(async move { gateway.refresh_catalog().await });
            }
        };
        let on_settled = &on_settled;
        let servers = self.upstreams.servers();
        let connect_all = futures::future::join_all(servers.iter().map(|server| {
            // What is logged while a server connects carries its name (the JSON log's
            // `span`).
            let span = tracing::info_span!("server", server = %server.name());
            tracing::Instrument::instrument(
                async move {
                    // A failure is recorded in the server's state, never returned, so one
                    // dead server cannot fail the others.
                    let ready = server.refresh_tools().await.is_ok();
                    if incremental && ready {
                        self.publish_lexical().await;
                    }
                    server.mark_started();
                    on_settled(server);
                },
                span,
            )
        }));
        tokio::join!(semantic, connect_all);
        // Incrementally, each ready server and the loaded embedder have published already.
        if !incremental {
            self.publish_lexical().await;
        }
    }

    /// Starts a catalog refresh and waits until its lexical catalog is published (its
    /// embedding goes on in the background).
    async fn publish_lexical(self: &Arc<Self>) {
        let (published, lexical) = tokio::sync::oneshot::channel();
        let gateway = Arc::clone(self);
        tokio::spawn(async move { gateway.refresh(Some(published)).await });
        // The sender is dropped unsent only if the refresh task died; go on anyway.
        let _ = lexical.await;
    }

    /// How many tools are held for approval (pinning) on the servers `keep` lets through.
    pub fn held_count(&self, keep: impl Fn(&str) -> bool) -> usize {
        self.held_tools()
            .iter()
            .filter(|tool| keep(&tool.server))
            .count()
    }

    /// The servers still making their first connection, in configuration order.
    pub fn starting_servers(&self) -> Vec<ServerName> {
        self.upstreams
            .servers()
            .iter()
            .filter(|server| matches!(server.status().state, upstream::ServerState::Starting))
            .map(|server| server.name().clone())
            .collect()
    }

    /// Waits until no catalog refresh is running, so the catalog carries tool vectors when
    /// they could be computed (for one-shot commands such as `mcpgw search`).
    pub async fn embedded(&self) {
        let mut running = self.refreshes.subscribe();
        // The sender lives as long as `self`.
        let _ = running.wait_for(|running| *running == 0).await;
    }

    /// The embedder, when one is loaded.
    pub fn semantic(&self) -> Option<&Arc<Semantic>> {
        self.semantic.get().and_then(Option::as_ref)
    }

    /// Runs one search with the configured strategy. Vector and hybrid searches embed the
    /// queries first; when that is impossible or fails, BM25 answers and `degraded` says why.
    pub async fn search(&self, search: &Search) -> Found {
        self.search_in(search, None).await
    }

    /// [`Gateway::search`] for a client request, in a span of its own under `trace` when the
    /// gateway traces.
    pub(crate) async fn search_in(&self, search: &Search, trace: Option<&RequestSpan>) -> Found {
        let span = trace.map(RequestSpan::search);
        let started = std::time::Instant::now();
        let found = self.run_search(search).await;
        // What answered: BM25 when a vector or hybrid search had to fall back.
        let strategy = match found.degraded {
            Some(_) => catalog::Strategy::Bm25,
            None => found.strategy,
        };
        self.metrics.search(strategy.as_str(), started.elapsed());
        if let Some(span) = span {
            span.finish(
                strategy.as_str(),
                found.hits.len(),
                found.degraded.is_some(),
            );
        }
        found
    }

    /// [`Gateway::search`] without the metrics (the admin API's searches are not a client's).
    pub(crate) async fn run_search(&self, search: &Search) -> Found {
        let mut catalog = self.catalog();
        let config = self.config();
        let retrieval = &config.retrieval;
        let strategy = search.strategy.unwrap_or(match retrieval.strategy {
            config::Strategy::Bm25 => catalog::Strategy::Bm25,
            config::Strategy::Vector => catalog::Strategy::Vector,
            config::Strategy::Hybrid => catalog::Strategy::Hybrid,
        });
        if strategy.needs_vectors()
            && let Some(semantic) = self.semantic()
            && catalog.vector_model() != Some(semantic.model_id())
            && !self.first_search_waited.swap(true, Ordering::SeqCst)
        {
            if tokio::time::timeout(FIRST_SEARCH_WAIT, self.embedded())
                .await
                .is_err()
            {
                tracing::info!(
                    waited_s = FIRST_SEARCH_WAIT.as_secs(),
                    "tool embeddings still running; serving BM25 search until they are ready"
                );
            }
            catalog = self.catalog();
        }
        let (query_vectors, degraded) = if strategy.needs_vectors() {
            match self.query_vectors(&catalog, &search.queries).await {
                Ok(vectors) => (Some(vectors), None),
                Err(why) => (None, Some(why)),
            }
        } else {
            (None, None)
        };
        // The learned sparse list, when its tool vectors are in this catalog; a failure only
        // leaves it out.
        let sparse_vectors = match (self.semantic(), &query_vectors) {
            (Some(semantic), Some(_)) if catalog.sparse_model().is_some() => {
                match semantic.query_sparse(&search.queries).await {
                    Some(Ok(vectors)) => Some(vectors),
                    Some(Err(error)) => {
                        tracing::warn!(%error, "sparse query encoding failed; fusing two lists");
                        None
                    }
                    None => None,
                }
            }
            _ => None,
        };
        let request = SearchRequest {
            queries: &search.queries,
            query_vectors: query_vectors.as_deref(),
            strategy,
            hybrid: retrieval::Hybrid {
                balance: retrieval.balance,
                min_similarity: retrieval.min_similarity,
                adaptive: retrieval.adaptive.then(retrieval::Adaptive::default),
                fusion: match retrieval.fusion {
                    config::Fusion::Ranks => retrieval::Fusion::default(),
                    config::Fusion::Scores => retrieval::Fusion::Scores,
                },
            },
            feedback: retrieval.feedback.then(retrieval::Feedback::default),
            feedback_in_fusion: false,
            multilingual_vectors: self.semantic().is_some_and(|s| s.multilingual()),
            top_k: search.top_k,
            filter: &search.filter,
            needs: false,
            // Read before write (catalog::caution): no figure moved on the four sets, and a
            // model that runs the first hit must not get a reset for a question.
            caution: true,
            rerank: catalog::Rerank {
                vector_feedback: retrieval
                    .vector_feedback
                    .then_some(catalog::VECTOR_FEEDBACK),
                ..Default::default()
            },
            sparse: sparse_vectors
                .as_deref()
                .map(|vectors| catalog::SparseQuery {
                    vectors,
                    weight: catalog::SPLADE_WEIGHT,
                    // splade-tiny's vocabulary is English: ultratool-zh hybrid fell 74.3 → 54.3.
                    cjk: false,
                    alone: false,
                }),
        };
        let outcome = catalog.search_with(&request);
        let explanation = search
            .explain
            .then(|| catalog.explain(&request, &outcome.hits));
        Found {
            explanation,
            hits: outcome.hits.iter().map(FoundTool::from_hit).collect(),
            degraded: degraded.or(outcome.degraded),
            strategy,
            starting: self.starting_servers(),
            held: self.held_count(|server| {
                search
                    .filter
                    .servers
                    .as_ref()
                    .is_none_or(|servers| servers.iter().any(|s| s == server))
            }),
        }
    }

    /// The queries' vectors for a vector or hybrid search of `catalog`, or why BM25 answers
    /// instead (in the words `search_tools` shows).
    async fn query_vectors(
        &self,
        catalog: &Catalog,
        queries: &[String],
    ) -> Result<Vec<Vec<f32>>, String> {
        let Some(semantic) = self.semantic() else {
            return Err("no embedding model loaded; served BM25".to_owned());
        };
        if catalog.vector_model() != Some(semantic.model_id()) {
            return Err("tool embeddings not ready; served BM25".to_owned());
        }
        match tokio::time::timeout(QUERY_EMBED_TIMEOUT, semantic.query_vectors(queries)).await {
            Ok(Ok(vectors)) => Ok(vectors),
            Ok(Err(error)) => {
                tracing::warn!(%error, "query embedding failed; serving BM25");
                Err(format!("query embedding failed ({error}); served BM25"))
            }
            Err(_) => {
                tracing::warn!("query embedding timed out; serving BM25");
                Err("query embedding timed out; served BM25".to_owned())
            }
        }
    }

    /// The tools most used lately (successful calls in the last 30 days, by the audit log),
    /// most first; empty without a database.
    pub fn most_used(&self) -> Arc<Vec<String>> {
        self.most_used
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Re-reads [`Gateway::most_used`] from the audit log.
    async fn read_most_used(&self) {
        const WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);
        let Some(store) = &self.store else {
            return;
        };
        let since = std::time::SystemTime::now() - WINDOW;
        match store.most_called_tools(since, 50).await {
            Ok(tools) => {
                *self
                    .most_used
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(tools)
            }
            Err(error) => tracing::warn!(%error, "cannot read the most used tools"),
        }
    }

    /// The running configuration (a snapshot: a reload publishes a new one).
    pub fn config(&self) -> Arc<config::Config> {
        self.config
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// The global network policy (`[network] allow`).
    /// The current resources, templates and prompts.
    pub(crate) fn surface(&self) -> Arc<surface::Surface> {
        self.surface
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Rebuilds [`Gateway::surface`] from every server's last good lists.
    fn rebuild_surface(&self) {
        let lists: Vec<surface::ServerLists> = self
            .upstreams
            .servers()
            .iter()
            .map(|server| surface::ServerLists {
                server: server.name().clone(),
                lists: self.upstreams.latest_lists(server.name()),
            })
            .collect();
        let rebuilt = surface::Surface::build(&lists, self.naming_prefix());
        *self
            .surface
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(rebuilt);
    }

    /// `[gateway] prefix` as the catalog's naming knows it.
    fn naming_prefix(&self) -> catalog::naming::Prefix {
        match self.config().gateway.prefix {
            config::Prefix::Always => catalog::naming::Prefix::Always,
            config::Prefix::WhenNeeded => catalog::naming::Prefix::WhenNeeded,
        }
    }

    pub(crate) fn network(&self) -> &Arc<netguard::Policy> {
        &self.network
    }

    /// This replica's name among those sharing the store: `[store] replica`, else the host
    /// name.
    pub fn replica(&self) -> String {
        self.config().store.replica_name()
    }

    /// The database, when it could be opened.
    pub fn store(&self) -> Option<&store::Store> {
        self.store.as_ref()
    }

    /// The current catalog snapshot.
    /// The gateway's metrics (sessions report to them from the HTTP listener).
    pub fn metrics(&self) -> &Arc<metrics::Metrics> {
        &self.metrics
    }

    /// What a Prometheus scrape of `/metrics` gets: the counted events, with the state series
    /// read now.
    pub async fn metrics_text(&self) -> String {
        let upstreams = self
            .upstreams
            .servers()
            .iter()
            .map(|server| (server.name().to_string(), server.status().state.word()))
            .collect();
        let approvals_pending = self
            .pending_approvals(&principal::Principal::Local)
            .await
            .map_or(0, |pending| pending.len());
        let audit = self.audit_health();
        self.metrics.render(&metrics::Snapshot {
            upstreams,
            catalog_tools: self.catalog().tools().len(),
            held_tools: self.held_tools().len(),
            approvals_pending,
            redis_up: self.cluster.as_ref().is_some_and(cluster::Cluster::is_up),
            audit_written: audit.written,
            audit_dropped: audit.dropped,
            audit_failed: audit.failed,
            audit_queued: audit.queued,
            oauth_refreshes: upstream::oauth::refresh_counts().to_vec(),
        })
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .1
            .clone()
    }

    /// Publishes `catalog` unless a newer generation is already out.
    fn publish(&self, generation: u64, catalog: Catalog) {
        let mut slot = self
            .catalog
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if generation >= slot.0 {
            *slot = (generation, Arc::new(catalog));
        }
    }

    /// Rebuilds the catalog from every server's last good tool list and publishes it, then
    /// embeds the tools (from the cache where possible) and publishes it again with vectors.
    pub async fn refresh_catalog(&self) {
        self.refresh(None).await
    }

    /// [`Gateway::refresh_catalog`], saying on `published` when the lexical catalog is out.
    async fn refresh(&self, published: Option<tokio::sync::oneshot::Sender<()>>) {
        self.refreshes.send_modify(|running| *running += 1);
        let _counted = RefreshRunning(&self.refreshes);
        let (generation, catalog, semantic) = {
            let _one_at_a_time = self.publishing.lock().await;
            let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
            self.read_most_used().await;
            let catalog = self.build_catalog().await;
            let semantic = self.semantic().cloned();
            self.publish(generation, catalog.clone());
            self.rebuild_surface();
            // Clients hear of a change only once a re-listing would show it.
            self.listeners.changed(ListKind::Tools);
            (generation, catalog, semantic)
        };
        if let Some(published) = published {
            let _ = published.send(());
        }
        let Some(semantic) = semantic else {
            return;
        };
        let _one_embedding = self.refreshing.lock().await;
        if self.generation.load(Ordering::SeqCst) != generation {
            // A newer catalog is out (built with the embedder loaded, as this one was): its own
            // refresh embeds it, tools this one had included, so embedding here is wasted.
            return;
        }
        match semantic.tool_vectors(&catalog, &self.metrics).await {
            Ok(vectors) => match catalog
                .clone()
                .with_vectors(semantic.model_id().to_owned(), vectors)
            {
                Ok(with_vectors) => {
                    tracing::info!(
                        tools = with_vectors.len(),
                        model = semantic.model_id(),
                        "search vectors ready"
                    );
                    cjk_notice(&with_vectors, &semantic);
                    self.publish(generation, with_vectors.clone());
                    // The sparse list joins once its vectors are ready too.
                    match semantic.tool_sparse(&catalog).await {
                        Some(Ok(sparse)) => match with_vectors
                            .with_sparse(embed::local::splade::ID.to_owned(), sparse)
                        {
                            Ok(with_sparse) => self.publish(generation, with_sparse),
                            Err(error) => tracing::warn!(%error, "sparse vectors rejected"),
                        },
                        Some(Err(error)) => {
                            tracing::warn!(%error, "sparse encoding of the tools failed; hybrid search keeps two lists")
                        }
                        None => {}
                    }
                }
                Err(error) => tracing::warn!(%error, "tool vectors rejected; search stays lexical"),
            },
            Err(error) => {
                tracing::warn!(%error, "embedding the tools failed; search stays lexical until the next refresh")
            }
        }
    }

    /// A catalog of every server's last good tool list, in configuration order, without the
    /// tools whose changed definitions are held (see [`pinning`]).
    async fn build_catalog(&self) -> Catalog {
        let lists: Vec<ServerTools> = self
            .upstreams
            .servers()
            .iter()
            .map(|server| {
                // An OAuth server's list may come from any principal's session.
                let tools = self
                    .upstreams
                    .latest_tools(server.name())
                    .map(|tools| tools.to_vec())
                    .unwrap_or_default();
                // A server without a configured description (every server of a Claude
                // Desktop file) is described by what it said at initialisation: search
                // only, never shown to a model.
                let description = server.config().description.clone().or_else(|| {
                    let about = server.status().about;
                    catalog::self_description(
                        about.title.as_deref(),
                        about.description.as_deref(),
                        about.instructions.as_deref(),
                    )
                });
                ServerTools {
                    server: server.name().to_owned(),
                    description,
                    tools,
                }
            })
            .collect();
        let lists = pinning::check(self, lists).await;
        // Under `prefix = "when-needed"` an upstream tool named like a meta-tool keeps its
        // prefix: a bare one would be shadowed in search mode.
        let rules = catalog::naming::Rules {
            prefix: self.naming_prefix(),
            reserved: &[meta::SEARCH_TOOLS, meta::GET_TOOL_DETAILS, meta::CALL_TOOL],
        };
        let (catalog, problems) =
            Catalog::build_named(&lists, &catalog::IndexOptions::default(), rules);
        for problem in problems {
            tracing::warn!(?problem, "skipped an upstream tool");
        }
        tracing::debug!(tools = catalog.tools().len(), "catalog rebuilt");
        catalog
    }

    /// Ends every upstream session and child process, then closes the store.
    pub async fn shutdown(&self) {
        self.upstreams.shutdown().await;
        self.audit_written().await;
        if let Some(store) = &self.store {
            store.close().await;
        }
        if let Some(telemetry) = self.telemetry.get().cloned() {
            // Blocks while the last spans are sent: off the runtime's workers.
            let flushed = tokio::task::spawn_blocking(move || telemetry.flush_and_stop()).await;
            if let Err(error) = flushed {
                tracing::warn!(%error, "could not send the last spans");
            }
        }
    }

    /// Traces every client request from now on, exporting through `telemetry` (`mcpgw serve`
    /// with `[telemetry]`). Once: a second call is ignored.
    pub fn trace_with(&self, telemetry: Telemetry) {
        let _ = self.telemetry.set(Arc::new(telemetry));
    }

    /// The exporter, when tracing is on.
    pub(crate) fn telemetry(&self) -> Option<&Arc<Telemetry>> {
        self.telemetry.get()
    }
}

/// Counts one refresh as running until dropped (see [`Gateway::embedded`]).
struct RefreshRunning<'a>(&'a tokio::sync::watch::Sender<usize>);

impl Drop for RefreshRunning<'_> {
    fn drop(&mut self) {
        self.0
            .send_modify(|running| *running = running.saturating_sub(1));
    }
}

/// First and longest wait between reconnect attempts for a server that is down.
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Reconnects servers that are down, with exponential backoff per server, so a server that was
/// unreachable at startup joins the catalog once it comes up. (A server whose session dropped
/// while idle is reconnected by the next call to it; this loop is for the ones nobody can call
/// because their tools were never listed.)
async fn retry_failed(gateway: std::sync::Weak<Gateway>) {
    let mut next_try: HashMap<ServerName, (Instant, Duration)> = HashMap::new();
    // A scheduling tick, not a readiness wait: each server's own backoff decides when to try.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        let now = Instant::now();
        for server in gateway.upstreams.servers().iter() {
            let failed = matches!(
                server.status().state,
                upstream::ServerState::Failed { .. } | upstream::ServerState::Unresponsive { .. }
            );
            if !failed {
                next_try.remove(server.name());
                continue;
            }
            let (due, wait) = *next_try
                .entry(server.name().to_owned())
                .or_insert((now + RETRY_FIRST, RETRY_FIRST));
            if now < due {
                continue;
            }
            let wait = (wait * 2).min(RETRY_MAX);
            next_try.insert(server.name().to_owned(), (now + wait, wait));
            let server = server.clone();
            let gateway = gateway.clone();
            tokio::spawn(async move {
                if server.refresh_tools().await.is_ok() {
                    tracing::info!(server = %server.name(), "server is back");
                    gateway.refresh_catalog().await;
                }
            });
        }
    }
}

/// How often every server is supervised ([`upstream::Server::supervise`]): a child's exit is
/// noticed within this, and pings are sent on their own schedule.
const SUPERVISION_TICK: Duration = Duration::from_millis(250);

/// Watches every shared server for a child that ended and for liveness (see
/// [`upstream::Server::supervise`]). Ends with the gateway.
async fn supervise(gateway: std::sync::Weak<Gateway>) {
    // A scheduling tick, not a readiness wait.
    let mut tick = tokio::time::interval(SUPERVISION_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        for server in gateway.upstreams.servers().iter() {
            server.supervise();
        }
    }
}

/// How often per-principal upstream sessions are checked for idleness.
const IDLE_SWEEP: Duration = Duration::from_secs(60);

/// Closes per-principal upstream sessions nobody has used for `upstream::PRINCIPAL_IDLE`.
/// Ends with the gateway.
async fn close_idle_sessions(gateway: std::sync::Weak<Gateway>) {
    // A scheduling tick, not a readiness wait.
    let mut tick = tokio::time::interval(IDLE_SWEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        gateway.upstreams.close_idle().await;
    }
}

/// Opens the database; without it the gateway still runs, it only re-embeds on start (and
/// OAuth servers cannot connect). Opening SQLite takes milliseconds.
pub async fn open_store(config: &config::StoreConfig) -> Option<store::Store> {
    match open_database(config).await {
        Ok(store) => {
            tracing::debug!(backend = %store.backend(), database = store.location(), "database opened");
            Some(store)
        }
        Err(error) => {
            tracing::warn!(
                %error,
                "running without the database (embeddings are not cached, OAuth servers cannot connect)"
            );
            None
        }
    }
}

/// Opens the configured database (`[store]`), applying pending migrations, with its secret key
/// from where the configuration says ([`store_keys`]).
pub async fn open_database(
    config: &config::StoreConfig,
) -> Result<store::Store, store::StoreError> {
    store::Store::open_at(&store_location(config)?, store_keys(config)).await
}

/// Where the configured database lives: `[store] url = "postgres://..."`, else the SQLite file
/// of `[store] path` (or `url = "sqlite://PATH"`), else the default location.
pub fn store_location(config: &config::StoreConfig) -> Result<store::Location, store::StoreError> {
    match &config.postgres {
        Some(url) => store::PostgresUrl::parse(url.expose()).map(store::Location::Postgres),
        None => Ok(store::Location::Sqlite(store_path(config))),
    }
}

/// Where the configured database's secret key comes from: `$MCPGW_SECRET_KEY`, else
/// `[store] key_file`, else (SQLite only) `secret.key` beside the database. PostgreSQL takes
/// the key only from outside: the variable or an existing `key_file`.
pub fn store_keys(config: &config::StoreConfig) -> store::KeySource {
    match (&config.postgres, &config.key_file) {
        (Some(_), key_file) => store::KeySource::external(key_file.clone()),
        (None, Some(key_file)) => store::KeySource::new(key_file),
        (None, None) => store::KeySource::beside(&store_path(config)),
    }
}

/// The SQLite database file: `[store] path`, else the default location. With PostgreSQL, the
/// directory of this default path is still the data directory (the admin token's file).
pub fn store_path(config: &config::StoreConfig) -> std::path::PathBuf {
    config
        .path
        .clone()
        .unwrap_or_else(store::Store::default_path)
}

/// How long a server's change notice waits for others before the lists are fetched again.
const UPSTREAM_CHANGES_WINDOW: Duration = Duration::from_millis(100);

async fn watch_changes(
    gateway: std::sync::Weak<Gateway>,
    mut changes: mpsc::UnboundedReceiver<ToolsChanged>,
) {
    while let Some(first) = changes.recv().await {
        // Servers often announce several changes at once (server-everything says it once per
        // tool it adds after the handshake): coalesce what comes within a moment.
        tokio::time::sleep(UPSTREAM_CHANGES_WINDOW).await;
        let mut servers = Vec::new();
        let mut others = Vec::new();
        for change in std::iter::once(first).chain(std::iter::from_fn(|| changes.try_recv().ok())) {
            match change.list {
                ListKind::Tools => {
                    let server = (change.server, change.principal);
                    if !servers.contains(&server) {
                        servers.push(server);
                    }
                }
                other => {
                    let change = (change.server, change.principal, other);
                    if !others.contains(&change) {
                        others.push(change);
                    }
                }
            }
        }
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        // Resource and prompt lists are served from a snapshot: list again, rebuild it, then
        // pass the word on.
        for (name, principal, list) in others {
            let Ok(Some(server)) = gateway.upstreams.for_principal(&name, &principal) else {
                continue;
            };
            let gateway = gateway.clone();
            tokio::spawn(async move {
                // A failed list keeps its last good version; the others may have changed.
                let _ = server.refresh_lists().await;
                gateway.rebuild_surface();
                gateway.listeners.changed(list);
            });
        }
        for (name, principal) in servers {
            // The session that said so lists again: a per-principal one for an OAuth server.
            if let Ok(Some(server)) = gateway.upstreams.for_principal(&name, &principal) {
                let gateway = gateway.clone();
                tokio::spawn(async move {
                    if server.refresh_tools().await.is_ok() {
                        gateway.refresh_catalog().await;
                        // The server told this replica only: the others list it again.
                        gateway.tell_replicas(cluster::Event::Server { name });
                    }
                });
            }
        }
    }
}

/// Lists each ready server's tools again every `refresh_s` (per server; default an hour), for
/// servers that never announce changes, and rebuilds the catalog when a list differs. Ends
/// with the gateway.
async fn refresh_periodically(gateway: std::sync::Weak<Gateway>) {
    let mut last: HashMap<ServerName, Instant> = HashMap::new();
    // A scheduling tick, not a readiness wait: each server's own interval decides.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        let now = Instant::now();
        for server in gateway.upstreams.servers().iter() {
            let Some(every) = server.config().refresh else {
                continue;
            };
            let since = *last.entry(server.name().to_owned()).or_insert(now);
            let ready = matches!(server.status().state, upstream::ServerState::Ready);
            if !ready || now.duration_since(since) < every {
                continue;
            }
            last.insert(server.name().to_owned(), now);
            let server = server.clone();
            let gateway = gateway.clone();
            tokio::spawn(async move {
                let before = server.tools();
                match server.refresh_tools().await {
                    Ok(after) if before.as_deref() != Some(after.as_ref()) => {
                        tracing::info!(
                            server = %server.name(),
                            "periodic refresh found changed tools"
                        );
                        gateway.refresh_catalog().await;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::info!(server = %server.name(), %error, "periodic refresh failed")
                    }
                }
            });
        }
    }
}

/// Says once per process, when a quarter or more of the tools are described in Chinese,
/// Japanese or Korean and the model cannot read those languages, that requests in them are
/// answered by BM25 alone, and which model would read them. Without it a team whose servers
/// describe their tools in Chinese would run the vector search for nothing and not know why.
fn cjk_notice(catalog: &Catalog, semantic: &semantic::Semantic) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    // Every refresh comes here: count the tools only while the notice may still be due.
    if semantic.multilingual() || SAID.load(Ordering::Relaxed) {
        return;
    }
    let described = catalog.described_in_cjk();
    if described == 0 || described * 4 < catalog.len() || SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    tracing::warn!(
        tools = catalog.len(),
        described_in_cjk = described,
        model = semantic.model_id(),
        "{described} of {} tools are described in Chinese, Japanese or Korean, which the embedding model does not read: requests in those languages are searched by BM25 alone. `[retrieval.embedder] model = \"e5\"` reads them (docs/configuration.md)",
        catalog.len()
    );
}
