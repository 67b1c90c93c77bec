//! A resolved view of a tool's input schema, for the model to read (`get_tool_details`).
//!
//! The verbatim schema is what goes on the wire; this view only makes it easier to read:
//! - local `$ref`s (`#/$defs/..`, `#/definitions/..`, any `#/...` JSON pointer, with `~0`/`~1`
//!   and `%XX` unescaping) are inlined; keys beside a `$ref` win over the target's keys;
//! - `allOf` is merged: `properties` union, `required` union, every other key first-wins
//!   (the node's own keys come first, then the branches in order);
//! - `anyOf`/`oneOf` are reduced to their first non-null variant. When a null variant was
//!   dropped, the result says so: a `type` becomes `[type, "null"]` (still valid JSON Schema),
//!   and a variant without `type` gets `"nullable": true` (the OpenAPI marker models know);
//! - the `$defs`/`definitions` blocks are removed once inlined.
//!
//! Never loops, never fetches: a `$ref` already being expanded on the current path becomes
//! `{"$ref": .., "description": "(recursive)"}`; schema nesting stops at [`MAX_DEPTH`]; a budget
//! on inlined nodes stops exponential blow-up from refs that fan out (`A -> 2xB -> 4xC ...`).
//! Remote refs (`http://...`, `other.json#...`), plain-name anchors and dangling pointers are left
//! as they are. `$id` base changes are not followed: every `#...` pointer is read against the
//! root, which is what every MCP server we know of means.
//!
//! Only schema positions are walked (`properties/*`, `items`, `allOf/*`, ...); values such as
//! `default`, `enum`, `const` and `examples` are data and are copied untouched, even when they
//! happen to contain a `$ref` key.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Deepest schema nesting kept in the resolved view.
pub const MAX_DEPTH: usize = 32;

/// Nodes that ref inlining may add beyond the size of the original schema.
const MIN_BUDGET: usize = 20_000;

/// The resolved view of `schema`. Total: any JSON value in, a JSON value out.
pub fn resolve(schema: &Value) -> Value {
    let budget = MIN_BUDGET.max(4 * node_count(schema));
    let mut resolver = Resolver {
        root: schema,
        path: vec![String::new()],
        budget,
        sizes: HashMap::new(),
    };
    resolver.walk(schema, 0)
}

/// The number of JSON nodes in `value`.
pub fn node_count(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        Value::Object(map) => 1 + map.values().map(node_count).sum::<usize>(),
        _ => 1,
    }
}

/// Keywords whose value is a single subschema.
const SCHEMA_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];

/// Keywords whose value is an array of subschemas.
const SCHEMA_ARRAY_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// Keywords whose value maps names to subschemas.
const SCHEMA_MAP_KEYWORDS: &[&str] = &["properties", "patternProperties", "dependentSchemas"];

/// Blocks that only hold definitions; dropped from the view.
const DEFINITION_KEYWORDS: &[&str] = &["$defs", "definitions"];

struct Resolver<'a> {
    root: &'a Value,
    /// JSON pointers being expanded on the current path; the root (`""`) is always on it.
    path: Vec<String>,
    /// Nodes that inlining may still add.
    budget: usize,
    /// Memoised `node_count` of ref targets.
    sizes: HashMap<String, usize>,
}

