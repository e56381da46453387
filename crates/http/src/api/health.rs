//! `GET /health` (the process answers: `ok`, no token) and `GET /api/health` (the server
//! and its store, no token).

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/health", get(health))
        .route("/api/health", get(api_health))
}

async fn health() -> &'static str {
    "ok"
}

/// Whether the server and its store answer. A store that does not answer makes the answer
/// `ok: false` with `store.state: degraded` and why (still 200: the server itself is up).
async fn api_health(State(st): State<Arc<HttpState>>) -> Json<Value> {
    let store = match &st.sessions {
        Some(s) => {
            let health = s.health().await;
            let mut v = serde_json::to_value(&health).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("backend".into(), json!(s.backend()));
            }
            Some((health == strata_runtime::store::StoreHealth::Ok, v))
        }
        None => None,
    };
    Json(json!({
        "ok": store.as_ref().is_none_or(|(ok, _)| *ok),
        "service": "strata",
        "version": env!("CARGO_PKG_VERSION"),
        "tool_count": st.invoker.registry().len(),
        "store": store.map(|(_, v)| v),
    }))
}
