//! `POST /chat` (a turn of an agent as the caller, answered whole or streamed) and `POST
//! /execute` (a task stored and handed to an agent; its own `X-API-Key`, no token).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde_json::{Value, json};
use strata_engine::turns::TurnRequest;

use super::{ApiError, read_body};
use crate::{Caller, HttpState, auth, body};

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/chat", post(chat))
        .route("/execute", post(execute))
}

async fn chat(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    let body = read_body(&st, req).await?;
    let b: body::ChatBody = body::parse(&body).map_err(ApiError::bad_request)?;
    let message = body::required(b.message, "message")
        .map_err(ApiError::bad_request)?
        .0;
    // Nothing to say is not sent to a model.
    if message.trim().is_empty() {
        return Err(ApiError::bad_request("field `message` must not be blank"));
    }
    let Some(manager) = st.manager.clone() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            no_agent_running(&st),
        ));
    };
    let agent = b
        .agent
        .map(|t| t.0)
        .or_else(|| st.default_agent.clone())
        .ok_or_else(|| ApiError::bad_request("field `agent` is required (no default agent)"))?;
    if manager.agent(&agent).is_none() {
        let why = st
            .skipped
            .iter()
            .find(|(id, _)| *id == agent)
            .map(|(_, why)| format!(": it did not start: {why}"))
            .unwrap_or_default();
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no running agent `{agent}`{why}"),
        ));
    }
    let session_id = b
        .session_id
        .map(|t| t.0)
        .unwrap_or_else(|| format!("http-{}", uuid::Uuid::new_v4()));
    let mut req = TurnRequest {
        agent_id: agent,
        session_id: session_id.clone(),
        stream: None,
        // The token's tool scope holds for the turn's calls as for its own.
        scopes: caller.scope().into_iter().collect(),
        channel_kind: None,
        channel_id: "http".into(),
        sender: caller.principal.clone(),
        message: strata_engine::agent::Message::text(message),
        depth: 0,
        taint: None,
        turn_id: b.request_id.map(|t| t.0),
    };
    if b.stream == Some(true) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        req.stream = Some(strata_engine::turns::TurnSink::channel(tx.clone()));
        return Ok(chat_stream(manager, req, session_id, rx));
    }
    let reply = manager.turn(req).await.map_err(chat_error)?;
    Ok(Json(chat_answer(reply, &session_id)).into_response())
}

/// Why `/chat` has no agent to run: each agent that did not start, with the reason `GET
/// /api/status` gives for it (`HttpState::skipped`); with no agent configured at all, how to
/// add one and its provider.
fn no_agent_running(st: &HttpState) -> String {
    if st.skipped.is_empty() {
        return "no agent is running: none is configured; add one under `agents:` in \
                config/agents.yaml and configure an LLM provider (`defaults.llm`, see README, \
                \"Providers\")"
            .into();
    }
    let why: Vec<String> = st
        .skipped
        .iter()
        .map(|(id, why)| format!("agent `{id}` did not start: {why}"))
        .collect();
    format!("no agent is running: {}", why.join("; "))
}

/// How a failed `/chat` turn is answered.
fn chat_error(e: strata_engine::agent::AgentError) -> ApiError {
    match e {
        strata_engine::agent::AgentError::Denied(m) => {
            ApiError::new(StatusCode::FORBIDDEN, "denied", m)
        }
        strata_engine::agent::AgentError::Budget(m) => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "budget_reached", m)
        }
        e => ApiError::new(StatusCode::BAD_GATEWAY, "agent_failed", e.to_string()),
    }
}

/// `/chat`'s answer: `{response, session_id}` (empty when the agent chose not to answer).
fn chat_answer(reply: strata_engine::agent::Reply, session_id: &str) -> Value {
    let response = if reply.silent {
        String::new()
    } else {
        reply.text
    };
    json!({"response": response, "session_id": session_id})
}

