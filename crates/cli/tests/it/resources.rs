//! Resources, resource templates, prompts and completions of several upstreams through the
//! gateway, with the real Python MCP client in both eras: lists namespaced and paginated,
//! reads, prompts and completions routed back to their server, a dead server failing only its
//! own, a profile hiding another server's, and `prefix = "when-needed"` in front of one server
//! showing everything under its upstream name.
//!
//! Upstreams: server-everything (stdio; 7 documents, 2 templates, 4 prompts) and
//! `tests/fixtures/resources_server.py` (121 resources, one of them at a URI that is not plain,
//! a template, 2 prompts), so the aggregated resource list needs two pages of 100.

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::harness::*;

const ERAS: [&str; 2] = ["legacy", "modern"];

/// TOML for the fixture server with many resources, under `name`.
fn notes_server(name: &str) -> String {
    format!(
        "[[servers]]\nname = \"{name}\"\ntransport = {{ type = \"stdio\", command = {:?}, args = [{:?}] }}\n",
        venv_bin("python"),
        repo_root()
            .join("tests/fixtures/resources_server.py")
            .display()
            .to_string()
    )
}

/// A server that never starts.
const DEAD_SERVER: &str = "[[servers]]\nname = \"dead\"\ntimeout_s = 5\ntransport = { type = \"stdio\", command = \"/nonexistent/mcp-server\" }\n";

fn strings(items: &Value, key: &str) -> Vec<String> {
    items
        .as_array()
        .unwrap_or_else(|| panic!("a list: {items}"))
        .iter()
        .filter_map(|item| item[key].as_str().map(str::to_owned))
        .collect()
}

fn uris(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .filter_map(|uri| uri.as_str().map(str::to_owned))
        .collect()
}

fn first_text(read: &Value) -> String {
    read["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("text contents: {read}"))
        .to_owned()
}

fn error_code(step: &Value) -> i64 {
    step["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an MCP error: {step}"))
}

