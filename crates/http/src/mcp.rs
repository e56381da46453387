//! The MCP server over the tool registry (official `rmcp` SDK): streamable HTTP at `/mcp`
//! (behind the same tokens as the control API) and stdio (`strata mcp serve --stdio`). Every
//! `tools/call` runs through the Invoker with the caller's principal.

use std::sync::Arc;
use strata_runtime::EnvExt;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::Value;
use strata_engine::Principal;
use strata_runtime::Invoker;

/// The header a CLI agent's MCP calls carry their turn id in (set by the Claude Code
/// provider from `CompletionRequest::turn`).
pub const TURN_HEADER: &str = "x-strata-turn";

use crate::caller::Caller;

/// Our MCP server: the registry's tools, called through the Invoker.
#[derive(Clone)]
pub struct StrataMcp {
    invoker: Arc<Invoker>,
    /// Caller for transports without HTTP auth (stdio).
    fixed: Option<Caller>,
}

impl StrataMcp {
    /// A server for HTTP (the caller comes from each request's token).
    pub fn http(invoker: Arc<Invoker>) -> Self {
        StrataMcp {
            invoker,
            fixed: None,
        }
    }

    /// A server for stdio: the local operator.
    pub fn stdio(invoker: Arc<Invoker>) -> Self {
        StrataMcp {
            invoker,
            fixed: Some(Caller::operator()),
        }
    }

    /// The `X-Strata-Turn` header of an HTTP request, if any.
    fn turn_header(&self, ctx: &RequestContext<RoleServer>) -> Option<String> {
        if self.fixed.is_some() {
            return None;
        }
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get(TURN_HEADER))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Option<Caller> {
        if let Some(c) = &self.fixed {
            return Some(c.clone());
        }
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned()
    }
}

impl ServerHandler for StrataMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("strata", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Strata's tools. Every call is audited and may be refused by policy.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&ctx);
        let listed = caller.as_ref().map(Caller::lister);
        let tools: Vec<Tool> = self
            .invoker
            .registry()
            .list()
            .iter()
            .filter(|t| {
                caller
                    .as_ref()
                    .zip(listed.as_ref())
                    .is_some_and(|(c, listed)| {
                        listed(&t.spec().name)
                            && self.invoker.policy().callable_by(&c.principal, t.spec())
                    })
            })
            .map(|t| {
                let s = t.spec();
                let schema = match &s.input_schema {
                    Value::Object(m) => m.clone(),
                    _ => serde_json::Map::new(),
                };
                Tool::new(s.name.clone(), s.description.clone(), Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(caller) = self.caller(&ctx) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text("unauthenticated")]).into());
        };
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let mut inv = caller.invocation(name, args);
        // An agent's own token (a CLI agent calling back): the call is that agent's, and with
        // the turn header it runs as a call of that turn — its sender, session and depth.
        if let Principal::Agent { id } = &caller.principal {
            inv.agent_id = Some(id.clone());
            if let Some(turn_id) = self.turn_header(&ctx) {
                match self.invoker.env().turns().get(&turn_id) {
                    Some(turn) if turn.agent_id == *id => {
                        inv.principal = turn.sender;
                        inv.session_id = Some(turn.session_id);
                        inv.channel_id = Some(turn.channel_id);
                        inv.depth = turn.depth;
                        inv.taint = Some(turn.taint);
                        inv.scopes.extend(turn.scopes);
                    }
                    _ => {
                        return Ok(CallToolResult::error(vec![ContentBlock::text(
                            "forbidden: unknown or finished turn (X-Strata-Turn)",
                        )])
                        .into());
                    }
                }
            }
        }
        let r = self.invoker.invoke(inv).await;
        let result = if r.ok() {
            let text = match &r.value {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            CallToolResult::success(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::error(vec![ContentBlock::text(format!(
                "{}: {}",
                r.status.as_str(),
                r.error.as_deref().unwrap_or("no message")
            ))])
        };
        Ok(result.into())
    }
}

/// The streamable-HTTP service mounted at `/mcp`.
pub fn streamable_service(
    invoker: Arc<Invoker>,
) -> StreamableHttpService<StrataMcp, LocalSessionManager> {
    let server = StrataMcp::http(invoker);
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    )
}

/// Why MCP on stdin/stdout ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The client's `initialize` never came or was not understood.
    #[error("MCP stdio failed to start: {0}")]
    Start(#[source] Box<rmcp::service::ServerInitializeError>),
    /// The serving task ended abnormally.
    #[error("MCP stdio stopped: {0}")]
    Stopped(#[source] tokio::task::JoinError),
}

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn serve_stdio(invoker: Arc<Invoker>) -> Result<(), StdioError> {
    let service = StrataMcp::stdio(invoker)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StdioError::Start(Box::new(e)))?;
    service
        .waiting()
        .await
        .map(|_| ())
        .map_err(StdioError::Stopped)
}