/// `/chat` with `"stream": true`: the turn runs in its own task (it finishes and is stored
/// if the client goes away) and its events are sent as they come — `token` `{text}`,
/// `tool_start` `{id, tool}`, `tool_end` `{id, tool, status, elapsed_ms}` — then `final`
/// with the body a plain `/chat` answers, or `error` with the error envelope's `{code,
/// message, status}`.
fn chat_stream(
    manager: Arc<strata_runtime::manager::AgentManager>,
    req: TurnRequest,
    session_id: String,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<strata_engine::turns::TurnEvent>,
) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let turn = tokio::spawn(async move { manager.turn(req).await });
    let (out, events) = tokio::sync::mpsc::unbounded_channel::<Event>();
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            let name = match &ev {
                strata_engine::turns::TurnEvent::Token { .. } => "token",
                strata_engine::turns::TurnEvent::ToolStart { .. } => "tool_start",
                strata_engine::turns::TurnEvent::ToolEnd { .. } => "tool_end",
            };
            let mut data = serde_json::to_value(&ev).unwrap_or(Value::Null);
            if let Some(o) = data.as_object_mut() {
                o.remove("type");
            }
            if out
                .send(Event::default().event(name).data(data.to_string()))
                .is_err()
            {
                // The client went away; the turn still finishes and is stored.
                break;
            }
        }
        let last = match turn.await {
            Ok(Ok(reply)) => Event::default()
                .event("final")
                .data(chat_answer(reply, &session_id).to_string()),
            Ok(Err(e)) => {
                let e = chat_error(e);
                Event::default().event("error").data(
                    json!({"code": e.code, "message": e.message, "status": e.status.as_u16()})
                        .to_string(),
                )
            }
            Err(e) => Event::default().event("error").data(
                json!({"code": "internal", "message": format!("the turn's task failed: {e}"), "status": 500})
                    .to_string(),
            ),
        };
        let _ = out.send(last);
    });
    let stream = futures_util::stream::unfold(events, |mut rx| async move {
        rx.recv()
            .await
            .map(|e| (Ok::<_, std::convert::Infallible>(e), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

async fn execute(State(st): State<Arc<HttpState>>, req: Request) -> Result<Response, ApiError> {
    let Some(expected) = st.execute_key.as_deref() else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "`server.execute_api_key` is not configured",
        ));
    };
    let given = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !auth::same_secret(&given, expected) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid X-API-Key",
        ));
    }
    let body = read_body(&st, req).await?;
    let b: body::ExecuteBody = body::parse(&body).map_err(ApiError::bad_request)?;
    // The whole payload is stored as sent (it carries fields of the sender's own).
    let mut obj = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let task_id = body::required(b.task_id, "task_id")
        .map_err(ApiError::bad_request)?
        .0;
    if task_id.is_empty()
        || task_id.len() > 128
        || !task_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ApiError::bad_request(
            "field `task_id` may use letters, digits, `-` and `_` (at most 128)",
        ));
    }
    let agent = body::required(b.assigned_agent, "assigned_agent")
        .map_err(ApiError::bad_request)?
        .0;
    obj.insert(
        "received_at".into(),
        json!(strata_engine::clock::now_rfc3339()),
    );
    let dir = st.data_dir.join("tasks");
    let path = dir.join(format!("task_{task_id}_payload.json"));
    let text = serde_json::to_vec_pretty(&obj).unwrap_or_default();
    let write = async {
        let private = dir.clone();
        tokio::task::spawn_blocking(move || strata_engine::paths::create_private_dir_all(&private))
            .await
            .map_err(std::io::Error::other)??;
        let tmp = dir.join(format!(".task_{task_id}.tmp"));
        tokio::fs::write(&tmp, &text).await?;
        tokio::fs::rename(&tmp, &path).await
    };
    write.await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot store the task: {e}"),
        )
    })?;
    if let Some(manager) = st.manager.clone() {
        let prompt = format!(
            "New task {task_id}: {}\n\n{}\n\nInput data:\n{}",
            b.title.as_ref().map_or("", |t| t.0.as_str()),
            b.description.as_ref().map_or("", |t| t.0.as_str()),
            obj.get("input_data").cloned().unwrap_or(Value::Null)
        );
        let session = format!("task-{task_id}");
        tokio::spawn(async move {
            let r = manager
                .turn(TurnRequest {
                    agent_id: agent.clone(),
                    stream: None,
                    scopes: Vec::new(),
                    channel_kind: None,
                    channel_id: format!("execute:{session}"),
                    session_id: session,
                    sender: strata_engine::Principal::Token {
                        name: "execute".into(),
                        tier: strata_engine::config::Access::Admin,
                    },
                    message: strata_engine::agent::Message::text(prompt),
                    depth: 0,
                    taint: None,
                    turn_id: None,
                })
                .await;
            if let Err(e) = r {
                tracing::warn!(agent = %agent, error = %e, "queued task failed");
            }
        });
    } else {
        tracing::warn!(task = %task_id, "task stored but no agent is running to take it");
    }
    Ok(
        Json(json!({"message": format!("Task {task_id} received"), "status": "ok"}))
            .into_response(),
    )
}
