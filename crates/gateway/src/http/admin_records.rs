//! The admin API's records, under `/admin/v1` beside `admin_v1`'s servers, tools and search:
//!
//! - `GET /admin/v1/audit`: the audit log, newest first, one page at a time:
//!   `{"entries": [...], "next": CURSOR|null}`. Filters, each optional and all applying at
//!   once: `principal`, `server`, `tool` (qualified name), `decision` and `outcome` (the audit
//!   log's words), `since` and `until` (RFC 3339, or a duration back from now: `30m`, `2d`);
//!   `limit` (1 to 500, default 50); `after=CURSOR` continues after the page that gave it.
//!   Rows never hold arguments, only their SHA-256.
//! - `GET /admin/v1/approvals[?status=pending|all][&limit=N]`: the calls waiting for a person
//!   (default), or the newest in any state.
//! - `GET /admin/v1/clients`: every client key's name, its profile and whether that makes it
//!   an administrator, when it was made and last used. Never a key (none is stored).
//! - `POST /admin/v1/clients`, body `{"name": "ci"}`: adds a client key and answers it, this
//!   once (201; only its hash is stored, and it is never logged); 409 when the name is taken.
//!   The profile it runs under is the configuration's (the profile whose `clients` names it),
//!   as on the console's clients page, so the body names nothing else.
//! - `DELETE /admin/v1/clients/{name}`: removes a client key; it stops working at once (204;
//!   404 when no client has the name).
//! - `GET /admin/v1/profiles`: the configured profiles with their rules and the tools each
//!   exposes, as the console's clients page shows them, and the default profile's name.
//! - `GET /admin/v1/connections`: every stored OAuth sign-in (server, principal, issuer, when
//!   it expires and was last renewed). Never a token.
//! - `DELETE /admin/v1/connections/{server}/{principal}`: signs `principal` out of `server`:
//!   its stored tokens are deleted and its own session with the server ends (204; 404 when it
//!   had neither). Its next call to the server asks it to sign in again.
//! - `POST /admin/v1/connections/{server}/signin`: starts the gateway's own OAuth sign-in to
//!   `server` for the caller (`Logins::begin`, as the console's Sign in button and a tool
//!   call's sign-in link do) and answers the authorization URL to open in a browser, never a
//!   token. 404 for an unknown server, 409 for one without OAuth or a gateway that cannot take
//!   the browser's return.
//!
//! Guarded and for admins only, as every admin route; a bad parameter gets 400 naming it.
//! Routed by `admin_api`, the one table of the admin API.

use std::{sync::Arc, time::SystemTime};

use axum::{
    Extension, Json,
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use schemars::JsonSchema;
use secrecy::ExposeSecret as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    Gateway,
    http::{
        admin::{ApprovalRow, admin_only, object_body},
        admin_v1::{clip, parameters},
        openapi::{Param, ParamKind},
    },
    oauth::{
        login::{LoginError, Logins},
        unix_seconds,
    },
    overview,
    principal::Principal,
    records,
};

/// Rows a page of the audit log holds unless `limit` says otherwise.
const DEFAULT_AUDIT_LIMIT: usize = 50;
/// The most rows one page may hold.
const MAX_AUDIT_LIMIT: usize = 500;
/// Approvals listed with `status=all` unless `limit` says otherwise.
const DEFAULT_APPROVALS_LIMIT: u32 = 50;
/// The most approvals one answer may hold.
const MAX_APPROVALS_LIMIT: u32 = 500;

type Caller = Option<Extension<Principal>>;

/// A request an administrator made: the database, and the query's parameters.
struct Admitted<'a> {
    store: &'a store::Store,
    pairs: Vec<(String, String)>,
}

/// The request, once the caller is an administrator and the query names only `known`
/// parameters; else the refusal.
fn admitted<'a>(
    gateway: &'a Gateway,
    caller: Caller,
    raw: Option<&str>,
    known: &[Param],
) -> Result<Admitted<'a>, Box<Response>> {
    admin_only(gateway, caller).map_err(Box::new)?;
    let pairs = parameters(raw, known).map_err(|bad| Box::new(bad_request(&bad)))?;
    let store = gateway.store().ok_or_else(|| Box::new(unavailable()))?;
    Ok(Admitted { store, pairs })
}

