//! The MCP side of the gateway: the rmcp `ServerHandler` (`front`), a `tools/call`'s steps
//! (`call`), every JSON-RPC error it sends (`errors`), the meta-tools (`meta`),
//! results as clients receive them (`result`), a call's traffic between client and upstream
//! (`relay`), what `tools/list` shows (`listing`), list-change announcements (`changes`), resources, templates and prompts
//! (`surface`), the SEP-2243 `Mcp-Param-*` header check (`param_headers`), and each request's
//! span when the gateway traces (`traced`).

pub(crate) mod call;
pub(crate) mod changes;
pub(crate) mod errors;
pub(crate) mod front;
pub(crate) mod listing;
pub(crate) mod meta;
pub(crate) mod param_headers;
pub(crate) mod relay;
pub(crate) mod result;
pub(crate) mod surface;
pub(crate) mod traced;

pub use front::Front;
pub use traced::Traced;

/// Whether `context`'s request speaks 2026-07-28 (stateless, per-request `_meta`) or later.
pub(crate) fn is_modern(context: &rmcp::service::RequestContext<rmcp::RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28)
}
