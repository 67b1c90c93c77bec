//! OpenTelemetry traces end to end. `mcpgw serve` with `[telemetry]` exports over OTLP/HTTP to
//! a receiver that decodes with the official `opentelemetry-proto` package
//! (tests/fixtures/otlp_receiver.py), while the Python SDK client calls through it with a W3C
//! trace context, to real upstreams: server-everything over stdio (its stdin recorded by a
//! `tee`) and a Python SDK server over Streamable HTTP that records every request it is sent
//! (tests/fixtures/traced_server.py). The client's span must be the request span's parent, the
//! upstream call a child of the request span, and each upstream must receive the upstream
//! call's own context, on the wire.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::harness::*;

/// The standard variables that would steer the exporter: no test inherits them.
const OTEL_VARS: [&str; 6] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
];

fn without_otel_env(command: &mut Command) {
    for var in OTEL_VARS {
        command.env_remove(var);
    }
}

/// An argument no span may carry.
const ARGUMENT: &str = "argument-text-4kq9z";

/// A running otlp_receiver.py and the file it writes.
struct Receiver {
    _proc: Proc,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    /// Listens on `port` (0: any free one).
    fn start(dir: &Path, port: u16) -> Receiver {
        let out = dir.join("otlp.jsonl");
        let mut proc = Proc::spawn(
            "otlp_receiver.py",
            Command::new(venv_bin("python"))
                .arg(repo_root().join("tests/fixtures/otlp_receiver.py"))
                .args(["--port", &port.to_string(), "--out"])
                .arg(&out)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
        // The first line says where it listens; EOF if it could not (it says why on stderr).
        let stdout = proc.child.stdout.take().expect("receiver stdout");
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the OTLP receiver did not start: {line:?}"));
        Receiver {
            _proc: proc,
            port,
            out,
        }
    }

    fn entries(&self, kind: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|entry| entry["kind"] == kind)
            .collect()
    }

    fn spans(&self) -> Vec<Value> {
        self.entries("span")
    }

    /// The spans of trace `trace_id`, once at least `count` have arrived (bounded wait).
    fn trace(&self, trace_id: &str, count: usize) -> Vec<Value> {
        let of_trace = || -> Vec<Value> {
            self.spans()
                .into_iter()
                .filter(|span| span["trace_id"] == trace_id)
                .collect()
        };
        wait_until(
            &format!("{count} spans of trace {trace_id}"),
            Duration::from_secs(30),
            || of_trace().len() >= count,
        );
        of_trace()
    }
}

/// A W3C `traceparent` of a sampled client span.
fn traceparent(trace_id: &str, span_id: &str) -> String {
    format!("00-{trace_id}-{span_id}-01")
}

/// The one span of `spans` that `matches`, with a message naming what was looked for.
fn one<'a>(spans: &'a [Value], what: &str, matches: impl Fn(&Value) -> bool) -> &'a Value {
    let found: Vec<&Value> = spans.iter().filter(|span| matches(span)).collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {what} among {}",
        serde_json::to_string_pretty(spans).unwrap_or_default()
    );
    found[0]
}

/// A request span: the SERVER span of a `tools/call` of `tool` (as the client named it).
fn call_span<'a>(spans: &'a [Value], tool: &str) -> &'a Value {
    one(spans, &format!("tools/call {tool} request span"), |span| {
        span["span_kind"] == "SPAN_KIND_SERVER"
            && span["name"] == "tools/call"
            && span["attributes"]["gen_ai.tool.name"] == tool
    })
}

/// The CLIENT span of the upstream call made for request span `parent`.
fn upstream_span<'a>(spans: &'a [Value], parent: &Value) -> &'a Value {
    one(spans, "upstream call span", |span| {
        span["span_kind"] == "SPAN_KIND_CLIENT" && span["parent_span_id"] == parent["span_id"]
    })
}

/// TOML for server-everything over stdio whose stdin (what mcpgw sends it) is appended to
/// `wire`.
fn recorded_everything(name: &str, wire: &Path) -> String {
    let command = format!(
        "tee -a {} | exec node {} stdio",
        wire.display(),
        everything_js()
    );
    format!(
        "[[servers]]\nname = \"{name}\"\ntransport = {{ type = \"stdio\", command = \"sh\", args = [\"-c\", {command:?}] }}\n"
    )
}

/// The `tools/call` messages in a recording: JSON lines (stdio) or request records (HTTP).
fn tools_calls(lines: &str, body: impl Fn(&Value) -> Value) -> Vec<Value> {
    lines
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|entry| body(entry)["method"] == "tools/call")
        .collect()
}

