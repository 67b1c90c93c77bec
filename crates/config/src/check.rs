//! `mcpgw config check`: every problem of a config file, and warnings about what the file
//! alone cannot show: a stdio command that is not on PATH, a URL the network policy will
//! refuse, a secret whose environment variable is unset.
//!
//! The warnings look at the machine this runs on (PATH, the environment, through
//! [`Environment`]), which loading a config never does: they say what will go wrong when this
//! machine serves the file, so they are warnings, not errors. What only connecting shows (a
//! host name that resolves to a private address, a server that does not answer) is
//! `mcpgw config check --connect`'s part.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::document::{self, Positions};
use crate::validate::ServerPaths;
use crate::{Auth, Config, ConfigError, EmbedderConfig, Problem, ServerConfig, Transport};

/// What `check` found in one file.
#[derive(Debug)]
pub struct Report {
    pub source: PathBuf,
    /// The configuration as far as it is valid: every server that resolved, defaults where a
    /// setting had a problem. `None` when the file could not be read at all.
    pub config: Option<Config>,
    /// Errors and warnings in line order (those without a line last).
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|finding| finding.severity == severity)
            .count()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub problem: Problem,
}

/// An error makes the file unusable (`mcpgw serve` refuses it); a warning is about this
/// machine, and the gateway starts with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// The state of an environment variable; never its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarState {
    Unset,
    /// Set to nothing but whitespace.
    Empty,
    Set,
}

/// What the warnings ask of the machine. A trait so tests can answer for it without changing
/// the process's environment.
pub trait Environment {
    fn var(&self, name: &str) -> VarState;
    /// Whether `command` would start: a path to an existing file (relative ones from `cwd`,
    /// else the current directory), or a bare name found in a directory on PATH.
    fn finds_command(&self, command: &str, cwd: Option<&Path>) -> bool;
}

/// The machine this process runs on.
pub struct ThisMachine;

impl Environment for ThisMachine {
    fn var(&self, name: &str) -> VarState {
        match std::env::var_os(name) {
            None => VarState::Unset,
            Some(value) if value.to_string_lossy().trim().is_empty() => VarState::Empty,
            Some(_) => VarState::Set,
        }
    }

    fn finds_command(&self, command: &str, cwd: Option<&Path>) -> bool {
        let path = Path::new(command);
        // As the OS looks a program up: a name with a slash is a path, anything else is
        // searched on PATH.
        if command.contains('/') {
            let path = match cwd {
                Some(cwd) if path.is_relative() => cwd.join(path),
                _ => path.to_owned(),
            };
            return path.is_file();
        }
        std::env::var_os("PATH").is_some_and(|dirs| {
            std::env::split_paths(&dirs).any(|dir| executable(&dir.join(command)))
        })
    }
}

#[cfg(unix)]
fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn executable(path: &Path) -> bool {
    path.is_file()
}

/// Check the config file at `path`: every problem, then the warnings about `env`. `Err` only
/// when the file cannot be read; a syntax error is a finding like any other.
pub fn check(path: &Path, env: &dyn Environment) -> Result<Report, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_owned(),
        source,
    })?;
    let read = if crate::is_json(path, &text) {
        crate::import::resolve_json(&text, path).map(|resolved| document::Checked {
            config: Some(resolved.config),
            paths: resolved.paths,
            problems: resolved.problems,
            positions: Positions::default(),
        })
    } else {
        document::resolve(&text, path)
    };
    let checked = match read {
        Ok(checked) => checked,
        Err(ConfigError::Parse {
            line,
            column,
            message,
            ..
        }) => {
            let problem = Problem {
                location: Some(crate::Location { line, column }),
                ..Problem::new("(syntax)", message)
            };
            return Ok(Report {
                source: path.to_owned(),
                config: None,
                findings: vec![Finding {
                    severity: Severity::Error,
                    problem,
                }],
            });
        }
        Err(err) => return Err(err),
    };
    let mut findings: Vec<Finding> = checked
        .problems
        .into_iter()
        .map(|problem| Finding {
            severity: Severity::Error,
            problem,
        })
        .collect();
    if let Some(config) = &checked.config {
        let mut warnings = warnings(config, &checked.paths, env);
        for warning in &mut warnings {
            warning.location = checked.positions.locate(&warning.path);
        }
        findings.extend(warnings.into_iter().map(|problem| Finding {
            severity: Severity::Warning,
            problem,
        }));
    }
    // Stable: an error and a warning on one spot keep that order.
    findings.sort_by_key(|finding| (finding.problem.location.is_none(), finding.problem.location));
    Ok(Report {
        source: path.to_owned(),
        config: checked.config,
        findings,
    })
}

