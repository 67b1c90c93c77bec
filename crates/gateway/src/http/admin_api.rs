//! The admin API's one route table: every `/admin/v1` route, with its method, in one list
//! ([`ROUTES`]) from which the router is built, and the OpenAPI 3.1 document that describes
//! them, served at `GET /admin/v1/openapi.json`.
//!
//! The handlers live beside their kind (`admin_v1`: the reads of servers, tools and search;
//! `admin_servers`: the server writes; `admin_records`: audit, approvals, clients, profiles,
//! sign-ins; `admin`: the approval decisions and the held tools, shared with the older
//! `/admin/approvals` and `/admin/tools` routes).
//! They are routed here only, so the list cannot miss one: the unit tests below hold the
//! document's operations equal to [`ROUTES`], and the end-to-end test (`cli` tests,
//! `openapi.rs`) asks a running gateway every documented operation and checks that each
//! documented path refuses every method it does not document with 405.
//!
//! The OpenAPI document is generated from this table (`openapi`): paths, methods, operation
//! ids, summaries, tags, path and query parameters, request bodies, answers and refusals come
//! from each route's [`Operation`], and the bodies' shapes from the types the handlers answer
//! and read (`schemars`, JSON Schema 2020-12 as OpenAPI 3.1 says), so it cannot drift from the
//! code. It is built once, on its first request. The unit tests below check its structure
//! (each route once, every path parameter described, every `$ref` resolved, 401 and 403 on
//! every operation and 415 on every write); the end-to-end test checks it with
//! `openapi-spec-validator` and real answers against its schemas.

use std::sync::{Arc, LazyLock};

use axum::{
    Extension, Router,
    http::header,
    response::{IntoResponse, Response},
    routing::{MethodFilter, on},
};

use serde_json::{Map, Value};

use super::{
    admin::{self, Admin},
    admin_records, admin_servers, admin_v1,
    errors::{JsonRpcError, Refusal},
    openapi::{self, Body, Operation, Route, empty, json, schema},
};
use crate::{Gateway, config_file::Changed, oauth::login::Logins, overview, probe::TestReport};

/// The OpenAPI 3.1 document of every route in [`ROUTES`], made on its first request.
pub(crate) static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    openapi::document(
        ROUTES,
        openapi::schema::<Refusal>(),
        openapi::schema::<JsonRpcError>(),
    )
    .to_string()
});

/// Declares the route table once: [`ROUTES`] (method, path and what the document says of it)
/// and [`routes`] (the router), from the same lines, so a route cannot be served without being
/// listed and documented.
macro_rules! admin_routes {
    ($($method:ident $path:literal => $handler:path, $operation:expr;)*) => {
        /// Every `/admin/v1` route: its method, its path (axum's `{parameter}` syntax, the
        /// same as OpenAPI's) and its [`Operation`].
        pub(crate) const ROUTES: &[Route] = &[$(Route {
            method: stringify!($method),
            path: $path,
            operation: $operation,
        }),*];

        /// The router of every route in [`ROUTES`]; `logins` starts the OAuth sign-ins it is
        /// asked for, as the console's and `/oauth/start`'s do.
        pub(crate) fn routes(gateway: Arc<Gateway>, logins: Arc<Logins>) -> Router {
            Router::new()
                $(.route($path, on(MethodFilter::$method, $handler)))*
                .layer(Extension(logins))
                .layer(axum::middleware::map_response_with_state(
                    gateway.clone(),
                    replica_header,
                ))
                .with_state(gateway)
        }
    };
}

/// The header naming the replica that answered an admin API request (`[store] replica`).
pub(crate) const REPLICA_HEADER: &str = "mcpgw-replica";

/// Adds [`REPLICA_HEADER`] to an admin API answer: behind a load balancer, which replica
/// answered.
async fn replica_header(
    axum::extract::State(gateway): axum::extract::State<Arc<Gateway>>,
    mut response: axum::response::Response,
) -> axum::response::Response {
    if let Ok(value) = http::HeaderValue::from_str(&gateway.replica()) {
        response.headers_mut().insert(REPLICA_HEADER, value);
    }
    response
}

