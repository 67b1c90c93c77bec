//! The web console (`/ui`) in a real browser: Debian's headless Chromium, driven by Selenium
//! (`tests/clients/console_browser.py`), against a real `mcpgw serve` with the filesystem
//! server and a server that cannot be reached. The browser signs in through the link `serve`
//! prints in its banner, reads the servers (the failing one with its cause), the tools, three
//! ranked search lists, a server's page, the sign-ins and clients pages; of two calls real
//! Python SDK clients are waiting on it rejects one with a reason (that call fails with it) and
//! approves the other with its arguments edited (that call runs with them), and finds both in
//! the audit log. In a second run it adds a stdio server (the Python `mcp-server-time`) from the
//! servers page's form and finds its tools on its page, disables and enables it from there (its
//! tools go and come back), and tests the unreachable server and reads why it failed. On a keyed
//! gateway it signs in through `/ui/login` with an administrator's key (another client's key
//! refused) and signs out (the session's cookie, put back, opens nothing). On the sign-ins page
//! it signs in to an OAuth upstream (tests/fixtures/oauth_server.py) through the authorization
//! server and back, sees the server's tool listed and called by a real client, and signs out
//! again. On the clients page of a keyed gateway it adds a client key, reads it once, uses it on
//! `/mcp`, finds it gone from the page when opened again, and removes it (the key then refused).
//! A held definition is shown with its diff and trusted. A screenshot of each page is kept under
//! `target/test-artifacts/console/` (`scripts/console-screenshots.sh` copies the docs' ones).
//! Without a browser, the session and form rules: no page without a session, a wrong token
//! refused, a form with a stale CSRF token refused, a cross-site form post refused by the guard,
//! every form of the sign-ins and clients pages refused without the session or its CSRF token
//! (and nothing changed); and the server forms: a pasted `mcpServers` snippet added, disabled
//! and removed, each in the file, a server the loader refuses shown with its problem (escaped)
//! and the file untouched.

use std::{
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::Duration,
};

use serde_json::{Value, json};

use crate::{
    approvals::filesystem_server,
    harness::*,
    oauth_fixture::OAuthServer,
    pinning::{CHANGED, TRUSTED, served_tools, trusted_then_changed},
};

fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("test-artifacts/console")
}

fn console_gateway(root: &std::path::Path) -> Gateway {
    let closed = free_port();
    Gateway::start(write_config(&format!(
        "{}[[servers]]\nname = \"broken\"\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{closed}/mcp\" }}\n",
        filesystem_server("fs", root)
    )))
}

fn admin_token(gateway: &Gateway) -> String {
    std::fs::read_to_string(gateway.log.with_file_name("admin-token"))
        .expect("admin token")
        .trim()
        .to_owned()
}

/// The console link `serve` printed in its banner (`  console:     http://...`).
fn banner_link(gateway: &Gateway) -> String {
    let mut link = None;
    wait_until("the banner's console link", Duration::from_secs(30), || {
        link = gateway
            .log_text()
            .lines()
            .find_map(|line| line.trim_start().strip_prefix("console:"))
            .map(|rest| rest.trim().to_owned());
        link.is_some()
    });
    link.unwrap_or_default()
}

/// The calls waiting for a person, as the admin API lists them.
fn pending_approvals(gateway: &Gateway) -> Vec<Value> {
    approvals(gateway, "pending")
}

/// The approvals the admin API lists under `status` (`pending` or `all`).
fn approvals(gateway: &Gateway, status: &str) -> Vec<Value> {
    let answer: Value = reqwest::blocking::Client::new()
        .get(format!(
            "http://127.0.0.1:{}/admin/v1/approvals?status={status}",
            gateway.port
        ))
        .header("x-mcpgw-admin-token", admin_token(gateway))
        .send()
        .and_then(|r| r.json())
        .expect("the approvals");
    answer["approvals"].as_array().cloned().unwrap_or_default()
}

/// A real Python SDK client without elicitation calling `fs__write_file`, in the background:
/// its destructive call waits for a person.
fn waiting_write(gateway: &Gateway, path: &Path, content: &str) -> thread::JoinHandle<Value> {
    let url = gateway.url();
    let call = json!({"op": "call_tool", "name": "call_tool", "arguments": {
        "name": "fs__write_file",
        "arguments": {"path": path.display().to_string(), "content": content}
    }});
    thread::spawn(move || py_client(&["--url", &url], "legacy", json!([call])))
}

