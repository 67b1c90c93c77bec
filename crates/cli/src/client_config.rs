//! `mcpgw client-config CLIENT [--install]`: the entry that points an MCP client at this
//! gateway, printed, or merged into the client's own configuration file.
//!
//! The formats, as each client documents them:
//!
//! | client | file (default) | servers under | HTTP entry | key reference |
//! | --- | --- | --- | --- | --- |
//! | Claude Desktop | `claude_desktop_config.json` in the app's folder | `mcpServers` | none: the file takes stdio servers only (remote ones are "connectors" in the app) | - |
//! | Claude Code | `~/.claude.json` (user scope; `.mcp.json` is a project's) | `mcpServers` | `type = "http"`, `url`, `headers` | `${MCPGW_API_KEY}` |
//! | Cursor | `~/.cursor/mcp.json` | `mcpServers` | `url`, `headers` | `${env:MCPGW_API_KEY}` |
//! | VS Code | `.vscode/mcp.json` (the workspace's) | `servers` | `type = "http"`, `url`, `headers` | `${input:mcpgw-api-key}`, an `inputs` prompt VS Code stores |
//! | Codex | `$CODEX_HOME/config.toml`, else `~/.codex/config.toml` | `[mcp_servers.NAME]` | `url`, `bearer_token_env_var` | `MCPGW_API_KEY` |
//!
//! A key is never written into a file: the entry names an environment variable (or VS Code's
//! prompt) that holds it. Merging keeps everything else in the file: other servers, other
//! keys of this entry that mcpgw does not own, key order, and (for Codex's TOML) comments. A
//! JSON file that does not parse (a VS Code file with comments, say) is refused, untouched.

use std::{
    io::ErrorKind,
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
};

use anyhow::{Context, anyhow, bail};

use crate::{Failure, command::load_config};
use config::json::Json;

/// The environment variable the entries read a client key from.
pub(crate) const KEY_VAR: &str = "MCPGW_API_KEY";
/// The id of VS Code's prompt for the key (`inputs`).
const VSCODE_INPUT: &str = "mcpgw-api-key";

#[derive(clap::Args)]
#[command(after_long_help = FILES_HELP)]
pub(crate) struct Args {
    /// The client to connect.
    #[arg(value_enum)]
    client: Client,
    /// Merge the entry into the client's configuration file: a timestamped backup of the file
    /// first (FILE.mcpgw-backup-TIME), every other entry and key kept; running it again
    /// changes nothing.
    #[arg(long)]
    install: bool,
    /// Have the client start its own gateway over stdio (`mcpgw serve --stdio --config
    /// <this config>`) instead of connecting to a running one over HTTP. Claude Desktop's
    /// file takes only stdio servers, so it always gets this.
    #[arg(long)]
    stdio: bool,
    /// The client's configuration file, instead of the one the client reads by default.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// The entry's name in the client's configuration.
    #[arg(long, default_value = "mcpgw")]
    name: String,
    /// The gateway's MCP endpoint (default: http://HOST:PORT/mcp from `[gateway] listen`).
    #[arg(long, conflicts_with = "stdio")]
    url: Option<url::Url>,
}

const FILES_HELP: &str = "\
Default files:
  claude-desktop  macOS ~/Library/Application Support/Claude/claude_desktop_config.json,
                  Windows %APPDATA%\\Claude\\claude_desktop_config.json,
                  Linux $XDG_CONFIG_HOME/Claude/claude_desktop_config.json (~/.config/Claude/...)
  claude-code     ~/.claude.json (user scope; --file .mcp.json for a project)
  cursor          ~/.cursor/mcp.json (--file .cursor/mcp.json for a project)
  vscode          .vscode/mcp.json in the current directory (the workspace)
  codex           $CODEX_HOME/config.toml, else ~/.codex/config.toml

When the gateway's HTTP listener requires client keys (after `mcpgw clients add`, with
`client_auth = \"api_key\"`, `[gateway.jwt]`, or on a non-loopback address), the entry refers
to the key without containing it: the environment variable MCPGW_API_KEY (Claude Code, Cursor,
Codex) or a password prompt VS Code asks once and stores.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Client {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    Vscode,
    Codex,
}

