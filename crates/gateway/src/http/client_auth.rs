//! Who is calling over HTTP: client API keys on `/mcp` and `/oauth/*`, the principal each
//! request runs as, and the rule for when the listener may start without them.
//!
//! - Enforcement is decided once, as the listener starts ([`ClientAccess::decide`]): keys are
//!   required when `[gateway] client_auth = "api_key"`, or when at least one client key is
//!   stored. Once required they stay required for the listener's life, so removing the last
//!   key closes the gateway rather than opening it.
//! - Without keys the listener starts only on loopback, and only while
//!   `allow_unauthenticated_loopback` (default true) holds; its requests run as
//!   [`Principal::Local`], like stdio's. Such an open listener gets a fresh [`AdminToken`],
//!   written to the data directory as it starts, which the guard (`guard`) asks of every
//!   admin request.
//! - Keys are looked up per request (hashed, compared in constant time: see `store::clients`),
//!   so a removed key stops working at once. `/healthz`, the protected-resource metadata and
//!   the browser's return to `/oauth/callback` (protected by its single-use `state`) stay open.
//! - With `[gateway.jwt]` set, client auth is always required, wherever the listener is; a
//!   bearer value shaped like a JWT (three dot-separated base64url parts) is checked as a JWT
//!   (see `jwt`), anything else as a client key. A refused JWT gets 401 `invalid_token` with an
//!   `error_description` naming the failed check; a genuine one whose profile claim names no
//!   defined profile gets 403; when the identity provider's keys cannot be fetched, 503. The
//!   protected-resource metadata then lists the issuer in `authorization_servers`.
//! - A key never reaches a log line, an error or a response; the client's name does.

use std::{net::SocketAddr, sync::Arc};

use anyhow::bail;
use axum::{
    Json, Router,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::Response,
    routing::get,
};
use serde_json::json;

use crate::{
    Gateway,
    http::{
        guard::{AdminToken, admin_token_path},
        jwt::{self, Rejection},
    },
    oauth::login::CALLBACK_PATH,
    principal::Principal,
};

/// Where the protected-resource metadata (RFC 9728) is served. Clients that construct the
/// well-known URL for `/mcp` themselves use the path-inserted form, served as well.
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Whether HTTP requests must carry a client key, decided as the listener starts.
#[derive(Clone, Debug)]
pub enum ClientAccess {
    /// No keys: every request is the local user's (loopback only); the admin routes need
    /// this token.
    Open(AdminToken),
    /// `Authorization: Bearer <key>` required, looked up in this store.
    Keys(store::Store),
    /// `[gateway.jwt]`: `Authorization: Bearer` required, with a JWT from the identity
    /// provider or a client key.
    Tokens {
        jwt: Arc<jwt::Verifier>,
        keys: store::Store,
    },
}

