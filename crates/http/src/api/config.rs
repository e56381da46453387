//! `GET /api/config`: the merged configuration, each value with the layer that set it
//! (owners and admins).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::{Value, json};
use strata_engine::config::Access;

use super::{ApiError, ok};
use crate::{Caller, HttpState};

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new().route("/api/config", get(config))
}

/// `GET /api/config`: every value of the merged configuration with the layer that set it
/// (core, a module, the overlay, an environment variable), secrets masked. Owners and
/// admins only: the configuration says where everything is.
async fn config(
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
