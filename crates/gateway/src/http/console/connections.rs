//! The console's OAuth sign-ins page, `/ui/connections`: the servers configured for OAuth with
//! the console's own sign-in to each and a Sign in button, and every stored sign-in of every
//! principal with a Sign out button.
//!
//! - **Sign in** starts the gateway's own authorization-code login (discovery, registration,
//!   PKCE: `oauth::login`, as a tool call's sign-in link and `/oauth/start` do) for the
//!   principal the console is signed in as, and sends the browser to the authorization server.
//!   It answers a page that moves on by itself rather than a redirect: the console's
//!   `Content-Security-Policy` says `form-action 'self'`, which a browser applies to where a
//!   form's answer redirects too, and the authorization server is another origin. The browser
//!   comes back to `/oauth/callback`, whose page sends it on to this page (by a refresh: see
//!   `oauth::browser_page_back`). Both browser rules were checked with Debian's Chromium 156:
//!   a form's 303 to another origin under `form-action 'self'` is not followed, and after a
//!   click on another site's page a redirect back carries no `SameSite=Strict` cookie while a
//!   refresh of the landing page does.
//! - **Sign out** does what `DELETE /admin/v1/connections/{server}/{principal}` does
//!   (`oauth::sign_out`): the stored tokens are deleted and that principal's session with the
//!   server ends.
//!
//! Both are forms of an administrator's session with its CSRF token (`admin_form`). Only what
//! the admin API shows is shown: never a token.

use std::{fmt::Write as _, time::SystemTime};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};

use super::{Console, Note, Session, Shared, admin_form, esc, html, page, to_login};
use crate::{oauth, records};

/// Where this page is, and where a sign-in the console started comes back to.
const HERE: &str = "/ui/connections";

/// `GET /ui/connections`.
pub(super) async fn show(State(console): Shared, headers: HeaderMap) -> Response {
    let Some(session) = console.session(&headers) else {
        return to_login();
    };
    body(&console, &session, None).await
}

async fn body(console: &Console, session: &Session, note: Option<&Note>) -> Response {
    let mut body = String::from("<h1>OAuth sign-ins</h1>");
    if let Some(note) = note {
        body.push_str(&note.html());
    }
    let Some(store) = console.gateway.store() else {
        body.push_str(
            "<p class=\"why\">The gateway runs without its database, which keeps the sign-ins.</p>",
        );
        return page("Sign-ins", HERE, session, &body);
    };
    let signed_in = match store.list_credentials().await {
        Ok(all) => all,
        Err(error) => {
            tracing::warn!(%error, "the console could not read the stored sign-ins");
            let _ = write!(
                body,
                "<p class=\"why\">The sign-ins could not be read: {}</p>",
                esc(&error.to_string())
            );
            return page("Sign-ins", HERE, session, &body);
        }
    };
    let now = SystemTime::now();
    let me = session.principal.id();

    let config = console.gateway.config();
    let _ = write!(
        body,
        "<h2>Servers</h2><p>Every server configured for OAuth, and whether you (<span class=\"name\">{}</span>) are signed in to it. Signing in opens the server's authorization page and comes back here.</p>",
        esc(me.as_str())
    );
    if let Some(why) = console.logins.refusal() {
        let _ = write!(body, "<p class=\"why\">{}</p>", esc(why));
    }
    body.push_str(
        "<table id=\"oauth-servers\"><tr><th>server</th><th>your sign-in</th><th>expires (UTC)</th><th></th></tr>",
    );
    let mut any = false;
    for server in oauth::oauth_servers(&config) {
        any = true;
        let name = server.name.as_str();
        let mine = signed_in
            .iter()
            .find(|row| row.server.as_str() == name && row.principal == me);
        let status = match mine {
            Some(row) if row.expires_at.is_some_and(|at| at <= now) => "token expired",
            Some(_) => "signed in",
            None if console.logins.waiting(name, &session.principal) => "waiting for the browser",
            None => "not signed in",
        };
        let button = if console.logins.available() {
            let label = if mine.is_some() {
                "Sign in again"
            } else {
                "Sign in"
            };
            format!(
                "<form method=\"post\" action=\"{HERE}/signin\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"server\" value=\"{}\"><button class=\"signin\">{label}</button></form>",
                esc(&session.csrf),
                esc(name),
            )
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<tr id=\"oauth-{}\"><td class=\"name\">{}</td><td class=\"status\">{status}</td><td>{}</td><td>{button}</td></tr>",
            esc(name),
            esc(name),
            mine.and_then(|row| row.expires_at)
                .map(|at| records::utc(at, false))
                .unwrap_or_default(),
        );
    }
    body.push_str("</table>");
    if !any {
        body.push_str(
            "<p>No server is configured with <code>auth = { type = \"oauth\" }</code>.</p>",
        );
    }

    body.push_str(
        "<h2>Connections</h2><p>Every stored sign-in, of every principal. Signing one out deletes its tokens and ends its session with the server; its next call asks it to sign in again.</p>",
    );
    if signed_in.is_empty() {
        body.push_str("<p id=\"no-connections\">Nobody is signed in to any server.</p>");
    } else {
        body.push_str("<table id=\"connections\"><tr><th>server</th><th>principal</th><th>status</th><th>expires (UTC)</th><th>renewed (UTC)</th><th>issuer</th><th></th></tr>");
        for row in &signed_in {
            let expired = row.expires_at.is_some_and(|at| at <= now);
            let _ = write!(
                body,
                "<tr><td class=\"name\">{server}</td><td class=\"principal\">{principal}</td><td class=\"status\">{}</td><td>{}</td><td>{}</td><td>{}</td><td><form method=\"post\" action=\"{HERE}/signout\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><input type=\"hidden\" name=\"server\" value=\"{server}\"><input type=\"hidden\" name=\"principal\" value=\"{principal}\"><button class=\"signout\">Sign out</button></form></td></tr>",
                if expired {
                    "token expired"
                } else {
                    "signed in"
                },
                row.expires_at
                    .map(|at| records::utc(at, false))
                    .unwrap_or_default(),
                records::utc(row.updated_at, false),
                esc(&row.issuer),
                server = esc(row.server.as_str()),
                principal = esc(row.principal.as_str()),
                csrf = esc(&session.csrf),
            );
        }
        body.push_str("</table>");
    }
    page("Sign-ins", HERE, session, &body)
}

