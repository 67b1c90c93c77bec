//! `--log-format json` and `[gateway] log_format`: every line `mcpgw serve` writes on stderr is
//! one JSON object, the start-up lines included; a bad value is caught by `config check`.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::harness::*;

/// Each line of `log` as JSON; panics naming the first line that is not.
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{log}"))
        })
        .collect()
}

/// The line whose message starts with `start`.
fn line<'a>(lines: &'a [Value], start: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(start))
        })
        .unwrap_or_else(|| panic!("no line {start:?} in {lines:#?}"))
}

#[track_caller]
fn assert_json_log(gateway: &Gateway) {
    let log = gateway.log_text();
    let lines = json_lines(&log);
    for line in &lines {
        assert!(line["level"].is_string(), "no level: {line}");
        assert!(line["timestamp"].is_string(), "no timestamp: {line}");
        assert!(line["target"].is_string(), "no target: {line}");
        assert!(line["fields"]["message"].is_string(), "no message: {line}");
    }
    let starting = line(&lines, "starting mcpgw");
    assert_eq!(starting["level"], "INFO");
    assert!(
        starting["fields"]["config"]
            .as_str()
            .is_some_and(|c| c.ends_with("mcpgw.toml")),
        "{starting}"
    );
    line(
        &lines,
        "serving MCP over Streamable HTTP at http://127.0.0.1:",
    );
    // Logged inside the server's span: its fields come along.
    let ready = line(&lines, "server ready");
    assert_eq!(ready["span"]["name"], "server", "{ready}");
    assert_eq!(ready["span"]["server"], "clock", "{ready}");
    // The banner's summary is a log line too, not text beside the log.
    line(&lines, "mcpgw: 1 server ready");
}

#[test]
fn serve_with_log_format_json_writes_only_json_lines() {
    let config = write_config(&time_stdio_server("clock"));
    let mut gateway = Gateway::start_with(config, "info", |command| {
        command.args(["--log-format", "json"]);
    });
    wait_until(
        "the settled summary",
        std::time::Duration::from_secs(30),
        || gateway.log_text().contains("mcpgw: 1 server ready"),
    );
    assert_json_log(&gateway);
    // The admin token is in its file, never in a log that may leave the machine.
    let token = gateway.admin_token();
    assert!(
        !gateway.log_text().contains(&token),
        "the admin token was logged"
    );
    gateway.proc.terminate();
    // The shutdown lines are JSON too.
    let lines = json_lines(&gateway.log_text());
    line(&lines, "stopped");
}

#[test]
fn log_format_json_in_the_configuration_is_overridden_by_the_flag() {
    let config = write_config(&format!(
        "[gateway]\nlog_format = \"json\"\n{}",
        time_stdio_server("clock")
    ));
    let gateway = Gateway::start_with(config, "info", |_| {});
    wait_until(
        "the settled summary",
        std::time::Duration::from_secs(30),
        || gateway.log_text().contains("mcpgw: 1 server ready"),
    );
    assert_json_log(&gateway);

    let config = write_config(&format!(
        "[gateway]\nlog_format = \"json\"\n{}",
        time_stdio_server("clock")
    ));
    let gateway = Gateway::start_with(config, "info", |command| {
        command.args(["--log-format", "text"]);
    });
    let log = gateway.log_text();
    assert!(
        log.contains("mcpgw serve") || log.contains("is serving MCP at"),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| serde_json::from_str::<Value>(l).is_err()),
        "the flag asked for text:\n{log}"
    );
}

#[test]
fn config_check_suggests_the_log_format_meant() {
    let config = write_config("[gateway]\nlog_format = \"jsno\"\n");
    let output = Command::new(mcpgw())
        .args(["config", "check", "--config"])
        .arg(&config.path)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs");
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    let all = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert!(
        all.contains(
            "2:14: error: gateway.log_format: unknown value `jsno` (hint: did you mean `json`?)"
        ),
        "{all}"
    );
}
