//! The audit log read back: `GET /api/events` (the last records, every member's in a
//! cluster), `GET /api/events/stream` (new records as server-sent events) and `GET
//! /api/audit/verify` (its hash chain checked).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::{ApiError, Limit, Query, ok, parse_limit};
use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/events", get(events))
        .route("/api/events/stream", get(events_stream))
        .route("/api/audit/verify", get(audit_verify))
}

async fn events(
    State(st): State<Arc<HttpState>>,
    Query(q): Query<Limit>,
) -> Result<Response, ApiError> {
    let n = parse_limit(q.limit.as_deref(), 20, 1000)?;
    // A cluster member answers with every member's records.
    if let Some(c) = &st.cluster
        && let Some(found) = c.events(n).await
    {
        let records =
            found.map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e))?;
        return Ok(ok(json!({ "events": records })));
    }
    let log = st.audit.clone();
    let records = tokio::task::spawn_blocking(move || log.tail(n))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(ok(json!({ "events": records })))
}

/// `GET /api/events/stream`: the audit records this instance writes from now on, as
/// server-sent events (`event: audit`, one JSON record per event), with a comment every 15 s
/// to keep proxies from closing it.
async fn events_stream(State(st): State<Arc<HttpState>>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use std::collections::VecDeque;
    let follower = strata_store::audit_log::Follower::from_end(&st.audit_path);
    let stream = futures_util::stream::unfold(
        (follower, VecDeque::<String>::new()),
        |(mut f, mut queue)| async move {
            loop {
                if let Some(line) = queue.pop_front() {
                    let ev = Event::default().event("audit").data(line);
                    return Some((Ok::<_, std::convert::Infallible>(ev), (f, queue)));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
                let (back, text) = tokio::task::spawn_blocking(move || {
                    let text = f.read_new(1 << 20);
                    (f, text)
                })
                .await
                .ok()?;
                f = back;
                match text {
                    Ok(t) => queue.extend(
                        t.lines()
                            .filter(|l| !l.trim().is_empty())
                            .map(str::to_owned),
                    ),
                    Err(e) => tracing::warn!(error = %e, "event stream cannot read the audit log"),
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// `GET /api/audit/verify`: the audit log's hash chain checked end to end (as `strata audit
/// verify`): `{intact, records, files, starts_mid_chain}` or `{intact: false, file, line,
/// reason}` at the first broken link.
async fn audit_verify(State(st): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let path = st.audit_path.clone();
    let report = tokio::task::spawn_blocking(move || strata_store::audit_log::verify_all(&path))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(ok(match report {
        Ok(r) => json!({
            "intact": true,
            "records": r.records,
            "files": r.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "starts_mid_chain": r.starts_mid_chain,
        }),
        Err((file, broken)) => json!({
            "intact": false,
            "file": file.display().to_string(),
            "line": broken.line,
            "reason": broken.reason,
        }),
    }))
}
