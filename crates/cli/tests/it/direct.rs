//! The direct path for plain tool calls of a legacy HTTP session (`gateway::http::direct`),
//! driven with raw HTTP on one keep-alive connection as SDK clients use it: calls answered
//! there say so in `/metrics` and read exactly as the session path's answers; a client that
//! may be asked something mid-call, or a call with a progress token, takes the session path;
//! a busy session does not idle out while an idle one still does; a client's cancellation
//! reaches the upstream; and a deleted session's calls are refused.

use std::{path::Path, time::Duration};

use serde_json::{Value, json};

use crate::harness::*;

/// One legacy session on one keep-alive connection.
struct Session {
    http: reqwest::blocking::Client,
    url: String,
    id: String,
}

impl Session {
    /// `initialize` (2025-11-25) with `capabilities`, then `notifications/initialized`.
    fn open(gateway: &Gateway, capabilities: Value) -> Session {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let response = http
            .post(gateway.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": capabilities,
                    "clientInfo": {"name": "raw", "version": "0"}}})
                .to_string(),
            )
            .send()
            .expect("initialize");
        assert_eq!(response.status(), 200);
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .expect("session id")
            .to_owned();
        let _ = response.text();
        let session = Session {
            http,
            url: gateway.url(),
            id,
        };
        let (status, _, _) =
            session.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(status, 202);
        session
    }

    /// POSTs `message` on the session: status, content type, body.
    fn post(&self, message: &Value) -> (u16, String, String) {
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &self.id)
            .body(message.to_string())
            .send()
            .expect("gateway reachable");
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, kind, response.text().unwrap_or_default())
    }

    fn call(
        &self,
        id: u64,
        name: &str,
        arguments: Value,
        meta: Option<Value>,
    ) -> (u16, String, String) {
        let mut params = json!({"name": name, "arguments": arguments});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        self.post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
    }

    fn delete(&self) -> u16 {
        self.http
            .delete(&self.url)
            .header("mcp-session-id", &self.id)
            .send()
            .expect("gateway reachable")
            .status()
            .as_u16()
    }
}

/// The value of the series `name` (no labels) in `/metrics`.
fn metric(gateway: &Gateway, name: &str) -> f64 {
    let token = std::fs::read_to_string(gateway.log.with_file_name("admin-token"))
        .expect("admin token file");
    let text = reqwest::blocking::Client::new()
        .get(format!("http://127.0.0.1:{}/metrics", gateway.port))
        .bearer_auth(token.trim())
        .send()
        .and_then(|r| r.text())
        .expect("metrics");
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in\n{text}"))
}

const DIRECT: &str = "mcpgw_tool_calls_direct_total";

/// Calls `tool` until one is answered on the direct path, and returns the counter then. A
/// session is registered for it by `notifications/initialized`, which rmcp hands to the
/// handler after answering it: a call made at once may still take the session path.
fn until_direct(gateway: &Gateway, session: &Session, tool: &str, arguments: Value) -> f64 {
    let before = metric(gateway, DIRECT);
    let mut id = 1000;
    wait_until("a call on the direct path", Duration::from_secs(10), || {
        id += 1;
        let (status, _, _) = session.call(id, tool, arguments.clone(), None);
        status == 200 && metric(gateway, DIRECT) > before
    });
    metric(gateway, DIRECT)
}

fn everything_gateway(extra: &str) -> Gateway {
    Gateway::start(write_config(&format!(
        "{PASSTHROUGH}{extra}{}",
        everything_stdio_server("everything")
    )))
}

