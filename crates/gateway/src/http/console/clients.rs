//! The console's clients and profiles page, `/ui/clients`: the client keys (name, profile,
//! when made and last used, as `GET /admin/v1/clients` shows them) with a form that adds one
//! and a button that removes one; and the profiles of the configuration, each with its rules
//! and the tools it exposes.
//!
//! A new key is shown once, on the page that answers the form that made it: only its hash is
//! stored (`store::clients`), it is never logged (the client's name is), and the page is not
//! cached (`Cache-Control: no-store`, as every console page). A removed key stops working at
//! once: keys are looked up per request.

use std::fmt::Write as _;

use axum::{body::Bytes, extract::State, http::HeaderMap, response::Response};
use secrecy::{ExposeSecret as _, SecretString};

use super::{Console, Note, Session, Shared, admin_form, esc, page, to_login};
use crate::{overview, records};

const HERE: &str = "/ui/clients";

/// `GET /ui/clients`.
pub(super) async fn show(State(console): Shared, headers: HeaderMap) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    body(&console, &session, None, None).await
}

/// A key just made: its client's name and the key, for this one page.
struct NewKey {
    name: String,
    key: SecretString,
}

async fn body(
    console: &Console,
    session: &Session,
    note: Option<&Note>,
    new_key: Option<&NewKey>,
) -> Response {
    let mut body = String::from("<h1>Clients and profiles</h1>");
    if let Some(note) = note {
        body.push_str(&note.html());
    }
    if let Some(new) = new_key {
        let _ = write!(
            body,
            "<div class=\"note\" id=\"new-key\"><p>Client <span class=\"name\">{}</span> added. Its key, shown this once (only its hash is kept; a lost key is replaced by removing the client and adding it again):</p><p><code id=\"key\">{}</code></p><p class=\"hint\">The client sends it as <code>Authorization: Bearer &lt;key&gt;</code>.</p></div>",
            esc(&new.name),
            esc(new.key.expose_secret()),
        );
    }
    body.push_str(&clients_html(console, session).await);
    body.push_str(&profiles_html(console).await);
    page("Clients", HERE, session, &body)
}

async fn clients_html(console: &Console, session: &Session) -> String {
    let mut html = String::from("<h2>Client keys</h2>");
    if console.admin_token.is_some() {
        html.push_str("<p class=\"hint\">This listener started without client keys, so it does not ask for them: clients connect as the local user. Once a key exists, keys are required from the gateway's next start.</p>");
    }
    let Some(store) = console.gateway.store() else {
        html.push_str(
            "<p class=\"why\">The gateway runs without its database, which keeps the client keys.</p>",
        );
        return html;
    };
    let clients = match store.clients().await {
        Ok(clients) => clients,
        Err(error) => {
            tracing::warn!(%error, "the console could not read the client keys");
            let _ = write!(
                html,
                "<p class=\"why\">The client keys could not be read: {}</p>",
                esc(&error.to_string())
            );
            return html;
        }
    };
    let policy = &console.gateway.config().policy;
    if clients.is_empty() {
        html.push_str("<p id=\"no-clients\">No client key exists.</p>");
    } else {
        html.push_str("<table id=\"clients\"><tr><th>client</th><th>profile</th><th>admin</th><th>created (UTC)</th><th>last used (UTC)</th><th></th></tr>");
        for client in &clients {
            let profile = policy.profile_of_client(&client.name);
            let _ = write!(
                html,
                "<tr id=\"client-{name}\"><td class=\"name\">{name}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"used\">{}</td><td><form method=\"post\" action=\"{HERE}/remove\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"name\" value=\"{name}\"><button class=\"remove\">Remove</button></form></td></tr>",
                esc(profile.map_or("(none: every tool)", |p| p.name.as_str())),
                if profile.is_some_and(|p| p.admin) {
                    "yes"
                } else {
                    "no"
                },
                records::utc(client.created_at, false),
                client
                    .last_used_at
                    .map(|at| records::utc(at, false))
                    .unwrap_or_else(|| "never".to_owned()),
                esc(&session.csrf),
                name = esc(&client.name),
            );
        }
        html.push_str("</table>");
    }
    let _ = write!(
        html,
        "<form method=\"post\" action=\"{HERE}\" id=\"add-client\" class=\"card\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <p><label>name <input name=\"name\" size=\"32\" placeholder=\"ci\" required pattern=\"[A-Za-z0-9_.\\-]{{1,64}}\"></label> <button>Add client</button></p>\
         <p class=\"hint\">The profile a client runs under is the one whose <code>clients</code> list names it in the configuration, else the default profile.</p></form>",
        esc(&session.csrf)
    );
    html
}

