//! The request guard: one layer in front of every HTTP route (`/mcp`, `/admin/*`, `/oauth/*`,
//! `/healthz`, the metadata, and any route added later), so no route can forget it. In order:
//!
//! 1. **Framing and `Host`.** Exactly one `Host` header, well formed (else 400), naming the
//!    listener (else 403): on a loopback listener `localhost` or a loopback address, on any
//!    other the bound address (any address, and the loopback names, when bound to `0.0.0.0`
//!    or `[::]`), with the listener's port or none; or an entry of `[gateway] allowed_hosts`.
//!    An absolute-form target (`POST http://evil.example/mcp`) must name the listener too.
//!    This is what stops DNS rebinding: a page on `rebind.evil.example` whose name now points
//!    at 127.0.0.1 still sends `Host: rebind.evil.example`.
//! 2. **`Origin`**, when present: the listener's own origin (`http://` and a `Host` the
//!    listener accepts, or the very authority the request's `Host` names), or an entry of
//!    `[gateway] allowed_origins`; else 403. `Origin: null` (sandboxed frames, file pages) is
//!    foreign. Clients that are not browsers send no `Origin` and are not affected.
//! 3. **Admin routes** (`/admin/*`, and `/metrics`): a state-changing request (any method but GET, HEAD and
//!    OPTIONS) must say `Content-Type: application/json` (else 415: no HTML form or "simple"
//!    cross-site `fetch` can) and must not carry `Sec-Fetch-Site: cross-site` or `same-site`
//!    (403). On an open listener (no client keys: loopback), every admin request, reads too
//!    (they show pending calls' arguments), must carry the per-start [`AdminToken`] as
//!    `X-Mcpgw-Admin-Token: <token>` or `Authorization: Bearer <token>` (else 401). On a keyed
//!    listener the client key and its profile's `admin` decide, as before.
//!
//! Framing: two `Host` headers are refused above; a body sent with `Transfer-Encoding` whose
//! chunked framing breaks (what a body framed by a `Content-Length` sent beside it looks like
//! once hyper, per RFC 9112, ignores that length) gets 400 rather than the handler's 500.
//!
//! Refusals are JSON: a JSON-RPC error (`-32600`, `id: null`) on `/mcp`, `{"error": "..."}`
//! everywhere else. The parsers ([`parse_authority`], [`parse_origin`]) are pure functions,
//! unit- and property-tested here.
//!
//! Rejected: keeping rmcp's own `allowed_hosts` check on `/mcp` and a second one in the
//! sign-in routes (two rules that had drifted apart, and none on `/admin`); checking `Origin`
//! only on `/mcp`, where the MCP transport spec requires it (the admin routes need it more).

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, Method, StatusCode, Uri, header},
    middleware::Next,
    response::Response,
};
use futures::TryStreamExt as _;
use sha2::{Digest, Sha256};

/// The header the admin token may be sent in (besides `Authorization: Bearer`).
pub const ADMIN_TOKEN_HEADER: &str = "x-mcpgw-admin-token";
/// The admin token's file name, in the data directory (beside the database).
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// The secret that admin requests to an open (keyless, loopback) listener must carry: 32
/// random bytes in hex, made anew each time `serve` starts and written to
/// [`ADMIN_TOKEN_FILE`] (mode 0600) in the data directory, so the user who runs the gateway
/// can read it and a web page cannot. Never printed by `Debug`.
#[derive(Clone)]
pub struct AdminToken {
    value: Arc<str>,
    digest: [u8; 32],
}

