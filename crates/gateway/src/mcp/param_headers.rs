//! SEP-2243 `Mcp-Param-*` request headers on the Streamable HTTP front (MCP 2026-07-28).
//!
//! A tool's `inputSchema` may mark a primitive property with `"x-mcp-header": "Region"`; a
//! client calling that tool over HTTP then mirrors the argument into `Mcp-Param-Region`, so
//! intermediaries can route on it without reading the body. The gateway acts on the body, so it
//! must check that the two agree: a load balancer may have routed on the header while the
//! upstream runs what the body says. rmcp 3.11 checks these headers only through
//! `ServerHandler::get_tool`, which it calls on a fresh handler without the request, so it
//! cannot know which tools this caller sees; this middleware runs on `/mcp` before rmcp, with
//! the caller's principal.
//!
//! Invariants:
//! - Only `tools/call` requests of 2026-07-28 or later are checked: the version is the
//!   `MCP-Protocol-Version` header, else (no header) the body's `_meta`, compared as rmcp
//!   compares it for its own header checks. Older requests pass untouched.
//! - The body is buffered only for a POST that may need checking: a 2026-07-28 request whose
//!   `Mcp-Method` is `tools/call` or absent, or one without a version header that carries
//!   `Mcp-Param-*` headers. It is read up to `[limits] request_bytes` (413 beyond, as rmcp's
//!   own limit answers) and passed on byte for byte.
//! - The schema is the one the caller's own `tools/list` shows under the called name (its
//!   profile, its exposure mode: in search mode only pinned tools are listed). Unknown and
//!   hidden tools, names reached through an alias, and tools without well-formed annotations
//!   pass untouched: the handler answers for them as for any call.
//! - A rejection is HTTP 400 with JSON-RPC `-32020` (HeaderMismatch) and the request's id; its
//!   message names the header and the argument, never a value (a header may carry a tenant or
//!   an account the operator would not want echoed into logs).
//! - No input panics; a body that is not a JSON-RPC `tools/call` request passes on for rmcp to
//!   answer.
//!
//! The rules, from the 2026-07-28 transport specification:
//! - A value wrapped exactly in `=?base64?` and `?=` is strict, padded, standard-alphabet
//!   Base64 of UTF-8 text; anything else is literal. Optional whitespace around the value (OWS,
//!   spaces and tabs) is not part of it. A value with bytes outside visible ASCII, space and tab
//!   is refused.
//! - An argument that is a string, number or boolean must come with its header, equal to its
//!   string form (`true`/`false`, a number's decimal text; numbers also compare numerically, as
//!   the specification recommends, so `42.0` agrees with `42`).
//! - An argument that is `null` or absent: the header is not expected, and one sent anyway is
//!   ignored once its encoding has been checked ("MUST NOT expect the header"; the TypeScript
//!   SDK does the same). An object or array cannot be mirrored: no header is expected, and one
//!   sent does not match; the argument check reports the wrong type.
//! - Only well-formed annotations count: a non-empty RFC 9110 token on a `string`, `integer`
//!   or `boolean` property reached from the root through `properties` alone. A name declared
//!   twice (case-insensitively) makes the tool invalid to clients, which drop it; neither
//!   declaration is enforced. `Mcp-Param-*` headers no annotation names are ignored.
//! - A header sent twice is refused: an intermediary could route on either copy.

use std::{borrow::Cow, collections::HashMap, sync::Arc};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, HeaderName, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use base64::{Engine, prelude::BASE64_STANDARD};
use catalog::Catalog;
use rmcp::model::{ErrorCode, ProtocolVersion};
use serde_json::{Number, Value};

use crate::{Gateway, mcp::meta, principal::Principal};

/// Checks a request's `Mcp-Param-*` headers against its `tools/call` body (the layer on `/mcp`;
/// see the module docs for what is checked and when).
pub(crate) async fn check(
    State(gateway): State<Arc<Gateway>>,
    request: Request,
    next: Next,
) -> Response {
    if !may_need_check(request.method(), request.headers()) {
        return next.run(request).await;
    }
    let limit = gateway.config().policy.limits.request_bytes;
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        // Over the limit, or the client went away mid-body (then no one reads the answer).
        // A plain 413 is what rmcp answers for its own limit; `serve` rewrites both alike.
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let catalog = gateway.catalog();
    let principal = parts
        .extensions
        .get::<Principal>()
        .cloned()
        .unwrap_or(Principal::Local);
    let verdict = validate_request(&parts.headers, &bytes, |name| {
        listed_annotations(&gateway, &catalog, principal, name)
    });
    match verdict {
        Ok(()) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(rejection) => rejection.into_response(),
    }
}

