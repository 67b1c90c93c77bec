//! The resolve step: a tool name to the catalog tool it calls, with the caller's profile
//! checked here and only here. A tool outside the profile is answered exactly like one that
//! does not exist (see `policy::access`); the audit log still learns of it.

use catalog::{Catalog, ToolEntry};
use ids::ServerName;

/// What a name comes to for one caller.
#[derive(Debug)]
pub(crate) enum Resolution<'c> {
    /// A tool the caller may call.
    Tool(&'c ToolEntry),
    /// A tool outside the caller's profile: refused as unknown, recorded as denied.
    Hidden(&'c ToolEntry),
    /// A tool held until its changed definition is approved (`pinning`): refused as unknown
    /// (the refusal says why), recorded as held.
    Held { server: ServerName },
    /// `server__…` on a server the caller may use, configured for OAuth, none of whose tools
    /// is listed (never signed in, or listed a moment ago): list it now, and sign in if it
    /// still wants that, rather than say "unknown tool".
    Unlisted { server: ServerName },
    /// No such tool for this caller.
    Unknown,
}

/// What resolution needs to know beyond the catalog.
pub(crate) trait Rules {
    /// Whether the caller's profile admits `entry`.
    fn permits(&self, entry: &ToolEntry) -> bool;
    /// Whether the caller's profile admits some tool of `server`.
    fn permits_server(&self, server: &str) -> bool;
    /// The server of `name` when it is a held tool the caller could use once approved.
    fn held(&self, name: &str) -> Option<ServerName>;
    /// Whether `server` is configured for OAuth.
    fn is_oauth(&self, server: &str) -> bool;
}

/// Resolves `name` in `catalog` for a caller under `rules`.
pub(crate) fn resolve<'c>(catalog: &'c Catalog, name: &str, rules: &impl Rules) -> Resolution<'c> {
    if let Some(entry) = catalog.get(name) {
        return if rules.permits(entry) {
            Resolution::Tool(entry)
        } else {
            Resolution::Hidden(entry)
        };
    }
    if let Some(server) = rules.held(name) {
        return Resolution::Held { server };
    }
    match name.split_once(catalog::naming::SEPARATOR) {
        Some((server, _))
            if rules.is_oauth(server)
                && rules.permits_server(server)
                && !catalog.tools().iter().any(|tool| tool.server == server) =>
        {
            Resolution::Unlisted {
                server: server.into(),
            }
        }
        _ => Resolution::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    /// A profile that admits the servers in `allowed`; `held` tools; `oauth` servers.
    struct Fixed {
        allowed: &'static [&'static str],
        held: &'static [(&'static str, &'static str)],
        oauth: &'static [&'static str],
    }

    impl Rules for Fixed {
        fn permits(&self, entry: &ToolEntry) -> bool {
            self.permits_server(&entry.server)
        }
        fn permits_server(&self, server: &str) -> bool {
            self.allowed.contains(&server)
        }
        fn held(&self, name: &str) -> Option<ServerName> {
            self.held
                .iter()
                .find(|(tool, _)| *tool == name)
                .map(|(_, server)| ServerName::from(*server))
        }
        fn is_oauth(&self, server: &str) -> bool {
            self.oauth.contains(&server)
        }
    }

    fn catalog() -> Catalog {
        let tool = |name: &str| Arc::new(json!({"name": name, "inputSchema": {"type": "object"}}));
        let servers = [
            catalog::ServerTools {
                server: "time".into(),
                description: None,
                tools: vec![tool("now")],
            },
            catalog::ServerTools {
                server: "files".into(),
                description: None,
                tools: vec![tool("delete")],
            },
        ];
        Catalog::build(&servers).0
    }

    const ONLY_TIME: Fixed = Fixed {
        allowed: &["time", "github"],
        held: &[("time__later", "time")],
        oauth: &["github"],
    };

    #[test]
    fn a_permitted_tool_resolves_to_its_entry() {
        let catalog = catalog();
        match resolve(&catalog, "time__now", &ONLY_TIME) {
            Resolution::Tool(entry) => assert_eq!(entry.upstream_name, "now"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_tool_outside_the_profile_is_hidden_not_found() {
        let catalog = catalog();
        assert!(matches!(
            resolve(&catalog, "files__delete", &ONLY_TIME),
            Resolution::Hidden(entry) if entry.server == "files"
        ));
    }

    #[test]
    fn held_and_unknown_names() {
        let catalog = catalog();
        assert!(matches!(
            resolve(&catalog, "time__later", &ONLY_TIME),
            Resolution::Held { server } if server == "time"
        ));
        assert!(matches!(
            resolve(&catalog, "time__never", &ONLY_TIME),
            Resolution::Unknown
        ));
        assert!(matches!(
            resolve(&catalog, "nothing", &ONLY_TIME),
            Resolution::Unknown
        ));
    }

    #[test]
    fn an_oauth_server_with_no_listed_tools_is_tried_not_refused() {
        let catalog = catalog();
        assert!(matches!(
            resolve(&catalog, "github__create_issue", &ONLY_TIME),
            Resolution::Unlisted { server } if server == "github"
        ));
        // Not for a server outside the profile, nor one that is not OAuth, nor one listed.
        let no_github = Fixed {
            allowed: &["time"],
            ..ONLY_TIME
        };
        assert!(matches!(
            resolve(&catalog, "github__create_issue", &no_github),
            Resolution::Unknown
        ));
        let oauth_time = Fixed {
            oauth: &["time"],
            ..ONLY_TIME
        };
        assert!(matches!(
            resolve(&catalog, "time__other", &oauth_time),
            Resolution::Unknown
        ));
    }
}
