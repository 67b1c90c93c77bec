//! What a new user sees on starting the gateway: `mcpgw serve`'s banner (the URL, the servers
//! as they settle, the one command that connects a client, and that command working as
//! printed), and no banner under `--stdio`.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::harness::*;

/// A server whose URL refuses connections: port 9 (discard) on loopback is not served here.
const REFUSED: &str = "[[servers]]\nname = \"wrongurl\"\ntransport = { type = \"http\", url = \"http://127.0.0.1:9/mcp\" }\n";

#[test]
fn serve_prints_a_banner_with_the_url_the_servers_and_the_command_that_connects_a_client() {
    let config = write_config(&format!(
        "{}{REFUSED}",
        everything_stdio_server("everything")
    ));
    let config_path = config.path.canonicalize().expect("config path");
    // The banner is not a log line: a filter that hides everything must not hide it.
    let gateway = Gateway::start_with_log(config, "off");
    let url = gateway.url();
    let mut log = String::new();
    wait_until("the closing summary line", Duration::from_secs(60), || {
        log = gateway.log_text();
        log.contains("mcpgw: 1 server ready")
    });
    assert!(log.contains(&format!("is serving MCP at {url}\n")), "{log}");
    assert!(
        log.contains("  servers:     2 starting: everything, wrongurl"),
        "{log}"
    );
    assert!(
        log.contains("  client keys: not needed on loopback"),
        "{log}"
    );
    let summary = log
        .lines()
        .find(|l| l.starts_with("mcpgw: 1 server ready"))
        .expect("summary");
    assert!(summary.contains("1 failed: wrongurl ("), "{summary}");
    assert!(summary.contains("tools)"), "{summary}");

    // The printed command, run as printed (without --install, so it only prints the entry).
    let connect = log
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("connect:"))
        .expect("connect line")
        .trim();
    let expected = format!(
        "mcpgw client-config claude-code --install --config {} --url {url}",
        config_path.display()
    );
    assert_eq!(connect, expected);
    let words: Vec<&str> = connect
        .split(' ')
        .skip(1)
        .filter(|w| *w != "--install")
        .collect();
    let output = Command::new(mcpgw())
        .args(&words)
        .stdin(Stdio::null())
        .output()
        .expect("client-config runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let entry: Value = serde_json::from_slice(&output.stdout).expect("json entry");
    assert_eq!(entry["mcpServers"]["mcpgw"]["url"], url.as_str());
    assert_eq!(entry["mcpServers"]["mcpgw"]["type"], "http");
}

#[test]
fn serve_stdio_prints_no_banner() {
    let config = write_config("");
    let output = Command::new(mcpgw())
        .args(["serve", "--stdio", "--config"])
        .arg(&config.path)
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw serve --stdio runs");
    let stderr = text(&output.stderr);
    assert!(output.stdout.is_empty(), "stdout is protocol only");
    assert!(!stderr.contains("serving MCP at"), "{stderr}");
    assert!(!stderr.contains("client-config"), "{stderr}");
}
