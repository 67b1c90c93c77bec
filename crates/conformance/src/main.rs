//! `mcpgw-conformance-client`: mcpgw's upstream client, driven by the official MCP conformance
//! suite (`conformance client --command mcpgw-conformance-client --scenario S`).
//!
//! The harness starts a fake MCP server (and authorization server) per scenario and runs this
//! binary with the server URL as its last argument, the scenario in `MCP_CONFORMANCE_SCENARIO`
//! and, for some scenarios, `MCP_CONFORMANCE_CONTEXT` (JSON; `auth/pre-registration` puts the
//! pre-registered client's id and secret there). For the authorization scenarios (`auth/*`) the
//! client does the same thing whatever the scenario, through mcpgw's own code: it connects as
//! mcpgw does (the era probe with a legacy
//! fallback, Streamable HTTP over [`upstream::oauth::AuthorizedClient`]), lists the tools, calls
//! each once and exits 0. When the server wants authorization (a 401, or a 403
//! `insufficient_scope`) it logs in with [`upstream::oauth::start_login`] and
//! [`upstream::oauth::finish_login`], playing the browser itself: it fetches the authorization
//! URL without following redirects and passes the `Location` it is sent to as the callback. It
//! logs in at most [`MAX_LOGINS`] times, then gives up.
//!
//! Every other scenario runs through [`plain`]: mcpgw's upstream code itself ([`upstream::Upstreams`], the era probe, tool calls
//! with what the server asks answered as the client behind the gateway would). Beyond that
//! split the scenario name is only logged: the client has no per-scenario behaviour.
//!
//! Network policy: the harness runs its servers on this machine (`localhost`, loopback), which
//! mcpgw's SSRF guard refuses unless named, so the client runs under [`NETWORK_ALLOW`], as a
//! gateway configured with `[network] allow = ["localhost", "127.0.0.1", "::1"]` would. Every
//! request, the browser's included, still goes through a guarded client: the scenarios meet
//! the same checks (and refusals) as the gateway, only with loopback allowed.

mod plain;

use std::{process::ExitCode, sync::Arc, time::Duration};

use anyhow::{Context as _, anyhow, bail};
use rmcp::{
    ClientHandler, RoleClient,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonObject,
        ProtocolVersion, Tool,
    },
    service::{
        ClientInitializeError, ClientLifecycleMode, RunningService, ServiceError,
        serve_client_with_lifecycle,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing_subscriber::EnvFilter;
use upstream::oauth::{
    AuthorizedClient, LoginCallback, MemoryLoginStates, MemoryOAuthStore, OAuthSettings,
    OAuthStore, ServerCredentials, StateStore, finish_login, start_login,
};

/// The client's identity as a client ID metadata document (SEP-991). The conformance
/// authorization servers expect exactly this URL; they do not fetch it.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";
/// Never listened on: the authorization server's redirect is read from `Location` instead.
const REDIRECT_URI: &str = "http://localhost:3000/callback";
/// Logins per run: the first, and two step-ups. More would loop on a server that keeps refusing.
const MAX_LOGINS: usize = 3;
/// `[network] allow` for the harness's servers, all on this machine.
const NETWORK_ALLOW: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The part of `MCP_CONFORMANCE_CONTEXT` this client uses.
#[derive(Default, Deserialize)]
struct Context {
    client_id: Option<String>,
    client_secret: Option<String>,
}

/// Why one attempt stopped.
enum Failure {
    /// The server wants (more) authorization; its challenge, when it sent one.
    Auth(Option<String>),
    Other(anyhow::Error),
}

type Session = RunningService<RoleClient, Handler>;

#[derive(Clone)]
struct Handler;

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcpgw-conformance-client", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn")),
        )
        .init();
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: mcpgw-conformance-client <server-url>");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    tracing::info!(%scenario, %url, "starting");
    let outcome = if scenario.starts_with("auth/") {
        run(&url).await
    } else {
        let context = match std::env::var("MCP_CONFORMANCE_CONTEXT") {
            Ok(raw) => serde_json::from_str(&raw).context("MCP_CONFORMANCE_CONTEXT is not JSON"),
            Err(_) => Ok(plain::Context::default()),
        };
        match context {
            Ok(context) => plain::run(&url, context).await,
            Err(error) => Err(error),
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> anyhow::Result<()> {
    let context: Context = match std::env::var("MCP_CONFORMANCE_CONTEXT") {
        Ok(raw) => serde_json::from_str(&raw).context("MCP_CONFORMANCE_CONTEXT is not JSON")?,
        Err(_) => Context::default(),
    };
    let mut settings = OAuthSettings::new(REDIRECT_URI);
    settings.policy = Arc::new(
        netguard::Policy::parse(NETWORK_ALLOW)
            .context("the loopback allowlist")?
            .for_server("conformance", false),
    );
    settings.client_name = "mcpgw-conformance-client".to_owned();
    settings.client_metadata_url = Some(CLIENT_METADATA_URL.to_owned());
    settings.client_id = context.client_id;
    settings.client_secret = context.client_secret.map(SecretString::from);

    let store: Arc<dyn OAuthStore> = Arc::new(MemoryOAuthStore::default());
    let credentials = ServerCredentials::new(store, "conformance");
    let states: Arc<dyn StateStore> = Arc::new(MemoryLoginStates::default());
    let mut logins = 0;
    loop {
        let challenge = match exercise(url, &settings, &credentials).await {
            Ok(()) => return Ok(()),
            Err(Failure::Other(error)) => return Err(error),
            Err(Failure::Auth(challenge)) => challenge,
        };
        if logins == MAX_LOGINS {
            bail!("the server still refuses after {MAX_LOGINS} logins; giving up");
        }
        logins += 1;
        tracing::info!(login = logins, challenge = ?challenge, "authorization required");
        login(
            url,
            &settings,
            &credentials,
            states.clone(),
            challenge.as_deref(),
        )
        .await?;
    }
}

/// One pass with the credentials stored now: connect, list the tools, call each.
async fn exercise(
    url: &str,
    settings: &OAuthSettings,
    credentials: &ServerCredentials,
) -> Result<(), Failure> {
    let client = AuthorizedClient::new(url, settings, credentials.clone())
        .await
        .map_err(|e| Failure::Other(e.into()))?;
    let session = connect(url, client).await?;
    let outcome = async {
        let tools = session
            .peer()
            .list_all_tools()
            .await
            .map_err(request_failure)?;
        tracing::info!(count = tools.len(), "tools listed");
        for tool in &tools {
            let mut params = CallToolRequestParams::new(tool.name.clone());
            params.arguments = arguments_for(tool);
            let result = session
                .peer()
                .call_tool(params)
                .await
                .map_err(request_failure)?;
            tracing::info!(tool = %tool.name, is_error = ?result.is_error, "tool called");
        }
        Ok(())
    }
    .await;
    let _ = session.cancel().await;
    outcome
}

/// Connects as mcpgw's `connect` does: probe the era with `server/discover`, and retry with
/// `initialize` when the probe fails in a way rmcp does not classify.
async fn connect(url: &str, client: AuthorizedClient) -> Result<Session, Failure> {
    let auto = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    match open(url, client.clone(), auto).await {
        Ok(session) => Ok(session),
        Err(error) if error.is_authorization_required() || error.auth_challenge().is_some() => {
            Err(Failure::Auth(error.auth_challenge().map(str::to_owned)))
        }
        Err(
            error @ (ClientInitializeError::ConnectionClosed(_)
            | ClientInitializeError::TransportError { .. }
            | ClientInitializeError::JsonRpcError(_)
            | ClientInitializeError::Cancelled),
        ) => Err(Failure::Other(error.into())),
        Err(error) => {
            tracing::info!(%error, "era probe failed, retrying with initialize");
            open(url, client, ClientLifecycleMode::Initialize)
                .await
                .map_err(|error| {
                    if error.is_authorization_required() || error.auth_challenge().is_some() {
                        Failure::Auth(error.auth_challenge().map(str::to_owned))
                    } else {
                        Failure::Other(error.into())
                    }
                })
        }
    }
}

async fn open(
    url: &str,
    client: AuthorizedClient,
    lifecycle: ClientLifecycleMode,
) -> Result<Session, ClientInitializeError> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).reinit_on_expired_session(true);
    let transport = StreamableHttpClientTransport::with_client(client, config);
    serve_client_with_lifecycle(Handler, transport, lifecycle).await
}