/// The answer `list` makes of what the database listed, or why it could not.
fn listed<T, A: Serialize>(
    rows: Result<Vec<T>, store::StoreError>,
    list: impl FnOnce(Vec<T>) -> A,
) -> Response {
    match rows {
        Ok(rows) => Json(list(rows)).into_response(),
        Err(error) => store_failed(&error),
    }
}

pub(crate) async fn audit(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    RawQuery(raw): RawQuery,
) -> Response {
    if let Err(refused) = admin_only(&gateway, caller) {
        return refused;
    }
    let query = match audit_query(raw.as_deref(), SystemTime::now()) {
        Ok(query) => query,
        Err(bad) => return bad_request(&bad),
    };
    let Some(store) = gateway.store() else {
        return unavailable();
    };
    match store.audit_page(&query).await {
        Ok(page) => Json(AuditPage {
            entries: page.entries.iter().map(records::AuditRow::from).collect(),
            next: page.next.map(|cursor| cursor.to_string()),
        })
        .into_response(),
        Err(error) => store_failed(&error),
    }
}

/// Reads `GET /admin/v1/audit`'s parameters (see the module docs).
fn audit_query(raw: Option<&str>, now: SystemTime) -> Result<store::AuditQuery, String> {
    let mut query = store::AuditQuery {
        limit: DEFAULT_AUDIT_LIMIT,
        ..store::AuditQuery::default()
    };
    for (name, value) in parameters(raw, AUDIT_QUERY)? {
        match name.as_str() {
            "principal" => query.principal = Some(value.into()),
            "server" => query.server = Some(value.into()),
            "tool" => query.tool = Some(value.into()),
            "decision" => query.decision = Some(word(&name, value, &store::DECISION_WORDS)?),
            "outcome" => query.outcome = Some(word(&name, value, &store::OUTCOME_WORDS)?),
            "since" | "until" => {
                let time = records::parse_time(&value, now).ok_or_else(|| {
                    format!("{name} must be an RFC 3339 time (2025-06-01T12:00:00Z) or a duration back from now (30m, 2d)")
                })?;
                if name == "since" {
                    query.since = Some(time);
                } else {
                    query.until = Some(time);
                }
            }
            "limit" => query.limit = limit(&value)?,
            _ => {
                query.after = Some(
                    store::AuditCursor::parse(&value)
                        .ok_or_else(|| "after must be the `next` of the page before".to_owned())?,
                );
            }
        }
    }
    Ok(query)
}

fn word(name: &str, value: String, words: &[&str]) -> Result<String, String> {
    if words.contains(&value.as_str()) {
        Ok(value)
    } else {
        Err(format!("{name} must be one of {}", words.join(", ")))
    }
}

fn limit(value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_AUDIT_LIMIT).contains(n))
        .ok_or_else(|| format!("limit must be a number from 1 to {MAX_AUDIT_LIMIT}"))
}

pub(crate) async fn approvals(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    RawQuery(raw): RawQuery,
) -> Response {
    let Admitted { store, pairs } =
        match admitted(&gateway, caller, raw.as_deref(), APPROVALS_QUERY) {
            Ok(admitted) => admitted,
            Err(refused) => return *refused,
        };
    let mut all = false;
    let mut limit = DEFAULT_APPROVALS_LIMIT;
    let read = (|| {
        for (name, value) in pairs {
            match (name.as_str(), value.as_str()) {
                ("status", "pending") => all = false,
                ("status", "all") => all = true,
                ("status", _) => return Err("status must be pending or all".to_owned()),
                _ => {
                    limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_APPROVALS_LIMIT).contains(n))
                        .ok_or("limit must be a number from 1 to 500")?;
                }
            }
        }
        Ok::<(), String>(())
    })();
    if let Err(bad) = read {
        return bad_request(&bad);
    }
    let listed_approvals = if all {
        store.recent_approvals(limit).await
    } else {
        store.pending_approvals(None).await
    };
    listed(listed_approvals, |rows| ApprovalList {
        approvals: rows.iter().map(ApprovalRow::from).collect(),
    })
}

