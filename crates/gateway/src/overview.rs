//! What a gateway has, in the one shape the admin API's read side serves (`/admin/v1`, see
//! `http::admin_v1`) and the CLI prints: its servers, its tools with their cost and pin state,
//! and a search with the ranks behind each hit. The CLI builds these from a gateway it started
//! itself, or reads them from a running one (`http::admin_client`), and renders both alike, so
//! `mcpgw tools --json` prints the same either way. Every type reads back from its JSON.
//!
//! Never a secret: a credential shows as its strategy and the names of the environment
//! variables it is read from (`credentials`: each with where it is sent and whether it is set,
//! and an OAuth server's stored sign-ins, whose and until when); an HTTP server's URL without user info, query or fragment (a JSON
//! file served directly may keep a key there); a stdio server's command without its arguments
//! or environment.

use std::{collections::HashMap, sync::Arc, time::Instant};

use ids::{QualifiedName, ServerName};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Gateway, Search, policy::access::Access, principal::Principal};

/// One configured server, as `GET /admin/v1/servers` and `mcpgw servers list` show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerRow {
    pub name: ServerName,
    /// `idle`, `starting`, `connecting`, `ready`, `failed`, `unresponsive`, or `disabled`
    /// (`enabled = false`: never connected).
    pub state: String,
    /// Why it failed or stopped answering: its last error, the cause in words (also while a
    /// server that failed is `connecting` again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The protocol era it negotiated: `modern` or `legacy`.
    pub era: Option<String>,
    pub protocol_version: Option<String>,
    /// The upstream's `serverInfo` name and version.
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    pub tool_count: Option<usize>,
    /// How long its last successful connect took.
    pub connect_ms: Option<u64>,
    /// Its tools held for approval because their definitions changed (pinning).
    pub held: usize,
    pub transport: TransportRow,
    pub credential: CredentialRow,
    /// The replica that answered (`[store] replica`, else its host name): with several
    /// replicas, each runs its own connection (and stdio child) per server.
    #[serde(default)]
    pub replica: String,
}

impl ServerRow {
    /// Whether the server is down: failed, or stopped answering.
    pub fn is_down(&self) -> bool {
        matches!(self.state.as_str(), "failed" | "unresponsive")
    }
}

/// How the gateway reaches a server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum TransportRow {
    /// The program only: arguments may carry a secret.
    Stdio {
        command: String,
    },
    Http {
        url: String,
    },
    Sse {
        url: String,
    },
}

/// Whether a server has a credential and where it comes from; never its value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CredentialRow {
    /// The configured `auth`: `none`, `bearer`, `header` or `oauth`.
    pub auth: String,
    /// Every environment variable a credential of the server is read from: its `auth`, its
    /// credential headers, its stdio environment, an OAuth client secret.
    pub env: Vec<String>,
    /// Those of `env` that the gateway's environment does not set.
    pub unset: Vec<String>,
    /// OAuth: whether the local user has signed in (`mcpgw auth login`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_in: Option<bool>,
    /// OAuth: when the access token expires (Unix seconds), if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

/// One tool, as `GET /admin/v1/tools` and `mcpgw tools --json` show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolRow {
    pub name: QualifiedName,
    pub server: ServerName,
    /// The upstream's own name for it.
    pub upstream_name: String,
    /// `title`, else `annotations.title`.
    #[serde(default)]
    pub title: Option<String>,
    /// The first line of its description.
    pub description: String,
    /// The upstream's `annotations` object as it sent it.
    #[serde(default)]
    pub annotations: Option<Value>,
    /// cl100k_base tokens of the tool as listed to a client; `None` for a held tool.
    #[serde(default)]
    pub tokens: Option<usize>,
    /// `pinned` (its definition is the trusted one), `held` (changed since it was trusted; out
    /// of the catalog until approved), or `off` (no database: pinning is off).
    pub pin: String,
    /// Since when its definition is trusted (first use or last approval; Unix seconds); for a
    /// held tool, since when the change is held.
    #[serde(default)]
    pub pinned_since: Option<i64>,
}

/// What `GET /admin/v1/tools` asks: one server's tools, and the view of one profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolsQuery {
    pub server: Option<String>,
    pub profile: Option<String>,
}

/// The tools, the held ones, and what a client's `tools/list` costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolsView {
    /// The tools in the catalog (searchable and callable), in catalog order.
    pub tools: Vec<ToolRow>,
    /// The tools held out of it because their definitions changed; their rows show the new
    /// definition, which `POST /admin/tools/approve` would trust.
    pub held: Vec<ToolRow>,
    pub listing: Listing,
}

