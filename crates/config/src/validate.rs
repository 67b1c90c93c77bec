//! Second stage: turn the file types into a resolved `Config`, collecting every problem.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

use crate::auth::{
    FLOW_AUTHORIZATION_PARAMS, FLOW_TOKEN_PARAMS, RESERVED_HEADERS, env_name_problem, is_loopback,
};
use crate::file::{
    AuditFile, AuthFile, ConfigFile, EmbedderFile, EnvRef, GatewayFile, HeaderAuthFile, HttpFile,
    LocalEmbedderFile, NetworkFile, OAuthFile, RemoteEmbedderFile, RetrievalFile, ServerFile,
    StdioFile, StoreFile, TelemetryFile, TransportFile, UrlFile, ValueFile,
};
use crate::policy::{self, ApprovalFile, LimitsFile, ProfileFile};
use crate::value::looks_secret;
use crate::{
    AuditConfig, Auth, Config, ConfigError, DEFAULT_AUDIT_MAX_ROWS, DEFAULT_AUDIT_RETENTION_DAYS,
    DEFAULT_BLEND_WEIGHT, DEFAULT_LOCAL_MODEL, EmbedderConfig, GatewayConfig, HeaderAuth,
    HttpTransport, LocalBlend, NetworkConfig, OAuthConfig, PostgresUrl, Problem, RedisUrl,
    RemoteEmbedderConfig, Replicas, RetrievalConfig, ServerConfig, ServerName, StdioTransport,
    StoreConfig, Transport, Value,
};

pub(crate) const DEFAULT_TIMEOUT_S: u64 = 30;
pub(crate) const MAX_TIMEOUT_S: u64 = 300;
/// Background re-listing of a server's tools: every hour unless configured; `0` is off.
pub(crate) const DEFAULT_REFRESH_S: u64 = 3600;
pub(crate) const MIN_REFRESH_S: u64 = 10;
pub(crate) const DEFAULT_PING_S: u64 = 15;
pub(crate) const MAX_PING_S: u64 = 3600;
pub(crate) const DEFAULT_PING_MISSES: u32 = 3;
pub(crate) const MAX_PING_MISSES: u32 = 100;
pub(crate) const MAX_REFRESH_S: u64 = 7 * 24 * 3600;
/// `[audit]` bounds past which a value is a typo rather than a policy: a century of rows, a
/// billion rows (some 180 GB of database).
pub(crate) const MAX_AUDIT_RETENTION_DAYS: u64 = 36_500;
pub(crate) const MAX_AUDIT_MAX_ROWS: u64 = 1_000_000_000;

/// Whether a plain value under a secret-looking name is a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InlineSecrets {
    /// mcpgw.toml: the file is meant to be shareable, so credentials must be references.
    Reject,
    /// An `mcpServers` JSON file served directly: it already holds the user's secrets and
    /// refusing it would only push them to copy the values somewhere else.
    Allow,
}

/// A server plus where its fields live, so problems point at the user's own text:
/// `servers[1].transport.url` in TOML, `mcpServers.docs.url` in JSON.
pub(crate) struct LocatedServer {
    pub path: String,
    pub transport_path: String,
    pub server: ServerFile,
}

/// Resolve an mcpgw.toml file as far as it is valid: the configuration with every server that
/// resolved (defaults where a setting had a problem), and every problem.
pub(crate) fn validate_partial(file: ConfigFile, source: &Path) -> Resolved {
    let settings = match source.file_name() {
        Some(name) => netguard::Settings::Toml {
            file: name.to_string_lossy().into_owned(),
        },
        None => netguard::Settings::default(),
    };
    let servers = file
        .servers
        .into_iter()
        .enumerate()
        .map(|(i, server)| LocatedServer {
            path: format!("servers[{i}]"),
            transport_path: format!("servers[{i}].transport"),
            server,
        })
        .collect();
    let mut resolved = resolve_partial(
        file.gateway,
        servers,
        (
            file.retrieval,
            file.store,
            file.network,
            file.audit,
            file.telemetry,
        ),
        (file.profiles, file.approval, file.limits),
        source,
        InlineSecrets::Reject,
    );
    // Refusals name this file as the place for `[network] allow`.
    resolved.config.network.settings = settings;
    resolved
}

pub(crate) fn resolve(
    gateway: GatewayFile,
    servers: Vec<LocatedServer>,
    rest: (
        RetrievalFile,
        StoreFile,
        NetworkFile,
        AuditFile,
        TelemetryFile,
    ),
    policy: (Vec<ProfileFile>, ApprovalFile, LimitsFile),
    source: &Path,
    inline_secrets: InlineSecrets,
) -> Result<Config, ConfigError> {
    let resolved = resolve_partial(gateway, servers, rest, policy, source, inline_secrets);
    if resolved.problems.is_empty() {
        Ok(resolved.config)
    } else {
        Err(ConfigError::Invalid(resolved.problems))
    }
}

/// A configuration as far as its files were valid.
pub(crate) struct Resolved {
    /// Every server that resolved; defaults where a setting had a problem.
    pub config: Config,
    pub problems: Vec<Problem>,
    /// Where each of `config.servers` is written, in the same order.
    pub paths: Vec<ServerPaths>,
}

/// Where one server's settings are in the file: `servers[1]` and `servers[1].transport` in
/// TOML, `mcpServers.docs` for both in JSON.
#[derive(Debug, Clone)]
pub(crate) struct ServerPaths {
    pub server: String,
    pub transport: String,
}

/// [`resolve`] as far as the files are valid: every server that resolved, and every problem.
pub(crate) fn resolve_partial(
    gateway: GatewayFile,
    servers: Vec<LocatedServer>,
    (retrieval, store, network, audit, telemetry): (
        RetrievalFile,
        StoreFile,
        NetworkFile,
        AuditFile,
        TelemetryFile,
    ),
    (profiles, approval, limits): (Vec<ProfileFile>, ApprovalFile, LimitsFile),
    source: &Path,
    inline_secrets: InlineSecrets,
) -> Resolved {
    // Relative `cwd`s are anchored at the config file, see `StdioTransport::cwd`.
    let base_dir = source.parent().unwrap_or(Path::new("")).to_owned();
    let mut v = Validator {
        problems: Vec::new(),
        inline_secrets,
        base_dir,
    };

    let default_profile = gateway.default_profile.clone();
    let gateway = v.gateway(gateway);
    let mut resolved = Vec::with_capacity(servers.len());
    let mut paths = Vec::with_capacity(servers.len());
    let mut first_use: HashMap<String, String> = HashMap::new();
    for located in servers {
        if let Some(name) = &located.server.name {
            let path = format!("{}.name", located.path);
            match first_use.get(name) {
                Some(first) => v.problems.push(
                    Problem::new(
                        &path,
                        format!("duplicate server name `{name}`, first used at {first}"),
                    )
                    .hint("server names must be unique; rename one of them"),
                ),
                None => {
                    first_use.insert(name.clone(), path);
                }
            }
        }
        let located_at = ServerPaths {
            server: located.path.clone(),
            transport: located.transport_path.clone(),
        };
        if let Some(server) = v.server(located) {
            resolved.push(server);
            paths.push(located_at);
        }
    }
    let retrieval = v.retrieval(retrieval);
    let store = v.store(store);
    let network = v.network(network);
    let audit = v.audit(audit);
    let telemetry = crate::telemetry::resolve(telemetry, &mut v.problems);
    let policy = policy::policy(profiles, default_profile, approval, limits, &mut v.problems);
    let config = Config {
        gateway,
        servers: resolved,
        retrieval,
        store,
        network,
        policy,
        audit,
        telemetry,
        source: source.to_owned(),
    };
    Resolved {
        config,
        problems: v.problems,
        paths,
    }
}

struct Validator {
    problems: Vec<Problem>,
    inline_secrets: InlineSecrets,
    base_dir: PathBuf,
}

impl Validator {
    fn retrieval(&mut self, file: RetrievalFile) -> RetrievalConfig {
        let default = RetrievalConfig::default();
        let balance = match file.balance {
            None => default.balance,
            Some(n) if (0..=100).contains(&n) => n as u8,
            Some(n) => {
                self.problems.push(
                    Problem::new(
                        "retrieval.balance",
                        format!("balance must be 0 to 100, got {n}"),
                    )
                    .hint("0 is lexical (BM25) only, 100 semantic only, 50 an even blend"),
                );
                default.balance
            }
        };
        let min_similarity = match file.min_similarity {
            None => None,
            Some(x) if (-1.0..=1.0).contains(&x) => Some(x as f32),
            Some(x) => {
                self.problems.push(
                    Problem::new(
                        "retrieval.min_similarity",
                        format!("min_similarity is a cosine similarity from -1 to 1, got {x}"),
                    )
                    .hint("leave it out to keep every vector hit"),
                );
                None
            }
        };
        let embedder = match file.embedder {
            None => default.embedder,
            Some(EmbedderFile::None {}) => EmbedderConfig::None,
            Some(EmbedderFile::Local(local)) => self.local_embedder(local),
            Some(EmbedderFile::Remote(remote)) => self.remote_embedder(remote),
        };
        RetrievalConfig {
            strategy: file.strategy.unwrap_or(default.strategy),
            balance,
            min_similarity,
            adaptive: file.adaptive.unwrap_or(default.adaptive),
            feedback: file.feedback.unwrap_or(default.feedback),
            vector_feedback: file.vector_feedback.unwrap_or(default.vector_feedback),
            fusion: file.fusion.unwrap_or(default.fusion),
            field_vectors: file.field_vectors.unwrap_or(default.field_vectors),
            splade: file.splade.unwrap_or(default.splade),
            embedder,
        }
    }

    fn local_embedder(&mut self, file: LocalEmbedderFile) -> EmbedderConfig {
        const PATH: &str = "retrieval.embedder";
        let model = match file.model {
            Some(model) if !model.trim().is_empty() => model,
            Some(_) => {
                self.problems.push(
                    Problem::new(format!("{PATH}.model"), "model name is empty")
                        .hint("leave it out for all-MiniLM-L6-v2"),
                );
                DEFAULT_LOCAL_MODEL.to_owned()
            }
            None => DEFAULT_LOCAL_MODEL.to_owned(),
        };
        let weight = match file.blend_weight {
            None => None,
            Some(weight) if weight > 0.0 && weight < 1.0 => Some(weight as f32),
            Some(weight) => {
                self.problems.push(
                    Problem::new(
                        format!("{PATH}.blend_weight"),
                        format!("blend_weight lies strictly between 0 and 1, got {weight}"),
                    )
                    .hint("set blend = \"none\" to search with the model alone"),
                );
                None
            }
        };
        let blend = match file.blend.as_deref().map(str::trim) {
            // The default blend is tuned for the default model; another model gets none.
            None => LocalBlend::default_for(&model, weight),
            Some(name) if name.eq_ignore_ascii_case("none") => {
                if file.blend_weight.is_some() {
                    self.problems.push(
                        Problem::new(
                            format!("{PATH}.blend_weight"),
                            "blend_weight is set but blend is \"none\"",
                        )
                        .hint("remove one of the two"),
                    );
                }
                None
            }
            Some("") => {
                self.problems.push(
                    Problem::new(format!("{PATH}.blend"), "blend model name is empty")
                        .hint("a local model such as \"potion-base-8M\", or \"none\""),
                );
                None
            }
            Some(name) => Some(LocalBlend {
                model: name.to_owned(),
                weight: weight.unwrap_or(DEFAULT_BLEND_WEIGHT),
            }),
        };
        EmbedderConfig::Local {
            model,
            path: file.path.map(|p| self.base_dir.join(p)),
            blend,
        }
    }