#[test]
fn in_chromium_the_console_shows_servers_tools_and_search_and_approves_a_waiting_call() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().canonicalize().expect("root");
    let gateway = console_gateway(&dir);
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let token = admin_token(&gateway);

    // Two calls wait for a person: one is approved with other arguments, one rejected.
    let asked = dir.join("from-the-console.txt");
    let edited = dir.join("edited-in-the-console.txt");
    let refused = dir.join("rejected-in-the-console.txt");
    let approved_caller = waiting_write(&gateway, &asked, "approved in a browser");
    let rejected_caller = waiting_write(&gateway, &refused, "never written");
    wait_until("two calls to wait", Duration::from_secs(60), || {
        pending_approvals(&gateway).len() == 2
    });

    // The browser opens the link as `serve` printed it.
    let link = banner_link(&gateway);
    assert_eq!(
        link,
        format!("{base}/ui?token={token}"),
        "the banner's link"
    );
    let out = artifacts();
    let edit = json!({"path": edited.display().to_string(), "content": "edited in a browser"});
    let browser = Command::new(venv_bin("python"))
        .arg(repo_root().join("tests/clients/console_browser.py"))
        .args([&base, "unused: the link carries the token"])
        .arg(&out)
        .args(["--link", &link, "--every-page", "--search", "write a file"])
        .args(["--reject", "rejected-in-the-console.txt"])
        .args(["--reason", "not this file"])
        .args(["--approve", "from-the-console.txt"])
        .args(["--edit-arguments", &edit.to_string()])
        .output()
        .expect("the browser driver runs");
    assert!(
        browser.status.success(),
        "{}\n{}",
        text(&browser.stderr),
        gateway.log_text()
    );
    let report: Value = serde_json::from_slice(&browser.stdout).expect("report");

    // Signed in by the link; the token is gone from the address bar; the cookie is guarded.
    assert_eq!(report["landing"], format!("{base}/ui"), "{report}");
    assert_eq!(report["cookie"]["httpOnly"], true, "{report}");
    assert_eq!(report["cookie"]["sameSite"], "Strict", "{report}");
    let rows = report["servers"]["rows"].to_string();
    assert!(rows.contains("fs") && rows.contains("ready"), "{rows}");
    // A failed server is retried in the background, so the page may catch it failed or
    // connecting again; either way it names the last failure.
    assert!(
        rows.contains("broken")
            && (rows.contains("failed") || rows.contains("connecting"))
            && rows.contains("connection refused"),
        "the failing server and why: {rows}"
    );
    let tools = report["tools"]["names"].to_string();
    assert!(tools.contains("fs__write_file"), "{tools}");
    let lists = &report["search"]["lists"];
    for strategy in ["bm25", "vector", "hybrid"] {
        assert!(lists[strategy].is_array(), "a {strategy} list: {report}");
    }
    assert!(
        lists["hybrid"].to_string().contains("fs__write_file"),
        "{lists}"
    );

    // Rejected with a reason: the client's call fails with it, and nothing was written.
    let rejection = &report["rejection"];
    assert_eq!(rejection["found"], true, "{report}");
    assert!(
        rejection["note"]
            .as_str()
            .is_some_and(|n| n.contains("Rejected")),
        "{rejection}"
    );
    let client = rejected_caller.join().expect("client thread");
    let step = &client["steps"][0];
    assert_eq!(step["isError"], true, "{client}");
    assert!(
        result_text(step).contains("was rejected by local (not this file); the tool was not run"),
        "the client reads the rejection: {client}"
    );
    assert!(!refused.exists(), "a rejected call does not run");

    // Approved with the arguments edited in the page: the call ran with those, and the client
    // reads the edited path in the tool's answer.
    let approval = &report["approval"];
    assert_eq!(approval["found"], true, "{report}");
    assert!(
        approval["note"]
            .as_str()
            .is_some_and(|n| n.contains("Approved")),
        "{report}"
    );
    assert_eq!(approval["still_waiting"], 0, "both decided: {approval}");
    let client = approved_caller.join().expect("client thread");
    let step = &client["steps"][0];
    assert_eq!(step["isError"], false, "{client}");
    assert!(
        result_text(step).contains(&format!("Successfully wrote to {}", edited.display())),
        "the client's call ran with the edited arguments: {client}"
    );
    assert_eq!(
        std::fs::read_to_string(&edited).expect("written"),
        "edited in a browser"
    );
    assert!(!asked.exists(), "the arguments as asked did not run");
    assert!(pending_approvals(&gateway).is_empty());
    // The decisions as recorded: who, why, and the arguments the approver ran.
    let decided = approvals(&gateway, "all");
    let by_path = |path: &Path| {
        decided
            .iter()
            .find(|a| a["arguments"]["path"] == path.display().to_string())
            .cloned()
            .unwrap_or_else(|| panic!("{} in {decided:?}", path.display()))
    };
    let rejected = by_path(&refused);
    assert_eq!(
        (
            &rejected["status"],
            &rejected["decided_by"],
            &rejected["reason"]
        ),
        (&json!("rejected"), &json!("local"), &json!("not this file")),
        "{rejected}"
    );
    let approved = by_path(&asked);
    assert_eq!(
        (
            &approved["status"],
            &approved["decided_by"],
            &approved["decided_arguments"]
        ),
        (&json!("approved"), &json!("local"), &edit),
        "{approved}"
    );

    // Every other page opened: a server's own page with its tools, sign-ins, clients.
    let pages = &report["pages"];
    assert_eq!(
        pages["server"]["url"],
        format!("{base}/ui/servers/fs"),
        "{pages}"
    );
    assert!(
        pages["server"]["tools"]
            .to_string()
            .contains("fs__write_file"),
        "{pages}"
    );
    assert!(
        pages["connections"]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("Sign-ins")),
        "{pages}"
    );
    assert!(
        pages["clients"]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("Clients")),
        "{pages}"
    );

    wait_until(
        "both decisions in the audit page",
        Duration::from_secs(10),
        || {
            let audit = Command::new(venv_bin("python"))
                .arg(repo_root().join("tests/clients/console_browser.py"))
                .args([&base, &token])
                .arg(out.join("audit-after"))
                .output()
                .expect("the browser driver runs");
            let report: Value = serde_json::from_slice(&audit.stdout).unwrap_or_default();
            let rows = report["audit"]["rows"].to_string();
            rows.contains("fs__write_file approved ok") && rows.contains("fs__write_file rejected")
        },
    );
    for page in [
        "servers",
        "server",
        "tools",
        "search",
        "approvals",
        "approvals-edited",
        "approvals-rejected",
        "approvals-approved",
        "connections",
        "clients",
        "audit",
    ] {
        assert!(out.join(format!("{page}.png")).is_file(), "{page}.png");
    }
}

