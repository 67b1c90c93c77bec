//! Human approval of risky calls, against the real filesystem server (whose `write_file` is
//! annotated `destructiveHint: true`) and the real Python MCP client:
//! - through form elicitation, answered approve, approve with edited arguments, and reject, in
//!   the 2025-11-25 era (an `elicitation/create` request) and in 2026-07-28 (an
//!   `input_required` result and a retry);
//! - out of band for a client without elicitation: `mcpgw approvals` and the admin endpoint,
//!   with a foreign client's decision refused, a second decision refused, and the timeout.
//!
//! That the file was (or was not) written is the proof the tool ran (or did not).

use std::{path::Path, thread, time::Duration};

use serde_json::{Value, json};

use crate::harness::*;

pub(crate) fn filesystem_server(name: &str, root: &Path) -> String {
    let js = peers().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    format!(
        "[[servers]]\nname = \"{name}\"\ntransport = {{ type = \"stdio\", command = \"node\", args = [{:?}, {:?}] }}\n",
        js.display().to_string(),
        root.display().to_string()
    )
}

/// A gateway in front of the filesystem server on a fresh directory, with `extra` config.
fn setup(extra: &str) -> (tempfile::TempDir, ConfigDir) {
    let root = tempfile::tempdir().expect("tempdir");
    let root_path = root.path().canonicalize().expect("canonical root");
    let config = write_config(&format!("{}{extra}", filesystem_server("fs", &root_path)));
    (root, config)
}

fn write_call(path: &Path, content: &str) -> Value {
    json!({"op": "call_tool", "name": "call_tool", "arguments": {
        "name": "fs__write_file",
        "arguments": {"path": path.display().to_string(), "content": content}
    }})
}