impl ClientAccess {
    /// Applies the start rule for a listener on `addr`, or says why it must not start.
    pub async fn decide(gateway: &Gateway, addr: SocketAddr) -> anyhow::Result<ClientAccess> {
        let settings = &gateway.config().gateway;
        let Some(store) = gateway.store() else {
            // Whether keys exist cannot be known: fail closed rather than serve openly a
            // gateway its operator meant to protect.
            bail!(
                "refusing to serve HTTP on {addr}: the database holding the client keys could not be opened (see the warning above); fix `[store] path`, or serve over stdio with `mcpgw serve --stdio`"
            );
        };
        if let Some(jwt) = &settings.jwt {
            // Judged now so a JWKS the network policy refuses stops the start, not every
            // request; each fetch checks again.
            netguard::check_url(&jwt.jwks_url, gateway.network()).map_err(|refusal| {
                anyhow::anyhow!(
                    "refusing to serve HTTP on {addr}: `[gateway.jwt] jwks_url` is not reachable under `[network] allow`: {refusal}"
                )
            })?;
            let verifier =
                jwt::Verifier::new(jwt, &gateway.config().policy, gateway.network().clone())?;
            tracing::info!(issuer = %jwt.issuer, jwks_url = %jwt.jwks_url, "client JWTs accepted beside client keys");
            return Ok(ClientAccess::Tokens {
                jwt: Arc::new(verifier),
                keys: store.clone(),
            });
        }
        let required = settings.client_auth == config::ClientAuth::ApiKey
            || store.has_clients().await.map_err(|error| {
                anyhow::anyhow!(
                    "refusing to serve HTTP on {addr}: cannot read the client keys: {error}"
                )
            })?;
        if required {
            return Ok(ClientAccess::Keys(store.clone()));
        }
        if !addr.ip().is_loopback() {
            bail!(
                "refusing to serve HTTP on {addr} without client authentication: anyone who can reach that address could use every configured server. Create a client key with `mcpgw clients add NAME` (clients then send `Authorization: Bearer <key>`), or listen on a loopback address such as 127.0.0.1"
            );
        }
        if !settings.allow_unauthenticated_loopback {
            bail!(
                "refusing to serve HTTP on {addr} without client authentication: `[gateway] allow_unauthenticated_loopback` is false. Create a client key with `mcpgw clients add NAME`, or set it to true"
            );
        }
        let token = AdminToken::generate().map_err(|error| {
            anyhow::anyhow!("refusing to serve HTTP on {addr}: cannot make an admin token: {error}")
        })?;
        let path = admin_token_path(&gateway.config().store);
        token.write_to(&path).map_err(|error| {
            anyhow::anyhow!(
                "refusing to serve HTTP on {addr}: cannot write the admin token to {}: {error}",
                path.display()
            )
        })?;
        Ok(ClientAccess::Open(token))
    }

    /// Whether requests must carry a client key or (with `[gateway.jwt]`) a JWT.
    pub fn requires_keys(&self) -> bool {
        !matches!(self, ClientAccess::Open(_))
    }

    /// The admin token of an open listener.
    pub fn admin_token(&self) -> Option<&AdminToken> {
        match self {
            ClientAccess::Open(token) => Some(token),
            _ => None,
        }
    }

    /// The issuer of the accepted JWTs, if any.
    fn issuer(&self) -> Option<&str> {
        match self {
            ClientAccess::Tokens { jwt, .. } => Some(jwt.issuer()),
            _ => None,
        }
    }
}

/// The metadata routes, and `layer`, which authenticates the requests that need it.
pub(crate) fn apply(app: Router, access: ClientAccess, local: SocketAddr) -> Router {
    let shared = Arc::new((access, local));
    let metadata = {
        let shared = shared.clone();
        move |headers: HeaderMap| {
            let shared = shared.clone();
            async move {
                Json(resource_metadata(
                    &base_url(&headers, shared.1),
                    shared.0.issuer(),
                ))
            }
        }
    };
    app.route(RESOURCE_METADATA_PATH, get(metadata.clone()))
        .route(&format!("{RESOURCE_METADATA_PATH}/mcp"), get(metadata))
        .layer(axum::middleware::from_fn_with_state(shared, authenticate))
}

/// The protected-resource metadata: the resource is the `/mcp` URL. With API keys only, no
/// `authorization_servers`: RFC 9728 makes the member optional, keys are issued out of band,
/// and listing a server would send OAuth-capable clients into a sign-in that cannot succeed.
/// With `[gateway.jwt]`, the JWT issuer, so MCP clients can discover the identity provider.
fn resource_metadata(base: &str, issuer: Option<&str>) -> serde_json::Value {
    let mut metadata = json!({
        "resource": format!("{base}/mcp"),
        "resource_name": "mcpgw",
        "bearer_methods_supported": ["header"],
    });
    if let Some(issuer) = issuer {
        metadata["authorization_servers"] = json!([issuer]);
    }
    metadata
}