/// The warnings for the enabled servers (a disabled one is not started) and the embedder.
fn warnings(config: &Config, paths: &[ServerPaths], env: &dyn Environment) -> Vec<Problem> {
    let mut warnings = Vec::new();
    for (server, at) in config.servers.iter().zip(paths) {
        if !server.enabled {
            continue;
        }
        match &server.transport {
            Transport::Stdio(stdio) => {
                if !env.finds_command(&stdio.command, stdio.cwd.as_deref()) {
                    warnings.push(missing_command(server, &stdio.command, at));
                }
                for (name, value) in &stdio.env {
                    if let Some(var) = value.env_var() {
                        warnings.extend(unset(env, var, &format!("{}.env.{name}", at.transport)));
                    }
                }
            }
            Transport::Http(http) | Transport::Sse(http) => {
                warnings.extend(refused(config, server, &http.url, at));
                for (name, value) in &http.headers {
                    if let Some(var) = value.env_var() {
                        warnings.extend(unset(
                            env,
                            var,
                            &format!("{}.headers.{name}", at.transport),
                        ));
                    }
                }
            }
        }
        match &server.auth {
            Auth::Bearer { env: var } => {
                warnings.extend(unset(env, var, &format!("{}.auth.env", at.server)));
            }
            Auth::Header(header) => {
                warnings.extend(unset(env, &header.env, &format!("{}.auth.env", at.server)));
            }
            Auth::OAuth(oauth) => {
                if let Some(var) = &oauth.client_secret_env {
                    warnings.extend(unset(
                        env,
                        var,
                        &format!("{}.auth.client_secret_env", at.server),
                    ));
                }
            }
            Auth::None => {}
        }
    }
    if let EmbedderConfig::Remote(remote) = &config.retrieval.embedder
        && let Some(var) = &remote.api_key_env
    {
        warnings.extend(unset(env, var, "retrieval.embedder.api_key_env"));
    }
    warnings
}

fn missing_command(server: &ServerConfig, command: &str, at: &ServerPaths) -> Problem {
    let hint = if command.contains('/') {
        "check the path; a relative one is taken from the server's cwd, else from where mcpgw starts".to_owned()
    } else {
        format!(
            "install it, or give its full path; mcpgw looks it up on the PATH it starts with (`command -v {command}` in the same shell shows whether it is found)"
        )
    };
    Problem::new(
        format!("{}.command", at.transport),
        format!(
            "server '{}': command `{command}` is not on PATH here, so the server cannot start",
            server.name
        ),
    )
    .hint(hint)
}

/// A warning when `var`, which a secret reference at `path` names, is unset or empty.
fn unset(env: &dyn Environment, var: &str, path: &str) -> Option<Problem> {
    let state = match env.var(var) {
        VarState::Set => return None,
        VarState::Unset => "is not set",
        VarState::Empty => "is empty",
    };
    Some(
        Problem::new(path, format!("environment variable {var} {state}"))
            .hint(format!("export {var} before starting mcpgw")),
    )
}

