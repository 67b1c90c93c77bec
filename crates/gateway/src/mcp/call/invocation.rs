//! The first step of a `tools/call`: what the client asked for, read once. The tool name and
//! the arguments are parsed here and nowhere else; every later step (the rate limit's audit
//! record, resolution, the meta-tools) works from the [`Invocation`].

use serde_json::{Map, Value};

use crate::mcp::meta;

/// What one `tools/call` asks for.
#[derive(Debug, PartialEq)]
pub(crate) enum Invocation {
    /// `search_tools`, in search exposure.
    Search(Map<String, Value>),
    /// `get_tool_details`, in search exposure.
    Details(Map<String, Value>),
    /// A catalog tool, called by its own name or through `call_tool`.
    Tool(ToolCall),
    /// A `call_tool` whose input does not name a tool to run.
    Malformed(Malformed),
}

/// A call of one catalog tool.
#[derive(Debug, PartialEq)]
pub(crate) struct ToolCall {
    /// The name as the client gave it (qualified, or bare under `prefix = "when-needed"`).
    pub name: String,
    pub arguments: Option<Map<String, Value>>,
    pub via: Via,
}

/// How the client reached the tool, which decides how a refusal reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// By its own name (passthrough, or a name cached from `get_tool_details`): an unknown
    /// name is a JSON-RPC `-32602` error, and an upstream's JSON-RPC error passes through as
    /// that error, as it would without the gateway.
    Direct,
    /// Through the `call_tool` meta-tool: every refusal is a tool error the model can read.
    CallTool,
}

/// Why a `call_tool` input names no tool to run.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// No `name` string.
    NoName,
    /// `arguments` is present and not an object (nor null).
    ArgumentsNotObject,
}

impl Invocation {
    /// Reads the tool name and arguments of a `tools/call`. The meta-tool names mean the
    /// meta-tools only when the caller's exposure is search; otherwise they are catalog names
    /// like any other.
    pub(crate) fn parse(
        name: &str,
        arguments: Option<Map<String, Value>>,
        search_exposure: bool,
    ) -> Invocation {
        let direct = |arguments| {
            Invocation::Tool(ToolCall {
                name: name.to_owned(),
                arguments,
                via: Via::Direct,
            })
        };
        if !search_exposure {
            return direct(arguments);
        }
        match name {
            meta::SEARCH_TOOLS => Invocation::Search(arguments.unwrap_or_default()),
            meta::GET_TOOL_DETAILS => Invocation::Details(arguments.unwrap_or_default()),
            meta::CALL_TOOL => Self::call_tool(arguments.unwrap_or_default()),
            _ => direct(arguments),
        }
    }

    fn call_tool(mut input: Map<String, Value>) -> Invocation {
        let Some(Value::String(name)) = input.remove("name") else {
            return Invocation::Malformed(Malformed::NoName);
        };
        let arguments = match input.remove("arguments") {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(_) => return Invocation::Malformed(Malformed::ArgumentsNotObject),
        };
        Invocation::Tool(ToolCall {
            name,
            arguments,
            via: Via::CallTool,
        })
    }

    /// The catalog tool this invocation is about, if any (what a rate-limited call's audit
    /// record names).
    pub(crate) fn tool(&self) -> Option<&ToolCall> {
        match self {
            Invocation::Tool(tool) => Some(tool),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn meta_tool_names_are_meta_tools_only_in_search_exposure() {
        let args = object(json!({"query": "weather"}));
        assert_eq!(
            Invocation::parse("search_tools", Some(args.clone()), true),
            Invocation::Search(args.clone())
        );
        assert_eq!(
            Invocation::parse("search_tools", Some(args.clone()), false),
            Invocation::Tool(ToolCall {
                name: "search_tools".into(),
                arguments: Some(args),
                via: Via::Direct,
            })
        );
        assert_eq!(
            Invocation::parse("get_tool_details", None, true),
            Invocation::Details(Map::new())
        );
    }

    #[test]
    fn call_tool_unwraps_the_name_and_arguments_once() {
        let input = object(json!({"name": "time__now", "arguments": {"zone": "UTC"}}));
        assert_eq!(
            Invocation::parse("call_tool", Some(input), true),
            Invocation::Tool(ToolCall {
                name: "time__now".into(),
                arguments: Some(object(json!({"zone": "UTC"}))),
                via: Via::CallTool,
            })
        );
        let null_arguments = object(json!({"name": "time__now", "arguments": null}));
        let parsed = Invocation::parse("call_tool", Some(null_arguments), true);
        assert_eq!(parsed.tool().map(|t| t.arguments.is_none()), Some(true));
    }

    #[test]
    fn a_call_tool_without_a_usable_name_or_arguments_is_malformed() {
        for input in [json!({}), json!({"name": 7}), json!({"arguments": {}})] {
            assert_eq!(
                Invocation::parse("call_tool", Some(object(input)), true),
                Invocation::Malformed(Malformed::NoName)
            );
        }
        assert_eq!(
            Invocation::parse("call_tool", None, true),
            Invocation::Malformed(Malformed::NoName)
        );
        let bad = object(json!({"name": "time__now", "arguments": [1, 2]}));
        assert_eq!(
            Invocation::parse("call_tool", Some(bad), true),
            Invocation::Malformed(Malformed::ArgumentsNotObject)
        );
    }

    #[test]
    fn other_names_are_direct_calls_in_either_exposure() {
        for search in [true, false] {
            let parsed = Invocation::parse("memory__read_graph", None, search);
            assert_eq!(
                parsed.tool().map(|t| (t.name.as_str(), t.via)),
                Some(("memory__read_graph", Via::Direct))
            );
        }
    }
}
