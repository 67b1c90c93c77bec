//! `/metrics` as Prometheus sees it: a real Prometheus server (Debian's `prometheus`) scrapes a
//! real `mcpgw serve` with the admin token file as its bearer credentials, and its HTTP API is
//! asked for the series the calls of a real MCP client made: calls, their and the searches'
//! durations, upstream state, a call waiting for approval, audit rows written.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::{Value, json};

use crate::harness::{
    Gateway, Proc, everything_stdio_server, free_port, py_client, wait_until, write_config,
};

fn prometheus_bin() -> PathBuf {
    let path =
        PathBuf::from(std::env::var_os("MCPGW_PROMETHEUS").unwrap_or("/usr/bin/prometheus".into()));
    assert!(
        path.exists(),
        "Prometheus is not installed at {} (Debian: apt-get install prometheus; or set MCPGW_PROMETHEUS)",
        path.display()
    );
    path
}

fn get(url: &str, token: Option<&str>) -> (u16, String, String) {
    let mut request = reqwest::blocking::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().expect("reachable");
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, kind, response.text().unwrap_or_default())
}

/// The value of the one series `query` selects in Prometheus, once it has one.
fn prometheus_value(port: u16, query: &str) -> Option<f64> {
    let mut url = url::Url::parse(&format!("http://127.0.0.1:{port}/api/v1/query")).ok()?;
    url.query_pairs_mut().append_pair("query", query);
    let response: Value = reqwest::blocking::Client::new()
        .get(url)
        .send()
        .ok()?
        .json()
        .ok()?;
    response["data"]["result"][0]["value"][1]
        .as_str()?
        .parse()
        .ok()
}

/// Debian's Prometheus, scraping `gateway` every second with its admin token file: its port.
fn start_prometheus(gateway: &Gateway, dir: &Path) -> (Proc, u16) {
    let token_file = gateway.log.with_file_name("admin-token");
    let port = free_port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mcpgw\n    metrics_path: /metrics\n    authorization:\n      type: Bearer\n      credentials_file: {}\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            token_file.display(),
            gateway.port
        ),
    )
    .expect("prometheus.yml");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let prometheus = Proc::spawn(
        "prometheus",
        Command::new(prometheus_bin())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log),
    );
    (prometheus, port)
}

/// Waits until Prometheus has `query` at `value`.
fn wait_prometheus(port: u16, query: &str, value: f64) {
    let mut seen = None;
    wait_until(
        &format!("Prometheus to have {query} = {value}"),
        Duration::from_secs(60),
        || {
            seen = prometheus_value(port, query);
            seen == Some(value)
        },
    );
}

/// Waits until a scrape has `series` at `value`.
fn wait_scraped(gateway: &Gateway, series: &str, value: f64) {
    wait_until(
        &format!("{series} = {value} in a scrape"),
        Duration::from_secs(30),
        || scraped(gateway, series) == Some(value),
    );
}

