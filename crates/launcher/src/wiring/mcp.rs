//! The external MCP servers of `config/mcp.yaml` a command runs with ([`McpServers`]). Every
//! command that offers tools — `serve`, `chat`, `repl`, `tools`, `inspect`, `invoke`, `skill
//! run` — starts them the same way, so one overlay has one tool set whatever the command: their tools are
//! in the registry as `<server>__<tool>` until [`McpServers::stop`], which the command calls
//! when it ends (a stdio server has then exited and been reaped). `mcp serve --stdio` does not:
//! a server that is this overlay's own `mcp serve --stdio` would start itself again and again.
//!
//! Built without the launcher's `mcp-client` feature there is no client: a configured server
//! is not started and a warning says why (`serve` refuses such a config, `features.rs`).

use std::sync::Arc;

use strata_engine::Env;
use strata_engine::config::LoadedConfig;
use strata_engine::secret::Vault;
use strata_runtime::Registry;

use super::vault::process_vault;

/// The running clients of the configured MCP servers.
pub struct McpServers {
    #[cfg(feature = "mcp-client")]
    clients: Arc<strata_http::mcp_client::McpClients>,
}

impl McpServers {
    /// Starts the servers of `cfg` with `env`'s vault, registering their tools in `registry`,
    /// and attaches the clients to `env` (so `install_mcp` starts a new server beside them
    /// while the command runs). Returns once every server has had its first attempt to connect.
    pub async fn start(cfg: &LoadedConfig, registry: Arc<Registry>, env: &Env) -> Self {
        let started = Self::start_with(cfg, registry, env.vault.clone()).await;
        #[cfg(feature = "mcp-client")]
        env.attach_mcp(started.clients.clone());
        started
    }

    /// [`McpServers::start`] for a command that builds no environment (`tools`, `inspect`):
    /// the vault is opened here, and only when a server is configured. A vault that does not
    /// open is a warning: the servers start without it (those that need it fail, logged).
    pub async fn start_alone(cfg: &LoadedConfig, registry: Arc<Registry>) -> Self {
        let vault = if cfg.config.mcp.servers.is_empty() {
            None
        } else {
            match process_vault(cfg) {
                Ok(v) => v.map(|v| v as Arc<dyn Vault>),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "vault not opened; MCP servers start without it");
                    None
                }
            }
        };
        Self::start_with(cfg, registry, vault).await
    }

    async fn start_with(
        cfg: &LoadedConfig,
        registry: Arc<Registry>,
        vault: Option<Arc<dyn Vault>>,
    ) -> Self {
        let servers = &cfg.config.mcp.servers;
        #[cfg(feature = "mcp-client")]
        {
            let clients = strata_http::mcp_client::start(servers, registry, vault).await;
            McpServers {
                clients: Arc::new(clients),
            }
        }
        #[cfg(not(feature = "mcp-client"))]
        {
            let _ = (registry, vault);
            if !servers.is_empty() {
                let names: Vec<&str> = servers.keys().map(String::as_str).collect();
                tracing::warn!(
                    "`mcp.servers` lists {}: not started, this binary was built without the \
                     launcher's `mcp-client` feature",
                    names.join(", ")
                );
            }
            McpServers {}
        }
    }

    /// Closes every server and waits for it (a stdio server has exited when this returns).
    pub async fn stop(self) {
        #[cfg(feature = "mcp-client")]
        self.clients.shutdown().await;
    }
}