/// The traced Python SDK server on a free port, recording into `record`.
fn traced_server(record: &Path) -> (Proc, u16) {
    let port = free_port();
    let proc = Proc::spawn(
        "traced_server.py",
        Command::new(venv_bin("python"))
            .arg(repo_root().join("tests/fixtures/traced_server.py"))
            .args(["--port", &port.to_string(), "--record"])
            .arg(record)
            .stdout(Stdio::null()),
    );
    wait_until(
        "traced_server.py to listen",
        Duration::from_secs(30),
        || port_open(port),
    );
    (proc, port)
}

fn telemetry_table(receiver: &Receiver) -> String {
    format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\nservice_name = \"mcpgw-e2e\"\n",
        receiver.port
    )
}

/// The Python SDK client over HTTP with the client key `key` and a `traceparent` header.
fn traced_client(gateway: &Gateway, key: &str, header: &str, era: &str, script: Value) -> Value {
    py_client(
        &[
            "--url",
            &gateway.url(),
            "--header",
            &format!("Authorization: Bearer {key}"),
            "--header",
            &format!("traceparent: {header}"),
        ],
        era,
        script,
    )
}

/// The request span of the `tools/call` of `tool` routed to `server`, and its upstream call's
/// span, checked.
fn traced_call<'a>(
    spans: &'a [Value],
    tool: &str,
    server: &str,
    transport: &str,
) -> (&'a Value, &'a Value) {
    let request = call_span(spans, tool);
    let attributes = &request["attributes"];
    assert_eq!(attributes["mcp.method.name"], "tools/call", "{request}");
    assert_eq!(attributes["mcpgw.server"], server, "{request}");
    assert_eq!(attributes["mcpgw.decision"], "allowed", "{request}");
    assert_eq!(attributes["mcpgw.outcome"], "ok", "{request}");
    let call = upstream_span(spans, request);
    assert_eq!(call["name"], "tools/call echo", "{call}");
    assert_eq!(call["trace_id"], request["trace_id"], "{call}");
    assert_eq!(call["attributes"]["mcpgw.server"], server, "{call}");
    assert_eq!(call["attributes"]["mcpgw.transport"], transport, "{call}");
    assert_eq!(call["attributes"]["mcpgw.outcome"], "ok", "{call}");
    (request, call)
}

/// The `traceparent` an upstream must have received for the request whose span is `span`.
fn sent_for(span: &Value) -> String {
    traceparent(
        span["trace_id"].as_str().unwrap_or_default(),
        span["span_id"].as_str().unwrap_or_default(),
    )
}

/// Every request span of the HTTP session: a child of the client's span, from client `ci`.
fn check_request_spans(spans: &[Value], client_span: &str) {
    let requests = spans
        .iter()
        .filter(|s| s["span_kind"] == "SPAN_KIND_SERVER");
    for span in requests {
        assert_eq!(span["parent_span_id"], client_span, "{span}");
        assert_eq!(span["resource"]["service.name"], "mcpgw-e2e", "{span}");
        assert_eq!(span["attributes"]["mcpgw.client"], "ci", "{span}");
        assert_eq!(span["attributes"]["network.transport"], "tcp", "{span}");
    }
}

/// The search span under the `search_tools` request span, checked.
fn check_search(spans: &[Value]) {
    let request = call_span(spans, "search_tools");
    assert_eq!(request["attributes"]["mcpgw.outcome"], "ok");
    let search = one(spans, "search span", |span| span["name"] == "search");
    assert_eq!(search["parent_span_id"], request["span_id"]);
    assert_eq!(search["attributes"]["mcpgw.search.strategy"], "bm25");
    assert!(
        search["attributes"]["mcpgw.search.results"].as_i64() >= Some(1),
        "{search}"
    );
    assert_eq!(search["attributes"]["mcpgw.search.degraded"], false);
}

/// traced_server.py's one `tools/call` carried `expected` in its `_meta` and as its one
/// `traceparent` header.
fn check_http_upstream_received(record: &Path, expected: &str) {
    let sent = tools_calls(
        &std::fs::read_to_string(record).unwrap_or_default(),
        |entry| entry["body"].clone(),
    );
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["body"]["params"]["_meta"]["traceparent"], expected);
    let headers: Vec<&Value> = sent[0]["headers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|header| header[0] == "traceparent")
        .collect();
    assert_eq!(headers.len(), 1, "one traceparent header: {sent:?}");
    assert_eq!(headers[0][1], expected);
}