/// Whether a request to `path` must name its client: the MCP endpoint, the admin endpoints
/// (which then check what the client may do there) and the sign-in endpoints, except the
/// browser's return from the authorization server.
fn requires_client(path: &str) -> bool {
    path == "/mcp"
        || path.starts_with("/mcp/")
        || path.starts_with("/admin/")
        || (path.starts_with("/oauth/") && path != CALLBACK_PATH)
}

async fn authenticate(
    State(shared): State<Arc<(ClientAccess, SocketAddr)>>,
    mut request: Request,
    next: Next,
) -> Response {
    let (access, local) = &*shared;
    if !requires_client(request.uri().path()) {
        return next.run(request).await;
    }
    let (store, verifier) = match access {
        ClientAccess::Open(_) => (None, None),
        ClientAccess::Keys(store) => (Some(store), None),
        ClientAccess::Tokens { jwt, keys } => (Some(keys), Some(jwt)),
    };
    let principal = match store {
        None => Principal::Local,
        Some(store) => {
            let base = base_url(request.headers(), *local);
            let Some(presented) = bearer(request.headers()) else {
                return unauthorized(&base, Refusal::Missing(access.issuer()));
            };
            let checked = match verifier {
                Some(verifier) if jwt::is_jwt_shaped(presented) => {
                    by_jwt(verifier, presented, &base).await
                }
                _ => by_key(store, presented, &base).await,
            };
            match checked {
                Ok(principal) => principal,
                Err(refused) => return refused,
            }
        }
    };
    tracing::debug!(%principal, method = %request.method(), path = request.uri().path(), "request");
    request.extensions_mut().insert(principal);
    next.run(request).await
}

async fn by_key(store: &store::Store, key: &str, base: &str) -> Result<Principal, Response> {
    match store.authenticate_client(key).await {
        Ok(Some(name)) => Ok(Principal::Client(name)),
        Ok(None) => Err(unauthorized(base, Refusal::Invalid)),
        Err(error) => {
            tracing::error!(%error, "cannot check a client key");
            Err(json_rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the gateway cannot check client keys right now; try again",
            ))
        }
    }
}

async fn by_jwt(verifier: &jwt::Verifier, token: &str, base: &str) -> Result<Principal, Response> {
    match verifier.verify(token).await {
        Ok(identity) => Ok(Principal::User {
            subject: identity.subject,
            profile: identity.profile,
        }),
        Err(Rejection::Invalid(invalid)) => {
            tracing::debug!(reason = invalid.description(), "bearer JWT refused");
            Err(unauthorized(base, Refusal::Token(invalid)))
        }
        Err(Rejection::UnknownProfile { subject }) => {
            tracing::warn!(%subject, "bearer JWT refused: its profile claim names no profile in [[profiles]]");
            Err(json_rpc_error(
                StatusCode::FORBIDDEN,
                "the token is valid, but its profile claim names no profile this gateway defines: ask the operator to add the profile under [[profiles]], or the identity provider to issue a defined one",
            ))
        }
        Err(Rejection::KeysUnavailable) => Err(json_rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the identity provider's signing keys are unavailable, so bearer JWTs cannot be checked right now; try again later",
        )),
    }
}

#[derive(Clone, Copy)]
enum Refusal<'a> {
    /// No bearer value; with `[gateway.jwt]`, the JWT issuer.
    Missing(Option<&'a str>),
    Invalid,
    Token(jwt::Invalid),
}

