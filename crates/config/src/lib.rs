//! mcpgw's configuration: the `mcpgw.toml` format, where to find it, and import of the
//! `mcpServers` JSON that Claude Desktop, Cursor and VS Code use.
//!
//! Changes to a file's `[[servers]]` (the admin API's writes) are made by [`ConfigEdit`] with
//! `toml_edit`, which keeps the comments and layout of everything it does not change.
//!
//! Loading has two stages: serde file types that reject unknown fields (`file`), then
//! validation (`validate`) that returns a resolved [`Config`] or *every* problem, each with
//! its path (`servers[1].timeout_s`) and, where one helps, a hint.
//!
//! Invariants:
//! - A [`Config`] returned by [`load`] or [`parse_toml`] is always valid: names are unique
//!   [`ServerName`]s, timeouts are in range, urls are http(s).
//! - Secrets are only materialised by [`Value::resolve`], [`Auth::credential`] and
//!   [`OAuthConfig::client_secret`], at connect time, into `SecretString`s. A resolved
//!   config holds variable names, not credentials (except a JSON file served directly,
//!   see [`load`]), and no `Debug` output prints a header or env value.
//! - This crate does no network IO and starts no processes.
//! - `[network] allow` entries are parsed with `netguard::Rule` (netguard without its client,
//!   so no HTTP stack is compiled here); [`NetworkConfig::policy`] is the global SSRF policy.

mod auth;
mod check;
mod discover;
mod document;
mod edit;
mod error;
mod file;
mod import;
pub mod json;
mod origin;
mod policy;
mod server;
mod telemetry;
mod validate;
mod value;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::auth::{Auth, CredentialHeader, HeaderAuth, OAuthConfig};
pub use crate::check::{Environment, Finding, Report, Severity, ThisMachine, VarState, check};
pub use crate::discover::discover;
pub use crate::edit::{ConfigEdit, EditError};
pub use crate::error::{ConfigError, Location, Problem, one_line};
pub use crate::import::{Imported, import_mcp_servers_json};
pub use crate::origin::{AllowedHost, AllowedOrigin};
pub use crate::policy::{
    ApprovalAction, ApprovalConfig, ApprovalRule, DEFAULT_APPROVAL_TIMEOUT, DEFAULT_BODY_BYTES,
    DEFAULT_JWT_ALGORITHMS, JwtConfig, LimitsConfig, Pattern, PolicyConfig, Profile,
};
pub use crate::server::{
    HttpTransport, MAX_SERVER_NAME_LEN, Ping, ServerConfig, ServerName, StdioTransport, Transport,
    parse_server_name,
};
pub use crate::telemetry::{
    DEFAULT_SERVICE_NAME, TRACES_PATH, TelemetryConfig, otlp_endpoint, service_name, traces_url,
};
pub use crate::value::Value;

/// The default front-end address, `127.0.0.1:8931`: loopback so that a fresh install is not
/// reachable from the network.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 8931);

/// A complete, validated gateway configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub gateway: GatewayConfig,
    /// In file order.
    pub servers: Vec<ServerConfig>,
    pub retrieval: RetrievalConfig,
    pub store: StoreConfig,
    pub network: NetworkConfig,
    /// Profiles, approval and limits.
    pub policy: PolicyConfig,
    /// How long the audit log keeps its rows.
    pub audit: AuditConfig,
    /// Where traces are exported (`[telemetry]`).
    pub telemetry: TelemetryConfig,
    /// The file this was read from; relative `cwd`s were resolved against its directory.
    pub source: PathBuf,
}

impl Config {
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers
            .iter()
            .find(|server| server.name.as_str() == name)
    }

    pub fn enabled_servers(&self) -> impl Iterator<Item = &ServerConfig> {
        self.servers.iter().filter(|server| server.enabled)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// `[gateway.jwt]`: bearer JWTs from an identity provider are accepted as client identity
    /// (besides client keys); with it set, HTTP requests always need one or the other.
    pub jwt: Option<JwtConfig>,
    pub listen: SocketAddr,
    pub exposure: Exposure,
    /// When tool and prompt names get their `server__` prefix.
    pub prefix: Prefix,
    /// Exposure `auto`: the most tokens a passthrough `tools/list` may cost (cl100k_base).
    pub token_budget: usize,
    /// Tools listed beside the meta-tools when search exposure applies (qualified names).
    /// Empty: under `auto`, the most used tools.
    pub pinned: Vec<String>,
    /// When HTTP clients must present a key.
    pub client_auth: ClientAuth,
    /// Whether a loopback listener may serve without client auth. Defaults to true: on
    /// loopback every client is a process of some local user, as with stdio, and the first
    /// `mcpgw serve` must work before any key exists. A network address never serves
    /// without client auth, whatever this says.
    pub allow_unauthenticated_loopback: bool,
    /// Names the HTTP listener answers to besides its own address (and, on loopback,
    /// `localhost`): a request whose `Host` names anything else is refused.
    pub allowed_hosts: Vec<AllowedHost>,
    /// Browser origins, besides the listener's own, whose requests are accepted: a request
    /// with any other `Origin` is refused.
    pub allowed_origins: Vec<AllowedOrigin>,
    /// How `mcpgw serve` writes its log lines (`--log-format` overrides it).
    pub log_format: LogFormat,
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig {
            listen: DEFAULT_LISTEN,
            exposure: Exposure::default(),
            prefix: Prefix::default(),
            token_budget: DEFAULT_TOKEN_BUDGET,
            pinned: Vec::new(),
            client_auth: ClientAuth::default(),
            allow_unauthenticated_loopback: true,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            log_format: LogFormat::default(),
            jwt: None,
        }
    }
}

