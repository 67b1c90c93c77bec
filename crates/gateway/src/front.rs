//! The MCP server clients talk to: rmcp's dual-era server (legacy sessions and 2026-07-28
//! stateless requests on the same handler) with mcpgw's tool surface behind it.
//!
//! Error mapping at this edge, in one place:
//! - a request that cannot be routed (unknown tool name in `tools/call`, arguments that are not
//!   an object) is a JSON-RPC `-32602 invalid params` error with a message saying what to fix;
//! - anything that went wrong while running a tool (upstream down, upstream error, bad meta-tool
//!   input) is a tool result with `isError: true`, because that is what the model can read and
//!   act on.

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};
use serde_json::{Map, Value};

use crate::{Gateway, meta, result};

/// One front-end handler; cheap to clone, one per HTTP session or stdio connection.
#[derive(Clone)]
pub struct Front {
    gateway: Arc<Gateway>,
}

impl Front {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self { gateway }
    }

    fn exposure(&self) -> config::Exposure {
        self.gateway.config().gateway.exposure
    }

    /// The tools a client sees in the current exposure mode.
    pub fn visible_tools(&self) -> Vec<Tool> {
        let catalog = self.gateway.catalog();
        match self.exposure() {
            config::Exposure::Search => {
                let servers: Vec<(String, Option<String>)> = self
                    .gateway
                    .upstreams()
                    .servers()
                    .iter()
                    .map(|s| (s.name().to_owned(), s.config().description.clone()))
                    .collect();
                meta::tools(&servers)
            }
            config::Exposure::Passthrough => catalog
                .tools()
                .iter()
                .filter_map(|entry| {
                    let mut raw = entry.raw.clone();
                    raw["name"] = Value::String(entry.qualified.clone());
                    serde_json::from_value::<Tool>(raw).ok()
                })
                .collect(),
        }
    }

    /// Runs one catalog tool by qualified name on its upstream.
    pub async fn call_catalog_tool(
        &self,
        qualified: &str,
        arguments: Option<Map<String, Value>>,
    ) -> Result<CallToolResult, McpError> {
        let catalog = self.gateway.catalog();
        let Some(entry) = catalog.get(qualified) else {
            return Err(McpError::invalid_params(
                meta::unknown_tool_message(&catalog, qualified),
                None,
            ));
        };
        let Some(server) = self.gateway.upstreams().get(&entry.server) else {
            return Ok(result::tool_error(format!(
                "server '{}' is not configured any more",
                entry.server
            )));
        };
        // Invalid arguments come back as a tool error the model can read and correct
        // (SEP-1303), before anything reaches the upstream.
        match catalog.validate_arguments(qualified, arguments.as_ref()) {
            Ok(catalog::Validation::Unvalidated {
                reason,
                first: true,
            }) => {
                tracing::warn!(tool = %qualified, %reason, "input schema unusable; forwarding its calls unvalidated");
            }
            Ok(_) => {}
            Err(errors) => {
                return Ok(result::tool_error(format!(
                    "invalid arguments for '{qualified}' (nothing was sent to the server):\n{errors}"
                )));
            }
        }
        let upstream_name = entry.upstream_name.clone();
        let server_name = entry.server.clone();
        drop(catalog);
        match server.call_tool(&upstream_name, arguments).await {
            Ok(response) => Ok(result::from_upstream(&server_name, response)),
            Err(error) => {
                tracing::warn!(server = %server_name, tool = %upstream_name, %error, "tool call failed");
                Ok(result::upstream_failure(&error))
            }
        }
    }

    async fn call_meta(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<CallToolResult, McpError> {
        let catalog = self.gateway.catalog();
        match name {
            meta::SEARCH_TOOLS => {
                let search = match meta::parse_search(&catalog, &arguments) {
                    Ok(search) => search,
                    Err(error) => return Ok(error),
                };
                drop(catalog);
                let found = self.gateway.search(&search).await;
                Ok(meta::render_search(
                    &self.gateway.catalog(),
                    &search,
                    &found,
                ))
            }
            meta::GET_TOOL_DETAILS => Ok(meta::details(&catalog, &arguments)),
            meta::CALL_TOOL => {
                let Some(target) = arguments.get("name").and_then(Value::as_str) else {
                    return Ok(result::tool_error("call_tool needs a 'name' string"));
                };
                let inner = match arguments.get("arguments") {
                    None | Some(Value::Null) => None,
                    Some(Value::Object(map)) => Some(map.clone()),
                    Some(_) => {
                        return Err(McpError::invalid_params(
                            "call_tool: 'arguments' must be a JSON object",
                            None,
                        ));
                    }
                };
                if catalog.get(target).is_none() {
                    return Ok(meta::unknown_tool(&catalog, target));
                }
                drop(catalog);
                self.call_catalog_tool(target, inner).await
            }
            _ => unreachable_meta(name),
        }
    }
}

fn unreachable_meta(name: &str) -> Result<CallToolResult, McpError> {
    Err(McpError::invalid_params(
        format!("unknown tool '{name}'"),
        None,
    ))
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        // `listChanged` is not advertised yet: relaying catalog changes to connected clients
        // arrives with the change-notification work. In search mode the list never changes.
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mcpgw", env!("CARGO_PKG_VERSION")));
        if self.exposure() == config::Exposure::Search {
            info = info.with_instructions(
                "mcpgw fronts several MCP servers. Use search_tools to find a tool, \
                 get_tool_details to read its schema, and call_tool to run it.",
            );
        }
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.visible_tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        let is_meta = matches!(
            name,
            meta::SEARCH_TOOLS | meta::GET_TOOL_DETAILS | meta::CALL_TOOL
        );
        let result = if is_meta && self.exposure() == config::Exposure::Search {
            self.call_meta(name, request.arguments.unwrap_or_default())
                .await?
        } else {
            // Qualified names are also callable directly in search mode: clients that cached a
            // name from get_tool_details may call it as a normal tool.
            self.call_catalog_tool(name, request.arguments).await?
        };
        Ok(CallToolResponse::Complete(result))
    }
}
