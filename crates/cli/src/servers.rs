//! `mcpgw servers add|remove|enable|disable`: changes to the configured servers, made where
//! they take effect at once. When a gateway runs on this configuration and answers (found as
//! `servers list` finds it: `gateway::AdminClient`), the change goes through its admin API
//! (`/admin/v1/servers`), which edits the file and applies it; otherwise, or with `--offline`,
//! the file is changed here by the same code (`gateway::change_file`: `config::ConfigEdit`,
//! comments kept, checked with the loader, replaced in one rename), and a gateway applies it
//! when it starts or, if one runs, when its file watch sees it.
//!
//! `add` builds the admin API's body, a `[[servers]]` table as JSON, from its arguments; a
//! credential is never given on the command line: `--env-from`, `--header-env` and
//! `--bearer-env` name the variable the gateway reads it from (the loader refuses a literal
//! value under a secret-looking name, as it does in the file).

use std::path::Path;

use anyhow::anyhow;
use gateway::{AdminClient, ChangeError, FileChange, ServerChange, Unanswered, Written};
use serde_json::{Map, Value, json};

use crate::Failure;

/// `mcpgw servers add`'s arguments: the admin API's `POST /admin/v1/servers` body.
#[derive(clap::Args)]
pub(crate) struct AddArgs {
    /// The server's name (its tools are named `NAME__tool`).
    name: String,
    /// The stdio server's command and its arguments, after `--`:
    /// `mcpgw servers add time -- uvx mcp-server-time`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
    /// A Streamable HTTP server at this URL, instead of a command.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// With --url: the legacy HTTP+SSE transport instead of Streamable HTTP.
    #[arg(long, requires = "url")]
    sse: bool,
    /// With --url: a header sent with every request, NAME=VALUE (repeatable). A credential
    /// header (Authorization, X-Api-Key, ...) must come from a variable: --header-env.
    #[arg(long = "header", value_name = "NAME=VALUE", requires = "url")]
    headers: Vec<String>,
    /// With --url: a header whose value the gateway reads from its environment variable VAR,
    /// NAME=VAR (repeatable).
    #[arg(long = "header-env", value_name = "NAME=VAR", requires = "url")]
    header_env: Vec<String>,
    /// With --url: `Authorization: Bearer $VAR`, VAR read from the gateway's environment.
    #[arg(long, value_name = "VAR", requires = "url")]
    bearer_env: Option<String>,
    /// A stdio server's environment variable, NAME=VALUE (repeatable). A secret must come from
    /// a variable: --env-from.
    #[arg(long = "env", value_name = "NAME=VALUE", conflicts_with = "url")]
    env: Vec<String>,
    /// A stdio server's environment variable NAME set from the gateway's variable VAR,
    /// NAME=VAR (repeatable).
    #[arg(long = "env-from", value_name = "NAME=VAR", conflicts_with = "url")]
    env_from: Vec<String>,
    /// A stdio server's working directory.
    #[arg(long, value_name = "DIR", conflicts_with = "url")]
    cwd: Option<String>,
    /// What the server is for, shown to clients beside its tools.
    #[arg(long)]
    description: Option<String>,
    /// Per-request timeout in seconds (1 to 300; default 30).
    #[arg(long, value_name = "SECONDS")]
    timeout_s: Option<u32>,
    /// Add it disabled (`enabled = false`): configured, not connected.
    #[arg(long)]
    disabled: bool,
    /// Change the file here even when a gateway is running on this configuration (its file
    /// watch applies the change).
    #[arg(long)]
    offline: bool,
}

/// `mcpgw servers add`.
pub(crate) async fn add(config_path: Option<&Path>, args: AddArgs) -> Result<(), Failure> {
    let offline = args.offline;
    let server = server_table(args).map_err(|why| Failure::usage(anyhow!(why)))?;
    change(config_path, ServerChange::Add(server), offline).await
}

