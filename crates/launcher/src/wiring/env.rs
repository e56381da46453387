//! The runtime environment of a process: config, directories, vault, memory.

use std::sync::Arc;

use strata_engine::Env;
use strata_engine::config::LoadedConfig;

use super::vault::process_vault;

/// The runtime environment of a process: config, directories, and the memory backend
/// `memory.*` asks for (a memory that cannot open is an error, not a silent downgrade).
pub async fn env(cfg: &LoadedConfig) -> anyhow::Result<(Arc<Env>, Option<strata_memory::Backend>)> {
    env_with(cfg, process_vault(cfg)?, &None).await
}

/// The runtime environment without memory (commands that open memory themselves).
pub fn env_without_memory(cfg: &LoadedConfig) -> anyhow::Result<Arc<Env>> {
    let mut env = Env::new(
        cfg.config.clone(),
        cfg.overlay_dir.clone(),
        cfg.data_dir.clone(),
    );
    if let Some(v) = process_vault(cfg)? {
        env = env.with_vault(v);
    }
    Ok(without_mcp_client(Arc::new(env)))
}

/// A binary built without the launcher's `mcp-client` feature says so to `install_mcp`
/// (before it writes a server that `serve` would then refuse to start with).
fn without_mcp_client(env: Arc<Env>) -> Arc<Env> {
    #[cfg(not(feature = "mcp-client"))]
    {
        struct NoClient;
        #[strata_engine::async_trait]
        impl strata_engine::McpHost for NoClient {
            async fn add_server(
                &self,
                _: &str,
                _: strata_engine::config::McpServerConfig,
            ) -> Result<Vec<String>, String> {
                Err(NO_CLIENT.into())
            }
            fn unavailable(&self) -> Option<String> {
                Some(NO_CLIENT.into())
            }
        }
        const NO_CLIENT: &str = "this binary was built without the launcher's `mcp-client` feature: it cannot run \
             MCP servers";
        env.attach_mcp(Arc::new(NoClient));
    }
    env
}

/// [`env`] with the vault already open and the store's PostgreSQL pool to share.
pub(super) async fn env_with(
    cfg: &LoadedConfig,
    vault: Option<Arc<strata_vault::FileVault>>,
    shared: &crate::storage::Shared,
) -> anyhow::Result<(Arc<Env>, Option<strata_memory::Backend>)> {
    let mut env = Env::new(
        cfg.config.clone(),
        cfg.overlay_dir.clone(),
        cfg.data_dir.clone(),
    );
    if let Some(v) = vault {
        env = env.with_vault(v);
    }
    let memory = crate::storage::open_memory(cfg, env.vault.as_deref(), shared).await?;
    if let Some(m) = &memory {
        env = env.with_memory(m.as_dyn());
    }
    Ok((without_mcp_client(Arc::new(env)), memory))
}
