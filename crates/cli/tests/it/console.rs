//! The web console (`/ui`) in a real browser: Debian's headless Chromium, driven by Selenium
//! (`tests/clients/console_browser.py`), against a real `mcpgw serve` with the filesystem
//! server and a server that cannot be reached. The browser signs in through the link `serve`
//! prints, reads the servers (the failing one with its cause), the tools and three ranked
//! search lists, approves a call a real Python SDK client is waiting on (the call then
//! completes), and finds it in the audit log. In a second run it adds a stdio server (the
//! Python `mcp-server-time`) from the servers page's form and finds its tools on its page, and
//! tests the unreachable server and reads why it failed. A screenshot of each page is kept
//! under `target/test-artifacts/console/`. Without a browser, the session and form rules: no
//! page without a session, a wrong token refused, a form with a stale CSRF token refused, a
//! cross-site form post refused by the guard; and the server forms: a pasted `mcpServers`
//! snippet added, disabled and removed, each in the file, a server the loader refuses shown
//! with its problem (escaped) and the file untouched.

use std::{path::PathBuf, process::Command, thread, time::Duration};

use serde_json::{Value, json};

use crate::{approvals::filesystem_server, harness::*};

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

#[test]
fn in_chromium_the_console_shows_servers_tools_and_search_and_approves_a_waiting_call() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().canonicalize().expect("root");
    let gateway = console_gateway(&dir);
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let token = admin_token(&gateway);

    // A client without elicitation: its destructive call waits for a person.
    let target = dir.join("from-the-console.txt");
    let caller = {
        let url = gateway.url();
        let call = json!({"op": "call_tool", "name": "call_tool", "arguments": {
            "name": "fs__write_file",
            "arguments": {"path": target.display().to_string(), "content": "approved in a browser"}
        }});
        thread::spawn(move || py_client(&["--url", &url], "legacy", json!([call])))
    };

    let out = artifacts();
    let browser = Command::new(venv_bin("python"))
        .arg(repo_root().join("tests/clients/console_browser.py"))
        .args([&base, &token])
        .arg(&out)
        .args(["--search", "write a file", "--approve", "fs__write_file"])
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
    assert!(
        rows.contains("broken") && rows.contains("failed") && rows.contains("connection refused"),
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
    assert_eq!(report["approval"]["found"], true, "{report}");
    assert!(
        report["approval"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("Approved")),
        "{report}"
    );

    // The waiting client's call completed with the approval.
    let client = caller.join().expect("client thread");
    assert_eq!(client["steps"][0]["isError"], false, "{client}");
    assert_eq!(
        std::fs::read_to_string(&target).expect("written"),
        "approved in a browser"
    );
    wait_until(
        "the call in the audit page",
        Duration::from_secs(10),
        || {
            let audit = Command::new(venv_bin("python"))
                .arg(repo_root().join("tests/clients/console_browser.py"))
                .args([&base, &token])
                .arg(out.join("audit-after"))
                .output()
                .expect("the browser driver runs");
            String::from_utf8_lossy(&audit.stdout).contains("approved")
        },
    );
    for page in ["servers", "tools", "search", "approvals", "audit"] {
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
    for page in ["server-add-form", "server-added", "server", "server-test"] {
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
