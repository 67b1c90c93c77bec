//! Client JWTs (`[gateway.jwt]`): tests/fixtures/jwt_issuer.py as the identity provider, the
//! real Python MCP client with a token, every check a token can fail (and the 401 that names
//! it), client keys beside JWTs, the bound on JWKS fetches, and no token in the log.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::harness::*;

/// A running jwt_issuer.py.
struct Issuer {
    _proc: Proc,
    _dir: tempfile::TempDir,
    port: u16,
}

impl Issuer {
    fn start() -> Issuer {
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("jwt_issuer.out");
        let proc = Proc::spawn(
            "jwt_issuer.py",
            Command::new(venv_bin("python"))
                .arg(repo_root().join("tests/fixtures/jwt_issuer.py"))
                .arg(port.to_string())
                .stdout(std::fs::File::create(&out).expect("stdout file"))
                .stderr(Stdio::null()),
        );
        wait_until("jwt_issuer.py to be ready", Duration::from_secs(20), || {
            std::fs::read_to_string(&out).is_ok_and(|text| text.contains("jwt_issuer ready on"))
        });
        Issuer {
            _proc: proc,
            _dir: dir,
            port,
        }
    }

    fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A token from `/mint` with these query parameters.
    fn mint(&self, query: &str) -> String {
        let response =
            reqwest::blocking::get(format!("{}/mint?{query}", self.issuer())).expect("mint");
        assert!(response.status().is_success(), "{query}: {response:?}");
        response.text().expect("token")
    }

    fn jwks_fetches(&self) -> u64 {
        let stats: Value = reqwest::blocking::get(format!("{}/stats", self.issuer()))
            .and_then(|r| r.json())
            .expect("stats");
        stats["jwks_fetches"].as_u64().expect("count")
    }

    /// The `[gateway.jwt]` section trusting this issuer.
    fn config(&self) -> String {
        format!(
            "[gateway.jwt]\nissuer = \"{issuer}\"\naudience = [\"mcpgw\", \"mcpgw-staging\"]\njwks_url = \"{issuer}/jwks.json\"\nprofile_claim = \"profile\"\n",
            issuer = self.issuer()
        )
    }
}

const PROFILES: &str = r#"
[[profiles]]
name = "echo-only"
allow = ["everything__echo"]
exposure = "passthrough"
"#;

