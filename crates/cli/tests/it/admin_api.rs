//! The admin API's read side (`/admin/v1/servers`, `/tools`, `/search`) on a real `mcpgw serve`
//! with real upstreams, and `mcpgw tools`, `search` and `servers list` asking it instead of
//! starting the servers themselves (issue 14 point 7; issue 16's admin API): what each route
//! answers, who may ask (the admin token on an open listener, a key with admin rights on a
//! keyed one; never a page of another site), what a bad parameter gets, and that the CLI
//! prints the same whether a running gateway answered or it started every server itself.
//! That the running gateway answered is proven by the upstream's own record of its starts:
//! a shell wrapper writes a line each time the server is started.

use std::{path::Path, process::Command, time::Duration};

use serde_json::Value;

use crate::harness::*;

/// `GET http://127.0.0.1:PORT{path}` with the `headers` given (`name: value`): the status and
/// the body as JSON (`null` when it is not).
fn get(port: u16, path: &str, headers: &[&str]) -> (u16, Value) {
    let mut request =
        reqwest::blocking::Client::new().get(format!("http://127.0.0.1:{port}{path}"));
    for line in headers {
        let (name, value) = line.split_once(": ").expect("name: value");
        request = request.header(name, value);
    }
    let response = request.send().expect("gateway reachable");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn error_of(answer: &(u16, Value)) -> String {
    answer.1["error"].as_str().unwrap_or_default().to_owned()
}

/// `mcpgw ARGS --config CONFIG` with `env` set: exit code, stdout, stderr.
fn mcpgw_env(config: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(mcpgw());
    command.args(args).arg("--config").arg(config);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .expect("mcpgw runs");
    (
        output.status.code().unwrap_or(-1),
        text(&output.stdout),
        text(&output.stderr),
    )
}

fn run(config: &Path, args: &[&str]) -> (String, String) {
    let (code, stdout, stderr) = mcpgw_env(config, args, &[]);
    assert_eq!(code, 0, "mcpgw {args:?}: {stderr}");
    (stdout, stderr)
}

#[test]
fn the_admin_api_shows_servers_tools_and_searches_of_a_running_gateway() {
    let closed = free_port();
    let toml = format!(
        "[retrieval]\nstrategy = \"hybrid\"\n\n{}\n\
         [[servers]]\nname = \"down\"\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{closed}/mcp?page=in-the-url\" }}\n\
         auth = {{ type = \"bearer\", env = \"DOWN_TOKEN\" }}\n\n\
         [[servers]]\nname = \"off\"\nenabled = false\ntransport = {{ type = \"stdio\", command = \"true\" }}\n",
        everything_stdio_server("everything")
    );
    let gateway = Gateway::start_with(write_config(&toml), "info", |command| {
        command.env("DOWN_TOKEN", "s3cr3t-value");
    });
    let port = gateway.port;
    let token = format!("x-mcpgw-admin-token: {}", gateway.admin_token());
    only_the_admin_token_opens_the_read_routes(port, &token);
    let everything = servers_show_state_cause_and_credential_source(port, &token, closed);
    tools_show_cost_pin_and_annotations(port, &token, &everything);
    bad_parameters_get_400_naming_them(port, &token);
    // A search holds at most 10 s for the tool vectors; on a loaded machine embedding every
    // tool's head and parameters with both models can take longer, so wait for them here.
    wait_until(
        "the tool vectors",
        std::time::Duration::from_secs(120),
        || {
            gateway
                .log_text()
                .split("search vectors ready tools=")
                .skip(1)
                .any(|rest| !rest.starts_with('0'))
        },
    );
    search_shows_each_strategy_with_the_ranks_behind_each_hit(port, &token);
}

/// Who may ask: the admin token, never a page of another site or a rebound name.
fn only_the_admin_token_opens_the_read_routes(port: u16, token: &str) {
    for path in [
        "/admin/v1/servers",
        "/admin/v1/tools",
        "/admin/v1/search?q=echo",
    ] {
        let refused = get(port, path, &[]);
        assert_eq!(refused.0, 401, "{path}: {refused:?}");
        assert!(error_of(&refused).contains("admin token"), "{refused:?}");
        let cross_site = get(port, path, &[token, "origin: https://evil.example"]);
        assert_eq!(cross_site.0, 403, "{path}: {cross_site:?}");
        let rebound = format!("host: rebind.evil.example:{port}");
        let rebound = get(port, path, &[token, &rebound]);
        assert_eq!(rebound.0, 403, "{path}: {rebound:?}");
    }
}

/// Every configured server in order, the failed one with its cause in words, credentials by
/// reference only; returns server-everything's row.
fn servers_show_state_cause_and_credential_source(port: u16, token: &str, closed: u16) -> Value {
    let mut servers = Value::Null;
    wait_until(
        "the down server to be failed",
        Duration::from_secs(30),
        || {
            servers = get(port, "/admin/v1/servers", &[token]).1;
            servers["servers"][1]["state"] == "failed"
        },
    );
    let text = servers.to_string();
    assert!(!text.contains("s3cr3t-value"), "{text}");
    assert!(!text.contains("in-the-url"), "{text}");
    let servers = servers["servers"].as_array().expect("servers").clone();
    let names: Vec<&str> = servers.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["everything", "down", "off"], "configuration order");
    let everything = &servers[0];
    assert_eq!(everything["state"], "ready", "{everything}");
    assert_eq!(everything["era"], "legacy", "{everything}");
    assert!(everything["protocol_version"].is_string(), "{everything}");
    assert!(everything["server_name"].is_string(), "{everything}");
    assert_eq!(everything["transport"]["type"], "stdio");
    assert_eq!(everything["transport"]["command"], "node");
    assert_eq!(everything["credential"]["auth"], "none");
    let down = &servers[1];
    let reason = down["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("connection refused at 127.0.0.1:{closed}")),
        "the cause in words: {down}"
    );
    assert_eq!(
        down["transport"]["url"],
        format!("http://127.0.0.1:{closed}/mcp")
    );
    assert_eq!(
        down["credential"],
        serde_json::json!({"auth": "bearer", "env": ["DOWN_TOKEN"], "unset": []})
    );
    assert_eq!(servers[2]["state"], "disabled");
    everything.clone()
}

