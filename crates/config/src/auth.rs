//! How mcpgw proves who it is to an HTTP or SSE upstream: the `auth` table of a server.
//!
//! One strategy per server. The static ones (`bearer`, `header`) name an environment variable
//! and are read at connect time by [`Auth::credential`], like [`crate::Value`]s. `oauth` only
//! carries validated settings here; tokens come from the OAuth flow (`mcpgw auth login`).

use std::collections::BTreeMap;
use std::env::VarError;
use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use url::Url;

use crate::ConfigError;

/// A server's authentication strategy. Custom `headers` of the transport are sent on top and
/// replace a strategy header of the same name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// No credential beyond what the custom headers carry.
    #[default]
    None,
    /// `Authorization: Bearer <$env>`.
    Bearer { env: String },
    /// `<name>: <$env>` or `<name>: <scheme> <$env>`.
    Header(HeaderAuth),
    /// OAuth 2.1 (authorization code with PKCE); the access token is not in the config. Boxed:
    /// it is many times the size of the other variants.
    OAuth(Box<OAuthConfig>),
}

/// `auth = { type = "header", name = "X-Api-Key", env = "API_KEY" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderAuth {
    /// A valid HTTP header name that mcpgw does not set itself.
    pub name: String,
    /// One word put before the value with a space, such as `Token`.
    pub scheme: Option<String>,
    /// The variable that holds the credential.
    pub env: String,
}

/// `auth = { type = "oauth", .. }`: everything the OAuth flow needs that cannot be discovered
/// from the server (RFC 9728 protected resource metadata, RFC 8414 server metadata).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OAuthConfig {
    /// Scopes to request, each a valid RFC 6749 scope token; empty means the server's
    /// advertised `scopes_supported`, or none.
    pub scopes: Vec<String>,
    /// A client registered in advance with the authorization server. `None` means a client ID
    /// metadata document ([`OAuthConfig::client_metadata_url`]) or dynamic registration.
    pub client_id: Option<String>,
    /// The variable holding the pre-registered client's secret; only set with `client_id`.
    /// Read it with [`OAuthConfig::client_secret`].
    pub client_secret_env: Option<String>,
    /// The URL of a client ID metadata document, used as the client ID. `https`, with a path,
    /// no fragment, no userinfo. Never set with `client_id`.
    pub client_metadata_url: Option<Url>,
    /// Where the authorization server sends the browser back: `http` on a loopback host with
    /// an explicit port (a pre-registered client usually needs an exact match). `None` leaves
    /// the choice to the sign-in flow.
    pub redirect_uri: Option<Url>,
    /// Extra query parameters for the authorization request (`prompt`, `audience`, ..). Never
    /// one the flow sets itself.
    pub authorization_params: BTreeMap<String, String>,
    /// Extra form parameters for token requests. Never one the flow sets itself.
    pub token_params: BTreeMap<String, String>,
    /// The RFC 8707 resource indicator, when it is not the server URL (the default).
    pub resource: Option<Url>,
}

impl OAuthConfig {
    /// The pre-registered client's secret, read from the environment now.
    pub fn client_secret(&self) -> Result<Option<SecretString>, ConfigError> {
        self.client_secret_env
            .as_deref()
            .map(|var| read_credential(var, |var| std::env::var(var)))
            .transpose()
    }
}

/// A static strategy's header, ready to send. The value stays a [`SecretString`] until the
/// caller turns it into a header value (which it should mark sensitive).
#[derive(Debug)]
pub struct CredentialHeader {
    pub name: String,
    pub value: SecretString,
}

impl Auth {
    /// The header a `bearer` or `header` strategy sends, with its credential read from the
    /// environment now, so a rotated token is picked up on the next connect. `None` for
    /// `none`, and for `oauth`, whose token comes from the OAuth flow.
    ///
    /// A variable that is unset, empty or only whitespace is an error naming the variable.
    /// Surrounding whitespace (a newline left by `$(cat file)`-style exports) is removed.
    pub fn credential(&self) -> Result<Option<CredentialHeader>, ConfigError> {
        self.credential_with(|var| std::env::var(var))
    }

    /// The variable a `bearer` or `header` strategy reads.
    pub fn env_var(&self) -> Option<&str> {
        match self {
            Auth::Bearer { env } | Auth::Header(HeaderAuth { env, .. }) => Some(env),
            Auth::None | Auth::OAuth(_) => None,
        }
    }

