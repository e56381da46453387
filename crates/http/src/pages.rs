//! The JSON routes the dashboard's pages stand on that the API did not have before:
//! sessions and their transcripts, agents with their tools and skills, the merged config.
//! Like every route they are documented in `openapi.rs` and usable without the dashboard.

use std::sync::Arc;

use crate::Query;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Json};
use serde_json::{Value, json};
use strata_engine::config::Access;
use strata_engine::session::SessionKey;

use crate::{ApiError, Caller, HttpState, ok, parse_limit};

/// What the launcher knows of the configuration that the HTTP state does not: each value's
/// layer, secrets masked (`GET /api/config`), and the skills (`GET /api/agents`).
#[derive(Default)]
pub struct Described {
    /// Every leaf value's dotted key, value (masked) and the layer that set it.
    pub origins: Vec<(String, Value, String)>,
    /// The merged configuration, masked.
    pub masked: Value,
    /// The skills, reloaded as their files change.
    pub skills: Option<Arc<strata_engine::skills::SkillSet>>,
}

fn store(st: &HttpState) -> Result<&Arc<dyn strata_engine::store::StateStore>, ApiError> {
    st.sessions.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "no session store in this process",
        )
    })
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        e.to_string(),
    )
}

#[derive(serde::Deserialize)]
pub(crate) struct SessionQuery {
    q: Option<String>,
    limit: Option<String>,
}

/// `GET /api/sessions?q=&limit=`: sessions whose agent or session id contains `q`, most
/// recently active first.
pub(crate) async fn sessions_list(
    State(st): State<Arc<HttpState>>,
    Query(q): Query<SessionQuery>,
) -> Result<Response, ApiError> {
    let limit = parse_limit(q.limit.as_deref(), 100, 1000)?;
    let query = q.q.unwrap_or_default();
    if query.chars().count() > 200 {
        return Err(ApiError::bad_request("`q` is longer than 200 characters"));
    }
    let list = store(&st)?
        .list_sessions(query.trim(), limit)
        .await
        .map_err(unavailable)?;
    Ok(ok(json!({ "sessions": list })))
}

fn not_found(agent: &str, session: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no session `{session}` of agent `{agent}`"),
    )
}

/// `GET /api/sessions/{agent}/{session}`: the transcript — the summary of what was
/// compacted, then each stored turn's messages (user, assistant with its tool calls, tool
/// results) with when it was stored.
pub(crate) async fn session_show(
    State(st): State<Arc<HttpState>>,
    Path((agent, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = SessionKey::new(agent.clone(), session.clone());
    let (summary, turns) = store(&st)?
        .transcript(&key)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| not_found(&agent, &session))?;
    let turns: Vec<Value> = turns
        .into_iter()
        .map(|t| json!({"at_ms": t.at * 1000, "messages": t.messages}))
        .collect();
    Ok(ok(json!({
        "agent_id": agent,
        "session_id": session,
        "summary": summary,
        "turns": turns,
    })))
}

/// `POST /api/sessions/{agent}/{session}/reset`: the agent forgets the conversation (as
/// `/reset` in a channel). Not for viewers.
pub(crate) async fn session_reset(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, session, action)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    if action != "reset" {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route POST /api/sessions/{agent}/{session}/{action}; use `reset`"),
        ));
    }
    if caller.tier == Access::Viewer {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a viewer may not reset sessions",
        ));
    }
    let key = SessionKey::new(agent.clone(), session.clone());
    let s = store(&st)?;
    if s.load(&key).await.map_err(unavailable)?.is_none() {
        return Err(not_found(&agent, &session));
    }
    match &st.manager {
        // The manager forgets its live copy too.
        Some(m) => m.reset(&agent, &session).await.map_err(unavailable)?,
        None => s.reset(&key).await.map_err(unavailable)?,
    }
    tracing::info!(agent = %agent, session = %session, by = %caller.principal, "session reset");
    Ok(ok(
        json!({"reset": true, "agent_id": agent, "session_id": session}),
    ))
}

/// `GET /api/agents`: each configured agent — whether it runs (and why not), its provider,
/// the tools it may use, its merged config (secrets masked) — and the skills.
pub(crate) async fn agents(State(st): State<Arc<HttpState>>) -> Json<Value> {
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
                .map(strata_engine::skills::Skill::summary)
                .collect()
        })
        .unwrap_or_default();
    Json(json!({"ok": true, "value": {"agents": agents, "skills": skills}}))
}

/// `GET /api/config`: every value of the merged configuration with the layer that set it
/// (core, a module, the overlay, an environment variable), secrets masked. Owners and
/// admins only: the configuration says where everything is.
pub(crate) async fn config(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    if !matches!(caller.tier, Access::Owner | Access::Admin) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the configuration is shown to owner and admin tokens only",
        ));
    }
    let values: Vec<Value> = st
        .described
        .origins
        .iter()
        .map(|(k, v, o)| json!({"key": k, "value": v, "origin": o}))
        .collect();
    Ok(ok(json!({ "values": values })))
}
