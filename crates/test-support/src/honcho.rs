//! A fake Honcho (v3 REST) on 127.0.0.1, recording every call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

/// A fake Honcho (v3 routes: workspaces, peers, sessions, representation, summaries,
/// messages) recording every call; `delay` makes it slow.
#[derive(Default)]
pub struct Fake {
    /// (method path, body) of every call.
    pub calls: Mutex<Vec<(String, Value)>>,
    /// What was created (a second create answers 200, not 201).
    pub created: Mutex<Vec<String>>,
    /// How long every answer waits.
    pub delay: Mutex<Duration>,
}

async fn record(st: &Fake, what: String, body: Value) -> StatusCode {
    let delay = *st.delay.lock().expect("lock");
    tokio::time::sleep(delay).await;
    st.calls.lock().expect("lock").push((what.clone(), body));
    let mut created = st.created.lock().expect("lock");
    if created.contains(&what) {
        StatusCode::OK
    } else {
        created.push(what);
        StatusCode::CREATED
    }
}

/// Starts a fake Honcho on 127.0.0.1; returns its base URL and state.
pub async fn fake() -> (String, Arc<Fake>) {
    let st = Arc::new(Fake::default());
    let app = Router::new()
        .route(
            "/v3/workspaces",
            post(|State(st): State<Arc<Fake>>, Json(b): Json<Value>| async move {
                let code = record(&st, format!("ws {}", b["id"]), b.clone()).await;
                (code, Json(json!({"id": b["id"], "metadata": {}})))
            }),
        )
        .route(
            "/v3/workspaces/{ws}/peers",
            post(|State(st): State<Arc<Fake>>, Path(ws): Path<String>, Json(b): Json<Value>| async move {
                let code = record(&st, format!("peer {ws}/{}", b["id"]), b.clone()).await;
                (code, Json(json!({"id": b["id"], "workspace_id": ws})))
            }),
        )
        .route(
            "/v3/workspaces/{ws}/sessions",
            post(|State(st): State<Arc<Fake>>, Path(ws): Path<String>, Json(b): Json<Value>| async move {
                let code = record(&st, format!("session {ws}/{}", b["id"]), b.clone()).await;
                (code, Json(json!({"id": b["id"], "workspace_id": ws})))
            }),
        )
        .route(
            "/v3/workspaces/{ws}/peers/{peer}/representation",
            post(|State(st): State<Arc<Fake>>, Path((ws, peer)): Path<(String, String)>, Json(b): Json<Value>| async move {
                record(&st, format!("representation {ws}/{peer}"), b).await;
                Json(json!({"representation": format!("{peer} prefers short answers and works on the billing service.")}))
            }),
        )
        .route(
            "/v3/workspaces/{ws}/sessions/{s}/summaries",
            get(|State(st): State<Arc<Fake>>, Path((ws, s)): Path<(String, String)>| async move {
                record(&st, format!("summaries {ws}/{s}"), Value::Null).await;
                Json(json!({"id": s, "short_summary": {"content": "They discussed the invoice export."}, "long_summary": null}))
            }),
        )
        .route(
            "/v3/workspaces/{ws}/sessions/{s}/messages",
            post(|State(st): State<Arc<Fake>>, Path((ws, s)): Path<(String, String)>, Json(b): Json<Value>| async move {
                record(&st, format!("messages {ws}/{s}"), b).await;
                Json(json!([]))
            }),
        )
        .with_state(st.clone());
    let addr = crate::serve(app).await;
    let url = format!("http://{}", addr);
    (url, st)
}
