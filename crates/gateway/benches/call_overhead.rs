//! Latency that mcpgw adds to one `tools/call`, measured end to end against a real upstream.
//!
//! The upstream is `@modelcontextprotocol/server-everything` (its `echo` tool) and the client is
//! rmcp, both as real users run them; only the gateway is in-process, so that the bench needs no
//! built binary. Each call is timed from the client's point of view:
//!
//! - `http::direct`: client -> upstream over Streamable HTTP (the baseline);
//! - `http::via_gateway`: client -> mcpgw -> the same upstream, both legs Streamable HTTP, through
//!   the meta-tool `call_tool`; its median minus `http::direct`'s is what the gateway adds (but
//!   see below);
//! - `search_tools`: client -> mcpgw's `search_tools`, no upstream involved: the gateway's own cost
//!   of a round trip plus a catalog search;
//! - `stdio::direct` and `stdio::via_gateway`: the same pair with the upstream on stdio (the
//!   client still reaches mcpgw over Streamable HTTP).
//!
//! Reading the HTTP pair: server-everything's HTTP mode (node, express, an event store) takes
//! about 2 ms a call and appears to stay busy for about a millisecond after each answer. Calls
//! sent back to back by `http::direct` wait for that; through the gateway, the client -> mcpgw
//! leg overlaps it. So over HTTP the difference is a lower bound, noisy at the scale of the
//! upstream's own jitter; `search_tools` and the stdio pair show the gateway's cost more plainly.
//!
//! Everything listens on 127.0.0.1 only. Servers and sessions are set up once, before timing;
//! every path is checked to answer `Echo: x` before it is measured. Without the peers
//! (scripts/setup-test-env.sh, or `MCPGW_PEERS`) the bench says so and exits 0, because CI only
//! compiles benches.
//!
//! Run: `cargo bench -p mcpgw-gateway --bench call_overhead`

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use divan::Bencher;
use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, CallToolResult, JsonObject},
    service::RunningService,
    transport::StreamableHttpClientTransport,
};
use serde_json::json;
use tokio::{
    net::{TcpListener, TcpStream},
    process::{Child, Command},
};
use tokio_util::sync::CancellationToken;

fn main() -> anyhow::Result<()> {
    let script = peers().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !script.is_file() {
        eprintln!(
            "call_overhead: skipped, {} is missing (run scripts/setup-test-env.sh or set MCPGW_PEERS)",
            script.display()
        );
        return Ok(());
    }
    let fixture = RUNTIME.block_on(Fixture::start(&script))?;
    *fixture_slot() = Some(fixture);
    let _teardown = Teardown;
    divan::main();
    Ok(())
}

/// Ends the fixture however `main` ends, a panicking bench included: it lives in a `static`,
/// which is never dropped, so without this its server processes would outlive the bench.
struct Teardown;

impl Drop for Teardown {
    fn drop(&mut self) {
        let fixture = fixture_slot().take();
        if let Some(fixture) = fixture {
            RUNTIME.block_on(fixture.shutdown());
        }
    }
}

/// One call per sample, so that "slowest" is a real worst call rather than a batch average;
/// 200 of them give medians that repeat within the upstream's own jitter.
const SAMPLES: u32 = 200;

/// Untimed calls before each bench: node's JIT and the connection pools settle over the first
/// calls, and without this whichever bench runs first would pay for it.
const WARMUP_CALLS: u32 = 300;

const UPSTREAM: &str = "everything";

mod http {
    use super::*;

    /// (a) The baseline: no gateway.
    #[divan::bench(sample_count = SAMPLES, sample_size = 1)]
    fn direct(bencher: Bencher) {
        bench_call(bencher, |f| &f.http.direct, echo());
    }

    /// (b) The same call through mcpgw.
    #[divan::bench(sample_count = SAMPLES, sample_size = 1)]
    fn via_gateway(bencher: Bencher) {
        bench_call(bencher, |f| &f.http.via_gateway, call_tool_echo());
    }
}

mod stdio {
    use super::*;

