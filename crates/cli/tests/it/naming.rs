//! Qualified names through the real binary: duplicates across servers, names over 64
//! characters, characters outside the allowed set; stable across restarts and additions.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::harness::*;

fn odd_names_server(name: &str) -> String {
    format!(
        "[[servers]]\nname = \"{name}\"\ntransport = {{ type = \"stdio\", command = {:?}, args = [{:?}] }}\n",
        venv_bin("python"),
        repo_root()
            .join("tests/fixtures/odd_names_server.py")
            .display()
            .to_string()
    )
}

/// `mcpgw tools --json` as a map from (server, upstream name) to qualified name.
fn names(config: &str) -> BTreeMap<(String, String), String> {
    let config = write_config(config);
    let output = std::process::Command::new(mcpgw())
        .args(["tools", "--json", "--config"])
        .arg(&config.path)
        .output()
        .expect("mcpgw tools runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).expect("json");
    rows.iter()
        .map(|r| {
            (
                (
                    r["server"].as_str().unwrap_or_default().to_owned(),
                    r["upstream_name"].as_str().unwrap_or_default().to_owned(),
                ),
                r["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn qualified_names_are_unique_bounded_and_stable() {
    let two = format!(
        "{}\n{}",
        everything_stdio_server("alpha"),
        odd_names_server("odd")
    );
    let first = names(&two);
    let restarted = names(&two);
    assert_eq!(first, restarted, "identical after a restart");

    let three = format!("{two}\n{}", everything_stdio_server("beta"));
    let grown = names(&three);
    for (key, name) in &first {
        assert_eq!(
            grown.get(key),
            Some(name),
            "unchanged after adding a server: {key:?}"
        );
    }

    // Same upstream tool name on two servers: two distinct names.
    assert_eq!(grown[&("alpha".into(), "echo".into())], "alpha__echo");
    assert_eq!(grown[&("beta".into(), "echo".into())], "beta__echo");
    assert_eq!(grown[&("odd".into(), "echo".into())], "odd__echo");

    let all: Vec<&String> = grown.values().collect();
    let unique: std::collections::BTreeSet<&&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "unique: {all:?}");
    for name in &all {
        assert!(name.len() <= 64, "{name} is longer than 64");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)),
            "{name} has characters outside [A-Za-z0-9_.-]"
        );
    }
    let long = &grown[&("odd".into(), "a".repeat(80))];
    assert_eq!(long.len(), 64, "{long}");
    let spaced = &grown[&("odd".into(), "send message/now!".into())];
    assert_eq!(spaced, "odd__send_message_now_");
    let clash = &grown[&("odd".into(), "send message now!".into())];
    assert_eq!(clash, "odd__send_message_now__2", "later duplicate gets _2");
}
