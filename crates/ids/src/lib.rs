//! The identifiers every mcpgw crate passes around, as types rather than bare `String`s, so
//! that a server name cannot be handed where a tool name or a principal is meant:
//!
//! - [`ServerName`]: a configured upstream server: 1 to 32 of `[A-Za-z0-9_-]`, no `__`, no
//!   leading or trailing `_`, so `server__tool` always splits back ([`ServerName::parse`]
//!   checks that; `config` parses every name it reads with it);
//! - [`QualifiedName`]: a tool as clients see it, `server__tool`, or the bare upstream name
//!   under `prefix = "when-needed"` (`catalog::naming` assigns it);
//! - [`PrincipalId`]: who calls, as per-principal state is keyed: `local`, `client:NAME` or
//!   `user:SUBJECT` (the gateway's `Principal::id`).
//!
//! Invariants: each is a plain string underneath (`#[serde(transparent)]`, the same text in
//! the database, in JSON and in logs); each reads as `&str` (`Deref`, `Borrow`), so maps keyed
//! by one are looked up with a `&str`, and compares equal to the same text. `new` and `From`
//! take the text as it is (names read back from mcpgw's own database or from a checked
//! configuration); text from outside goes through [`ServerName::parse`]. No dependencies but
//! serde.

use std::{borrow::Borrow, fmt, ops::Deref};

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[derive(serde::Serialize, serde::Deserialize)]
        #[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new(text: impl Into<String>) -> Self {
                Self(text.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        /// As the text in quotes, like a `String`: logs and messages read the same as before
        /// the type existed.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                Self(text)
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                Self(text.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<&$name> for $name {
            fn eq(&self, other: &&$name) -> bool {
                self.0 == other.0
            }
        }

        impl PartialEq<$name> for &$name {
            fn eq(&self, other: &$name) -> bool {
                self.0 == other.0
            }
        }
    };
}

identifier!(
    /// A configured upstream server's name.
    ServerName
);
identifier!(
    /// A tool's name as clients see and call it (`server__tool`, or bare under
    /// `prefix = "when-needed"`).
    QualifiedName
);
identifier!(
    /// Who calls, as per-principal state (OAuth tokens, the audit log, approvals, rate
    /// limits) is keyed: `local`, `client:NAME` or `user:SUBJECT`.
    PrincipalId
);

impl ServerName {
    /// Longest server name. Short because it prefixes every qualified tool name, and those are
    /// capped at 64 characters by clients.
    pub const MAX_LEN: usize = 32;

    /// `name` when it is a valid server name; else why not, in words.
    pub fn parse(name: &str) -> Result<ServerName, String> {
        match Self::problem(name) {
            None => Ok(ServerName(name.to_owned())),
            Some(reason) => Err(reason),
        }
    }

    /// Why `name` is not a valid server name, if it is not.
    pub fn problem(name: &str) -> Option<String> {
        if name.is_empty() {
            return Some("must not be empty".into());
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Some(format!(
                "contains {c:?}; only letters, digits, `-` and `_` are allowed"
            ));
        }
        if name.len() > Self::MAX_LEN {
            return Some(format!(
                "is {} characters long; at most {} are allowed",
                name.len(),
                Self::MAX_LEN
            ));
        }
        if name.contains("__") {
            return Some(
                "must not contain `__`, which separates server and tool in qualified tool names"
                    .into(),
            );
        }
        if name.starts_with('_') || name.ends_with('_') {
            return Some(
                "must not start or end with `_`, which would run into the `__` separator".into(),
            );
        }
        None
    }

    /// The closest valid name to `raw`: bad characters become `-`, runs of `-`/`_` collapse
    /// (so no `__`), the ends are trimmed of `-`/`_`, at most [`Self::MAX_LEN`] characters,
    /// and `server` if nothing is left. Used for names written by other tools (`mcpServers`
    /// JSON, eval sets).
    pub fn sanitize(raw: &str) -> ServerName {
        let mut name = String::new();
        for c in raw.chars() {
            let c = if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            };
            if (c == '_' || c == '-') && name.ends_with(c) {
                continue;
            }
            name.push(c);
        }
        let trim = |s: &str| s.trim_matches(['-', '_']).to_owned();
        let name = trim(&name);
        let name = trim(name.get(..Self::MAX_LEN).unwrap_or(&name));
        if name.is_empty() {
            ServerName("server".to_owned())
        } else {
            ServerName(name)
        }
    }

    /// `name`, or `name-2`, `name-3`, ... (its stem shortened to fit) when `taken` has it.
    pub fn unused(name: &str, taken: &[String]) -> String {
        if !taken.iter().any(|t| t == name) {
            return name.to_owned();
        }
        (2..)
            .map(|n| {
                let suffix = format!("-{n}");
                let keep = Self::MAX_LEN - suffix.len();
                let stem = name
                    .get(..keep)
                    .unwrap_or(name)
                    .trim_end_matches(['_', '-']);
                format!("{stem}{suffix}")
            })
            .find(|candidate| !taken.contains(candidate))
            .unwrap_or_else(|| name.to_owned())
    }
}

impl PrincipalId {
    /// The id of the person running mcpgw on this machine (stdio, the cli, an open loopback
    /// listener), and of a shared upstream session.
    pub const LOCAL: &'static str = "local";

    pub fn local() -> Self {
        Self(Self::LOCAL.to_owned())
    }

    pub fn is_local(&self) -> bool {
        self.0 == Self::LOCAL
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn an_identifier_reads_and_compares_as_its_text() {
        let server = ServerName::from("time");
        assert_eq!(server, "time");
        assert_eq!("time", server);
        assert_eq!(server.len(), 4, "str methods through Deref");
        assert_eq!(format!("{server}"), "time");
        assert_eq!(
            format!("{server:?}"),
            "\"time\"",
            "Debug reads like a String's"
        );
        let by_name: HashMap<ServerName, u8> = HashMap::from([(server.clone(), 1)]);
        assert_eq!(by_name.get("time"), Some(&1), "looked up by &str");
        assert_eq!(String::from(server), "time");
    }

    #[test]
    fn identifiers_are_plain_strings_in_json() {
        let tool = QualifiedName::new("time__now");
        assert_eq!(
            serde_json::to_string(&tool).ok().as_deref(),
            Some("\"time__now\"")
        );
        let back: QualifiedName = serde_json::from_str("\"time__now\"").expect("parse");
        assert_eq!(back, tool);
        assert!(PrincipalId::local().is_local());
        assert!(!PrincipalId::new("client:ci").is_local());
    }

    #[test]
    fn server_name_accepts_only_valid_names() {
        let valid = [
            "a",
            "github",
            "my-docs",
            "my_docs",
            "A1",
            "-x-",
            &"a".repeat(32),
        ];
        let invalid = ["", "a b", "a.b", "a__b", "_a", "a_", "ü", &"a".repeat(33)];
        for name in valid {
            assert_eq!(ServerName::parse(name).ok().as_deref(), Some(name));
        }
        for name in invalid {
            assert!(
                ServerName::parse(name).is_err(),
                "{name:?} should be rejected"
            );
        }
        assert_eq!(ServerName::sanitize("My Server!").as_str(), "My-Server");
        assert_eq!(ServerName::sanitize("__").as_str(), "server");
        let taken = vec!["x".to_owned(), "x-2".to_owned()];
        assert_eq!(ServerName::unused("x", &taken), "x-3");
        assert_eq!(ServerName::unused("y", &taken), "y");
    }
}