pub(crate) async fn clients(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    RawQuery(raw): RawQuery,
) -> Response {
    let store = match admitted(&gateway, caller, raw.as_deref(), &[]) {
        Ok(admitted) => admitted.store,
        Err(refused) => return *refused,
    };
    let policy = &gateway.config().policy;
    listed(store.clients().await, |clients| ClientList {
        clients: clients
            .iter()
            .map(|client| ClientRow {
                client: ClientFields::of(policy, &client.name),
                created_at: unix_seconds(client.created_at),
                last_used_at: client.last_used_at.map(unix_seconds),
            })
            .collect(),
    })
}

/// A client's name, principal, profile and whether that makes it an administrator.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ClientFields {
    pub name: String,
    /// `client:NAME`.
    pub principal: String,
    /// The profile whose `clients` names it; `null` for the default.
    pub profile: Option<String>,
    /// Whether that profile says `admin = true`.
    pub admin: bool,
}

impl ClientFields {
    fn of(policy: &config::PolicyConfig, name: &str) -> ClientFields {
        let profile = policy.profile_of_client(name);
        ClientFields {
            name: name.to_owned(),
            principal: format!("client:{name}"),
            profile: profile.map(|p| p.name.clone()),
            admin: profile.is_some_and(|p| p.admin),
        }
    }
}

/// `POST /admin/v1/clients`: adds the body's client and answers its key, this once.
pub(crate) async fn add_client(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    body: Bytes,
) -> Response {
    let store = match admitted(&gateway, caller.clone(), None, &[]) {
        Ok(admitted) => admitted.store,
        Err(refused) => return *refused,
    };
    let body = match object_body(&body) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    if let Some(other) = body.keys().find(|key| *key != "name") {
        return bad_request(&format!(
            "unknown field '{}': the body is {{\"name\": \"NAME\"}}; the profile a client runs under is the one whose `clients` names it in the configuration",
            clip(other)
        ));
    }
    let Ok(NewClient { name }) = serde_json::from_value(Value::Object(body)) else {
        return bad_request("the body must name the client: {\"name\": \"NAME\"}");
    };
    let name = name.as_str();
    match store.add_client(name).await {
        Ok(key) => {
            // The name only: the key is in the answer, and nowhere else.
            let by = caller.map_or(Principal::Local, |Extension(p)| p);
            tracing::info!(client = %name, %by, "client added through the admin API");
            let added = AddedClient {
                client: ClientFields::of(&gateway.config().policy, name),
                key: key.expose_secret(),
            };
            (StatusCode::CREATED, Json(added)).into_response()
        }
        Err(error @ store::StoreError::InvalidClientName { .. }) => bad_request(&error.to_string()),
        Err(error @ store::StoreError::ClientExists { .. }) => {
            super::errors::plain(StatusCode::CONFLICT, &error.to_string())
        }
        Err(error) => write_failed(&error),
    }
}

