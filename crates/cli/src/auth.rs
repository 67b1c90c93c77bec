//! `mcpgw auth`: signing in to upstream servers configured for OAuth, and what is stored.
//!
//! `login` runs the gateway's local sign-in (`gateway::oauth::local`: the authorization-code
//! flow with a loopback redirect, tokens sealed into the store for the local principal, where
//! the gateway reads them); this file prints the authorization URL, opens it when asked to and
//! able, and says how the sign-in ended. `status` also lists the sign-ins
//! other principals (clients and users of a shared gateway) made through the gateway. Nothing
//! here prints or logs a token, the code, or a client secret.

use std::{io::IsTerminal, path::Path, sync::Arc, time::SystemTime};

use anyhow::{Context, anyhow};
use gateway::oauth::{
    StoreOAuth,
    local::{LocalLogin, LocalLoginError},
};
use store::time::duration_words;
use upstream::oauth::{CredentialStatus, LOGIN_TTL, OAuthStore, ServerCredentials};

use crate::{Failure, command::load_config};

pub(crate) async fn login(
    config_path: Option<&Path>,
    name: &str,
    no_browser: bool,
    port: Option<u16>,
) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let login = LocalLogin::start(&config, name, port)
        .await
        .map_err(login_failure)?;
    eprintln!(
        "Sign in to '{name}' in your browser:\n\n  {}\n\nWaiting up to {} minutes for the browser to come back to {} ...",
        login.authorization_url(),
        LOGIN_TTL.as_secs() / 60,
        login.redirect_uri()
    );
    if !no_browser && std::io::stdout().is_terminal() {
        open_browser(login.authorization_url());
    }
    let outcome = login.finish(LOGIN_TTL).await.map_err(login_failure)?;
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
    let store = gateway::open_database(&config.store)
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

/// A sign-in that could not start or finish: a usage error when the command is at fault.
fn login_failure(error: LocalLoginError) -> Failure {
    if error.is_usage() {
        Failure::usage(anyhow!("{error}"))
    } else {
        Failure::from(anyhow!("{error}"))
    }
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
