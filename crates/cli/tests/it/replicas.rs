//! Several `mcpgw serve` replicas on one PostgreSQL (`scripts/test-postgres.sh start`; see
//! `database`), behind a round-robin HTTP proxy written here: each request goes to the next
//! replica, as a load balancer without sticky sessions sends them, and a replica that refuses
//! connections (it died) is skipped, as a load balancer's health check would (HAProxy's
//! `redispatch`). A legacy session opened on one replica carries on on the others (its sealed
//! id, `gateway::http::roaming`); a forged, tampered, foreign or deleted one does not; a
//! 2026-07-28 client works on any; `servers list` and the admin API say which replica
//! answered; an expired OAuth token is refreshed once for all replicas; a sign-in started on
//! one replica finishes when the browser comes back to another (with Redis: the login is kept
//! there sealed, taken once, and the waiting call on the first replica resumes), and only on
//! the replica that started it while Redis is down; `kill -9` of a replica under load from 10
//! clients fails only the calls it had in flight, each visibly.

use std::{
    net::SocketAddr,
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::database::postgres_schema;
use crate::harness::*;
use crate::oauth::login;
use crate::oauth_fixture::OAuthServer;

/// A fixed test key (base64 of 32 bytes), the one every replica seals session ids with.
const KEY: &str = "3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=";

/// The configuration of replica `name` on `url`, with `toml` (servers, `[gateway]`) and the
/// shared key file `key`.
fn replica_config(name: &str, url: &str, key: &Path, toml: &str) -> ConfigDir {
    replica_config_with(name, url, key, toml, "")
}

/// [`replica_config`] with more lines of `[store]` (`redis`, `replicas`).
fn replica_config_with(name: &str, url: &str, key: &Path, toml: &str, store: &str) -> ConfigDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mcpgw.toml");
    let text = format!(
        "{toml}\n{LOOPBACK_ALLOWLIST}\n[store]\nurl = \"{url}\"\nkey_file = {:?}\nreplica = \"{name}\"\n{store}",
        key.display().to_string()
    );
    std::fs::write(&path, text).expect("write config");
    ConfigDir { dir, path }
}

/// `mcpgw serve` on `config` (a PostgreSQL one): its data directory (the admin token) is
/// `mcpgw/` beside the configuration file, through `XDG_DATA_HOME`.
fn start_replica(config: ConfigDir, filter: &str) -> Gateway {
    let data = config.dir.path().to_owned();
    Gateway::start_with(config, filter, move |command| {
        command
            .env_remove("MCPGW_SECRET_KEY")
            .env("XDG_DATA_HOME", &data);
    })
}

