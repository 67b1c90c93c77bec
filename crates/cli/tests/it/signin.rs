//! Signing in to an OAuth upstream through a running gateway, end to end: `mcpgw serve` over
//! HTTP in front of tests/fixtures/oauth_server.py (whose /authorize approves at once as the
//! `user` it is given), with real Python SDK clients of each kind:
//!
//! - a client without URL elicitation gets a tool error with a link to the gateway's
//!   `/oauth/start`; the test plays the browser through the authorization server back to the
//!   gateway's `/oauth/callback`, and the next call works;
//! - a 2025-11-25 client that declares `elicitation.url` gets an `elicitation/create` and the
//!   same call returns the real result once the browser is done;
//! - a 2026-07-28 client that declares it gets an `input_required` result, which its SDK
//!   answers by itself, and the retry returns the real result;
//! - `/oauth/status` shows the sign-in and never a token; the endpoints refuse what they should.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;
use crate::oauth_fixture::OAuthServer;

fn docs_config(fixture: &OAuthServer) -> ConfigDir {
    write_config(&format!(
        "[[servers]]\nname = \"docs\"\ntimeout_s = 10\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", url = \"{}\" }}\n\n[retrieval]\nstrategy = \"bm25\"\n",
        fixture.endpoint("/mcp")
    ))
}

/// `docs__whoami` through the `call_tool` meta-tool.
fn whoami_script() -> Value {
    json!([{"op": "call_tool", "name": "call_tool",
            "arguments": {"name": "docs__whoami", "arguments": {}}}])
}

fn get(gateway: &Gateway, path: &str) -> (u16, String) {
    let response = reqwest::blocking::get(format!("http://127.0.0.1:{}{path}", gateway.port))
        .expect("gateway reachable");
    let status = response.status().as_u16();
    (status, response.text().unwrap_or_default())
}

fn oauth_status(gateway: &Gateway) -> (String, Value) {
    let (status, body) = get(gateway, "/oauth/status");
    assert_eq!(status, 200, "{body}");
    let rows: Value = serde_json::from_str(&body).expect("status is JSON");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    (body, rows[0].clone())
}

/// The browser: opens `url` and follows the authorization server's redirect, signing in as
/// `user`. A link to the gateway's `/oauth/start` is followed by hand to its `Location` first,
/// because `user` is a parameter of the authorization server, not of the gateway.
fn browse(url: &str, user: &str) -> (u16, reqwest::Url, String) {
    let authorize = if url.contains("/oauth/start?") {
        let response = reqwest::blocking::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
            .get(url)
            .send()
            .expect("the gateway answers /oauth/start");
        assert_eq!(response.status().as_u16(), 302, "{response:?}");
        response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .expect("a Location")
            .to_owned()
    } else {
        url.to_owned()
    };
    let response = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
        .get(format!("{authorize}&user={user}"))
        .send()
        .expect("the sign-in ends at the gateway");
    let status = response.status().as_u16();
    let landed = response.url().clone();
    (status, landed, response.text().unwrap_or_default())
}

/// The URL on the line after "Open this URL ..." in a tool error.
fn link_in(text: &str) -> String {
    let mut lines = text.lines();
    lines
        .find(|l| l.starts_with("Open this URL to authorise mcpgw for server 'docs':"))
        .unwrap_or_else(|| panic!("no sign-in link in: {text}"));
    lines.next().expect("the URL line").trim().to_owned()
}

fn assert_no_secret(secrets: &[String], haystack: &str, what: &str) {
    for secret in secrets {
        assert!(!haystack.contains(secret.as_str()), "{what} holds a secret");
    }
}

