//! The admin API's OpenAPI 3.1 document, built from the code: the route table (`admin_api`'s
//! [`Route`]s: path, method, operation id, summary, tag, path and query parameters, request
//! body, answer and refusals) and the Rust types the handlers build their answers from and
//! read their bodies into, whose JSON Schemas `schemars` derives (draft 2020-12, the dialect
//! of OpenAPI 3.1, so they go into `components/schemas` as generated).
//!
//! Two generators: answers are described as the handlers serialize them (a field that is
//! always written is `required`, an `Option` is nullable), request bodies as they are read
//! (an `Option` may be left out). Every answer object names all its properties
//! (`additionalProperties: false`), so the end-to-end test's check of real answers against
//! the document catches a field the document does not have. Free-form parts (an upstream's
//! tool definition, a call's arguments) stay open.
//!
//! Rejected: a second, hand-written description (the document this replaces drifted only
//! where nobody looked), and utoipa (a new proc-macro crate, and a second copy of the path
//! and method each route already has in the table).

use schemars::{JsonSchema, Schema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};

/// Where `schemars` puts the subschemas and where the `$ref`s point.
const COMPONENTS: &str = "/components/schemas";

/// A schema of one body: a `$ref` to the type's component, which the generator keeps.
pub(crate) type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T`, for a [`Route`]'s body or answer.
pub(crate) const fn schema<T: JsonSchema>() -> SchemaFn {
    subschema::<T>
}

fn subschema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// One route of the admin API: what the router serves and the document describes.
pub(crate) struct Route {
    /// `GET`, `POST`, ... (axum's `MethodFilter` names).
    pub method: &'static str,
    /// axum's `{parameter}` syntax, the same as OpenAPI's.
    pub path: &'static str,
    pub operation: Operation,
}

/// What the document says of one route beside its path and method.
pub(crate) struct Operation {
    pub id: &'static str,
    /// One of [`TAGS`].
    pub tag: &'static str,
    pub summary: &'static str,
    /// What each `{parameter}` of the path is (once per path is enough).
    pub path_parameters: &'static [(&'static str, &'static str)],
    /// The query parameters: the same table the handler reads its query with
    /// (`admin_v1::parameters`), so a name cannot be documented and refused, or the reverse.
    pub query: &'static [Param],
    pub body: Body,
    pub answer: Answer,
    /// The route's own refusals; 401 and 403 (every route) and 415 (every write) are added.
    pub refusals: &'static [u16],
}

impl Operation {
    /// An operation with no parameters, no body, no refusals of its own and an empty 200:
    /// the base each entry of the table fills in.
    pub(crate) const BASE: Operation = Operation {
        id: "",
        tag: "",
        summary: "",
        path_parameters: &[],
        query: &[],
        body: Body::None,
        answer: Answer {
            status: 200,
            body: None,
        },
        refusals: &[],
    };
}

/// A request body.
pub(crate) enum Body {
    None,
    /// The body must be given.
    Required(SchemaFn),
    /// An empty body is `{}`.
    Optional(SchemaFn),
}

/// The answer of a route that did what it was asked.
pub(crate) struct Answer {
    pub status: u16,
    /// `None`: no body (204).
    pub body: Option<SchemaFn>,
}

/// An answer `status` with a `T` as its body.
pub(crate) const fn json<T: JsonSchema>(status: u16) -> Answer {
    Answer {
        status,
        body: Some(schema::<T>()),
    }
}

/// An answer `status` without a body.
pub(crate) const fn empty(status: u16) -> Answer {
    Answer { status, body: None }
}

/// One query parameter of a route.
pub(crate) struct Param {
    pub name: &'static str,
    pub description: &'static str,
    pub kind: ParamKind,
    pub required: bool,
    /// May be given more than once (`server=a&server=b`).
    pub repeatable: bool,
}

impl Param {
    /// An optional text parameter given at most once; a table entry fills in the rest.
    pub(crate) const fn text(name: &'static str, description: &'static str) -> Param {
        Param {
            name,
            description,
            kind: ParamKind::Text,
            required: false,
            repeatable: false,
        }
    }
}

/// What a query parameter's value may be.
pub(crate) enum ParamKind {
    Text,
    /// A whole number in `min..=max`, `default` when not given.
    Whole {
        min: usize,
        max: usize,
        default: usize,
    },
    /// One of these words.
    OneOf(&'static [&'static str]),
}

/// The tags, in the document's order, with what each groups.
pub(crate) const TAGS: &[(&str, &str)] = &[
    (
        "servers",
        "The configured servers: their state, their tables in the configuration file, tests and credentials.",
    ),
    (
        "tools",
        "The catalog: tools, their cost and pin state, held definitions, and the search playground.",
    ),
    (
        "records",
        "What the database keeps: the audit log, approvals, client keys, profiles, OAuth sign-ins.",
    ),
    ("meta", "This document."),
];

const DESCRIPTION: &str = "The operator's API of an mcpgw gateway (docs/operations.md, \"Admin API\"), generated from the gateway's route table and the types its handlers answer. Every route is behind the request guard: on an open loopback listener the per-start admin token from `<data dir>/admin-token`, on a listener with client keys or JWTs a principal whose profile says `admin = true`; never from another site. Writes need `Content-Type: application/json`. Refusals answer `{\"error\": \"...\"}`. No answer carries a secret.";

/// Every refusal the table may name: its status, its component name and what it means.
const REFUSALS: &[(u16, &str, &str)] = &[
    (
        400,
        "BadRequest",
        "A bad parameter or body, named; a refused server change names each problem in `problems` and leaves the file unchanged.",
    ),
    (
        401,
        "Unauthorized",
        "No admin token (open loopback listener), or no valid client key or token (keyed listener).",
    ),
    (
        403,
        "Forbidden",
        "A principal whose profile is not `admin = true`; a foreign `Origin` or `Host`; a write a browser marks cross-site or same-site.",
    ),
    (
        404,
        "NotFound",
        "What the path names does not exist: no such server, client, approval, held tool or sign-in.",
    ),
    (
        409,
        "Conflict",
        "The request cannot be taken in the present state: the message says why (a server or client that exists, a file the gateway cannot write, an approval already decided, a server without OAuth).",
    ),
    (
        415,
        "UnsupportedMediaType",
        "A write without `Content-Type: application/json`.",
    ),
    (
        500,
        "Failed",
        "The database or the configuration file could not be read or written; the gateway's log says why.",
    ),
    (
        502,
        "BadGateway",
        "The upstream's authorization server could not be reached or refused the sign-in.",
    ),
    (
        503,
        "Unavailable",
        "The gateway runs without its database, which keeps these records.",
    ),
];

/// The OpenAPI 3.1 document of `routes`, whose answers are `T`s and refusals `refusal`s (401
/// may also be `json_rpc`, as `/mcp`'s client authentication answers).
pub(crate) fn document(routes: &[Route], refusal: SchemaFn, json_rpc: SchemaFn) -> Value {
    let mut answers = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = COMPONENTS.into())
        .for_serialize()
        .with_transform(closed_objects)
        .into_generator();
    let mut bodies = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = COMPONENTS.into())
        .for_deserialize()
        .into_generator();

    let mut responses = Map::new();
    let refused = refusal(&mut answers);
    for (status, name, description) in REFUSALS {
        let schema = if *status == 401 {
            json!({"oneOf": [refused.clone(), json_rpc(&mut answers)]})
        } else {
            refused.clone().to_value()
        };
        responses.insert(
            (*name).to_owned(),
            json!({"description": description, "content": {"application/json": {"schema": schema}}}),
        );
    }

    let mut paths = Map::new();
    for route in routes {
        let Value::Object(item) = paths
            .entry(route.path)
            .or_insert_with(|| json!({"parameters": path_parameters(route.path)}))
        else {
            unreachable!("a path item is an object")
        };
        let operation = &route.operation;
        for (name, description) in operation.path_parameters {
            if let Some(parameter) = item["parameters"]
                .as_array_mut()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == *name)
            {
                parameter["description"] = (*description).into();
            }
        }
        let mut described = json!({
            "operationId": operation.id,
            "summary": operation.summary,
            "tags": [operation.tag],
        });
        if !operation.query.is_empty() {
            described["parameters"] = operation.query.iter().map(query_parameter).collect();
        }
        let (body, required) = match operation.body {
            Body::None => (None, false),
            Body::Required(body) => (Some(body), true),
            Body::Optional(body) => (Some(body), false),
        };
        if let Some(body) = body {
            described["requestBody"] = json!({
                "required": required,
                "content": {"application/json": {"schema": body(&mut bodies)}},
            });
        }
        let mut answered = Map::new();
        let status = operation.answer.status;
        answered.insert(
            status.to_string(),
            match operation.answer.body {
                Some(body) => json!({
                    "description": success(status),
                    "content": {"application/json": {"schema": body(&mut answers)}},
                }),
                None => json!({"description": success(status)}),
            },
        );
        let write = route.method != "GET";
        let refusals = operation
            .refusals
            .iter()
            .copied()
            .chain([401, 403])
            .chain(write.then_some(415));
        for status in refusals {
            if let Some((_, name, _)) = REFUSALS.iter().find(|(s, ..)| *s == status) {
                answered.insert(
                    status.to_string(),
                    json!({"$ref": format!("#/components/responses/{name}")}),
                );
            }
        }
        described["responses"] = Value::Object(answered);
        item.insert(route.method.to_lowercase(), described);
    }

    let mut schemas = answers.take_definitions(true);
    for (name, schema) in bodies.take_definitions(true) {
        // A type both read and answered (none is today) is described once, as answered.
        schemas.entry(name).or_insert(schema);
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "mcpgw admin API", "version": "1", "description": DESCRIPTION},
        "servers": [{"url": "http://127.0.0.1:8931", "description": "A gateway at the default `[gateway] listen`."}],
        "security": [{"adminToken": []}, {"bearer": []}],
        "tags": TAGS.iter().map(|(name, description)| json!({"name": name, "description": description})).collect::<Vec<_>>(),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": responses,
            "securitySchemes": {
                "adminToken": {"type": "apiKey", "in": "header", "name": "X-Mcpgw-Admin-Token", "description": "The per-start admin token of an open loopback listener."},
                "bearer": {"type": "http", "scheme": "bearer", "description": "The admin token, or on a keyed listener an administrator's client key or JWT."},
            },
        },
    })
}