#[test]
fn in_chromium_a_server_is_added_from_the_console_form_and_a_failing_one_is_tested() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().canonicalize().expect("root");
    let gateway = console_gateway(&dir);
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let token = admin_token(&gateway);
    let out = artifacts().join("servers");
    let browser = Command::new(venv_bin("python"))
        .arg(repo_root().join("tests/clients/console_browser.py"))
        .args([&base, &token])
        .arg(&out)
        .args(["--add-server", "time", &venv_bin("mcp-server-time")])
        .args(["--toggle-server", "time"])
        .args(["--test-server", "broken"])
        .output()
        .expect("the browser driver runs");
    assert!(
        browser.status.success(),
        "{}\n{}",
        text(&browser.stderr),
        gateway.log_text()
    );
    let report: Value = serde_json::from_slice(&browser.stdout).expect("report");

    let added = &report["add_server"];
    let note = added["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("Added time.") && note.contains("time: ready, 2 tools"),
        "{report}"
    );
    assert!(
        added["rows"].to_string().contains("time"),
        "the new server is listed: {added}"
    );
    assert_eq!(added["page"], format!("{base}/ui/servers/time"));
    assert_eq!(added["state"], "ready", "{added}");
    assert_eq!(
        added["tools"],
        json!(["time__get_current_time", "time__convert_time"]),
        "its tools on its page: {added}"
    );
    let tools = report["tools"]["names"].to_string();
    assert!(
        tools.contains("time__convert_time"),
        "and in the catalog: {tools}"
    );

    // Disabled from its page: no tools, and the button says Enable; enabled again: its tools
    // come back, on its page and in the catalog.
    let toggled = &report["toggle_server"];
    let time_tools = json!(["time__get_current_time", "time__convert_time"]);
    assert_eq!(
        toggled["before"]["buttons"],
        json!(["Test", "Disable", "Remove"]),
        "{toggled}"
    );
    let disabled = &toggled["disabled"];
    assert!(
        disabled["notes"].to_string().contains("Disabled time."),
        "{toggled}"
    );
    assert_eq!(disabled["state"], "disabled", "{toggled}");
    assert_eq!(disabled["tools"], json!([]), "{toggled}");
    assert_eq!(
        disabled["buttons"],
        json!(["Test", "Enable", "Remove"]),
        "{toggled}"
    );
    let enabled = &toggled["enabled"];
    let note = enabled["notes"].to_string();
    assert!(
        note.contains("Enabled time.") && note.contains("time: ready, 2 tools"),
        "{toggled}"
    );
    assert_eq!(enabled["state"], "ready", "{toggled}");
    assert_eq!(enabled["tools"], time_tools, "{toggled}");
    assert_eq!(
        enabled["buttons"],
        json!(["Test", "Disable", "Remove"]),
        "{toggled}"
    );
    let catalog = toggled["catalog"].to_string();
    assert!(
        catalog.contains("time__get_current_time") && catalog.contains("time__convert_time"),
        "back in the catalog: {catalog}"
    );

    let file = std::fs::read_to_string(gateway.log.with_file_name("mcpgw.toml")).expect("file");
    assert!(
        file.contains(&format!(
            "name = \"time\"\ntransport = {{ type = \"stdio\", command = {:?} }}",
            venv_bin("mcp-server-time")
        )),
        "{file}"
    );

    let tested = &report["test_server"];
    assert_eq!(tested["ok"], false, "{tested}");
    let error = tested["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("could not connect to 'broken'") && error.contains("connection refused"),
        "the failing server's error, in words: {tested}"
    );
    assert!(
        !file.contains("enabled = false"),
        "enabled again in the file: {file}"
    );
    for page in [
        "server-add-form",
        "server-added",
        "server",
        "server-disabled",
        "server-enabled",
        "server-test",
    ] {
        assert!(out.join(format!("{page}.png")).is_file(), "{page}.png");
    }
}

