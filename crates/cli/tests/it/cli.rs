//! The command line as a user meets it: config check, import, servers test, search, tools.

use std::process::{Command, Output};

use crate::harness::*;

fn mcpgw_cmd(args: &[&str]) -> Output {
    Command::new(mcpgw())
        .args(args)
        .output()
        .expect("mcpgw runs")
}

#[test]
fn config_check_reports_every_problem_with_its_path() {
    let config = write_config(
        "[[servers]]\nname = \"bad name\"\ntimeout_s = 0\ntransport = { type = \"stdio\", command = \"\" }\n\n\
         [[servers]]\nname = \"web\"\ntransport = { type = \"http\", url = \"ftp://x/mcp\", headers = { Authorization = \"Bearer sk-live-123\" } }\n",
    );
    let path = config.path.display().to_string();
    let output = mcpgw_cmd(&["config", "check", "--config", &path]);
    assert_eq!(output.status.code(), Some(2));
    let err = text(&output.stderr);
    for expected in [
        "servers[0].name",
        "servers[0].timeout_s",
        "servers[0].transport.command",
        "servers[1].transport.url",
        "servers[1].transport.headers.Authorization",
    ] {
        assert!(err.contains(expected), "missing {expected} in:\n{err}");
    }
    assert!(!err.contains("sk-live-123"), "a secret was echoed:\n{err}");

    let config = write_config("[gateway]\nlisten = \"127.0.0.1:9000\"\nsurprise = true\n");
    let path = config.path.display().to_string();
    let output = mcpgw_cmd(&["config", "check", "--config", &path]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("surprise"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn import_turns_claude_desktop_json_into_a_valid_config_without_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("claude_desktop_config.json");
    std::fs::write(
        &json,
        format!(
            r#"{{"mcpServers": {{
                "everything": {{"command": "node", "args": [{:?}, "stdio"], "env": {{"GITHUB_TOKEN": "ghp_secretvalue", "LOG_LEVEL": "debug"}}}},
                "remote": {{"url": "https://mcp.example.com/mcp", "headers": {{"Authorization": "Bearer sk-abc"}}}}
            }}}}"#,
            everything_js()
        ),
    )
    .expect("write json");
    let out_path = dir.path().join("mcpgw.toml");
    let json_arg = json.display().to_string();
    let out_arg = out_path.display().to_string();
    let output = mcpgw_cmd(&["import", &json_arg, "--output", &out_arg]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let toml = std::fs::read_to_string(&out_path).expect("written");
    assert!(
        !toml.contains("ghp_secretvalue") && !toml.contains("sk-abc"),
        "{toml}"
    );
    assert!(!text(&output.stderr).contains("ghp_secretvalue"));
    assert!(toml.contains("GITHUB_TOKEN"), "{toml}");
    let check = mcpgw_cmd(&["config", "check", "--config", &out_arg]);
    assert!(check.status.success(), "{}", text(&check.stderr));

    // `serve` and friends also read the JSON file directly.
    let tools = mcpgw_cmd(&[
        "tools",
        "--json",
        "--server",
        "everything",
        "--config",
        &json_arg,
    ]);
    assert!(tools.status.success(), "{}", text(&tools.stderr));
    assert!(text(&tools.stdout).contains("everything__echo"));
}

#[test]
fn servers_test_reports_protocol_tools_and_latency_or_the_failure_in_plain_words() {
    let config = write_config(&format!(
        "{}\n[[servers]]\nname = \"ghost\"\ntransport = {{ type = \"stdio\", command = \"/nonexistent/server\" }}\n",
        everything_stdio_server("everything")
    ));
    let path = config.path.display().to_string();
    let ok = mcpgw_cmd(&["servers", "test", "everything", "--config", &path]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let out = text(&ok.stdout);
    for expected in ["2025-11-25", "legacy", "latency", "echo", "get-sum"] {
        assert!(out.contains(expected), "missing {expected} in:\n{out}");
    }

    let json = mcpgw_cmd(&["servers", "test", "everything", "--json", "--config", &path]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(report["ok"], true);
    assert!(report["tool_count"].as_u64() > Some(5), "{report}");

    let failed = mcpgw_cmd(&["servers", "test", "ghost", "--config", &path]);
    assert_eq!(failed.status.code(), Some(1));
    assert!(
        text(&failed.stderr).contains("could not start '/nonexistent/server': command not found"),
        "{}",
        text(&failed.stderr)
    );

    let unknown = mcpgw_cmd(&["servers", "test", "nope", "--config", &path]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("configured: everything, ghost"));
}

#[test]
fn search_and_tools_commands_print_tables_and_json() {
    let config = write_config(&format!(
        "{}\n{}",
        everything_stdio_server("everything"),
        time_stdio_server("time")
    ));
    let path = config.path.display().to_string();
    let search = mcpgw_cmd(&[
        "search",
        "time zone conversion",
        "--json",
        "--config",
        &path,
    ]);
    assert!(search.status.success(), "{}", text(&search.stderr));
    let hits: Vec<serde_json::Value> = serde_json::from_slice(&search.stdout).expect("json");
    assert_eq!(hits[0]["name"], "time__convert_time", "{hits:?}");

    let table = mcpgw_cmd(&["search", "add two numbers", "--config", &path]);
    assert!(
        text(&table.stdout).contains("everything__get-sum"),
        "{}",
        text(&table.stdout)
    );

    let cost = mcpgw_cmd(&["tools", "--cost", "--server", "time", "--config", &path]);
    let out = text(&cost.stdout);
    assert!(
        out.contains("time__convert_time") && out.contains("tokens"),
        "{out}"
    );
    assert!(!out.contains("everything__"), "{out}");
}