/// Prefix of the mirrored argument headers, as `http` stores names (lower case).
const PARAM_PREFIX: &str = "mcp-param-";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
const MCP_METHOD: &str = "mcp-method";
/// Where a 2026-07-28 request names its version in `params._meta`.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const BASE64_PREFIX: &str = "=?base64?";
const BASE64_SUFFIX: &str = "?=";

/// Whether a request may need checking, from its method and headers alone (before its body is
/// read). A 2026-07-28 request whose `Mcp-Method` names another method is not a `tools/call`:
/// if its body says otherwise, rmcp refuses the mismatch.
fn may_need_check(method: &Method, headers: &HeaderMap) -> bool {
    if method != Method::POST {
        return false;
    }
    match headers.get(PROTOCOL_VERSION) {
        Some(version) => {
            version.to_str().is_ok_and(uses_standard_headers)
                && headers
                    .get(MCP_METHOD)
                    .is_none_or(|method| method == "tools/call")
        }
        None => headers
            .keys()
            .any(|name| name.as_str().starts_with(PARAM_PREFIX)),
    }
}

/// Whether protocol `version` has SEP-2243 headers; compared as rmcp compares it, so the two
/// agree on which requests are held to them.
fn uses_standard_headers(version: &str) -> bool {
    version >= ProtocolVersion::STANDARD_HEADERS.as_str()
}

/// The annotations of `name`'s `inputSchema` as the caller's `tools/list` shows it; none when
/// it lists no tool by that name (unknown, hidden, an alias, or not pinned in search mode).
fn listed_annotations<'c>(
    gateway: &Gateway,
    catalog: &'c Catalog,
    principal: Principal,
    name: &str,
) -> Vec<Annotation<'c>> {
    // Listed under its qualified name only: a call by alias names no tool the client listed.
    let Some(entry) = catalog.get(name).filter(|entry| entry.qualified == name) else {
        return Vec::new();
    };
    let found = annotations(entry.input_schema());
    // Most tools have none: the caller's view (which may sum the catalog's costs) is not needed.
    if found.is_empty() {
        return found;
    }
    let access = gateway.access(principal);
    if !access.permits(entry) {
        return Vec::new();
    }
    if access.exposure() == config::Exposure::Search {
        // Search mode lists the meta-tools (no annotations, and they shadow catalog tools of the
        // same name) and the pinned tools, each under its qualified name.
        let meta = matches!(
            name,
            meta::SEARCH_TOOLS | meta::GET_TOOL_DETAILS | meta::CALL_TOOL
        );
        let pinned = access.pinned().iter().any(|pinned| {
            catalog
                .get(pinned)
                .is_some_and(|p| p.qualified == entry.qualified)
        });
        if meta || !pinned {
            return Vec::new();
        }
    }
    found
}

/// The checks on a buffered body: `Ok` unless it is a 2026-07-28 `tools/call` request whose
/// headers disagree with its arguments. `annotations_of` gives the called tool's annotations.
fn validate_request<'s>(
    headers: &HeaderMap,
    body: &[u8],
    annotations_of: impl FnOnce(&str) -> Vec<Annotation<'s>>,
) -> Result<(), Rejection> {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return Ok(());
    }
    // A tools/call without a usable id is no request rmcp would run.
    let Some(id) = message
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
    else {
        return Ok(());
    };
    let params = message.get("params");
    let version = match headers.get(PROTOCOL_VERSION) {
        Some(version) => version.to_str().ok(),
        None => params
            .and_then(|p| p.get("_meta"))
            .and_then(|meta| meta.get(META_VERSION))
            .and_then(Value::as_str),
    };
    if !version.is_some_and(uses_standard_headers) {
        return Ok(());
    }
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(());
    };
    let annotations = annotations_of(name);
    let arguments = params.and_then(|p| p.get("arguments"));
    check_params(headers, &annotations, arguments).map_err(|mismatch| Rejection {
        id: id.clone(),
        mismatch,
    })
}

/// A property of an input schema mirrored into a header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Annotation<'s> {
    /// The `x-mcp-header` value as declared: `Region` for `Mcp-Param-Region`.
    name: &'s str,
    /// Property names from the schema root to the annotated property.
    path: Vec<&'s str>,
}

/// The well-formed `x-mcp-header` annotations of `schema` (see the module docs).
fn annotations(schema: &Value) -> Vec<Annotation<'_>> {
    let mut found = Vec::new();
    collect(schema.get("properties"), &mut Vec::new(), &mut found);
    let mut uses: HashMap<String, usize> = HashMap::new();
    for annotation in &found {
        *uses
            .entry(annotation.name.to_ascii_lowercase())
            .or_default() += 1;
    }
    found.retain(|a| uses.get(&a.name.to_ascii_lowercase()) == Some(&1));
    found
}

