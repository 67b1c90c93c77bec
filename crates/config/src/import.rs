//! Import of the `mcpServers` JSON used by Claude Desktop, Cursor, Claude Code and VS Code.
//!
//! One mapping serves two callers: `mcpgw import` (which writes TOML and moves every
//! secret into an environment reference) and [`crate::load`] on a `.json` file (which keeps
//! inline values, see there).

mod render;

use std::collections::BTreeMap;
use std::path::Path;

use crate::auth::{AUTHORIZATION, env_name_problem};
use crate::file::{
    AuditFile, AuthFile, BearerAuthFile, GatewayFile, HttpFile, NetworkFile, RetrievalFile,
    ServerFile, StdioFile, StoreFile, TelemetryFile, TransportFile, ValueFile,
};
use crate::json::Json;
use crate::validate::{self, BEARER, InlineSecrets, LocatedServer, header_var_name};
use crate::value::looks_secret;
use crate::{Config, ConfigError, Problem, ServerConfig, ServerName};

/// The result of converting an `mcpServers` JSON document.
#[derive(Debug)]
pub struct Imported {
    /// mcpgw.toml text holding no secret value; it parses with [`crate::parse_toml`].
    pub toml: String,
    /// Things the user must know or do: renamed servers, variables to export, fields left
    /// out. They name variables, never their values.
    pub warnings: Vec<String>,
    /// The servers as the TOML describes them, in input order.
    pub servers: Vec<ServerConfig>,
}

/// Convert Claude Desktop / Cursor (`{"mcpServers": {..}}`) or VS Code
/// (`{"servers": {..}, "inputs": [..]}`, also nested under `"mcp"` in settings.json) JSON
/// into mcpgw.toml.
///
/// Inline values under secret-looking names (`GITHUB_TOKEN`, `Authorization`, ..) and VS Code
/// `${input:..}` placeholders become `{ env = "VAR" }` references with a warning saying
/// which variable to export; `${env:VAR}` becomes a reference to `VAR`.
pub fn import_mcp_servers_json(text: &str) -> Result<Imported, ConfigError> {
    // No file path exists at this level; the caller adds it to errors if it has one.
    let source = Path::new("<mcpServers JSON>");
    let Mapped {
        servers,
        warnings,
        problems,
    } = map(text, source, Secrets::Reference)?;
    let files: Vec<&ServerFile> = servers.iter().map(|located| &located.server).collect();
    let toml = render::render(&files);
    let config = finish(servers, problems, Path::new(""), InlineSecrets::Reject)?;
    Ok(Imported {
        toml,
        warnings,
        servers: config.servers,
    })
}

/// The `load` path for a JSON file: same mapping, inline values kept as they are.
pub(crate) fn config_from_json(text: &str, source: &Path) -> Result<Config, ConfigError> {
    let resolved = resolve_json(text, source)?;
    if resolved.problems.is_empty() {
        Ok(resolved.config)
    } else {
        Err(ConfigError::Invalid(resolved.problems))
    }
}

/// [`config_from_json`] as far as the file is valid. A refusal of the network policy tells the
/// user to write its remedy into an mcpgw.toml made from this file: the JSON has no
/// `[network]` settings.
pub(crate) fn resolve_json(text: &str, source: &Path) -> Result<validate::Resolved, ConfigError> {
    let Mapped {
        servers,
        mut problems,
        ..
    } = map(text, source, Secrets::Inline)?;
    let mut resolved = validate::resolve_partial(
        GatewayFile::default(),
        servers,
        default_tables(),
        Default::default(),
        source,
        InlineSecrets::Allow,
    );
    problems.append(&mut resolved.problems);
    resolved.problems = problems;
    resolved.config.network.settings = netguard::Settings::McpServersJson {
        file: source.display().to_string(),
        toml: source.with_file_name("mcpgw.toml").display().to_string(),
    };
    Ok(resolved)
}

/// What happens to an inline value under a secret-looking name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Secrets {
    /// Replace it with an env reference (import: the TOML must be safe to share).
    Reference,
    /// Keep it (serving the user's JSON file in place).
    Inline,
}

struct Mapped {
    servers: Vec<LocatedServer>,
    warnings: Vec<String>,
    problems: Vec<Problem>,
}