/// `[gateway] client_auth`: when the HTTP listener requires `Authorization: Bearer <key>`.
/// (JWTs from an identity provider will be a third value.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// Required when at least one client key exists as the listener starts (`mcpgw clients
    /// add`); then for the listener's whole life, even if every key is removed meanwhile.
    #[default]
    Auto,
    /// Always required: with no key stored, every request is refused until one is added.
    ApiKey,
}

/// How upstream tools are shown to a client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exposure {
    /// Three meta-tools: search, details, call.
    #[default]
    Search,
    /// Every visible upstream tool, namespaced.
    Passthrough,
    /// Passthrough while the visible tools' listing fits `[gateway] token_budget`, else the
    /// meta-tools plus the pinned tools (`pinned`, or the most used ones).
    Auto,
}

/// Enums read from the file display as the file writes them (`search`, `when-needed`), so
/// messages and logs speak the configuration's words rather than Rust's (`Search`).
macro_rules! display_as_written {
    ($($ty:ident { $($variant:ident => $word:literal),+ $(,)? })+) => {$(
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self {
                    $($ty::$variant => $word),+
                })
            }
        }
    )+};
}
pub(crate) use display_as_written;

display_as_written! {
    ClientAuth { Auto => "auto", ApiKey => "api_key" }
    Exposure { Search => "search", Passthrough => "passthrough", Auto => "auto" }
    Prefix { Always => "always", WhenNeeded => "when-needed" }
    LogFormat { Text => "text", Json => "json" }
    Strategy { Bm25 => "bm25", Vector => "vector", Hybrid => "hybrid" }
}

/// The default `[gateway] token_budget`: 5% of a 200k-token context.
pub const DEFAULT_TOKEN_BUDGET: usize = 10_000;

/// How many of the most used tools `auto` pins when no `pinned` list is configured.
pub const DEFAULT_AUTO_PINNED: usize = 3;

/// `[gateway] prefix`: when tool and prompt names are qualified with their server's name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prefix {
    /// Every name is `server__name`, and every resource URI `mcpgw://server/...`: names stay
    /// the same whatever other servers come and go.
    #[default]
    Always,
    /// A name no other server uses keeps its upstream form; with a single server, resource
    /// URIs pass through unchanged too. Fronts one server transparently.
    WhenNeeded,
}

/// `[gateway] log_format`: how log lines are written on stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of text per event, for people.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, message, fields, the current span's
    /// fields), for log collectors.
    Json,
}

