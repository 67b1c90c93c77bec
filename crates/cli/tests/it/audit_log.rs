//! The audit log and per-client rate limits, end to end: a real client with its key calls
//! through the gateway; `mcpgw audit` then shows who called what with which decision and
//! outcome, holding only a hash of the arguments. `mcpgw audit prune` applies `[audit]`
//! retention.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::harness::*;

fn audit(config: &Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["audit", "--json"];
    all.extend_from_slice(args);
    let out = mcpgw_in(config, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn calls_are_audited_with_a_hash_of_their_arguments_and_rate_limited_per_client() {
    let config = write_config(&format!(
        "{}\n[[profiles]]\nname = \"ci\"\nclients = [\"ci\"]\ndeny = [\"everything__get-env\"]\ncalls_per_minute = 4\n",
        everything_stdio_server("everything")
    ));
    let config_path = config.path.clone();
    let db = config.dir.path().join("mcpgw.db");
    let added = mcpgw_in(&config_path, &["clients", "add", "ci"]);
    assert!(added.status.success());
    let key = String::from_utf8_lossy(&added.stdout).trim().to_owned();
    let gateway = Gateway::start(config);
    let secret = "do-not-log-7f3a9c";
    let echo = |message: &str| {
        json!({"op": "call_tool", "name": "call_tool",
               "arguments": {"name": "everything__echo", "arguments": {"message": message}}})
    };
    let report = py_client(
        &[
            "--url",
            &gateway.url(),
            "--header",
            &format!("Authorization: Bearer {key}"),
        ],
        "legacy",
        json!([
            echo(secret),
            {"op": "call_tool", "name": "call_tool", "arguments": {"name": "everything__get-env", "arguments": {}}},
            {"op": "call_tool", "name": "call_tool", "arguments": {"name": "everything__echo", "arguments": {"oops": 1}}},
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "echo"}},
            echo("over the limit"),
        ]),
    );
    let steps = &report["steps"];
    assert_eq!(steps[0]["isError"], false, "{report}");
    assert_eq!(steps[1]["isError"], true, "{report}");
    assert_eq!(steps[2]["isError"], true, "{report}");
    assert_eq!(steps[3]["isError"], false, "{report}");
    let limited = result_text(&steps[4]);
    assert_eq!(steps[4]["isError"], true, "{report}");
    assert!(limited.contains("rate limit reached"), "{limited}");
    assert!(limited.contains("Try again in"), "{limited}");

    // The local user (stdio) is not limited by ci's budget: the limit is per principal.
    let config_text = config_path.display().to_string();
    let report = py_client(
        &[
            "--stdio",
            mcpgw(),
            "serve",
            "--stdio",
            "--config",
            &config_text,
            "--",
        ],
        "legacy",
        json!([echo("local")]),
    );
    assert_eq!(report["steps"][0]["isError"], false, "{report}");

    let rows = audit(&config_path, &["--client", "ci"]);
    let by_decision = |decision: &str| -> Vec<&Value> {
        rows.iter().filter(|r| r["decision"] == decision).collect()
    };
    assert_eq!(rows.len(), 4, "{rows:#?}");
    assert!(
        rows.iter().all(|r| r["principal"] == "client:ci"),
        "{rows:#?}"
    );
    // Newest first.
    assert_eq!(rows[0]["decision"], "rate_limited", "{rows:#?}");
    assert_eq!(rows[0]["outcome"], "not_run", "{rows:#?}");
    let denied = by_decision("denied");
    assert_eq!(denied.len(), 1, "{rows:#?}");
    assert_eq!(denied[0]["tool"], "everything__get-env");
    let allowed = by_decision("allowed");
    assert_eq!(allowed.len(), 2, "{rows:#?}");
    let ok = allowed
        .iter()
        .find(|r| r["outcome"] == "ok")
        .expect("ok call");
    let invalid = allowed
        .iter()
        .find(|r| r["outcome"] == "not_run")
        .expect("invalid call");
    assert_eq!(invalid["error"], "invalid arguments", "{rows:#?}");
    assert_eq!(ok["tool"], "everything__echo");
    assert_eq!(ok["server"], "everything");
    assert!(ok["latency_ms"].is_u64(), "{ok}");
    let expected = hex(&Sha256::digest(json!({"message": secret}).to_string()));
    assert_eq!(ok["arguments_sha256"], expected.as_str(), "{ok}");

    let everyone = audit(&config_path, &["--since", "1h"]);
    assert_eq!(everyone.len(), 5, "{everyone:#?}");
    assert_eq!(everyone[0]["principal"], "local", "{everyone:#?}");
    assert!(audit(&config_path, &["--client", "nobody"]).is_empty());

    // The arguments themselves are nowhere: not in the database, not in the CLI's output.
    let mut gateway = gateway;
    gateway.proc.terminate();
    let out = mcpgw_in(&config_path, &["audit"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("client:ci") && table.contains("rate_limited"),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in ["mcpgw.db", "mcpgw.db-wal"] {
        let path = db.with_file_name(file);
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{file} holds the argument value"
            );
        }
    }
    assert!(!table.contains(secret));
}