#[test]
fn plain_calls_are_answered_directly_and_read_as_the_session_path_answers() {
    let gateway = everything_gateway("");
    let plain = Session::open(&gateway, json!({}));
    let echo = json!({"message": "hello"});
    let base = until_direct(&gateway, &plain, "everything__echo", echo.clone());
    let (status, kind, direct) = plain.call(7, "everything__echo", echo.clone(), None);
    assert_eq!(
        (status, kind.as_str()),
        (200, "application/json"),
        "{direct}"
    );
    assert!(direct.contains("Echo: hello"), "{direct}");
    assert_eq!(metric(&gateway, DIRECT), base + 1.0);

    // A progress token needs the request's stream: the session path, same answer.
    let (status, kind, streamed) = plain.call(
        7,
        "everything__echo",
        echo.clone(),
        Some(json!({"progressToken": "p"})),
    );
    assert_eq!(
        (status, kind.as_str()),
        (200, "application/json"),
        "{streamed}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&streamed).expect("JSON"),
        serde_json::from_str::<Value>(&direct).expect("JSON"),
        "both paths answer alike"
    );
    // Errors too, byte for byte: an unknown tool.
    let (_, _, unknown) = plain.call(8, "everything__nope", json!({}), None);
    let (_, _, unknown_slow) = plain.call(
        8,
        "everything__nope",
        json!({}),
        Some(json!({"progressToken": 1})),
    );
    assert!(unknown.contains("everything__nope"), "{unknown}");
    assert_eq!(unknown, unknown_slow);
    assert_eq!(
        metric(&gateway, DIRECT),
        base + 2.0,
        "the two plain calls, not the tokened ones"
    );

    // A client that may be asked something mid-call keeps the session path.
    for capabilities in [json!({"elicitation": {}}), json!({"sampling": {}})] {
        let asked = Session::open(&gateway, capabilities.clone());
        let (status, _, answer) = asked.call(1, "everything__echo", echo.clone(), None);
        assert_eq!(status, 200);
        assert!(answer.contains("Echo: hello"), "{capabilities}: {answer}");
    }
    assert_eq!(metric(&gateway, DIRECT), base + 2.0);

    // So does a session that asked for log messages.
    let (status, _, _) = plain.post(&json!({"jsonrpc": "2.0", "id": 20,
        "method": "logging/setLevel", "params": {"level": "info"}}));
    assert_eq!(status, 200);
    let (_, _, answer) = plain.call(21, "everything__echo", echo, None);
    assert!(answer.contains("Echo: hello"), "{answer}");
    assert_eq!(metric(&gateway, DIRECT), base + 2.0);
}

#[test]
fn a_deleted_sessions_calls_are_refused() {
    let gateway = everything_gateway("");
    let session = Session::open(&gateway, json!({}));
    let (status, _, _) = session.call(1, "everything__echo", json!({"message": "a"}), None);
    assert_eq!(status, 200);
    assert_eq!(session.delete(), 204);
    let (status, _, body) = session.call(2, "everything__echo", json!({"message": "b"}), None);
    assert_eq!(status, 404, "{body}");
}

#[test]
fn a_busy_session_stays_open_and_an_idle_one_still_closes() {
    let gateway = everything_gateway("[limits]\nsession_idle_s = 10\n");
    let session = Session::open(&gateway, json!({}));
    let base = until_direct(
        &gateway,
        &session,
        "everything__echo",
        json!({"message": "x"}),
    );
    // Only direct calls, each taking a second upstream, for longer than the idle limit.
    let slow = json!({"duration": 1, "steps": 1});
    for id in 0..14 {
        let (status, _, body) = session.call(
            id,
            "everything__trigger-long-running-operation",
            slow.clone(),
            None,
        );
        assert_eq!(status, 200, "call {id}: {body}");
    }
    assert_eq!(metric(&gateway, DIRECT), base + 14.0);
    let (status, _, body) =
        session.post(&json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}));
    assert_eq!(
        status, 200,
        "the session path still knows the session: {body}"
    );

    // Left alone, rmcp ends it after the idle limit: the gateway counts it gone.
    wait_until("the idle session to end", Duration::from_secs(30), || {
        metric(&gateway, "mcpgw_sessions_open") == 0.0
    });
    let (status, _, body) = session.call(100, "everything__echo", json!({"message": "x"}), None);
    assert_eq!(
        status, 404,
        "idle past the limit, the session is gone: {body}"
    );
}

fn relay_gateway(traces: &Path) -> Gateway {
    Gateway::start(write_config(&format!(
        "{PASSTHROUGH}[[servers]]\nname = \"relay\"\ntransport = {{ type = \"stdio\", command = {:?}, args = [{:?}, {:?}] }}\n",
        venv_bin("python"),
        repo_root()
            .join("tests/fixtures/relay_server.py")
            .display()
            .to_string(),
        traces.display().to_string()
    )))
}

#[test]
fn a_clients_cancellation_of_a_direct_call_reaches_the_upstream() {
    let traces = tempfile::tempdir().expect("tempdir");
    let gateway = relay_gateway(traces.path());
    let session = std::sync::Arc::new(Session::open(&gateway, json!({})));
    let base = until_direct(&gateway, &session, "relay__chatty", json!({}));
    let calling = session.clone();
    let call =
        std::thread::spawn(move || calling.call(5, "relay__slow", json!({"seconds": 60}), None));
    wait_until(
        "the upstream to start the call",
        Duration::from_secs(30),
        || traces.path().join("started").exists(),
    );
    assert_eq!(metric(&gateway, DIRECT), base + 1.0);
    let (status, _, _) = session.post(&json!({"jsonrpc": "2.0",
        "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "test"}}));
    assert_eq!(status, 202);
    wait_until(
        "the upstream to see the cancellation",
        Duration::from_secs(10),
        || traces.path().join("cancelled").exists(),
    );
    let (status, _, _) = call.join().expect("call thread");
    assert_eq!(status, 200, "the call's request was answered");
    assert!(!traces.path().join("finished").exists());
}
