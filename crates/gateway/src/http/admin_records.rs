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
//! - `GET /admin/v1/connections`: every stored OAuth sign-in (server, principal, issuer, when
//!   it expires and was last renewed). Never a token.
//! - `DELETE /admin/v1/connections/{server}/{principal}`: signs `principal` out of `server`:
//!   its stored tokens are deleted and its own session with the server ends (204; 404 when it
//!   had neither). Its next call to the server asks it to sign in again.
//!
//! Guarded and for admins only, as every admin route; a bad parameter gets 400 naming it.
//! Routed by `admin_api`, the one table of the admin API.

use std::{sync::Arc, time::SystemTime};

use axum::{
    Extension, Json,
    extract::{Path, RawQuery, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use crate::{
    Gateway,
    http::{
        admin::admin_only,
        admin_v1::{clip, parameters},
    },
    oauth::unix_seconds,
    principal::Principal,
    records,
};

/// Rows a page of the audit log holds unless `limit` says otherwise.
const DEFAULT_AUDIT_LIMIT: usize = 50;
/// The most rows one page may hold.
const MAX_AUDIT_LIMIT: usize = 500;
/// Approvals listed with `status=all` unless `limit` says otherwise.
const DEFAULT_APPROVALS_LIMIT: u32 = 50;

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
    known: &[&str],
) -> Result<Admitted<'a>, Box<Response>> {
    admin_only(gateway, caller).map_err(Box::new)?;
    let pairs = parameters(raw, known, &[]).map_err(|bad| Box::new(bad_request(&bad)))?;
    let store = gateway.store().ok_or_else(|| Box::new(unavailable()))?;
    Ok(Admitted { store, pairs })
}

/// `{"KEY": [row, ...]}` of what the database listed, or why it could not.
fn listed<T>(
    key: &str,
    rows: Result<Vec<T>, store::StoreError>,
    row: impl Fn(&T) -> Value,
) -> Response {
    match rows {
        Ok(rows) => Json(json!({key: rows.iter().map(row).collect::<Vec<_>>()})).into_response(),
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
        Ok(page) => Json(json!({
            "entries": page.entries.iter().map(records::audit_json).collect::<Vec<_>>(),
            "next": page.next.map(|cursor| cursor.to_string()),
        }))
        .into_response(),
        Err(error) => store_failed(&error),
    }
}

/// Reads `GET /admin/v1/audit`'s parameters (see the module docs).
fn audit_query(raw: Option<&str>, now: SystemTime) -> Result<store::AuditQuery, String> {
    const KNOWN: [&str; 9] = [
        "principal",
        "server",
        "tool",
        "decision",
        "outcome",
        "since",
        "until",
        "limit",
        "after",
    ];
    let mut query = store::AuditQuery {
        limit: DEFAULT_AUDIT_LIMIT,
        ..store::AuditQuery::default()
    };
    for (name, value) in parameters(raw, &KNOWN, &[])? {
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
        match admitted(&gateway, caller, raw.as_deref(), &["status", "limit"]) {
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
                        .filter(|n| (1..=500).contains(n))
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
    listed("approvals", listed_approvals, super::approval_json)
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
    listed("clients", store.clients().await, |client| {
        let profile = policy.profile_of_client(&client.name);
        json!({
            "name": client.name,
            "principal": format!("client:{}", client.name),
            "profile": profile.map(|p| p.name.as_str()),
            "admin": profile.is_some_and(|p| p.admin),
            "created_at": unix_seconds(client.created_at),
            "last_used_at": client.last_used_at.map(unix_seconds),
        })
    })
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
    listed("connections", store.list_credentials().await, |signed_in| {
        json!({
            "server": signed_in.server,
            "principal": signed_in.principal,
            "issuer": signed_in.issuer,
            "expires_at": signed_in.expires_at.map(unix_seconds),
            "expired": signed_in.expires_at.is_some_and(|at| at <= now),
            "updated_at": unix_seconds(signed_in.updated_at),
        })
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

fn bad_request(message: &str) -> Response {
    super::errors::plain(StatusCode::BAD_REQUEST, message)
}

fn unavailable() -> Response {
    super::errors::plain(
        StatusCode::SERVICE_UNAVAILABLE,
        "the gateway runs without its database, which keeps these records",
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