/// GET or POST `path` without following redirects: status, `Location`, body.
fn raw(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    form: &str,
) -> (u16, String, String) {
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let url = format!("{base}{path}");
    let mut request = if method == "GET" {
        client.get(url)
    } else {
        client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.to_owned())
    };
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().expect("gateway reachable");
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, location, response.text().unwrap_or_default())
}

#[test]
fn console_pages_need_a_session_and_forms_their_csrf_token() {
    let root = tempfile::tempdir().expect("tempdir");
    let gateway = console_gateway(root.path());
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let token = admin_token(&gateway);

    let (status, location, _) = raw(&base, "GET", "/ui/tools", &[], "");
    assert_eq!((status, location.as_str()), (303, "/ui/login"));
    let (status, _, body) = raw(&base, "GET", "/ui?token=not-the-token", &[], "");
    assert_eq!(status, 401, "{body}");
    let (status, _, _) = raw(&base, "POST", "/ui/login", &[], "secret=wrong");
    assert_eq!(status, 401);

    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let signed = client
        .get(format!("{base}/ui?token={token}"))
        .send()
        .expect("gateway reachable");
    assert_eq!(signed.status().as_u16(), 303);
    let cookie = signed.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains(&token), "the cookie is not the token");
    let session = cookie.split(';').next().expect("name=value").to_owned();

    let (status, _, page) = raw(&base, "GET", "/ui/approvals", &[("cookie", &session)], "");
    assert_eq!(status, 200);
    assert!(page.contains("No call is waiting"), "{page}");
    let (status, _, headers_page) = raw(&base, "GET", "/ui", &[("cookie", &session)], "");
    assert_eq!(status, 200, "{headers_page}");

    // A form without the session's CSRF token does nothing.
    let (status, _, body) = raw(
        &base,
        "POST",
        "/ui/held/approve",
        &[("cookie", &session)],
        "csrf=forged&name=fs__write_file",
    );
    assert_eq!(status, 403, "{body}");
    // A page of another site cannot post the console's forms: the guard refuses the origin
    // (and a browser would not send the SameSite=Strict cookie at all).
    let (status, _, body) = raw(
        &base,
        "POST",
        "/ui/logout",
        &[("cookie", &session), ("origin", "https://evil.example")],
        "csrf=x",
    );
    assert_eq!(status, 403, "{body}");
    // The security headers on every page.
    let response = client
        .get(format!("{base}/ui"))
        .header("cookie", &session)
        .send()
        .expect("gateway reachable");
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap_or_default();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(response.headers()["x-frame-options"], "DENY");
    assert_eq!(response.headers()["referrer-policy"], "same-origin");
}

/// Signs in with the link's token: the session's cookie and its CSRF token (from a form).
fn console_session(base: &str, token: &str) -> (String, String) {
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let signed = client
        .get(format!("{base}/ui?token={token}"))
        .send()
        .expect("gateway reachable");
    let cookie = signed.headers()["set-cookie"].to_str().expect("cookie");
    let session = cookie.split(';').next().expect("name=value").to_owned();
    let (_, _, page) = raw(base, "GET", "/ui", &[("cookie", &session)], "");
    let (_, after) = page
        .split_once("name=\"csrf\" value=\"")
        .expect("a form with the CSRF token");
    let csrf = after.split('"').next().expect("token").to_owned();
    (session, csrf)
}

fn form(pairs: &[(&str, &str)]) -> String {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        form.append_pair(name, value);
    }
    form.finish()
}

#[test]
fn console_server_forms_change_the_file_need_their_csrf_token_and_escape_what_they_show() {
    let root = tempfile::tempdir().expect("tempdir");
    let gateway = console_gateway(root.path());
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let (session, csrf) = console_session(&base, &admin_token(&gateway));
    let cookie = [("cookie", session.as_str())];
    let file = || std::fs::read_to_string(gateway.log.with_file_name("mcpgw.toml")).expect("file");
    let original = file();

    let snippet = json!({"mcpServers": {"clock": {"command": venv_bin("mcp-server-time")}}});
    let forged = form(&[("csrf", "forged"), ("snippet", &snippet.to_string())]);
    let (status, _, page) = raw(&base, "POST", "/ui/servers", &cookie, &forged);
    assert_eq!(status, 403, "{page}");
    assert_eq!(file(), original, "a forged form changes nothing");

    let pasted = form(&[("csrf", &csrf), ("snippet", &snippet.to_string())]);
    let (status, _, page) = raw(&base, "POST", "/ui/servers", &cookie, &pasted);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Added clock.") && page.contains("clock: ready, 2 tools"),
        "{page}"
    );
    assert!(file().contains("name = \"clock\""));

    let (_, _, page) = raw(&base, "GET", "/ui/servers/clock", &cookie, "");
    assert!(
        page.contains("clock__get_current_time"),
        "its tools: {page}"
    );
    let token = form(&[("csrf", &csrf)]);
    let (status, _, page) = raw(&base, "POST", "/ui/servers/clock/disable", &cookie, &token);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Disabled clock.") && page.contains("disabled"),
        "{page}"
    );
    assert!(file().contains("enabled = false"));
    assert!(
        page.contains("button class=\"enable\""),
        "now it can be enabled: {page}"
    );
    let (_, _, page) = raw(&base, "POST", "/ui/servers/clock/remove", &cookie, &token);
    assert!(page.contains("Removed clock."), "{page}");
    assert_eq!(file(), original, "the file as it was");

    let hostile = form(&[
        ("csrf", &csrf),
        ("name", "<script>x</script>"),
        ("command", "x"),
    ]);
    let (status, _, page) = raw(&base, "POST", "/ui/servers", &cookie, &hostile);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Nothing changed") && page.contains("servers[2].name"),
        "the loader's problem: {page}"
    );
    assert!(
        page.contains("&lt;script&gt;x&lt;/script&gt;") && !page.contains("<script>"),
        "escaped: {page}"
    );
    assert_eq!(file(), original);
}

