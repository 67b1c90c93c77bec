//! What one principal may see and call: its profile (`[[profiles]]`) applied to the catalog.
//!
//! Invariants:
//! - A tool outside the caller's profile is treated exactly like a tool that does not exist:
//!   absent from `tools/list`, `search_tools` and `get_tool_details`, refused at call time
//!   with the unknown-tool answer, and never offered as a "did you mean" suggestion.
//! - Search filters by profile *before* ranking (through `catalog::Filter::tools`), so a hidden
//!   tool never takes a slot in the top k.
//! - The set of tools a profile allows, and what listing them costs in tokens (for
//!   `exposure = "auto"`), are computed once per catalog generation and profile, then shared
//!   by every request.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use catalog::{Catalog, ToolEntry};
use ids::ServerName;
use serde_json::Value;

use crate::{Gateway, principal::Principal};

/// A principal and the profile it runs under.
pub struct Access<'a> {
    pub principal: Principal,
    /// The caller's profile as the running configuration had it when this was made (a
    /// copy: a reload may replace the configuration while a request runs).
    pub profile: Option<config::Profile>,
    gateway: &'a Gateway,
}

/// A profile's allowed qualified names, what listing them costs, and the catalog generation
/// they were computed for.
struct AllowedSet {
    generation: u64,
    names: Arc<HashSet<String>>,
    tokens: usize,
}

/// The per-profile allowed sets, by profile name.
#[derive(Default)]
pub(crate) struct ProfileSets(Mutex<HashMap<String, AllowedSet>>);

fn hint(entry: &ToolEntry, name: &str) -> Option<bool> {
    entry
        .raw
        .get("annotations")?
        .get(name)
        .and_then(Value::as_bool)
}

/// Whether `profile` lets `entry` through.
pub fn permits(profile: &config::Profile, entry: &ToolEntry) -> bool {
    profile.permits(
        &entry.server,
        &entry.qualified,
        hint(entry, "readOnlyHint"),
        hint(entry, "destructiveHint"),
    )
}

impl<'a> Access<'a> {
    pub fn new(gateway: &'a Gateway, principal: Principal) -> Access<'a> {
        let profile = principal.profile(&gateway.config().policy).cloned();
        Access {
            principal,
            profile,
            gateway,
        }
    }

    /// The view of a profile on its own (`mcpgw tools --profile`), as the local user.
    pub fn for_profile(gateway: &'a Gateway, profile: config::Profile) -> Access<'a> {
        Access {
            principal: Principal::Local,
            profile: Some(profile),
            gateway,
        }
    }

    /// Whether the caller may see and call `entry`.
    pub fn permits(&self, entry: &ToolEntry) -> bool {
        self.profile
            .as_ref()
            .is_none_or(|profile| permits(profile, entry))
    }

    /// Whether the caller may see `server` at all (its name in the server list).
    pub fn permits_server(&self, server: &str) -> bool {
        self.profile.as_ref().is_none_or(|profile| {
            profile.servers.is_empty() || profile.servers.iter().any(|p| p.matches(server))
        })
    }

    /// The exposure mode configured for this caller: its profile's, else `[gateway] exposure`.
    pub fn configured_exposure(&self) -> config::Exposure {
        self.profile
            .as_ref()
            .and_then(|p| p.exposure)
            .unwrap_or(self.gateway.config().gateway.exposure)
    }

    /// The exposure mode this caller gets now: `search` or `passthrough`. `auto` is
    /// passthrough while the caller's visible tools cost at most `[gateway] token_budget`
    /// tokens to list, else search.
    pub fn exposure(&self) -> config::Exposure {
        match self.configured_exposure() {
            config::Exposure::Auto => {
                if self.passthrough_tokens() <= self.gateway.config().gateway.token_budget {
                    config::Exposure::Passthrough
                } else {
                    config::Exposure::Search
                }
            }
            other => other,
        }
    }

    /// What listing every tool this caller may use would cost (cl100k_base tokens).
    pub fn passthrough_tokens(&self) -> usize {
        match self.allowed() {
            None => self.gateway.catalog().total_token_cost(),
            Some((_, tokens)) => tokens,
        }
    }

    /// The tools listed beside the meta-tools in search mode: the profile's `pinned`, else
    /// `[gateway] pinned`, else, under `auto`, the most used tools; only existing tools the
    /// caller may use, in that order.
    pub fn pinned(&self) -> Vec<String> {
        let config = self.gateway.config();
        let configured = self
            .profile
            .as_ref()
            .and_then(|p| p.pinned.as_ref())
            .unwrap_or(&config.gateway.pinned);
        let catalog = self.gateway.catalog();
        let usable = |name: &String| self.get(&catalog, name).is_some();
        if !configured.is_empty() {
            return configured.iter().filter(|n| usable(n)).cloned().collect();
        }
        if self.configured_exposure() != config::Exposure::Auto {
            return Vec::new();
        }
        self.gateway
            .most_used()
            .iter()
            .filter(|n| usable(n))
            .take(config::DEFAULT_AUTO_PINNED)
            .cloned()
            .collect()
    }

    /// The qualified names the caller may use in the current catalog, for the search filter;
    /// `None` when no profile applies (everything is allowed).
    pub fn allowed_tools(&self) -> Option<Arc<HashSet<String>>> {
        self.allowed().map(|(names, _)| names)
    }

    /// [`Access::allowed_tools`] and what listing them costs, built once per catalog
    /// generation and profile.
    fn allowed(&self) -> Option<(Arc<HashSet<String>>, usize)> {
        let profile = self.profile.as_ref()?;
        let (generation, catalog) = self.gateway.snapshot();
        let mut sets = self
            .gateway
            .profile_sets
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(built) = sets.get(&profile.name)
            && built.generation == generation
        {
            return Some((built.names.clone(), built.tokens));
        }
        let permitted: Vec<&ToolEntry> = catalog
            .tools()
            .iter()
            .filter(|entry| permits(profile, entry))
            .collect();
        let tokens = permitted.iter().map(|entry| entry.token_cost).sum();
        let names: Arc<HashSet<String>> = Arc::new(
            permitted
                .into_iter()
                .map(|entry| entry.qualified.to_string())
                .collect(),
        );
        sets.insert(
            profile.name.clone(),
            AllowedSet {
                generation,
                names: names.clone(),
                tokens,
            },
        );
        Some((names, tokens))
    }

    /// The caller's view of `qualified`: the entry when it exists and is permitted.
    pub fn get<'c>(&self, catalog: &'c Catalog, qualified: &str) -> Option<&'c ToolEntry> {
        catalog.get(qualified).filter(|entry| self.permits(entry))
    }

