//! Changes to the servers of the configuration file the gateway serves: what the admin API's
//! server writes and the console's server forms do ([`Gateway::change_servers`]).
//!
//! Every change takes one path, one at a time: read the file, make the change with
//! [`config::ConfigEdit`] (`toml_edit`: the comments and layout of everything else stay),
//! check the result with the start-up loader ([`config::parse`]), write it atomically (a new
//! file beside it with the old one's mode, renamed over it; through a symbolic link, the file
//! it points at), then [`Gateway::reload`], which applies it and records the text so the file
//! watch does not apply it a second time. A change that would not load is refused with every
//! problem named, and the file is not touched; a file the gateway cannot edit (`mcpServers`
//! JSON served as it is, none at all) refuses every change.
//!
//! Secrets: a server given here follows the file's rules, so a literal value under a
//! secret-looking header or environment name is refused as the loader refuses it (it wants
//! `{ env = "VAR" }`); servers pasted as `mcpServers` JSON are imported as `mcpgw import` does
//! (such a value becomes a reference to a variable, and a warning names the variable). No
//! answer repeats a value: problems name keys, warnings name variables.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::{Gateway, ReloadReport};

/// One change to the configured servers.
#[derive(Debug, Clone)]
pub enum ServerChange {
    /// A server as a `[[servers]]` table in JSON.
    Add(Map<String, Value>),
    /// `mcpServers` JSON (Claude Desktop, Cursor) or VS Code's `servers`, as pasted: every
    /// server in it.
    Import(String),
    /// Server `name`'s table replaced by this one.
    Replace(String, Map<String, Value>),
    /// A JSON merge patch of server `name`'s table.
    Patch(String, Map<String, Value>),
    Remove(String),
    /// `enabled = true` or `false`.
    Enable(String, bool),
}

impl ServerChange {
    /// What a `POST /admin/v1/servers` body asks: servers pasted from a desktop client when it
    /// has their `mcpServers`, `servers` or `mcp` object, else one `[[servers]]` table.
    pub fn added(text: &str, body: Map<String, Value>) -> ServerChange {
        let pasted = body.contains_key("mcpServers")
            || body.contains_key("mcp")
            || body.get("servers").is_some_and(Value::is_object);
        if pasted {
            ServerChange::Import(text.to_owned())
        } else {
            ServerChange::Add(body)
        }
    }
}

/// What a change did: the reload it made, and what the caller should know.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Changed {
    /// The servers the change was about, by the names the file gives them.
    pub servers: Vec<String>,
    #[serde(flatten)]
    pub reload: ReloadReport,
    /// Said by an import: servers renamed, variables to export, fields left out.
    pub warnings: Vec<String>,
}

/// Why a change was not made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChangeError {
    /// What was asked is not a server, or the file would not load with it; nothing was
    /// written. `problems` names each, by key.
    #[error("{message}")]
    Invalid {
        message: String,
        problems: Vec<String>,
    },
    #[error("{0}")]
    NoSuchServer(String),
    /// The file cannot take the change: the server exists already, the gateway serves JSON
    /// or no file, the file changed underneath.
    #[error("{0}")]
    Conflict(String),
    /// The file could not be read or written (the log says why; the message names the file).
    #[error("{0}")]
    Io(String),
}

impl Gateway {
    /// Makes `change` to the configuration file and applies it (see the module docs).
    pub async fn change_servers(
        self: &Arc<Self>,
        change: ServerChange,
    ) -> Result<Changed, ChangeError> {
        let _one_at_a_time = self.config_writes.lock().await;
        let path = self.config().source.clone();
        let FileChange { servers, warnings } = change_file(&path, change).await?;
        match self.reload().await {
            Ok(reload) => Ok(Changed {
                servers,
                reload,
                warnings,
            }),
            Err(error) => Err(ChangeError::Conflict(format!(
                "the change was written, but the file changed again before it was applied: {error}"
            ))),
        }
    }
}

/// What [`change_file`] did: the servers the change was about, and an import's warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub servers: Vec<String>,
    pub warnings: Vec<String>,
}

/// Makes `change` to the configuration file at `path` without applying it: read, edit with
/// [`config::ConfigEdit`], check with the loader, write in one rename (see the module docs).
/// [`Gateway::change_servers`] applies it next; `mcpgw servers add|remove|enable|disable`
/// calls this alone when no gateway answers (a gateway started later, or one watching the
/// file, applies it).
pub async fn change_file(path: &Path, change: ServerChange) -> Result<FileChange, ChangeError> {
    let text = read(path).await?;
    let mut edit = config::ConfigEdit::parse(&text, path).map_err(edit_error)?;
    let (servers, warnings) = make(&mut edit, change)?;
    let changed = edit.text();
    config::parse(&changed, path)
        .map_err(|error| refused(&error, "the configuration would not load"))?;
    if changed != text {
        write(path, changed).await?;
    }
    Ok(FileChange { servers, warnings })
}

