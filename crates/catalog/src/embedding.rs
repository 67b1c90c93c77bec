//! The text a tool is embedded as: what a vector search compares a query against.
//!
//! A sentence encoder wants prose, not identifiers, so names are split into words
//! (`get_current_time`, `getCurrentTime` -> `get current time`) and the parts are laid out as
//! short labelled lines, most telling first, because encoders truncate long inputs
//! (all-MiniLM-L6-v2 reads 256 word pieces): name and title, then the optional server line,
//! then the description, then the parameters with their descriptions.
//!
//! The server line is optional ([`EmbeddingText`]): in a catalog of many small servers the
//! server says what a terse tool (`Explore`, `Suggestions`) is about, while in a catalog of
//! one big server it is the same noise on every tool. `mcpgw eval` measures both.

use serde_json::Value;

use crate::entry::ToolEntry;
use crate::search::properties;

/// What goes into a tool's embedding text besides the tool itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmbeddingText {
    /// Add the server's name (split into words).
    pub server_name: bool,
    /// Add the server's description, when it has one.
    pub server_description: bool,
}

impl EmbeddingText {
    /// The embedding text of `tool`, whose server has `server_description`.
    pub fn text(&self, tool: &ToolEntry, server_description: Option<&str>) -> String {
        let mut lines = Vec::new();
        let name = words(&tool.upstream_name);
        match tool.title.as_deref().map(str::trim) {
            Some(title) if !title.is_empty() && !title.eq_ignore_ascii_case(&name) => {
                lines.push(format!("{name} ({title})"));
            }
            _ => lines.push(name),
        }
        let server_description = server_description
            .map(str::trim)
            .filter(|d| self.server_description && !d.is_empty());
        match (self.server_name, server_description) {
            (true, Some(description)) => {
                lines.push(format!("Server: {}. {description}", words(&tool.server)));
            }
            (true, None) => lines.push(format!("Server: {}.", words(&tool.server))),
            (false, Some(description)) => lines.push(format!("Server: {description}")),
            (false, None) => {}
        }
        let description = tool.description.trim();
        if !description.is_empty() {
            lines.push(description.to_string());
        }
        let mut parameters = Vec::new();
        for (name, schema) in properties(tool.resolved_input_schema()) {
            parameters.push(parameter(name, schema));
            let nested =
                properties(schema).chain(schema.get("items").into_iter().flat_map(properties));
            for (name, schema) in nested {
                parameters.push(parameter(name, schema));
            }
        }
        if !parameters.is_empty() {
            lines.push(format!("Parameters: {}.", parameters.join("; ")));
        }
        lines.join("\n")
    }
}

fn parameter(name: &str, schema: &Value) -> String {
    let name = words(name);
    match schema
        .get("description")
        .and_then(Value::as_str)
        .map(str::trim)
    {
        Some(description) if !description.is_empty() => format!("{name} ({description})"),
        _ => name,
    }
}

/// An identifier as space-separated words, case kept: split at anything that is not a letter
/// or digit, and at case boundaries (`getHTTPResponse` -> `get HTTP Response`,
/// `base64Encode` -> `base64 Encode`). Digits stay attached to the word before them.
pub fn words(identifier: &str) -> String {
    let chars: Vec<char> = identifier.chars().collect();
    let mut out = String::with_capacity(identifier.len() + 4);
    let mut in_word = false;
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            in_word = false;
            continue;
        }
        let boundary = in_word && i > 0 && {
            let prev = chars[i - 1];
            c.is_uppercase()
                && (prev.is_lowercase()
                    || ((prev.is_uppercase() || prev.is_numeric())
                        && chars.get(i + 1).is_some_and(|next| next.is_lowercase())))
        };
        if (!in_word || boundary) && !out.is_empty() {
            out.push(' ');
        }
        out.push(c);
        in_word = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    #[test]
    fn identifiers_split_into_words() {
        let check = |identifier: &str, expect: Expect| expect.assert_eq(&words(identifier));
        check("get_current_time", expect!["get current time"]);
        check("getCurrentTime", expect!["get Current Time"]);
        check("getHTTPResponse", expect!["get HTTP Response"]);
        check("base64Encode", expect!["base64 Encode"]);
        check("HTTP2Server", expect!["HTTP2 Server"]);
        check("A3D", expect!["A3D"]);
        check("/v1/nutrition", expect!["v1 nutrition"]);
        check("Recipes by author", expect!["Recipes by author"]);
        check("查询_天气", expect!["查询 天气"]);
        check("__", expect![""]);
    }
}