/// `[retrieval]`: how `search_tools` ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalConfig {
    pub strategy: Strategy,
    /// Hybrid weighting, 0 (lexical only) to 100 (semantic only).
    pub balance: u8,
    /// Vector hits below this cosine similarity are dropped (BM25 hits never are).
    pub min_similarity: Option<f32>,
    /// Query-dependent fusion (`retrieval::Adaptive`): the balance moves per query, toward
    /// semantic for short requests and toward lexical for long ones.
    pub adaptive: bool,
    /// Pseudo-relevance feedback (`retrieval::Feedback`) where BM25 answers alone.
    pub feedback: bool,
    /// Rocchio feedback on the vector side of hybrid (`catalog::Rerank::vector_feedback`):
    /// the query vector moves toward the first pass's best hit.
    pub vector_feedback: bool,
    /// How hybrid search combines the BM25 and the vector list.
    pub fusion: Fusion,
    /// Embed each tool's head (name, description) and its parameters apart and combine the two
    /// vectors (`catalog::FieldTexts`), instead of one text per tool.
    pub field_vectors: bool,
    /// The learned sparse list (splade-tiny, `embed::local::splade`) as a third input of
    /// hybrid fusion, at `catalog::SPLADE_WEIGHT`. Needs the model files
    /// (`scripts/fetch-models.sh splade`); without them search keeps its two lists.
    pub splade: bool,
    pub embedder: EmbedderConfig,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            strategy: Strategy::default(),
            // Tuned with `mcpgw eval` together with the blend and field vectors (docs/retrieval.md,
            // round six): best summed over the three sets it moves, and the choice of two of
            // the three cross-validation folds. Score fusion alone had 60, rank fusion 45.
            balance: 65,
            min_similarity: None,
            // Both won on every set, cross-validated (docs/retrieval.md, round two).
            adaptive: true,
            feedback: true,
            // Round three: small gains on three sets, neutral on the fourth, cross-validated.
            vector_feedback: true,
            // Round five (docs/retrieval.md): scores beat ranks at every balance on all three
            // sets fusion can move, cross-validated (+2.0 / +0.9 / +3.0 held out).
            fusion: Fusion::Scores,
            // Round five: +0.8 on toollens and +2.2 on ultratool-en, the two sets whose tools
            // have parameters, nothing to change on the other two. Round six: on, together
            // with the default blend (potion-base-8M at 0.3, which lifts MetaTool) and balance
            // 65: the three gain on all three sets that can move, cross-validated.
            field_vectors: true,
            // Round four (docs/retrieval.md): gains on toollens and ultratool-en, a loss on
            // metatool at every weight above 0.1, nothing on ultratool-zh (its vocabulary is
            // English): it wins on two sets of four, so it stays off.
            splade: false,
            embedder: EmbedderConfig::Local {
                model: DEFAULT_LOCAL_MODEL.to_owned(),
                path: None,
                blend: Some(LocalBlend::default()),
            },
        }
    }
}

/// `[retrieval] fusion`: how hybrid search combines its lists (`retrieval::Fusion`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// Weighted reciprocal rank fusion (k = 60): only each tool's rank in each list counts.
    Ranks,
    /// A weighted sum of each list's scores, scaled to 0..1 over the list per query: how far
    /// apart the scores are counts too.
    #[default]
    Scores,
}

/// The local model used when the config names none.
pub const DEFAULT_LOCAL_MODEL: &str = "all-MiniLM-L6-v2";

/// Whether `model` names [`DEFAULT_LOCAL_MODEL`] (its folder name or the `minilm` alias, in any
/// case): the model the default blend is tuned for.
pub fn is_default_local_model(model: &str) -> bool {
    let model = model.trim();
    model.eq_ignore_ascii_case(DEFAULT_LOCAL_MODEL) || model.eq_ignore_ascii_case("minilm")
}

/// `[retrieval.embedder] blend` and `blend_weight`: a second local model whose cosine is
/// blended into the vector list (`embed::Blend`): each tool and query is embedded by both,
/// and the vector search compares `(1 − weight) × cos(model) + weight × cos(blend)`.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalBlend {
    pub model: String,
    /// The blend model's weight, strictly between 0 and 1.
    pub weight: f32,
}

/// The blend the default model gets when the file names none: potion-base-8M, a static
/// model that costs well under a millisecond per query, at the weight `mcpgw eval` chose
/// (docs/retrieval.md, round six).
pub const DEFAULT_BLEND_MODEL: &str = "potion-base-8M";
/// The default blend weight (see [`DEFAULT_BLEND_MODEL`]).
pub const DEFAULT_BLEND_WEIGHT: f32 = 0.3;

impl LocalBlend {
    /// The blend `model` gets when the file names none: the default one with the default
    /// model (at `weight`, else the default weight), none with any other unless a weight asks
    /// for it.
    pub fn default_for(model: &str, weight: Option<f32>) -> Option<LocalBlend> {
        let weight = match weight {
            Some(weight) => weight,
            None if is_default_local_model(model) => DEFAULT_BLEND_WEIGHT,
            None => return None,
        };
        Some(LocalBlend {
            weight,
            ..LocalBlend::default()
        })
    }
}

impl Default for LocalBlend {
    fn default() -> Self {
        LocalBlend {
            model: DEFAULT_BLEND_MODEL.to_owned(),
            weight: DEFAULT_BLEND_WEIGHT,
        }
    }
}

/// The ranking behind `search_tools`; the serde name is the lower-cased variant name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Lexical, field-weighted.
    Bm25,
    /// Cosine similarity of embeddings.
    Vector,
    /// Weighted reciprocal rank fusion of the two: the best of the three on the dev sets. With
    /// no model available it serves BM25 alone.
    #[default]
    Hybrid,
}

