//! One upstream tool in the catalog: verbatim upstream data plus what the gateway derives.

use ids::{QualifiedName, ServerName};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::naming::{self, Namer};
use crate::{cost, schema};

/// One tool as the catalog knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEntry {
    /// The name clients see (`server__tool`, or the bare upstream name under
    /// `prefix = "when-needed"`; see [`crate::naming`]).
    pub qualified: QualifiedName,
    /// The `server__tool` name `prefix = "always"` gives; equal to `qualified` unless that is
    /// bare. Calls by this name reach the tool too, and policy patterns match either.
    pub prefixed: String,
    pub server: ServerName,
    /// The original name, always used on the wire.
    pub upstream_name: String,
    /// `title`, or else `annotations.title`.
    pub title: Option<String>,
    /// `""` if the upstream sent none.
    pub description: String,
    /// The tool object verbatim; its schemas and annotations are read from here
    /// ([`ToolEntry::input_schema`] and friends) rather than copied, because tool JSON
    /// dominates a large catalog's memory. For the same reason it is the very object of the
    /// [`crate::ServerTools`] list the catalog was built from (the upstream's last good list),
    /// shared, not a copy.
    pub raw: Arc<Value>,
    /// The [`schema::resolve`]d input schema, only when resolving changed it.
    resolved: Option<Value>,
    /// cl100k_base tokens of the tool as listed to a client, see [`cost::Listed`].
    pub token_cost: usize,
    /// Whether the tool may delete, reset or overwrite ([`crate::caution::is_risky`]), worked
    /// out once here rather than on every search.
    pub(crate) risky: bool,
}

/// Why an upstream tool could not be loaded, or anything else worth telling about an upstream.
/// A problem never fails a build; the tool is skipped and the rest loads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub server: ServerName,
    /// The upstream tool name when there is one.
    pub tool: Option<String>,
    pub message: String,
}

/// Why part of the upstream data was skipped (the message of a [`Problem`]), or why a request
/// to the catalog could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("tool is not a JSON object")]
    NotAnObject,
    #[error("tool has no name")]
    MissingName,
    #[error("tool name is not a string")]
    NameNotString,
    #[error("tool has no inputSchema")]
    MissingInputSchema,
    #[error("inputSchema is not a JSON object")]
    InputSchemaNotObject,
    #[error("duplicate tool name; the first tool with this name is kept")]
    DuplicateTool,
    #[error("server listed more than once; only its first tool list is used")]
    DuplicateServer,
    #[error("expected one vector per tool ({tools}), got {vectors}")]
    VectorCount { tools: usize, vectors: usize },
    #[error("invalid tool vectors: {0}")]
    Vectors(retrieval::VectorError),
    #[error("unknown search strategy `{0}`; expected bm25, vector or hybrid")]
    UnknownStrategy(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.tool {
            Some(tool) => write!(f, "{}: tool {tool:?}: {}", self.server, self.message),
            None => write!(f, "{}: {}", self.server, self.message),
        }
    }
}

/// Longest [`ToolEntry::one_line_description`], in characters.
pub const ONE_LINE_MAX_CHARS: usize = 160;

impl ToolEntry {
    /// Parse one upstream tool and name it. The name is taken from `namer` only once the tool
    /// is known to be well-formed, so a broken tool never shifts the names of the ones after it.
    pub(crate) fn parse(
        server: &str,
        raw: &Arc<Value>,
        namer: &mut Namer,
        counter: &cost::Counter,
    ) -> Result<Self, Error> {
        let tool = raw.as_object().ok_or(Error::NotAnObject)?;
        let upstream_name = upstream_name(raw)?.to_string();
        let input_schema = match tool.get("inputSchema") {
            None => return Err(Error::MissingInputSchema),
            Some(schema @ Value::Object(_)) => schema,
            Some(_) => return Err(Error::InputSchemaNotObject),
        };
        let naming::Assigned {
            name: qualified,
            prefixed,
        } = namer.assign_both(server, &upstream_name);
        let annotations = tool.get("annotations").filter(|a| a.is_object());
        let title = string(tool, "title")
            .or_else(|| annotations?.get("title")?.as_str())
            .map(str::to_string);
        let description = string(tool, "description").unwrap_or_default().to_string();
        // A non-object outputSchema is ignored rather than failing the tool: the tool is still
        // callable, its results just are not described.
        let output_schema = tool.get("outputSchema").filter(|s| s.is_object());
        let token_cost = cost::Listed {
            name: &qualified,
            title: title.as_deref(),
            description: &description,
            input_schema,
            output_schema,
            annotations,
        }
        .token_cost(counter);
        let resolved = schema::resolve(input_schema);
        let risky = crate::caution::is_risky_tool(
            &upstream_name,
            annotations.and_then(|a| a.get("readOnlyHint")?.as_bool()),
            annotations.and_then(|a| a.get("destructiveHint")?.as_bool()),
        );
        Ok(Self {
            resolved: (resolved != *input_schema).then_some(resolved),
            qualified: qualified.into(),
            prefixed,
            server: server.into(),
            upstream_name,
            title,
            description,
            raw: Arc::clone(raw),
            token_cost,
            risky,
        })
    }

