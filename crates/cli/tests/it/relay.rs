//! The protocol beyond request and result, through the gateway, with the real Python MCP client
//! in both eras: progress, elicitation and sampling of a legacy upstream (server-everything over
//! stdio), questions of a 2026-07-28 upstream (`input_required`), cancellation (a client's, and
//! the gateway's own timeout) reaching the upstream, list changes reaching connected clients
//! and search, and upstream log messages reaching the caller at its level.
//! `tests/fixtures/relay_server.py` leaves traces (files) for what only the upstream can see.

use std::{path::Path, time::Duration};

use serde_json::{Value, json};

use crate::harness::*;

/// TOML for the relay fixture under `name`, leaving its traces in `traces`, with `extra` lines.
fn relay_server(name: &str, traces: &Path, extra: &str) -> String {
    format!(
        "[[servers]]\nname = \"{name}\"\n{extra}transport = {{ type = \"stdio\", command = {:?}, args = [{:?}, {:?}] }}\n",
        venv_bin("python"),
        repo_root()
            .join("tests/fixtures/relay_server.py")
            .display()
            .to_string(),
        traces.display().to_string()
    )
}

/// Runs the Python client against `gateway` with extra driver options.
fn client(gateway: &Gateway, options: &[&str], era: &str, script: Value) -> Value {
    let url = gateway.url();
    let mut target = vec!["--url", url.as_str()];
    target.extend_from_slice(options);
    py_client(&target, era, script)
}

