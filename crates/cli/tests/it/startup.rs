//! Start-up: the HTTP listener answers at once, each upstream joins the catalog when it is
//! ready, and one that never answers its handshake holds back nobody but itself.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

/// A stdio "server" that starts and never says a word: it never answers `initialize`.
fn silent_server(name: &str, timeout_s: u32) -> String {
    format!(
        "[[servers]]\nname = \"{name}\"\ntimeout_s = {timeout_s}\ntransport = {{ type = \"stdio\", command = \"sleep\", args = [\"3600\"] }}\n"
    )
}

fn server_state(health: &Value, name: &str) -> String {
    health["servers"]
        .as_array()
        .and_then(|servers| servers.iter().find(|s| s["name"] == name))
        .and_then(|s| s["state"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn listener_answers_at_once_and_ready_servers_are_searchable_while_another_hangs() {
    let config = write_config(&format!(
        "{}\n{}",
        silent_server("hang", 60),
        everything_stdio_server("everything")
    ));
    let started = Instant::now();
    let gateway = Gateway::start_listening(config, "info", |_| {});
    let first_answer = started.elapsed();
    eprintln!("time to first /healthz answer with a hanging upstream: {first_answer:?}");
    // The hanging server's timeout is 60 s; the old gateway answered nothing until then.
    assert!(
        first_answer < Duration::from_secs(10),
        "first answer after {first_answer:?}"
    );
    let health = gateway.health().expect("health");
    assert_eq!(server_state(&health, "hang"), "starting", "{health}");

    wait_until(
        "server-everything to join the catalog",
        Duration::from_secs(60),
        || {
            gateway
                .health()
                .is_some_and(|h| server_state(&h, "everything") == "ready" && h["tools"] != 0)
        },
    );
    eprintln!("server-everything searchable after {:?}", started.elapsed());
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([{"op": "call_tool", "name": "search_tools",
                "arguments": {"query": "echo a message back"}}]),
    );
    let answer = &report["steps"][0];
    let text = result_text(answer);
    assert!(text.contains("everything__echo"), "{answer}");
    assert!(
        text.contains("Still starting, so not searched yet: hang."),
        "{answer}"
    );
    assert_eq!(
        answer["structuredContent"]["starting"],
        json!(["hang"]),
        "{answer}"
    );
    let health = gateway.health().expect("health");
    assert_eq!(server_state(&health, "hang"), "starting", "{health}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the test must finish inside the hanging server's timeout"
    );
}