/// Runs tests/clients/console_browser.py signed in with `secret` (the link's token, or an
/// administrator's key on a keyed gateway), screenshots into `out`: its report.
fn browse(gateway: &Gateway, secret: &str, out: &Path, args: &[&str]) -> Value {
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let browser = Command::new(venv_bin("python"))
        .arg(repo_root().join("tests/clients/console_browser.py"))
        .args([&base, secret])
        .arg(out)
        .args(args)
        .output()
        .expect("the browser driver runs");
    assert!(
        browser.status.success(),
        "{}\n{}",
        text(&browser.stderr),
        gateway.log_text()
    );
    serde_json::from_slice(&browser.stdout).expect("report")
}

/// A gateway in front of the OAuth fixture's MCP server, `docs`, never signed in.
fn oauth_gateway(fixture: &OAuthServer) -> Gateway {
    Gateway::start(write_config(&format!(
        "[[servers]]\nname = \"docs\"\ntimeout_s = 10\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", url = \"{}\" }}\n\n[retrieval]\nstrategy = \"bm25\"\n",
        fixture.endpoint("/mcp")
    )))
}

/// `docs__whoami` called through `call_tool` by a real Python SDK client.
fn whoami(gateway: &Gateway) -> Value {
    let script = json!([{"op": "call_tool", "name": "call_tool",
                         "arguments": {"name": "docs__whoami", "arguments": {}}}]);
    let report = py_client(&["--url", &gateway.url()], "legacy", script);
    report["steps"][0].clone()
}

