//! The web console at `/ui`: server-rendered pages over the admin API's data, embedded in the
//! binary (no script, no stylesheet or font from anywhere else; nothing to build with Node).
//!
//! - `/ui`: the servers, their state and why one failed, and the forms that add one (fields,
//!   or a pasted `mcpServers` snippet); `/ui/servers/{name}`: one server with its tools, and
//!   the buttons that test, disable or enable, and remove it (module `servers`, through the
//!   admin API's path: the configuration file is changed, checked and reloaded);
//!   `/ui/tools`: every tool with its token cost, pin state and annotations; `/ui/search?q=`: one query's BM25, vector and
//!   hybrid lists side by side with their scores; `/ui/approvals`: the calls waiting for a
//!   person (approve, with the arguments edited or not; reject, with a reason) and the tools
//!   held because their definitions changed (trust the new one); `/ui/connections`: the OAuth
//!   sign-ins of every principal (sign one out) and the OAuth servers with a button that signs
//!   the console's principal in (module `connections`); `/ui/clients`: the client keys (add one,
//!   its key shown once; remove one) and the profiles with the tools each exposes (module
//!   `clients`); `/ui/audit`: the newest audit rows, filtered.
//!
//! **Signing in.** On the open loopback listener `serve` prints a link carrying the per-start
//! admin token (`/ui?token=...`, as Jupyter does); the token may also be pasted into
//! `/ui/login`. On a keyed listener the login form takes a client key whose profile says
//! `admin = true`. Either way the console then holds a session of its own: a random id in a
//! cookie (`HttpOnly`, `SameSite=Strict`, `Path=/ui`, 12 hours), never the token or key.
//!
//! **Forms.** Every form that changes something carries the session's CSRF token, checked
//! before anything happens; the guard in front of every route refuses a foreign `Origin`, and
//! the cookie is not sent cross-site at all. Every page says `Content-Security-Policy:
//! default-src 'none'` (inline styles and same-origin forms only), may not be framed, and sends
//! no referrer to other sites (`same-origin`: `no-referrer` would make the browser send
//! `Origin: null` with the console's own forms, which the guard refuses). The token of the
//! link never stays in the address bar: the first answer redirects to `/ui` without it. Everything shown is HTML-escaped: tool
//! descriptions and errors come from upstream servers.

use std::{
    collections::HashMap,
    fmt::Write as _,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Map, Value};

use crate::{
    Gateway,
    http::guard::AdminToken,
    oauth::login::Logins,
    overview::{self, SearchQuery, ToolsQuery},
    principal::Principal,
    records,
    sync::lock,
};

mod clients;
mod connections;
mod servers;

/// The console's cookie.
const COOKIE: &str = "mcpgw_console";
/// How long a console session lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most console sessions held at once; the oldest goes first.
const MAX_SESSIONS: usize = 64;

/// The console's state: who may sign in, and the sessions signed in.
pub(crate) struct Console {
    gateway: Arc<Gateway>,
    /// The open listener's admin token; `None` on a keyed listener.
    admin_token: Option<AdminToken>,
    /// The listener's OAuth sign-ins, which the sign-ins page starts.
    logins: Arc<Logins>,
    sessions: Mutex<HashMap<String, Session>>,
}

#[derive(Clone)]
struct Session {
    csrf: String,
    principal: Principal,
    expires: Instant,
}

type Shared = State<Arc<Console>>;

pub(crate) fn routes(
    gateway: Arc<Gateway>,
    admin_token: Option<AdminToken>,
    logins: Arc<Logins>,
) -> Router {
    let console = Arc::new(Console {
        gateway,
        admin_token,
        logins,
        sessions: Mutex::default(),
    });
    Router::new()
        .route("/ui", get(servers_page))
        .route("/ui/", get(servers_page))
        .route("/ui/tools", get(tools_page))
        .route("/ui/search", get(search_page))
        .route("/ui/approvals", get(approvals_page))
        .route("/ui/audit", get(audit_page))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/approvals/{id}/approve", post(approve))
        .route("/ui/approvals/{id}/reject", post(reject))
        .route("/ui/held/approve", post(trust_held))
        .route("/ui/servers", post(servers::add))
        .route("/ui/servers/{name}", get(servers::server_page))
        .route("/ui/servers/{name}/test", post(servers::test))
        .route("/ui/servers/{name}/enable", post(servers::enable))
        .route("/ui/servers/{name}/disable", post(servers::disable))
        .route("/ui/servers/{name}/remove", post(servers::remove))
        .route("/ui/connections", get(connections::show))
        .route("/ui/connections/signin", post(connections::sign_in))
        .route("/ui/connections/signout", post(connections::sign_out))
        .route("/ui/clients", get(clients::show).post(clients::add))
        .route("/ui/clients/remove", post(clients::remove))
        .with_state(console)
}