/// The admin token of a replica started by [`start_replica`].
fn admin_token(replica: &Gateway) -> String {
    let path = replica.log.with_file_name("mcpgw").join("admin-token");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// The shared key file, mode 0600, in `dir`.
fn key_file(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("secret.key");
    std::fs::write(&path, KEY).expect("key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("mode");
    path
}

/// Starts `count` replicas `r1`.. on one fresh PostgreSQL schema, each with `toml`.
struct Cluster {
    replicas: Vec<Gateway>,
    url: String,
    key: std::path::PathBuf,
    _keys: tempfile::TempDir,
}

impl Cluster {
    fn start(count: usize, toml: &str) -> Cluster {
        let mut cluster = Cluster::empty();
        // One at a time: the first replica migrates the schema before the others start.
        for i in 1..=count {
            cluster.add(&format!("r{i}"), toml);
        }
        cluster
    }

    /// A fresh schema and key, no replica yet.
    fn empty() -> Cluster {
        let keys = tempfile::tempdir().expect("tempdir");
        let key = key_file(keys.path());
        Cluster {
            replicas: Vec::new(),
            url: postgres_schema(),
            key,
            _keys: keys,
        }
    }

    fn add(&mut self, name: &str, toml: &str) {
        self.add_with(name, toml, "");
    }

    /// [`Cluster::add`] with more lines of `[store]`.
    fn add_with(&mut self, name: &str, toml: &str, store: &str) {
        let config = replica_config_with(name, &self.url, &self.key, toml, store);
        self.replicas
            .push(start_replica(config, "info,gateway::http=debug"));
    }

    /// A configuration on the shared store, for CLI commands (`clients add`, `auth login`).
    fn cli_config(&self, toml: &str) -> ConfigDir {
        replica_config("cli", &self.url, &self.key, toml)
    }

    fn ports(&self) -> Vec<u16> {
        self.replicas.iter().map(|r| r.port).collect()
    }
}

/// The round-robin proxy: each request to the next replica (skipping one that refuses
/// connections or failed a request in the last [`DOWN_FOR`]), bodies streamed both ways. Counts the requests each replica was sent.
struct RoundRobin {
    port: u16,
    sent: Arc<Vec<AtomicUsize>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Backends {
    ports: Vec<u16>,
    next: AtomicUsize,
    sent: Arc<Vec<AtomicUsize>>,
    http: reqwest::Client,
    /// Per replica, until when (milliseconds after `epoch`) it is skipped: a passive health
    /// check, as a load balancer's (nginx `max_fails=1`, HAProxy `observe layer4`). Without
    /// it a pooled keep-alive connection to a killed replica takes a second request before
    /// the first failure is seen, and one client can lose two calls to one kill.
    down_until: Vec<std::sync::atomic::AtomicU64>,
    epoch: Instant,
}

/// How long a replica that failed a request is skipped.
const DOWN_FOR: Duration = Duration::from_secs(5);

impl Backends {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn is_down(&self, index: usize) -> bool {
        self.down_until[index].load(Ordering::Acquire) > self.now_ms()
    }

    fn mark_down(&self, index: usize) {
        let until = self.now_ms() + u64::try_from(DOWN_FOR.as_millis()).unwrap_or(u64::MAX);
        self.down_until[index].store(until, Ordering::Release);
    }
}

async fn forward(
    axum::extract::State(backends): axum::extract::State<Arc<Backends>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 << 20).await else {
        return (axum::http::StatusCode::BAD_REQUEST, "body").into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let count = backends.ports.len();
    let first = backends.next.fetch_add(1, Ordering::Relaxed);
    // Replicas up first, then (if every one is down) the others anyway.
    let order = (0..count).map(|attempt| (first + attempt) % count);
    let (up, down): (Vec<usize>, Vec<usize>) = order.partition(|&index| !backends.is_down(index));
    for index in up.into_iter().chain(down) {
        let mut out = backends.http.request(
            parts.method.clone(),
            format!("http://127.0.0.1:{}{path}", backends.ports[index]),
        );
        for (name, value) in &parts.headers {
            if name != axum::http::header::HOST && name != axum::http::header::CONTENT_LENGTH {
                out = out.header(name, value);
            }
        }
        backends.sent[index].fetch_add(1, Ordering::Relaxed);
        match out.body(body.clone()).send().await {
            Ok(answer) => {
                let mut response = axum::response::Response::builder().status(answer.status());
                for (name, value) in answer.headers() {
                    if name != axum::http::header::CONTENT_LENGTH
                        && name != axum::http::header::TRANSFER_ENCODING
                    {
                        response = response.header(name, value);
                    }
                }
                return response
                    .body(axum::body::Body::from_stream(answer.bytes_stream()))
                    .unwrap_or_else(|_| axum::http::StatusCode::BAD_GATEWAY.into_response());
            }
            // Nothing reached the replica: the next one gets the request.
            Err(error) if error.is_connect() => {
                backends.mark_down(index);
                continue;
            }
            Err(error) => {
                backends.mark_down(index);
                return (
                    axum::http::StatusCode::BAD_GATEWAY,
                    format!("replica failed: {error}"),
                )
                    .into_response();
            }
        }
    }
    (axum::http::StatusCode::BAD_GATEWAY, "no replica answers").into_response()
}

impl RoundRobin {
    fn start(ports: Vec<u16>) -> RoundRobin {
        let sent: Arc<Vec<AtomicUsize>> =
            Arc::new(ports.iter().map(|_| AtomicUsize::new(0)).collect());
        let down_until = ports.iter().map(|_| Default::default()).collect();
        let backends = Arc::new(Backends {
            ports,
            next: AtomicUsize::new(0),
            sent: sent.clone(),
            down_until,
            epoch: Instant::now(),
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app = axum::Router::new().fallback(forward).with_state(backends);
                let _ = axum::serve(
                    listener,
                    app.into_make_service_with_connect_info::<SocketAddr>(),
                )
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            });
        });
        RoundRobin {
            port,
            sent,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn sent(&self) -> Vec<usize> {
        self.sent
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }
}

impl Drop for RoundRobin {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Streams still open (a client's GET) end with their replicas; do not wait on them.
        drop(self.thread.take());
    }
}

/// One legacy session spoken in raw HTTP, each request to the `url` it is given.
pub(crate) struct Session {
    http: reqwest::blocking::Client,
    id: String,
    key: Option<String>,
}

impl Session {
    /// `initialize` (2025-11-25), then `notifications/initialized`, at `url`, as the client
    /// holding `key`.
    pub(crate) fn open(url: &str, key: Option<&str>) -> Session {
        Session::try_open(url, key).unwrap_or_else(|(status, body)| {
            panic!("initialize at {url} answered {status}: {body}")
        })
    }

    /// [`Session::open`], or the status and body that refused the `initialize`.
    pub(crate) fn try_open(url: &str, key: Option<&str>) -> Result<Session, (u16, String)> {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let mut request = http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request
            .body(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
                    "clientInfo": {"name": "raw", "version": "0"}}})
                .to_string(),
            )
            .send()
            .expect("initialize");
        if response.status() != 200 {
            let status = response.status().as_u16();
            return Err((status, response.text().unwrap_or_default()));
        }
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .expect("session id")
            .to_owned();
        let _ = response.text();
        let session = Session {
            http,
            id,
            key: key.map(str::to_owned),
        };
        let (status, _) = session.post(
            url,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(status, 202);
        Ok(session)
    }

    /// The id the gateway handed out.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// POSTs `message` on the session to `url`: status and body.
    fn post(&self, url: &str, message: &Value) -> (u16, String) {
        self.post_as(url, message, self.key.as_deref(), &self.id)
    }

    fn post_as(&self, url: &str, message: &Value, key: Option<&str>, id: &str) -> (u16, String) {
        let mut request = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", id);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        match request.body(message.to_string()).send() {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.text().unwrap_or_default())
            }
            Err(error) => (0, format!("transport error: {error}")),
        }
    }

    /// `everything__echo` with `message` at `url`: status and body.
    pub(crate) fn echo(&self, url: &str, message: &str) -> (u16, String) {
        self.post(
            url,
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": {"name": "everything__echo", "arguments": {"message": message}}}),
        )
    }

    pub(crate) fn delete(&self, url: &str) -> u16 {
        let mut request = self.http.delete(url).header("mcp-session-id", &self.id);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        request.send().expect("reachable").status().as_u16()
    }
}

