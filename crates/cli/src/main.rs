//! `mcpgw`: parses arguments, sets up logging, runs one command, maps errors to exit codes.
//!
//! Exit codes: 0 success, 1 a command failed (e.g. a server test), 2 bad usage or invalid
//! configuration. Logs go to stderr, always: on `serve --stdio` stdout carries only protocol.

mod approvals;
mod audit;
mod auth;
mod banner;
mod client_config;
mod clients;
mod command;
mod database;
mod eval;
mod pinning;
mod render;
mod servers;
mod source;

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

// jemalloc, because it gives memory back. glibc's malloc keeps what a catalog build or a burst
// of calls freed (per-thread arenas, fragmented heaps, no trimming while idle), so a gateway
// stayed at the RSS of its busiest moment. jemalloc's background thread returns pages unused
// for about `dirty_decay_ms` (see `JEMALLOC_CONF`), idle or not. mimalloc is as fast, but it
// purges only inside allocator calls of the thread that freed, so an idle gateway kept its
// peak too. Measured on 2 cores with `scripts/measure-memory.sh` (BM25; RSS 2 s after ready;
// load: 100 sessions x 100 `tools/call` to server-everything over stdio, RSS 30 s later; CPU
// of the gateway per call during that load):
//
//   allocator              1k tools   10k tools   idle -> after load   CPU per call
//   glibc                  69-74 MiB    176 MiB     64 -> 84 MiB          160 us
//   mimalloc               70-92 MiB    172 MiB     85 -> 90 MiB          121 us
//   jemalloc, 10 s decay      81 MiB    171 MiB     71 -> 50 MiB          121 us
//   jemalloc, 1 s decay    42-45 MiB     94 MiB     38 -> 50 MiB          118 us
//
// (With the default 10 s decay RSS gets as low, 42 and 93 MiB, some 20 s later.) Cost:
// jemalloc's C build adds about 40 s to a clean build on 2 cores (mimalloc's about 4 s).
// Build without the `jemalloc` feature for heap profilers that hook malloc (heaptrack).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` (the weak `malloc_conf` symbol jemalloc defines, which
/// this one overrides; `_RJEM_MALLOC_CONF` in the environment still wins). A background thread
/// purges on a timer, so memory goes back to the system while the gateway is idle rather than
/// at its next allocation; pages unused for about a second are purged (`muzzy_decay_ms:0`: for
/// good, `MADV_DONTNEED`, not `MADV_FREE`, which would still count in RSS until the kernel
/// needs the memory).
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)] // an exported symbol; its type is `const char *`, as jemalloc reads it
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

