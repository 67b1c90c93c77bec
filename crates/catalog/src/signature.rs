//! A tool's compact signature for search results: `git__git_status(repo_path: string)`, with
//! `?` after an optional parameter, so a model can usually call a tool it found straight away
//! instead of asking `get_tool_details` for the whole schema first (one model turn less).
//!
//! The signature is built from the resolved input schema and kept within [`MAX_CHARS`]
//! characters (about 40 cl100k tokens): required parameters come first, optional ones are
//! dropped first, then trailing required ones, and what was left out shows as `…`, the cue to
//! ask for the details.

use serde_json::Value;

use crate::entry::ToolEntry;
use crate::search::properties;

/// Longest signature, in characters.
pub const MAX_CHARS: usize = 160;

/// `name(param: type, optional?: type, …)` of `tool`, at most [`MAX_CHARS`] characters (a
/// name too long for that is cut as well, ending in `…`).
pub fn signature(tool: &ToolEntry) -> String {
    let schema = tool.resolved_input_schema();
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut params: Vec<(String, bool)> = properties(schema)
        .map(|(name, schema)| {
            let needed = required.contains(&name);
            let mark = if needed { "" } else { "?" };
            (format!("{name}{mark}: {}", type_of(schema)), needed)
        })
        .collect();
    // Required parameters first: they are what a call cannot do without.
    params.sort_by_key(|(_, needed)| !needed);
    let name = tool.qualified.as_str();
    let fits = |kept: &[&String], cut: bool| {
        let ellipsis = if cut { 3 } else { 0 };
        let chars: usize = kept.iter().map(|p| p.chars().count() + 2).sum();
        name.chars().count() + 2 + chars + ellipsis <= MAX_CHARS
    };
    let mut kept: Vec<&String> = params.iter().map(|(p, _)| p).collect();
    let mut cut = false;
    for drop_required in [false, true] {
        while !fits(&kept, cut) {
            let last = params
                .iter()
                .rposition(|(p, needed)| *needed == drop_required && kept.contains(&p));
            let Some(at) = last else { break };
            kept.retain(|p| *p != &params[at].0);
            cut = true;
        }
    }
    let mut list: Vec<&str> = kept.iter().map(|p| p.as_str()).collect();
    if cut {
        list.push("…");
    }
    let text = format!("{name}({})", list.join(", "));
    if text.chars().count() <= MAX_CHARS {
        return text;
    }
    let cut: String = text.chars().take(MAX_CHARS - 1).collect();
    format!("{cut}…")
}

/// A parameter's type in a word or two: `string`, `integer`, `string[]`, `"a"|"b"` for a short
/// enum, `string|null` for a union, `any` when the schema does not say.
fn type_of(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let words: Vec<String> = values.iter().map(Value::to_string).collect();
        let joined = words.join("|");
        if values.len() <= 4 && joined.chars().count() <= 40 {
            return joined;
        }
    }
    match schema.get("type") {
        Some(Value::String(kind)) if kind == "array" => {
            let item = schema.get("items").map_or("any".to_string(), type_of);
            if item.contains('|') {
                format!("({item})[]")
            } else {
                format!("{item}[]")
            }
        }
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ => match schema.get("anyOf").or_else(|| schema.get("oneOf")) {
            Some(Value::Array(options)) => {
                options.iter().map(type_of).collect::<Vec<_>>().join("|")
            }
            _ => "any".to_string(),
        },
    }
}

/// What the tool's annotations say about its effects, in words: `read-only` or `destructive`
/// (only when the upstream says so; an unannotated tool gets neither).
pub fn effects(tool: &ToolEntry) -> Option<&'static str> {
    match (tool.read_only(), tool.destructive()) {
        (Some(true), _) => Some("read-only"),
        (_, Some(true)) => Some("destructive"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use expect_test::{Expect, expect};
    use serde_json::json;

    use super::*;
    use crate::{Catalog, ServerTools};

    fn check(tool: Value, expect: Expect) {
        let server = ServerTools {
            server: ids::ServerName::parse("git").expect("valid"),
            description: None,
            tools: vec![Arc::new(tool)],
        };
        let (catalog, problems) = Catalog::build(&[server]);
        assert!(problems.is_empty(), "{problems:?}");
        let tool = &catalog.tools()[0];
        let shown = format!("{} {:?}", signature(tool), effects(tool));
        assert!(signature(tool).chars().count() <= MAX_CHARS);
        expect.assert_eq(&shown);
    }

    #[test]
    fn signatures_name_types_and_mark_optional_parameters() {
        check(
            json!({"name": "git_status", "inputSchema": {"type": "object",
                "properties": {"repo_path": {"type": "string"}}, "required": ["repo_path"]},
                "annotations": {"readOnlyHint": true}}),
            expect![[r#"git__git_status(repo_path: string) Some("read-only")"#]],
        );
        check(
            json!({"name": "git_log", "inputSchema": {"type": "object", "properties": {
                "repo_path": {"type": "string"}, "max_count": {"type": "integer", "default": 10},
                "branch_type": {"enum": ["local", "remote", "all"]},
                "files": {"type": "array", "items": {"type": "string"}},
                "since": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                "required": ["repo_path"]}}),
            expect![[
                r#"git__git_log(repo_path: string, branch_type?: "local"|"remote"|"all", files?: string[], max_count?: integer, since?: string|null) None"#
            ]],
        );
        check(
            json!({"name": "git_reset", "inputSchema": {"type": "object"},
                "annotations": {"destructiveHint": true}}),
            expect![[r#"git__git_reset() Some("destructive")"#]],
        );
    }

    #[test]
    fn long_signatures_drop_optional_parameters_first() {
        let mut properties = serde_json::Map::new();
        for i in 0..12 {
            properties.insert(format!("option_number_{i}"), json!({"type": "string"}));
        }
        properties.insert("query".into(), json!({"type": "string"}));
        check(
            json!({"name": "search", "inputSchema": {"type": "object", "properties": properties,
                "required": ["query"]}}),
            expect![
                "git__search(query: string, option_number_0?: string, option_number_1?: string, option_number_10?: string, option_number_11?: string, …) None"
            ],
        );
    }
}
