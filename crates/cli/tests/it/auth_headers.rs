//! Upstream auth strategies end to end: the real binary against a real Python `mcp` SDK server
//! (tests/fixtures/auth_server.py) that checks one credential and records every request's
//! headers. The gateway's environment holds the variables of every strategy at once, so the
//! recordings show that only the configured one is ever sent, and that no credential reaches
//! the log, the command output or an error.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::harness::*;

/// Every variable the tests export, and their values. Each value is unique, so finding it
/// anywhere it does not belong is a leak.
const ENV: [(&str, &str); 6] = [
    ("MCPGW_E2E_BEARER", "bearer-cred-7Qx1v"),
    ("MCPGW_E2E_API_KEY", "apikey-cred-3Kd9w"),
    ("MCPGW_E2E_SCHEME", "scheme-cred-5Mn2z"),
    ("MCPGW_E2E_OVERRIDE", "override-cred-8Pz4q"),
    ("MCPGW_E2E_REPLACED", "replaced-cred-2Lc6r"),
    ("MCPGW_E2E_WRONG", "wrong-cred-9Hs3t"),
];

fn value(var: &str) -> &'static str {
    ENV.iter()
        .find(|(name, _)| *name == var)
        .map(|(_, value)| *value)
        .unwrap_or_else(|| panic!("{var} is not one of the test variables"))
}

/// A running auth_server.py and the file its requests are recorded in.
struct Fixture {
    _proc: Proc,
    port: u16,
    record: PathBuf,
    transport: &'static str,
}

