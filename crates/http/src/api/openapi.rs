//! `GET /api/openapi.json`: the OpenAPI 3.1 description of the control API. A test checks it
//! against [`ROUTES`] and the router.

use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::HttpState;

pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new().route("/api/openapi.json", get(openapi_doc))
}

async fn openapi_doc() -> Json<Value> {
    Json(openapi())
}

/// Every route (method, path) the router serves besides `/mcp` and the dashboard's pages
/// (`/`, `/ui/*`: HTML for a browser, described in docs/DASHBOARD.md).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/health"),
    ("get", "/api/health"),
    ("get", "/api/tools"),
    ("post", "/api/invoke"),
    ("get", "/api/events"),
    ("get", "/api/approvals"),
    ("post", "/api/approvals/{id}/{decision}"),
    ("get", "/api/artifacts"),
    ("get", "/api/artifacts/{path}"),
    ("get", "/api/state"),
    ("get", "/api/status"),
    ("get", "/api/cluster"),
    ("get", "/api/schedules"),
    ("get", "/api/goals"),
    ("get", "/api/goals/{id}"),
    ("get", "/api/goals/{id}/events"),
    ("get", "/api/turns"),
    ("get", "/api/turns/{id}"),
    ("get", "/api/usage"),
    ("post", "/api/schedules/{name}/{action}"),
    ("get", "/api/openapi.json"),
    ("get", "/metrics"),
    ("post", "/chat"),
    ("post", "/execute"),
    ("get", "/api/session"),
    ("get", "/api/events/stream"),
    ("get", "/api/audit/verify"),
    ("get", "/api/sessions"),
    ("get", "/api/sessions/{agent}/{session}"),
    ("post", "/api/sessions/{agent}/{session}/{action}"),
    ("get", "/api/agents"),
    ("get", "/api/config"),
];

fn err() -> Value {
    json!({"$ref": "#/components/schemas/Error"})
}

fn resp(desc: &str, schema: Value) -> Value {
    json!({"description": desc, "content": {"application/json": {"schema": schema}}})
}

fn ok_value(value: Value) -> Value {
    json!({"type": "object", "required": ["ok", "value"], "properties": {"ok": {"const": true}, "value": value}})
}