fn names(listed: &Value) -> Vec<String> {
    listed
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the gateway lists `tool` (server-everything adds its elicitation and sampling
/// tools right after the handshake, then says its list changed).
fn wait_for_tool(gateway: &Gateway, tool: &str) {
    wait_until(
        &format!("{tool} in the catalog"),
        Duration::from_secs(60),
        || {
            let report = client(gateway, &[], "legacy", json!([{"op": "list_tools"}]));
            names(&report["steps"][0]).iter().any(|name| name == tool)
        },
    );
}

fn everything_gateway() -> Gateway {
    let gateway = Gateway::start(write_config(&format!(
        "{PASSTHROUGH}{}",
        everything_stdio_server("everything")
    )));
    wait_for_tool(&gateway, "everything__trigger-sampling-request");
    gateway
}

/// Progress, a form elicitation and a sampling request of server-everything, for one era.
fn progress_elicitation_and_sampling(era: &str) {
    let gateway = everything_gateway();
    let report = client(
        &gateway,
        &[
            "--elicit",
            r#"form:{"name": "Ada Lovelace", "check": true}"#,
            "--sample",
            "sampled by the test client",
        ],
        era,
        json!([
            {"op": "call_tool", "name": "everything__trigger-long-running-operation",
             "arguments": {"duration": 1, "steps": 3}, "progress": true},
            {"op": "call_tool", "name": "everything__trigger-elicitation-request", "arguments": {}},
            {"op": "call_tool", "name": "everything__trigger-sampling-request",
             "arguments": {"prompt": "say something", "maxTokens": 20}},
        ]),
    );
    let steps = &report["steps"];

    let long = &steps[0];
    assert_eq!(long["isError"], false, "{report}");
    assert!(
        result_text(long).contains("Long running operation completed"),
        "{report}"
    );
    let progress: Vec<(f64, Option<f64>)> = long["progress"]
        .as_array()
        .expect("progress recorded")
        .iter()
        .map(|p| (p["progress"].as_f64().unwrap_or(-1.0), p["total"].as_f64()))
        .collect();
    assert_eq!(
        progress,
        [(1.0, Some(3.0)), (2.0, Some(3.0)), (3.0, Some(3.0))],
        "{report}"
    );

    let elicited = &steps[1];
    assert_eq!(elicited["isError"], false, "{report}");
    let text = result_text(elicited);
    assert!(text.contains("- Name: Ada Lovelace"), "{report}");
    assert!(text.contains("- Agreed to terms: true"), "{report}");
    let elicitations = report["elicitations"].as_array().expect("recorded");
    assert_eq!(elicitations.len(), 1, "{report}");
    assert_eq!(elicitations[0]["mode"], "form");
    assert_eq!(
        elicitations[0]["message"],
        "Please provide inputs for the following fields:"
    );

    let sampled = &steps[2];
    assert_eq!(sampled["isError"], false, "{report}");
    assert!(
        result_text(sampled).contains("sampled by the test client"),
        "{report}"
    );
    let samplings = report["samplings"].as_array().expect("recorded");
    assert_eq!(samplings.len(), 1, "{report}");
    assert!(
        samplings[0]["messages"][0]
            .as_str()
            .is_some_and(|m| m.contains("say something")),
        "{report}"
    );
}

#[test]
fn legacy_client_gets_progress_and_answers_elicitation_and_sampling() {
    progress_elicitation_and_sampling("legacy");
}

#[test]
fn modern_client_gets_progress_and_answers_elicitation_and_sampling() {
    progress_elicitation_and_sampling("modern");
}

#[test]
fn a_client_without_sampling_leaves_the_upstream_a_clear_error() {
    let gateway = everything_gateway();
    for era in ["legacy", "modern"] {
        let report = client(
            &gateway,
            &[],
            era,
            json!([{"op": "call_tool", "name": "everything__trigger-sampling-request",
                    "arguments": {"prompt": "x"}}]),
        );
        let text = result_text(&report["steps"][0]);
        assert!(
            text.contains(
                "sampling/createMessage is not supported by the client calling through mcpgw"
            ),
            "{era}: {report}"
        );
    }
}

#[test]
fn questions_of_a_modern_upstream_reach_clients_of_both_eras() {
    let traces = tempfile::tempdir().expect("tempdir");
    let gateway = Gateway::start(write_config(&format!(
        "{PASSTHROUGH}{}",
        relay_server("relay", traces.path(), "")
    )));
    for era in ["legacy", "modern"] {
        let report = client(
            &gateway,
            &["--elicit", r#"form:{"name": "Grace"}"#],
            era,
            json!([{"op": "call_tool", "name": "relay__greet", "arguments": {}}]),
        );
        let step = &report["steps"][0];
        assert_eq!(step["isError"], false, "{era}: {report}");
        assert!(
            result_text(step).contains("Hello, Grace!"),
            "{era}: {report}"
        );
        assert_eq!(
            report["elicitations"][0]["message"], "What is your name?",
            "{era}: {report}"
        );
    }
    // Without elicitation the client cannot answer: the upstream is told (the request's
    // client capabilities) and refuses with -32021, which reaches the client as it is.
    let report = client(
        &gateway,
        &[],
        "modern",
        json!([{"op": "call_tool", "name": "relay__greet", "arguments": {}}]),
    );
    let step = &report["steps"][0];
    assert_eq!(step["error"]["code"], -32021, "{report}");
    assert_eq!(
        step["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"form": {}}}),
        "{report}"
    );
}

/// The `(level, logger, data)` of each log message a client got.
fn logs(report: &Value) -> Vec<(String, String, String)> {
    let field = |log: &Value, key: &str| log[key].as_str().unwrap_or("-").to_owned();
    report["logs"]
        .as_array()
        .expect("logs recorded")
        .iter()
        .map(|log| {
            (
                field(log, "level"),
                field(log, "logger"),
                field(log, "data"),
            )
        })
        .collect()
}

#[test]
fn upstream_log_messages_reach_the_caller_at_its_level_only() {
    let traces = tempfile::tempdir().expect("tempdir");
    let gateway = Gateway::start(write_config(&format!(
        "{PASSTHROUGH}{}",
        relay_server("relay", traces.path(), "")
    )));
    let chatty = json!({"op": "call_tool", "name": "relay__chatty", "arguments": {}});
    let owned = |(level, logger, data): (&str, &str, &str)| {
        (level.to_owned(), logger.to_owned(), data.to_owned())
    };
    // Legacy: nothing before `logging/setLevel`, then `info` and above, named by server.
    // rmcp sends a legacy session's log messages on its GET stream, which is not ordered
    // with the call's response: wait for the two expected (any earlier ones would come first).
    let report = client(
        &gateway,
        &[],
        "legacy",
        json!([chatty, {"op": "set_level", "level": "info"}, chatty, {"op": "wait_logs", "count": 2}]),
    );
    assert_eq!(report["steps"][3], json!({"count": 2}), "{report}");
    assert!(
        result_text(&report["steps"][0]).ends_with("chatted"),
        "{report}"
    );
    assert_eq!(report["steps"][1], json!({}), "{report}");
    assert_eq!(
        logs(&report),
        [
            ("info", "relay/chatty", "info note"),
            ("warning", "relay", "warning note")
        ]
        .map(owned),
        "{report}"
    );
    // 2026-07-28: the request's `_meta` level; `logging/setLevel` is gone.
    let report = client(
        &gateway,
        &["--log-level", "warning"],
        "modern",
        json!([chatty, {"op": "set_level", "level": "debug"}]),
    );
    assert!(
        result_text(&report["steps"][0]).ends_with("chatted"),
        "{report}"
    );
    assert_eq!(report["steps"][1]["error"]["code"], -32601, "{report}");
    assert_eq!(
        logs(&report),
        [("warning", "relay", "warning note")].map(owned),
        "{report}"
    );
    let report = client(
        &gateway,
        &[],
        "modern",
        json!([chatty, {"op": "set_level", "level": "debug"}]),
    );
    assert_eq!(logs(&report), [], "no level, no logs: {report}");
}

#[test]
fn a_cancelled_call_is_cancelled_upstream_in_both_eras() {
    for era in ["legacy", "modern"] {
        let traces = tempfile::tempdir().expect("tempdir");
        let gateway = Gateway::start(write_config(&format!(
            "{PASSTHROUGH}{}",
            relay_server("relay", traces.path(), "")
        )));
        let report = client(
            &gateway,
            &[],
            era,
            json!([{"op": "call_tool", "name": "relay__slow", "arguments": {"seconds": 60},
                    "cancel_on_progress": true}]),
        );
        let step = &report["steps"][0];
        assert_eq!(step["cancelled"], true, "{era}: {report}");
        assert_eq!(step["progress"][0]["message"], "halfway", "{era}: {report}");
        let cancelled = traces.path().join("cancelled");
        wait_until(
            &format!("the upstream to see the {era} cancellation"),
            Duration::from_secs(10),
            || cancelled.exists(),
        );
        assert!(traces.path().join("started").exists());
        assert!(!traces.path().join("finished").exists());
    }
}

#[test]
fn a_call_timing_out_at_the_gateway_is_cancelled_upstream() {
    let traces = tempfile::tempdir().expect("tempdir");
    let gateway = Gateway::start(write_config(&format!(
        "{PASSTHROUGH}{}",
        relay_server("relay", traces.path(), "timeout_s = 4\n")
    )));
    // A slow start under load can leave the server reconnecting after the gateway settles.
    wait_for_tool(&gateway, "relay__slow");
    let report = client(
        &gateway,
        &[],
        "legacy",
        json!([{"op": "call_tool", "name": "relay__slow", "arguments": {"seconds": 60}}]),
    );
    let step = &report["steps"][0];
    assert_eq!(step["isError"], true, "{report}");
    assert!(
        result_text(step).contains("'relay' did not answer within 4s"),
        "{report}"
    );
    let cancelled = traces.path().join("cancelled");
    wait_until(
        "the upstream to see the timeout's cancellation",
        Duration::from_secs(10),
        || cancelled.exists(),
    );
}

#[test]
fn connected_clients_of_both_eras_hear_of_a_new_upstream_tool() {
    let traces = tempfile::tempdir().expect("tempdir");
    let gateway = Gateway::start(write_config(&format!(
        "{PASSTHROUGH}{}",
        relay_server("relay", traces.path(), "")
    )));
    for (era, opening, tool) in [
        ("legacy", json!({"op": "list_tools"}), "fresh_legacy"),
        ("modern", json!({"op": "listen"}), "fresh_modern"),
    ] {
        let report = client(
            &gateway,
            &[],
            era,
            json!([
                opening,
                {"op": "call_tool", "name": "relay__add_tool", "arguments": {"name": tool}},
                {"op": "wait_notification", "method": "notifications/tools/list_changed"},
                {"op": "list_tools"},
            ]),
        );
        let steps = &report["steps"];
        assert_eq!(steps[1]["isError"], false, "{era}: {report}");
        assert_eq!(
            steps[2]["method"], "notifications/tools/list_changed",
            "{era}: {report}"
        );
        let listed = names(&steps[3]);
        assert!(
            listed.contains(&format!("relay__{tool}")),
            "{era}: the notification came before the new list: {report}"
        );
        if era == "modern" {
            assert_eq!(steps[0]["honored"]["toolsListChanged"], true, "{report}");
        }
    }
}

/// The `_meta` a 2026-07-28 request must carry.
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "relay-test", "version": "0"},
    })
}