impl Console {
    /// The session the request's cookie names, if it is live.
    fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers)?;
        let mut sessions = lock(&self.sessions);
        match sessions.get(id) {
            Some(session) if session.expires > Instant::now() => Some(session.clone()),
            Some(_) => {
                sessions.remove(id);
                None
            }
            None => None,
        }
    }

    /// A new session for `principal`, and the cookie that names it.
    fn open(&self, principal: Principal) -> Option<String> {
        let (id, csrf) = (random_hex()?, random_hex()?);
        let mut sessions = lock(&self.sessions);
        let now = Instant::now();
        sessions.retain(|_, session| session.expires > now);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, session)| session.expires)
                .map(|(id, _)| id.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(
            id.clone(),
            Session {
                csrf,
                principal,
                expires: now + SESSION_TTL,
            },
        );
        Some(format!(
            "{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}",
            SESSION_TTL.as_secs()
        ))
    }

    /// Who `secret` signs in as: the admin token on the open listener, else an admin's key.
    async fn sign_in(&self, secret: &str) -> Option<Principal> {
        if let Some(token) = &self.admin_token {
            return token.matches(secret).then_some(Principal::Local);
        }
        let name = self
            .gateway
            .store()?
            .authenticate_client(secret.trim())
            .await
            .ok()??;
        let principal = Principal::Client(name);
        principal
            .is_admin(&self.gateway.config().policy)
            .then_some(principal)
    }
}

fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    }))
}

/// The fields of a query string or a form body (`application/x-www-form-urlencoded`); a
/// field given twice keeps its first value.
fn fields(text: &[u8]) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    for (name, value) in url::form_urlencoded::parse(text) {
        fields
            .entry(name.into_owned())
            .or_insert_with(|| value.into_owned());
    }
    fields
}

fn query_fields(raw: Option<String>) -> HashMap<String, String> {
    fields(raw.unwrap_or_default().as_bytes())
}

// ---- pages -----------------------------------------------------------------------------------

async fn servers_page(
    State(console): Shared,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    // The link `serve` prints: sign in with its token, then show the page without it.
    if let Some(token) = query_fields(raw).remove("token") {
        return match console.sign_in(&token).await {
            Some(principal) => signed_in(&console, principal),
            None => login_form(
                Some("That link's token is not this gateway's (it changes at every start)."),
                StatusCode::UNAUTHORIZED,
            ),
        };
    }
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    servers::servers_body(&console, &session, None).await
}

async fn tools_page(State(console): Shared, headers: HeaderMap) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    let view = overview::tools(&console.gateway, &ToolsQuery::default()).await;
    let mut body = format!(
        "<h1>Tools</h1><p>{} tools in the catalog, {} held.</p><table><tr><th>tool</th><th>server</th><th>tokens</th><th>pin</th><th>hints</th><th>description</th></tr>",
        view.tools.len(),
        view.held.len()
    );
    for tool in view.tools.iter().chain(&view.held) {
        let _ = write!(
            body,
            "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&tool.name),
            esc(&tool.server),
            tool.tokens.map(|n| n.to_string()).unwrap_or_default(),
            esc(&tool.pin),
            esc(&hints(tool.annotations.as_ref())),
            esc(&tool.description),
        );
    }
    body.push_str("</table>");
    page("Tools", "/ui/tools", &session, &body)
}

/// `read-only`, `destructive` and the like, from a tool's annotations.
fn hints(annotations: Option<&Value>) -> String {
    let Some(annotations) = annotations else {
        return String::new();
    };
    [
        ("readOnlyHint", "read-only"),
        ("destructiveHint", "destructive"),
        ("idempotentHint", "idempotent"),
        ("openWorldHint", "open-world"),
    ]
    .iter()
    .filter(|(key, _)| annotations.get(*key) == Some(&Value::Bool(true)))
    .map(|(_, word)| *word)
    .collect::<Vec<_>>()
    .join(", ")
}

