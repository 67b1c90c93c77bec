//! Per-principal upstream OAuth, end to end: two clients of one gateway (`mcpgw clients add
//! alice` and `bob`, keys sent as `Authorization: Bearer`) sign in to one OAuth upstream
//! (tests/fixtures/oauth_server.py) as different upstream users, and each calls it as that
//! user, with its own token over its own session. One user's revoked grant leaves the other's
//! alone, and the store keeps a row per principal.

use std::{collections::BTreeSet, time::Duration};

use serde_json::{Value, json};

use crate::harness::*;
use crate::oauth_fixture::OAuthServer;

/// `docs__whoami` through the `call_tool` meta-tool.
fn whoami_script() -> Value {
    json!([{"op": "call_tool", "name": "call_tool",
            "arguments": {"name": "docs__whoami", "arguments": {}}}])
}

/// Calls `docs__whoami` as the client holding `key`, with the driver `options` (`--elicit`).
fn whoami(gateway: &Gateway, key: &str, era: &str, options: &[&str]) -> Value {
    let bearer = format!("Authorization: Bearer {key}");
    let mut target = vec![
        "--url".to_owned(),
        gateway.url(),
        "--header".to_owned(),
        bearer,
    ];
    target.extend(options.iter().map(|o| (*o).to_owned()));
    let target: Vec<&str> = target.iter().map(String::as_str).collect();
    py_client(&target, era, whoami_script())
}

/// The upstream user `whoami` reported, from a successful step.
fn user_of(report: &Value, gateway: &Gateway) -> String {
    let step = &report["steps"][0];
    assert_eq!(step["isError"], false, "{report}\n{}", gateway.log_text());
    let text = result_text(step);
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {text}"));
    let end = text
        .rfind('}')
        .unwrap_or_else(|| panic!("no JSON in {text}"));
    let answer: Value = serde_json::from_str(&text[start..=end]).expect("whoami JSON");
    answer["user"].as_str().expect("a user").to_owned()
}