#[test]
fn a_clients_trace_continues_through_the_gateway_to_stdio_and_http_upstreams() {
    let records = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start(records.path(), 0);
    let http_record = records.path().join("http.jsonl");
    let (_upstream, upstream_port) = traced_server(&http_record);
    let wire = records.path().join("stdio.jsonl");
    let config = write_config(&format!(
        "{}\n[retrieval]\nstrategy = \"bm25\"\n\n{}\n[[servers]]\nname = \"traced\"\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{upstream_port}/mcp\" }}\n",
        telemetry_table(&receiver),
        recorded_everything("everything", &wire),
    ));
    let key = add_client(&config.path, "ci");
    let mut gateway = Gateway::start_with(config, "info", without_otel_env);
    let log = gateway.log_text();
    assert!(log.contains("exporting traces over OTLP/HTTP"), "{log}");

    // A legacy session (its plain calls take the direct path) with a trace header on every
    // request; the last call also names another trace in `_meta`, which the header overrides.
    let (trace, client_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let ignored = "11111111111111111111111111111111";
    let report = traced_client(
        &gateway,
        &key,
        &traceparent(trace, client_span),
        "legacy",
        json!([
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "echo"}},
            {"op": "call_tool", "name": "call_tool",
             "arguments": {"name": "everything__echo", "arguments": {"message": ARGUMENT}}},
            {"op": "call_tool", "name": "traced__echo", "arguments": {"message": ARGUMENT},
             "meta": {"traceparent": traceparent(ignored, "2222222222222222")}},
        ]),
    );
    let answered = |step: &Value| step.to_string().contains(ARGUMENT);
    assert!(
        answered(&report["steps"][1]) && answered(&report["steps"][2]),
        "{report}"
    );
    // A 2026-07-28 client (stateless requests, through rmcp) with a trace of its own.
    let (modern_trace, modern_span) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let modern = traced_client(
        &gateway,
        &key,
        &traceparent(modern_trace, modern_span),
        "modern",
        json!([{"op": "call_tool", "name": "call_tool",
                "arguments": {"name": "everything__echo", "arguments": {"message": "m"}}}]),
    );
    assert!(modern.to_string().contains("Echo: m"), "{modern}");

    // The spans still queued are sent as the gateway stops.
    assert!(gateway.proc.terminate().success(), "{}", gateway.log_text());
    let spans = receiver.trace(trace, 6);
    check_request_spans(&spans, client_span);
    check_search(&spans);
    let (stdio_request, stdio_call) = traced_call(&spans, "call_tool", "everything", "stdio");
    assert_eq!(
        stdio_request["attributes"]["mcpgw.tool"],
        "everything__echo"
    );
    let (_, http_call) = traced_call(&spans, "traced__echo", "traced", "http");
    assert!(
        receiver.spans().iter().all(|s| s["trace_id"] != ignored),
        "the header's trace wins over `_meta`'s"
    );

    // Each upstream received its call's own context: the trace, and the upstream span's id.
    let stdio_sent = tools_calls(
        &std::fs::read_to_string(&wire).unwrap_or_default(),
        Value::clone,
    );
    let expected = sent_for(stdio_call);
    let carried = |m: &Value| m["params"]["_meta"]["traceparent"] == expected.as_str();
    assert!(
        stdio_sent.iter().any(carried),
        "{expected} not in {stdio_sent:?}"
    );
    check_http_upstream_received(&http_record, &sent_for(http_call));

    // The 2026-07-28 request was traced on its own path too.
    let modern_spans = receiver.trace(modern_trace, 2);
    let (modern_request, _) = traced_call(&modern_spans, "call_tool", "everything", "stdio");
    assert_eq!(modern_request["parent_span_id"], modern_span);
    let version = &modern_request["attributes"]["mcp.protocol.version"];
    assert_eq!(version, "2026-07-28");

    // No span carries an argument or the client's key.
    let exported = std::fs::read_to_string(&receiver.out).unwrap_or_default();
    assert!(!exported.contains(ARGUMENT), "an argument was exported");
    assert!(!exported.contains(&key), "the client key was exported");
}

/// The span of the one `method` request, a new trace, and of its upstream request (named
/// `upstream_name`), whose context server-everything received (`sent_with` reads its stdin).
fn check_new_trace_to_upstream(
    spans: &[Value],
    method: &str,
    upstream_name: &str,
    sent_with: &dyn Fn(&str) -> Vec<Value>,
) {
    let request = one(spans, &format!("{method} request span"), |span| {
        span["span_kind"] == "SPAN_KIND_SERVER" && span["name"] == method
    });
    assert_eq!(request["parent_span_id"], "", "a new trace: {request}");
    assert_eq!(request["attributes"]["mcpgw.server"], "everything");
    assert_eq!(request["attributes"]["mcpgw.outcome"], "ok");
    let upstream = upstream_span(spans, request);
    assert_eq!(upstream["name"], upstream_name);
    assert_eq!(upstream["trace_id"], request["trace_id"]);
    assert_eq!(upstream["attributes"]["mcpgw.outcome"], "ok");
    let sent = sent_with(method);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["params"]["_meta"]["traceparent"],
        sent_for(upstream).as_str()
    );
}

