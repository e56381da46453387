//! `GET /api/usage`: model calls' tokens and cost, summed by agent, model, sender, day, turn
//! or session.

use std::sync::Arc;
use strata_runtime::EnvExt;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::json;

use super::{ApiError, Query, ok};
use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new().route("/api/usage", get(usage))
}

#[derive(serde::Deserialize)]
struct UsageParams {
    by: Option<String>,
    since: Option<String>,
    turn: Option<String>,
}

async fn usage(
    State(st): State<Arc<HttpState>>,
    Query(p): Query<UsageParams>,
) -> Result<Response, ApiError> {
    use strata_runtime::usage::{UsageBy, UsageQuery, parse_since};
    let bad = |e: strata_runtime::usage::UsageInputError| ApiError::bad_request(e.to_string());
    let by = UsageBy::parse(p.by.as_deref().unwrap_or("agent")).map_err(bad)?;
    let since_ms = p
        .since
        .as_deref()
        .map(|s| parse_since(s, strata_engine::clock::now_ms()))
        .transpose()
        .map_err(bad)?;
    let unavailable = |m: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m);
    let meter = st
        .invoker
        .env()
        .usage()
        .ok_or_else(|| unavailable("no usage is kept by this server".into()))?;
    // Calls still on their way to the store count too.
    meter.flush().await;
    let rows = meter
        .store()
        .usage(&UsageQuery {
            by,
            since_ms,
            turn_id: p.turn,
        })
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    Ok(ok(json!({ "by": by, "rows": rows })))
}