impl Fixture {
    /// `transport` is `http` or `sse`; requests must carry `header: expect`.
    fn start(
        dir: &Path,
        transport: &'static str,
        header: &str,
        expect: &str,
        challenge: &str,
    ) -> Fixture {
        let port = free_port();
        let record = dir.join(format!("requests-{port}.jsonl"));
        let proc = Proc::spawn(
            "auth_server.py",
            Command::new(venv_bin("python"))
                .arg(repo_root().join("tests/fixtures/auth_server.py"))
                .args(["--transport", transport, "--port", &port.to_string()])
                .arg("--record")
                .arg(&record)
                .args(["--header", header, "--expect", expect])
                .args(["--challenge", challenge])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        wait_until("auth_server.py to listen", Duration::from_secs(20), || {
            port_open(port)
        });
        Fixture {
            _proc: proc,
            port,
            record,
            transport,
        }
    }

    /// The `[[servers]]` entry for this fixture; `extra` goes inside the transport table.
    fn server(&self, name: &str, auth: &str, extra: &str) -> String {
        let path = if self.transport == "http" {
            "mcp"
        } else {
            "sse"
        };
        let auth = if auth.is_empty() {
            String::new()
        } else {
            format!("auth = {auth}\n")
        };
        format!(
            "[[servers]]\nname = \"{name}\"\ntimeout_s = 10\n{auth}transport = {{ type = \"{}\", url = \"http://127.0.0.1:{}/{path}\"{extra} }}\n",
            self.transport, self.port
        )
    }

    fn recorded_text(&self) -> String {
        std::fs::read_to_string(&self.record).unwrap_or_default()
    }

    /// The value of `header` on every recorded request (`None` where it was absent).
    fn header_values(&self, header: &str) -> Vec<Option<String>> {
        self.recorded_text()
            .lines()
            .map(|line| {
                let request: Value = serde_json::from_str(line).expect("json line");
                request["headers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|pair| pair[0] == header)
                    .and_then(|pair| pair[1].as_str().map(str::to_owned))
            })
            .collect()
    }
}

fn mcpgw_with_env(args: &[&str], config: &ConfigDir) -> Output {
    Command::new(mcpgw())
        .args(args)
        .arg("--config")
        .arg(&config.path)
        .envs(ENV)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs")
}

/// Fails when any test credential appears in `what`.
fn assert_no_credentials(label: &str, what: &str) {
    for (var, secret) in ENV {
        assert!(
            !what.contains(secret),
            "{label} shows the value of {var}:\n{what}"
        );
    }
}

/// `mcpgw serve` with the test variables in its environment and a debug log.
struct Serving {
    proc: Proc,
    port: u16,
    log: PathBuf,
}

impl Serving {
    fn start(config: &ConfigDir) -> Serving {
        let port = free_port();
        let log = config.dir.path().join("serve.log");
        let proc = Proc::spawn(
            "mcpgw serve",
            Command::new(mcpgw())
                .args(["serve", "--config"])
                .arg(&config.path)
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .envs(ENV)
                .env("RUST_LOG", "debug")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log file")),
        );
        // The listener answers before the servers have connected: wait for them to settle.
        wait_until(
            "mcpgw to listen and its servers to settle",
            Duration::from_secs(60),
            || {
                reqwest::blocking::get(format!("http://127.0.0.1:{port}/healthz"))
                    .ok()
                    .filter(|r| r.status().is_success())
                    .and_then(|r| r.json::<Value>().ok())
                    .is_some_and(|health| {
                        health["servers"]
                            .as_array()
                            .is_some_and(|servers| servers.iter().all(|s| s["state"] != "starting"))
                    })
            },
        );
        Serving { proc, port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

#[test]
fn auth_headers_only_the_configured_credential_is_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bearer = Fixture::start(
        dir.path(),
        "http",
        "authorization",
        &format!("Bearer {}", value("MCPGW_E2E_BEARER")),
        "bearer",
    );
    let api_key = Fixture::start(
        dir.path(),
        "sse",
        "x-api-key",
        value("MCPGW_E2E_API_KEY"),
        "none",
    );
    let scheme = Fixture::start(
        dir.path(),
        "http",
        "authorization",
        &format!("Token {}", value("MCPGW_E2E_SCHEME")),
        "none",
    );
    // The strategy names MCPGW_E2E_REPLACED, but a custom Authorization header replaces it.
    let replaced = Fixture::start(
        dir.path(),
        "sse",
        "authorization",
        &format!("Bearer {}", value("MCPGW_E2E_OVERRIDE")),
        "none",
    );
    let config = write_config(&[
        bearer.server(
            "bearer",
            r#"{ type = "bearer", env = "MCPGW_E2E_BEARER" }"#,
            r#", headers = { X-Team = "infra" }"#,
        ),
        api_key.server(
            "apikey",
            r#"{ type = "header", name = "X-Api-Key", env = "MCPGW_E2E_API_KEY" }"#,
            "",
        ),
        scheme.server(
            "scheme",
            r#"{ type = "header", name = "Authorization", scheme = "Token", env = "MCPGW_E2E_SCHEME" }"#,
            "",
        ),
        replaced.server(
            "replaced",
            r#"{ type = "bearer", env = "MCPGW_E2E_REPLACED" }"#,
            r#", headers = { Authorization = { env = "MCPGW_E2E_OVERRIDE", prefix = "Bearer " } }"#,
        ),
    ]
    .join("\n"));

    let check = mcpgw_with_env(&["config", "check"], &config);
    assert!(check.status.success(), "{}", text(&check.stderr));
    let listed = mcpgw_with_env(&["servers", "list", "--json"], &config);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let statuses: Vec<Value> = serde_json::from_slice(&listed.stdout).expect("json");
    for name in ["bearer", "apikey", "scheme", "replaced"] {
        let status = statuses
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {statuses:?}"));
        assert_eq!(status["state"], "ready", "{status}");
        assert_eq!(status["tool_count"], 2, "{status}");
    }
    for (label, output) in [("config check", &check), ("servers list", &listed)] {
        assert_no_credentials(&format!("{label} stdout"), &text(&output.stdout));
        assert_no_credentials(&format!("{label} stderr"), &text(&output.stderr));
    }

    // Tool calls through a running gateway carry the credential too.
    let mut gateway = Serving::start(&config);
    let calls: Vec<Value> = ["bearer", "apikey", "scheme", "replaced"]
        .iter()
        .map(|server| {
            json!({"op": "call_tool", "name": "call_tool",
                   "arguments": {"name": format!("{server}__echo"),
                                 "arguments": {"message": format!("hello {server}")}}})
        })
        .collect();
    let report = py_client(&["--url", &gateway.url()], "modern", Value::Array(calls));
    for (i, server) in ["bearer", "apikey", "scheme", "replaced"]
        .iter()
        .enumerate()
    {
        let step = &report["steps"][i];
        assert!(
            result_text(step).contains(&format!("hello {server}")),
            "{server}: {step}\n{}",
            gateway.log_text()
        );
    }
    // Stopped before reading the recordings and the log, so both are complete.
    gateway.proc.terminate();

    // Every request carried exactly the configured credential, in the configured header.
    let expect_all = |fixture: &Fixture, header: &str, expected: String| {
        let values = fixture.header_values(header);
        assert!(values.len() >= 3, "too few requests recorded: {values:?}");
        assert!(
            values
                .iter()
                .all(|v| v.as_deref() == Some(expected.as_str())),
            "{header}: {values:?}"
        );
    };
    expect_all(
        &bearer,
        "authorization",
        format!("Bearer {}", value("MCPGW_E2E_BEARER")),
    );
    expect_all(&bearer, "x-team", "infra".to_owned());
    expect_all(&api_key, "x-api-key", value("MCPGW_E2E_API_KEY").to_owned());
    expect_all(
        &scheme,
        "authorization",
        format!("Token {}", value("MCPGW_E2E_SCHEME")),
    );
    expect_all(
        &replaced,
        "authorization",
        format!("Bearer {}", value("MCPGW_E2E_OVERRIDE")),
    );
    // The SSE POSTs (not just the GET) carried it: the tool call went through them.
    let posts = |fixture: &Fixture| {
        fixture
            .recorded_text()
            .lines()
            .filter(|l| l.contains(r#""method": "POST""#))
            .count()
    };
    assert!(posts(&api_key) >= 3 && posts(&replaced) >= 3);
    assert!(
        api_key
            .header_values("authorization")
            .iter()
            .all(Option::is_none),
        "the header strategy sent an Authorization header"
    );

    // No other variable's value reached any server.
    let own = [
        (&bearer, "MCPGW_E2E_BEARER"),
        (&api_key, "MCPGW_E2E_API_KEY"),
        (&scheme, "MCPGW_E2E_SCHEME"),
        (&replaced, "MCPGW_E2E_OVERRIDE"),
    ];
    for (fixture, mine) in own {
        let recorded = fixture.recorded_text();
        for (var, secret) in ENV {
            if var != mine {
                assert!(
                    !recorded.contains(secret),
                    "{var} reached the server configured with {mine}"
                );
            }
        }
    }
    assert_no_credentials("the gateway log", &gateway.log_text());
    assert!(
        gateway.log_text().contains("upstream connected"),
        "the debug log is not being written:\n{}",
        gateway.log_text()
    );
}

#[test]
fn auth_headers_rejected_credentials_are_named_in_servers_test() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Challenged 401 over Streamable HTTP, bare 401 over SSE.
    let http = Fixture::start(
        dir.path(),
        "http",
        "authorization",
        &format!("Bearer {}", value("MCPGW_E2E_BEARER")),
        "bearer",
    );
    let sse = Fixture::start(
        dir.path(),
        "sse",
        "x-api-key",
        value("MCPGW_E2E_API_KEY"),
        "none",
    );
    let config = write_config(
        &[
            http.server("gh", r#"{ type = "bearer", env = "MCPGW_E2E_WRONG" }"#, ""),
            sse.server(
                "keyed",
                r#"{ type = "header", name = "X-Api-Key", env = "MCPGW_E2E_WRONG" }"#,
                "",
            ),
        ]
        .join("\n"),
    );

    for (name, expected) in [
        (
            "gh",
            "server 'gh' failed: server 'gh' rejected the credentials from MCPGW_E2E_WRONG (HTTP 401)",
        ),
        (
            "keyed",
            "server 'keyed' failed: server 'keyed' rejected the credentials from MCPGW_E2E_WRONG (HTTP 401)",
        ),
    ] {
        let output = mcpgw_with_env(&["servers", "test", name], &config);
        assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
        let stderr = text(&output.stderr);
        assert!(stderr.contains(expected), "{stderr}");
        assert_no_credentials("servers test stderr", &stderr);
        assert_no_credentials("servers test stdout", &text(&output.stdout));

        let json = mcpgw_with_env(&["servers", "test", name, "--json"], &config);
        let report: Value = serde_json::from_slice(&json.stdout).expect("json");
        assert_eq!(report["ok"], false);
        assert!(
            report["error"].as_str().is_some_and(
                |e| e.ends_with("rejected the credentials from MCPGW_E2E_WRONG (HTTP 401)")
            ),
            "{report}"
        );
    }
    // The wrong value was sent (the servers saw it), never the right one from elsewhere.
    for fixture in [&http, &sse] {
        let recorded = fixture.recorded_text();
        assert!(recorded.contains(value("MCPGW_E2E_WRONG")), "{recorded}");
        assert!(!recorded.contains(value("MCPGW_E2E_BEARER")));
        assert!(!recorded.contains(value("MCPGW_E2E_API_KEY")));
    }
}

#[test]
fn auth_headers_oauth_challenge_asks_for_a_login() {
    let dir = tempfile::tempdir().expect("tempdir");
    let http = Fixture::start(
        dir.path(),
        "http",
        "authorization",
        "Bearer from-an-oauth-flow",
        "oauth",
    );
    let sse = Fixture::start(
        dir.path(),
        "sse",
        "authorization",
        "Bearer from-an-oauth-flow",
        "oauth",
    );
    let bare = Fixture::start(dir.path(), "http", "authorization", "Bearer x", "none");
    let config = write_config(
        &[
            http.server("remote", "", ""),
            sse.server("legacy", "", ""),
            // Configured for OAuth but not signed in: the same advice.
            http.server("signed-out", r#"{ type = "oauth", scopes = ["read"] }"#, ""),
            bare.server("plain", "", ""),
            // With a static credential the 401 is about that credential, with OAuth as an aside.
            http.server("pat", r#"{ type = "bearer", env = "MCPGW_E2E_WRONG" }"#, ""),
        ]
        .join("\n"),
    );

    let cases = [
        (
            "remote",
            "server 'remote' answered HTTP 401: OAuth required, run `mcpgw auth login remote`",
        ),
        (
            "legacy",
            "server 'legacy' answered HTTP 401: OAuth required, run `mcpgw auth login legacy`",
        ),
        (
            "signed-out",
            "server 'signed-out' answered HTTP 401: OAuth required, run `mcpgw auth login signed-out`",
        ),
        (
            "plain",
            "server 'plain' requires credentials (HTTP 401) and none are configured",
        ),
        (
            "pat",
            "server 'pat' rejected the credentials from MCPGW_E2E_WRONG (HTTP 401); it also accepts OAuth, see `mcpgw auth login pat`",
        ),
    ];
    for (name, expected) in cases {
        let output = mcpgw_with_env(&["servers", "test", name], &config);
        assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
        let stderr = text(&output.stderr);
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert_no_credentials("servers test stderr", &stderr);
    }
    assert!(
        http.header_values("authorization")
            .iter()
            .all(|v| v.is_none()
                || v.as_deref() == Some(&*format!("Bearer {}", value("MCPGW_E2E_WRONG")))),
        "only `pat` sends a credential"
    );
}

#[test]
fn auth_headers_missing_variable_fails_only_its_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = Fixture::start(
        dir.path(),
        "http",
        "authorization",
        &format!("Bearer {}", value("MCPGW_E2E_BEARER")),
        "bearer",
    );
    let config = write_config(
        &[
            fixture.server("ok", r#"{ type = "bearer", env = "MCPGW_E2E_BEARER" }"#, ""),
            fixture.server(
                "unset",
                r#"{ type = "bearer", env = "MCPGW_E2E_NEVER_SET" }"#,
                "",
            ),
            fixture.server(
                "empty",
                r#"{ type = "header", name = "X-Api-Key", env = "MCPGW_E2E_EMPTY" }"#,
                "",
            ),
        ]
        .join("\n"),
    );
    let output = Command::new(mcpgw())
        .args(["servers", "list", "--json", "--config"])
        .arg(&config.path)
        .envs(ENV)
        .env("MCPGW_E2E_EMPTY", " ")
        .env_remove("MCPGW_E2E_NEVER_SET")
        .output()
        .expect("mcpgw runs");
    // The listing is printed, and the exit status says that some servers failed.
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("2 of 3 servers failed: unset, empty"),
        "{}",
        text(&output.stderr)
    );
    let statuses: Vec<Value> = serde_json::from_slice(&output.stdout).expect("json");
    let by_name = |name: &str| {
        statuses
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing: {statuses:?}"))
    };
    assert_eq!(by_name("ok")["state"], "ready", "{statuses:?}");
    assert_eq!(by_name("unset")["state"], "failed");
    assert_eq!(
        by_name("unset")["reason"],
        "secret for server 'unset' is not available: environment variable MCPGW_E2E_NEVER_SET is not set (hint: export MCPGW_E2E_NEVER_SET before starting mcpgw)"
    );
    assert_eq!(by_name("empty")["state"], "failed");
    assert_eq!(
        by_name("empty")["reason"],
        "secret for server 'empty' is not available: environment variable MCPGW_E2E_EMPTY is empty (hint: export MCPGW_E2E_EMPTY with the credential before starting mcpgw)"
    );
    assert_no_credentials("servers list", &text(&output.stdout));
    assert_no_credentials("servers list stderr", &text(&output.stderr));
}