impl Resolver<'_> {
    fn walk(&mut self, node: &Value, depth: usize) -> Value {
        let Value::Object(map) = node else {
            // `true`/`false` schemas and anything malformed pass through.
            return node.clone();
        };
        if depth > MAX_DEPTH {
            return Value::Object(Map::from_iter([(
                "description".to_string(),
                Value::from("(truncated: schema nested too deeply)"),
            )]));
        }
        if let Some(Value::String(reference)) = map.get("$ref")
            && let Some(resolved) = self.expand(reference, map, depth)
        {
            return resolved;
        }

        let mut out = Map::new();
        for (key, value) in map {
            let key = key.as_str();
            let walked = if DEFINITION_KEYWORDS.contains(&key) {
                continue;
            } else if SCHEMA_KEYWORDS.contains(&key) {
                self.walk(value, depth + 1)
            } else if key == "items" {
                // `items` is a schema, or (draft 4-2019) an array of schemas.
                match value {
                    Value::Array(items) => Value::Array(
                        items
                            .iter()
                            .map(|item| self.walk(item, depth + 1))
                            .collect(),
                    ),
                    other => self.walk(other, depth + 1),
                }
            } else if SCHEMA_ARRAY_KEYWORDS.contains(&key)
                && let Value::Array(items) = value
            {
                Value::Array(
                    items
                        .iter()
                        .map(|item| self.walk(item, depth + 1))
                        .collect(),
                )
            } else if SCHEMA_MAP_KEYWORDS.contains(&key)
                && let Value::Object(entries) = value
            {
                Value::Object(
                    entries
                        .iter()
                        .map(|(name, sub)| (name.clone(), self.walk(sub, depth + 1)))
                        .collect(),
                )
            } else {
                value.clone()
            };
            out.insert(key.to_string(), walked);
        }

        if let Some(Value::Array(branches)) = out.remove("allOf") {
            for branch in branches {
                if let Value::Object(branch) = branch {
                    merge_into(&mut out, branch);
                }
            }
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(Value::Array(variants)) = out.remove(keyword) {
                reduce_variants(&mut out, variants);
            }
        }
        Value::Object(out)
    }

    /// Inline a local `$ref` with its sibling keys; `None` leaves the node as it is (remote,
    /// anchor or dangling ref).
    fn expand(
        &mut self,
        reference: &str,
        node: &Map<String, Value>,
        depth: usize,
    ) -> Option<Value> {
        let pointer = local_pointer(reference)?;
        let target = self.root.pointer(&pointer)?;
        if self.path.contains(&pointer) {
            return Some(marker(reference, "(recursive)"));
        }
        let size = *self
            .sizes
            .entry(pointer.clone())
            .or_insert_with(|| node_count(target));
        if size > self.budget {
            return Some(marker(reference, "(not expanded: schema too large)"));
        }
        self.budget -= size;

        self.path.push(pointer);
        let inlined = self.walk(target, depth);
        self.path.pop();

        let mut siblings = node.clone();
        siblings.remove("$ref");
        if siblings.is_empty() {
            return Some(inlined);
        }
        let Value::Object(mut out) = self.walk(&Value::Object(siblings), depth) else {
            return Some(inlined);
        };
        // A boolean target (`true`/`false`) says nothing the siblings need.
        if let Value::Object(inlined) = inlined {
            merge_into(&mut out, inlined);
        }
        Some(Value::Object(out))
    }
}

/// The JSON pointer of a same-document reference (`#`, `#/a/b`), percent-decoded.
fn local_pointer(reference: &str) -> Option<String> {
    let fragment = reference.strip_prefix('#')?;
    if !(fragment.is_empty() || fragment.starts_with('/')) {
        return None; // plain-name anchor such as `#foo`
    }
    percent_decode(fragment)
}

/// Decode `%XX` escapes; `None` when they do not form UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn marker(reference: &str, why: &str) -> Value {
    Value::Object(Map::from_iter([
        ("$ref".to_string(), Value::from(reference)),
        ("description".to_string(), Value::from(why)),
    ]))
}

/// Merge `other` into `out`: `properties` union, `required` union, other keys first-wins.
fn merge_into(out: &mut Map<String, Value>, other: Map<String, Value>) {
    for (key, value) in other {
        match (key.as_str(), out.get_mut(&key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (name, schema) in theirs {
                    mine.entry(name).or_insert(schema);
                }
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for name in theirs {
                    if !mine.contains(&name) {
                        mine.push(name);
                    }
                }
            }
            (_, Some(_), _) => {}
            (_, None, value) => {
                out.insert(key, value);
            }
        }
    }
}

/// Replace `anyOf`/`oneOf` by its first non-null variant, marking dropped nullability.
fn reduce_variants(out: &mut Map<String, Value>, variants: Vec<Value>) {
    let had_null = variants.iter().any(is_null_schema);
    let Some(chosen) = variants.into_iter().find(|v| !is_null_schema(v)) else {
        if had_null {
            out.entry("type").or_insert_with(|| Value::from("null"));
        }
        return;
    };
    let Value::Object(mut chosen) = chosen else {
        return; // `true`/`false`: nothing to merge
    };
    if had_null {
        match chosen.get_mut("type") {
            Some(Value::String(single)) => {
                let single = std::mem::take(single);
                chosen.insert(
                    "type".to_string(),
                    Value::Array(vec![Value::from(single), Value::from("null")]),
                );
            }
            Some(Value::Array(types)) => {
                if !types.iter().any(|t| t == "null") {
                    types.push(Value::from("null"));
                }
            }
            _ => {
                chosen.insert("nullable".to_string(), Value::Bool(true));
            }
        }
    }
    // The variant's keys describe the value; the parent's (`description`, `default`) frame it.
    // Let the variant's `type` win so the nullability above is not lost to a parent `type`.
    if let Some(kind) = chosen.remove("type") {
        out.insert("type".to_string(), kind);
    }
    merge_into(out, chosen);
}

