//! The control API and MCP client/server over real sockets: one test binary.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

mod api;
mod mcp_client;