async fn search_page(
    State(console): Shared,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    let q = query_fields(raw).remove("q").unwrap_or_default();
    let mut body = format!(
        "<h1>Search</h1><form method=\"get\" action=\"/ui/search\"><input name=\"q\" size=\"60\" value=\"{}\" placeholder=\"what the model would ask for\"> <button>Search</button></form>",
        esc(&q)
    );
    if !q.trim().is_empty() {
        body.push_str("<div class=\"lists\">");
        for strategy in [
            catalog::Strategy::Bm25,
            catalog::Strategy::Vector,
            catalog::Strategy::Hybrid,
        ] {
            let report = overview::search(
                &console.gateway,
                &SearchQuery {
                    query: q.clone(),
                    top_k: 10,
                    strategy: Some(strategy),
                    servers: Vec::new(),
                },
            )
            .await;
            body.push_str(&ranked_list(&report));
        }
        body.push_str("</div>");
    }
    page("Search", "/ui/search", &session, &body)
}

fn ranked_list(report: &overview::SearchReport) -> String {
    let mut list = format!(
        "<section class=\"list\" id=\"{0}\"><h2>{0}</h2>",
        esc(&report.strategy)
    );
    if let Some(degraded) = &report.degraded {
        let _ = write!(list, "<p class=\"why\">{}</p>", esc(degraded));
    }
    list.push_str("<ol>");
    for hit in &report.hits {
        let _ = write!(
            list,
            "<li><span class=\"name\">{}</span> <span class=\"score\">{:.4}</span><div class=\"desc\">{}</div></li>",
            esc(&hit.name),
            hit.score,
            esc(&hit.description)
        );
    }
    if report.hits.is_empty() {
        list.push_str("<li class=\"none\">nothing</li>");
    }
    list.push_str("</ol></section>");
    list
}

async fn approvals_page(State(console): Shared, headers: HeaderMap) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    approvals_body(&console, &session, None).await
}

async fn approvals_body(console: &Console, session: &Session, note: Option<&str>) -> Response {
    let mut body = String::from("<h1>Approvals</h1>");
    if let Some(note) = note {
        let _ = write!(body, "<p class=\"note\">{}</p>", esc(note));
    }
    match console.gateway.pending_approvals(&session.principal).await {
        Ok(pending) if pending.is_empty() => {
            body.push_str("<p id=\"no-pending\">No call is waiting for a decision.</p>")
        }
        Ok(pending) => {
            for approval in &pending {
                body.push_str(&approval_card(approval, &session.csrf));
            }
        }
        Err(error) => {
            let _ = write!(body, "<p class=\"why\">{}</p>", esc(&error.to_string()));
        }
    }
    body.push_str("<h2>Held tools</h2>");
    let held = console.gateway.held_tools();
    if held.is_empty() {
        body.push_str("<p>No tool is held: every definition is the trusted one.</p>");
    }
    for tool in held.iter() {
        // The diff is upstream text nobody has vetted: escaped like everything else shown.
        let _ = write!(
            body,
            "<form method=\"post\" action=\"/ui/held/approve\" class=\"held\"><p><span class=\"name\">{}</span> changed its definition ({}).</p><pre class=\"diff\">{}</pre><input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"name\" value=\"{}\"><button>Trust the new definition</button></form>",
            esc(&tool.qualified),
            esc(&tool.changed_fields().join(", ")),
            esc(&tool.diff()),
            esc(&session.csrf),
            esc(&tool.qualified),
        );
    }
    page("Approvals", "/ui/approvals", session, &body)
}

