//! What `tools/list` shows a caller: the meta-tools and its pinned tools in search exposure,
//! every tool its profile permits in passthrough, each under its qualified name. Used by `front`
//! to answer and by `changes` to tell whether a caller's list changed.

use rmcp::model::Tool;
use serde_json::Value;

use crate::{Gateway, mcp::meta, policy::access::Access};

/// The tools `access`'s principal sees in its exposure mode.
pub(crate) fn visible_tools(gateway: &Gateway, access: &Access<'_>) -> Vec<Tool> {
    let catalog = gateway.catalog();
    match access.exposure() {
        config::Exposure::Search => {
            let mut tools = meta::tools(&access.servers());
            tools.extend(
                access
                    .pinned()
                    .iter()
                    .filter_map(|name| catalog.get(name))
                    .filter_map(listed_tool),
            );
            tools
        }
        config::Exposure::Passthrough | config::Exposure::Auto => catalog
            .tools()
            .iter()
            .filter(|entry| access.permits(entry))
            .filter_map(listed_tool)
            .collect(),
    }
}

/// A catalog tool as `tools/list` shows it: the upstream's definition under its qualified name.
pub(crate) fn listed_tool(entry: &catalog::ToolEntry) -> Option<Tool> {
    let mut raw = (*entry.raw).clone();
    raw["name"] = Value::String(entry.qualified.to_string());
    serde_json::from_value::<Tool>(raw).ok()
}