impl Client {
    fn title(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "Claude Desktop",
            Client::ClaudeCode => "Claude Code",
            Client::Cursor => "Cursor",
            Client::Vscode => "VS Code",
            Client::Codex => "Codex",
        }
    }

    /// The key the servers are listed under, in the JSON clients' files.
    fn servers_key(self) -> &'static str {
        match self {
            Client::Vscode => "servers",
            _ => "mcpServers",
        }
    }

    /// The keys of an entry that mcpgw writes: removed when the new entry does not set them
    /// (an HTTP entry replacing a stdio one), while every other key of the entry stays.
    fn owned_keys(self) -> &'static [&'static str] {
        match self {
            Client::Codex => &[
                "url",
                "bearer_token_env_var",
                "http_headers",
                "env_http_headers",
                "command",
                "args",
            ],
            _ => &["type", "url", "headers", "command", "args"],
        }
    }
}

/// How the client reaches the gateway.
#[derive(Clone, Debug, PartialEq)]
enum Connection {
    /// A running gateway's HTTP listener; `key` when it requires client keys.
    Http { url: String, key: bool },
    /// The client starts `command args...` itself.
    Stdio { command: String, args: Vec<String> },
}

pub(crate) async fn run(config_path: Option<&Path>, args: Args) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let stdio = args.stdio || args.client == Client::ClaudeDesktop;
    if args.client == Client::ClaudeDesktop && !args.stdio {
        eprintln!(
            "note: Claude Desktop's configuration file takes only stdio servers, so Claude Desktop starts its own gateway (`mcpgw serve --stdio`)"
        );
    }
    let connection = if stdio {
        stdio_connection(&config)?
    } else {
        let url = match &args.url {
            Some(url) => url.to_string(),
            None => mcp_url(config.gateway.listen).map_err(Failure::usage)?,
        };
        Connection::Http {
            url,
            key: requires_keys(&config).await,
        }
    };
    let path = match args.file {
        Some(path) => path,
        None => default_file(args.client).map_err(Failure::usage)?,
    };
    let format = if args.client == Client::Codex {
        Format::Toml
    } else {
        Format::Json
    };
    if args.install {
        install(args.client, format, &path, &args.name, &connection)?;
    } else {
        let (text, _) = merged(args.client, format, &path, None, &args.name, &connection)?;
        print!("{text}");
        eprintln!(
            "Add this to {} (or run again with --install to merge it there, with a backup).",
            path.display()
        );
    }
    explain_key(args.client, &connection);
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Toml,
}

/// Merges the entry into the file, or says it is already there.
fn install(
    client: Client,
    format: Format,
    path: &Path,
    name: &str,
    connection: &Connection,
) -> Result<(), Failure> {
    let original = match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == ErrorKind::NotFound => None,
        Err(error) => {
            return Err(Failure::from(
                anyhow::Error::new(error).context(format!("cannot read {}", path.display())),
            ));
        }
    };
    let (text, changed) = merged(client, format, path, original.as_deref(), name, connection)?;
    if !changed {
        eprintln!(
            "{}: the '{name}' entry is already there; nothing changed",
            path.display()
        );
        return Ok(());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let backup = match &original {
        Some(_) => {
            let backup = backup_path(path);
            std::fs::copy(path, &backup).with_context(|| {
                format!("cannot back up {} to {}", path.display(), backup.display())
            })?;
            Some(backup)
        }
        None => None,
    };
    write_replacing(path, &text)?;
    match backup {
        Some(backup) => eprintln!(
            "wrote the '{name}' entry to {} (the file as it was: {})",
            path.display(),
            backup.display()
        ),
        None => eprintln!("created {} with the '{name}' entry", path.display()),
    }
    eprintln!(
        "Restart {} (or reload its MCP servers) to connect.",
        client.title()
    );
    Ok(())
}

