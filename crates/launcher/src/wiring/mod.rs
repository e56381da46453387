//! Wiring a running Strata from config: [`build`] makes the runtime ([`Wired`]: audit log,
//! store, environment, Invoker, agents, manager) from the parts beside this file, one job each:
//!
//! - `invoker.rs` — the Invoker of a process and its approvals ([`invoker()`], the one place an
//!   Invoker gets its rate log and approvals; [`StderrApprovals`]);
//! - `env.rs` — the environment a process runs in ([`env()`], [`env_without_memory`]);
//! - `agents.rs` — agents built from config on a [`Site`] ([`build_agent`], [`AgentOverrides`],
//!   [`default_agent`]; Claude Code's settings and MCP config files);
//! - `knowledge.rs` — the knowledge index an agent is built with ([`knowledge_index`]);
//! - `mcp.rs` — the MCP servers of `config/mcp.yaml` every command with tools starts and
//!   stops ([`McpServers`]);
//! - `skills.rs` — prompt skills' one-off agents ([`SkillTurns`]);
//! - `vault.rs` — the vault ([`open_vault`]) and the `vault:` references the config uses
//!   ([`vault_refs_in_use`], [`warn_missing_vault_refs`]).

mod agents;
mod env;
mod invoker;
mod knowledge;
mod mcp;
mod skills;
mod vault;

pub use agents::{AgentOverrides, Site, agent_llm, build_agent, default_agent, identity};
pub use env::{env, env_without_memory};
pub use invoker::{StderrApprovals, invoker};
pub use knowledge::knowledge_index;
pub use mcp::McpServers;
pub use skills::SkillTurns;
pub use vault::{
    PASSPHRASE_FROM_STDIN, VaultRef, missing_vault_refs, open_vault, open_vault_from,
    vault_refs_in_use, warn_missing_vault_refs,
};

use std::path::Path;
use std::sync::Arc;
use strata_runtime::EnvExt;

use anyhow::Context;
use strata_engine::ToolFilter;
use strata_engine::agent::Agent;
use strata_engine::config::LoadedConfig;
use strata_runtime::approval::Approvals;
use strata_runtime::manager::AgentManager;
use strata_runtime::store::StateStore;
use strata_runtime::{Invoker, Registry};
use strata_store::JsonlAudit;

use agents::write_mcp_config;
use env::env_with;
use vault::process_vault;

/// Everything a running Strata holds.
pub struct Wired {
    /// Runs turns.
    pub manager: Arc<AgentManager>,
    /// Runs tool calls.
    pub invoker: Arc<Invoker>,
    /// Sessions, rate-limit counters, approval requests (SQLite or PostgreSQL).
    pub store: Arc<dyn StateStore>,
    /// The PostgreSQL pool the store opened (`None` on SQLite).
    pub pool: crate::storage::Shared,
    /// Human approval of gated calls.
    pub approvals: Arc<Approvals>,
    /// Agent memory, when configured.
    pub memory: Option<strata_memory::Backend>,
    /// The audit log (closed on shutdown).
    pub audit: Arc<JsonlAudit>,
    /// Agents that could not start, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Per-boot tokens for CLI agents that reach our tools over MCP:
    /// (agent id, secret, tool scope).
    pub internal_tokens: Vec<(String, String, Option<Vec<String>>)>,
    /// The `vault:` references the config uses ([`vault_refs_in_use`]): what the
    /// `vault_check` job looks up in the vault.
    pub vault_refs: Vec<VaultRef>,
}

impl Wired {
    /// Before the process ends: model calls' usage still on its way to the store, the
    /// journal's writes behind its turns, then the store's own writes, then the audit log.
    /// Every command that built a runtime calls it.
    pub async fn finish(&self) {
        if let Some(u) = self.invoker.env().usage() {
            u.flush().await;
        }
        if let Some(j) = self.invoker.env().journal()
            && let Err(e) = j.settle().await
        {
            tracing::warn!(error = %e, "last journal writes not confirmed");
        }
        if let Err(e) = self.store.flush().await {
            tracing::warn!(error = %e, "last database writes not confirmed");
        }
        self.audit.close();
    }
}

