//! The client side of `/admin/v1` (see `admin_v1`): `mcpgw search`, `tools` and `servers list`
//! ask a gateway running on the same configuration instead of starting every upstream
//! themselves (seconds each), and `mcpgw servers add|remove|enable|disable` make their change
//! through it ([`AdminClient::change_servers`]), so that it is applied at once.
//!
//! The gateway is found from the configuration alone: the address `serve` listens on
//! (`[gateway] listen`; an unspecified address is asked on loopback; a gateway started with
//! `--listen` elsewhere is not found), the admin token it wrote into the data directory (an
//! open loopback listener), and for a keyed listener a client key whose profile says
//! `admin = true`, from [`ADMIN_KEY_VAR`]. With neither credential nothing is asked.
//!
//! What an answer means: a connection refused or not made within [`CONNECT_TIMEOUT`] is "no
//! gateway running", and the caller answers itself without a word; anything else that is not
//! the answer (a refusal, another program, an old mcpgw) is [`Unanswered::Refused`] with one
//! line saying so.
//!
//! The HTTP client is not netguard's guarded one: it talks to this machine's own gateway at
//! the configured address, which the SSRF policy (about upstreams and embedders) does not
//! govern. It follows no redirect and uses no proxy, so the token and key reach that address
//! and nothing else.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, de::DeserializeOwned};

use crate::{
    ServerChange,
    http::{
        admin_v1::{
            SEARCH_PATH, SERVERS_PATH, TOOLS_PATH, search_query_string, tools_query_string,
        },
        guard::{ADMIN_TOKEN_HEADER, admin_token_path},
    },
    overview::{SearchQuery, SearchReport, ServerRow, ToolsQuery, ToolsView},
};

/// The environment variable holding a client key whose profile says `admin = true`, for a
/// gateway whose listener requires client keys.
pub const ADMIN_KEY_VAR: &str = "MCPGW_ADMIN_KEY";

/// How long a connection may take before the gateway counts as not running: a loopback
/// connect is refused or made within a millisecond.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

/// How long an answer may take: a search may wait for the tool embeddings (10 s) and then for
/// its query's (10 s).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// A gateway that may be running on this configuration, and the credentials to ask it with.
pub struct AdminClient {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
    key: Option<SecretString>,
}

/// Why a running gateway gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// Nothing listens at the address: answer locally, silently.
    NotRunning,
    /// Something answered, but not with the answer: why, in one line.
    Refused(String),
}

/// How a running gateway answered a server write.
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    /// Made and applied: the reload's report (`servers`, `generation`, `added`, ...), as
    /// `POST /admin/v1/servers` answers it.
    Done(serde_json::Value),
    /// The gateway refused the change itself (400 invalid, 404 unknown server, 409 the file
    /// cannot take it, 500 not written): its `error` and, for 400, each of its `problems`.
    Refused {
        status: u16,
        error: String,
        problems: Vec<String>,
    },
}

#[derive(Deserialize)]
struct Servers {
    servers: Vec<ServerRow>,
}

