//! Search over the catalog: the documents we index, filters, and hits.
//!
//! Ranking itself is `retrieval`'s job; this module decides what text of a tool goes in which
//! field, and which tools a filter lets through. Filters narrow *before* ranking (through the
//! `keep` closure), so a filtered-out tool never takes a slot in the top k.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use retrieval::{Document, Field};

use crate::entry::ToolEntry;

/// Which tools a search may return. `Default` lets everything through; every `Some` narrows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    /// Exact server names. `Some(vec![])` matches nothing: a filter only ever narrows, so an
    /// empty allow-list (say, from a policy that grants no server) must not mean "all".
    pub servers: Option<Vec<String>>,
    /// Against [`ToolEntry::is_read_only`]: a tool without `readOnlyHint` is not read-only.
    pub read_only: Option<bool>,
    /// Against [`ToolEntry::is_destructive`]: MCP defaults, a tool without annotations is
    /// destructive, a read-only tool never is.
    pub destructive: Option<bool>,
}

impl Filter {
    /// Whether `tool` passes every part of the filter.
    pub fn matches(&self, tool: &ToolEntry) -> bool {
        self.servers
            .as_ref()
            .is_none_or(|servers| servers.contains(&tool.server))
            && self
                .read_only
                .is_none_or(|want| tool.is_read_only() == want)
            && self
                .destructive
                .is_none_or(|want| tool.is_destructive() == want)
    }
}

/// One ranked tool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchHit<'a> {
    pub tool: &'a ToolEntry,
    pub score: f32,
}

/// The search document of `tool`. The key is the qualified name, so ties break the same way
/// on every run.
pub(crate) fn document(tool: &ToolEntry, server_description: Option<&str>) -> Document {
    let mut fields = vec![
        (Field::Name, tool.upstream_name.clone()),
        (Field::Name, tool.qualified.clone()),
        (Field::Server, tool.server.clone()),
    ];
    if !tool.description.is_empty() {
        fields.push((Field::Description, tool.description.clone()));
    }
    if let Some(title) = &tool.title {
        fields.push((Field::Description, title.clone()));
    }
    // The resolved view, so parameters behind a `$ref` are searchable too.
    for (name, schema) in properties(&tool.resolved_input_schema) {
        push_param(&mut fields, name, schema);
        let nested = properties(schema).chain(schema.get("items").into_iter().flat_map(properties));
        for (name, schema) in nested {
            push_param(&mut fields, name, schema);
        }
    }
    if let Some(description) = server_description.filter(|d| !d.is_empty()) {
        fields.push((Field::ServerDescription, description.to_string()));
    }
    Document {
        key: tool.qualified.clone(),
        fields,
    }
}

fn push_param(fields: &mut Vec<(Field, String)>, name: &str, schema: &Value) {
    fields.push((Field::ParamName, name.to_string()));
    if let Some(description) = schema.get("description").and_then(Value::as_str) {
        fields.push((Field::ParamDescription, description.to_string()));
    }
}

/// `(name, schema)` of each entry of `schema.properties`, if any.
fn properties(schema: &Value) -> impl Iterator<Item = (&str, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, sub)| (name.as_str(), sub))
}
