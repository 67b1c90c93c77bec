//! Read before write: a model may run the first hit it gets, so unless a request asks to change
//! something, a tool that deletes or resets must not outrank a harmless one of similar
//! relevance ("what changed in my git repo" once ranked `git_reset` above `git_status`).
//!
//! A tool counts as risky when its upstream says `destructiveHint: true` (and not
//! `readOnlyHint: true`), or when its name says so (`delete_*`, `*_reset`, `drop`, ...): most
//! servers send no annotations, and the MCP default ("every unannotated tool is destructive")
//! would flag every tool alike and so change nothing. A request asks for a change when it has
//! a change verb in its base form ("delete", "reset", "update", "remember"; Chinese `删除`,
//! `修改`, ...); "what changed" or "deleted files" describe, they do not ask.
//!
//! Risky hits then move [`DEMOTION`] places down; their order among themselves, and everyone
//! else's, stays.

use retrieval::DocId;

use crate::entry::ToolEntry;

/// How many places a risky hit moves down when the request asks for no change.
pub const DEMOTION: usize = 2;

/// Verbs (base forms) of tool names that delete, reset or overwrite.
const RISKY_NAME_WORDS: &[&str] = &[
    "clear",
    "delete",
    "destroy",
    "drop",
    "erase",
    "kill",
    "overwrite",
    "prune",
    "purge",
    "remove",
    "reset",
    "revoke",
    "rm",
    "terminate",
    "truncate",
    "uninstall",
    "unlink",
    "wipe",
];

/// Words (lower case, whole) by which a request asks to change something.
const CHANGE_WORDS: &[&str] = &[
    "add",
    "append",
    "cancel",
    "change",
    "clear",
    "commit",
    "create",
    "delete",
    "destroy",
    "discard",
    "drop",
    "edit",
    "erase",
    "insert",
    "install",
    "kill",
    "modify",
    "move",
    "overwrite",
    "purge",
    "push",
    "put",
    "remember",
    "remove",
    "rename",
    "replace",
    "reset",
    "restore",
    "revert",
    "revoke",
    "rm",
    "save",
    "set",
    "stage",
    "store",
    "terminate",
    "truncate",
    "undo",
    "uninstall",
    "unstage",
    "update",
    "wipe",
    "write",
];

/// Chinese change verbs (matched anywhere: no spaces).
const CJK_CHANGE_WORDS: &[&str] = &[
    "删除", "移除", "清空", "清除", "重置", "取消", "修改", "更改", "更新", "设置", "创建", "添加",
    "写入", "保存", "记住", "撤销", "卸载",
];

/// Whether `query` asks to change something (then risky tools keep their place).
pub fn asks_for_change(query: &str) -> bool {
    let lower = query.to_lowercase();
    CJK_CHANGE_WORDS.iter().any(|word| lower.contains(word))
        || lower
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| CHANGE_WORDS.contains(&word))
}

/// Whether `tool` may delete, reset or overwrite: by its annotations or by its name.
pub fn is_risky(tool: &ToolEntry) -> bool {
    tool.risky
}

/// [`is_risky`] from a tool's upstream name and its `readOnlyHint` and `destructiveHint`.
pub(crate) fn is_risky_tool(
    name: &str,
    read_only: Option<bool>,
    destructive: Option<bool>,
) -> bool {
    if read_only == Some(true) {
        return false;
    }
    destructive == Some(true) || name_is_risky(name)
}

/// Whether a word of `name` (split at `_`, `-`, `.`, `/`, spaces and case changes) is one of
/// [`RISKY_NAME_WORDS`].
fn name_is_risky(name: &str) -> bool {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() || (c.is_uppercase() && previous_lower) {
            words.push(std::mem::take(&mut word));
        }
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        }
        previous_lower = c.is_lowercase();
    }
    words.push(word);
    words
        .iter()
        .any(|word| RISKY_NAME_WORDS.contains(&word.as_str()))
}