#[derive(Parser)]
#[command(
    name = "mcpgw",
    version,
    about = "An MCP gateway: one searchable front for many MCP servers"
)]
struct Cli {
    /// Configuration file (mcpgw.toml, or a Claude Desktop / Cursor / VS Code mcpServers JSON).
    /// Default: ./mcpgw.toml, then $XDG_CONFIG_HOME/mcpgw/mcpgw.toml.
    #[arg(long, global = true, env = "MCPGW_CONFIG")]
    config: Option<PathBuf>,
    /// Log filter (tracing syntax, e.g. "info" or "mcpgw=debug"); RUST_LOG also works.
    #[arg(long, global = true)]
    log: Option<String>,
    /// How log lines are written on stderr: text, or one JSON object per line (overrides
    /// `[gateway] log_format` for `serve`).
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormatArg>,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`: the values of `[gateway] log_format`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (Streamable HTTP by default, or stdio).
    Serve {
        /// Serve one client over stdin/stdout.
        #[arg(long, conflicts_with = "listen")]
        stdio: bool,
        /// Address for Streamable HTTP (overrides [gateway] listen).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Search the tools of all configured servers, as the model's `search_tools` does.
    ///
    /// When a gateway is running on this configuration (at its `[gateway] listen` address, with
    /// the admin token of its data directory, or a client key with admin rights in
    /// MCPGW_ADMIN_KEY), it is asked; otherwise every server is started here.
    Search {
        /// What the tool should do, in words ("create a github issue"); ranked with the
        /// configured `[retrieval] strategy`.
        query: String,
        /// How many tools to show, from 1 to 50.
        #[arg(long, default_value_t = 5)]
        top_k: usize,
        /// Only search these servers (repeatable).
        #[arg(long = "server")]
        servers: Vec<String>,
        /// Print the hits as a JSON array (name, server, description, score; with --explain
        /// also bm25 and vector, each {rank, score} or null).
        #[arg(long)]
        json: bool,
        /// Show each hit's rank and score in the BM25 list and in the vector list behind the
        /// fused (hybrid) score.
        #[arg(long)]
        explain: bool,
        /// Start the servers here even when a gateway is running on this configuration.
        #[arg(long)]
        offline: bool,
    },
    /// List every tool with its qualified name (and token cost), or see and approve tools held
    /// because their definitions changed.
    ///
    /// When a gateway is running on this configuration, it is asked (see `mcpgw search
    /// --help`); otherwise every server is started here.
    #[command(args_conflicts_with_subcommands = true)]
    Tools {
        #[command(subcommand)]
        command: Option<ToolsCommand>,
        /// Only this server's tools.
        #[arg(long)]
        server: Option<String>,
        /// Show the cl100k_base token cost of each tool and the totals.
        #[arg(long)]
        cost: bool,
        /// Only the tools this profile (`[[profiles]]`) may see, and what its clients are shown.
        #[arg(long)]
        profile: Option<String>,
        /// Print the tools as a JSON array (name, server, upstream_name, title, description,
        /// annotations, tokens, pin, pinned_since), as `GET /admin/v1/tools` shows them.
        #[arg(long)]
        json: bool,
        /// Start the servers here even when a gateway is running on this configuration.
        #[arg(long)]
        offline: bool,
    },
    /// Inspect upstream servers, and add, remove, enable or disable them.
    Servers {
        #[command(subcommand)]
        command: ServersCommand,
    },
    /// Check the configuration file: every problem, and what would fail on this machine.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Sign in to servers configured for OAuth, and see or delete the stored sign-ins.
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
    /// Manage the clients allowed on the HTTP listener and their API keys.
    Clients {
        #[command(subcommand)]
        command: ClientsCommand,
    },
    /// Tool calls waiting for a human: list them, approve or reject one.
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// Measure search quality (nDCG, recall, MRR) and speed on labelled tool-retrieval sets.
    // Boxed: its many measuring flags would make every `Command` as large (clippy).
    Eval(Box<eval::Args>),
    /// Show the audit log of tool calls, newest first (never their arguments), or prune it.
    #[command(args_conflicts_with_subcommands = true)]
    Audit(audit::Args),
    /// Connect an MCP client to this gateway: print its configuration entry, or merge it into
    /// the client's own file with --install.
    ClientConfig(client_config::Args),
    /// The database's schema (SQLite or PostgreSQL): where it stands, or apply what is pending.
    Migrate {
        #[command(subcommand)]
        command: Option<database::MigrateCommand>,
    },
    /// Move mcpgw's state between databases (`mcpgw store copy sqlite://... postgres://...`).
    Store {
        #[command(subcommand)]
        command: database::StoreCommand,
    },
    /// Convert a Claude Desktop / Cursor / VS Code mcpServers JSON file into mcpgw.toml entries.
    Import {
        file: PathBuf,
        /// Write to this file instead of stdout (refuses to overwrite).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ToolsCommand {
    /// Show the tools held because their definitions changed since first trusted, with the
    /// change (from the database: no server is contacted).
    Held {
        #[arg(long)]
        json: bool,
    },
    /// Trust a held tool's changed definition; a running gateway serves it within a second.
    Approve {
        /// Qualified tool name, as `tools held` shows it.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        name: Option<String>,
        /// Approve every held tool.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
enum ServersCommand {
    /// Connect to one server and report what it negotiated, its tools and the latency.
    Test {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Show every configured server's state: from the gateway running on this configuration
    /// when there is one (see `mcpgw search --help`), else by connecting to each here.
    List {
        /// Print the servers as a JSON array, as `GET /admin/v1/servers` shows them.
        #[arg(long)]
        json: bool,
        /// Connect to every server here even when a gateway is running on this configuration.
        #[arg(long)]
        offline: bool,
    },
    /// Add a server to the configuration: a stdio command after `--`, or --url.
    ///
    /// When a gateway runs on this configuration and answers (see `mcpgw search --help`), the
    /// server is added through its admin API, which writes the file and connects the server
    /// at once; otherwise the file is changed here. Either way the file keeps its comments, and
    /// a change that would not load is refused with every problem named (the file is not
    /// touched). Credentials come from variables (--env-from, --header-env, --bearer-env),
    /// never from the command line.
    ///
    /// Example: mcpgw servers add time -- uvx mcp-server-time --local-timezone=UTC
    Add(Box<servers::AddArgs>),
    /// Remove a server from the configuration (through a running gateway when one answers,
    /// which stops it; else in the file).
    Remove {
        name: String,
        /// Change the file here even when a gateway is running on this configuration.
        #[arg(long)]
        offline: bool,
    },
    /// Enable a disabled server (through a running gateway when one answers, which connects
    /// it; else in the file).
    Enable {
        name: String,
        /// Change the file here even when a gateway is running on this configuration.
        #[arg(long)]
        offline: bool,
    },
    /// Disable a server: it stays configured (`enabled = false`) but is not connected and its
    /// tools leave the catalog (through a running gateway when one answers; else in the file).
    Disable {
        name: String,
        /// Change the file here even when a gateway is running on this configuration.
        #[arg(long)]
        offline: bool,
    },
}

#[derive(Subcommand)]
enum AuthCommand {
    /// Sign in to a server in the browser; the tokens are stored encrypted for the gateway.
    Login {
        server: String,
        /// Only print the sign-in URL; do not try to open a browser.
        #[arg(long)]
        no_browser: bool,
        /// Port on 127.0.0.1 for the browser's return (default: the configured redirect_uri's,
        /// else any free port).
        #[arg(long)]
        port: Option<u16>,
    },
    /// Show the sign-in of every server configured for OAuth (never a token).
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Delete a server's stored tokens.
    Logout {
        server: String,
        /// Also forget the client mcpgw registered with the authorization server; the next
        /// sign-in registers a new one.
        #[arg(long)]
        forget_client: bool,
        /// Whose tokens: `local` (the person running mcpgw), `client:NAME` or `user:SUBJECT`,
        /// as `mcpgw auth status` lists them.
        #[arg(long, default_value = "local")]
        principal: String,
    },
}

#[derive(Subcommand)]
enum ApprovalsCommand {
    /// Show the calls waiting for approval (with --all, recent decisions too).
    List {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Approve a waiting call; it runs at once, with --args replacing its arguments.
    Approve {
        id: String,
        /// Replacement arguments: a JSON object.
        #[arg(long)]
        args: Option<String>,
    },
    /// Reject a waiting call; the tool is not run.
    Reject {
        id: String,
        /// Told to the caller.
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand)]
enum ClientsCommand {
    /// Create a client and print its API key, once (only its hash is stored).
    Add { name: String },
    /// Show every client, when it was added and last used (never a key).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Delete a client; its key stops working at once.
    Remove { name: String },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Report every problem of the configuration, each as FILE:LINE:COLUMN, in line order.
    ///
    /// Errors: unknown keys (with "did you mean"), values of the wrong type or out of range,
    /// secrets written inline. Warnings, about this machine: stdio commands not found on PATH,
    /// URLs the network policy will refuse (with the line that allows them), secrets whose
    /// environment variable is unset.
    ///
    /// Exit status: 0 with no errors (warnings alone do not fail the check), 2 when the file has
    /// errors, 1 when --connect could not reach a server.
    Check {
        /// Also connect to every enabled server, as `mcpgw servers test` does, and report each:
        /// its tools and protocol, or why it cannot be reached.
        #[arg(long)]
        connect: bool,
    },
}

/// A failure with the exit code it maps to.
pub(crate) struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl Failure {
    pub(crate) fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Self {
            code: 1,
            error: error.into(),
        }
    }
}

/// Sets candle's thread variables where the operator has not: no spinning element-wise
/// workers, and a thread count it need not read from `/proc/cpuinfo` on every matrix
/// multiplication (see `embed::local`).
#[allow(unsafe_code)]
fn quiet_candle_pool() {
    for (name, value) in embed::local::candle_env_defaults() {
        if std::env::var_os(name).is_none() {
            // SAFETY: the first statement of `main`, before any thread is spawned, so nothing
            // can read or write the environment concurrently.
            unsafe { std::env::set_var(name, value) };
        }
    }
}

fn main() -> ExitCode {
    quiet_candle_pool();
    let cli = Cli::parse();
    // rmcp logs whole handshake payloads at info; keep them for `--log rmcp=debug`. A one-shot
    // command reports a server's failure itself, in its own words: libraries (rmcp's HTTP worker
    // with its raw `ERROR worker quit with fatal: ...`, hyper, reqwest, sqlx) say nothing unless
    // `--log` or RUST_LOG asks them to.
    let default_level = match cli.command {
        Command::Serve { .. } => "info,rmcp=warn".to_owned(),
        _ => one_shot_filter(),
    };
    let log_format = log_format(&cli);
    init_logging(cli.log.as_deref(), &default_level, log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(cli, log_format));
    // Children are already stopped by each command; don't wait for stray blocking tasks.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            match log_format {
                // Every line of a JSON log is JSON, the last one too.
                config::LogFormat::Json => {
                    tracing::error!(error = %format!("{:#}", failure.error), "mcpgw failed")
                }
                config::LogFormat::Text => eprintln!("error: {:#}", failure.error),
            }
            ExitCode::from(failure.code)
        }
    }
}

/// `--log-format`, else for `serve` the configuration's `[gateway] log_format`, else text.
/// The configuration is read here, before logging starts, only for that key: a file that does
/// not load is reported by the command itself, in the format this falls back to.
fn log_format(cli: &Cli) -> config::LogFormat {
    match cli.log_format {
        Some(LogFormatArg::Text) => config::LogFormat::Text,
        Some(LogFormatArg::Json) => config::LogFormat::Json,
        None if matches!(cli.command, Command::Serve { .. }) => {
            config::discover(cli.config.as_deref())
                .ok()
                .and_then(|path| config::load(&path).ok())
                .map(|config| config.gateway.log_format)
                .unwrap_or_default()
        }
        None => config::LogFormat::Text,
    }
}

async fn run(cli: Cli, log_format: config::LogFormat) -> Result<(), Failure> {
    let config_path = cli.config.as_deref();
    match cli.command {
        Command::Serve { stdio, listen } => {
            let options = command::ServeOptions {
                stdio,
                listen,
                json_log: matches!(log_format, config::LogFormat::Json),
            };
            command::serve(config_path, options).await
        }
        command @ (Command::Search { .. } | Command::Tools { .. } | Command::Servers { .. }) => {
            inspect(config_path, command).await
        }
        Command::Config {
            command: ConfigCommand::Check { connect },
        } => command::config_check(config_path, connect).await,
        Command::Import { file, output } => command::import(&file, output.as_deref()),
        Command::Auth {
            command:
                AuthCommand::Login {
                    server,
                    no_browser,
                    port,
                },
        } => auth::login(config_path, &server, no_browser, port).await,
        Command::Auth {
            command: AuthCommand::Status { json },
        } => auth::status(config_path, json).await,
        Command::Auth {
            command:
                AuthCommand::Logout {
                    server,
                    forget_client,
                    principal,
                },
        } => auth::logout(config_path, &server, forget_client, &principal).await,
        Command::Clients {
            command: ClientsCommand::Add { name },
        } => clients::add(config_path, &name).await,
        Command::Clients {
            command: ClientsCommand::List { json },
        } => clients::list(config_path, json).await,
        Command::Clients {
            command: ClientsCommand::Remove { name },
        } => clients::remove(config_path, &name).await,
        Command::Approvals {
            command: ApprovalsCommand::List { all, json },
        } => approvals::list(config_path, all, json).await,
        Command::Approvals {
            command: ApprovalsCommand::Approve { id, args },
        } => approvals::approve(config_path, &id, args.as_deref()).await,
        Command::Approvals {
            command: ApprovalsCommand::Reject { id, reason },
        } => approvals::reject(config_path, &id, reason).await,
        Command::Eval(args) => eval::run(*args).await,
        Command::ClientConfig(args) => client_config::run(config_path, args).await,
        Command::Audit(args) => audit::run(config_path, args).await,
        Command::Migrate { command } => database::migrate(config_path, command).await,
        Command::Store { command } => database::store(command).await,
    }
}

/// `search`, `tools` and `servers`: what the servers offer, from a running gateway or here.
async fn inspect(config_path: Option<&std::path::Path>, command: Command) -> Result<(), Failure> {
    match command {
        Command::Search {
            query,
            top_k,
            servers,
            json,
            explain,
            offline,
        } => {
            let output = command::Output {
                json,
                explain,
                offline,
            };
            command::search(config_path, &query, top_k, servers, output).await
        }
        Command::Tools {
            command: None,
            server,
            cost,
            profile,
            json,
            offline,
        } => {
            let output = command::Output {
                json,
                offline,
                ..Default::default()
            };
            let (server, profile) = (server.as_deref(), profile.as_deref());
            command::tools(config_path, server, cost, profile, output).await
        }
        Command::Tools {
            command: Some(ToolsCommand::Held { json }),
            ..
        } => pinning::held(config_path, json).await,
        Command::Tools {
            command: Some(ToolsCommand::Approve { name, all }),
            ..
        } => pinning::approve(config_path, name.as_deref(), all).await,
        Command::Servers {
            command: ServersCommand::Test { name, json },
        } => command::servers_test(config_path, &name, json).await,
        Command::Servers {
            command: ServersCommand::List { json, offline },
        } => command::servers_list(config_path, json, offline).await,
        Command::Servers {
            command: ServersCommand::Add(args),
        } => servers::add(config_path, *args).await,
        Command::Servers {
            command: ServersCommand::Remove { name, offline },
        } => servers::change(config_path, gateway::ServerChange::Remove(name), offline).await,
        Command::Servers {
            command: ServersCommand::Enable { name, offline },
        } => {
            let change = gateway::ServerChange::Enable(name, true);
            servers::change(config_path, change, offline).await
        }
        Command::Servers {
            command: ServersCommand::Disable { name, offline },
        } => {
            let change = gateway::ServerChange::Enable(name, false);
            servers::change(config_path, change, offline).await
        }
        _ => Err(Failure::usage(anyhow::anyhow!("not an inspection command"))),
    }
}

/// The workspace's own crates (and the binary's targets, `mcpgw::...`): the only log targets a
/// one-shot command shows by default.
const OWN_TARGETS: [&str; 10] = [
    "mcpgw",
    "gateway",
    "upstream",
    "config",
    "catalog",
    "store",
    "embed",
    "eval",
    "netguard",
    "retrieval",
];

/// Warnings from mcpgw's own crates, nothing from libraries.
fn one_shot_filter() -> String {
    let mut filter = "off".to_owned();
    for target in OWN_TARGETS {
        filter.push_str(&format!(",{target}=warn"));
    }
    filter
}

/// rmcp's OAuth module, which logs the authorisation code (and more) at `debug`.
const RMCP_AUTH_TARGET: &str = "rmcp::transport::auth";
/// rmcp's Streamable HTTP server, which logs each session's id at `info` (a new one) and
/// `debug` (a restored one): with replicas that id is a sealed, resumable session.
const RMCP_SESSION_TARGET: &str = "rmcp::transport::streamable_http_server";

/// Library modules that log secrets above some level, and the most each may log unless the
/// filter names it (and so asks for it).
const CAPPED_TARGETS: &[(&str, tracing_subscriber::filter::LevelFilter)] = &[
    (
        RMCP_AUTH_TARGET,
        tracing_subscriber::filter::LevelFilter::INFO,
    ),
    (
        RMCP_SESSION_TARGET,
        tracing_subscriber::filter::LevelFilter::WARN,
    ),
];

fn init_logging(filter: Option<&str>, default_level: &str, format: config::LogFormat) {
    use tracing_subscriber::{
        EnvFilter, Layer, filter::LevelFilter, filter::Targets, layer::SubscriberExt,
        util::SubscriberInitExt,
    };
    let text = match filter {
        Some(f) => f.to_owned(),
        None => std::env::var(EnvFilter::DEFAULT_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| default_level.to_owned()),
    };
    let env_filter = EnvFilter::try_new(&text).unwrap_or_else(|_| EnvFilter::new(default_level));
    // `--log debug` must not put sign-in secrets or session ids into a log: rmcp's OAuth
    // module is capped at info and its HTTP server at warn, never raised, unless the operator
    // names them (and so asks for it).
    let cap = CAPPED_TARGETS
        .iter()
        .filter(|(target, _)| !names_target(&text, target))
        .fold(
            Targets::new().with_default(LevelFilter::TRACE),
            |cap, (target, level)| cap.with_target(*target, *level),
        );
    let json = matches!(format, config::LogFormat::Json);
    let text = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            // Colour only on a terminal: log files and pipes get plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_target(false)
            .with_filter(cap.clone())
    });
    // `{"timestamp", "level", "fields": {"message", ...}, "target", "span": {...}}`: the
    // current span's fields, not the whole list, which repeats itself line after line.
    let json = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_current_span(true)
            .with_span_list(false)
            .with_filter(cap)
    });
    tracing_subscriber::registry()
        .with(env_filter)
        .with(text)
        .with(json)
        .init();
}

