//! `GET /api/tools` (the tools the caller may call) and `POST /api/invoke` (a call through
//! the Invoker as the caller).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::{Value, json};

use super::{ApiError, ok, read_body};
use crate::{Caller, HttpState, body};

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/tools", get(tools))
        .route("/api/invoke", post(invoke))
}

async fn tools(State(st): State<Arc<HttpState>>, Extension(caller): Extension<Caller>) -> Response {
    let list = st.invoker.registry().list();
    let listed = caller.lister();
    let tools: Vec<Value> = list
        .iter()
        .filter(|t| listed(&t.spec().name))
        .filter(|t| st.invoker.policy().callable_by(&caller.principal, t.spec()))
        .map(|t| serde_json::to_value(t.listing()).unwrap_or(Value::Null))
        .collect();
    ok(json!({ "tools": tools }))
}

async fn invoke(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    let body = read_body(&st, req).await?;
    let b: body::InvokeBody = body::parse(&body).map_err(ApiError::bad_request)?;
    let tool = body::required(b.tool, "tool")
        .map_err(ApiError::bad_request)?
        .0;
    let args = Value::Object(b.args.unwrap_or_default().0);
    let mut call = caller.invocation(tool, args);
    call.request_id = b.request_id.map(|t| t.0);
    let result = st.invoker.invoke(call).await;
    // Outside the token's scope: refused and audited by the Invoker, answered 403 here.
    if result.out_of_scope {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            result.error.unwrap_or_default(),
        ));
    }
    Ok(ok(serde_json::to_value(result).unwrap_or(Value::Null)))
}
