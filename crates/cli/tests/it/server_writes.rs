//! `mcpgw servers add|remove|enable|disable` through the real binary, both ways (issue 16):
//! with a gateway running on the configuration, the change goes through its admin API and is
//! applied at once (the server shows in `servers list` and a real Python SDK client calls its
//! tool); with none, the file is changed here with its comments kept, and the result loads
//! (`servers list` connects the new server). Refusals (a taken name, an unknown server, a
//! change the loader refuses) say why, exit non-zero and leave the file as it was.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::*;

const COMMENTED: &str = "# Servers changed from the command line in this test: every comment must stay.\n\
[gateway]\n\
exposure = \"passthrough\"   # every tool listed, so a client can call them by name\n";

/// The clock the configuration starts with, with comments of its own.
fn clock() -> String {
    format!(
        "\n# The first clock.\n[[servers]]\nname = \"clock\"   # the first server\ntimeout_s = 30   # seconds\ntransport = {{ type = \"stdio\", command = {:?} }}\n",
        venv_bin("mcp-server-time")
    )
}

/// `mcpgw --config CONFIG ARGS` (the configuration first: `servers add` ends with a command
/// after `--`): exit code, stdout, stderr.
fn mcpgw_cli(config: &Path, args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(mcpgw())
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("MCPGW_ADMIN_KEY")
        // The variable `--env-from` names: the gateway reads it when it starts the server.
        .env("MY_TIME_KEY", "not-a-secret")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("mcpgw runs");
    (
        output.status.code().unwrap_or(-1),
        text(&output.stdout),
        text(&output.stderr),
    )
}

fn succeeds(config: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = mcpgw_cli(config, args);
    assert_eq!(code, 0, "mcpgw {args:?}:\n{stdout}\n{stderr}");
    stdout
}

/// Whether every line of `original` is in `now`, in the same order.
fn keeps_every_line(original: &str, now: &str) -> bool {
    let mut lines = now.lines();
    original.lines().all(|line| lines.any(|l| l == line))
}

