//! The HTTP edge: the listeners (`serve`: stdio, and Streamable HTTP with `/healthz`), who a
//! request comes from (`client_auth`: client keys and, through `jwt`, tokens of the operator's
//! identity provider), the admin routes (`admin`), and the data path's response shaping
//! (`json_reply`), and the graceful drain on shutdown (`drain`).

pub(crate) mod admin;
pub(crate) mod client_auth;
pub(crate) mod drain;
pub(crate) mod json_reply;
pub(crate) mod jwt;
pub(crate) mod serve;

pub use admin::approval_json;
pub use client_auth::{ClientAccess, Principal, RESOURCE_METADATA_PATH};
pub use serve::{http_app, serve_http, serve_http_with, serve_stdio};
