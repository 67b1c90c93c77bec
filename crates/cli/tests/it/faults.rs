//! Faults: a missing command, a server that hangs at start, a server killed mid-session, and
//! no child process outliving the gateway.

use std::{
    io::Write,
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::harness::*;

fn echo(url: &str, message: &str) -> Value {
    py_client(
        &["--url", url],
        "legacy",
        json!([{"op": "call_tool", "name": "call_tool",
                "arguments": {"name": "everything__echo", "arguments": {"message": message}}}]),
    )["steps"][0]
        .clone()
}

#[test]
fn dead_and_hanging_upstreams_never_block_the_others() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let pids = scratch.path().join("pids");
    let config = write_config(&format!(
        "[[servers]]\nname = \"ghost\"\ntransport = {{ type = \"stdio\", command = \"/nonexistent/mcp-server\" }}\n\n{}\n{}",
        recorded_server("stuck", &pids, "sleep 3600", "timeout_s = 2\n"),
        everything_stdio_server("everything"),
    ));
    let mut gateway = Gateway::start(config);

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
    assert_eq!(state("everything")["state"], "ready");
    // A failed server is retried in the background: /healthz may catch it connecting again,
    // still with its last failure as the reason.
    let failed = |name: &str| {
        let state = state(name)["state"].clone();
        assert!(
            state == "failed" || state == "connecting",
            "{name}: {state} in {health}"
        );
    };
    failed("ghost");
    let ghost_reason = state("ghost")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(ghost_reason.contains("command not found"), "{ghost_reason}");
    failed("stuck");
    let stuck_reason = state("stuck")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        stuck_reason.contains("did not answer within 2"),
        "{stuck_reason}"
    );

    let result = echo(&gateway.url(), "still here");
    assert!(
        result_text(&result).contains("Echo: still here"),
        "{result}"
    );

    // The child that hung was killed when its connect timed out, not left behind.
    let started = recorded_pids(&pids);
    assert!(!started.is_empty());
    wait_until(
        "the hung child to be killed",
        Duration::from_secs(10),
        || started.iter().all(|&pid| !alive(pid)),
    );

    let status = gateway.proc.terminate();
    assert!(
        status.success(),
        "gateway exit status after SIGTERM: {status}"
    );
}

#[test]
fn killed_upstream_comes_back_on_next_call_and_nothing_outlives_the_gateway() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let pids = scratch.path().join("pids");
    let config = write_config(&recorded_server(
        "everything",
        &pids,
        &format!("node {} stdio", everything_js()),
        "",
    ));
    let mut gateway = Gateway::start(config);
    assert!(result_text(&echo(&gateway.url(), "one")).contains("Echo: one"));

    let first = recorded_pids(&pids);
    assert_eq!(first.len(), 1, "one child started: {first:?}");
    signal(first[0], "KILL");
    wait_until("the upstream to die", Duration::from_secs(10), || {
        !alive(first[0])
    });

    let again = echo(&gateway.url(), "two");
    assert!(result_text(&again).contains("Echo: two"), "{again}");
    let all = recorded_pids(&pids);
    assert_eq!(all.len(), 2, "restarted exactly once: {all:?}");
    assert!(alive(all[1]));

    let status = gateway.proc.terminate();
    assert!(status.success(), "{status}\n{}", gateway.log_text());
    for pid in all {
        assert!(!alive(pid), "upstream {pid} outlived the gateway");
    }
}

#[test]
fn stdio_gateway_stops_its_children_when_the_client_goes_away() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let pids = scratch.path().join("pids");
    let config = write_config(&recorded_server(
        "everything",
        &pids,
        &format!("node {} stdio", everything_js()),
        "",
    ));
    let mut gateway = Proc::spawn(
        "mcpgw serve --stdio",
        Command::new(mcpgw())
            .args(["serve", "--stdio", "--config"])
            .arg(&config.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_until(
        "the upstream child to start",
        Duration::from_secs(30),
        || !recorded_pids(&pids).is_empty(),
    );
    // Say hello properly, then hang up.
    let mut stdin = gateway.child.stdin.take().expect("stdin");
    let _ = stdin.write_all(b"");
    drop(stdin);
    wait_until(
        "mcpgw to exit after stdin closed",
        Duration::from_secs(20),
        || matches!(gateway.child.try_wait(), Ok(Some(_))),
    );
    for pid in recorded_pids(&pids) {
        wait_until("children to be gone", Duration::from_secs(5), || {
            !alive(pid)
        });
    }
}

#[test]
fn call_that_kills_its_upstream_is_reported_not_repeated() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let marker = scratch.path().join("calls");
    let config = write_config(&format!(
        "[[servers]]\nname = \"faulty\"\ntransport = {{ type = \"stdio\", command = {:?}, args = [{:?}] }}\n",
        venv_bin("python"),
        repo_root()
            .join("tests/fixtures/faulty_server.py")
            .display()
            .to_string()
    ));
    let gateway = Gateway::start(config);
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([
            {"op": "call_tool", "name": "call_tool",
             "arguments": {"name": "faulty__crash", "arguments": {"marker": marker.display().to_string()}}},
            {"op": "call_tool", "name": "call_tool",
             "arguments": {"name": "faulty__echo", "arguments": {"message": "back again"}}},
        ]),
    );
    let crashed = &report["steps"][0];
    assert_eq!(crashed["isError"], true, "{crashed}");
    assert!(
        result_text(crashed).contains("connection to 'faulty' was lost"),
        "{crashed}"
    );
    let calls = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(
        calls.lines().count(),
        1,
        "the crashing call ran exactly once"
    );
    assert!(
        result_text(&report["steps"][1]).contains("back again"),
        "{report}"
    );
}
