//! `install_mcp` in a process that cannot run MCP servers (a binary built without the
//! launcher's `mcp-client` feature): refused before anything is written.

use std::sync::Arc;

use serde_json::json;
use strata_runtime::Status;

struct NoClient;

#[strata_engine::async_trait]
impl strata_engine::McpHost for NoClient {
    async fn add_server(
        &self,
        _: &str,
        _: strata_engine::config::McpServerConfig,
    ) -> Result<Vec<String>, String> {
        Err("no client".into())
    }
    fn unavailable(&self) -> Option<String> {
        Some("built without the MCP client".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_mcp_is_refused_before_writing_where_no_client_can_run() {
    let w = crate::team::world();
    w.invoker.env().attach_mcp(Arc::new(NoClient));
    let args = json!({"name": "files", "transport": "stdio", "command": "true"});
    let r = w.call("olivia", "install_mcp", args, true).await;
    assert_ne!(r.status, Status::Ok, "{r:?}");
    let error = r.error.unwrap_or_default();
    assert!(error.contains("built without the MCP client"), "{error}");
    assert!(!w.dir.path().join("config/mcp.yaml").exists());
}
