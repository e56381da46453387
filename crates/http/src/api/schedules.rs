//! `GET /api/schedules` (configured and conversational schedules with their state) and `POST
//! /api/schedules/{name}/{action}` (`run`, `pause`, `resume`; approvers and owners).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::json;

use super::{ApiError, ok};
use crate::{Caller, HttpState};

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/schedules", get(schedules_list))
        .route("/api/schedules/{name}/{action}", post(schedules_act))
}

fn scheduler_of(st: &HttpState) -> Result<&Arc<strata_runtime::schedule::Scheduler>, ApiError> {
    st.schedules.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "schedules are not run in this process",
        )
    })
}

/// The configured schedules and those made in conversation.
async fn current(
    sch: &strata_runtime::schedule::Scheduler,
) -> Result<Vec<strata_runtime::schedule::Schedule>, ApiError> {
    sch.current().await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )
    })
}

async fn schedules_list(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let sch = scheduler_of(&st)?;
    let states = sch.store().states().await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )
    })?;
    let all = current(sch).await?;
    Ok(ok(json!({
        "schedules": strata_runtime::schedule::overview(&all, &states)
    })))
}

async fn schedules_act(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path((name, action)): axum::extract::Path<(String, String)>,
) -> Result<Response, ApiError> {
    let sch = scheduler_of(&st)?;
    if !st.invoker.policy().may_approve(&caller.principal) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "{} may not run or pause schedules (approvers and owners may)",
                caller.principal
            ),
        ));
    }
    let all = current(sch).await?;
    if !all.iter().any(|s| s.name == name) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no schedule `{name}`"),
        ));
    }
    let store = sch.store();
    let done = match action.as_str() {
        "run" => strata_runtime::schedule::make_due(
            store.as_ref(),
            &name,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        )
        .await
        .map(|_| "due now"),
        "pause" => store.set_paused(&name, true).await.map(|()| "paused"),
        "resume" => store.set_paused(&name, false).await.map(|()| "resumed"),
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!(
                    "no route POST /api/schedules/{name}/{other}; use `run`, `pause` or `resume`"
                ),
            ));
        }
    }
    .map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )
    })?;
    tracing::info!(schedule = %name, by = %caller.principal, "schedule {done}");
    Ok(ok(json!({"name": name, "state": done})))
}
