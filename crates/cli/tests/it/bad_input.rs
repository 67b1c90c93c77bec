//! Bad input on the HTTP front end: each gets a clear JSON-RPC error and the gateway keeps
//! serving.

use serde_json::{Value, json};

use crate::harness::*;

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bad-input-test", "version": "0"}
    })
}

fn request(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// The JSON-RPC message in a response body, whether sent as JSON or as one SSE event.
fn message(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str(body) {
        return value;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("result").is_some() || v.get("error").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC message in {body:?}"))
}

#[test]
fn bad_requests_get_clear_errors_and_the_gateway_keeps_serving() {
    let config = write_config(&everything_stdio_server("everything"));
    let gateway = Gateway::start(config);

    let (status, body) = gateway.post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"#);
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        message(&body)["error"]["code"],
        -32700,
        "malformed JSON: {body}"
    );

    let (_, body) = gateway.post_raw(request(2, "tools/frobnicate", json!({})));
    let reply = message(&body);
    assert_eq!(reply["error"]["code"], -32601, "unknown method: {reply}");

    let (_, body) = gateway.post_raw(request(
        3,
        "tools/call",
        json!({"name": "everything__ecko", "arguments": {"message": "x"}}),
    ));
    let reply = message(&body);
    assert_eq!(reply["error"]["code"], -32602, "unknown tool: {reply}");
    let text = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("unknown tool 'everything__ecko'"), "{text}");
    assert!(
        text.contains("everything__echo"),
        "closest names listed: {text}"
    );

    let (_, body) = gateway.post_raw(request(
        4,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "everything__echo", "arguments": "hi"}}),
    ));
    let reply = message(&body);
    assert_eq!(
        reply["error"]["code"], -32602,
        "arguments not an object: {reply}"
    );
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("must be a JSON object")
    );

    let (_, body) = gateway.post_raw(request(
        5,
        "tools/call",
        json!({"name": "call_tool", "arguments": [1, 2]}),
    ));
    let reply = message(&body);
    assert!(
        reply.get("error").is_some(),
        "top-level arguments not an object: {reply}"
    );

    // Arguments that break the tool's input schema: a tool error naming each problem, and
    // the upstream never sees the call.
    let (_, body) = gateway.post_raw(request(
        8,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "everything__get-sum", "arguments": {"a": "one"}}}),
    ));
    let reply = message(&body);
    assert_eq!(
        reply["result"]["isError"], true,
        "invalid arguments: {reply}"
    );
    let text = result_text(&reply["result"]);
    assert!(
        text.contains("invalid arguments for 'everything__get-sum'"),
        "{text}"
    );
    assert!(
        text.contains("/a: \"one\" is not of type \"number\""),
        "{text}"
    );
    assert!(
        text.contains("\"b\""),
        "the missing property is named: {text}"
    );

    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{{"pad":"{}"}}}}"#,
        "x".repeat(6 * 1024 * 1024)
    );
    let (status, body) = gateway.post_raw(huge);
    assert_eq!(
        status,
        413,
        "oversized body: {}",
        &body[..body.len().min(200)]
    );

    // Unharmed: a normal call still works.
    let (status, body) = gateway.post_raw(request(
        7,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "everything__echo", "arguments": {"message": "ok"}}}),
    ));
    assert_eq!(status, 200, "{body}");
    let reply = message(&body);
    assert!(
        result_text(&reply["result"]).contains("Echo: ok"),
        "{reply}"
    );
}
