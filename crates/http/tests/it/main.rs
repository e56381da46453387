//! The control API and MCP client/server over real sockets: one test binary.

mod api;
mod mcp_client;