/// `ranked` with each doc that `risky` flags moved [`DEMOTION`] places down (a stable sort by
/// position, plus `DEMOTION + 0.5` for a risky doc), so it lands behind the harmless docs that
/// followed it and risky docs keep their order among themselves.
pub fn demote<T>(
    ranked: Vec<T>,
    doc: impl Fn(&T) -> DocId,
    risky: impl Fn(DocId) -> bool,
) -> Vec<T> {
    let mut keyed: Vec<(f32, T)> = ranked
        .into_iter()
        .enumerate()
        .map(|(at, item)| {
            let shift = if risky(doc(&item)) {
                DEMOTION as f32 + 0.5
            } else {
                0.0
            };
            (at as f32 + shift, item)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
    keyed.into_iter().map(|(_, item)| item).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::{Catalog, Filter, SearchRequest, ServerTools, Strategy};

    fn tool(name: &str, description: &str, params: &[&str]) -> Arc<Value> {
        let properties: serde_json::Map<String, Value> = params
            .iter()
            .map(|p| (p.to_string(), json!({"title": p, "type": "string"})))
            .collect();
        Arc::new(json!({
            "name": name,
            "description": description,
            "inputSchema": {"type": "object", "properties": properties, "required": params},
        }))
    }

    /// The tool lists of the reference git and memory servers (names, descriptions and
    /// parameters as they publish them; neither sends annotations).
    fn everyday() -> Catalog {
        let git = [
            (
                "git_status",
                "Shows the working tree status",
                &["repo_path"][..],
            ),
            (
                "git_diff_unstaged",
                "Shows changes in the working directory that are not yet staged",
                &["repo_path"],
            ),
            (
                "git_diff_staged",
                "Shows changes that are staged for commit",
                &["repo_path"],
            ),
            (
                "git_diff",
                "Shows differences between branches or commits",
                &["repo_path", "target"],
            ),
            (
                "git_commit",
                "Records changes to the repository",
                &["repo_path", "message"],
            ),
            (
                "git_add",
                "Adds file contents to the staging area",
                &["repo_path", "files"],
            ),
            ("git_reset", "Unstages all staged changes", &["repo_path"]),
            ("git_log", "Shows the commit logs", &["repo_path"]),
            (
                "git_create_branch",
                "Creates a new branch from an optional base branch",
                &["repo_path", "branch_name"],
            ),
            (
                "git_checkout",
                "Switches branches",
                &["repo_path", "branch_name"],
            ),
            (
                "git_show",
                "Shows the contents of a commit",
                &["repo_path", "revision"],
            ),
        ];
        let memory = [
            (
                "create_entities",
                "Create multiple new entities in the knowledge graph",
                &["entities"][..],
            ),
            (
                "add_observations",
                "Add new observations to existing entities in the knowledge graph",
                &["observations"],
            ),
            (
                "delete_entities",
                "Delete multiple entities and their associated relations from the knowledge graph",
                &["entityNames"],
            ),
            (
                "delete_observations",
                "Delete specific observations from entities in the knowledge graph",
                &["deletions"],
            ),
            ("read_graph", "Read the entire knowledge graph", &[]),
            (
                "search_nodes",
                "Search for nodes in the knowledge graph based on a query",
                &["query"],
            ),
            (
                "open_nodes",
                "Open specific nodes in the knowledge graph by their names",
                &["names"],
            ),
        ];
        let server = |name: &str, tools: &[(&str, &str, &[&str])]| ServerTools {
            server: ids::ServerName::parse(name).expect("valid name"),
            description: None,
            tools: tools.iter().map(|(n, d, p)| tool(n, d, p)).collect(),
        };
        Catalog::build(&[server("git", &git), server("memory", &memory)]).0
    }

    fn search(catalog: &Catalog, query: &str, caution: bool) -> Vec<String> {
        let queries = [query.to_string()];
        let filter = Filter::default();
        let request = SearchRequest {
            queries: &queries,
            query_vectors: None,
            strategy: Strategy::Bm25,
            hybrid: retrieval::Hybrid::default(),
            feedback: None,
            feedback_in_fusion: false,
            multilingual_vectors: false,
            top_k: 5,
            filter: &filter,
            needs: false,
            caution,
            rerank: Default::default(),
            sparse: None,
        };
        let outcome = catalog.search_with(&request);
        outcome
            .hits
            .iter()
            .map(|hit| hit.tool.upstream_name.clone())
            .collect()
    }

    #[test]
    fn a_question_about_changes_does_not_lead_with_reset() {
        // BM25 alone matches "changed" to the tools that say "changes", git_reset among them,
        // and has no word in common with git_status ("what changed" to "status" is the
        // vector side's job: crates/eval/tests/everyday.rs).
        let catalog = everyday();
        let plain = search(&catalog, "what changed in my git repo", false);
        let careful = search(&catalog, "what changed in my git repo", true);
        expect_test::expect![[
            r#"["git_commit", "git_reset", "git_diff_staged", "git_diff_unstaged", "git_log"]"#
        ]]
        .assert_eq(&format!("{plain:?}"));
        expect_test::expect![[
            r#"["git_commit", "git_diff_staged", "git_diff_unstaged", "git_reset", "git_log"]"#
        ]]
        .assert_eq(&format!("{careful:?}"));
    }

    #[test]
    fn a_request_to_reset_or_delete_keeps_the_risky_tool_first() {
        let catalog = everyday();
        assert_eq!(
            search(&catalog, "reset the staged changes", true)[0],
            "git_reset"
        );
        assert_eq!(
            search(&catalog, "delete the entity Bob", true)[0],
            "delete_entities"
        );
    }

    #[test]
    fn looking_up_memory_does_not_lead_with_deletion() {
        let catalog = everyday();
        let careful = search(
            &catalog,
            "which entities and observations are in the knowledge graph",
            true,
        );
        assert!(!careful[0].starts_with("delete"), "{careful:?}");
    }

    #[test]
    fn change_requests_are_told_from_questions() {
        for query in [
            "reset the staged files",
            "remember that Alice likes tea",
            "delete the old branch",
            "Please update my address",
            "请删除这个文件",
        ] {
            assert!(asks_for_change(query), "{query}");
        }
        for query in [
            "what changed in my git repo",
            "show deleted files",
            "what time is it in Paris",
            "查询我的订单状态",
        ] {
            assert!(!asks_for_change(query), "{query}");
        }
    }

    #[test]
    fn risky_names_are_found_in_every_naming_style() {
        for name in [
            "git_reset",
            "delete_entities",
            "dropTable",
            "Remove-Item",
            "rm",
        ] {
            assert!(name_is_risky(name), "{name}");
        }
        for name in [
            "git_status",
            "read_graph",
            "removal_policy_info",
            "get_current_time",
        ] {
            assert!(!name_is_risky(name), "{name}");
        }
    }

    #[test]
    fn demotion_moves_risky_docs_two_places_down() {
        let ranked: Vec<DocId> = vec![0, 1, 2, 3, 4];
        assert_eq!(
            demote(ranked.clone(), |d| *d, |d| d == 0),
            vec![1, 2, 0, 3, 4]
        );
        let risky = |doc: DocId| doc == 0 || doc == 1;
        assert_eq!(demote(ranked, |d| *d, risky), vec![2, 0, 3, 1, 4]);
        let tail: Vec<DocId> = vec![5, 0];
        assert_eq!(demote(tail, |d| *d, |d| d == 0), vec![5, 0]);
    }
}
