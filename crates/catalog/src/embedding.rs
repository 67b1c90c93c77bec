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
        match self.parts(tool, server_description) {
            (head, Some(parameters)) => format!("{head}\n{parameters}"),
            (head, None) => head,
        }
    }

    /// [`EmbeddingText::text`] in its two fields: the head (name, title, server line,
    /// description) and the parameters line, when the tool has parameters. For embedding the
    /// fields apart (`mcpgw eval --field-vectors`).
    pub fn parts(
        &self,
        tool: &ToolEntry,
        server_description: Option<&str>,
    ) -> (String, Option<String>) {
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
        let parameters =
            (!parameters.is_empty()).then(|| format!("Parameters: {}.", parameters.join("; ")));
        (lines.join("\n"), parameters)
    }
}

/// The weight of a tool's head (name, title, server line, description) against its parameters
/// line when the two are embedded apart ([`FieldTexts::combine`]): equal, the weight
/// cross-validation chose on both evaluation sets whose tools have parameters
/// (docs/retrieval.md, round five).
pub const FIELD_WEIGHT: f32 = 0.5;

/// A catalog's embedding texts with each tool's fields apart ([`EmbeddingText::parts`]): the
/// heads in catalog order, then the parameter lines of the tools that have one, in catalog
/// order. Embed `texts`, then [`FieldTexts::combine`] the vectors into one per tool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldTexts {
    pub texts: Vec<String>,
    has_parameters: Vec<bool>,
}

impl FieldTexts {
    /// From each tool's `(head, parameters)`.
    pub fn new(parts: Vec<(String, Option<String>)>) -> FieldTexts {
        let has_parameters = parts.iter().map(|(_, p)| p.is_some()).collect();
        let mut texts: Vec<String> = parts.iter().map(|(head, _)| head.clone()).collect();
        texts.extend(parts.into_iter().filter_map(|(_, parameters)| parameters));
        FieldTexts {
            texts,
            has_parameters,
        }
    }

    /// One vector per tool from the vectors of [`FieldTexts::texts`], in the same order:
    /// `weight × head + (1 − weight) × parameters`, both scaled to unit length first and the
    /// sum after, so its cosine with a query is close to the weighted sum of the two fields'
    /// cosines (exact up to the sum's length, which is the same for every query). A tool without
    /// parameters keeps its head's vector. Vectors missing at the end leave their tools with
    /// their heads' vectors; the result has one vector per tool that has a head vector.
    pub fn combine(&self, vectors: Vec<Vec<f32>>, weight: f32) -> Vec<Vec<f32>> {
        let tools = self.has_parameters.len().min(vectors.len());
        let mut vectors = vectors.into_iter();
        let heads: Vec<Vec<f32>> = vectors.by_ref().take(tools).collect();
        heads
            .into_iter()
            .zip(&self.has_parameters)
            .map(|(head, &has)| match has.then(|| vectors.next()).flatten() {
                Some(parameters) if parameters.len() == head.len() => {
                    let (head, parameters) = (unit(head), unit(parameters));
                    let sum = head
                        .iter()
                        .zip(&parameters)
                        .map(|(h, p)| weight * h + (1.0 - weight) * p)
                        .collect();
                    unit(sum)
                }
                _ => head,
            })
            .collect()
    }
}

/// `v` scaled to unit length; a zero or non-finite length leaves it as it is.
fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
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
    fn field_vectors_combine_head_and_parameters() {
        let fields = FieldTexts::new(vec![
            ("a head".into(), Some("Parameters: x.".into())),
            ("b head".into(), None),
            ("c head".into(), Some("Parameters: y.".into())),
        ]);
        assert_eq!(
            fields.texts,
            [
                "a head",
                "b head",
                "c head",
                "Parameters: x.",
                "Parameters: y."
            ]
        );
        let vectors = vec![
            vec![2.0, 0.0],
            vec![0.0, 3.0],
            vec![1.0, 0.0],
            vec![0.0, 5.0],
            vec![1.0, 0.0],
        ];
        let combined = fields.combine(vectors.clone(), 0.5);
        let half = std::f32::consts::FRAC_1_SQRT_2;
        assert_eq!(combined.len(), 3);
        assert!((combined[0][0] - half).abs() < 1e-6 && (combined[0][1] - half).abs() < 1e-6);
        assert_eq!(combined[1], [0.0, 3.0], "no parameters: the head as it is");
        assert_eq!(combined[2], [1.0, 0.0]);
        // All head: each tool's unit head.
        assert_eq!(fields.combine(vectors.clone(), 1.0)[0], [1.0, 0.0]);
        // Too few vectors: the heads there are, unchanged where the parameters are missing.
        assert_eq!(
            fields.combine(vectors[..3].to_vec(), 0.5),
            vectors[..3].to_vec()
        );
        assert_eq!(fields.combine(Vec::new(), 0.5), Vec::<Vec<f32>>::new());
    }

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