/// Recursion is bounded by the JSON's nesting, which serde_json limits when parsing.
fn collect<'s>(
    properties: Option<&'s Value>,
    path: &mut Vec<&'s str>,
    found: &mut Vec<Annotation<'s>>,
) {
    let Some(Value::Object(properties)) = properties else {
        return;
    };
    for (key, property) in properties {
        path.push(key);
        if let Some(name) = property.get("x-mcp-header").and_then(Value::as_str)
            && is_token(name)
            && matches!(
                property.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "boolean")
            )
        {
            found.push(Annotation {
                name,
                path: path.clone(),
            });
        }
        collect(property.get("properties"), path, found);
        path.pop();
    }
}

/// RFC 9110 `token` (`1*tchar`): what a header name may be made of.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Checks every annotated argument against its header.
fn check_params(
    headers: &HeaderMap,
    annotations: &[Annotation<'_>],
    arguments: Option<&Value>,
) -> Result<(), Mismatch> {
    for annotation in annotations {
        let header = format!("Mcp-Param-{}", annotation.name);
        let sent = sent_value(headers, &header)?;
        let argument = arguments.and_then(|arguments| {
            annotation
                .path
                .iter()
                .try_fold(arguments, |value, key| value.get(*key))
        });
        match (sent, argument.filter(|value| !value.is_null())) {
            // Null or absent: no header expected.
            (_, None) => {}
            // Cannot be mirrored: the argument check reports the type.
            (None, Some(Value::Object(_) | Value::Array(_))) => {}
            (None, Some(_)) => {
                return Err(Mismatch::Missing {
                    header,
                    argument: annotation.path.join("."),
                });
            }
            (Some(sent), Some(value)) if agrees(&sent, value) => {}
            (Some(_), Some(_)) => {
                return Err(Mismatch::Differs {
                    header,
                    argument: annotation.path.join("."),
                });
            }
        }
    }
    Ok(())
}

/// The decoded value of `header`, if the request has it once.
fn sent_value<'h>(headers: &'h HeaderMap, header: &str) -> Result<Option<Cow<'h, str>>, Mismatch> {
    // `from_bytes` folds case; it cannot fail for a token, and a name it refused was not sent.
    let Ok(name) = HeaderName::from_bytes(header.as_bytes()) else {
        return Ok(None);
    };
    let mut values = headers.get_all(&name).iter();
    let Some(raw) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Mismatch::Repeated {
            header: header.to_owned(),
        });
    }
    let text = raw.to_str().map_err(|_| Mismatch::InvalidCharacters {
        header: header.to_owned(),
    })?;
    decode(text.trim_matches([' ', '\t']))
        .map(Some)
        .ok_or_else(|| Mismatch::InvalidBase64 {
            header: header.to_owned(),
        })
}

/// A header value as text: the Base64 payload of `=?base64?...?=`, else the value itself;
/// `None` for a wrapped payload that is not canonical padded Base64 of UTF-8 text.
fn decode(value: &str) -> Option<Cow<'_, str>> {
    match value
        .strip_prefix(BASE64_PREFIX)
        .and_then(|inner| inner.strip_suffix(BASE64_SUFFIX))
    {
        None => Some(Cow::Borrowed(value)),
        Some(payload) => {
            let bytes = BASE64_STANDARD.decode(payload).ok()?;
            String::from_utf8(bytes).ok().map(Cow::Owned)
        }
    }
}

/// Whether header text `sent` is the string form of argument `value`.
fn agrees(sent: &str, value: &Value) -> bool {
    match value {
        Value::String(text) => sent == text,
        Value::Bool(flag) => sent == if *flag { "true" } else { "false" },
        Value::Number(number) => sent == number.to_string() || same_number(sent, number),
        Value::Null | Value::Array(_) | Value::Object(_) => false,
    }
}

/// Whether `sent` is a JSON number equal to `number` (`42.0` and `42`): integers exactly,
/// anything else as `f64`. Text beyond JSON's number syntax (`+1`, `inf`, ` 42`) never is.
fn same_number(sent: &str, number: &Number) -> bool {
    if !sent
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'e' | b'E' | b'+'))
    {
        return false;
    }
    let Ok(parsed) = serde_json::from_str::<Number>(sent) else {
        return false;
    };
    if let (Some(a), Some(b)) = (parsed.as_i128(), number.as_i128()) {
        return a == b;
    }
    matches!((parsed.as_f64(), number.as_f64()), (Some(a), Some(b)) if a == b)
}

