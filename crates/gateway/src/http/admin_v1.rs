//! The admin API's read side, under `/admin/v1` (JSON, in the shapes of [`crate::overview`]):
//!
//! - `GET /admin/v1/servers`: `{"servers": [...]}`, every configured server with its state,
//!   era, versions, tool count, last error, transport and where its credential comes from;
//! - `GET /admin/v1/tools[?server=NAME][&profile=NAME]`: the catalog's tools (cost, pin state,
//!   annotations), the held ones, and what a client's `tools/list` costs;
//! - `GET /admin/v1/search?q=TEXT[&top_k=N][&strategy=bm25|vector|hybrid][&server=NAME]...`:
//!   a search of the running catalog with each hit's rank and score in the BM25 and the vector
//!   list (`mcpgw search --explain`); `strategy` overrides `[retrieval] strategy`;
//! - `GET /admin/v1/search/compare?q=TEXT[&top_k=N][&server=NAME]...`: the search
//!   playground, the same query's BM25, vector and hybrid lists side by side in one answer.
//!
//! The writes under `/admin/v1/servers` (add, change, remove, enable, disable, test, and the
//! credentials of one server) are `admin_servers`'. Every route is routed by `admin_api`, the
//! one table of the admin API, beside the OpenAPI document that describes it.
//!
//! Behind the guard like every `/admin/*` route (on an open listener the admin token, never
//! cross-site), and for admins only: the local user, or a principal whose profile says
//! `admin = true` (403 otherwise). A bad parameter (missing `q`, `top_k` out of range, an
//! unknown server, profile or parameter) gets 400 with `{"error": "..."}` naming it. The CLI
//! asks these routes through `admin_client`, which builds its query strings here.

use std::sync::Arc;

use axum::{
    Json,
    extract::{RawQuery, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use schemars::JsonSchema;
use serde::Serialize;

use crate::{
    Gateway,
    http::{
        admin::Admin,
        openapi::{Param, ParamKind},
    },
    overview::{self, MAX_TOP_K, SearchQuery, ToolsQuery},
};

pub(crate) const SERVERS_PATH: &str = "/admin/v1/servers";
pub(crate) const TOOLS_PATH: &str = "/admin/v1/tools";
pub(crate) const SEARCH_PATH: &str = "/admin/v1/search";

/// How many hits a search shows when `top_k` is not given, as `mcpgw search`.
const DEFAULT_TOP_K: usize = 5;

/// `GET /admin/v1/tools`' parameters.
pub(crate) const TOOLS_QUERY: &[Param] = &[
    Param::text("server", "Only this configured server's tools."),
    Param::text(
        "profile",
        "The view of this profile: what its clients' `tools/list` shows and costs.",
    ),
];

const QUERY_TEXT: Param = Param {
    required: true,
    ..Param::text("q", "What the tool should do, in words.")
};
const QUERY_TOP_K: Param = Param {
    kind: ParamKind::Whole {
        min: 1,
        max: MAX_TOP_K,
        default: DEFAULT_TOP_K,
    },
    ..Param::text("top_k", "How many hits.")
};
const QUERY_SERVERS: Param = Param {
    repeatable: true,
    ..Param::text("server", "Only these configured servers; repeatable.")
};

/// `GET /admin/v1/search`' parameters.
pub(crate) const SEARCH_QUERY: &[Param] = &[
    QUERY_TEXT,
    QUERY_TOP_K,
    Param {
        kind: ParamKind::OneOf(&["bm25", "vector", "hybrid"]),
        ..Param::text("strategy", "Overrides `[retrieval] strategy`.")
    },
    QUERY_SERVERS,
];

/// `GET /admin/v1/search/compare`' parameters: the search's, but every strategy is asked.
pub(crate) const COMPARE_QUERY: &[Param] = &[QUERY_TEXT, QUERY_TOP_K, QUERY_SERVERS];

pub(crate) async fn servers(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    RawQuery(raw): RawQuery,
) -> Response {
    if let Err(bad) = parameters(raw.as_deref(), &[]) {
        return bad_request(&bad);
    }
    let servers = overview::servers(&gateway).await;
    Json(ServerList { servers }).into_response()
}

/// `GET /admin/v1/servers`' answer.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ServerList {
    /// In configuration order.
    pub servers: Vec<overview::ServerRow>,
}

pub(crate) async fn tools(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    RawQuery(raw): RawQuery,
) -> Response {
    match tools_query(raw.as_deref(), &gateway.config()) {
        Ok(query) => Json(overview::tools(&gateway, &query).await).into_response(),
        Err(bad) => bad_request(&bad),
    }
}

pub(crate) async fn search(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    RawQuery(raw): RawQuery,
) -> Response {
    match search_query(raw.as_deref(), &gateway.config()) {
        Ok(query) => Json(overview::search(&gateway, &query).await).into_response(),
        Err(bad) => bad_request(&bad),
    }
}

/// `GET /admin/v1/search/compare`: the search playground's one query, answered by BM25, the
/// vector list and the hybrid fusion, side by side (each with the ranks behind every hit).
pub(crate) async fn compare(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    RawQuery(raw): RawQuery,
) -> Response {
    let mut query = match search_query_of(raw.as_deref(), &gateway.config(), COMPARE_QUERY) {
        Ok(query) => query,
        Err(bad) => return bad_request(&bad),
    };
    query.strategy = Some(catalog::Strategy::Bm25);
    let bm25 = overview::search(&gateway, &query).await;
    query.strategy = Some(catalog::Strategy::Vector);
    let vector = overview::search(&gateway, &query).await;
    query.strategy = Some(catalog::Strategy::Hybrid);
    let hybrid = overview::search(&gateway, &query).await;
    Json(Comparison {
        query: query.query,
        bm25,
        vector,
        hybrid,
    })
    .into_response()
}

/// `GET /admin/v1/search/compare`' answer.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Comparison {
    pub query: String,
    /// The lexical list. A `strategy` that fell back to BM25 says so in its `degraded`.
    pub bm25: overview::SearchReport,
    pub vector: overview::SearchReport,
    pub hybrid: overview::SearchReport,
}