#[test]
fn a_stdio_clients_meta_traceparent_is_the_parent_of_its_requests() {
    let records = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start(records.path(), 0);
    let wire = records.path().join("stdio.jsonl");
    let config = write_config(&format!(
        "{}\n[gateway]\nexposure = \"passthrough\"\n\n{}",
        telemetry_table(&receiver),
        recorded_everything("everything", &wire),
    ));
    let (trace, client_span) = ("5ce0e9a56015fec5aadfa328ae398115", "ab54a98ceb1f0ad2");
    let document = "mcpgw://everything/demo://resource/static/document/architecture.md";
    let report = py_client_stdio_with(
        &config,
        &[],
        "legacy",
        json!([
            {"op": "call_tool", "name": "everything__echo", "arguments": {"message": "x"},
             "meta": {"traceparent": traceparent(trace, client_span)}},
            {"op": "read_resource", "uri": document},
            {"op": "get_prompt", "name": "everything__simple-prompt"},
        ]),
        without_otel_env,
    );
    assert!(
        report["steps"][0].to_string().contains("Echo: x"),
        "{report}"
    );
    assert!(report["steps"][1]["contents"].is_array(), "{report}");
    assert!(report["steps"][2]["messages"].is_array(), "{report}");

    // The client closed stdin and the gateway stopped, sending its spans on the way out.
    let spans = receiver.trace(trace, 2);
    let request = call_span(&spans, "everything__echo");
    assert_eq!(request["parent_span_id"], client_span);
    assert_eq!(request["attributes"]["network.transport"], "pipe");
    assert!(
        request["attributes"].get("mcpgw.client").is_none(),
        "{request}"
    );
    let call = upstream_span(&spans, request);
    let sent = std::fs::read_to_string(&wire).unwrap_or_default();
    let sent_with = |method: &str| -> Vec<Value> {
        sent.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|message| message["method"] == method)
            .collect()
    };
    let calls = sent_with("tools/call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        calls[0]["params"]["_meta"]["traceparent"],
        sent_for(call).as_str()
    );

    // The requests without a trace context of their own began new traces, and their upstream
    // requests are traced the same way.
    let all = receiver.spans();
    check_new_trace_to_upstream(&all, "resources/read", "resources/read", &sent_with);
    check_new_trace_to_upstream(&all, "prompts/get", "prompts/get simple-prompt", &sent_with);
    let exported = std::fs::read_to_string(&receiver.out).unwrap_or_default();
    assert!(
        !exported.contains("architecture.md"),
        "a resource URI was exported"
    );
}

#[test]
fn without_telemetry_nothing_is_exported() {
    let records = tempfile::tempdir().expect("tempdir");
    // Where an exporter with no endpoint would send: OTLP/HTTP's default port.
    let receiver = Receiver::start(records.path(), 4318);
    let script = json!([{"op": "call_tool", "name": "call_tool",
                         "arguments": {"name": "everything__echo", "arguments": {"message": "q"}}}]);
    let run = |config: ConfigDir, setup: fn(&mut Command)| {
        let mut gateway = Gateway::start_with(config, "info", setup);
        let report = py_client(&["--url", &gateway.url()], "legacy", script.clone());
        assert!(report.to_string().contains("Echo: q"), "{report}");
        assert!(gateway.proc.terminate().success(), "{}", gateway.log_text());
        gateway.log_text()
    };
    // No `[telemetry]`, no variable.
    let log = run(
        write_config(&everything_stdio_server("everything")),
        without_otel_env,
    );
    assert!(!log.contains("exporting traces"), "{log}");
    // An endpoint, and the SDK's own switch turning it off.
    let log = run(
        write_config(&format!(
            "{}\n{}",
            telemetry_table(&receiver),
            everything_stdio_server("everything")
        )),
        |command| {
            without_otel_env(command);
            command.env("OTEL_SDK_DISABLED", "true");
        },
    );
    assert!(!log.contains("exporting traces"), "{log}");
    assert!(
        receiver.entries("connection").is_empty(),
        "something was exported"
    );

    // The receiver was listening all along: an export of our own reaches it.
    let status = reqwest::blocking::Client::new()
        .post(format!("http://127.0.0.1:{}/v1/traces", receiver.port))
        .header("content-type", "application/x-protobuf")
        .body(Vec::new())
        .send()
        .expect("receiver reachable")
        .status();
    assert_eq!(status, 200);
    assert_eq!(receiver.entries("connection").len(), 1);
}
