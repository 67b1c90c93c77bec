//! The console's server pages: `/ui`, every server with its state, and the forms that add one
//! (name and a stdio command with its arguments, or a URL; or an `mcpServers` snippet pasted
//! from Claude Desktop, Cursor or VS Code); `/ui/servers/{name}`, one server with its tools and
//! the buttons that test it (the report of `mcpgw servers test`, or its error), disable or
//! enable it, and remove it.
//!
//! Every form goes through [`Gateway::change_servers`], as the admin API's writes do: the
//! configuration file is changed, checked and reloaded, and the page that answers says what
//! happened, or every problem that stopped it (nothing is written then). The forms follow the
//! console's rules (the session's CSRF token first, an administrator's session), and
//! everything shown is escaped.

use std::{collections::HashMap, fmt::Write as _};

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::HeaderMap,
    response::Response,
};
use serde_json::{Map, Value, json};

use super::{Console, Note, Session, Shared, admin_form, esc, page, to_login};
use crate::{ChangeError, Changed, ServerChange, overview, probe::ServerTest};

/// `/ui`: every server, and the forms that add one.
pub(super) async fn servers_body(
    console: &Console,
    session: &Session,
    note: Option<&Note>,
) -> Response {
    let mut body = String::from("<h1>Servers</h1>");
    if let Some(note) = note {
        body.push_str(&note.html());
    }
    body.push_str(
        "<table id=\"servers\"><tr><th>server</th><th>state</th><th>protocol</th><th>tools</th><th>held</th><th>transport</th><th>credential</th></tr>",
    );
    for server in overview::servers(&console.gateway).await {
        let _ = write!(
            body,
            "<tr class=\"{}\"><td><a href=\"/ui/servers/{name}\">{name}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&server.state),
            state_html(&server),
            esc(server.protocol_version.as_deref().unwrap_or("")),
            server.tool_count.map(|n| n.to_string()).unwrap_or_default(),
            server.held,
            transport_html(&server.transport),
            credential_html(&server.credential),
            name = esc(&server.name),
        );
    }
    body.push_str("</table>");
    body.push_str(&add_forms(&session.csrf));
    page("Servers", "/ui", session, &body)
}

fn state_html(server: &overview::ServerRow) -> String {
    match &server.reason {
        Some(reason) => format!(
            "{}<div class=\"why\">{}</div>",
            esc(&server.state),
            esc(reason)
        ),
        None => esc(&server.state),
    }
}

fn transport_html(transport: &overview::TransportRow) -> String {
    match transport {
        overview::TransportRow::Stdio { command } => format!("stdio: {}", esc(command)),
        overview::TransportRow::Http { url } => format!("http: {}", esc(url)),
        overview::TransportRow::Sse { url } => format!("sse: {}", esc(url)),
    }
}

fn credential_html(credential: &overview::CredentialRow) -> String {
    let mut html = esc(&credential.auth);
    if !credential.env.is_empty() {
        let _ = write!(html, " ({})", esc(&credential.env.join(", ")));
    }
    if !credential.unset.is_empty() {
        let _ = write!(
            html,
            "<div class=\"why\">not set: {}</div>",
            esc(&credential.unset.join(", "))
        );
    }
    html
}

fn add_forms(csrf: &str) -> String {
    let csrf = esc(csrf);
    format!(
        "<h2>Add a server</h2>\
         <form method=\"post\" action=\"/ui/servers\" id=\"add-server\" class=\"card\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <p><label>name <input name=\"name\" size=\"24\" placeholder=\"time\" required pattern=\"[A-Za-z0-9_-]+\"></label> \
         <label>transport <select name=\"transport\"><option value=\"stdio\">stdio (a local program)</option><option value=\"http\">Streamable HTTP</option><option value=\"sse\">HTTP+SSE (legacy)</option></select></label></p>\
         <p><label>command <input name=\"command\" size=\"50\" placeholder=\"uvx\"></label></p>\
         <p><label>arguments, one per line<br><textarea name=\"args\" rows=\"3\" cols=\"60\" placeholder=\"mcp-server-time\"></textarea></label></p>\
         <p><label>or URL <input name=\"url\" size=\"60\" placeholder=\"https://mcp.example.com/mcp\"></label></p>\
         <p class=\"hint\">Credentials are read from the gateway's environment: add them to the file as <code>{{ env = \"VAR\" }}</code>.</p>\
         <button>Add server</button></form>\
         <form method=\"post\" action=\"/ui/servers\" id=\"paste-servers\" class=\"card\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <p><label>or paste the <code>mcpServers</code> JSON of Claude Desktop, Cursor or VS Code<br><textarea name=\"snippet\" rows=\"8\" cols=\"80\" placeholder='{{\"mcpServers\": {{\"time\": {{\"command\": \"uvx\", \"args\": [\"mcp-server-time\"]}}}}}}'></textarea></label></p>\
         <p class=\"hint\">A secret written in it is not copied: the server reads it from the variable a note names.</p>\
         <button>Add these servers</button></form>"
    )
}