/// `servers list --json`: each server's name and state, and its tool count.
fn listed(config: &Path) -> Vec<(String, String, Option<u64>)> {
    let (code, stdout, stderr) = mcpgw_cli(config, &["servers", "list", "--json"]);
    assert!(code == 0 || code == 1, "{stderr}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).expect("a JSON array");
    rows.iter()
        .map(|row| {
            (
                row["name"].as_str().unwrap_or_default().to_owned(),
                row["state"].as_str().unwrap_or_default().to_owned(),
                row["tool_count"].as_u64(),
            )
        })
        .collect()
}

/// The refusals every way of changing must give, with the file left as it was.
fn refusals_leave_the_file_alone(config: &Path) {
    let before = std::fs::read_to_string(config).expect("config");
    let time = venv_bin("mcp-server-time");
    for (args, code, says) in [
        (
            vec!["servers", "add", "clock", "--", time.as_str()],
            1,
            "a server named 'clock' is configured already",
        ),
        (
            vec!["servers", "remove", "nope"],
            1,
            "no server named 'nope' in the configuration",
        ),
        (
            vec!["servers", "disable", "nope"],
            1,
            "no server named 'nope' in the configuration",
        ),
        (
            vec![
                "servers",
                "add",
                "leaky",
                "--env",
                "GITHUB_TOKEN=ghp_not_a_real_token_123",
                "--",
                time.as_str(),
            ],
            2,
            "`GITHUB_TOKEN` looks like a secret and must not be written inline",
        ),
        (
            vec!["servers", "add", "bad name!", "--", time.as_str()],
            2,
            "not changed: the configuration would not load",
        ),
        (
            vec!["servers", "add", "nothing"],
            2,
            "its command after `--`",
        ),
    ] {
        let (got, stdout, stderr) = mcpgw_cli(config, &args);
        assert_eq!(got, code, "mcpgw {args:?}:\n{stdout}\n{stderr}");
        assert!(stderr.contains(says), "mcpgw {args:?}: {stderr}");
        assert!(
            !stderr.contains("ghp_not_a_real_token") && !stdout.contains("ghp_not_a_real_token"),
            "a refusal repeats no value: {stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(config).expect("config"),
            before,
            "mcpgw {args:?} left the file alone"
        );
    }
}

#[test]
fn servers_add_through_a_running_gateway_makes_its_tools_callable_at_once() {
    let (config, _port) = listening_config("exposure = \"passthrough\"\n", &clock());
    let path: PathBuf = config.path.clone();
    let original = std::fs::read_to_string(&path).expect("config");
    let gateway = Gateway::start_configured(config, |_| {});
    let base = format!("http://127.0.0.1:{}", gateway.port);

    let said = succeeds(
        &path,
        &[
            "servers",
            "add",
            "time",
            "--description",
            "the second clock",
            "--",
            &venv_bin("mcp-server-time"),
            "--local-timezone=UTC",
        ],
    );
    assert!(
        said.contains(&format!(
            "added server 'time' through the gateway at {base}"
        )),
        "{said}"
    );
    assert!(said.contains("time: ready, 2 tools"), "{said}");
    let text = std::fs::read_to_string(&path).expect("config");
    assert!(keeps_every_line(&original, &text), "{text}");
    assert!(text.contains("name = \"time\""), "{text}");
    assert!(
        listed(&path).contains(&("time".to_owned(), "ready".to_owned(), Some(2))),
        "{:?}",
        listed(&path)
    );
    // A real client calls the new server's tool through the gateway, by its listed name.
    let report = py_client(
        &["--url", &gateway.url()],
        "modern",
        json!([{"op": "call_tool", "name": "time__get_current_time",
                "arguments": {"timezone": "UTC"}}]),
    );
    let result = result_text(&report["steps"][0]);
    assert!(result.contains("\"timezone\": \"UTC\""), "{report}");

    // Disabled and enabled through the gateway: its state follows at once.
    let said = succeeds(&path, &["servers", "disable", "time"]);
    assert!(
        said.contains(&format!(
            "disabled server 'time' through the gateway at {base}"
        )),
        "{said}"
    );
    assert!(listed(&path).contains(&("time".to_owned(), "disabled".to_owned(), None)));
    let said = succeeds(&path, &["servers", "enable", "time"]);
    assert!(said.contains("time: ready, 2 tools"), "{said}");

    refusals_leave_the_file_alone(&path);

    let said = succeeds(&path, &["servers", "remove", "time"]);
    assert!(
        said.contains("removed server 'time' through the gateway"),
        "{said}"
    );
    assert!(!listed(&path).iter().any(|(name, ..)| name == "time"));
    assert_eq!(
        std::fs::read_to_string(&path).expect("config"),
        original,
        "added and removed: the file is as it was, byte for byte"
    );
    assert!(
        gateway.log_text().contains("reload"),
        "the gateway applied the changes"
    );
}

#[test]
fn servers_add_without_a_gateway_changes_the_file_and_keeps_its_comments() {
    let config = write_config(&format!("{COMMENTED}{}", clock()));
    let path = config.path.clone();
    let original = std::fs::read_to_string(&path).expect("config");

    let said = succeeds(
        &path,
        &[
            "servers",
            "add",
            "time",
            "--env",
            "TZ=UTC",
            "--env-from",
            "TIME_API_KEY=MY_TIME_KEY",
            "--",
            &venv_bin("mcp-server-time"),
        ],
    );
    assert!(
        said.contains(&format!(
            "added server 'time' in {} (no gateway answered",
            path.display()
        )),
        "{said}"
    );
    let text = std::fs::read_to_string(&path).expect("config");
    assert!(keeps_every_line(&original, &text), "comments kept:\n{text}");
    assert!(text.contains("name = \"time\""), "{text}");
    assert!(
        text.contains("TIME_API_KEY = { env = \"MY_TIME_KEY\" }"),
        "a variable, by name:\n{text}"
    );

    // Disabling the first server keeps the comments beside its keys.
    succeeds(&path, &["servers", "disable", "clock"]);
    let text = std::fs::read_to_string(&path).expect("config");
    assert!(keeps_every_line(&original, &text), "{text}");
    assert!(text.contains("enabled = false"), "{text}");

    // The file loads and works: `servers list` (no gateway) connects what it says.
    let rows = listed(&path);
    assert!(
        rows.contains(&("time".to_owned(), "ready".to_owned(), Some(2))),
        "{rows:?}"
    );
    assert!(
        rows.contains(&("clock".to_owned(), "disabled".to_owned(), None)),
        "{rows:?}"
    );

    refusals_leave_the_file_alone(&path);

    succeeds(&path, &["servers", "enable", "clock"]);
    let said = succeeds(&path, &["servers", "remove", "time"]);
    assert!(said.contains("removed server 'time' in"), "{said}");
    let text = std::fs::read_to_string(&path).expect("config");
    assert!(keeps_every_line(&original, &text), "{text}");
    assert!(!text.contains("name = \"time\""), "{text}");
    assert!(text.contains("enabled = true"), "{text}");
}