/// Whether `body` (JSON or one SSE event) is `everything__echo`'s answer to `message`.
fn echoed(body: &str, message: &str) -> bool {
    body.contains(&format!("Echo: {message}")) && !body.contains("\"error\"")
}

/// Without Redis to announce it, a session ended through one replica still stops counting
/// against its principal's cap on the replicas that re-created it: when the cap is reached
/// there, the copies due a check are checked against the store first.
#[test]
fn copies_of_ended_sessions_do_not_hold_the_session_cap_without_redis() {
    let toml = format!(
        "{}\n[limits]\nmax_sessions_per_principal = 2\n",
        servers_toml()
    );
    let cluster = Cluster::start(2, &toml);
    let urls: Vec<String> = cluster.replicas.iter().map(Gateway::url).collect();
    let sessions: Vec<Session> = (0..2).map(|_| Session::open(&urls[0], None)).collect();
    for session in &sessions {
        assert_eq!(session.echo(&urls[1], "copy").0, 200, "re-created on r2");
    }
    // r2 holds two copies: at the cap.
    let (status, body) = Session::try_open(&urls[1], None)
        .err()
        .expect("over the cap");
    assert_eq!(status, 429, "{body}");
    for session in &sessions {
        assert_eq!(session.delete(&urls[0]), 204);
    }
    // Once the copies are due their check (5 s after they were last checked), a new session
    // on r2 is admitted: the ended copies were closed to make room.
    let mut opened = None;
    wait_until("r2 admits a new session", Duration::from_secs(20), || {
        opened = Session::try_open(&urls[1], None).ok();
        opened.is_some()
    });
    let fresh = opened.expect("opened");
    assert_eq!(fresh.echo(&urls[1], "fresh").0, 200);
    for session in &sessions {
        assert_eq!(session.echo(&urls[1], "after delete").0, 404);
    }
}

fn servers_toml() -> String {
    // BM25: these tests are about sessions and failover, and three replicas each loading two
    // embedding models and embedding their tools at start would only load the machine under
    // the timing-sensitive ones.
    format!(
        "{PASSTHROUGH}\n[retrieval]\nstrategy = \"bm25\"\n\n{}",
        everything_stdio_server("everything")
    )
}