/// `POST /ui/connections/signin`: starts the login to the form's server for the session's
/// principal, and sends the browser to the authorization server.
pub(super) async fn sign_in(State(console): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let (session, form) = match admin_form(&console, &headers, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let server = form.get("server").map_or("", String::as_str);
    let started = console
        .logins
        .begin_returning(&console.gateway, server, &session.principal, Some(HERE))
        .await;
    match started {
        Ok(started) => onward(server, &started.authorization_url),
        Err(error) => {
            tracing::warn!(server, %error, "the console's sign-in did not start");
            let note = Note::failed(format!("Not signed in: {error}"), Vec::new());
            self::body(&console, &session, Some(&note)).await
        }
    }
}

/// The page that takes the browser on to the authorization server at once (see the module
/// documentation for why it is not a redirect), with a link in case it does not.
fn onward(server: &str, authorization_url: &str) -> Response {
    let url = esc(authorization_url);
    let origin = url::Url::parse(authorization_url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default();
    html(
        StatusCode::OK,
        &format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0; url={url}\"><title>Signing in · mcpgw</title></head><body><main><p>Signing in to {}: on to the authorization server at {}.</p><p><a id=\"onward\" href=\"{url}\">Continue</a></p></main></body></html>",
            esc(server),
            esc(&origin),
        ),
    )
}

/// `POST /ui/connections/signout`: signs the form's principal out of the form's server.
pub(super) async fn sign_out(State(console): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let (session, form) = match admin_form(&console, &headers, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let server = form.get("server").map_or("", String::as_str);
    let principal = form.get("principal").map_or("", String::as_str);
    let note = match console.gateway.store() {
        None => Note::failed(
            "Nothing changed: the gateway runs without its database.".to_owned(),
            Vec::new(),
        ),
        Some(_) if console.gateway.config().server(server).is_none() => Note::failed(
            format!("Nothing changed: no server named '{server}' is configured."),
            Vec::new(),
        ),
        Some(store) => match oauth::sign_out(&console.gateway, store, server, principal).await {
            Ok(true) => {
                tracing::info!(server, principal, by = %session.principal, "signed out through the console");
                Note::done(format!("Signed {principal} out of {server}."), Vec::new())
            }
            Ok(false) => Note::failed(
                format!("{principal} has no sign-in with {server}."),
                Vec::new(),
            ),
            Err(error) => {
                tracing::warn!(%error, "the console could not delete a sign-in");
                Note::failed(
                    "Nothing changed: the database could not be written; the gateway's log says why."
                        .to_owned(),
                    Vec::new(),
                )
            }
        },
    };
    self::body(&console, &session, Some(&note)).await
}