/// Every catalog tool with its cost, pin state and annotations; one server's.
fn tools_show_cost_pin_and_annotations(port: u16, token: &str, everything: &Value) {
    let tools = get(port, "/admin/v1/tools", &[token]);
    assert_eq!(tools.0, 200, "{tools:?}");
    let rows = tools.1["tools"].as_array().expect("tools");
    assert_eq!(
        Some(rows.len() as u64),
        everything["tool_count"].as_u64(),
        "{everything}"
    );
    assert!(rows.iter().all(|t| t["server"] == "everything"
        && t["tokens"].as_u64() > Some(0)
        && t["pin"] == "pinned"
        && t["pinned_since"].as_i64() > Some(1_700_000_000)));
    let echo = rows
        .iter()
        .find(|t| t["name"] == "everything__echo")
        .expect("echo");
    assert_eq!(echo["upstream_name"], "echo");
    assert_eq!(echo["annotations"]["readOnlyHint"], true, "{echo}");
    assert_eq!(tools.1["held"], serde_json::json!([]));
    assert_eq!(tools.1["listing"]["exposure"], "search");
    let of_down = get(port, "/admin/v1/tools?server=down", &[token]);
    assert_eq!(of_down.1["tools"], serde_json::json!([]), "{of_down:?}");
}