/// Whether a filter directive names `target` or a module inside it.
fn names_target(filter: &str, target: &str) -> bool {
    filter.split(',').any(|directive| {
        let name = directive
            .split(['=', '['])
            .next()
            .unwrap_or_default()
            .trim();
        name == target || name.starts_with(&format!("{target}::"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_commands_hear_no_library_by_default() {
        let filter = one_shot_filter();
        for library in [
            "rmcp",
            "rmcp::transport::worker",
            "hyper",
            "reqwest",
            "sqlx",
        ] {
            assert!(!names_target(&filter, library), "{library} in {filter}");
        }
        assert!(filter.starts_with("off,"), "{filter}");
        assert!(filter.contains(",upstream=warn"), "{filter}");
        assert!(tracing_subscriber::EnvFilter::try_new(&filter).is_ok());
    }

    #[test]
    fn only_a_directive_for_the_auth_module_lifts_its_cap() {
        for filter in [
            "debug",
            "trace,rmcp=trace",
            "rmcp::transport=debug",
            "rmcp::transport::authx=debug",
        ] {
            assert!(!names_target(filter, RMCP_AUTH_TARGET), "{filter}");
        }
        for filter in [
            "info,rmcp::transport::auth=debug",
            "rmcp::transport::auth::x[span]=trace",
        ] {
            assert!(names_target(filter, RMCP_AUTH_TARGET), "{filter}");
        }
    }
}