    /// The header a `bearer` or `header` strategy sets.
    pub fn header_name(&self) -> Option<&str> {
        match self {
            Auth::Bearer { .. } => Some(AUTHORIZATION),
            Auth::Header(header) => Some(&header.name),
            Auth::None | Auth::OAuth(_) => None,
        }
    }

    /// The `type` as written in the config.
    pub fn kind(&self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::Bearer { .. } => "bearer",
            Auth::Header(_) => "header",
            Auth::OAuth(_) => "oauth",
        }
    }

    // The lookup is injected so tests need not mutate the process environment.
    fn credential_with(
        &self,
        lookup: impl FnOnce(&str) -> Result<String, VarError>,
    ) -> Result<Option<CredentialHeader>, ConfigError> {
        let (name, scheme, env) = match self {
            Auth::None | Auth::OAuth(_) => return Ok(None),
            Auth::Bearer { env } => (AUTHORIZATION, Some("Bearer"), env),
            Auth::Header(HeaderAuth { name, scheme, env }) => {
                (name.as_str(), scheme.as_deref(), env)
            }
        };
        let secret = read_credential(env, lookup)?;
        let value = match scheme {
            Some(scheme) => SecretString::from(format!("{scheme} {}", secret.expose_secret())),
            None => secret,
        };
        Ok(Some(CredentialHeader {
            name: name.to_owned(),
            value,
        }))
    }
}

impl fmt::Display for Auth {
    /// What the strategy sends, without any value: `bearer token from GITHUB_TOKEN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("none"),
            Auth::Bearer { env } => write!(f, "bearer token from {env}"),
            Auth::Header(HeaderAuth { name, scheme, env }) => match scheme {
                Some(scheme) => write!(f, "header {name}: {scheme} <{env}>"),
                None => write!(f, "header {name}: <{env}>"),
            },
            Auth::OAuth(_) => f.write_str("oauth"),
        }
    }
}

pub(crate) const AUTHORIZATION: &str = "Authorization";

fn read_credential(
    var: &str,
    lookup: impl FnOnce(&str) -> Result<String, VarError>,
) -> Result<SecretString, ConfigError> {
    match lookup(var) {
        Ok(value) => {
            let trimmed = value.trim();
            if trimmed.is_empty() {
                Err(ConfigError::EmptyEnv {
                    var: var.to_owned(),
                })
            } else if trimmed.len() == value.len() {
                Ok(SecretString::from(value))
            } else {
                Ok(SecretString::from(trimmed.to_owned()))
            }
        }
        Err(VarError::NotPresent) => Err(ConfigError::MissingEnv {
            var: var.to_owned(),
        }),
        Err(VarError::NotUnicode(_)) => Err(ConfigError::EnvNotUnicode {
            var: var.to_owned(),
        }),
    }
}

/// Headers the transports set themselves (or that make no sense as a credential): a strategy
/// naming one would be overwritten or break the protocol. Lower case.
pub(crate) const RESERVED_HEADERS: [&str; 11] = [
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "mcp-session-id",
    "transfer-encoding",
];

/// Authorization request parameters the OAuth flow sets itself, with what to write instead.
pub(crate) const FLOW_AUTHORIZATION_PARAMS: [(&str, &str); 8] = [
    ("response_type", "leave it out"),
    ("client_id", "use client_id = \"...\" in the auth table"),
    (
        "redirect_uri",
        "use redirect_uri = \"...\" in the auth table",
    ),
    ("state", "leave it out"),
    ("code_challenge", "leave it out"),
    ("code_challenge_method", "leave it out"),
    ("scope", "use scopes = [\"...\"] in the auth table"),
    ("resource", "use resource = \"...\" in the auth table"),
];

/// Token request parameters the OAuth flow sets itself, with what to write instead.
pub(crate) const FLOW_TOKEN_PARAMS: [(&str, &str); 8] = [
    ("grant_type", "leave it out"),
    ("code", "leave it out"),
    ("code_verifier", "leave it out"),
    ("refresh_token", "leave it out"),
    ("client_id", "use client_id = \"...\" in the auth table"),
    (
        "client_secret",
        "use client_secret_env = \"VAR\" in the auth table",
    ),
    (
        "redirect_uri",
        "use redirect_uri = \"...\" in the auth table",
    ),
    ("resource", "use resource = \"...\" in the auth table"),
];

