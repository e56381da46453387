//! The MCP client: external servers from `config/mcp.yaml`, their tools registered as
//! `<server>__<tool>` and called through the same Invoker as every other tool.
//!
//! Each server has a supervisor task: connect (a child process over stdio, or streamable
//! HTTP), list its tools, register the new ones, then wait; when the connection ends it
//! reconnects with exponential backoff (1 s doubling to 60 s). Meanwhile its tools answer with
//! an `error` saying the server is restarting. Child processes get a cleared environment plus
//! the configured variables (`vault:`/`env:` references resolved).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;
use strata_engine::config::{McpHints, McpServerConfig, McpTransport};
use strata_engine::secret::{Vault, resolve_ref};
use strata_engine::{Capability, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use strata_runtime::Registry;

/// Separator between server and tool names.
pub const SEP: &str = "__";

type Slot = Arc<RwLock<Option<Peer<RoleClient>>>>;

/// A tool of an external MCP server.
struct RemoteTool {
    spec: ToolSpec,
    server: String,
    remote_name: String,
    peer: Slot,
}

#[async_trait]
impl Tool for RemoteTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let peer = self.peer.read().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(peer) = peer else {
            return Err(ToolError::failed(format!(
                "MCP server `{}` is not connected (restarting); try again shortly",
                self.server
            )));
        };
        let mut params = CallToolRequestParams::new(self.remote_name.clone());
        if let Value::Object(m) = args {
            params = params.with_arguments(m);
        }
        // A journaled turn's call carries its idempotency key: a server that honours it makes
        // a call run again after a crash do nothing new.
        if let Some(key) = ctx.idempotency_key() {
            let mut meta = serde_json::Map::new();
            meta.insert(
                strata_engine::config::IDEMPOTENCY_META_KEY.to_owned(),
                Value::String(key.to_owned()),
            );
            params.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(
                meta,
            )));
        }
        let result = peer
            .call_tool(params)
            .await
            .map_err(|e| ToolError::failed(format!("MCP server `{}`: {e}", self.server)))?;
        let text: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n");
        if result.is_error == Some(true) {
            return Err(ToolError::failed(if text.is_empty() {
                format!("MCP server `{}` reported an error", self.server)
            } else {
                text
            }));
        }
        // The text is what the server meant the model to read; the structured result when
        // there is no text, or when the operator vouches for some of its fields
        // (`trusted_fields`: the taint gate needs the fields to tell them apart).
        Ok(ToolOutput(match result.structured_content {
            Some(v) if text.is_empty() || !self.spec.trusted_fields.is_empty() => v,
            _ => Value::String(text),
        }))
    }
}

/// The running clients. [`McpClients::shutdown`] closes every server and waits for it;
/// dropping it only aborts the supervisors (a stdio server is then killed in the background).
pub struct McpClients {
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    slots: std::sync::Mutex<HashMap<String, Slot>>,
    stop: tokio::sync::watch::Sender<bool>,
    registry: Arc<Registry>,
    vault: Option<Arc<dyn Vault>>,
}

impl McpClients {
    /// Stops every supervisor and closes its connection; a stdio server gets the MCP shutdown
    /// sequence (stdin closed, then SIGTERM, then SIGKILL) and has exited and been reaped when
    /// this returns. A supervisor that does not finish within 15 s is aborted.
    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for mut t in tasks {
            if tokio::time::timeout(Duration::from_secs(15), &mut t)
                .await
                .is_err()
            {
                tracing::warn!("an MCP server did not close within 15 s");
                t.abort();
            }
        }
    }

    /// Whether server `name` is connected now.
    pub fn connected(&self, name: &str) -> bool {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .is_some_and(|s| s.read().unwrap_or_else(|p| p.into_inner()).is_some())
    }
}

impl Drop for McpClients {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            t.abort();
        }
    }
}

