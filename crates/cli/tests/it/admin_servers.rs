//! The admin API's server writes on a real `mcpgw serve` with real upstreams (issue 16): a
//! stdio server (the Python `mcp-server-time`) added, changed, replaced, disabled, enabled,
//! tested and removed through `/admin/v1/servers`, each seen where a user would look (the
//! admin API's tools, a Python SDK client's `tools/list`, the file itself, which keeps its
//! comments); servers pasted as `mcpServers` JSON, whose secrets never reach the file or an
//! answer; the credentials of a server; writes that would not load, which change nothing and
//! say why; and who may write (the admin token or an administrator's key, never another site).

use std::process::Command;

use serde_json::{Value, json};

use crate::harness::*;

/// The admin API of a running gateway, with the credential it needs.
struct Admin {
    base: String,
    credential: (String, String),
}

impl Admin {
    fn of(gateway: &Gateway) -> Admin {
        Admin {
            base: format!("http://127.0.0.1:{}", gateway.port),
            credential: ("x-mcpgw-admin-token".to_owned(), gateway.admin_token()),
        }
    }

    fn with_key(gateway: &Gateway, key: &str) -> Admin {
        Admin {
            base: format!("http://127.0.0.1:{}", gateway.port),
            credential: ("authorization".to_owned(), format!("Bearer {key}")),
        }
    }

    /// `METHOD path` with the credential, a JSON body (`application/json`) and `headers`:
    /// the status and the answer as JSON (`null` when it is not) and as text.
    fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, Value, String) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = reqwest::blocking::Client::new()
            .request(method, format!("{}{path}", self.base))
            .header(&self.credential.0, &self.credential.1)
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.body(body.to_owned());
        }
        let response = request.send().expect("gateway reachable");
        let status = response.status().as_u16();
        let text = response.text().unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        )
    }

    fn send(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        let (status, json, _) = self.raw(method, path, Some(&body.to_string()), &[]);
        (status, json)
    }

    /// A write that must succeed with `status`: its reload report.
    fn write(&self, method: &str, path: &str, body: Value, status: u16) -> Value {
        let (got, report) = self.send(method, path, body);
        assert_eq!(got, status, "{method} {path}: {report}");
        report
    }

    fn get(&self, path: &str) -> Value {
        let (status, json, text) = self.raw("GET", path, None, &[]);
        assert_eq!(status, 200, "GET {path}: {text}");
        json
    }

    /// The names of `server`'s tools in the catalog.
    fn tools_of(&self, server: &str) -> Vec<String> {
        names(&self.get(&format!("/admin/v1/tools?server={server}"))["tools"])
    }
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn config_text(gateway: &Gateway) -> String {
    std::fs::read_to_string(gateway.log.with_file_name("mcpgw.toml")).expect("config file")
}

/// A Python SDK client's `tools/list` through the gateway, with each tool's schema.
fn listed_tools(gateway: &Gateway) -> Vec<Value> {
    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([{"op": "list_tools", "full": true}]),
    );
    report["steps"][0].as_array().cloned().unwrap_or_default()
}

/// Whether every line of `original` is in `now`, in the same order.
fn keeps_every_line(original: &str, now: &str) -> bool {
    let mut lines = now.lines();
    original.lines().all(|line| lines.any(|l| l == line))
}

/// `json` without the members that measure one run.
fn timeless(mut json: Value) -> Value {
    if let Some(object) = json.as_object_mut() {
        object.remove("connect_ms");
        object.remove("total_ms");
    }
    json
}

const COMMENTED: &str = "# Changed through the admin API in this test: every comment must stay.\n\
[gateway]\n\
exposure = \"passthrough\"   # every tool listed, so tools/list shows them\n\n\
# The clock the gateway starts with.\n\
[[servers]]\n\
name = \"clock\"   # the first server\n\
timeout_s = 30   # seconds\n";

fn clock_config() -> ConfigDir {
    write_config(&format!(
        "{COMMENTED}transport = {{ type = \"stdio\", command = {:?} }}\n",
        venv_bin("mcp-server-time")
    ))
}

