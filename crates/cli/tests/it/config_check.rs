//! A new user's typical mistakes, as `mcpgw config check` and `servers test` report them: a
//! typo'd key, a stdio command that is not on PATH, an http server at the wrong port or path,
//! a served Claude Desktop file that the network policy refuses; and the example
//! configuration, pinned to the versions the tests install.

use std::process::{Command, Output, Stdio};

use crate::harness::*;

/// `mcpgw ARGS` with a PATH that holds `node` and `npx` but no MCP server, and no RUST_LOG:
/// what a user's default output looks like.
fn run(args: &[&str]) -> Output {
    Command::new(mcpgw())
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs")
}

/// The lines of `output`'s stderr and stdout, the file's directory replaced by `$DIR`.
fn lines(output: &[u8], dir: &std::path::Path) -> Vec<String> {
    text(output)
        .replace(&dir.display().to_string(), "$DIR")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// No library's log line (rmcp's `ERROR worker quit with fatal: ...`) in a one-shot command's
/// output at the default level.
#[track_caller]
fn assert_no_library_logs(output: &Output) {
    let err = text(&output.stderr);
    for noise in ["ERROR", " WARN ", "rmcp", "worker quit", "hyper", "reqwest"] {
        assert!(!err.contains(noise), "{noise:?} in:\n{err}");
    }
}

#[test]
fn config_check_lists_every_mistake_in_line_order_with_what_was_meant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mcpgw.toml");
    let closed = free_port();
    std::fs::write(
        &path,
        format!(
            r#"[gateway]
exposre = "search"

[[servers]]
name = "time"
transport = {{ type = "stdio", comand = "mcp-server-time-not-installed" }}

[[servers]]
name = "wrongport"
transport = {{ type = "http", url = "http://127.0.0.1:{closed}/mcp" }}
auth = {{ type = "bearer", env = "MCPGW_TEST_UNSET_TOKEN" }}

[retrieval]
stratgy = "hybrid"
"#
        ),
    )
    .expect("write config");
    let output = run(&["config", "check", "--config", &path.display().to_string()]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert_eq!(
        lines(&output.stderr, dir.path()),
        [
            "$DIR/mcpgw.toml:2:1: error: gateway.exposre: unknown key (hint: did you mean `exposure`?)".to_owned(),
            "$DIR/mcpgw.toml:6:31: error: servers[0].transport.comand: unknown key (hint: did you mean `command`?)".to_owned(),
            "$DIR/mcpgw.toml:6:31: warning: servers[0].transport.command: server 'time': command `mcp-server-time-not-installed` is not on PATH here, so the server cannot start (hint: install it, or give its full path; mcpgw looks it up on the PATH it starts with (`command -v mcp-server-time-not-installed` in the same shell shows whether it is found))".to_owned(),
            format!("$DIR/mcpgw.toml:10:30: warning: servers[1].transport.url: refused http://127.0.0.1:{closed}: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'wrongport' (hint: the line to write: add `[network]` with `allow = [\"127.0.0.1\"]`, or add `allow_private_network = true` to server 'wrongport')"),
            "$DIR/mcpgw.toml:11:27: warning: servers[1].auth.env: environment variable MCPGW_TEST_UNSET_TOKEN is not set (hint: export MCPGW_TEST_UNSET_TOKEN before starting mcpgw)".to_owned(),
            "$DIR/mcpgw.toml:14:1: error: retrieval.stratgy: unknown key (hint: did you mean `strategy`?)".to_owned(),
            "error: $DIR/mcpgw.toml: 3 errors, 3 warnings".to_owned(),
        ]
    );
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));

    // With the typos fixed, what is left are warnings: the check passes and says so, in the
    // file's own words.
    let fixed = std::fs::read_to_string(&path)
        .expect("read")
        .replace("exposre = \"search\"", "exposure = \"passthrough\"")
        .replace("comand", "command")
        .replace("stratgy = \"hybrid\"", "strategy = \"bm25\"");
    std::fs::write(&path, fixed).expect("write");
    let output = run(&["config", "check", "--config", &path.display().to_string()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(lines(&output.stderr, dir.path()).len(), 3);
    assert_eq!(
        lines(&output.stdout, dir.path()),
        [
            "$DIR/mcpgw.toml: ok, 0 errors, 3 warnings (2 servers, 2 enabled; listen 127.0.0.1:8931; exposure passthrough; retrieval bm25)"
        ]
    );
}

#[test]
fn config_check_connect_names_each_servers_cause_in_words() {
    let (_everything_http, http_port) = everything_network("streamableHttp");
    let closed = free_port();
    let config = write_config(&format!(
        "{}\n[[servers]]\nname = \"wrongport\"\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{closed}/mcp\" }}\n\n\
         [[servers]]\nname = \"wrongpath\"\ntransport = {{ type = \"http\", url = \"http://127.0.0.1:{http_port}/api\" }}\n",
        everything_stdio_server("everything")
    ));
    let path = config.path.display().to_string();
    let output = run(&["config", "check", "--connect", "--config", &path]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let out = text(&output.stdout);
    let connects: Vec<&str> = out.lines().filter(|l| l.starts_with("connect ")).collect();
    assert_eq!(connects.len(), 3, "{out}");
    assert!(
        connects[0].starts_with("connect everything: ok, ")
            && connects[0].contains(" tools, ")
            && connects[0].contains("(legacy era)"),
        "{out}"
    );
    assert_eq!(
        connects[1],
        format!(
            "connect wrongport: failed: could not connect to 'wrongport': connection refused at 127.0.0.1:{closed} (nothing listens there: is the server running, on this port?)"
        )
    );
    assert_eq!(
        connects[2],
        "connect wrongpath: failed: could not connect to 'wrongpath': HTTP 404 Not Found at /api — MCP endpoints usually end in /mcp (legacy SSE ones in /sse)"
    );
    assert!(
        text(&output.stderr).contains("error: 2 of 3 servers could not be reached"),
        "{}",
        text(&output.stderr)
    );
    assert_no_library_logs(&output);

    // `servers test` gives the same words.
    let output = run(&["servers", "test", "wrongport", "--config", &path]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stderr).trim(),
        format!(
            "error: server 'wrongport' failed: could not connect to 'wrongport': connection refused at 127.0.0.1:{closed} (nothing listens there: is the server running, on this port?)"
        )
    );
    assert_no_library_logs(&output);
}

#[test]
fn a_served_claude_desktop_file_is_told_where_its_allow_line_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("claude_desktop_config.json");
    let closed = free_port();
    std::fs::write(
        &json,
        format!(r#"{{"mcpServers": {{"local": {{"url": "http://127.0.0.1:{closed}/mcp"}}}}}}"#),
    )
    .expect("write json");
    let json_arg = json.display().to_string();
    let remedy = "to allow it, add \"127.0.0.1\" to [network] allow, or set allow_private_network = true on server 'local' in an mcpgw.toml ($DIR/claude_desktop_config.json has no such settings): `mcpgw import $DIR/claude_desktop_config.json --output $DIR/mcpgw.toml` writes one from it; add the line there and serve that";

    let check = run(&["config", "check", "--config", &json_arg]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
    assert_eq!(
        lines(&check.stderr, dir.path()),
        [format!(
            "$DIR/claude_desktop_config.json: warning: mcpServers.local.url: refused http://127.0.0.1:{closed}: 127.0.0.1 is not a public address (loopback); {remedy}"
        )]
    );

    let test = run(&["servers", "test", "local", "--config", &json_arg]);
    assert_eq!(test.status.code(), Some(1));
    let err = lines(&test.stderr, dir.path()).join("\n");
    assert!(err.contains(remedy), "{err}");
    assert!(!err.contains("in mcpgw.toml"), "{err}");

    // The way out it names works: the imported file takes the line and the refusal is gone.
    let toml = dir.path().join("mcpgw.toml");
    let import = run(&["import", &json_arg, "--output", &toml.display().to_string()]);
    assert!(import.status.success(), "{}", text(&import.stderr));
    let mut text_toml = std::fs::read_to_string(&toml).expect("imported");
    text_toml.push_str("\n[network]\nallow = [\"127.0.0.1\"]\n");
    std::fs::write(&toml, text_toml).expect("write");
    let check = run(&["config", "check", "--config", &toml.display().to_string()]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
    assert!(check.stderr.is_empty(), "{}", text(&check.stderr));
}

#[test]
fn serve_logs_the_era_as_the_protocol_names_it() {
    // The level `serve` logs at by default.
    let gateway = Gateway::start_with_log(
        write_config(&everything_stdio_server("everything")),
        "info,rmcp=warn",
    );
    wait_until(
        "everything ready",
        std::time::Duration::from_secs(60),
        || gateway.log_text().contains("server ready"),
    );
    let log = gateway.log_text();
    let ready = log
        .lines()
        .find(|line| line.contains("server ready"))
        .expect("ready line");
    assert!(
        ready.contains("era=legacy") || ready.contains("era=\"legacy\""),
        "{ready}"
    );
    assert!(!log.contains("Some("), "{log}");
}

/// The versions scripts/setup-test-env.sh installs, as `name@version` and `name==version`.
fn pinned_versions() -> Vec<String> {
    let script = std::fs::read_to_string(repo_root().join("scripts/setup-test-env.sh"))
        .expect("setup script");
    script
        .lines()
        .map(str::trim)
        .filter_map(|line| line.strip_prefix('"')?.strip_suffix('"'))
        .filter(|spec| spec.contains('@') || spec.contains("=="))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_example_and_readme_pin_their_servers_to_the_versions_the_tests_install() {
    let pinned = pinned_versions();
    assert!(
        pinned.contains(&"mcp-server-time==2026.10.19".to_owned()),
        "{pinned:?}"
    );
    for file in ["examples/mcpgw.toml", "README.md"] {
        let text = std::fs::read_to_string(repo_root().join(file)).expect(file);
        let mut packages = 0;
        for word in text.split(['"', '\'', ' ', '`', '(', ')', '[', ']', ',']) {
            if word.starts_with("@modelcontextprotocol/server-") {
                packages += 1;
                assert!(
                    pinned.iter().any(|spec| spec == word),
                    "{file}: `{word}` is not one of the versions setup-test-env.sh installs: {pinned:?}"
                );
            }
            if word.starts_with("mcp-server-time==") {
                assert!(pinned.iter().any(|spec| spec == word), "{file}: {word}");
            }
        }
        assert!(packages > 0, "{file} names no server package");
    }

    // And the example passes its own check where the README runs it: no error, no warning.
    let example = repo_root().join("examples/mcpgw.toml");
    let path = format!(
        "{}:{}",
        peers().join("venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new(mcpgw())
        .args(["config", "check", "--config"])
        .arg(&example)
        .env("PATH", path)
        .output()
        .expect("mcpgw runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains(
            ": ok (3 servers, 3 enabled; listen 127.0.0.1:8931; exposure search; retrieval hybrid)"
        ),
        "{}",
        text(&output.stdout)
    );
}