/// The document.
pub fn openapi() -> Value {
    let std_errors = json!({
        "401": resp("Missing or invalid token", err()),
        "400": resp("Malformed request; `error` names the field", err()),
    });
    let with = |mut m: Value, extra: Value| {
        if let (Some(a), Some(b)) = (m.as_object_mut(), extra.as_object()) {
            for (k, v) in b {
                a.insert(k.clone(), v.clone());
            }
        }
        m
    };
    // A rate-limited file-tool call (`security.rate_limits`): when to try again.
    let limited = json!({"description": "Rate limited; `Retry-After` says in how many seconds the call would be let through",
        "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
        "content": {"application/json": {"schema": err()}}});
    let status_path = json!({"get": {"summary": "One screen for an operator (`strata status`): cluster instances, agents and their health, connectors up or down, pending approvals, today's spend by agent (in `defaults.timezone`), budgets, the last warnings and errors",
        "responses": with(json!({"200": resp("Status", ok_value(json!({"type": "object",
            "required": ["version", "uptime_secs", "agents", "connectors", "approvals", "spend_today", "budgets", "errors"]})))}), std_errors.clone())}});
    let usage_path = json!({"get": {"summary": "Model calls' tokens and cost, summed per agent, model, sender, UTC day or turn",
                "parameters": [
                    {"name": "by", "in": "query", "schema": {"enum": ["agent", "model", "sender", "day", "turn", "session"], "default": "agent"}},
                    {"name": "since", "in": "query", "schema": {"anyOf": [
                        {"type": "string", "pattern": strata_runtime::usage::SINCE_SPAN_PATTERN},
                        {"type": "string", "format": "date"},
                        {"type": "string", "format": "date-time"}]},
                        "description": "A span back from now (7d, 24h, 1h30m: one to four parts, units s m h d w), a UTC date (2026-12-01) or an RFC 3339 time"},
                    {"name": "turn", "in": "query", "schema": {"type": "string"}, "description": "only this turn's calls"}],
                "responses": with(json!({"200": resp("`rows`: key, calls, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd (of the priced calls), unpriced_calls", ok_value(json!({"type": "object"}))),
                    "503": resp("No usage kept here, or its store did not answer", err())}), std_errors.clone())}});
    let metrics_path = json!({"get": {"summary": "Metrics in the Prometheus text format (docs/OPERATIONS.md lists them); also without a token on `metrics.bind`",
                "responses": with(json!({"200": {"description": "Prometheus text exposition 0.0.4", "content": {"text/plain": {"schema": {"type": "string"}}}},
                    "404": resp("Metrics are off (metrics.enabled: false)", err())}), std_errors.clone())}});
    let dashboard_paths = json!({
        "/api/session": {"get": {"summary": "Who the caller is: principal, tier, tool scope, whether it may approve; for a dashboard sign-in, its token's name and the CSRF token its changes must carry in X-Strata-CSRF",
            "responses": with(json!({"200": resp("The caller", ok_value(json!({"type": "object", "required": ["principal", "tier", "can_approve"]})))}), std_errors.clone())}},
        "/api/events/stream": {"get": {"summary": "Audit records as this instance writes them, as server-sent events (`event: audit`, one JSON record each; a comment every 15 s)",
            "responses": with(json!({"200": {"description": "text/event-stream", "content": {"text/event-stream": {"schema": sse_event(&["audit"])}}}}), std_errors.clone())}},
        "/api/audit/verify": {"get": {"summary": "The audit log's hash chain checked end to end (as `strata audit verify`)",
            "responses": with(json!({"200": resp("`intact: true` with `records`, `files`, `starts_mid_chain`; or `intact: false` with `file`, `line`, `reason` of the first broken link", ok_value(json!({"type": "object", "required": ["intact"]})))}), std_errors.clone())}},
        "/api/sessions": {"get": {"summary": "Sessions whose agent or session id contains `q`, most recently active first",
            "parameters": [
                {"name": "q", "in": "query", "schema": {"type": "string", "maxLength": 200}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}}],
            "responses": with(json!({"200": resp("`sessions`: agent_id, session_id, turns, created_at, updated_at (Unix seconds)", ok_value(json!({"type": "object"}))),
                "503": resp("No session store here, or it did not answer", err())}), std_errors.clone())}},
        "/api/sessions/{agent}/{session}": {"get": {"summary": "A session's transcript: the summary of what was compacted, then each stored turn's messages with when it was stored",
            "parameters": [
                {"name": "agent", "in": "path", "required": true, "schema": {"type": "string"}},
                {"name": "session", "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": with(json!({"200": resp("`summary`, `turns`: [{at_ms, messages: [{role, content, tool_calls, tool_call_id}]}]", ok_value(json!({"type": "object"}))),
                "404": resp("No such session", err())}), std_errors.clone())}},
        "/api/sessions/{agent}/{session}/{action}": {"post": {"summary": "Reset a session: the agent forgets the conversation (not for viewers)",
            "parameters": [
                {"name": "agent", "in": "path", "required": true, "schema": {"type": "string"}},
                {"name": "session", "in": "path", "required": true, "schema": {"type": "string"}},
                {"name": "action", "in": "path", "required": true, "schema": {"enum": ["reset"]}}],
            "responses": with(json!({"200": resp("Reset", ok_value(json!({"type": "object"}))),
                "403": resp("A viewer token", err()), "404": resp("No such session", err())}), std_errors.clone())}},
        "/api/agents": {"get": {"summary": "Each configured agent (running or why not, provider, the tools it may use, its merged config with secrets masked) and the skills",
            "responses": with(json!({"200": resp("`agents`, `skills`", ok_value(json!({"type": "object"})))}), std_errors.clone())}},
        "/api/config": {"get": {"summary": "Every value of the merged configuration with the layer that set it, secrets masked (owner and admin tokens)",
            "responses": with(json!({"200": resp("`values`: [{key, value, origin}]", ok_value(json!({"type": "object"}))),
                "403": resp("Not an owner or admin token", err())}), std_errors.clone())}},
    });
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {"title": "Strata control API", "version": env!("CARGO_PKG_VERSION")},
        "components": {
            "securitySchemes": {
                "strataToken": {"type": "apiKey", "in": "header", "name": "X-Strata-Token"},
                "bearer": {"type": "http", "scheme": "bearer"},
                "executeKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}
            },
            "schemas": {
                "Error": {"type": "object", "required": ["ok", "code", "error"], "properties": {
                    "ok": {"const": false}, "code": {"type": "string"}, "error": {"type": "string"}}},
                "InvocationResult": {"type": "object",
                    "required": ["status", "value", "error", "elapsed_ms", "tool", "request_id", "ok"],
                    "properties": {
                        "status": {"enum": ["ok", "error", "unknown_tool", "validation_error", "denied", "rate_limited", "approval_denied"]},
                        "value": {}, "error": {"type": ["string", "null"]}, "elapsed_ms": {"type": "number"},
                        "tool": {"type": "string"}, "request_id": {"type": "string"}, "ok": {"type": "boolean"},
                        "retry_after_secs": {"type": "integer", "minimum": 1, "description": "With `rate_limited`: seconds until the call would be let through (refused calls are not counted)"}}},
                "Approval": {"type": "object",
                    "required": ["id", "tool", "principal", "args", "description", "status", "created_at"],
                    "properties": {
                        "id": {"type": "string"}, "agent_id": {"type": ["string", "null"]}, "tool": {"type": "string"},
                        "principal": {"type": "string"}, "args": {"type": "object"}, "description": {"type": "string"},
                        "status": {"enum": ["pending", "approved", "denied", "timeout"]},
                        "approver": {"type": ["string", "null"]}, "reason": {"type": ["string", "null"]},
                        "created_at": {"type": "integer", "description": "Unix seconds"},
                        "decided_at": {"type": ["integer", "null"]}}}
            }
        },
        "security": [{"strataToken": []}, {"bearer": []}],
        "paths": {
            "/health": {"get": {"summary": "Liveness", "security": [],
                "responses": {"200": {"description": "`ok`", "content": {"text/plain": {}}}}}},
            "/api/health": {"get": {"summary": "Service health", "security": [],
                "responses": {"200": resp("Health", json!({"type": "object", "properties": {
                    "ok": {"const": true}, "service": {"const": "strata"}, "version": {"type": "string"},
                    "tool_count": {"type": "integer"}}}))}}},
            "/api/tools": {"get": {"summary": "Tools this token may call, as JSON Schema",
                "responses": with(json!({"200": resp("Tools", ok_value(json!({"type": "object", "properties": {"tools": {"type": "array"}}})))}), std_errors.clone())}},
            "/api/invoke": {"post": {"summary": "Invoke a tool through the pipeline",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["tool"], "additionalProperties": false,
                    "properties": {"tool": {"type": "string", "minLength": 1}, "args": {"type": "object"},
                        "request_id": {"type": ["string", "null"]}}}}}},
                "responses": with(json!({
                    "200": resp("The InvocationResult, whatever the tool's outcome", ok_value(json!({"$ref": "#/components/schemas/InvocationResult"}))),
                    "403": resp("This token may not call the tool", err()),
                    "408": resp("The body stalled", err()),
                    "413": resp("Body over server.max_body_bytes", err())}), std_errors.clone())}},
            "/api/events": {"get": {"summary": "Most recent audit records, newest last",
                "parameters": [{"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 20}}],
                "responses": with(json!({"200": resp("Events", ok_value(json!({"type": "object", "properties": {"events": {"type": "array"}}})))}), std_errors.clone())}},
            "/api/approvals": {"get": {"summary": "Approval requests, newest first",
                "parameters": [
                    {"name": "status", "in": "query", "schema": {"enum": ["pending", "approved", "denied", "timeout", "all"], "default": "pending"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}}],
                "responses": with(json!({"200": resp("Requests", ok_value(json!({"type": "object", "properties": {"approvals": {"type": "array", "items": {"$ref": "#/components/schemas/Approval"}}}})))}), std_errors.clone())}},
            "/api/approvals/{id}/{decision}": {"post": {"summary": "Approve or deny a pending request (approvers only)",
                "parameters": [
                    {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "decision", "in": "path", "required": true, "schema": {"enum": ["approve", "deny"]}}],
                "requestBody": {"required": false, "content": {"application/json": {"schema": {
                    "type": "object", "additionalProperties": false, "properties": {"reason": {"type": "string"}}}}}},
                "responses": with(json!({"200": resp("The decided request", ok_value(json!({"$ref": "#/components/schemas/Approval"}))),
                    "403": resp("Not an approver", err()), "404": resp("No such request", err()),
                    "409": resp("Already decided", err())}), std_errors.clone())}},
            "/api/artifacts": {"get": {"summary": "List files under the artifact roots",
                "parameters": [
                    {"name": "under", "in": "query", "schema": {"type": "string"}},
                    {"name": "glob", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 5000}}],
                "responses": with(json!({"200": resp("Entries", ok_value(json!({"type": "object"}))), "403": resp("Outside the roots", err()),
                    "429": limited.clone()}), std_errors.clone())}},
            "/api/artifacts/{path}": {"get": {"summary": "Read one artifact",
                "parameters": [
                    {"name": "path", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "max_bytes", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1048576}}],
                "responses": with(json!({"200": resp("Content", ok_value(json!({"type": "object"}))),
                    "403": resp("Outside the roots, or a secret file", err()), "404": resp("No such file", err()),
                    "429": limited.clone()}), std_errors.clone())}},
            "/api/state": {"get": {"summary": "Runtime state: agents, sessions, connectors",
                "responses": with(json!({"200": resp("State", ok_value(json!({"type": "object"})))}), std_errors.clone())}},
            "/api/cluster": {"get": {"summary": "The cluster: members, their heartbeats and turns, the queue's depth",
                "responses": with(json!({"200": resp("Status (`enabled: false` and no instances on a lone instance)", ok_value(json!({"type": "object"}))),
                    "503": resp("The database did not answer", err())}), std_errors.clone())}},
            "/api/schedules": {"get": {"summary": "Schedules: when, what, next and last run, failures, paused",
                "responses": with(json!({"200": resp("Schedules", ok_value(json!({"type": "object"}))),
                    "503": resp("No scheduler here, or its store did not answer", err())}), std_errors.clone())}},
            "/api/goals": {"get": {"summary": "Goal workstreams, newest first: id, title, state, owner, participants, channel, open tasks and proposals",
                "responses": with(json!({"200": resp("Goals", ok_value(json!({"type": "object", "required": ["goals"], "properties": {"goals": {"type": "array"}}}))),
                    "503": resp("No goals here, or their store did not answer", err())}), std_errors.clone())}},
            "/api/goals/{id}": {"get": {"summary": "One goal: participants, tasks, proposals with their votes, state",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": with(json!({"200": resp("The goal", ok_value(json!({"type": "object", "required": ["goal"]}))),
                    "404": resp("No such goal", err()),
                    "503": resp("No goals here, or their store did not answer", err())}), std_errors.clone())}},
            "/api/goals/{id}/events": {"get": {"summary": "A goal's newest log entries, oldest first: who changed what, when and why",
                "parameters": [
                    {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}}],
                "responses": with(json!({"200": resp("Events", ok_value(json!({"type": "object", "required": ["events"], "properties": {"events": {"type": "array"}}}))),
                    "404": resp("No such goal", err()),
                    "503": resp("No goals here, or their store did not answer", err())}), std_errors.clone())}},
            "/api/turns": {"get": {"summary": "Journaled turns, newest first: id, agent, session, channel, sender, start and end, outcome (`unfinished` while it runs or when its process died), times resumed, steps recorded (docs/DURABILITY.md)",
                "parameters": [
                    {"name": "unfinished", "in": "query", "schema": {"type": "boolean", "default": false}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}}],
                "responses": with(json!({"200": resp("Turns", ok_value(json!({"type": "object", "required": ["turns"], "properties": {"turns": {"type": "array"}}}))),
                    "503": resp("No state store here, or it did not answer", err())}), std_errors.clone())}},
            "/api/turns/{id}": {"get": {"summary": "One journaled turn and every step it recorded: time, kind (model, tool_started, tool_done, unknown_outcome), status, tokens or time, a short detail",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": with(json!({"200": resp("The turn", ok_value(json!({"type": "object", "required": ["turn", "steps"], "properties": {"turn": {"type": "object"}, "steps": {"type": "array"}}}))),
                    "404": resp("No journal for this turn id", err()),
                    "503": resp("No state store here, or it did not answer", err())}), std_errors.clone())}},
            "/api/usage": usage_path,
            "/api/status": status_path,
            "/metrics": metrics_path,
            "/api/schedules/{name}/{action}": {"post": {"summary": "Run a schedule now, pause or resume it (approvers and owners)",
                "parameters": [
                    {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "action", "in": "path", "required": true, "schema": {"enum": ["run", "pause", "resume"]}}],
                "responses": with(json!({"200": resp("Done", ok_value(json!({"type": "object"}))),
                    "403": resp("Not an approver or owner", err()), "404": resp("No such schedule or action", err())}), std_errors.clone())}},
            "/api/openapi.json": {"get": {"summary": "This document",
                "responses": {"200": resp("OpenAPI 3.1", json!({"type": "object"}))}}},
            "/chat": {"post": {"summary": "Run one agent turn",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["message"], "additionalProperties": false, "properties": {
                        "message": {"type": "string", "minLength": 1}, "agent": {"type": "string"},
                        "session_id": {"type": "string"}, "request_id": {"type": "string", "minLength": 1},
                        "stream": {"type": "boolean", "description": "Answer as server-sent events: token {text}, tool_start {id, tool}, tool_end {id, tool, status, elapsed_ms}, then final (the JSON answer) or error {code, message, status}"}}}}}},
                "responses": with(json!({"200": {"description": "The answer (or, with stream, its events)", "content": {
                    "application/json": {"schema": {"type": "object", "properties": {
                        "response": {"type": "string"}, "session_id": {"type": "string"}}}},
                    "text/event-stream": {"schema": sse_event(&["token", "tool_start", "tool_end", "final", "error"])}}},
                    "404": resp("No running agent by that name", err()),
                    "502": resp("The agent failed", err()), "503": resp("No agent running", err())}), std_errors.clone())}},
            "/execute": {"post": {"summary": "Queue a task for an agent", "security": [{"executeKey": []}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["task_id", "assigned_agent"], "properties": {
                        "task_id": {"anyOf": [
                            {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"},
                            {"type": "integer", "minimum": -crate::body::MAX_SAFE_INTEGER, "maximum": crate::body::MAX_SAFE_INTEGER}]},
                        "title": {"type": ["string", "null"]},
                        "description": {"type": ["string", "null"]}, "assigned_agent": {"type": "string", "minLength": 1},
                        "priority": {}, "status": {}, "input_data": {}}}}}},
                "responses": with(json!({"200": resp("Queued", json!({"type": "object", "properties": {
                    "message": {"type": "string"}, "status": {"const": "ok"}}}))}), std_errors)}}
        }
    });
    if let (Some(paths), Value::Object(more)) = (doc["paths"].as_object_mut(), dashboard_paths) {
        paths.extend(more);
    }
    doc
}

/// One server-sent event of a stream (each is checked against this): its name, one of
/// `names`, and its JSON data as text.
fn sse_event(names: &[&str]) -> Value {
    json!({"type": "object", "required": ["event", "data"], "properties": {
        "event": {"enum": names}, "data": {"type": "string", "description": "A JSON object"},
        "id": {"type": "string"}, "retry": {"type": "integer"}}})
}