/// The file's new text with the entry merged in, and whether that changes anything. `original`
/// is the file's text (`None`: no file yet, so a document holding only the entry).
fn merged(
    client: Client,
    format: Format,
    path: &Path,
    original: Option<&str>,
    name: &str,
    connection: &Connection,
) -> Result<(String, bool), Failure> {
    match format {
        Format::Json => {
            let mut doc = match original.filter(|t| !t.trim().is_empty()) {
                None => Json::Object(Vec::new()),
                Some(text) => serde_json::from_str::<Json>(text).map_err(|error| {
                    Failure::usage(anyhow!(
                        "{} is not plain JSON (line {}, column {}: {}){}; it was left as it is. Add the entry by hand: `mcpgw client-config {}` prints it",
                        path.display(),
                        error.line(),
                        error.column(),
                        error,
                        if client == Client::Vscode {
                            ": VS Code accepts comments and trailing commas in this file, which mcpgw does not rewrite"
                        } else {
                            ""
                        },
                        clap::ValueEnum::to_possible_value(&client)
                            .map(|v| v.get_name().to_owned())
                            .unwrap_or_default(),
                    ))
                })?,
            };
            let changed = merge_json(&mut doc, client, name, connection).map_err(|error| {
                Failure::usage(error.context(format!("{} was left as it is", path.display())))
            })?;
            let mut text = serde_json::to_string_pretty(&doc)?;
            text.push('\n');
            Ok((text, changed))
        }
        Format::Toml => {
            let mut doc: toml_edit::DocumentMut =
                original.unwrap_or_default().parse().map_err(|error| {
                    Failure::usage(anyhow!(
                        "{} is not valid TOML ({error}); it was left as it is",
                        path.display()
                    ))
                })?;
            let changed = merge_toml(&mut doc, name, connection).map_err(|error| {
                Failure::usage(error.context(format!("{} was left as it is", path.display())))
            })?;
            Ok((doc.to_string(), changed))
        }
    }
}

/// Puts the entry under the client's servers key (and VS Code's key prompt under `inputs`);
/// whether the document changed.
fn merge_json(
    doc: &mut Json,
    client: Client,
    name: &str,
    connection: &Connection,
) -> anyhow::Result<bool> {
    if !matches!(doc, Json::Object(_)) {
        bail!("the file holds {}, not a JSON object", doc.kind());
    }
    let servers_key = client.servers_key();
    let mut changed = false;
    let servers = doc
        .entry(servers_key, || {
            changed = true;
            Json::Object(Vec::new())
        })
        .ok_or_else(|| anyhow!("not a JSON object"))?;
    if !matches!(servers, Json::Object(_)) {
        bail!("`{servers_key}` is {}, not an object", servers.kind());
    }
    let desired = json_entry(client, connection);
    let before = servers.get(name).map(Json::to_value);
    let entry = servers
        .entry(name, || Json::Object(Vec::new()))
        .ok_or_else(|| anyhow!("not a JSON object"))?;
    if !matches!(entry, Json::Object(_)) {
        *entry = Json::Object(Vec::new());
    }
    for key in client.owned_keys() {
        if desired.get(key).is_none() {
            entry.remove(key);
        }
    }
    if let Json::Object(pairs) = desired {
        for (key, value) in pairs {
            if let Some(slot) = entry.entry(&key, || Json::Null) {
                *slot = value;
            }
        }
    }
    changed |= before != Some(entry.to_value());
    if client == Client::Vscode && matches!(connection, Connection::Http { key: true, .. }) {
        let inputs = doc
            .entry("inputs", || Json::Array(Vec::new()))
            .ok_or_else(|| anyhow!("not a JSON object"))?;
        let Json::Array(items) = inputs else {
            bail!("`inputs` is {}, not an array", inputs.kind());
        };
        let present = items
            .iter()
            .any(|item| item.get("id") == Some(&Json::string(VSCODE_INPUT)));
        if !present {
            items.push(Json::object([
                ("type", Json::string("promptString")),
                ("id", Json::string(VSCODE_INPUT)),
                (
                    "description",
                    Json::string("mcpgw client key (from `mcpgw clients add NAME`)"),
                ),
                ("password", Json::Bool(true)),
            ]));
            changed = true;
        }
    }
    Ok(changed)
}