/// What a client's `tools/list` shows and costs, for the default view or one profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Listing {
    pub profile: Option<String>,
    /// The exposure configured (`search`, `passthrough` or `auto`), and the one that applies.
    pub configured_exposure: String,
    pub exposure: String,
    /// What listing every visible tool directly costs (cl100k_base tokens).
    pub passthrough_tokens: usize,
    pub token_budget: usize,
    /// The tools listed beside the meta-tools in search exposure (`pinned` in the config).
    pub always_listed: Vec<String>,
    /// What the `tools/list` a client is shown costs.
    pub listed_tokens: usize,
}

/// What `GET /admin/v1/search` asks.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchQuery {
    pub query: String,
    pub top_k: usize,
    /// `None`: the configured `[retrieval] strategy`.
    pub strategy: Option<catalog::Strategy>,
    /// Only these servers; empty for all.
    pub servers: Vec<String>,
}

/// Most hits a search may ask for, as `search_tools` and `mcpgw search` allow.
pub const MAX_TOP_K: usize = 50;

/// A search's hits with the ranks behind each, as `mcpgw search --json --explain` shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchReport {
    pub query: String,
    /// The strategy asked for (`bm25`, `vector`, `hybrid`); `degraded` says when BM25 served.
    pub strategy: String,
    pub scoring: Scoring,
    pub hits: Vec<Hit>,
    /// Why the search ran with less than the strategy asked for.
    pub degraded: Option<String>,
    /// Tools in the catalog searched (before any server filter).
    pub catalog_tools: usize,
    /// Servers still making their first connection: their tools are not searched yet.
    pub starting: Vec<ServerName>,
    /// Tools of the searched servers held for approval: not searched either.
    pub held: usize,
    pub elapsed_ms: f64,
}

/// One hit: its fused (or only) score and its place in the BM25 and the vector list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Hit {
    pub name: QualifiedName,
    pub server: ServerName,
    pub description: String,
    pub score: f32,
    /// Rank (from 1) and BM25 score; `None` when the tool shares no term with the query.
    pub bm25: Option<Place>,
    /// Rank and cosine similarity; `None` without vectors or below the minimum similarity.
    pub vector: Option<Place>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Place {
    pub rank: usize,
    pub score: f32,
}

/// How a search's scores were made ([`catalog::Scoring`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Scoring {
    Bm25,
    Vector,
    /// `bm25_weight / (60 + BM25 rank) + vector_weight / (60 + vector rank)`.
    Fused {
        bm25_weight: f32,
        vector_weight: f32,
    },
    /// `bm25_weight × (BM25 score − low) / (high − low) + vector_weight × (cosine − low) /
    /// (high − low)`, each list's `[low, high]` given.
    Normalised {
        bm25_weight: f32,
        vector_weight: f32,
        bm25_span: Option<[f32; 2]>,
        vector_span: Option<[f32; 2]>,
    },
    /// Several queries: each tool's best reciprocal rank.
    Capabilities,
}

impl From<catalog::Scoring> for Scoring {
    fn from(scoring: catalog::Scoring) -> Scoring {
        match scoring {
            catalog::Scoring::Bm25 => Scoring::Bm25,
            catalog::Scoring::Vector => Scoring::Vector,
            catalog::Scoring::Fused {
                bm25_weight,
                vector_weight,
            } => Scoring::Fused {
                bm25_weight,
                vector_weight,
            },
            catalog::Scoring::Normalised {
                bm25_weight,
                vector_weight,
                bm25_span,
                vector_span,
            } => Scoring::Normalised {
                bm25_weight,
                vector_weight,
                bm25_span: bm25_span.map(|(low, high)| [low, high]),
                vector_span: vector_span.map(|(low, high)| [low, high]),
            },
            catalog::Scoring::Capabilities => Scoring::Capabilities,
        }
    }
}

