//! The README's first command: `mcpgw serve` on `examples/mcpgw.toml`, unchanged, with the
//! embedded defaults. Its servers start the way the README has them start: `npx -y` finds
//! server-everything and server-memory installed in `.peers` (the gateway runs there, so npx
//! needs no download), and `mcp-server-time` is on `PATH` from the peers' Python venv.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

#[test]
fn the_example_configuration_serves_its_three_servers() {
    let text = std::fs::read_to_string(repo_root().join("examples/mcpgw.toml"))
        .expect("examples/mcpgw.toml");
    let path = format!(
        "{}:{}",
        peers().join("venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let gateway = Gateway::start_with(write_config_without_allowlist(&text), "info", |command| {
        command.current_dir(peers()).env("PATH", &path);
    });
    wait_until(
        "the example's three servers",
        Duration::from_secs(90),
        || {
            gateway.health().is_some_and(|health| {
                health["servers"]
                    .as_array()
                    .is_some_and(|servers| servers.iter().all(|s| s["state"] == "ready"))
            })
        },
    );
    let health = gateway.health().expect("health");
    let names: Vec<&str> = health["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["everything", "time", "memory"], "{health}");

    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([
            {"op": "list_tools"},
            {"op": "call_tool", "name": "search_tools",
             "arguments": {"query": "current time in a time zone", "top_k": 3}},
            {"op": "call_tool", "name": "call_tool",
             "arguments": {"name": "everything__echo", "arguments": {"message": "from the README"}}},
        ]),
    );
    let steps = &report["steps"];
    let listed: Vec<&str> = steps[0]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        listed,
        ["search_tools", "get_tool_details", "call_tool"],
        "exposure = search: {report}"
    );
    assert!(
        result_text(&steps[1]).contains("time__get_current_time"),
        "{report}\n{}",
        gateway.log_text()
    );
    assert!(
        result_text(&steps[2]).contains("from the README"),
        "{report}"
    );
    assert_eq!(steps[2]["isError"], Value::Bool(false), "{report}");
}