/// The entry of a JSON client, keys in the order the client's documentation shows them.
fn json_entry(client: Client, connection: &Connection) -> Json {
    match connection {
        Connection::Http { url, key } => {
            let reference = match client {
                Client::Cursor => format!("Bearer ${{env:{KEY_VAR}}}"),
                Client::Vscode => format!("Bearer ${{input:{VSCODE_INPUT}}}"),
                _ => format!("Bearer ${{{KEY_VAR}}}"),
            };
            let mut pairs = Vec::new();
            if matches!(client, Client::ClaudeCode | Client::Vscode) {
                pairs.push(("type", Json::string("http")));
            }
            pairs.push(("url", Json::string(url.clone())));
            if *key {
                pairs.push((
                    "headers",
                    Json::object([("Authorization", Json::string(reference))]),
                ));
            }
            Json::object(pairs)
        }
        Connection::Stdio { command, args } => {
            let mut pairs = Vec::new();
            if matches!(client, Client::ClaudeCode | Client::Vscode) {
                pairs.push(("type", Json::string("stdio")));
            }
            pairs.push(("command", Json::string(command.clone())));
            pairs.push(("args", Json::strings(args.iter().cloned())));
            Json::object(pairs)
        }
    }
}

/// Puts `[mcp_servers.NAME]` into a Codex `config.toml`, keeping its comments and layout;
/// whether the document changed.
fn merge_toml(
    doc: &mut toml_edit::DocumentMut,
    name: &str,
    connection: &Connection,
) -> anyhow::Result<bool> {
    use toml_edit::{Item, Table, value};
    let servers = doc.entry("mcp_servers").or_insert_with(|| {
        let mut table = Table::new();
        // `[mcp_servers.NAME]` without an empty `[mcp_servers]` above it.
        table.set_implicit(true);
        Item::Table(table)
    });
    let Some(servers) = servers.as_table_like_mut() else {
        bail!("`mcp_servers` is not a table");
    };
    let entry = servers
        .entry(name)
        .or_insert_with(|| Item::Table(Table::new()));
    if !entry.is_table_like() {
        *entry = Item::Table(Table::new());
    }
    let Some(entry) = entry.as_table_like_mut() else {
        bail!("`mcp_servers.{name}` is not a table");
    };
    let desired: Vec<(&str, Vec<String>, bool)> = match connection {
        // (key, value, is an array)
        Connection::Http { url, key } => {
            let mut keys = vec![("url", vec![url.clone()], false)];
            if *key {
                keys.push(("bearer_token_env_var", vec![KEY_VAR.to_owned()], false));
            }
            keys
        }
        Connection::Stdio { command, args } => vec![
            ("command", vec![command.clone()], false),
            ("args", args.clone(), true),
        ],
    };
    let mut changed = false;
    for key in Client::Codex.owned_keys() {
        if !desired.iter().any(|(k, _, _)| k == key) && entry.remove(key).is_some() {
            changed = true;
        }
    }
    for (key, wanted, array) in desired {
        let current: Option<Vec<String>> = entry.get(key).and_then(|item| {
            if array {
                item.as_array().map(|a| {
                    a.iter()
                        .map(|v| v.as_str().unwrap_or_default().to_owned())
                        .collect()
                })
            } else {
                item.as_str().map(|s| vec![s.to_owned()])
            }
        });
        if current.as_ref() == Some(&wanted) {
            continue;
        }
        let item = if array {
            value(toml_edit::Array::from_iter(wanted))
        } else {
            value(wanted.into_iter().next().unwrap_or_default())
        };
        entry.insert(key, item);
        changed = true;
    }
    Ok(changed)
}

/// `mcpgw serve --stdio --config <absolute path>`, with this very binary.
fn stdio_connection(config: &config::Config) -> Result<Connection, Failure> {
    let exe = std::env::current_exe().context("cannot tell where the mcpgw binary is")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let source = config
        .source
        .canonicalize()
        .unwrap_or_else(|_| config.source.clone());
    Ok(Connection::Stdio {
        command: exe.display().to_string(),
        args: vec![
            "serve".to_owned(),
            "--stdio".to_owned(),
            "--config".to_owned(),
            source.display().to_string(),
        ],
    })
}