fn bad_request(message: &str) -> Response {
    super::errors::plain(StatusCode::BAD_REQUEST, message)
}

/// Reads `GET /admin/v1/tools`' parameters: a configured server, a defined profile.
pub(crate) fn tools_query(
    raw: Option<&str>,
    config: &config::Config,
) -> Result<ToolsQuery, String> {
    let mut query = ToolsQuery::default();
    for (name, value) in parameters(raw, TOOLS_QUERY)? {
        match name.as_str() {
            "server" => query.server = Some(known_server(config, value)?),
            _ => {
                if config.policy.profile(&value).is_none() {
                    return Err(format!(
                        "no profile named '{}' in the configuration",
                        clip(&value)
                    ));
                }
                query.profile = Some(value);
            }
        }
    }
    Ok(query)
}

/// Reads `GET /admin/v1/search`' parameters: `q` (required), `top_k` from 1 to 50, a strategy,
/// configured servers.
pub(crate) fn search_query(
    raw: Option<&str>,
    config: &config::Config,
) -> Result<SearchQuery, String> {
    search_query_of(raw, config, SEARCH_QUERY)
}

/// [`search_query`] with the parameters `known` (a route's table).
fn search_query_of(
    raw: Option<&str>,
    config: &config::Config,
    known: &[Param],
) -> Result<SearchQuery, String> {
    let mut query = SearchQuery {
        query: String::new(),
        top_k: DEFAULT_TOP_K,
        strategy: None,
        servers: Vec::new(),
    };
    for (name, value) in parameters(raw, known)? {
        match name.as_str() {
            "q" => query.query = value,
            "top_k" => {
                query.top_k = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|k| (1..=MAX_TOP_K).contains(k))
                    .ok_or_else(|| {
                        format!(
                            "top_k must be a whole number from 1 to {MAX_TOP_K}, not '{}'",
                            clip(&value)
                        )
                    })?
            }
            "strategy" => {
                query.strategy = Some(value.parse().map_err(|_| {
                    format!(
                        "strategy must be bm25, vector or hybrid, not '{}'",
                        clip(&value)
                    )
                })?)
            }
            _ => query.servers.push(known_server(config, value)?),
        }
    }
    if query.query.trim().is_empty() {
        return Err(
            "the parameter q is required: what the tool should do, in words (/admin/v1/search?q=create+an+issue)"
                .to_owned(),
        );
    }
    Ok(query)
}

/// The query string (with its `?`, or empty) that [`tools_query`] reads back as `query`.
pub(crate) fn tools_query_string(query: &ToolsQuery) -> String {
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    if let Some(server) = &query.server {
        pairs.append_pair("server", server);
    }
    if let Some(profile) = &query.profile {
        pairs.append_pair("profile", profile);
    }
    with_question_mark(pairs.finish())
}

/// The query string that [`search_query`] reads back as `query`.
pub(crate) fn search_query_string(query: &SearchQuery) -> String {
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    pairs.append_pair("q", &query.query);
    pairs.append_pair("top_k", &query.top_k.to_string());
    if let Some(strategy) = query.strategy {
        pairs.append_pair("strategy", strategy.as_str());
    }
    for server in &query.servers {
        pairs.append_pair("server", server);
    }
    with_question_mark(pairs.finish())
}