/// Runs the Python client with `token` and expects it to fail to connect: its stderr.
fn py_client_refused(url: &str, token: &str) -> String {
    let output = Command::new(venv_bin("python"))
        .arg(repo_root().join("tests/clients/mcp_client.py"))
        .args([
            "--url",
            url,
            "--header",
            &format!("Authorization: Bearer {token}"),
        ])
        .args(["--era", "legacy"])
        .arg(json!([{"op": "list_tools"}]).to_string())
        .env("MCP_CLIENT_TIMEOUT", "60")
        .stdin(Stdio::null())
        .output()
        .expect("python client runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    stderr
}

fn tool_names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .expect("tool list")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_token_from_the_identity_provider_admits_its_subject_and_every_bad_one_is_refused() {
    let idp = Issuer::start();
    let config = write_config(&format!(
        "{}{}{PROFILES}",
        idp.config(),
        everything_stdio_server("everything")
    ));
    let config_path = config.path.clone();
    // No client key exists as the gateway starts: on loopback it would serve openly without
    // `[gateway.jwt]`; with it, every request needs a token.
    let gateway = Gateway::start_with_log(config, "info,mcpgw_gateway=debug,gateway=debug");
    let bearer = |token: &str| format!("Authorization: Bearer {token}");
    let mut tokens = Vec::new();

    // A good token: the real client lists the tools and calls one, as the token's subject.
    let good = idp.mint("sub=alice");
    tokens.push(good.clone());
    let report = py_client(
        &["--url", &gateway.url(), "--header", &bearer(&good)],
        "legacy",
        json!([
            {"op": "list_tools"},
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "echo a message back"}},
        ]),
    );
    assert_eq!(
        tool_names(&report["steps"][0]),
        ["search_tools", "get_tool_details", "call_tool"],
        "{report}"
    );
    let hits = &report["steps"][1]["structuredContent"]["results"];
    assert_eq!(hits[0]["name"], "everything__echo", "{report}");
    assert!(
        gateway.log_text().contains("principal=user:alice"),
        "{}",
        gateway.log_text()
    );
    let fetched = idp.jwks_fetches();
    assert_eq!(fetched, 1, "the first token fetches the keys once");

    // The profile claim: the first name this gateway defines wins, and applies.
    let profiled = idp.mint("sub=bob&profile=staff&profile=echo-only");
    tokens.push(profiled.clone());
    let report = py_client(
        &["--url", &gateway.url(), "--header", &bearer(&profiled)],
        "legacy",
        json!([
            {"op": "list_tools"},
            {"op": "call_tool", "name": "everything__echo", "arguments": {"message": "hi bob"}},
        ]),
    );
    assert_eq!(
        tool_names(&report["steps"][0]),
        ["everything__echo"],
        "{report}"
    );
    assert!(
        result_text(&report["steps"][1]).contains("hi bob"),
        "{report}"
    );

    // ES256 tokens are accepted too (the default algorithms are RS256 and ES256).
    let es256 = idp.mint("alg=ES256&aud=mcpgw-staging");
    tokens.push(es256.clone());
    let (status, _, body) = initialize(&gateway.url(), Some(&format!("Bearer {es256}")));
    assert_eq!(status, 200, "{body}");

    // Through the real client, an expired token fails to connect, saying why.
    let expired = idp.mint("exp_in=-600");
    tokens.push(expired.clone());
    let stderr = py_client_refused(&gateway.url(), &expired);
    assert!(stderr.contains("the token has expired"), "{stderr}");
    assert!(!stderr.contains(&expired), "the client printed the token");

    // Each failed check: 401 invalid_token naming the check, never the token.
    let metadata_url = format!(
        "http://127.0.0.1:{}/.well-known/oauth-protected-resource",
        gateway.port
    );
    for (query, reason) in [
        ("exp_in=-600", "the token has expired"),
        ("nbf_in=600", "the token is not valid yet"),
        ("aud=someone-else", "the token is for the wrong audience"),
        (
            "iss=http://evil.example",
            "the token is from the wrong issuer",
        ),
        ("omit=exp", "the token has no exp claim"),
        ("sub=", "the token has no sub claim"),
        (
            "key=attacker&kid=rsa-1",
            "the token's signature is not valid",
        ),
        ("key=attacker", "the token is signed with an unknown key"),
        ("alg=none", "its algorithm is unknown (such as none)"),
        (
            "alg=HS256",
            "the token's signature algorithm is not accepted",
        ),
    ] {
        let token = idp.mint(query);
        tokens.push(token.clone());
        let (status, headers, body) = initialize(&gateway.url(), Some(&format!("Bearer {token}")));
        assert_eq!(status, 401, "{query}: {body}");
        let challenge = headers["www-authenticate"].to_str().expect("ascii");
        let description = challenge
            .strip_prefix(&format!(
                "Bearer resource_metadata=\"{metadata_url}\", error=\"invalid_token\", error_description=\""
            ))
            .unwrap_or_else(|| panic!("{query}: {challenge}"));
        assert!(description.contains(reason), "{query}: {challenge}");
        let error: Value = serde_json::from_str(&body).expect("JSON-RPC error body");
        let message = error["error"]["message"].as_str().expect("message");
        assert!(message.contains(reason), "{query}: {message}");
        assert!(
            !body.contains(&token) && !challenge.contains(&token),
            "{query}: the token was echoed"
        );
    }

    // A genuine token naming no defined profile: 403, not the default profile.
    let unprofiled = idp.mint("sub=carol&profile=staff");
    tokens.push(unprofiled.clone());
    let (status, _, body) = initialize(&gateway.url(), Some(&format!("Bearer {unprofiled}")));
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("names no profile this gateway defines"),
        "{body}"
    );

    // No token: 401 pointing at the metadata, which names the identity provider.
    let (status, headers, body) = initialize(&gateway.url(), None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        headers["www-authenticate"],
        format!("Bearer resource_metadata=\"{metadata_url}\"").as_str()
    );
    assert!(body.contains(&idp.issuer()), "{body}");
    let metadata: Value = reqwest::blocking::get(&metadata_url)
        .expect("metadata")
        .json()
        .expect("json");
    assert_eq!(metadata["resource"], gateway.url().as_str(), "{metadata}");
    assert_eq!(
        metadata["authorization_servers"],
        json!([idp.issuer()]),
        "{metadata}"
    );

    // Client keys work beside JWTs (looked up per request: added while the gateway runs).
    let added = mcpgw_in(&config_path, &["clients", "add", "ci"]);
    assert!(added.status.success(), "{added:?}");
    let key = String::from_utf8_lossy(&added.stdout).trim().to_owned();
    let report = py_client(
        &["--url", &gateway.url(), "--header", &bearer(&key)],
        "legacy",
        json!([{"op": "list_tools"}]),
    );
    assert_eq!(tool_names(&report["steps"][0]).len(), 3, "{report}");
    assert!(gateway.log_text().contains("principal=client:ci"));
    let (status, headers, _) = initialize(&gateway.url(), Some("Bearer mcpgw_not-a-key"));
    assert_eq!(status, 401);
    assert!(
        headers["www-authenticate"]
            .to_str()
            .expect("ascii")
            .contains("unknown or removed client key"),
        "{headers:?}"
    );

    // A flood of made-up key ids costs the identity provider at most one more fetch.
    let before = idp.jwks_fetches();
    for i in 0..30 {
        let token = idp.mint(&format!("key=attacker&kid=random-{i}"));
        let (status, _, body) = initialize(&gateway.url(), Some(&format!("Bearer {token}")));
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("unknown key"), "{body}");
    }
    let after = idp.jwks_fetches();
    assert!(after <= before + 1, "{before} -> {after} JWKS fetches");
    // Good tokens keep working from the cache.
    let (status, _, body) = initialize(&gateway.url(), Some(&format!("Bearer {good}")));
    assert_eq!(status, 200, "{body}");
    assert_eq!(idp.jwks_fetches(), after);

    // No token reached the log, and refusals were logged by reason.
    let log = gateway.log_text();
    for token in &tokens {
        assert!(!log.contains(token.as_str()), "a token is in the log");
        let signature = token.rsplit('.').next().expect("parts");
        assert!(
            signature.is_empty() || !log.contains(signature),
            "a token's signature is in the log"
        );
    }
    assert!(!log.contains(&key), "the client key is in the log");
    assert!(log.contains("bearer JWT refused"), "{log}");
}