#[test]
fn legacy_sessions_roam_between_replicas_and_stop_where_they_must() {
    // Keys first: a listener requires them when they exist as it starts.
    let mut cluster = Cluster::empty();
    let cli = cluster.cli_config(&servers_toml());
    let alice = add_client(&cli.path, "alice");
    let bob = add_client(&cli.path, "bob");
    for i in 1..=3 {
        cluster.add(&format!("r{i}"), &servers_toml());
    }
    let urls: Vec<String> = cluster.replicas.iter().map(Gateway::url).collect();

    // Opened on r1: the id is sealed, and the session works on r2 and r3 too.
    let session = Session::open(&urls[0], Some(&alice));
    assert!(
        session.id.starts_with("g1.") && session.id.len() < 1024,
        "sealed id of {} chars: {}",
        session.id.len(),
        session.id
    );
    for (i, url) in urls.iter().enumerate().chain(urls.iter().enumerate()) {
        let (status, body) = session.echo(url, &format!("hop {i}"));
        assert!(
            status == 200 && echoed(&body, &format!("hop {i}")),
            "replica r{}: {status} {body}\n{}",
            i + 1,
            cluster.replicas[i].log_text()
        );
    }
    for replica in &cluster.replicas[1..] {
        assert!(
            replica
                .log_text()
                .contains("re-created a session opened on another replica"),
            "{}",
            replica.log_text()
        );
    }

    // Another principal with alice's id, a tampered id, a made-up one: the unknown-session 404.
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"});
    let (status, body) = session.post_as(&urls[1], &call, Some(&bob), &session.id);
    assert_eq!(status, 404, "bob on alice's session: {body}");
    let mut tampered = session.id.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    for id in [
        tampered.as_str(),
        "g1.AAAA",
        "0b9c7a5e-0000-4000-8000-000000000000",
    ] {
        let (status, body) = session.post_as(&urls[2], &call, Some(&alice), id);
        assert_eq!(status, 404, "{id}: {body}");
        assert!(body.contains("ession not found"), "{body}");
    }

    // A replica with another key cannot open it: r4 on the same database, its own key.
    {
        let other_key = tempfile::tempdir().expect("tempdir");
        let path = other_key.path().join("secret.key");
        std::fs::write(&path, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").expect("key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("mode");
        let foreign = start_replica(
            replica_config("r4", &cluster.url, &path, &servers_toml()),
            "info",
        );
        let (status, body) = session.post_as(&foreign.url(), &call, Some(&alice), &session.id);
        assert_eq!(status, 404, "another key: {body}");
    }

    // DELETE through r3: refused from then on everywhere, r1 (which opened it) and r2 (which
    // re-created it) included, the latter two within their recheck interval.
    assert_eq!(session.delete(&urls[2]), 204);
    let (status, body) = session.echo(&urls[2], "after delete");
    assert_eq!(status, 404, "r3 after DELETE: {body}");
    // No Redis here to announce the end: each copy is refused at its first request after its
    // recheck interval (5 s) has passed.
    for (i, url) in urls.iter().enumerate().take(2) {
        wait_until(
            &format!("r{} refuses the deleted session", i + 1),
            Duration::from_secs(20),
            || session.echo(url, "after delete").0 == 404,
        );
    }
    // A session deleted where it lives is gone at once for the others too.
    let second = Session::open(&urls[1], Some(&alice));
    assert_eq!(second.echo(&urls[1], "x").0, 200);
    assert_eq!(second.delete(&urls[1]), 204);
    let (status, body) = second.echo(&urls[0], "after delete");
    assert_eq!(status, 404, "r1 after a DELETE on r2: {body}");
}

#[test]
fn sdk_clients_carry_on_while_requests_alternate_between_replicas() {
    let cluster = Cluster::start(3, &servers_toml());
    let proxy = RoundRobin::start(cluster.ports());
    let mut script = vec![json!({"op": "list_tools"})];
    for i in 0..6 {
        script.push(json!({"op": "call_tool", "name": "everything__echo",
                           "arguments": {"message": format!("call {i}")}}));
    }
    for era in ["legacy", "modern"] {
        let before = proxy.sent();
        let report = py_client(&["--url", &proxy.url()], era, Value::Array(script.clone()));
        let steps = report["steps"].as_array().expect("steps");
        assert!(
            steps[0]["tools"].as_array().is_some_and(|t| !t.is_empty())
                || steps[0].as_array().is_some_and(|t| !t.is_empty()),
            "{era}: {report}"
        );
        for (i, step) in steps[1..].iter().enumerate() {
            // After the gateway's note that this is an upstream's output.
            assert!(
                result_text(step).ends_with(&format!("\nEcho: call {i}")),
                "{era} step {i}: {report}"
            );
        }
        let after = proxy.sent();
        let per_replica: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert!(
            per_replica.iter().all(|&n| n >= 2),
            "{era}: every replica answers some requests: {per_replica:?}"
        );
    }
    // The legacy session was re-created on the replicas that did not open it.
    let revived = cluster
        .replicas
        .iter()
        .filter(|r| {
            r.log_text()
                .contains("re-created a session opened on another replica")
        })
        .count();
    assert!(revived >= 2, "re-created on {revived} replicas");

    // The admin API and `servers list` say which replica answered.
    for (i, replica) in cluster.replicas.iter().enumerate() {
        let response = reqwest::blocking::Client::new()
            .get(format!(
                "http://127.0.0.1:{}/admin/v1/servers",
                replica.port
            ))
            .bearer_auth(admin_token(replica))
            .send()
            .expect("admin API");
        assert_eq!(
            response.headers()["mcpgw-replica"].to_str().ok(),
            Some(format!("r{}", i + 1).as_str())
        );
        let list: Value = response.json().expect("json");
        assert_eq!(
            list["servers"][0]["replica"],
            format!("r{}", i + 1),
            "{list}"
        );
    }
}

/// A call's fate under load.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    ok: usize,
    /// Answered, but not with the echo: an HTTP error or a JSON-RPC error.
    failed_with_response: usize,
    transport_errors: usize,
    /// Answered 200 with something that is not the echo asked for: must stay 0.
    wrong: usize,
}

