//! The admin API's records (`/admin/v1/audit`, `/approvals`, `/clients`, `/connections`) on a
//! real keyed `mcpgw serve` after real calls of the Python SDK client: the audit log filtered
//! and paged, the client keys with their profiles (never a key), and who may ask.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

fn get(port: u16, path: &str, key: &str) -> (u16, Value, String) {
    let response = reqwest::blocking::Client::new()
        .get(format!("http://127.0.0.1:{port}{path}"))
        .bearer_auth(key)
        .send()
        .expect("gateway reachable");
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

fn entries(answer: &(u16, Value, String)) -> Vec<Value> {
    assert_eq!(answer.0, 200, "{}", answer.2);
    answer.1["entries"].as_array().cloned().unwrap_or_default()
}

#[test]
fn the_audit_log_clients_and_sign_ins_read_filtered_and_paged_for_admins_only() {
    let profiles = "[[profiles]]\nname = \"ops\"\nclients = [\"boss\"]\nadmin = true\n\n\
                    [[profiles]]\nname = \"viewer\"\nclients = [\"bob\"]\n";
    let (config, port) = listening_config(
        "exposure = \"passthrough\"",
        &format!("{}\n{profiles}", time_stdio_server("time")),
    );
    let boss = add_client(&config.path, "boss");
    let bob = add_client(&config.path, "bob");
    let gateway = Gateway::start_configured(config, |_| {});
    let call = |key: &str, steps: Value| {
        py_client(
            &[
                "--url",
                &gateway.url(),
                "--header",
                &format!("Authorization: Bearer {key}"),
            ],
            "legacy",
            steps,
        )
    };
    let now = json!({"op": "call_tool", "name": "time__get_current_time",
                     "arguments": {"timezone": "Europe/Paris"}});
    let bad_zone = json!({"op": "call_tool", "name": "time__get_current_time",
                          "arguments": {"timezone": "Mars/Olympus"}});
    call(&bob, json!([now, bad_zone, now]));
    call(&boss, json!([now]));
    wait_until("four audit rows", Duration::from_secs(10), || {
        entries(&get(port, "/admin/v1/audit", &boss)).len() == 4
    });

    let all = entries(&get(port, "/admin/v1/audit", &boss));
    assert_eq!(all[0]["principal"], "client:boss", "newest first: {all:?}");
    assert!(all.iter().all(|e| e["tool"] == "time__get_current_time"));
    assert!(
        all.iter().all(|e| e.get("arguments").is_none()),
        "only the arguments' hash"
    );
    let bobs = entries(&get(port, "/admin/v1/audit?principal=client:bob", &boss));
    assert_eq!(bobs.len(), 3);
    let failed = entries(&get(
        port,
        "/admin/v1/audit?outcome=tool_error&server=time",
        &boss,
    ));
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["principal"], "client:bob");
    let future = entries(&get(port, "/admin/v1/audit?since=2099-01-01", &boss));
    assert!(future.is_empty());

    // Two pages of two, the second the last.
    let first = get(port, "/admin/v1/audit?limit=2", &boss);
    let next = first.1["next"].as_str().expect("a next page").to_owned();
    let second = get(
        port,
        &format!("/admin/v1/audit?limit=2&after={next}"),
        &boss,
    );
    assert_eq!(second.1["next"], Value::Null, "{}", second.2);
    let paged: Vec<Value> = entries(&first)
        .into_iter()
        .chain(entries(&second))
        .collect();
    assert_eq!(paged, all);

    // Clients: names and profiles, never a key.
    let (status, clients, text) = get(port, "/admin/v1/clients", &boss);
    assert_eq!(status, 200, "{text}");
    assert!(
        !text.contains(&boss) && !text.contains(&bob),
        "no key: {text}"
    );
    let by_name = |name: &str| {
        clients["clients"]
            .as_array()
            .and_then(|rows| rows.iter().find(|row| row["name"] == name).cloned())
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    assert_eq!(by_name("boss")["profile"], "ops");
    assert_eq!(by_name("boss")["admin"], true);
    assert_eq!(by_name("bob")["profile"], "viewer");
    assert_eq!(by_name("bob")["admin"], false);
    assert!(by_name("bob")["last_used_at"].is_u64(), "{text}");

    let (status, approvals, text) = get(port, "/admin/v1/approvals?status=all", &boss);
    assert_eq!(
        (status, approvals["approvals"].clone()),
        (200, json!([])),
        "{text}"
    );
    let (status, signed_in, text) = get(port, "/admin/v1/connections", &boss);
    assert_eq!(
        (status, signed_in["connections"].clone()),
        (200, json!([])),
        "{text}"
    );

    // Who may ask, and what a bad parameter gets.
    for path in [
        "/admin/v1/audit",
        "/admin/v1/clients",
        "/admin/v1/connections",
        "/admin/v1/approvals",
    ] {
        let (status, _, text) = get(port, path, &bob);
        assert_eq!(status, 403, "{path}: {text}");
        assert!(
            text.contains("client:bob is not an administrator"),
            "{text}"
        );
    }
    let (status, _, text) = get(port, "/admin/v1/audit?decision=maybe", &boss);
    assert_eq!(status, 400);
    assert!(text.contains("decision must be one of allowed"), "{text}");
    let (status, _, text) = get(port, "/admin/v1/approvals?status=done", &boss);
    assert_eq!(status, 400, "{text}");
}
