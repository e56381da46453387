//! `agent_brief`: a tool in a file of its own, compiled in by `build.rs` without a `mod` line.

use serde::Serialize;
use strata_engine::{ToolContext, ToolError, tool};

/// What `agent_brief` returns.
#[derive(Debug, Serialize)]
pub struct AgentBrief {
    /// Agent id.
    pub id: String,
    /// Display name from `agents.yaml`.
    pub name: Option<String>,
    /// Description from `agents.yaml`.
    pub description: Option<String>,
    /// The agent's identity file, `agents/<id>/AGENTS.md`.
    pub identity: Option<String>,
    /// Its tool selection (`all`, a list, or unset).
    pub tools: serde_json::Value,
    /// Whether it has an LLM provider (its own or `defaults.llm`).
    pub has_provider: bool,
}

/// Describes one agent of this deployment: its name, description, identity file
/// (`agents/<id>/AGENTS.md`), tool selection, and whether it can reach a model.
#[tool(capabilities = [read], side_effects = none)]
async fn agent_brief(
    ctx: &ToolContext,
    /// Agent id, as in `config/agents.yaml`.
    agent: String,
) -> Result<AgentBrief, ToolError> {
    let cfg = ctx.config();
    let Some(a) = cfg.agents.get(&agent) else {
        let known: Vec<&str> = cfg.agents.keys().map(String::as_str).collect();
        return Err(ToolError::invalid(
            "agent",
            format!("no agent `{agent}`; known: {}", known.join(", ")),
        ));
    };
    if !agent
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ToolError::invalid(
            "agent",
            "agent ids use letters, digits, `-` and `_`",
        ));
    }
    let path = ctx
        .env
        .overlay_dir
        .join("agents")
        .join(&agent)
        .join("AGENTS.md");
    let identity = tokio::fs::read_to_string(&path).await.ok();
    Ok(AgentBrief {
        id: agent,
        name: a.name.clone(),
        description: a.description.clone(),
        identity,
        tools: serde_json::to_value(&a.tools).unwrap_or_default(),
        has_provider: a.llm.is_some() || cfg.defaults.llm.is_some(),
    })
}