fn bad_parameters_get_400_naming_them(port: u16, token: &str) {
    for (path, says) in [
        ("/admin/v1/tools?server=nope", "no server named 'nope'"),
        ("/admin/v1/tools?profile=nope", "no profile named 'nope'"),
        ("/admin/v1/tools?sever=down", "unknown parameter 'sever'"),
        ("/admin/v1/search", "the parameter q is required"),
        (
            "/admin/v1/search?q=echo&top_k=0",
            "top_k must be a whole number from 1 to 50",
        ),
        ("/admin/v1/search?q=echo&top_k=51", "not '51'"),
        ("/admin/v1/search?q=echo&top_k=many", "not 'many'"),
        (
            "/admin/v1/search?q=echo&strategy=magic",
            "strategy must be bm25, vector or hybrid",
        ),
        (
            "/admin/v1/search?q=echo&server=nope",
            "no server named 'nope'",
        ),
        ("/admin/v1/search/compare", "the parameter q is required"),
        (
            "/admin/v1/search/compare?q=echo&strategy=bm25",
            "unknown parameter 'strategy'",
        ),
    ] {
        let bad = get(port, path, &[token]);
        assert_eq!(bad.0, 400, "{path}: {bad:?}");
        assert!(error_of(&bad).contains(says), "{path}: {bad:?}");
    }
}

/// The search playground: each strategy's list, with the ranks behind every hit.
fn search_shows_each_strategy_with_the_ranks_behind_each_hit(port: u16, token: &str) {
    let search = |strategy: &str| {
        let path = format!("/admin/v1/search?q=add+two+numbers&top_k=5&strategy={strategy}");
        let (status, report) = get(port, &path, &[token]);
        assert_eq!(status, 200, "{report}");
        assert_eq!(report["strategy"], strategy, "{report}");
        assert_eq!(report["degraded"], Value::Null, "{report}");
        assert_eq!(report["query"], "add two numbers");
        report
    };
    let bm25 = search("bm25");
    assert_eq!(bm25["scoring"]["kind"], "bm25");
    for hit in bm25["hits"].as_array().expect("hits") {
        assert_eq!(hit["bm25"]["score"], hit["score"], "{hit}");
        assert_eq!(hit["vector"], Value::Null, "{hit}");
    }
    let vector = search("vector");
    assert_eq!(vector["scoring"]["kind"], "vector");
    assert_eq!(vector["hits"][0]["vector"]["rank"], 1, "{vector}");
    let hybrid = search("hybrid");
    // The default fusion: each list's scores scaled to 0..1 over its `[low, high]` span.
    assert_eq!(hybrid["scoring"]["kind"], "normalised", "{hybrid}");
    let weight = |list: &str| {
        hybrid["scoring"][format!("{list}_weight")]
            .as_f64()
            .expect("weight")
    };
    let span = |list: &str| {
        let span = &hybrid["scoring"][format!("{list}_span")];
        (
            span[0].as_f64().expect("low"),
            span[1].as_f64().expect("high"),
        )
    };
    assert_eq!(span("bm25").0, 0.0, "BM25 scales from 0: {hybrid}");
    let hits = hybrid["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 5);
    assert_eq!(hits[0]["name"], "everything__get-sum", "{hybrid}");
    for hit in hits {
        let part = |list: &str| {
            hit[list]["score"].as_f64().map_or(0.0, |score| {
                let (low, high) = span(list);
                weight(list) * (score - low) / (high - low)
            })
        };
        let expected = part("bm25") + part("vector");
        let score = hit["score"].as_f64().expect("score");
        assert!((score - expected).abs() < 1e-4, "{hit}");
    }
    // The playground's one request: the same three lists side by side, as asked one by one.
    let (status, compared) = get(
        port,
        "/admin/v1/search/compare?q=add+two+numbers&top_k=5",
        &[token],
    );
    assert_eq!(status, 200, "{compared}");
    assert_eq!(compared["query"], "add two numbers");
    for (strategy, alone) in [("bm25", &bm25), ("vector", &vector), ("hybrid", &hybrid)] {
        let side = &compared[strategy];
        assert_eq!(side["strategy"], strategy, "{compared}");
        let names = |report: &Value| -> Vec<Value> {
            report["hits"]
                .as_array()
                .expect("hits")
                .iter()
                .map(|hit| hit["name"].clone())
                .collect()
        };
        assert_eq!(names(side), names(alone), "{strategy}: {compared}");
        assert_eq!(side["scoring"]["kind"], alone["scoring"]["kind"]);
    }
}

#[test]
fn a_keyed_gateway_answers_the_admin_api_and_the_cli_only_for_an_admin_key() {
    let profiles = "[[profiles]]\nname = \"ops\"\nclients = [\"boss\"]\nadmin = true\n\n\
                    [[profiles]]\nname = \"viewer\"\nclients = [\"bob\"]\n";
    let (config, port) =
        listening_config("", &format!("{}\n{profiles}", time_stdio_server("time")));
    let boss = add_client(&config.path, "boss");
    let bob = add_client(&config.path, "bob");
    let config_path = config.path.clone();
    let gateway = Gateway::start_configured(config, |_| {});
    assert_eq!(gateway.port, port);

    let none = get(port, "/admin/v1/servers", &[]);
    assert_eq!(none.0, 401, "{none:?}");
    let viewer = get(
        port,
        "/admin/v1/servers",
        &[&format!("authorization: Bearer {bob}")],
    );
    assert_eq!(viewer.0, 403, "{viewer:?}");
    assert!(
        error_of(&viewer).contains("client:bob is not an administrator"),
        "{viewer:?}"
    );
    let admin = get(
        port,
        "/admin/v1/servers",
        &[&format!("authorization: Bearer {boss}")],
    );
    assert_eq!(admin.0, 200, "{admin:?}");
    assert_eq!(admin.1["servers"][0]["state"], "ready", "{admin:?}");

    let list = ["servers", "list", "--json"];
    let (code, asked, stderr) = mcpgw_env(&config_path, &list, &[("MCPGW_ADMIN_KEY", &boss)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("asked the gateway at http://127.0.0.1:{port}")),
        "{stderr}"
    );
    let rows: Vec<Value> = serde_json::from_str(&asked).expect("json");
    assert_eq!(rows[0]["name"], "time");
    let (code, _, stderr) = mcpgw_env(&config_path, &list, &[("MCPGW_ADMIN_KEY", &bob)]);
    assert_eq!(code, 0, "answered locally: {stderr}");
    assert!(
        stderr.contains("refused (403): client:bob is not an administrator")
            && stderr.contains("starting the servers here instead"),
        "one line says why: {stderr}"
    );
    assert!(!stderr.contains("asked the gateway"), "{stderr}");
}

/// A server-everything whose starts are recorded in `pids`.
fn recorded_everything(pids: &Path) -> String {
    recorded_server(
        "everything",
        pids,
        &format!("node {} stdio", everything_js()),
        "",
    )
}

/// `json` without the members that measure this one run (connect time, search time).
fn without_timings(mut json: Value) -> Value {
    if let Value::Array(items) = &mut json {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            item.remove("connect_ms");
        }
    }
    json
}

