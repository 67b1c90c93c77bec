//! Profiles: two clients of one gateway, each under its own profile, through the real Python
//! MCP client over HTTP. Each sees and can call only its profile's tools; a hidden tool is
//! absent from listing, search and details, refused at call time like an unknown tool, and
//! never suggested.

use serde_json::{Value, json};

use crate::harness::*;

fn names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .expect("tool list")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

const PROFILES: &str = r#"
[[profiles]]
name = "clock"
servers = ["time"]
clients = ["alice"]

[[profiles]]
name = "echo-only"
allow = ["everything__echo", "everything__get-sum"]
exposure = "passthrough"
clients = ["bob"]
"#;

#[test]
fn two_clients_with_different_profiles_see_and_call_different_tools() {
    let config = write_config(&format!(
        "{}{}{PROFILES}",
        everything_stdio_server("everything"),
        time_stdio_server("time"),
    ));
    let alice = add_client(&config.path, "alice");
    let bob = add_client(&config.path, "bob");
    let config_path = config.path.clone();

    // What each profile costs its clients, before any client connects.
    let cost = mcpgw_in(&config_path, &["tools", "--cost", "--profile", "echo-only"]);
    let cost_text = String::from_utf8_lossy(&cost.stdout);
    assert!(cost.status.success(), "{cost_text}");
    assert!(cost_text.contains("everything__echo"), "{cost_text}");
    assert!(!cost_text.contains("time__"), "{cost_text}");
    assert!(
        cost_text.contains("2 tools")
            && cost_text.contains("profile 'echo-only' (passthrough exposure)"),
        "{cost_text}"
    );
    let unknown = mcpgw_in(&config_path, &["tools", "--profile", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));

    let gateway = Gateway::start(config);
    let as_client = |key: &str, script: Value| {
        py_client(
            &[
                "--url",
                &gateway.url(),
                "--header",
                &format!("Authorization: Bearer {key}"),
            ],
            "legacy",
            script,
        )
    };

    // Alice: search mode, the time server only.
    let report = as_client(
        &alice,
        json!([
            {"op": "list_tools", "full": true},
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "echo a message back"}},
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "current time in a timezone"}},
            {"op": "call_tool", "name": "call_tool", "arguments": {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}},
            {"op": "call_tool", "name": "call_tool", "arguments": {"name": "everything__echo", "arguments": {"message": "hi"}}},
            {"op": "call_tool", "name": "get_tool_details", "arguments": {"name": "everything__echo"}},
            {"op": "call_tool", "name": "everything__echo", "arguments": {"message": "hi"}},
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "echo", "servers": ["everything"]}},
        ]),
    );
    let steps = &report["steps"];
    assert_eq!(
        names(&steps[0]),
        ["search_tools", "get_tool_details", "call_tool"],
        "{report}"
    );
    let search_description = steps[0][0]["description"].as_str().expect("description");
    assert!(
        search_description.contains("- time"),
        "{search_description}"
    );
    assert!(
        !search_description.contains("everything"),
        "a hidden server is listed: {search_description}"
    );
    let echo_hits = &steps[1]["structuredContent"]["results"];
    assert!(
        echo_hits
            .as_array()
            .expect("results")
            .iter()
            .all(|hit| hit["server"] == "time"),
        "{report}"
    );
    let time_hits = &steps[2]["structuredContent"]["results"];
    assert_eq!(time_hits[0]["name"], "time__get_current_time", "{report}");
    assert_eq!(steps[3]["isError"], false, "{report}");
    assert!(result_text(&steps[3]).contains("UTC"), "{report}");
    for step in [&steps[4], &steps[5]] {
        assert_eq!(step["isError"], true, "{report}");
        let text = result_text(step);
        assert!(text.contains("unknown tool 'everything__echo'"), "{text}");
        assert!(!text.contains("did you mean: everything"), "{text}");
    }
    let direct = &steps[6]["error"];
    assert_eq!(direct["code"], -32602, "{report}");
    assert!(
        direct["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool") && !m.contains("everything__echo,")),
        "{report}"
    );
    assert_eq!(steps[7]["isError"], true, "{report}");
    assert!(
        result_text(&steps[7]).contains("unknown server 'everything'; searchable servers: time"),
        "{report}"
    );

    // Bob: passthrough, two tools of everything.
    let report = as_client(
        &bob,
        json!([
            {"op": "list_tools"},
            {"op": "call_tool", "name": "everything__echo", "arguments": {"message": "from bob"}},
            {"op": "call_tool", "name": "time__get_current_time", "arguments": {"timezone": "UTC"}},
            {"op": "call_tool", "name": "everything__get-env", "arguments": {}},
        ]),
    );
    let steps = &report["steps"];
    let mut listed = names(&steps[0]);
    listed.sort();
    assert_eq!(
        listed,
        ["everything__echo", "everything__get-sum"],
        "{report}"
    );
    assert_eq!(steps[1]["isError"], false, "{report}");
    assert!(result_text(&steps[1]).contains("from bob"), "{report}");
    for step in [&steps[2], &steps[3]] {
        assert_eq!(step["error"]["code"], -32602, "{report}");
    }
}
