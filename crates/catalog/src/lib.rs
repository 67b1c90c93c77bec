//! The tool catalog: upstream tool lists in, an immutable, searchable snapshot out.
//!
//! [`Catalog::build`] takes each server's tool list as plain data (the JSON objects exactly as
//! the upstream sent them) and derives what the gateway needs: qualified names
//! ([`naming`]), a resolved schema view for the model ([`schema`]), token costs ([`cost`]),
//! a BM25 index with filters ([`search`]) and "did you mean" suggestions.
//! It does not know where the lists came from: no async, no IO, no MCP SDK.
//!
//! Invariant: a Catalog is immutable; building never fails on upstream data. A malformed tool
//! is skipped and reported as a [`Problem`], the rest loads.
//!
//! Invariant: names are deterministic. The same lists in the same order give the same
//! qualified names, and a server's names do not depend on the other servers (see [`naming`]).
//!
//! Invariant: the upstream name and the verbatim schema are what go on the wire; derived views
//! (qualified name, resolved schema) are for clients and models only.

pub mod cost;
pub mod entry;
pub mod naming;
pub mod schema;
pub mod search;
pub mod suggestion;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use retrieval::{Bm25Index, Bm25Params, DocId};

pub use entry::{Error, Problem, ToolEntry};
pub use search::{Filter, SearchHit};

use naming::Namer;
use suggestion::Candidate;

/// One upstream server's tools, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerTools {
    /// The configured server name; valid by precondition: `[A-Za-z0-9_-]`, no `__`, unique.
    pub server: String,
    /// Shown to the search index and to models that ask what a server is for.
    pub description: Option<String>,
    /// Raw MCP `Tool` objects as received.
    pub tools: Vec<Value>,
}

/// An immutable snapshot of every upstream tool. `Send + Sync`; share it through an `Arc` and
/// replace it whole on refresh.
#[derive(Clone)]
pub struct Catalog {
    tools: Vec<ToolEntry>,
    by_name: HashMap<String, usize>,
    /// Server names and descriptions in the given order, each once.
    servers: Vec<(String, Option<String>)>,
    index: Bm25Index,
    total_token_cost: usize,
}

impl Catalog {
    /// Build a snapshot. Tools keep the given order (servers in order, tools in upstream order).
    /// Whatever could not be loaded comes back as problems, never as a failure.
    pub fn build(servers: &[ServerTools]) -> (Catalog, Vec<Problem>) {
        let mut namer = Namer::new();
        let mut tools = Vec::new();
        let mut problems = Vec::new();
        let mut listed: Vec<(String, Option<String>)> = Vec::new();
        for upstream in servers {
            let problem = |tool: Option<&str>, error: Error| Problem {
                server: upstream.server.clone(),
                tool: tool.map(str::to_string),
                message: error.to_string(),
            };
            if listed.iter().any(|(name, _)| *name == upstream.server) {
                problems.push(problem(None, Error::DuplicateServer));
                continue;
            }
            listed.push((upstream.server.clone(), upstream.description.clone()));

            // Upstream names loaded from this server: a second tool with the same name could
            // never be called (calls go out by upstream name), so it is not listed. A malformed
            // first copy does not count, so a good second copy still loads.
            let mut loaded: HashSet<&str> = HashSet::new();
            for raw in &upstream.tools {
                let name = entry::upstream_name(raw).ok();
                if let Some(name) = name
                    && loaded.contains(name)
                {
                    problems.push(problem(Some(name), Error::DuplicateTool));
                    continue;
                }
                match ToolEntry::parse(&upstream.server, raw, &mut namer) {
                    Ok(tool) => {
                        loaded.extend(name);
                        tools.push(tool);
                    }
                    Err(error) => problems.push(problem(name, error)),
                }
            }
        }

        let descriptions: HashMap<&str, &str> = listed
            .iter()
            .filter_map(|(name, description)| Some((name.as_str(), description.as_deref()?)))
            .collect();
        let documents: Vec<_> = tools
            .iter()
            .map(|tool| search::document(tool, descriptions.get(tool.server.as_str()).copied()))
            .collect();
        let index = Bm25Index::build(&documents, &Bm25Params::default());

        let mut by_name = HashMap::with_capacity(tools.len());
        for (i, tool) in tools.iter().enumerate() {
            // The namer guarantees uniqueness; `Vacant` only keeps this total if it ever did not.
            if let Entry::Vacant(slot) = by_name.entry(tool.qualified.clone()) {
                slot.insert(i);
            }
        }
        let total_token_cost = tools.iter().map(|t| t.token_cost).sum();
        let catalog = Catalog {
            tools,
            by_name,
            servers: listed,
            index,
            total_token_cost,
        };
        (catalog, problems)
    }