#[test]
fn tools_search_and_servers_list_ask_the_running_gateway_and_print_what_offline_prints() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let pids = scratch.path().join("pids");
    let (config, port) = listening_config(
        "",
        &format!(
            "[retrieval]\nstrategy = \"bm25\"\n\n{}",
            recorded_everything(&pids)
        ),
    );
    let config_path = config.path.clone();
    let gateway = Gateway::start_configured(config, |_| {});
    assert_eq!(recorded_pids(&pids).len(), 1, "serve started the server");
    let asked = format!("asked the gateway at http://127.0.0.1:{port}");

    let commands: [&[&str]; 7] = [
        &["tools", "--json"],
        &["tools", "--cost"],
        &["tools", "--server", "everything"],
        &["search", "add two numbers", "--json", "--explain"],
        &["search", "add two numbers", "--explain"],
        &["servers", "list", "--json"],
        &["servers", "list"],
    ];
    let mut answers = Vec::new();
    for args in commands {
        let (stdout, stderr) = run(&config_path, args);
        assert!(stderr.contains(&asked), "{args:?}: {stderr}");
        answers.push(stdout);
    }
    assert_eq!(
        recorded_pids(&pids).len(),
        1,
        "the running gateway answered: no server was started for the commands"
    );

    for (args, online) in commands.iter().zip(&answers) {
        let offline_args = [*args, &["--offline"]].concat();
        let (offline, stderr) = run(&config_path, &offline_args);
        assert!(!stderr.contains("asked the gateway"), "{stderr}");
        if args.contains(&"--json") {
            let parse = |text: &str| -> Value { serde_json::from_str(text).expect("json") };
            assert_eq!(
                without_timings(parse(online)),
                without_timings(parse(&offline)),
                "{args:?}"
            );
        } else {
            // The search's own time is the one line that differs.
            let timeless = |text: &str| -> Vec<String> {
                text.lines()
                    .filter(|line| !line.ends_with(" ms"))
                    .map(str::to_owned)
                    .collect()
            };
            assert_eq!(timeless(online), timeless(&offline), "{args:?}");
        }
    }
    assert!(answers[3].contains("everything__get-sum"), "{}", answers[3]);
    assert!(answers[4].contains("bm25 rank (score)"), "{}", answers[4]);
    assert!(answers[1].contains("tokens (cl100k_base) if listed directly"));
    assert_eq!(
        recorded_pids(&pids).len(),
        1 + commands.len(),
        "each --offline run started the server itself"
    );

    a_refused_token_is_said_in_one_line_and_answered_here(&gateway, &config_path, &answers[0]);
    assert_eq!(recorded_pids(&pids).len(), 2 + commands.len());
}