/// Makes `change` in `edit`: the servers it is about, and an import's warnings.
fn make(
    edit: &mut config::ConfigEdit,
    change: ServerChange,
) -> Result<(Vec<String>, Vec<String>), ChangeError> {
    let name = match change {
        ServerChange::Add(server) => edit.add(&server),
        ServerChange::Import(text) => {
            let imported = config::import_mcp_servers_json(&text)
                .map_err(|error| refused(&error, "the pasted JSON is not usable"))?;
            let names = edit.add_imported(&imported.toml).map_err(edit_error)?;
            return Ok((names, imported.warnings));
        }
        ServerChange::Replace(name, server) => edit.replace(&name, &server).map(|()| name),
        ServerChange::Patch(name, patch) => edit.patch(&name, &patch).map(|()| name),
        ServerChange::Remove(name) => edit.remove(&name).map(|()| name),
        ServerChange::Enable(name, enabled) => edit.set_enabled(&name, enabled).map(|()| name),
    }
    .map_err(edit_error)?;
    Ok((vec![name], Vec::new()))
}

fn edit_error(error: config::EditError) -> ChangeError {
    use config::EditError as E;
    let message = error.to_string();
    match error {
        E::NotAServer(_) => ChangeError::Invalid {
            message,
            problems: Vec::new(),
        },
        E::NoSuchServer(_) => ChangeError::NoSuchServer(message),
        E::McpServersJson { .. } | E::NotToml(_) | E::ServersNotTables(_) | E::Exists(_) => {
            ChangeError::Conflict(message)
        }
    }
}

/// A change the loader refuses, `why`: each problem by its key (the line and column would be
/// those of a file never written), nothing else of the text.
fn refused(error: &config::ConfigError, why: &str) -> ChangeError {
    let problems: Vec<String> = match error {
        config::ConfigError::Invalid(problems) => problems
            .iter()
            .map(|problem| {
                let mut unplaced = problem.clone();
                unplaced.location = None;
                unplaced.to_string()
            })
            .collect(),
        other => vec![other.to_string()],
    };
    ChangeError::Invalid {
        message: format!("not changed: {why}: {}", problems.join("; ")),
        problems,
    }
}

/// The file's text; a gateway without one, or whose file is gone, cannot change it.
async fn read(path: &Path) -> Result<String, ChangeError> {
    if path.as_os_str().is_empty() {
        return Err(ChangeError::Conflict(
            "the gateway was started without a configuration file: there is no file to change"
                .to_owned(),
        ));
    }
    match tokio::fs::read(path).await {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| ChangeError::Conflict(format!("{} is not UTF-8 text", path.display()))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(ChangeError::Conflict(format!(
                "the configuration file {} is gone: there is no file to change",
                path.display()
            )))
        }
        Err(error) => {
            tracing::error!(file = %path.display(), %error, "cannot read the configuration file");
            Err(ChangeError::Io(format!(
                "cannot read {}; the log says why",
                path.display()
            )))
        }
    }
}

/// Replaces the file with `text` in one rename; see [`replace_file`].
async fn write(path: &Path, text: String) -> Result<(), ChangeError> {
    let target = path.to_owned();
    let written = tokio::task::spawn_blocking(move || replace_file(&target, text.as_bytes()))
        .await
        .unwrap_or_else(|joined| Err(std::io::Error::other(joined)));
    written.map_err(|error| {
        tracing::error!(file = %path.display(), %error, "cannot write the configuration file");
        ChangeError::Io(format!(
            "cannot write {}; the log says why (the file is unchanged)",
            path.display()
        ))
    })
}

/// Writes `bytes` to a new file beside `path` (the file a symbolic link points at), with
/// `path`'s permissions, and renames it over `path`: a reader (the file watch, an editor) sees
/// the old file or the new one, never half of one.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let path = std::fs::canonicalize(path)?;
    let permissions = std::fs::metadata(&path)?.permissions();
    let temporary = temporary_beside(&path);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .and_then(|mut file| {
            file.set_permissions(permissions)?;
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// `.NAME.PID.tmp` in `path`'s directory: hidden, and never another process's.
fn temporary_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_keeps_its_mode_and_a_link_to_it_stays_a_link() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real.toml");
        std::fs::write(&real, "old\n").expect("write");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let link = dir.path().join("mcpgw.toml");
        symlink(&real, &link).expect("symlink");
        replace_file(&link, b"new\n").expect("replaced");
        assert_eq!(std::fs::read_to_string(&link).expect("read"), "new\n");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("link")
                .file_type()
                .is_symlink()
        );
        let mode = std::fs::metadata(&real).expect("real").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        assert_eq!(left.len(), 2, "no temporary file left: {left:?}");
    }

    #[test]
    fn a_pasted_snippet_is_told_from_a_server_table() {
        let body = |text: &str| match serde_json::from_str(text) {
            Ok(Value::Object(map)) => ServerChange::added(text, map),
            other => panic!("{other:?}"),
        };
        for pasted in [
            r#"{"mcpServers": {"a": {"command": "a"}}}"#,
            r#"{"servers": {"a": {"command": "a"}}, "inputs": []}"#,
            r#"{"mcp": {"servers": {}}}"#,
        ] {
            assert!(matches!(body(pasted), ServerChange::Import(_)), "{pasted}");
        }
        let table = r#"{"name": "a", "transport": {"type": "stdio", "command": "a"}}"#;
        assert!(matches!(body(table), ServerChange::Add(_)));
    }
}
