//! The control API's routes, one resource a file, each with its `routes()` (`lib.rs` merges
//! them), and what every route shares: the error envelope ([`ApiError`]) and `ok`, query
//! parameters answered with the envelope ([`Query`]), `limit`, and the body reader with its
//! size cap and stall timeout.

pub(crate) mod agents;
pub(crate) mod approvals;
pub(crate) mod artifacts;
pub(crate) mod chat;
pub(crate) mod cluster;
pub(crate) mod config;
pub(crate) mod events;
pub(crate) mod goals;
pub(crate) mod health;
pub(crate) mod metrics;
pub(crate) mod openapi;
pub(crate) mod schedules;
pub(crate) mod session;
pub(crate) mod sessions;
pub(crate) mod status;
pub(crate) mod tools;
pub(crate) mod turns;
pub(crate) mod usage;

use axum::Json;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::HttpState;

/// A failure in the envelope every route uses: `{"ok": false, "code", "error"}`.
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// `Retry-After` (seconds), for a 429.
    retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    /// With `Retry-After: secs`.
    pub(crate) fn retry_after(mut self, secs: Option<u64>) -> Self {
        self.retry_after = secs;
        self
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            Json(json!({"ok": false, "code": self.code, "error": self.message})),
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}

pub(crate) fn ok(value: Value) -> Response {
    Json(json!({"ok": true, "value": value})).into_response()
}

/// Query parameters, parsed as axum's `Query` parses them, but a parameter that is not
/// what the route takes (a word for a number, one given twice) is answered with the error
/// envelope (`400 bad_request`) rather than axum's plain-text rejection.
pub(crate) struct Query<T>(pub(crate) T);

impl<T, S> axum::extract::FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Query(v)),
            Err(e) => Err(ApiError::bad_request(format!(
                "query string: {}",
                e.body_text()
                    .trim_start_matches("Failed to deserialize query string: ")
            ))),
        }
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct Limit {
    pub(crate) limit: Option<String>,
}

pub(crate) fn parse_limit(
    raw: Option<&str>,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    match raw {
        None => Ok(default),
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_request(format!(
                "`limit` must be a whole number from 1 to {max}"
            ))),
        },
    }
}

/// Reads a body with the size cap (413 without reading further) and the stall timeout (408).
pub(crate) async fn read_body(st: &HttpState, req: Request) -> Result<axum::body::Bytes, ApiError> {
    let too_big = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body over {} bytes", st.max_body_bytes),
        )
    };
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > st.max_body_bytes as u64
    {
        return Err(too_big());
    }
    let body = req.into_body();
    match tokio::time::timeout(
        st.read_timeout,
        axum::body::to_bytes(body, st.max_body_bytes),
    )
    .await
    {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "request body not received within {}s",
                st.read_timeout.as_secs()
            ),
        )),
        Ok(Err(e)) => {
            let text = e.to_string();
            if text.contains("length limit") {
                Err(too_big())
            } else {
                Err(ApiError::bad_request(format!(
                    "cannot read the body: {text}"
                )))
            }
        }
        Ok(Ok(b)) => Ok(b),
    }
}
