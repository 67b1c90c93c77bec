//! OAuth upstreams end to end: the real binary against a real OAuth-protected MCP server (the
//! Python `mcp` SDK's authorization server and bearer middleware, tests/fixtures/oauth_server.py,
//! whose /authorize approves at once as the `user` it is given). The test plays the browser:
//! it reads the sign-in URL from `mcpgw auth login`, fetches it, and follows the redirect to
//! mcpgw's loopback callback. Then the gateway calls the server with the stored tokens, through
//! an expiry (one refresh), a revoked grant (a re-login is asked for, the dead tokens are gone),
//! and a second login as another user. Throughout, no token, code or verifier may appear in a
//! log, an output, or the database files.

use std::{
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::harness::*;
use crate::oauth_fixture::OAuthServer;

/// Access tokens live this long: short, so refreshes ahead of expiry happen during the test
/// too.
const TOKEN_TTL_S: u64 = 3;

/// Runs mcpgw once with a debug log (so that the log cap, not the default level, keeps secrets
/// out) and without a secret key variable (so that the key file is used).
fn mcpgw_run(args: &[&str], config: &ConfigDir) -> Output {
    Command::new(mcpgw())
        .args(args)
        .arg("--config")
        .arg(&config.path)
        .args(["--log", "debug"])
        .env_remove("MCPGW_SECRET_KEY")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs")
}

/// Everything a command printed, for the leak check.
fn transcript(label: &str, output: &Output) -> String {
    format!(
        "== {label} stdout\n{}\n== {label} stderr\n{}\n",
        text(&output.stdout),
        text(&output.stderr)
    )
}

/// `mcpgw auth login` as a user would run it, with the test as the browser: the sign-in URL
/// is read from its stderr and fetched as `user`, following the authorization server's
/// redirect to mcpgw's callback. Returns the command's output and the page the browser got.
pub(crate) fn login(config: &ConfigDir, user: &str, port: Option<u16>) -> (Output, String) {
    let mut args = vec![
        "auth".to_owned(),
        "login".to_owned(),
        "docs".to_owned(),
        "--no-browser".to_owned(),
    ];
    if let Some(port) = port {
        args.extend(["--port".to_owned(), port.to_string()]);
    }
    let mut proc = Proc::spawn(
        "mcpgw auth login",
        Command::new(mcpgw())
            .args(&args)
            .arg("--config")
            .arg(&config.path)
            .args(["--log", "debug"])
            .env_remove("MCPGW_SECRET_KEY")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let stderr = proc.child.stderr.take().expect("stderr");
    let collected = Arc::new(Mutex::new(String::new()));
    let (found, url) = mpsc::channel();
    let reader = {
        let collected = collected.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(start) = line.find("http://")
                    && line.contains("/authorize?")
                {
                    let _ = found.send(line[start..].trim().to_owned());
                }
                let mut all = collected.lock().unwrap_or_else(|p| p.into_inner());
                all.push_str(&line);
                all.push('\n');
            }
        })
    };
    let url = url
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            panic!(
                "no sign-in URL within 30 s; stderr so far:\n{}",
                collected.lock().unwrap_or_else(|p| p.into_inner())
            )
        });
    // The browser: follows the authorization server's redirect to the loopback callback.
    let page = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
        .get(format!("{url}&user={user}"))
        .send()
        .and_then(|r| r.text())
        .expect("the callback answers the browser");
    let start = Instant::now();
    let status = loop {
        if let Ok(Some(status)) = proc.child.try_wait() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "login did not exit within 30 s of the callback"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = reader.join();
    let mut stdout = String::new();
    if let Some(mut out) = proc.child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    let stderr = collected.lock().unwrap_or_else(|p| p.into_inner()).clone();
    (
        Output {
            status,
            stdout: stdout.into_bytes(),
            stderr: stderr.into_bytes(),
        },
        page,
    )
}

