//! Starting a stdio upstream: a child process in its own process group, stderr into the log.
//!
//! The process group matters because launchers (`npx`, `uvx`, shell wrappers) start the real
//! server as a grandchild; killing only the direct child would leave it running. rmcp kills the
//! whole group through process-wrap when the transport is dropped.

use std::process::Stdio;

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::transport::TokioChildProcess;
use secrecy::ExposeSecret;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::UpstreamError;

/// Longest stderr line kept in the log; the rest is cut so a noisy child cannot flood it.
const MAX_STDERR_LINE: usize = 4096;

pub(crate) fn spawn(
    server: &str,
    config: &config::StdioTransport,
) -> Result<TokioChildProcess, UpstreamError> {
    let mut command = tokio::process::Command::new(&config.command);
    command.args(&config.args);
    for (name, value) in &config.env {
        let secret = value.resolve().map_err(|e| UpstreamError::Secret {
            server: server.to_owned(),
            reason: e.to_string(),
        })?;
        command.env(name, secret.expose_secret());
    }
    if let Some(cwd) = &config.cwd {
        command.current_dir(cwd);
    }
    let mut wrapped = CommandWrap::from(command);
    wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let (child, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| UpstreamError::Spawn {
            command: config.command.clone(),
            reason: match e.kind() {
                std::io::ErrorKind::NotFound => "command not found".to_owned(),
                std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
                _ => e.to_string(),
            },
        })?;
    tracing::debug!(server, pid = child.id(), "started stdio upstream");
    if let Some(stderr) = stderr {
        let server = server.to_owned();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(mut line)) = lines.next_line().await {
                if line.len() > MAX_STDERR_LINE {
                    let mut cut = MAX_STDERR_LINE;
                    while !line.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    line.truncate(cut);
                }
                tracing::info!(target: "mcpgw::upstream::stderr", server = %server, "{line}");
            }
        });
    }
    Ok(child)
}