fn request_failure(error: ServiceError) -> Failure {
    if error.is_authorization_required() || error.auth_challenge().is_some() {
        Failure::Auth(error.auth_challenge().map(str::to_owned))
    } else {
        Failure::Other(error.into())
    }
}

async fn login(
    url: &str,
    settings: &OAuthSettings,
    credentials: &ServerCredentials,
    states: Arc<dyn StateStore>,
    challenge: Option<&str>,
) -> anyhow::Result<()> {
    let (authorization_url, pending) =
        start_login(url, settings, credentials, states, challenge).await?;
    let callback = act_as_browser(&authorization_url, &settings.policy).await?;
    let outcome = finish_login(pending, LoginCallback::Url(callback)).await?;
    tracing::info!(
        client_id = %outcome.client_id,
        scopes = %outcome.scopes.join(" "),
        refresh_token = outcome.has_refresh_token,
        "logged in"
    );
    Ok(())
}

/// Where the authorization endpoint sends the browser: the redirect URI with the code.
async fn act_as_browser(
    authorization_url: &str,
    policy: &Arc<netguard::Policy>,
) -> anyhow::Result<String> {
    let url = reqwest::Url::parse(authorization_url)?;
    netguard::check_url(&url, policy)?;
    let http = netguard::guarded_client_builder(policy.clone())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()?;
    let response = http.get(url).send().await?;
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .ok_or_else(|| {
            anyhow!(
                "the authorization endpoint answered {} without a redirect",
                response.status()
            )
        })?
        .to_str()
        .context("the redirect location is not text")?;
    let base = reqwest::Url::parse(authorization_url)?;
    Ok(base.join(location)?.into())
}

/// Arguments for a call: a placeholder of the right type for each required property.
fn arguments_for(tool: &Tool) -> Option<JsonObject> {
    let schema = tool.input_schema.as_ref();
    let properties = schema.get("properties").and_then(Value::as_object)?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let arguments: JsonObject = properties
        .iter()
        .filter(|(name, _)| required.contains(&name.as_str()))
        .map(|(name, property)| {
            let value = match property.get("type").and_then(Value::as_str) {
                Some("string") => json!("test"),
                Some("integer") => json!(1),
                Some("number") => json!(1.0),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => Value::Null,
            };
            (name.clone(), value)
        })
        .collect();
    Some(arguments)
}