fn approval_card(approval: &store::Approval, csrf: &str) -> String {
    let arguments = serde_json::to_string_pretty(&approval.arguments).unwrap_or_default();
    let id = esc(&approval.id);
    format!(
        "<div class=\"approval\" id=\"approval-{id}\"><p><span class=\"name\">{}</span> called by {} (id {id}), waiting until {}.</p>\
         <form method=\"post\" action=\"/ui/approvals/{id}/approve\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><textarea name=\"arguments\" rows=\"6\" cols=\"70\">{}</textarea><br><button class=\"approve\">Approve</button></form>\
         <form method=\"post\" action=\"/ui/approvals/{id}/reject\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><input name=\"reason\" size=\"50\" placeholder=\"why (the model reads it)\"> <button class=\"reject\">Reject</button></form></div>",
        esc(&approval.tool),
        esc(&approval.principal),
        records::utc(approval.expires_at, false),
        esc(&arguments),
        csrf = esc(csrf),
    )
}

async fn audit_page(
    State(console): Shared,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    let form = query_fields(raw);
    let given = |name: &str| form.get(name).filter(|v| !v.trim().is_empty()).cloned();
    let query = store::AuditQuery {
        principal: given("principal").map(Into::into),
        server: given("server").map(Into::into),
        outcome: given("outcome").filter(|o| store::OUTCOME_WORDS.contains(&o.as_str())),
        limit: 100,
        ..store::AuditQuery::default()
    };
    let mut body = format!(
        "<h1>Audit log</h1><form method=\"get\" action=\"/ui/audit\">principal <input name=\"principal\" value=\"{}\"> server <input name=\"server\" value=\"{}\"> outcome <input name=\"outcome\" value=\"{}\"> <button>Filter</button></form>",
        esc(form.get("principal").map_or("", String::as_str)),
        esc(form.get("server").map_or("", String::as_str)),
        esc(form.get("outcome").map_or("", String::as_str)),
    );
    let Some(store) = console.gateway.store() else {
        body.push_str("<p>The gateway runs without its database: nothing is recorded.</p>");
        return page("Audit", "/ui/audit", &session, &body);
    };
    match store.audit_page(&query).await {
        Ok(found) => {
            body.push_str("<table><tr><th>time (UTC)</th><th>principal</th><th>tool</th><th>decision</th><th>outcome</th><th>ms</th><th>error</th></tr>");
            for entry in &found.entries {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td>{}</td><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    records::utc(entry.at, false),
                    esc(&entry.principal),
                    esc(&entry.tool),
                    esc(entry.decision.as_str()),
                    esc(entry.outcome.as_str()),
                    entry.latency.as_millis(),
                    esc(entry.error.as_deref().unwrap_or("")),
                );
            }
            body.push_str("</table>");
        }
        Err(error) => {
            let _ = write!(body, "<p class=\"why\">{}</p>", esc(&error.to_string()));
        }
    }
    page("Audit", "/ui/audit", &session, &body)
}

// ---- signing in and out ----------------------------------------------------------------------

async fn login_page(State(console): Shared, headers: HeaderMap) -> Response {
    if console.session(&headers).is_some() {
        return redirect("/ui", None);
    }
    login_form(None, StatusCode::OK)
}

async fn login(State(console): Shared, body: Bytes) -> Response {
    let secret = fields(&body).remove("secret").unwrap_or_default();
    match console.sign_in(&secret).await {
        Some(principal) => signed_in(&console, principal),
        None => login_form(
            Some(if console.admin_token.is_some() {
                "Not this gateway's admin token."
            } else {
                "Not the key of a client whose profile has admin = true."
            }),
            StatusCode::UNAUTHORIZED,
        ),
    }
}

fn signed_in(console: &Console, principal: Principal) -> Response {
    tracing::info!(%principal, "signed in to the console");
    match console.open(principal) {
        Some(cookie) => redirect("/ui", Some(&cookie)),
        None => text_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no random source for a session",
        ),
    }
}

async fn logout(State(console): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let form = fields(&body);
    if let Some(session) = console.session(&headers)
        && form.get("csrf") == Some(&session.csrf)
        && let Some(id) = cookie(&headers)
    {
        lock(&console.sessions).remove(id);
    }
    redirect(
        "/ui/login",
        Some(&format!(
            "{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"
        )),
    )
}