/// `POST /ui/servers`: adds the server of the form, or the servers pasted.
pub(super) async fn add(State(console): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let (session, form) = match admin_form(&console, &headers, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let note = match added(&form) {
        Ok(change) => {
            let outcome = console.gateway.change_servers(change).await;
            outcome_note(&console, outcome, "Added").await
        }
        Err(note) => note,
    };
    servers_body(&console, &session, Some(&note)).await
}

/// The change a filled-in add form asks for: the pasted JSON when there is some, else the
/// server of the fields.
fn added(form: &HashMap<String, String>) -> Result<ServerChange, Note> {
    let given = |name: &str| {
        form.get(name)
            .map(|value| value.trim())
            .filter(|value| !value.is_empty())
    };
    if let Some(snippet) = given("snippet") {
        return match serde_json::from_str::<Value>(snippet) {
            Ok(Value::Object(object)) => Ok(ServerChange::added(snippet, object)),
            Ok(_) => Err(Note::failed(
                "Nothing added: the pasted text is JSON, but not an object.".to_owned(),
                Vec::new(),
            )),
            Err(error) => Err(Note::failed(
                format!("Nothing added: the pasted text is not JSON ({error})."),
                Vec::new(),
            )),
        };
    }
    let mut transport = Map::new();
    let kind = given("transport").unwrap_or("stdio");
    transport.insert("type".to_owned(), json!(kind));
    if kind == "stdio" {
        if let Some(command) = given("command") {
            transport.insert("command".to_owned(), json!(command));
        }
        let args: Vec<&str> = given("args")
            .map(|args| {
                args.lines()
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if !args.is_empty() {
            transport.insert("args".to_owned(), json!(args));
        }
    } else if let Some(url) = given("url") {
        transport.insert("url".to_owned(), json!(url));
    }
    let mut server = Map::new();
    if let Some(name) = given("name") {
        server.insert("name".to_owned(), json!(name));
    }
    server.insert("transport".to_owned(), Value::Object(transport));
    Ok(ServerChange::Add(server))
}

/// What a change did, in words: each server it was about with its state now, an import's
/// warnings; or why nothing changed.
async fn outcome_note(
    console: &Console,
    outcome: Result<Changed, ChangeError>,
    verb: &str,
) -> Note {
    let changed = match outcome {
        Ok(changed) => changed,
        Err(ChangeError::Invalid { message, problems }) => {
            let title = if problems.is_empty() {
                message
            } else {
                "Nothing changed: the configuration would not load with it.".to_owned()
            };
            return Note::failed(title, problems);
        }
        Err(refused) => return Note::failed(format!("Nothing changed: {refused}"), Vec::new()),
    };
    let rows = overview::servers(&console.gateway).await;
    let mut lines: Vec<String> = changed
        .servers
        .iter()
        .map(
            |name| match rows.iter().find(|row| row.name.as_str() == name) {
                None => format!("{name}: removed from the configuration"),
                Some(row) => match (&row.reason, row.tool_count) {
                    (Some(reason), _) => format!("{name}: {}: {reason}", row.state),
                    (None, Some(tools)) => format!("{name}: {}, {tools} tools", row.state),
                    (None, None) => format!("{name}: {}", row.state),
                },
            },
        )
        .collect();
    lines.extend(changed.warnings.iter().map(|w| format!("warning: {w}")));
    Note::done(
        format!(
            "{verb} {}. The configuration file was changed and reloaded (generation {}).",
            changed.servers.join(", "),
            changed.reload.generation
        ),
        lines,
    )
}

/// `/ui/servers/{name}`.
pub(super) async fn server_page(
    State(console): Shared,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    server_body(&console, &session, &name, None, None).await
}

/// One server: its row, the buttons, a test's report, its tools.
async fn server_body(
    console: &Console,
    session: &Session,
    name: &str,
    note: Option<&Note>,
    tested: Option<&ServerTest>,
) -> Response {
    let config = console.gateway.config();
    let row = overview::server(&console.gateway, name).await;
    let (Some(server), Some(row)) = (config.server(name), row.as_ref()) else {
        let mut body = format!("<h1>{}</h1>", esc(name));
        if let Some(note) = note {
            body.push_str(&note.html());
        }
        body.push_str("<p class=\"why\">No server of that name is configured.</p>");
        return page(name, "/ui", session, &body);
    };
    let mut body = format!("<h1>{}</h1>", esc(name));
    if let Some(note) = note {
        body.push_str(&note.html());
    }
    let _ = write!(
        body,
        "<table id=\"server\"><tr><th>state</th><td class=\"state\">{}</td></tr><tr><th>transport</th><td>{}</td></tr><tr><th>credential</th><td>{}</td></tr><tr><th>implements</th><td>{} {}</td></tr><tr><th>protocol</th><td>{}</td></tr></table>",
        state_html(row),
        transport_html(&row.transport),
        credential_html(&row.credential),
        esc(row.server_name.as_deref().unwrap_or("")),
        esc(row.server_version.as_deref().unwrap_or("")),
        esc(row.protocol_version.as_deref().unwrap_or("")),
    );
    body.push_str(&server_buttons(name, server.enabled, &session.csrf));
    if let Some(tested) = tested {
        body.push_str(&test_html(tested));
    }
    body.push_str(&tools_html(console, name).await);
    page(name, "/ui", session, &body)
}

fn server_buttons(name: &str, enabled: bool, csrf: &str) -> String {
    let button = |action: &str, label: &str| {
        format!(
            "<form method=\"post\" action=\"/ui/servers/{name}/{action}\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button class=\"{action}\">{label}</button></form> ",
            name = esc(name),
            csrf = esc(csrf),
        )
    };
    let toggle = if enabled {
        button("disable", "Disable")
    } else {
        button("enable", "Enable")
    };
    format!(
        // A `div`: a `form` inside a `p` would close the paragraph, leaving the buttons outside.
        "<div class=\"buttons\">{}{toggle}{}</div>",
        button("test", "Test"),
        button("remove", "Remove")
    )
}

fn test_html(tested: &ServerTest) -> String {
    let elapsed = tested.elapsed.as_millis();
    match &tested.result {
        Ok(connected) => {
            let status = &connected.status;
            let mut html = format!(
                "<section id=\"test\" class=\"test ok\"><h2>Test: ok</h2><p>implements {} {}, protocol {} ({} era); connect {} ms, total {elapsed} ms; {} tools:</p><ul>",
                esc(status.server_name.as_deref().unwrap_or("(unnamed)")),
                esc(status.server_version.as_deref().unwrap_or("")),
                esc(status.protocol_version.as_deref().unwrap_or("")),
                status.era.map(|era| era.to_string()).unwrap_or_default(),
                status.connect_ms.unwrap_or(0),
                connected.tools.len(),
            );
            for tool in &connected.tools {
                let _ = write!(html, "<li class=\"name\">{}</li>", esc(tool));
            }
            html.push_str("</ul></section>");
            html
        }
        Err(error) => format!(
            "<section id=\"test\" class=\"test failed\"><h2>Test: failed</h2><p class=\"why\" id=\"test-error\">{}</p><p>after {elapsed} ms</p></section>",
            esc(&error.to_string())
        ),
    }
}

async fn tools_html(console: &Console, name: &str) -> String {
    let query = overview::ToolsQuery {
        server: Some(name.to_owned()),
        profile: None,
    };
    let view = overview::tools(&console.gateway, &query).await;
    let mut html = format!(
        "<h2>Tools</h2><p>{} in the catalog, {} held.</p><table id=\"tools\"><tr><th>tool</th><th>tokens</th><th>pin</th><th>description</th></tr>",
        view.tools.len(),
        view.held.len()
    );
    for tool in view.tools.iter().chain(&view.held) {
        let _ = write!(
            html,
            "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&tool.name),
            tool.tokens.map(|n| n.to_string()).unwrap_or_default(),
            esc(&tool.pin),
            esc(&tool.description),
        );
    }
    html.push_str("</table>");
    html
}

/// `POST /ui/servers/{name}/test`: the server's page with the test's report.
pub(super) async fn test(
    State(console): Shared,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let (session, _) = match admin_form(&console, &headers, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let config = console.gateway.config();
    let Some(server) = config.server(&name).cloned() else {
        return server_body(&console, &session, &name, None, None).await;
    };
    let store = console.gateway.store().cloned();
    let tested = crate::test_server(&config, server, store).await;
    server_body(&console, &session, &name, None, Some(&tested)).await
}

/// `POST /ui/servers/{name}/enable` and `/disable`.
pub(super) async fn enable(
    console: Shared,
    headers: HeaderMap,
    name: Path<String>,
    body: Bytes,
) -> Response {
    toggle(console, headers, name, body, true).await
}

pub(super) async fn disable(
    console: Shared,
    headers: HeaderMap,
    name: Path<String>,
    body: Bytes,
) -> Response {
    toggle(console, headers, name, body, false).await
}

async fn toggle(
    State(console): Shared,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
    enabled: bool,
) -> Response {
    let (session, _) = match admin_form(&console, &headers, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let change = ServerChange::Enable(name.clone(), enabled);
    let outcome = console.gateway.change_servers(change).await;
    let verb = if enabled { "Enabled" } else { "Disabled" };
    let note = outcome_note(&console, outcome, verb).await;
    server_body(&console, &session, &name, Some(&note), None).await
}

/// `POST /ui/servers/{name}/remove`: the servers page, saying what happened.
pub(super) async fn remove(
    State(console): Shared,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let (session, _) = match admin_form(&console, &headers, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let outcome = console
        .gateway
        .change_servers(ServerChange::Remove(name))
        .await;
    let note = outcome_note(&console, outcome, "Removed").await;
    servers_body(&console, &session, Some(&note)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn server_of(change: Result<ServerChange, Note>) -> Value {
        match change {
            Ok(ServerChange::Add(server)) => Value::Object(server),
            Ok(other) => panic!("not an addition: {other:?}"),
            Err(note) => panic!("refused: {}", note.title),
        }
    }

    #[test]
    fn the_add_form_becomes_a_server_table() {
        let stdio = added(&form(&[
            ("name", " time "),
            ("transport", "stdio"),
            ("command", "uvx"),
            ("args", "mcp-server-time\r\n\r\n --local-timezone \nUTC\n"),
            ("url", "https://ignored.example"),
            ("snippet", "  "),
        ]));
        assert_eq!(
            server_of(stdio),
            json!({"name": "time", "transport": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time", "--local-timezone", "UTC"]}})
        );
        let http = added(&form(&[
            ("name", "docs"),
            ("transport", "http"),
            ("url", "https://docs.example/mcp"),
            ("command", "ignored"),
        ]));
        assert_eq!(
            server_of(http),
            json!({"name": "docs", "transport": {"type": "http", "url": "https://docs.example/mcp"}})
        );
        // Nothing filled in: the loader names what is missing.
        assert_eq!(
            server_of(added(&form(&[]))),
            json!({"transport": {"type": "stdio"}})
        );
    }

    #[test]
    fn a_pasted_snippet_is_imported_and_bad_json_is_said() {
        let snippet = r#"{"mcpServers": {"time": {"command": "uvx"}}}"#;
        assert!(matches!(
            added(&form(&[("snippet", snippet), ("name", "ignored")])),
            Ok(ServerChange::Import(text)) if text == snippet
        ));
        for (bad, says) in [("{\"mcpServers\": ", "not JSON"), ("[1]", "not an object")] {
            match added(&form(&[("snippet", bad)])) {
                Err(note) => assert!(note.failed && note.title.contains(says), "{}", note.title),
                Ok(change) => panic!("{bad}: {change:?}"),
            }
        }
    }
}