#[test]
fn a_killed_replica_fails_only_its_calls_in_flight_and_each_visibly() {
    let mut cluster = Cluster::start(3, &servers_toml());
    let proxy = RoundRobin::start(cluster.ports());
    let url = proxy.url();
    let running = Arc::new(AtomicBool::new(true));
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    // Calls answered with the echo, before the kill (and its first second) and after.
    let answered_early = Arc::new(AtomicUsize::new(0));
    let answered_late = Arc::new(AtomicUsize::new(0));
    // 10 clients: 5 legacy sessions (their requests roam) and 5 2026-07-28 stateless ones.
    let clients: Vec<_> = (0..10)
        .map(|client| {
            let (url, running, killed_at) = (url.clone(), running.clone(), killed_at.clone());
            let (answered_early, answered_late) = (answered_early.clone(), answered_late.clone());
            std::thread::spawn(move || {
                let mut before = Tally::default();
                let mut after = Tally::default();
                let session = (client < 5).then(|| Session::open(&url, None));
                let http = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .expect("client");
                let mut n = 0;
                while running.load(Ordering::Relaxed) {
                    n += 1;
                    let message = format!("c{client} n{n}");
                    let started = Instant::now();
                    let (status, body) = match &session {
                        Some(session) => session.echo(&url, &message),
                        None => modern_echo(&http, &url, &message),
                    };
                    // A call that started a second after the kill must not fail.
                    let late = killed_at
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_some_and(|at| started > at + Duration::from_secs(1));
                    let tally = if late { &mut after } else { &mut before };
                    match status {
                        0 => tally.transport_errors += 1,
                        200 if echoed(&body, &message) => {
                            tally.ok += 1;
                            let answered = if late {
                                &answered_late
                            } else {
                                &answered_early
                            };
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        200 if body.contains("\"error\"") => tally.failed_with_response += 1,
                        200 => tally.wrong += 1,
                        _ => tally.failed_with_response += 1,
                    }
                }
                (before, after)
            })
        })
        .collect();
    // Under load on every replica before the kill: as many answered calls as the checks
    // below ask of each side.
    wait_until(
        "100 calls answered before the kill",
        Duration::from_secs(120),
        || answered_early.load(Ordering::Relaxed) >= 100,
    );
    let victim = cluster.replicas.remove(1);
    let in_flight_before = victim.health().map(|h| h["in_flight"].clone());
    signal(victim.proc.pid(), "KILL");
    *killed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    wait_until(
        "100 calls answered that started a second after the kill",
        Duration::from_secs(120),
        || answered_late.load(Ordering::Relaxed) >= 100,
    );
    running.store(false, Ordering::Relaxed);
    let mut before = Tally::default();
    let mut after = Tally::default();
    for client in clients {
        let (b, a) = client.join().expect("client thread");
        for (sum, part) in [(&mut before, b), (&mut after, a)] {
            sum.ok += part.ok;
            sum.failed_with_response += part.failed_with_response;
            sum.transport_errors += part.transport_errors;
            sum.wrong += part.wrong;
        }
    }
    eprintln!(
        "kill -9 under load: until 1 s after the kill {before:?}; after {after:?}; sent per replica {:?}; victim in flight just before {in_flight_before:?}",
        proxy.sent()
    );
    drop(victim);
    assert_eq!(before.wrong + after.wrong, 0, "a 200 that is not the echo");
    // At most one call per client can have been in flight on the killed replica.
    let lost = before.failed_with_response + before.transport_errors;
    assert!(
        lost <= 10,
        "{lost} calls failed around the kill (10 clients)"
    );
    assert!(before.ok > 50 && after.ok > 50, "{before:?} {after:?}");
    assert_eq!(
        after.failed_with_response + after.transport_errors,
        0,
        "a call that started after the kill failed: {after:?}"
    );
}

/// A 2026-07-28 stateless `everything__echo` call at `url`: status and body (status 0: a
/// transport error).
fn modern_echo(http: &reqwest::blocking::Client, url: &str, message: &str) -> (u16, String) {
    modern_call(http, url, "everything__echo", json!({"message": message}))
}

/// A 2026-07-28 stateless call of tool `name` at `url`: status and body (status 0: a
/// transport error).
fn modern_call(
    http: &reqwest::blocking::Client,
    url: &str,
    name: &str,
    arguments: Value,
) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "0"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let sent = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .body(body.to_string())
        .send();
    match sent {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.text().unwrap_or_default())
        }
        Err(error) => (0, format!("transport error: {error}")),
    }
}

