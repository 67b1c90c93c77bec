//! `mcpgw client-config`: each client's own file, shaped as the client writes it (other
//! servers and settings in it), gets the entry merged in with a backup, a second run changes
//! nothing, and the entry it writes really connects a client to the gateway.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::*;

/// `mcpgw client-config ARGS --config CONFIG`: exit code, stdout, stderr.
fn client_config(config: &Path, args: &[&str]) -> (i32, String, String) {
    let output = mcpgw_in(config, &[&["client-config"], args].concat());
    (
        output.status.code().unwrap_or(-1),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// The backups `--install` left beside `file`.
fn backups(file: &Path) -> Vec<PathBuf> {
    let name = file
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let mut found: Vec<PathBuf> = std::fs::read_dir(file.parent().expect("dir"))
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy()
                    .starts_with(&format!("{name}.mcpgw-backup-"))
            })
        })
        .collect();
    found.sort();
    found
}

/// Installs twice into `file` (holding `before`): the first run merges and backs up, the
/// second changes nothing. Returns the file's text after.
fn install_twice(config: &Path, client: &str, file: &Path, before: &str) -> String {
    std::fs::write(file, before).expect("write client file");
    let path = file.display().to_string();
    let (code, stdout, stderr) = client_config(config, &[client, "--install", "--file", &path]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.is_empty(),
        "--install prints nothing on stdout: {stdout}"
    );
    let after = std::fs::read_to_string(file).expect("read client file");
    let saved = backups(file);
    assert_eq!(saved.len(), 1, "one backup: {saved:?}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(&saved[0]).expect("backup"),
        before,
        "the backup is the file as it was"
    );
    assert!(stderr.contains(&saved[0].display().to_string()), "{stderr}");

    let (code, _, stderr) = client_config(config, &[client, "--install", "--file", &path]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("already there; nothing changed"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(file).expect("read"), after);
    assert_eq!(backups(file).len(), 1, "no second backup");
    after
}

fn listen_config() -> ConfigDir {
    write_config("[gateway]\nlisten = \"127.0.0.1:18931\"\n")
}

const URL: &str = "http://127.0.0.1:18931/mcp";

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn each_client_file_gets_the_entry_once_and_keeps_everything_else() {
    let config = listen_config();
    let dir = tempfile::tempdir().expect("tempdir");
    let config_path = config.path.canonicalize().expect("config path");
    let mcpgw_path = Path::new(mcpgw()).canonicalize().expect("binary");

    // Claude Desktop: stdio only, whatever is asked.
    let file = dir.path().join("claude_desktop_config.json");
    let after = json(&install_twice(
        &config.path,
        "claude-desktop",
        &file,
        r#"{
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "filesystem": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"] }
  }
}"#,
    ));
    assert_eq!(after["globalShortcut"], "Ctrl+Space");
    assert_eq!(after["mcpServers"]["filesystem"]["command"], "npx");
    assert_eq!(
        after["mcpServers"]["mcpgw"],
        json!({"command": mcpgw_path.display().to_string(),
               "args": ["serve", "--stdio", "--config", config_path.display().to_string()]})
    );

    // Claude Code's ~/.claude.json: application state around a user-scope mcpServers.
    let file = dir.path().join(".claude.json");
    let text = install_twice(
        &config.path,
        "claude-code",
        &file,
        r#"{
  "numStartups": 12,
  "projects": { "/home/me/app": { "mcpServers": {}, "allowedTools": [] } },
  "mcpServers": { "github": { "type": "http", "url": "https://api.githubcopilot.com/mcp/" } },
  "autoUpdates": true
}"#,
    );
    let after = json(&text);
    assert_eq!(
        after["mcpServers"]["mcpgw"],
        json!({"type": "http", "url": URL})
    );
    assert_eq!(
        after["mcpServers"]["github"]["url"],
        "https://api.githubcopilot.com/mcp/"
    );
    assert_eq!(after["projects"]["/home/me/app"]["allowedTools"], json!([]));
    // Key order kept: the file's keys in their place, the new entry after the old one.
    let order: Vec<usize> = ["numStartups", "projects", "github", "mcpgw", "autoUpdates"]
        .iter()
        .map(|k| text.find(&format!("\"{k}\"")).expect("key"))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");

    // Cursor.
    let file = dir.path().join("mcp.json");
    let after = json(&install_twice(
        &config.path,
        "cursor",
        &file,
        r#"{"mcpServers": {"linear": {"url": "https://mcp.linear.app/sse"}}}"#,
    ));
    assert_eq!(after["mcpServers"]["mcpgw"], json!({"url": URL}));
    assert_eq!(
        after["mcpServers"]["linear"]["url"],
        "https://mcp.linear.app/sse"
    );

    // VS Code: `servers`, with `type`, beside the file's inputs.
    let vscode = dir.path().join(".vscode");
    std::fs::create_dir(&vscode).expect("mkdir");
    let file = vscode.join("mcp.json");
    let after = json(&install_twice(
        &config.path,
        "vscode",
        &file,
        r#"{
  "inputs": [{ "type": "promptString", "id": "github-token", "description": "GitHub token", "password": true }],
  "servers": { "github": { "type": "http", "url": "https://api.githubcopilot.com/mcp/",
    "headers": { "Authorization": "Bearer ${input:github-token}" } } }
}"#,
    ));
    assert_eq!(
        after["servers"]["mcpgw"],
        json!({"type": "http", "url": URL})
    );
    assert_eq!(after["inputs"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        after["servers"]["github"]["headers"]["Authorization"],
        "Bearer ${input:github-token}"
    );

    // Codex: TOML, comments and the other tables kept.
    let file = dir.path().join("config.toml");
    let before = "# Codex settings\nmodel = \"gpt-5-codex\"  # the default model\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\nargs = [\"--stdio\"]\n";
    let after = install_twice(&config.path, "codex", &file, before);
    assert!(after.starts_with(before), "{after}");
    let parsed: toml::Value = toml::from_str(&after).expect("toml");
    assert_eq!(parsed["mcp_servers"]["mcpgw"]["url"].as_str(), Some(URL));
    assert_eq!(
        parsed["mcp_servers"]["docs"]["command"].as_str(),
        Some("docs-mcp")
    );
}

