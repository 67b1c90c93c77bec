//! Token cost of a tool: what listing it in `tools/list` costs a client, in cl100k_base tokens.
//!
//! cl100k_base is bundled in `tiktoken-rs` (no network), but building its BPE takes a noticeable
//! fraction of a second, so it is built once per process. It is an approximation for every model
//! that is not OpenAI's; what matters is that it is stable and comparable between tools.

use std::sync::LazyLock;

use serde_json::{Map, Value};
use tiktoken_rs::CoreBPE;

/// `None` only if the bundled vocabulary failed to load, which would be a packaging bug; then
/// [`count_tokens`] falls back to the usual four-bytes-per-token estimate rather than panic.
static CL100K: LazyLock<Option<CoreBPE>> = LazyLock::new(|| tiktoken_rs::cl100k_base().ok());

/// cl100k_base tokens in `text`; special-token syntax such as `<|endoftext|>` counts as text.
pub fn count_tokens(text: &str) -> usize {
    match CL100K.as_ref() {
        Some(bpe) => bpe.count_ordinary(text),
        None => text.len().div_ceil(4),
    }
}

/// The tool as a client sees it in `tools/list`: `name` is the qualified name, optional fields
/// only when present. `title` is included too because clients receive it in the same listing.
pub struct Listed<'a> {
    pub name: &'a str,
    pub title: Option<&'a str>,
    pub description: &'a str,
    pub input_schema: &'a Value,
    pub output_schema: Option<&'a Value>,
    pub annotations: Option<&'a Value>,
}

impl Listed<'_> {
    /// The compact JSON a client would receive.
    pub fn to_json(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("name".into(), Value::from(self.name));
        if let Some(title) = self.title {
            tool.insert("title".into(), Value::from(title));
        }
        if !self.description.is_empty() {
            tool.insert("description".into(), Value::from(self.description));
        }
        tool.insert("inputSchema".into(), self.input_schema.clone());
        if let Some(output) = self.output_schema {
            tool.insert("outputSchema".into(), output.clone());
        }
        if let Some(annotations) = self.annotations {
            tool.insert("annotations".into(), annotations.clone());
        }
        Value::Object(tool)
    }

    /// Tokens of [`Self::to_json`] serialised compactly.
    pub fn token_cost(&self) -> usize {
        count_tokens(&self.to_json().to_string())
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use serde_json::json;

    use super::*;

    fn check(text: &str, expect: Expect) {
        expect.assert_eq(&count_tokens(text).to_string());
    }

    #[test]
    fn counts_cl100k_tokens() {
        check("", expect!["0"]);
        check("hello world", expect!["2"]);
        check("<|endoftext|>", expect!["7"]);
    }

    #[test]
    fn listed_tool_cost_is_positive_and_stable() {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let listed = Listed {
            name: "everything__echo",
            title: None,
            description: "Echoes back the input",
            input_schema: &schema,
            output_schema: None,
            annotations: None,
        };
        expect![[r#"{"description":"Echoes back the input","inputSchema":{"properties":{"text":{"type":"string"}},"type":"object"},"name":"everything__echo"}"#]]
            .assert_eq(&listed.to_json().to_string());
        let cost = listed.token_cost();
        assert!(cost > 0);
        assert_eq!(cost, listed.token_cost());
    }
}