    /// Every tool: servers in the given order, tools in upstream order.
    pub fn tools(&self) -> &[ToolEntry] {
        &self.tools
    }

    /// The tool with this qualified name.
    pub fn get(&self, qualified: &str) -> Option<&ToolEntry> {
        self.tools.get(*self.by_name.get(qualified)?)
    }

    /// Server names in the given order, including servers that currently have no tools.
    pub fn servers(&self) -> Vec<&str> {
        self.servers.iter().map(|(name, _)| name.as_str()).collect()
    }

    /// The description configured or reported for `server`.
    pub fn server_description(&self, server: &str) -> Option<&str> {
        self.servers
            .iter()
            .find(|(name, _)| name == server)?
            .1
            .as_deref()
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether the catalog has no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// BM25 over the tools `filter` lets through, best first, at most `top_k`. Ties break by
    /// qualified name. Only tools that share a term with the query are returned.
    pub fn search(&self, query: &str, top_k: usize, filter: &Filter) -> Vec<SearchHit<'_>> {
        if top_k == 0 {
            return Vec::new();
        }
        let keep = |doc: DocId| self.tool(doc).is_some_and(|tool| filter.matches(tool));
        self.index
            .rank(query, &keep)
            .into_iter()
            .filter_map(|hit| {
                Some(SearchHit {
                    tool: self.tool(hit.doc)?,
                    score: hit.score,
                })
            })
            .take(top_k)
            .collect()
    }

    /// The qualified names closest to an unknown tool name, best first, at most `limit`; see
    /// [`suggestion`] for the tiers.
    pub fn suggest(&self, unknown: &str, limit: usize) -> Vec<&str> {
        let candidates = self.tools.iter().map(|tool| Candidate {
            qualified: &tool.qualified,
            upstream: &tool.upstream_name,
        });
        suggestion::suggest(unknown, candidates, limit)
    }

    /// Sum of every tool's [`ToolEntry::token_cost`]: what passthrough mode would cost a client.
    pub fn total_token_cost(&self) -> usize {
        self.total_token_cost
    }

    /// The document id of a tool is its index in `tools`.
    fn tool(&self, doc: DocId) -> Option<&ToolEntry> {
        self.tools.get(usize::try_from(doc).ok()?)
    }
}

