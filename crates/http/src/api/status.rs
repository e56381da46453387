//! `GET /api/status`: one document for `strata status` — instances, agents, connectors,
//! pending approvals, today's spend by agent, budgets and the last warnings and errors; and
//! `GET /api/state`, the shorter overview (agents, sessions, tools, connectors).

use std::sync::Arc;
use strata_runtime::EnvExt;

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};
use strata_runtime::approval::ApprovalStatus;
use strata_runtime::usage::{UsageBy, UsageQuery, day_start_ms};

use super::ok;
use crate::HttpState;

/// How many pending approvals are listed (all are counted).
const APPROVALS_LISTED: usize = 5;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/api/status", get(api_status))
        .route("/api/state", get(api_state))
}

async fn api_status(State(st): State<Arc<HttpState>>) -> Response {
    let env = st.invoker.env();
    let now_ms = strata_engine::clock::now_ms();
    let (mut agents, skipped) = agents_json(&st);
    agents.extend(skipped);
    let cluster = match &st.cluster {
        Some(c) => c.status().await.unwrap_or_else(|e| json!({"error": e})),
        None => Value::Null,
    };
    let approvals = match st.invoker.approvals() {
        Some(a) => match a.store().list(Some(ApprovalStatus::Pending), 1000).await {
            Ok(pending) => {
                let now = strata_runtime::approval::now_secs();
                let oldest = pending.iter().map(|r| r.created_at).min();
                json!({
                    "pending": pending.len(),
                    "oldest_age_secs": oldest.map(|t| (now - t).max(0)),
                    "requests": pending.iter().take(APPROVALS_LISTED).map(|r| json!({
                        "id": r.id,
                        "tool": r.tool,
                        "agent_id": r.agent_id,
                        "principal": r.principal,
                        "description": r.description,
                        "age_secs": (now - r.created_at).max(0),
                    })).collect::<Vec<_>>(),
                })
            }
            Err(e) => json!({"error": e.to_string()}),
        },
        None => Value::Null,
    };
    let tz = env.config.defaults.timezone.as_deref();
    let since = day_start_ms(now_ms, tz);
    if let Some(u) = env.usage() {
        // Calls still on their way to the store count too.
        u.flush().await;
    }
    let spend = match env.usage() {
        Some(u) => match u
            .store()
            .usage(&UsageQuery {
                by: UsageBy::Agent,
                since_ms: Some(since),
                turn_id: None,
            })
            .await
        {
            Ok(rows) => json!({
                "since_ms": since,
                "timezone": tz.unwrap_or("UTC"),
                "rows": rows,
            }),
            Err(e) => json!({"error": e.to_string()}),
        },
        None => Value::Null,
    };
    let budgets: Vec<Value> = st
        .invoker
        .budgets()
        .map(|b| {
            b.snapshot()
                .into_iter()
                .map(|(budget, limit, amount, used)| {
                    json!({"budget": budget, "limit": limit, "amount": amount, "used": used})
                })
                .collect()
        })
        .unwrap_or_default();
    let store = match &st.sessions {
        Some(s) => {
            let mut v = serde_json::to_value(s.health().await).unwrap_or(Value::Null);
            v["backend"] = json!(s.backend());
            v
        }
        None => Value::Null,
    };
    ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_secs": st.started.elapsed().as_secs(),
        "cluster": cluster,
        "agents": agents,
        "live_sessions": st.manager.as_ref().map(|m| m.live_sessions()),
        "connectors": env.connectors().states(),
        "approvals": approvals,
        "spend_today": spend,
        "budgets": budgets,
        "store": store,
        "errors": st.errors.as_ref().map(|e| e()).unwrap_or_default(),
    }))
}

/// The running agents (`id`, `provider`, `healthy: true`) and those that did not start
/// (`healthy: false`, `reason`).
fn agents_json(st: &HttpState) -> (Vec<Value>, Vec<Value>) {
    let running = st
        .manager
        .as_ref()
        .map(|m| {
            m.agent_ids()
                .iter()
                .map(|id| {
                    let agent = m.agent(id);
                    let provider = agent
                        .as_ref()
                        .and_then(|a| a.provider().map(str::to_owned));
                    // Healthy until a model call says otherwise: its last call's outcome.
                    let health = agent.as_ref().and_then(|a| a.health());
                    let healthy = health.as_ref().is_none_or(|h| h.last_call_ok);
                    json!({"id": id, "provider": provider, "healthy": healthy, "model_calls": health})
                })
                .collect()
        })
        .unwrap_or_default();
    let skipped = st
        .skipped
        .iter()
        .map(|(id, why)| json!({"id": id, "healthy": false, "reason": why}))
        .collect();
    (running, skipped)
}

async fn api_state(State(st): State<Arc<HttpState>>) -> Response {
    let (agents, skipped) = agents_json(&st);
    let sessions = match &st.sessions {
        Some(s) => s.count().await.ok(),
        None => None,
    };
    ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_secs": st.started.elapsed().as_secs(),
        "agents": agents,
        "agents_not_started": skipped,
        "live_sessions": st.manager.as_ref().map(|m| m.live_sessions()),
        "sessions": sessions,
        "tools": st.invoker.registry().len(),
        "connectors": connectors_json(&st),
    }))
}

/// The connectors running here with their state: this server's own (`http`, `mcp`, up
/// while it answers) and every connector the hub knows (a Discord account connected,
/// reconnecting, or disabled with the reason).
fn connectors_json(st: &HttpState) -> Vec<Value> {
    let mut out = vec![
        json!({"name": "http", "up": true}),
        json!({"name": "mcp", "up": true}),
    ];
    for c in st.invoker.env().connectors().states() {
        let state = match (&c.disabled, c.up) {
            (Some(_), _) => "disabled",
            (None, Some(true)) => "connected",
            (None, Some(false)) if c.reconnects > 0 => "reconnecting",
            (None, Some(false)) => "disconnected",
            (None, None) => "running",
        };
        let mut v = serde_json::to_value(&c).unwrap_or(Value::Null);
        v["state"] = json!(state);
        out.push(v);
    }
    out
}
