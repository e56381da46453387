//! Agents built from config: the `llm` block and identity an agent uses, per-run overrides,
//! the [`Site`] agents are built on, and the files a Claude Code agent is given.

use std::path::Path;
use std::sync::Arc;

use strata_engine::ToolFilter;
use strata_engine::config::{AgentConfig, LlmConfig, LoadedConfig};
use strata_runtime::Invoker;
use strata_runtime::agent_loop::LlmAgent;

use super::knowledge::knowledge_index;

/// The agent's upper-case id as used in environment variable names.
fn env_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The `llm` block an agent uses, with `STRATA_AGENT_<ID>_MODEL` applied.
pub fn agent_llm(cfg: &LoadedConfig, id: &str, agent: &AgentConfig) -> Option<(LlmConfig, String)> {
    agent_llm_in(&cfg.config, id, agent)
}

fn agent_llm_in(
    config: &strata_engine::config::Config,
    id: &str,
    agent: &AgentConfig,
) -> Option<(LlmConfig, String)> {
    let (mut llm, path) = match &agent.llm {
        Some(l) => (l.clone(), format!("agents.{id}.llm")),
        None => (config.defaults.llm.clone()?, "defaults.llm".to_owned()),
    };
    if let Ok(m) = std::env::var(format!("STRATA_AGENT_{}_MODEL", env_id(id))) {
        llm.model = Some(m);
    }
    Some((llm, path))
}

/// `agents/<id>/AGENTS.md` plus the configured instruction (or its env override).
pub fn identity(overlay: &Path, id: &str, agent: &AgentConfig) -> String {
    let file = std::fs::read_to_string(overlay.join("agents").join(id).join("AGENTS.md"))
        .unwrap_or_default();
    let instruction = std::env::var(format!("STRATA_AGENT_{}_INSTRUCTION", env_id(id)))
        .ok()
        .or_else(|| agent.instruction.clone())
        .unwrap_or_default();
    let mut s = file.trim().to_owned();
    if s.is_empty() {
        s = format!("You are the agent `{id}`.");
    }
    if !instruction.trim().is_empty() {
        s.push_str("\n\n");
        s.push_str(instruction.trim());
    }
    s
}

/// Per-run changes to an agent (skills pin a model, narrow tools, cap rounds).
#[derive(Debug, Clone, Default)]
pub struct AgentOverrides {
    /// Provider pin.
    pub llm: Option<LlmConfig>,
    /// Tools, intersected with the agent's own.
    pub tools: Option<Vec<String>>,
    /// Round limit.
    pub max_rounds: Option<u32>,
}

/// Where agents are built from: the config and the deployment's directories (owned, so a
/// running server can build a skill's one-off agent later: [`SkillTurns`](super::SkillTurns)).
#[derive(Clone)]
pub struct Site {
    /// The merged config.
    pub config: Arc<strata_engine::config::Config>,
    /// The overlay.
    pub overlay_dir: std::path::PathBuf,
    /// The data directory.
    pub data_dir: std::path::PathBuf,
}

impl Site {
    /// The site `cfg` describes.
    pub fn of(cfg: &LoadedConfig) -> Self {
        Site {
            config: Arc::new(cfg.config.clone()),
            overlay_dir: cfg.overlay_dir.clone(),
            data_dir: cfg.data_dir.clone(),
        }
    }
}

/// Builds agent `id` as configured, with `overrides` applied.
pub fn build_agent(
    cfg: &LoadedConfig,
    id: &str,
    agent: &AgentConfig,
    invoker: &Arc<Invoker>,
    vault: Option<&dyn strata_engine::secret::Vault>,
    overrides: &AgentOverrides,
    mcp_config: Option<std::path::PathBuf>,
) -> Result<LlmAgent, String> {
    build_agent_at(
        &cfg.config,
        &cfg.overlay_dir,
        &cfg.data_dir,
        (id, agent),
        invoker,
        vault,
        overrides,
        mcp_config,
    )
}