#[test]
fn an_expired_token_is_refreshed_once_for_all_replicas_under_concurrent_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), None);
    let toml = format!(
        "[[servers]]\nname = \"docs\"\ntimeout_s = 20\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", url = \"{}\" }}\n\n[retrieval]\nstrategy = \"bm25\"\n",
        fixture.endpoint("/mcp")
    );
    let mut cluster = Cluster::empty();
    let cli = cluster.cli_config(&toml);
    let (output, _page) = login(&cli, "alice", None);
    assert!(output.status.success(), "login: {}", text(&output.stderr));
    for i in 1..=3 {
        cluster.add(&format!("r{i}"), &toml);
    }
    let urls: Vec<String> = cluster.replicas.iter().map(Gateway::url).collect();
    let whoami = |url: &str| {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        modern_call(
            &http,
            url,
            "call_tool",
            json!({"name": "docs__whoami", "arguments": {}}),
        )
    };
    // Every replica has called with the current token once.
    for url in &urls {
        let (status, body) = whoami(url);
        assert!(status == 200 && body.contains("alice"), "{status} {body}");
    }
    let mut refreshes = Vec::new();
    for round in 0..3 {
        let before = fixture.grants("refresh_token");
        fixture.control("/test/expire-access");
        // 4 concurrent calls on each replica, all finding the token expired.
        let calls: Vec<_> = (0..12)
            .map(|i| {
                let url = urls[i % 3].clone();
                std::thread::spawn(move || whoami(&url))
            })
            .collect();
        for call in calls {
            let (status, body) = call.join().expect("call");
            assert!(
                status == 200 && body.contains("alice") && !body.contains("\"isError\":true"),
                "round {round}: {status} {body}"
            );
        }
        refreshes.push(fixture.grants("refresh_token") - before);
    }
    eprintln!("refreshes per expiry, 12 concurrent calls on 3 replicas: {refreshes:?}");
    assert_eq!(
        refreshes,
        [1, 1, 1],
        "one refresh per expiry across the replicas"
    );
}

/// A GET at `url` without following redirects: status, `Location` and body.
fn get_once(url: &str) -> (u16, Option<String>, String) {
    let response = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
        .get(url)
        .send()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, location, response.text().unwrap_or_default())
}

/// `url` (a callback URL on some replica) sent to the replica on `port` instead.
fn on_port(url: &str, port: u16) -> String {
    let mut url = reqwest::Url::parse(url).expect("a URL");
    url.set_port(Some(port)).expect("a port");
    url.to_string()
}

