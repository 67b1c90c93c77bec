//! One function per command; each loads the configuration, does its job and cleans up.

use std::{net::SocketAddr, path::Path, sync::Arc};

use anyhow::{Context, anyhow};
use gateway::{
    Gateway,
    overview::{self, ServerRow},
};
use tokio_util::sync::CancellationToken;

use crate::{Failure, banner, render, source::Source};

pub(crate) fn load_config(explicit: Option<&Path>) -> Result<config::Config, Failure> {
    let path = config::discover(explicit).map_err(Failure::usage)?;
    config::load(&path).map_err(Failure::usage)
}

/// mcpgw's database as the configuration at `config` names it; `keeps` says what the command
/// wanted from it, for the error when it cannot be opened.
pub(crate) async fn open_database(
    config: &config::Config,
    keeps: &str,
) -> Result<store::Store, Failure> {
    gateway::open_database(&config.store)
        .await
        .with_context(|| format!("the database that keeps {keeps} cannot be opened"))
        .map_err(Failure::from)
}

/// Builds the gateway and connects every server, with a progress bar on stderr.
pub(crate) async fn started_gateway(config: config::Config) -> Arc<Gateway> {
    start_gateway(Gateway::open(config).await).await
}

async fn start_gateway(gateway: Arc<Gateway>) -> Arc<Gateway> {
    let total = gateway.upstreams().servers().len() as u64;
    let bar = render::progress(total, "connecting to servers");
    gateway
        .start(|server| {
            bar.set_message(format!(
                "{} {}",
                server.name(),
                render::state_word(&server.status())
            ));
            bar.inc(1);
        })
        .await;
    bar.finish_and_clear();
    gateway
}

/// What `mcpgw serve` was asked for on its command line.
pub(crate) struct ServeOptions {
    /// Serve one client over stdin/stdout.
    pub(crate) stdio: bool,
    /// `--listen`, overriding `[gateway] listen`.
    pub(crate) listen: Option<SocketAddr>,
    /// The log is JSON: the banner, text for a person, is left out (the log says the same).
    pub(crate) json_log: bool,
}

pub(crate) async fn serve(
    config_path: Option<&Path>,
    options: ServeOptions,
) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let addr = options.listen.unwrap_or(config.gateway.listen);
    tracing::info!(config = %config.source.display(), "starting mcpgw");
    let telemetry = start_telemetry(&config)?;
    // Bind before connecting upstreams so a busy port fails fast, before children start.
    let listener = if options.stdio {
        None
    } else {
        Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?,
        )
    };
    let gateway = Gateway::open(config).await;
    if let Some(telemetry) = telemetry {
        gateway.trace_with(telemetry);
    }
    // Decided before the upstreams connect, so a listener that must not start says so at once.
    let access = match &listener {
        Some(listener) => Some(
            gateway::ClientAccess::decide(&gateway, listener.local_addr()?)
                .await
                .map_err(Failure::usage)?,
        ),
        None => None,
    };
    let banner = !options.stdio && !options.json_log;
    if let (Some(listener), Some(access), true) = (&listener, &access, banner) {
        eprint!(
            "{}",
            banner::listening(
                listener.local_addr()?,
                gateway.config().gateway.listen,
                &gateway.config().source,
                &server_names(&gateway),
                access.requires_keys(),
                access.admin_token().map(|token| token.reveal()),
            )
        );
    }
    start_serving(&gateway, options.stdio, banner).await;
    let shutdown = CancellationToken::new();
    let now = CancellationToken::new();
    tokio::spawn(signal_shutdown(shutdown.clone(), now.clone()));
    // SIGHUP and the file watch reload the configuration (`Gateway::reload`).
    gateway.watch_config_file();
    #[cfg(unix)]
    tokio::spawn(reload_on_sighup(Arc::downgrade(&gateway)));
    let served = match (listener, access) {
        (Some(listener), Some(access)) => {
            gateway::serve_http_with(
                gateway.clone(),
                listener,
                access,
                shutdown.clone(),
                now.clone(),
            )
            .await
        }
        _ => gateway::serve_stdio(gateway.clone(), shutdown.clone()).await,
    };
    shutdown.cancel();
    gateway.shutdown().await;
    tracing::info!("stopped");
    served.map_err(Failure::from)
}