impl From<Scoring> for catalog::Scoring {
    fn from(scoring: Scoring) -> catalog::Scoring {
        match scoring {
            Scoring::Bm25 => catalog::Scoring::Bm25,
            Scoring::Vector => catalog::Scoring::Vector,
            Scoring::Fused {
                bm25_weight,
                vector_weight,
            } => catalog::Scoring::Fused {
                bm25_weight,
                vector_weight,
            },
            Scoring::Normalised {
                bm25_weight,
                vector_weight,
                bm25_span,
                vector_span,
            } => catalog::Scoring::Normalised {
                bm25_weight,
                vector_weight,
                bm25_span: bm25_span.map(|[low, high]| (low, high)),
                vector_span: vector_span.map(|[low, high]| (low, high)),
            },
            Scoring::Capabilities => catalog::Scoring::Capabilities,
        }
    }
}

/// Every configured server in configuration order: the enabled ones with their live state, the
/// disabled ones as `disabled`.
pub async fn servers(gateway: &Gateway) -> Vec<ServerRow> {
    let mut held: HashMap<&str, usize> = HashMap::new();
    let held_tools = gateway.held_tools();
    for tool in held_tools.iter() {
        *held.entry(tool.server.as_str()).or_default() += 1;
    }
    let config = gateway.config();
    let mut rows = Vec::with_capacity(config.servers.len());
    for server in &config.servers {
        let held = held.get(server.name.as_str()).copied().unwrap_or(0);
        rows.push(server_row(gateway, server, held).await);
    }
    rows
}

/// One configured server's row, as in [`servers`]; `None` for a name not configured.
pub async fn server(gateway: &Gateway, name: &str) -> Option<ServerRow> {
    let config = gateway.config();
    let server = config.server(name)?;
    let held = gateway
        .held_tools()
        .iter()
        .filter(|tool| tool.server.as_str() == name)
        .count();
    Some(server_row(gateway, server, held).await)
}

async fn server_row(gateway: &Gateway, server: &config::ServerConfig, held: usize) -> ServerRow {
    let status = gateway.upstreams().get(&server.name).map(|s| s.status());
    let (state, reason) = match status.as_ref().map(|s| &s.state) {
        None => ("disabled".to_owned(), None),
        Some(
            upstream::ServerState::Failed { reason }
            | upstream::ServerState::Unresponsive { reason },
        ) => (status_word(status.as_ref()), Some(reason.clone())),
        // Between attempts of a server that keeps failing: why the last one failed.
        Some(upstream::ServerState::Connecting) => (
            status_word(status.as_ref()),
            status.as_ref().and_then(|s| s.last_error.clone()),
        ),
        Some(_) => (status_word(status.as_ref()), None),
    };
    let status = status.as_ref();
    ServerRow {
        name: server.name.clone(),
        state,
        reason,
        era: status.and_then(|s| s.era).map(|era| era.to_string()),
        protocol_version: status.and_then(|s| s.protocol_version.clone()),
        server_name: status.and_then(|s| s.server_name.clone()),
        server_version: status.and_then(|s| s.server_version.clone()),
        tool_count: status.and_then(|s| s.tool_count),
        connect_ms: status.and_then(|s| s.connect_ms),
        held,
        transport: transport_row(&server.transport),
        credential: credential_row(gateway, server).await,
        replica: gateway.replica(),
    }
}

fn status_word(status: Option<&upstream::ServerStatus>) -> String {
    status.map_or("disabled", |s| s.state.word()).to_owned()
}

fn transport_row(transport: &config::Transport) -> TransportRow {
    let bare = |url: &url::Url| {
        let mut url = url.clone();
        let _ = url.set_username("");
        let _ = url.set_password(None);
        url.set_query(None);
        url.set_fragment(None);
        url.to_string()
    };
    match transport {
        config::Transport::Stdio(stdio) => TransportRow::Stdio {
            command: stdio.command.clone(),
        },
        config::Transport::Http(http) => TransportRow::Http {
            url: bare(&http.url),
        },
        config::Transport::Sse(http) => TransportRow::Sse {
            url: bare(&http.url),
        },
    }
}