    /// (e) The baseline over stdio.
    #[divan::bench(sample_count = SAMPLES, sample_size = 1)]
    fn direct(bencher: Bencher) {
        bench_call(bencher, |f| &f.stdio.direct, echo());
    }

    /// (d) The same call through mcpgw, whose upstream leg is stdio.
    #[divan::bench(sample_count = SAMPLES, sample_size = 1)]
    fn via_gateway(bencher: Bencher) {
        bench_call(bencher, |f| &f.stdio.via_gateway, call_tool_echo());
    }
}

/// (c) A gateway round trip that never reaches an upstream.
#[divan::bench(sample_count = SAMPLES, sample_size = 1)]
fn search_tools(bencher: Bencher) {
    bench_call(bencher, |f| &f.http.via_gateway, search_echo());
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
});

/// Set in `main` before divan runs and taken back by [`Teardown`], which needs ownership to end
/// sessions and kill children.
static FIXTURE: Mutex<Option<Fixture>> = Mutex::new(None);

fn fixture_slot() -> MutexGuard<'static, Option<Fixture>> {
    FIXTURE.lock().unwrap_or_else(PoisonError::into_inner)
}

type Client = RunningService<RoleClient, ()>;

/// Times one `tools/call` on the client that `pick` chooses. Only the call is timed: cloning the
/// request happens in divan's untimed input phase.
fn bench_call(bencher: Bencher, pick: fn(&Fixture) -> &Client, params: CallToolRequestParams) {
    let slot = fixture_slot();
    let client = pick(
        slot.as_ref()
            .expect("main starts the fixture before divan runs"),
    );
    for _ in 0..WARMUP_CALLS {
        RUNTIME
            .block_on(client.peer().call_tool(params.clone()))
            .expect("tools/call succeeds");
    }
    bencher
        .with_inputs(|| params.clone())
        .bench_values(|params| {
            RUNTIME
                .block_on(client.peer().call_tool(params))
                .expect("tools/call succeeds")
        });
}

fn echo() -> CallToolRequestParams {
    CallToolRequestParams::new("echo").with_arguments(object(json!({"message": "x"})))
}

fn call_tool_echo() -> CallToolRequestParams {
    CallToolRequestParams::new("call_tool").with_arguments(object(json!({
        "name": format!("{UPSTREAM}__echo"),
        "arguments": {"message": "x"},
    })))
}

fn search_echo() -> CallToolRequestParams {
    CallToolRequestParams::new("search_tools")
        .with_arguments(object(json!({"query": "echo a message"})))
}

fn object(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn peers() -> PathBuf {
    std::env::var_os("MCPGW_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.peers"))
}

struct Fixture {
    http: Pair,
    stdio: Pair,
    /// server-everything in `streamableHttp` mode, behind both clients of `http`.
    http_upstream: Child,
    /// The server behind `stdio.direct`; `stdio`'s gateway starts and owns a copy of its own.
    stdio_upstream: Child,
}

/// A client straight to an upstream and one through a gateway that fronts the same kind of
/// upstream over the same transport.
struct Pair {
    direct: Client,
    via_gateway: Client,
    gateway: InProcessGateway,
}

impl Fixture {
    async fn start(script: &Path) -> anyhow::Result<Fixture> {
        let script_arg = script.to_str().context("peers path is not UTF-8")?;

        let (http_upstream, port) = start_http_upstream(script).await?;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let gateway = InProcessGateway::start(&format!(
            // The upstream runs on loopback, which the network policy admits only when named.
            "[[servers]]\nname = {UPSTREAM:?}\nallow_private_network = true\ntransport = {{ type = \"http\", url = {url:?} }}\n"
        ))
        .await?;
        let http = Pair {
            direct: connect_http(&url).await?,
            via_gateway: connect_http(&gateway.url).await?,
            gateway,
        };

        let mut stdio_upstream = Command::new("node")
            .arg(script)
            .arg("stdio")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("spawn node (is node on PATH?)")?;
        let stdout = stdio_upstream.stdout.take().context("child stdout")?;
        let stdin = stdio_upstream.stdin.take().context("child stdin")?;
        let gateway = InProcessGateway::start(&format!(
            "[[servers]]\nname = {UPSTREAM:?}\ntransport = {{ type = \"stdio\", command = \"node\", args = [{script_arg:?}, \"stdio\"] }}\n"
        ))
        .await?;
        let stdio = Pair {
            // The same line framing as rmcp's `TokioChildProcess`, which mcpgw's stdio upstreams
            // use, minus its process-group wrapper: the pipes are all that a call touches.
            direct:
                ().serve((stdout, stdin))
                    .await
                    .context("initialize server-everything over stdio")?,
            via_gateway: connect_http(&gateway.url).await?,
            gateway,
        };

        let fixture = Fixture {
            http,
            stdio,
            http_upstream,
            stdio_upstream,
        };
        fixture.check().await?;
        Ok(fixture)
    }