    /// The input schema verbatim, as forwarded and validated against.
    pub fn input_schema(&self) -> &Value {
        // `parse` only accepts tools whose `inputSchema` is an object.
        self.raw.get("inputSchema").unwrap_or(&Value::Null)
    }

    /// The input schema with `$ref`, `allOf` and friends resolved ([`schema::resolve`]), for
    /// `get_tool_details` and the search texts.
    pub fn resolved_input_schema(&self) -> &Value {
        self.resolved
            .as_ref()
            .unwrap_or_else(|| self.input_schema())
    }

    /// `outputSchema` when it is an object (any other value is ignored: the tool is still
    /// callable, its results just are not described).
    pub fn output_schema(&self) -> Option<&Value> {
        self.raw.get("outputSchema").filter(|s| s.is_object())
    }

    /// `annotations` when it is an object.
    pub fn annotations(&self) -> Option<&Value> {
        self.raw.get("annotations").filter(|a| a.is_object())
    }

    /// `annotations.readOnlyHint` as the upstream sent it.
    pub fn read_only(&self) -> Option<bool> {
        self.hint("readOnlyHint")
    }

    /// `annotations.destructiveHint` as the upstream sent it.
    pub fn destructive(&self) -> Option<bool> {
        self.hint("destructiveHint")
    }

    /// Read-only with the MCP default applied: a tool is read-only only if it says so.
    pub fn is_read_only(&self) -> bool {
        self.read_only().unwrap_or(false)
    }

    /// Destructive with the MCP defaults applied: `destructiveHint` defaults to `true` and is
    /// only meaningful when the tool is not read-only, so a read-only tool is never destructive
    /// and a tool without annotations is.
    pub fn is_destructive(&self) -> bool {
        !self.is_read_only() && self.destructive().unwrap_or(true)
    }

    /// The first line or sentence of the description, at most [`ONE_LINE_MAX_CHARS`]
    /// characters (cut at a word boundary when there is one, marked with `…`).
    pub fn one_line_description(&self) -> String {
        one_line(&self.description)
    }

    fn hint(&self, name: &str) -> Option<bool> {
        self.annotations()?.get(name)?.as_bool()
    }
}

/// The upstream name of a raw tool object.
pub(crate) fn upstream_name(raw: &Value) -> Result<&str, Error> {
    let tool = raw.as_object().ok_or(Error::NotAnObject)?;
    match tool.get("name") {
        None => Err(Error::MissingName),
        Some(Value::String(name)) => Ok(name),
        Some(_) => Err(Error::NameNotString),
    }
}

fn string<'a>(tool: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    tool.get(key)?.as_str()
}

/// The first sentence of a description's first line, cut to a table cell's width: what
/// [`ToolEntry::one_line_description`] shows (and the admin API, for a held definition).
pub fn one_line(description: &str) -> String {
    let text = description.trim_start();
    let line = text.lines().next().unwrap_or_default().trim_end();
    let sentence = &line[..sentence_end(line)];
    if sentence.chars().count() <= ONE_LINE_MAX_CHARS {
        return sentence.to_string();
    }
    // Room for the ellipsis; prefer to cut at the last space in the second half.
    let limit = ONE_LINE_MAX_CHARS - 1;
    let cut = sentence
        .char_indices()
        .nth(limit)
        .map_or(sentence.len(), |(i, _)| i);
    let head = &sentence[..cut];
    let head = match head.rfind(char::is_whitespace) {
        Some(space) if space > cut / 2 => &head[..space],
        _ => head,
    };
    format!("{}…", head.trim_end())
}

/// Byte index just past the first sentence of `line` (or its length).
fn sentence_end(line: &str) -> usize {
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let end = i + c.len_utf8();
        match c {
            // CJK full stops end a sentence without a following space.
            '。' | '！' | '？' => return end,
            '.' | '!' | '?' => {
                let at_space = chars.peek().is_none_or(|(_, next)| next.is_whitespace());
                if at_space && !ends_with_abbreviation(&line[..i]) {
                    return end;
                }
            }
            _ => {}
        }
    }
    line.len()
}