async fn profiles_html(console: &Console) -> String {
    let config = console.gateway.config();
    let policy = &config.policy;
    let mut html = String::from("<h2>Profiles</h2>");
    match policy.default() {
        Some(default) => {
            let _ = write!(
                html,
                "<p>Principals no profile names (the local user, clients not listed in a profile) run under <span class=\"name\">{}</span>.</p>",
                esc(&default.name)
            );
        }
        None => html.push_str(
            "<p>Principals no profile names (the local user, clients not listed in a profile) see every tool.</p>",
        ),
    }
    if policy.profiles.is_empty() {
        html.push_str("<p id=\"no-profiles\">No profile is configured.</p>");
    }
    for profile in &policy.profiles {
        let patterns = |patterns: &[config::Pattern], empty: &str| {
            if patterns.is_empty() {
                empty.to_owned()
            } else {
                patterns
                    .iter()
                    .map(config::Pattern::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let view = overview::tools(
            &console.gateway,
            &overview::ToolsQuery {
                server: None,
                profile: Some(profile.name.clone()),
            },
        )
        .await;
        let _ = write!(
            html,
            "<section class=\"card profile\" id=\"profile-{name}\"><h3 class=\"name\">{name}</h3><table>\
             <tr><th>clients</th><td>{}</td></tr><tr><th>admin</th><td>{}</td></tr>\
             <tr><th>servers</th><td>{}</td></tr><tr><th>allow</th><td>{}</td></tr><tr><th>deny</th><td>{}</td></tr>\
             <tr><th>annotations</th><td>{}</td></tr><tr><th>exposure</th><td>{} ({} tokens listed)</td></tr><tr><th>calls per minute</th><td>{}</td></tr></table>\
             <p>Exposes {} tools:</p><ul class=\"tools\">",
            esc(&if profile.clients.is_empty() {
                "(none)".to_owned()
            } else {
                profile.clients.join(", ")
            }),
            if profile.admin { "yes" } else { "no" },
            esc(&patterns(&profile.servers, "every server")),
            esc(&patterns(&profile.allow, "every tool")),
            esc(&patterns(&profile.deny, "nothing")),
            match (profile.read_only, profile.destructive) {
                (true, _) => "read-only tools only",
                (false, false) => "no destructive tools",
                (false, true) => "any",
            },
            esc(&view.listing.exposure),
            view.listing.listed_tokens,
            profile
                .calls_per_minute
                .or(policy.limits.calls_per_minute)
                .map_or_else(|| "no limit".to_owned(), |n| n.to_string()),
            view.tools.len(),
            name = esc(&profile.name),
        );
        for tool in &view.tools {
            let _ = write!(html, "<li class=\"name\">{}</li>", esc(&tool.name));
        }
        html.push_str("</ul></section>");
    }
    html
}

/// `POST /ui/clients`: adds the form's client and shows its key, once.
pub(super) async fn add(State(console): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let (session, form) = match admin_form(&console, &headers, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let name = form.get("name").map_or("", |n| n.trim()).to_owned();
    let Some(store) = console.gateway.store() else {
        let note = Note::failed(
            "Nothing added: the gateway runs without its database.".to_owned(),
            Vec::new(),
        );
        return self::body(&console, &session, Some(&note), None).await;
    };
    match store.add_client(&name).await {
        Ok(key) => {
            // The name only: the key is on the page that answers, and nowhere else.
            tracing::info!(client = %name, by = %session.principal, "client added through the console");
            let new = NewKey { name, key };
            self::body(&console, &session, None, Some(&new)).await
        }
        Err(error) => {
            let note = match &error {
                store::StoreError::ClientExists { .. }
                | store::StoreError::InvalidClientName { .. } => {
                    Note::failed(format!("Nothing added: {error}."), Vec::new())
                }
                _ => {
                    tracing::warn!(%error, "the console could not add a client");
                    Note::failed(
                        "Nothing added: the database could not be written; the gateway's log says why."
                            .to_owned(),
                        Vec::new(),
                    )
                }
            };
            self::body(&console, &session, Some(&note), None).await
        }
    }
}

/// `POST /ui/clients/remove`: removes the form's client; its key stops working at once.
pub(super) async fn remove(State(console): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let (session, form) = match admin_form(&console, &headers, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let name = form.get("name").map_or("", String::as_str);
    let note = match console.gateway.store() {
        None => Note::failed(
            "Nothing removed: the gateway runs without its database.".to_owned(),
            Vec::new(),
        ),
        Some(store) => match store.remove_client(name).await {
            Ok(true) => {
                tracing::info!(client = %name, by = %session.principal, "client removed through the console");
                Note::done(
                    format!("Removed client {name}: its key no longer works."),
                    Vec::new(),
                )
            }
            Ok(false) => Note::failed(format!("No client is named '{name}'."), Vec::new()),
            Err(error) => {
                tracing::warn!(%error, "the console could not remove a client");
                Note::failed(
                    "Nothing removed: the database could not be written; the gateway's log says why."
                        .to_owned(),
                    Vec::new(),
                )
            }
        },
    };
    self::body(&console, &session, Some(&note), None).await
}