/// The refusal the network policy gives the configured URL, with the exact line that would
/// allow it. Only what the URL shows: a host name that resolves to a private address is
/// refused at connect (`--connect` reports it).
fn refused(
    config: &Config,
    server: &ServerConfig,
    url: &url::Url,
    at: &ServerPaths,
) -> Option<Problem> {
    let policy = config
        .network
        .policy()
        .for_server(server.name.as_str(), server.allow_private_network);
    let refusal = netguard::check_url(url, &policy).err()?;
    let mut lines = Vec::new();
    if let Some(entry) = refusal.suggested_allow() {
        let mut entries: Vec<String> = config
            .network
            .allow
            .iter()
            .map(|rule| format!("{:?}", rule.to_string()))
            .collect();
        entries.push(format!("{entry:?}"));
        let line = format!("allow = [{}]", entries.join(", "));
        lines.push(if config.network.allow.is_empty() {
            format!("add `[network]` with `{line}`")
        } else {
            format!("change `allow` under `[network]` to `{line}`")
        });
    }
    if refusal.suggests_private_network() {
        lines.push(format!(
            "add `allow_private_network = true` to server '{}'",
            server.name
        ));
    }
    let problem = Problem::new(format!("{}.url", at.transport), refusal.to_string());
    Some(match (&config.network.settings, lines.is_empty()) {
        (netguard::Settings::Toml { .. }, false) => {
            problem.hint(format!("the line to write: {}", lines.join(", or ")))
        }
        _ => problem,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use expect_test::{Expect, expect};

    use super::*;

    struct Fake {
        set: HashSet<&'static str>,
        empty: HashSet<&'static str>,
        commands: HashSet<&'static str>,
    }

    impl Environment for Fake {
        fn var(&self, name: &str) -> VarState {
            if self.set.contains(name) {
                VarState::Set
            } else if self.empty.contains(name) {
                VarState::Empty
            } else {
                VarState::Unset
            }
        }

        fn finds_command(&self, command: &str, _cwd: Option<&Path>) -> bool {
            self.commands.contains(command)
        }
    }

    fn check_text(name: &str, text: &str, expect: Expect) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        let env = Fake {
            set: HashSet::from(["DOCS_TOKEN"]),
            empty: HashSet::from(["EMPTY_KEY"]),
            commands: HashSet::from(["node", "npx"]),
        };
        let report = check(&path, &env).expect("readable");
        let mut out = String::new();
        for finding in &report.findings {
            out.push_str(&format!("{}: {}\n", finding.severity, finding.problem));
        }
        out.push_str(&format!(
            "{} errors, {} warnings, config {}",
            report.errors(),
            report.warnings(),
            if report.config.is_some() {
                "read"
            } else {
                "not read"
            }
        ));
        let dir_text = dir.path().display().to_string();
        expect.assert_eq(&out.replace(&dir_text, "$DIR"));
    }

    #[test]
    fn the_three_first_hour_mistakes_are_all_listed_in_line_order() {
        check_text(
            "mcpgw.toml",
            r#"[gateway]
exposre = "search"

[[servers]]
name = "everything"
transport = { type = "stdio", command = "npx", args = ["-y", "@modelcontextprotocol/server-everything@2026.8.31"] }

[[servers]]
name = "time"
transport = { type = "stdio", comand = "mcp-server-time" }

[[servers]]
name = "wrongurl"
transport = { type = "http", url = "http://127.0.0.1:9/mcp" }

[[servers]]
name = "docs"
transport = { type = "http", url = "https://docs.example.com/mcp", headers = { X-Key = { env = "EMPTY_KEY" } } }
auth = { type = "bearer", env = "DOCS_TOKEN" }

[[servers]]
name = "github"
transport = { type = "stdio", command = "node", env = { GITHUB_TOKEN = { env = "GITHUB_TOKEN" } } }

[[servers]]
name = "off"
enabled = false
transport = { type = "stdio", command = "not-installed" }

[retrieval]
stratgy = "bm25"
"#,
            expect![[r#"
                error: 2:1: gateway.exposre: unknown key (hint: did you mean `exposure`?)
                error: 10:31: servers[1].transport.comand: unknown key (hint: did you mean `command`?)
                warning: 10:31: servers[1].transport.command: server 'time': command `mcp-server-time` is not on PATH here, so the server cannot start (hint: install it, or give its full path; mcpgw looks it up on the PATH it starts with (`command -v mcp-server-time` in the same shell shows whether it is found))
                warning: 14:30: servers[2].transport.url: refused http://127.0.0.1:9: 127.0.0.1 is not a public address (loopback); to allow it, add "127.0.0.1" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'wrongurl' (hint: the line to write: add `[network]` with `allow = ["127.0.0.1"]`, or add `allow_private_network = true` to server 'wrongurl')
                warning: 18:80: servers[3].transport.headers.X-Key: environment variable EMPTY_KEY is empty (hint: export EMPTY_KEY before starting mcpgw)
                warning: 23:57: servers[4].transport.env.GITHUB_TOKEN: environment variable GITHUB_TOKEN is not set (hint: export GITHUB_TOKEN before starting mcpgw)
                error: 31:1: retrieval.stratgy: unknown key (hint: did you mean `strategy`?)
                3 errors, 4 warnings, config read"#]],
        );
    }

    #[test]
    fn the_allow_line_extends_an_existing_list() {
        check_text(
            "mcpgw.toml",
            "[[servers]]\nname = \"dev\"\ntransport = { type = \"http\", url = \"http://localhost:3000/mcp\" }\n\n[network]\nallow = [\"10.0.0.0/8\"]\n",
            expect![[r#"
                warning: 3:30: servers[0].transport.url: refused http://localhost:3000: plain http is allowed only for hosts named in [network] allow; to allow it, use https, or add "localhost" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev' (hint: the line to write: change `allow` under `[network]` to `allow = ["10.0.0.0/8", "localhost"]`, or add `allow_private_network = true` to server 'dev')
                0 errors, 1 warnings, config read"#]],
        );
    }

    #[test]
    fn a_refusal_names_the_file_the_config_is_read_from() {
        check_text(
            "first-hour.toml",
            "[[servers]]\nname = \"dev\"\ntransport = { type = \"http\", url = \"https://10.1.2.3/mcp\" }\n",
            expect![[r#"
                warning: 3:30: servers[0].transport.url: refused https://10.1.2.3: 10.1.2.3 is not a public address (private network); to allow it, add "10.1.2.3" to [network] allow in first-hour.toml, or set allow_private_network = true on server 'dev' (hint: the line to write: add `[network]` with `allow = ["10.1.2.3"]`, or add `allow_private_network = true` to server 'dev')
                0 errors, 1 warnings, config read"#]],
        );
    }

    #[test]
    fn a_served_json_file_is_told_where_its_allow_line_goes() {
        check_text(
            "claude_desktop_config.json",
            r#"{"mcpServers": {
                "local": {"url": "http://127.0.0.1:3003/mcp"},
                "tools": {"command": "uvx", "args": ["mcp-server-time"]}
            }}"#,
            expect![[r#"
                warning: mcpServers.local.url: refused http://127.0.0.1:3003: 127.0.0.1 is not a public address (loopback); to allow it, add "127.0.0.1" to [network] allow, or set allow_private_network = true on server 'local' in an mcpgw.toml ($DIR/claude_desktop_config.json has no such settings): `mcpgw import $DIR/claude_desktop_config.json --output $DIR/mcpgw.toml` writes one from it; add the line there and serve that
                warning: mcpServers.tools.command: server 'tools': command `uvx` is not on PATH here, so the server cannot start (hint: install it, or give its full path; mcpgw looks it up on the PATH it starts with (`command -v uvx` in the same shell shows whether it is found))
                0 errors, 2 warnings, config read"#]],
        );
    }

    #[test]
    fn a_syntax_error_is_the_one_finding() {
        check_text(
            "mcpgw.toml",
            "[gateway]\nlisten = \n",
            expect![[r#"
                error: 2:10: (syntax): string values must be quoted, expected literal string
                1 errors, 0 warnings, config not read"#]],
        );
    }

    #[test]
    fn this_machine_finds_commands_on_path_and_by_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("server.sh");
        std::fs::write(&script, "#!/bin/sh\n").expect("write");
        assert!(ThisMachine.finds_command("sh", None));
        assert!(!ThisMachine.finds_command("mcpgw-no-such-command-anywhere", None));
        assert!(ThisMachine.finds_command(&script.display().to_string(), None));
        assert!(ThisMachine.finds_command("./server.sh", Some(dir.path())));
        assert!(!ThisMachine.finds_command("./server.sh", None));
    }
}
