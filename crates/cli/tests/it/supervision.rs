//! Upstream supervision: a stdio child that dies is noticed at once and restarted, one that
//! freezes is found by liveness pings, killed and replaced while the calls waiting on it fail
//! fast, a child that crashes says why in its own words, and a child never outlives a gateway
//! killed outright.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::harness::*;

fn server(health: &Value, name: &str) -> Value {
    health["servers"]
        .as_array()
        .and_then(|servers| servers.iter().find(|s| s["name"] == name))
        .cloned()
        .unwrap_or(Value::Null)
}

fn current_time(url: &str) -> Value {
    py_client(
        &["--url", url],
        "legacy",
        json!([{"op": "call_tool", "name": "call_tool",
                "arguments": {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}}]),
    )["steps"][0]
        .clone()
}

#[test]
fn stdio_child_killed_is_noticed_at_once_logged_and_restarted() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let pids = scratch.path().join("pids");
    let config = write_config(&recorded_server(
        "time",
        &pids,
        &venv_bin("mcp-server-time"),
        "",
    ));
    let gateway = Gateway::start(config);
    let first = recorded_pids(&pids);
    assert_eq!(first.len(), 1, "{first:?}");

    signal(first[0], "KILL");
    let killed = Instant::now();
    wait_until("/healthz to show the exit", Duration::from_secs(10), || {
        gateway
            .health()
            .is_some_and(|h| server(&h, "time")["state"] == "failed")
    });
    let noticed = killed.elapsed();
    eprintln!("SIGKILL noticed after {noticed:?}");
    assert!(
        noticed < Duration::from_secs(3),
        "noticed after {noticed:?}"
    );
    let health = gateway.health().expect("health");
    let reason = server(&health, "time")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("killed by signal 9 (SIGKILL)"), "{reason}");
    let log = gateway.log_text();
    assert!(
        log.contains("WARN") && log.contains("stdio upstream exited"),
        "{log}"
    );

    wait_until(
        "the server to be restarted",
        Duration::from_secs(30),
        || {
            recorded_pids(&pids).len() == 2
                && gateway
                    .health()
                    .is_some_and(|h| server(&h, "time")["state"] == "ready")
        },
    );
    assert!(alive(recorded_pids(&pids)[1]));
    let answer = current_time(&gateway.url());
    assert!(result_text(&answer).contains("UTC"), "{answer}");
}

#[test]
fn frozen_stdio_server_is_found_unresponsive_killed_and_replaced_and_calls_fail_fast() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let pids = scratch.path().join("pids");
    let config = write_config(&recorded_server(
        "time",
        &pids,
        &venv_bin("mcp-server-time"),
        "ping_s = 1\nping_misses = 2\n",
    ));
    let gateway = Gateway::start(config);
    let answer = current_time(&gateway.url());
    assert!(result_text(&answer).contains("UTC"), "{answer}");
    let first = recorded_pids(&pids);
    assert_eq!(first.len(), 1, "{first:?}");

    signal(first[0], "STOP");
    let url = gateway.url();
    let started = Instant::now();
    let call = std::thread::spawn(move || (current_time(&url), started.elapsed()));
    wait_until(
        "/healthz to say the server is unresponsive",
        Duration::from_secs(20),
        || {
            gateway
                .health()
                .is_some_and(|h| server(&h, "time")["state"] == "unresponsive")
        },
    );
    let (answer, took) = call.join().expect("the call thread");
    eprintln!("call on a frozen server failed after {took:?}: {answer}");
    // The server's timeout is 30 s; the call fails as soon as the misses are counted.
    assert!(took < Duration::from_secs(15), "the call took {took:?}");
    assert_eq!(answer["isError"], true, "{answer}");
    assert!(result_text(&answer).contains("unresponsive"), "{answer}");

    wait_until(
        "the frozen process to be killed",
        Duration::from_secs(10),
        || !alive(first[0]),
    );
    wait_until("a new process to serve", Duration::from_secs(30), || {
        recorded_pids(&pids).len() == 2
            && gateway
                .health()
                .is_some_and(|h| server(&h, "time")["state"] == "ready")
    });
    let answer = current_time(&gateway.url());
    assert!(result_text(&answer).contains("UTC"), "{answer}");
    let log = gateway.log_text();
    assert!(log.contains("upstream unresponsive"), "{log}");
}