#[allow(clippy::too_many_arguments)]
pub(super) fn build_agent_at(
    config: &strata_engine::config::Config,
    overlay_dir: &Path,
    data_dir: &Path,
    (id, agent): (&str, &AgentConfig),
    invoker: &Arc<Invoker>,
    vault: Option<&dyn strata_engine::secret::Vault>,
    overrides: &AgentOverrides,
    mcp_config: Option<std::path::PathBuf>,
) -> Result<LlmAgent, String> {
    let (llm, path) = match &overrides.llm {
        Some(l) => (l.clone(), format!("skill llm for agent {id}")),
        None => agent_llm_in(config, id, agent).ok_or_else(|| {
            format!("no LLM provider: set `agents.{id}.llm` or `defaults.llm` (see README, \"Providers\")")
        })?,
    };
    let model = strata_llm::model_name(&llm).unwrap_or_default();
    if model.is_empty() && llm.provider != "claude-code" {
        return Err(format!(
            "`{path}.model` is required for provider `{}`",
            llm.provider
        ));
    }
    let base = ToolFilter::from_config(agent.tools.as_ref());
    let filter = match &overrides.tools {
        None => base,
        Some(list) => base.narrow(list),
    };
    let project_dir = agent
        .project_dir
        .as_ref()
        .map(|p| overlay_dir.join(p))
        .unwrap_or_else(|| overlay_dir.join("agents").join(id));
    let ctx = strata_llm::AgentContext {
        agent_id: id.to_owned(),
        project_dir,
        tools: filter.clone(),
        registry_tools: invoker
            .registry()
            .list()
            .iter()
            .map(|t| t.spec().name.clone())
            .collect(),
        mcp_config,
        protected_paths: protected_paths(overlay_dir, data_dir),
        settings_file: Some(
            data_dir
                .join("claude-code")
                .join(format!("{id}.settings.json")),
        ),
        alerts: Some(invoker.clone()),
    };
    let provider = strata_llm::build(&llm, vault, &path, &ctx).map_err(|e| e.to_string())?;
    // The Claude Code CLI keeps its own context: what it is sent is not the request itself.
    let window = (llm.provider != "claude-code").then(|| {
        llm.context_window
            .or_else(|| strata_runtime::context_window::known_window(&llm.provider, &model))
    });
    Ok(LlmAgent::new(
        id,
        identity(overlay_dir, id, agent),
        provider,
        model,
        invoker.clone(),
    )
    .with_tools(filter)
    .with_max_rounds(overrides.max_rounds.or(agent.max_rounds).unwrap_or(10))
    .with_knowledge_index(agent.compression.apply(knowledge_index(
        overlay_dir,
        id,
        agent.knowledge_index_tokens.unwrap_or(400) as usize * 4,
    )))
    .with_sampling(llm.max_tokens, llm.temperature)
    .with_context_window(window.flatten())
    .with_streaming(llm.stream.unwrap_or(true)))
}

/// What a CLI provider's own tools must never touch: the data directory (tokens, stores,
/// the audit log), the vault's files and its key file, as absolute paths
/// (`~/.config/strata/` is denied by the provider itself).
fn protected_paths(overlay_dir: &Path, data_dir: &Path) -> Vec<std::path::PathBuf> {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let config = overlay_dir.join("config");
    let mut out = vec![abs(data_dir)];
    for f in ["secrets.enc", "secrets.salt"] {
        out.push(abs(&config.join(f)));
    }
    if let Some(key) = std::env::var_os("STRATA_VAULT_KEY_FILE") {
        out.push(abs(Path::new(&key)));
    }
    out
}

/// Writes Claude Code's MCP config for agent `id` (0600): our endpoint, its own token.
pub(super) fn write_mcp_config(
    cfg: &LoadedConfig,
    id: &str,
    url: &str,
    token: &str,
) -> anyhow::Result<std::path::PathBuf> {
    use std::io::Write;
    let dir = cfg.data_dir.join("mcp");
    strata_engine::paths::create_private_dir_all(&dir)?;
    let path = dir.join(format!("{id}.json"));
    let doc = serde_json::json!({"mcpServers": {strata_llm::claude_code::MCP_SERVER: {
        "type": "http", "url": url, "headers": {"Authorization": format!("Bearer {token}")}
    }}});
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).write(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&path)?;
    f.write_all(serde_json::to_string_pretty(&doc)?.as_bytes())?;
    Ok(path)
}

/// The agent `chat`/`repl` talk to when none is named.
pub fn default_agent(cfg: &LoadedConfig) -> Result<String, String> {
    if let Some(a) = &cfg.config.defaults.agent {
        return Ok(a.clone());
    }
    let ids: Vec<&String> = cfg.config.agents.keys().collect();
    match ids.as_slice() {
        [] => Err("no agents configured: add one under `agents:` in config/agents.yaml".into()),
        [one] => Ok((*one).clone()),
        _ if cfg.config.agents.contains_key("main") => Ok("main".into()),
        _ => Err(format!(
            "several agents ({}); pick one with --agent or set `defaults.agent`",
            ids.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}
