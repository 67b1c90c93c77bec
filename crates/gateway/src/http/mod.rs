//! The HTTP edge: the listeners (`serve`: stdio, and Streamable HTTP with `/healthz`), the
//! request guard in front of every route (`guard`: Host, Origin, the admin routes' CSRF
//! rules and admin token), who a request comes from (`client_auth`: client keys and, through
//! `jwt`, tokens of the operator's identity provider), sessions bound to their principal
//! (`session_owner`) and sealed ids that let them roam between replicas (`roaming`), the admin routes (`admin`; `/admin/v1`'s one route table and its OpenAPI
//! document, `admin_api`; its read side, `admin_v1` and `admin_records`; the server writes,
//! `admin_servers`; the client for the CLI, `admin_client`), the web console (`console`), the
//! data path's fast lane for plain tool calls (`direct`) and response shaping (`json_reply`),
//! the graceful drain on shutdown (`drain`), and every answer the edge makes up itself, in
//! one table (`errors`).

pub(crate) mod admin;
pub(crate) mod admin_api;
pub(crate) mod admin_client;
pub(crate) mod admin_records;
pub(crate) mod admin_servers;
pub(crate) mod admin_v1;
pub(crate) mod client_auth;
pub(crate) mod console;
pub(crate) mod direct;
pub(crate) mod drain;
pub(crate) mod errors;
pub(crate) mod guard;
pub(crate) mod json_reply;
pub(crate) mod jwt;
pub(crate) mod openapi;
pub(crate) mod roaming;
pub(crate) mod serve;
pub(crate) mod session_owner;

pub use admin::approval_json;
pub use admin_client::{ADMIN_KEY_VAR, AdminClient, Unanswered, Written};
pub use client_auth::{ClientAccess, RESOURCE_METADATA_PATH};
pub use guard::{ADMIN_TOKEN_FILE, ADMIN_TOKEN_HEADER, AdminToken, admin_token_path};
pub use serve::{http_app, serve_http, serve_http_with, serve_stdio};