#[test]
fn a_server_is_added_changed_disabled_enabled_and_removed_and_the_file_keeps_its_comments() {
    let gateway = Gateway::start(clock_config());
    let admin = Admin::of(&gateway);
    let original = config_text(&gateway);
    let time = venv_bin("mcp-server-time");

    // Trusted: its definitions change below (the local timezone is in its schemas), and a
    // changed definition of an untrusted server is held for approval (pinning).
    let added = json!({"name": "time", "description": "added through the API",
        "trust_changes": true, "transport": {"type": "stdio", "command": time}});
    let report = admin.write("POST", "/admin/v1/servers", added, 201);
    assert_eq!(report["servers"], json!(["time"]), "{report}");
    assert_eq!(report["added"], json!(["time"]), "{report}");
    assert_eq!(report["unchanged"], json!(["clock"]), "{report}");
    assert_eq!(report["generation"], 1, "{report}");
    assert_eq!(
        admin.tools_of("time"),
        ["time__get_current_time", "time__convert_time"]
    );
    let listed = names(&Value::from(listed_tools(&gateway)));
    assert!(
        listed.contains(&"time__get_current_time".to_owned())
            && listed.contains(&"clock__get_current_time".to_owned()),
        "an MCP client lists the new server's tools: {listed:?}"
    );
    let now = config_text(&gateway);
    assert!(keeps_every_line(&original, &now), "{now}");
    assert!(
        now.contains("name = \"time\"\ndescription = \"added through the API\"\n"),
        "{now}"
    );

    changes_apply_and_keep_comments(&gateway, &admin, &original);
    disabled_and_enabled(&gateway, &admin);
    tested_as_the_cli_tests(&gateway, &admin);

    let report = admin.write("DELETE", "/admin/v1/servers/time", json!({}), 200);
    assert_eq!(report["removed"], json!(["time"]), "{report}");
    let servers = names(&admin.get("/admin/v1/servers")["servers"]);
    assert_eq!(servers, ["clock"]);
    let catalog = names(&admin.get("/admin/v1/tools")["tools"]);
    assert!(
        catalog.iter().all(|name| name.starts_with("clock__")),
        "{catalog:?}"
    );
    let (status, _) = admin.send("GET", "/admin/v1/servers/time", json!({}));
    assert_eq!(status, 404);
    let mut restored = original.clone();
    restored = restored.replace("timeout_s = 30   # seconds", "timeout_s = 25   # seconds");
    assert_eq!(
        config_text(&gateway),
        restored,
        "the file as it was, but for the patch"
    );
}

/// PATCH merges into the table as written (a comment beside a changed value stays); PUT
/// replaces a table; both restart the server with its new settings.
fn changes_apply_and_keep_comments(gateway: &Gateway, admin: &Admin, original: &str) {
    let report = admin.write(
        "PATCH",
        "/admin/v1/servers/clock",
        json!({"timeout_s": 25}),
        200,
    );
    assert_eq!(report["changed"], json!(["clock"]), "{report}");
    let text = config_text(gateway);
    assert!(text.contains("timeout_s = 25   # seconds"), "{text}");
    assert!(text.starts_with(&original[..original.find("timeout_s").expect("timeout")]));

    let auckland = json!({"transport": {"args": ["--local-timezone", "Pacific/Auckland"]}});
    let report = admin.write("PATCH", "/admin/v1/servers/time", auckland, 200);
    assert_eq!(report["changed"], json!(["time"]), "{report}");
    assert!(local_zone_of(gateway, "time__get_current_time").contains("Pacific/Auckland"));

    let replaced = json!({"timeout_s": 20, "trust_changes": true, "transport": {"type": "stdio",
        "command": venv_bin("mcp-server-time"), "args": ["--local-timezone", "Europe/Paris"]}});
    let report = admin.write("PUT", "/admin/v1/servers/time", replaced, 200);
    assert_eq!(report["changed"], json!(["time"]), "{report}");
    assert!(local_zone_of(gateway, "time__get_current_time").contains("Europe/Paris"));
    let text = config_text(gateway);
    assert!(
        text.contains("name = \"time\"\ntimeout_s = 20\ntrust_changes = true\n")
            && !text.contains("added through"),
        "PUT replaces the whole table: {text}"
    );
}

/// What `tool`'s input schema, as a client lists it, says the local timezone is.
fn local_zone_of(gateway: &Gateway, tool: &str) -> String {
    listed_tools(gateway)
        .iter()
        .find(|t| t["name"] == tool)
        .map(|t| t["inputSchema"].to_string())
        .unwrap_or_default()
}

/// A disabled server is not connected and its tools leave the catalog and clients' lists.
fn disabled_and_enabled(gateway: &Gateway, admin: &Admin) {
    let report = admin.write("POST", "/admin/v1/servers/time/disable", json!({}), 200);
    assert_eq!(report["removed"], json!(["time"]), "{report}");
    assert!(config_text(gateway).contains("enabled = false"));
    assert_eq!(admin.get("/admin/v1/servers/time")["state"], "disabled");
    assert!(admin.tools_of("time").is_empty());
    let listed = names(&Value::from(listed_tools(gateway)));
    assert!(
        !listed.iter().any(|name| name.starts_with("time__")),
        "{listed:?}"
    );

    let report = admin.write("POST", "/admin/v1/servers/time/enable", json!({}), 200);
    assert_eq!(report["added"], json!(["time"]), "{report}");
    assert!(config_text(gateway).contains("enabled = true"));
    assert_eq!(admin.get("/admin/v1/servers/time")["state"], "ready");
    assert_eq!(admin.tools_of("time").len(), 2);
}

