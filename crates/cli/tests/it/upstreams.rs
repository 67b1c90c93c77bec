//! Upstream behaviour seen through the binary: protocol era detection per server, and an HTTP
//! upstream that restarts (its session is gone, answered with 404) being re-initialised.

use std::{process::Command, process::Stdio, time::Duration};

use serde_json::{Value, json};

use crate::harness::*;

fn python_http_server() -> (Proc, u16) {
    let port = free_port();
    let proc = Proc::spawn(
        "python dual-era server",
        Command::new(venv_bin("python"))
            .arg(repo_root().join("tests/fixtures/odd_names_server.py"))
            .args(["http", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_until("python server to listen", Duration::from_secs(20), || {
        port_open(port)
    });
    (proc, port)
}

#[test]
fn era_is_detected_per_server() {
    let (_py, py_port) = python_http_server();
    let (_everything, ev_port) = everything_network("streamableHttp");
    let config = write_config(&format!(
        "[[servers]]\nname = \"py\"\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{py_port}/mcp\" }}\n\n\
         [[servers]]\nname = \"ev\"\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{ev_port}/mcp\" }}\n\n{}",
        time_stdio_server("time")
    ));
    let output = Command::new(mcpgw())
        .args(["servers", "list", "--json", "--config"])
        .arg(&config.path)
        .output()
        .expect("mcpgw runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let servers: Vec<Value> = serde_json::from_slice(&output.stdout).expect("json");
    let by_name = |name: &str| {
        servers
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .expect(name)
    };
    assert_eq!(by_name("py")["era"], "modern", "{servers:?}");
    assert_eq!(by_name("py")["protocol_version"], "2026-07-28");
    assert_eq!(
        by_name("time")["era"],
        "modern",
        "python stdio servers are dual-era"
    );
    assert_eq!(by_name("ev")["era"], "legacy", "{servers:?}");
    assert_eq!(by_name("ev")["protocol_version"], "2025-11-25");

    // A tool on the modern upstream, called through the gateway by a legacy client.
    let gateway = Gateway::start(config);
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([{"op": "call_tool", "name": "call_tool",
                "arguments": {"name": "py__add", "arguments": {"a": 40, "b": 2}}}]),
    );
    assert!(result_text(&report["steps"][0]).contains("42"), "{report}");
}

#[test]
fn restarted_http_upstream_is_reinitialised_after_its_session_expires() {
    let port = free_port();
    let start_upstream = || {
        let proc = Proc::spawn(
            "server-everything streamableHttp",
            Command::new("node")
                .arg(everything_js())
                .arg("streamableHttp")
                .env("PORT", port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        wait_until("upstream to listen", Duration::from_secs(20), || {
            port_open(port)
        });
        proc
    };
    let upstream = start_upstream();
    let config = write_config(&format!(
        "[[servers]]\nname = \"everything\"\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{port}/mcp\" }}\n"
    ));
    let gateway = Gateway::start(config);
    let call = |message: &str| {
        py_client(
            &["--url", &gateway.url()],
            "modern",
            json!([{"op": "call_tool", "name": "call_tool",
                    "arguments": {"name": "everything__echo", "arguments": {"message": message}}}]),
        )["steps"][0]
            .clone()
    };
    assert!(result_text(&call("before")).contains("Echo: before"));

    // A fresh process on the same port knows nothing of the gateway's session id.
    drop(upstream);
    wait_until("old upstream gone", Duration::from_secs(10), || {
        !port_open(port)
    });
    let _upstream = start_upstream();
    let after = call("after");
    assert!(
        result_text(&after).contains("Echo: after"),
        "{after}\n{}",
        gateway.log_text()
    );
}

#[test]
fn server_down_at_startup_joins_the_catalog_when_it_comes_up() {
    let port = free_port();
    let config = write_config(&format!(
        "[[servers]]\nname = \"late\"\ntimeout_s = 2\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{port}/mcp\" }}\n\n{}",
        time_stdio_server("time")
    ));
    let gateway = Gateway::start(config);
    let late = |health: &Value| {
        health["servers"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "late").cloned())
            .unwrap_or_default()
    };
    assert_eq!(late(&gateway.health().expect("health"))["state"], "failed");

    let _upstream = Proc::spawn(
        "server-everything streamableHttp",
        Command::new("node")
            .arg(everything_js())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_until("the late server to join", Duration::from_secs(45), || {
        gateway
            .health()
            .is_some_and(|h| late(&h)["state"] == "ready" && h["tools"].as_u64() > Some(2))
    });
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([{"op": "call_tool", "name": "search_tools", "arguments": {"query": "echo", "servers": ["late"]}}]),
    );
    assert_eq!(
        report["steps"][0]["structuredContent"]["results"][0]["name"], "late__echo",
        "{report}"
    );
}
