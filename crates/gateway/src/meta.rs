//! The three meta-tools of exposure mode `search`: `search_tools`, `get_tool_details`,
//! `call_tool`. Their schemas are written out by hand because they are part of the product:
//! the wording is what the model reads to decide how to use the gateway.

use std::sync::Arc;

use catalog::{Catalog, Filter};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use crate::result::tool_error;

pub(crate) const SEARCH_TOOLS: &str = "search_tools";
pub(crate) const GET_TOOL_DETAILS: &str = "get_tool_details";
pub(crate) const CALL_TOOL: &str = "call_tool";

pub(crate) const DEFAULT_TOP_K: usize = 5;
pub(crate) const MAX_TOP_K: usize = 50;

/// The meta-tools, with `search_tools` describing the servers that are searchable right now.
pub(crate) fn tools(servers: &[(String, Option<String>)]) -> Vec<Tool> {
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
                "Find tools across the MCP servers behind this gateway. Describe what you want to \
                 do in plain words (e.g. \"read a file\", \"current time in Tokyo\"); results are \
                 ranked, best first, with each tool's qualified name, server and a one-line \
                 description. Then call get_tool_details for the input schema and call_tool to \
                 run it.\n{server_list}"
            ),
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What you want to do, in plain words."},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": DEFAULT_TOP_K,
                              "description": "How many results to return."},
                    "servers": {"type": "array", "items": {"type": "string", "enum": server_names},
                                "description": "Only search these servers."}
                },
                "required": ["query"],
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

/// `search_tools`: ranked results as readable text plus `structuredContent`.
pub(crate) fn search(catalog: &Catalog, args: &Map<String, Value>) -> CallToolResult {
    let Some(query) = args.get("query").and_then(Value::as_str) else {
        return tool_error("search_tools needs a 'query' string");
    };
    let top_k = match args.get("top_k") {
        None | Some(Value::Null) => DEFAULT_TOP_K,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_TOP_K as u64).contains(&n) => n as usize,
            _ => {
                return tool_error(format!("'top_k' must be an integer from 1 to {MAX_TOP_K}"));
            }
        },
    };
    let servers = match args.get("servers") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let mut names = Vec::new();
            let known = catalog.servers();
            for item in items {
                let Some(name) = item.as_str() else {
                    return tool_error("'servers' must be a list of server names");
                };
                if !known.contains(&name) {
                    return tool_error(format!(
                        "unknown server '{name}'; searchable servers: {}",
                        known.join(", ")
                    ));
                }
                names.push(name.to_owned());
            }
            Some(names)
        }
        Some(_) => return tool_error("'servers' must be a list of server names"),
    };
    let filter = Filter {
        servers,
        ..Filter::default()
    };
    let hits = catalog.search(query, top_k, &filter);
    let results: Vec<Value> = hits
        .iter()
        .map(|hit| {
            json!({
                "name": hit.tool.qualified,
                "server": hit.tool.server,
                "description": hit.tool.one_line_description(),
                "score": (hit.score * 1000.0).round() / 1000.0,
            })
        })
        .collect();
    let text = if hits.is_empty() {
        format!(
            "No tools matched \"{query}\". Try other words, or fewer of them. Servers: {}",
            catalog.servers().join(", ")
        )
    } else {
        let lines: Vec<String> = hits
            .iter()
            .enumerate()
            .map(|(i, hit)| {
                format!(
                    "{}. {} ({}) - {}",
                    i + 1,
                    hit.tool.qualified,
                    hit.tool.server,
                    hit.tool.one_line_description()
                )
            })
            .collect();
        lines.join("\n")
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(json!({ "results": results }));
    result
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
        "inputSchema": entry.resolved_input_schema,
    });
    if let Some(title) = &entry.title {
        details["title"] = json!(title);
    }
    if let Some(schema) = &entry.output_schema {
        details["outputSchema"] = schema.clone();
    }
    if let Some(annotations) = &entry.annotations {
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
