//! Exposure `auto`: passthrough while the tools fit the token budget, else the meta-tools plus
//! pinned tools (configured, or the most used by the audit log), through the real Python client
//! over stdio, and what `mcpgw tools --cost` says about it.

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::harness::*;

fn names(report: &Value) -> Vec<String> {
    report["steps"][0]
        .as_array()
        .expect("tool list")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

fn config_with(gateway: &str) -> String {
    format!(
        "[gateway]\nexposure = \"auto\"\n{gateway}\n{}",
        everything_stdio_server("everything")
    )
}

#[test]
fn auto_exposure_follows_the_token_budget_and_pins_the_most_used_tools() {
    // Within budget: every tool, as in passthrough.
    let config = write_config(&config_with("token_budget = 1000000"));
    let report = py_client_stdio(&config, "legacy", json!([{"op": "list_tools"}]));
    let listed = names(&report);
    assert!(listed.contains(&"everything__echo".to_owned()), "{report}");
    assert!(!listed.contains(&"search_tools".to_owned()), "{report}");

    // Over budget, nothing used yet: the meta-tools only.
    let toml = std::fs::read_to_string(&config.path).expect("config");
    std::fs::write(
        &config.path,
        toml.replace("token_budget = 1000000", "token_budget = 200"),
    )
    .expect("rewrite config");
    let call = |name: &str, arguments: Value| json!({"op": "call_tool", "name": "call_tool", "arguments": {"name": name, "arguments": arguments}});
    let report = py_client_stdio(
        &config,
        "legacy",
        json!([
            {"op": "list_tools"},
            call("everything__get-sum", json!({"a": 1, "b": 2})),
            call("everything__get-sum", json!({"a": 3, "b": 4})),
            call("everything__echo", json!({"message": "once"})),
        ]),
    );
    assert_eq!(
        names(&report),
        ["search_tools", "get_tool_details", "call_tool"],
        "{report}"
    );
    for step in 1..=3 {
        assert_eq!(report["steps"][step]["isError"], false, "{report}");
    }

    // The next session pins what was used, most used first, and they are callable directly.
    let report = py_client_stdio(
        &config,
        "legacy",
        json!([
            {"op": "list_tools"},
            {"op": "call_tool", "name": "everything__get-sum", "arguments": {"a": 5, "b": 6}},
        ]),
    );
    assert_eq!(
        names(&report),
        [
            "search_tools",
            "get_tool_details",
            "call_tool",
            "everything__get-sum",
            "everything__echo"
        ],
        "{report}"
    );
    assert!(result_text(&report["steps"][1]).contains("11"), "{report}");

    // A configured list wins over usage.
    let toml = std::fs::read_to_string(&config.path).expect("config");
    std::fs::write(
        &config.path,
        toml.replace(
            "token_budget = 200",
            "token_budget = 200\npinned = [\"everything__get-env\"]",
        ),
    )
    .expect("rewrite config");
    let report = py_client_stdio(&config, "legacy", json!([{"op": "list_tools"}]));
    assert_eq!(names(&report)[3..], ["everything__get-env"], "{report}");

    let cost = Command::new(mcpgw())
        .args(["tools", "--cost", "--config"])
        .arg(&config.path)
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs");
    let text = String::from_utf8_lossy(&cost.stdout);
    assert!(cost.status.success(), "{text}");
    assert!(
        text.contains("default view (auto exposure: search (")
            && text.contains("against a budget of 200")
            && text.contains("with pinned everything__get-env"),
        "{text}"
    );
}