#[test]
fn resources_and_prompts_of_two_servers_are_namespaced_paginated_and_routed_back() {
    let config = write_config(&format!(
        "{}{}{}{DEAD_SERVER}",
        everything_stdio_server("everything"),
        notes_server("notes"),
        time_stdio_server("time"),
    ));
    let architecture = "mcpgw://everything/demo://resource/static/document/architecture.md";
    let odd = "mcpgw://notes/~http%3A%2F%2F%5B%3A%3A1%5D%2Fodd%20path";
    // Over HTTP: the listener answers once every upstream has settled, so the 2026-07-28
    // client's `server/discover` (10 s timeout) does not race the upstreams' start.
    let gateway = Gateway::start(config);
    for era in ERAS {
        let report = py_client(
            &["--url", &gateway.url()],
            era,
            json!([
                {"op": "list_pages", "list": "resources"},
                {"op": "list_resources"},
                {"op": "list_resource_templates"},
                {"op": "list_prompts"},
                {"op": "read_resource", "uri": architecture},
                {"op": "read_resource", "uri": odd},
                // A client's RFC 6570 expansion of `mcpgw://notes/file:///notes/{name}`.
                {"op": "read_resource", "uri": "mcpgw://notes/file:///notes/hello%20world"},
                {"op": "get_prompt", "name": "everything__resource-prompt",
                 "arguments": {"resourceType": "Text", "resourceId": "3"}},
                {"op": "get_prompt", "name": "notes__simple-prompt"},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "everything__completable-prompt"},
                 "argument": {"name": "department", "value": "E"}},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "everything__completable-prompt"},
                 "argument": {"name": "name", "value": ""}, "context": {"department": "Sales"}},
                {"op": "complete", "ref": {"type": "ref/resource", "uri": "mcpgw://everything/demo://resource/dynamic/text/{resourceId}"},
                 "argument": {"name": "resourceId", "value": "7"}},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "notes__summarize"},
                 "argument": {"name": "topic", "value": "b"}},
                {"op": "read_resource", "uri": "mcpgw://nope/file:///a"},
                {"op": "read_resource", "uri": "file:///notes/note-001.txt"},
                {"op": "read_resource", "uri": "mcpgw://dead/file:///a"},
                {"op": "get_prompt", "name": "simple-prompt"},
                {"op": "call_tool", "name": "search_tools",
                 "arguments": {"query": "architecture document", "include": ["resources", "prompts"]}},
                {"op": "call_tool", "name": "search_tools",
                 "arguments": {"query": "summarize notes topic", "include": ["prompts"], "servers": ["notes"]}},
            ]),
        );
        let steps = &report["steps"];

        // 7 + 121 resources, a page of 100 at a time.
        let pages = steps[0].as_array().expect("pages");
        assert_eq!(pages.len(), 2, "{era}: {}", steps[0]);
        assert_eq!(pages[0]["count"], 100, "{era}: {}", steps[0]);
        assert!(pages[0]["nextCursor"].is_string(), "{era}: {}", steps[0]);
        assert_eq!(pages[1]["count"], 28, "{era}: {}", steps[0]);
        assert_eq!(pages[1]["nextCursor"], Value::Null, "{era}: {}", steps[0]);

        let uris = strings(&steps[1], "uri");
        assert_eq!(uris.len(), 128, "{era}: {uris:?}");
        assert!(
            uris.iter()
                .all(|u| u.starts_with("mcpgw://everything/") || u.starts_with("mcpgw://notes/")),
            "{era}: {uris:?}"
        );
        assert!(uris.contains(&architecture.to_owned()), "{era}: {uris:?}");
        assert!(uris.contains(&odd.to_owned()), "{era}: {uris:?}");
        assert!(
            uris.contains(&"mcpgw://notes/file:///notes/note-119.txt".to_owned()),
            "{era}: {uris:?}"
        );
        assert_eq!(
            strings(&steps[2], "uriTemplate"),
            [
                "mcpgw://everything/demo://resource/dynamic/text/{resourceId}",
                "mcpgw://everything/demo://resource/dynamic/blob/{resourceId}",
                "mcpgw://notes/file:///notes/{name}",
            ],
            "{era}"
        );
        assert_eq!(
            strings(&steps[3], "name"),
            [
                "everything__simple-prompt",
                "everything__args-prompt",
                "everything__completable-prompt",
                "everything__resource-prompt",
                "notes__simple-prompt",
                "notes__summarize",
            ],
            "{era}"
        );

        assert_eq!(steps[4]["contents"][0]["uri"], architecture, "{era}");
        assert!(
            first_text(&steps[4]).contains("Architecture"),
            "{era}: {}",
            steps[4]
        );
        assert_eq!(steps[5]["contents"][0]["uri"], odd, "{era}");
        assert_eq!(first_text(&steps[5]), "odd", "{era}");
        assert_eq!(first_text(&steps[6]), "note named hello world", "{era}");
        assert_eq!(
            steps[6]["contents"][0]["uri"], "mcpgw://notes/file:///notes/hello%20world",
            "{era}"
        );

        let messages = &steps[7]["messages"];
        assert_eq!(
            messages[1]["content"]["resource"]["uri"],
            "mcpgw://everything/demo://resource/dynamic/text/3",
            "{era}: {}",
            steps[7]
        );
        assert_eq!(
            steps[8]["messages"][0]["content"]["text"], "fixture simple prompt",
            "{era}: {}",
            steps[8]
        );
        assert!(
            steps[8]["_meta"]["io.modelcontextprotocol/serverInfo"].is_null(),
            "{era}: the upstream's stamp reached the client: {}",
            steps[8]
        );

        assert_eq!(
            steps[9]["values"],
            json!(["Engineering"]),
            "{era}: {}",
            steps[9]
        );
        assert_eq!(
            steps[10]["values"],
            json!(["David", "Eve", "Frank"]),
            "{era}: {}",
            steps[10]
        );
        assert_eq!(steps[11]["values"], json!(["7"]), "{era}: {}", steps[11]);
        assert_eq!(steps[12]["values"], json!(["beta"]), "{era}: {}", steps[12]);

        // Nothing of ours: not found (2026-07-28 retired -32002 for -32602).
        let not_found = if era == "legacy" { -32002 } else { -32602 };
        assert_eq!(error_code(&steps[13]), not_found, "{era}: {}", steps[13]);
        assert_eq!(error_code(&steps[14]), not_found, "{era}: {}", steps[14]);
        // A dead server fails its own reads only, in words.
        assert_eq!(error_code(&steps[15]), -32603, "{era}: {}", steps[15]);
        let dead = steps[15]["error"]["message"].as_str().unwrap_or_default();
        assert!(dead.contains("dead"), "{era}: {dead}");
        assert_eq!(error_code(&steps[16]), -32602, "{era}: {}", steps[16]);

        let found = &steps[17]["structuredContent"];
        assert_eq!(found["resources"][0]["uri"], architecture, "{era}: {found}");
        assert!(found["prompts"].is_array(), "{era}: {found}");
        assert!(
            found["results"].is_array(),
            "{era}: tools still searched: {found}"
        );
        let found = &steps[18]["structuredContent"];
        assert_eq!(
            found["prompts"][0]["name"], "notes__summarize",
            "{era}: {found}"
        );
        assert_eq!(
            found["results"],
            json!([]),
            "{era}: tools not asked for: {found}"
        );
        assert!(found.get("resources").is_none(), "{era}: {found}");
    }
}