impl AdminToken {
    /// A fresh token from the operating system's random source.
    pub fn generate() -> std::io::Result<AdminToken> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
        let value: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(AdminToken::from_value(&value))
    }

    fn from_value(value: &str) -> AdminToken {
        AdminToken {
            value: value.into(),
            digest: Sha256::digest(value.as_bytes()).into(),
        }
    }

    /// The token itself, for the start-up log line.
    pub fn reveal(&self) -> &str {
        &self.value
    }

    /// Writes the token to `path`, readable by its owner only (0600): written to a new file
    /// beside it first and renamed over it, so a reader never sees half a token and an
    /// existing file's looser mode is not inherited.
    pub fn write_to(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write as _;
        let temporary = path.with_extension(format!("{}.tmp", std::process::id()));
        // The data directory: with SQLite the database made it; with PostgreSQL (a fresh
        // container's data volume) this may be the first file in it.
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(parent)?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let _ = std::fs::remove_file(&temporary);
        let written = options.open(&temporary).and_then(|mut file| {
            file.write_all(self.value.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()
        });
        if let Err(error) = written.and_then(|()| std::fs::rename(&temporary, path)) {
            let _ = std::fs::remove_file(&temporary);
            return Err(error);
        }
        Ok(())
    }

    /// Whether `presented` is this token. Digests are compared, so the comparison's time
    /// says nothing about how much of the token a guess got right.
    pub(crate) fn matches(&self, presented: &str) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
        presented == self.digest
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

/// Where the admin token of a gateway configured with `store` is written and read: the data
/// directory, beside the database.
pub fn admin_token_path(store: &config::StoreConfig) -> PathBuf {
    crate::store_path(store).with_file_name(ADMIN_TOKEN_FILE)
}

/// What the guard knows of its listener.
#[derive(Clone, Debug)]
pub(crate) struct Guard {
    local: SocketAddr,
    allowed_hosts: Vec<config::AllowedHost>,
    allowed_origins: Vec<config::AllowedOrigin>,
    /// `Some` on an open listener: the admin routes need it.
    admin_token: Option<AdminToken>,
}

impl Guard {
    pub(crate) fn new(
        local: SocketAddr,
        settings: &config::GatewayConfig,
        admin_token: Option<AdminToken>,
    ) -> Guard {
        Guard {
            local,
            allowed_hosts: settings.allowed_hosts.clone(),
            allowed_origins: settings.allowed_origins.clone(),
            admin_token,
        }
    }

    /// The guard as the outermost layer of `app`.
    pub(crate) fn apply(self, app: Router) -> Router {
        app.layer(axum::middleware::from_fn_with_state(Arc::new(self), guard))
    }

    /// Whether a request may go on, or why not.
    pub(crate) fn judge(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        let host = self.host(uri, headers)?;
        self.origin(headers, &host)?;
        if is_admin_path(uri.path()) {
            self.admin(method, headers)?;
        }
        Ok(())
    }

    /// Step 1: the request's `Host` (and absolute-form target), parsed and accepted.
    fn host(&self, uri: &Uri, headers: &HeaderMap) -> Result<Authority, Refusal> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let (Some(value), None) = (hosts.next(), hosts.next()) else {
            return Err(Refusal::bad_request(
                "the request must carry exactly one Host header",
            ));
        };
        let host = value
            .to_str()
            .ok()
            .and_then(parse_authority)
            .ok_or_else(|| Refusal::bad_request("the Host header is not a host name and port"))?;
        if !self.host_accepted(&host) {
            return Err(Refusal::forbidden(&format!(
                "the Host header `{host}` does not name this gateway (a web page reaching it through a rebound DNS name looks like this); if the gateway is reached under that name, add it to [gateway] allowed_hosts"
            )));
        }
        // RFC 9112 3.2.2: an absolute-form target's authority replaces `Host`; both must pass.
        if let Some(authority) = uri.authority() {
            let target = parse_authority(authority.as_str()).ok_or_else(|| {
                Refusal::bad_request("the request target's authority is malformed")
            })?;
            if !self.host_accepted(&target) {
                return Err(Refusal::forbidden(&format!(
                    "the request target names `{target}`, which is not this gateway"
                )));
            }
        }
        Ok(host)
    }

    /// Whether `host` names this listener (see the module documentation).
    pub(crate) fn host_accepted(&self, host: &Authority) -> bool {
        let configured = self.allowed_hosts.iter().any(|allowed| {
            allowed.host == host.host && allowed.port.is_none_or(|port| host.port == Some(port))
        });
        if configured {
            return true;
        }
        if host.port.is_some_and(|port| port != self.local.port()) {
            return false;
        }
        let ip = host.ip();
        let bound = self.local.ip();
        if bound.is_loopback() {
            host.host == "localhost" || ip.is_some_and(|ip| ip.is_loopback())
        } else if bound.is_unspecified() {
            host.host == "localhost" || ip.is_some()
        } else {
            ip == Some(bound)
        }
    }

    /// Step 2: `Origin`, when present.
    fn origin(&self, headers: &HeaderMap, host: &Authority) -> Result<(), Refusal> {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        let Some(value) = origins.next() else {
            return Ok(());
        };
        let origin = match (value.to_str().ok().and_then(parse_origin), origins.next()) {
            (Some(origin), None) => origin,
            _ => {
                return Err(Refusal::forbidden(
                    "the request's Origin is not an origin this gateway accepts",
                ));
            }
        };
        if self.origin_accepted(&origin, host) {
            Ok(())
        } else {
            Err(Refusal::forbidden(&format!(
                "requests from the web origin {origin} are refused; if that page is meant to use the gateway, add \"{origin}\" to [gateway] allowed_origins"
            )))
        }
    }

    /// Whether `origin` is the listener's own (as reached through `host`) or allowed.
    pub(crate) fn origin_accepted(&self, origin: &Origin, host: &Authority) -> bool {
        let listed = self.allowed_origins.iter().any(|allowed| {
            allowed.scheme == origin.scheme.as_str()
                && allowed.host == origin.host
                && allowed.port == origin.port
        });
        let same_as_host = origin.host == host.host
            && host.port.unwrap_or(origin.scheme.default_port()) == origin.port;
        let own = origin.scheme == Scheme::Http
            && self.host_accepted(&Authority {
                host: origin.host.clone(),
                port: Some(origin.port),
            });
        listed || same_as_host || own
    }

    /// Step 3: the admin routes.
    fn admin(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        let reads = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        if !reads {
            let site = headers
                .get("sec-fetch-site")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") {
                return Err(Refusal::forbidden(
                    "the admin endpoints refuse requests a browser marks as coming from another site (Sec-Fetch-Site)",
                ));
            }
            if !is_json(headers) {
                return Err(Refusal {
                    status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    message: "the admin endpoints take `Content-Type: application/json` (send `{}` for no body)".to_owned(),
                });
            }
        }
        if let Some(token) = &self.admin_token
            && !presented_tokens(headers).any(|presented| token.matches(presented))
        {
            return Err(Refusal {
                status: StatusCode::UNAUTHORIZED,
                message: format!(
                    "the admin endpoints of a listener without client keys need the admin token that `mcpgw serve` printed as it started and wrote to the file `{ADMIN_TOKEN_FILE}` in its data directory: send it as `X-Mcpgw-Admin-Token: <token>` or `Authorization: Bearer <token>`"
                ),
            });
        }
        Ok(())
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Refusal {
    fn bad_request(message: &str) -> Refusal {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            message: message.to_owned(),
        }
    }

    fn forbidden(message: &str) -> Refusal {
        Refusal {
            status: StatusCode::FORBIDDEN,
            message: message.to_owned(),
        }
    }

    /// The refusal in the error shape of the route `path` belongs to.
    fn into_response(self, path: &str) -> Response {
        super::errors::for_path(path, self.status, &self.message)
    }
}