/// A gateway that refuses the token (another configuration's): said in one line, answered
/// here all the same.
fn a_refused_token_is_said_in_one_line_and_answered_here(
    gateway: &Gateway,
    config_path: &Path,
    answer: &str,
) {
    let port = gateway.port;
    std::fs::write(gateway.log.with_file_name("admin-token"), "not-the-token\n").expect("token");
    let (stdout, stderr) = run(config_path, &["tools", "--json"]);
    assert!(
        stderr.contains(&format!(
            "note: the gateway at http://127.0.0.1:{port} did not accept the admin credentials (401)"
        )) && stderr.lines().filter(|l| l.starts_with("note:")).count() == 1,
        "{stderr}"
    );
    assert_eq!(stdout, answer);
}

#[test]
fn without_a_running_gateway_the_cli_starts_the_servers_itself() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let pids = scratch.path().join("pids");
    let (config, port) = listening_config("", &recorded_everything(&pids));
    let list = ["servers", "list", "--json"];
    let quiet = |what: &str| {
        let (stdout, stderr) = run(&config.path, &list);
        assert!(
            !stderr.contains("note:") && !stderr.contains("asked the gateway"),
            "{what}: silent: {stderr}"
        );
        let rows: Vec<Value> = serde_json::from_str(&stdout).expect("json");
        assert_eq!(rows[0]["state"], "ready", "{what}: {stdout}");
    };
    // Never served: no admin token, nothing asked.
    quiet("no token file");
    // Served once and stopped: its token is left, nothing listens.
    std::fs::write(config.dir.path().join("admin-token"), "stale\n").expect("token");
    quiet("a stale token");
    assert_eq!(recorded_pids(&pids).len(), 2);

    // Something else listens there.
    let _other = Proc::spawn(
        "python http.server",
        Command::new(venv_bin("python"))
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(scratch.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    wait_until("http.server to listen", Duration::from_secs(20), || {
        port_open(port)
    });
    let (stdout, stderr) = run(&config.path, &list);
    assert!(
        stderr.contains(&format!(
            "note: the program at http://127.0.0.1:{port} has no admin API v1 (404): not mcpgw, or an older one; starting the servers here instead"
        )),
        "{stderr}"
    );
    assert!(stdout.contains("\"ready\""), "{stdout}");
    assert_eq!(recorded_pids(&pids).len(), 3);
}
