//! `/metrics` as Prometheus sees it: a real Prometheus server (Debian's `prometheus`) scrapes a
//! real `mcpgw serve` with the admin token file as its bearer credentials, and its HTTP API is
//! asked for the series the calls of a real MCP client made.

use std::{path::PathBuf, process::Command, time::Duration};

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

#[test]
fn prometheus_scrapes_calls_searches_and_upstream_state_with_the_admin_token() {
    let gateway = Gateway::start(write_config(&format!(
        "{}\n[retrieval]\nstrategy = \"bm25\"\n",
        everything_stdio_server("everything")
    )));
    let token_file = gateway.log.with_file_name("admin-token");
    let token = std::fs::read_to_string(&token_file).expect("admin token file");
    let token = token.trim();

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
        "mcpgw_searches_total{strategy=\"bm25\"} 1",
        "mcpgw_upstream_up{server=\"everything\"} 1",
        "mcpgw_sessions_opened_total 1",
        "mcpgw_sessions_open 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // An unknown name is refused before any record exists; were it ever counted, the name a
    // client made up must not become a label value.
    assert!(
        !text.contains("no_such_tool_123"),
        "a name the client made up is no label value:\n{text}"
    );
    assert!(text.contains("mcpgw_upstream_call_duration_seconds_count{server=\"everything\"} 1"));

    // Prometheus itself, scraping every second with the token file.
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mcpgw\n    metrics_path: /metrics\n    authorization:\n      type: Bearer\n      credentials_file: {}\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            token_file.display(),
            gateway.port
        ),
    )
    .expect("prometheus.yml");
    let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
    let _prometheus = Proc::spawn(
        "prometheus",
        Command::new(prometheus_bin())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log),
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
        prometheus_value(port, "mcpgw_searches_total{strategy=\"bm25\"}"),
        Some(1.0)
    );
}
