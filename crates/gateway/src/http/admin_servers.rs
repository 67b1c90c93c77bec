//! The admin API's server writes, beside `admin_v1`'s reads under `/admin/v1/servers`:
//!
//! - `POST /admin/v1/servers`: adds a server, given as JSON in the shape of a `[[servers]]`
//!   table (`{"name": "time", "transport": {"type": "stdio", "command": "uvx", "args":
//!   ["mcp-server-time"]}}`), or every server of an `mcpServers` snippet pasted from Claude
//!   Desktop, Cursor or VS Code (`{"mcpServers": {...}}`, `{"servers": {...}}`), imported as
//!   `mcpgw import` does. 201.
//! - `GET /admin/v1/servers/{name}`: the server's row, as in the list.
//! - `PUT /admin/v1/servers/{name}`: replaces its table (the body's `name`, if any, must be
//!   `name`); `PATCH`: changes it by a JSON merge patch (`null` removes a key); `DELETE`:
//!   removes it.
//! - `POST /admin/v1/servers/{name}/enable` and `/disable`: sets `enabled`; a disabled server
//!   is not connected and its tools leave the catalog.
//! - `POST /admin/v1/servers/{name}/test`: connects to it alone, as `mcpgw servers test NAME
//!   --json` does, and answers the same document (200 whether the server answered or not: `ok`
//!   says).
//! - `GET /admin/v1/servers/{name}/credentials`: whether it has a credential and where each
//!   comes from (variable names, never values), and an OAuth server's sign-ins per principal.
//!
//! Every write changes the configuration file through [`Gateway::change_servers`] and answers
//! the reload it made (`generation`, `added`, `changed`, `removed`, `unchanged`,
//! `restart_needed`) and an import's `warnings`. The statuses, in one table ([`refusal`]): 400
//! for a body that is not a server or a change the loader refuses (`problems` names each; the
//! file is unchanged), 404 for an unknown server, 409 when the file cannot take it (the server
//! exists, the gateway serves `mcpServers` JSON or no file), 500 when the file cannot be
//! written. Guarded and for admins only, as every admin route.

use std::sync::Arc;

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use schemars::JsonSchema;
use serde_json::{Map, Value};

use crate::{
    ChangeError, Gateway, ServerChange,
    http::{admin::Admin, admin_v1::clip, errors::Refusal},
    overview,
};

/// `POST /admin/v1/servers`. This module's routes are `admin_api`'s table.
pub(crate) async fn add(State(gateway): State<Arc<Gateway>>, _: Admin, body: Bytes) -> Response {
    let (text, ServerBody(object)) = match object_body(&body) {
        Ok(read) => read,
        Err(bad) => return bad,
    };
    let change = ServerChange::added(&text, object);
    changed(&gateway, change, StatusCode::CREATED).await
}

pub(crate) async fn replace(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    match object_body(&body) {
        Ok((_, ServerBody(server))) => {
            changed(
                &gateway,
                ServerChange::Replace(name, server),
                StatusCode::OK,
            )
            .await
        }
        Err(bad) => bad,
    }
}

pub(crate) async fn patch(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    match object_body(&body) {
        Ok((_, ServerBody(patch))) => {
            changed(&gateway, ServerChange::Patch(name, patch), StatusCode::OK).await
        }
        Err(bad) => bad,
    }
}

pub(crate) async fn remove(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    Path(name): Path<String>,
) -> Response {
    changed(&gateway, ServerChange::Remove(name), StatusCode::OK).await
}

pub(crate) async fn enable(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    Path(name): Path<String>,
) -> Response {
    changed(&gateway, ServerChange::Enable(name, true), StatusCode::OK).await
}

pub(crate) async fn disable(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    Path(name): Path<String>,
) -> Response {
    changed(&gateway, ServerChange::Enable(name, false), StatusCode::OK).await
}

/// Makes `change` and answers its reload with `status`, or the refusal.
async fn changed(gateway: &Arc<Gateway>, change: ServerChange, status: StatusCode) -> Response {
    match gateway.change_servers(change).await {
        Ok(changed) => (status, Json(changed)).into_response(),
        Err(refused) => refusal(&refused),
    }
}

/// The one mapping from a refused change to its HTTP answer.
pub(crate) fn refusal(refused: &ChangeError) -> Response {
    let status = match refused {
        ChangeError::Invalid { problems, .. } => {
            let body = Refusal {
                error: &refused.to_string(),
                problems: Some(problems),
            };
            return (StatusCode::BAD_REQUEST, Json(body)).into_response();
        }
        ChangeError::NoSuchServer(_) => StatusCode::NOT_FOUND,
        ChangeError::Conflict(_) => StatusCode::CONFLICT,
        ChangeError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    super::errors::plain(status, &refused.to_string())
}

pub(crate) async fn one(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    Path(name): Path<String>,
) -> Response {
    match overview::server(&gateway, &name).await {
        Some(row) => Json(row).into_response(),
        None => unknown(&name),
    }
}

pub(crate) async fn test(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    Path(name): Path<String>,
) -> Response {
    let config = gateway.config();
    let Some(server) = config.server(&name).cloned() else {
        return unknown(&name);
    };
    let tested = crate::test_server(&config, server, gateway.store().cloned()).await;
    Json(tested.report()).into_response()
}

pub(crate) async fn credentials(
    State(gateway): State<Arc<Gateway>>,
    _: Admin,
    Path(name): Path<String>,
) -> Response {
    let config = gateway.config();
    match config.server(&name) {
        Some(server) => Json(overview::credentials(&gateway, server).await).into_response(),
        None => unknown(&name),
    }
}

fn unknown(name: &str) -> Response {
    super::errors::plain(
        StatusCode::NOT_FOUND,
        &format!("no server named '{}' in the configuration", clip(name)),
    )
}

/// The body of `POST /admin/v1/servers` and `PUT /admin/v1/servers/{name}`: a server as a
/// `[[servers]]` table (`{"name": "time", "transport": {"type": "stdio", "command": "uvx",
/// "args": ["mcp-server-time"]}}`, the keys of the configuration reference, a secret as `{"env":
/// "VARIABLE"}`), or for `POST` a pasted `mcpServers` snippet (`{"mcpServers": {...}}`,
/// `{"servers": {...}}`); for `PATCH`, a JSON merge patch of the table. The configuration
/// loader checks it and names each problem, so it is an open object here: the loader's
/// `deny_unknown_fields` types stay the one description of a table.
#[derive(JsonSchema)]
pub(crate) struct ServerBody(Map<String, Value>);

/// The body as text and as a JSON object; else 400 saying what it must be.
#[allow(clippy::result_large_err)]
fn object_body(body: &[u8]) -> Result<(String, ServerBody), Response> {
    let bad = |why: &str| {
        super::errors::plain(
            StatusCode::BAD_REQUEST,
            &format!(
                "the body must be a JSON object: a server as a [[servers]] table ({{\"name\": ..., \"transport\": {{...}}}}) or pasted mcpServers JSON; {why}"
            ),
        )
    };
    let text = std::str::from_utf8(body).map_err(|_| bad("this is not UTF-8 text"))?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => Ok((text.to_owned(), ServerBody(object))),
        Ok(_) => Err(bad("this is JSON, but not an object")),
        Err(error) => Err(bad(&format!("this is not JSON ({error})"))),
    }
}