/// `POST .../test` answers what `mcpgw servers test NAME --json` prints.
fn tested_as_the_cli_tests(gateway: &Gateway, admin: &Admin) {
    let tested = admin.write("POST", "/admin/v1/servers/time/test", json!({}), 200);
    assert_eq!(tested["ok"], true, "{tested}");
    assert_eq!(tested["tools"], json!(["get_current_time", "convert_time"]));
    let config = gateway.log.with_file_name("mcpgw.toml");
    let cli = mcpgw_in(&config, &["servers", "test", "time", "--json"]);
    assert!(cli.status.success(), "{}", text(&cli.stderr));
    let printed: Value = serde_json::from_slice(&cli.stdout).expect("json");
    assert_eq!(timeless(printed), timeless(tested));
}

/// A server to add: `extra` over a stdio server named `new`.
fn new_server(extra: Value) -> String {
    let mut server = json!({"name": "new", "transport": {"type": "stdio", "command": "x"}});
    if let (Some(server), Value::Object(extra)) = (server.as_object_mut(), extra) {
        server.extend(extra);
    }
    server.to_string()
}

/// Writes that cannot be made: `METHOD path`, the body, the status, what the error says.
#[rustfmt::skip] // a table: one write a line
fn refused_writes() -> Vec<(&'static str, String, u16, &'static str)> {
    let secret_env = json!({"transport": {"type": "stdio", "command": "gh-mcp",
        "env": {"GITHUB_TOKEN": "ghp_LITERALSECRET"}}});
    let secret_header = json!({"transport": {"type": "http", "url": "https://api.example/mcp",
        "headers": {"Authorization": "Bearer sk-LITERALSECRET"}}});
    let add = "POST /admin/v1/servers";
    let nope = "no server named 'nope'";
    vec![
        (add, new_server(secret_env), 400, "servers[1].transport.env.GITHUB_TOKEN: `GITHUB_TOKEN` looks like a secret and must not be written inline (hint: write it as { env = \"GITHUB_TOKEN\" }"),
        (add, new_server(secret_header), 400, "`Authorization` looks like a secret and must not be written inline"),
        (add, new_server(json!({"timeout_s": 0})), 400, "servers[1].timeout_s"),
        (add, new_server(json!({"timeout": 3})), 400, "did you mean `timeout_s`?"),
        (add, new_server(json!({"name": "bad name!"})), 400, "servers[1].name"),
        (add, new_server(json!({"description": null})), 400, "description: null is not a TOML value"),
        (add, new_server(json!({"name": "clock"})), 409, "a server named 'clock' is configured already"),
        (add, "add a server, please".to_owned(), 400, "the body must be a JSON object"),
        (add, r#"{"mcpServers": {"a": {}}}"#.to_owned(), 400, "the pasted JSON is not usable: mcpServers.a: neither `command` nor `url` is given"),
        ("PATCH /admin/v1/servers/clock", json!({"name": "other"}).to_string(), 400, "the name of server 'clock' cannot change"),
        ("PATCH /admin/v1/servers/clock", json!({"transport": {"type": "pigeon"}}).to_string(), 400, "servers[0].transport.type: unknown value `pigeon`"),
        ("PATCH /admin/v1/servers/nope", "{}".to_owned(), 404, nope),
        ("PUT /admin/v1/servers/nope", new_server(json!({"name": "nope"})), 404, nope),
        ("DELETE /admin/v1/servers/nope", "{}".to_owned(), 404, nope),
        ("POST /admin/v1/servers/nope/disable", "{}".to_owned(), 404, nope),
        ("POST /admin/v1/servers/nope/test", "{}".to_owned(), 404, nope),
        ("GET /admin/v1/servers/nope/credentials", String::new(), 404, nope),
    ]
}

#[test]
fn a_write_that_would_not_load_changes_nothing_and_says_why() {
    let gateway = Gateway::start(clock_config());
    let admin = Admin::of(&gateway);
    let original = config_text(&gateway);
    for (request, body, status, says) in refused_writes() {
        let (method, path) = request.split_once(' ').expect("METHOD path");
        let (got, answer, text) = admin.raw(method, path, Some(&body), &[]);
        assert_eq!(got, status, "{request} {body}: {text}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{request} {body}: {error}");
        assert!(!text.contains("LITERALSECRET"), "never echoed: {text}");
        assert_eq!(
            config_text(&gateway),
            original,
            "{body}: the file is unchanged"
        );
    }
    let bad = new_server(json!({"timeout_s": 0}));
    let (_, answer, _) = admin.raw("POST", "/admin/v1/servers", Some(&bad), &[]);
    assert!(
        answer["problems"][0]
            .as_str()
            .is_some_and(|p| p.starts_with("servers[1].timeout_s: ")),
        "each problem by its key, without a line of a file never written: {answer}"
    );
    assert_eq!(
        gateway.health().expect("healthz")["reload"]["generation"],
        0,
        "nothing was reloaded"
    );
    only_the_admin_may_write(&gateway, &original);
}

/// No admin token, another site's page, a form's content type: refused before any route.
fn only_the_admin_may_write(gateway: &Gateway, original: &str) {
    let body =
        json!({"name": "sneaky", "transport": {"type": "stdio", "command": "x"}}).to_string();
    let anonymous = Admin {
        base: format!("http://127.0.0.1:{}", gateway.port),
        credential: ("x-unrelated".to_owned(), "1".to_owned()),
    };
    let (status, _, text) = anonymous.raw("POST", "/admin/v1/servers", Some(&body), &[]);
    assert_eq!(status, 401, "{text}");
    let (status, _, text) = anonymous.raw("DELETE", "/admin/v1/servers/clock", Some("{}"), &[]);
    assert_eq!(status, 401, "{text}");
    let admin = Admin::of(gateway);
    for (header, value, expect) in [
        ("origin", "https://evil.example", 403),
        ("sec-fetch-site", "cross-site", 403),
        ("content-type", "text/plain", 415),
    ] {
        let (status, _, text) =
            admin.raw("POST", "/admin/v1/servers", Some(&body), &[(header, value)]);
        assert_eq!(status, expect, "{header}: {value}: {text}");
    }
    let (status, _, text) = admin.raw(
        "POST",
        "/admin/v1/servers/clock/disable",
        Some("{}"),
        &[("origin", "https://evil.example")],
    );
    assert_eq!(status, 403, "{text}");
    assert_eq!(config_text(gateway), original);
    assert_eq!(names(&admin.get("/admin/v1/servers")["servers"]), ["clock"]);
}

#[test]
fn pasted_servers_are_imported_without_their_secrets_and_their_credentials_are_shown_by_name() {
    let gateway = Gateway::start_with(clock_config(), "info", |command| {
        command.env("CLOCK_API_KEY", "s3cret-from-env");
    });
    let admin = Admin::of(&gateway);
    let time = venv_bin("mcp-server-time");
    let pasted = json!({"mcpServers": {"Pasted Clock": {"command": time,
        "env": {"CLOCK_API_KEY": "pasted-SECRET-value", "LANG": "C.UTF-8"}}}});
    let (status, report, text) =
        admin.raw("POST", "/admin/v1/servers", Some(&pasted.to_string()), &[]);
    assert_eq!(status, 201, "{text}");
    assert_eq!(report["servers"], json!(["Pasted-Clock"]), "{report}");
    assert_eq!(report["added"], json!(["Pasted-Clock"]), "{report}");
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("renamed to `Pasted-Clock`")
            && warnings.contains("env CLOCK_API_KEY held a secret inline; it is now read from the environment, export CLOCK_API_KEY"),
        "{warnings}"
    );
    let file = config_text(&gateway);
    for shown in [&text, &file] {
        assert!(!shown.contains("pasted-SECRET-value"), "{shown}");
    }
    assert!(
        file.contains("CLOCK_API_KEY = { env = \"CLOCK_API_KEY\" }\nLANG = \"C.UTF-8\""),
        "{file}"
    );
    assert_eq!(admin.tools_of("Pasted-Clock").len(), 2, "it connected");

    let credentials = admin.get("/admin/v1/servers/Pasted-Clock/credentials");
    assert_eq!(
        credentials,
        json!({"server": "Pasted-Clock", "auth": "none", "configured": true,
            "sources": [{"used_for": "env CLOCK_API_KEY", "env": "CLOCK_API_KEY", "set": true}],
            "sign_ins": null})
    );
    let clock = admin.get("/admin/v1/servers/clock/credentials");
    assert_eq!(clock["configured"], false, "{clock}");
    assert_eq!(clock["sources"], json!([]), "{clock}");
    a_failing_server_is_tested_as_the_cli_tests_it(&gateway, &admin);
    let everything = format!("{}{}", admin.get("/admin/v1/servers"), credentials);
    assert!(!everything.contains("s3cret-from-env"), "{everything}");
}