/// `GET /oauth/status` as the client holding `key` (none: no header).
fn oauth_status(gateway: &Gateway, key: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::blocking::Client::new()
        .get(format!("http://127.0.0.1:{}/oauth/status", gateway.port));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().expect("gateway reachable");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// The bearer tokens the upstream accepted on /mcp, by the user they belong to.
fn tokens_by_user(fixture: &OAuthServer, user: &str) -> BTreeSet<String> {
    fixture
        .requests()
        .iter()
        .filter(|r| r["path"] == "/mcp" && r["user"] == user)
        .filter_map(|r| r["authorization"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn each_client_calls_an_oauth_upstream_as_its_own_user() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), None);
    let config = write_config(&format!(
        "[[servers]]\nname = \"docs\"\ntimeout_s = 10\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", url = \"{}\" }}\n\n[retrieval]\nstrategy = \"bm25\"\n",
        fixture.endpoint("/mcp")
    ));
    let config_path = config.path.clone();
    let alice = add_client(&config_path, "alice");
    let bob = add_client(&config_path, "bob");
    let gateway = Gateway::start(config);

    // alice (2025-11-25, URL elicitation) signs in as the upstream user ann; the call resumes.
    let report = whoami(&gateway, &alice, "legacy", &["--elicit", "open:user=ann"]);
    assert_eq!(user_of(&report, &gateway), "ann");
    assert_eq!(report["elicitations"][0]["status"], 200, "{report}");

    // bob (2026-07-28, input_required) is asked too, although docs' tools are listed now: the
    // sign-in is his own. He signs in as ben.
    let report = whoami(&gateway, &bob, "modern", &["--elicit", "open:user=ben"]);
    assert_eq!(report["era"], "2026-07-28");
    assert_eq!(user_of(&report, &gateway), "ben");
    assert_eq!(
        report["elicitations"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );

    // Later calls, without any elicitation: each client is still its own user.
    let report = whoami(&gateway, &alice, "legacy", &[]);
    assert_eq!(user_of(&report, &gateway), "ann");
    let report = whoami(&gateway, &bob, "legacy", &[]);
    assert_eq!(user_of(&report, &gateway), "ben");

    // The upstream saw two different access tokens, one per user.
    let (ann, ben) = (
        tokens_by_user(&fixture, "ann"),
        tokens_by_user(&fixture, "ben"),
    );
    assert_eq!((ann.len(), ben.len()), (1, 1), "{ann:?} {ben:?}");
    assert!(ann.is_disjoint(&ben));

    // Each client's /oauth/status is its own; without a key there is none.
    for (key, principal) in [(&alice, "client:alice"), (&bob, "client:bob")] {
        let (code, rows) = oauth_status(&gateway, Some(key));
        assert_eq!(code, 200, "{rows}");
        assert_eq!(rows[0]["principal"], principal, "{rows}");
        assert_eq!(rows[0]["logged_in"], true, "{rows}");
        assert!(
            !rows.to_string().contains("access_token"),
            "no token: {rows}"
        );
    }
    assert_eq!(oauth_status(&gateway, None).0, 401);

    // The store: a row per principal; the local user never signed in.
    let status = mcpgw_in(&config_path, &["auth", "status", "--json"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let rows: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let summary: Vec<(String, bool)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                format!("{}/{}", r["server"].as_str().unwrap_or("?"), r["principal"]),
                r["logged_in"] == true,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("docs/\"local\"".to_owned(), false),
            ("docs/\"client:alice\"".to_owned(), true),
            ("docs/\"client:bob\"".to_owned(), true),
        ],
        "{rows}"
    );

    // ann's grant is revoked upstream: alice must sign in again, bob goes on as ben.
    fixture.control("/test/revoke-refresh?user=ann");
    fixture.control("/test/expire-access?user=ann");
    let report = whoami(&gateway, &alice, "legacy", &[]);
    let failed = &report["steps"][0];
    assert_eq!(failed["isError"], true, "{report}");
    let text = result_text(failed);
    // A browser carries no client key: alice is handed the authorization URL itself, for a
    // sign-in started for her, rather than the gateway's /oauth/start link.
    let url = text
        .lines()
        .skip_while(|l| !l.starts_with("Open this URL to authorise mcpgw for server 'docs':"))
        .nth(1)
        .unwrap_or_else(|| panic!("no sign-in URL in: {text}"))
        .trim()
        .to_owned();
    assert!(url.starts_with(&fixture.endpoint("/authorize?")), "{url}");
    // `mcpgw auth login` would sign in the operator, not alice: she is told it is her sign-in.
    assert!(
        text.starts_with(
            "tool call failed: server 'docs' needs you to sign in (OAuth) before mcpgw can call it for you"
        ),
        "{text}"
    );
    assert!(!text.contains("mcpgw auth login"), "{text}");
    let report = whoami(&gateway, &bob, "legacy", &[]);
    assert_eq!(user_of(&report, &gateway), "ben");
    let (_, rows) = oauth_status(&gateway, Some(&bob));
    assert_eq!(rows[0]["logged_in"], true, "{rows}");

    // alice opens it as ann (the browser is not authenticated: the state says whose it is).
    let landed = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
        .get(format!("{url}&user=ann"))
        .send()
        .expect("the sign-in ends at the gateway");
    assert_eq!(landed.status().as_u16(), 200);
    let report = whoami(&gateway, &alice, "legacy", &[]);
    assert_eq!(user_of(&report, &gateway), "ann");
    let report = whoami(&gateway, &bob, "legacy", &[]);
    assert_eq!(user_of(&report, &gateway), "ben");

    // The operator signs bob out, and only bob: his next call is offered a sign-in again.
    let out = mcpgw_in(
        &config_path,
        &["auth", "logout", "docs", "--principal", "client:bob"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "signed out of 'docs' for client:bob"
    );
    let (_, rows) = oauth_status(&gateway, Some(&bob));
    assert_eq!(rows[0]["logged_in"], false, "{rows}");
    let (_, rows) = oauth_status(&gateway, Some(&alice));
    assert_eq!(rows[0]["logged_in"], true, "{rows}");
    let report = whoami(&gateway, &bob, "legacy", &[]);
    assert_eq!(report["steps"][0]["isError"], true, "{report}");
    let report = whoami(&gateway, &alice, "legacy", &[]);
    assert_eq!(user_of(&report, &gateway), "ann");
    for refused in [
        &["auth", "logout", "docs", "--principal", "bob"][..],
        &[
            "auth",
            "logout",
            "docs",
            "--principal",
            "client:alice",
            "--forget-client",
        ][..],
    ] {
        let out = mcpgw_in(&config_path, refused);
        assert_eq!(out.status.code(), Some(2), "{refused:?}");
    }

    // No key or token in the log.
    let log = gateway.log_text();
    for secret in fixture.secrets_seen().iter().chain([&alice, &bob]) {
        assert!(!log.contains(secret.as_str()), "the log holds a secret");
    }
}