/// The session of a form's request, when the form's CSRF token is that session's.
fn form_session(
    console: &Console,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<Session, Box<Response>> {
    match console.session(headers) {
        Some(session) if form.get("csrf") == Some(&session.csrf) => Ok(session),
        Some(_) => Err(Box::new(text_page(
            StatusCode::FORBIDDEN,
            "This form is stale or not the console's: reload the page and try again.",
        ))),
        None => Err(Box::new(to_login())),
    }
}

/// The session of a form that changes something: the CSRF token, and an administrator's.
fn admin_form(
    console: &Console,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Session, HashMap<String, String>), Box<Response>> {
    let form = fields(body);
    let session = form_session(console, headers, &form)?;
    if session.principal.is_admin(&console.gateway.config().policy) {
        Ok((session, form))
    } else {
        Err(Box::new(text_page(
            StatusCode::FORBIDDEN,
            "Only an administrator may change this.",
        )))
    }
}

/// What a form did, shown above the page it answers with.
struct Note {
    failed: bool,
    title: String,
    lines: Vec<String>,
}

impl Note {
    fn done(title: String, lines: Vec<String>) -> Note {
        Note {
            failed: false,
            title,
            lines,
        }
    }

    fn failed(title: String, lines: Vec<String>) -> Note {
        Note {
            failed: true,
            title,
            lines,
        }
    }

    fn html(&self) -> String {
        let class = if self.failed { "note why" } else { "note" };
        let mut html = format!(
            "<div class=\"{class}\" id=\"note\"><p>{}</p>",
            esc(&self.title)
        );
        if !self.lines.is_empty() {
            html.push_str("<ul>");
            for line in &self.lines {
                let _ = write!(html, "<li>{}</li>", esc(line));
            }
            html.push_str("</ul>");
        }
        html.push_str("</div>");
        html
    }
}

// ---- decisions -------------------------------------------------------------------------------

async fn approve(
    State(console): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let form = fields(&body);
    let session = match form_session(&console, &headers, &form) {
        Ok(session) => session,
        Err(refused) => return *refused,
    };
    let arguments =
        match edited_arguments(&console, &id, form.get("arguments").map(String::as_str)).await {
            Ok(arguments) => arguments,
            Err(note) => return approvals_body(&console, &session, Some(&note)).await,
        };
    let verdict = store::Verdict::Approve { arguments };
    let note = match console
        .gateway
        .decide_approval(&id, verdict, &session.principal)
        .await
    {
        Ok(_) => format!("Approved {id}: the call runs now."),
        Err(error) => format!("{id}: {error}"),
    };
    approvals_body(&console, &session, Some(&note)).await
}

/// The arguments the approver left in the form: `None` when unchanged (the caller's run), an
/// object when edited; a note when they are not a JSON object.
async fn edited_arguments(
    console: &Console,
    id: &str,
    text: Option<&str>,
) -> Result<Option<Map<String, Value>>, String> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    let edited: Map<String, Value> = serde_json::from_str(text).map_err(|error| {
        format!("{id}: the arguments are not a JSON object ({error}); nothing was decided")
    })?;
    let original = match console.gateway.store() {
        Some(store) => store.approval(id).await.ok().flatten().map(|a| a.arguments),
        None => None,
    };
    Ok((original.as_ref() != Some(&edited)).then_some(edited))
}

async fn reject(
    State(console): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let form = fields(&body);
    let session = match form_session(&console, &headers, &form) {
        Ok(session) => session,
        Err(refused) => return *refused,
    };
    let reason = form
        .get("reason")
        .filter(|r| !r.trim().is_empty())
        .map(|r| r.chars().take(500).collect());
    let note = match console
        .gateway
        .decide_approval(&id, store::Verdict::Reject { reason }, &session.principal)
        .await
    {
        Ok(_) => format!("Rejected {id}."),
        Err(error) => format!("{id}: {error}"),
    };
    approvals_body(&console, &session, Some(&note)).await
}

async fn trust_held(State(console): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let form = fields(&body);
    let name = form.get("name").cloned().unwrap_or_default();
    let session = match form_session(&console, &headers, &form) {
        Ok(session) => session,
        Err(refused) => return *refused,
    };
    if !session.principal.is_admin(&console.gateway.config().policy) {
        return text_page(
            StatusCode::FORBIDDEN,
            "Only an administrator may trust a changed definition.",
        );
    }
    let note = match console.gateway.approve_tool(&name).await {
        Ok(tool) => format!(
            "{} is trusted again and back in the catalog.",
            tool.qualified
        ),
        Err(error) => format!("{name}: {error}"),
    };
    approvals_body(&console, &session, Some(&note)).await
}

