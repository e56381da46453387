//! `GET /api/approvals` (requests by status) and `POST /api/approvals/{id}/{decision}`
//! (`approve` or `deny`, as the caller).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::{Value, json};

use super::{ApiError, Query, ok, parse_limit, read_body};
use crate::{Caller, HttpState, body};

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/approvals", get(approvals_list))
        .route("/api/approvals/{id}/{decision}", post(approvals_decide))
}

#[derive(serde::Deserialize)]
struct ApprovalQuery {
    status: Option<String>,
    limit: Option<String>,
}

fn approvals_of(st: &HttpState) -> Result<&Arc<strata_runtime::approval::Approvals>, ApiError> {
    st.invoker.approvals().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "approvals are not enabled in this process",
        )
    })
}

async fn approvals_list(
    State(st): State<Arc<HttpState>>,
    Query(q): Query<ApprovalQuery>,
) -> Result<Response, ApiError> {
    use strata_runtime::approval::ApprovalStatus;
    let limit = parse_limit(q.limit.as_deref(), 50, 1000)?;
    let status = match q.status.as_deref().unwrap_or("pending") {
        "all" => None,
        s => Some(ApprovalStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "`status` must be pending, approved, denied, timeout or all, not `{s}`"
            ))
        })?),
    };
    let rows = approvals_of(&st)?
        .store()
        .list(status, limit)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(ok(json!({ "approvals": rows })))
}

async fn approvals_decide(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path((id, decision)): axum::extract::Path<(String, String)>,
    req: Request,
) -> Result<Response, ApiError> {
    use strata_runtime::approval::DecideError;
    let approve = match decision.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no route POST /api/approvals/{id}/{other}; use `approve` or `deny`"),
            ));
        }
    };
    let body = read_body(&st, req).await?;
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let b: body::DecideBody = body::parse(&body).map_err(ApiError::bad_request)?;
        b.reason.map(|t| t.0)
    };
    let r = approvals_of(&st)?
        .decide(&id, approve, &caller.principal, reason.as_deref())
        .await
        .map_err(|e| {
            let (code, name) = match &e {
                DecideError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
                DecideError::NotPending { .. } => (StatusCode::CONFLICT, "conflict"),
                DecideError::NotApprover(_) => (StatusCode::FORBIDDEN, "forbidden"),
                DecideError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            };
            ApiError::new(code, name, e.to_string())
        })?;
    Ok(ok(serde_json::to_value(r).unwrap_or(Value::Null)))
}
