//! Checks a `tools/call`'s arguments against the tool's input schema before it is forwarded.
//!
//! The gateway rejects arguments that the upstream would reject anyway, earlier and with errors
//! a model can act on: each names the offending value by JSON pointer with a short message
//! (`/limit: "ten" is not of type "integer"`, `missing required property "path"`), at most
//! [`MAX_ERRORS`] of them, and no message echoes more than [`MAX_VALUE_CHARS`] characters of a
//! value or runs past [`MAX_MESSAGE_CHARS`].
//!
//! The schema is the upstream's verbatim `inputSchema` (not the resolved view of
//! [`crate::schema`]), compiled with the `jsonschema` crate under the draft its `$schema` names
//! (draft 4, 6, 7, 2019-09 or 2020-12); without `$schema` it is 2020-12, the MCP default.
//! Absent arguments are validated as `{}`.
//!
//! Invariant: no IO. The `jsonschema` crate is built without its HTTP and file retrievers and
//! the validator is compiled `offline`, so a remote `$ref` is never fetched. Local `$ref`s
//! (`#/$defs/..`, `#/definitions/..`, `$id`-relative ones inside the same document) work.
//!
//! Invariant: the schema's own problems never block a call. A schema that cannot be used (it
//! is invalid, has a `$ref` outside the document, names an unknown `$schema`, is larger than
//! [`MAX_SCHEMA_NODES`] or deeper than [`MAX_SCHEMA_DEPTH`], or fails while checking, such as a
//! `pattern` that exceeds the regex engine's limits) gives [`Validation::Unvalidated`] with the
//! reason: the caller forwards the call unchecked, as before validation existed, and logs the
//! reason when `first` says nobody has yet.
//!
//! What is checked is the upstream's schema with three deliberate relaxations, each of which
//! can only let more calls through, never fewer:
//! - `format` is an annotation, not an assertion (as 2020-12 says by default, and for every
//!   draft here): servers use formats loosely (`uri` for relative paths, `date-time` without a
//!   zone) and the upstream, which knows what it meant, checks what it needs;
//! - a `required` name that the same schema object's `properties` does not declare (and no
//!   `patternProperties` could) is not enforced: that mismatch is a server bug (a renamed
//!   field, an alias), the model has nothing to go on to supply it, and beside
//!   `additionalProperties: false` it would make every call fail;
//! - OpenAPI's `nullable: true` beside a `type` adds `"null"` to the type, as the
//!   OpenAPI-generated servers that send it mean.
//!
//! Compiling happens once per tool and catalog, on first use ([`crate::Catalog`] keeps the
//! validators in a side table shared by its clones); a compiled validator is `Send + Sync`.

use std::fmt::{self, Write as _};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Draft, ReferencingError, ValidationError};
use serde::Serialize;
use serde_json::{Map, Value};

/// Most errors reported for one call; [`ArgumentErrors::truncated`] says when there were more.
pub const MAX_ERRORS: usize = 10;
/// Longest excerpt of an argument (or schema) value quoted in a message, in characters.
pub const MAX_VALUE_CHARS: usize = 80;
/// Longest message of one [`ArgumentError`], in characters.
pub const MAX_MESSAGE_CHARS: usize = 300;
/// Longest [`ArgumentError::pointer`], in characters.
pub const MAX_POINTER_CHARS: usize = 200;
/// Largest schema compiled, in JSON nodes; larger ones are forwarded unvalidated. Real tool
/// schemas have tens to a few thousand nodes; this bounds the one-off compile cost.
pub const MAX_SCHEMA_NODES: usize = 100_000;
/// Deepest schema compiled, in JSON nesting levels. Compiling and checking recurse along the
/// schema on async worker threads (2 MiB stacks; the deepest schema accepted needs under
/// 256 KiB in a debug build); real tool schemas are rarely ten levels deep.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// Longest [`Validation::Unvalidated`] reason, in characters.
const MAX_REASON_CHARS: usize = 300;
/// Most names listed in one "unexpected properties" message.
const MAX_LISTED_NAMES: usize = 5;
/// Length, in characters, after which a list of allowed values (`enum`) is cut.
const MAX_OPTIONS_CHARS: usize = 160;

/// The outcome of checking arguments that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    /// The arguments satisfy the tool's input schema.
    Valid,
    /// The schema could not be used; forward the call unvalidated. `first` is true for the first
    /// such outcome of this tool in this catalog, so the caller can log `reason` once.
    Unvalidated { reason: String, first: bool },
    /// No tool has this qualified name (only from [`crate::Catalog::validate_arguments`]).
    UnknownTool,
}

/// One way the arguments break the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArgumentError {
    /// JSON pointer to the offending value in the arguments (`""` for the arguments object
    /// itself), at most [`MAX_POINTER_CHARS`] characters.
    pub pointer: String,
    /// What is wrong, at most [`MAX_MESSAGE_CHARS`] characters.
    pub message: String,
}

/// Why the arguments were rejected: at most [`MAX_ERRORS`] errors, in the order found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArgumentErrors {
    pub errors: Vec<ArgumentError>,
    /// Whether there were more errors than listed.
    pub truncated: bool,
}

/// A tool's compiled input schema, or why it has none. Built once, used from any thread.
pub struct ArgumentValidator {
    state: State,
    /// Whether an [`Validation::Unvalidated`] outcome was already handed out.
    reported: AtomicBool,
}

enum State {
    Ready(Box<jsonschema::Validator>),
    Unusable(String),
}

impl ArgumentValidator {
    /// Compiles `input_schema`. Never fails: a schema that cannot be used is remembered with
    /// the reason, and every validation then says [`Validation::Unvalidated`].
    pub fn new(input_schema: &Value) -> Self {
        let state = match compile(input_schema) {
            Ok(validator) => State::Ready(Box::new(validator)),
            Err(reason) => State::Unusable(truncate(&reason, MAX_REASON_CHARS)),
        };
        ArgumentValidator {
            state,
            reported: AtomicBool::new(false),
        }
    }