fn is_null_schema(schema: &Value) -> bool {
    let Value::Object(map) = schema else {
        return false;
    };
    map.get("type").is_some_and(|t| t == "null")
        || map.get("const").is_some_and(Value::is_null)
        || map
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|values| values.len() == 1 && values[0].is_null())
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn check(schema: Value, expect: Expect) {
        let resolved = resolve(&schema);
        expect.assert_eq(&serde_json::to_string_pretty(&resolved).unwrap_or_default());
    }

    #[test]
    fn ref_into_defs_is_inlined_and_defs_dropped() {
        check(
            json!({
                "type": "object",
                "properties": {"owner": {"$ref": "#/$defs/User"}},
                "$defs": {"User": {"type": "object", "properties": {"login": {"type": "string"}}}}
            }),
            expect![[r#"
                {
                  "properties": {
                    "owner": {
                      "properties": {
                        "login": {
                          "type": "string"
                        }
                      },
                      "type": "object"
                    }
                  },
                  "type": "object"
                }"#]],
        );
    }

    #[test]
    fn ref_into_definitions_with_escaped_pointer() {
        check(
            json!({
                "properties": {
                    "a": {"$ref": "#/definitions/a~1b"},
                    "b": {"$ref": "#/definitions/c~0d", "description": "sibling wins"},
                    "c": {"$ref": "#/definitions/with%20space"}
                },
                "definitions": {
                    "a/b": {"type": "integer"},
                    "c~d": {"type": "string", "description": "target"},
                    "with space": {"type": "boolean"}
                }
            }),
            expect![[r#"
                {
                  "properties": {
                    "a": {
                      "type": "integer"
                    },
                    "b": {
                      "description": "sibling wins",
                      "type": "string"
                    },
                    "c": {
                      "type": "boolean"
                    }
                  }
                }"#]],
        );
    }

    #[test]
    fn nested_refs_are_followed() {
        check(
            json!({
                "properties": {"order": {"$ref": "#/$defs/Order"}},
                "$defs": {
                    "Order": {"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}}},
                    "Item": {"type": "object", "properties": {"sku": {"$ref": "#/$defs/Sku"}}},
                    "Sku": {"type": "string", "pattern": "^[A-Z]+$"}
                }
            }),
            expect![[r#"
                {
                  "properties": {
                    "order": {
                      "properties": {
                        "items": {
                          "items": {
                            "properties": {
                              "sku": {
                                "pattern": "^[A-Z]+$",
                                "type": "string"
                              }
                            },
                            "type": "object"
                          },
                          "type": "array"
                        }
                      },
                      "type": "object"
                    }
                  }
                }"#]],
        );
    }

    #[test]
    fn self_referencing_tree_terminates_with_a_marker() {
        check(
            json!({
                "properties": {"root": {"$ref": "#/$defs/Node"}},
                "$defs": {"Node": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
                    }
                }}
            }),
            expect![[r##"
                {
                  "properties": {
                    "root": {
                      "properties": {
                        "children": {
                          "items": {
                            "$ref": "#/$defs/Node",
                            "description": "(recursive)"
                          },
                          "type": "array"
                        },
                        "value": {
                          "type": "string"
                        }
                      },
                      "type": "object"
                    }
                  }
                }"##]],
        );
    }

    #[test]
    fn ref_to_the_root_is_recursive() {
        check(
            json!({"type": "object", "properties": {"next": {"$ref": "#"}}}),
            expect![[r##"
                {
                  "properties": {
                    "next": {
                      "$ref": "#",
                      "description": "(recursive)"
                    }
                  },
                  "type": "object"
                }"##]],
        );
    }

    #[test]
    fn remote_anchor_and_dangling_refs_are_untouched() {
        check(
            json!({
                "properties": {
                    "remote": {"$ref": "https://example.com/schemas/user.json"},
                    "other_file": {"$ref": "common.json#/$defs/Id"},
                    "anchor": {"$ref": "#user"},
                    "dangling": {"$ref": "#/$defs/Missing"}
                }
            }),
            expect![[r##"
                {
                  "properties": {
                    "anchor": {
                      "$ref": "#user"
                    },
                    "dangling": {
                      "$ref": "#/$defs/Missing"
                    },
                    "other_file": {
                      "$ref": "common.json#/$defs/Id"
                    },
                    "remote": {
                      "$ref": "https://example.com/schemas/user.json"
                    }
                  }
                }"##]],
        );
    }

    #[test]
    fn all_of_is_merged() {
        check(
            json!({
                "description": "own keys first",
                "allOf": [
                    {"$ref": "#/$defs/Base"},
                    {"type": "object", "description": "loses", "properties": {"b": {"type": "integer"}, "a": {"type": "number"}}, "required": ["b", "a"]}
                ],
                "$defs": {"Base": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}
            }),
            expect![[r#"
                {
                  "description": "own keys first",
                  "properties": {
                    "a": {
                      "type": "string"
                    },
                    "b": {
                      "type": "integer"
                    }
                  },
                  "required": [
                    "a",
                    "b"
                  ],
                  "type": "object"
                }"#]],
        );
    }

    #[test]
    fn any_of_with_null_becomes_nullable_type() {
        check(
            json!({
                "properties": {
                    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null, "description": "max rows"},
                    "user": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/User"}]},
                    "either": {"anyOf": [{"enum": ["a", "b"]}, {"const": null}]},
                    "only_null": {"anyOf": [{"type": "null"}]}
                },
                "$defs": {"User": {"type": "object", "properties": {"id": {"type": "string"}}}}
            }),
            expect![[r#"
                {
                  "properties": {
                    "either": {
                      "enum": [
                        "a",
                        "b"
                      ],
                      "nullable": true
                    },
                    "limit": {
                      "default": null,
                      "description": "max rows",
                      "type": [
                        "integer",
                        "null"
                      ]
                    },
                    "only_null": {
                      "type": "null"
                    },
                    "user": {
                      "properties": {
                        "id": {
                          "type": "string"
                        }
                      },
                      "type": [
                        "object",
                        "null"
                      ]
                    }
                  }
                }"#]],
        );
    }

    #[test]
    fn one_of_keeps_the_first_variant() {
        check(
            json!({
                "oneOf": [
                    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
                    {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
                ],
                "description": "source"
            }),
            expect![[r#"
                {
                  "description": "source",
                  "properties": {
                    "path": {
                      "type": "string"
                    }
                  },
                  "required": [
                    "path"
                  ],
                  "type": "object"
                }"#]],
        );
    }

    #[test]
    fn data_keywords_are_not_resolved() {
        check(
            json!({
                "default": {"$ref": "#/$defs/X"},
                "enum": [{"$ref": "#/$defs/X"}],
                "$defs": {"X": {"type": "string"}}
            }),
            expect![[r##"
                {
                  "default": {
                    "$ref": "#/$defs/X"
                  },
                  "enum": [
                    {
                      "$ref": "#/$defs/X"
                    }
                  ]
                }"##]],
        );
    }

    #[test]
    fn fan_out_refs_stay_bounded() {
        // D0 refers to D1 twice, D1 to D2 twice, ...: 2^40 nodes if inlined naively.
        let mut defs = Map::new();
        for i in 0..40 {
            let next = json!({"$ref": format!("#/$defs/D{}", i + 1)});
            defs.insert(
                format!("D{i}"),
                json!({"type": "object", "properties": {"l": next.clone(), "r": next}}),
            );
        }
        defs.insert("D40".into(), json!({"type": "string"}));
        let schema = json!({"$ref": "#/$defs/D0", "$defs": defs});
        let resolved = resolve(&schema);
        let size = node_count(&resolved);
        assert!(size < 200_000, "resolved view has {size} nodes");
        assert!(
            resolved
                .to_string()
                .contains("(not expanded: schema too large)")
        );
    }

    #[test]
    fn deep_ref_chains_stop_at_max_depth() {
        let mut defs = Map::new();
        for i in 0..100 {
            defs.insert(
                format!("D{i}"),
                json!({"properties": {"x": {"$ref": format!("#/$defs/D{}", i + 1)}}}),
            );
        }
        let schema = json!({"$ref": "#/$defs/D0", "$defs": defs});
        let resolved = resolve(&schema);
        assert!(
            resolved
                .to_string()
                .contains("(truncated: schema nested too deeply)")
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop_oneof![
                Just("#"),
                Just("#/$defs/a"),
                Just("#/$defs/b"),
                Just("#/definitions/a"),
                Just("#/properties/x"),
                Just("http://x/y"),
                Just("null"),
                Just("object"),
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("$ref"),
                        Just("$defs"),
                        Just("definitions"),
                        Just("a"),
                        Just("b"),
                        Just("properties"),
                        Just("x"),
                        Just("items"),
                        Just("allOf"),
                        Just("anyOf"),
                        Just("oneOf"),
                        Just("type"),
                        Just("required"),
                    ]
                    .prop_map(String::from),
                    inner,
                    0..5,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn resolve_is_total_and_deterministic(schema in arb_json()) {
            let once = resolve(&schema);
            prop_assert_eq!(&once, &resolve(&schema));
        }
    }
}
