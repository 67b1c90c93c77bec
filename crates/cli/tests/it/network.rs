//! The SSRF guard end to end: which upstreams, OAuth endpoints and embedding endpoints the real
//! binary reaches under `[network] allow` and `allow_private_network`, and what a user reads
//! when one is refused. Every peer here is on loopback, which the guard refuses unless named.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    process::{Command, Output, Stdio},
    sync::mpsc,
    time::Duration,
};

use serde_json::{Value, json};

use crate::harness::*;
use crate::oauth_fixture::OAuthServer;

fn mcpgw_cmd(args: &[&str], config: &ConfigDir) -> Output {
    Command::new(mcpgw())
        .args(args)
        .arg("--config")
        .arg(&config.path)
        .env_remove("MCPGW_SECRET_KEY")
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs")
}

/// A loopback port that must never be connected to: accepting would succeed only if something
/// connected.
fn sink() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("local address").port();
    (listener, port)
}

fn assert_untouched(sink: &TcpListener, what: &str) {
    assert!(
        sink.accept().is_err(),
        "{what} was connected to although the network policy refuses it"
    );
}

fn http_server(name: &str, port: u16, extra: &str) -> String {
    format!(
        "[[servers]]\nname = \"{name}\"\ntimeout_s = 10\n{extra}transport = {{ type = \"http\", url = \"http://127.0.0.1:{port}/mcp\" }}\n"
    )
}

/// The one line `servers test` prints for a loopback server nobody allowed.
fn refusal_line(name: &str, port: u16) -> String {
    format!(
        "error: server '{name}' failed: network policy blocks '{name}': refused http://127.0.0.1:{port}: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server '{name}'"
    )
}

#[test]
fn a_loopback_server_nobody_allowed_is_refused_with_the_line_to_add_and_the_others_serve() {
    let (_everything, port) = everything_network("streamableHttp");
    let (sink, sink_port) = sink();
    let config = write_config_without_allowlist(&format!(
        "{}\n{}\n{}",
        http_server("web", port, ""),
        http_server("dark", sink_port, ""),
        everything_stdio_server("local"),
    ));

    let refused = mcpgw_cmd(&["servers", "test", "web"], &config);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.lines().any(|line| line == refusal_line("web", port)),
        "expected the line\n{}\nin:\n{stderr}",
        refusal_line("web", port)
    );
    let json = mcpgw_cmd(&["servers", "test", "web", "--json"], &config);
    let report: Value = serde_json::from_slice(&json.stdout).expect("json report");
    assert_eq!(report["ok"], false);
    assert_eq!(
        report["error"]
            .as_str()
            .map(|e| format!("error: server 'web' failed: {e}")),
        Some(refusal_line("web", port)),
        "{report}"
    );

    // `serve` starts, reports the refused servers as failed with the same reason, and serves
    // the one that needs no network.
    let gateway = Gateway::start(config);
    let health = gateway.health().expect("health");
    let state = |name: &str| -> Value {
        health["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing from {health}"))
    };
    assert_eq!(state("local")["state"], "ready", "{health}");
    for (name, port) in [("web", port), ("dark", sink_port)] {
        assert_eq!(state(name)["state"], "failed", "{health}");
        assert_eq!(
            state(name)["reason"]
                .as_str()
                .map(|r| format!("error: server '{name}' failed: {r}")),
            Some(refusal_line(name, port)),
            "{health}"
        );
    }
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([{"op": "call_tool", "name": "call_tool",
                "arguments": {"name": "local__echo", "arguments": {"message": "still here"}}}]),
    );
    let result = &report["steps"][0];
    assert!(result_text(result).contains("Echo: still here"), "{result}");
    assert_untouched(&sink, "the refused server");
}

#[test]
fn a_loopback_server_is_reached_once_allowed_by_the_allowlist_or_its_own_switch() {
    let (_everything, port) = everything_network("streamableHttp");
    for config in [
        // The harness's `[network] allow = ["127.0.0.1", "localhost"]`.
        write_config(&http_server("web", port, "")),
        write_config_without_allowlist(&format!(
            "[network]\nallow = [\"127.0.0.1:{port}\"]\n\n{}",
            http_server("web", port, "")
        )),
        write_config_without_allowlist(&http_server("web", port, "allow_private_network = true\n")),
    ] {
        let output = mcpgw_cmd(&["servers", "test", "web", "--json"], &config);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let report: Value = serde_json::from_slice(&output.stdout).expect("json report");
        assert_eq!(report["ok"], true, "{report}");
        assert!(report["tool_count"].as_u64() > Some(5), "{report}");
    }

    // An entry for another port of the same host does not do.
    let other = write_config_without_allowlist(&format!(
        "[network]\nallow = [\"127.0.0.1:{}\"]\n\n{}",
        port.wrapping_add(1).max(1),
        http_server("web", port, "")
    ));
    let refused = mcpgw_cmd(&["servers", "test", "web"], &other);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains(&format!(
            "is allowed on port {} only, not {port}; to allow it, add \"127.0.0.1:{port}\" to [network] allow in mcpgw.toml",
            port.wrapping_add(1).max(1)
        )),
        "{}",
        text(&refused.stderr)
    );
}