/// Where `server`'s credentials come from: the strategy, the variables, and for OAuth the local
/// user's sign-in (from the database, when open).
async fn credential_row(gateway: &Gateway, server: &config::ServerConfig) -> CredentialRow {
    let sources = credential_sources(server);
    let mut env: Vec<String> = Vec::new();
    for source in &sources {
        if !env.contains(&source.env) {
            env.push(source.env.clone());
        }
    }
    let unset = env
        .iter()
        .filter(|var| sources.iter().any(|s| &s.env == *var && !s.set))
        .cloned()
        .collect();
    let mut row = CredentialRow {
        auth: auth_word(&server.auth).to_owned(),
        env,
        unset,
        signed_in: None,
        expires_at: None,
    };
    if matches!(server.auth, config::Auth::OAuth(_))
        && let Some(store) = gateway.store()
    {
        let local: Arc<dyn upstream::oauth::OAuthStore> = Arc::new(crate::oauth::StoreOAuth::new(
            store.clone(),
            ids::PrincipalId::new(ids::PrincipalId::LOCAL),
        ));
        match upstream::oauth::ServerCredentials::new(local, &server.name)
            .status()
            .await
        {
            Ok(status) => {
                row.signed_in = Some(status.logged_in());
                row.expires_at = status.expires_at.map(store::time::unix_seconds);
            }
            Err(error) => {
                tracing::warn!(server = %server.name, %error, "cannot read a server's sign-in")
            }
        }
    }
    row
}

/// `none`, `bearer`, `header` or `oauth`, as the file writes it.
fn auth_word(auth: &config::Auth) -> &'static str {
    match auth {
        config::Auth::None => "none",
        config::Auth::Bearer { .. } => "bearer",
        config::Auth::Header(_) => "header",
        config::Auth::OAuth(_) => "oauth",
    }
}

/// One of a server's credentials, as `GET /admin/v1/servers/{name}/credentials` shows it:
/// where it is sent and the variable it is read from, never its value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CredentialSource {
    /// `auth` (the `bearer` or `header` strategy's credential), `header NAME` (a credential
    /// header of an HTTP server), `env NAME` (a variable of a stdio server's environment), or
    /// `client_secret` (OAuth).
    pub used_for: String,
    /// The environment variable of the gateway it is read from.
    pub env: String,
    /// Whether the gateway's environment sets it (to something not empty).
    pub set: bool,
}

/// A stored OAuth sign-in to one server: whose, from which issuer, until when. Never a token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SignInRow {
    /// `local`, `client:NAME` or `user:SUBJECT`.
    pub principal: String,
    pub issuer: String,
    /// When its access token expires (Unix seconds), if the server said.
    pub expires_at: Option<i64>,
    pub expired: bool,
    /// When it was last stored: signed in or renewed.
    pub updated_at: i64,
}

/// Whether a server has a credential and where it comes from: `GET
/// /admin/v1/servers/{name}/credentials`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CredentialsView {
    pub server: ServerName,
    /// The configured `auth`: `none`, `bearer`, `header` or `oauth`.
    pub auth: String,
    /// Whether any credential is configured: a strategy other than `none`, or a variable.
    pub configured: bool,
    pub sources: Vec<CredentialSource>,
    /// OAuth: every principal's stored sign-in, from the database (`null` for other servers,
    /// or when the gateway runs without its database).
    pub sign_ins: Option<Vec<SignInRow>>,
}

/// Whether `server` has a credential and where each comes from; for OAuth, who has signed in.
pub async fn credentials(gateway: &Gateway, server: &config::ServerConfig) -> CredentialsView {
    let sources = credential_sources(server);
    let oauth = matches!(server.auth, config::Auth::OAuth(_));
    let sign_ins = match gateway.store() {
        Some(store) if oauth => match store.list_credentials().await {
            Ok(all) => Some(sign_ins_of(
                &all,
                &server.name,
                std::time::SystemTime::now(),
            )),
            Err(error) => {
                tracing::warn!(server = %server.name, %error, "cannot read the stored sign-ins");
                None
            }
        },
        _ => None,
    };
    CredentialsView {
        server: server.name.clone(),
        auth: auth_word(&server.auth).to_owned(),
        configured: !matches!(server.auth, config::Auth::None) || !sources.is_empty(),
        sources,
        sign_ins,
    }
}

fn sign_ins_of(
    all: &[store::CredentialStatus],
    server: &str,
    now: std::time::SystemTime,
) -> Vec<SignInRow> {
    all.iter()
        .filter(|signed_in| signed_in.server.as_str() == server)
        .map(|signed_in| SignInRow {
            principal: signed_in.principal.to_string(),
            issuer: signed_in.issuer.clone(),
            expires_at: signed_in.expires_at.map(store::time::unix_seconds),
            expired: signed_in.expires_at.is_some_and(|at| at <= now),
            updated_at: store::time::unix_seconds(signed_in.updated_at),
        })
        .collect()
}