fn with_question_mark(pairs: String) -> String {
    if pairs.is_empty() {
        pairs
    } else {
        format!("?{pairs}")
    }
}

/// The query string's parameters in order: each one of `known`, and given once unless it is
/// repeatable; else why not. `known` is the route's table, which the OpenAPI document also
/// describes.
pub(crate) fn parameters(
    raw: Option<&str>,
    known: &[Param],
) -> Result<Vec<(String, String)>, String> {
    let mut seen: Vec<(String, String)> = Vec::new();
    for (name, value) in url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        let Some(param) = known.iter().find(|param| param.name == name) else {
            return Err(if known.is_empty() {
                format!("unknown parameter '{}': this route takes none", clip(&name))
            } else {
                let names: Vec<&str> = known.iter().map(|param| param.name).collect();
                format!(
                    "unknown parameter '{}': this route takes {}",
                    clip(&name),
                    names.join(", ")
                )
            });
        };
        if !param.repeatable && seen.iter().any(|(seen, _)| *seen == name) {
            return Err(format!("the parameter {name} is given more than once"));
        }
        seen.push((name.into_owned(), value.into_owned()));
    }
    Ok(seen)
}

/// `name` if it names a configured server.
fn known_server(config: &config::Config, name: String) -> Result<String, String> {
    match config.server(&name) {
        Some(_) => Ok(name),
        None => Err(format!(
            "no server named '{}' in the configuration",
            clip(&name)
        )),
    }
}

/// At most 64 characters of what a caller sent, for an error message.
pub(crate) fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> config::Config {
        config::parse_toml(
            "[[servers]]\nname = \"time\"\ntransport = { type = \"stdio\", command = \"t\" }\n\n[[profiles]]\nname = \"ops\"\nadmin = true\n",
            std::path::Path::new("/tmp/mcpgw.toml"),
        )
        .expect("config")
    }

    fn search(raw: &str) -> Result<SearchQuery, String> {
        search_query(Some(raw), &config())
    }

    #[test]
    fn a_search_reads_its_parameters_and_names_a_bad_one() {
        let query = search("q=what+time+is+it&top_k=7&strategy=Vector&server=time&server=time")
            .expect("valid");
        assert_eq!(query.query, "what time is it");
        assert_eq!(query.top_k, 7);
        assert_eq!(query.strategy, Some(catalog::Strategy::Vector));
        assert_eq!(query.servers, ["time", "time"]);
        assert_eq!(search("q=x").expect("valid").top_k, DEFAULT_TOP_K);
        let check = |raw: &str, expect: &str| {
            let error = search(raw).expect_err(raw);
            assert!(error.contains(expect), "{raw}: {error}");
        };
        check("", "the parameter q is required");
        check("q=+", "the parameter q is required");
        check(
            "q=x&top_k=0",
            "top_k must be a whole number from 1 to 50, not '0'",
        );
        check("q=x&top_k=51", "from 1 to 50, not '51'");
        check("q=x&top_k=abc", "not 'abc'");
        check(
            "q=x&strategy=magic",
            "strategy must be bm25, vector or hybrid, not 'magic'",
        );
        check("q=x&server=nope", "no server named 'nope'");
        check(
            "q=x&topk=3",
            "unknown parameter 'topk': this route takes q, top_k",
        );
        check("q=x&q=y", "the parameter q is given more than once");
    }

    #[test]
    fn query_strings_read_back_as_what_they_were_made_from() {
        let query = SearchQuery {
            query: "a & b = c?".to_owned(),
            top_k: 3,
            strategy: Some(catalog::Strategy::Hybrid),
            servers: vec!["time".to_owned()],
        };
        let text = search_query_string(&query);
        assert_eq!(search(text.trim_start_matches('?')), Ok(query));
        let tools = ToolsQuery {
            server: Some("time".to_owned()),
            profile: Some("ops".to_owned()),
        };
        let text = tools_query_string(&tools);
        assert_eq!(
            tools_query(Some(text.trim_start_matches('?')), &config()),
            Ok(tools)
        );
        assert_eq!(tools_query_string(&ToolsQuery::default()), "");
        assert_eq!(
            tools_query(Some("profile=nobody"), &config()),
            Err("no profile named 'nobody' in the configuration".to_owned())
        );
        assert_eq!(
            parameters(Some("x=1"), &[]),
            Err("unknown parameter 'x': this route takes none".to_owned())
        );
    }
}