    /// Why this schema cannot be used, if it cannot.
    pub fn unusable_reason(&self) -> Option<&str> {
        match &self.state {
            State::Ready(_) => None,
            State::Unusable(reason) => Some(reason),
        }
    }

    /// Checks `arguments` (absent arguments are `{}`), which are copied once into a JSON value.
    pub fn validate(
        &self,
        arguments: Option<&Map<String, Value>>,
    ) -> Result<Validation, ArgumentErrors> {
        let validator = match &self.state {
            State::Ready(validator) => validator,
            State::Unusable(reason) => return Ok(self.unvalidated(reason.clone())),
        };
        let instance = Value::Object(arguments.cloned().unwrap_or_default());
        let mut errors = Vec::new();
        let mut truncated = false;
        for error in validator.iter_errors(&instance) {
            if let Some(fault) = schema_fault(error.kind()) {
                return Ok(self.unvalidated(truncate(&fault, MAX_REASON_CHARS)));
            }
            if errors.len() == MAX_ERRORS {
                truncated = true;
                break;
            }
            errors.push(ArgumentError::from_validation(&error));
        }
        if errors.is_empty() {
            Ok(Validation::Valid)
        } else {
            Err(ArgumentErrors { errors, truncated })
        }
    }

    fn unvalidated(&self, reason: String) -> Validation {
        let first = !self.reported.swap(true, Ordering::Relaxed);
        Validation::Unvalidated { reason, first }
    }
}

impl fmt::Debug for ArgumentValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArgumentValidator")
            .field("unusable_reason", &self.unusable_reason())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.pointer, self.message)
        }
    }
}

impl fmt::Display for ArgumentErrors {
    /// One error per line; a last line says when some were left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_char('\n')?;
            }
            write!(f, "{error}")?;
        }
        if self.truncated {
            write!(f, "\n(only the first {MAX_ERRORS} errors are shown)")?;
        }
        Ok(())
    }
}

impl std::error::Error for ArgumentErrors {}

impl ArgumentError {
    fn from_validation(error: &ValidationError<'_>) -> Self {
        ArgumentError {
            pointer: truncate(error.instance_path().as_str(), MAX_POINTER_CHARS),
            message: truncate(&message(error), MAX_MESSAGE_CHARS),
        }
    }
}

/// The compiled validator for `schema`, or why there is none.
fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    let (nodes, depth) = measure(schema);
    if nodes > MAX_SCHEMA_NODES {
        return Err(format!(
            "input schema too large to validate ({nodes} JSON nodes, limit {MAX_SCHEMA_NODES})"
        ));
    }
    if depth > MAX_SCHEMA_DEPTH {
        return Err(format!(
            "input schema nested too deeply to validate (depth {depth}, limit {MAX_SCHEMA_DEPTH})"
        ));
    }
    let draft = match schema.get("$schema") {
        None => Draft::Draft202012,
        Some(Value::String(uri)) => match Draft::from_schema_uri(uri) {
            Draft::Unknown => {
                return Err(format!(
                    "input schema names an unknown $schema {}",
                    excerpt(&Value::from(uri.as_str()))
                ));
            }
            draft => draft,
        },
        Some(_) => return Err("input schema has a $schema that is not a string".to_string()),
    };
    let mut relaxed = schema.clone();
    relax(&mut relaxed);
    jsonschema::options()
        .with_draft(draft)
        .offline()
        .should_validate_formats(false)
        .build(&relaxed)
        .map_err(|error| match error.kind() {
            ValidationErrorKind::Referencing(cause) => unresolvable(cause),
            _ => match error.instance_path().as_str() {
                "" => format!("invalid input schema: {error}"),
                at => format!("invalid input schema at {at}: {error}"),
            },
        })
}

/// Errors that are the schema's fault rather than the arguments': they make the whole check
/// unusable, whatever else it found.
fn schema_fault(kind: &ValidationErrorKind) -> Option<String> {
    match kind {
        ValidationErrorKind::Referencing(cause) => Some(unresolvable(cause)),
        ValidationErrorKind::BacktrackLimitExceeded { error } => Some(format!(
            "a pattern in the input schema exceeded the regex engine's limits: {error}"
        )),
        ValidationErrorKind::RegexEngineFailure { message } => Some(format!(
            "a pattern in the input schema could not be evaluated: {message}"
        )),
        _ => None,
    }
}

fn unresolvable(cause: &ReferencingError) -> String {
    match cause {
        ReferencingError::Unretrievable { .. } => format!(
            "input schema has a $ref to a document outside it, and remote references are \
             never fetched: {cause}"
        ),
        _ => format!("input schema has a $ref that cannot be resolved: {cause}"),
    }
}

/// JSON nodes in `value` and its nesting depth (a scalar has depth 1). Iterative, so even a
/// pathologically deep value cannot overflow the stack here.
fn measure(value: &Value) -> (usize, usize) {
    let mut nodes = 0;
    let mut deepest = 0;
    let mut stack = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        nodes += 1;
        deepest = deepest.max(depth);
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    (nodes, deepest)
}

/// Keywords whose value is a single subschema.
const SUBSCHEMA: &[&str] = &[
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
    "items",
];

/// Keywords whose value is an array of subschemas (`items` too, before 2020-12).
const SUBSCHEMA_ARRAYS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Keywords whose value maps names to subschemas (`dependencies` maps some to arrays, which
/// are skipped as they are not objects).
const SUBSCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "$defs",
    "definitions",
];