/// `http://HOST:PORT/mcp` for a listener on `listen`; an unspecified address (0.0.0.0, ::)
/// is reached on loopback.
pub(crate) fn mcp_url(listen: SocketAddr) -> anyhow::Result<String> {
    if listen.port() == 0 {
        bail!(
            "`[gateway] listen` has port 0, so the port is only known once the gateway runs: set a fixed port, pass --url, or use --stdio"
        );
    }
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    Ok(format!("http://{}/mcp", SocketAddr::new(ip, listen.port())))
}

/// Whether the HTTP listener will require a client key, by the rule it starts with
/// (`gateway::ClientAccess::decide`): keys are stored, or the configuration demands them.
async fn requires_keys(config: &config::Config) -> bool {
    let settings = &config.gateway;
    if settings.jwt.is_some()
        || settings.client_auth == config::ClientAuth::ApiKey
        || !settings.listen.ip().is_loopback()
    {
        return true;
    }
    // Only look: a command that prints a snippet should not create a database.
    let path = gateway::store_path(&config.store);
    if config.store.postgres.is_none() && !path.exists() {
        return false;
    }
    match gateway::open_database(&config.store).await {
        Ok(store) => store.has_clients().await.unwrap_or(false),
        Err(error) => {
            eprintln!(
                "warning: cannot open the database to see whether client keys exist ({error}); the entry has no key"
            );
            false
        }
    }
}

/// Where the client reads its MCP servers from by default.
fn default_file(client: Client) -> anyhow::Result<PathBuf> {
    let home = || {
        std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .map(PathBuf::from)
            .ok_or_else(|| anyhow!("HOME is not set; pass the client's file with --file"))
    };
    let env_dir = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    Ok(match client {
        Client::ClaudeDesktop => {
            let dir = if cfg!(target_os = "macos") {
                home()?.join("Library/Application Support")
            } else if cfg!(windows) {
                env_dir("APPDATA").ok_or_else(|| anyhow!("APPDATA is not set; use --file"))?
            } else {
                match env_dir("XDG_CONFIG_HOME") {
                    Some(dir) => dir,
                    None => home()?.join(".config"),
                }
            };
            dir.join("Claude").join("claude_desktop_config.json")
        }
        Client::ClaudeCode => home()?.join(".claude.json"),
        Client::Cursor => home()?.join(".cursor").join("mcp.json"),
        Client::Vscode => std::env::current_dir()
            .context("cannot read the current directory")?
            .join(".vscode")
            .join("mcp.json"),
        Client::Codex => match env_dir("CODEX_HOME") {
            Some(dir) => dir.join("config.toml"),
            None => home()?.join(".codex").join("config.toml"),
        },
    })
}

/// `FILE.mcpgw-backup-20261202T101500Z` (with `.2`, `.3`... if that exists already).
fn backup_path(path: &Path) -> PathBuf {
    let stamp: String = crate::audit::utc_now_rfc3339()
        .chars()
        .take(19)
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    let base = format!("{}.mcpgw-backup-{stamp}Z", path.display());
    let mut candidate = PathBuf::from(&base);
    let mut n = 2;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{base}.{n}"));
        n += 1;
    }
    candidate
}

/// Writes `text` to a file beside `path`, with `path`'s permissions, and renames it over
/// `path`: a reader never sees half a file, and a failed write leaves the old one.
fn write_replacing(path: &Path, text: &str) -> Result<(), Failure> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".to_owned());
    let temporary = path.with_file_name(format!(".{file_name}.mcpgw-{}", std::process::id()));
    std::fs::write(&temporary, text)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    if let Ok(metadata) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&temporary, metadata.permissions());
    }
    std::fs::rename(&temporary, path).map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        Failure::from(
            anyhow::Error::new(error).context(format!("cannot replace {}", path.display())),
        )
    })
}