#[test]
fn signin_link_for_a_client_without_elicitation_then_the_call_works() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), None);
    let gateway = Gateway::start(docs_config(&fixture));
    let (_, before) = oauth_status(&gateway);
    assert_eq!(before["server"], "docs", "{before}");
    assert_eq!(before["logged_in"], false, "{before}");
    assert_eq!(before["login_pending"], false, "{before}");

    // Never signed in: docs' tools were never listed, yet calling one hands out the sign-in.
    let report = py_client(&["--url", &gateway.url()], "legacy", whoami_script());
    let failed = &report["steps"][0];
    assert_eq!(failed["isError"], true, "{failed}");
    let text = result_text(failed);
    assert!(
        text.contains(
            "server 'docs' answered HTTP 401: OAuth required, run `mcpgw auth login docs`"
        ),
        "{text}"
    );
    assert!(text.ends_with("then call the tool again."), "{text}");
    let link = link_in(&text);
    assert_eq!(
        link,
        format!(
            "http://127.0.0.1:{}/oauth/start?server=docs&redirect=1",
            gateway.port
        )
    );
    assert_eq!(
        fixture.registrations(),
        0,
        "nothing is started or registered until someone opens the link"
    );

    // The browser, as alice: the gateway's link, the authorization server, the gateway's
    // callback.
    let (status, landed, page) = browse(&link, "alice");
    assert_eq!(status, 200, "{page}\n{}", gateway.log_text());
    assert!(
        page.contains("Signed in to &#39;docs&#39;. You can close this tab."),
        "{page}"
    );
    assert_eq!(landed.port(), Some(gateway.port));
    assert_eq!(landed.path(), "/oauth/callback");
    assert_eq!(fixture.registrations(), 1);

    // The callback's state was single use.
    let replay = reqwest::blocking::get(landed.as_str()).expect("gateway reachable");
    assert_eq!(replay.status().as_u16(), 400);
    assert!(
        replay
            .text()
            .unwrap_or_default()
            .contains("unknown, already used or expired"),
    );

    let (status_body, status) = oauth_status(&gateway);
    assert_eq!(status["logged_in"], true, "{status}");
    assert_eq!(status["has_refresh_token"], true, "{status}");
    assert_eq!(status["registration"], "dynamic", "{status}");
    assert_eq!(status["login_pending"], false, "{status}");
    assert!(
        status["issuer"]
            .as_str()
            .is_some_and(|i| i.contains(&format!("127.0.0.1:{}", fixture.port))),
        "{status}"
    );
    assert!(
        status["expires_in_s"].as_i64().is_some_and(|s| s > 0),
        "{status}"
    );

    // The same call, now as alice.
    let report = py_client(&["--url", &gateway.url()], "legacy", whoami_script());
    let whoami = &report["steps"][0];
    assert_eq!(whoami["isError"], false, "{whoami}\n{}", gateway.log_text());
    assert!(
        result_text(whoami).contains(r#""user": "alice""#),
        "{whoami}"
    );

    // JSON from /oauth/start: a URL of the authorization server back to this gateway, good for
    // ten minutes; the PKCE verifier is not in it.
    let (code, body) = get(&gateway, "/oauth/start?server=docs");
    assert_eq!(code, 200, "{body}");
    let started: Value = serde_json::from_str(&body).expect("JSON");
    let url = started["authorization_url"].as_str().expect("a URL");
    assert!(url.starts_with(&fixture.endpoint("/authorize?")), "{url}");
    assert_eq!(
        started["redirect_uri"],
        format!("http://127.0.0.1:{}/oauth/callback", gateway.port)
    );
    assert!(url.contains("code_challenge_method=S256") && !url.contains("code_verifier"));
    let ttl = started["expires_in_s"].as_i64().expect("expiry");
    assert!((590..=600).contains(&ttl), "{started}");
    assert_eq!(oauth_status(&gateway).1["login_pending"], true);

    // Refusals.
    let (code, body) = get(&gateway, "/oauth/start?server=nope");
    assert_eq!(code, 404, "{body}");
    assert!(
        body.contains("no server named 'nope' (configured for OAuth: docs)"),
        "{body}"
    );
    let (code, body) = get(&gateway, "/oauth/start");
    assert_eq!(code, 400, "{body}");
    let (code, _) = get(&gateway, "/oauth/callback?code=x&state=forged");
    assert_eq!(code, 400);
    let rebound = reqwest::blocking::Client::new()
        .get(format!("http://127.0.0.1:{}/oauth/status", gateway.port))
        .header("host", format!("attacker.example:{}", gateway.port))
        .send()
        .expect("gateway reachable");
    assert_eq!(
        rebound.status().as_u16(),
        403,
        "a name that is not loopback"
    );

    // No token, code or verifier in the status or the log.
    let secrets = fixture.secrets_seen();
    // The code and verifier of the sign-in, and the access token it brought.
    assert!(
        secrets.len() >= 3,
        "too few secrets collected: {}",
        secrets.len()
    );
    let log = gateway.log_text();
    assert!(log.contains("signed in"), "{log}");
    assert_no_secret(&secrets, &status_body, "/oauth/status");
    assert_no_secret(&secrets, &log, "the gateway log");

    // The admin API lists the sign-in without its tokens, and signs it out.
    let token =
        std::fs::read_to_string(gateway.log.with_file_name("admin-token")).expect("admin token");
    let admin = reqwest::blocking::Client::new();
    let base = format!("http://127.0.0.1:{}/admin/v1/connections", gateway.port);
    let listed = admin
        .get(&base)
        .bearer_auth(token.trim())
        .send()
        .and_then(|r| r.text())
        .expect("connections");
    let connections: Value = serde_json::from_str(&listed).expect("JSON");
    assert_eq!(connections["connections"][0]["server"], "docs", "{listed}");
    assert_eq!(
        connections["connections"][0]["principal"], "local",
        "{listed}"
    );
    assert_eq!(connections["connections"][0]["expired"], false, "{listed}");
    assert_no_secret(&secrets, &listed, "/admin/v1/connections");
    let sign_out = |path: &str| {
        admin
            .delete(format!("{base}/{path}"))
            .bearer_auth(token.trim())
            .header("content-type", "application/json")
            .send()
            .expect("gateway reachable")
            .status()
            .as_u16()
    };
    assert_eq!(sign_out("docs/local"), 204);
    assert_eq!(sign_out("docs/client:nobody"), 404);
    assert_eq!(sign_out("nope/local"), 404);
    let report = py_client(&["--url", &gateway.url()], "legacy", whoami_script());
    let again = &report["steps"][0];
    assert_eq!(again["isError"], true, "signed out: {again}");
    assert!(
        result_text(again).contains("/oauth/start?server=docs"),
        "the sign-in is offered again: {again}"
    );
}