/// `mcpgw servers remove|enable|disable NAME` and `add`: `change`, through the running gateway
/// if one answers (unless `offline`), else to the file here.
pub(crate) async fn change(
    config_path: Option<&Path>,
    change: ServerChange,
    offline: bool,
) -> Result<(), Failure> {
    let path = config::discover(config_path).map_err(Failure::usage)?;
    let done = done_word(&change);
    // The gateway is found from the file as it loads now; a file that does not load has no
    // gateway to find, and the change below says what is wrong with it.
    let client = match config::load(&path) {
        Ok(config) if !offline => AdminClient::for_config(&config),
        _ => None,
    };
    if let Some(client) = client {
        match client.change_servers(&change).await {
            Ok(Written::Done(report)) => {
                return report_applied(&client, done, &report).await;
            }
            Ok(Written::Refused {
                status,
                error,
                problems,
            }) => return Err(refused(status == 400, &error, &problems)),
            Err(Unanswered::NotRunning) => {}
            Err(Unanswered::Refused(why)) => {
                eprintln!("note: {why}; changing the file here instead")
            }
        }
    }
    match gateway::change_file(&path, change).await {
        Ok(FileChange { servers, warnings }) => {
            for warning in &warnings {
                eprintln!("warning: {warning}");
            }
            println!(
                "{done} {} in {} (no gateway answered: one reads it when it starts, and a running one when its file watch sees the change)",
                quoted(&servers),
                path.display()
            );
            Ok(())
        }
        Err(ChangeError::Invalid { message, problems }) => Err(refused(true, &message, &problems)),
        Err(error) => Err(refused(false, &error.to_string(), &[])),
    }
}

/// What the running gateway did, and the state of each server it added or enabled.
async fn report_applied(client: &AdminClient, done: &str, report: &Value) -> Result<(), Failure> {
    let servers: Vec<String> = strings(&report["servers"]);
    println!(
        "{done} {} through the gateway at {} (configuration generation {})",
        quoted(&servers),
        client.base_url(),
        report["generation"]
    );
    for warning in strings(&report["warnings"]) {
        eprintln!("warning: {warning}");
    }
    let started: Vec<String> = strings(&report["added"])
        .into_iter()
        .chain(strings(&report["changed"]))
        .collect();
    if started.is_empty() {
        return Ok(());
    }
    // The answer comes once the servers it started have connected or failed.
    if let Ok(rows) = client.servers().await {
        for row in rows
            .iter()
            .filter(|row| started.contains(&row.name.to_string()))
        {
            let tools = row
                .tool_count
                .map(|n| format!(", {n} tool{}", if n == 1 { "" } else { "s" }))
                .unwrap_or_default();
            let reason = row
                .reason
                .as_ref()
                .map(|reason| format!(": {reason}"))
                .unwrap_or_default();
            println!("  {}: {}{tools}{reason}", row.name, row.state);
        }
    }
    Ok(())
}

/// A refused change: its message and each problem on a line of its own; exit 2 when the
/// configuration would not load (`invalid`), else 1.
fn refused(invalid: bool, error: &str, problems: &[String]) -> Failure {
    let mut message = error.to_owned();
    // The message of an invalid change already lists the problems on one line; on a terminal
    // each is easier to read on its own.
    if problems.len() > 1 {
        for problem in problems {
            message.push_str(&format!("\n  {problem}"));
        }
    }
    let error = anyhow!(message);
    if invalid {
        Failure::usage(error)
    } else {
        Failure::from(error)
    }
}

fn done_word(change: &ServerChange) -> &'static str {
    match change {
        ServerChange::Add(_) | ServerChange::Import(_) => "added",
        ServerChange::Replace(..) | ServerChange::Patch(..) => "changed",
        ServerChange::Remove(_) => "removed",
        ServerChange::Enable(_, true) => "enabled",
        ServerChange::Enable(_, false) => "disabled",
    }
}

fn quoted(names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
    format!(
        "server{} {}",
        if names.len() == 1 { "" } else { "s" },
        names.join(", ")
    )
}

fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The `[[servers]]` table `args` describe, as the admin API takes it; else why not.
fn server_table(args: AddArgs) -> Result<Map<String, Value>, String> {
    let mut server = Map::new();
    server.insert("name".into(), json!(args.name));
    if let Some(description) = args.description {
        server.insert("description".into(), json!(description));
    }
    if let Some(timeout) = args.timeout_s {
        server.insert("timeout_s".into(), json!(timeout));
    }
    if args.disabled {
        server.insert("enabled".into(), json!(false));
    }
    let transport = match (args.url, args.command.split_first()) {
        (Some(_), Some(_)) => {
            return Err("give the server's command after `--` or --url, not both".to_owned());
        }
        (None, None) => {
            return Err(format!(
                "say how to reach '{}': its command after `--` (mcpgw servers add {0} -- uvx mcp-server-time) or --url URL",
                args.name
            ));
        }
        (Some(url), None) => {
            let mut headers = Map::new();
            for (name, value) in pairs("--header", &args.headers)? {
                headers.insert(name, json!(value));
            }
            for (name, var) in pairs("--header-env", &args.header_env)? {
                headers.insert(name, json!({"env": var}));
            }
            if let Some(var) = args.bearer_env {
                server.insert("auth".into(), json!({"type": "bearer", "env": var}));
            }
            let mut transport = Map::new();
            transport.insert("type".into(), json!(if args.sse { "sse" } else { "http" }));
            transport.insert("url".into(), json!(url));
            if !headers.is_empty() {
                transport.insert("headers".into(), Value::Object(headers));
            }
            transport
        }
        (None, Some((command, arguments))) => {
            let mut env = Map::new();
            for (name, value) in pairs("--env", &args.env)? {
                env.insert(name, json!(value));
            }
            for (name, var) in pairs("--env-from", &args.env_from)? {
                env.insert(name, json!({"env": var}));
            }
            let mut transport = Map::new();
            transport.insert("type".into(), json!("stdio"));
            transport.insert("command".into(), json!(command));
            if !arguments.is_empty() {
                transport.insert("args".into(), json!(arguments));
            }
            if !env.is_empty() {
                transport.insert("env".into(), Value::Object(env));
            }
            if let Some(cwd) = args.cwd {
                transport.insert("cwd".into(), json!(cwd));
            }
            transport
        }
    };
    server.insert("transport".into(), Value::Object(transport));
    Ok(server)
}

/// `NAME=VALUE` pairs of `flag`, each split at its first `=`.
fn pairs(flag: &str, given: &[String]) -> Result<Vec<(String, String)>, String> {
    given
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => {
                Ok((name.trim().to_owned(), value.to_owned()))
            }
            _ => Err(format!(
                "{flag} takes NAME=VALUE, not '{}'",
                pair.chars().take(64).collect::<String>()
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        add: AddArgs,
    }

    fn table(args: &[&str]) -> Result<Value, String> {
        let cli = Cli::try_parse_from(std::iter::once("add").chain(args.iter().copied()))
            .map_err(|error| error.to_string())?;
        server_table(cli.add).map(Value::Object)
    }

    #[test]
    fn add_builds_the_admin_apis_server_table() {
        assert_eq!(
            table(&[
                "time",
                "--env",
                "TZ=UTC",
                "--env-from",
                "API_KEY=TIME_KEY",
                "--description",
                "clocks",
                "--",
                "uvx",
                "mcp-server-time",
                "--local-timezone=UTC",
            ]),
            Ok(json!({
                "name": "time",
                "description": "clocks",
                "transport": {"type": "stdio", "command": "uvx",
                              "args": ["mcp-server-time", "--local-timezone=UTC"],
                              "env": {"TZ": "UTC", "API_KEY": {"env": "TIME_KEY"}}},
            }))
        );
        assert_eq!(
            table(&[
                "gh",
                "--url",
                "https://api.example/mcp",
                "--header",
                "X-Team=core",
                "--header-env",
                "X-Api-Key=GH_KEY",
                "--bearer-env",
                "GH_TOKEN",
                "--timeout-s",
                "60",
                "--disabled",
            ]),
            Ok(json!({
                "name": "gh", "timeout_s": 60, "enabled": false,
                "auth": {"type": "bearer", "env": "GH_TOKEN"},
                "transport": {"type": "http", "url": "https://api.example/mcp",
                              "headers": {"X-Team": "core", "X-Api-Key": {"env": "GH_KEY"}}},
            }))
        );
        assert_eq!(
            table(&["old", "--url", "http://127.0.0.1:9/sse", "--sse"]),
            Ok(
                json!({"name": "old", "transport": {"type": "sse", "url": "http://127.0.0.1:9/sse"}})
            )
        );
    }

    #[test]
    fn add_refuses_what_is_not_one_server() {
        let check = |args: &[&str], says: &str| {
            let error = table(args).expect_err("refused");
            assert!(error.contains(says), "{args:?}: {error}");
        };
        check(&["time"], "its command after `--`");
        check(&["time", "--url", "http://x", "--", "uvx"], "not both");
        check(
            &["time", "--env", "TZ", "--", "uvx"],
            "--env takes NAME=VALUE, not 'TZ'",
        );
        check(
            &["time", "--env", "TZ=UTC", "--url", "http://x"],
            "cannot be used with",
        );
        check(&["time", "--sse", "--", "uvx"], "--url");
    }
}