#[test]
fn audit_prune_keeps_what_the_configuration_says() {
    const HOUR: Duration = Duration::from_secs(3600);
    // The default retention (90 days) and a small row cap.
    let config = write_config("[audit]\nmax_rows = 2\n");
    let database = config.dir.path().join("mcpgw.db");
    let now = SystemTime::now();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = store::Store::open(&database).await.expect("store opens");
        for (tool, age) in [
            ("fs__ancient", 200 * 24 * HOUR),
            ("fs__third", 3 * HOUR),
            ("fs__second", 2 * HOUR),
            ("fs__first", HOUR),
            ("fs__latest", Duration::ZERO),
        ] {
            let entry = store::AuditEntry {
                at: now - age,
                principal: "client:ci".into(),
                server: "fs".into(),
                tool: tool.into(),
                arguments_sha256: "ab".repeat(32),
                decision: store::CallDecision::Allowed,
                outcome: store::CallOutcome::Ok,
                latency: Duration::from_millis(3),
                error: None,
            };
            store.record_call(&entry).await.expect("recorded");
        }
        store.close().await;
    });
    let tools = |config: &Path| -> Vec<String> {
        audit(config, &[])
            .iter()
            .map(|row| row["tool"].as_str().expect("tool").to_owned())
            .collect()
    };
    assert_eq!(tools(&config.path).len(), 5);

    // A config the gateway would refuse prunes nothing.
    let bad = config.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[store]\npath = \"mcpgw.db\"\n[audit]\nmax_rows = -1\n",
    )
    .expect("write");
    let refused = mcpgw_in(&bad, &["audit", "prune"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        text(&refused.stderr).contains(
            "audit.max_rows: max_rows must be 0 (no cap) or between 1 and 1000000000, got -1"
        ),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(tools(&config.path).len(), 5);

    // One row is past 90 days, and two more past the newest two.
    let pruned = mcpgw_in(&config.path, &["audit", "prune"]);
    assert!(pruned.status.success(), "{}", text(&pruned.stderr));
    assert_eq!(
        text(&pruned.stdout).trim(),
        "removed 3 audit rows older than 90 days or beyond the newest 2"
    );
    assert_eq!(tools(&config.path), ["fs__latest", "fs__first"]);

    let again = mcpgw_in(&config.path, &["audit", "prune"]);
    assert_eq!(
        text(&again.stdout).trim(),
        "removed 0 audit rows older than 90 days or beyond the newest 2"
    );
    assert_eq!(tools(&config.path), ["fs__latest", "fs__first"]);

    // With retention off, nothing is touched.
    let off = config.dir.path().join("off.toml");
    std::fs::write(
        &off,
        "[store]\npath = \"mcpgw.db\"\n[audit]\nretention_days = 0\nmax_rows = 0\n",
    )
    .expect("write");
    let kept = mcpgw_in(&off, &["audit", "prune"]);
    assert!(kept.status.success(), "{}", text(&kept.stderr));
    assert!(
        text(&kept.stdout).contains("audit retention is off"),
        "{}",
        text(&kept.stdout)
    );
    assert_eq!(tools(&config.path), ["fs__latest", "fs__first"]);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