#[test]
fn in_chromium_an_oauth_upstream_is_signed_in_from_the_console_and_signed_out_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), None);
    let gateway = oauth_gateway(&fixture);
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let token = admin_token(&gateway);
    let out = artifacts().join("connections");

    let report = browse(
        &gateway,
        &token,
        &out.join("sign-in"),
        &["--oauth-sign-in", "docs", "--expect-tool", "docs__whoami"],
    );
    let signed = &report["oauth_sign_in"];
    assert_eq!(
        signed["before"]["servers"],
        json!({"oauth-docs": "not signed in"}),
        "{signed}"
    );
    assert_eq!(signed["before"]["connections"], json!([]), "{signed}");
    // Through the authorization server (its /authorize, then the code exchanged with PKCE)
    // and the gateway's callback, back on the console's page, which shows the sign-in.
    assert_eq!(
        signed["landed"],
        format!("{base}/ui/connections"),
        "{signed}"
    );
    assert_eq!(fixture.registrations(), 1);
    assert_eq!(fixture.grants("authorization_code"), 1);
    assert!(
        fixture
            .requests()
            .iter()
            .any(|r| r["path"] == "/authorize" && r["query"]["code_challenge_method"] == "S256"),
        "the browser went through /authorize"
    );
    assert_eq!(
        signed["after"]["servers"],
        json!({"oauth-docs": "signed in"}),
        "{signed}"
    );
    assert_eq!(
        signed["after"]["connections"],
        json!([{"server": "docs", "principal": "local", "status": "signed in"}]),
        "{signed}"
    );
    let tools = signed["tools"].to_string();
    assert!(tools.contains("docs__whoami"), "listed: {tools}");

    // A real client's call of the upstream's tool now goes through, as the fixture's user.
    let call = whoami(&gateway);
    assert_eq!(call["isError"], false, "{call}\n{}", gateway.log_text());
    assert!(result_text(&call).contains(r#""user": "user""#), "{call}");

    let report = browse(
        &gateway,
        &token,
        &out.join("sign-out"),
        &["--oauth-sign-out", "docs"],
    );
    let signed_out = &report["oauth_sign_out"];
    assert_eq!(signed_out["found"], true, "{signed_out}");
    assert_eq!(
        signed_out["notes"],
        json!(["Signed local out of docs."]),
        "{signed_out}"
    );
    assert_eq!(signed_out["connections"], json!([]), "{signed_out}");
    assert_eq!(
        signed_out["servers"],
        json!({"oauth-docs": "not signed in"}),
        "{signed_out}"
    );
    let again = whoami(&gateway);
    assert_eq!(again["isError"], true, "signed out: {again}");
    assert!(
        result_text(&again).contains("/oauth/start?server=docs"),
        "the sign-in is offered again: {again}"
    );

    let log = gateway.log_text();
    for secret in fixture.secrets_seen() {
        assert!(!log.contains(&secret), "the gateway log holds a secret");
    }
    for page in [
        "sign-in/connections",
        "sign-in/connections-signed-in",
        "sign-out/connections-signed-out",
    ] {
        assert!(out.join(format!("{page}.png")).is_file(), "{page}.png");
    }
}

/// A keyed gateway (a client key exists before it starts) with the time server, a profile `ops` for the
/// administrator `boss` and a read-only profile `viewer`; and boss's key.
fn keyed_gateway() -> (Gateway, String) {
    let profiles = "[[profiles]]\nname = \"ops\"\nclients = [\"boss\"]\nadmin = true\n\n\
                    [[profiles]]\nname = \"viewer\"\nclients = [\"ci\"]\nallow = [\"time__get_current_time\"]\n";
    let (config, _) = listening_config("", &format!("{}\n{profiles}", time_stdio_server("time")));
    let boss = add_client(&config.path, "boss");
    (Gateway::start_configured(config, |_| {}), boss)
}

#[test]
fn in_chromium_a_client_key_is_shown_once_works_and_stops_working_when_removed() {
    let (gateway, boss) = keyed_gateway();
    let out = artifacts().join("clients");
    let report = browse(&gateway, &boss, &out.join("add"), &["--add-client", "ci"]);
    let added = &report["add_client"];
    assert_eq!(added["before"], json!(["boss"]), "{added}");
    assert_eq!(added["after"], json!(["boss", "ci"]), "{added}");
    let key = added["key"]
        .as_str()
        .expect("the key, shown once")
        .to_owned();
    assert!(key.starts_with("mcpgw_") && key.len() > 40, "{added}");
    assert_eq!(added["key_shown_again"], false, "{added}");
    assert_eq!(added["new_key_box_again"], false, "{added}");
    assert_eq!(added["reopened"], json!(["boss", "ci"]), "{added}");
    // The profiles, with what each exposes: ci's read-only view has the one tool allowed.
    assert_eq!(
        added["profiles"]["profile-viewer"],
        json!(["time__get_current_time"]),
        "{added}"
    );
    let ops = added["profiles"]["profile-ops"].to_string();
    assert!(
        ops.contains("time__get_current_time") && ops.contains("time__convert_time"),
        "{added}"
    );

    // The key works on /mcp, as client ci.
    let (status, _, body) = initialize(&gateway.url(), Some(&format!("Bearer {key}")));
    assert_eq!(status, 200, "{body}");
    let called = py_client(
        &[
            "--url",
            &gateway.url(),
            "--header",
            &format!("Authorization: Bearer {key}"),
        ],
        "legacy",
        json!([{"op": "call_tool", "name": "call_tool", "arguments": {
            "name": "time__get_current_time", "arguments": {"timezone": "UTC"}}}]),
    );
    let call = &called["steps"][0];
    assert_eq!(call["isError"], false, "{called}");
    assert!(
        result_text(call).contains("\"timezone\": \"UTC\""),
        "{called}"
    );
    assert!(
        !gateway.log_text().contains(&key),
        "the key is never in the log"
    );

    let report = browse(
        &gateway,
        &boss,
        &out.join("remove"),
        &["--remove-client", "ci"],
    );
    let removed = &report["remove_client"];
    assert!(
        removed["note"]
            .as_str()
            .is_some_and(|n| n.contains("Removed client ci")),
        "{removed}"
    );
    assert_eq!(removed["clients"], json!(["boss"]), "{removed}");
    let (status, _, body) = initialize(&gateway.url(), Some(&format!("Bearer {key}")));
    assert_eq!(status, 401, "removed: {body}");
    for page in ["add/clients-added", "add/clients", "remove/clients-removed"] {
        assert!(out.join(format!("{page}.png")).is_file(), "{page}.png");
    }
}

/// On a keyed listener the banner's console link carries no secret; the login page asks for a
/// key, refuses a client's key whose profile is not an administrator's, and takes an
/// administrator's; signing out from the menu ends the session in the gateway, so its cookie put
/// back opens nothing.
#[test]
fn in_chromium_an_administrators_key_signs_in_through_the_login_form_and_signing_out_ends_the_session()
 {
    let profiles = "[[profiles]]\nname = \"ops\"\nclients = [\"boss\"]\nadmin = true\n\n\
                    [[profiles]]\nname = \"viewer\"\nclients = [\"ci\"]\nallow = [\"time__get_current_time\"]\n";
    let (config, _) = listening_config("", &format!("{}\n{profiles}", time_stdio_server("time")));
    let boss = add_client(&config.path, "boss");
    let ci = add_client(&config.path, "ci");
    let gateway = Gateway::start_configured(config, |_| {});
    let base = format!("http://127.0.0.1:{}", gateway.port);
    assert_eq!(
        banner_link(&gateway),
        format!("{base}/ui (sign in with the key of an administrator's client)"),
        "no token in a keyed listener's link"
    );
    let out = artifacts().join("sign-in");
    let report = browse(
        &gateway,
        &boss,
        &out,
        &["--sign-in-form", "--wrong-secret", &ci, "--sign-out"],
    );
    let signed = &report["sign_in_form"];
    assert_eq!(
        signed["redirected_to"],
        format!("{base}/ui/login"),
        "{signed}"
    );
    assert_eq!(
        signed["refused"]["why"],
        json!(["Not the key of a client whose profile has admin = true."]),
        "a viewer's key is refused: {signed}"
    );
    assert_eq!(signed["landed"], format!("{base}/ui"), "{signed}");
    assert_eq!(report["landing"], format!("{base}/ui"), "{report}");
    assert_eq!(report["cookie"]["httpOnly"], true, "{report}");
    assert_eq!(report["cookie"]["sameSite"], "Strict", "{report}");
    assert!(
        report["servers"]["rows"].to_string().contains("time"),
        "{report}"
    );
    let tools = report["tools"]["names"].to_string();
    assert!(
        tools.contains("time__get_current_time") && tools.contains("time__convert_time"),
        "a page loads after signing in: {tools}"
    );

    let out_of = &report["sign_out"];
    assert_eq!(out_of["landed"], format!("{base}/ui/login"), "{out_of}");
    assert_eq!(
        out_of["cookie_left"], false,
        "the cookie is cleared: {out_of}"
    );
    assert_eq!(
        out_of["with_the_old_cookie"],
        format!("{base}/ui/login"),
        "the session ended in the gateway: {out_of}"
    );
    let log = gateway.log_text();
    assert!(
        !log.contains(&boss) && !log.contains(&ci),
        "no key in the log"
    );
    for page in ["login", "login-refused", "servers", "tools", "signed-out"] {
        assert!(out.join(format!("{page}.png")).is_file(), "{page}.png");
    }
}

/// The CSRF token of the page at `path` (its first form's).
fn csrf_of(base: &str, session: &str, path: &str) -> String {
    let (status, _, page) = raw(base, "GET", path, &[("cookie", session)], "");
    assert_eq!(status, 200, "{page}");
    let (_, after) = page
        .split_once("name=\"csrf\" value=\"")
        .expect("a form with the CSRF token");
    after.split('"').next().expect("token").to_owned()
}

#[test]
fn console_sign_in_and_client_forms_need_the_session_and_its_csrf_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), None);
    let gateway = oauth_gateway(&fixture);
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let (session, csrf) = console_session(&base, &admin_token(&gateway));
    assert_eq!(csrf_of(&base, &session, "/ui/connections"), csrf);
    assert_eq!(csrf_of(&base, &session, "/ui/clients"), csrf);
    let cookie = [("cookie", session.as_str())];
    let connections = |expect: &str| {
        let (_, _, page) = raw(&base, "GET", "/ui/connections", &cookie, "");
        assert!(page.contains(expect), "{expect}: {page}");
    };

    // Each route, without the session (to the login page) and with a forged token (403):
    // nothing starts, nothing changes.
    let refused = |path: &str, pairs: &[(&str, &str)]| {
        let mut forged = vec![("csrf", "forged")];
        forged.extend_from_slice(pairs);
        let (status, location, body) = raw(&base, "POST", path, &cookie, &form(&forged));
        assert_eq!(status, 403, "{path} with a forged token: {body}");
        let mut genuine = vec![("csrf", csrf.as_str())];
        genuine.extend_from_slice(pairs);
        let (status, location_without, _) = raw(&base, "POST", path, &[], &form(&genuine));
        assert_eq!(
            (status, location_without.as_str()),
            (303, "/ui/login"),
            "{path} without the session ({location})"
        );
        let (status, _, _) = raw(
            &base,
            "POST",
            path,
            &[("cookie", "mcpgw_console=not-a-session")],
            &form(&genuine),
        );
        assert_eq!(status, 303, "{path} with a made-up session");
    };
    refused("/ui/connections/signin", &[("server", "docs")]);
    assert_eq!(fixture.registrations(), 0, "no sign-in was started");
    refused("/ui/clients", &[("name", "sneaky")]);
    refused("/ui/clients/remove", &[("name", "sneaky")]);
    let (_, _, page) = raw(&base, "GET", "/ui/clients", &cookie, "");
    assert!(page.contains("No client key exists."), "{page}");

    // The genuine form: a page that moves the browser on to the authorization server (the
    // console's `form-action 'self'` would stop a redirect there).
    let (status, _, page) = raw(
        &base,
        "POST",
        "/ui/connections/signin",
        &cookie,
        &form(&[("csrf", &csrf), ("server", "docs")]),
    );
    assert_eq!(status, 200, "{page}");
    let (_, after) = page
        .split_once("http-equiv=\"refresh\" content=\"0; url=")
        .expect("a refresh");
    let authorize = after.split('"').next().expect("url").replace("&amp;", "&");
    assert!(
        authorize.starts_with(&fixture.endpoint("/authorize?")),
        "{authorize}"
    );
    connections("waiting for the browser");
    // The browser's part, followed by hand: the authorization server, then the gateway's
    // callback, whose page sends the browser back to the console.
    let landed = reqwest::blocking::get(&authorize)
        .and_then(|r| r.text())
        .expect("the sign-in ends at the gateway");
    assert!(
        landed.contains("Signed in to &#39;docs&#39;.")
            && landed.contains("http-equiv=\"refresh\" content=\"0; url=/ui/connections\""),
        "{landed}"
    );
    connections("<td class=\"principal\">local</td><td class=\"status\">signed in</td>");

    let sign_out = [("server", "docs"), ("principal", "local")];
    refused("/ui/connections/signout", &sign_out);
    connections("<td class=\"principal\">local</td><td class=\"status\">signed in</td>");
    let mut genuine = vec![("csrf", csrf.as_str())];
    genuine.extend_from_slice(&sign_out);
    let (status, _, page) = raw(
        &base,
        "POST",
        "/ui/connections/signout",
        &cookie,
        &form(&genuine),
    );
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Signed local out of docs.") && page.contains("Nobody is signed in"),
        "{page}"
    );

    // An added client's key is on the answer once; a removed one is gone.
    let (status, _, page) = raw(
        &base,
        "POST",
        "/ui/clients",
        &cookie,
        &form(&[("csrf", &csrf), ("name", "ci")]),
    );
    assert_eq!(status, 200, "{page}");
    let (_, after) = page.split_once("<code id=\"key\">").expect("the key");
    let key = after.split('<').next().expect("key").to_owned();
    assert!(key.starts_with("mcpgw_"), "{key}");
    let (_, _, again) = raw(&base, "GET", "/ui/clients", &cookie, "");
    assert!(again.contains("id=\"client-ci\"") && !again.contains(&key));
    let (_, _, page) = raw(
        &base,
        "POST",
        "/ui/clients",
        &cookie,
        &form(&[("csrf", &csrf), ("name", "ci")]),
    );
    assert!(
        page.contains("Nothing added: a client named &#39;ci&#39; already exists")
            && !page.contains("id=\"key\""),
        "{page}"
    );
    refused("/ui/clients/remove", &[("name", "ci")]);
    let (_, _, page) = raw(&base, "GET", "/ui/clients", &cookie, "");
    assert!(page.contains("id=\"client-ci\""), "still there: {page}");
    let (_, _, page) = raw(
        &base,
        "POST",
        "/ui/clients/remove",
        &cookie,
        &form(&[("csrf", &csrf), ("name", "ci")]),
    );
    assert!(page.contains("Removed client ci"), "{page}");
    assert!(!gateway.log_text().contains(&key), "never logged");
}