/// `[retrieval.embedder]`: where vectors come from. Model names are checked when the model is
/// loaded (the embed crate knows them), not here.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedderConfig {
    /// BM25 only.
    None,
    /// A model run in process; `path` overrides where its files are looked for; `blend` is a
    /// second local model blended into its vectors (by default potion-base-8M with the default
    /// model, none with any other).
    Local {
        model: String,
        path: Option<PathBuf>,
        blend: Option<LocalBlend>,
    },
    Remote(RemoteEmbedderConfig),
}

/// An OpenAI-compatible `/embeddings` endpoint. The key is named by `api_key_env`, never
/// written in the config.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteEmbedderConfig {
    pub base_url: url::Url,
    pub model: String,
    pub api_key_env: Option<String>,
    pub batch_size: usize,
    pub timeout: std::time::Duration,
    pub retries: u32,
    pub dimensions: Option<usize>,
}

/// `[network]`: where mcpgw's outbound HTTP (upstream servers, their OAuth endpoints, a remote
/// embedder) may go besides public addresses over https. See `netguard` for what each kind of
/// entry admits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkConfig {
    /// `allow`: host names, `*.suffix` wildcards, IP addresses and CIDRs, optionally with a
    /// port, in file order.
    pub allow: Vec<netguard::Rule>,
    /// Where these settings are written, for refusals to name: mcpgw.toml, or nowhere yet
    /// for an `mcpServers` JSON file served as it is.
    pub settings: netguard::Settings,
}

impl NetworkConfig {
    /// The global policy: this allowlist, for anything not tied to one server (the remote
    /// embedder). A server's clients use `policy().for_server(name, allow_private_network)`.
    pub fn policy(&self) -> netguard::Policy {
        netguard::Policy::new(self.allow.clone()).with_settings(self.settings.clone())
    }
}

/// `[store]`: where mcpgw keeps its state (embedding cache, OAuth tokens, client keys, pins,
/// approvals, audit, leases). SQLite by default: `path` (or `url = "sqlite://PATH"`), `None`
/// meaning the default location in the user data directory. With `url = "postgres://..."`,
/// `postgres` is set and `path` is unused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreConfig {
    pub path: Option<PathBuf>,
    pub postgres: Option<PostgresUrl>,
    /// `[store] key_file`: the secret key's file. SQLite: instead of `secret.key` beside the
    /// database (created on first use). PostgreSQL: must exist, unless `MCPGW_SECRET_KEY` is
    /// set; it is never created.
    pub key_file: Option<PathBuf>,
    /// `[store] redis`: what replicas share live (events, rate limits, pending logins).
    pub redis: Option<RedisUrl>,
    /// `[store] replicas`: how many `mcpgw serve` processes share this store; more than one
    /// needs `redis` and PostgreSQL.
    pub replicas: Replicas,
    /// `[store] replica`: this process's name among the replicas sharing the store, shown by
    /// `servers list` and the admin API. `None`: the host name ([`StoreConfig::replica_name`]).
    pub replica: Option<String>,
}

impl StoreConfig {
    /// This replica's name: `[store] replica`, else the host name, else `mcpgw`.
    pub fn replica_name(&self) -> String {
        if let Some(name) = &self.replica {
            return name.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty() && replica_name_problem(name).is_none());
        host.unwrap_or_else(|| "mcpgw".to_owned())
    }
}

/// Why `name` cannot name a replica (it goes into an HTTP header and a table column): empty,
/// longer than 63 bytes, or other than ASCII letters, digits, `.`, `_` and `-`.
pub fn replica_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("replica name is empty")
    } else if name.len() > 63 {
        Some("replica name is longer than 63 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("replica name may hold only ASCII letters, digits, '.', '_' and '-'")
    } else {
        None
    }
}

/// `[store] replicas`: 1 (the default) to [`Replicas::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas(std::num::NonZeroU32);

impl Replicas {
    pub const MAX: u32 = 1024;

