//! Client API keys on the HTTP listener: `mcpgw clients add|list|remove`, a real client with and
//! without its key, the 401 a client is shown, and the listener that refuses to start open.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::harness::*;

fn list_tool_names(report: &Value) -> Vec<String> {
    report["steps"][0]
        .as_array()
        .expect("tool list")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_client_key_admits_its_client_until_removed_and_is_never_stored_or_logged() {
    let config = write_config("");
    let config_path = config.path.clone();
    let dir = config.dir.path().to_owned();

    let added = mcpgw_in(&config_path, &["clients", "add", "ci"]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    let key = text(&added.stdout).trim().to_owned();
    assert!(key.starts_with("mcpgw_") && key.len() == 6 + 43, "{key}");
    assert!(
        !text(&added.stderr).contains(&key),
        "the key went to stderr"
    );
    let again = mcpgw_in(&config_path, &["clients", "add", "ci"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );

    let listed = mcpgw_in(&config_path, &["clients", "list"]);
    assert!(
        text(&listed.stdout).contains("ci"),
        "{}",
        text(&listed.stdout)
    );
    assert!(
        text(&listed.stdout).contains("never"),
        "{}",
        text(&listed.stdout)
    );
    let listed = mcpgw_in(&config_path, &["clients", "list", "--json"]);
    let rows: Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert_eq!(rows[0]["name"], "ci", "{rows}");
    assert!(rows[0]["created_at"].is_i64(), "{rows}");
    assert_eq!(rows[0]["last_used_at"], Value::Null, "{rows}");

    let gateway = Gateway::start_with_log(config, "info,mcpgw_gateway=debug,gateway=debug");
    let bearer = format!("Authorization: Bearer {key}");

    // The real client with its key works, and runs as the client it was issued to.
    let report = py_client(
        &["--url", &gateway.url(), "--header", &bearer],
        "legacy",
        json!([{"op": "list_tools"}]),
    );
    assert_eq!(
        list_tool_names(&report),
        ["search_tools", "get_tool_details", "call_tool"],
        "{report}"
    );
    assert!(
        gateway.log_text().contains("principal=client:ci"),
        "{}",
        gateway.log_text()
    );

    // Without a key: 401, where to learn more, and what to do.
    let metadata_url = format!(
        "http://127.0.0.1:{}/.well-known/oauth-protected-resource",
        gateway.port
    );
    let (status, headers, body) = initialize(&gateway.url(), None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        headers["www-authenticate"],
        format!("Bearer resource_metadata=\"{metadata_url}\"").as_str()
    );
    let error: Value = serde_json::from_str(&body).expect("JSON-RPC error body");
    assert_eq!(error["jsonrpc"], "2.0", "{error}");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(message.contains("Authorization: Bearer"), "{message}");
    assert!(message.contains("mcpgw clients add"), "{message}");

    // The metadata names the MCP endpoint as the resource, and no authorization server.
    let metadata: Value = reqwest::blocking::get(&metadata_url)
        .expect("metadata")
        .json()
        .expect("json");
    assert_eq!(metadata["resource"], gateway.url().as_str(), "{metadata}");
    assert!(
        metadata.get("authorization_servers").is_none(),
        "{metadata}"
    );

    // A wrong key, or another scheme: 401 too. The sign-in endpoints need a key as well;
    // /healthz does not.
    for wrong in [
        format!("Bearer {}x", &key[..key.len() - 1]),
        "Bearer mcpgw_".to_owned(),
        format!("Basic {key}"),
    ] {
        let (status, headers, body) = initialize(&gateway.url(), Some(&wrong));
        assert_eq!(status, 401, "{wrong}: {body}");
        assert!(
            headers["www-authenticate"]
                .to_str()
                .expect("ascii")
                .starts_with("Bearer resource_metadata="),
            "{headers:?}"
        );
    }
    let status = reqwest::blocking::get(format!("http://127.0.0.1:{}/oauth/status", gateway.port))
        .expect("status")
        .status();
    assert_eq!(status.as_u16(), 401);
    assert!(gateway.health().is_some(), "/healthz must stay open");

    let listed = mcpgw_in(&config_path, &["clients", "list", "--json"]);
    let rows: Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert!(
        rows[0]["last_used_at"].is_i64(),
        "use was not recorded: {rows}"
    );
    assert!(!text(&listed.stdout).contains(&key));

    // Stdio is the local user: no key needed even now that keys exist.
    let stdio_config = dir.join("stdio.toml");
    std::fs::write(&stdio_config, "[store]\npath = \"mcpgw.db\"\n").expect("write config");
    let stdio_config = stdio_config.display().to_string();
    let report = py_client(
        &[
            "--stdio",
            mcpgw(),
            "serve",
            "--stdio",
            "--config",
            &stdio_config,
            "--",
        ],
        "legacy",
        json!([{"op": "list_tools"}]),
    );
    assert_eq!(list_tool_names(&report).len(), 3, "{report}");

    // A removed key stops working at once, on the running gateway.
    let removed = mcpgw_in(&config_path, &["clients", "remove", "ci"]);
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    let (status, _, body) = initialize(&gateway.url(), Some(&format!("Bearer {key}")));
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("not valid"), "{body}");
    let gone = mcpgw_in(&config_path, &["clients", "remove", "ci"]);
    assert_eq!(gone.status.code(), Some(2));

    // The key is in no log and no file beside the database.
    let log = gateway.log_text();
    assert!(!log.contains(&key), "the key is in the log");
    for entry in std::fs::read_dir(&dir).expect("dir").flatten() {
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        assert!(
            !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
            "the key is in {}",
            entry.path().display()
        );
    }
}

/// Runs `mcpgw serve` with `args` and returns its exit code and stderr; it must exit within
/// a bound (a listener that started would not).
fn serve_exits(config: &Path, args: &[&str]) -> (Option<i32>, String) {
    let log = config.with_file_name("refused.log");
    let mut proc = Proc::spawn(
        "mcpgw serve (refused)",
        Command::new(mcpgw())
            .arg("serve")
            .arg("--config")
            .arg(config)
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log")),
    );
    let start = Instant::now();
    let status = loop {
        if let Ok(Some(status)) = proc.child.try_wait() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "mcpgw serve {args:?} started instead of refusing"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.code(),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

#[test]
fn a_listener_without_client_keys_refuses_to_start_on_a_network_address() {
    let config = write_config("");
    let port = free_port();
    let (code, stderr) = serve_exits(&config.path, &["--listen", &format!("0.0.0.0:{port}")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("without client authentication") && stderr.contains("mcpgw clients add"),
        "{stderr}"
    );

    // On loopback too, when the operator turned unauthenticated loopback off.
    let config = write_config("[gateway]\nallow_unauthenticated_loopback = false\n");
    let (code, stderr) = serve_exits(&config.path, &["--listen", &format!("127.0.0.1:{port}")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("allow_unauthenticated_loopback"),
        "{stderr}"
    );
}
