//! `mcpgw auth`: signing in to upstream servers configured for OAuth, and what is stored.
//!
//! `login` runs the authorization-code flow with a loopback redirect (RFC 8252): it listens on
//! 127.0.0.1 (the gateway's `oauth::callback` server takes the browser's return), prints the authorization URL (and opens it when asked to and able), waits for
//! the browser to come back with the code, and exchanges it. Tokens go to the store, sealed,
//! for the local principal; the gateway reads them from there. `status` also lists the sign-ins
//! other principals (clients and users of a shared gateway) made through the gateway. Nothing
//! here prints or logs a token, the code, or a client secret.

use std::{
    io::IsTerminal,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    path::Path,
    sync::Arc,
    time::SystemTime,
};

use anyhow::{Context, anyhow};
use gateway::oauth::{
    StoreOAuth,
    callback::{serve_callbacks, state_of},
};
use store::time::duration_words;
use tokio::net::TcpListener;
use upstream::oauth::{
    CredentialStatus, LOGIN_TTL, LoginCallback, MemoryLoginStates, OAuthSettings, OAuthStore,
    ServerCredentials, StateStore, finish_login, start_login,
};
use url::Url;

use crate::{Failure, command::load_config};

/// The path mcpgw's own redirect URI uses when the configuration names none.
const CALLBACK_PATH: &str = "/callback";

pub(crate) async fn login(
    config_path: Option<&Path>,
    name: &str,
    no_browser: bool,
    port: Option<u16>,
) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let (server_url, oauth) = oauth_server(&config, name)?;
    let (listener, redirect_uri) = callback_listener(oauth.redirect_uri.as_ref(), port).await?;
    let store = open_store(&config).await?;
    let credentials = ServerCredentials::new(store, name);
    let mut settings = OAuthSettings::from_config(name, oauth, redirect_uri.as_str())
        .map_err(|e| anyhow!("{e}"))?;
    // The sign-in's requests run under the server's network policy, as the gateway's do.
    let private = config.server(name).is_some_and(|s| s.allow_private_network);
    settings.policy = Arc::new(config.network.policy().for_server(name, private));
    // The login starts and finishes in this process: its state need not outlive it.
    let states: Arc<dyn StateStore> = Arc::new(MemoryLoginStates::default());
    let (authorization_url, pending) =
        start_login(server_url.as_str(), &settings, &credentials, states, None)
            .await
            .with_context(|| format!("cannot start the sign-in to '{name}'"))?;
    let state = state_of(&authorization_url)
        .ok_or_else(|| anyhow!("the authorization URL carries no state"))?;

    eprintln!(
        "Sign in to '{name}' in your browser:\n\n  {authorization_url}\n\nWaiting up to {} minutes for the browser to come back to {redirect_uri} ...",
        LOGIN_TTL.as_secs() / 60
    );
    if !no_browser && std::io::stdout().is_terminal() {
        open_browser(&authorization_url);
    }

    let mut callbacks = serve_callbacks(listener, redirect_uri.clone(), state);
    let mut callback = tokio::time::timeout(LOGIN_TTL, callbacks.recv())
        .await
        .map_err(|_| {
            anyhow!(
                "no sign-in arrived within {} minutes; run `mcpgw auth login {name}` again",
                LOGIN_TTL.as_secs() / 60
            )
        })?
        .ok_or_else(|| anyhow!("the callback listener stopped"))?;
    let url = std::mem::take(&mut callback.url);
    let outcome = finish_login(pending, LoginCallback::Url(url)).await;
    callback.answer(name, outcome.is_ok());
    callbacks.close().await;
    let outcome = outcome.with_context(|| format!("sign-in to '{name}' failed"))?;

    let scopes = if outcome.scopes.is_empty() {
        "none".to_owned()
    } else {
        outcome.scopes.join(" ")
    };
    let expiry = match outcome.expires_in {
        Some(lifetime) => format!("access token expires in {}", duration_words(lifetime)),
        None => "access token expiry not given".to_owned(),
    };
    let refresh = if outcome.has_refresh_token {
        "refreshed automatically"
    } else {
        "no refresh token: sign in again when it expires"
    };
    println!(
        "signed in to '{name}': client {}, scopes {scopes}, {expiry}, {refresh}",
        outcome.client_id
    );
    Ok(())
}