fn oauth_config(port: u16, allow: &[String]) -> ConfigDir {
    let allow: Vec<String> = allow.iter().map(|entry| format!("{entry:?}")).collect();
    write_config_without_allowlist(&format!(
        "[network]\nallow = [{}]\n\n[[servers]]\nname = \"docs\"\ntimeout_s = 10\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{port}/mcp\" }}\n\n[retrieval]\nstrategy = \"bm25\"\n",
        allow.join(", ")
    ))
}

#[test]
fn oauth_metadata_pointing_at_an_address_nobody_allowed_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start_with(dir.path(), None, true);
    let (port, as_port) = (fixture.port, fixture.as_port.expect("split"));

    // Only the resource server's port is allowed: its metadata sends mcpgw to the
    // authorization server on the other port, which the guard refuses before any request.
    let config = oauth_config(port, &[format!("127.0.0.1:{port}")]);
    let login = mcpgw_cmd(&["auth", "login", "docs", "--no-browser"], &config);
    assert_eq!(login.status.code(), Some(1), "{}", text(&login.stderr));
    let stderr = text(&login.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot start the sign-in to 'docs': refused http://127.0.0.1:{as_port}: 127.0.0.1 is allowed on port {port} only, not {as_port}; to allow it, add \"127.0.0.1:{as_port}\" to [network] allow in mcpgw.toml"
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("/authorize?"),
        "a sign-in URL was printed:\n{stderr}"
    );
    let paths: Vec<String> = fixture
        .requests()
        .iter()
        .filter_map(|r| r["path"].as_str().map(str::to_owned))
        .collect();
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("/.well-known/oauth-protected-resource")),
        "the allowed resource server was asked for its metadata: {paths:?}"
    );
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with("/.well-known/oauth-authorization-server")
                || p == "/register"
                || p == "/token"),
        "the refused authorization server was contacted: {paths:?}"
    );

    // The control: with the line the refusal names, the same login gets as far as the
    // sign-in URL.
    let config = oauth_config(
        port,
        &[format!("127.0.0.1:{port}"), format!("127.0.0.1:{as_port}")],
    );
    let mut proc = Proc::spawn(
        "mcpgw auth login",
        Command::new(mcpgw())
            .args(["auth", "login", "docs", "--no-browser", "--config"])
            .arg(&config.path)
            .env_remove("MCPGW_SECRET_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = proc.child.stderr.take().expect("stderr");
    let (found, url) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = found.send(line);
        }
    });
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !seen.contains("/authorize?") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match url.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
            }
            Err(_) => panic!("no sign-in URL within 30 s; stderr:\n{seen}"),
        }
    }
    assert!(
        seen.contains(&format!("http://127.0.0.1:{as_port}/authorize?")),
        "{seen}"
    );
}

#[test]
fn a_remote_embedder_nobody_allowed_leaves_search_on_bm25_with_a_warning_naming_the_refusal() {
    let (sink, sink_port) = sink();
    let config = write_config_without_allowlist(&format!(
        "[retrieval]\nstrategy = \"hybrid\"\n\n[retrieval.embedder]\ntype = \"remote\"\n\
         base_url = \"http://127.0.0.1:{sink_port}/v1\"\nmodel = \"m\"\n\n{}",
        time_stdio_server("time")
    ));
    let gateway = Gateway::start(config);
    let report = py_client(
        &["--url", &gateway.url()],
        "modern",
        json!([{"op": "call_tool", "name": "search_tools", "arguments": {"query": "convert time zone"}}]),
    );
    let result = &report["steps"][0]["structuredContent"];
    assert_eq!(
        result["degraded"], "no embedding model loaded; served BM25",
        "{result}"
    );
    assert_eq!(
        result["results"][0]["name"], "time__convert_time",
        "{result}"
    );
    let log = gateway.log_text();
    let warning = log
        .lines()
        .find(|line| line.contains("the embedding endpoint is refused by the network policy"))
        .unwrap_or_else(|| panic!("no warning about the refusal in:\n{log}"));
    assert!(
        warning.ends_with(&format!(
            "refusal=refused http://127.0.0.1:{sink_port}: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml"
        )),
        "{warning}"
    );
    assert!(
        !warning.contains("allow_private_network"),
        "the embedder is no server; only [network] allow can admit it: {warning}"
    );
    assert_untouched(&sink, "the refused embedding endpoint");
}