async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    if let Err(refusal) = guard.judge(request.method(), request.uri(), request.headers()) {
        tracing::warn!(
            method = %request.method(),
            path,
            status = refusal.status.as_u16(),
            reason = %refusal.message,
            "request refused by the guard"
        );
        return refusal.into_response(&path);
    }
    if !request.headers().contains_key(header::TRANSFER_ENCODING) {
        return next.run(request).await;
    }
    // hyper drops a `Content-Length` sent beside `Transfer-Encoding` (RFC 9112 6.3) and reads
    // the body as chunked, so a body framed by its length instead fails to decode, and rmcp
    // answers that with 500. A body whose framing breaks is the client's error: 400.
    let broken = Arc::new(AtomicBool::new(false));
    let (parts, body) = request.into_parts();
    let flag = broken.clone();
    let body = body
        .into_data_stream()
        .inspect_err(move |_| flag.store(true, Ordering::Relaxed));
    let response = next
        .run(Request::from_parts(parts, Body::from_stream(body)))
        .await;
    if broken.load(Ordering::Relaxed) {
        tracing::warn!(
            path,
            "request refused: its body's chunked framing is malformed"
        );
        return Refusal::bad_request(
            "the request body's framing is malformed (with Transfer-Encoding: chunked, a body must be sent in chunks; Content-Length is ignored)",
        )
        .into_response(&path);
    }
    response
}