#[test]
fn signin_by_url_elicitation_resumes_the_call_in_both_eras() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), None);
    let gateway = Gateway::start(docs_config(&fixture));
    let url = gateway.url();

    // 2025-11-25 with URL elicitation: one call, bob signs in meanwhile, bob's answer.
    let report = py_client(
        &["--url", &url, "--elicit", "open:user=bob"],
        "legacy",
        whoami_script(),
    );
    assert_eq!(report["era"], "2025-11-25");
    let whoami = &report["steps"][0];
    assert_eq!(whoami["isError"], false, "{report}\n{}", gateway.log_text());
    assert!(result_text(whoami).contains(r#""user": "bob""#), "{whoami}");
    let asked = report["elicitations"].as_array().expect("elicitations");
    assert_eq!(asked.len(), 1, "{report}");
    assert_eq!(asked[0]["mode"], "url");
    assert_eq!(asked[0]["action"], "accept");
    assert_eq!(
        asked[0]["status"], 200,
        "the browser ended on the gateway's page"
    );
    assert!(
        asked[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("'docs'") && m.contains("docs__whoami")),
        "{asked:?}"
    );
    assert!(
        asked[0]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with(&fixture.endpoint("/authorize?"))),
        "{asked:?}"
    );
    assert_eq!(oauth_status(&gateway).1["logged_in"], true);

    // 2026-07-28 with URL elicitation, after the grant died: an input_required result, which
    // the SDK answers (carol signs in) and retries; the retry returns carol's answer.
    fixture.revoke_grant();
    let report = py_client(
        &["--url", &url, "--elicit", "open:user=carol"],
        "modern",
        whoami_script(),
    );
    assert_eq!(report["era"], "2026-07-28");
    let whoami = &report["steps"][0];
    assert_eq!(whoami["isError"], false, "{report}\n{}", gateway.log_text());
    assert!(
        result_text(whoami).contains(r#""user": "carol""#),
        "{whoami}"
    );
    let asked = report["elicitations"].as_array().expect("elicitations");
    assert_eq!(asked.len(), 1, "{report}");
    assert_eq!(
        (&asked[0]["mode"], &asked[0]["status"]),
        (&json!("url"), &json!(200))
    );

    // Declining: the tool is not called, and nothing was signed in.
    fixture.revoke_grant();
    for era in ["legacy", "modern"] {
        let report = py_client(
            &["--url", &url, "--elicit", "decline"],
            era,
            whoami_script(),
        );
        let refused = &report["steps"][0];
        assert_eq!(refused["isError"], true, "{report}");
        assert!(
            result_text(refused)
                .contains("signing in to 'docs' was declined, so the tool was not called"),
            "{era}: {refused}"
        );
        assert_eq!(report["elicitations"][0]["action"], "decline", "{report}");
    }
    assert_eq!(oauth_status(&gateway).1["logged_in"], false);

    // Every sign-in used the one client registered for the gateway's redirect URI.
    assert_eq!(fixture.registrations(), 1);
    let log = gateway.log_text();
    assert_no_secret(&fixture.secrets_seen(), &log, "the gateway log");
}

#[test]
fn signin_is_not_offered_by_a_stdio_gateway() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), None);
    let config = docs_config(&fixture);
    // Even to a client that takes URL elicitations: the browser would have nowhere to return.
    let report = py_client_stdio_with(
        &config,
        &["--elicit", "open:user=bob"],
        "legacy",
        whoami_script(),
        |_| {},
    );
    let failed = &report["steps"][0];
    assert_eq!(failed["isError"], true, "{report}");
    let text = result_text(failed);
    assert!(
        text.contains("OAuth required, run `mcpgw auth login docs`"),
        "{text}"
    );
    assert!(!text.contains("Open this URL"), "{text}");
    assert!(!text.contains("could not start the sign-in"), "{text}");
    assert_eq!(report["elicitations"], json!([]), "{report}");
    assert_eq!(fixture.registrations(), 0);
}