/// Every credential of `server` that is read from a variable: its strategy's, its credential
/// headers or stdio environment, an OAuth client secret; in that order.
fn credential_sources(server: &config::ServerConfig) -> Vec<CredentialSource> {
    let mut found: Vec<(String, &str)> = Vec::new();
    match &server.auth {
        config::Auth::None => {}
        config::Auth::Bearer { env } => found.push(("auth".to_owned(), env)),
        config::Auth::Header(header) => found.push(("auth".to_owned(), &header.env)),
        config::Auth::OAuth(oauth) => {
            if let Some(env) = &oauth.client_secret_env {
                found.push(("client_secret".to_owned(), env));
            }
        }
    }
    match &server.transport {
        config::Transport::Stdio(stdio) => {
            for (name, value) in &stdio.env {
                if let Some(var) = value.env_var() {
                    found.push((format!("env {name}"), var));
                }
            }
        }
        config::Transport::Http(http) | config::Transport::Sse(http) => {
            for (name, value) in http.credential_headers() {
                if let Some(var) = value.env_var() {
                    found.push((format!("header {name}"), var));
                }
            }
        }
    }
    found
        .into_iter()
        .map(|(used_for, env)| CredentialSource {
            used_for,
            set: std::env::var_os(env).is_some_and(|value| !value.is_empty()),
            env: env.to_owned(),
        })
        .collect()
}

/// The tools of the catalog and the held ones, for `query`'s server and profile (both checked
/// by the caller: they name a configured server and profile), with what listing them costs.
pub async fn tools(gateway: &Gateway, query: &ToolsQuery) -> ToolsView {
    let profile = query
        .profile
        .as_deref()
        .and_then(|name| gateway.config().policy.profile(name).cloned());
    let access = match profile {
        Some(profile) => Access::for_profile(gateway, profile),
        None => gateway.access(Principal::Local),
    };
    let of_server = |server: &str| query.server.as_deref().is_none_or(|s| s == server);
    let since = pinned_since(gateway).await;
    let pin = if gateway.store().is_some() {
        "pinned"
    } else {
        "off"
    };
    let catalog = gateway.catalog();
    let tools = catalog
        .tools()
        .iter()
        .filter(|tool| of_server(&tool.server) && access.permits(tool))
        .map(|tool| ToolRow {
            name: tool.qualified.clone(),
            server: tool.server.clone(),
            upstream_name: tool.upstream_name.clone(),
            title: tool.title.clone(),
            description: tool.one_line_description(),
            annotations: tool.raw.get("annotations").cloned(),
            tokens: Some(tool.token_cost),
            pin: pin.to_owned(),
            pinned_since: since
                .get(&(tool.server.to_string(), tool.upstream_name.clone()))
                .copied(),
        })
        .collect();
    let held = gateway
        .held_tools()
        .iter()
        .filter(|tool| of_server(&tool.server) && access.permits_server(&tool.server))
        .map(held_row)
        .collect();
    ToolsView {
        tools,
        held,
        listing: listing(gateway, &access),
    }
}

/// Since when each tool's definition is trusted, by (server, upstream name); empty without the
/// database or when it cannot be read (said in the log).
async fn pinned_since(gateway: &Gateway) -> HashMap<(String, String), i64> {
    let Some(store) = gateway.store() else {
        return HashMap::new();
    };
    match store.trusted_since().await {
        Ok(since) => since
            .into_iter()
            .map(|(key, at)| (key, store::time::unix_seconds(at)))
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "cannot read since when the tools are pinned");
            HashMap::new()
        }
    }
}

/// A held tool's row, from the new definition it is held with.
fn held_row(tool: &crate::HeldTool) -> ToolRow {
    let text = |field: &str| tool.new.get(field).and_then(Value::as_str);
    let annotations = tool.new.get("annotations").cloned();
    let title = text("title").or_else(|| {
        annotations
            .as_ref()
            .and_then(|a| a.get("title"))
            .and_then(Value::as_str)
    });
    ToolRow {
        name: tool.qualified.clone(),
        server: tool.server.clone(),
        upstream_name: tool.upstream_name.clone(),
        title: title.map(str::to_owned),
        description: catalog::entry::one_line(text("description").unwrap_or_default()),
        annotations,
        tokens: None,
        pin: "held".to_owned(),
        pinned_since: Some(store::time::unix_seconds(tool.since)),
    }
}