/// A configured server's name, in the path.
const SERVER: &[(&str, &str)] = &[("name", "A configured server's name.")];

/// A server write's refusals (`admin_servers::refusal`).
const CHANGE_REFUSALS: &[u16] = &[400, 404, 409, 500];

admin_routes! {
    GET "/admin/v1/openapi.json" => openapi, Operation {
        id: "openapi",
        tag: "meta",
        summary: "This document.",
        answer: json::<Map<String, Value>>(200),
        ..Operation::BASE
    };
    GET "/admin/v1/servers" => admin_v1::servers, Operation {
        id: "listServers",
        tag: "servers",
        summary: "Every configured server with its state, era, versions, tool count, last error, transport and credential source.",
        answer: json::<admin_v1::ServerList>(200),
        refusals: &[400],
        ..Operation::BASE
    };
    POST "/admin/v1/servers" => admin_servers::add, Operation {
        id: "addServer",
        tag: "servers",
        summary: "Adds a server (a `[[servers]]` table) or every server of a pasted `mcpServers` snippet to the configuration file, comments kept, and reloads.",
        body: Body::Required(schema::<admin_servers::ServerBody>()),
        answer: json::<Changed>(201),
        refusals: &[400, 409, 500],
        ..Operation::BASE
    };
    GET "/admin/v1/servers/{name}" => admin_servers::one, Operation {
        id: "getServer",
        tag: "servers",
        summary: "One server's row, as the list shows it.",
        path_parameters: SERVER,
        answer: json::<overview::ServerRow>(200),
        refusals: &[404],
        ..Operation::BASE
    };
    PUT "/admin/v1/servers/{name}" => admin_servers::replace, Operation {
        id: "replaceServer",
        tag: "servers",
        summary: "Replaces the server's table (a body `name`, if given, must be the path's).",
        body: Body::Required(schema::<admin_servers::ServerBody>()),
        answer: json::<Changed>(200),
        refusals: CHANGE_REFUSALS,
        ..Operation::BASE
    };
    PATCH "/admin/v1/servers/{name}" => admin_servers::patch, Operation {
        id: "patchServer",
        tag: "servers",
        summary: "Changes the server's table by a JSON merge patch (RFC 7396; `null` removes a key).",
        body: Body::Required(schema::<admin_servers::ServerBody>()),
        answer: json::<Changed>(200),
        refusals: CHANGE_REFUSALS,
        ..Operation::BASE
    };
    DELETE "/admin/v1/servers/{name}" => admin_servers::remove, Operation {
        id: "removeServer",
        tag: "servers",
        summary: "Removes the server's table (and the comment above it).",
        answer: json::<Changed>(200),
        refusals: CHANGE_REFUSALS,
        ..Operation::BASE
    };
    POST "/admin/v1/servers/{name}/enable" => admin_servers::enable, Operation {
        id: "enableServer",
        tag: "servers",
        summary: "Sets `enabled = true` (nothing is added for a server without `enabled`).",
        path_parameters: SERVER,
        answer: json::<Changed>(200),
        refusals: CHANGE_REFUSALS,
        ..Operation::BASE
    };
    POST "/admin/v1/servers/{name}/disable" => admin_servers::disable, Operation {
        id: "disableServer",
        tag: "servers",
        summary: "Sets `enabled = false`: the server drains and stops, its tools leave the catalog.",
        path_parameters: SERVER,
        answer: json::<Changed>(200),
        refusals: CHANGE_REFUSALS,
        ..Operation::BASE
    };
    POST "/admin/v1/servers/{name}/test" => admin_servers::test, Operation {
        id: "testServer",
        tag: "servers",
        summary: "Connects to the server alone, lists its tools and disconnects (`mcpgw servers test NAME --json`). 200 whether it answered or not: `ok` says.",
        path_parameters: SERVER,
        answer: json::<TestReport>(200),
        refusals: &[404],
        ..Operation::BASE
    };
    GET "/admin/v1/servers/{name}/credentials" => admin_servers::credentials, Operation {
        id: "serverCredentials",
        tag: "servers",
        summary: "Whether the server has a credential and where each comes from (variable names, never values); an OAuth server's sign-ins.",
        path_parameters: SERVER,
        answer: json::<overview::CredentialsView>(200),
        refusals: &[404],
        ..Operation::BASE
    };
    GET "/admin/v1/tools" => admin_v1::tools, Operation {
        id: "listTools",
        tag: "tools",
        summary: "The catalog's tools (cost, pin state, annotations), the held ones, and what a client's `tools/list` costs.",
        query: admin_v1::TOOLS_QUERY,
        answer: json::<overview::ToolsView>(200),
        refusals: &[400],
        ..Operation::BASE
    };
    GET "/admin/v1/search" => admin_v1::search, Operation {
        id: "search",
        tag: "tools",
        summary: "One search of the running catalog with each hit's rank and score in the BM25 and the vector list.",
        query: admin_v1::SEARCH_QUERY,
        answer: json::<overview::SearchReport>(200),
        refusals: &[400],
        ..Operation::BASE
    };
    GET "/admin/v1/search/compare" => admin_v1::compare, Operation {
        id: "compareSearch",
        tag: "tools",
        summary: "The search playground: one query's BM25, vector and hybrid lists side by side, each hit with its rank and score in the BM25 and the vector list.",
        query: admin_v1::COMPARE_QUERY,
        answer: json::<admin_v1::Comparison>(200),
        refusals: &[400],
        ..Operation::BASE
    };
    GET "/admin/v1/audit" => admin_records::audit, Operation {
        id: "auditLog",
        tag: "records",
        summary: "The audit log, newest first, one page at a time; every filter given applies.",
        query: admin_records::AUDIT_QUERY,
        answer: json::<admin_records::AuditPage>(200),
        refusals: &[400, 500, 503],
        ..Operation::BASE
    };
    GET "/admin/v1/tools/held" => admin::held_tools, Operation {
        id: "listHeldTools",
        tag: "tools",
        summary: "The tools held out of the catalog because their definition changed since it was trusted, each with the trusted and the new definition and their diff.",
        answer: json::<admin::HeldList>(200),
        ..Operation::BASE
    };
    POST "/admin/v1/tools/held/{name}/approve" => admin::approve_held, Operation {
        id: "trustHeldTool",
        tag: "tools",
        summary: "Trusts a held tool's new definition: it is back in the catalog. The same as `POST /admin/tools/approve` and the console's Trust.",
        path_parameters: &[("name", "A held tool's qualified name, `server__tool`.")],
        answer: json::<admin::Trusted>(200),
        refusals: &[404, 500, 503],
        ..Operation::BASE
    };
    GET "/admin/v1/approvals" => admin_records::approvals, Operation {
        id: "listApprovals",
        tag: "records",
        summary: "The calls waiting for a person, or the newest in any state. Deciding is `POST /admin/v1/approvals/{id}/approve|reject`.",
        query: admin_records::APPROVALS_QUERY,
        answer: json::<admin_records::ApprovalList>(200),
        refusals: &[400, 500, 503],
        ..Operation::BASE
    };
    POST "/admin/v1/approvals/{id}/approve" => admin::approve_v1, Operation {
        id: "approveApproval",
        tag: "records",
        summary: "Approves a pending call: it runs now, with the caller's arguments or those the body gives in their place. The same as `POST /admin/approvals/{id}/approve` and the console's Approve.",
        path_parameters: APPROVAL,
        body: Body::Optional(schema::<admin::ApproveBody>()),
        answer: json::<admin::ApprovalRow>(200),
        refusals: DECISION_REFUSALS,
        ..Operation::BASE
    };
    POST "/admin/v1/approvals/{id}/reject" => admin::reject_v1, Operation {
        id: "rejectApproval",
        tag: "records",
        summary: "Rejects a pending call: it is not run, and its caller is told why. The same as `POST /admin/approvals/{id}/reject` and the console's Reject.",
        path_parameters: APPROVAL,
        body: Body::Optional(schema::<admin::RejectBody>()),
        answer: json::<admin::ApprovalRow>(200),
        refusals: DECISION_REFUSALS,
        ..Operation::BASE
    };
    GET "/admin/v1/clients" => admin_records::clients, Operation {
        id: "listClients",
        tag: "records",
        summary: "Every client key's name, profile, whether it is an administrator, when it was made and last used. Never a key.",
        answer: json::<admin_records::ClientList>(200),
        refusals: &[400, 500, 503],
        ..Operation::BASE
    };
    POST "/admin/v1/clients" => admin_records::add_client, Operation {
        id: "addClient",
        tag: "records",
        summary: "Adds a client key and answers it, this once. The profile it runs under is the configuration's: the one whose `clients` names it.",
        body: Body::Required(schema::<admin_records::NewClient>()),
        answer: json::<admin_records::AddedClient>(201),
        refusals: &[400, 409, 500, 503],
        ..Operation::BASE
    };
    DELETE "/admin/v1/clients/{name}" => admin_records::remove_client, Operation {
        id: "removeClient",
        tag: "records",
        summary: "Removes a client key: it stops working at once.",
        path_parameters: &[("name", "A client's name.")],
        answer: empty(204),
        refusals: &[404, 500, 503],
        ..Operation::BASE
    };
    GET "/admin/v1/profiles" => admin_records::profiles, Operation {
        id: "listProfiles",
        tag: "records",
        summary: "The configured profiles, each with its rules and the tools it exposes, and the default profile.",
        answer: json::<admin_records::ProfileList>(200),
        refusals: &[400],
        ..Operation::BASE
    };
    GET "/admin/v1/connections" => admin_records::connections, Operation {
        id: "listConnections",
        tag: "records",
        summary: "Every stored OAuth sign-in: server, principal, issuer, expiry. Never a token.",
        answer: json::<admin_records::ConnectionList>(200),
        refusals: &[400, 500, 503],
        ..Operation::BASE
    };
    POST "/admin/v1/connections/{server}/signin" => admin_records::sign_in, Operation {
        id: "signIn",
        tag: "records",
        summary: "Starts the gateway's OAuth sign-in to the server for the caller, as the console's Sign in does, and answers the authorization URL to open in a browser; the browser comes back to the gateway, which stores the tokens. Never a token.",
        path_parameters: &[("server", "A configured server's name.")],
        body: Body::Optional(schema::<admin_records::NoFields>()),
        answer: json::<admin_records::SignInStarted>(200),
        refusals: &[400, 404, 409, 502, 503],
        ..Operation::BASE
    };
    DELETE "/admin/v1/connections/{server}/{principal}" => admin_records::sign_out, Operation {
        id: "signOut",
        tag: "records",
        summary: "Signs the principal out of the server: its stored tokens are deleted and its session with the server ends.",
        path_parameters: &[
            ("server", "A configured server's name."),
            ("principal", "`local`, `client:NAME` or `user:SUBJECT`."),
        ],
        answer: empty(204),
        refusals: &[404, 500, 503],
        ..Operation::BASE
    };
}