    pub fn new(n: u32) -> Option<Replicas> {
        std::num::NonZeroU32::new(n)
            .filter(|n| n.get() <= Self::MAX)
            .map(Replicas)
    }

    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl Default for Replicas {
    fn default() -> Self {
        Replicas(std::num::NonZeroU32::MIN)
    }
}

/// A Redis URL from `[store] redis`. It may carry a password, so it is kept as a secret and its
/// `Debug` shows the password as `***`.
#[derive(Clone)]
pub struct RedisUrl(secrecy::SecretString);

impl RedisUrl {
    /// The URL itself, password included: for the Redis client only.
    pub fn expose(&self) -> &str {
        secrecy::ExposeSecret::expose_secret(&self.0)
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = match url::Url::parse(self.expose()) {
            Ok(mut url) => {
                if url.password().is_some() {
                    let _ = url.set_password(Some("***"));
                }
                url.set_query(None);
                url.to_string()
            }
            Err(_) => "(unreadable URL)".to_owned(),
        };
        write!(f, "RedisUrl({shown})")
    }
}

impl PartialEq for RedisUrl {
    fn eq(&self, other: &RedisUrl) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for RedisUrl {}

/// A PostgreSQL connection URL from `[store] url`. It may carry a password, so it is kept as a
/// secret and its `Debug` shows the password as `***`.
#[derive(Clone)]
pub struct PostgresUrl(secrecy::SecretString);

impl PostgresUrl {
    /// The URL itself, password included: for the database driver only.
    pub fn expose(&self) -> &str {
        secrecy::ExposeSecret::expose_secret(&self.0)
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = match url::Url::parse(self.expose()) {
            Ok(mut url) => {
                if url.password().is_some() {
                    let _ = url.set_password(Some("***"));
                }
                let pairs: Vec<(String, String)> = url
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if k.eq_ignore_ascii_case("password") {
                            "***".to_owned()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                if !pairs.is_empty() {
                    url.query_pairs_mut().clear().extend_pairs(pairs);
                }
                url.to_string()
            }
            Err(_) => "(unreadable URL)".to_owned(),
        };
        write!(f, "PostgresUrl({shown})")
    }
}

impl PartialEq for PostgresUrl {
    fn eq(&self, other: &PostgresUrl) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for PostgresUrl {}

/// `[audit]`: how long the audit log of tool calls (in the store) keeps its rows. The gateway
/// deletes the rows outside these bounds shortly after it starts and then every hour;
/// `mcpgw audit prune` does it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditConfig {
    /// Rows older than this are deleted (`retention_days`). `None` (`0` in the file): kept
    /// whatever their age.
    pub retention: Option<std::time::Duration>,
    /// At most this many rows are kept, the newest (`max_rows`). `None` (`0` in the file): no
    /// cap.
    pub max_rows: Option<u64>,
}

/// The default `[audit] retention_days`.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u64 = 90;
/// The default `[audit] max_rows`: about 180 MB of database at a typical row's size.
pub const DEFAULT_AUDIT_MAX_ROWS: u64 = 1_000_000;

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            retention: Some(std::time::Duration::from_secs(
                DEFAULT_AUDIT_RETENTION_DAYS * 86_400,
            )),
            max_rows: Some(DEFAULT_AUDIT_MAX_ROWS),
        }
    }
}

impl AuditConfig {
    /// Whether retention deletes anything: false when both bounds are off.
    pub fn prunes(&self) -> bool {
        self.retention.is_some() || self.max_rows.is_some()
    }

    /// `retention_days` as written: `None` when rows are kept whatever their age.
    pub fn retention_days(&self) -> Option<u64> {
        self.retention.map(|age| age.as_secs() / 86_400)
    }
}

/// Read and validate a config file.
///
/// A file ending in `.json`, or whose content starts with `{`, is read as `mcpServers` JSON
/// (Claude Desktop, Cursor, VS Code), so `mcpgw serve` can run on such a file as it is.
/// That path maps servers exactly like [`import_mcp_servers_json`] but keeps inline values
/// as [`Value::Plain`]: the user's own file already holds them, and rejecting it would only
/// make them copy the secrets elsewhere. So the "no inline secrets" rule of mcpgw.toml does
/// not apply to JSON; the values are still never logged. VS Code `${input:..}` and
/// `${env:..}` placeholders become [`Value::Env`] references.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

/// [`load`] of text already read from `path` (a reload reads the file itself, to know what it
/// applied): mcpgw.toml, or `mcpServers` JSON by the same rule.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    if is_json(path, text) {
        import::config_from_json(text, path)
    } else {
        parse_toml(text, path)
    }
}

/// Whether a config file is `mcpServers` JSON: by its extension, or its first character.
fn is_json(path: &Path, text: &str) -> bool {
    path.extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"))
        || text
            .trim_start_matches('\u{feff}')
            .trim_start()
            .starts_with('{')
}

/// Parse and validate mcpgw.toml text; `source` is used in errors and to resolve relative
/// paths.
pub fn parse_toml(text: &str, source: &Path) -> Result<Config, ConfigError> {
    let checked = document::resolve(text, source)?;
    match checked.config {
        Some(config) if checked.problems.is_empty() => Ok(config),
        _ => Err(ConfigError::Invalid(checked.problems)),
    }
}