impl McpClients {
    /// Starts supervising `name`; the receiver fires after its first attempt to connect.
    fn spawn(&self, name: &str, cfg: McpServerConfig) -> tokio::sync::oneshot::Receiver<()> {
        let slot: Slot = Arc::new(RwLock::new(None));
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), slot.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (name, registry, vault, stopped) = (
            name.to_owned(),
            self.registry.clone(),
            self.vault.clone(),
            self.stop.subscribe(),
        );
        let task = tokio::spawn(async move {
            supervise(name, cfg, registry, vault, slot, tx, stopped).await;
        });
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
        rx
    }
}

#[async_trait]
impl strata_engine::McpHost for McpClients {
    /// Starts `name` beside the configured servers (`install_mcp`), waits up to 30 s for it
    /// to connect, and names the tools it registered (`<name>__<tool>`).
    async fn add_server(&self, name: &str, cfg: McpServerConfig) -> Result<Vec<String>, String> {
        if self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(name)
        {
            return Err(format!(
                "MCP server `{name}` is already running here; restart serve to replace it"
            ));
        }
        let first = self.spawn(name, cfg);
        let _ = tokio::time::timeout(Duration::from_secs(30), first).await;
        if !self.connected(name) {
            return Err(format!(
                "MCP server `{name}` did not connect (serve keeps retrying; its log says why)"
            ));
        }
        let prefix = format!("{name}{SEP}");
        Ok(self
            .registry
            .list()
            .into_iter()
            .map(|t| t.spec().name.clone())
            .filter(|n| n.starts_with(&prefix))
            .collect())
    }
}

/// Resolves `vault:`/`env:` references in a map of values.
fn resolve_map(
    map: &std::collections::BTreeMap<String, String>,
    vault: Option<&dyn Vault>,
    path: &str,
) -> Result<Vec<(String, String)>, String> {
    map.iter()
        .map(|(k, v)| {
            resolve_ref(v, vault, &format!("{path}.{k}"))
                .map(|s| (k.clone(), s.expose().to_owned()))
                .map_err(|e| e.to_string())
        })
        .collect()
}

async fn connect(
    name: &str,
    cfg: &McpServerConfig,
    env: &[(String, String)],
    headers: &[(String, String)],
) -> Result<rmcp::service::RunningService<RoleClient, ()>, String> {
    match cfg.transport {
        McpTransport::Stdio => {
            let command = cfg
                .command
                .as_deref()
                .ok_or_else(|| format!("`mcp.servers.{name}.command` is required for stdio"))?;
            // Cleared environment + the configured variables, own process group.
            let mut cmd = strata_sandbox::host::command(command, &[]);
            cmd.args(&cfg.args);
            cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let transport = TokioChildProcess::new(cmd)
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            ().serve(transport).await.map_err(|e| e.to_string())
        }
        McpTransport::Http => {
            let url = cfg
                .url
                .as_deref()
                .ok_or_else(|| format!("`mcp.servers.{name}.url` is required for http"))?;
            let mut hmap = HashMap::new();
            for (k, v) in headers {
                let hk = k
                    .parse::<axum::http::HeaderName>()
                    .map_err(|e| format!("header `{k}`: {e}"))?;
                let hv = v
                    .parse::<axum::http::HeaderValue>()
                    .map_err(|e| format!("header `{k}`: {e}"))?;
                hmap.insert(hk, hv);
            }
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url).custom_headers(hmap),
            );
            ().serve(transport).await.map_err(|e| e.to_string())
        }
    }
}

/// Starts a supervisor per configured server and returns once every server has had its
/// first connection attempt (so their tools are registered before the caller goes on).
pub async fn start(
    servers: &std::collections::BTreeMap<String, McpServerConfig>,
    registry: Arc<Registry>,
    vault: Option<Arc<dyn Vault>>,
) -> McpClients {
    let (stop, _) = tokio::sync::watch::channel(false);
    let clients = McpClients {
        tasks: std::sync::Mutex::new(Vec::new()),
        slots: std::sync::Mutex::new(HashMap::new()),
        stop,
        registry,
        vault,
    };
    let first: Vec<_> = servers
        .iter()
        .map(|(name, cfg)| clients.spawn(name, cfg.clone()))
        .collect();
    for rx in first {
        let _ = tokio::time::timeout(Duration::from_secs(30), rx).await;
    }
    clients
}