/// `DELETE /admin/v1/clients/{name}`: removes the client; its key stops working at once.
pub(crate) async fn remove_client(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Response {
    let store = match admitted(&gateway, caller.clone(), None, &[]) {
        Ok(admitted) => admitted.store,
        Err(refused) => return *refused,
    };
    match store.remove_client(&name).await {
        Ok(true) => {
            let by = caller.map_or(Principal::Local, |Extension(p)| p);
            tracing::info!(client = %name, %by, "client removed through the admin API");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => super::errors::plain(
            StatusCode::NOT_FOUND,
            &format!("no client is named '{}'", clip(&name)),
        ),
        Err(error) => write_failed(&error),
    }
}

/// `GET /admin/v1/profiles`: every configured profile, its rules and the tools it exposes.
pub(crate) async fn profiles(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    RawQuery(raw): RawQuery,
) -> Response {
    if let Err(refused) = admin_only(&gateway, caller) {
        return refused;
    }
    if let Err(bad) = parameters(raw.as_deref(), &[]) {
        return bad_request(&bad);
    }
    let config = gateway.config();
    let policy = &config.policy;
    let mut rows = Vec::with_capacity(policy.profiles.len());
    for profile in &policy.profiles {
        let view = overview::tools(
            &gateway,
            &overview::ToolsQuery {
                server: None,
                profile: Some(profile.name.clone()),
            },
        )
        .await;
        rows.push(ProfileRow {
            name: profile.name.clone(),
            clients: profile.clients.clone(),
            admin: profile.admin,
            servers: patterns(&profile.servers),
            allow: patterns(&profile.allow),
            deny: patterns(&profile.deny),
            read_only: profile.read_only,
            destructive: profile.destructive,
            calls_per_minute: profile.calls_per_minute.or(policy.limits.calls_per_minute),
            exposure: view.listing.exposure,
            listed_tokens: view.listing.listed_tokens,
            tools: view.tools.into_iter().map(|tool| tool.name).collect(),
        });
    }
    Json(ProfileList {
        default: policy.default().map(|p| p.name.clone()),
        profiles: rows,
    })
    .into_response()
}

pub(crate) async fn connections(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    RawQuery(raw): RawQuery,
) -> Response {
    let store = match admitted(&gateway, caller, raw.as_deref(), &[]) {
        Ok(admitted) => admitted.store,
        Err(refused) => return *refused,
    };
    let now = SystemTime::now();
    listed(store.list_credentials().await, |rows| ConnectionList {
        connections: rows
            .into_iter()
            .map(|signed_in| ConnectionRow {
                expires_at: signed_in.expires_at.map(unix_seconds),
                expired: signed_in.expires_at.is_some_and(|at| at <= now),
                updated_at: unix_seconds(signed_in.updated_at),
                server: signed_in.server,
                principal: signed_in.principal,
                issuer: signed_in.issuer,
            })
            .collect(),
    })
}

pub(crate) async fn sign_out(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    Path((server, principal)): Path<(String, String)>,
) -> Response {
    let store = match admitted(&gateway, caller, None, &[]) {
        Ok(admitted) => admitted.store,
        Err(refused) => return *refused,
    };
    if gateway.config().server(&server).is_none() {
        return super::errors::plain(
            StatusCode::NOT_FOUND,
            &format!("no server named '{}' in the configuration", clip(&server)),
        );
    }
    let signed_out = match crate::oauth::sign_out(&gateway, store, &server, &principal).await {
        Ok(signed_out) => signed_out,
        Err(error) => return store_failed(&error),
    };
    if signed_out {
        tracing::info!(%server, %principal, "signed out through the admin API");
        StatusCode::NO_CONTENT.into_response()
    } else {
        super::errors::plain(
            StatusCode::NOT_FOUND,
            &format!("{} has no sign-in with '{server}'", clip(&principal)),
        )
    }
}

/// The patterns' text, as the configuration spells them.
fn patterns(patterns: &[config::Pattern]) -> Vec<String> {
    patterns
        .iter()
        .map(|pattern| pattern.as_str().to_owned())
        .collect()
}

/// `POST /admin/v1/connections/{server}/signin`: starts the gateway's OAuth sign-in to
/// `server` for the caller and answers where its browser goes.
pub(crate) async fn sign_in(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    Extension(logins): Extension<Arc<Logins>>,
    Path(server): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(refused) = admin_only(&gateway, caller.clone()) {
        return refused;
    }
    match object_body(&body).map(|body| serde_json::from_value(Value::Object(body))) {
        Ok(Ok(NoFields {})) => {}
        Ok(Err(_)) => return bad_request("the body is empty or {}: the sign-in is the caller's"),
        Err(refused) => return refused,
    }
    if gateway.config().server(&server).is_none() {
        return super::errors::plain(
            StatusCode::NOT_FOUND,
            &format!("no server named '{}' in the configuration", clip(&server)),
        );
    }
    let principal = caller.map_or(Principal::Local, |Extension(p)| p);
    match logins.begin(&gateway, &server, &principal).await {
        Ok(started) => {
            tracing::info!(%server, %principal, "sign-in started through the admin API");
            Json(SignInStarted {
                principal: principal.id(),
                expires_at: unix_seconds(started.expires_at),
                server: started.server,
                authorization_url: started.authorization_url,
                redirect_uri: started.redirect_uri,
            })
            .into_response()
        }
        Err(error) => {
            let status = match &error {
                LoginError::NoStore => StatusCode::SERVICE_UNAVAILABLE,
                LoginError::Start { .. } => StatusCode::BAD_GATEWAY,
                LoginError::Unavailable(_)
                | LoginError::NotOAuth(_)
                | LoginError::ForeignRedirect { .. } => StatusCode::CONFLICT,
            };
            tracing::warn!(%server, %error, "a sign-in through the admin API did not start");
            super::errors::plain(status, &format!("not signed in: {error}"))
        }
    }
}

/// `GET /admin/v1/audit`'s parameters.
pub(crate) const AUDIT_QUERY: &[Param] = &[
    Param::text("principal", "`local`, `client:NAME` or `user:SUBJECT`."),
    Param::text("server", "A server's name."),
    Param::text("tool", "A qualified tool name, `server__tool`."),
    Param {
        kind: ParamKind::OneOf(&store::DECISION_WORDS),
        ..Param::text("decision", "What policy decided.")
    },
    Param {
        kind: ParamKind::OneOf(&store::OUTCOME_WORDS),
        ..Param::text("outcome", "How the call ended.")
    },
    Param::text(
        "since",
        "An RFC 3339 time (`2025-06-01T12:00:00Z`, a bare date is its midnight UTC) or a duration back from now (`30m`, `2d`).",
    ),
    Param::text("until", "As `since`."),
    Param {
        kind: ParamKind::Whole {
            min: 1,
            max: MAX_AUDIT_LIMIT,
            default: DEFAULT_AUDIT_LIMIT,
        },
        ..Param::text("limit", "Rows on the page.")
    },
    Param::text("after", "The `next` of the page before."),
];

/// `GET /admin/v1/approvals`' parameters.
pub(crate) const APPROVALS_QUERY: &[Param] = &[
    Param {
        kind: ParamKind::OneOf(&["pending", "all"]),
        ..Param::text(
            "status",
            "`pending` (the default): the calls waiting for a person; `all`: the newest in any state.",
        )
    },
    Param {
        kind: ParamKind::Whole {
            min: 1,
            max: MAX_APPROVALS_LIMIT as usize,
            default: DEFAULT_APPROVALS_LIMIT as usize,
        },
        ..Param::text("limit", "How many, with `status=all`.")
    },
];

/// A page of the audit log, newest first.
#[derive(Serialize, JsonSchema)]
pub(crate) struct AuditPage {
    pub entries: Vec<records::AuditRow>,
    /// Give it as `after` for the next page; `null` on the last.
    pub next: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ApprovalList {
    pub approvals: Vec<ApprovalRow>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ClientList {
    pub clients: Vec<ClientRow>,
}

/// A client key's owner: never the key.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ClientRow {
    #[serde(flatten)]
    pub client: ClientFields,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds; `null` if it was never used.
    pub last_used_at: Option<i64>,
}

/// `POST /admin/v1/clients`' body.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewClient {
    /// The client's name: its principal is `client:NAME`.
    pub name: String,
}

/// A client just added, with its key: the only time the key is shown.
#[derive(Serialize, JsonSchema)]
pub(crate) struct AddedClient<'a> {
    #[serde(flatten)]
    pub client: ClientFields,
    /// The bearer key the client sends; only its hash is stored.
    pub key: &'a str,
}

/// The configured profiles.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ProfileList {
    /// The profile of a caller no other profile names; `null` when there is none.
    pub default: Option<String>,
    pub profiles: Vec<ProfileRow>,
}