fn add_client(config: &std::path::Path, name: &str) -> String {
    let added = Command::new(mcpgw())
        .args(["clients", "add", name, "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs");
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    String::from_utf8_lossy(&added.stdout).trim().to_owned()
}

#[test]
fn a_profile_hides_another_servers_resources_and_prompts() {
    let config = write_config(&format!(
        "{}{}[[profiles]]\nname = \"notes-only\"\nservers = [\"notes\"]\nclients = [\"alice\"]\n",
        everything_stdio_server("everything"),
        notes_server("notes"),
    ));
    let alice = add_client(&config.path, "alice");
    let gateway = Gateway::start(config);
    for era in ERAS {
        let report = py_client(
            &[
                "--url",
                &gateway.url(),
                "--header",
                &format!("Authorization: Bearer {alice}"),
            ],
            era,
            json!([
                {"op": "list_resources"},
                {"op": "list_resource_templates"},
                {"op": "list_prompts"},
                {"op": "read_resource", "uri": "mcpgw://everything/demo://resource/static/document/architecture.md"},
                {"op": "get_prompt", "name": "everything__simple-prompt"},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "everything__completable-prompt"},
                 "argument": {"name": "department", "value": "E"}},
                {"op": "read_resource", "uri": "mcpgw://notes/file:///notes/note-005.txt"},
                {"op": "call_tool", "name": "search_tools",
                 "arguments": {"query": "architecture document note", "include": ["resources"]}},
            ]),
        );
        let steps = &report["steps"];
        let uris = strings(&steps[0], "uri");
        assert_eq!(uris.len(), 121, "{era}: {uris:?}");
        assert!(
            uris.iter().all(|u| u.starts_with("mcpgw://notes/")),
            "{era}: {uris:?}"
        );
        assert_eq!(
            strings(&steps[1], "uriTemplate"),
            ["mcpgw://notes/file:///notes/{name}"],
            "{era}"
        );
        assert_eq!(
            strings(&steps[2], "name"),
            ["notes__simple-prompt", "notes__summarize"],
            "{era}"
        );
        // Hidden is indistinguishable from absent.
        let not_found = if era == "legacy" { -32002 } else { -32602 };
        assert_eq!(error_code(&steps[3]), not_found, "{era}: {}", steps[3]);
        assert_eq!(error_code(&steps[4]), -32602, "{era}: {}", steps[4]);
        assert_eq!(error_code(&steps[5]), -32602, "{era}: {}", steps[5]);
        assert_eq!(first_text(&steps[6]), "note 5", "{era}");
        let found = &steps[7]["structuredContent"]["resources"];
        assert!(
            strings(found, "server").iter().all(|s| s == "notes"),
            "{era}: {found}"
        );
    }
}

#[test]
fn when_needed_in_front_of_one_server_shows_its_own_names() {
    let config = write_config(&format!(
        "[gateway]\nprefix = \"when-needed\"\nexposure = \"passthrough\"\n{}",
        everything_stdio_server("everything"),
    ));
    let document = "demo://resource/static/document/architecture.md";
    let gateway = Gateway::start(config);
    for era in ERAS {
        let report = py_client(
            &["--url", &gateway.url()],
            era,
            json!([
                {"op": "list_tools"},
                {"op": "call_tool", "name": "echo", "arguments": {"message": "bare"}},
                {"op": "call_tool", "name": "everything__echo", "arguments": {"message": "prefixed"}},
                {"op": "list_resources"},
                {"op": "list_resource_templates"},
                {"op": "list_prompts"},
                {"op": "read_resource", "uri": document},
                {"op": "get_prompt", "name": "args-prompt", "arguments": {"city": "Oslo"}},
                {"op": "complete", "ref": {"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"},
                 "argument": {"name": "resourceId", "value": "12"}},
                {"op": "get_prompt", "name": "resource-prompt", "arguments": {"resourceType": "Text", "resourceId": "2"}},
            ]),
        );
        let steps = &report["steps"];
        let tools = strings(&steps[0], "name");
        assert!(tools.contains(&"echo".to_owned()), "{era}: {tools:?}");
        assert!(tools.iter().all(|t| !t.contains("__")), "{era}: {tools:?}");
        assert_eq!(steps[1]["isError"], false, "{era}: {}", steps[1]);
        assert!(
            result_text(&steps[1]).contains("bare"),
            "{era}: {}",
            steps[1]
        );
        assert_eq!(steps[2]["isError"], false, "{era}: {}", steps[2]);
        assert!(
            result_text(&steps[2]).contains("prefixed"),
            "{era}: {}",
            steps[2]
        );

        let uris = strings(&steps[3], "uri");
        assert_eq!(uris.len(), 7, "{era}: {uris:?}");
        assert!(uris.contains(&document.to_owned()), "{era}: {uris:?}");
        assert_eq!(
            strings(&steps[4], "uriTemplate"),
            [
                "demo://resource/dynamic/text/{resourceId}",
                "demo://resource/dynamic/blob/{resourceId}",
            ],
            "{era}"
        );
        assert_eq!(
            strings(&steps[5], "name"),
            [
                "simple-prompt",
                "args-prompt",
                "completable-prompt",
                "resource-prompt"
            ],
            "{era}"
        );
        assert_eq!(steps[6]["contents"][0]["uri"], document, "{era}");
        assert_eq!(
            steps[7]["messages"][0]["content"]["text"], "What's weather in Oslo?",
            "{era}: {}",
            steps[7]
        );
        assert_eq!(steps[8]["values"], json!(["12"]), "{era}: {}", steps[8]);
        assert_eq!(
            steps[9]["messages"][1]["content"]["resource"]["uri"], "demo://resource/dynamic/text/2",
            "{era}: {}",
            steps[9]
        );
    }
}