#[test]
fn a_vscode_file_with_comments_is_refused_untouched() {
    let config = listen_config();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mcp.json");
    let before = "{\n  // my servers\n  \"servers\": {},\n}\n";
    std::fs::write(&file, before).expect("write");
    let (code, _, stderr) = client_config(
        &config.path,
        &["vscode", "--install", "--file", &file.display().to_string()],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is not plain JSON (line 2"), "{stderr}");
    assert!(stderr.contains("VS Code accepts comments"), "{stderr}");
    assert!(
        stderr.contains("`mcpgw client-config vscode` prints it"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&file).expect("read"), before);
    assert!(backups(&file).is_empty());
}

#[test]
fn the_printed_entry_is_what_install_writes_and_a_missing_file_is_created() {
    let config = listen_config();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("new").join("mcp.json");
    let path = file.display().to_string();
    let (code, printed, stderr) = client_config(&config.path, &["cursor", "--file", &path]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains(&format!("Add this to {path}")), "{stderr}");
    assert!(!file.exists(), "printing writes nothing");
    let (code, _, stderr) = client_config(&config.path, &["cursor", "--install", "--file", &path]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("created"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).expect("created"), printed);
    assert!(backups(&file).is_empty(), "nothing to back up");
}

#[test]
fn entries_connect_a_real_client_over_http_with_a_key_and_over_stdio() {
    let config = write_config(&everything_stdio_server("everything"));
    let key = add_client(&config.path, "editor");
    let config_path = config.path.clone();
    let dir = tempfile::tempdir().expect("tempdir");

    // Stdio (Claude Desktop): the entry's command starts a gateway a client can use.
    let desktop = dir.path().join("claude_desktop_config.json");
    let (code, _, stderr) = client_config(
        &config_path,
        &[
            "claude-desktop",
            "--install",
            "--file",
            &desktop.display().to_string(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let entry =
        json(&std::fs::read_to_string(&desktop).expect("file"))["mcpServers"]["mcpgw"].clone();
    let mut target = vec![
        "--stdio".to_owned(),
        entry["command"].as_str().expect("command").to_owned(),
    ];
    target.extend(
        entry["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("arg").to_owned()),
    );
    target.push("--".to_owned());
    let target: Vec<&str> = target.iter().map(String::as_str).collect();
    let report = py_client(&target, "modern", json!([{"op": "list_tools"}]));
    assert!(
        report["steps"][0].to_string().contains("search_tools"),
        "{report}"
    );

    // HTTP with a key (Cursor): the entry names the key's variable, never the key.
    let gateway = Gateway::start(config);
    let cursor = dir.path().join("mcp.json");
    let (code, stdout, stderr) = client_config(
        &config_path,
        &[
            "cursor",
            "--install",
            "--file",
            &cursor.display().to_string(),
            "--url",
            &gateway.url(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("requires a client key"), "{stderr}");
    let written = std::fs::read_to_string(&cursor).expect("file");
    for shown in [&written, &stdout, &stderr] {
        assert!(!shown.contains(&key), "the key never appears: {shown}");
    }
    let entry = &json(&written)["mcpServers"]["mcpgw"];
    assert_eq!(entry["url"], gateway.url());
    let header = entry["headers"]["Authorization"].as_str().expect("header");
    assert_eq!(header, "Bearer ${env:MCPGW_API_KEY}");
    // What Cursor sends once it has put the variable in.
    let sent = format!(
        "Authorization: {}",
        header.replace("${env:MCPGW_API_KEY}", &key)
    );
    let report = py_client(
        &["--url", &gateway.url(), "--header", &sent],
        "modern",
        json!([{"op": "list_tools"}]),
    );
    assert!(
        report["steps"][0].to_string().contains("search_tools"),
        "{report}"
    );

    // Codex names the variable too.
    let (code, stdout, stderr) = client_config(&config_path, &["codex", "--url", &gateway.url()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("bearer_token_env_var = \"MCPGW_API_KEY\""),
        "{stdout}"
    );
}