/// A profile's rules and what its clients see.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ProfileRow {
    pub name: String,
    /// The client keys that run under it.
    pub clients: Vec<String>,
    pub admin: bool,
    /// Server, allow and deny patterns, as the configuration spells them.
    pub servers: Vec<String>,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub read_only: bool,
    pub destructive: bool,
    /// Its own limit, else `[limits] calls_per_minute`; `null`: none.
    pub calls_per_minute: Option<u32>,
    /// The exposure that applies to its clients: `search` or `passthrough`.
    pub exposure: String,
    /// What its clients' `tools/list` costs (cl100k_base tokens).
    pub listed_tokens: usize,
    /// The tools it exposes, by qualified name.
    pub tools: Vec<ids::QualifiedName>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ConnectionList {
    pub connections: Vec<ConnectionRow>,
}

/// A stored OAuth sign-in: never a token.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ConnectionRow {
    pub server: ids::ServerName,
    pub principal: ids::PrincipalId,
    pub issuer: String,
    /// When the access token expires (Unix seconds), if the server said.
    pub expires_at: Option<i64>,
    pub expired: bool,
    /// When it was last stored: signed in or renewed (Unix seconds).
    pub updated_at: i64,
}

/// A body that must be empty or `{}`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoFields {}

/// An OAuth sign-in started for the caller: where its browser goes. Never a token.
#[derive(Serialize, JsonSchema)]
pub(crate) struct SignInStarted {
    pub server: ids::ServerName,
    pub principal: ids::PrincipalId,
    /// Open it in a browser.
    pub authorization_url: String,
    /// Where the browser comes back: the gateway's callback.
    pub redirect_uri: String,
    /// When the sign-in stops waiting (Unix seconds).
    pub expires_at: i64,
}

