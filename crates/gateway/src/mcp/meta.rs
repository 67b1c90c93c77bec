//! The three meta-tools of exposure mode `search`: `search_tools`, `get_tool_details`,
//! `call_tool`. Their schemas are written out by hand because they are part of the product:
//! the wording is what the model reads to decide how to use the gateway.

use std::sync::Arc;

use catalog::{Catalog, Filter};
use ids::ServerName;

use crate::{search::Found, search::Search};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use crate::mcp::result::tool_error;

pub(crate) const SEARCH_TOOLS: &str = "search_tools";
pub(crate) const GET_TOOL_DETAILS: &str = "get_tool_details";
pub(crate) const CALL_TOOL: &str = "call_tool";

pub(crate) const DEFAULT_TOP_K: usize = 5;
pub(crate) const MAX_TOP_K: usize = 50;
pub(crate) const MAX_QUERIES: usize = 10;
/// What `search_tools`' `include` may name.
const INCLUDE: [&str; 3] = ["tools", "resources", "prompts"];

/// The meta-tools, with `search_tools` describing the servers that are searchable right now.
pub(crate) fn tools(servers: &[(ServerName, Option<String>)]) -> Vec<Tool> {
    let server_list = if servers.is_empty() {
        "No servers are connected yet.".to_owned()
    } else {
        let lines: Vec<String> = servers
            .iter()
            .map(|(name, description)| match description {
                Some(d) if !d.is_empty() => format!("- {name}: {d}"),
                _ => format!("- {name}"),
            })
            .collect();
        format!("Searchable servers:\n{}", lines.join("\n"))
    };
    let server_names: Vec<&str> = servers.iter().map(|(n, _)| n.as_str()).collect();
    vec![
        tool(
            SEARCH_TOOLS,
            &format!(
                "Find tools across the MCP servers behind this gateway. Results are ranked, best \
                 first, each with its signature (qualified name and parameters with their types, \
                 `?` after an optional one, `…` where some were left out), [read-only] or \
                 [destructive] when the server says so, its server and a one-line description. \
                 When the signature says enough, run the tool with call_tool right away; \
                 otherwise call get_tool_details for its full input schema first.\n\
                 Write the query as the capability you need in plain words, with its key verbs \
                 and nouns (\"create a calendar event\", \"read a file\", \"current time in a \
                 timezone\"), in English where possible; not the user's whole request. When a \
                 task needs several capabilities, pass them together in `queries` (one per \
                 capability) instead of calling search_tools several times.\n{server_list}"
            ),
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The capability you need, in plain words."},
                    "queries": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_QUERIES,
                                "description": "Several capabilities at once; results are fused into one ranking."},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": DEFAULT_TOP_K,
                              "description": "How many results to return."},
                    "servers": {"type": "array", "items": {"type": "string", "enum": server_names},
                                "description": "Only search these servers."},
                    "read_only": {"type": "boolean", "description": "true: only tools that do not modify anything; false: only tools that do."},
                    "destructive": {"type": "boolean", "description": "false: leave out tools that may delete or overwrite data."},
                    "include": {"type": "array", "items": {"type": "string", "enum": INCLUDE}, "minItems": 1, "uniqueItems": true,
                                "description": "What to search; default [\"tools\"]. Resources (read with resources/read) and prompts (prompts/get) come back in lists of their own."}
                },
                "additionalProperties": false
            }),
        ),
        tool(
            GET_TOOL_DETAILS,
            "Get a tool's full description, input schema (references resolved), output schema \
             and annotations, by the qualified name search_tools returned.",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Qualified tool name, e.g. server__tool."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
        ),
        tool(
            CALL_TOOL,
            "Run a tool found with search_tools. Pass its qualified name and the arguments its \
             input schema asks for. The result is the upstream server's output, unchanged except \
             for a marker that it is untrusted data.",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Qualified tool name, e.g. server__tool."},
                    "arguments": {"type": "object", "description": "Arguments for the tool, as its input schema describes."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
        ),
    ]
}

fn tool(name: &'static str, description: &str, schema: Value) -> Tool {
    let schema = match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let mut tool = Tool::new(name, description.to_owned(), Arc::new(schema));
    if name != CALL_TOOL {
        let mut annotations = ToolAnnotations::default();
        annotations.read_only_hint = Some(true);
        annotations.open_world_hint = Some(false);
        tool.annotations = Some(annotations);
    }
    tool
}

/// `search_tools`' `query` and `queries`, together: at least one, at most [`MAX_QUERIES`].
fn search_queries(args: &Map<String, Value>) -> Result<Vec<String>, CallToolResult> {
    let mut queries = Vec::new();
    match args.get("query") {
        None | Some(Value::Null) => {}
        Some(Value::String(q)) if !q.trim().is_empty() => queries.push(q.clone()),
        Some(_) => return Err(tool_error("'query' must be a non-empty string")),
    }
    match args.get("queries") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                match item.as_str() {
                    Some(q) if !q.trim().is_empty() => queries.push(q.to_owned()),
                    _ => return Err(tool_error("'queries' must be a list of non-empty strings")),
                }
            }
        }
        Some(_) => return Err(tool_error("'queries' must be a list of strings")),
    }
    if queries.is_empty() {
        return Err(tool_error(
            "search_tools needs a 'query' (or 'queries'): the capability you need, in plain words",
        ));
    }
    if queries.len() > MAX_QUERIES {
        return Err(tool_error(format!("at most {MAX_QUERIES} queries at once")));
    }
    Ok(queries)
}