/// A server that cannot start: the test says why in the words of `mcpgw servers test`.
fn a_failing_server_is_tested_as_the_cli_tests_it(gateway: &Gateway, admin: &Admin) {
    let broken = json!({"transport": {"args": ["--local-timezone", "Not/AZone"]}});
    let report = admin.write("PATCH", "/admin/v1/servers/Pasted-Clock", broken, 200);
    assert_eq!(report["changed"], json!(["Pasted-Clock"]), "{report}");
    let row = admin.get("/admin/v1/servers/Pasted-Clock");
    assert_eq!(row["state"], "failed", "{row}");
    let tested = admin.write(
        "POST",
        "/admin/v1/servers/Pasted-Clock/test",
        json!({}),
        200,
    );
    assert_eq!(tested["ok"], false, "{tested}");
    let error = tested["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("invalid --local-timezone 'Not/AZone'"),
        "the server's own words: {error}"
    );
    let config = gateway.log.with_file_name("mcpgw.toml");
    let cli = Command::new(mcpgw())
        .args(["servers", "test", "Pasted-Clock", "--json", "--config"])
        .arg(&config)
        .env("CLOCK_API_KEY", "s3cret-from-env")
        .output()
        .expect("mcpgw runs");
    assert_eq!(cli.status.code(), Some(1), "{}", text(&cli.stderr));
    let printed: Value = serde_json::from_slice(&cli.stdout).expect("json");
    assert_eq!(timeless(printed), timeless(tested));
}

