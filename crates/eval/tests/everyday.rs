//! The requests of issue 15 against the tool lists of everyday servers (git, memory, time, with
//! their published names, descriptions, parameters and annotations), searched as the gateway
//! searches by default: hybrid with all-MiniLM-L6-v2.
//!
//! Needs the model files (`scripts/fetch-models.sh`); a missing model fails with that
//! instruction, as in `embed`'s model tests.

use std::sync::Arc;

use catalog::{Catalog, Filter, SearchRequest, ServerTools, Strategy};
use embed::local::{self, LocalModel};
use embed::{Embedder, TextKind};
use serde_json::{Value, json};

/// `(name, description, [(parameter, description)], annotations)`.
type ToolSpec<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], Value);

fn tool((name, description, params, annotations): &ToolSpec<'_>) -> Arc<Value> {
    let properties: serde_json::Map<String, Value> = params
        .iter()
        .map(|(p, d)| (p.to_string(), json!({"type": "string", "description": d})))
        .collect();
    let required: Vec<&str> = params.iter().map(|(p, _)| *p).collect();
    let mut tool = json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": required},
    });
    if !annotations.is_null() {
        tool["annotations"] = annotations.clone();
    }
    Arc::new(tool)
}

fn server(name: &str, tools: &[ToolSpec<'_>]) -> ServerTools {
    ServerTools {
        server: ids::ServerName::parse(name).expect("valid name"),
        description: None,
        tools: tools.iter().map(tool).collect(),
    }
}

/// The reference git server's tools (it sends no annotations).
fn git() -> ServerTools {
    let repo: &[(&str, &str)] = &[("repo_path", "")];
    let none = Value::Null;
    let git = [
        (
            "git_status",
            "Shows the working tree status",
            repo,
            none.clone(),
        ),
        (
            "git_diff_unstaged",
            "Shows changes in the working directory that are not yet staged",
            repo,
            none.clone(),
        ),
        (
            "git_diff_staged",
            "Shows changes that are staged for commit",
            repo,
            none.clone(),
        ),
        (
            "git_diff",
            "Shows differences between branches or commits",
            &[("repo_path", ""), ("target", "")],
            none.clone(),
        ),
        (
            "git_commit",
            "Records changes to the repository",
            &[("repo_path", ""), ("message", "")],
            none.clone(),
        ),
        (
            "git_add",
            "Adds file contents to the staging area",
            &[("repo_path", ""), ("files", "")],
            none.clone(),
        ),
        (
            "git_reset",
            "Unstages all staged changes",
            repo,
            none.clone(),
        ),
        ("git_log", "Shows the commit logs", repo, none.clone()),
        (
            "git_create_branch",
            "Creates a new branch from an optional base branch",
            &[("repo_path", ""), ("branch_name", "")],
            none.clone(),
        ),
        (
            "git_checkout",
            "Switches branches",
            &[("repo_path", ""), ("branch_name", "")],
            none.clone(),
        ),
        (
            "git_show",
            "Shows the contents of a commit",
            &[("repo_path", ""), ("revision", "")],
            none.clone(),
        ),
        (
            "git_branch",
            "List Git branches",
            &[("repo_path", "The path to the Git repository.")],
            none.clone(),
        ),
    ];
    server("git", &git)
}

/// The reference memory server's tools, with its annotations.
fn memory() -> ServerTools {
    let write = json!({"readOnlyHint": false, "destructiveHint": false});
    let delete = json!({"readOnlyHint": false, "destructiveHint": true});
    let read = json!({"readOnlyHint": true, "destructiveHint": false});
    let memory = [
        (
            "create_entities",
            "Create multiple new entities in the knowledge graph",
            &[("entities", "")][..],
            write.clone(),
        ),
        (
            "create_relations",
            "Create multiple new relations between entities in the knowledge graph. Relations should be in active voice",
            &[("relations", "")],
            write.clone(),
        ),
        (
            "add_observations",
            "Add new observations to existing entities in the knowledge graph",
            &[("observations", "")],
            write,
        ),
        (
            "delete_entities",
            "Delete multiple entities and their associated relations from the knowledge graph",
            &[("entityNames", "An array of entity names to delete")],
            delete.clone(),
        ),
        (
            "delete_observations",
            "Delete specific observations from entities in the knowledge graph",
            &[("deletions", "")],
            delete.clone(),
        ),
        (
            "delete_relations",
            "Delete multiple relations from the knowledge graph",
            &[("relations", "An array of relations to delete")],
            delete,
        ),
        (
            "read_graph",
            "Read the entire knowledge graph",
            &[],
            read.clone(),
        ),
        (
            "search_nodes",
            "Search for nodes in the knowledge graph based on a query",
            &[(
                "query",
                "The search query to match against entity names, types, and observation content",
            )],
            read.clone(),
        ),
        (
            "open_nodes",
            "Open specific nodes in the knowledge graph by their names",
            &[("names", "An array of entity names to retrieve")],
            read,
        ),
    ];
    server("memory", &memory)
}

/// The reference time server's tools.
fn time() -> ServerTools {
    let none = Value::Null;
    let time = [
        (
            "get_current_time",
            "Get current time in a specific timezones",
            &[(
                "timezone",
                "IANA timezone name (e.g., 'America/New_York', 'Europe/London'). Use 'UTC' as local timezone if no timezone provided by the user.",
            )][..],
            none.clone(),
        ),
        (
            "convert_time",
            "Convert time between timezones",
            &[
                (
                    "source_timezone",
                    "Source IANA timezone name (e.g., 'America/New_York', 'Europe/London'). Use 'UTC' as local timezone if no source timezone provided by the user.",
                ),
                ("time", "Time to convert in 24-hour format (HH:MM)"),
                (
                    "target_timezone",
                    "Target IANA timezone name (e.g., 'Asia/Tokyo', 'America/San_Francisco'). Use 'UTC' as local timezone if no target timezone provided by the user.",
                ),
            ],
            none,
        ),
    ];
    server("time", &time)
}

fn servers() -> Vec<ServerTools> {
    vec![git(), memory(), time()]
}

struct Everyday {
    catalog: Catalog,
    model: Arc<dyn Embedder>,
}

impl Everyday {
    /// The catalog with vectors as the gateway makes them by default: MiniLM blended with
    /// potion-base-8M, each tool's head and parameters embedded apart.
    async fn load() -> Everyday {
        let load = |model: LocalModel| match local::load(model, None) {
            Ok(model) => model,
            Err(error) => panic!("{model} is not installed: run scripts/fetch-models.sh ({error})"),
        };
        let defaults = config::RetrievalConfig::default();
        let model: Arc<dyn Embedder> = match &defaults.embedder {
            config::EmbedderConfig::Local {
                blend: Some(blend), ..
            } => Arc::new(
                embed::Blend::new(
                    load(LocalModel::MiniLmL6V2),
                    load(blend.model.parse().expect("a local model")),
                    blend.weight,
                )
                .expect("the default weight"),
            ),
            _ => load(LocalModel::MiniLmL6V2),
        };
        let (catalog, problems) = Catalog::build(&servers());
        assert!(problems.is_empty(), "{problems:?}");
        let vectors = if defaults.field_vectors {
            let fields = catalog.embedding_fields(None);
            let vectors = model
                .embed(&fields.texts, TextKind::Passage)
                .await
                .expect("tools embed");
            fields.combine(vectors, catalog::FIELD_WEIGHT)
        } else {
            model
                .embed(&catalog.embedding_texts(), TextKind::Passage)
                .await
                .expect("tools embed")
        };
        let catalog = catalog
            .with_vectors(model.id().to_string(), vectors)
            .expect("vectors attach");
        Everyday { catalog, model }
    }

    /// The upstream names of the top 5, as the gateway ranks them by default.
    async fn search(&self, query: &str, caution: bool) -> Vec<String> {
        let queries = [query.to_string()];
        let vectors = self
            .model
            .embed(&queries, TextKind::Query)
            .await
            .expect("query embeds");
        let defaults = config::RetrievalConfig::default();
        let filter = Filter::default();
        let request = SearchRequest {
            queries: &queries,
            query_vectors: Some(&vectors),
            strategy: Strategy::Hybrid,
            hybrid: retrieval::Hybrid {
                balance: defaults.balance,
                min_similarity: defaults.min_similarity,
                adaptive: defaults.adaptive.then(retrieval::Adaptive::default),
                fusion: match defaults.fusion {
                    config::Fusion::Scores => retrieval::Fusion::Scores,
                    config::Fusion::Ranks => retrieval::Fusion::default(),
                },
            },
            feedback: defaults.feedback.then(retrieval::Feedback::default),
            feedback_in_fusion: false,
            multilingual_vectors: false,
            top_k: 5,
            filter: &filter,
            needs: false,
            caution,
            rerank: catalog::Rerank {
                vector_feedback: defaults.vector_feedback.then_some(catalog::VECTOR_FEEDBACK),
                ..Default::default()
            },
            sparse: None,
        };
        let outcome = self.catalog.search_with(&request);
        assert!(outcome.degraded.is_none(), "{:?}", outcome.degraded);
        outcome
            .hits
            .iter()
            .map(|hit| hit.tool.upstream_name.clone())
            .collect()
    }
}

fn rank(hits: &[String], name: &str) -> usize {
    hits.iter()
        .position(|hit| hit == name)
        .unwrap_or(usize::MAX)
}

#[tokio::test]
async fn a_question_ranks_read_only_tools_above_reset_and_delete() {
    let everyday = Everyday::load().await;
    // The diffs answer the question; git_reset ("Unstages all staged changes") shares its
    // words and ranks first without caution. git_status ("Shows the working tree status") is
    // not in the top 5 either way: "changed" and "status" meet neither in BM25 nor in the
    // vectors, which ordering cannot fix. Since round six git_commit ("Records changes to the
    // repository") ranks first once git_reset moves down: the blended static model matches
    // "changes" and "repository" word for word (docs/retrieval.md, round six). It writes but
    // deletes nothing, so caution leaves it; git_reset moves its two places, below a diff.
    let plain = everyday.search("what changed in my git repo", false).await;
    let changed = everyday.search("what changed in my git repo", true).await;
    assert!(rank(&plain, "git_reset") < 3, "{plain:?}");
    assert_eq!(
        rank(&changed, "git_reset"),
        rank(&plain, "git_reset") + catalog::caution::DEMOTION,
        "{plain:?} {changed:?}"
    );
    assert!(
        rank(&changed, "git_diff_unstaged") < rank(&changed, "git_reset"),
        "{changed:?}"
    );
    let graph = everyday.search("what do you know about Alice", true).await;
    assert!(!graph[0].starts_with("delete"), "{graph:?}");
}

#[tokio::test]
async fn a_request_to_change_keeps_the_tool_that_changes() {
    let everyday = Everyday::load().await;
    let reset = everyday
        .search("unstage everything I staged in the git repo", true)
        .await;
    assert!(rank(&reset, "git_reset") < 3, "{reset:?}");
    let delete = everyday
        .search("delete the entity Bob from memory", true)
        .await;
    assert_eq!(delete[0], "delete_entities", "{delete:?}");
}

#[tokio::test]
async fn a_question_for_the_time_somewhere_gets_the_current_time_first() {
    // Round two found convert_time above get_current_time here: BM25 has the two nearly tied
    // and rank fusion counts that tie as a full place (with round three's defaults the two are
    // level within 0.0001); score fusion weighs the gap, and the vector list has
    // get_current_time clearly first (docs/retrieval.md, round five).
    let everyday = Everyday::load().await;
    let hits = everyday.search("what time is it in Paris", true).await;
    assert_eq!(hits[0], "get_current_time", "{hits:?}");
}
