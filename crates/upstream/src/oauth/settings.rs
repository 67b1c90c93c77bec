//! The per-server OAuth knobs ([`OAuthSettings`]): scopes, client identity, extra
//! authorisation and token parameters, built from the configuration.

use std::{collections::BTreeMap, fmt, sync::Arc, time::Duration};

use netguard::Policy;
use secrecy::SecretString;
use url::Url;

use super::error::*;

/// How long a started login may wait for its callback. The state is single-use and refused after
/// this, whatever the store does.
pub const LOGIN_TTL: Duration = Duration::from_secs(10 * 60);

/// The client name sent with dynamic client registration unless the settings say otherwise.
pub const DEFAULT_CLIENT_NAME: &str = "mcpgw";

/// Authorisation request parameters that the flow itself sets; extra parameters may not override
/// them, or PKCE, the state check or the resource binding would silently break.
const RESERVED_AUTHORIZATION_PARAMS: &[&str] = &[
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "resource",
];

/// Token request parameters that the flow itself sets.
const RESERVED_TOKEN_PARAMS: &[&str] = &[
    "grant_type",
    "code",
    "code_verifier",
    "redirect_uri",
    "refresh_token",
    "client_id",
    "client_secret",
    "client_assertion",
    "client_assertion_type",
    "resource",
    "scope",
];

/// How mcpgw authorises against one upstream. Built from the server's `oauth` configuration.
#[derive(Clone)]
pub struct OAuthSettings {
    /// Scopes to request. Empty: let discovery choose (the challenge's `scope`, else the
    /// resource's `scopes_supported`, else none), as the MCP scope-selection strategy says.
    pub scopes: Vec<String>,
    /// A client id registered with the authorisation server out of band. Takes priority over a
    /// client metadata document and dynamic registration.
    pub client_id: Option<String>,
    /// The secret of the pre-registered client, for a confidential client.
    pub client_secret: Option<SecretString>,
    /// HTTPS URL of mcpgw's client ID metadata document, used as the client id when the
    /// authorisation server supports them and no client id is configured.
    pub client_metadata_url: Option<String>,
    /// `client_name` for dynamic client registration.
    pub client_name: String,
    /// Extra query parameters for the authorisation request (for example `prompt` or
    /// `audience`). May not repeat a parameter the flow sets.
    pub authorization_params: BTreeMap<String, String>,
    /// Extra form parameters for token requests (code exchange and refresh). May not repeat a
    /// parameter the flow sets.
    pub token_params: BTreeMap<String, String>,
    /// Where the authorisation server sends the browser back to.
    pub redirect_uri: String,
    /// Where this server's OAuth requests (and an [`AuthorizedClient`]'s MCP requests) may go:
    /// the server's own `netguard` policy. [`OAuthSettings::new`] starts with the strict
    /// default (https to public addresses only); callers set the server's.
    pub policy: Arc<Policy>,
}

/// The redirect URI of settings used only to authorise requests and refresh tokens, when the
/// configuration names none: neither sends it. A login listens on a port of its own and builds
/// its settings with that address.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1/callback";

impl OAuthSettings {
    /// The settings of a server configured with `auth = { type = "oauth", .. }`. `redirect_uri`
    /// is used unless the configuration names one. The client secret is read from its variable
    /// now (a gateway reads it once, when the server first connects).
    ///
    /// `resource` is not honoured yet: rmcp asks for the resource its discovery found (the
    /// server's protected resource metadata), else the server URL; a warning says so.
    pub fn from_config(
        server: &str,
        config: &config::OAuthConfig,
        redirect_uri: &str,
    ) -> Result<Self, OAuthError> {
        let client_secret = config
            .client_secret()
            .map_err(|error| OAuthError::Settings {
                name: "client_secret_env".to_owned(),
                reason: error.to_string(),
            })?;
        if let Some(resource) = &config.resource {
            tracing::warn!(
                server,
                %resource,
                "oauth `resource` is not supported yet; asking for the resource the server's metadata names, else its url"
            );
        }
        let mut settings = Self::new(
            config
                .redirect_uri
                .as_ref()
                .map_or(redirect_uri, |url| url.as_str()),
        );
        settings.scopes = config.scopes.clone();
        settings.client_id = config.client_id.clone();
        settings.client_secret = client_secret;
        settings.client_metadata_url = config.client_metadata_url.as_ref().map(Url::to_string);
        settings.authorization_params = config.authorization_params.clone();
        settings.token_params = config.token_params.clone();
        Ok(settings)
    }

    pub fn new(redirect_uri: impl Into<String>) -> Self {
        Self {
            scopes: Vec::new(),
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            client_name: DEFAULT_CLIENT_NAME.to_owned(),
            authorization_params: BTreeMap::new(),
            token_params: BTreeMap::new(),
            redirect_uri: redirect_uri.into(),
            policy: Arc::new(Policy::default()),
        }
    }

    /// Every problem with these settings, or nothing.
    pub fn validate(&self) -> Result<(), OAuthError> {
        let invalid = |name: &str, reason: String| OAuthError::Settings {
            name: name.to_owned(),
            reason,
        };
        if Url::parse(&self.redirect_uri).is_err() {
            return Err(invalid("redirect_uri", "not an absolute URL".to_owned()));
        }
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Err(invalid(
                "client_secret",
                "a client secret needs the client id it belongs to".to_owned(),
            ));
        }
        if let Some(url) = &self.client_metadata_url {
            let ok = Url::parse(url)
                .is_ok_and(|u| u.scheme() == "https" && u.host_str().is_some() && u.path() != "/");
            if !ok {
                return Err(invalid(
                    "client_metadata_url",
                    "must be an https URL with a path".to_owned(),
                ));
            }
        }
        for (params, reserved, name) in [
            (
                &self.authorization_params,
                RESERVED_AUTHORIZATION_PARAMS,
                "authorization_params",
            ),
            (&self.token_params, RESERVED_TOKEN_PARAMS, "token_params"),
        ] {
            if let Some(key) = params.keys().find(|k| reserved.contains(&k.as_str())) {
                return Err(invalid(
                    name,
                    format!("`{key}` is set by the OAuth flow and cannot be overridden"),
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("scopes", &self.scopes)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[REDACTED]"),
            )
            .field("client_metadata_url", &self.client_metadata_url)
            .field("client_name", &self.client_name)
            .field("authorization_params", &self.authorization_params)
            // Token parameters can carry assertions; show only which are set.
            .field(
                "token_params",
                &self.token_params.keys().collect::<Vec<_>>(),
            )
            .field("redirect_uri", &self.redirect_uri)
            .field("policy", &self.policy)
            .finish()
    }
}