/// The trace exporter, when `[telemetry]` or the standard `OTEL_EXPORTER_OTLP_*` variables
/// name a collector (see `gateway::Destination::resolve`); a variable holding no usable URL is
/// a usage error, as a bad key in the file is.
fn start_telemetry(config: &config::Config) -> Result<Option<gateway::Telemetry>, Failure> {
    let destination =
        gateway::Destination::resolve(&config.telemetry, |var| std::env::var(var).ok())
            .map_err(Failure::usage)?;
    let Some(destination) = destination else {
        return Ok(None);
    };
    let telemetry = gateway::Telemetry::start(&destination).map_err(Failure::usage)?;
    tracing::info!(
        url = %destination.traces_url,
        service_name = %destination.service_name,
        "exporting traces over OTLP/HTTP"
    );
    Ok(Some(telemetry))
}

fn server_names(gateway: &Gateway) -> Vec<String> {
    gateway
        .upstreams()
        .servers()
        .iter()
        .map(|s| s.name().to_string())
        .collect()
}

/// Connects the servers. The HTTP listener answers at once; each server joins the catalog when
/// it is ready, so one that hangs at start-up delays nobody but itself. A stdio client is
/// answered once every server has settled, as before: many list the tools once, right after
/// the handshake, and never look again however the list changes. `banner`: print the banner's
/// closing line once every server has settled (else it is logged, when not under `--stdio`,
/// where stderr is the client's log and the log lines say the same).
async fn start_serving(gateway: &Arc<Gateway>, stdio: bool, banner: bool) {
    let settling = (!stdio).then(|| banner::Settling::new(server_names(gateway).len()));
    let settled = move |server: &upstream::Server| {
        let status = server.status();
        match &status.state {
            upstream::ServerState::Failed { reason } => {
                tracing::warn!(server = %status.name, %reason, "server not available")
            }
            _ => tracing::info!(
                server = %status.name,
                tools = status.tool_count.unwrap_or(0),
                era = %status.era.map(|era| era.to_string()).unwrap_or_default(),
                "server ready"
            ),
        }
        // After the server's own log line, so the summary closes the start-up.
        match settling.as_ref().and_then(|s| s.settled(&status)) {
            Some(summary) if banner => eprintln!("{summary}"),
            Some(summary) => tracing::info!("{summary}"),
            None => {}
        }
    };
    if stdio {
        gateway.start(settled).await;
    } else {
        gateway.start_serving(settled);
    }
}

/// The first SIGTERM or Ctrl-C fires `drain` (the HTTP listener drains its calls in flight),
/// a second one `now` (stop at once).
async fn signal_shutdown(drain: CancellationToken, now: CancellationToken) {
    for token in [drain, now] {
        next_signal().await;
        tracing::info!("shutting down");
        token.cancel();
    }
}

/// Reloads the configuration on each SIGHUP, for as long as the gateway runs. How it went is
/// logged and kept for `/healthz`.
#[cfg(unix)]
async fn reload_on_sighup(gateway: std::sync::Weak<Gateway>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(hangup) => hangup,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP; the configuration file is still watched");
            return;
        }
    };
    while hangup.recv().await.is_some() {
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        tracing::info!("SIGHUP: reloading the configuration");
        let _ = gateway.reload().await;
    }
}

async fn next_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

pub(crate) async fn search(
    config_path: Option<&Path>,
    query: &str,
    top_k: usize,
    servers: Vec<String>,
    output: Output,
) -> Result<(), Failure> {
    if !(1..=overview::MAX_TOP_K).contains(&top_k) {
        return Err(Failure::usage(anyhow!(
            "--top-k must be from 1 to {}",
            overview::MAX_TOP_K
        )));
    }
    let config = load_config(config_path)?;
    for name in &servers {
        known_server(&config, name)?;
    }
    let query = overview::SearchQuery {
        query: query.to_owned(),
        top_k,
        strategy: None,
        servers,
    };
    let (source, server_rows) = Source::open(config, output.offline).await;
    let found = source.search(&query).await;
    source.close().await;
    let found = found?;
    if output.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&render::search_json(
                &found.hits,
                found.scoring.into(),
                output.explain
            ))?
        );
    } else if found.hits.is_empty() {
        println!(
            "no tools matched \"{}\" ({} tools searched)",
            found.query, found.catalog_tools
        );
    } else {
        println!("{}", render::search_table(&found.hits, output.explain));
        println!(
            "{} of {} tools, {} search, {:.2} ms",
            found.hits.len(),
            found.catalog_tools,
            found.strategy,
            found.elapsed_ms
        );
        println!(
            "{}",
            render::score_legend(found.scoring.into(), output.explain)
        );
    }
    if let Some(reason) = &found.degraded {
        eprintln!("note: {reason}");
    }
    report_failed_servers(&server_rows);
    Ok(())
}