fn listing(gateway: &Gateway, access: &Access<'_>) -> Listing {
    Listing {
        profile: access.profile.as_ref().map(|p| p.name.clone()),
        configured_exposure: access.configured_exposure().to_string(),
        exposure: access.exposure().to_string(),
        passthrough_tokens: access.passthrough_tokens(),
        token_budget: gateway.config().gateway.token_budget,
        always_listed: access.pinned(),
        listed_tokens: access.listed_tokens(),
    }
}

/// Runs `query` on the current catalog as the local user, with the ranks behind every hit.
/// Not counted in the search metrics: those count clients' `search_tools`.
pub async fn search(gateway: &Gateway, query: &SearchQuery) -> SearchReport {
    let search = Search {
        queries: vec![query.query.clone()],
        top_k: query.top_k,
        filter: catalog::Filter {
            servers: (!query.servers.is_empty()).then(|| query.servers.clone()),
            ..Default::default()
        },
        explain: true,
        strategy: query.strategy,
    };
    let started = Instant::now();
    let found = gateway.run_search(&search).await;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let explanation = found.explanation.unwrap_or_default();
    let place = |place: Option<(usize, f32)>| place.map(|(rank, score)| Place { rank, score });
    let hits = found
        .hits
        .into_iter()
        .enumerate()
        .map(|(at, hit)| {
            let sources = explanation.sources.get(at).copied().unwrap_or_default();
            Hit {
                name: hit.name,
                server: hit.server,
                description: hit.description,
                score: hit.score,
                bm25: place(sources.bm25),
                vector: place(sources.vector),
            }
        })
        .collect();
    SearchReport {
        query: query.query.clone(),
        strategy: found.strategy.to_string(),
        scoring: explanation.scoring.into(),
        hits,
        degraded: found.degraded,
        catalog_tools: gateway.catalog().tools().len(),
        starting: found.starting,
        held: found.held,
        elapsed_ms,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn server(toml: &str) -> config::ServerConfig {
        let text = format!("[[servers]]\nname = \"s\"\n{toml}");
        config::parse_toml(&text, std::path::Path::new("/tmp/mcpgw.toml"))
            .expect("config")
            .servers
            .remove(0)
    }

    fn sources(toml: &str) -> Vec<(String, String)> {
        credential_sources(&server(toml))
            .into_iter()
            .map(|source| (source.used_for, source.env))
            .collect()
    }

    #[test]
    fn every_credential_is_named_by_where_it_is_sent_and_its_variable() {
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            sources(
                "auth = { type = \"bearer\", env = \"S_TOKEN\" }\ntransport = { type = \"http\", url = \"https://s.example/mcp\", headers = { X-Api-Key = { env = \"S_KEY\" }, X-Team = \"infra\" } }\n"
            ),
            pairs(&[("auth", "S_TOKEN"), ("header X-Api-Key", "S_KEY")])
        );
        assert_eq!(
            sources(
                "transport = { type = \"stdio\", command = \"s\", env = { GITHUB_TOKEN = { env = \"GH\" }, LOG = \"debug\" } }\n"
            ),
            pairs(&[("env GITHUB_TOKEN", "GH")])
        );
        assert_eq!(
            sources(
                "auth = { type = \"oauth\", client_id = \"c\", client_secret_env = \"S_SECRET\" }\ntransport = { type = \"http\", url = \"https://s.example/mcp\" }\n"
            ),
            pairs(&[("client_secret", "S_SECRET")])
        );
        assert!(sources("transport = { type = \"stdio\", command = \"s\" }\n").is_empty());
    }

    #[test]
    fn sign_ins_are_those_of_the_server_with_their_expiry() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let signed_in =
            |server: &str, principal: &str, expires: Option<u64>| store::CredentialStatus {
                server: server.into(),
                principal: principal.into(),
                issuer: "https://idp.example".to_owned(),
                expires_at: expires.map(at),
                updated_at: at(1_000),
            };
        let all = [
            signed_in("gh", "local", Some(3_000)),
            signed_in("other", "local", None),
            signed_in("gh", "client:ci", Some(1_500)),
            signed_in("gh", "user:ann", None),
        ];
        let rows = sign_ins_of(&all, "gh", at(2_000));
        let shown: Vec<(&str, Option<i64>, bool)> = rows
            .iter()
            .map(|row| (row.principal.as_str(), row.expires_at, row.expired))
            .collect();
        assert_eq!(
            shown,
            [
                ("local", Some(3_000), false),
                ("client:ci", Some(1_500), true),
                ("user:ann", None, false)
            ]
        );
        assert!(rows.iter().all(|row| row.updated_at == 1_000));
    }
}
