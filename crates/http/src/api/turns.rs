//! `GET /api/turns` and `GET /api/turns/{id}`: the turn journal (docs/DURABILITY.md) as
//! `strata turns list | show` shows it — which turns ran, which did not finish, and each
//! step of one with its time, status and cost.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::json;
use strata_runtime::journal::TurnFilter;

use super::sessions::{store, unavailable};
use super::{ApiError, Query, ok, parse_limit};
use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/turns", get(list))
        .route("/api/turns/{id}", get(show))
}

#[derive(serde::Deserialize)]
struct TurnsQuery {
    unfinished: Option<bool>,
    limit: Option<String>,
}

/// `GET /api/turns?unfinished=true&limit=`: journaled turns, newest first.
async fn list(
    State(st): State<Arc<HttpState>>,
    Query(q): Query<TurnsQuery>,
) -> Result<Response, ApiError> {
    let limit = parse_limit(q.limit.as_deref(), 100, 1000)?;
    settle(&st).await?;
    let turns = store(&st)?
        .journal_turns(TurnFilter {
            unfinished: q.unfinished.unwrap_or(false),
            limit,
        })
        .await
        .map_err(unavailable)?;
    let rows: Vec<_> = turns.iter().map(strata_runtime::journal::summary).collect();
    Ok(ok(json!({ "turns": rows })))
}

/// `GET /api/turns/{id}`: one turn with every recorded step.
async fn show(
    State(st): State<Arc<HttpState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    settle(&st).await?;
    let Some((turn, steps)) = store(&st)?.journal_turn(&id).await.map_err(unavailable)? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no journaled turn `{id}` (finished turns are kept `journal.retain_days`)"),
        ));
    };
    Ok(ok(strata_runtime::journal::detail(&turn, &steps)))
}

/// Journal writes of this process's turns are written behind them: the ones made so far land
/// before the journal is read, so a turn that answered shows its end.
async fn settle(st: &HttpState) -> Result<(), ApiError> {
    use strata_runtime::EnvExt;
    match st.invoker.env().journal() {
        Some(j) => j.settle().await.map_err(unavailable),
        None => Ok(()),
    }
}