fn map(text: &str, source: &Path, secrets: Secrets) -> Result<Mapped, ConfigError> {
    let root: Json = serde_json::from_str(text.trim_start_matches('\u{feff}')).map_err(|err| {
        let message = err.to_string();
        // serde_json appends the position, which `Parse` already shows.
        let message = match message.rfind(" at line ") {
            Some(i) => message[..i].to_owned(),
            None => message,
        };
        ConfigError::Parse {
            path: source.to_owned(),
            line: err.line(),
            column: err.column(),
            message,
        }
    })?;
    let mut mapper = Mapper {
        secrets,
        names: Vec::new(),
        warnings: Vec::new(),
        problems: Vec::new(),
    };
    let servers = mapper.document(&root);
    Ok(Mapped {
        servers,
        warnings: mapper.warnings,
        problems: mapper.problems,
    })
}

/// The tables an `mcpServers` file has no equivalent of: every one at its default.
fn default_tables() -> (
    RetrievalFile,
    StoreFile,
    NetworkFile,
    AuditFile,
    TelemetryFile,
) {
    Default::default()
}

fn finish(
    servers: Vec<LocatedServer>,
    mut problems: Vec<Problem>,
    source: &Path,
    inline_secrets: InlineSecrets,
) -> Result<Config, ConfigError> {
    let resolved = validate::resolve(
        GatewayFile::default(),
        servers,
        default_tables(),
        Default::default(),
        source,
        inline_secrets,
    );
    match resolved {
        Ok(config) if problems.is_empty() => Ok(config),
        Ok(_) => Err(ConfigError::Invalid(problems)),
        Err(ConfigError::Invalid(more)) => {
            problems.extend(more);
            Err(ConfigError::Invalid(problems))
        }
        Err(err) => Err(err),
    }
}

struct Mapper {
    secrets: Secrets,
    /// Final server names so far, to keep sanitised names unique.
    names: Vec<String>,
    warnings: Vec<String>,
    problems: Vec<Problem>,
}