pub(crate) async fn status(config_path: Option<&Path>, json: bool) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let servers: Vec<&config::ServerConfig> = gateway::oauth::oauth_servers(&config).collect();
    if servers.is_empty() {
        if json {
            println!("[]");
        } else {
            println!("no server is configured for OAuth (auth = {{ type = \"oauth\" }})");
        }
        return Ok(());
    }
    let store = store::Store::open(&gateway::store_path(&config.store))
        .await
        .context("the database that keeps sign-ins cannot be opened")?;
    // The local user's sign-in to every OAuth server, then every other principal's that exists.
    let mut wanted: Vec<(&str, String)> = servers
        .iter()
        .map(|s| (s.name.as_str(), ids::PrincipalId::LOCAL.to_owned()))
        .collect();
    let stored = store
        .list_credentials()
        .await
        .context("cannot list the stored sign-ins")?;
    for row in stored {
        if row.principal == ids::PrincipalId::LOCAL {
            continue;
        }
        if let Some(server) = servers.iter().find(|s| s.name.as_str() == row.server) {
            wanted.push((server.name.as_str(), row.principal.into_string()));
        }
    }
    let mut rows = Vec::new();
    for (name, principal) in wanted {
        let oauth: Arc<dyn OAuthStore> = Arc::new(StoreOAuth::new(
            store.clone(),
            ids::PrincipalId::new(principal.as_str()),
        ));
        let status = ServerCredentials::new(oauth, name)
            .status()
            .await
            .with_context(|| format!("cannot read the sign-in of '{name}' for {principal}"))?;
        rows.push((name, principal, status));
    }
    if json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, principal, status)| {
                let mut row = gateway::oauth::status_json(name, status);
                row["principal"] = serde_json::json!(principal);
                row
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{}", status_table(&rows));
    }
    Ok(())
}

pub(crate) async fn logout(
    config_path: Option<&Path>,
    name: &str,
    forget_client: bool,
    principal: &str,
) -> Result<(), Failure> {
    let local = principal == ids::PrincipalId::LOCAL;
    let known_form = ["client:", "user:"].iter().any(|prefix| {
        principal
            .strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty())
    });
    if !local && !known_form {
        return Err(Failure::usage(anyhow!(
            "--principal must be `local`, `client:NAME` or `user:SUBJECT` (as `mcpgw auth status` lists them), not '{principal}'"
        )));
    }
    if !local && forget_client {
        return Err(Failure::usage(anyhow!(
            "--forget-client forgets the client every user of the server signs in with; sign out {principal} alone, or forget the client as the local user"
        )));
    }
    let config = load_config(config_path)?;
    let store = StoreOAuth::open_for(&config.store, ids::PrincipalId::new(principal))
        .await
        .context("the database that keeps sign-ins cannot be opened")?;
    let credentials = ServerCredentials::new(store, name);
    // Whose sign-in, in the messages: nothing more for the local user.
    let whose = if local {
        String::new()
    } else {
        format!(" for {principal}")
    };
    let stored = credentials
        .credentials()
        .await
        .context("cannot read the stored sign-in")?;
    let configured = config
        .server(name)
        .is_some_and(|s| matches!(s.auth, config::Auth::OAuth(_)));
    // A server removed from the configuration can still be signed out of.
    if stored.is_none() && !configured {
        return Err(Failure::usage(anyhow!(
            "no server named '{name}' is configured for OAuth, and nothing is stored for it"
        )));
    }
    if stored.is_none() {
        println!("'{name}' has no stored sign-in{whose}");
        return Ok(());
    }
    if forget_client {
        let forgotten = credentials
            .forget_client()
            .await
            .context("cannot delete the sign-in")?;
        match forgotten {
            Some(registration) => println!(
                "signed out of '{name}' and forgot client {} registered with {}",
                registration.client_id, registration.issuer
            ),
            None => println!(
                "signed out of '{name}' (its client was not registered by mcpgw: nothing else to forget)"
            ),
        }
    } else {
        credentials
            .forget_tokens()
            .await
            .context("cannot delete the sign-in")?;
        println!("signed out of '{name}'{whose}");
    }
    Ok(())
}

