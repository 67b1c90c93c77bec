//! The identifiers every mcpgw crate passes around, as types rather than bare `String`s, so
//! that a server name cannot be handed where a tool name or a principal is meant:
//!
//! - [`ServerName`]: a configured upstream server (`[A-Za-z0-9_-]`, no `__`; `config`
//!   validates it);
//! - [`QualifiedName`]: a tool as clients see it, `server__tool`, or the bare upstream name
//!   under `prefix = "when-needed"` (`catalog::naming` assigns it);
//! - [`PrincipalId`]: who calls, as per-principal state is keyed: `local`, `client:NAME` or
//!   `user:SUBJECT` (the gateway's `Principal::id`).
//!
//! Invariants: each is a plain string underneath (`#[serde(transparent)]`, the same text in
//! the database, in JSON and in logs); each reads as `&str` (`Deref`, `Borrow`), so maps keyed
//! by one are looked up with a `&str`, and compares equal to the same text. No dependencies but
//! serde.

use std::{borrow::Borrow, fmt, ops::Deref};

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[derive(serde::Serialize, serde::Deserialize)]
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
}