/// Applies the relaxations of the module docs to every schema object in `schema`. Only called
/// on schemas within [`MAX_SCHEMA_DEPTH`], so the recursion is bounded.
fn relax(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    drop_undeclared_required(map);
    if map.get("nullable") == Some(&Value::Bool(true)) {
        match map.get_mut("type") {
            Some(Value::String(single)) if single != "null" => {
                let single = std::mem::take(single);
                map.insert(
                    "type".to_string(),
                    Value::Array(vec![Value::from(single), Value::from("null")]),
                );
            }
            Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => {
                types.push(Value::from("null"));
            }
            _ => {}
        }
    }
    for (key, value) in map.iter_mut() {
        let key = key.as_str();
        match value {
            Value::Object(_) if SUBSCHEMA.contains(&key) => relax(value),
            Value::Array(items) if SUBSCHEMA_ARRAYS.contains(&key) => {
                items.iter_mut().for_each(relax);
            }
            Value::Object(entries) if SUBSCHEMA_MAPS.contains(&key) => {
                entries.values_mut().for_each(relax);
            }
            _ => {}
        }
    }
}

fn drop_undeclared_required(map: &mut Map<String, Value>) {
    if map.contains_key("patternProperties") {
        return;
    }
    let Some(Value::Object(properties)) = map.get("properties") else {
        return;
    };
    let declared: Vec<String> = properties.keys().cloned().collect();
    if let Some(Value::Array(required)) = map.get_mut("required") {
        required.retain(|name| {
            name.as_str()
                .is_none_or(|name| declared.iter().any(|d| d == name))
        });
    }
}

/// A short message for `error`, in the model's terms: what the value is and what was expected.
fn message(error: &ValidationError<'_>) -> String {
    let instance = error.instance();
    let value = excerpt(instance);
    match error.kind() {
        ValidationErrorKind::Type {
            kind: TypeKind::Single(expected),
        } => format!("{value} is not of type \"{expected}\""),
        ValidationErrorKind::Type {
            kind: TypeKind::Multiple(expected),
        } => {
            let expected: Vec<String> = expected.iter().map(|t| format!("\"{t}\"")).collect();
            format!("{value} is not of type {}", expected.join(" or "))
        }
        ValidationErrorKind::Required { property } => {
            format!("missing required property {}", excerpt(property))
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            unexpected_properties(unexpected)
        }
        ValidationErrorKind::AdditionalItems { limit } => {
            format!("array has more than the {limit} items allowed")
        }
        ValidationErrorKind::UnevaluatedItems { .. } => {
            "array has items the schema does not allow".to_string()
        }
        ValidationErrorKind::Enum { options } => {
            format!("{value} is not one of {}", options_list(options))
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!(
                "{value} is not the expected value {}",
                excerpt(expected_value)
            )
        }
        ValidationErrorKind::Minimum { limit } => {
            format!("{value} is less than the minimum of {}", excerpt(limit))
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("{value} is greater than the maximum of {}", excerpt(limit))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("{value} must be greater than {}", excerpt(limit))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("{value} must be less than {}", excerpt(limit))
        }
        ValidationErrorKind::MultipleOf { multiple_of } => {
            format!("{value} is not a multiple of {multiple_of}")
        }
        ValidationErrorKind::MinLength { limit } => {
            format!(
                "{value} is shorter than {limit} {}",
                plural(*limit, "character")
            )
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!(
                "{value} is longer than {limit} {}",
                plural(*limit, "character")
            )
        }
        ValidationErrorKind::MinItems { limit } => format!(
            "array has {} items, fewer than the minimum of {limit}",
            instance.as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::MaxItems { limit } => format!(
            "array has {} items, more than the maximum of {limit}",
            instance.as_array().map_or(0, Vec::len)
        ),
        ValidationErrorKind::MinProperties { limit } => format!(
            "object has {} properties, fewer than the minimum of {limit}",
            instance.as_object().map_or(0, Map::len)
        ),
        ValidationErrorKind::MaxProperties { limit } => format!(
            "object has {} properties, more than the maximum of {limit}",
            instance.as_object().map_or(0, Map::len)
        ),
        ValidationErrorKind::UniqueItems => "array items are not unique".to_string(),
        ValidationErrorKind::Contains => {
            "no array item matches what the array must contain".to_string()
        }
        ValidationErrorKind::Pattern { pattern } => format!(
            "{value} does not match the pattern {}",
            excerpt(&Value::from(pattern.as_str()))
        ),
        ValidationErrorKind::Format { format } => {
            format!("{value} is not a valid \"{format}\"")
        }
        ValidationErrorKind::Not { .. } | ValidationErrorKind::FalseSchema => {
            format!("{value} is not allowed here")
        }
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            alternatives(&value, error.instance_path().as_str(), context)
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            format!("{value} matches more than one alternative, but exactly one is allowed")
        }
        ValidationErrorKind::PropertyNames { error } => {
            format!("invalid property name: {}", message(error))
        }
        ValidationErrorKind::ContentEncoding { content_encoding } => {
            format!("{value} is not valid {content_encoding}")
        }
        ValidationErrorKind::ContentMediaType { content_media_type } => {
            format!("{value} is not valid {content_media_type}")
        }
        ValidationErrorKind::Custom { message, .. } => message.clone(),
        other => format!("{value} fails the \"{}\" rule", other.keyword()),
    }
}