fn bad_request(message: &str) -> Response {
    super::errors::plain(StatusCode::BAD_REQUEST, message)
}

fn unavailable() -> Response {
    super::errors::plain(
        StatusCode::SERVICE_UNAVAILABLE,
        "the gateway runs without its database, which keeps these records",
    )
}

fn write_failed(error: &store::StoreError) -> Response {
    tracing::warn!(%error, "the admin API could not write the database");
    super::errors::plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the database could not be written; the gateway's log says why",
    )
}

fn store_failed(error: &store::StoreError) -> Response {
    tracing::warn!(%error, "the admin API could not read the database");
    super::errors::plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the database could not be read; the gateway's log says why",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn read(raw: &str) -> Result<store::AuditQuery, String> {
        audit_query(Some(raw), UNIX_EPOCH + Duration::from_secs(1_750_000_000))
    }

    #[test]
    fn the_audit_route_reads_every_filter_and_names_a_bad_one() {
        let query = read("principal=client:ci&server=git&tool=git__git_status&decision=denied&outcome=not_run&since=2025-06-01&until=1h&limit=10&after=1748736000000.7").expect("reads");
        assert_eq!(query.principal.as_deref(), Some("client:ci"));
        assert_eq!(query.server.as_deref(), Some("git"));
        assert_eq!(query.tool.as_deref(), Some("git__git_status"));
        assert_eq!(query.decision.as_deref(), Some("denied"));
        assert_eq!(query.outcome.as_deref(), Some("not_run"));
        assert_eq!(
            query.since,
            Some(UNIX_EPOCH + Duration::from_secs(1_748_736_000))
        );
        assert_eq!(
            query.until,
            Some(UNIX_EPOCH + Duration::from_secs(1_750_000_000 - 3600))
        );
        assert_eq!(query.limit, 10);
        assert_eq!(
            query.after.map(|c| c.to_string()).as_deref(),
            Some("1748736000000.7")
        );
        assert_eq!(read("").expect("defaults").limit, DEFAULT_AUDIT_LIMIT);
        for (raw, says) in [
            ("decision=maybe", "decision must be one of allowed"),
            ("outcome=fine", "outcome must be one of ok"),
            ("since=yesterday", "since must be an RFC 3339 time"),
            ("limit=0", "limit must be a number from 1 to 500"),
            ("limit=501", "limit must be a number from 1 to 500"),
            ("after=12", "after must be the `next`"),
            ("user=x", "unknown parameter 'user'"),
            ("limit=1&limit=2", "more than once"),
        ] {
            let error = read(raw).expect_err(raw);
            assert!(error.contains(says), "{raw}: {error}");
        }
    }
}