async fn supervise(
    name: String,
    cfg: McpServerConfig,
    registry: Arc<Registry>,
    vault: Option<Arc<dyn Vault>>,
    slot: Slot,
    first: tokio::sync::oneshot::Sender<()>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut first = Some(first);
    let mut backoff = Duration::from_secs(1);
    let env = resolve_map(
        &cfg.env,
        vault.as_deref(),
        &format!("mcp.servers.{name}.env"),
    );
    let headers = resolve_map(
        &cfg.headers,
        vault.as_deref(),
        &format!("mcp.servers.{name}.headers"),
    );
    let (env, headers) = match (env, headers) {
        (Ok(e), Ok(h)) => (e, h),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(server = %name, error = %e, "MCP server not started");
            if let Some(tx) = first.take() {
                let _ = tx.send(());
            }
            return;
        }
    };
    loop {
        match connect(&name, &cfg, &env, &headers).await {
            Ok(service) => {
                let peer = service.peer().clone();
                match peer.list_all_tools().await {
                    Ok(tools) => {
                        for t in tools {
                            let full = format!("{name}{SEP}{}", t.name);
                            if registry.get(&full).is_some() {
                                continue;
                            }
                            let mut spec = ToolSpec::new(
                                full,
                                t.description.as_deref().unwrap_or("").to_owned(),
                                Value::Object((*t.input_schema).clone()),
                            );
                            // What the operator's settings say, else the tool's annotations,
                            // else unknown code on another host: it reaches out, has effects
                            // and returns untrusted content.
                            let ann = t.annotations.as_ref();
                            let trust = cfg.tool_trust(
                                &t.name,
                                McpHints {
                                    read_only: ann.and_then(|a| a.read_only_hint),
                                    open_world: ann.and_then(|a| a.open_world_hint),
                                    idempotent: ann.and_then(|a| a.idempotent_hint),
                                },
                            );
                            spec.capabilities = if trust.network {
                                vec![Capability::Network]
                            } else {
                                Vec::new()
                            };
                            spec.side_effects = trust.side_effects;
                            spec.idempotent = trust.idempotent;
                            spec.web_facing = trust.untrusted;
                            if trust.untrusted {
                                spec.trusted_fields = cfg.trusted_fields(&t.name);
                            }
                            let tool = RemoteTool {
                                spec,
                                server: name.clone(),
                                remote_name: t.name.to_string(),
                                peer: slot.clone(),
                            };
                            if let Err(e) = registry.register_tool(Arc::new(tool)) {
                                tracing::warn!(server = %name, error = %e, "MCP tool not registered");
                            }
                        }
                        *slot.write().unwrap_or_else(|p| p.into_inner()) = Some(peer);
                        backoff = Duration::from_secs(1);
                        tracing::info!(server = %name, "MCP server connected");
                    }
                    Err(e) => {
                        tracing::warn!(server = %name, error = %e, "listing MCP tools failed")
                    }
                }
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
                let token = service.cancellation_token();
                let waiting = service.waiting();
                tokio::pin!(waiting);
                let stopping = tokio::select! {
                    _ = &mut waiting => false,
                    _ = stop.wait_for(|s| *s) => true,
                };
                *slot.write().unwrap_or_else(|p| p.into_inner()) = None;
                if stopping {
                    // The service's loop closes its transport on the way out: for a stdio
                    // server that is the shutdown sequence, ending when the child is reaped.
                    token.cancel();
                    let _ = waiting.await;
                    tracing::info!(server = %name, "MCP server closed");
                    return;
                }
                tracing::warn!(server = %name, "MCP server disconnected; restarting");
            }
            Err(e) => {
                tracing::warn!(server = %name, error = %e, retry_in_s = backoff.as_secs(), "MCP server unavailable");
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(60));
    }
}
