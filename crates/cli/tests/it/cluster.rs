//! Several `mcpgw serve` replicas on one PostgreSQL (`scripts/test-postgres.sh start`, a schema
//! per test) and one Redis: a `redis-server` of each test's own on a free loopback port (the
//! gateway's channel and keys are named `mcpgw:*`, so tests running at once must not share one,
//! and the outage test stops its own). What replicas share live: an approval decided on one
//! wakes the call waiting on another at once, a changed definition seen by one is held on the
//! others at once, one rate limit across them; with Redis down each carries on alone and
//! `/healthz` says degraded, and all is shared again once Redis is back.

use std::{
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::harness::*;
use crate::replicas::Session;

/// The secret key every replica seals with (a PostgreSQL store takes it only from outside).
const SECRET_KEY: &str = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

/// A `redis-server` of this test's own: no persistence, loopback only.
pub(crate) struct Redis {
    proc: Option<Proc>,
    port: u16,
}

impl Redis {
    pub(crate) fn start() -> Redis {
        let mut redis = Redis {
            proc: None,
            port: free_port(),
        };
        redis.restart();
        redis
    }

    /// Starts it (again) on the same port.
    fn restart(&mut self) {
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.proc = Some(Proc::spawn("redis-server", &mut command));
        let port = self.port;
        wait_until("redis-server to listen", Duration::from_secs(10), || {
            port_open(port)
        });
    }

    pub(crate) fn stop(&mut self) {
        self.proc = None;
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

/// The variable the replicas read Redis's URL from, as a deployment passes it from a secret.
const REDIS_URL_VAR: &str = "MCPGW_REDIS_URL";

/// A replica's configuration: `toml`, the loopback allowlist, and the shared store, its Redis
/// URL read from [`REDIS_URL_VAR`].
fn replica_config(toml: &str, postgres: &str, replicas: u32) -> ConfigDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mcpgw.toml");
    let text = format!(
        "{toml}\n{LOOPBACK_ALLOWLIST}\n[store]\nurl = {postgres:?}\nredis = {{ env = {REDIS_URL_VAR:?} }}\nreplicas = {replicas}\n"
    );
    std::fs::write(&path, text).expect("write config");
    ConfigDir { dir, path }
}

/// `count` replicas of `toml` on one fresh PostgreSQL schema and `redis`, each once its Redis
/// link is up.
fn replicas(toml: &str, redis: &Redis, count: u32) -> Vec<Gateway> {
    let postgres = crate::database::postgres_schema();
    let started: Vec<Gateway> = (0..count)
        .map(|_| {
            let config = replica_config(toml, &postgres, count);
            // With PostgreSQL the admin token goes to the user data directory: the replica's
            // own (see `admin_token`).
            // (The gateway does not create that directory itself: made here.)
            let data = config.dir.path().join("data");
            std::fs::create_dir_all(data.join("mcpgw")).expect("data directory");
            Gateway::start_with(config, "info,gateway::replicas=debug", |command| {
                command
                    .env("MCPGW_SECRET_KEY", SECRET_KEY)
                    .env(REDIS_URL_VAR, redis.url())
                    .env("XDG_DATA_HOME", data);
            })
        })
        .collect();
    for gateway in &started {
        wait_state(gateway, "ok");
    }
    started
}

/// `/healthz`'s `replicas.state` of `gateway`.
fn state(gateway: &Gateway) -> Option<String> {
    gateway.health()?["replicas"]["state"]
        .as_str()
        .map(str::to_owned)
}

fn wait_state(gateway: &Gateway, wanted: &str) {
    wait_until(
        &format!("replicas.state {wanted} in /healthz"),
        Duration::from_secs(20),
        || state(gateway).as_deref() == Some(wanted),
    );
}

/// `n` searches through `gateway` in one session: each step's tool result.
fn searches(gateway: &Gateway, n: usize) -> Vec<Value> {
    let step =
        json!({"op": "call_tool", "name": "search_tools", "arguments": {"query": "anything"}});
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        Value::Array(vec![step; n]),
    );
    report["steps"].as_array().cloned().unwrap_or_default()
}

fn rate_limited(step: &Value) -> bool {
    step["isError"] == true && result_text(step).contains("rate limit reached")
}

/// The admin token a replica wrote into its data directory (`XDG_DATA_HOME`, see
/// [`replicas`]).
fn admin_token(gateway: &Gateway) -> String {
    let path = gateway.log.with_file_name("data/mcpgw/admin-token");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .trim()
        .to_owned()
}

fn admin(gateway: &Gateway, method: &str, path: &str) -> (u16, Value) {
    let client = reqwest::blocking::Client::new();
    let url = format!("http://127.0.0.1:{}{path}", gateway.port);
    let request = match method {
        "GET" => client.get(url),
        _ => client
            .post(url)
            .header("content-type", "application/json")
            .body("{}"),
    };
    let response = request
        .header("x-mcpgw-admin-token", admin_token(gateway))
        .send()
        .expect("admin API");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// The `mcpgw_redis_up` line of `gateway`'s `/metrics`.
fn redis_up_metric(gateway: &Gateway) -> String {
    metric(gateway, "mcpgw_redis_up")
}

/// The line of metric `name` (without labels) in `gateway`'s `/metrics`.
fn metric(gateway: &Gateway, name: &str) -> String {
    let text = reqwest::blocking::Client::new()
        .get(format!("http://127.0.0.1:{}/metrics", gateway.port))
        .header("x-mcpgw-admin-token", admin_token(gateway))
        .send()
        .and_then(|r| r.text())
        .expect("metrics");
    text.lines()
        .find(|line| line.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .to_owned()
}

fn write_call(path: &Path, content: &str) -> Value {
    json!({"op": "call_tool", "name": "call_tool", "arguments": {
        "name": "fs__write_file",
        "arguments": {"path": path.display().to_string(), "content": content}
    }})
}

#[test]
fn an_approval_pending_on_one_replica_is_decided_through_another_at_once() {
    let redis = Redis::start();
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().canonicalize().expect("root");
    let servers = crate::approvals::filesystem_server("fs", &dir);
    let group = replicas(&servers, &redis, 2);
    let (a, b) = (&group[0], &group[1]);

    // Three calls on A, one after the other, each waiting for a human (the client has no
    // elicitation); each is approved through B's admin API.
    let files: Vec<_> = ["one", "two", "three", "four"]
        .iter()
        .map(|name| dir.join(format!("{name}.txt")))
        .collect();
    let caller = {
        let url = a.url();
        let script = Value::Array(files.iter().map(|f| write_call(f, "approved")).collect());
        thread::spawn(move || py_client(&["--url", &url], "legacy", script))
    };
    let pending_on_b = || {
        let mut id = String::new();
        wait_until(
            "a call waiting for approval, seen on B",
            Duration::from_secs(60),
            || {
                let (_, body) = admin(b, "GET", "/admin/v1/approvals");
                match body["approvals"][0]["id"].as_str() {
                    Some(found) => {
                        id = found.to_owned();
                        true
                    }
                    None => false,
                }
            },
        );
        id
    };
    let mut took = Vec::new();
    for file in &files[..3] {
        let id = pending_on_b();
        let (status, body) = admin(b, "POST", &format!("/admin/v1/approvals/{id}/approve"));
        assert_eq!(status, 200, "{body}");
        let decided = Instant::now();
        // The file appears when A runs the tool: woken by B's announcement, not its 300 ms poll.
        while !file.exists() {
            assert!(
                decided.elapsed() < Duration::from_secs(10),
                "{} never written",
                file.display()
            );
            thread::sleep(Duration::from_millis(2));
        }
        took.push(decided.elapsed());
    }
    eprintln!("completed on A after B's decisions: {took:?}");
    // The fourth by `mcpgw approvals approve` with B's configuration: announced too.
    let id = pending_on_b();
    let approved = Command::new(mcpgw())
        .args(["approvals", "approve", &id, "--config"])
        .arg(b.log.with_file_name("mcpgw.toml"))
        .env("MCPGW_SECRET_KEY", SECRET_KEY)
        .env(REDIS_URL_VAR, redis.url())
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw approvals approve");
    assert!(approved.status.success(), "{}", text(&approved.stderr));
    assert!(
        !text(&approved.stderr).contains("could not announce"),
        "{}",
        text(&approved.stderr)
    );
    let report = caller.join().expect("caller");
    for step in report["steps"].as_array().expect("steps") {
        assert_eq!(step["isError"], false, "{report}");
    }
    // Announced, a call completes within a few milliseconds of the decision (5-25 ms here, once
    // 100 ms at a load of 14 on 2 cores); found by A's 300 ms poll it would take 150 ms on
    // average. The median of three is the timing check (a poll alone passes it about one time
    // in twelve); the event counter and the log say how it was done, whatever the timing.
    let mut sorted = took.clone();
    sorted.sort();
    assert!(
        sorted[1] < Duration::from_millis(60),
        "each call completed on A this long after B's decision: {took:?}"
    );
    let heard = a.health().expect("health")["replicas"]["redis"]["events_received"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        heard >= 4,
        "A heard {heard} events (three from B, one from the CLI):\n{}",
        a.log_text()
    );
    assert!(
        a.log_text().contains("another replica decided an approval"),
        "{}",
        a.log_text()
    );
}

#[test]
fn a_changed_definition_seen_by_one_replica_is_held_on_the_others_at_once() {
    let redis = Redis::start();
    let definition = tempfile::NamedTempFile::new().expect("definition file");
    std::fs::write(definition.path(), crate::pinning::TRUSTED).expect("write definition");
    let server = format!(
        "[[servers]]\nname = \"redef\"\ntransport = {{ type = \"stdio\", command = {:?}, args = [{:?}, {:?}] }}\n\n[retrieval]\nstrategy = \"bm25\"\n",
        venv_bin("python"),
        repo_root()
            .join("tests/fixtures/redefinable_server.py")
            .display()
            .to_string(),
        definition.path().display().to_string(),
    );
    let group = replicas(&server, &redis, 3);
    for gateway in &group {
        assert_eq!(
            crate::pinning::served_tools(gateway),
            Some(2),
            "trusted on first use"
        );
    }

    // The definition changes for every replica's child; only A's session is told.
    std::fs::write(definition.path(), crate::pinning::CHANGED).expect("change definition");
    let report = py_client(
        &["--url", &group[0].url()],
        "legacy",
        json!([{"op": "call_tool", "name": "call_tool", "arguments": {"name": "redef__announce", "arguments": {}}}]),
    );
    assert_eq!(report["steps"][0]["isError"], false, "{report}");
    let told = Instant::now();
    for (name, gateway) in ["A", "B", "C"].iter().zip(&group) {
        // Their own listing comes only every hour (`refresh_s`): this is the announcement. The
        // bound leaves room for a loaded machine (at a load of 14 on 2 cores the three took
        // over 5 s once; 1-2 s unloaded).
        let holds = || {
            gateway
                .health()
                .is_some_and(|health| health["tools"] == 1 && health["servers"][0]["held"] == 1)
        };
        while !holds() {
            assert!(
                told.elapsed() < Duration::from_secs(20),
                "replica {name} does not hold the changed echo: {:?}\n{}",
                gateway.health(),
                gateway.log_text()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
    eprintln!(
        "held on every replica {:?} after A was told",
        told.elapsed()
    );
    assert!(
        group[1]
            .log_text()
            .contains("another replica saw a change; listing the server again"),
        "{}",
        group[1].log_text()
    );
}

#[test]
fn the_rate_limit_is_shared_by_the_replicas() {
    // One call a minute: one token, back after 60 s, so the test does not depend on how fast
    // this machine runs the clients.
    let redis = Redis::start();
    let group = replicas("[limits]\ncalls_per_minute = 1\n", &redis, 2);
    let (a, b) = (&group[0], &group[1]);
    let on_a = searches(a, 1);
    assert_eq!(on_a[0]["isError"], false, "{on_a:?}");
    // The principal (`local`) used its call on A: none left on B either.
    let on_b = searches(b, 1);
    assert!(rate_limited(&on_b[0]), "{on_b:?}");
    let again = searches(a, 1);
    assert!(rate_limited(&again[0]), "{again:?}");
}

#[test]
fn with_redis_down_the_replicas_carry_on_alone_and_say_so_until_it_is_back() {
    let mut redis = Redis::start();
    // Two calls a minute: a token back every 30 s, longer than the clients below take.
    let group = replicas("[limits]\ncalls_per_minute = 2\n", &redis, 2);
    let (a, b) = (&group[0], &group[1]);

    redis.stop();
    for gateway in &group {
        wait_state(gateway, "degraded");
        let response = reqwest::blocking::get(format!("http://127.0.0.1:{}/healthz", gateway.port))
            .expect("healthz");
        assert_eq!(response.status(), 200, "degraded is not a failure");
        let health: Value = response.json().expect("json");
        assert_eq!(health["replicas"]["redis"]["redis"], "down", "{health}");
    }
    assert!(
        a.log_text().contains("redis is unreachable"),
        "{}",
        a.log_text()
    );
    assert_eq!(redis_up_metric(a), "mcpgw_redis_up 0");

    // Calls go on, each replica counting the limit in its own buckets.
    let on_a = searches(a, 3);
    assert!(on_a[..2].iter().all(|s| s["isError"] == false), "{on_a:?}");
    assert!(rate_limited(&on_a[2]), "{on_a:?}");
    let on_b = searches(b, 1);
    assert_eq!(
        on_b[0]["isError"], false,
        "B has its own bucket now: {on_b:?}"
    );

    // Back: shared again (in the restarted, empty Redis).
    redis.restart();
    for gateway in &group {
        wait_state(gateway, "ok");
    }
    assert_eq!(redis_up_metric(a), "mcpgw_redis_up 1");
    let on_a = searches(a, 1);
    assert_eq!(on_a[0]["isError"], false, "{on_a:?}");
    let on_b = searches(b, 2);
    assert_eq!(on_b[0]["isError"], false, "{on_b:?}");
    assert!(
        rate_limited(&on_b[1]),
        "the shared bucket is empty: {on_b:?}"
    );
}

#[test]
fn several_replicas_without_redis_or_postgres_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("mcpgw.toml");
    std::fs::write(
        &config,
        format!("{LOOPBACK_ALLOWLIST}\n[store]\npath = \"mcpgw.db\"\nreplicas = 3\n"),
    )
    .expect("write config");
    let mut child = Command::new(mcpgw())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcpgw runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("mcpgw serve started with replicas = 3 on SQLite and no Redis");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    let stderr = text(&output.stderr);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("store.redis: `replicas = 3` needs Redis, and no `redis` is set"),
        "{stderr}"
    );
    assert!(
        stderr.contains("store.url: `replicas = 3` needs PostgreSQL, and the store is SQLite"),
        "{stderr}"
    );
}

#[test]
fn a_session_ended_through_one_replica_is_closed_at_once_on_the_others() {
    let redis = Redis::start();
    let toml = format!("{PASSTHROUGH}\n{}", everything_stdio_server("everything"));
    let gateways = replicas(&toml, &redis, 2);
    let urls: Vec<String> = gateways.iter().map(Gateway::url).collect();
    let session = Session::open(&urls[0], None);
    let (status, body) = session.echo(&urls[1], "copy");
    assert_eq!(status, 200, "re-created on r2: {body}");
    assert_eq!(
        metric(&gateways[1], "mcpgw_sessions_open"),
        "mcpgw_sessions_open 1"
    );

    // Ended through r1: r2 hears of it and closes its copy, without waiting for a request
    // (or for the copy's idle timeout, 5 minutes).
    assert_eq!(session.delete(&urls[0]), 204);
    wait_until("r2 closes its copy", Duration::from_secs(10), || {
        metric(&gateways[1], "mcpgw_sessions_open") == "mcpgw_sessions_open 0"
    });
    let (status, body) = session.echo(&urls[1], "after delete");
    assert_eq!(status, 404, "{body}");
    let log = gateways[1].log_text();
    assert!(
        !log.contains(&session_id_prefix(&session)),
        "the session id was logged:\n{log}"
    );
}

/// The first characters of `session`'s id past its format prefix, to look for in logs.
fn session_id_prefix(session: &Session) -> String {
    session.id().chars().skip(3).take(24).collect()
}