    /// Every measured path must really echo: a bench of an error reply would look fast.
    async fn check(&self) -> anyhow::Result<()> {
        for (what, client, params) in [
            ("http direct", &self.http.direct, echo()),
            ("http via gateway", &self.http.via_gateway, call_tool_echo()),
            ("stdio direct", &self.stdio.direct, echo()),
            (
                "stdio via gateway",
                &self.stdio.via_gateway,
                call_tool_echo(),
            ),
        ] {
            let result = client.peer().call_tool(params).await.context(what)?;
            ensure!(
                result.is_error != Some(true) && texts(&result).contains("Echo: x"),
                "{what}: unexpected reply {result:?}"
            );
        }
        let result = self
            .http
            .via_gateway
            .peer()
            .call_tool(search_echo())
            .await
            .context("search_tools")?;
        ensure!(
            texts(&result).contains(&format!("{UPSTREAM}__echo")),
            "search_tools did not find the echo tool: {result:?}"
        );
        Ok(())
    }

    async fn shutdown(mut self) {
        for pair in [self.http, self.stdio] {
            let _ = pair.direct.cancel().await;
            let _ = pair.via_gateway.cancel().await;
            pair.gateway.shutdown().await;
        }
        // `kill` also reaps, so neither child outlives the bench.
        let _ = self.http_upstream.kill().await;
        let _ = self.stdio_upstream.kill().await;
    }
}

/// A gateway built from mcpgw.toml text, serving Streamable HTTP on a free loopback port.
struct InProcessGateway {
    gateway: Arc<gateway::Gateway>,
    stop: CancellationToken,
    url: String,
}

impl InProcessGateway {
    async fn start(toml: &str) -> anyhow::Result<InProcessGateway> {
        let config = config::parse_toml(toml, Path::new("bench.toml"))?;
        let gateway = gateway::Gateway::open(config).await;
        gateway.start(|_| {}).await;
        for status in gateway.upstreams().servers().iter().map(|s| s.status()) {
            if !matches!(status.state, upstream::ServerState::Ready) {
                bail!("the gateway could not reach its upstream: {status:?}");
            }
        }
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/mcp", listener.local_addr()?);
        let stop = CancellationToken::new();
        tokio::spawn(gateway::serve_http(gateway.clone(), listener, stop.clone()));
        Ok(InProcessGateway { gateway, stop, url })
    }

    async fn shutdown(self) {
        self.stop.cancel();
        // Ends the upstream sessions, and for a stdio upstream its process group.
        self.gateway.shutdown().await;
    }
}

/// Legacy `initialize` (rmcp's `serve`), which is also what the gateway ends up speaking to
/// server-everything: that server does not implement `server/discover`.
async fn connect_http(url: &str) -> anyhow::Result<Client> {
    ().serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .with_context(|| format!("initialize {url}"))
}

/// server-everything in `streamableHttp` mode on a free loopback port, once it accepts
/// connections.
async fn start_http_upstream(script: &Path) -> anyhow::Result<(Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut child = Command::new("node")
        .arg(script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("spawn node (is node on PATH?)")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("server-everything streamableHttp exited early with {status}");
        }
        if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok((child, port));
        }
        if Instant::now() > deadline {
            bail!("server-everything is not listening on 127.0.0.1:{port} after 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn texts(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}