fn raw_call(gateway: &Gateway, name: &str, arguments: Value) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": name, "arguments": arguments, "_meta": modern_meta()}});
    let (status, text) = gateway.post_raw(body.to_string());
    assert_eq!(status, 200, "{text}");
    text
}

/// The upstream's `list_changed` reaches the search index: the server's periodic refresh is an
/// hour away, so only the notification can make the tool findable within the bound. (The bound
/// is generous for a loaded CI machine; the refresh itself takes milliseconds.)
#[test]
fn search_finds_a_new_upstream_tool_once_its_server_says_the_list_changed() {
    let traces = tempfile::tempdir().expect("tempdir");
    let gateway = Gateway::start(write_config(&relay_server("relay", traces.path(), "")));
    let search = |gateway: &Gateway| {
        raw_call(
            gateway,
            "search_tools",
            json!({"query": "zeppelin", "top_k": 3}),
        )
    };
    assert!(!search(&gateway).contains("relay__zeppelin"));
    let added = raw_call(
        &gateway,
        "call_tool",
        json!({"name": "relay__add_tool", "arguments": {"name": "zeppelin"}}),
    );
    assert!(added.contains("added zeppelin"), "{added}");
    wait_until(
        "search to find the new tool",
        Duration::from_secs(10),
        || search(&gateway).contains("relay__zeppelin"),
    );
}