/// Why `name` cannot be the variable a credential is read from, if it cannot. The name itself
/// is never part of the answer: a pasted token is the usual reason for a bad one.
pub(crate) fn env_name_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Some("not a valid environment variable name");
    }
    // Names are words in one case (`GITHUB_TOKEN`); a long run of mixed case and digits is
    // what tokens look like (`ghp_...`).
    let mixed = name.chars().any(|c| c.is_ascii_lowercase())
        && name.chars().any(|c| c.is_ascii_uppercase())
        && name.chars().any(|c| c.is_ascii_digit());
    if mixed && name.len() >= 20 {
        return Some("this looks like a token, not the name of an environment variable");
    }
    None
}

/// Whether `url` is on this machine (`localhost`, `127.0.0.0/8`, `[::1]`).
pub(crate) fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    fn check(auth: &Auth, env: Result<&str, VarError>, expect: Expect) {
        let actual = match auth.credential_with(|_| env.map(str::to_owned)) {
            Ok(Some(header)) => format!("{}: {:?}", header.name, header.value.expose_secret()),
            Ok(None) => "no header".to_owned(),
            Err(err) => format!("err {err}"),
        };
        expect.assert_eq(&actual);
    }

    fn header(name: &str, scheme: Option<&str>) -> Auth {
        Auth::Header(HeaderAuth {
            name: name.into(),
            scheme: scheme.map(str::to_owned),
            env: "API_KEY".into(),
        })
    }

    #[test]
    fn static_strategies_build_their_header_from_the_environment() {
        let bearer = Auth::Bearer {
            env: "GITHUB_TOKEN".into(),
        };
        check(
            &bearer,
            Ok("ghp_1"),
            expect![[r#"Authorization: "Bearer ghp_1""#]],
        );
        check(
            &bearer,
            Ok(" ghp_1\n"),
            expect![[r#"Authorization: "Bearer ghp_1""#]],
        );
        check(
            &header("X-Api-Key", None),
            Ok("k-2"),
            expect![[r#"X-Api-Key: "k-2""#]],
        );
        check(
            &header("Authorization", Some("Token")),
            Ok("t-3"),
            expect![[r#"Authorization: "Token t-3""#]],
        );
        check(&Auth::None, Ok("x"), expect!["no header"]);
        check(&Auth::OAuth(Box::default()), Ok("x"), expect!["no header"]);
    }

    #[test]
    fn unusable_variables_are_errors_naming_the_variable() {
        let bearer = Auth::Bearer {
            env: "GITHUB_TOKEN".into(),
        };
        check(
            &bearer,
            Err(VarError::NotPresent),
            expect![
                "err environment variable GITHUB_TOKEN is not set (hint: export GITHUB_TOKEN before starting mcpgw)"
            ],
        );
        check(
            &bearer,
            Ok(" \n"),
            expect![
                "err environment variable GITHUB_TOKEN is empty (hint: export GITHUB_TOKEN with the credential before starting mcpgw)"
            ],
        );
        check(
            &header("X-Api-Key", None),
            Err(VarError::NotUnicode("\u{fffd}".into())),
            expect!["err environment variable API_KEY does not hold valid UTF-8"],
        );
    }

    #[test]
    fn debug_and_display_never_show_the_credential() {
        let bearer = Auth::Bearer {
            env: "GITHUB_TOKEN".into(),
        };
        let header = bearer
            .credential_with(|_| Ok("ghp_SECRET".into()))
            .ok()
            .flatten();
        let shown = format!("{bearer} {bearer:?} {header:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("GITHUB_TOKEN"), "{shown}");
    }

    #[test]
    fn environment_variable_names_are_checked_without_echoing_them() {
        for good in ["GITHUB_TOKEN", "_X", "api_key", "Token2"] {
            assert_eq!(env_name_problem(good), None, "{good}");
        }
        for bad in ["", "1PASSWORD", "MY-TOKEN", "A B", "sk-live-abc", "X=Y"] {
            assert_eq!(
                env_name_problem(bad),
                Some("not a valid environment variable name"),
                "{bad}"
            );
        }
        assert_eq!(
            env_name_problem("ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
            Some("this looks like a token, not the name of an environment variable")
        );
    }

    #[test]
    fn loopback_hosts() {
        let check = |url: &str| Url::parse(url).is_ok_and(|url| is_loopback(&url));
        assert!(check("http://127.0.0.1:8/x"));
        assert!(check("http://127.9.0.1/x"));
        assert!(check("http://[::1]:8/x"));
        assert!(check("http://LOCALHOST:8/x"));
        assert!(!check("http://localhost.example.com/x"));
        assert!(!check("http://10.0.0.1/x"));
    }
}
