//! MCP client connections to upstream servers: stdio children, Streamable HTTP, legacy HTTP+SSE.

pub mod sse;