fn is_admin_path(path: &str) -> bool {
    path == "/admin" || path.starts_with("/admin/") || path == "/metrics"
}

/// Whether the body is declared as JSON (`application/json`, any parameters, any case).
fn is_json(headers: &HeaderMap) -> bool {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    match (types.next(), types.next()) {
        (Some(value), None) => value.to_str().is_ok_and(|value| {
            value
                .split(';')
                .next()
                .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
        }),
        _ => false,
    }
}

/// The values that may be the admin token: the dedicated header, and a bearer credential.
fn presented_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    let dedicated = headers
        .get_all(ADMIN_TOKEN_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok());
    let bearer = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| {
            let (scheme, credential) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(credential)
        });
    dedicated.chain(bearer)
}

/// A host and optional port, in the normal form of `config::AllowedHost`: ASCII lower case,
/// no trailing dot, IPv4 in dotted quad, IPv6 in brackets in canonical text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: String,
    pub port: Option<u16>,
}

impl Authority {
    fn ip(&self) -> Option<IpAddr> {
        match self.host.strip_prefix('[') {
            Some(v6) => v6
                .strip_suffix(']')?
                .parse::<Ipv6Addr>()
                .ok()
                .map(IpAddr::V6),
            None => self.host.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        }
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// The scheme of an accepted origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A browser origin (`scheme://host:port`, the port explicit or the scheme's default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

/// Parses a `Host` header or an authority (`name`, `name:port`, `1.2.3.4:80`, `[::1]:80`)
/// into its normal form; `None` for anything else (user info, paths, spaces, non-ASCII, an
/// empty or out-of-range port, a bare IPv6 address, an empty label, a name over 253 bytes).
/// International names arrive as punycode (`xn--`), as browsers send them.
pub fn parse_authority(text: &str) -> Option<Authority> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (literal, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = literal.parse().ok()?;
        let port = match after {
            "" => None,
            _ => Some(parse_port(after.strip_prefix(':')?)?),
        };
        (format!("[{ip}]"), port)
    } else {
        let (name, port) = match text.rsplit_once(':') {
            Some((name, port)) => (name, Some(parse_port(port)?)),
            None => (text, None),
        };
        (parse_name(name)?, port)
    };
    Some(Authority { host, port })
}

/// Parses an `Origin` header value: `http` or `https` and an authority, nothing after it.
/// `null`, other schemes and anything malformed are `None`: foreign.
pub fn parse_origin(text: &str) -> Option<Origin> {
    let (scheme, authority) = text.split_once("://")?;
    let scheme = if scheme.eq_ignore_ascii_case("http") {
        Scheme::Http
    } else if scheme.eq_ignore_ascii_case("https") {
        Scheme::Https
    } else {
        return None;
    };
    let Authority { host, port } = parse_authority(authority)?;
    Some(Origin {
        scheme,
        host,
        port: port.unwrap_or(scheme.default_port()),
    })
}

/// One to five digits, within `u16`.
fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A host name or IPv4 address, lower-cased, one trailing dot removed.
fn parse_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return None;
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return None;
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels
        .iter()
        .any(|label| label.is_empty() || label.len() > 63)
    {
        return None;
    }
    if let Ok(ip) = name.parse::<Ipv4Addr>() {
        return Some(ip.to_string());
    }
    // A numeric last label is an IPv4 address in a form browsers would have rewritten
    // (`127.1`, `0x7f.1`): not a name, and not worth guessing at.
    let last = labels.last()?;
    if last.bytes().all(|b| b.is_ascii_digit())
        || (last.len() > 2 && last[..2].eq_ignore_ascii_case("0x"))
    {
        return None;
    }
    Some(name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use proptest::prelude::*;

    use super::*;
    use serde_json::json;

    fn guard(local: &str, toml: &str, token: Option<&str>) -> Guard {
        let config = config::parse_toml(toml, Path::new("/tmp/mcpgw.toml")).expect("config");
        Guard::new(
            local.parse().expect("address"),
            &config.gateway,
            token.map(AdminToken::from_value),
        )
    }

    /// Judges a request with `headers` (`name: value` lines) and says the status it gets.
    fn status(guard: &Guard, method: &str, target: &str, headers: &[&str]) -> u16 {
        let mut map = HeaderMap::new();
        for line in headers {
            let (name, value) = line.split_once(": ").expect("name: value");
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        let uri: Uri = target.parse().expect("uri");
        match guard.judge(&method, &uri, &map) {
            Ok(()) => 200,
            Err(refusal) => refusal.status.as_u16(),
        }
    }

    fn authority(text: &str) -> Option<String> {
        parse_authority(text).map(|a| a.to_string())
    }

    #[test]
    fn authorities_parse_into_their_normal_form() {
        let check = |text: &str, expect: Option<&str>| {
            assert_eq!(authority(text).as_deref(), expect, "{text:?}");
        };
        check("localhost", Some("localhost"));
        check("LocalHost.:8931", Some("localhost:8931"));
        check("127.0.0.1:8931", Some("127.0.0.1:8931"));
        check("[::1]:8080", Some("[::1]:8080"));
        check("[0:0:0:0:0:0:0:1]", Some("[::1]"));
        check("xn--bcher-kva.example", Some("xn--bcher-kva.example"));
        check(
            "XN--BCHER-KVA.Example:443",
            Some("xn--bcher-kva.example:443"),
        );
        for bad in [
            "",
            ":80",
            "localhost:",
            "localhost:65536",
            "localhost:+80",
            "localhost:080000",
            "::1",
            "[::1",
            "[::1]x",
            "[::1]:",
            "[fe80::1%25eth0]",
            "user@localhost",
            "local host",
            "localhost/",
            "a..b",
            ".",
            "..",
            "bücher.example",
            "127.1",
            "0x7f.0.0.1",
            "1.2.3.256",
        ] {
            check(bad, None);
        }
    }

    #[test]
    fn origins_parse_with_their_default_port() {
        let origin = |text: &str| parse_origin(text).map(|o| o.to_string());
        assert_eq!(
            origin("http://localhost").as_deref(),
            Some("http://localhost:80")
        );
        assert_eq!(
            origin("HTTPS://Evil.Example").as_deref(),
            Some("https://evil.example:443")
        );
        assert_eq!(
            origin("http://[::1]:8931").as_deref(),
            Some("http://[::1]:8931")
        );
        for foreign in [
            "null",
            "",
            "file://",
            "chrome-extension://abcdef",
            "http://",
            "http://evil.example/",
            "http://evil.example/path",
            "evil.example",
        ] {
            assert_eq!(origin(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn a_loopback_listener_answers_to_loopback_names_on_its_port() {
        let guard = guard("127.0.0.1:8931", "", None);
        let host = |value: &str| status(&guard, "POST", "/mcp", &[&format!("host: {value}")]);
        for ok in [
            "127.0.0.1:8931",
            "localhost:8931",
            "LOCALHOST.:8931",
            "localhost",
            "[::1]:8931",
            "127.0.0.2:8931",
        ] {
            assert_eq!(host(ok), 200, "{ok}");
        }
        for foreign in [
            "rebind.evil.example:8931",
            "rebind.evil.example",
            "localhost.evil.example:8931",
            "localhost:8932",
            "10.0.0.1:8931",
            "[::ffff:127.0.0.1]:8931",
        ] {
            assert_eq!(host(foreign), 403, "{foreign}");
        }
        assert_eq!(host("bad host"), 400);
        assert_eq!(status(&guard, "GET", "/healthz", &[]), 400, "no Host");
        assert_eq!(
            status(
                &guard,
                "GET",
                "/healthz",
                &["host: 127.0.0.1:8931", "host: evil.example"]
            ),
            400,
            "two Host headers"
        );
    }

    #[test]
    fn configured_hosts_add_names_with_or_without_a_port() {
        let guard = guard(
            "127.0.0.1:8931",
            "[gateway]\nallowed_hosts = [\"mcpgw.internal\", \"localhost:9000\"]\n",
            None,
        );
        let host = |value: &str| status(&guard, "GET", "/healthz", &[&format!("host: {value}")]);
        assert_eq!(host("MCPGW.internal.:443"), 200);
        assert_eq!(host("localhost:9000"), 200);
        assert_eq!(host("localhost:9001"), 403);
    }

    #[test]
    fn a_network_listener_answers_to_its_address_and_configured_names() {
        let bound = guard(
            "10.0.0.5:8931",
            "[gateway]\nallowed_hosts = [\"gw.example\"]\n",
            None,
        );
        let host = |guard: &Guard, value: &str| {
            status(guard, "GET", "/healthz", &[&format!("host: {value}")])
        };
        assert_eq!(host(&bound, "10.0.0.5:8931"), 200);
        assert_eq!(host(&bound, "gw.example"), 200);
        assert_eq!(host(&bound, "localhost:8931"), 403);
        assert_eq!(host(&bound, "10.0.0.6:8931"), 403);
        assert_eq!(host(&bound, "other.example:8931"), 403);
        let any = guard("0.0.0.0:8931", "", None);
        assert_eq!(host(&any, "192.168.1.9:8931"), 200);
        assert_eq!(host(&any, "localhost:8931"), 200);
        assert_eq!(host(&any, "rebind.evil.example:8931"), 403);
    }

    #[test]
    fn an_absolute_form_target_must_name_the_listener() {
        let guard = guard("127.0.0.1:8931", "", None);
        let local = "host: 127.0.0.1:8931";
        assert_eq!(
            status(&guard, "POST", "http://evil.example/mcp", &[local]),
            403
        );
        assert_eq!(
            status(&guard, "POST", "http://127.0.0.1:8931/mcp", &[local]),
            200
        );
    }

    #[test]
    fn an_origin_must_be_the_listeners_own_or_allowed() {
        let guard = guard(
            "127.0.0.1:8931",
            "[gateway]\nallowed_origins = [\"http://localhost:6274\"]\n",
            None,
        );
        let origin = |value: &str| {
            status(
                &guard,
                "POST",
                "/mcp",
                &["host: 127.0.0.1:8931", &format!("origin: {value}")],
            )
        };
        for ok in [
            "http://127.0.0.1:8931",
            "http://localhost:8931",
            "http://[::1]:8931",
            "http://localhost:6274",
        ] {
            assert_eq!(origin(ok), 200, "{ok}");
        }
        for foreign in [
            "https://evil.example",
            "http://evil.example",
            "null",
            "http://localhost:6275",
            "https://localhost:6274",
            "http://127.0.0.1:8932",
            "garbage",
        ] {
            assert_eq!(origin(foreign), 403, "{foreign}");
        }
        assert_eq!(
            status(
                &guard,
                "POST",
                "/mcp",
                &[
                    "host: 127.0.0.1:8931",
                    "origin: http://127.0.0.1:8931",
                    "origin: https://evil.example"
                ]
            ),
            403,
            "two origins"
        );
    }

    #[test]
    fn admin_changes_need_json_the_same_site_and_on_an_open_listener_the_token() {
        let open = guard("127.0.0.1:8931", "", Some("s3cret"));
        let host = "host: 127.0.0.1:8931";
        let json = "content-type: application/json";
        let token = "x-mcpgw-admin-token: s3cret";
        let approve = "/admin/tools/approve";
        assert_eq!(status(&open, "POST", approve, &[host, json, token]), 200);
        assert_eq!(
            status(
                &open,
                "POST",
                approve,
                &[host, json, "authorization: Bearer s3cret"]
            ),
            200
        );
        assert_eq!(
            status(
                &open,
                "POST",
                approve,
                &[host, "content-type: Application/JSON; charset=utf-8", token]
            ),
            200
        );
        assert_eq!(status(&open, "POST", approve, &[host, json]), 401);
        assert_eq!(
            status(
                &open,
                "POST",
                approve,
                &[host, json, "x-mcpgw-admin-token: s3cre"]
            ),
            401
        );
        assert_eq!(
            status(
                &open,
                "POST",
                approve,
                &[host, "content-type: text/plain;charset=UTF-8", token]
            ),
            415
        );
        assert_eq!(status(&open, "POST", approve, &[host, token]), 415);
        assert_eq!(
            status(
                &open,
                "POST",
                approve,
                &[host, json, token, "sec-fetch-site: cross-site"]
            ),
            403
        );
        assert_eq!(
            status(
                &open,
                "POST",
                approve,
                &[host, json, token, "sec-fetch-site: same-site"]
            ),
            403
        );
        assert_eq!(
            status(
                &open,
                "POST",
                approve,
                &[host, json, token, "sec-fetch-site: same-origin"]
            ),
            200
        );
        assert_eq!(status(&open, "GET", "/admin/approvals", &[host]), 401);
        assert_eq!(
            status(&open, "GET", "/admin/approvals", &[host, token]),
            200
        );
        for read in [
            "/admin/v1/servers",
            "/admin/v1/tools",
            "/admin/v1/search?q=x",
        ] {
            assert_eq!(status(&open, "GET", read, &[host]), 401, "{read}");
            assert_eq!(status(&open, "GET", read, &[host, token]), 200, "{read}");
            let rebound = "host: rebind.evil.example:8931";
            assert_eq!(status(&open, "GET", read, &[rebound, token]), 403, "{read}");
            let foreign = "origin: https://evil.example";
            assert_eq!(status(&open, "GET", read, &[host, token, foreign]), 403);
        }
        assert_eq!(
            status(&open, "POST", "/mcp", &[host]),
            200,
            "not an admin route"
        );

        let keyed = guard("127.0.0.1:8931", "", None);
        assert_eq!(
            status(&keyed, "GET", "/admin/approvals", &[host]),
            200,
            "the key decides"
        );
        assert_eq!(status(&keyed, "POST", approve, &[host]), 415);
    }

    #[test]
    fn refusals_take_the_error_shape_of_their_route() {
        let refusal = Refusal::forbidden("no");
        let body = |path: &str| {
            let response = refusal.clone().into_response(path);
            assert_eq!(response.status(), StatusCode::FORBIDDEN);
            let bytes =
                futures::executor::block_on(axum::body::to_bytes(response.into_body(), 1024))
                    .expect("body");
            serde_json::from_slice::<serde_json::Value>(&bytes).expect("json")
        };
        assert_eq!(
            body("/mcp"),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "no"}})
        );
        assert_eq!(body("/admin/approvals"), json!({"error": "no"}));
        assert_eq!(body("/healthz"), json!({"error": "no"}));
    }

    #[test]
    fn the_admin_token_is_random_written_0600_and_never_debug_printed() {
        let token = AdminToken::generate().expect("token");
        assert_eq!(token.reveal().len(), 64);
        assert_ne!(
            token.reveal(),
            AdminToken::generate().expect("token").reveal()
        );
        assert!(!format!("{token:?}").contains(token.reveal()));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(ADMIN_TOKEN_FILE);
        std::fs::write(&path, "old").expect("old file");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        token.write_to(&path).expect("written");
        let read = std::fs::read_to_string(&path).expect("read");
        assert!(token.matches(&read), "{read:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path)
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("dir").count(),
            1,
            "no leftovers"
        );
    }

    /// A host-ish string: names from a small alphabet that includes the dangerous characters,
    /// IP literals, and optional ports.
    fn host_text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9.\\-_:\\[\\]@/% ]{0,30}",
            "(xn--)?[a-z0-9]{1,10}(\\.[a-zA-Z0-9]{1,10}){0,3}\\.?(:[0-9]{1,6})?",
            any::<Ipv4Addr>().prop_map(|ip| ip.to_string()),
            any::<Ipv6Addr>().prop_map(|ip| format!("[{ip}]")),
            ".*",
        ]
    }