/// Why `value` (at `pointer`) matches none of the `anyOf`/`oneOf` alternatives, whose errors
/// are `context`.
fn alternatives(value: &str, pointer: &str, context: &[Vec<ValidationError<'static>>]) -> String {
    // Only the type is wrong in every alternative (`Optional[int]` is `anyOf: [integer, null]`):
    // say which types would do.
    let wrong_type_only = |errors: &Vec<ValidationError<'static>>| match errors.as_slice() {
        [only] if only.instance_path().as_str() == pointer => match only.kind() {
            ValidationErrorKind::Type {
                kind: TypeKind::Single(expected),
            } => Some(vec![*expected]),
            ValidationErrorKind::Type {
                kind: TypeKind::Multiple(expected),
            } => Some(expected.iter().collect()),
            _ => None,
        },
        _ => None,
    };
    if let Some(types) = context
        .iter()
        .map(wrong_type_only)
        .collect::<Option<Vec<_>>>()
    {
        let mut expected: Vec<String> = Vec::new();
        for name in types.into_iter().flatten().map(|t| format!("\"{t}\"")) {
            if !expected.contains(&name) {
                expected.push(name);
            }
        }
        if !expected.is_empty() {
            return format!("{value} is not of type {}", expected.join(" or "));
        }
    }
    let mut text = format!("{value} does not match any of the allowed alternatives");
    // The alternative the caller most likely meant: one whose type matched, then the one with
    // the fewest errors.
    let type_mismatch = |errors: &Vec<ValidationError<'static>>| {
        errors.iter().any(|e| {
            e.instance_path().as_str() == pointer
                && matches!(e.kind(), ValidationErrorKind::Type { .. })
        })
    };
    if let Some(closest) = context
        .iter()
        .filter(|errors| !errors.is_empty())
        .min_by_key(|errors| (type_mismatch(errors), errors.len()))
        .and_then(|errors| errors.first())
    {
        let closest = ArgumentError::from_validation(closest);
        if closest.pointer == pointer {
            let _ = write!(text, "; closest: {}", closest.message);
        } else {
            let _ = write!(text, "; closest: {closest}");
        }
    }
    text
}

fn plural(count: u64, noun: &str) -> String {
    if count == 1 {
        noun.to_string()
    } else {
        format!("{noun}s")
    }
}

fn unexpected_properties(names: &[String]) -> String {
    let mut listed: Vec<String> = names
        .iter()
        .take(MAX_LISTED_NAMES)
        .map(|name| excerpt(&Value::from(name.as_str())))
        .collect();
    if names.len() > MAX_LISTED_NAMES {
        listed.push(format!("and {} more", names.len() - MAX_LISTED_NAMES));
    }
    let noun = if names.len() == 1 {
        "property"
    } else {
        "properties"
    };
    format!("unexpected {noun} {}", listed.join(", "))
}

/// `[a, b, ...]`, cut after about [`MAX_OPTIONS_CHARS`] characters.
fn options_list(options: &Value) -> String {
    let Some(options) = options.as_array() else {
        return excerpt(options);
    };
    let mut list = String::from("[");
    for (i, option) in options.iter().enumerate() {
        if i > 0 {
            list.push_str(", ");
        }
        if list.chars().count() > MAX_OPTIONS_CHARS {
            let _ = write!(list, "… {} more", options.len() - i);
            break;
        }
        list.push_str(&excerpt(option));
    }
    list.push(']');
    list
}

/// `value` as compact JSON, at most [`MAX_VALUE_CHARS`] characters plus a `…` marker. Only
/// the part shown is serialised, so a huge value costs no more than a small one. A long
/// string keeps its quotes: `"aaaa…"`.
fn excerpt(value: &Value) -> String {
    if let Value::String(text) = value {
        return match text.char_indices().nth(MAX_VALUE_CHARS) {
            None => value.to_string(),
            Some((cut, _)) => {
                let shown = Value::from(&text[..cut]).to_string();
                format!("{}…\"", &shown[..shown.len() - 1])
            }
        };
    }
    // Enough bytes for MAX_VALUE_CHARS characters of any width, and one more to know if cut.
    let mut out = Bounded {
        bytes: Vec::new(),
        limit: MAX_VALUE_CHARS * 4 + 1,
    };
    // The writer refuses bytes past its limit; that error only means "cut here".
    let _ = serde_json::to_writer(&mut out, value);
    let text = match String::from_utf8(out.bytes) {
        Ok(text) => text,
        Err(error) => {
            let valid = error.utf8_error().valid_up_to();
            let mut bytes = error.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
    };
    truncate(&text, MAX_VALUE_CHARS + 1)
}

/// `text` cut to at most `max` characters, the last of them `…` when cut.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if text[cut..].chars().nth(1).is_some() => format!("{}…", &text[..cut]),
        _ => text.to_string(),
    }
}

