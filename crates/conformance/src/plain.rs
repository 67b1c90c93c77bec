//! The client scenarios without authorization (`initialize`, `tools_call`, `sse-retry`,
//! `request-metadata`, the SEP-2243 header scenarios, ...), driven through the very code
//! `mcpgw serve` uses for an upstream: an [`upstream::Upstreams`] built from a configuration
//! naming the scenario's server, its era probe and legacy fallback, [`Server::refresh_tools`]
//! and [`Server::call_tool_with`].
//!
//! The binary also plays the part of the client behind the gateway, which mcpgw relays to:
//! what the server asks during a call (elicitation, sampling) is answered here, and an
//! `input_required` result (2026-07-28) is fulfilled and the call retried with the answers and
//! the server's `requestState`, as the gateway's front does with its own client's answers.
//! Elicitations are accepted with the defaults of the requested schema (SEP-1034), samples
//! get a fixed reply, `roots/list` an empty list.
//!
//! Which calls: the ones `MCP_CONFORMANCE_CONTEXT` lists under `toolCalls` (the SEP-2243
//! header scenarios name their arguments there), else every listed tool once, with a
//! placeholder of the right type for each required argument. One tool gets more than a
//! placeholder: `json_schema_echo` is handed the `inputSchema` mcpgw keeps for
//! `json_schema_2020_12_tool`, which is how the schema-preservation scenario sees whether the
//! schema survived the upstream client unchanged.

use std::{path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use rmcp::model::{CallToolResponse, InputRequiredResult, InputResponses, JsonObject};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use upstream::{Answer, Ask, Asked, CallOptions, Server, Upstreams};

/// Rounds of `input_required` answered for one call before giving up on a server that keeps
/// asking.
const MAX_ROUNDS: usize = 10;
/// What a sample answers.
const SAMPLE_TEXT: &str = "This is a test response from mcpgw's conformance client";

/// The tool the schema-preservation scenario echoes a schema with, and the tool whose schema.
const ECHO_TOOL: &str = "json_schema_echo";
const ECHOED_TOOL: &str = "json_schema_2020_12_tool";

/// One call the scenario asks for in `MCP_CONFORMANCE_CONTEXT`.
#[derive(Deserialize)]
pub struct ToolCall {
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
}

/// The part of `MCP_CONFORMANCE_CONTEXT` these scenarios use.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Context {
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
}

/// Connects to `url` as an upstream named `conformance`, lists its tools and calls them.
pub async fn run(url: &str, context: Context) -> anyhow::Result<()> {
    let toml = format!(
        "[network]\nallow = [\"localhost\", \"127.0.0.1\", \"::1\"]\n\n\
         [[servers]]\nname = \"conformance\"\ntimeout_s = 20\n\
         transport = {{ type = \"http\", url = {} }}\n",
        toml_string(url)
    );
    let config = config::parse_toml(&toml, Path::new("conformance.toml"))
        .map_err(|error| anyhow::anyhow!("{error}"))
        .context("the upstream configuration for the scenario's server")?;
    let (changes, _changes) = mpsc::unbounded_channel();
    let upstreams = Upstreams::new(&config, &config.network.policy(), changes, None);
    let outcome = exercise(&upstreams, context).await;
    upstreams.shutdown().await;
    outcome
}

