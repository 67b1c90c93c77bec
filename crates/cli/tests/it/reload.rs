//! Reloading the configuration of a running `mcpgw serve` (SIGHUP and the file watch): servers
//! added, removed, changed and kept (the same child process), connected clients told of an added
//! and of a removed server's tools (a removal through the admin API too), a broken file that changes nothing and says why, and keys
//! only a restart applies.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use crate::harness::*;

/// The configuration file of `gateway` (beside its log).
fn config_path(gateway: &Gateway) -> PathBuf {
    gateway.log.with_file_name("mcpgw.toml")
}

/// Replaces the configuration file with `toml` as [`write_config`] writes it (the same
/// `[network]` and `[store]`), in one rename, as editors do.
fn rewrite(gateway: &Gateway, toml: &str) {
    let path = config_path(gateway);
    let text = format!("{toml}\n{LOOPBACK_ALLOWLIST}\n[store]\npath = \"mcpgw.db\"\n");
    write_raw(&path, &text);
}

fn write_raw(path: &Path, text: &str) {
    let next = path.with_extension("toml.next");
    std::fs::write(&next, text).expect("write config");
    std::fs::rename(&next, path).expect("replace config");
}

fn sighup(gateway: &Gateway) {
    signal(gateway.proc.pid(), "HUP");
}

fn reload_status(gateway: &Gateway) -> Value {
    gateway.health().expect("healthz")["reload"].clone()
}

/// Waits until `/healthz` says the reload of `generation` went `last`.
fn wait_reloaded(gateway: &Gateway, last: &str, generation: u64) -> Value {
    let mut status = Value::Null;
    wait_until("the reload", Duration::from_secs(30), || {
        status = reload_status(gateway);
        status["last"] == last && status["generation"] == generation
    });
    status
}