/// Builds the runtime. Agents that cannot start are listed in `skipped`. With `mcp_url`
/// (the running server's `/mcp`), each Claude Code agent gets a per-boot token and an MCP
/// config pointing there, so its tool calls share our Invoker, limits and audit.
pub async fn build(
    cfg: &LoadedConfig,
    registry: Arc<Registry>,
    mcp_url: Option<&str>,
) -> anyhow::Result<Wired> {
    ensure_data_dir(&cfg.data_dir)
        .with_context(|| format!("cannot create data dir {}", cfg.data_dir.display()))?;
    let audit = Arc::new(JsonlAudit::open_rotating(
        &cfg.data_dir.join(&cfg.config.tools.audit_log),
        (&cfg.config.security.audit).into(),
    )?);
    let vault = process_vault(cfg)?;
    let vault_ref = vault
        .as_deref()
        .map(|v| v as &dyn strata_engine::secret::Vault);
    let (store, shared) = crate::storage::open_store(cfg, vault_ref).await?;
    let (env, memory) = env_with(cfg, vault, &shared).await?;
    let (invoker, approvals) = invoker(env.clone(), registry, audit.clone(), store.clone());
    let mut agents = Vec::new();
    let mut skipped = Vec::new();
    let mut internal_tokens = Vec::new();
    for (id, a) in &cfg.config.agents {
        let is_cli = agent_llm(cfg, id, a).is_some_and(|(l, _)| l.provider == "claude-code");
        let mcp_config = match (is_cli, mcp_url) {
            (true, Some(url)) => {
                let token = crate::token::generate_token()?;
                let path = write_mcp_config(cfg, id, url, &token)?;
                let scope = match ToolFilter::from_config(a.tools.as_ref()) {
                    ToolFilter::All => None,
                    ToolFilter::None => Some(Vec::new()),
                    ToolFilter::List(l) => Some(l),
                };
                internal_tokens.push((id.clone(), token, scope));
                Some(path)
            }
            _ => None,
        };
        match build_agent(
            cfg,
            id,
            a,
            &invoker,
            env.vault.as_deref(),
            &AgentOverrides::default(),
            mcp_config,
        ) {
            Ok(agent) => agents.push(Arc::new(agent) as Arc<dyn Agent>),
            Err(e) => skipped.push((id.clone(), e)),
        }
    }
    let manager = Arc::new(
        AgentManager::new(agents, store.clone(), env.clone()).with_alerts(invoker.clone()),
    );
    // Inter-agent tools reach the agents through the environment (weakly: no cycle).
    let directory: std::sync::Weak<dyn strata_engine::turns::AgentDirectory> =
        Arc::downgrade(&manager) as std::sync::Weak<AgentManager>;
    env.attach_agents(directory);
    // The turn journal: a turn that dies half-way continues from its last step.
    if cfg.config.journal.enabled {
        env.attach_journal(Arc::new(strata_runtime::journal::Journal::new(
            store.clone(),
            cfg.config.journal.clone(),
        )));
    }
    // The `schedule_*` tools keep what people ask for beside the configured schedules.
    env.attach_schedules(store.clone());
    // Every model call's tokens, priced, kept beside the sessions.
    let pricing = strata_runtime::usage::Pricing::from_config(&cfg.config);
    env.attach_usage(Arc::new(
        strata_runtime::usage::UsageMeter::new(store.clone(), pricing.clone()).in_background(),
    ));
    // Every model call reserved against the budgets that apply, before it is made.
    if let Some(b) =
        strata_runtime::budget::Budgets::from_config(&cfg.config, pricing, store.clone())
            .map_err(anyhow::Error::msg)?
    {
        invoker.attach_budgets(Arc::new(b));
    }
    Ok(Wired {
        manager,
        invoker,
        store,
        pool: shared,
        approvals,
        memory,
        audit,
        skipped,
        internal_tokens,
        vault_refs: vault_refs_in_use(cfg),
    })
}

/// Creates the data directory (and missing parents) private to this user (0700): sessions,
/// memory and the audit log live there. An existing directory is left as it is (`strata
/// doctor` fails when others can read it).
pub fn ensure_data_dir(dir: &Path) -> std::io::Result<()> {
    strata_engine::paths::create_private_dir_all(dir)
}