/// How a reading command prints and where it asks: `--json`, `--explain`, `--offline`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Output {
    pub json: bool,
    pub explain: bool,
    pub offline: bool,
}

/// A usage error unless `name` is a configured server.
fn known_server(config: &config::Config, name: &str) -> Result<(), Failure> {
    match config.server(name) {
        Some(_) => Ok(()),
        None => Err(Failure::usage(anyhow!(
            "no server named '{name}' in the configuration"
        ))),
    }
}

pub(crate) async fn tools(
    config_path: Option<&Path>,
    server: Option<&str>,
    cost: bool,
    profile: Option<&str>,
    output: Output,
) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    if let Some(name) = server {
        known_server(&config, name)?;
    }
    if let Some(name) = profile
        && config.policy.profile(name).is_none()
    {
        let known: Vec<&str> = config
            .policy
            .profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        return Err(Failure::usage(anyhow!(
            "no profile named '{name}' in the configuration (profiles: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    }
    let query = overview::ToolsQuery {
        server: server.map(str::to_owned),
        profile: profile.map(str::to_owned),
    };
    let (source, server_rows) = Source::open(config, output.offline).await;
    let view = source.tools(&query).await;
    source.close().await;
    let view = view?;
    if output.json {
        println!("{}", serde_json::to_string_pretty(&view.tools)?);
    } else {
        println!("{}", render::tools_table(&view.tools, cost));
        if cost {
            println!("{}", render::tools_cost(&view));
        }
    }
    report_failed_servers(&server_rows);
    Ok(())
}

pub(crate) async fn servers_test(
    config_path: Option<&Path>,
    name: &str,
    json: bool,
) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let Some(server) = config.server(name).cloned() else {
        let known: Vec<String> = config.servers.iter().map(|s| s.name.to_string()).collect();
        return Err(Failure::usage(anyhow!(
            "no server named '{name}'; configured: {}",
            known.join(", ")
        )));
    };
    let tested = test_server(&config, server).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&tested.report())?);
    }
    match &tested.result {
        Ok(connected) => {
            if !json {
                println!(
                    "{}",
                    render::server_test(name, &connected.status, &connected.tools, tested.elapsed)
                );
            }
            Ok(())
        }
        Err(error) => Err(Failure::from(anyhow!("server '{name}' failed: {error}"))),
    }
}

/// [`gateway::test_server`] with the database opened for it when the server is configured for
/// OAuth (its tokens), and closed after; a plain test leaves the database untouched.
async fn test_server(config: &config::Config, server: config::ServerConfig) -> gateway::ServerTest {
    let store = if matches!(server.auth, config::Auth::OAuth(_)) {
        gateway::open_store(&config.store).await
    } else {
        None
    };
    let tested = gateway::test_server(config, server, store.clone()).await;
    if let Some(store) = store {
        store.close().await;
    }
    tested
}

pub(crate) async fn servers_list(
    config_path: Option<&Path>,
    json: bool,
    offline: bool,
) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let (source, rows) = Source::open(config, offline).await;
    source.close().await;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{}", render::servers_table(&rows));
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|row| row.is_down())
        .map(|row| row.name.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        let enabled = rows.iter().filter(|row| row.state != "disabled").count();
        Err(Failure::from(anyhow!(
            "{} of {enabled} servers failed: {}",
            failed.len(),
            failed.join(", ")
        )))
    }
}