#[test]
fn without_the_identity_providers_keys_tokens_get_503_and_a_refused_jwks_url_stops_the_start() {
    // Nothing listens on the JWKS port: no token can be checked.
    let port = free_port();
    let jwt = format!(
        "[gateway.jwt]\nissuer = \"https://idp.example\"\naudience = \"mcpgw\"\njwks_url = \"http://127.0.0.1:{port}/jwks.json\"\n"
    );
    let gateway = Gateway::start_with_log(write_config(&jwt), "info");
    // {"alg":"RS256","kid":"k1"} . {} . "sig"
    let token = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.e30.c2ln";
    let (status, _, body) = initialize(&gateway.url(), Some(&format!("Bearer {token}")));
    assert_eq!(status, 503, "{body}");
    let error: Value = serde_json::from_str(&body).expect("JSON-RPC error body");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("identity provider's signing keys are unavailable"),
        "{message}"
    );
    assert!(!body.contains("jwks.json"), "{body}");
    let log = gateway.log_text();
    assert!(
        log.contains("cannot fetch the identity provider's keys") && log.contains("jwks.json"),
        "{log}"
    );
    assert!(!log.contains(token));

    // A JWKS URL outside `[network] allow` is refused as the listener starts.
    let config = write_config_without_allowlist(&jwt);
    let listen = format!("127.0.0.1:{}", free_port());
    let log = config.dir.path().join("refused.log");
    let mut proc = Proc::spawn(
        "mcpgw serve (refused)",
        Command::new(mcpgw())
            .args(["serve", "--config"])
            .arg(&config.path)
            .args(["--listen", &listen])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log")),
    );
    let mut code = None;
    wait_until("mcpgw serve to refuse", Duration::from_secs(30), || {
        code = proc.child.try_wait().ok().flatten().map(|s| s.code());
        code.is_some()
    });
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, Some(Some(2)), "{stderr}");
    assert!(
        stderr.contains("`[gateway.jwt] jwks_url` is not reachable under `[network] allow`"),
        "{stderr}"
    );
}
