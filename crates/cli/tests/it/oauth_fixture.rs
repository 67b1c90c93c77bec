//! tests/fixtures/oauth_server.py as the OAuth e2e modules drive it: a real OAuth-protected MCP
//! server (the Python SDK's authorization server and bearer middleware) whose /authorize
//! approves at once as the `user` it is given, with /test endpoints to revoke and expire
//! tokens and to list every request it has seen.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::harness::*;

/// A running oauth_server.py.
pub struct OAuthServer {
    _proc: Proc,
    pub port: u16,
    /// The authorization server's own port, when it runs apart from the MCP server.
    pub as_port: Option<u16>,
    /// One JSON line per /mcp request, with the bearer token it carried.
    log: PathBuf,
}

impl OAuthServer {
    /// Starts the server with its log in `dir`; access tokens live `token_ttl_s` seconds when
    /// given (the fixture's default otherwise).
    pub fn start(dir: &Path, token_ttl_s: Option<u64>) -> OAuthServer {
        OAuthServer::start_with(dir, token_ttl_s, false)
    }

    /// [`OAuthServer::start`], with the authorization server on a second port (another origin)
    /// when `split`.
    pub fn start_with(dir: &Path, token_ttl_s: Option<u64>, split: bool) -> OAuthServer {
        let port = free_port();
        let as_port = split.then(free_port);
        let log = dir.join("oauth-mcp.jsonl");
        let mut command = Command::new(venv_bin("python"));
        command
            .arg(repo_root().join("tests/fixtures/oauth_server.py"))
            .args(["--port", &port.to_string()])
            .arg("--log")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(ttl) = token_ttl_s {
            command.args(["--token-ttl", &ttl.to_string()]);
        }
        if let Some(as_port) = as_port {
            command.args(["--split", &as_port.to_string()]);
        }
        let server = OAuthServer {
            _proc: Proc::spawn("oauth_server.py", &mut command),
            port,
            as_port,
            log,
        };
        wait_until("oauth_server.py to answer", Duration::from_secs(20), || {
            reqwest::blocking::get(server.endpoint("/test/requests"))
                .is_ok_and(|r| r.status().is_success())
                && as_port.is_none_or(port_open)
        });
        server
    }

    pub fn endpoint(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request the server has seen (not counting these reads).
    pub fn requests(&self) -> Vec<Value> {
        reqwest::blocking::get(self.endpoint("/test/requests"))
            .and_then(|r| r.json())
            .expect("the fixture's request list")
    }

    /// POSTs to one of its /test control endpoints.
    pub fn control(&self, path: &str) {
        let response = reqwest::blocking::Client::new()
            .post(self.endpoint(path))
            .send()
            .expect("fixture control");
        assert!(response.status().is_success(), "{path}: {response:?}");
    }

    /// Drops every refresh token and expires every access token: the next call finds the grant
    /// dead, and the gateway deletes the tokens.
    pub fn revoke_grant(&self) {
        self.control("/test/revoke-refresh");
        self.control("/test/expire-access");
    }

    /// How many token requests of `grant_type` the server has answered.
    pub fn grants(&self, grant_type: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r["path"] == "/token" && r["form"]["grant_type"] == grant_type)
            .count()
    }

    /// How many clients have registered (RFC 7591).
    pub fn registrations(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r["path"] == "/register" && r["method"] == "POST")
            .count()
    }

    /// Every secret the server has seen from mcpgw: access tokens (from its log), refresh
    /// tokens, authorization codes, PKCE verifiers and client secrets (from token requests).
    pub fn secrets_seen(&self) -> Vec<String> {
        let mut secrets: Vec<String> = std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|entry| entry["token"].as_str().map(str::to_owned))
            .collect();
        for request in self.requests() {
            if request["path"] == "/token" {
                for field in ["refresh_token", "code", "code_verifier", "client_secret"] {
                    if let Some(value) = request["form"][field].as_str() {
                        secrets.push(value.to_owned());
                    }
                }
            }
        }
        secrets.sort();
        secrets.dedup();
        secrets
    }
}
