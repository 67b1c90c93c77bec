//! A sign-in by the person at this machine, outside any running gateway (`mcpgw auth login`):
//! the authorization-code flow with a loopback redirect (RFC 8252), the browser's return taken
//! by [`super::callback`]'s server, tokens sealed into the store for the local principal.
//!
//! [`LocalLogin::start`] binds the callback listener (on the configured redirect URI's port,
//! else the one asked for, else one the system picks), discovers and registers as the server's
//! settings say, and returns the URL to open; [`LocalLogin::finish`] waits for the browser,
//! exchanges the code and answers the browser's page. The CLI prints and opens the URL and
//! renders the outcome; nothing here prints, and nothing here logs a token, the code or a
//! client secret.
//!
//! Invariant: the login's state lives in this process only (its `state` store is in memory),
//! so a login started here can be finished only here.

use std::{
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use tokio::net::TcpListener;
use upstream::oauth::{
    LoginCallback, LoginOutcome, MemoryLoginStates, OAuthSettings, PendingLogin, ServerCredentials,
    StateStore, finish_login, start_login,
};
use url::Url;

use super::{
    NotAnOAuthServer, StoreOAuth,
    callback::{Callbacks, serve_callbacks, state_of},
    oauth_server,
};

/// The path mcpgw's own redirect URI uses when the configuration names none.
const CALLBACK_PATH: &str = "/callback";

/// Why a local sign-in could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum LocalLoginError {
    /// The name or the options are wrong: the user should change the command.
    #[error("{0}")]
    NotOAuth(#[from] NotAnOAuthServer),
    #[error(
        "--port {asked} differs from the port of the configured redirect_uri {configured}; leave --port out"
    )]
    PortMismatch { asked: u16, configured: Url },
    /// Anything else, in words, with its causes.
    #[error("{0:#}")]
    Failed(#[from] anyhow::Error),
}

impl LocalLoginError {
    /// Whether the command line, not the world, is at fault.
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::NotOAuth(_) | Self::PortMismatch { .. })
    }
}

/// A sign-in waiting for the browser (see the module docs).
pub struct LocalLogin {
    server: String,
    authorization_url: String,
    redirect_uri: Url,
    pending: PendingLogin,
    callbacks: Callbacks,
}

impl LocalLogin {
    /// Starts signing in to server `name` of `config`, listening for the browser's return on
    /// `port` when the configuration names no redirect URI.
    pub async fn start(
        config: &config::Config,
        name: &str,
        port: Option<u16>,
    ) -> Result<LocalLogin, LocalLoginError> {
        use anyhow::Context as _;
        let (server_url, oauth) = oauth_server(config, name)?;
        let (listener, redirect_uri) = listen(oauth.redirect_uri.as_ref(), port).await?;
        let store = StoreOAuth::open_local(&config.store)
            .await
            .context("the database that keeps sign-ins cannot be opened")?;
        let credentials = ServerCredentials::new(store, name);
        let mut settings = OAuthSettings::from_config(name, oauth, redirect_uri.as_str())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // The sign-in's requests run under the server's network policy, as the gateway's do.
        let private = config.server(name).is_some_and(|s| s.allow_private_network);
        settings.policy = Arc::new(config.network.policy().for_server(name, private));
        let states: Arc<dyn StateStore> = Arc::new(MemoryLoginStates::default());
        let (authorization_url, pending) =
            start_login(server_url.as_str(), &settings, &credentials, states, None)
                .await
                .with_context(|| format!("cannot start the sign-in to '{name}'"))?;
        let state = state_of(&authorization_url)
            .ok_or_else(|| anyhow::anyhow!("the authorization URL carries no state"))?;
        let callbacks = serve_callbacks(listener, redirect_uri.clone(), state);
        Ok(LocalLogin {
            server: name.to_owned(),
            authorization_url,
            redirect_uri,
            pending,
            callbacks,
        })
    }

    /// The URL the user opens in a browser.
    pub fn authorization_url(&self) -> &str {
        &self.authorization_url
    }

    /// Where the browser comes back to.
    pub fn redirect_uri(&self) -> &Url {
        &self.redirect_uri
    }

    /// Waits (at most `within`) for the browser to come back, exchanges the code, answers the
    /// browser's page and closes the listener.
    pub async fn finish(self, within: Duration) -> Result<LoginOutcome, LocalLoginError> {
        use anyhow::Context as _;
        let LocalLogin {
            server,
            pending,
            mut callbacks,
            ..
        } = self;
        let minutes = within.as_secs() / 60;
        let mut callback = tokio::time::timeout(within, callbacks.recv())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "no sign-in arrived within {minutes} minutes; run `mcpgw auth login {server}` again"
                )
            })?
            .ok_or_else(|| anyhow::anyhow!("the callback listener stopped"))?;
        let url = std::mem::take(&mut callback.url);
        let outcome = finish_login(pending, LoginCallback::Url(url)).await;
        callback.answer(&server, outcome.is_ok());
        callbacks.close().await;
        Ok(outcome.with_context(|| format!("sign-in to '{server}' failed"))?)
    }
}

/// Listens for the browser's return: on the configured redirect URI's port, else on `port`,
/// else on one the system picks. Returns the listener and the redirect URI it serves.
async fn listen(
    configured: Option<&Url>,
    port: Option<u16>,
) -> Result<(TcpListener, Url), LocalLoginError> {
    use anyhow::Context as _;
    let addr = match configured {
        Some(url) => {
            // Validation guarantees http, a loopback host and an explicit port.
            let configured_port = url.port().unwrap_or(80);
            if let Some(asked) = port.filter(|p| *p != configured_port) {
                return Err(LocalLoginError::PortMismatch {
                    asked,
                    configured: url.clone(),
                });
            }
            let ip = match url.host() {
                Some(url::Host::Ipv6(_)) => Ipv6Addr::LOCALHOST.into(),
                _ => Ipv4Addr::LOCALHOST.into(),
            };
            SocketAddr::new(ip, configured_port)
        }
        None => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port.unwrap_or(0)),
    };
    let listener = TcpListener::bind(addr).await.with_context(|| {
        format!(
            "cannot listen on {addr} for the browser's return (hint: pick another port with --port)"
        )
    })?;
    let redirect_uri = match configured {
        Some(url) => url.clone(),
        None => {
            let port = listener
                .local_addr()
                .context("the callback listener has no address")?
                .port();
            Url::parse(&format!("http://127.0.0.1:{port}{CALLBACK_PATH}"))
                .context("the callback URL")?
        }
    };
    Ok((listener, redirect_uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_listener_takes_the_configured_port_or_refuses_another() {
        let free = TcpListener::bind("127.0.0.1:0")
            .await
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let configured = Url::parse(&format!("http://127.0.0.1:{free}/cb")).expect("url");
        let (listener, uri) = listen(Some(&configured), None).await.expect("listens");
        assert_eq!(listener.local_addr().map(|a| a.port()).ok(), Some(free));
        assert_eq!(uri, configured);
        drop(listener);
        let refused = listen(Some(&configured), Some(free.wrapping_add(1))).await;
        assert!(
            matches!(refused, Err(ref e @ LocalLoginError::PortMismatch { .. }) if e.is_usage()),
            "{:?}",
            refused.err()
        );
    }

    #[tokio::test]
    async fn without_a_configured_uri_the_callback_path_is_ours_on_the_bound_port() {
        let (listener, uri) = listen(None, None).await.expect("listens");
        let port = listener.local_addr().map(|a| a.port()).expect("bound");
        assert_eq!(uri.as_str(), format!("http://127.0.0.1:{port}/callback"));
    }
}
