//! `mcpgw`: parses arguments, sets up logging, runs one command, maps errors to exit codes.
//!
//! Exit codes: 0 success, 1 a command failed (e.g. a server test), 2 bad usage or invalid
//! configuration. Logs go to stderr, always: on `serve --stdio` stdout carries only protocol.

mod command;
mod eval;
mod render;

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

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
    #[command(subcommand)]
    command: Command,
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
    /// Search the tools of all configured servers.
    Search {
        query: String,
        #[arg(long, default_value_t = 5)]
        top_k: usize,
        /// Only search these servers (repeatable).
        #[arg(long = "server")]
        servers: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// List every tool with its qualified name (and token cost).
    Tools {
        #[arg(long)]
        server: Option<String>,
        /// Show the cl100k_base token cost of each tool and the totals.
        #[arg(long)]
        cost: bool,
        #[arg(long)]
        json: bool,
    },
    /// Inspect upstream servers.
    Servers {
        #[command(subcommand)]
        command: ServersCommand,
    },
    /// Check the configuration file.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Measure search quality (nDCG, recall, MRR) and speed on labelled tool-retrieval sets.
    Eval(eval::Args),
    /// Convert a Claude Desktop / Cursor / VS Code mcpServers JSON file into mcpgw.toml entries.
    Import {
        file: PathBuf,
        /// Write to this file instead of stdout (refuses to overwrite).
        #[arg(long, short)]
        output: Option<PathBuf>,
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
    /// Connect to every server and show its state.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate the configuration and report every problem.
    Check,
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

/// Sets candle's element-wise pool to no extra workers unless the operator chose a size: its
/// spinning workers slow the embedding model on small machines (see `embed::local`).
#[allow(unsafe_code)]
fn quiet_candle_pool() {
    if std::env::var_os(embed::local::CANDLE_THREADS_VAR).is_none() {
        // SAFETY: the first statement of `main`, before any thread is spawned, so nothing can
        // read or write the environment concurrently.
        unsafe {
            std::env::set_var(
                embed::local::CANDLE_THREADS_VAR,
                embed::local::CANDLE_THREADS_DEFAULT,
            )
        };
    }
}

fn main() -> ExitCode {
    quiet_candle_pool();
    let cli = Cli::parse();
    // rmcp logs whole handshake payloads at info; keep them for `--log rmcp=debug`.
    let default_level = match cli.command {
        Command::Serve { .. } => "info,rmcp=warn",
        _ => "warn,rmcp=error",
    };
    init_logging(cli.log.as_deref(), default_level);
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
    let result = runtime.block_on(run(cli));
    // Children are already stopped by each command; don't wait for stray blocking tasks.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let config_path = cli.config.as_deref();
    match cli.command {
        Command::Serve { stdio, listen } => command::serve(config_path, stdio, listen).await,
        Command::Search {
            query,
            top_k,
            servers,
            json,
        } => command::search(config_path, &query, top_k, servers, json).await,
        Command::Tools { server, cost, json } => {
            command::tools(config_path, server.as_deref(), cost, json).await
        }
        Command::Servers {
            command: ServersCommand::Test { name, json },
        } => command::servers_test(config_path, &name, json).await,
        Command::Servers {
            command: ServersCommand::List { json },
        } => command::servers_list(config_path, json).await,
        Command::Config {
            command: ConfigCommand::Check,
        } => command::config_check(config_path),
        Command::Import { file, output } => command::import(&file, output.as_deref()),
        Command::Eval(args) => eval::run(args).await,
    }
}

fn init_logging(filter: Option<&str>, default_level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = match filter {
        Some(f) => EnvFilter::new(f),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only on a terminal: log files and pipes get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}