/// What the user does about the key, when the listener requires one.
fn explain_key(client: Client, connection: &Connection) {
    if !matches!(connection, Connection::Http { key: true, .. }) {
        return;
    }
    let how = match client {
        Client::Vscode => {
            "VS Code asks for it the first time it connects and keeps it in its secret storage"
                .to_owned()
        }
        Client::ClaudeCode => format!(
            "set {KEY_VAR} to it in the environment Claude Code starts from (Claude Code documents `${{VAR}}` expansion for `.mcp.json`; if yours does not expand it in ~/.claude.json, install with --file .mcp.json)"
        ),
        _ => format!(
            "set {KEY_VAR} to it in the environment {} starts from",
            client.title()
        ),
    };
    eprintln!(
        "The gateway requires a client key (one from `mcpgw clients add NAME`, which prints it once): {how}. The entry refers to the key; it never contains it."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(key: bool) -> Connection {
        Connection::Http {
            url: "http://127.0.0.1:8931/mcp".to_owned(),
            key,
        }
    }

    fn merge(client: Client, text: &str, connection: &Connection) -> (String, bool) {
        let format = if client == Client::Codex {
            Format::Toml
        } else {
            Format::Json
        };
        merged(
            client,
            format,
            Path::new("f"),
            Some(text),
            "mcpgw",
            connection,
        )
        .unwrap_or_else(|f| panic!("{:#}", f.error))
    }

    #[test]
    fn urls_name_a_reachable_address() {
        let url = |addr: &str| mcp_url(addr.parse().expect("address")).map_err(|e| e.to_string());
        assert_eq!(
            url("127.0.0.1:8931"),
            Ok("http://127.0.0.1:8931/mcp".into())
        );
        assert_eq!(url("0.0.0.0:80"), Ok("http://127.0.0.1:80/mcp".into()));
        assert_eq!(url("[::]:9000"), Ok("http://[::1]:9000/mcp".into()));
        assert!(url("127.0.0.1:0").is_err());
    }

    #[test]
    fn an_http_entry_replaces_a_stdio_one_and_keeps_foreign_keys() {
        let before = r#"{"mcpServers":{"mcpgw":{"command":"old","args":[],"timeout":5}}}"#;
        let (text, changed) = merge(Client::Cursor, before, &http(true));
        assert!(changed);
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            value["mcpServers"]["mcpgw"],
            serde_json::json!({"timeout": 5, "url": "http://127.0.0.1:8931/mcp",
                "headers": {"Authorization": "Bearer ${env:MCPGW_API_KEY}"}})
        );
        let (again, changed) = merge(Client::Cursor, &text, &http(true));
        assert!(!changed);
        assert_eq!(again, text);
    }

    #[test]
    fn codex_toml_keeps_comments_and_is_idempotent() {
        let before =
            "# my settings\nmodel = \"o3\" # the model\n\n[mcp_servers.other]\ncommand = \"x\"\n";
        let (text, changed) = merge(Client::Codex, before, &http(true));
        assert!(changed);
        assert!(text.starts_with(before), "{text}");
        assert!(
            text.ends_with(
                "[mcp_servers.mcpgw]\nurl = \"http://127.0.0.1:8931/mcp\"\nbearer_token_env_var = \"MCPGW_API_KEY\"\n"
            ),
            "{text}"
        );
        assert_eq!(
            merge(Client::Codex, &text, &http(true)),
            (text.clone(), false)
        );
        let (without_key, changed) = merge(Client::Codex, &text, &http(false));
        assert!(changed);
        assert!(
            !without_key.contains("bearer_token_env_var"),
            "{without_key}"
        );
    }

    #[test]
    fn files_that_are_not_what_they_should_be_are_refused() {
        for (client, text, expect) in [
            (
                Client::Vscode,
                "{\n // a comment\n \"servers\": {}\n}",
                "VS Code accepts comments",
            ),
            (
                Client::Cursor,
                "[1, 2]",
                "holds an array, not a JSON object",
            ),
            (
                Client::ClaudeCode,
                r#"{"mcpServers": []}"#,
                "`mcpServers` is an array",
            ),
            (
                Client::Codex,
                "mcp_servers = 3",
                "`mcp_servers` is not a table",
            ),
        ] {
            let format = if client == Client::Codex {
                Format::Toml
            } else {
                Format::Json
            };
            let error = match merged(
                client,
                format,
                Path::new("f"),
                Some(text),
                "mcpgw",
                &http(false),
            ) {
                Ok((text, _)) => panic!("accepted: {text}"),
                Err(failure) => format!("{:#}", failure.error),
            };
            assert!(error.contains(expect), "{error}");
        }
    }
}