    proptest! {
        #[test]
        fn parsing_never_panics_and_is_idempotent(text in host_text()) {
            if let Some(parsed) = parse_authority(&text) {
                let again = parse_authority(&parsed.to_string());
                prop_assert_eq!(again, Some(parsed));
            }
            let _ = parse_origin(&text);
            let _ = parse_origin(&format!("http://{text}"));
        }

        #[test]
        fn case_and_a_trailing_dot_do_not_matter(
            name in "[a-z][a-z0-9-]{0,10}(\\.[a-z][a-z0-9-]{0,10}){0,3}",
            upper in any::<u64>(),
            port in proptest::option::of(any::<u16>()),
        ) {
            let mixed: String = name
                .chars()
                .enumerate()
                .map(|(i, c)| if upper >> (i % 64) & 1 == 1 { c.to_ascii_uppercase() } else { c })
                .collect();
            let with_port = |text: String| match port {
                Some(port) => format!("{text}:{port}"),
                None => text,
            };
            prop_assert_eq!(
                parse_authority(&with_port(format!("{mixed}."))),
                parse_authority(&with_port(name.clone()))
            );
            let parsed = parse_authority(&with_port(name.clone()));
            prop_assert!(parsed.is_some());
        }

        #[test]
        fn a_loopback_listener_never_accepts_a_foreign_name(
            name in "[a-z][a-z0-9-]{0,12}(\\.[a-z][a-z0-9-]{0,12}){1,3}",
            port in proptest::option::of(any::<u16>()),
        ) {
            let guard = guard("127.0.0.1:8931", "", Some("t"));
            let host = match port {
                Some(port) => format!("{name}:{port}"),
                None => name.clone(),
            };
            prop_assume!(parse_authority(&host).is_some_and(|a| a.host != "localhost"));
            let headers = [format!("host: {host}")];
            let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
            prop_assert_eq!(status(&guard, "POST", "/mcp", &headers), 403);
            let origin = [
                "host: 127.0.0.1:8931".to_owned(),
                format!("origin: http://{host}"),
            ];
            let origin: Vec<&str> = origin.iter().map(String::as_str).collect();
            prop_assert_eq!(status(&guard, "POST", "/mcp", &origin), 403);
        }
    }
}