/// `mcpgw serve` with a debug log.
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
                .args(["--log", "debug"])
                .env_remove("MCPGW_SECRET_KEY")
                .env_remove("RUST_LOG")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log file")),
        );
        let serving = Serving { proc, port, log };
        wait_until("mcpgw to listen", Duration::from_secs(60), || {
            serving.health().is_some()
        });
        // The listener answers at once; the upstreams join as they are ready.
        wait_until("every upstream to settle", Duration::from_secs(60), || {
            serving.health().is_some_and(|health| {
                health["servers"]
                    .as_array()
                    .is_some_and(|servers| servers.iter().all(|s| s["state"] != "starting"))
            })
        });
        serving
    }

    fn health(&self) -> Option<Value> {
        reqwest::blocking::get(format!("http://127.0.0.1:{}/healthz", self.port))
            .ok()?
            .json()
            .ok()
    }

    fn docs_state(&self) -> Value {
        self.health().expect("healthz")["servers"][0].clone()
    }

    /// Calls `docs__whoami` through the gateway's `call_tool` meta-tool.
    fn whoami(&self) -> Value {
        let url = format!("http://127.0.0.1:{}/mcp", self.port);
        let report = py_client(
            &["--url", &url],
            "modern",
            json!([{"op": "call_tool", "name": "call_tool",
                    "arguments": {"name": "docs__whoami", "arguments": {}}}]),
        );
        report["steps"][0].clone()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `mcpgw_oauth_refreshes_total{outcome="OUTCOME"}` as `/metrics` shows it now.
    fn refreshes(&self, outcome: &str) -> f64 {
        let token_file = self.log.with_file_name("admin-token");
        let token = std::fs::read_to_string(&token_file).expect("admin token file");
        let text = reqwest::blocking::Client::new()
            .get(format!("http://127.0.0.1:{}/metrics", self.port))
            .bearer_auth(token.trim())
            .send()
            .and_then(|response| response.text())
            .expect("metrics");
        let series = format!("mcpgw_oauth_refreshes_total{{outcome=\"{outcome}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&series)?.parse().ok())
            .unwrap_or_else(|| panic!("{series}in\n{text}"))
    }
}

fn status_json(config: &ConfigDir, transcripts: &mut String) -> Value {
    let output = mcpgw_run(&["auth", "status", "--json"], config);
    transcripts.push_str(&transcript("auth status", &output));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rows: Value = serde_json::from_slice(&output.stdout).expect("status is JSON");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    rows[0].clone()
}

/// The bytes of the database and its WAL and shared-memory files.
fn database_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    std::fs::read_dir(dir)
        .expect("config dir")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("mcpgw.db"))
        })
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap_or_default();
            (path, bytes)
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn oauth_login_refresh_revoke_and_relogin_without_leaking_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), Some(TOKEN_TTL_S));
    let config = write_config(&format!(
        "[[servers]]\nname = \"docs\"\ntimeout_s = 10\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", url = \"{}\" }}\n\n[retrieval]\nstrategy = \"bm25\"\n",
        fixture.endpoint("/mcp")
    ));
    let mut transcripts = String::new();

    // (a) Before any login: the failure says what to run.
    let test = mcpgw_run(&["servers", "test", "docs"], &config);
    transcripts.push_str(&transcript("servers test", &test));
    assert_eq!(test.status.code(), Some(1), "{}", text(&test.stderr));
    assert!(
        text(&test.stderr).contains(
            "server 'docs' answered HTTP 401: OAuth required, run `mcpgw auth login docs`"
        ),
        "{}",
        text(&test.stderr)
    );
    let before = status_json(&config, &mut transcripts);
    assert_eq!(before["logged_in"], false, "{before}");

    // (b) Log in as alice on a port the system picks.
    let (output, page) = login(&config, "alice", None);
    transcripts.push_str(&transcript("auth login alice", &output));
    assert!(
        output.status.success(),
        "login failed: {}",
        text(&output.stderr)
    );
    assert!(page.contains("You can close this tab"), "{page}");
    let said = text(&output.stdout);
    assert!(
        said.starts_with("signed in to 'docs': client ")
            && said.contains(&format!("access token expires in {TOKEN_TTL_S} s")),
        "{said}"
    );
    assert_eq!(fixture.grants("authorization_code"), 1);
    assert_eq!(fixture.registrations(), 1);

    // (c) Status shows the sign-in, and no token.
    let status = status_json(&config, &mut transcripts);
    assert_eq!(status["server"], "docs", "{status}");
    assert_eq!(status["logged_in"], true, "{status}");
    assert_eq!(status["has_refresh_token"], true, "{status}");
    assert_eq!(status["registration"], "dynamic", "{status}");
    assert!(
        status["issuer"]
            .as_str()
            .is_some_and(|i| i.contains(&format!("127.0.0.1:{}", fixture.port))),
        "{status}"
    );
    assert!(status["client_id"].is_string(), "{status}");

    // (d) The gateway calls the server as alice.
    let mut gateway = Serving::start(&config);
    assert_eq!(
        gateway.docs_state()["state"],
        "ready",
        "{}",
        gateway.log_text()
    );
    let whoami = gateway.whoami();
    assert!(
        result_text(&whoami).contains(r#""user": "alice""#),
        "{whoami}\n{}",
        gateway.log_text()
    );

    // (e) Once the access token has expired, the next call refreshes it, once.
    let refreshes = fixture.grants("refresh_token");
    fixture.control("/test/expire-access");
    let whoami = gateway.whoami();
    assert!(
        result_text(&whoami).contains(r#""user": "alice""#),
        "{whoami}\n{}",
        gateway.log_text()
    );
    assert_eq!(
        fixture.grants("refresh_token"),
        refreshes + 1,
        "exactly one refresh for the expired token"
    );
    // Every refresh the server granted is counted, once (short-lived tokens may also have
    // been refreshed ahead of expiry before): all of them by this gateway.
    assert_eq!(
        gateway.refreshes("ok"),
        fixture.grants("refresh_token") as f64,
        "{}",
        gateway.log_text()
    );
    assert_eq!(gateway.refreshes("reauthorize"), 0.0);

    // (f) A revoked grant: the call fails asking for a login, and the dead tokens are gone.
    fixture.control("/test/revoke-refresh");
    fixture.control("/test/expire-access");
    let failed = gateway.whoami();
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(
        result_text(&failed).contains(
            "server 'docs' answered HTTP 401: OAuth required, run `mcpgw auth login docs`"
        ),
        "{failed}"
    );
    let state = gateway.docs_state();
    assert_eq!(state["state"], "failed", "{state}");
    assert!(
        state["reason"]
            .as_str()
            .is_some_and(|r| r.contains("OAuth required, run `mcpgw auth login docs`")),
        "{state}"
    );
    let status = status_json(&config, &mut transcripts);
    assert_eq!(status["logged_in"], false, "{status}");
    assert_eq!(
        gateway.refreshes("reauthorize"),
        1.0,
        "the refused refresh is counted as a dead grant"
    );

    // (g) Log in again, as bob, on a chosen port: the running gateway picks the new tokens up.
    let callback_port = free_port();
    let (output, _) = login(&config, "bob", Some(callback_port));
    transcripts.push_str(&transcript("auth login bob", &output));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        fixture.registrations(),
        2,
        "a new redirect URI, a new client"
    );
    let whoami = gateway.whoami();
    assert!(
        result_text(&whoami).contains(r#""user": "bob""#),
        "{whoami}\n{}",
        gateway.log_text()
    );
    assert_eq!(gateway.docs_state()["state"], "ready");

    // Logging out and in again on the same port reuses the registered client.
    let logout = mcpgw_run(&["auth", "logout", "docs"], &config);
    transcripts.push_str(&transcript("auth logout", &logout));
    assert!(logout.status.success(), "{}", text(&logout.stderr));
    assert_eq!(text(&logout.stdout).trim(), "signed out of 'docs'");
    assert_eq!(status_json(&config, &mut transcripts)["logged_in"], false);
    let (output, _) = login(&config, "bob", Some(callback_port));
    transcripts.push_str(&transcript("auth login bob again", &output));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(fixture.registrations(), 2, "the stored client is reused");
    assert!(result_text(&gateway.whoami()).contains(r#""user": "bob""#));

    // (h) No secret anywhere: logs, outputs, database files (WAL included, read while the
    // gateway still has the database open, and after).
    let secrets = fixture.secrets_seen();
    // Three logins' codes and verifiers, and at least one access and one refresh token each.
    assert!(
        secrets.len() >= 10,
        "too few secrets collected: {}",
        secrets.len()
    );
    let live_files = database_files(config.dir.path());
    gateway.proc.terminate();
    let log = gateway.log_text();
    assert!(
        log.contains("upstream connected"),
        "the debug log is not being written:\n{log}"
    );
    let closed_files = database_files(config.dir.path());
    assert!(
        closed_files
            .iter()
            .any(|(path, bytes)| path.ends_with("mcpgw.db") && contains(bytes, "oauth_credentials")),
        "the database file was not read"
    );
    for secret in &secrets {
        assert!(
            !log.contains(secret.as_str()),
            "the gateway log holds a secret"
        );
        assert!(
            !transcripts.contains(secret.as_str()),
            "a command printed a secret:\n{transcripts}"
        );
        for (path, bytes) in live_files.iter().chain(&closed_files) {
            assert!(
                !contains(bytes, secret),
                "{} holds a secret in plain text",
                path.display()
            );
        }
    }
    let key_file = config.dir.path().join("secret.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file)
            .expect("the key file beside the database")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "key file mode {mode:o}");
}
