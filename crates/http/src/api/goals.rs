//! `GET /api/goals`, `/api/goals/{id}`, `/api/goals/{id}/events`: goal workstreams
//! (`docs/GOALS.md`) as `strata goal list | show | events` shows them — read-only; goals
//! change through the `goal_*` tools (`POST /api/invoke`).

use std::sync::Arc;
use strata_runtime::EnvExt;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::json;
use strata_runtime::goal::GoalError;
use strata_runtime::goal::Goals;

use super::{ApiError, Limit, Query, ok, parse_limit};
use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/goals", get(list))
        .route("/api/goals/{id}", get(show))
        .route("/api/goals/{id}/events", get(events))
}

fn goals(st: &HttpState) -> Result<Arc<Goals>, ApiError> {
    st.invoker.env().goals().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "goals are not kept in this process",
        )
    })
}

fn failed(e: GoalError) -> ApiError {
    match e {
        GoalError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
        e => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        ),
    }
}

async fn list(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let all = goals(&st)?.list().await.map_err(failed)?;
    let rows: Vec<_> = all
        .iter()
        .map(strata_runtime::goal::Goal::summary)
        .collect();
    Ok(ok(json!({ "goals": rows })))
}

async fn show(
    State(st): State<Arc<HttpState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let goal = goals(&st)?.get(&id).await.map_err(failed)?;
    Ok(ok(json!({ "goal": goal })))
}

async fn events(
    State(st): State<Arc<HttpState>>,
    Path(id): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Response, ApiError> {
    let n = parse_limit(q.limit.as_deref(), 100, 1000)?;
    let g = goals(&st)?;
    let goal = g.get(&id).await.map_err(failed)?;
    let events = g
        .events(&id, goal.events.saturating_sub(n as u64), n)
        .await
        .map_err(failed)?;
    Ok(ok(json!({ "events": events })))
}