#[test]
fn prometheus_scrapes_calls_searches_and_upstream_state_with_the_admin_token() {
    // Every call of get-sum waits for a person.
    let gateway = Gateway::start(write_config(&format!(
        "{}\n[retrieval]\nstrategy = \"bm25\"\n\n[[approval.rules]]\ntools = [\"everything__get-sum\"]\naction = \"require\"\n",
        everything_stdio_server("everything")
    )));
    let token_file = gateway.log.with_file_name("admin-token");
    let token = std::fs::read_to_string(&token_file).expect("admin token file");
    let token = token.trim();
    // Prometheus itself, scraping every second with the token file, from the start.
    let dir = tempfile::tempdir().expect("tempdir");
    let (_prometheus, port) = start_prometheus(&gateway, dir.path());
    let written = |gateway: &Gateway| {
        scraped(gateway, "mcpgw_audit_rows_written_total").expect("audit rows written")
    };
    let written_at_start = written(&gateway);
    assert_eq!(
        scraped(
            &gateway,
            "mcpgw_search_duration_seconds_count{strategy=\"bm25\"}"
        ),
        None,
        "no search yet"
    );

    // A real client: a search, a call that works and one to a tool nobody has.
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "echo a message"}},
            {"op": "call_tool", "name": "call_tool",
             "arguments": {"name": "everything__echo", "arguments": {"message": "hi"}}},
            {"op": "call_tool", "name": "call_tool",
             "arguments": {"name": "everything__no_such_tool_123", "arguments": {}}},
        ]),
    );
    assert!(
        report.to_string().contains("Echo: hi"),
        "the call went through: {report}"
    );

    let metrics = format!("http://127.0.0.1:{}/metrics", gateway.port);
    let (status, _, _) = get(&metrics, None);
    assert_eq!(status, 401, "metrics are on the admin side of the guard");
    let (status, kind, text) = get(&metrics, Some(token));
    assert_eq!(status, 200, "{text}");
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    for line in [
        "mcpgw_tool_calls_total{server=\"everything\",tool=\"everything__echo\",decision=\"allowed\",outcome=\"ok\"} 1",
        "mcpgw_tool_call_duration_seconds_count{server=\"everything\"} 1",
        "mcpgw_searches_total{strategy=\"bm25\"} 1",
        "mcpgw_search_duration_seconds_count{strategy=\"bm25\"} 1",
        "mcpgw_upstream_up{server=\"everything\"} 1",
        "mcpgw_upstream_state{server=\"everything\",state=\"ready\"} 1",
        "mcpgw_sessions_opened_total 1",
        "mcpgw_sessions_open 0",
        "mcpgw_approvals_pending 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // The search's time was observed: its sum is that of one real search.
    let search_seconds = scraped(
        &gateway,
        "mcpgw_search_duration_seconds_sum{strategy=\"bm25\"}",
    )
    .expect("the search's time");
    assert!(
        search_seconds > 0.0 && search_seconds < 10.0,
        "{search_seconds}"
    );
    // An unknown name is refused before any record exists; were it ever counted, the name a
    // client made up must not become a label value.
    assert!(
        !text.contains("no_such_tool_123"),
        "a name the client made up is no label value:\n{text}"
    );
    assert!(text.contains("mcpgw_upstream_call_duration_seconds_count{server=\"everything\"} 1"));
    // The gateway's own part of the call is its own series, and no larger than the whole.
    assert!(text.contains("mcpgw_gateway_call_duration_seconds_count{server=\"everything\"} 1"));
    let whole = scraped(
        &gateway,
        "mcpgw_tool_call_duration_seconds_sum{server=\"everything\"}",
    )
    .expect("the call's time");
    let own = scraped(
        &gateway,
        "mcpgw_gateway_call_duration_seconds_sum{server=\"everything\"}",
    )
    .expect("the gateway's part of it");
    let upstream = scraped(
        &gateway,
        "mcpgw_upstream_call_duration_seconds_sum{server=\"everything\"}",
    )
    .expect("the upstream's part of it");
    assert!(
        own >= 0.0 && own < whole && upstream > 0.0 && upstream <= whole,
        "gateway {own} s + upstream {upstream} s of a {whole} s call"
    );
    // The echo call's audit row is written (the writer works in the background).
    wait_until("the call's audit row", Duration::from_secs(30), || {
        written(&gateway) > written_at_start
    });
    let written_after_echo = written(&gateway);

    // A call waiting for a person is pending, in a scrape and in Prometheus, until approved.
    let waiting = {
        let url = gateway.url();
        std::thread::spawn(move || {
            py_client(
                &["--url", &url],
                "legacy",
                json!([{"op": "call_tool", "name": "call_tool",
                        "arguments": {"name": "everything__get-sum", "arguments": {"a": 2, "b": 3}}}]),
            )
        })
    };
    wait_scraped(&gateway, "mcpgw_approvals_pending", 1.0);
    wait_prometheus(port, "mcpgw_approvals_pending", 1.0);
    let admin = reqwest::blocking::Client::new();
    let pending: Value = admin
        .get(format!(
            "http://127.0.0.1:{}/admin/v1/approvals",
            gateway.port
        ))
        .header("x-mcpgw-admin-token", token)
        .send()
        .and_then(|r| r.json())
        .expect("the approvals");
    let id = pending["approvals"][0]["id"]
        .as_str()
        .expect("an approval id");
    let approved = admin
        .post(format!(
            "http://127.0.0.1:{}/admin/v1/approvals/{id}/approve",
            gateway.port
        ))
        .header("x-mcpgw-admin-token", token)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .expect("gateway reachable");
    assert_eq!(approved.status().as_u16(), 200);
    let summed = waiting.join().expect("client thread");
    assert_eq!(summed["steps"][0]["isError"], false, "{summed}");
    assert!(summed.to_string().contains('5'), "{summed}");
    wait_scraped(&gateway, "mcpgw_approvals_pending", 0.0);
    wait_prometheus(port, "mcpgw_approvals_pending", 0.0);
    wait_until(
        "the approved call's audit row",
        Duration::from_secs(30),
        || written(&gateway) > written_after_echo,
    );
    assert_eq!(
        scraped(
            &gateway,
            "mcpgw_tool_calls_total{server=\"everything\",tool=\"everything__get-sum\",decision=\"approved\",outcome=\"ok\"}"
        ),
        Some(1.0)
    );

    let mut calls = None;
    wait_until(
        "Prometheus to have scraped mcpgw's calls",
        Duration::from_secs(60),
        || {
            calls = prometheus_value(
                port,
                "mcpgw_tool_calls_total{server=\"everything\",tool=\"everything__echo\",outcome=\"ok\"}",
            );
            calls.is_some()
        },
    );
    assert_eq!(calls, Some(1.0));
    assert_eq!(prometheus_value(port, "up{job=\"mcpgw\"}"), Some(1.0));
    assert_eq!(
        prometheus_value(port, "mcpgw_upstream_up{server=\"everything\"}"),
        Some(1.0)
    );
    assert_eq!(
        prometheus_value(
            port,
            "mcpgw_upstream_state{server=\"everything\",state=\"ready\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        prometheus_value(port, "mcpgw_searches_total{strategy=\"bm25\"}"),
        Some(1.0)
    );
    assert_eq!(
        prometheus_value(
            port,
            "mcpgw_search_duration_seconds_count{strategy=\"bm25\"}"
        ),
        Some(1.0)
    );
    // Prometheus catches up with the rows written (they only grow).
    let rows = written(&gateway);
    wait_prometheus(port, "mcpgw_audit_rows_written_total", rows);
    assert!(
        rows > written_at_start + 1.0,
        "{written_at_start} -> {rows}"
    );
    // The series of work this gateway has not done are there, at zero, under valid names. No
    // audit row was dropped: dropping needs the writer's queue of 8192 rows to fill faster
    // than the database writes, which is not driven here (the writer's unit test drives it).
    for series in [
        "mcpgw_embedding_cache_misses_total",
        "mcpgw_oauth_refreshes_total{outcome=\"ok\"}",
        "mcpgw_audit_rows_dropped_total",
    ] {
        assert_eq!(prometheus_value(port, series), Some(0.0), "{series}");
    }
}

/// The value of `series` (name and labels, as scraped) in a scrape of `gateway`'s `/metrics`.
pub fn scraped(gateway: &Gateway, series: &str) -> Option<f64> {
    let (status, _, text) = get(
        &format!("http://127.0.0.1:{}/metrics", gateway.port),
        Some(&gateway.admin_token()),
    );
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
}

/// Tool embeddings measured on a real gateway: an embedding endpoint that holds every batch
/// (tests/fixtures/slow_embeddings.py, as the search tests use for a slow model) keeps the
/// texts in the queue long enough to see them; the first run misses the cache for every tool,
/// and a server added later embeds only its own tools while the others hit the cache.
#[test]
fn embedding_runs_count_cache_hits_and_misses_and_the_queue_drains() {
    let port = free_port();
    let _endpoint = Proc::spawn(
        "slow embeddings",
        Command::new(crate::harness::venv_bin("python"))
            .arg(crate::harness::repo_root().join("tests/fixtures/slow_embeddings.py"))
            .args([&port.to_string(), "3"]),
    );
    wait_until("the embedding endpoint", Duration::from_secs(30), || {
        crate::harness::port_open(port)
    });
    // One text per tool (`field_vectors = false`), so the counts below are tools; with field
    // vectors a tool with parameters is two texts, and the parameter lines of `clock` below
    // would come from `time`'s in the cache.
    let gateway = Gateway::start(write_config(&format!(
        "[retrieval]\nstrategy = \"vector\"\nfield_vectors = false\n\n[retrieval.embedder]\ntype = \"remote\"\n\
         base_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"slow\"\ntimeout_s = 60\n\n{}",
        crate::harness::time_stdio_server("time")
    )));
    // mcp-server-time has two tools: both wait in the queue while the endpoint holds them.
    wait_until(
        "two texts in the embedding queue",
        Duration::from_secs(30),
        || scraped(&gateway, "mcpgw_embedding_queue_depth") == Some(2.0),
    );
    wait_until("the queue to drain", Duration::from_secs(30), || {
        scraped(&gateway, "mcpgw_embedding_queue_depth") == Some(0.0)
    });
    assert_eq!(
        scraped(&gateway, "mcpgw_embedding_cache_misses_total"),
        Some(2.0),
        "each tool embedded once"
    );
    let hits_before = scraped(&gateway, "mcpgw_embedding_cache_hits_total").expect("hits");

    // A second server with a description of its own, which its tools' texts carry: they are
    // new (without it they would read as `time`'s, and hit the cache); `time`'s are cached.
    let token = gateway.admin_token();
    let added = reqwest::blocking::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/admin/v1/servers",
            gateway.port
        ))
        .header("x-mcpgw-admin-token", &token)
        .header("content-type", "application/json")
        .body(
            json!({"name": "clock", "description": "a second clock, for meetings",
                   "transport": {"type": "stdio",
                   "command": crate::harness::venv_bin("mcp-server-time")}})
            .to_string(),
        )
        .send()
        .expect("gateway reachable");
    assert_eq!(added.status().as_u16(), 201);
    wait_until(
        "the new tools to be embedded",
        Duration::from_secs(60),
        || {
            scraped(&gateway, "mcpgw_embedding_cache_misses_total").is_some_and(|n| n > 2.0)
                && scraped(&gateway, "mcpgw_embedding_queue_depth") == Some(0.0)
        },
    );
    assert_eq!(
        scraped(&gateway, "mcpgw_embedding_cache_misses_total"),
        Some(4.0),
        "only clock's two tools were embedded"
    );
    let hits = scraped(&gateway, "mcpgw_embedding_cache_hits_total").expect("hits");
    assert!(
        hits >= hits_before + 2.0,
        "time's two tools came from the cache: {hits_before} -> {hits}"
    );
}