async fn exercise(upstreams: &Upstreams, context: Context) -> anyhow::Result<()> {
    let server = upstreams
        .get("conformance")
        .context("the configured server is missing")?
        .clone();
    let tools = server.refresh_tools().await?;
    let status = server.status();
    tracing::info!(
        count = tools.len(),
        era = ?status.era,
        protocol_version = status.protocol_version.as_deref().unwrap_or(""),
        "tools listed"
    );
    let calls = match context.tool_calls {
        Some(calls) => calls,
        None => planned_calls(&tools),
    };
    let mut failed = Vec::new();
    for ToolCall { name, arguments } in calls {
        if let Err(error) = call(&server, &name, arguments).await {
            tracing::error!(tool = name, "{error:#}");
            failed.push(name);
        }
    }
    if !failed.is_empty() {
        bail!("calls failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Calls `name`, answering what the server asks meanwhile and fulfilling `input_required`
/// results until the call completes.
async fn call(
    server: &Arc<Server>,
    name: &str,
    arguments: Option<JsonObject>,
) -> anyhow::Result<()> {
    let mut retry: Option<(InputResponses, Option<String>)> = None;
    for _ in 0..MAX_ROUNDS {
        let (asks, mut asked) = mpsc::channel::<Asked>(4);
        let mut options = CallOptions {
            asks: Some(asks),
            ..CallOptions::default()
        };
        if let Some((responses, state)) = retry.take() {
            options.input_responses = Some(responses);
            options.request_state = state;
        }
        let running = server.call_tool_with(name, arguments.clone(), options);
        tokio::pin!(running);
        let response = loop {
            tokio::select! {
                response = &mut running => break response?,
                Some(Asked { ask, reply }) = asked.recv() => {
                    let _ = reply.send(Ok(answer(ask)?));
                }
            }
        };
        match response {
            CallToolResponse::Complete(result) => {
                tracing::info!(tool = name, is_error = ?result.is_error, "tool called");
                return Ok(());
            }
            CallToolResponse::InputRequired(required) => {
                tracing::info!(tool = name, "input required");
                retry = Some(fulfil(&required)?);
            }
            other => bail!("{name} answered with neither a result nor input_required: {other:?}"),
        }
    }
    bail!("{name} still asked for input after {MAX_ROUNDS} rounds")
}

/// The answer of the client behind the gateway to a server's request during a call.
fn answer(ask: Ask) -> anyhow::Result<Answer> {
    Ok(match ask {
        Ask::Elicit(params) => Answer::Elicit(serde_json::from_value(elicited(
            &serde_json::to_value(params)?,
        ))?),
        Ask::Sample(_) => Answer::Sample(serde_json::from_value(sampled())?),
    })
}

/// The `inputResponses` for an `input_required` result, and its `requestState` to echo.
fn fulfil(required: &InputRequiredResult) -> anyhow::Result<(InputResponses, Option<String>)> {
    let required = serde_json::to_value(required)?;
    let mut responses = InputResponses::new();
    if let Some(requests) = required.get("inputRequests").and_then(Value::as_object) {
        for (key, request) in requests {
            let params = request.get("params").cloned().unwrap_or(Value::Null);
            let response = match request.get("method").and_then(Value::as_str) {
                Some("elicitation/create") => elicited(&params),
                Some("sampling/createMessage") => sampled(),
                Some("roots/list") => json!({ "roots": [] }),
                other => bail!("input request {key} has an unknown method {other:?}"),
            };
            responses.insert(key.clone(), response);
        }
    }
    let state = required
        .get("requestState")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok((responses, state))
}

/// An elicitation accepted with the default of every field that has one (SEP-1034).
fn elicited(params: &Value) -> Value {
    let content: serde_json::Map<String, Value> = params
        .pointer("/requestedSchema/properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(field, schema)| Some((field.clone(), schema.get("default")?.clone())))
        .collect();
    json!({ "action": "accept", "content": content })
}

fn sampled() -> Value {
    json!({
        "role": "assistant",
        "content": { "type": "text", "text": SAMPLE_TEXT },
        "model": "mcpgw-conformance-client",
        "stopReason": "endTurn",
    })
}

/// One call of every listed tool, in listing order (see the module docs for the arguments).
fn planned_calls(tools: &[Arc<Value>]) -> Vec<ToolCall> {
    let schema_of = |wanted: &str| {
        tools
            .iter()
            .find(|tool| tool.get("name").and_then(Value::as_str) == Some(wanted))
            .and_then(|tool| tool.get("inputSchema"))
            .cloned()
    };
    tools
        .iter()
        .filter_map(|tool| {
            let name = tool.get("name").and_then(Value::as_str)?.to_owned();
            let arguments = match schema_of(ECHOED_TOOL).filter(|_| name == ECHO_TOOL) {
                Some(schema) => Some(JsonObject::from_iter([("schema".to_owned(), schema)])),
                None => arguments_for(tool),
            };
            Some(ToolCall { name, arguments })
        })
        .collect()
}

/// Arguments for a call: a placeholder of the right type for each required property.
fn arguments_for(tool: &Value) -> Option<JsonObject> {
    let schema = tool.get("inputSchema")?;
    let properties = schema.get("properties").and_then(Value::as_object)?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Some(
        properties
            .iter()
            .filter(|(name, _)| required.contains(&name.as_str()))
            .map(|(name, property)| (name.clone(), placeholder(property)))
            .collect(),
    )
}

fn placeholder(property: &Value) -> Value {
    match property.get("type").and_then(Value::as_str) {
        Some("string") => json!("test"),
        Some("integer") => json!(1),
        Some("number") => json!(1.0),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("object") => json!({}),
        _ => Value::Null,
    }
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elicitations_are_accepted_with_the_schema_defaults() {
        let params = json!({
            "message": "m",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "default": "John Doe" },
                    "age": { "type": "integer", "default": 30 },
                    "nickname": { "type": "string" },
                },
            },
        });
        assert_eq!(
            elicited(&params),
            json!({ "action": "accept", "content": { "name": "John Doe", "age": 30 } })
        );
    }

    #[test]
    fn input_requests_are_answered_by_kind_and_the_state_echoed() {
        let required: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {
                "a": { "method": "elicitation/create", "params": { "message": "m", "requestedSchema": { "type": "object", "properties": {} } } },
                "b": { "method": "sampling/createMessage", "params": { "messages": [], "maxTokens": 5 } },
                "c": { "method": "roots/list", "params": {} },
            },
            "requestState": "opaque",
        }))
        .expect("input_required");
        let (responses, state) = fulfil(&required).expect("fulfilled");
        assert_eq!(state.as_deref(), Some("opaque"));
        assert_eq!(responses["a"]["action"], "accept");
        assert_eq!(responses["b"]["content"]["text"], SAMPLE_TEXT);
        assert_eq!(responses["c"], json!({ "roots": [] }));
    }

    #[test]
    fn the_echo_tool_gets_the_schema_kept_for_the_other_tool() {
        let schema =
            json!({ "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object" });
        let tools = [
            json!({ "name": ECHOED_TOOL, "inputSchema": schema }),
            json!({
                "name": ECHO_TOOL,
                "inputSchema": { "type": "object", "properties": { "schema": { "type": "object" } }, "required": ["schema"] },
            }),
            json!({
                "name": "add",
                "inputSchema": { "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "string" } }, "required": ["a"] },
            }),
        ]
        .map(Arc::new);
        let calls = planned_calls(&tools);
        let arguments: Vec<(&str, Value)> = calls
            .iter()
            .map(|c| (c.name.as_str(), json!(c.arguments)))
            .collect();
        assert_eq!(
            arguments,
            [
                // No properties: no arguments at all.
                (ECHOED_TOOL, Value::Null),
                (ECHO_TOOL, json!({ "schema": schema })),
                ("add", json!({ "a": 1.0 })),
            ]
        );
    }

    #[test]
    fn urls_become_toml_strings() {
        assert_eq!(
            toml_string("http://localhost:1/mcp"),
            "\"http://localhost:1/mcp\""
        );
        assert_eq!(toml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
    }
}