#[test]
fn a_signin_started_on_one_replica_finishes_on_another_once() {
    let mut redis = crate::cluster::Redis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = OAuthServer::start(dir.path(), None);
    let toml = format!(
        "[[servers]]\nname = \"docs\"\ntimeout_s = 20\nauth = {{ type = \"oauth\" }}\ntransport = {{ type = \"http\", url = \"{}\" }}\n\n[retrieval]\nstrategy = \"bm25\"\n",
        fixture.endpoint("/mcp")
    );
    let store = format!("redis = {:?}\nreplicas = 3\n", redis.url());
    let mut cluster = Cluster::empty();
    for i in 1..=3 {
        cluster.add_with(&format!("r{i}"), &toml, &store);
    }
    for replica in &cluster.replicas {
        wait_until("the replica's Redis link", Duration::from_secs(20), || {
            replica
                .health()
                .is_some_and(|h| h["replicas"]["state"] == "ok")
        });
    }
    let [a, b, c] = [0, 1, 2].map(|i| &cluster.replicas[i]);
    let logs = || {
        cluster
            .replicas
            .iter()
            .map(Gateway::log_text)
            .collect::<Vec<_>>()
            .join("\n")
    };

    // A sign-in started on A, as alice: where the authorization server sends the browser.
    let sign_in_on_a = || {
        let (status, _, body) = get_once(&format!(
            "http://127.0.0.1:{}/oauth/start?server=docs",
            a.port
        ));
        assert_eq!(status, 200, "{body}");
        let started: Value = serde_json::from_str(&body).expect("JSON");
        let authorize = started["authorization_url"].as_str().expect("a URL");
        let (status, location, body) = get_once(&format!("{authorize}&user=alice"));
        assert!((300..400).contains(&status), "{status} {body}");
        location.expect("the authorization server's redirect")
    };

    // Started on A: the authorization server sends the browser back to A's callback ...
    let callback = sign_in_on_a();
    assert!(
        callback.starts_with(&format!("http://127.0.0.1:{}/oauth/callback?", a.port)),
        "{callback}"
    );
    // ... which a load balancer hands to B.
    let (status, _, page) = get_once(&on_port(&callback, b.port));
    assert_eq!(status, 200, "{page}\n{}", logs());
    assert!(page.contains("Signed in to &#39;docs&#39;."), "{page}");
    assert_eq!(fixture.grants("authorization_code"), 1);

    // A hears of it: its login no longer waits for a browser.
    wait_until(
        "A to drop the login B finished",
        Duration::from_secs(10),
        || {
            let (_, _, body) = get_once(&format!("http://127.0.0.1:{}/oauth/status", a.port));
            serde_json::from_str::<Value>(&body).is_ok_and(|rows| rows[0]["login_pending"] == false)
        },
    );

    // The tokens are shared: calls on A and on C are alice's.
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    for replica in [a, c] {
        let mut last = String::new();
        let answered = wait_until_ok(Duration::from_secs(30), || {
            let (status, body) = modern_call(
                &http,
                &replica.url(),
                "call_tool",
                json!({"name": "docs__whoami", "arguments": {}}),
            );
            last = format!("{status} {body}");
            status == 200 && body.contains("alice") && !body.contains("\"isError\":true")
        });
        assert!(answered, "on {}: {last}\n{}", replica.port, logs());
    }

    // The same callback again, on C and on A (which started it): used.
    for replica in [c, a] {
        let (status, _, page) = get_once(&on_port(&callback, replica.port));
        assert_eq!(status, 400, "replay on {}: {page}", replica.port);
        assert!(page.contains("unknown, already used or expired"), "{page}");
    }
    // A state nobody issued.
    let (status, _, page) = get_once(&format!(
        "http://127.0.0.1:{}/oauth/callback?code=x&state=forged",
        c.port
    ));
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("unknown, already used or expired"), "{page}");
    assert_eq!(fixture.grants("authorization_code"), 1, "one exchange");

    // A call on A that waits for a sign-in (URL elicitation) resumes when the browser's return
    // reaches B: only B's announcement can wake it (A's own callback is never reached).
    let signed_in = |replica: &Gateway| replica.log_text().matches("signed in").count();
    let (a_before, b_before) = (signed_in(a), signed_in(b));
    fixture.revoke_grant();
    let report = py_client_with(
        &["--url", &a.url(), "--elicit", "open:user=bob"],
        "legacy",
        json!([{"op": "call_tool", "name": "call_tool",
                "arguments": {"name": "docs__whoami", "arguments": {}}}]),
        |command| {
            command.env("MCP_CLIENT_CALLBACK_PORT", b.port.to_string());
        },
    );
    let whoami = &report["steps"][0];
    assert_eq!(whoami["isError"], false, "{report}\n{}", logs());
    assert!(result_text(whoami).contains(r#""user": "bob""#), "{whoami}");
    assert_eq!(report["elicitations"][0]["status"], 200, "{report}");
    assert_eq!(fixture.grants("authorization_code"), 2);
    assert_eq!(
        (signed_in(a), signed_in(b)),
        (a_before, b_before + 1),
        "B finished it, not A"
    );

    // Redis down: a sign-in still finishes on the replica that started it, and only there.
    redis.stop();
    for replica in [a, b] {
        wait_until(
            "the replica to say degraded",
            Duration::from_secs(20),
            || {
                replica
                    .health()
                    .is_some_and(|h| h["replicas"]["state"] == "degraded")
            },
        );
    }
    let alone = sign_in_on_a();
    assert_ne!(alone, callback);
    let (status, _, page) = get_once(&on_port(&alone, b.port));
    assert_eq!(status, 400, "B cannot know it: {page}");
    let (status, _, page) = get_once(&alone);
    assert_eq!(status, 200, "A finishes its own: {page}\n{}", logs());
    let (status, _, _) = get_once(&alone);
    assert_eq!(status, 400, "once");
    assert_eq!(fixture.grants("authorization_code"), 3);

    // The verifier went through Redis sealed: no secret in any replica's log.
    let logs = logs();
    for secret in fixture.secrets_seen() {
        assert!(!logs.contains(&secret), "a secret in the replicas' logs");
    }
}

/// Polls `check` until it holds or `timeout` passes; says which.
fn wait_until_ok(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A PostgreSQL cluster of this test's own (Debian's binaries, as scripts/test-postgres.sh
/// uses them), so that it can be stopped without touching the other tests' server.
struct PrivatePostgres {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    port: u16,
}

impl PrivatePostgres {
    fn start() -> PrivatePostgres {
        use std::os::unix::fs::PermissionsExt;
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL installed (/usr/lib/postgresql)")
            .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
            .filter(|bin| bin.join("pg_ctl").is_file())
            .max_by_key(|bin| {
                bin.parent()
                    .and_then(|v| v.file_name())
                    .and_then(|v| v.to_str())
                    .and_then(|v| v.parse::<u32>().ok())
            })
            .expect("a PostgreSQL bin directory");
        // Under /var/tmp, open to the `postgres` user that runs the server when we are root.
        let dir = tempfile::Builder::new()
            .prefix("mcpgw-private-pg-")
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("mode");
        let postgres = PrivatePostgres {
            dir,
            bin,
            port: free_port(),
        };
        let data = postgres.data();
        std::fs::create_dir(&data).expect("data dir");
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).expect("mode");
        if is_root() {
            let chowned = Command::new("chown")
                .args(["postgres:", &data.display().to_string()])
                .status()
                .expect("chown");
            assert!(chowned.success());
        }
        postgres.run(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        postgres.resume();
        let created = Command::new(postgres.bin.join("psql"))
            .args([
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                &postgres.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                "CREATE DATABASE mcpgw",
            ])
            .output()
            .expect("psql");
        assert!(created.status.success(), "{}", text(&created.stderr));
        postgres
    }

    fn data(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/mcpgw", self.port)
    }

    /// PostgreSQL program `program`, to be run as the cluster's owner.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&path);
            command
        } else {
            Command::new(&path)
        }
    }

    /// Runs PostgreSQL program `program` as the cluster's owner.
    fn run(&self, program: &str, args: &[&str]) {
        let output = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?}: {}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
    }

    /// Starts (again) the server, on the same port.
    fn resume(&self) {
        let data = self.data().display().to_string();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off",
            self.port
        );
        let log = format!("{data}/server.log");
        self.run(
            "pg_ctl",
            &[
                "-D", &data, "-l", &log, "-w", "-t", "60", "-o", &options, "start",
            ],
        );
    }

    /// Stops the server (fast shutdown: its connections are closed).
    fn pause(&self) {
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
    }

    /// How many audit rows the database holds.
    fn audit_rows(&self) -> i64 {
        let output = Command::new(self.bin.join("psql"))
            .args([
                "-tA",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "mcpgw",
                "-c",
                "SELECT COUNT(*) FROM audit",
            ])
            .output()
            .expect("psql");
        text(&output.stdout).trim().parse().unwrap_or(-1)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| text(&o.stdout).trim() == "0")
}

