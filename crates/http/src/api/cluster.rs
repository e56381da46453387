//! `GET /api/cluster`: the cluster this instance is a member of (`enabled: false` when none).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::json;

use super::{ApiError, ok};
use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new().route("/api/cluster", get(api_cluster))
}

async fn api_cluster(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    // Not a member: the same shape, saying so.
    let Some(c) = &st.cluster else {
        return Ok(ok(json!({"enabled": false, "instances": []})));
    };
    c.status()
        .await
        .map(|mut v| {
            v["enabled"] = json!(true);
            ok(v)
        })
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e))
}