    fn remote_embedder(&mut self, file: RemoteEmbedderFile) -> EmbedderConfig {
        const PATH: &str = "retrieval.embedder";
        let base_url = match file.base_url {
            None => {
                self.problems.push(
                    Problem::new(format!("{PATH}.base_url"), "missing base_url")
                        .hint("the API root, such as \"https://api.openai.com/v1\""),
                );
                None
            }
            Some(text) => match Url::parse(&text) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => Some(url),
                Ok(url) => {
                    self.problems.push(
                        Problem::new(
                            format!("{PATH}.base_url"),
                            format!("url scheme `{}` is not supported", url.scheme()),
                        )
                        .hint("use an http:// or https:// url"),
                    );
                    None
                }
                Err(e) => {
                    self.problems.push(
                        Problem::new(format!("{PATH}.base_url"), format!("invalid url: {e}"))
                            .hint("write an absolute url such as \"https://api.openai.com/v1\""),
                    );
                    None
                }
            },
        };
        let model = match file.model {
            Some(model) if !model.trim().is_empty() => Some(model),
            _ => {
                self.problems
                    .push(Problem::new(format!("{PATH}.model"), "missing model").hint(
                        "the model name the endpoint expects, such as \"text-embedding-3-small\"",
                    ));
                None
            }
        };
        if let Some(var) = &file.api_key_env
            && (var.is_empty() || var.contains('=') || var.contains('\0'))
        {
            self.problems.push(
                Problem::new(
                    format!("{PATH}.api_key_env"),
                    "not a valid environment variable name",
                )
                .hint("name the variable that holds the key, such as \"OPENAI_API_KEY\""),
            );
        }
        let mut ranged = |field: &str,
                          value: Option<i64>,
                          range: std::ops::RangeInclusive<i64>,
                          default: i64|
         -> i64 {
            match value {
                None => default,
                Some(n) if range.contains(&n) => n,
                Some(n) => {
                    self.problems.push(Problem::new(
                        format!("{PATH}.{field}"),
                        format!(
                            "{field} must be {} to {}, got {n}",
                            range.start(),
                            range.end()
                        ),
                    ));
                    default
                }
            }
        };
        let batch_size = ranged("batch_size", file.batch_size, 1..=2048, 64) as usize;
        let timeout = Duration::from_secs(ranged("timeout_s", file.timeout_s, 1..=300, 30) as u64);
        let retries = ranged("retries", file.retries, 0..=10, 3) as u32;
        let dimensions = file
            .dimensions
            .map(|d| ranged("dimensions", Some(d), 1..=65536, 1) as usize);
        match (base_url, model) {
            (Some(base_url), Some(model)) => EmbedderConfig::Remote(RemoteEmbedderConfig {
                base_url,
                model,
                api_key_env: file.api_key_env,
                batch_size,
                timeout,
                retries,
                dimensions,
            }),
            _ => EmbedderConfig::None,
        }
    }

    fn store(&mut self, mut file: StoreFile) -> StoreConfig {
        let redis = file.redis.take();
        let redis_given = redis.is_some();
        let replicas = file.replicas.take();
        let mut config = self.store_location(file);
        config.redis = redis.and_then(|url| self.redis_url(url));
        config.replicas = self.replicas(replicas);
        self.check_replicas(&config, redis_given);
        config
    }

    /// `[store] replicas`: 1 to [`Replicas::MAX`].
    fn replicas(&mut self, replicas: Option<i64>) -> Replicas {
        match replicas {
            None => Replicas::default(),
            Some(n) => match u32::try_from(n).ok().and_then(Replicas::new) {
                Some(replicas) => replicas,
                None => {
                    self.problems.push(
                        Problem::new(
                            "store.replicas",
                            format!("{n} is out of range (1 to {})", Replicas::MAX),
                        )
                        .hint("the number of `mcpgw serve` processes sharing this store; 1 when it runs alone"),
                    );
                    Replicas::default()
                }
            },
        }
    }

    /// Several replicas share live state through Redis and their records through PostgreSQL:
    /// refused without either, rather than each replica quietly keeping its own.
    fn check_replicas(&mut self, config: &StoreConfig, redis_given: bool) {
        let replicas = config.replicas.get();
        if replicas < 2 {
            return;
        }
        // A `redis` that is set but unusable has its own problem already.
        if config.redis.is_none() && !redis_given {
            self.problems.push(
                Problem::new(
                    "store.redis",
                    format!("`replicas = {replicas}` needs Redis, and no `redis` is set"),
                )
                .hint(
                    "set `redis = \"redis://HOST:6379/\"`: replicas share approval decisions, \
                     catalog changes and rate limits through it (or set `replicas = 1`)",
                ),
            );
        }
        if config.postgres.is_none() {
            self.problems.push(
                Problem::new(
                    "store.url",
                    format!("`replicas = {replicas}` needs PostgreSQL, and the store is SQLite"),
                )
                .hint(
                    "set `url = \"postgres://USER@HOST/DATABASE\"` (move an existing database \
                     with `mcpgw store copy`): a SQLite file cannot be shared by replicas",
                ),
            );
        }
    }

    /// `[store] redis`: `redis://[USER:PASSWORD@]HOST[:PORT][/DB]`, written out or read from
    /// the environment variable `{ env = "VAR" }` names. Problems never quote the URL, which
    /// may hold a password.
    fn redis_url(&mut self, url: UrlFile) -> Option<RedisUrl> {
        let problem = |message: &str| {
            Problem::new("store.redis", message.to_owned())
                .hint("use redis://HOST[:PORT][/DB], with `:PASSWORD@` before the host if Redis asks for one")
        };
        let url = match url {
            UrlFile::Plain(url) => url,
            UrlFile::Env(EnvRef { env }) => match std::env::var(&env) {
                Ok(url) => url,
                Err(_) => {
                    self.problems.push(
                        Problem::new(
                            "store.redis",
                            format!("the environment variable {env} is not set (or not UTF-8)"),
                        )
                        .hint("set it to the Redis URL, redis://[:PASSWORD@]HOST[:PORT][/DB], in the gateway's environment"),
                    );
                    return None;
                }
            },
        };
        let url = url.trim();
        if url.starts_with("rediss://") {
            self.problems.push(problem(
                "TLS to Redis (rediss://) is not supported yet; reach Redis on a private network or through a TLS tunnel",
            ));
            return None;
        }
        if !url.starts_with("redis://") {
            self.problems.push(problem("not a Redis URL"));
            return None;
        }
        match url::Url::parse(url) {
            Ok(parsed) if parsed.host_str().is_some_and(|h| !h.is_empty()) => {
                let db = parsed.path().trim_start_matches('/');
                if !db.is_empty() && db.parse::<u16>().is_err() {
                    self.problems
                        .push(problem("the path of a Redis URL is a database number"));
                    return None;
                }
                Some(RedisUrl(secrecy::SecretString::from(url)))
            }
            Ok(_) => {
                self.problems.push(problem("the Redis URL names no host"));
                None
            }
            Err(error) => {
                self.problems
                    .push(problem(&format!("not a valid Redis URL ({error})")));
                None
            }
        }
    }

    /// `[store] path` / `url` / `key_file`: where the database is.
    fn store_location(&mut self, file: StoreFile) -> StoreConfig {
        let mut config = StoreConfig {
            key_file: match file.key_file {
                Some(path) if path.trim().is_empty() => {
                    self.problems
                        .push(Problem::new("store.key_file", "path is empty").hint(
                        "leave it out to use MCPGW_SECRET_KEY or secret.key beside the database",
                    ));
                    None
                }
                Some(path) => Some(self.base_dir.join(path)),
                None => None,
            },
            replica: match file.replica {
                Some(name) => match crate::replica_name_problem(name.trim()) {
                    Some(problem) => {
                        self.problems.push(
                            Problem::new("store.replica", problem).hint(
                                "a short name such as \"gw-1\"; leave it out for the host name",
                            ),
                        );
                        None
                    }
                    None => Some(name.trim().to_owned()),
                },
                None => None,
            },
            ..StoreConfig::default()
        };
        let path = match (file.path, file.url) {
            (Some(_), Some(_)) => {
                self.problems.push(
                    Problem::new("store.url", "both `path` and `url` are set").hint(
                        "keep one: `url = \"sqlite://PATH\"` is the same as `path = \"PATH\"`",
                    ),
                );
                return config;
            }
            (Some(path), None) => path,
            (None, Some(url)) => match self.store_url(&url) {
                StoreUrl::Sqlite(path) => path,
                StoreUrl::Postgres(url) => {
                    config.postgres = Some(url);
                    return config;
                }
                StoreUrl::Invalid => return config,
            },
            (None, None) => return config,
        };
        if path.trim().is_empty() {
            self.problems.push(
                Problem::new("store.path", "path is empty")
                    .hint("leave it out for the default in the user data directory"),
            );
        } else {
            config.path = Some(self.base_dir.join(path));
        }
        config
    }

    /// `[store] url`: `sqlite://PATH` or `postgres://...` (`postgresql://...`). Problems never
    /// quote the URL, which may hold a password.
    fn store_url(&mut self, url: &str) -> StoreUrl {
        let url = url.trim();
        if let Some(path) = url.strip_prefix("sqlite://") {
            return StoreUrl::Sqlite(path.to_owned());
        }
        let problem = |message: &str| {
            Problem::new("store.url", message.to_owned()).hint(
                "use sqlite://PATH, or postgres://USER@HOST[:PORT]/DATABASE (the password in \
                 PGPASSWORD or ~/.pgpass, or in the URL)",
            )
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
            self.problems.push(problem(&if scheme.is_empty() {
                "not a database URL".to_owned()
            } else {
                format!("'{scheme}' is not a supported database (sqlite or postgres)")
            }));
            return StoreUrl::Invalid;
        }
        match url::Url::parse(url) {
            Ok(parsed) if parsed.host_str().is_some_and(|h| !h.is_empty()) => {
                StoreUrl::Postgres(PostgresUrl(secrecy::SecretString::from(url)))
            }
            Ok(_) => {
                self.problems
                    .push(problem("the PostgreSQL URL names no host"));
                StoreUrl::Invalid
            }
            Err(error) => {
                self.problems
                    .push(problem(&format!("not a valid PostgreSQL URL ({error})")));
                StoreUrl::Invalid
            }
        }
    }

    /// `0` turns either bound off; a negative or absurd value is a problem naming the range.
    fn audit(&mut self, file: AuditFile) -> AuditConfig {
        let default = AuditConfig::default();
        let retention = match file.retention_days.map(u64::try_from) {
            None => default.retention,
            Some(Ok(0)) => None,
            Some(Ok(days @ 1..=MAX_AUDIT_RETENTION_DAYS)) => {
                Some(Duration::from_secs(days * 86_400))
            }
            Some(_) => {
                self.problems.push(
                    Problem::new(
                        "audit.retention_days",
                        format!(
                            "retention_days must be 0 (keep forever) or between 1 and {MAX_AUDIT_RETENTION_DAYS} days, got {}",
                            file.retention_days.unwrap_or_default()
                        ),
                    )
                    .hint(format!(
                        "leave it out for the default of {DEFAULT_AUDIT_RETENTION_DAYS}"
                    )),
                );
                default.retention
            }
        };
        let max_rows = match file.max_rows.map(u64::try_from) {
            None => default.max_rows,
            Some(Ok(0)) => None,
            Some(Ok(rows @ 1..=MAX_AUDIT_MAX_ROWS)) => Some(rows),
            Some(_) => {
                self.problems.push(
                    Problem::new(
                        "audit.max_rows",
                        format!(
                            "max_rows must be 0 (no cap) or between 1 and {MAX_AUDIT_MAX_ROWS}, got {}",
                            file.max_rows.unwrap_or_default()
                        ),
                    )
                    .hint(format!(
                        "leave it out for the default of {DEFAULT_AUDIT_MAX_ROWS}"
                    )),
                );
                default.max_rows
            }
        };
        AuditConfig {
            retention,
            max_rows,
        }
    }

    /// Every entry is parsed on its own, so one run reports every bad one.
    fn network(&mut self, file: NetworkFile) -> NetworkConfig {
        let mut allow = Vec::with_capacity(file.allow.len());
        for (i, entry) in file.allow.iter().enumerate() {
            match entry.parse::<netguard::Rule>() {
                Ok(rule) => allow.push(rule),
                Err(error) => {
                    let hint = rule_hint(&error);
                    self.problems.push(
                        Problem::new(format!("network.allow[{i}]"), error.to_string()).hint(hint),
                    );
                }
            }
        }
        NetworkConfig {
            allow,
            settings: netguard::Settings::default(),
        }
    }

    fn gateway(&mut self, file: GatewayFile) -> GatewayConfig {
        let default = GatewayConfig::default();
        let listen = match file.listen {
            None => default.listen,
            Some(text) => text.parse::<SocketAddr>().unwrap_or_else(|_| {
                self.problems.push(
                    Problem::new(
                        "gateway.listen",
                        format!("`{text}` is not an IP address and port"),
                    )
                    .hint("write it like \"127.0.0.1:8931\"; host names are not accepted"),
                );
                default.listen
            }),
        };
        GatewayConfig {
            listen,
            exposure: file.exposure.unwrap_or(default.exposure),
            prefix: file.prefix.unwrap_or(default.prefix),
            log_format: file.log_format.unwrap_or(default.log_format),
            token_budget: match file.token_budget {
                None => default.token_budget,
                Some(n @ 0..=10_000_000) => n as usize,
                Some(n) => {
                    self.problems.push(Problem::new(
                        "gateway.token_budget",
                        format!("{n} is out of range 0..=10000000 (tokens)"),
                    ));
                    default.token_budget
                }
            },
            pinned: file.pinned.unwrap_or_default(),
            client_auth: file.client_auth.unwrap_or(default.client_auth),
            allow_unauthenticated_loopback: file
                .allow_unauthenticated_loopback
                .unwrap_or(default.allow_unauthenticated_loopback),
            allowed_hosts: self.entries(
                "gateway.allowed_hosts",
                file.allowed_hosts,
                crate::origin::allowed_host,
                "write a host name with an optional port, like \"mcpgw.internal\" or \"localhost:9000\"",
            ),
            allowed_origins: self.entries(
                "gateway.allowed_origins",
                file.allowed_origins,
                crate::origin::allowed_origin,
                "write an origin as a browser sends it, like \"http://localhost:6274\" or \"https://app.example\"",
            ),
            jwt: file
                .jwt
                .and_then(|jwt| policy::jwt(jwt, &mut self.problems)),
        }
    }

    /// Each entry of a list parsed by `parse`; every bad one is a problem at `path[i]`.
    fn entries<T>(
        &mut self,
        path: &str,
        entries: Option<Vec<String>>,
        parse: fn(&str) -> Result<T, String>,
        hint: &str,
    ) -> Vec<T> {
        let mut parsed = Vec::new();
        for (i, entry) in entries.unwrap_or_default().iter().enumerate() {
            match parse(entry.trim()) {
                Ok(value) => parsed.push(value),
                Err(message) => self
                    .problems
                    .push(Problem::new(format!("{path}[{i}]"), message).hint(hint)),
            }
        }
        parsed
    }

    /// `None` when the server has problems; they are recorded, and the remaining fields
    /// are still checked so one run reports everything.
    fn server(&mut self, located: LocatedServer) -> Option<ServerConfig> {
        let LocatedServer {
            path,
            transport_path,
            server,
        } = located;
        let before = self.problems.len();

        let name = match server.name {
            None => {
                self.problems.push(
                    Problem::new(format!("{path}.name"), "missing server name")
                        .hint("add name = \"...\" using letters, digits, `-` and `_`"),
                );
                None
            }
            Some(name) => {
                if let Some(reason) = ServerName::problem(&name) {
                    self.problems.push(
                        Problem::new(format!("{path}.name"), format!("invalid server name `{name}`: {reason}"))
                            .hint("use 1 to 32 letters, digits, `-` and `_`, such as \"github\" or \"my-docs\""),
                    );
                }
                ServerName::parse(&name).ok()
            }
        };

        let timeout_s = server.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S as i64);
        let timeout = match u64::try_from(timeout_s) {
            Ok(secs @ 1..=MAX_TIMEOUT_S) => Some(Duration::from_secs(secs)),
            _ => {
                self.problems.push(
                    Problem::new(
                        format!("{path}.timeout_s"),
                        format!(
                            "timeout must be between 1 and {MAX_TIMEOUT_S} seconds, got {timeout_s}"
                        ),
                    )
                    .hint(format!(
                        "leave it out for the default of {DEFAULT_TIMEOUT_S}"
                    )),
                );
                None
            }
        };

        let refresh_s = server.refresh_s.unwrap_or(DEFAULT_REFRESH_S as i64);
        let refresh = match u64::try_from(refresh_s) {
            Ok(0) => Some(None),
            Ok(secs @ MIN_REFRESH_S..=MAX_REFRESH_S) => Some(Some(Duration::from_secs(secs))),
            _ => {
                self.problems.push(
                    Problem::new(
                        format!("{path}.refresh_s"),
                        format!(
                            "refresh_s must be 0 (off) or between {MIN_REFRESH_S} and {MAX_REFRESH_S} seconds, got {refresh_s}"
                        ),
                    )
                    .hint(format!(
                        "leave it out for the default of {DEFAULT_REFRESH_S} (an hour)"
                    )),
                );
                None
            }
        };

        let ping_s = server.ping_s.unwrap_or(DEFAULT_PING_S as i64);
        let ping_misses = server.ping_misses.unwrap_or(i64::from(DEFAULT_PING_MISSES));
        let misses =
            match u32::try_from(ping_misses) {
                Ok(n @ 1..=MAX_PING_MISSES) => Some(n),
                _ => {
                    self.problems.push(
                    Problem::new(
                        format!("{path}.ping_misses"),
                        format!(
                            "ping_misses must be between 1 and {MAX_PING_MISSES}, got {ping_misses}"
                        ),
                    )
                    .hint(format!("leave it out for the default of {DEFAULT_PING_MISSES}")),
                );
                    None
                }
            };
        let ping = match u64::try_from(ping_s) {
            Ok(0) => Some(None),
            Ok(secs @ 1..=MAX_PING_S) => misses.map(|misses| {
                Some(crate::Ping {
                    every: Duration::from_secs(secs),
                    misses,
                })
            }),
            _ => {
                self.problems.push(
                    Problem::new(
                        format!("{path}.ping_s"),
                        format!(
                            "ping_s must be 0 (off) or between 1 and {MAX_PING_S} seconds, got {ping_s}"
                        ),
                    )
                    .hint(format!("leave it out for the default of {DEFAULT_PING_S}")),
                );
                None
            }
        };

        let label = name
            .as_ref()
            .map_or("SERVER", ServerName::as_str)
            .to_owned();
        let stdio = matches!(server.transport, Some(TransportFile::Stdio(_)));
        let sse = matches!(server.transport, Some(TransportFile::Sse(_)));
        let auth = self.auth(&format!("{path}.auth"), &label, server.auth, stdio, sse);
        // Reported rather than ignored: on a stdio server the line would look like it did
        // something. `false` is harmless and accepted.
        if stdio && server.allow_private_network == Some(true) {
            self.problems.push(
                Problem::new(
                    format!("{path}.allow_private_network"),
                    "allow_private_network applies to http and sse servers, not to stdio",
                )
                .hint("a stdio server is a local process that mcpgw reaches without the network; remove the line"),
            );
        }
        let transport = match server.transport {
            None => {
                self.problems.push(Problem::new(transport_path, "missing transport").hint(
                    r#"add transport = { type = "stdio", command = "..." } or { type = "http", url = "https://..." }"#,
                ));
                None
            }
            Some(TransportFile::Stdio(stdio)) => {
                self.stdio(&transport_path, stdio).map(Transport::Stdio)
            }
            Some(TransportFile::Http(http)) => self
                .http(&transport_path, &label, http)
                .map(Transport::Http),
            Some(TransportFile::Sse(http)) => {
                self.http(&transport_path, &label, http).map(Transport::Sse)
            }
        };

        if self.problems.len() > before {
            return None;
        }
        Some(ServerConfig {
            name: name?,
            description: server.description,
            enabled: server.enabled.unwrap_or(true),
            timeout: timeout?,
            refresh: refresh?,
            ping: ping?,
            transport: transport?,
            auth,
            allow_private_network: server.allow_private_network.unwrap_or(false),
            trust_changes: server.trust_changes.unwrap_or(false),
        })
    }

    fn auth(
        &mut self,
        path: &str,
        server: &str,
        file: Option<AuthFile>,
        stdio: bool,
        sse: bool,
    ) -> Auth {
        let Some(file) = file else {
            return Auth::None;
        };
        // The legacy HTTP+SSE client has no token refresh; the OAuth client lives on Streamable
        // HTTP. Servers that still speak only SSE predate OAuth in MCP (2025-03-26) anyway.
        if sse && matches!(file, AuthFile::OAuth(_)) {
            self.problems.push(
                Problem::new(path, "oauth is supported for http servers, not for sse")
                    .hint("use transport = { type = \"http\", url = \"...\" } if the server speaks Streamable HTTP, or a bearer token"),
            );
            return Auth::None;
        }
        if stdio && !matches!(file, AuthFile::None(_)) {
            let named = match &file {
                AuthFile::Bearer(bearer) => bearer.env.clone(),
                AuthFile::Header(header) => header.env.clone(),
                AuthFile::None(_) | AuthFile::OAuth(_) => None,
            };
            let var = named
                .filter(|var| env_name_problem(var).is_none())
                .unwrap_or_else(|| header_var_name(server, "token"));
            self.problems.push(
                Problem::new(path, "auth applies to http and sse servers, not to stdio")
                    .hint(format!(
                        "a stdio server gets credentials through its environment: transport.env = {{ {var} = {{ env = \"{var}\" }} }}"
                    )),
            );
            return Auth::None;
        }
        match file {
            AuthFile::None(_) => Auth::None,
            AuthFile::Bearer(bearer) => self
                .auth_env(path, server, bearer.env)
                .map(|env| Auth::Bearer { env })
                .unwrap_or_default(),
            AuthFile::Header(header) => self.header_auth(path, server, header),
            AuthFile::OAuth(oauth) => Auth::OAuth(Box::new(self.oauth(path, oauth))),
        }
    }

    /// The `env` of a static strategy. Problems never repeat the text: it may be the token.
    fn auth_env(&mut self, path: &str, server: &str, env: Option<String>) -> Option<String> {
        let suggested = header_var_name(server, "token");
        match env {
            None => {
                self.problems.push(
                    Problem::new(format!("{path}.env"), "missing env").hint(format!(
                        "name the environment variable that holds the credential, such as env = \"{suggested}\""
                    )),
                );
                None
            }
            Some(env) => match env_name_problem(&env) {
                None => Some(env),
                Some(problem) => {
                    self.problems.push(
                        Problem::new(format!("{path}.env"), problem).hint(format!(
                            "write the name of the variable that holds the credential, such as env = \"{suggested}\", and export it"
                        )),
                    );
                    None
                }
            },
        }
    }

    fn header_auth(&mut self, path: &str, server: &str, file: HeaderAuthFile) -> Auth {
        let name = match file.name {
            None => {
                self.problems.push(
                    Problem::new(format!("{path}.name"), "missing header name")
                        .hint("name the header the server reads the credential from, such as name = \"X-Api-Key\""),
                );
                None
            }
            Some(name) if !is_header_name(&name) => {
                self.problems.push(Problem::new(
                    format!("{path}.name"),
                    format!("`{name}` is not a valid HTTP header name"),
                ));
                None
            }
            Some(name) if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) => {
                self.problems.push(
                    Problem::new(
                        format!("{path}.name"),
                        format!("`{name}` is set by the transport and cannot carry a credential"),
                    )
                    .hint(
                        "use the header the server documents, such as X-Api-Key or Authorization",
                    ),
                );
                None
            }
            Some(name) => Some(name),
        };
        let scheme = match file.scheme {
            Some(scheme) if !is_header_name(&scheme) => {
                self.problems.push(
                    Problem::new(
                        format!("{path}.scheme"),
                        "the scheme must be one word, such as \"Token\" or \"Bearer\"",
                    )
                    .hint("leave it out to send the variable's value as it is"),
                );
                None
            }
            scheme => scheme,
        };
        let env = self.auth_env(path, server, file.env);
        match (name, env) {
            (Some(name), Some(env)) => Auth::Header(HeaderAuth { name, scheme, env }),
            _ => Auth::None,
        }
    }

    fn oauth(&mut self, path: &str, file: OAuthFile) -> OAuthConfig {
        for (i, scope) in file.scopes.iter().enumerate() {
            // RFC 6749 section 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
            let valid = !scope.is_empty()
                && scope
                    .bytes()
                    .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E));
            if !valid {
                self.problems.push(
                    Problem::new(
                        format!("{path}.scopes[{i}]"),
                        format!("{scope:?} is not a valid scope"),
                    )
                    .hint("a scope is one word of visible ASCII without `\"` or `\\`; write each as its own item: scopes = [\"read\", \"write\"]"),
                );
            }
        }
        let client_id = match file.client_id {
            Some(id) if id.trim().is_empty() => {
                self.problems.push(
                    Problem::new(format!("{path}.client_id"), "client_id is empty").hint(
                        "leave it out to register mcpgw with the authorization server automatically",
                    ),
                );
                None
            }
            id => id,
        };
        if let Some(var) = &file.client_secret_env {
            if let Some(problem) = env_name_problem(var) {
                self.problems.push(
                    Problem::new(format!("{path}.client_secret_env"), problem).hint(
                        "write the name of the variable that holds the client secret, such as \"OAUTH_CLIENT_SECRET\", and export it",
                    ),
                );
            }
            if client_id.is_none() {
                self.problems.push(
                    Problem::new(
                        format!("{path}.client_secret_env"),
                        "a client secret needs the client_id it was issued with",
                    )
                    .hint("add client_id = \"...\" as registered with the authorization server"),
                );
            }
        }
        let client_metadata_url = file.client_metadata_url.and_then(|text| {
            let at = format!("{path}.client_metadata_url");
            if client_id.is_some() {
                self.problems.push(
                    Problem::new(&at, "give either client_id or client_metadata_url, not both")
                        .hint("the url of a client ID metadata document is itself the client ID"),
                );
            }
            let url = self.oauth_url(&at, &text)?;
            // The OAuth client (rmcp) accepts only https client IDs: an http one would pass
            // here and fail at every sign-in.
            if url.scheme() != "https" {
                self.problems.push(
                    Problem::new(&at, "a client ID metadata document must be served over https")
                        .hint("use an https:// url, or leave it out to register mcpgw with the authorization server automatically"),
                );
                return None;
            }
            if url.path() == "/" {
                self.problems.push(
                    Problem::new(&at, "the url needs a path naming the document")
                        .hint("such as \"https://example.com/oauth/mcpgw.json\""),
                );
                return None;
            }
            Some(url)
        });
        let redirect_uri = file.redirect_uri.and_then(|text| {
            let at = format!("{path}.redirect_uri");
            let url = self.oauth_url(&at, &text)?;
            if url.scheme() != "http" || !is_loopback(&url) {
                self.problems.push(
                    Problem::new(&at, "redirect_uri must be an http:// address on this machine")
                        .hint("mcpgw receives the sign-in answer itself: use http://127.0.0.1:PORT/callback (or localhost, [::1])"),
                );
                return None;
            }
            if url.port().is_none() {
                self.problems.push(
                    Problem::new(&at, "redirect_uri needs an explicit port").hint(
                        "the port registered with the authorization server, such as http://127.0.0.1:8765/callback",
                    ),
                );
                return None;
            }
            Some(url)
        });
        let resource = file.resource.and_then(|text| {
            let at = format!("{path}.resource");
            let url = self.oauth_url(&at, &text)?;
            if !matches!(url.scheme(), "http" | "https") {
                self.problems.push(
                    Problem::new(
                        &at,
                        format!("url scheme `{}` is not supported", url.scheme()),
                    )
                    .hint("leave it out to use the server's url"),
                );
                return None;
            }
            Some(url)
        });
        let authorization_params = self.oauth_params(
            &format!("{path}.authorization_params"),
            file.authorization_params,
            &FLOW_AUTHORIZATION_PARAMS,
        );
        let token_params = self.oauth_params(
            &format!("{path}.token_params"),
            file.token_params,
            &FLOW_TOKEN_PARAMS,
        );
        OAuthConfig {
            scopes: file.scopes,
            client_id,
            client_secret_env: file.client_secret_env,
            client_metadata_url,
            redirect_uri,
            authorization_params,
            token_params,
            resource,
        }
    }

    /// An absolute url without userinfo or fragment; the scheme is the caller's to check.
    fn oauth_url(&mut self, path: &str, text: &str) -> Option<Url> {
        let url = match Url::parse(text) {
            Ok(url) => url,
            Err(err) => {
                self.problems.push(
                    Problem::new(path, format!("invalid url: {err}"))
                        .hint("write an absolute url such as \"https://example.com/path\""),
                );
                return None;
            }
        };
        if !url.username().is_empty() || url.password().is_some() {
            self.problems.push(Problem::new(
                path,
                "the url must not hold a user name or password",
            ));
            return None;
        }
        if url.fragment().is_some() {
            self.problems.push(Problem::new(
                path,
                "the url must not have a fragment (`#...`)",
            ));
            return None;
        }
        Some(url)
    }

    fn oauth_params(
        &mut self,
        path: &str,
        params: BTreeMap<String, String>,
        flow: &[(&str, &str)],
    ) -> BTreeMap<String, String> {
        let before = self.problems.len();
        for name in params.keys() {
            let at = match name.as_str() {
                "" => format!("{path}.\"\""),
                name => format!("{path}.{name}"),
            };
            if name.trim().is_empty() {
                self.problems
                    .push(Problem::new(at, "a parameter name must not be empty"));
            } else if let Some((_, instead)) = flow.iter().find(|(param, _)| param == name) {
                self.problems.push(
                    Problem::new(at, format!("`{name}` is set by the OAuth flow")).hint(*instead),
                );
            } else if looks_secret(name) {
                self.problems.push(
                    Problem::new(
                        at,
                        format!("`{name}` looks like a secret and must not be written inline"),
                    )
                    .hint("only the client secret is read from the environment, with client_secret_env"),
                );
            }
        }
        if self.problems.len() > before {
            return BTreeMap::new();
        }
        params
    }

    fn stdio(&mut self, path: &str, file: StdioFile) -> Option<StdioTransport> {
        let command = match file.command {
            None => {
                self.problems.push(
                    Problem::new(format!("{path}.command"), "missing command")
                        .hint("name the program to start, such as \"npx\" or \"uvx\""),
                );
                None
            }
            Some(command) if command.trim().is_empty() => {
                self.problems.push(Problem::new(
                    format!("{path}.command"),
                    "command must not be empty",
                ));
                None
            }
            Some(command) => Some(command),
        };
        let cwd = match file.cwd {
            Some(cwd) if cwd.is_empty() => {
                self.problems.push(
                    Problem::new(format!("{path}.cwd"), "cwd must not be empty")
                        .hint("leave it out to start in the gateway's working directory"),
                );
                None
            }
            Some(cwd) => Some(self.base_dir.join(cwd)),
            None => None,
        };
        let mut env = BTreeMap::new();
        for (name, value) in file.env {
            let entry_path = format!("{path}.env.{name}");
            if name.is_empty() || name.contains(['=', '\0']) {
                self.problems.push(Problem::new(
                    &entry_path,
                    "an environment variable name must be non-empty and contain neither `=` nor NUL",
                ));
            }
            if let Some(value) = self.value(&entry_path, &name, &name, value) {
                env.insert(name, value);
            }
        }
        Some(StdioTransport {
            command: command?,
            args: file.args,
            env,
            cwd,
        })
    }

    fn http(&mut self, path: &str, server: &str, file: HttpFile) -> Option<HttpTransport> {
        let url = match file.url {
            None => {
                self.problems.push(
                    Problem::new(format!("{path}.url"), "missing url").hint(
                        "give the server's endpoint, such as \"https://mcp.example.com/mcp\"",
                    ),
                );
                None
            }
            Some(text) => self.url(&format!("{path}.url"), &text),
        };
        let mut headers = BTreeMap::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (name, value) in file.headers {
            let entry_path = format!("{path}.headers.{name}");
            if !is_header_name(&name) {
                self.problems.push(Problem::new(
                    &entry_path,
                    format!("`{name}` is not a valid HTTP header name"),
                ));
            } else if let Some(first) = seen.insert(name.to_ascii_lowercase(), name.clone()) {
                self.problems.push(
                    Problem::new(
                        &entry_path,
                        format!("header `{name}` is also given as `{first}`"),
                    )
                    .hint("header names are case-insensitive; keep one"),
                );
            }
            if let ValueFile::Plain(text) = &value
                && text.contains(['\r', '\n'])
            {
                self.problems.push(Problem::new(
                    &entry_path,
                    "a header value must not contain line breaks",
                ));
            }
            let var = header_var_name(server, &name);
            if let Some(value) = self.value(&entry_path, &name, &var, value) {
                headers.insert(name, value);
            }
        }
        Some(HttpTransport { url: url?, headers })
    }

    fn url(&mut self, path: &str, text: &str) -> Option<Url> {
        let url = match Url::parse(text) {
            Ok(url) => url,
            Err(err) => {
                // The text is not echoed: it may hold a credential.
                self.problems.push(
                    Problem::new(path, format!("invalid url: {err}"))
                        .hint("write an absolute url such as \"https://mcp.example.com/mcp\""),
                );
                return None;
            }
        };
        if !matches!(url.scheme(), "http" | "https") {
            self.problems.push(
                Problem::new(
                    path,
                    format!("url scheme `{}` is not supported", url.scheme()),
                )
                .hint("use an http:// or https:// url"),
            );
            return None;
        }
        if self.inline_secrets == InlineSecrets::Allow {
            return Some(url);
        }
        // A url cannot be a secret reference yet, so a credential in it cannot be fixed in
        // place; the hints name the ways out.
        let before = self.problems.len();
        if url.password().is_some() {
            self.problems.push(
                Problem::new(path, "the url holds a password and must not be written inline").hint(
                    r#"send it as a header, e.g. headers = { Authorization = { env = "VAR", prefix = "Basic " } }"#,
                ),
            );
        }
        for (name, _) in url.query_pairs() {
            if looks_secret(&name) {
                self.problems.push(
                    Problem::new(
                        path,
                        format!("query parameter `{name}` looks like a secret and must not be written inline"),
                    )
                    .hint(r#"send it as a header with { env = "VAR" } if the server accepts one, or serve the mcpServers JSON file directly"#),
                );
            }
        }
        (self.problems.len() == before).then_some(url)
    }

    /// `suggested_var` is the variable named in the hint when a secret is written inline.
    fn value(
        &mut self,
        path: &str,
        name: &str,
        suggested_var: &str,
        value: ValueFile,
    ) -> Option<Value> {
        match value {
            ValueFile::Env { env, prefix } => {
                if env.is_empty() || env.contains(['=', '\0']) {
                    self.problems.push(Problem::new(
                        format!("{path}.env"),
                        "an environment variable name must be non-empty and contain neither `=` nor NUL",
                    ));
                    return None;
                }
                Some(Value::Env {
                    var: env,
                    prefix: prefix.unwrap_or_default(),
                })
            }
            ValueFile::Plain(text) => {
                if self.inline_secrets == InlineSecrets::Reject && looks_secret(name) {
                    // The hint may say whether the value had a `Bearer ` prefix, never the value.
                    let reference = match text.strip_prefix(BEARER) {
                        Some(_) => format!(r#"{{ env = "{suggested_var}", prefix = "{BEARER}" }}"#),
                        None => format!(r#"{{ env = "{suggested_var}" }}"#),
                    };
                    self.problems.push(
                        Problem::new(
                            path,
                            format!("`{name}` looks like a secret and must not be written inline"),
                        )
                        .hint(format!(
                            "write it as {reference} and export {suggested_var}"
                        )),
                    );
                    return None;
                }
                Some(Value::Plain(text))
            }
        }
    }
}

pub(crate) const BEARER: &str = "Bearer ";

/// The variable that holds a header's secret: `<SERVER>_<HEADER>` in upper snake case,
/// e.g. `DOCS_AUTHORIZATION` or `MY_API_X_API_KEY`.
pub(crate) fn header_var_name(server: &str, header: &str) -> String {
    let mut var = String::new();
    for c in format!("{server}_{header}").chars() {
        if c.is_ascii_alphanumeric() {
            var.push(c.to_ascii_uppercase());
        } else if !var.is_empty() && !var.ends_with('_') {
            var.push('_');
        }
    }
    let var = var.trim_end_matches('_');
    // A shell cannot `export 1PASSWORD_TOKEN`.
    if var.starts_with(|c: char| c.is_ascii_digit()) {
        format!("MCP_{var}")
    } else {
        var.to_owned()
    }
}

/// What to write instead of a bad `[network] allow` entry. The messages already quote the
/// entry and, where one is clear, the fix (`did you mean "10.0.0.0/8"?`); the hints add the
/// forms an entry can take.
fn rule_hint(error: &netguard::RuleError) -> &'static str {
    use netguard::RuleError as E;
    match error {
        E::Empty => "remove the empty entry, or name a host such as \"localhost\"",
        E::Cidr { .. } => {
            "a CIDR is the first address of a block and its prefix length, such as \"10.0.0.0/8\" or \"fd00::/8\""
        }
        E::Url { .. } => {
            "an entry names a host, optionally with a port; the scheme and path do not matter to it"
        }
        E::Port { .. } => {
            "write the port as a number after the host, such as \"localhost:3000\" or \"[::1]:3000\""
        }
        E::Wildcard { .. } => {
            "\"*.corp.example\" covers every name below corp.example (not corp.example itself)"
        }
        E::Invalid { .. } => {
            "write a host name (\"localhost\"), a wildcard (\"*.corp.example\"), an IP address (\"10.1.2.3\") or a CIDR (\"10.0.0.0/8\"), optionally with a port (\"localhost:3000\")"
        }
    }
}

/// RFC 9110 token characters.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// What `[store] url` names.
enum StoreUrl {
    Sqlite(String),
    Postgres(PostgresUrl),
    Invalid,
}

#[cfg(test)]
pub(crate) mod tests {
    use std::fmt::Write;

    use expect_test::{Expect, expect};

    use crate::{Config, Transport, Value, parse_toml};

    use super::*;

    /// A compact, value-revealing rendering for assertions (`Debug` redacts values).
    pub(crate) fn summary(config: &Config) -> String {
        let value = |v: &Value| match v {
            Value::Plain(text) => format!("{text:?}"),
            Value::Env { var, prefix } if prefix.is_empty() => format!("${var}"),
            Value::Env { var, prefix } => format!("{prefix:?}+${var}"),
        };
        let map = |m: &BTreeMap<String, Value>| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", value(v)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut out = format!(
            "listen={} exposure={:?} strategy={:?}\n",
            config.gateway.listen, config.gateway.exposure, config.retrieval.strategy
        );
        if !config.network.allow.is_empty() {
            let allow: Vec<String> = config.network.allow.iter().map(|r| r.to_string()).collect();
            let _ = writeln!(out, "network allow=[{}]", allow.join(", "));
        }
        for s in &config.servers {
            let _ = write!(
                out,
                "{} timeout={:?} enabled={}",
                s.name, s.timeout, s.enabled
            );
            if s.allow_private_network {
                out.push_str(" allow_private_network");
            }
            if let Some(description) = &s.description {
                let _ = write!(out, " description={description:?}");
            }
            let _ = match &s.transport {
                Transport::Stdio(t) => write!(
                    out,
                    "\n  stdio {:?} {:?} cwd={:?} env[{}]",
                    t.command,
                    t.args,
                    t.cwd,
                    map(&t.env)
                ),
                Transport::Http(t) => {
                    write!(out, "\n  http {} headers[{}]", t.url, map(&t.headers))
                }
                Transport::Sse(t) => write!(out, "\n  sse {} headers[{}]", t.url, map(&t.headers)),
            };
            let _ = match &s.auth {
                Auth::None => Ok(()),
                Auth::OAuth(o) => {
                    let url = |u: &Option<Url>| u.as_ref().map(Url::as_str).map(str::to_owned);
                    write!(
                        out,
                        "\n  auth oauth scopes={:?} client_id={:?} client_secret_env={:?} client_metadata_url={:?} redirect_uri={:?} authorization_params={:?} token_params={:?} resource={:?}",
                        o.scopes,
                        o.client_id,
                        o.client_secret_env,
                        url(&o.client_metadata_url),
                        url(&o.redirect_uri),
                        o.authorization_params,
                        o.token_params,
                        url(&o.resource),
                    )
                }
                auth => write!(out, "\n  auth {auth}"),
            };
            out.push('\n');
        }
        out
    }

    fn check(text: &str, expect: Expect) {
        let actual = match parse_toml(text, Path::new("/etc/mcpgw/mcpgw.toml")) {
            Ok(config) => summary(&config),
            Err(err) => err.to_string(),
        };
        expect.assert_eq(&actual);
    }

    const EXAMPLE: &str = r#"
[gateway]
listen = "127.0.0.1:8931"      # default
exposure = "search"            # or "passthrough"; default search

[[servers]]
name = "everything"
transport = { type = "stdio", command = "npx", args = ["-y", "@modelcontextprotocol/server-everything"] }

[[servers]]
name = "docs"
description = "Internal documentation search"
timeout_s = 60
enabled = true
transport = { type = "http", url = "https://mcp.example.com/mcp", headers = { "X-Team" = "infra" } }

[[servers]]
name = "legacy"
transport = { type = "sse", url = "http://127.0.0.1:3003/sse", headers = { Authorization = { env = "LEGACY_TOKEN", prefix = "Bearer " } } }

[retrieval]
strategy = "bm25"
"#;

    #[test]
    fn example_config_resolves() {
        check(
            EXAMPLE,
            expect![[r#"
                listen=127.0.0.1:8931 exposure=Search strategy=Bm25
                everything timeout=30s enabled=true
                  stdio "npx" ["-y", "@modelcontextprotocol/server-everything"] cwd=None env[]
                docs timeout=60s enabled=true description="Internal documentation search"
                  http https://mcp.example.com/mcp headers[X-Team="infra"]
                legacy timeout=30s enabled=true
                  sse http://127.0.0.1:3003/sse headers[Authorization="Bearer "+$LEGACY_TOKEN]
            "#]],
        );
    }

    #[test]
    fn refresh_defaults_to_an_hour_and_zero_turns_it_off() {
        let refresh = |line: &str| {
            let text = format!(
                "[[servers]]\nname = \"a\"\n{line}\ntransport = {{ type = \"stdio\", command = \"x\" }}\n"
            );
            match parse_toml(&text, Path::new("mcpgw.toml")) {
                Ok(config) => format!("{:?}", config.servers[0].refresh),
                Err(err) => err.to_string(),
            }
        };
        assert_eq!(refresh(""), "Some(3600s)");
        assert_eq!(refresh("refresh_s = 0"), "None");
        assert_eq!(refresh("refresh_s = 90"), "Some(90s)");
        assert_eq!(
            refresh("refresh_s = 5"),
            "invalid configuration (1 problem):\n  3:1: servers[0].refresh_s: refresh_s must be 0 (off) or between 10 and 604800 seconds, got 5 (hint: leave it out for the default of 3600 (an hour))"
        );
    }

    fn retrieval_summary(text: &str) -> String {
        match parse_toml(text, Path::new("/etc/mcpgw/mcpgw.toml")) {
            Ok(config) => format!(
                "{:?} balance={} min_similarity={:?} embedder={:?} store={:?}",
                config.retrieval.strategy,
                config.retrieval.balance,
                config.retrieval.min_similarity,
                config.retrieval.embedder,
                config.store.path
            ),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn retrieval_and_store_settings_resolve_with_defaults() {
        expect![[r#"Hybrid balance=65 min_similarity=None embedder=Local { model: "all-MiniLM-L6-v2", path: None, blend: Some(LocalBlend { model: "potion-base-8M", weight: 0.3 }) } store=None"#]]
            .assert_eq(&retrieval_summary(""));
        expect![[r#"Hybrid balance=70 min_similarity=Some(0.25) embedder=Local { model: "e5", path: Some("/etc/mcpgw/models/e5"), blend: None } store=Some("/etc/mcpgw/state/mcpgw.db")"#]]
            .assert_eq(&retrieval_summary(
                "[retrieval]\nstrategy = \"hybrid\"\nbalance = 70\nmin_similarity = 0.25\n[retrieval.embedder]\ntype = \"local\"\nmodel = \"e5\"\npath = \"models/e5\"\n[store]\npath = \"state/mcpgw.db\"\n",
            ));
        expect![[r#"Vector balance=65 min_similarity=None embedder=Remote(RemoteEmbedderConfig { base_url: Url { scheme: "https", cannot_be_a_base: false, username: "", password: None, host: Some(Domain("api.openai.com")), port: None, path: "/v1", query: None, fragment: None }, model: "text-embedding-3-small", api_key_env: Some("OPENAI_API_KEY"), batch_size: 16, timeout: 30s, retries: 3, dimensions: None }) store=None"#]]
            .assert_eq(&retrieval_summary(
                "[retrieval]\nstrategy = \"vector\"\n[retrieval.embedder]\ntype = \"remote\"\nbase_url = \"https://api.openai.com/v1\"\nmodel = \"text-embedding-3-small\"\napi_key_env = \"OPENAI_API_KEY\"\nbatch_size = 16\n",
            ));
        expect!["Hybrid balance=65 min_similarity=None embedder=None store=None"].assert_eq(
            &retrieval_summary("[retrieval.embedder]\ntype = \"none\"\n"),
        );
    }

    #[test]
    fn the_sparse_list_is_off_unless_asked_for() {
        let splade = |text: &str| {
            parse_toml(text, Path::new("mcpgw.toml"))
                .map(|config| config.retrieval.splade)
                .map_err(|err| err.to_string())
        };
        assert_eq!(splade(""), Ok(false));
        let fields = |text: &str| {
            parse_toml(text, Path::new("mcpgw.toml")).map(|config| config.retrieval.field_vectors)
        };
        assert!(fields("").expect("default"));
        assert!(!fields("[retrieval]\nfield_vectors = false\n").expect("off"));
        assert_eq!(splade("[retrieval]\nsplade = true\n"), Ok(true));
        assert!(splade("[retrieval]\nsplade = 1\n").is_err());
    }

    #[test]
    fn the_default_model_is_blended_with_potion_unless_told_otherwise() {
        let blend = |text: &str| {
            parse_toml(text, Path::new("mcpgw.toml"))
                .map(|config| match config.retrieval.embedder {
                    EmbedderConfig::Local { blend, .. } => format!("{blend:?}"),
                    other => format!("not local: {other:?}"),
                })
                .unwrap_or_else(|err| err.to_string())
        };
        let local = |keys: &str| blend(&format!("[retrieval.embedder]\ntype = \"local\"\n{keys}"));
        let default = r#"Some(LocalBlend { model: "potion-base-8M", weight: 0.3 })"#;
        assert_eq!(blend(""), default);
        assert_eq!(local(""), default);
        assert_eq!(local("model = \"MiniLM\"\n"), default);
        // The default blend is tuned for MiniLM: another model gets none unless asked.
        assert_eq!(local("model = \"e5\"\n"), "None");
        assert_eq!(
            local("model = \"e5\"\nblend = \"potion\"\n"),
            r#"Some(LocalBlend { model: "potion", weight: 0.3 })"#
        );
        assert_eq!(
            local("blend_weight = 0.5\n"),
            r#"Some(LocalBlend { model: "potion-base-8M", weight: 0.5 })"#
        );
        assert_eq!(local("blend = \"None\"\n"), "None");
        expect![[r#"
            invalid configuration (2 problems):
              3:1: retrieval.embedder.blend: blend model name is empty (hint: a local model such as "potion-base-8M", or "none")
              4:1: retrieval.embedder.blend_weight: blend_weight lies strictly between 0 and 1, got 1 (hint: set blend = "none" to search with the model alone)"#]].assert_eq(&local("blend = \" \"\nblend_weight = 1.0\n"));
        expect![[r#"
            invalid configuration (1 problem):
              4:1: retrieval.embedder.blend_weight: blend_weight is set but blend is "none" (hint: remove one of the two)"#]].assert_eq(&local("blend = \"none\"\nblend_weight = 0.2\n"));
    }

    #[test]
    fn fusion_is_by_scores_unless_ranks_are_asked_for() {
        let fusion = |text: &str| {
            parse_toml(text, Path::new("mcpgw.toml"))
                .map(|config| config.retrieval.fusion)
                .map_err(|err| err.to_string())
        };
        assert_eq!(fusion(""), Ok(crate::Fusion::Scores));
        assert_eq!(
            fusion("[retrieval]\nfusion = \"ranks\"\n"),
            Ok(crate::Fusion::Ranks)
        );
        assert_eq!(
            fusion("[retrieval]\nfusion = \"scores\"\n"),
            Ok(crate::Fusion::Scores)
        );
        let error = fusion("[retrieval]\nfusion = \"rrf\"\n").expect_err("unknown fusion");
        assert!(error.contains("fusion"), "{error}");
    }

    fn store_summary(text: &str) -> String {
        match parse_toml(text, Path::new("/etc/mcpgw/mcpgw.toml")) {
            Ok(config) => format!("{:?}", config.store),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn several_replicas_need_redis_and_postgres() {
        expect!["StoreConfig { path: None, postgres: Some(PostgresUrl(postgres://mcpgw@db.internal/mcpgw)), key_file: None, redis: Some(RedisUrl(redis://:***@cache.internal:6379/2)), replicas: Replicas(3), replica: None }"].assert_eq(&store_summary(
            "[store]\nurl = \"postgres://mcpgw@db.internal/mcpgw\"\nredis = \"redis://:hunter2@cache.internal:6379/2\"\nreplicas = 3\n",
        ));
        // One replica, the default, needs neither.
        expect![[r#"StoreConfig { path: Some("/etc/mcpgw/mcpgw.db"), postgres: None, key_file: None, redis: None, replicas: Replicas(1), replica: None }"#]].assert_eq(&store_summary(
            "[store]\npath = \"mcpgw.db\"\nreplicas = 1\n",
        ));
        expect![[r#"
            invalid configuration (2 problems):
              1:2: store.redis: `replicas = 3` needs Redis, and no `redis` is set (hint: set `redis = "redis://HOST:6379/"`: replicas share approval decisions, catalog changes and rate limits through it (or set `replicas = 1`))
              1:2: store.url: `replicas = 3` needs PostgreSQL, and the store is SQLite (hint: set `url = "postgres://USER@HOST/DATABASE"` (move an existing database with `mcpgw store copy`): a SQLite file cannot be shared by replicas)"#]].assert_eq(&store_summary(
            "[store]\nreplicas = 3\n",
        ));
        expect![[r#"
            invalid configuration (1 problem):
              1:2: store.url: `replicas = 2` needs PostgreSQL, and the store is SQLite (hint: set `url = "postgres://USER@HOST/DATABASE"` (move an existing database with `mcpgw store copy`): a SQLite file cannot be shared by replicas)"#]].assert_eq(&store_summary(
            "[store]\nredis = \"redis://127.0.0.1/\"\nreplicas = 2\n",
        ));
        expect![[r#"
            invalid configuration (1 problem):
              3:1: store.replicas: 0 is out of range (1 to 1024) (hint: the number of `mcpgw serve` processes sharing this store; 1 when it runs alone)"#]].assert_eq(&store_summary(
            "[store]\nurl = \"postgres://db/mcpgw\"\nreplicas = 0\n",
        ));
    }

    #[test]
    fn a_redis_url_is_checked_and_never_shown() {
        for (url, why) in [
            (
                "rediss://:hunter2@cache/",
                "TLS to Redis (rediss://) is not supported yet",
            ),
            ("http://:hunter2@cache/", "not a Redis URL"),
            (
                "redis://:hunter2@cache/zero",
                "the path of a Redis URL is a database number",
            ),
            ("redis://:hunter2@:6379/", "not a valid Redis URL"),
        ] {
            let summary = store_summary(&format!("[store]\nredis = {url:?}\n"));
            assert!(summary.contains("store.redis: "), "{url}: {summary}");
            assert!(summary.contains(why), "{url}: {summary}");
            assert!(!summary.contains("hunter2"), "{url}: {summary}");
        }
    }

    #[test]
    fn a_redis_url_can_come_from_the_environment() {
        // A variable no test sets: named in the problem, and nothing else said of it.
        let summary =
            store_summary("[store]\nredis = { env = \"MCPGW_TEST_SURELY_UNSET_REDIS_URL\" }\n");
        assert!(
            summary.contains(
                "store.redis: the environment variable MCPGW_TEST_SURELY_UNSET_REDIS_URL is not set"
            ),
            "{summary}"
        );
        // A variable every process has: read, then checked like a written URL (and not shown).
        let path = std::env::var("PATH").expect("PATH");
        let summary = store_summary("[store]\nredis = { env = \"PATH\" }\n");
        assert!(
            summary.contains("store.redis: not a Redis URL"),
            "{summary}"
        );
        assert!(!summary.contains(&path), "{summary}");
        let summary = store_summary("[store]\nredis = { env = \"PATH\", prefix = \"x\" }\n");
        assert!(summary.contains("store.redis"), "{summary}");
    }

    #[test]
    fn store_replica_names_are_checked() {
        expect![[r#"StoreConfig { path: None, postgres: None, key_file: None, redis: None, replicas: Replicas(1), replica: Some("gw-1") }"#]]
        .assert_eq(&store_summary("[store]\nreplica = \" gw-1 \"\n"));
        expect![[r#"
            invalid configuration (1 problem):
              2:1: store.replica: replica name may hold only ASCII letters, digits, '.', '_' and '-' (hint: a short name such as "gw-1"; leave it out for the host name)"#]]
        .assert_eq(&store_summary("[store]\nreplica = \"gw 1\"\n"));
    }

    #[test]
    fn store_urls_resolve_and_never_show_a_password() {
        expect![[r#"StoreConfig { path: Some("/etc/mcpgw/state/mcpgw.db"), postgres: None, key_file: Some("/etc/mcpgw/keys/secret.key"), redis: None, replicas: Replicas(1), replica: None }"#]].assert_eq(&store_summary(
            "[store]\nurl = \"sqlite://state/mcpgw.db\"\nkey_file = \"keys/secret.key\"\n",
        ));
        expect!["StoreConfig { path: None, postgres: Some(PostgresUrl(postgres://mcpgw:***@db.internal:5432/mcpgw?sslmode=require&password=***)), key_file: None, redis: None, replicas: Replicas(1), replica: None }"].assert_eq(&store_summary(
            "[store]\nurl = \"postgres://mcpgw:hunter2@db.internal:5432/mcpgw?sslmode=require&password=hunter2\"\n",
        ));
        expect![[r#"
            invalid configuration (2 problems):
              3:1: store.url: both `path` and `url` are set (hint: keep one: `url = "sqlite://PATH"` is the same as `path = "PATH"`)
              4:1: store.key_file: path is empty (hint: leave it out to use MCPGW_SECRET_KEY or secret.key beside the database)"#]].assert_eq(&store_summary(
            "[store]\npath = \"a.db\"\nurl = \"sqlite://b.db\"\nkey_file = \"\"\n",
        ));
        expect![[r#"
            invalid configuration (1 problem):
              2:1: store.url: 'mysql' is not a supported database (sqlite or postgres) (hint: use sqlite://PATH, or postgres://USER@HOST[:PORT]/DATABASE (the password in PGPASSWORD or ~/.pgpass, or in the URL))"#]].assert_eq(&store_summary(
            "[store]\nurl = \"mysql://root:hunter2@db/mcpgw\"\n",
        ));
        expect![[r#"
            invalid configuration (1 problem):
              2:1: store.url: not a valid PostgreSQL URL (empty host) (hint: use sqlite://PATH, or postgres://USER@HOST[:PORT]/DATABASE (the password in PGPASSWORD or ~/.pgpass, or in the URL))"#]].assert_eq(&store_summary(
            "[store]\nurl = \"postgres://mcpgw:hunter2@:5432/mcpgw\"\n",
        ));
        expect![[r#"
            invalid configuration (1 problem):
              2:1: store.url: not a valid PostgreSQL URL (invalid port number) (hint: use sqlite://PATH, or postgres://USER@HOST[:PORT]/DATABASE (the password in PGPASSWORD or ~/.pgpass, or in the URL))"#]].assert_eq(&store_summary(
            "[store]\nurl = \"postgres://mcpgw:hunter2@db:port/mcpgw\"\n",
        ));
    }

    #[test]
    fn retrieval_problems_are_all_reported() {
        expect![[r#"
            invalid configuration (5 problems):
              2:1: retrieval.balance: balance must be 0 to 100, got 101 (hint: 0 is lexical (BM25) only, 100 semantic only, 50 an even blend)
              3:1: retrieval.min_similarity: min_similarity is a cosine similarity from -1 to 1, got 2 (hint: leave it out to keep every vector hit)
              4:12: retrieval.embedder.model: missing model (hint: the model name the endpoint expects, such as "text-embedding-3-small")
              6:1: retrieval.embedder.base_url: url scheme `ftp` is not supported (hint: use an http:// or https:// url)
              7:1: retrieval.embedder.batch_size: batch_size must be 1 to 2048, got 0"#]]
        .assert_eq(&retrieval_summary(
            "[retrieval]\nbalance = 101\nmin_similarity = 2.0\n[retrieval.embedder]\ntype = \"remote\"\nbase_url = \"ftp://x\"\nbatch_size = 0\n",
        ));
        let unknown = retrieval_summary("[retrieval.embedder]\ntype = \"local\"\nmodle = \"x\"\n");
        assert!(
            unknown.contains(
                "3:1: retrieval.embedder.modle: unknown key (hint: did you mean `model`?)"
            ),
            "{unknown}"
        );
    }

    fn audit_summary(text: &str) -> String {
        match parse_toml(text, Path::new("/etc/mcpgw/mcpgw.toml")) {
            Ok(config) => format!(
                "{:?} retention_days={:?} prunes={}",
                config.audit,
                config.audit.retention_days(),
                config.audit.prunes()
            ),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn audit_retention_defaults_to_90_days_and_a_million_rows_and_zero_turns_it_off() {
        expect!["AuditConfig { retention: Some(7776000s), max_rows: Some(1000000) } retention_days=Some(90) prunes=true"]
            .assert_eq(&audit_summary(""));
        expect!["AuditConfig { retention: Some(7776000s), max_rows: Some(1000000) } retention_days=Some(90) prunes=true"]
            .assert_eq(&audit_summary("[audit]\n"));
        expect!["AuditConfig { retention: Some(604800s), max_rows: Some(1000000) } retention_days=Some(7) prunes=true"]
            .assert_eq(&audit_summary("[audit]\nretention_days = 7\n"));
        expect![
            "AuditConfig { retention: None, max_rows: Some(5000) } retention_days=None prunes=true"
        ]
        .assert_eq(&audit_summary(
            "[audit]\nretention_days = 0\nmax_rows = 5000\n",
        ));
        expect!["AuditConfig { retention: Some(7776000s), max_rows: None } retention_days=Some(90) prunes=true"]
            .assert_eq(&audit_summary("[audit]\nmax_rows = 0\n"));
        expect!["AuditConfig { retention: None, max_rows: None } retention_days=None prunes=false"]
            .assert_eq(&audit_summary(
                "[audit]\nretention_days = 0\nmax_rows = 0\n",
            ));
        expect!["AuditConfig { retention: Some(3153600000s), max_rows: Some(1000000000) } retention_days=Some(36500) prunes=true"]
            .assert_eq(&audit_summary(
                "[audit]\nretention_days = 36500\nmax_rows = 1000000000\n",
            ));
    }

    #[test]
    fn negative_and_absurd_audit_bounds_are_reported_with_their_range() {
        expect![[r#"
            invalid configuration (2 problems):
              2:1: audit.retention_days: retention_days must be 0 (keep forever) or between 1 and 36500 days, got -1 (hint: leave it out for the default of 90)
              3:1: audit.max_rows: max_rows must be 0 (no cap) or between 1 and 1000000000, got -5 (hint: leave it out for the default of 1000000)"#]]
        .assert_eq(&audit_summary(
            "[audit]\nretention_days = -1\nmax_rows = -5\n",
        ));
        expect![[r#"
            invalid configuration (2 problems):
              2:1: audit.retention_days: retention_days must be 0 (keep forever) or between 1 and 36500 days, got 36501 (hint: leave it out for the default of 90)
              3:1: audit.max_rows: max_rows must be 0 (no cap) or between 1 and 1000000000, got 9223372036854775807 (hint: leave it out for the default of 1000000)"#]]
        .assert_eq(&audit_summary(
            "[audit]\nretention_days = 36501\nmax_rows = 9223372036854775807\n",
        ));
    }

    #[test]
    fn empty_file_is_a_config_without_servers() {
        check(
            "",
            expect![[r#"
                listen=127.0.0.1:8931 exposure=Search strategy=Hybrid
            "#]],
        );
        check(
            "[gateway]\nexposure = \"passthrough\"\nlisten = \"[::1]:9000\"\n",
            expect![[r#"
                listen=[::1]:9000 exposure=Passthrough strategy=Hybrid
            "#]],
        );
    }

    #[test]
    fn client_auth_fields_default_to_keys_when_stored_and_open_loopback() {
        let parse = |text: &str| {
            parse_toml(text, Path::new("/etc/mcpgw/mcpgw.toml"))
                .map(|c| {
                    (
                        c.gateway.client_auth,
                        c.gateway.allow_unauthenticated_loopback,
                    )
                })
                .map_err(|e| e.to_string())
        };
        assert_eq!(parse(""), Ok((crate::ClientAuth::Auto, true)));
        assert_eq!(
            parse("[gateway]\nclient_auth = \"api_key\"\nallow_unauthenticated_loopback = false\n"),
            Ok((crate::ClientAuth::ApiKey, false))
        );
        let bad = parse("[gateway]\nclient_auth = \"jwt\"\n").expect_err("unknown mode");
        assert!(bad.contains("unknown value `jwt`"), "{bad}");
    }

    #[test]
    fn allowed_hosts_and_origins_are_normalised_and_every_bad_one_reported() {
        let parsed = parse_toml(
            "[gateway]\nallowed_hosts = [\"MCPGW.internal.\", \"localhost:9000\"]\nallowed_origins = [\"http://localhost:6274\", \"https://App.example\"]\n",
            Path::new("/etc/mcpgw/mcpgw.toml"),
        )
        .expect("valid");
        let hosts: Vec<String> = parsed
            .gateway
            .allowed_hosts
            .iter()
            .map(ToString::to_string)
            .collect();
        let origins: Vec<String> = parsed
            .gateway
            .allowed_origins
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(hosts, ["mcpgw.internal", "localhost:9000"]);
        assert_eq!(
            origins,
            ["http://localhost:6274", "https://app.example:443"]
        );
        let bad = parse_toml(
            "[gateway]\nallowed_hosts = [\"ok.example\", \"https://gw.example\"]\nallowed_origins = [\"null\", \"https://app.example/path\"]\n",
            Path::new("/etc/mcpgw/mcpgw.toml"),
        )
        .expect_err("invalid")
        .to_string();
        for path in [
            "gateway.allowed_hosts[1]",
            "gateway.allowed_origins[0]",
            "gateway.allowed_origins[1]",
        ] {
            assert!(bad.contains(path), "{path}: {bad}");
        }
        assert!(!bad.contains("allowed_hosts[0]"), "{bad}");
    }

    #[test]
    fn log_format_defaults_to_text_and_suggests_a_near_miss() {
        let parse = |text: &str| {
            parse_toml(text, Path::new("/etc/mcpgw/mcpgw.toml"))
                .map(|c| c.gateway.log_format)
                .map_err(|e| e.to_string())
        };
        assert_eq!(parse(""), Ok(crate::LogFormat::Text));
        assert_eq!(
            parse("[gateway]\nlog_format = \"json\"\n"),
            Ok(crate::LogFormat::Json)
        );
        let bad = parse("[gateway]\nlog_format = \"jsno\"\n").expect_err("unknown format");
        assert!(bad.contains("2:14: gateway.log_format"), "{bad}");
        assert!(bad.contains("did you mean `json`"), "{bad}");
    }

    #[test]
    fn prefix_defaults_to_always() {
        let parse = |text: &str| {
            parse_toml(text, Path::new("/etc/mcpgw/mcpgw.toml"))
                .map(|c| c.gateway.prefix)
                .map_err(|e| e.to_string())
        };
        assert_eq!(parse(""), Ok(crate::Prefix::Always));
        assert_eq!(
            parse("[gateway]\nprefix = \"when-needed\"\n"),
            Ok(crate::Prefix::WhenNeeded)
        );
        let bad = parse("[gateway]\nprefix = \"never\"\n").expect_err("unknown mode");
        assert!(
            bad.contains("unknown value `never` (hint: use one of `always`, `when-needed`)"),
            "{bad}"
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        check(
            r#"
[gateway]
listen = "localhost:8931"

[[servers]]
name = "bad name"
transport = { type = "stdio", command = "" }

[[servers]]
name = "dup"
timeout_s = 0
transport = { type = "http", url = "ftp://example.com/mcp" }

[[servers]]
name = "dup"
timeout_s = 301
transport = { type = "http", url = "https://example.com/mcp", headers = { Authorization = "Bearer sk-live-123" } }

[[servers]]
name = "a__b"
transport = { type = "sse", url = "not a url" }

[[servers]]
name = "keyed"
transport = { type = "http", url = "https://me:hunter2@example.com/mcp?api_key=sk-123&profile=x" }

[[servers]]
description = "no name, no transport"
"#,
            expect![[r#"
                invalid configuration (14 problems):
                  3:1: gateway.listen: `localhost:8931` is not an IP address and port (hint: write it like "127.0.0.1:8931"; host names are not accepted)
                  6:1: servers[0].name: invalid server name `bad name`: contains ' '; only letters, digits, `-` and `_` are allowed (hint: use 1 to 32 letters, digits, `-` and `_`, such as "github" or "my-docs")
                  7:31: servers[0].transport.command: command must not be empty
                  11:1: servers[1].timeout_s: timeout must be between 1 and 300 seconds, got 0 (hint: leave it out for the default of 30)
                  12:30: servers[1].transport.url: url scheme `ftp` is not supported (hint: use an http:// or https:// url)
                  15:1: servers[2].name: duplicate server name `dup`, first used at servers[1].name (hint: server names must be unique; rename one of them)
                  16:1: servers[2].timeout_s: timeout must be between 1 and 300 seconds, got 301 (hint: leave it out for the default of 30)
                  17:75: servers[2].transport.headers.Authorization: `Authorization` looks like a secret and must not be written inline (hint: write it as { env = "DUP_AUTHORIZATION", prefix = "Bearer " } and export DUP_AUTHORIZATION)
                  20:1: servers[3].name: invalid server name `a__b`: must not contain `__`, which separates server and tool in qualified tool names (hint: use 1 to 32 letters, digits, `-` and `_`, such as "github" or "my-docs")
                  21:29: servers[3].transport.url: invalid url: relative URL without a base (hint: write an absolute url such as "https://mcp.example.com/mcp")
                  25:30: servers[4].transport.url: the url holds a password and must not be written inline (hint: send it as a header, e.g. headers = { Authorization = { env = "VAR", prefix = "Basic " } })
                  25:30: servers[4].transport.url: query parameter `api_key` looks like a secret and must not be written inline (hint: send it as a header with { env = "VAR" } if the server accepts one, or serve the mcpServers JSON file directly)
                  27:1: servers[5].name: missing server name (hint: add name = "..." using letters, digits, `-` and `_`)
                  27:1: servers[5].transport: missing transport (hint: add transport = { type = "stdio", command = "..." } or { type = "http", url = "https://..." })"#]],
        );
    }

    #[test]
    fn inline_secrets_are_rejected_without_echoing_them() {
        let text = r#"
[[servers]]
name = "gh"
transport = { type = "stdio", command = "gh-mcp", env = { GITHUB_TOKEN = "ghp_SECRET1", OPENAI_API_KEY = "sk-SECRET2", PATH = "/usr/bin", NODE_ENV = "production", HOME = "/home/me" } }

[[servers]]
name = "api"
transport = { type = "http", url = "https://api.example.com/mcp", headers = { "X-Api-Key" = "SECRET3", "X-Team" = "infra", Cookie = "session=SECRET4" } }
"#;
        let err = parse_toml(text, Path::new("mcpgw.toml"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!err.contains("SECRET"), "{err}");
        check(
            text,
            expect![[r#"
                invalid configuration (4 problems):
                  4:59: servers[0].transport.env.GITHUB_TOKEN: `GITHUB_TOKEN` looks like a secret and must not be written inline (hint: write it as { env = "GITHUB_TOKEN" } and export GITHUB_TOKEN)
                  4:89: servers[0].transport.env.OPENAI_API_KEY: `OPENAI_API_KEY` looks like a secret and must not be written inline (hint: write it as { env = "OPENAI_API_KEY" } and export OPENAI_API_KEY)
                  8:79: servers[1].transport.headers.X-Api-Key: `X-Api-Key` looks like a secret and must not be written inline (hint: write it as { env = "API_X_API_KEY" } and export API_X_API_KEY)
                  8:124: servers[1].transport.headers.Cookie: `Cookie` looks like a secret and must not be written inline (hint: write it as { env = "API_COOKIE" } and export API_COOKIE)"#]],
        );
    }

    #[test]
    fn secret_references_and_plain_values_resolve() {
        check(
            r#"
[[servers]]
name = "gh"
transport = { type = "stdio", command = "gh-mcp", env = { GITHUB_TOKEN = { env = "GH_PAT" }, LOG = "debug" } }

[[servers]]
name = "api"
enabled = false
transport = { type = "http", url = "https://api.example.com/mcp", headers = { "X-Api-Key" = { env = "API_KEY" }, x-team = "infra" } }
"#,
            expect![[r#"
                listen=127.0.0.1:8931 exposure=Search strategy=Hybrid
                gh timeout=30s enabled=true
                  stdio "gh-mcp" [] cwd=None env[GITHUB_TOKEN=$GH_PAT LOG="debug"]
                api timeout=30s enabled=false
                  http https://api.example.com/mcp headers[X-Api-Key=$API_KEY x-team="infra"]
            "#]],
        );
    }

    #[test]
    fn bad_header_names_and_env_references() {
        check(
            r#"
[[servers]]
name = "api"
transport = { type = "http", url = "https://api.example.com/mcp", headers = { x-team = "infra", X-TEAM = "ops", "Bad Header" = "x", X-Evil = { env = "" }, X-Multi = "a\r\nHost: evil" } }
"#,
            expect![[r#"
                invalid configuration (4 problems):
                  4:79: servers[0].transport.headers.x-team: header `x-team` is also given as `X-TEAM` (hint: header names are case-insensitive; keep one)
                  4:113: servers[0].transport.headers.Bad Header: `Bad Header` is not a valid HTTP header name
                  4:144: servers[0].transport.headers.X-Evil.env: an environment variable name must be non-empty and contain neither `=` nor NUL
                  4:156: servers[0].transport.headers.X-Multi: a header value must not contain line breaks"#]],
        );
    }

    #[test]
    fn auth_strategies_resolve() {
        check(
            r#"
[[servers]]
name = "gh"
auth = { type = "bearer", env = "GITHUB_TOKEN" }
transport = { type = "http", url = "https://api.githubcopilot.com/mcp/" }

[[servers]]
name = "keyed"
auth = { type = "header", name = "X-Api-Key", env = "API_KEY" }
transport = { type = "sse", url = "https://keyed.example.com/sse", headers = { X-Team = "infra" } }

[[servers]]
name = "token"
auth = { type = "header", name = "Authorization", scheme = "Token", env = "TOK" }
transport = { type = "http", url = "https://token.example.com/mcp" }

[[servers]]
name = "open"
auth = { type = "none" }
transport = { type = "http", url = "https://open.example.com/mcp" }

[[servers]]
name = "local"
auth = { type = "none" }
transport = { type = "stdio", command = "run" }

[[servers]]
name = "minimal"
auth = { type = "oauth" }
transport = { type = "http", url = "https://minimal.example.com/mcp" }

[[servers]]
name = "full"
transport = { type = "http", url = "https://full.example.com/mcp" }

[servers.auth]
type = "oauth"
scopes = ["read", "repo:write"]
client_id = "mcpgw-client"
client_secret_env = "FULL_CLIENT_SECRET"
redirect_uri = "http://127.0.0.1:8765/callback"
authorization_params = { prompt = "consent", audience = "https://api.example.com" }
token_params = { audience = "https://api.example.com" }
resource = "https://full.example.com/"

[[servers]]
name = "cimd"
transport = { type = "http", url = "https://cimd.example.com/mcp" }
auth = { type = "oauth", client_metadata_url = "https://mcpgw.example.com/oauth/client.json" }

[[servers]]
name = "cimd-local"
transport = { type = "http", url = "https://cimd.example.com/mcp" }
auth = { type = "oauth", client_metadata_url = "https://localhost:9000/client.json", redirect_uri = "http://[::1]:9001/cb" }
"#,
            expect![[r#"
                listen=127.0.0.1:8931 exposure=Search strategy=Hybrid
                gh timeout=30s enabled=true
                  http https://api.githubcopilot.com/mcp/ headers[]
                  auth bearer token from GITHUB_TOKEN
                keyed timeout=30s enabled=true
                  sse https://keyed.example.com/sse headers[X-Team="infra"]
                  auth header X-Api-Key: <API_KEY>
                token timeout=30s enabled=true
                  http https://token.example.com/mcp headers[]
                  auth header Authorization: Token <TOK>
                open timeout=30s enabled=true
                  http https://open.example.com/mcp headers[]
                local timeout=30s enabled=true
                  stdio "run" [] cwd=None env[]
                minimal timeout=30s enabled=true
                  http https://minimal.example.com/mcp headers[]
                  auth oauth scopes=[] client_id=None client_secret_env=None client_metadata_url=None redirect_uri=None authorization_params={} token_params={} resource=None
                full timeout=30s enabled=true
                  http https://full.example.com/mcp headers[]
                  auth oauth scopes=["read", "repo:write"] client_id=Some("mcpgw-client") client_secret_env=Some("FULL_CLIENT_SECRET") client_metadata_url=None redirect_uri=Some("http://127.0.0.1:8765/callback") authorization_params={"audience": "https://api.example.com", "prompt": "consent"} token_params={"audience": "https://api.example.com"} resource=Some("https://full.example.com/")
                cimd timeout=30s enabled=true
                  http https://cimd.example.com/mcp headers[]
                  auth oauth scopes=[] client_id=None client_secret_env=None client_metadata_url=Some("https://mcpgw.example.com/oauth/client.json") redirect_uri=None authorization_params={} token_params={} resource=None
                cimd-local timeout=30s enabled=true
                  http https://cimd.example.com/mcp headers[]
                  auth oauth scopes=[] client_id=None client_secret_env=None client_metadata_url=Some("https://localhost:9000/client.json") redirect_uri=Some("http://[::1]:9001/cb") authorization_params={} token_params={} resource=None
            "#]],
        );
    }

    #[test]
    fn auth_problems_are_all_reported() {
        check(
            r#"
[[servers]]
name = "no-env"
auth = { type = "bearer" }
transport = { type = "http", url = "https://a.example.com/mcp" }

[[servers]]
name = "bad-env"
auth = { type = "bearer", env = "MY-TOKEN" }
transport = { type = "http", url = "https://a.example.com/mcp" }

[[servers]]
name = "no-name"
auth = { type = "header", env = "K" }
transport = { type = "http", url = "https://a.example.com/mcp" }

[[servers]]
name = "bad-name"
auth = { type = "header", name = "X Api Key", scheme = "Two words", env = "K" }
transport = { type = "http", url = "https://a.example.com/mcp" }

[[servers]]
name = "reserved"
auth = { type = "header", name = "Mcp-Session-Id", scheme = "", env = "K" }
transport = { type = "sse", url = "https://a.example.com/sse" }

[[servers]]
name = "local"
auth = { type = "bearer", env = "GITHUB_TOKEN" }
transport = { type = "stdio", command = "gh-mcp" }

[[servers]]
name = "local-oauth"
auth = { type = "oauth" }
transport = { type = "stdio", command = "gh-mcp" }

[[servers]]
name = "oauth"
transport = { type = "http", url = "https://a.example.com/mcp" }

[servers.auth]
type = "oauth"
scopes = ["read write", ""]
client_id = " "
client_secret_env = "SECRET=1"
client_metadata_url = "http://cimd.example.com/client.json"
redirect_uri = "https://127.0.0.1:8765/callback"
authorization_params = { state = "x", scope = "read", client_secret = "x", "" = "y" }
token_params = { grant_type = "x", client_secret = "x", code_verifier = "v", resource = "r" }
resource = "urn:example:api"

[[servers]]
name = "oauth-urls"
transport = { type = "http", url = "https://a.example.com/mcp" }

[servers.auth]
type = "oauth"
client_id = "registered"
client_metadata_url = "https://cimd.example.com/"
redirect_uri = "http://127.0.0.1/callback"
resource = "https://me:pw@a.example.com/#frag"

[[servers]]
name = "oauth-more"
transport = { type = "http", url = "https://a.example.com/mcp" }
auth = { type = "oauth", client_metadata_url = "not a url", redirect_uri = "http://example.com:80/cb", resource = "https://a.example.com/#x" }

[[servers]]
name = "oauth-sse"
transport = { type = "sse", url = "https://a.example.com/sse" }
auth = { type = "oauth" }

[[servers]]
name = "oauth-cimd-http"
transport = { type = "http", url = "https://a.example.com/mcp" }
auth = { type = "oauth", client_metadata_url = "http://localhost:9000/client.json" }
"#,
            expect![[r#"
                invalid configuration (34 problems):
                  4:1: servers[0].auth.env: missing env (hint: name the environment variable that holds the credential, such as env = "NO_ENV_TOKEN")
                  9:27: servers[1].auth.env: not a valid environment variable name (hint: write the name of the variable that holds the credential, such as env = "BAD_ENV_TOKEN", and export it)
                  14:1: servers[2].auth.name: missing header name (hint: name the header the server reads the credential from, such as name = "X-Api-Key")
                  19:27: servers[3].auth.name: `X Api Key` is not a valid HTTP header name
                  19:47: servers[3].auth.scheme: the scheme must be one word, such as "Token" or "Bearer" (hint: leave it out to send the variable's value as it is)
                  24:27: servers[4].auth.name: `Mcp-Session-Id` is set by the transport and cannot carry a credential (hint: use the header the server documents, such as X-Api-Key or Authorization)
                  24:52: servers[4].auth.scheme: the scheme must be one word, such as "Token" or "Bearer" (hint: leave it out to send the variable's value as it is)
                  29:1: servers[5].auth: auth applies to http and sse servers, not to stdio (hint: a stdio server gets credentials through its environment: transport.env = { GITHUB_TOKEN = { env = "GITHUB_TOKEN" } })
                  34:1: servers[6].auth: auth applies to http and sse servers, not to stdio (hint: a stdio server gets credentials through its environment: transport.env = { LOCAL_OAUTH_TOKEN = { env = "LOCAL_OAUTH_TOKEN" } })
                  43:11: servers[7].auth.scopes[0]: "read write" is not a valid scope (hint: a scope is one word of visible ASCII without `"` or `\`; write each as its own item: scopes = ["read", "write"])
                  43:25: servers[7].auth.scopes[1]: "" is not a valid scope (hint: a scope is one word of visible ASCII without `"` or `\`; write each as its own item: scopes = ["read", "write"])
                  44:1: servers[7].auth.client_id: client_id is empty (hint: leave it out to register mcpgw with the authorization server automatically)
                  45:1: servers[7].auth.client_secret_env: not a valid environment variable name (hint: write the name of the variable that holds the client secret, such as "OAUTH_CLIENT_SECRET", and export it)
                  45:1: servers[7].auth.client_secret_env: a client secret needs the client_id it was issued with (hint: add client_id = "..." as registered with the authorization server)
                  46:1: servers[7].auth.client_metadata_url: a client ID metadata document must be served over https (hint: use an https:// url, or leave it out to register mcpgw with the authorization server automatically)
                  47:1: servers[7].auth.redirect_uri: redirect_uri must be an http:// address on this machine (hint: mcpgw receives the sign-in answer itself: use http://127.0.0.1:PORT/callback (or localhost, [::1]))
                  48:1: servers[7].auth.authorization_params."": a parameter name must not be empty
                  48:26: servers[7].auth.authorization_params.state: `state` is set by the OAuth flow (hint: leave it out)
                  48:39: servers[7].auth.authorization_params.scope: `scope` is set by the OAuth flow (hint: use scopes = ["..."] in the auth table)
                  48:55: servers[7].auth.authorization_params.client_secret: `client_secret` looks like a secret and must not be written inline (hint: only the client secret is read from the environment, with client_secret_env)
                  49:18: servers[7].auth.token_params.grant_type: `grant_type` is set by the OAuth flow (hint: leave it out)
                  49:36: servers[7].auth.token_params.client_secret: `client_secret` is set by the OAuth flow (hint: use client_secret_env = "VAR" in the auth table)
                  49:57: servers[7].auth.token_params.code_verifier: `code_verifier` is set by the OAuth flow (hint: leave it out)
                  49:78: servers[7].auth.token_params.resource: `resource` is set by the OAuth flow (hint: use resource = "..." in the auth table)
                  50:1: servers[7].auth.resource: url scheme `urn` is not supported (hint: leave it out to use the server's url)
                  59:1: servers[8].auth.client_metadata_url: give either client_id or client_metadata_url, not both (hint: the url of a client ID metadata document is itself the client ID)
                  59:1: servers[8].auth.client_metadata_url: the url needs a path naming the document (hint: such as "https://example.com/oauth/mcpgw.json")
                  60:1: servers[8].auth.redirect_uri: redirect_uri needs an explicit port (hint: the port registered with the authorization server, such as http://127.0.0.1:8765/callback)
                  61:1: servers[8].auth.resource: the url must not hold a user name or password
                  66:26: servers[9].auth.client_metadata_url: invalid url: relative URL without a base (hint: write an absolute url such as "https://example.com/path")
                  66:61: servers[9].auth.redirect_uri: redirect_uri must be an http:// address on this machine (hint: mcpgw receives the sign-in answer itself: use http://127.0.0.1:PORT/callback (or localhost, [::1]))
                  66:104: servers[9].auth.resource: the url must not have a fragment (`#...`)
                  71:1: servers[10].auth: oauth is supported for http servers, not for sse (hint: use transport = { type = "http", url = "..." } if the server speaks Streamable HTTP, or a bearer token)
                  76:26: servers[11].auth.client_metadata_url: a client ID metadata document must be served over https (hint: use an https:// url, or leave it out to register mcpgw with the authorization server automatically)"#]],
        );
    }

    #[test]
    fn auth_problems_never_echo_a_pasted_token() {
        let text = r#"
[[servers]]
name = "gh"
auth = { type = "bearer", env = "ghp_PASTED16C7e42F292c6912E7710c838347Ae178B" }
transport = { type = "http", url = "https://api.example.com/mcp" }

[[servers]]
name = "api"
auth = { type = "header", name = "X-Api-Key", env = "sk-PASTED-123" }
transport = { type = "http", url = "https://api.example.com/mcp" }

[[servers]]
name = "oauth"
auth = { type = "oauth", client_id = "c", client_secret_env = "PASTEDz9f0A8b7C6d5E4f3G2h1" }
transport = { type = "http", url = "https://api.example.com/mcp" }
"#;
        let err = parse_toml(text, Path::new("mcpgw.toml"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!err.contains("PASTED"), "{err}");
        check(
            text,
            expect![[r#"
                invalid configuration (3 problems):
                  4:27: servers[0].auth.env: this looks like a token, not the name of an environment variable (hint: write the name of the variable that holds the credential, such as env = "GH_TOKEN", and export it)
                  9:47: servers[1].auth.env: not a valid environment variable name (hint: write the name of the variable that holds the credential, such as env = "API_TOKEN", and export it)
                  14:43: servers[2].auth.client_secret_env: this looks like a token, not the name of an environment variable (hint: write the name of the variable that holds the client secret, such as "OAUTH_CLIENT_SECRET", and export it)"#]],
        );
    }

    #[test]
    fn relative_cwd_is_anchored_at_the_config_file() {
        check(
            "[[servers]]\nname = \"s\"\ntransport = { type = \"stdio\", command = \"run\", cwd = \"srv\" }\n\n[[servers]]\nname = \"t\"\ntransport = { type = \"stdio\", command = \"run\", cwd = \"/opt/t\" }\n",
            expect![[r#"
                listen=127.0.0.1:8931 exposure=Search strategy=Hybrid
                s timeout=30s enabled=true
                  stdio "run" [] cwd=Some("/etc/mcpgw/srv") env[]
                t timeout=30s enabled=true
                  stdio "run" [] cwd=Some("/opt/t") env[]
            "#]],
        );
    }

    #[test]
    fn lookup_by_name_and_enabled_filter() {
        let text = "[[servers]]\nname = \"on\"\ntransport = { type = \"stdio\", command = \"a\" }\n\n[[servers]]\nname = \"off\"\nenabled = false\ntransport = { type = \"stdio\", command = \"b\" }\n";
        let config = parse_toml(text, Path::new("mcpgw.toml"));
        let config = config.as_ref().ok();
        assert_eq!(
            config.and_then(|c| c.server("off")).map(|s| s.enabled),
            Some(false)
        );
        assert!(config.and_then(|c| c.server("missing")).is_none());
        let enabled: Vec<&str> = config
            .map(|c| c.enabled_servers().map(|s| s.name.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(enabled, ["on"]);
    }

    #[test]
    fn network_allow_entries_resolve_to_their_canonical_form() {
        check(
            r#"
[network]
allow = ["LocalHost", "*.Corp.Example", "10.0.0.0/8", "127.0.0.1:3000", "[::1]:8080", "fd00::/8"]

[[servers]]
name = "dev"
allow_private_network = true
transport = { type = "http", url = "http://localhost:3000/mcp" }

[[servers]]
name = "legacy"
allow_private_network = false
transport = { type = "sse", url = "http://10.1.2.3/sse" }

[[servers]]
name = "local"
allow_private_network = false
transport = { type = "stdio", command = "run" }
"#,
            expect![[r#"
                listen=127.0.0.1:8931 exposure=Search strategy=Hybrid
                network allow=[localhost, *.corp.example, 10.0.0.0/8, 127.0.0.1:3000, [::1]:8080, fd00::/8]
                dev timeout=30s enabled=true allow_private_network
                  http http://localhost:3000/mcp headers[]
                legacy timeout=30s enabled=true
                  sse http://10.1.2.3/sse headers[]
                local timeout=30s enabled=true
                  stdio "run" [] cwd=None env[]
            "#]],
        );
        // The global policy carries the entries; no entries is the strict default.
        let allow_of = |text: &str| {
            parse_toml(text, Path::new("mcpgw.toml"))
                .map(|c| c.network.policy().allow().len())
                .map_err(|e| e.to_string())
        };
        assert_eq!(allow_of("[network]\nallow = [\"localhost\"]\n"), Ok(1));
        assert_eq!(allow_of(""), Ok(0));
    }

    #[test]
    fn every_bad_network_entry_is_reported_with_what_to_write() {
        check(
            r#"
[network]
allow = ["localhost", "", "http://localhost:3000/mcp", "10.1.2.3/8", "10.0.0.0/33", "localhost:0", "mcp*.example.com", "exa mple.com", "127.0.0.1"]
"#,
            expect![[r#"
                invalid configuration (7 problems):
                  3:23: network.allow[1]: an empty string is not a host name, IP address or CIDR (hint: remove the empty entry, or name a host such as "localhost")
                  3:27: network.allow[2]: "http://localhost:3000/mcp" is a URL; write just its host, "localhost:3000" (hint: an entry names a host, optionally with a port; the scheme and path do not matter to it)
                  3:56: network.allow[3]: "10.1.2.3/8" is not a valid CIDR: it has host bits set; did you mean "10.0.0.0/8"? (hint: a CIDR is the first address of a block and its prefix length, such as "10.0.0.0/8" or "fd00::/8")
                  3:70: network.allow[4]: "10.0.0.0/33" is not a valid CIDR: the prefix length must be a number from 0 to 32 (hint: a CIDR is the first address of a block and its prefix length, such as "10.0.0.0/8" or "fd00::/8")
                  3:85: network.allow[5]: "localhost:0" has an invalid port (a number from 1 to 65535) (hint: write the port as a number after the host, such as "localhost:3000" or "[::1]:3000")
                  3:100: network.allow[6]: "mcp*.example.com": a wildcard must be the whole first label, as in "*.example.com" (hint: "*.corp.example" covers every name below corp.example (not corp.example itself))
                  3:120: network.allow[7]: "exa mple.com" is not a host name, IP address or CIDR (hint: write a host name ("localhost"), a wildcard ("*.corp.example"), an IP address ("10.1.2.3") or a CIDR ("10.0.0.0/8"), optionally with a port ("localhost:3000"))"#]],
        );
        check(
            "[network]\nallow = \"localhost\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:9: network.allow: invalid type: a string, expected an array"#]],
        );
        check(
            "[network]\nallowed = []\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:1: network.allowed: unknown key (hint: did you mean `allow`?)"#]],
        );
    }

    #[test]
    fn allow_private_network_on_a_stdio_server_is_a_problem() {
        check(
            r#"
[[servers]]
name = "local"
allow_private_network = true
transport = { type = "stdio", command = "run" }
"#,
            expect![[r#"
                invalid configuration (1 problem):
                  4:1: servers[0].allow_private_network: allow_private_network applies to http and sse servers, not to stdio (hint: a stdio server is a local process that mcpgw reaches without the network; remove the line)"#]],
        );
    }

    #[test]
    fn examples_mcpgw_toml_resolves() {
        let text = include_str!("../../../examples/mcpgw.toml");
        let config = parse_toml(text, Path::new("examples/mcpgw.toml"));
        let config = config.unwrap_or_else(|error| panic!("{error}"));
        assert!(
            !config.network.allow.is_empty(),
            "the example shows [network]"
        );
    }

    #[test]
    fn header_var_names_are_upper_snake() {
        assert_eq!(
            header_var_name("docs", "Authorization"),
            "DOCS_AUTHORIZATION"
        );
        assert_eq!(header_var_name("my-api", "X-Api-Key"), "MY_API_X_API_KEY");
        assert_eq!(header_var_name("1password", "Token"), "MCP_1PASSWORD_TOKEN");
    }
}