/// Every problem of the file (exit 2 if any is an error), warnings about this machine, and
/// with `connect` a connection test of every enabled server (exit 1 if one fails).
pub(crate) async fn config_check(config_path: Option<&Path>, connect: bool) -> Result<(), Failure> {
    let path = config::discover(config_path).map_err(Failure::usage)?;
    let report = config::check(&path, &config::ThisMachine).map_err(Failure::usage)?;
    let file = path.display();
    for config::Finding { severity, problem } in &report.findings {
        let place = match problem.location {
            Some(at) => format!("{file}:{}:{}", at.line, at.column),
            None => file.to_string(),
        };
        let hint = problem
            .hint
            .as_ref()
            .map(|hint| format!(" (hint: {hint})"))
            .unwrap_or_default();
        eprintln!(
            "{place}: {severity}: {}: {}{hint}",
            problem.path, problem.message
        );
    }
    let (errors, warnings) = (report.errors(), report.warnings());
    let counts = format!(
        "{errors} error{}, {warnings} warning{}",
        plural(errors),
        plural(warnings)
    );
    let mut failed = 0;
    if connect && let Some(config) = &report.config {
        failed = connect_all(config).await;
    }
    if errors > 0 {
        return Err(Failure::usage(anyhow!("{file}: {counts}")));
    }
    let Some(config) = &report.config else {
        return Err(Failure::usage(anyhow!("{file}: not readable")));
    };
    let enabled = config.enabled_servers().count();
    println!(
        "{file}: ok{} ({} servers, {enabled} enabled; listen {}; exposure {}; retrieval {})",
        if warnings > 0 {
            format!(", {counts}")
        } else {
            String::new()
        },
        config.servers.len(),
        config.gateway.listen,
        config.gateway.exposure,
        config.retrieval.strategy,
    );
    if failed > 0 {
        return Err(Failure::from(anyhow!(
            "{failed} of {enabled} server{} could not be reached",
            plural(enabled)
        )));
    }
    Ok(())
}

/// `config check --connect`: tests every enabled server at once, prints a line for each in
/// file order, and returns how many failed.
async fn connect_all(config: &config::Config) -> usize {
    let servers: Vec<config::ServerConfig> = config.enabled_servers().cloned().collect();
    let tests: Vec<_> = servers
        .iter()
        .map(|server| {
            let (config, server) = (config.clone(), server.clone());
            tokio::spawn(async move { test_server(&config, server).await })
        })
        .collect();
    let mut failed = 0;
    for (server, test) in servers.iter().zip(tests) {
        let Ok(tested) = test.await else {
            failed += 1;
            println!("connect {}: failed: the test itself stopped", server.name);
            continue;
        };
        match &tested.result {
            Ok(gateway::probe::Connected { status, tools }) => {
                println!(
                    "connect {}: ok, {} tool{}, {} {} ({} era), {} ms",
                    server.name,
                    tools.len(),
                    plural(tools.len()),
                    status.server_name.as_deref().unwrap_or("(unnamed server)"),
                    status.server_version.as_deref().unwrap_or(""),
                    status.era.map(|era| era.to_string()).unwrap_or_default(),
                    tested.elapsed.as_millis()
                );
            }
            Err(error) => {
                failed += 1;
                println!("connect {}: failed: {error}", server.name);
            }
        }
    }
    failed
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

pub(crate) fn import(file: &Path, output: Option<&Path>) -> Result<(), Failure> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read {}", file.display()))
        .map_err(Failure::usage)?;
    let imported = config::import_mcp_servers_json(&text).map_err(Failure::usage)?;
    for warning in &imported.warnings {
        eprintln!("warning: {warning}");
    }
    match output {
        Some(path) => {
            if path.exists() {
                return Err(Failure::usage(anyhow!(
                    "{} exists; not overwriting it",
                    path.display()
                )));
            }
            std::fs::write(path, &imported.toml)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{}", imported.toml),
    }
    Ok(())
}

fn report_failed_servers(servers: &[ServerRow]) {
    for server in servers.iter().filter(|server| server.state == "failed") {
        eprintln!(
            "warning: server '{}' is unavailable: {}",
            server.name,
            server.reason.as_deref().unwrap_or_default()
        );
    }
}