/// Reads `search_tools` arguments; a bad argument is a tool error the model can correct.
/// `known` are the servers the caller may search.
pub(crate) fn parse_search(
    known: &[&str],
    args: &Map<String, Value>,
) -> Result<Search, CallToolResult> {
    let queries = search_queries(args)?;
    let top_k = match args.get("top_k") {
        None | Some(Value::Null) => DEFAULT_TOP_K,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_TOP_K as u64).contains(&n) => n as usize,
            _ => {
                return Err(tool_error(format!(
                    "'top_k' must be an integer from 1 to {MAX_TOP_K}"
                )));
            }
        },
    };
    let servers = match args.get("servers") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let mut names = Vec::new();
            for item in items {
                let Some(name) = item.as_str() else {
                    return Err(tool_error("'servers' must be a list of server names"));
                };
                if !known.contains(&name) {
                    return Err(tool_error(format!(
                        "unknown server '{name}'; searchable servers: {}",
                        known.join(", ")
                    )));
                }
                names.push(name.to_owned());
            }
            Some(names)
        }
        Some(_) => return Err(tool_error("'servers' must be a list of server names")),
    };
    let flag = |name: &str| -> Result<Option<bool>, CallToolResult> {
        match args.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(tool_error(format!("'{name}' must be true or false"))),
        }
    };
    Ok(Search {
        queries,
        top_k,
        filter: Filter {
            servers,
            read_only: flag("read_only")?,
            destructive: flag("destructive")?,
            tools: None,
        },
        explain: false,
        strategy: None,
    })
}

/// What one `search_tools` call searches (`include`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Include {
    pub tools: bool,
    pub resources: bool,
    pub prompts: bool,
}

/// Reads `search_tools`' `include`: tools only when absent.
pub(crate) fn parse_include(args: &Map<String, Value>) -> Result<Include, CallToolResult> {
    let wrong = || {
        tool_error(format!(
            "'include' must be a non-empty list of {}",
            INCLUDE.join(", ")
        ))
    };
    let items = match args.get("include") {
        None | Some(Value::Null) => {
            return Ok(Include {
                tools: true,
                resources: false,
                prompts: false,
            });
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(_) => return Err(wrong()),
    };
    let mut include = Include {
        tools: false,
        resources: false,
        prompts: false,
    };
    for item in items {
        match item.as_str() {
            Some("tools") => include.tools = true,
            Some("resources") => include.resources = true,
            Some("prompts") => include.prompts = true,
            _ => return Err(wrong()),
        }
    }
    Ok(include)
}

/// `search_tools`' answer when `include` names more than tools: the tools' answer when they
/// were searched (`found`), then the resource and prompt hits that were asked for, as text and
/// as `resources` / `prompts` beside `results` in `structuredContent`.
pub(crate) fn render_search_including(
    known: &[&str],
    search: &Search,
    found: Option<&Found>,
    resources: Option<Vec<Value>>,
    prompts: Option<Vec<Value>>,
) -> CallToolResult {
    let (mut text, mut structured) = match found {
        Some(found) => {
            let result = render_search(known, search, found);
            let text = result
                .content
                .first()
                .and_then(|block| block.as_text())
                .map(|text| text.text.clone())
                .unwrap_or_default();
            (
                vec![text],
                result.structured_content.unwrap_or_else(|| json!({})),
            )
        }
        None => (Vec::new(), json!({ "results": [] })),
    };
    let sections = [
        ("resources", "Resources", resources),
        ("prompts", "Prompts", prompts),
    ];
    for (key, heading, hits) in sections {
        let Some(hits) = hits else { continue };
        if hits.is_empty() {
            text.push(format!("No {key} matched."));
        } else {
            let lines: Vec<String> = hits
                .iter()
                .enumerate()
                .map(|(i, hit)| {
                    let id = hit
                        .get("uri")
                        .or_else(|| hit.get("uriTemplate"))
                        .or_else(|| hit.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let about = hit
                        .get("description")
                        .or_else(|| hit.get("title"))
                        .or_else(|| hit.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let server = hit
                        .get("server")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    format!("{}. {id} ({server}) - {about}", i + 1)
                })
                .collect();
            text.push(format!("{heading}:\n{}", lines.join("\n")));
        }
        structured[key] = Value::Array(hits);
    }
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.join("\n\n"))]);
    result.structured_content = Some(structured);
    result
}