impl Default for Catalog {
    /// The empty catalog, before any upstream has answered.
    fn default() -> Self {
        Catalog::build(&[]).0
    }
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Catalog")
            .field("servers", &self.servers())
            .field("tools", &self.tools.len())
            .field("total_token_cost", &self.total_token_cost)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn tool(name: &str, description: &str, annotations: Value) -> Value {
        let mut tool = json!({
            "name": name,
            "description": description,
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}
        });
        if !annotations.is_null() {
            tool["annotations"] = annotations;
        }
        tool
    }

    fn fixture() -> Vec<ServerTools> {
        vec![
            ServerTools {
                server: "everything".into(),
                description: Some("Reference server that exercises every MCP feature".into()),
                tools: vec![
                    tool(
                        "echo",
                        "Echoes back the input message.",
                        json!({"readOnlyHint": true}),
                    ),
                    tool(
                        "add",
                        "Adds two numbers together.",
                        json!({"readOnlyHint": true}),
                    ),
                    json!({
                        "name": "longRunningOperation",
                        "description": "Demonstrates a long running operation with progress updates",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"config": {"$ref": "#/$defs/Config"}},
                            "$defs": {"Config": {"type": "object", "properties": {
                                "duration": {"type": "number", "description": "seconds to wait"},
                                "steps": {"type": "integer"}
                            }}}
                        }
                    }),
                ],
            },
            ServerTools {
                server: "fs".into(),
                description: None,
                tools: vec![
                    tool(
                        "read_file",
                        "Read a file from disk.",
                        json!({"readOnlyHint": true}),
                    ),
                    tool(
                        "write_file",
                        "Write a file to disk, replacing it.",
                        json!({"readOnlyHint": false}),
                    ),
                    tool(
                        "move_file",
                        "Move or rename a file.",
                        json!({"readOnlyHint": false, "destructiveHint": false}),
                    ),
                    tool("delete_file", "Delete a file.", json!(null)),
                ],
            },
            ServerTools {
                server: "github".into(),
                description: Some("Issues and pull requests".into()),
                tools: vec![
                    tool(
                        "search_repositories",
                        "Search GitHub repositories.",
                        json!({"readOnlyHint": true}),
                    ),
                    tool(
                        "create_issue",
                        "Open a new issue in a repository.",
                        json!({"destructiveHint": false}),
                    ),
                    tool(
                        "read_file",
                        "Read a file from a repository.",
                        json!({"readOnlyHint": true}),
                    ),
                ],
            },
        ]
    }

    fn catalog() -> Catalog {
        let (catalog, problems) = Catalog::build(&fixture());
        assert_eq!(problems, Vec::new());
        catalog
    }

    fn check_search(query: &str, filter: &Filter, expect: Expect) {
        let catalog = catalog();
        let hits: Vec<&str> = catalog
            .search(query, 5, filter)
            .iter()
            .map(|hit| hit.tool.qualified.as_str())
            .collect();
        expect.assert_eq(&hits.join(" "));
    }

    #[test]
    fn catalog_is_send_sync_and_lists_tools_in_order() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Catalog>();

        let catalog = catalog();
        let names: Vec<&str> = catalog
            .tools()
            .iter()
            .map(|t| t.qualified.as_str())
            .collect();
        expect![[r#"
            everything__echo everything__add everything__longRunningOperation fs__read_file fs__write_file fs__move_file fs__delete_file github__search_repositories github__create_issue github__read_file"#]]
        .assert_eq(&names.join(" "));
        assert_eq!(catalog.servers(), ["everything", "fs", "github"]);
        assert_eq!(catalog.len(), 10);
        let read = catalog.get("github__read_file").expect("listed");
        assert_eq!(
            (read.server.as_str(), read.upstream_name.as_str()),
            ("github", "read_file")
        );
        assert!(catalog.get("read_file").is_none());
        assert_eq!(
            catalog.server_description("github"),
            Some("Issues and pull requests")
        );
        assert!(Catalog::default().is_empty());
    }

    #[test]
    fn malformed_tools_are_problems_and_the_rest_loads() {
        let servers = [
            ServerTools {
                server: "broken".into(),
                description: None,
                tools: vec![
                    json!({"description": "no name", "inputSchema": {}}),
                    json!({"name": 42, "inputSchema": {}}),
                    json!({"name": "bad_schema", "inputSchema": []}),
                    json!({"name": "no_schema"}),
                    json!(null),
                    json!({"name": "good", "inputSchema": {"type": "object"}}),
                    json!({"name": "good", "inputSchema": {"type": "object"}, "description": "again"}),
                    json!({"name": "retried", "inputSchema": 1}),
                    json!({"name": "retried", "inputSchema": {}}),
                ],
            },
            ServerTools {
                server: "fine".into(),
                description: None,
                tools: vec![json!({"name": "ok", "inputSchema": {}})],
            },
            ServerTools {
                server: "fine".into(),
                description: None,
                tools: vec![json!({"name": "shadow", "inputSchema": {}})],
            },
        ];
        let (catalog, problems) = Catalog::build(&servers);
        let problems: Vec<String> = problems.iter().map(Problem::to_string).collect();
        expect![[r#"
            broken: tool has no name
            broken: tool name is not a string
            broken: tool "bad_schema": inputSchema is not a JSON object
            broken: tool "no_schema": tool has no inputSchema
            broken: tool is not a JSON object
            broken: tool "good": duplicate tool name; the first tool with this name is kept
            broken: tool "retried": inputSchema is not a JSON object
            fine: server listed more than once; only its first tool list is used"#]]
        .assert_eq(&problems.join("\n"));
        let names: Vec<&str> = catalog
            .tools()
            .iter()
            .map(|t| t.qualified.as_str())
            .collect();
        assert_eq!(names, ["broken__good", "broken__retried", "fine__ok"]);
        assert_eq!(
            catalog.get("broken__good").map(|t| t.description.as_str()),
            Some("")
        );
    }

    #[test]
    fn search_ranks_by_name_params_and_server_description() {
        check_search("echo", &Filter::default(), expect!["everything__echo"]);
        // `duration` is behind a `$ref`; the resolved view makes it searchable.
        check_search(
            "duration",
            &Filter::default(),
            expect!["everything__longRunningOperation"],
        );
        check_search(
            "pull requests",
            &Filter::default(),
            expect!["github__create_issue github__read_file github__search_repositories"],
        );
        check_search("zzzz", &Filter::default(), expect![""]);
    }

    #[test]
    fn search_filters_by_server_and_annotations() {
        let servers = |names: &[&str]| Filter {
            servers: Some(names.iter().map(|s| s.to_string()).collect()),
            ..Filter::default()
        };
        check_search(
            "read file",
            &servers(&["fs"]),
            expect!["fs__read_file fs__delete_file fs__move_file fs__write_file"],
        );
        check_search(
            "read file",
            &servers(&["github"]),
            expect!["github__read_file"],
        );
        check_search("read file", &servers(&[]), expect![""]);
        let read_only = Filter {
            read_only: Some(true),
            ..Filter::default()
        };
        check_search(
            "file",
            &read_only,
            expect!["fs__read_file github__read_file"],
        );
        let safe = Filter {
            destructive: Some(false),
            ..Filter::default()
        };
        check_search(
            "file",
            &safe,
            expect!["fs__move_file fs__read_file github__read_file"],
        );
        let destructive = Filter {
            destructive: Some(true),
            ..Filter::default()
        };
        check_search(
            "file",
            &destructive,
            expect!["fs__delete_file fs__write_file"],
        );
    }

    #[test]
    fn search_respects_top_k() {
        let catalog = catalog();
        assert_eq!(catalog.search("file", 2, &Filter::default()).len(), 2);
        assert!(catalog.search("file", 0, &Filter::default()).is_empty());
    }

    fn arb_filter() -> impl Strategy<Value = Filter> {
        let servers = prop::option::of(prop::collection::vec(
            prop_oneof![Just("everything"), Just("fs"), Just("github"), Just("nope")]
                .prop_map(String::from),
            0..3,
        ));
        (servers, any::<Option<bool>>(), any::<Option<bool>>()).prop_map(
            |(servers, read_only, destructive)| Filter {
                servers,
                read_only,
                destructive,
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn search_never_returns_filtered_tools(
            filter in arb_filter(),
            query in prop_oneof![Just("file"), Just("read file"), Just("echo add"), Just("repository issue"), Just("every file echo")],
        ) {
            let catalog = catalog();
            let hits = catalog.search(query, 100, &filter);
            for hit in &hits {
                prop_assert!(filter.matches(hit.tool), "{} passed {:?}", hit.tool.qualified, filter);
            }
            // Filtering narrows before ranking: every matching tool that shares a term is found.
            let unfiltered = catalog.search(query, 100, &Filter::default());
            let expected = unfiltered.iter().filter(|hit| filter.matches(hit.tool)).count();
            prop_assert_eq!(hits.len(), expected);
        }
    }

    #[test]
    fn suggest_finds_echo() {
        let mut servers = fixture();
        servers.push(ServerTools {
            server: "other".into(),
            description: None,
            tools: vec![tool("echoes", "Something else.", json!(null))],
        });
        let (catalog, _) = Catalog::build(&servers);
        let check = |unknown: &str, expect: Expect| {
            expect.assert_eq(&format!("{:?}", catalog.suggest(unknown, 3)));
        };
        check(
            "echo",
            expect![[r#"["everything__echo", "other__echoes"]"#]],
        );
        check("everything__ecko", expect![[r#"["everything__echo"]"#]]);
        check("everythng__echo", expect![[r#"["everything__echo"]"#]]);
        check(
            "read_file",
            expect![[r#"["fs__read_file", "github__read_file"]"#]],
        );
        check("nothing_like_it", expect!["[]"]);
    }

    #[test]
    fn token_costs_are_positive_stable_and_summed() {
        let a = catalog();
        let b = catalog();
        for (x, y) in a.tools().iter().zip(b.tools()) {
            assert!(x.token_cost > 0, "{}", x.qualified);
            assert_eq!(x.token_cost, y.token_cost);
        }
        let sum: usize = a.tools().iter().map(|t| t.token_cost).sum();
        assert_eq!(a.total_token_cost(), sum);
        let echo = a.get("everything__echo").map(|t| t.token_cost);
        expect!["Some(39)"].assert_eq(&format!("{echo:?}"));
    }

    #[test]
    fn names_are_stable_across_rebuilds_and_new_servers() {
        let names = |servers: &[ServerTools]| -> Vec<(String, String)> {
            let (catalog, _) = Catalog::build(servers);
            catalog
                .tools()
                .iter()
                .filter(|t| t.server != "github")
                .map(|t| {
                    (
                        format!("{}/{}", t.server, t.upstream_name),
                        t.qualified.clone(),
                    )
                })
                .collect()
        };
        let all = fixture();
        let two = &all[..2];
        let mut reordered = vec![all[2].clone()];
        reordered.extend_from_slice(two);
        assert_eq!(names(two), names(two));
        assert_eq!(names(two), names(&all));
        assert_eq!(names(two), names(&reordered));
    }
}