// ---- HTML ------------------------------------------------------------------------------------

/// `text` safe inside HTML text and double-quoted attributes.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d1d1f}\
nav{background:#1d1d1f;padding:8px 16px}nav a{color:#ddd;margin-right:16px;text-decoration:none}\
nav a.here{color:#fff;font-weight:600}nav form{display:inline;float:right}\
main{padding:16px}table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}\
tr.failed td,tr.unresponsive td{background:#fff0f0}.why{color:#a00}.name{font-family:monospace}\
.lists{display:flex;gap:24px}.list{flex:1}.score{color:#666}.desc{color:#555;font-size:12px}\
.approval{border:1px solid #ccc;padding:8px;margin:8px 0}.note{background:#eef;padding:8px}\
.card{border:1px solid #ccc;padding:8px 12px;margin:12px 0;max-width:760px}.hint{color:#555;font-size:12px}\
form.inline{display:inline}section.test{border:1px solid #ccc;padding:8px;margin:12px 0}section.test.failed{background:#fff0f0}";

const NAV: [(&str, &str); 7] = [
    ("/ui", "Servers"),
    ("/ui/tools", "Tools"),
    ("/ui/search", "Search"),
    ("/ui/approvals", "Approvals"),
    ("/ui/connections", "Sign-ins"),
    ("/ui/clients", "Clients"),
    ("/ui/audit", "Audit"),
];

fn page(title: &str, here: &str, session: &Session, body: &str) -> Response {
    let mut nav = String::new();
    for (path, label) in NAV {
        let class = if path == here { " class=\"here\"" } else { "" };
        let _ = write!(nav, "<a href=\"{path}\"{class}>{label}</a>");
    }
    let _ = write!(
        nav,
        "<form method=\"post\" action=\"/ui/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button>Sign out</button></form>",
        esc(&session.csrf)
    );
    html(
        StatusCode::OK,
        &format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>{} · mcpgw</title><style>{STYLE}</style></head><body><nav>{nav}</nav><main>{body}</main></body></html>",
            esc(title)
        ),
    )
}

fn login_form(note: Option<&str>, status: StatusCode) -> Response {
    let note = note
        .map(|n| format!("<p class=\"why\">{}</p>", esc(n)))
        .unwrap_or_default();
    html(
        status,
        &format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Sign in · mcpgw</title><style>{STYLE}</style></head><body><main><h1>mcpgw console</h1>{note}\
             <p>Open the link <code>mcpgw serve</code> printed, or paste the admin token (the file <code>admin-token</code> in the data directory) or, on a listener with client keys, an administrator's key.</p>\
             <form method=\"post\" action=\"/ui/login\"><input type=\"password\" name=\"secret\" size=\"70\" autocomplete=\"off\"> <button>Sign in</button></form></main></body></html>"
        ),
    )
}

fn text_page(status: StatusCode, text: &str) -> Response {
    html(
        status,
        &format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>mcpgw</title></head><body><p>{}</p></body></html>",
            esc(text)
        ),
    )
}

fn html(status: StatusCode, document: &str) -> Response {
    let mut response = (status, document.to_owned()).into_response();
    secure(response.headers_mut());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

fn redirect(to: &'static str, cookie: Option<&str>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    secure(headers);
    headers.insert(header::LOCATION, HeaderValue::from_static(to));
    if let Some(cookie) = cookie.and_then(|c| HeaderValue::from_str(c).ok()) {
        headers.insert(header::SET_COOKIE, cookie);
    }
    response
}

fn to_login() -> Response {
    redirect("/ui/login", None)
}

fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_html() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; mcpgw_console=abc; b=2"),
        );
        assert_eq!(cookie(&headers), Some("abc"));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("mcpgw_consoleX=abc"),
        );
        assert_eq!(cookie(&headers), None);
    }

    #[test]
    fn notes_are_escaped() {
        let note = Note::failed("<b>x</b>".to_owned(), vec!["a & <i>".to_owned()]);
        assert_eq!(
            note.html(),
            "<div class=\"note why\" id=\"note\"><p>&lt;b&gt;x&lt;/b&gt;</p><ul><li>a &amp; &lt;i&gt;</li></ul></div>"
        );
    }
}
