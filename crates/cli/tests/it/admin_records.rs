//! The admin API's records (`/admin/v1/audit`, `/approvals`, `/clients`, `/connections`) on a
//! real keyed `mcpgw serve` after real calls of the Python SDK client: the audit log filtered
//! and paged, the client keys with their profiles (never a key), and who may ask; a client key
//! added and removed through `/admin/v1/clients`, the profiles, and an OAuth sign-in started
//! through `/admin/v1/connections/{server}/signin` against the test authorization server.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

fn get(port: u16, path: &str, key: &str) -> (u16, Value, String) {
    let response = reqwest::blocking::Client::new()
        .get(format!("http://127.0.0.1:{port}{path}"))
        .bearer_auth(key)
        .send()
        .expect("gateway reachable");
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

fn entries(answer: &(u16, Value, String)) -> Vec<Value> {
    assert_eq!(answer.0, 200, "{}", answer.2);
    answer.1["entries"].as_array().cloned().unwrap_or_default()
}

#[test]
fn the_audit_log_clients_and_sign_ins_read_filtered_and_paged_for_admins_only() {
    let profiles = "[[profiles]]\nname = \"ops\"\nclients = [\"boss\"]\nadmin = true\n\n\
                    [[profiles]]\nname = \"viewer\"\nclients = [\"bob\"]\n";
    let (config, port) = listening_config(
        "exposure = \"passthrough\"",
        &format!("{}\n{profiles}", time_stdio_server("time")),
    );
    let boss = add_client(&config.path, "boss");
    let bob = add_client(&config.path, "bob");
    let gateway = Gateway::start_configured(config, |_| {});
    let call = |key: &str, steps: Value| {
        py_client(
            &[
                "--url",
                &gateway.url(),
                "--header",
                &format!("Authorization: Bearer {key}"),
            ],
            "legacy",
            steps,
        )
    };
    let now = json!({"op": "call_tool", "name": "time__get_current_time",
                     "arguments": {"timezone": "Europe/Paris"}});
    let bad_zone = json!({"op": "call_tool", "name": "time__get_current_time",
                          "arguments": {"timezone": "Mars/Olympus"}});
    call(&bob, json!([now, bad_zone, now]));
    call(&boss, json!([now]));
    wait_until("four audit rows", Duration::from_secs(10), || {
        entries(&get(port, "/admin/v1/audit", &boss)).len() == 4
    });

    let all = entries(&get(port, "/admin/v1/audit", &boss));
    assert_eq!(all[0]["principal"], "client:boss", "newest first: {all:?}");
    assert!(all.iter().all(|e| e["tool"] == "time__get_current_time"));
    assert!(
        all.iter().all(|e| e.get("arguments").is_none()),
        "only the arguments' hash"
    );
    let bobs = entries(&get(port, "/admin/v1/audit?principal=client:bob", &boss));
    assert_eq!(bobs.len(), 3);
    let failed = entries(&get(
        port,
        "/admin/v1/audit?outcome=tool_error&server=time",
        &boss,
    ));
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["principal"], "client:bob");
    let future = entries(&get(port, "/admin/v1/audit?since=2099-01-01", &boss));
    assert!(future.is_empty());

    // Two pages of two, the second the last.
    let first = get(port, "/admin/v1/audit?limit=2", &boss);
    let next = first.1["next"].as_str().expect("a next page").to_owned();
    let second = get(
        port,
        &format!("/admin/v1/audit?limit=2&after={next}"),
        &boss,
    );
    assert_eq!(second.1["next"], Value::Null, "{}", second.2);
    let paged: Vec<Value> = entries(&first)
        .into_iter()
        .chain(entries(&second))
        .collect();
    assert_eq!(paged, all);

    // Clients: names and profiles, never a key.
    let (status, clients, text) = get(port, "/admin/v1/clients", &boss);
    assert_eq!(status, 200, "{text}");
    assert!(
        !text.contains(&boss) && !text.contains(&bob),
        "no key: {text}"
    );
    let by_name = |name: &str| {
        clients["clients"]
            .as_array()
            .and_then(|rows| rows.iter().find(|row| row["name"] == name).cloned())
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    assert_eq!(by_name("boss")["profile"], "ops");
    assert_eq!(by_name("boss")["admin"], true);
    assert_eq!(by_name("bob")["profile"], "viewer");
    assert_eq!(by_name("bob")["admin"], false);
    assert!(by_name("bob")["last_used_at"].is_u64(), "{text}");

    let (status, approvals, text) = get(port, "/admin/v1/approvals?status=all", &boss);
    assert_eq!(
        (status, approvals["approvals"].clone()),
        (200, json!([])),
        "{text}"
    );
    let (status, signed_in, text) = get(port, "/admin/v1/connections", &boss);
    assert_eq!(
        (status, signed_in["connections"].clone()),
        (200, json!([])),
        "{text}"
    );

    // Who may ask, and what a bad parameter gets.
    for path in [
        "/admin/v1/audit",
        "/admin/v1/clients",
        "/admin/v1/connections",
        "/admin/v1/approvals",
    ] {
        let (status, _, text) = get(port, path, &bob);
        assert_eq!(status, 403, "{path}: {text}");
        assert!(
            text.contains("client:bob is not an administrator"),
            "{text}"
        );
    }
    let (status, _, text) = get(port, "/admin/v1/audit?decision=maybe", &boss);
    assert_eq!(status, 400);
    assert!(text.contains("decision must be one of allowed"), "{text}");
    let (status, _, text) = get(port, "/admin/v1/approvals?status=done", &boss);
    assert_eq!(status, 400, "{text}");
}

/// `METHOD path` with `headers` and, for a write, `body` as JSON: the status and the answer.
fn send(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request =
        reqwest::blocking::Client::new().request(method, format!("http://127.0.0.1:{port}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().expect("gateway reachable");
    let status = response.status().as_u16();
    (status, response.json::<Value>().unwrap_or(Value::Null))
}

/// The status of an MCP `initialize` on `/mcp` with `key`.
fn initialize(port: u16, key: &str) -> u16 {
    reqwest::blocking::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        )
        .send()
        .expect("gateway reachable")
        .status()
        .as_u16()
}

#[test]
fn a_client_added_through_the_admin_api_connects_until_it_is_removed() {
    let config = write_config(&format!(
        "{}\n[[profiles]]\nname = \"ops\"\nclients = [\"boss\"]\nadmin = true\n\n[[profiles]]\nname = \"viewer\"\nclients = [\"ci\"]\nallow = [\"time__convert_*\"]\n",
        time_stdio_server("time")
    ));
    let boss = format!("Bearer {}", add_client(&config.path, "boss"));
    let gateway = Gateway::start_with_log(config, "info");
    let port = gateway.port;
    let admin = [("authorization", boss.as_str())];

    let (status, added) = send(
        port,
        "POST",
        "/admin/v1/clients",
        &admin,
        Some(json!({"name": "ci"})),
    );
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["name"], "ci", "{added}");
    assert_eq!(added["principal"], "client:ci", "{added}");
    assert_eq!(
        added["profile"], "viewer",
        "the configuration's profile: {added}"
    );
    assert_eq!(added["admin"], false, "{added}");
    let key = added["key"].as_str().expect("the key, once").to_owned();
    assert_eq!(initialize(port, &key), 200, "the new key connects");

    // Listed, never with its key; the log has its name only.
    let (status, listed) = send(port, "GET", "/admin/v1/clients", &admin, None);
    assert_eq!(status, 200, "{listed}");
    assert!(!listed.to_string().contains(&key), "{listed}");
    assert!(
        listed["clients"]
            .as_array()
            .is_some_and(|all| all.iter().any(|c| c["name"] == "ci")),
        "{listed}"
    );
    assert!(
        gateway
            .log_text()
            .contains("client added through the admin API")
    );
    assert!(
        !gateway.log_text().contains(&key),
        "the key is never logged"
    );

    // A name taken, a bad name, a field the configuration owns: refused, nothing added.
    for (body, status) in [
        (json!({"name": "ci"}), 409),
        (json!({"name": "no spaces"}), 400),
        (json!({"name": "x", "profile": "ops"}), 400),
        (json!({}), 400),
    ] {
        let (got, answer) = send(
            port,
            "POST",
            "/admin/v1/clients",
            &admin,
            Some(body.clone()),
        );
        assert_eq!(got, status, "{body}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }

    // The profiles, with the tools each exposes.
    let (status, profiles) = send(port, "GET", "/admin/v1/profiles", &admin, None);
    assert_eq!(status, 200, "{profiles}");
    let viewer = profiles["profiles"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == "viewer"))
        .unwrap_or_else(|| panic!("{profiles}"));
    assert_eq!(viewer["clients"], json!(["ci"]), "{profiles}");
    assert_eq!(viewer["allow"], json!(["time__convert_*"]), "{profiles}");
    assert_eq!(viewer["tools"], json!(["time__convert_time"]), "{profiles}");

    // Removed: the key stops working at once.
    let (status, answer) = send(
        port,
        "DELETE",
        "/admin/v1/clients/ci",
        &admin,
        Some(json!({})),
    );
    assert_eq!(status, 204, "{answer}");
    assert_eq!(initialize(port, &key), 401, "a removed key is refused");
    let (status, answer) = send(
        port,
        "DELETE",
        "/admin/v1/clients/ci",
        &admin,
        Some(json!({})),
    );
    assert_eq!(status, 404, "{answer}");
}

#[test]
fn a_sign_in_started_through_the_admin_api_answers_the_authorization_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = crate::oauth_fixture::OAuthServer::start(dir.path(), None);
    let gateway = Gateway::start(write_config(&format!(
        "[[servers]]\nname = \"docs\"\ntimeout_s = 10\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", url = \"{}\" }}\n\n{}",
        fixture.endpoint("/mcp"),
        time_stdio_server("time")
    )));
    let token = gateway.admin_token();
    let admin = [("x-mcpgw-admin-token", token.as_str())];
    let port = gateway.port;

    let (status, started) = send(
        port,
        "POST",
        "/admin/v1/connections/docs/signin",
        &admin,
        Some(json!({})),
    );
    assert_eq!(status, 200, "{started}\n{}", gateway.log_text());
    assert_eq!(started["server"], "docs", "{started}");
    assert_eq!(started["principal"], "local", "{started}");
    let url = started["authorization_url"].as_str().expect("a URL");
    assert!(
        url.starts_with(&fixture.endpoint("/authorize?")),
        "the test authorization server's page: {url}"
    );
    assert!(url.contains("code_challenge="), "PKCE: {url}");
    assert_eq!(
        started["redirect_uri"],
        format!("http://127.0.0.1:{port}/oauth/callback"),
        "{started}"
    );
    assert!(
        !started.to_string().contains("token"),
        "never a token: {started}"
    );

    // The browser, as alice: the sign-in is stored for the caller.
    let landed = reqwest::blocking::get(format!("{url}&user=alice")).expect("the sign-in ends");
    assert_eq!(landed.status().as_u16(), 200);
    let (status, connections) = send(port, "GET", "/admin/v1/connections", &admin, None);
    assert_eq!(status, 200, "{connections}");
    assert_eq!(
        connections["connections"][0]["server"], "docs",
        "{connections}"
    );
    assert_eq!(
        connections["connections"][0]["principal"], "local",
        "{connections}"
    );

    for (path, status) in [
        ("/admin/v1/connections/nothing/signin", 404),
        ("/admin/v1/connections/time/signin", 409),
    ] {
        let (got, answer) = send(port, "POST", path, &admin, Some(json!({})));
        assert_eq!(got, status, "{path}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
}
