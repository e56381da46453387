//! Prompt skills' turns: a one-off agent per skill run, on the same Invoker.

use std::sync::Arc;

use strata_runtime::Invoker;

use super::agents::{AgentOverrides, Site, build_agent_at};

/// Prompt skills run with their own `tools`, `max_rounds` and `llm` (Discord's slash
/// commands): a one-off agent built as `strata skill run` builds it, the same Invoker.
pub struct SkillTurns {
    /// Where agents are built from.
    pub site: Site,
    /// The Invoker every tool call goes through.
    pub invoker: Arc<Invoker>,
    /// The environment turns run in.
    pub env: Arc<strata_engine::Env>,
}

#[strata_engine::async_trait]
impl strata_runtime::skills::SkillTurns for SkillTurns {
    async fn run_prompt_skill(
        &self,
        skill: &strata_runtime::skills::SkillDef,
        req: strata_engine::turns::TurnRequest,
    ) -> Result<strata_engine::agent::Reply, strata_engine::agent::AgentError> {
        use strata_engine::agent::{Agent as _, AgentError, TurnContext};
        self.invoker
            .policy()
            .may_talk(&req.sender, &req.agent_id)
            .map_err(|e| AgentError::Denied(e.to_string()))?;
        let config = self
            .site
            .config
            .agents
            .get(&req.agent_id)
            .ok_or_else(|| AgentError::Other(format!("no agent `{}`", req.agent_id)))?;
        let overrides = AgentOverrides {
            llm: skill.llm.clone(),
            tools: skill.tools.clone(),
            max_rounds: skill.max_rounds,
        };
        let agent = build_agent_at(
            &self.site.config,
            &self.site.overlay_dir,
            &self.site.data_dir,
            (&req.agent_id, config),
            &self.invoker,
            self.env.vault.as_deref(),
            &overrides,
            None,
        )
        .map_err(AgentError::Other)?;
        let mut turn = TurnContext::new(
            &req.agent_id,
            &req.session_id,
            &req.channel_id,
            req.sender.clone(),
            self.env.clone(),
        );
        turn.channel_kind = req.channel_kind;
        turn.stream = req.stream;
        turn.scopes = req.scopes;
        turn.depth = req.depth;
        agent.handle(turn, req.message).await
    }
}
