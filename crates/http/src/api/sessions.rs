//! The conversations kept in the store: `GET /api/sessions` (found by agent or session id),
//! `GET /api/sessions/{agent}/{session}` (the transcript) and `POST
//! /api/sessions/{agent}/{session}/reset` (forgotten; not for viewers).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::{Value, json};
use strata_engine::config::Access;
use strata_engine::session::SessionKey;

use super::{ApiError, Query, ok, parse_limit};
use crate::{Caller, HttpState};

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/sessions", get(sessions_list))
        .route("/api/sessions/{agent}/{session}", get(session_show))
        .route(
            "/api/sessions/{agent}/{session}/{action}",
            post(session_reset),
        )
}

/// The state store, or `503` in a process without one (also `turns.rs`).
pub(super) fn store(
    st: &HttpState,
) -> Result<&Arc<dyn strata_runtime::store::StateStore>, ApiError> {
    st.sessions.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "no session store in this process",
        )
    })
}

/// A store error as `503 unavailable`.
pub(super) fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        e.to_string(),
    )
}

#[derive(serde::Deserialize)]
struct SessionQuery {
    q: Option<String>,
    limit: Option<String>,
}

/// `GET /api/sessions?q=&limit=`: sessions whose agent or session id contains `q`, most
/// recently active first.
async fn sessions_list(
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
async fn session_show(
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
async fn session_reset(
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
