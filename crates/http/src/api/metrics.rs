//! `GET /metrics`: the Prometheus text (on the control API with a token, and alone on
//! `metrics.bind` without one: `crate::metrics_router`).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::ApiError;
use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new().route("/metrics", get(metrics))
}

/// The gauges read at scrape time (the approval queue from the store, the live sessions),
/// then the recorder's text.
async fn metrics(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    use strata_runtime::approval::ApprovalStatus;
    let render = st.metrics.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "metrics are off on this server (metrics.enabled: false)",
        )
    })?;
    if let Some(approvals) = st.invoker.approvals() {
        match approvals
            .store()
            .list(Some(ApprovalStatus::Pending), 10_000)
            .await
        {
            Ok(rows) => {
                let now = strata_runtime::approval::now_secs();
                let oldest = rows.iter().map(|r| r.created_at).min().unwrap_or(now);
                strata_engine::meters::approvals_pending(rows.len(), (now - oldest).max(0) as u64);
            }
            Err(e) => tracing::warn!(error = %e, "pending approvals not counted for /metrics"),
        }
    }
    if let Some(m) = &st.manager {
        strata_engine::meters::live_sessions(m.live_sessions());
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        render(),
    )
        .into_response())
}