#[test]
fn a_gateway_serving_mcp_servers_json_refuses_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("claude_desktop_config.json");
    let json = json!({"mcpServers": {"clock": {"command": venv_bin("mcp-server-time")}}});
    std::fs::write(&path, json.to_string()).expect("write json");
    let data = dir.path().join("data");
    let config = ConfigDir {
        dir,
        path: path.clone(),
    };
    let gateway = Gateway::start_with(config, "info", |command| {
        command.env("XDG_DATA_HOME", &data);
    });
    let token = std::fs::read_to_string(data.join("mcpgw/admin-token")).expect("admin token");
    let admin = Admin {
        base: format!("http://127.0.0.1:{}", gateway.port),
        credential: ("x-mcpgw-admin-token".to_owned(), token.trim().to_owned()),
    };
    let body = json!({"name": "b", "transport": {"type": "stdio", "command": "b"}});
    let (status, answer) = admin.send("POST", "/admin/v1/servers", body);
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"].as_str().is_some_and(|e| e.contains(
            "an mcpServers JSON file, as it is: convert it to mcpgw.toml with `mcpgw import`"
        )),
        "{answer}"
    );
    let (status, _) = admin.send("POST", "/admin/v1/servers/clock/disable", json!({}));
    assert_eq!(status, 409);
    assert_eq!(
        std::fs::read_to_string(&path).expect("json"),
        json.to_string()
    );
}

#[test]
fn on_a_keyed_listener_only_an_administrators_key_writes() {
    let config = write_config(&format!(
        "{}\n[[profiles]]\nname = \"ops\"\nclients = [\"boss\"]\nadmin = true\n\n[[profiles]]\nname = \"viewer\"\nclients = [\"bob\"]\n",
        time_stdio_server("clock")
    ));
    let boss = add_client(&config.path, "boss");
    let bob = add_client(&config.path, "bob");
    let gateway = Gateway::start(config);
    let body = json!({"name": "time", "transport": {"type": "stdio", "command": venv_bin("mcp-server-time")}});
    let (status, answer) =
        Admin::with_key(&gateway, &bob).send("POST", "/admin/v1/servers", body.clone());
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("client:bob is not an administrator")),
        "{answer}"
    );
    let unkeyed = Admin {
        base: format!("http://127.0.0.1:{}", gateway.port),
        credential: ("x-mcpgw-admin-token".to_owned(), "not-a-key".to_owned()),
    };
    let (status, _) = unkeyed.send("POST", "/admin/v1/servers", body.clone());
    assert_eq!(status, 401);
    let boss = Admin::with_key(&gateway, &boss);
    let report = boss.write("POST", "/admin/v1/servers", body, 201);
    assert_eq!(report["added"], json!(["time"]));
    let report = boss.write("DELETE", "/admin/v1/servers/time", json!({}), 200);
    assert_eq!(report["removed"], json!(["time"]));
    assert!(!config_text(&gateway).contains("name = \"time\""));
}
