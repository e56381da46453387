//! `GET /api/artifacts` (files under `server.artifact_roots`) and `GET
//! /api/artifacts/{*path}` (one file's content), both through the core file tools as the
//! caller.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::{Value, json};

use super::{ApiError, Query, ok, parse_limit};
use crate::{Caller, HttpState};

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/artifacts", get(artifacts_list))
        .route("/api/artifacts/{*path}", get(artifact_read))
}

#[derive(serde::Deserialize)]
struct ArtifactQuery {
    under: Option<String>,
    glob: Option<String>,
    limit: Option<String>,
    max_bytes: Option<String>,
}

/// `rel` when it names something under one of `server.artifact_roots` (lexically: no `..`;
/// absolute paths must lie inside a root). The file tools then confine it for real.
fn artifact_path(st: &HttpState, rel: &str) -> Result<String, ApiError> {
    use std::path::{Component, Path};
    let forbidden = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("`{rel}` is outside `server.artifact_roots`"),
        )
    };
    let p = Path::new(rel);
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(forbidden());
    }
    let full = st.overlay_dir.join(p);
    if st.artifact_roots.iter().any(|r| full.starts_with(r)) {
        Ok(rel.to_owned())
    } else {
        Err(forbidden())
    }
}

/// Runs a file tool for an artifact route as the caller (scope, access control, rate limits,
/// audit: like any call) and maps a refusal onto HTTP.
async fn artifact_call(
    st: &HttpState,
    caller: &Caller,
    tool: &str,
    args: Value,
) -> Result<Value, ApiError> {
    let r = st
        .invoker
        .invoke(caller.invocation(tool.into(), args))
        .await;
    let message = r.error.clone().unwrap_or_default();
    match r.status {
        strata_runtime::Status::Ok => Ok(r.value),
        strata_runtime::Status::Denied | strata_runtime::Status::ApprovalDenied => {
            Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", message))
        }
        strata_runtime::Status::RateLimited => {
            Err(
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message)
                    .retry_after(r.retry_after_secs),
            )
        }
        strata_runtime::Status::ValidationError => Err(ApiError::bad_request(message)),
        strata_runtime::Status::UnknownTool => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("{message} (artifacts are served by the core file tools)"),
        )),
        strata_runtime::Status::Error => {
            Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", message))
        }
    }
}

async fn artifacts_list(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ArtifactQuery>,
) -> Result<Response, ApiError> {
    let limit = parse_limit(q.limit.as_deref(), 200, 5000)?;
    let mut args = json!({ "limit": limit });
    let under = q.under.as_deref().filter(|u| !u.trim().is_empty());
    if let Some(u) = under {
        args["path"] = json!(artifact_path(&st, u)?);
    }
    if let Some(g) = &q.glob {
        args["glob"] = json!(g);
    }
    let mut listed = artifact_call(&st, &caller, "list_files", args).await?;
    // Without `under`, list_files walks every `tools.roots` entry: keep the artifact roots.
    if under.is_none()
        && let Some(entries) = listed.get_mut("entries").and_then(Value::as_array_mut)
    {
        entries.retain(|e| {
            e["path"]
                .as_str()
                .is_some_and(|p| artifact_path(&st, p).is_ok())
        });
    }
    Ok(ok(json!({
        "entries": listed["entries"], "truncated": listed["truncated"],
    })))
}

async fn artifact_read(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(rel): axum::extract::Path<String>,
    Query(q): Query<ArtifactQuery>,
) -> Result<Response, ApiError> {
    let max = parse_limit(q.max_bytes.as_deref(), 65_536, 1_048_576)?;
    let path = artifact_path(&st, &rel)?;
    let v = artifact_call(
        &st,
        &caller,
        "read_file",
        json!({"path": path, "max_bytes": max, "binary": true}),
    )
    .await?;
    Ok(ok(json!({
        "path": rel, "size": v["size"], "truncated": v["truncated"],
        "encoding": v["encoding"], "content": v["content"],
    })))
}
