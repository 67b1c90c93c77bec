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
//! The document is a file (`openapi.json`) embedded in the binary rather than derived from the
//! handlers' types: the handlers answer `serde_json` values and raw queries, which a derive
//! (utoipa) could not see without a second description of each anyway, and a document written
//! once keeps the build free of a proc-macro crate. Its shapes are checked against real answers
//! in the end-to-end test, and against the OpenAPI 3.1 schema by `openapi-spec-validator`.

use std::sync::Arc;

use axum::{
    Extension, Router,
    http::header,
    response::{IntoResponse, Response},
    routing::{MethodFilter, on},
};

use super::{
    admin::{self, Admin},
    admin_records, admin_servers, admin_v1,
};
use crate::{Gateway, oauth::login::Logins};

/// The OpenAPI 3.1 document of every route in [`ROUTES`].
pub(crate) const DOCUMENT: &str = include_str!("openapi.json");

/// Declares the route table once: [`ROUTES`] (method and path) and [`routes`] (the router),
/// from the same lines, so a route cannot be served without being listed.
macro_rules! admin_routes {
    ($($method:ident $path:literal => $handler:path,)*) => {
        /// Every `/admin/v1` route: its method and its path (axum's `{parameter}` syntax, the
        /// same as OpenAPI's). Read by the tests, which hold the document to it.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path)),*];

        /// The router of every route in [`ROUTES`]; `logins` starts the OAuth sign-ins it is
        /// asked for, as the console's and `/oauth/start`'s do.
        pub(crate) fn routes(gateway: Arc<Gateway>, logins: Arc<Logins>) -> Router {
            Router::new()
                $(.route($path, on(MethodFilter::$method, $handler)))*
                .layer(Extension(logins))
                .with_state(gateway)
        }
    };
}

admin_routes! {
    GET "/admin/v1/openapi.json" => openapi,
    GET "/admin/v1/servers" => admin_v1::servers,
    POST "/admin/v1/servers" => admin_servers::add,
    GET "/admin/v1/servers/{name}" => admin_servers::one,
    PUT "/admin/v1/servers/{name}" => admin_servers::replace,
    PATCH "/admin/v1/servers/{name}" => admin_servers::patch,
    DELETE "/admin/v1/servers/{name}" => admin_servers::remove,
    POST "/admin/v1/servers/{name}/enable" => admin_servers::enable,
    POST "/admin/v1/servers/{name}/disable" => admin_servers::disable,
    POST "/admin/v1/servers/{name}/test" => admin_servers::test,
    GET "/admin/v1/servers/{name}/credentials" => admin_servers::credentials,
    GET "/admin/v1/tools" => admin_v1::tools,
    GET "/admin/v1/search" => admin_v1::search,
    GET "/admin/v1/audit" => admin_records::audit,
    GET "/admin/v1/tools/held" => admin::held_tools,
    POST "/admin/v1/tools/held/{name}/approve" => admin::approve_held,
    GET "/admin/v1/approvals" => admin_records::approvals,
    POST "/admin/v1/approvals/{id}/approve" => admin::approve_v1,
    POST "/admin/v1/approvals/{id}/reject" => admin::reject_v1,
    GET "/admin/v1/clients" => admin_records::clients,
    POST "/admin/v1/clients" => admin_records::add_client,
    DELETE "/admin/v1/clients/{name}" => admin_records::remove_client,
    GET "/admin/v1/profiles" => admin_records::profiles,
    GET "/admin/v1/connections" => admin_records::connections,
    POST "/admin/v1/connections/{server}/signin" => admin_records::sign_in,
    DELETE "/admin/v1/connections/{server}/{principal}" => admin_records::sign_out,
}

/// `GET /admin/v1/openapi.json`: for admins, as every route it describes.
async fn openapi(_: Admin) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
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
        serde_json::from_str(DOCUMENT).expect("openapi.json is JSON")
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
            .map(|(method, path)| ((*method).to_owned(), (*path).to_owned()))
            .collect();
        assert_eq!(
            routed.len(),
            ROUTES.len(),
            "a route is listed twice: {ROUTES:?}"
        );
        let undocumented: Vec<_> = routed.difference(&documented).collect();
        let unrouted: Vec<_> = documented.difference(&routed).collect();
        assert!(
            undocumented.is_empty() && unrouted.is_empty(),
            "routed but not in openapi.json: {undocumented:?}; in openapi.json but not routed: {unrouted:?}"
        );
    }

    #[test]
    fn the_paths_the_cli_asks_are_routed() {
        for path in [
            admin_v1::SERVERS_PATH,
            admin_v1::TOOLS_PATH,
            admin_v1::SEARCH_PATH,
        ] {
            assert!(ROUTES.contains(&("GET", path)), "{path}");
        }
    }

    #[test]
    fn every_operation_names_its_parameters_and_refusals() {
        let document = document();
        for (path, item) in document["paths"].as_object().expect("paths") {
            // A `{parameter}` of the path is declared, on the path or the operation.
            let declared: BTreeSet<&str> = item["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["name"].as_str())
                .collect();
            for segment in path.split('/') {
                if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    assert!(declared.contains(name), "{path}: {name} is not declared");
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
}
