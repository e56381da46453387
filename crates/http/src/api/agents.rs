//! `GET /api/agents`: each configured agent — running or why not, its provider, its tools, its
//! config (secrets masked) — and the skills.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new().route("/api/agents", get(agents))
}

/// `GET /api/agents`: each configured agent — whether it runs (and why not), its provider,
/// the tools it may use, its merged config (secrets masked) — and the skills.
async fn agents(State(st): State<Arc<HttpState>>) -> Json<Value> {
    let env = st.invoker.env();
    let registry = st.invoker.registry().list();
    let skipped: std::collections::HashMap<&str, &str> = st
        .skipped
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let agents: Vec<Value> = env
        .config
        .agents
        .iter()
        .map(|(id, cfg)| {
            let running = st
                .manager
                .as_ref()
                .and_then(|m| m.agent(id))
                .map(|a| a.provider().map(str::to_owned));
            let filter = strata_engine::ToolFilter::from_config(cfg.tools.as_ref());
            let tools: Vec<&str> = registry
                .iter()
                .map(|t| t.spec().name.as_str())
                .filter(|n| filter.allows(n))
                .collect();
            json!({
                "id": id,
                "running": running.is_some(),
                "reason": skipped.get(id.as_str()),
                "provider": running.flatten(),
                "tools": tools,
                "config": st.described.masked.get("agents").and_then(|a| a.get(id)),
            })
        })
        .collect();
    let skills: Vec<Value> = st
        .described
        .skills
        .as_ref()
        .map(|s| {
            s.snapshot()
                .values()
                .map(strata_runtime::skills::Skill::summary)
                .collect()
        })
        .unwrap_or_default();
    Json(json!({"ok": true, "value": {"agents": agents, "skills": skills}}))
}