/// The URL and OAuth settings of server `name`, which must be an `http` server configured for
/// OAuth; anything else is a usage error.
fn oauth_server<'a>(
    config: &'a config::Config,
    name: &str,
) -> Result<(&'a Url, &'a config::OAuthConfig), Failure> {
    gateway::oauth::oauth_server(config, name).map_err(|e| Failure::usage(anyhow!("{e}")))
}

async fn open_store(config: &config::Config) -> Result<Arc<dyn OAuthStore>, Failure> {
    let store = StoreOAuth::open_local(&config.store)
        .await
        .context("the database that keeps sign-ins cannot be opened")?;
    Ok(store)
}

/// Listens for the browser's return: on the configured redirect URI's port, else on `port`,
/// else on one the system picks. Returns the listener and the redirect URI it serves.
async fn callback_listener(
    configured: Option<&Url>,
    port: Option<u16>,
) -> Result<(TcpListener, Url), Failure> {
    let (addr, redirect_uri) = match configured {
        Some(url) => {
            // Validation guarantees http, a loopback host and an explicit port.
            let configured_port = url.port().unwrap_or(80);
            if let Some(port) = port.filter(|p| *p != configured_port) {
                return Err(Failure::usage(anyhow!(
                    "--port {port} differs from the port of the configured redirect_uri {url}; leave --port out"
                )));
            }
            let ip = match url.host() {
                Some(url::Host::Ipv6(_)) => Ipv6Addr::LOCALHOST.into(),
                _ => Ipv4Addr::LOCALHOST.into(),
            };
            (SocketAddr::new(ip, configured_port), url.clone())
        }
        None => (
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port.unwrap_or(0)),
            // Replaced below once the port is known.
            Url::parse("http://127.0.0.1/").map_err(|e| anyhow!(e))?,
        ),
    };
    let listener = TcpListener::bind(addr).await.with_context(|| {
        format!(
            "cannot listen on {addr} for the browser's return (hint: pick another port with --port)"
        )
    })?;
    let redirect_uri = if configured.is_some() {
        redirect_uri
    } else {
        let port = listener.local_addr()?.port();
        Url::parse(&format!("http://127.0.0.1:{port}{CALLBACK_PATH}")).map_err(|e| anyhow!(e))?
    };
    Ok((listener, redirect_uri))
}

/// Asks the desktop to open `url`. Best effort: the URL is printed anyway.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = tokio::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        // Reaped in the background; its exit status changes nothing.
        Ok(mut child) => {
            tokio::spawn(async move { child.wait().await });
        }
        Err(error) => tracing::debug!(opener, %error, "could not open a browser"),
    }
}

fn status_table(rows: &[(&str, String, CredentialStatus)]) -> comfy_table::Table {
    let mut table = crate::render::table();
    table.set_header([
        "server",
        "principal",
        "state",
        "issuer",
        "client",
        "scopes",
        "access token",
    ]);
    let now = SystemTime::now();
    for (name, principal, status) in rows {
        let state = if status.logged_in() {
            "signed in"
        } else {
            "signed out"
        };
        let expiry = match status.expires_at {
            _ if !status.logged_in() => "-".to_owned(),
            None => "no expiry given".to_owned(),
            Some(at) => match at.duration_since(now) {
                Ok(left) => format!("expires in {}", duration_words(left)),
                Err(_) if status.has_refresh_token => "expired, refreshed on next use".to_owned(),
                Err(_) => "expired".to_owned(),
            },
        };
        table.add_row([
            (*name).to_owned(),
            principal.clone(),
            state.to_owned(),
            status.issuer.clone().unwrap_or_else(|| "-".to_owned()),
            status.client_id.clone().unwrap_or_else(|| "-".to_owned()),
            if status.scopes.is_empty() {
                "-".to_owned()
            } else {
                status.scopes.join(" ")
            },
            expiry,
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_configured_redirect_uri_fixes_the_port() {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            probe.local_addr().expect("addr").port()
        };
        let configured = Url::parse(&format!("http://127.0.0.1:{port}/oauth/cb")).expect("url");
        let (listener, redirect_uri) = callback_listener(Some(&configured), Some(port))
            .await
            .ok()
            .expect("listen");
        assert_eq!(redirect_uri, configured);
        assert_eq!(listener.local_addr().expect("addr").port(), port);
        drop(listener);
        assert!(
            callback_listener(Some(&configured), Some(port.wrapping_add(1)))
                .await
                .is_err(),
            "--port cannot contradict the configuration"
        );
    }
}
