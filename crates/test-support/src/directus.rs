//! A fake Directus ("The Mind") on 127.0.0.1 for the fleet module's tests: it records every
//! request (method, path, query, bearer, body) and answers in Directus' shapes, errors
//! included.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The bearer token the fake accepts.
pub const TOKEN: &str = "test-mind-token-123";

/// One request the fake Directus received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: HashMap<String, String>,
    pub auth: String,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Seen {
    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Every request, in order.
pub type Log = Arc<Mutex<Vec<Seen>>>;

fn query_map(uri: &Uri) -> HashMap<String, String> {
    url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

async fn directus(State(log): State<Log>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body: Bytes = axum::body::to_bytes(body, 64 << 20)
        .await
        .unwrap_or_default();
    let h: &HeaderMap = &parts.headers;
    let get = |k: &str| {
        h.get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let seen = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: query_map(&parts.uri),
        auth: get("authorization"),
        content_type: get("content-type"),
        body: body.to_vec(),
    };
    log.lock().expect("lock").push(seen.clone());
    let path = seen.path.as_str();
    if path == "/spec" {
        return (StatusCode::OK, "Model M1: 128k context, tool use.").into_response();
    }
    if seen.auth != format!("Bearer {TOKEN}") {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"errors": [{"message": "Invalid user credentials.", "extensions": {"code": "INVALID_CREDENTIALS"}}]})),
        )
            .into_response();
    }
    let data = match (parts.method.clone(), path) {
        (_, "/boom") => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"errors": [{"message": "Database is on fire", "extensions": {"code": "INTERNAL_SERVER_ERROR"}}]})),
            )
                .into_response();
        }
        (_, p) if p.starts_with("/items/missing") || p == "/items/fleet_notes/404" => {
            return (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"errors": [{"message": format!("Route {p} doesn't exist."), "extensions": {"code": "ROUTE_NOT_FOUND"}}]})),
            )
                .into_response();
        }
        (Method::DELETE, _) => return StatusCode::NO_CONTENT.into_response(),
        (Method::POST, "/files") => json!({"id": "9b1c-file", "filename_download": "report.txt"}),
        (Method::POST, _) | (Method::PATCH, _) => {
            let mut v = seen.json();
            if let Some(o) = v.as_object_mut() {
                o.entry("id").or_insert(json!(17));
            }
            v
        }
        (Method::GET, "/items/ai_models/m1") => {
            let port = parts
                .headers
                .get("host")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            json!({"id": "m1", "name": "M1", "spec_url": format!("http://{port}/spec")})
        }
        (Method::GET, "/items/ai_models/m2") => json!({"id": "m2", "name": "M2", "spec_url": null}),
        (Method::GET, p) if p.starts_with("/items/fleet_notes/") => {
            json!({"id": 17, "subject": "Disk", "status": "sent"})
        }
        (Method::GET, _) => json!([{"id": 1}, {"id": 2}]),
        _ => Value::Null,
    };
    axum::Json(json!({"data": data})).into_response()
}

/// Starts a fake Directus on 127.0.0.1 (bearer [`TOKEN`], the fleet tests' collections,
/// Directus-shaped errors); returns its base URL and request log.
pub async fn fake() -> (String, Log) {
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .fallback(directus)
        .with_state(log.clone());
    let addr = crate::serve(app).await;
    let url = format!("http://{}", addr);
    (url, log)
}