#[test]
fn a_server_crashing_on_import_says_why_in_its_own_words() {
    let config = write_config(&format!(
        "[[servers]]\nname = \"broken\"\ntransport = {{ type = \"stdio\", command = {:?}, args = [\"-c\", \"import mcpgw_no_such_module\"] }}\n",
        venv_bin("python")
    ));
    let listed = mcpgw_in(&config.path, &["servers", "list", "--json"]);
    assert!(
        !listed.status.success(),
        "a failed server fails the listing"
    );
    let servers: Value = serde_json::from_slice(&listed.stdout).expect("json");
    let reason = servers[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("ModuleNotFoundError: No module named 'mcpgw_no_such_module'"),
        "{reason}"
    );
    assert!(reason.contains("exit status 1"), "{reason}");
    assert!(
        text(&listed.stderr).contains("1 of 1 servers failed: broken"),
        "{}",
        text(&listed.stderr)
    );

    let tested = mcpgw_in(&config.path, &["servers", "test", "broken"]);
    assert!(!tested.status.success());
    let stderr = text(&tested.stderr);
    assert!(stderr.contains("ModuleNotFoundError"), "{stderr}");
    assert!(stderr.contains("exit status 1"), "{stderr}");
}

#[test]
fn servers_test_prints_its_own_message_and_no_raw_worker_error() {
    let port = free_port();
    let config = write_config(&format!(
        "[[servers]]\nname = \"gone\"\ntimeout_s = 5\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{port}/mcp\" }}\n"
    ));
    let tested = Command::new(mcpgw())
        .args(["servers", "test", "gone", "--config"])
        .arg(&config.path)
        .env_remove("RUST_LOG")
        .output()
        .expect("mcpgw runs");
    assert!(!tested.status.success());
    let stderr = text(&tested.stderr);
    assert!(
        stderr.starts_with("error: server 'gone' failed"),
        "{stderr}"
    );
    assert!(!stderr.contains("worker quit"), "{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
}

#[test]
#[cfg(target_os = "linux")]
fn stdio_child_dies_with_a_gateway_killed_outright() {
    // A gateway killed with SIGKILL runs no shutdown code, and its stdio children live in
    // process groups of their own, so killing the gateway's group does not reach them either.
    // Most servers exit when their stdin closes; server-everything with its subscriber-update
    // timer running does not, and before PR_SET_PDEATHSIG it lived on, re-parented to PID 1.
    let scratch = tempfile::tempdir().expect("tempdir");
    let pids = scratch.path().join("pids");
    let config = write_config(&format!(
        "{PASSTHROUGH}{}",
        recorded_server(
            "everything",
            &pids,
            &format!("node {} stdio", everything_js()),
            "",
        )
    ));
    let mut gateway = Gateway::start(config);
    let child = recorded_pids(&pids);
    assert_eq!(child.len(), 1, "{child:?}");
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([{"op": "call_tool", "name": "everything__toggle-subscriber-updates", "arguments": {}}]),
    );
    assert_eq!(report["steps"][0]["isError"], false, "{report}");
    assert!(alive(child[0]));
    signal(gateway.proc.pid(), "KILL");
    let _ = gateway.proc.child.wait();
    let killed = Instant::now();
    while alive(child[0]) && killed.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let survived = alive(child[0]);
    if survived {
        // Not left behind for the next test run, whatever the verdict.
        signal(child[0], "KILL");
    }
    assert!(
        !survived,
        "the stdio child outlived its killed gateway by 5 s"
    );
}