/// The server names `/healthz` lists once none is starting.
fn settled_servers(gateway: &Gateway) -> Vec<(String, String)> {
    let mut servers = Vec::new();
    wait_until("every server to settle", Duration::from_secs(60), || {
        let health = gateway.health().expect("healthz");
        servers = health["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap_or_default().to_owned(),
                    s["state"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        servers.iter().all(|(_, state)| state != "starting")
    });
    servers
}

/// A stdio server-time under `name` whose pid is appended to `pids`; `extra` lines go into
/// its table.
fn clock(name: &str, pids: &Path, extra: &str) -> String {
    recorded_server(name, pids, &venv_bin("mcp-server-time"), extra)
}

fn only_pid(path: &Path) -> u32 {
    let pids = recorded_pids(path);
    assert_eq!(pids.len(), 1, "{}: {pids:?}", path.display());
    pids[0]
}

/// The Python SDK client of `era` on `gateway`, in the background: it lists the tools (a
/// 2026-07-28 one opens a listen stream first), creates `ready`, waits to hear that the tools
/// changed, and lists them again; its report goes to `out`.
fn waiting_client(gateway: &Gateway, era: &str, ready: &Path, out: &Path) -> Proc {
    let mut script = vec![json!({"op": "list_tools"})];
    if era == "modern" {
        script.insert(0, json!({"op": "listen"}));
    }
    script.extend([
        json!({"op": "mark", "path": ready}),
        json!({"op": "wait_notification", "method": "notifications/tools/list_changed", "timeout": 60}),
        json!({"op": "list_tools"}),
    ]);
    Proc::spawn(
        "python client",
        Command::new(venv_bin("python"))
            .arg(repo_root().join("tests/clients/mcp_client.py"))
            .args(["--url", &gateway.url(), "--era", era])
            .arg(Value::from(script).to_string())
            .env("MCP_CLIENT_TIMEOUT", "90")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(out).expect("client output")),
    )
}

/// Waits for the [`waiting_client`]s to finish and reads each era's report (`file(era, "json")`).
fn finished_reports(
    clients: &mut [Proc],
    eras: &[&'static str],
    file: &dyn Fn(&str, &str) -> PathBuf,
) -> Vec<(&'static str, Value)> {
    wait_until("the clients to finish", Duration::from_secs(90), || {
        clients
            .iter_mut()
            .all(|client| client.child.try_wait().ok().flatten().is_some())
    });
    eras.iter()
        .map(|era| {
            let text = std::fs::read_to_string(file(era, "json")).expect("output");
            (*era, serde_json::from_str(&text).expect("client report"))
        })
        .collect()
}

/// A [`waiting_client`] report's tools before, what it heard, and its tools after.
fn last_steps(report: &Value) -> (&Value, &Value, &Value) {
    let steps = report["steps"].as_array().expect("steps");
    (
        &steps[steps.len() - 4],
        &steps[steps.len() - 2],
        &steps[steps.len() - 1],
    )
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn sighup_adds_a_server_and_connected_clients_of_both_eras_hear_of_its_tools() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kept_pids = dir.path().join("kept.pids");
    let first = format!("{PASSTHROUGH}{}", clock("kept", &kept_pids, ""));
    let gateway = Gateway::start(write_config(&first));
    let kept = only_pid(&kept_pids);

    let eras = ["legacy", "modern"];
    let file = |era: &str, what: &str| dir.path().join(format!("{era}.{what}"));
    let mut clients: Vec<Proc> = eras
        .iter()
        .map(|era| waiting_client(&gateway, era, &file(era, "ready"), &file(era, "json")))
        .collect();
    wait_until("both clients to listen", Duration::from_secs(60), || {
        eras.iter().all(|era| file(era, "ready").exists())
    });

    rewrite(
        &gateway,
        &format!("{first}{}", everything_stdio_server("everything")),
    );
    sighup(&gateway);
    let status = wait_reloaded(&gateway, "ok", 1);
    assert_eq!(status["error"], Value::Null, "{status}");

    for (era, report) in finished_reports(&mut clients, &eras, &file) {
        let (before, heard, after) = last_steps(&report);
        // `count` only when it came (a timeout says `timedOut`).
        assert_eq!(heard["count"], 1, "{era}: {report}");
        assert!(
            !tool_names(before)
                .iter()
                .any(|n| n.starts_with("everything__"))
        );
        assert!(
            tool_names(after).contains(&"everything__echo".to_owned()),
            "{era}: {report}"
        );
        assert!(tool_names(after).contains(&"kept__get_current_time".to_owned()));
    }
    // The unchanged server kept its process.
    assert_eq!(only_pid(&kept_pids), kept);
    assert!(alive(kept));
    let log = gateway.log_text();
    assert!(log.contains("SIGHUP: reloading the configuration"), "{log}");
    assert_eq!(log.matches("configuration reloaded").count(), 1, "{log}");
}

#[test]
fn sighup_removes_a_server_and_connected_clients_of_both_eras_hear_its_tools_are_gone() {
    removed_server_is_heard(|gateway, kept_only| {
        rewrite(gateway, kept_only);
        sighup(gateway);
    });
}

/// A change made through the admin API takes the reload's path: the clients hear of it too.
#[test]
fn a_server_removed_through_the_admin_api_is_heard_by_connected_clients_of_both_eras() {
    removed_server_is_heard(|gateway, _| {
        let removed = reqwest::blocking::Client::new()
            .delete(format!(
                "http://127.0.0.1:{}/admin/v1/servers/gone",
                gateway.port
            ))
            .header("x-mcpgw-admin-token", gateway.admin_token())
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .expect("gateway reachable");
        assert_eq!(removed.status().as_u16(), 200);
        let report: Value = removed.json().expect("the reload's report");
        assert_eq!(report["removed"], json!(["gone"]), "{report}");
    });
}

/// Servers `kept` and `gone`; clients of both eras connected and listening while `remove`
/// takes `gone` away (given the gateway and the file without it): each hears once that the
/// tools changed and lists them without `gone`'s; `kept` keeps its child, `gone`'s exits.
fn removed_server_is_heard(remove: impl FnOnce(&Gateway, &str)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = |name: &str| dir.path().join(format!("{name}.pids"));
    let kept_only = format!("{PASSTHROUGH}{}", clock("kept", &pids("kept"), ""));
    let gateway = Gateway::start(write_config(&format!(
        "{kept_only}{}",
        clock("gone", &pids("gone"), "")
    )));
    let (kept, gone) = (only_pid(&pids("kept")), only_pid(&pids("gone")));

    let eras = ["legacy", "modern"];
    let file = |era: &str, what: &str| dir.path().join(format!("{era}.{what}"));
    let mut clients: Vec<Proc> = eras
        .iter()
        .map(|era| waiting_client(&gateway, era, &file(era, "ready"), &file(era, "json")))
        .collect();
    wait_until("both clients to listen", Duration::from_secs(60), || {
        eras.iter().all(|era| file(era, "ready").exists())
    });

    remove(&gateway, &kept_only);
    let status = wait_reloaded(&gateway, "ok", 1);
    assert_eq!(status["error"], Value::Null, "{status}");

    for (era, report) in finished_reports(&mut clients, &eras, &file) {
        let (before, heard, after) = last_steps(&report);
        // `count` only when it came (a timeout says `timedOut`).
        assert_eq!(heard["count"], 1, "{era}: {report}");
        assert!(
            tool_names(before).contains(&"gone__get_current_time".to_owned()),
            "{era}: {report}"
        );
        assert!(
            !tool_names(after).iter().any(|n| n.starts_with("gone__")),
            "{era}: the removed server's tools are gone: {report}"
        );
        assert!(
            tool_names(after).contains(&"kept__get_current_time".to_owned()),
            "{era}: {report}"
        );
    }
    wait_until(
        "the removed server's child to exit",
        Duration::from_secs(15),
        || !alive(gone),
    );
    // The unchanged server kept its process.
    assert_eq!(only_pid(&pids("kept")), kept);
    assert!(alive(kept));
}

#[test]
fn sighup_stops_a_removed_server_restarts_a_changed_one_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = |name: &str| dir.path().join(format!("{name}.pids"));
    let gateway = Gateway::start(write_config(&format!(
        "{}{}{}",
        clock("kept", &pids("kept"), ""),
        clock("gone", &pids("gone"), ""),
        clock("changed", &pids("changed"), "timeout_s = 10\n"),
    )));
    // Each server's children so far: one, unless a start under load timed out and was retried
    // (then the last is the live one).
    let started = |name: &str| {
        let all = recorded_pids(&pids(name));
        assert!(!all.is_empty(), "{name} started a child");
        all
    };
    let (kept_all, gone_all, changed_all) = (started("kept"), started("gone"), started("changed"));
    let (kept, changed) = (
        kept_all[kept_all.len() - 1],
        changed_all[changed_all.len() - 1],
    );
    let tools_before = gateway.health().expect("healthz")["tools"].clone();
    assert_eq!(tools_before, 6, "two tools a server");

    rewrite(
        &gateway,
        &format!(
            "{}{}",
            clock("kept", &pids("kept"), ""),
            clock("changed", &pids("changed"), "timeout_s = 20\n"),
        ),
    );
    sighup(&gateway);
    wait_reloaded(&gateway, "ok", 1);

    wait_until(
        "the removed server's child to exit",
        Duration::from_secs(15),
        || gone_all.iter().all(|pid| !alive(*pid)),
    );
    wait_until(
        "the changed server's old child to exit",
        Duration::from_secs(15),
        || !alive(changed),
    );
    assert_eq!(
        settled_servers(&gateway),
        [
            ("kept".to_owned(), "ready".to_owned()),
            ("changed".to_owned(), "ready".to_owned())
        ]
    );
    let restarted = recorded_pids(&pids("changed"));
    assert_eq!(
        restarted.len(),
        changed_all.len() + 1,
        "restarted once: {restarted:?}"
    );
    assert!(alive(restarted[restarted.len() - 1]));
    assert_eq!(
        recorded_pids(&pids("kept")),
        kept_all,
        "the unchanged server kept its child"
    );
    assert!(alive(kept));
    wait_until(
        "the removed server's tools to go",
        Duration::from_secs(10),
        || gateway.health().expect("healthz")["tools"] == 4,
    );
}

#[test]
fn a_broken_file_keeps_the_running_configuration_and_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("clock.pids");
    let good = clock("clock", &pids, "");
    let gateway = Gateway::start(write_config(&good));
    let pid = only_pid(&pids);

    // A syntax error: an unclosed string on line 2.
    write_raw(&config_path(&gateway), "[[servers]]\nname = \"clock\n");
    sighup(&gateway);
    let status = wait_reloaded(&gateway, "failed", 0);
    let error = status["error"].as_str().expect("error");
    assert!(error.contains("mcpgw.toml:2:"), "{status}");
    let log = gateway.log_text();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("configuration not reloaded; the running one stays"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(
        warned[0].contains("WARN") && warned[0].contains("mcpgw.toml:2:"),
        "{log}"
    );

    // A value out of range: the line is named, with the problem.
    rewrite(
        &gateway,
        &good.replace("[[servers]]\n", "[[servers]]\ntimeout_s = -1\n"),
    );
    sighup(&gateway);
    wait_until("the second failure", Duration::from_secs(30), || {
        reload_status(&gateway)["error"]
            .as_str()
            .is_some_and(|e| e.contains("servers[0].timeout_s"))
    });
    let status = reload_status(&gateway);
    assert_eq!(status["last"], "failed");
    assert!(
        status["error"]
            .as_str()
            .expect("error")
            .contains("mcpgw.toml:2:"),
        "{status}"
    );

    // Still serving what it served, with the same child.
    let health = gateway.health().expect("healthz");
    assert_eq!(health["servers"][0]["state"], "ready", "{health}");
    assert_eq!(health["tools"], 2);
    assert_eq!(only_pid(&pids), pid);
    assert!(alive(pid));

    // Fixed: applied, and the failure is gone.
    rewrite(&gateway, &good);
    sighup(&gateway);
    let status = wait_reloaded(&gateway, "ok", 1);
    assert_eq!(status["error"], Value::Null);
    assert_eq!(only_pid(&pids), pid, "nothing changed, nothing restarted");
}

#[test]
fn the_file_watch_reloads_a_changed_file_without_a_signal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = clock("clock", &dir.path().join("clock.pids"), "");
    let gateway = Gateway::start(write_config(&first));
    rewrite(
        &gateway,
        &format!(
            "{first}{}",
            clock("second", &dir.path().join("second.pids"), "")
        ),
    );
    wait_reloaded(&gateway, "ok", 1);
    assert_eq!(
        settled_servers(&gateway),
        [
            ("clock".to_owned(), "ready".to_owned()),
            ("second".to_owned(), "ready".to_owned())
        ]
    );
    let log = gateway.log_text();
    assert!(
        log.contains("configuration file changed; reloading"),
        "{log}"
    );
    assert!(!log.contains("SIGHUP"), "{log}");
}