/// Every `{parameter}` of `path`, required strings; described by the table.
fn path_parameters(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect()
}

fn query_parameter(param: &Param) -> Value {
    let mut schema = match param.kind {
        ParamKind::Text => json!({"type": "string"}),
        ParamKind::Whole { min, max, default } => {
            json!({"type": "integer", "minimum": min, "maximum": max, "default": default})
        }
        ParamKind::OneOf(words) => json!({"type": "string", "enum": words}),
    };
    if param.required {
        schema["minLength"] = 1.into();
    }
    let mut described = json!({
        "name": param.name,
        "in": "query",
        "required": param.required,
        "description": param.description,
    });
    if param.repeatable {
        described["schema"] = json!({"type": "array", "items": schema});
        described["style"] = "form".into();
        described["explode"] = true.into();
    } else {
        described["schema"] = schema;
    }
    described
}

fn success(status: u16) -> &'static str {
    match status {
        201 => "Created.",
        204 => "Done; no body.",
        _ => "OK.",
    }
}

/// An answer object names every property it has: `additionalProperties: false` wherever
/// `properties` are listed and nothing else is said (a `flatten`ed map keeps its own).
fn closed_objects(schema: &mut Schema) {
    schemars::transform::transform_subschemas(&mut closed_objects, schema);
    if let Some(object) = schema.as_object_mut()
        && object.contains_key("properties")
        && !object.contains_key("additionalProperties")
    {
        object.insert("additionalProperties".into(), false.into());
    }
}