impl AdminClient {
    /// The gateway `config` describes, with the admin token from its data directory and the
    /// key in [`ADMIN_KEY_VAR`]; `None` when there is neither (nothing could be asked).
    pub fn for_config(config: &config::Config) -> Option<AdminClient> {
        let token = std::fs::read_to_string(admin_token_path(&config.store))
            .ok()
            .map(|token| token.trim().to_owned())
            .filter(|token| !token.is_empty());
        let key = std::env::var(ADMIN_KEY_VAR)
            .ok()
            .filter(|key| !key.trim().is_empty())
            .map(|key| SecretString::from(key.trim().to_owned()));
        if token.is_none() && key.is_none() {
            return None;
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(ANSWER_TIMEOUT)
            .build()
            .ok()?;
        Some(AdminClient {
            base: base_url(config.gateway.listen),
            http,
            token,
            key,
        })
    }

    /// `http://HOST:PORT` of the gateway asked.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `GET /admin/v1/servers`.
    pub async fn servers(&self) -> Result<Vec<ServerRow>, Unanswered> {
        let answer: Servers = self.get(SERVERS_PATH, "").await?;
        Ok(answer.servers)
    }

    /// `GET /admin/v1/tools`.
    pub async fn tools(&self, query: &ToolsQuery) -> Result<ToolsView, Unanswered> {
        self.get(TOOLS_PATH, &tools_query_string(query)).await
    }

    /// `GET /admin/v1/search`.
    pub async fn search(&self, query: &SearchQuery) -> Result<SearchReport, Unanswered> {
        self.get(SEARCH_PATH, &search_query_string(query)).await
    }

    /// Makes `change` through the gateway's admin API, as the console and `curl` would:
    /// `POST /admin/v1/servers`, `PUT`, `PATCH` or `DELETE /admin/v1/servers/{name}`, `POST
    /// .../enable` or `.../disable`. `Err` when the gateway gave no answer to the change (not
    /// running, refused the credentials, not mcpgw): the caller may change the file itself.
    pub async fn change_servers(&self, change: &ServerChange) -> Result<Written, Unanswered> {
        use reqwest::Method;
        let one = |name: &str, tail: &[&str]| {
            let mut url = url::Url::parse(&self.base).expect("the base is a URL");
            if let Ok(mut segments) = url.path_segments_mut() {
                segments
                    .pop_if_empty()
                    .extend(["admin", "v1", "servers", name])
                    .extend(tail);
            }
            url.to_string()
        };
        let all = format!("{}{SERVERS_PATH}", self.base);
        let empty = || "{}".to_owned();
        let object = |map: &serde_json::Map<String, serde_json::Value>| {
            serde_json::Value::Object(map.clone()).to_string()
        };
        let (method, url, body) = match change {
            ServerChange::Add(server) => (Method::POST, all, object(server)),
            ServerChange::Import(text) => (Method::POST, all, text.clone()),
            ServerChange::Replace(name, server) => (Method::PUT, one(name, &[]), object(server)),
            ServerChange::Patch(name, patch) => (Method::PATCH, one(name, &[]), object(patch)),
            ServerChange::Remove(name) => (Method::DELETE, one(name, &[]), empty()),
            ServerChange::Enable(name, true) => (Method::POST, one(name, &["enable"]), empty()),
            ServerChange::Enable(name, false) => (Method::POST, one(name, &["disable"]), empty()),
        };
        let request = self
            .http
            .request(method, url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        let (status, body) = self.send(request).await?;
        let answer = serde_json::from_slice::<serde_json::Value>(&body).ok();
        let said = answer
            .as_ref()
            .and_then(|answer| answer.get("error")?.as_str().map(str::to_owned));
        match (status, answer, said) {
            (200 | 201, Some(report), _) if report.get("generation").is_some() => {
                Ok(Written::Done(report))
            }
            // The change's own refusals, in the admin API's error shape; a 404 without it is a
            // program with no such route.
            (400 | 404 | 409 | 500, Some(answer), Some(error)) => Ok(Written::Refused {
                status,
                error,
                problems: answer
                    .get("problems")
                    .and_then(serde_json::Value::as_array)
                    .map(|problems| {
                        problems
                            .iter()
                            .filter_map(|p| p.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            }),
            _ => Err(Unanswered::Refused(refusal(&self.base, status, &body))),
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str, query: &str) -> Result<T, Unanswered> {
        let base = &self.base;
        let request = self.http.get(format!("{base}{path}{query}"));
        let (status, body) = self.send(request).await?;
        if status == 200 {
            return serde_json::from_slice(&body).map_err(|_| {
                Unanswered::Refused(format!(
                    "the program at {base} answered, but not as mcpgw's admin API does"
                ))
            });
        }
        Err(Unanswered::Refused(refusal(base, status, &body)))
    }

    /// Sends `request` with the credentials: the status and the body.
    async fn send(
        &self,
        mut request: reqwest::RequestBuilder,
    ) -> Result<(u16, axum::body::Bytes), Unanswered> {
        let base = &self.base;
        if let Some(token) = &self.token {
            request = request.header(ADMIN_TOKEN_HEADER, token);
        }
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose_secret());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) if error.is_connect() => return Err(Unanswered::NotRunning),
            Err(error) if error.is_timeout() => {
                return Err(Unanswered::Refused(format!(
                    "the gateway at {base} did not answer within {} s",
                    ANSWER_TIMEOUT.as_secs()
                )));
            }
            Err(_) => {
                return Err(Unanswered::Refused(format!(
                    "the program at {base} did not answer over HTTP"
                )));
            }
        };
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap_or_default();
        Ok((status, body))
    }
}

/// Where to ask a gateway listening on `listen`: on loopback when it listens on every address.
fn base_url(listen: std::net::SocketAddr) -> String {
    let mut addr = listen;
    match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into())
        }
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            addr.set_ip(std::net::Ipv6Addr::LOCALHOST.into())
        }
        _ => {}
    }
    format!("http://{addr}")
}

/// One line for an answer that is not the answer: the status and what the gateway said.
fn refusal(base: &str, status: u16, body: &[u8]) -> String {
    let said = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|body| {
            let error = body.get("error")?;
            error
                .as_str()
                .or_else(|| error.get("message")?.as_str())
                .map(str::to_owned)
        });
    match (status, said) {
        (401, _) => format!(
            "the gateway at {base} did not accept the admin credentials (401): it is another configuration's, or it requires client keys (set {ADMIN_KEY_VAR} to a key whose profile has admin = true)"
        ),
        (404, _) => {
            format!("the program at {base} has no admin API v1 (404): not mcpgw, or an older one")
        }
        (_, Some(said)) => {
            let said: String = said
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(300)
                .collect();
            format!("the gateway at {base} refused ({status}): {said}")
        }
        (_, None) => format!("the program at {base} answered HTTP {status}, not as mcpgw does"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_listen_address_is_asked_on_loopback() {
        let url = |listen: &str| base_url(listen.parse().expect("address"));
        assert_eq!(url("127.0.0.1:8931"), "http://127.0.0.1:8931");
        assert_eq!(url("0.0.0.0:8931"), "http://127.0.0.1:8931");
        assert_eq!(url("[::]:9000"), "http://[::1]:9000");
        assert_eq!(url("10.0.0.5:80"), "http://10.0.0.5:80");
    }

    #[test]
    fn a_refusal_is_one_line_with_what_the_gateway_said() {
        let base = "http://127.0.0.1:8931";
        let forbidden = refusal(
            base,
            403,
            br#"{"error": "client:bob is not an administrator"}"#,
        );
        assert_eq!(
            forbidden,
            "the gateway at http://127.0.0.1:8931 refused (403): client:bob is not an administrator"
        );
        let rpc = refusal(
            base,
            503,
            br#"{"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "draining"}}"#,
        );
        assert!(rpc.ends_with("refused (503): draining"), "{rpc}");
        assert!(refusal(base, 401, b"").contains(ADMIN_KEY_VAR));
        assert!(refusal(base, 404, b"<html>").contains("not mcpgw"));
        assert!(refusal(base, 500, b"oops").contains("HTTP 500"));
        for line in [forbidden, rpc] {
            assert!(!line.contains('\n'));
        }
    }
}