/// Why a request's `Mcp-Param-*` headers were refused. Messages name the header and the
/// argument, never a value.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum Mismatch {
    #[error(
        "header mismatch: the {header} header is missing, but the body has argument `{argument}`, which the tool's inputSchema mirrors into it (x-mcp-header); list the tools again and retry"
    )]
    Missing { header: String, argument: String },
    #[error(
        "header mismatch: the {header} header does not match argument `{argument}` in the body"
    )]
    Differs { header: String, argument: String },
    #[error(
        "header mismatch: the {header} header is wrapped in =?base64?...?= but is not padded standard Base64 of UTF-8 text"
    )]
    InvalidBase64 { header: String },
    #[error(
        "header mismatch: the {header} header has characters a header value cannot carry; send such values as =?base64?...?="
    )]
    InvalidCharacters { header: String },
    #[error("header mismatch: the {header} header is sent more than once")]
    Repeated { header: String },
}

/// A refused request: its id and why.
#[derive(Debug)]
struct Rejection {
    id: Value,
    mismatch: Mismatch,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        tracing::debug!(id = %self.id, reason = %self.mismatch, "tools/call refused");
        crate::http::errors::json_rpc_with_id(
            StatusCode::BAD_REQUEST,
            self.id,
            i64::from(ErrorCode::HEADER_MISMATCH.0),
            &self.mismatch.to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use serde_json::json;

    use super::*;

    /// A schema with `region` (string, `Region`), `count` (integer, `Count`), `flag` (boolean,
    /// `Flag`), `options.tenant` (string, `Tenant`) and `query` (not mirrored).
    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "count": {"type": "integer", "x-mcp-header": "Count"},
                "flag": {"type": "boolean", "x-mcp-header": "Flag"},
                "options": {
                    "type": "object",
                    "properties": {"tenant": {"type": "string", "x-mcp-header": "Tenant"}},
                },
                "query": {"type": "string"},
            },
        })
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            // Append, so a repeated name stays repeated.
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_bytes(value.as_bytes()).expect("value"),
            );
        }
        map
    }

    /// Checks `arguments` against the headers `pairs` under [`schema`].
    #[track_caller]
    fn check(arguments: Value, pairs: &[(&str, &str)], expect: Result<(), Mismatch>) {
        let schema = schema();
        let found = annotations(&schema);
        assert_eq!(
            check_params(&headers(pairs), &found, Some(&arguments)),
            expect
        );
    }

    fn missing(header: &str, argument: &str) -> Result<(), Mismatch> {
        Err(Mismatch::Missing {
            header: header.into(),
            argument: argument.into(),
        })
    }

    fn differs(header: &str, argument: &str) -> Result<(), Mismatch> {
        Err(Mismatch::Differs {
            header: header.into(),
            argument: argument.into(),
        })
    }

    fn invalid_base64() -> Result<(), Mismatch> {
        Err(Mismatch::InvalidBase64 {
            header: "Mcp-Param-Region".into(),
        })
    }

    #[test]
    fn a_plain_value_equal_to_the_argument_passes() {
        check(
            json!({"region": "us-west1", "query": "q"}),
            &[("Mcp-Param-Region", "us-west1")],
            Ok(()),
        );
    }

    #[test]
    fn a_base64_value_is_decoded_before_comparing() {
        check(
            json!({"region": "Hello"}),
            &[("Mcp-Param-Region", "=?base64?SGVsbG8=?=")],
            Ok(()),
        );
        check(
            json!({"region": "Hello, 世界"}),
            &[("Mcp-Param-Region", "=?base64?SGVsbG8sIOS4lueVjA==?=")],
            Ok(()),
        );
        check(
            json!({"region": " padded "}),
            &[("Mcp-Param-Region", "=?base64?IHBhZGRlZCA=?=")],
            Ok(()),
        );
        // The sentinel itself, sent encoded.
        check(
            json!({"region": "=?base64?literal?="}),
            &[("Mcp-Param-Region", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=")],
            Ok(()),
        );
        check(
            json!({"region": ""}),
            &[("Mcp-Param-Region", "=?base64??=")],
            Ok(()),
        );
    }

    #[test]
    fn a_value_without_both_markers_is_literal() {
        check(
            json!({"region": "SGVsbG8="}),
            &[("Mcp-Param-Region", "SGVsbG8=")],
            Ok(()),
        );
        check(
            json!({"region": "=?base64?SGVsbG8="}),
            &[("Mcp-Param-Region", "=?base64?SGVsbG8=")],
            Ok(()),
        );
        check(
            json!({"region": "SGVsbG8=?="}),
            &[("Mcp-Param-Region", "SGVsbG8=?=")],
            Ok(()),
        );
        // Markers are case-sensitive: this is literal text.
        check(
            json!({"region": "=?BASE64?SGVsbG8=?="}),
            &[("Mcp-Param-Region", "=?BASE64?SGVsbG8=?=")],
            Ok(()),
        );
        // Prefix and suffix overlap: too short to wrap anything.
        check(
            json!({"region": "=?base64?="}),
            &[("Mcp-Param-Region", "=?base64?=")],
            Ok(()),
        );
        // A literal value is not decoded: the decoded text does not match.
        check(
            json!({"region": "Hello"}),
            &[("Mcp-Param-Region", "SGVsbG8=")],
            differs("Mcp-Param-Region", "region"),
        );
    }

    #[test]
    fn base64_with_bad_padding_is_refused() {
        let arguments = json!({"region": "Hello"});
        check(
            arguments.clone(),
            &[("Mcp-Param-Region", "=?base64?SGVsbG8?=")],
            invalid_base64(),
        );
        check(
            arguments.clone(),
            &[("Mcp-Param-Region", "=?base64?SGVsbG8==?=")],
            invalid_base64(),
        );
        // Non-canonical trailing bits ("SGVsbG9=" decodes to "Hello" too, leniently).
        check(
            arguments,
            &[("Mcp-Param-Region", "=?base64?SGVsbG9=?=")],
            invalid_base64(),
        );
    }

    #[test]
    fn base64_with_characters_outside_the_alphabet_is_refused() {
        let arguments = json!({"region": "Hello"});
        check(
            arguments.clone(),
            &[("Mcp-Param-Region", "=?base64?SGVs!!!bG8=?=")],
            invalid_base64(),
        );
        // The URL-safe alphabet is not the standard one.
        check(
            json!({"region": "??>"}),
            &[("Mcp-Param-Region", "=?base64?Pz8-?=")],
            invalid_base64(),
        );
        check(
            arguments,
            &[("Mcp-Param-Region", "=?base64?SGVs bG8=?=")],
            invalid_base64(),
        );
        // Valid Base64 of bytes that are not UTF-8.
        check(
            json!({"region": "x"}),
            &[("Mcp-Param-Region", "=?base64?/w==?=")],
            invalid_base64(),
        );
    }

    #[test]
    fn bytes_outside_visible_ascii_are_refused() {
        check(
            json!({"region": "é"}),
            &[("Mcp-Param-Region", "\u{e9}")],
            Err(Mismatch::InvalidCharacters {
                header: "Mcp-Param-Region".into(),
            }),
        );
    }

    #[test]
    fn a_value_that_differs_from_the_argument_is_refused() {
        check(
            json!({"region": "us-west1"}),
            &[("Mcp-Param-Region", "eu-west1")],
            differs("Mcp-Param-Region", "region"),
        );
        // Values are case-sensitive.
        check(
            json!({"region": "us-west1"}),
            &[("Mcp-Param-Region", "US-WEST1")],
            differs("Mcp-Param-Region", "region"),
        );
        check(
            json!({"region": "us", "options": {"tenant": "acme"}}),
            &[("Mcp-Param-Region", "us"), ("Mcp-Param-Tenant", "other")],
            differs("Mcp-Param-Tenant", "options.tenant"),
        );
        // An object cannot be mirrored; a header claiming a value for it does not match.
        check(
            json!({"region": {"nested": 1}}),
            &[("Mcp-Param-Region", "x")],
            differs("Mcp-Param-Region", "region"),
        );
    }

    #[test]
    fn a_missing_header_for_a_present_argument_is_refused() {
        check(
            json!({"region": "test-value"}),
            &[],
            missing("Mcp-Param-Region", "region"),
        );
        check(
            json!({"region": "us", "options": {"tenant": "acme"}}),
            &[("Mcp-Param-Region", "us")],
            missing("Mcp-Param-Tenant", "options.tenant"),
        );
        check(
            json!({"count": 0}),
            &[],
            missing("Mcp-Param-Count", "count"),
        );
        check(
            json!({"flag": false}),
            &[],
            missing("Mcp-Param-Flag", "flag"),
        );
        // An empty string is a value.
        check(
            json!({"region": ""}),
            &[],
            missing("Mcp-Param-Region", "region"),
        );
    }

    #[test]
    fn a_null_or_absent_argument_needs_no_header() {
        check(json!({}), &[], Ok(()));
        check(
            json!({"region": null, "count": null, "flag": null}),
            &[],
            Ok(()),
        );
        check(json!({"options": {}}), &[], Ok(()));
        check(json!({"options": null}), &[], Ok(()));
        check(json!({"query": "only the unmirrored one"}), &[], Ok(()));
        // Not expected, so a header sent anyway is ignored once it decodes.
        check(json!({}), &[("Mcp-Param-Region", "us")], Ok(()));
        check(
            json!({"region": null}),
            &[("Mcp-Param-Region", "=?base64?SGVsbG8?=")],
            invalid_base64(),
        );
        // No `arguments` at all.
        let schema = schema();
        assert_eq!(
            check_params(&headers(&[]), &annotations(&schema), None),
            Ok(())
        );
    }

    #[test]
    fn integers_and_booleans_compare_by_their_string_form() {
        check(
            json!({"count": 42, "flag": true}),
            &[("Mcp-Param-Count", "42"), ("Mcp-Param-Flag", "true")],
            Ok(()),
        );
        check(
            json!({"count": -7, "flag": false}),
            &[("Mcp-Param-Count", "-7"), ("Mcp-Param-Flag", "false")],
            Ok(()),
        );
        // Numerically equal, as the specification recommends.
        check(json!({"count": 42}), &[("Mcp-Param-Count", "42.0")], Ok(()));
        check(json!({"count": 42.0}), &[("Mcp-Param-Count", "42")], Ok(()));
        for sent in ["43", "+42", "042", " 4 2", "0x2a", "inf", "forty-two"] {
            check(
                json!({"count": 42}),
                &[("Mcp-Param-Count", sent)],
                differs("Mcp-Param-Count", "count"),
            );
        }
        for sent in ["True", "TRUE", "1", "yes"] {
            check(
                json!({"flag": true}),
                &[("Mcp-Param-Flag", sent)],
                differs("Mcp-Param-Flag", "flag"),
            );
        }
        // A string argument is compared as text, not as a number.
        check(
            json!({"region": "42"}),
            &[("Mcp-Param-Region", "42.0")],
            differs("Mcp-Param-Region", "region"),
        );
    }

    #[test]
    fn header_names_are_case_insensitive() {
        for name in ["mcp-param-region", "MCP-PARAM-REGION", "Mcp-Param-Region"] {
            check(json!({"region": "us"}), &[(name, "us")], Ok(()));
        }
        // The annotation's own case does not matter either.
        let schema = json!({"properties": {"r": {"type": "string", "x-mcp-header": "rEgIoN"}}});
        assert_eq!(
            check_params(
                &headers(&[("Mcp-Param-Region", "us")]),
                &annotations(&schema),
                Some(&json!({"r": "us"})),
            ),
            Ok(())
        );
    }

    #[test]
    fn whitespace_around_a_value_is_not_part_of_it() {
        check(
            json!({"region": "us-west1"}),
            &[("Mcp-Param-Region", " \tus-west1 \t")],
            Ok(()),
        );
        check(
            json!({"region": "Hello"}),
            &[("Mcp-Param-Region", "  =?base64?SGVsbG8=?=  ")],
            Ok(()),
        );
        // Inside the value it is.
        check(
            json!({"region": "us west"}),
            &[("Mcp-Param-Region", "us west")],
            Ok(()),
        );
    }

    #[test]
    fn a_repeated_header_is_refused() {
        check(
            json!({"region": "us"}),
            &[("Mcp-Param-Region", "us"), ("mcp-param-region", "us")],
            Err(Mismatch::Repeated {
                header: "Mcp-Param-Region".into(),
            }),
        );
    }

    #[test]
    fn only_well_formed_annotations_count() {
        let schema = json!({
            "properties": {
                "ok": {"type": "string", "x-mcp-header": "Ok"},
                "number": {"type": "number", "x-mcp-header": "Number"},
                "untyped": {"x-mcp-header": "Untyped"},
                "nullable": {"type": ["string", "null"], "x-mcp-header": "Nullable"},
                "empty": {"type": "string", "x-mcp-header": ""},
                "spaced": {"type": "string", "x-mcp-header": "Two Words"},
                "colon": {"type": "string", "x-mcp-header": "a:b"},
                "not_text": {"type": "string", "x-mcp-header": 7},
                "a": {"type": "string", "x-mcp-header": "Twice"},
                "b": {"type": "integer", "x-mcp-header": "twice"},
                "list": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}},
                "choice": {"anyOf": [{"type": "string", "x-mcp-header": "Choice"}]},
            },
            "$defs": {"d": {"type": "string", "x-mcp-header": "Def"}},
        });
        let names: Vec<&str> = annotations(&schema).iter().map(|a| a.name).collect();
        assert_eq!(names, ["Ok"]);
        assert!(annotations(&json!({"type": "object"})).is_empty());
        assert!(annotations(&json!({"properties": []})).is_empty());
        assert!(annotations(&Value::Null).is_empty());
    }

    /// A 2026-07-28 `tools/call` of `deploy` (whose `region` is mirrored), with `extra`
    /// headers; what [`validate_request`] answers.
    fn request(body: Value, extra: &[(&str, &str)]) -> Result<(), Rejection> {
        let schema =
            json!({"properties": {"region": {"type": "string", "x-mcp-header": "Region"}}});
        let body = serde_json::to_vec(&body).expect("json");
        validate_request(&headers(extra), &body, |name| {
            if name == "deploy" {
                annotations(&schema)
            } else {
                Vec::new()
            }
        })
    }

    fn call(name: &str, version: Option<&str>) -> Value {
        let mut params = json!({"name": name, "arguments": {"region": "us"}});
        if let Some(version) = version {
            params["_meta"] = json!({META_VERSION: version});
        }
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
    }

    #[test]
    fn only_calls_of_2026_07_28_or_later_are_checked() {
        let current = [("MCP-Protocol-Version", "2026-07-28")];
        let refused = request(call("deploy", None), &current).expect_err("missing header");
        assert_eq!(refused.id, json!(7));
        assert_eq!(
            refused.mismatch,
            Mismatch::Missing {
                header: "Mcp-Param-Region".into(),
                argument: "region".into(),
            }
        );
        // The version header decides; without it, the body's `_meta`.
        for legacy in ["2025-11-25", "2025-06-18", "2025-03-26"] {
            let headers = [
                ("MCP-Protocol-Version", legacy),
                ("Mcp-Param-Region", "somewhere else"),
            ];
            assert!(request(call("deploy", Some("2026-07-28")), &headers).is_ok());
        }
        assert!(request(call("deploy", Some("2026-07-28")), &[]).is_err());
        assert!(request(call("deploy", Some("2025-11-25")), &[]).is_ok());
        assert!(request(call("deploy", None), &[]).is_ok());
        // Unknown tools and tools without annotations pass for the handler to answer.
        assert!(request(call("other", None), &current).is_ok());
        // Not a tools/call request, or not JSON: rmcp answers.
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert!(request(list, &current).is_ok());
        let mut notification = call("deploy", None);
        notification.as_object_mut().expect("object").remove("id");
        assert!(request(notification, &current).is_ok());
        assert!(validate_request(&headers(&current), b"{not json", |_| unreachable!()).is_ok());
    }

    #[test]
    fn a_refusal_is_a_400_with_header_mismatch_and_no_value() {
        let response = Rejection {
            id: json!("a"),
            mismatch: Mismatch::Differs {
                header: "Mcp-Param-Region".into(),
                argument: "region".into(),
            },
        }
        .into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response
                .headers()
                .get(axum::http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some("application/json")
        );
        expect_test::expect![[r#"header mismatch: the Mcp-Param-Region header does not match argument `region` in the body"#]]
            .assert_eq(
                &Mismatch::Differs {
                    header: "Mcp-Param-Region".into(),
                    argument: "region".into(),
                }
                .to_string(),
            );
    }

    #[test]
    fn only_posts_that_may_be_checked_are_buffered() {
        let post = Method::POST;
        let current = ("MCP-Protocol-Version", "2026-07-28");
        assert!(may_need_check(&post, &headers(&[current])));
        assert!(may_need_check(
            &post,
            &headers(&[current, ("Mcp-Method", "tools/call")])
        ));
        assert!(!may_need_check(
            &post,
            &headers(&[current, ("Mcp-Method", "tools/list")])
        ));
        assert!(!may_need_check(&Method::GET, &headers(&[current])));
        assert!(!may_need_check(
            &post,
            &headers(&[("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Param-A", "b")])
        ));
        assert!(!may_need_check(&post, &headers(&[])));
        assert!(may_need_check(&post, &headers(&[("mcp-param-a", "b")])));
    }

    /// A gateway configured by `toml` whose catalog holds server `docs` with `deploy` (its
    /// `region` mirrored into `Mcp-Param-Region`) and `plain` (nothing mirrored).
    fn gateway(toml: &str) -> Arc<Gateway> {
        let config = config::parse_toml(toml, std::path::Path::new("t.toml")).expect("config");
        let gateway = Gateway::new(config, None);
        let rules = catalog::naming::Rules {
            prefix: gateway.naming_prefix(),
            ..Default::default()
        };
        let (catalog, problems) = Catalog::build_named(
            &[catalog::ServerTools {
                server: "docs".into(),
                description: None,
                tools: vec![
                    json!({
                        "name": "deploy",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
                        },
                    })
                    .into(),
                    json!({"name": "plain", "inputSchema": {"type": "object"}}).into(),
                ],
            }],
            &catalog::IndexOptions::default(),
            rules,
        );
        assert!(problems.is_empty(), "{problems:?}");
        gateway.publish(1, catalog);
        gateway
    }

    /// How many annotations `principal` is held to when calling `name`.
    fn held_to(gateway: &Gateway, principal: Principal, name: &str) -> usize {
        listed_annotations(gateway, &gateway.catalog(), principal, name).len()
    }

    #[tokio::test]
    async fn the_schema_is_the_one_the_callers_tools_list_shows() {
        let passthrough = gateway("[gateway]\nexposure = \"passthrough\"\n");
        assert_eq!(held_to(&passthrough, Principal::Local, "docs__deploy"), 1);
        assert_eq!(held_to(&passthrough, Principal::Local, "docs__plain"), 0);
        assert_eq!(held_to(&passthrough, Principal::Local, "docs__nope"), 0);

        // Search mode lists the meta-tools and the pinned tools only.
        let search = gateway("[gateway]\nexposure = \"search\"\n");
        assert_eq!(held_to(&search, Principal::Local, "docs__deploy"), 0);
        let pinned = gateway("[gateway]\nexposure = \"search\"\npinned = [\"docs__deploy\"]\n");
        assert_eq!(held_to(&pinned, Principal::Local, "docs__deploy"), 1);

        // A tool outside the caller's profile is not listed to it.
        let profiles = gateway(
            "[gateway]\nexposure = \"passthrough\"\n\
             [[profiles]]\nname = \"ops\"\ndeny = [\"*__deploy\"]\nclients = [\"ci\"]\n",
        );
        assert_eq!(
            held_to(&profiles, Principal::Client("ci".into()), "docs__deploy"),
            0
        );
        assert_eq!(held_to(&profiles, Principal::Local, "docs__deploy"), 1);

        // Under `when-needed` the tool is listed as `deploy`; its alias names no listed tool.
        let bare = gateway("[gateway]\nexposure = \"passthrough\"\nprefix = \"when-needed\"\n");
        assert_eq!(held_to(&bare, Principal::Local, "deploy"), 1);
        assert_eq!(held_to(&bare, Principal::Local, "docs__deploy"), 0);
    }

    /// Serves `/mcp` behind [`check`] on a loopback port; the handler echoes the body it got.
    async fn serve(gateway: Arc<Gateway>) -> String {
        let app = axum::Router::new()
            .route(
                "/mcp",
                axum::routing::post(|body: String| async move { body }),
            )
            .route_layer(axum::middleware::from_fn_with_state(gateway, super::check));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/mcp")
    }

    async fn post(url: &str, body: &str, pairs: &[(&str, &str)]) -> (u16, String) {
        let mut request = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .body(body.to_owned());
        for (name, value) in pairs {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("reachable");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    #[tokio::test]
    async fn a_checked_body_reaches_the_handler_unchanged_and_a_mismatch_does_not() {
        let url = serve(gateway(
            "[gateway]\nexposure = \"passthrough\"\n[limits]\nrequest_bytes = 2048\n",
        ))
        .await;
        let body = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"docs__deploy","arguments":{"region":"Hello"}}}"#;
        let sent = [
            ("Mcp-Method", "tools/call"),
            ("Mcp-Param-Region", "=?base64?SGVsbG8=?="),
        ];
        assert_eq!(post(&url, body, &sent).await, (200, body.to_owned()));

        let (status, answer) =
            post(&url, body, &[("Mcp-Param-Region", "=?base64?SGVsbG8?=")]).await;
        assert_eq!(status, 400);
        let answer: Value = serde_json::from_str(&answer).expect("json");
        assert_eq!(answer["id"], json!(3));
        assert_eq!(answer["error"]["code"], json!(-32020));
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("Mcp-Param-Region"), "{message}");
        assert!(!message.contains("SGVsbG8"), "{message}");

        // Not a call the checks apply to: passed on as it came.
        let other = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"docs__plain","arguments":{}}}"#;
        assert_eq!(post(&url, other, &[]).await, (200, other.to_owned()));
        assert_eq!(
            post(&url, "{not json", &[]).await,
            (200, "{not json".to_owned())
        );

        let large = format!(r#"{{"pad":"{}"}}"#, "x".repeat(4096));
        assert_eq!(post(&url, &large, &[]).await.0, 413);
    }
}