/// A writer that takes at most `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.bytes.len());
        if room == 0 {
            return Err(io::Error::other("excerpt is full"));
        }
        let taken = room.min(buf.len());
        self.bytes.extend_from_slice(&buf[..taken]);
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::sync::Arc;

    use expect_test::{Expect, expect};
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::tests::shared;
    use crate::{Catalog, ServerTools};

    /// What a caller would see: `valid`, `unvalidated: <reason>`, or the errors, one per line.
    fn outcome(result: Result<Validation, ArgumentErrors>) -> String {
        match result {
            Ok(Validation::Valid) => "valid".to_string(),
            Ok(Validation::Unvalidated { reason, .. }) => format!("unvalidated: {reason}"),
            Ok(Validation::UnknownTool) => "unknown tool".to_string(),
            Err(errors) => errors.to_string(),
        }
    }

    /// Checks `arguments` (`null` for absent ones) against `schema`.
    fn check(schema: &Value, arguments: Value, expect: Expect) {
        let validator = ArgumentValidator::new(schema);
        expect.assert_eq(&outcome(validator.validate(arguments.as_object())));
    }

    fn file_tool() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                "verbose": {"type": "boolean"},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
                "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2, "uniqueItems": true}
            },
            "required": ["path"]
        })
    }

    #[test]
    fn types_and_required_are_reported_with_pointers() {
        let schema = file_tool();
        check(&schema, json!({"path": "a.txt"}), expect!["valid"]);
        check(
            &schema,
            json!({"path": "a.txt", "limit": 10.0}),
            expect!["valid"],
        );
        check(
            &schema,
            json!({"limit": "ten"}),
            expect![[r#"
                missing required property "path"
                /limit: "ten" is not of type "integer""#]],
        );
        check(
            &schema,
            json!(null),
            expect![[r#"missing required property "path""#]],
        );
        check(
            &schema,
            json!({"path": 3, "verbose": "yes", "limit": 1.5}),
            expect![[r#"
                /limit: 1.5 is not of type "integer"
                /path: 3 is not of type "string"
                /verbose: "yes" is not of type "boolean""#]],
        );
        check(
            &schema,
            json!({"path": "p", "limit": 0, "ratio": 0, "name": "ABCDEFG", "tags": []}),
            expect![[r#"
                /limit: 0 is less than the minimum of 1
                /name: "ABCDEFG" is longer than 5 characters
                /name: "ABCDEFG" does not match the pattern "^[a-z]+$"
                /ratio: 0 must be greater than 0
                /tags: array has 0 items, fewer than the minimum of 1"#]],
        );
        check(
            &schema,
            json!({"path": "p", "limit": 5000, "ratio": 0.7, "name": "a", "tags": ["x", "x", "y"]}),
            expect![[r#"
                /limit: 5000 is greater than the maximum of 1000
                /name: "a" is shorter than 2 characters
                /ratio: 0.7 is not a multiple of 0.5
                /tags: array has 3 items, more than the maximum of 2
                /tags: array items are not unique"#]],
        );
    }

    #[test]
    fn enums_and_constants_list_what_is_allowed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "mode": {"enum": ["read", "write", "append"]},
                "version": {"const": 2},
                "many": {"enum": (0..100).map(|i| format!("option-{i}")).collect::<Vec<_>>()}
            }
        });
        check(
            &schema,
            json!({"mode": "write", "version": 2}),
            expect!["valid"],
        );
        check(
            &schema,
            json!({"mode": "delete", "version": "2", "many": "option-x"}),
            expect![[r#"
                /many: "option-x" is not one of ["option-0", "option-1", "option-2", "option-3", "option-4", "option-5", "option-6", "option-7", "option-8", "option-9", "option-10", "option-11", "option-12", "option-13", … 86 more]
                /mode: "delete" is not one of ["read", "write", "append"]
                /version: "2" is not the expected value 2"#]],
        );
    }

    #[test]
    fn nested_objects_and_arrays_point_at_the_offending_value() {
        let schema = json!({
            "type": "object",
            "properties": {
                "order": {
                    "type": "object",
                    "properties": {
                        "items": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                                "required": ["sku"],
                                "additionalProperties": false
                            }
                        },
                        "a/b~c": {"type": "string"}
                    }
                }
            }
        });
        check(
            &schema,
            json!({"order": {"items": [{"sku": "A", "qty": 1}, {"qty": "2", "colour": "red", "size": 3}], "a/b~c": 1}}),
            expect![[r#"
                /order/a~1b~0c: 1 is not of type "string"
                /order/items/1/qty: "2" is not of type "integer"
                /order/items/1: unexpected properties "colour", "size"
                /order/items/1: missing required property "sku""#]],
        );
    }

    #[test]
    fn any_of_says_which_types_or_which_alternative_was_closest() {
        let schema = json!({
            "type": "object",
            "properties": {
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null},
                "source": {"oneOf": [
                    {"type": "string"},
                    {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
                ]}
            }
        });
        check(
            &schema,
            json!({"limit": null, "source": {"url": "u"}}),
            expect!["valid"],
        );
        check(
            &schema,
            json!({"limit": "ten", "source": {"path": "p"}}),
            expect![[r#"
                /limit: "ten" is not of type "integer" or "null"
                /source: {"path":"p"} does not match any of the allowed alternatives; closest: missing required property "url""#]],
        );
    }

    #[test]
    fn local_refs_and_defs_are_followed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "owner": {"$ref": "#/$defs/User"},
                "legacy": {"$ref": "#/definitions/Id"},
                "tree": {"$ref": "#/$defs/Node"}
            },
            "$defs": {
                "User": {"type": "object", "properties": {"login": {"type": "string"}}, "required": ["login"]},
                "Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}, "value": {"type": "integer"}}}
            },
            "definitions": {"Id": {"type": "integer"}}
        });
        check(
            &schema,
            json!({"owner": {"login": "x"}, "legacy": 7, "tree": {"children": [{"value": 1, "children": []}]}}),
            expect!["valid"],
        );
        check(
            &schema,
            json!({"owner": {}, "legacy": "7", "tree": {"children": [{"children": [{"value": "deep"}]}]}}),
            expect![[r#"
                /legacy: "7" is not of type "integer"
                /owner: missing required property "login"
                /tree/children/0/children/0/value: "deep" is not of type "integer""#]],
        );
        // A `$id` makes `#/...` refs relative to a remote-looking base; they still resolve
        // inside the document.
        check(
            &json!({
                "$id": "https://example.com/schemas/tool.json",
                "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"$ref": "tool.json#/$defs/A"}},
                "$defs": {"A": {"type": "integer"}}
            }),
            json!({"a": "x", "b": "y"}),
            expect![[r#"
                /a: "x" is not of type "integer"
                /b: "y" is not of type "integer""#]],
        );
    }

    #[test]
    fn remote_refs_are_never_fetched_and_never_block() {
        // A listener the validator would reach if it tried to fetch: it must see no connection.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("local address").port();
        let schema = json!({
            "type": "object",
            "properties": {"user": {"$ref": format!("http://127.0.0.1:{port}/user.json")}}
        });
        let validator = ArgumentValidator::new(&schema);
        let result = validator.validate(json!({"user": 1}).as_object());
        match listener.accept() {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            other => panic!("the remote $ref was fetched: {other:?}"),
        }
        let Ok(Validation::Unvalidated {
            reason,
            first: true,
        }) = result
        else {
            panic!("expected an unvalidated call, got {result:?}");
        };
        assert!(
            reason.contains("remote references are never fetched"),
            "{reason}"
        );
        assert_eq!(validator.unusable_reason(), Some(reason.as_str()));

        check(
            &json!({"$ref": "http://127.0.0.1:9/x"}),
            json!({"anything": true}),
            expect![
                "unvalidated: input schema has a $ref to a document outside it, and remote references are never fetched: Resource 'http://127.0.0.1:9/x' is not present in a registry and retrieving it failed: Retrieval is disabled, cannot fetch http://127.0.0.1:9/x"
            ],
        );
        check(
            &json!({"properties": {"id": {"$ref": "common.json#/$defs/Id"}}}),
            json!({"id": 1}),
            expect![
                "unvalidated: input schema has a $ref to a document outside it, and remote references are never fetched: Resource 'common.json#/$defs/Id' is not present in a registry and retrieving it failed: No base URI is available"
            ],
        );
        check(
            &json!({"properties": {"id": {"$ref": "#/$defs/Missing"}}}),
            json!({"id": 1}),
            expect![
                "unvalidated: input schema has a $ref that cannot be resolved: Pointer '/$defs/Missing' does not exist"
            ],
        );
    }

    #[test]
    fn invalid_schemas_fall_back_to_unvalidated() {
        check(
            &json!({"type": "objekt"}),
            json!({}),
            expect![[
                r#"unvalidated: invalid input schema at /type: "objekt" is not valid under any of the schemas listed in the 'anyOf' keyword"#
            ]],
        );
        // Draft 3's boolean `required`, still sent by some servers.
        check(
            &json!({"type": "object", "properties": {"x": {"type": "string", "required": true}}}),
            json!({"x": 1}),
            expect![[
                r#"unvalidated: invalid input schema at /properties/x/required: true is not of type "array""#
            ]],
        );
        check(
            &json!({"properties": {"x": {"type": "string", "pattern": "("}}}),
            json!({"x": "a"}),
            expect![[
                r#"unvalidated: invalid input schema at /properties/x/pattern: "(" is not a "regex""#
            ]],
        );
        check(
            &json!({"$schema": "https://example.com/my-dialect", "type": "object"}),
            json!({}),
            expect![[
                r#"unvalidated: input schema names an unknown $schema "https://example.com/my-dialect""#
            ]],
        );
        check(
            &json!({"$schema": 7, "type": "object"}),
            json!({}),
            expect!["unvalidated: input schema has a $schema that is not a string"],
        );
    }

    #[test]
    fn unvalidated_reason_is_first_reported_once() {
        let validator = ArgumentValidator::new(&json!({"type": "objekt"}));
        assert!(validator.unusable_reason().is_some());
        let firsts: Vec<bool> = (0..3)
            .map(|_| match validator.validate(None) {
                Ok(Validation::Unvalidated { first, .. }) => first,
                other => panic!("expected unvalidated, got {other:?}"),
            })
            .collect();
        assert_eq!(firsts, [true, false, false]);
    }

    #[test]
    fn schema_dialect_follows_dollar_schema() {
        // zod-to-json-schema (TypeScript SDK servers) sends draft-07.
        let draft7 = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "count": {"type": "integer", "exclusiveMinimum": 0},
                "point": {"$ref": "#/definitions/Point"},
                "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
            },
            "required": ["count"],
            "additionalProperties": false,
            "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}}
        });
        check(
            &draft7,
            json!({"count": 1, "point": {"x": 1.5}, "pair": ["a", 1]}),
            expect!["valid"],
        );
        check(
            &draft7,
            json!({"count": 0, "point": {"x": "1"}, "pair": ["a", "b"], "extra": true}),
            expect![[r#"
                /count: 0 must be greater than 0
                /pair/1: "b" is not of type "integer"
                /point/x: "1" is not of type "number"
                unexpected property "extra""#]],
        );
        // Draft 4's boolean exclusiveMinimum.
        check(
            &json!({
                "$schema": "http://json-schema.org/draft-04/schema#",
                "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": true}}
            }),
            json!({"n": 0}),
            expect!["/n: 0 must be greater than 0"],
        );
        // Without `$schema` it is 2020-12: `prefixItems` applies, and a draft-4-style boolean
        // `exclusiveMinimum` makes the schema invalid rather than blocking calls.
        check(
            &json!({"properties": {"pair": {"prefixItems": [{"type": "string"}, {"type": "integer"}]}}}),
            json!({"pair": ["a", "b"]}),
            expect![[r#"/pair/1: "b" is not of type "integer""#]],
        );
        check(
            &json!({"properties": {"n": {"minimum": 0, "exclusiveMinimum": true}}}),
            json!({"n": 0}),
            expect![[
                r#"unvalidated: invalid input schema at /properties/n/exclusiveMinimum: true is not of type "number""#
            ]],
        );
    }

    #[test]
    fn schemas_mcp_servers_really_send() {
        // `type: object` and nothing else; absent and empty arguments.
        let bare = json!({"type": "object"});
        check(&bare, json!(null), expect!["valid"]);
        check(&bare, json!({"anything": [1, 2]}), expect!["valid"]);
        check(&json!({}), json!({"x": 1}), expect!["valid"]);
        check(
            &json!({"type": "object", "properties": {}}),
            json!(null),
            expect!["valid"],
        );
        // `additionalProperties` absent: extra arguments are the upstream's business.
        check(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            json!({"a": "x", "b": 2}),
            expect!["valid"],
        );
        // `required` names no property declares: not enforced, even beside
        // `additionalProperties: false`, where it would fail every call.
        check(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "ghost"]}),
            json!(null),
            expect![[r#"missing required property "a""#]],
        );
        check(
            &json!({
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["ghost"],
                "additionalProperties": false
            }),
            json!({"a": "x"}),
            expect!["valid"],
        );
        // ... but a schema without `properties` means what it says.
        check(
            &json!({"type": "object", "required": ["a"]}),
            json!({}),
            expect![[r#"missing required property "a""#]],
        );
        // `format` is not enforced.
        check(
            &json!({"properties": {
                "when": {"type": "string", "format": "date-time"},
                "url": {"type": "string", "format": "uri"},
                "mail": {"type": "string", "format": "email"},
                "custom": {"type": "string", "format": "made-up"}
            }}),
            json!({"when": "tomorrow", "url": "./relative", "mail": "nobody", "custom": "x"}),
            expect!["valid"],
        );
        // OpenAPI's `nullable`.
        check(
            &json!({"properties": {
                "a": {"type": "string", "nullable": true},
                "b": {"type": ["integer"], "nullable": true},
                "c": {"type": "string"}
            }}),
            json!({"a": null, "b": null, "c": null}),
            expect![[r#"/c: null is not of type "string""#]],
        );
        // Arguments that are not an object at all cannot come through this API; a schema whose
        // root is not `type: object` still sees `{}` for absent ones.
        check(
            &json!({"type": "string"}),
            json!(null),
            expect![[r#"{} is not of type "string""#]],
        );
    }

    #[test]
    fn huge_and_deep_schemas_are_not_compiled() {
        let properties: Map<String, Value> = (0..MAX_SCHEMA_NODES)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        check(
            &json!({"type": "object", "properties": properties}),
            json!({"p0": 1}),
            expect![
                "unvalidated: input schema too large to validate (200003 JSON nodes, limit 100000)"
            ],
        );
        let mut deep = json!({"type": "integer"});
        for _ in 0..MAX_SCHEMA_DEPTH {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        check(
            &deep,
            json!({"x": 1}),
            expect![
                "unvalidated: input schema nested too deeply to validate (depth 130, limit 64)"
            ],
        );
        // A large schema within the limit (a 2,000-property tool) compiles and checks.
        let properties: Map<String, Value> = (0..2_000)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "integer", "description": "a field"}),
                )
            })
            .collect();
        check(
            &json!({"type": "object", "properties": properties}),
            json!({"p0": 1, "p1999": "x"}),
            expect![[r#"/p1999: "x" is not of type "integer""#]],
        );
    }

    #[test]
    fn deepest_accepted_schema_fits_half_a_worker_stack() {
        // Calls are checked on async worker threads (tokio's have 2 MiB stacks); compiling
        // and checking recurse along the schema, so its depth is capped well within that.
        let mut schema = json!({"type": "integer"});
        let mut arguments = json!("leaf");
        while measure(&json!({"properties": {"x": schema.clone()}})).1 <= MAX_SCHEMA_DEPTH {
            schema = json!({"properties": {"x": schema}, "required": ["x"]});
            arguments = json!({"x": arguments});
        }
        assert_eq!(measure(&schema).1, MAX_SCHEMA_DEPTH);
        let outcome = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                let validator = ArgumentValidator::new(&schema);
                outcome(validator.validate(arguments.as_object()))
            })
            .expect("spawn")
            .join()
            .expect("no stack overflow");
        let pointer = "/x".repeat(31);
        assert_eq!(
            outcome,
            format!("{pointer}: \"leaf\" is not of type \"integer\"")
        );
    }

    #[test]
    fn long_values_are_truncated_in_messages() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "list": {"type": "string"},
                "map": {"type": "array"},
                "word": {"enum": ["short"]}
            },
            "additionalProperties": {"type": "string"}
        });
        let long_key = "k".repeat(500);
        let mut arguments = json!({
            "n": "x".repeat(10_000),
            "list": (0..10_000).collect::<Vec<_>>(),
            "map": {"key": "é".repeat(5_000)},
            "word": "ü".repeat(1_000)
        });
        arguments[long_key.as_str()] = json!(1);
        let errors = match ArgumentValidator::new(&schema).validate(arguments.as_object()) {
            Err(errors) => errors,
            other => panic!("expected errors, got {other:?}"),
        };
        expect![[r#"
            /kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk…: 1 is not of type "string"
            /list: [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29… is not of type "string"
            /map: {"key":"éééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé… is not of type "array"
            /n: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…" is not of type "integer"
            /word: "üüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüü…" is not one of ["short"]"#]]
        .assert_eq(&errors.to_string());
        for error in &errors.errors {
            assert!(error.pointer.chars().count() <= MAX_POINTER_CHARS);
            assert!(error.message.chars().count() <= MAX_MESSAGE_CHARS);
        }
    }

    #[test]
    fn errors_are_capped() {
        let properties: Map<String, Value> = (0..30)
            .map(|i| (format!("p{i:02}"), json!({"type": "integer"})))
            .collect();
        let arguments: Map<String, Value> =
            (0..30).map(|i| (format!("p{i:02}"), json!("x"))).collect();
        let validator = ArgumentValidator::new(&json!({"properties": properties}));
        let errors = match validator.validate(Some(&arguments)) {
            Err(errors) => errors,
            other => panic!("expected errors, got {other:?}"),
        };
        assert_eq!(errors.errors.len(), MAX_ERRORS);
        assert!(errors.truncated);
        expect![[r#"
            /p00: "x" is not of type "integer"
            /p01: "x" is not of type "integer"
            /p02: "x" is not of type "integer"
            /p03: "x" is not of type "integer"
            /p04: "x" is not of type "integer"
            /p05: "x" is not of type "integer"
            /p06: "x" is not of type "integer"
            /p07: "x" is not of type "integer"
            /p08: "x" is not of type "integer"
            /p09: "x" is not of type "integer"
            (only the first 10 errors are shown)"#]]
        .assert_eq(&errors.to_string());

        // Exactly the cap is not truncated.
        let arguments: Map<String, Value> = arguments.into_iter().take(MAX_ERRORS).collect();
        let errors = validator.validate(Some(&arguments)).expect_err("invalid");
        assert_eq!((errors.errors.len(), errors.truncated), (MAX_ERRORS, false));
    }

    #[test]
    fn errors_serialize_for_a_json_rpc_error_payload() {
        let errors = ArgumentValidator::new(&file_tool())
            .validate(json!({"limit": "ten"}).as_object())
            .expect_err("invalid");
        expect![[r#"{"errors":[{"pointer":"","message":"missing required property \"path\""},{"pointer":"/limit","message":"\"ten\" is not of type \"integer\""}],"truncated":false}"#]]
        .assert_eq(&serde_json::to_string(&errors).unwrap_or_default());
    }

    fn catalog() -> Catalog {
        let (catalog, problems) = Catalog::build(&[ServerTools {
            server: "fs".into(),
            description: None,
            tools: shared(vec![
                json!({"name": "read_file", "inputSchema": file_tool()}),
                json!({"name": "broken", "inputSchema": {"type": "objekt"}}),
                json!({"name": "remote", "inputSchema": {"$ref": "http://127.0.0.1:9/x"}}),
            ]),
        }]);
        assert_eq!(problems, Vec::new());
        catalog
    }

    #[test]
    fn catalog_validates_by_qualified_name() {
        let catalog = catalog();
        let check = |name: &str, arguments: Value, expect: Expect| {
            expect.assert_eq(&outcome(
                catalog.validate_arguments(name, arguments.as_object()),
            ));
        };
        check("fs__read_file", json!({"path": "a"}), expect!["valid"]);
        check(
            "fs__read_file",
            json!({"path": 1}),
            expect![[r#"/path: 1 is not of type "string""#]],
        );
        check("read_file", json!({}), expect!["unknown tool"]);
        check(
            "fs__broken",
            json!(null),
            expect![[
                r#"unvalidated: invalid input schema at /type: "objekt" is not valid under any of the schemas listed in the 'anyOf' keyword"#
            ]],
        );
        // A clone of the snapshot (and the catalog `with_vectors` makes) shares the compiled
        // validators, so the reason is still reported once.
        let first = |catalog: &Catalog| match catalog.validate_arguments("fs__remote", None) {
            Ok(Validation::Unvalidated { first, .. }) => first,
            other => panic!("expected unvalidated, got {other:?}"),
        };
        assert!(first(&catalog));
        assert!(!first(&catalog.clone()));
        let with_vectors = catalog
            .clone()
            .with_vectors("m".into(), vec![vec![1.0, 0.0]; 3])
            .expect("one vector per tool");
        assert!(!first(&with_vectors));
    }

    #[test]
    fn one_shared_catalog_validates_from_many_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<ArgumentValidator>();
        shareable::<Catalog>();

        let catalog = Arc::new(catalog());
        let cases = [
            ("fs__read_file", json!({"path": "a", "limit": 3}), "valid"),
            (
                "fs__read_file",
                json!({"limit": "ten"}),
                "missing required property \"path\"\n/limit: \"ten\" is not of type \"integer\"",
            ),
            ("fs__missing", json!({}), "unknown tool"),
        ];
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let catalog = Arc::clone(&catalog);
                let cases = cases.clone();
                std::thread::spawn(move || {
                    let mut firsts = 0;
                    for round in 0..200 {
                        let (name, arguments, expected) = &cases[(t + round) % cases.len()];
                        assert_eq!(
                            outcome(catalog.validate_arguments(name, arguments.as_object())),
                            *expected
                        );
                        if let Ok(Validation::Unvalidated { first: true, .. }) =
                            catalog.validate_arguments("fs__broken", None)
                        {
                            firsts += 1;
                        }
                    }
                    firsts
                })
            })
            .collect();
        let firsts: usize = threads
            .into_iter()
            .map(|thread| thread.join().expect("validation thread panicked"))
            .sum();
        assert_eq!(
            firsts, 1,
            "an unusable schema is reported first exactly once"
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z]{0,3}|.{0,200}".prop_map(Value::from),
            prop_oneof![
                Just("object"),
                Just("string"),
                Just("integer"),
                Just("array"),
                Just("null"),
                Just("#"),
                Just("#/$defs/a"),
                Just("http://127.0.0.1:9/x"),
                Just("^[a-z]+$"),
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("type"),
                        Just("properties"),
                        Just("required"),
                        Just("items"),
                        Just("enum"),
                        Just("anyOf"),
                        Just("oneOf"),
                        Just("$ref"),
                        Just("$defs"),
                        Just("a"),
                        Just("b"),
                        Just("minimum"),
                        Just("pattern"),
                        Just("additionalProperties"),
                        Just("nullable"),
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
        fn validation_is_total_bounded_and_deterministic(
            schema in arb_json(),
            arguments in prop::collection::btree_map("[a-z]{1,2}", arb_json(), 0..4),
        ) {
            let arguments: Map<String, Value> = arguments.into_iter().collect();
            let validator = ArgumentValidator::new(&schema);
            // Only `first` may differ between two checks: the second is no longer the first.
            let check = || validator.validate(Some(&arguments)).map(|outcome| match outcome {
                Validation::Unvalidated { reason, .. } => Validation::Unvalidated { reason, first: false },
                other => other,
            });
            let once = check();
            prop_assert_eq!(&once, &check());
            match once {
                Err(errors) => {
                    prop_assert!(!errors.errors.is_empty() && errors.errors.len() <= MAX_ERRORS);
                    for error in &errors.errors {
                        prop_assert!(error.pointer.chars().count() <= MAX_POINTER_CHARS);
                        prop_assert!(error.message.chars().count() <= MAX_MESSAGE_CHARS);
                    }
                }
                Ok(Validation::Unvalidated { reason, .. }) => {
                    prop_assert!(reason.chars().count() <= MAX_REASON_CHARS);
                }
                Ok(_) => {}
            }
        }
    }
}