fn pending(config: &Path) -> Vec<Value> {
    let listed = mcpgw_in(config, &["approvals", "list", "--json"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    serde_json::from_slice::<Vec<Value>>(&listed.stdout).expect("json")
}

#[test]
fn elicitation_approves_edits_or_rejects_in_both_eras() {
    let (root, config) = setup("");
    let dir = root.path().canonicalize().expect("root");
    let gateway = Gateway::start(config);
    let url = gateway.url();

    // Approve as is (2025-11-25: an elicitation/create request on the session).
    let approve = r#"form:{"decision": "approve"}"#;
    let report = py_client(
        &["--url", &url, "--elicit", approve],
        "legacy",
        json!([write_call(&dir.join("a.txt"), "one")]),
    );
    assert_eq!(report["steps"][0]["isError"], false, "{report}");
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).expect("a.txt"),
        "one"
    );
    let asked = &report["elicitations"][0];
    assert_eq!(asked["mode"], "form", "{report}");
    let message = asked["message"].as_str().expect("message");
    assert!(
        message.contains("fs__write_file") && message.contains("a.txt"),
        "{message}"
    );
    assert!(message.contains("destructive"), "{message}");
    assert_eq!(
        asked["schema"]["properties"]["decision"]["enum"],
        json!(["approve", "reject"]),
        "{report}"
    );

    // Approve with edited arguments: the edited call runs, the original does not.
    let edited = json!({"path": dir.join("b.txt").display().to_string(), "content": "edited"});
    let answer = format!(
        "form:{}",
        json!({"decision": "approve", "arguments": edited.to_string()})
    );
    let report = py_client(
        &["--url", &url, "--elicit", &answer],
        "legacy",
        json!([write_call(&dir.join("a2.txt"), "original")]),
    );
    assert_eq!(report["steps"][0]["isError"], false, "{report}");
    assert_eq!(
        std::fs::read_to_string(dir.join("b.txt")).expect("b.txt"),
        "edited"
    );
    assert!(!dir.join("a2.txt").exists());

    // Reject, and decline: nothing runs.
    for answer in [r#"form:{"decision": "reject"}"#, "decline"] {
        let report = py_client(
            &["--url", &url, "--elicit", answer],
            "legacy",
            json!([write_call(&dir.join("c.txt"), "no")]),
        );
        let step = &report["steps"][0];
        assert_eq!(step["isError"], true, "{report}");
        assert!(
            result_text(step).contains("was rejected by local"),
            "{report}"
        );
        assert!(!dir.join("c.txt").exists());
    }

    // Arguments that are not an object (edited to null) are refused; nothing runs.
    let report = py_client(
        &[
            "--url",
            &url,
            "--elicit",
            r#"form:{"decision": "approve", "arguments": "null"}"#,
        ],
        "legacy",
        json!([write_call(&dir.join("d.txt"), "no")]),
    );
    assert_eq!(report["steps"][0]["isError"], true, "{report}");
    assert!(
        result_text(&report["steps"][0]).contains("JSON object"),
        "{report}"
    );
    assert!(!dir.join("d.txt").exists());

    // 2026-07-28: an input_required result carrying the form, answered by the retry.
    let report = py_client(
        &["--url", &url, "--elicit", approve],
        "modern",
        json!([write_call(&dir.join("e.txt"), "modern")]),
    );
    assert!(
        report["era"].as_str().is_some_and(|e| e >= "2026-07-28"),
        "{report}"
    );
    assert_eq!(report["steps"][0]["isError"], false, "{report}");
    assert_eq!(
        std::fs::read_to_string(dir.join("e.txt")).expect("e.txt"),
        "modern"
    );
    assert_eq!(report["elicitations"][0]["mode"], "form", "{report}");
    let report = py_client(
        &["--url", &url, "--elicit", r#"form:{"decision": "reject"}"#],
        "modern",
        json!([write_call(&dir.join("f.txt"), "no")]),
    );
    assert_eq!(report["steps"][0]["isError"], true, "{report}");
    assert!(!dir.join("f.txt").exists());

    // Every decision is on record.
    let all = mcpgw_in(
        &gateway_config(&gateway),
        &["approvals", "list", "--all", "--json"],
    );
    let all: Vec<Value> = serde_json::from_slice(&all.stdout).expect("json");
    assert!(all.len() >= 7, "{all:?}");
    assert!(all.iter().all(|a| a["status"] != "pending"), "{all:?}");
}

/// The config file of a running gateway (the harness keeps its directory alive).
fn gateway_config(gateway: &Gateway) -> std::path::PathBuf {
    gateway.log.with_file_name("mcpgw.toml")
}

#[test]
fn without_elicitation_the_call_waits_for_an_operator_or_times_out() {
    let (root, config) = setup(
        r#"
[[profiles]]
name = "users"
clients = ["alice", "bob"]
"#,
    );
    let dir = root.path().canonicalize().expect("root");
    let config_path = config.path.clone();
    let added = |name: &str| {
        let out = mcpgw_in(&config_path, &["clients", "add", name]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    };
    let alice = added("alice");
    let bob = added("bob");
    let gateway = Gateway::start(config);
    let url = gateway.url();
    let admin = |key: &str, method: &str, path: &str, body: Option<Value>| {
        let client = reqwest::blocking::Client::new();
        let url = format!("http://127.0.0.1:{}{path}", gateway.port);
        let request = match method {
            "GET" => client.get(url),
            _ => client.post(url),
        }
        .header("authorization", format!("Bearer {key}"));
        // A state-changing admin request always declares JSON (the guard's CSRF rule).
        let request = match (method, body) {
            ("GET", _) => request,
            (_, body) => request.json(&body.unwrap_or_else(|| json!({}))),
        };
        let response = request.send().expect("admin endpoint");
        let status = response.status().as_u16();
        (status, response.json::<Value>().unwrap_or(Value::Null))
    };

    // Alice's client has no elicitation: its call waits.
    let caller = {
        let url = url.clone();
        let alice = alice.clone();
        let call = write_call(&dir.join("waited.txt"), "original");
        thread::spawn(move || {
            py_client(
                &[
                    "--url",
                    &url,
                    "--header",
                    &format!("Authorization: Bearer {alice}"),
                ],
                "legacy",
                json!([call]),
            )
        })
    };
    let mut waiting = Vec::new();
    wait_until(
        "the call to wait for approval",
        Duration::from_secs(30),
        || {
            waiting = pending(&config_path);
            !waiting.is_empty()
        },
    );
    let id = waiting[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(waiting[0]["principal"], "client:alice", "{waiting:?}");
    assert_eq!(waiting[0]["tool"], "fs__write_file", "{waiting:?}");

    // Bob sees none of it and may not decide it; Alice sees her own.
    let (status, body) = admin(&bob, "GET", "/admin/approvals", None);
    assert_eq!(
        (status, body["pending"].clone()),
        (200, json!([])),
        "{body}"
    );
    let (status, body) = admin(
        &bob,
        "POST",
        &format!("/admin/approvals/{id}/approve"),
        None,
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("only the client that made the call")),
        "{body}"
    );
    let (status, body) = admin(&alice, "GET", "/admin/approvals", None);
    assert_eq!(status, 200);
    assert_eq!(body["pending"][0]["id"], id.as_str(), "{body}");

    // Replacement arguments must be an object.
    let refused = mcpgw_in(
        &config_path,
        &["approvals", "approve", &id, "--args", "null"],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("JSON object"),
        "{}",
        text(&refused.stderr)
    );

    // The operator approves with other arguments; a second decision is refused.
    let replaced = json!({"path": dir.join("approved.txt").display().to_string(), "content": "by the operator"});
    let approved = mcpgw_in(
        &config_path,
        &["approvals", "approve", &id, "--args", &replaced.to_string()],
    );
    assert!(approved.status.success(), "{}", text(&approved.stderr));
    let again = mcpgw_in(&config_path, &["approvals", "reject", &id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains(&format!("approval '{id}' was already approved by local")),
        "{}",
        text(&again.stderr)
    );
    let (status, body) = admin(
        &alice,
        "POST",
        &format!("/admin/approvals/{id}/reject"),
        None,
    );
    assert_eq!(status, 409, "{body}");

    let report = caller.join().expect("caller thread");
    assert_eq!(report["steps"][0]["isError"], false, "{report}");
    assert_eq!(
        std::fs::read_to_string(dir.join("approved.txt")).expect("approved.txt"),
        "by the operator"
    );
    assert!(!dir.join("waited.txt").exists());

    // The caller may decide its own call through the admin endpoint.
    let caller = {
        let url = url.clone();
        let alice = alice.clone();
        let call = write_call(&dir.join("own.txt"), "mine");
        thread::spawn(move || {
            py_client(
                &[
                    "--url",
                    &url,
                    "--header",
                    &format!("Authorization: Bearer {alice}"),
                ],
                "legacy",
                json!([call]),
            )
        })
    };
    wait_until("the second call to wait", Duration::from_secs(30), || {
        waiting = pending(&config_path);
        !waiting.is_empty()
    });
    let id = waiting[0]["id"].as_str().expect("id").to_owned();
    let (status, body) = admin(
        &alice,
        "POST",
        &format!("/admin/approvals/{id}/reject"),
        Some(json!({"reason": "not today"})),
    );
    assert_eq!(status, 200, "{body}");
    let report = caller.join().expect("caller thread");
    let step = &report["steps"][0];
    assert_eq!(step["isError"], true, "{report}");
    assert!(
        result_text(step).contains("rejected by client:alice (not today)"),
        "{report}"
    );
    assert!(!dir.join("own.txt").exists());
}

#[test]
fn an_undecided_call_fails_after_the_timeout() {
    let (root, config) = setup("\n[approval]\ntimeout_s = 2\n");
    let dir = root.path().canonicalize().expect("root");
    let config_path = config.path.clone();
    let gateway = Gateway::start(config);
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([write_call(&dir.join("never.txt"), "no")]),
    );
    let step = &report["steps"][0];
    assert_eq!(step["isError"], true, "{report}");
    let message = result_text(step);
    assert!(message.contains("no decision came within 2 s"), "{message}");
    assert!(message.contains("mcpgw approvals approve"), "{message}");
    assert!(!dir.join("never.txt").exists());
    let all = mcpgw_in(&config_path, &["approvals", "list", "--all", "--json"]);
    let all: Vec<Value> = serde_json::from_slice(&all.stdout).expect("json");
    assert_eq!(all[0]["status"], "expired", "{all:?}");
    let late = mcpgw_in(
        &config_path,
        &["approvals", "approve", all[0]["id"].as_str().expect("id")],
    );
    assert_eq!(late.status.code(), Some(2));
    assert!(
        text(&late.stderr).contains("expired"),
        "{}",
        text(&late.stderr)
    );
}