fn unauthorized(base: &str, refusal: Refusal<'_>) -> Response {
    let metadata = format!("{base}{RESOURCE_METADATA_PATH}");
    let (challenge, message) = match refusal {
        Refusal::Missing(None) => (
            format!("Bearer resource_metadata=\"{metadata}\""),
            "this gateway requires a client key: send the header `Authorization: Bearer <key>`; the operator creates keys with `mcpgw clients add NAME`".to_owned(),
        ),
        Refusal::Missing(Some(issuer)) => (
            format!("Bearer resource_metadata=\"{metadata}\""),
            format!("this gateway requires a bearer token: send the header `Authorization: Bearer <token>` with a JWT from the identity provider {issuer}, or a client key (`mcpgw clients add NAME`)"),
        ),
        Refusal::Invalid => (
            format!(
                "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", error_description=\"unknown or removed client key\""
            ),
            "the client key is not valid (unknown or removed): ask the operator for a key (`mcpgw clients add NAME`)".to_owned(),
        ),
        Refusal::Token(invalid) => (
            format!(
                "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", error_description=\"{}\"",
                invalid.description()
            ),
            format!("the bearer token was refused: {}", invalid.description()),
        ),
    };
    let mut response = json_rpc_error(StatusCode::UNAUTHORIZED, &message);
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

fn json_rpc_error(status: StatusCode, message: &str) -> Response {
    super::errors::json_rpc(status, super::errors::UNAUTHORIZED, message)
}

/// The key of an `Authorization: Bearer <key>` header (scheme case-insensitive, RFC 9110).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

/// `http://HOST` as the client addressed the gateway, from its `Host` header when that is a
/// plain host and port (it is quoted into a header), else the listener's own address.
fn base_url(headers: &HeaderMap, local: SocketAddr) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'-' | b'[' | b']')
                })
        });
    match host {
        Some(host) => format!("http://{host}"),
        None => format!("http://{local}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_mcp_and_sign_in_endpoints_need_a_client() {
        for path in [
            "/mcp",
            "/mcp/",
            "/oauth/start",
            "/oauth/status",
            "/admin/tools/held",
        ] {
            assert!(requires_client(path), "{path}");
        }
        for path in [
            "/healthz",
            "/oauth/callback",
            RESOURCE_METADATA_PATH,
            "/.well-known/oauth-protected-resource/mcp",
            "/mcpx",
        ] {
            assert!(!requires_client(path), "{path}");
        }
    }

    #[test]
    fn a_bearer_key_is_read_from_the_authorization_header_only() {
        let check = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::AUTHORIZATION,
                HeaderValue::from_str(value).expect("header value"),
            );
            bearer(&headers).map(str::to_owned)
        };
        assert_eq!(check("Bearer mcpgw_abc").as_deref(), Some("mcpgw_abc"));
        assert_eq!(check("bearer  mcpgw_abc ").as_deref(), Some("mcpgw_abc"));
        assert_eq!(check("Basic mcpgw_abc"), None);
        assert_eq!(check("Bearer "), None);
        assert_eq!(check("mcpgw_abc"), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn the_metadata_url_uses_a_plain_host_or_the_listener() {
        let local: SocketAddr = "127.0.0.1:8931".parse().expect("address");
        let with_host = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::HOST,
                HeaderValue::from_str(host).expect("header value"),
            );
            base_url(&headers, local)
        };
        assert_eq!(with_host("gw.example:443"), "http://gw.example:443");
        assert_eq!(with_host("[::1]:80"), "http://[::1]:80");
        assert_eq!(with_host("evil\"x"), "http://127.0.0.1:8931");
        assert_eq!(base_url(&HeaderMap::new(), local), "http://127.0.0.1:8931");
        assert_eq!(
            resource_metadata("http://gw.example", None)["resource"],
            "http://gw.example/mcp"
        );
        assert_eq!(
            resource_metadata("http://gw.example", None).get("authorization_servers"),
            None
        );
        assert_eq!(
            resource_metadata("http://gw.example", Some("https://idp.example"))["authorization_servers"],
            json!(["https://idp.example"])
        );
    }

    #[test]
    fn principals_have_distinct_ids() {
        assert_eq!(Principal::Local.id(), "local");
        assert_eq!(Principal::Client("local".into()).id(), "client:local");
        assert_eq!(
            Principal::of(&rmcp::model::Extensions::new()),
            Principal::Local
        );
    }
}