/// A tool whose definition changed since it was trusted is shown held on the approvals page with
/// what changed and the diff, and trusting it from there puts it back in the catalog with its new
/// description, for the clients of the running gateway.
#[test]
fn in_chromium_a_held_definition_is_shown_with_its_diff_and_trusted() {
    let gateway = Gateway::start(trusted_then_changed("", ""));
    assert_eq!(served_tools(&gateway), Some(1), "only add is served");
    let token = admin_token(&gateway);
    let out = artifacts().join("held");
    let report = browse(&gateway, &token, &out, &["--trust-held", "pinned__echo"]);
    let held = &report["held"];
    assert_eq!(held["found"], true, "{report}");
    assert!(
        held["summary"]
            .as_str()
            .is_some_and(|s| s.contains("pinned__echo") && s.contains("description")),
        "the changed field is named: {held}"
    );
    let diff = held["diff"].as_str().unwrap_or_default();
    assert!(
        diff.lines()
            .any(|line| line.starts_with('-') && line.contains(TRUSTED))
            && diff
                .lines()
                .any(|line| line.starts_with('+') && line.contains(CHANGED)),
        "the diff from the trusted to the new description: {diff}"
    );
    assert!(
        held["note"]
            .as_str()
            .is_some_and(|n| n.contains("trusted again")),
        "{held}"
    );
    assert_eq!(held["still_held"], false, "{held}");
    for page in ["held", "held-trusted"] {
        assert!(out.join(format!("{page}.png")).is_file(), "{page}.png");
    }
    // The running gateway serves the new definition at once.
    assert_eq!(served_tools(&gateway), Some(2));
    let details = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([{"op": "call_tool", "name": "get_tool_details", "arguments": {"name": "pinned__echo"}}]),
    );
    assert_eq!(
        details["steps"][0]["structuredContent"]["description"], CHANGED,
        "{details}"
    );
}