/// A client subscribed to a resource hears of its changes under the URI it knows, whichever
/// era the client and the upstream speak: server-everything is subscribed with
/// `resources/subscribe` (and sends an update at once when `toggle-subscriber-updates` starts
/// them, then every 5 s), the Python fixture through a `subscriptions/listen` stream naming the
/// resource (its `touch` tool sends one).
#[test]
fn a_subscribed_client_hears_of_resource_updates_from_either_era() {
    let config = write_config(&format!(
        "{PASSTHROUGH}{}{}",
        everything_stdio_server("everything"),
        notes_server("notes"),
    ));
    let architecture = "mcpgw://everything/demo://resource/static/document/architecture.md";
    let note = "mcpgw://notes/file:///notes/note-007.txt";
    let updated = "notifications/resources/updated";
    let gateway = Gateway::start(config);

    let report = py_client(
        &["--url", &gateway.url()],
        "legacy",
        json!([
            {"op": "subscribe", "uri": architecture},
            {"op": "call_tool", "name": "everything__toggle-subscriber-updates", "arguments": {}},
            {"op": "wait_notification", "method": updated, "uri": architecture},
            {"op": "unsubscribe", "uri": architecture},
            {"op": "subscribe", "uri": note},
            {"op": "call_tool", "name": "notes__touch", "arguments": {"uri": "file:///notes/note-007.txt"}},
            {"op": "wait_notification", "method": updated, "uri": note},
            {"op": "subscribe", "uri": "mcpgw://nope/file:///a"},
            {"op": "unsubscribe", "uri": "mcpgw://nope/file:///a"},
        ]),
    );
    let steps = &report["steps"];
    assert_eq!(steps[0], json!({}), "{report}");
    assert_eq!(steps[2]["uri"], architecture, "{report}");
    assert_eq!(steps[6]["uri"], note, "{report}");
    let heard = uris(&report["updated"]);
    assert_eq!(
        heard.first().map(String::as_str),
        Some(architecture),
        "{report}"
    );
    assert!(heard.iter().any(|uri| uri == note), "{report}");
    assert!(
        heard.iter().all(|uri| uri == architecture || uri == note),
        "{report}"
    );
    assert_eq!(error_code(&steps[7]), -32002, "unknown resource: {report}");
    assert_eq!(steps[8], json!({}), "unsubscribing from nothing: {report}");

    // 2026-07-28: the resources are named in `subscriptions/listen`; server-everything's
    // updates keep coming every 5 s once started (above).
    let report = py_client(
        &["--url", &gateway.url()],
        "modern",
        json!([
            {"op": "listen", "resources": [note, architecture]},
            {"op": "call_tool", "name": "notes__touch", "arguments": {"uri": "file:///notes/note-007.txt"}},
            {"op": "wait_notification", "method": updated, "uri": note},
            {"op": "wait_notification", "method": updated, "uri": architecture, "timeout": 12},
        ]),
    );
    let steps = &report["steps"];
    assert_eq!(
        steps[0]["honored"]["resourceSubscriptions"],
        json!([note, architecture]),
        "{report}"
    );
    assert_eq!(steps[2]["uri"], note, "{report}");
    assert_eq!(steps[3]["uri"], architecture, "{report}");
    let heard = uris(&report["updated"]);
    assert_eq!(
        heard.iter().filter(|uri| *uri == note).count(),
        1,
        "one touch, one update: {report}"
    );
}
