//! What `mcpgw serve` tells the person who started it, on stderr: where it serves, how the
//! servers are doing, and the one command that connects a client. Printed beside the log, not
//! through it: it is for a person at a terminal, and a `RUST_LOG` filter must not hide it.
//! Only the HTTP listener gets it; under `--stdio` stdout is protocol and stderr the log.

use std::{net::SocketAddr, path::Path, sync::Mutex};

/// The lines printed once the listener is bound, before any server has settled.
pub(crate) fn listening(
    local: SocketAddr,
    configured: SocketAddr,
    config_source: &Path,
    servers: &[String],
    keys_required: bool,
    admin_token: Option<&str>,
) -> String {
    let url = format!("http://{local}/mcp");
    // The console's link signs in with the per-start admin token (open loopback listener).
    let console = match admin_token {
        Some(token) => format!("http://{local}/ui?token={token}"),
        None => format!("http://{local}/ui (sign in with the key of an administrator's client)"),
    };
    let source = config_source
        .canonicalize()
        .unwrap_or_else(|_| config_source.to_owned());
    let mut connect = format!(
        "mcpgw client-config claude-code --install --config {}",
        shell_word(&source.display().to_string())
    );
    // The client-config command reads `[gateway] listen`; `serve --listen` chose another.
    if crate::client_config::mcp_url(configured).ok().as_deref() != Some(url.as_str()) {
        connect.push_str(&format!(" --url {url}"));
    }
    let servers_line = match servers.len() {
        0 => "none configured: add [[servers]] to the configuration".to_owned(),
        n => format!(
            "{n} starting: {} (a line follows once they have settled)",
            servers.join(", ")
        ),
    };
    let keys = if keys_required {
        "required: each client sends `Authorization: Bearer <key>` (`mcpgw clients add NAME`)"
    } else {
        "not needed on loopback until the first `mcpgw clients add NAME`"
    };
    format!(
        "\nmcpgw {} is serving MCP at {url}\n  servers:     {servers_line}\n  client keys: {keys}\n  connect:     {connect}\n               (or claude-desktop, cursor, vscode, codex; without --install it prints the entry)\n  console:     {console}\n",
        env!("CARGO_PKG_VERSION"),
    )
}

/// Counts servers as they settle and, when the last one has, gives the summary line.
pub(crate) struct Settling {
    total: usize,
    settled: Mutex<Vec<Outcome>>,
}

struct Outcome {
    name: String,
    tools: usize,
    failure: Option<String>,
}

impl Settling {
    pub(crate) fn new(total: usize) -> Settling {
        Settling {
            total,
            settled: Mutex::new(Vec::with_capacity(total)),
        }
    }

    /// Records one server's outcome; the summary when it was the last to settle.
    pub(crate) fn settled(&self, status: &upstream::ServerStatus) -> Option<String> {
        let failure = match &status.state {
            upstream::ServerState::Failed { reason }
            | upstream::ServerState::Unresponsive { reason } => Some(reason.clone()),
            _ => None,
        };
        let mut settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
        settled.push(Outcome {
            name: status.name.to_string(),
            tools: status.tool_count.unwrap_or(0),
            failure,
        });
        (settled.len() == self.total).then(|| summary(&settled))
    }
}

/// `mcpgw: 3 servers ready (21 tools), 1 failed: wrongurl (connection refused)`.
fn summary(outcomes: &[Outcome]) -> String {
    let ready: Vec<&Outcome> = outcomes.iter().filter(|o| o.failure.is_none()).collect();
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            let reason = o.failure.as_deref()?;
            Some(format!("{} ({})", o.name, short(reason)))
        })
        .collect();
    let tools: usize = ready.iter().map(|o| o.tools).sum();
    let mut line = format!(
        "mcpgw: {} server{} ready ({tools} tools)",
        ready.len(),
        if ready.len() == 1 { "" } else { "s" }
    );
    if !failed.is_empty() {
        line.push_str(&format!(
            ", {} failed: {} (`mcpgw servers test NAME` says more)",
            failed.len(),
            failed.join(", ")
        ));
    }
    line
}

/// The first line of a failure, cut to a length that fits a terminal line.
fn short(reason: &str) -> String {
    const LIMIT: usize = 120;
    let line = reason.lines().next().unwrap_or_default().trim();
    if line.chars().count() <= LIMIT {
        return line.to_owned();
    }
    let cut: String = line.chars().take(LIMIT - 1).collect();
    format!("{cut}…")
}

/// `word` as one shell word: as is when it is plain, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@=,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(
        name: &str,
        state: upstream::ServerState,
        tools: Option<usize>,
    ) -> upstream::ServerStatus {
        upstream::ServerStatus {
            name: name.into(),
            state,
            era: None,
            protocol_version: None,
            server_name: None,
            server_version: None,
            about: Default::default(),
            tool_count: tools,
            connect_ms: None,
            last_error: None,
            last_change: None,
        }
    }

    #[test]
    fn the_summary_comes_when_the_last_server_settles() {
        let settling = Settling::new(3);
        assert_eq!(
            settling.settled(&status("a", upstream::ServerState::Ready, Some(5))),
            None
        );
        assert_eq!(
            settling.settled(&status(
                "b",
                upstream::ServerState::Failed {
                    reason: "connection refused\nmore".into()
                },
                None
            )),
            None
        );
        assert_eq!(
            settling
                .settled(&status("c", upstream::ServerState::Ready, Some(2)))
                .as_deref(),
            Some(
                "mcpgw: 2 servers ready (7 tools), 1 failed: b (connection refused) (`mcpgw servers test NAME` says more)"
            )
        );
    }

    #[test]
    fn paths_are_quoted_only_when_they_need_it() {
        assert_eq!(shell_word("/home/a/mcpgw.toml"), "/home/a/mcpgw.toml");
        assert_eq!(
            shell_word("/My Files/it's.toml"),
            r"'/My Files/it'\''s.toml'"
        );
    }
}