/// An approval's id, in the path.
const APPROVAL: &[(&str, &str)] = &[(
    "id",
    "An approval's id, as `GET /admin/v1/approvals` lists it.",
)];

/// A decision's refusals (`admin::refusal`).
const DECISION_REFUSALS: &[u16] = &[400, 404, 409, 500, 503];

/// `GET /admin/v1/openapi.json`: for admins, as every route it describes.
async fn openapi(_: Admin) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;

    const METHODS: [&str; 8] = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];

    fn document() -> Value {
        serde_json::from_str(&DOCUMENT).expect("the document is JSON")
    }

    #[test]
    fn the_document_describes_every_route_and_no_other() {
        let document = document();
        assert_eq!(document["openapi"], "3.1.0");
        let mut documented = BTreeSet::new();
        for (path, item) in document["paths"].as_object().expect("paths") {
            for method in METHODS {
                if item.get(method).is_some() {
                    documented.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        let routed: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|route| (route.method.to_owned(), route.path.to_owned()))
            .collect();
        assert_eq!(routed.len(), ROUTES.len(), "a route is listed twice");
        assert_eq!(routed, documented);
        let ids: BTreeSet<&str> = ROUTES.iter().map(|route| route.operation.id).collect();
        assert_eq!(ids.len(), ROUTES.len(), "an operation id is used twice");
        for route in ROUTES {
            let operation = &route.operation;
            assert!(
                !operation.id.is_empty() && !operation.summary.is_empty(),
                "{} {}: an id and a summary",
                route.method,
                route.path
            );
            assert!(
                openapi::TAGS.iter().any(|(tag, _)| *tag == operation.tag),
                "{} {}: tag {:?} is not one of TAGS",
                route.method,
                route.path,
                operation.tag
            );
        }
    }

    #[test]
    fn the_paths_the_cli_asks_are_routed() {
        for path in [
            admin_v1::SERVERS_PATH,
            admin_v1::TOOLS_PATH,
            admin_v1::SEARCH_PATH,
        ] {
            assert!(
                ROUTES
                    .iter()
                    .any(|route| route.method == "GET" && route.path == path),
                "{path}"
            );
        }
    }

    #[test]
    fn every_operation_names_its_parameters_and_refusals() {
        let document = document();
        for (path, item) in document["paths"].as_object().expect("paths") {
            // A `{parameter}` of the path is declared on the path, and described.
            let declared: BTreeSet<&str> = item["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["description"].as_str().is_some_and(|d| !d.is_empty()))
                .filter_map(|p| p["name"].as_str())
                .collect();
            for segment in path.split('/') {
                if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    assert!(declared.contains(name), "{path}: {name} is not described");
                }
            }
            for method in METHODS {
                let Some(operation) = item.get(method) else {
                    continue;
                };
                let responses = &operation["responses"];
                for status in ["401", "403"] {
                    assert!(
                        responses.get(status).is_some(),
                        "{method} {path} does not document {status}"
                    );
                }
                if method != "get" {
                    assert!(
                        responses.get("415").is_some(),
                        "{method} {path}: a write is refused without JSON"
                    );
                }
            }
        }
    }

    /// Every `$ref` points at a component the document has, every refusal a route names has
    /// a response, and no type is described twice (once read, once answered) with two shapes.
    #[test]
    fn every_reference_resolves() {
        let document = document();
        let text = document.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let pointer = &reference[..reference.find('"').expect("a closing quote")];
            let target = pointer
                .strip_prefix('#')
                .and_then(|pointer| document.pointer(pointer));
            assert!(target.is_some(), "{pointer} does not resolve");
        }
        for route in ROUTES {
            for status in route.operation.refusals {
                let path = route.path.replace('~', "~0").replace('/', "~1");
                let pointer = format!(
                    "/paths/{path}/{}/responses/{status}",
                    route.method.to_lowercase()
                );
                assert!(
                    document.pointer(&pointer).is_some(),
                    "{} {}: refusal {status} has no response",
                    route.method,
                    route.path
                );
            }
        }
    }

    /// The query parameters the document lists are the ones the handler reads: the same table.
    #[test]
    fn query_parameters_are_the_handlers_own() {
        let document = document();
        let search = &document["paths"]["/admin/v1/search"]["get"]["parameters"];
        let names: Vec<&str> = search
            .as_array()
            .expect("parameters")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(names, ["q", "top_k", "strategy", "server"]);
        assert_eq!(search[1]["schema"]["maximum"], overview::MAX_TOP_K);
        assert_eq!(search[3]["schema"]["type"], "array");
        let refused = admin_v1::parameters(Some("nope=1"), admin_v1::SEARCH_QUERY)
            .expect_err("an unknown parameter");
        assert!(refused.contains("q, top_k, strategy, server"), "{refused}");
    }
}