fn ends_with_abbreviation(before_dot: &str) -> bool {
    let word = before_dot
        .rsplit(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    matches!(
        word.as_str(),
        "e.g" | "i.e" | "vs" | "etc" | "approx" | "incl"
    )
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use serde_json::json;

    use super::*;

    fn check_one_line(description: &str, expect: Expect) {
        expect.assert_eq(&one_line(description));
    }

    fn entry(raw: Value) -> Result<ToolEntry, Error> {
        ToolEntry::parse(
            "s",
            &Arc::new(raw),
            &mut Namer::new(),
            &crate::tests::TOKENIZER,
        )
    }

    #[test]
    fn one_line_takes_first_sentence_or_line() {
        check_one_line("", expect![""]);
        check_one_line("Echo the input.", expect!["Echo the input."]);
        check_one_line(
            "Echo the input. Returns it unchanged.",
            expect!["Echo the input."],
        );
        check_one_line("First line\nSecond line.", expect!["First line"]);
        check_one_line(
            "\n\n  Leading blank lines. x",
            expect!["Leading blank lines."],
        );
        check_one_line(
            "Reads a file, e.g. config.toml. Then more.",
            expect!["Reads a file, e.g. config.toml."],
        );
        check_one_line(
            "Version 1.2.3 is used. Then more.",
            expect!["Version 1.2.3 is used."],
        );
        check_one_line("读取文件。然后返回内容。", expect!["读取文件。"]);
    }

    #[test]
    fn one_line_is_capped_on_a_char_boundary() {
        let long = "é".repeat(400);
        let got = one_line(&long);
        assert_eq!(got.chars().count(), ONE_LINE_MAX_CHARS);
        assert!(got.ends_with('…'));

        let words = "word ".repeat(100);
        check_one_line(
            &words,
            expect![
                "word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word word…"
            ],
        );
        assert!(one_line(&words).chars().count() <= ONE_LINE_MAX_CHARS);
    }

    #[test]
    fn malformed_tools_are_rejected_with_a_reason() {
        let check = |raw: Value, expect: Expect| {
            let got = match entry(raw) {
                Ok(e) => format!("ok {}", e.upstream_name),
                Err(e) => e.to_string(),
            };
            expect.assert_eq(&got);
        };
        check(json!("echo"), expect!["tool is not a JSON object"]);
        check(json!({"inputSchema": {}}), expect!["tool has no name"]);
        check(
            json!({"name": 7, "inputSchema": {}}),
            expect!["tool name is not a string"],
        );
        check(json!({"name": "x"}), expect!["tool has no inputSchema"]);
        check(
            json!({"name": "x", "inputSchema": "object"}),
            expect!["inputSchema is not a JSON object"],
        );
        check(json!({"name": "x", "inputSchema": {}}), expect!["ok x"]);
    }

    #[test]
    fn annotation_defaults_follow_mcp() {
        let check = |annotations: Value, expect: Expect| {
            let e = entry(json!({"name": "t", "inputSchema": {}, "annotations": annotations}))
                .expect("well-formed");
            expect.assert_eq(&format!(
                "read_only={:?} destructive={:?} is_read_only={} is_destructive={}",
                e.read_only(),
                e.destructive(),
                e.is_read_only(),
                e.is_destructive()
            ));
        };
        check(
            json!(null),
            expect!["read_only=None destructive=None is_read_only=false is_destructive=true"],
        );
        check(
            json!({"readOnlyHint": true}),
            expect!["read_only=Some(true) destructive=None is_read_only=true is_destructive=false"],
        );
        check(
            json!({"readOnlyHint": true, "destructiveHint": true}),
            expect![
                "read_only=Some(true) destructive=Some(true) is_read_only=true is_destructive=false"
            ],
        );
        check(
            json!({"readOnlyHint": false, "destructiveHint": false}),
            expect![
                "read_only=Some(false) destructive=Some(false) is_read_only=false is_destructive=false"
            ],
        );
        check(
            json!({"readOnlyHint": "yes"}),
            expect!["read_only=None destructive=None is_read_only=false is_destructive=true"],
        );
    }

    #[test]
    fn title_falls_back_to_annotations_and_fields_are_verbatim() {
        let raw = json!({
            "name": "t",
            "description": 5,
            "inputSchema": {"type": "object", "$defs": {"a": {}}},
            "outputSchema": "bad",
            "annotations": {"title": "Nice Title"},
            "_meta": {"x": 1}
        });
        let e = entry(raw.clone()).expect("well-formed");
        assert_eq!(e.title.as_deref(), Some("Nice Title"));
        assert_eq!(e.description, "");
        assert_eq!(e.output_schema(), None);
        assert_eq!(*e.raw, raw);
        assert_eq!(
            e.input_schema(),
            &json!({"type": "object", "$defs": {"a": {}}})
        );
        assert_eq!(e.resolved_input_schema(), &json!({"type": "object"}));
        assert_eq!(e.annotations(), Some(&json!({"title": "Nice Title"})));
        // A schema that resolving leaves alone is not stored twice.
        let plain = entry(json!({"name": "t", "inputSchema": {"type": "object"}})).expect("ok");
        assert!(plain.resolved.is_none());
        assert_eq!(plain.resolved_input_schema(), plain.input_schema());
        assert!(e.token_cost > 0);
    }
}
