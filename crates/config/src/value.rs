//! Values of environment variables and HTTP headers: plain text or a reference to a secret.

use std::env::VarError;
use std::fmt;

use secrecy::SecretString;

use crate::ConfigError;

/// The value of an env entry (stdio) or a header (HTTP, SSE).
///
/// `Env` is how secrets are written: the config names a variable and the value is read
/// only when a connection is made, by [`Value::resolve`].
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    Plain(String),
    /// `{ env = "VAR", prefix = "Bearer " }`; the resolved value is `prefix + $VAR`.
    Env {
        var: String,
        prefix: String,
    },
}

impl Value {
    /// Materialise the value for a connection. Reads the environment for `Env`, so a
    /// rotated token is picked up on the next connect without reloading the config.
    pub fn resolve(&self) -> Result<SecretString, ConfigError> {
        self.resolve_with(|var| std::env::var(var))
    }

    /// The variable a secret reference reads, so callers can check it up front.
    pub fn env_var(&self) -> Option<&str> {
        match self {
            Value::Plain(_) => None,
            Value::Env { var, .. } => Some(var),
        }
    }

    // The lookup is injected so tests need not mutate the process environment, which is
    // `unsafe` in edition 2024 and racy across test threads.
    fn resolve_with(
        &self,
        lookup: impl FnOnce(&str) -> Result<String, VarError>,
    ) -> Result<SecretString, ConfigError> {
        match self {
            Value::Plain(text) => Ok(SecretString::from(text.clone())),
            Value::Env { var, prefix } => match lookup(var) {
                Ok(secret) => Ok(SecretString::from(format!("{prefix}{secret}"))),
                Err(VarError::NotPresent) => Err(ConfigError::MissingEnv { var: var.clone() }),
                Err(VarError::NotUnicode(_)) => {
                    Err(ConfigError::EnvNotUnicode { var: var.clone() })
                }
            },
        }
    }
}

/// Plain values are redacted too: a config loaded straight from an `mcpServers` JSON file
/// keeps its inline secrets as `Plain`, and `Debug` output ends up in logs.
impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Plain(_) => f.write_str("Plain(<redacted>)"),
            Value::Env { var, prefix } => f
                .debug_struct("Env")
                .field("var", var)
                .field("prefix", prefix)
                .finish(),
        }
    }
}

/// Whether an env or header name suggests its value is a credential.
///
/// Matches whole components of the name (split at `-`, `_`, `.` and camelCase humps) so
/// that `GITHUB_TOKEN`, `X-Api-Key` and `apiKey` match while `KEYBOARD`, `MONKEY` and
/// `NODE_ENV` do not. A false positive costs the user one `{ env = ".." }`; a false
/// negative can leak a credential into a committed file, so the list leans inclusive.
pub(crate) fn looks_secret(name: &str) -> bool {
    const HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];
    // Components equal to one of these, or (for the longer ones) ending in one, such as
    // `accesstoken` or `clientsecret`. `key` must match exactly: `hotkey`, `monkey`.
    const WORDS: [&str; 5] = ["token", "secret", "password", "passwd", "apikey"];

    let lower = name.to_ascii_lowercase();
    if HEADERS.contains(&lower.as_str()) {
        return true;
    }
    components(name).any(|component| {
        let word = component.strip_suffix('s').unwrap_or(&component);
        word == "key" || WORDS.iter().any(|w| word.ends_with(w))
    })
}

/// Lower-cased components of a name: `X-Api-Key` -> `x`, `api`, `key`; `apiKey` -> `api`, `key`.
fn components(name: &str) -> impl Iterator<Item = String> + '_ {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            parts.push(std::mem::take(&mut current));
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            parts.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    parts.push(current);
    parts.into_iter().filter(|part| !part.is_empty())
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn secret_names_are_detected_by_component() {
        let secret = [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "GITHUB_TOKEN",
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "X-Api-Key",
            "x-api_key",
            "OPENAI_API_KEY",
            "APIKEY",
            "apiKey",
            "accessToken",
            "CLIENT_SECRET",
            "DB_PASSWORD",
            "PGPASSWD",
            "X-Auth-Token",
            "SLACK_TOKENS",
        ];
        let plain = [
            "PATH",
            "NODE_ENV",
            "HOME",
            "X-Team",
            "KEYBOARD",
            "MONKEY",
            "Accept",
            "User-Agent",
            "TOKENIZER",
            "LOG_LEVEL",
            "hotkey",
        ];
        for name in secret {
            assert!(looks_secret(name), "{name} should look secret");
        }
        for name in plain {
            assert!(!looks_secret(name), "{name} should not look secret");
        }
    }

    fn check(value: Value, env: Result<&str, VarError>, expect: Expect) {
        let actual = match value.resolve_with(|_| env.map(str::to_owned)) {
            Ok(secret) => format!("ok {:?}", secret.expose_secret()),
            Err(err) => format!("err {err}"),
        };
        expect.assert_eq(&actual);
    }

    #[test]
    fn resolve_reads_env_at_connect_time() {
        let token = || Value::Env {
            var: "LEGACY_TOKEN".into(),
            prefix: "Bearer ".into(),
        };
        check(token(), Ok("s3cr3t"), expect![[r#"ok "Bearer s3cr3t""#]]);
        check(
            token(),
            Err(VarError::NotPresent),
            expect![
                "err environment variable LEGACY_TOKEN is not set (hint: export LEGACY_TOKEN before starting mcpgw)"
            ],
        );
        check(
            Value::Plain("infra".into()),
            Err(VarError::NotPresent),
            expect![[r#"ok "infra""#]],
        );
    }

    #[test]
    fn resolve_uses_process_environment() {
        let missing = Value::Env {
            var: "MCPGW_TEST_UNSET_7D1E".into(),
            prefix: String::new(),
        };
        let err = missing.resolve().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "environment variable MCPGW_TEST_UNSET_7D1E is not set (hint: export MCPGW_TEST_UNSET_7D1E before starting mcpgw)"
            )
        );
        // Cargo sets CARGO_PKG_NAME for test binaries it runs.
        let present = Value::Env {
            var: "CARGO_PKG_NAME".into(),
            prefix: "pkg=".into(),
        };
        let resolved = present.resolve().map(|s| s.expose_secret().to_owned());
        assert_eq!(resolved.ok().as_deref(), Some("pkg=mcpgw-config"));
    }

    #[test]
    fn debug_never_prints_values() {
        let plain = Value::Plain("sk-live-123".into());
        let resolved = plain.resolve().map(|s| format!("{s:?}"));
        let shown = format!("{plain:?} {resolved:?}");
        assert!(!shown.contains("sk-live-123"), "{shown}");
    }
}