#[test]
fn calls_go_on_while_postgres_is_down_and_their_audit_rows_arrive_when_it_is_back() {
    let postgres = PrivatePostgres::start();
    let keys = tempfile::tempdir().expect("tempdir");
    let key = key_file(keys.path());
    let gateway = start_replica(
        replica_config("r1", &postgres.url(), &key, &servers_toml()),
        "info",
    );
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let mut calls = 0;
    let mut call = |what: &str| {
        calls += 1;
        let message = format!("{what} {calls}");
        let (status, body) = modern_echo(&http, &gateway.url(), &message);
        assert!(
            status == 200 && echoed(&body, &message),
            "{what}: {status} {body}\n{}",
            gateway.log_text()
        );
    };
    for _ in 0..5 {
        call("before");
    }
    wait_until("the first audit rows", Duration::from_secs(20), || {
        postgres.audit_rows() == 5
    });

    postgres.pause();
    let down = Instant::now();
    // Records waiting for the database: held after a refused write, or queued behind one.
    let mut waiting_seen = 0;
    while down.elapsed() < Duration::from_secs(10) {
        call("while down");
        let audit = gateway.health().expect("healthz")["audit"].clone();
        let waiting = audit["held"].as_u64().unwrap_or(0) + audit["queued"].as_u64().unwrap_or(0);
        waiting_seen = waiting_seen.max(waiting);
        std::thread::sleep(Duration::from_millis(250));
    }
    let total = calls;
    postgres.resume();
    wait_until(
        "the held audit rows to be written",
        Duration::from_secs(30),
        || postgres.audit_rows() == total as i64,
    );
    let audit = gateway.health().expect("healthz")["audit"].clone();
    eprintln!(
        "PostgreSQL down 10 s: {total} calls in all, up to {waiting_seen} audit records waiting; after: {audit}\n{}",
        gateway.log_text()
    );
    assert!(
        waiting_seen > 0,
        "records waited while the database was down"
    );
    assert_eq!(audit["held"], 0, "{audit}");
    assert_eq!(audit["dropped"], 0, "{audit}");
    assert_eq!(audit["failed"], 0, "{audit}");
    assert_eq!(audit["written"], total, "{audit}");
}