/// The fields of one JSON server entry, before the transport is known.
#[derive(Default)]
struct Entry<'a> {
    /// The `type` field with its path, for the "unknown transport type" problem.
    kind: Option<(String, String)>,
    command: Option<String>,
    args: Vec<String>,
    env: Option<(String, &'a Json)>,
    cwd: Option<String>,
    url: Option<String>,
    headers: Option<(String, &'a Json)>,
    disabled: bool,
    description: Option<String>,
}

impl Mapper {
    fn document(&mut self, root: &Json) -> Vec<LocatedServer> {
        let Json::Object(_) = root else {
            self.problems.push(Problem::new(
                "top level",
                format!("expected an object, found {}", root.kind()),
            ));
            return Vec::new();
        };
        let vscode = root.get("mcp").and_then(|mcp| mcp.get("servers"));
        let sections = [
            ("mcpServers", root.get("mcpServers")),
            ("servers", root.get("servers")),
            ("mcp.servers", vscode),
        ];
        let mut present = sections
            .into_iter()
            .filter_map(|(path, section)| Some((path, section?)));
        let Some((path, section)) = present.next() else {
            self.problems.push(
                Problem::new("top level", "no `mcpServers` or `servers` object found")
                    .hint(r#"expected {"mcpServers": {"name": {"command": "..."}}} or VS Code's {"servers": {..}}"#),
            );
            return Vec::new();
        };
        for (ignored, _) in present {
            self.warnings.push(format!(
                "`{ignored}` was left out: `{path}` is read instead"
            ));
        }
        let Json::Object(entries) = section else {
            self.problems.push(Problem::new(
                path,
                format!(
                    "expected an object mapping server names to servers, found {}",
                    section.kind()
                ),
            ));
            return Vec::new();
        };
        entries
            .iter()
            .filter_map(|(name, entry)| self.server(&format!("{path}.{name}"), name, entry))
            .collect()
    }

    fn server(&mut self, path: &str, raw_name: &str, entry: &Json) -> Option<LocatedServer> {
        let Json::Object(fields) = entry else {
            self.problems.push(Problem::new(
                path,
                format!("expected an object, found {}", entry.kind()),
            ));
            return None;
        };
        let name = self.server_name(raw_name);
        let mut e = Entry::default();
        for (key, value) in fields {
            let at = format!("{path}.{key}");
            match key.as_str() {
                "type" => e.kind = self.string(&at, value).map(|kind| (at, kind)),
                "command" => e.command = self.string(&at, value),
                "args" => e.args = self.strings(&at, value),
                "env" => e.env = Some((at, value)),
                "cwd" => e.cwd = self.string(&at, value),
                "url" => e.url = self.string(&at, value),
                "headers" => e.headers = Some((at, value)),
                "description" => e.description = self.string(&at, value),
                "disabled" => match value {
                    Json::Bool(disabled) => e.disabled = *disabled,
                    other => self.problems.push(Problem::new(
                        at,
                        format!("expected a boolean, found {}", other.kind()),
                    )),
                },
                other => self.warnings.push(format!(
                    "server `{name}`: `{other}` is not supported by mcpgw and was left out"
                )),
            }
        }
        let mut transport = self.transport(path, &name, &e)?;
        self.network_warning(&name, &transport);
        let auth = bearer_strategy(&mut transport);
        if matches!(transport, TransportFile::Stdio(_)) {
            self.left_out(
                &name,
                &[("url", e.url.is_some()), ("headers", e.headers.is_some())],
            );
        } else {
            let stdio_only = [
                ("command", e.command.is_some()),
                ("args", !e.args.is_empty()),
                ("env", e.env.is_some()),
                ("cwd", e.cwd.is_some()),
            ];
            self.left_out(&name, &stdio_only);
        }
        let server = ServerFile {
            name: Some(name),
            description: e.description,
            timeout_s: None,
            refresh_s: None,
            ping_s: None,
            ping_misses: None,
            enabled: e.disabled.then_some(false),
            transport: Some(transport),
            auth,
            allow_private_network: None,
            trust_changes: None,
        };
        Some(LocatedServer {
            path: path.to_owned(),
            transport_path: path.to_owned(),
            server,
        })
    }

    /// A desktop client reaches `http://localhost:3000/mcp` as it is; mcpgw refuses it until
    /// `[network] allow` or `allow_private_network` says so. Say which line, at import time
    /// rather than at the first connect. (Only what the URL alone shows: a name that resolves
    /// to a private address is found at connect.)
    fn network_warning(&mut self, name: &str, transport: &TransportFile) {
        let (TransportFile::Http(http) | TransportFile::Sse(http)) = transport else {
            return;
        };
        let Some(url) = http.url.as_deref().and_then(|u| url::Url::parse(u).ok()) else {
            return;
        };
        let policy = netguard::Policy::default().for_server(name, false);
        if let Err(refusal) = netguard::check_url(&url, &policy)
            && (refusal.suggested_allow().is_some() || refusal.suggests_private_network())
        {
            self.warnings.push(format!(
                "server `{name}` is not reachable until allowed: {refusal}"
            ));
        }
    }

    fn transport(&mut self, path: &str, name: &str, e: &Entry<'_>) -> Option<TransportFile> {
        #[derive(PartialEq)]
        enum Kind {
            Stdio,
            Http,
            Sse,
        }
        let kind = match &e.kind {
            Some((_, kind)) if kind == "stdio" => Kind::Stdio,
            Some((_, kind))
                if ["http", "streamable-http", "streamableHttp"].contains(&kind.as_str()) =>
            {
                Kind::Http
            }
            Some((_, kind)) if kind == "sse" => Kind::Sse,
            Some((at, kind)) => {
                self.problems.push(
                    Problem::new(at, format!("unknown transport type `{kind}`"))
                        .hint(r#"use "stdio", "http" or "sse""#),
                );
                return None;
            }
            None if e.command.is_some() => Kind::Stdio,
            // Legacy SSE servers conventionally serve at `/sse`; everything else is taken to
            // be Streamable HTTP, the current transport.
            None if e.url.as_deref().is_some_and(is_sse_url) => Kind::Sse,
            None if e.url.is_some() => Kind::Http,
            None => {
                self.problems.push(
                    Problem::new(path, "neither `command` nor `url` is given")
                        .hint(r#"a local server needs "command", a remote one "url""#),
                );
                return None;
            }
        };
        if kind == Kind::Stdio {
            for (i, arg) in e.args.iter().enumerate() {
                self.unexpanded(name, &format!("args[{i}]"), arg);
            }
            for (field, text) in [("command", &e.command), ("cwd", &e.cwd)] {
                if let Some(text) = text {
                    self.unexpanded(name, field, text);
                }
            }
            let env = self.values(name, Field::Env, e.env.as_ref());
            return Some(TransportFile::Stdio(StdioFile {
                command: e.command.clone(),
                args: e.args.clone(),
                env,
                cwd: e.cwd.clone(),
            }));
        }
        if let Some(url) = &e.url {
            self.unexpanded(name, "url", url);
        }
        let headers = self.values(name, Field::Header, e.headers.as_ref());
        let http = HttpFile {
            url: e.url.clone(),
            headers,
        };
        Some(if kind == Kind::Sse {
            TransportFile::Sse(http)
        } else {
            TransportFile::Http(http)
        })
    }

    /// `raw` sanitised into a valid, unused server name; a change is reported as a warning.
    fn server_name(&mut self, raw: &str) -> String {
        let (mut name, mut reason) = match ServerName::problem(raw) {
            None => (raw.to_owned(), None),
            Some(reason) => (ServerName::sanitize(raw).as_str().to_owned(), Some(reason)),
        };
        if self.names.contains(&name) {
            name = ServerName::unused(&name, &self.names);
            reason.get_or_insert_with(|| "the name is already used".into());
        }
        if let Some(reason) = reason {
            self.warnings
                .push(format!("server `{raw}` renamed to `{name}`: {reason}"));
        }
        self.names.push(name.clone());
        name
    }

    fn string(&mut self, at: &str, value: &Json) -> Option<String> {
        match value {
            Json::String(text) => Some(text.clone()),
            other => {
                self.problems.push(Problem::new(
                    at,
                    format!("expected a string, found {}", other.kind()),
                ));
                None
            }
        }
    }

    fn strings(&mut self, at: &str, value: &Json) -> Vec<String> {
        let Json::Array(items) = value else {
            self.problems.push(Problem::new(
                at,
                format!("expected an array of strings, found {}", value.kind()),
            ));
            return Vec::new();
        };
        let mut strings = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            strings.extend(self.string(&format!("{at}[{i}]"), item));
        }
        strings
    }

    fn left_out(&mut self, server: &str, fields: &[(&str, bool)]) {
        for (field, present) in fields {
            if *present {
                self.warnings.push(format!(
                    "server `{server}`: `{field}` does not apply to this transport and was left out"
                ));
            }
        }
    }

    /// Placeholders such as `${workspaceFolder}` stay literal text; say so.
    fn unexpanded(&mut self, server: &str, field: &str, text: &str) {
        if text.contains("${") {
            self.warnings.push(format!(
                "server `{server}`: {field} contains a `${{..}}` placeholder that mcpgw does not expand"
            ));
        }
    }

    fn values(
        &mut self,
        server: &str,
        field: Field,
        raw: Option<&(String, &Json)>,
    ) -> BTreeMap<String, ValueFile> {
        let mut values = BTreeMap::new();
        let Some(&(ref at, raw)) = raw else {
            return values;
        };
        let Json::Object(entries) = raw else {
            self.problems.push(Problem::new(
                at,
                format!("expected an object of strings, found {}", raw.kind()),
            ));
            return values;
        };
        for (name, value) in entries {
            let text = match value {
                Json::String(text) => text.clone(),
                // `"PORT": 8080` is common and meant as the string "8080".
                Json::Number(number) => number.to_string(),
                Json::Bool(b) => b.to_string(),
                other => {
                    self.problems.push(Problem::new(
                        format!("{at}.{name}"),
                        format!("expected a string, found {}", other.kind()),
                    ));
                    continue;
                }
            };
            let value = self.value(server, field, name, text);
            values.insert(name.clone(), value);
        }
        values
    }

    fn value(&mut self, server: &str, field: Field, name: &str, text: String) -> ValueFile {
        // For env the gateway reads the same variable it passes on; a header gets its own.
        let var = match field {
            Field::Env => name.to_owned(),
            Field::Header => header_var_name(server, name),
        };
        let what = match field {
            Field::Env => "env",
            Field::Header => "header",
        };
        let to_prefix = |prefix: &str| (!prefix.is_empty()).then(|| prefix.to_owned());
        match placeholder(&text) {
            Some((prefix, Placeholder::Env(env))) => {
                return ValueFile::Env {
                    env: env.to_owned(),
                    prefix: to_prefix(prefix),
                };
            }
            Some((prefix, Placeholder::Input(input))) => {
                self.warnings.push(format!(
                    "server `{server}`: {what} {name} came from VS Code input `{input}`; export {var} before `mcpgw serve`"
                ));
                return ValueFile::Env {
                    env: var,
                    prefix: to_prefix(prefix),
                };
            }
            None => {}
        }
        self.unexpanded(server, &format!("{what} {name}"), &text);
        if self.secrets == Secrets::Reference && looks_secret(name) {
            // Only the shape of the value (a `Bearer ` prefix) is carried over, never its text.
            let bearer = text.starts_with(BEARER);
            let without = if bearer {
                " (the token without \"Bearer \")"
            } else {
                ""
            };
            self.warnings.push(format!(
                "server `{server}`: {what} {name} held a secret inline; it is now read from the environment, export {var}{without} before `mcpgw serve`"
            ));
            return ValueFile::Env {
                env: var,
                prefix: bearer.then(|| BEARER.to_owned()),
            };
        }
        ValueFile::Plain(text)
    }
}

#[derive(Debug, Clone, Copy)]
enum Field {
    Env,
    Header,
}

enum Placeholder<'a> {
    Input(&'a str),
    Env(&'a str),
}

/// A VS Code `${input:id}` or `${env:VAR}` that ends `text`, with the text before it (so
/// `"Bearer ${input:token}"` keeps its prefix). Anywhere else a placeholder cannot be
/// expressed as a `Value` and is left alone.
fn placeholder(text: &str) -> Option<(&str, Placeholder<'_>)> {
    let start = text.rfind("${")?;
    let (prefix, rest) = text.split_at(start);
    let inner = rest.strip_prefix("${")?.strip_suffix('}')?;
    if prefix.contains("${") || inner.contains('}') {
        return None;
    }
    if let Some(input) = inner.strip_prefix("input:") {
        return Some((prefix, Placeholder::Input(input)));
    }
    inner
        .strip_prefix("env:")
        .map(|var| (prefix, Placeholder::Env(var)))
}

/// An `Authorization: Bearer <variable>` header (a `${env:..}` placeholder, or a secret the
/// import moved to the environment) becomes the bearer strategy, which is what it means.
/// Anything else, such as an inline token served from the JSON file, stays a header.
fn bearer_strategy(transport: &mut TransportFile) -> Option<AuthFile> {
    let (TransportFile::Http(http) | TransportFile::Sse(http)) = transport else {
        return None;
    };
    let key = http.headers.iter().find_map(|(name, value)| match value {
        ValueFile::Env {
            env,
            prefix: Some(prefix),
        } if name.eq_ignore_ascii_case(AUTHORIZATION)
            && prefix == BEARER
            && env_name_problem(env).is_none() =>
        {
            Some(name.clone())
        }
        _ => None,
    })?;
    let Some(ValueFile::Env { env, .. }) = http.headers.remove(&key) else {
        return None;
    };
    Some(AuthFile::Bearer(BearerAuthFile { env: Some(env) }))
}

fn is_sse_url(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|url| url.path().trim_end_matches('/').ends_with("/sse"))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use expect_test::{Expect, expect};

    use super::*;
    use crate::validate::tests::summary;
    use crate::{load, parse_toml};

    /// Imports `json`, checks that no string containing `SECRET` leaked into the TOML, the
    /// warnings or the error, that the TOML round-trips to the same servers, and snapshots the result.
    fn check(json: &str, expect: Expect) {
        let actual = match import_mcp_servers_json(json) {
            Err(err) => {
                let err = format!("error {err}");
                assert!(!err.contains("SECRET"), "{err}");
                err
            }
            Ok(imported) => {
                assert!(!imported.toml.contains("SECRET"), "{}", imported.toml);
                for warning in &imported.warnings {
                    assert!(!warning.contains("SECRET"), "{warning}");
                }
                let reparsed = parse_toml(&imported.toml, Path::new(""));
                let reparsed = reparsed.map_err(|err| err.to_string());
                assert_eq!(
                    reparsed.map(|c| c.servers),
                    Ok(imported.servers.clone()),
                    "{}",
                    imported.toml
                );
                let mut out = String::new();
                for warning in &imported.warnings {
                    out.push_str(&format!("warning: {warning}\n"));
                }
                out.push_str(&imported.toml);
                out
            }
        };
        expect.assert_eq(&actual);
    }

    #[test]
    fn claude_desktop_config_with_inline_secrets() {
        check(
            r#"{
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_SECRET_A", "LOG_LEVEL": "debug", "PORT": 8080 }
    },
    "everything": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"] },
    "My Notes!": { "command": "uvx", "args": ["notes-mcp"], "cwd": "/home/me/notes", "disabled": true, "autoApprove": ["read"] },
    "remote": { "url": "https://mcp.example.com/sse", "headers": { "Authorization": "Bearer SECRET_B" } }
  },
  "globalShortcut": "Ctrl+Space"
}"#,
            expect![[r#"
                warning: server `github`: env GITHUB_PERSONAL_ACCESS_TOKEN held a secret inline; it is now read from the environment, export GITHUB_PERSONAL_ACCESS_TOKEN before `mcpgw serve`
                warning: server `My Notes!` renamed to `My-Notes`: contains ' '; only letters, digits, `-` and `_` are allowed
                warning: server `My-Notes`: `autoApprove` is not supported by mcpgw and was left out
                warning: server `remote`: header Authorization held a secret inline; it is now read from the environment, export REMOTE_AUTHORIZATION (the token without "Bearer ") before `mcpgw serve`
                # Generated by `mcpgw import` from an mcpServers JSON file.
                # Secrets are read from the environment when a server is connected; export:
                #   GITHUB_PERSONAL_ACCESS_TOKEN
                #   REMOTE_AUTHORIZATION

                [[servers]]
                name = "github"

                [servers.transport]
                type = "stdio"
                command = "npx"
                args = ["-y", "@modelcontextprotocol/server-github"]

                [servers.transport.env]
                GITHUB_PERSONAL_ACCESS_TOKEN = { env = "GITHUB_PERSONAL_ACCESS_TOKEN" }
                LOG_LEVEL = "debug"
                PORT = "8080"

                [[servers]]
                name = "everything"
                transport = { type = "stdio", command = "npx", args = ["-y", "@modelcontextprotocol/server-everything"] }

                [[servers]]
                name = "My-Notes"
                enabled = false
                transport = { type = "stdio", command = "uvx", args = ["notes-mcp"], cwd = "/home/me/notes" }

                [[servers]]
                name = "remote"
                auth = { type = "bearer", env = "REMOTE_AUTHORIZATION" }
                transport = { type = "sse", url = "https://mcp.example.com/sse" }
            "#]],
        );
    }

    #[test]
    fn cursor_config_with_url_servers() {
        check(
            r#"{"mcpServers": {
  "docs": { "type": "streamableHttp", "url": "https://docs.example.com/mcp", "headers": { "X-Api-Key": "SECRET_C", "X-Team": "infra" } },
  "old": { "url": "http://127.0.0.1:3003/sse/" },
  "new": { "type": "http", "url": "http://127.0.0.1:3004/mcp", "command": "ignored" },
  "forced-sse": { "type": "sse", "url": "http://127.0.0.1:3005/events" }
}}"#,
            expect![[r#"
                warning: server `docs`: header X-Api-Key held a secret inline; it is now read from the environment, export DOCS_X_API_KEY before `mcpgw serve`
                warning: server `old` is not reachable until allowed: refused http://127.0.0.1:3003: 127.0.0.1 is not a public address (loopback); to allow it, add "127.0.0.1" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'old'
                warning: server `new` is not reachable until allowed: refused http://127.0.0.1:3004: 127.0.0.1 is not a public address (loopback); to allow it, add "127.0.0.1" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'new'
                warning: server `new`: `command` does not apply to this transport and was left out
                warning: server `forced-sse` is not reachable until allowed: refused http://127.0.0.1:3005: 127.0.0.1 is not a public address (loopback); to allow it, add "127.0.0.1" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'forced-sse'
                # Generated by `mcpgw import` from an mcpServers JSON file.
                # Secrets are read from the environment when a server is connected; export:
                #   DOCS_X_API_KEY

                [[servers]]
                name = "docs"

                [servers.transport]
                type = "http"
                url = "https://docs.example.com/mcp"

                [servers.transport.headers]
                X-Api-Key = { env = "DOCS_X_API_KEY" }
                X-Team = "infra"

                [[servers]]
                name = "old"
                transport = { type = "sse", url = "http://127.0.0.1:3003/sse/" }

                [[servers]]
                name = "new"
                transport = { type = "http", url = "http://127.0.0.1:3004/mcp" }

                [[servers]]
                name = "forced-sse"
                transport = { type = "sse", url = "http://127.0.0.1:3005/events" }
            "#]],
        );
    }

    #[test]
    fn vscode_config_with_inputs_and_env_placeholders() {
        check(
            r#"{
  "inputs": [{ "type": "promptString", "id": "github_token", "description": "GitHub PAT", "password": true }],
  "servers": {
    "github": { "type": "http", "url": "https://api.githubcopilot.com/mcp/", "headers": { "Authorization": "Bearer ${input:github_token}" } },
    "fetch": {
      "type": "stdio", "command": "uvx", "args": ["mcp-server-fetch", "--root", "${workspaceFolder}"],
      "env": { "API_KEY": "${env:FETCH_KEY}", "SESSION": "${input:session}" }, "envFile": "${workspaceFolder}/.env"
    }
  }
}"#,
            expect![[r#"
                warning: server `github`: header Authorization came from VS Code input `github_token`; export GITHUB_AUTHORIZATION before `mcpgw serve`
                warning: server `fetch`: `envFile` is not supported by mcpgw and was left out
                warning: server `fetch`: args[2] contains a `${..}` placeholder that mcpgw does not expand
                warning: server `fetch`: env SESSION came from VS Code input `session`; export SESSION before `mcpgw serve`
                # Generated by `mcpgw import` from an mcpServers JSON file.
                # Secrets are read from the environment when a server is connected; export:
                #   GITHUB_AUTHORIZATION
                #   FETCH_KEY
                #   SESSION

                [[servers]]
                name = "github"
                auth = { type = "bearer", env = "GITHUB_AUTHORIZATION" }
                transport = { type = "http", url = "https://api.githubcopilot.com/mcp/" }

                [[servers]]
                name = "fetch"

                [servers.transport]
                type = "stdio"
                command = "uvx"
                args = ["mcp-server-fetch", "--root", "${workspaceFolder}"]

                [servers.transport.env]
                API_KEY = { env = "FETCH_KEY" }
                SESSION = { env = "SESSION" }
            "#]],
        );
    }

    #[test]
    fn vscode_settings_nest_servers_under_mcp() {
        check(
            r#"{"mcp": {"servers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}, "editor.fontSize": 14}"#,
            expect![[r##"
            # Generated by `mcpgw import` from an mcpServers JSON file.

            [[servers]]
            name = "time"
            transport = { type = "stdio", command = "uvx", args = ["mcp-server-time"] }
        "##]],
        );
    }

    #[test]
    fn long_transports_use_tables() {
        check(
            r#"{"mcpServers": {"pg": {"command": "docker", "args": ["run", "-i", "--rm", "-e", "DATABASE_URL", "mcp/postgres"], "env": {"DB_PASSWORD": "SECRET_D", "PGHOST": "db.internal", "X Y": "z"}}}}"#,
            expect![[r#"
                warning: server `pg`: env DB_PASSWORD held a secret inline; it is now read from the environment, export DB_PASSWORD before `mcpgw serve`
                # Generated by `mcpgw import` from an mcpServers JSON file.
                # Secrets are read from the environment when a server is connected; export:
                #   DB_PASSWORD

                [[servers]]
                name = "pg"

                [servers.transport]
                type = "stdio"
                command = "docker"
                args = ["run", "-i", "--rm", "-e", "DATABASE_URL", "mcp/postgres"]

                [servers.transport.env]
                DB_PASSWORD = { env = "DB_PASSWORD" }
                PGHOST = "db.internal"
                "X Y" = "z"
            "#]],
        );
    }

    #[test]
    fn special_characters_round_trip() {
        check(
            r#"{"mcpServers": {"q": {"command": "C:\\Tools\\mcp.exe", "description": "say \"hi\"\nbye", "args": ["it's", "a\"b", "tab\there", "日本"], "env": {"my.var": "x=y"}}}}"#,
            expect![[r##"
                # Generated by `mcpgw import` from an mcpServers JSON file.

                [[servers]]
                name = "q"
                description = """
                say "hi"
                bye"""

                [servers.transport]
                type = "stdio"
                command = 'C:\Tools\mcp.exe'
                args = ["it's", 'a"b', "tab\there", "日本"]

                [servers.transport.env]
                "my.var" = "x=y"
            "##]],
        );
    }

    #[test]
    fn invalid_names_are_sanitised_and_kept_unique() {
        check(
            r#"{"mcpServers": {
  "my server": {"command": "a"},
  "my-server": {"command": "b"},
  "_x__y_": {"command": "c"},
  "": {"command": "d"},
  "a-very-long-server-name-that-goes-on-and-on": {"command": "e"},
  "a-very-long-server-name-that-goes-on-and-on-too": {"command": "f"}
}}"#,
            expect![[r#"
                warning: server `my server` renamed to `my-server`: contains ' '; only letters, digits, `-` and `_` are allowed
                warning: server `my-server` renamed to `my-server-2`: the name is already used
                warning: server `_x__y_` renamed to `x_y`: must not contain `__`, which separates server and tool in qualified tool names
                warning: server `` renamed to `server`: must not be empty
                warning: server `a-very-long-server-name-that-goes-on-and-on` renamed to `a-very-long-server-name-that-goe`: is 43 characters long; at most 32 are allowed
                warning: server `a-very-long-server-name-that-goes-on-and-on-too` renamed to `a-very-long-server-name-that-g-2`: is 47 characters long; at most 32 are allowed
                # Generated by `mcpgw import` from an mcpServers JSON file.

                [[servers]]
                name = "my-server"
                transport = { type = "stdio", command = "a" }

                [[servers]]
                name = "my-server-2"
                transport = { type = "stdio", command = "b" }

                [[servers]]
                name = "x_y"
                transport = { type = "stdio", command = "c" }

                [[servers]]
                name = "server"
                transport = { type = "stdio", command = "d" }

                [[servers]]
                name = "a-very-long-server-name-that-goe"
                transport = { type = "stdio", command = "e" }

                [[servers]]
                name = "a-very-long-server-name-that-g-2"
                transport = { type = "stdio", command = "f" }
            "#]],
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_json_path() {
        check(
            r#"{"mcpServers": {
  "nothing": {},
  "ws": {"type": "websocket", "url": "ws://x"},
  "args": {"command": "x", "args": "-y", "env": {"A": ["b"]}},
  "ftp": {"url": "ftp://example.com/mcp"},
  "smithery": {"url": "https://server.smithery.ai/x/mcp?api_key=SECRET_E"},
  "str": "npx server"
}}"#,
            expect![[r#"
                error invalid configuration (7 problems):
                  mcpServers.nothing: neither `command` nor `url` is given (hint: a local server needs "command", a remote one "url")
                  mcpServers.ws.type: unknown transport type `websocket` (hint: use "stdio", "http" or "sse")
                  mcpServers.args.args: expected an array of strings, found a string
                  mcpServers.args.env.A: expected a string, found an array
                  mcpServers.str: expected an object, found a string
                  mcpServers.ftp.url: url scheme `ftp` is not supported (hint: use an http:// or https:// url)
                  mcpServers.smithery.url: query parameter `api_key` looks like a secret and must not be written inline (hint: send it as a header with { env = "VAR" } if the server accepts one, or serve the mcpServers JSON file directly)"#]],
        );
        check(
            r#"{"servers": []}"#,
            expect![[r#"
            error invalid configuration (1 problem):
              servers: expected an object mapping server names to servers, found an array"#]],
        );
        check(
            r#"{"other": {}}"#,
            expect![[r#"
            error invalid configuration (1 problem):
              top level: no `mcpServers` or `servers` object found (hint: expected {"mcpServers": {"name": {"command": "..."}}} or VS Code's {"servers": {..}})"#]],
        );
        check(
            r#"[1]"#,
            expect![[r#"
            error invalid configuration (1 problem):
              top level: expected an object, found an array"#]],
        );
        check(
            "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}",
            expect!["error <mcpServers JSON>:3:26: trailing comma"],
        );
    }

    /// `load` on a JSON file serves it as it is: inline values stay, placeholders resolve.
    #[test]
    fn load_reads_mcp_servers_json_in_place() {
        let dir = tempfile::tempdir().expect("create temp dir");
        let json = r#"{"mcpServers": {"gh": {"command": "npx", "env": {"GITHUB_TOKEN": "ghp_inline", "K": "${env:K_SRC}"}}}}"#;
        let with_ext = dir.path().join("claude_desktop_config.json");
        let without_ext = dir.path().join("servers.conf");
        fs::write(&with_ext, json).expect("write json");
        fs::write(&without_ext, format!("\n  {json}")).expect("write json");
        let summaries: Vec<String> = [&with_ext, &without_ext]
            .into_iter()
            .map(|path| {
                let config = load(path).map_err(|err| err.to_string());
                assert_eq!(config.as_ref().map(|c| &c.source), Ok(path));
                config.map(|c| summary(&c)).unwrap_or_else(|err| err)
            })
            .collect();
        assert_eq!(summaries[0], summaries[1]);
        expect![[r#"
            listen=127.0.0.1:8931 exposure=Search strategy=Hybrid
            gh timeout=30s enabled=true
              stdio "npx" [] cwd=None env[GITHUB_TOKEN="ghp_inline" K=$K_SRC]
        "#]]
        .assert_eq(&summaries[0]);
    }

    #[test]
    fn load_reads_toml_and_reports_missing_files() {
        let dir = tempfile::tempdir().expect("create temp dir");
        let toml = dir.path().join("mcpgw.toml");
        fs::write(
            &toml,
            "[[servers]]\nname = \"a\"\ntransport = { type = \"stdio\", command = \"x\" }\n",
        )
        .expect("write toml");
        assert_eq!(load(&toml).map(|c| c.servers.len()).ok(), Some(1));
        let missing = dir.path().join("missing.toml");
        let err = load(&missing)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let err = err.replace(&dir.path().display().to_string(), "$DIR");
        expect!["cannot read $DIR/missing.toml: No such file or directory (os error 2)"]
            .assert_eq(&err);
    }
}