/// `search_tools`' answer: ranked results as readable text plus `structuredContent`.
/// `known` are the servers the caller may search.
pub(crate) fn render_search(known: &[&str], search: &Search, found: &Found) -> CallToolResult {
    let results: Vec<Value> = found
        .hits
        .iter()
        .map(|hit| {
            let mut result = json!({
                "name": hit.name,
                "server": hit.server,
                "signature": hit.signature,
                "description": hit.description,
                "score": (f64::from(hit.score) * 10_000.0).round() / 10_000.0,
            });
            if let Some(effects) = hit.effects {
                result["effects"] = json!(effects);
            }
            result
        })
        .collect();
    let text = if found.hits.is_empty() {
        format!(
            "No tools matched {}. Try other words, or fewer of them. Servers: {}",
            search
                .queries
                .iter()
                .map(|q| format!("\"{q}\""))
                .collect::<Vec<_>>()
                .join(", "),
            known.join(", ")
        )
    } else {
        found
            .hits
            .iter()
            .enumerate()
            .map(|(i, hit)| {
                let effects = hit.effects.map(|e| format!(" [{e}]")).unwrap_or_default();
                format!(
                    "{}. {}{effects} ({}) - {}",
                    i + 1,
                    hit.signature,
                    hit.server,
                    hit.description
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut text = text;
    if found.hits.is_empty() && found.held > 0 {
        let (count, verb) = match found.held {
            1 => ("1 tool is".to_owned(), "its definition"),
            n => (format!("{n} tools are"), "their definitions"),
        };
        text.push_str(&format!(
            "\n{count} held for approval because {verb} changed since first trusted, so not searchable. The operator can review them with `mcpgw tools held` and approve them with `mcpgw tools approve NAME`."
        ));
    }
    if !found.starting.is_empty() {
        text.push_str(&format!(
            "\nStill starting, so not searched yet: {}. Their tools join when they are ready; search again in a moment.",
            found.starting.join(", ")
        ));
    }
    let mut structured = json!({ "results": results, "strategy": found.strategy.as_str() });
    if let Some(reason) = &found.degraded {
        structured["degraded"] = json!(reason);
    }
    if !found.starting.is_empty() {
        structured["starting"] = json!(found.starting);
    }
    if found.held > 0 {
        structured["held"] = json!(found.held);
    }
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// The unknown-tool message for `name`, suggesting only tools `keep` lets through (the
/// caller's profile): a hidden tool is never named.
pub(crate) fn unknown_tool_message_where(
    catalog: &Catalog,
    name: &str,
    keep: &dyn Fn(&catalog::ToolEntry) -> bool,
) -> String {
    let suggestions = catalog.suggest_where(name, 5, keep);
    if suggestions.is_empty() {
        format!("unknown tool '{name}'; use search_tools to find tools")
    } else {
        format!(
            "unknown tool '{name}'; did you mean: {}",
            suggestions.join(", ")
        )
    }
}

/// `get_tool_details`: everything a model needs to call the tool correctly.
pub(crate) fn details(catalog: &Catalog, args: &Map<String, Value>) -> CallToolResult {
    let Some(name) = args.get("name").and_then(Value::as_str) else {
        return tool_error("get_tool_details needs a 'name' string");
    };
    let Some(entry) = catalog.get(name) else {
        return unknown_tool(catalog, name);
    };
    let mut details = json!({
        "name": entry.qualified,
        "server": entry.server,
        "description": entry.description,
        "inputSchema": entry.resolved_input_schema(),
    });
    if let Some(title) = &entry.title {
        details["title"] = json!(title);
    }
    if let Some(schema) = entry.output_schema() {
        details["outputSchema"] = schema.clone();
    }
    if let Some(annotations) = entry.annotations() {
        details["annotations"] = annotations.clone();
    }
    let text = serde_json::to_string_pretty(&details).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(details);
    result
}

/// The error a model sees for a name that is not in the catalog, with the closest names.
pub(crate) fn unknown_tool(catalog: &Catalog, name: &str) -> CallToolResult {
    tool_error(unknown_tool_message(catalog, name))
}

pub(crate) fn unknown_tool_message(catalog: &Catalog, name: &str) -> String {
    let suggestions = catalog.suggest(name, 5);
    if suggestions.is_empty() {
        format!("unknown tool '{name}'; use search_tools to find tools")
    } else {
        format!(
            "unknown tool '{name}'; did you mean: {}",
            suggestions.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn include(value: Value) -> Result<Include, String> {
        let args = match value {
            Value::Null => Map::new(),
            value => Map::from_iter([("include".to_owned(), value)]),
        };
        parse_include(&args).map_err(|error| format!("{:?}", error.content))
    }

    #[test]
    fn include_defaults_to_tools_and_refuses_unknown_kinds() {
        let only = |tools, resources, prompts| {
            Ok(Include {
                tools,
                resources,
                prompts,
            })
        };
        assert_eq!(include(Value::Null), only(true, false, false));
        assert_eq!(
            include(json!(["prompts", "resources"])),
            only(false, true, true)
        );
        assert_eq!(
            include(json!(["tools", "prompts"])),
            only(true, false, true)
        );
        for bad in [json!([]), json!("tools"), json!(["skills"]), json!([1])] {
            let error = include(bad.clone()).expect_err("refused");
            assert!(
                error.contains("'include' must be a non-empty list of tools, resources, prompts"),
                "{bad}: {error}"
            );
        }
    }
}