    /// Names of the servers the caller may see, with descriptions, in configuration order.
    pub fn servers(&self) -> Vec<(ServerName, Option<String>)> {
        self.gateway
            .upstreams()
            .servers()
            .iter()
            .filter(|s| self.permits_server(s.name()))
            .map(|s| (s.name().clone(), s.config().description.clone()))
            .collect()
    }

    /// cl100k_base tokens of the `tools/list` this caller is shown: the three meta-tools in
    /// search mode, every permitted tool in passthrough.
    pub fn listed_tokens(&self) -> usize {
        match self.exposure() {
            config::Exposure::Passthrough | config::Exposure::Auto => self.passthrough_tokens(),
            config::Exposure::Search => {
                let tools = crate::mcp::meta::tools(&self.servers());
                let catalog = self.gateway.catalog();
                let pinned: usize = self
                    .pinned()
                    .iter()
                    .filter_map(|name| catalog.get(name))
                    .map(|entry| entry.token_cost)
                    .sum();
                catalog::cost::count_tokens(&serde_json::to_string(&tools).unwrap_or_default())
                    + pinned
            }
        }
    }

    /// The "unknown tool" message for `name`: why, when it is a tool held by pinning that the
    /// caller may use; else the closest names among the tools the caller may use.
    pub fn unknown_tool_message(&self, catalog: &Catalog, name: &str) -> String {
        let held = self.gateway.held_tools();
        // A held tool's annotations are not trusted yet: a profile that needs a hint to admit
        // it does not see it.
        if let Some(tool) = held.iter().find(|tool| {
            tool.qualified == name
                && self
                    .profile
                    .as_ref()
                    .is_none_or(|p| p.permits(&tool.server, &tool.qualified, None, None))
        }) {
            return tool.explanation();
        }
        crate::mcp::meta::unknown_tool_message_where(catalog, name, &|entry| self.permits(entry))
    }
}

impl Gateway {
    /// The current catalog with its generation.
    pub(crate) fn snapshot(&self) -> (u64, Arc<Catalog>) {
        let slot = self
            .catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (slot.0, slot.1.clone())
    }

    /// What `principal` may see and call.
    pub fn access(&self, principal: Principal) -> Access<'_> {
        Access::new(self, principal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(server: &str, name: &str, annotations: Value) -> ToolEntry {
        let (catalog, _) = Catalog::build(&[catalog::ServerTools {
            server: server.into(),
            description: None,
            tools: vec![
                json!({
                    "name": name,
                    "description": "d",
                    "inputSchema": {"type": "object"},
                    "annotations": annotations,
                })
                .into(),
            ],
        }]);
        catalog.tools()[0].clone()
    }

    #[test]
    fn annotation_rules_read_the_explicit_hints() {
        let profile = config::Profile {
            name: "ro".into(),
            servers: vec![],
            allow: vec![],
            deny: vec![],
            read_only: true,
            destructive: true,
            exposure: None,
            pinned: None,
            clients: vec![],
            admin: false,
            calls_per_minute: None,
        };
        assert!(permits(
            &profile,
            &entry("fs", "read", json!({"readOnlyHint": true}))
        ));
        assert!(!permits(&profile, &entry("fs", "write", json!({}))));
        let no_destructive = config::Profile {
            read_only: false,
            destructive: false,
            ..profile
        };
        assert!(!permits(
            &no_destructive,
            &entry("fs", "rm", json!({"destructiveHint": true}))
        ));
        assert!(permits(&no_destructive, &entry("fs", "touch", json!({}))));
    }
}