#[test]
fn a_restart_only_key_is_reported_and_not_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let servers = clock("clock", &dir.path().join("clock.pids"), "");
    let gateway = Gateway::start(write_config(&servers));
    // `exposure` applies at once; `client_auth` and `max_connections` only at the next start.
    rewrite(
        &gateway,
        &format!(
            "{PASSTHROUGH}client_auth = \"api_key\"\n[limits]\nmax_connections = 7\n{servers}"
        ),
    );
    sighup(&gateway);
    let status = wait_reloaded(&gateway, "ok", 1);
    assert_eq!(
        status["restart_needed"],
        json!(["gateway.client_auth", "limits.max_connections"]),
        "{status}"
    );
    let log = gateway.log_text();
    for key in ["gateway.client_auth", "limits.max_connections"] {
        assert!(
            log.lines().any(|l| l.contains("WARN")
                && l.contains(key)
                && l.contains("only a restart applies it")),
            "{key}: {log}"
        );
    }
    // Without a key, as before: client authentication was not tightened (nor would it be
    // loosened) by a reload.
    let listed = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([{"op": "list_tools"}]),
    );
    let names = listed["steps"][0].to_string();
    assert!(
        names.contains("clock__get_current_time"),
        "passthrough applied: {listed}"
    );
}

#[test]
fn a_removed_server_finishes_its_call_in_flight_before_it_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).expect("traces");
    let pids = dir.path().join("relay.pids");
    let relay = recorded_server(
        "relay",
        &pids,
        &format!(
            "{} {} {}",
            venv_bin("python"),
            repo_root().join("tests/fixtures/relay_server.py").display(),
            traces.display()
        ),
        "",
    );
    let kept = clock("clock", &dir.path().join("clock.pids"), "");
    let gateway = Gateway::start(write_config(&format!("{PASSTHROUGH}{relay}{kept}")));
    let relay_pid = only_pid(&pids);

    let out = dir.path().join("client.json");
    let script = json!([{"op": "call_tool", "name": "relay__slow", "arguments": {"seconds": 3}}]);
    let mut client = Proc::spawn(
        "python client",
        Command::new(venv_bin("python"))
            .arg(repo_root().join("tests/clients/mcp_client.py"))
            .args(["--url", &gateway.url(), "--era", "legacy"])
            .arg(script.to_string())
            .env("MCP_CLIENT_TIMEOUT", "90")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("client output")),
    );
    wait_until(
        "the call to reach the upstream",
        Duration::from_secs(30),
        || traces.join("started").exists(),
    );

    rewrite(&gateway, &format!("{PASSTHROUGH}{kept}"));
    sighup(&gateway);
    wait_reloaded(&gateway, "ok", 1);
    // Out of the catalog at once, while its call runs on.
    assert_eq!(gateway.health().expect("healthz")["tools"], 2);
    assert!(alive(relay_pid), "stopped before its call finished");

    wait_until("the client to finish", Duration::from_secs(30), || {
        client.child.try_wait().ok().flatten().is_some()
    });
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("output"))
        .expect("client report");
    let step = &report["steps"][0];
    assert_eq!(step["isError"], false, "{report}");
    assert!(result_text(step).contains("slept 3"), "{report}");
    assert!(traces.join("finished").exists());
    wait_until(
        "the drained server's child to exit",
        Duration::from_secs(15),
        || !alive(relay_pid),
    );
}
