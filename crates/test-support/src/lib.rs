//! # strata-test-support
//!
//! Fakes for the remote services Strata talks to, as real HTTP servers on 127.0.0.1. A
//! [`FakeServer`] answers every request with the next scripted [`FakeResponse`] and records
//! what it received, so a test asserts both what our client sent and what it made of the
//! answer. The [`openai`], [`anthropic`] and [`gemini`] modules build response bodies in each
//! vendor's wire format. [`scripted`] is the in-process provider for agent-loop tests.

// Test support: a failed bind or a broken fixture should stop the test that asked for it.
#![allow(clippy::expect_used)]

/// A script of `fixtures/` (MCP peers written with the official Python SDK, scripted Claude
/// Code CLIs), by file name.
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

pub mod directus;
pub mod discord;
pub mod honcho;
pub mod scripted;

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum FakeResponse {
    /// A JSON body with a status and extra headers.
    Json {
        /// HTTP status.
        status: u16,
        /// Extra headers (e.g. `retry-after`).
        headers: Vec<(String, String)>,
        /// Body.
        body: Value,
    },
    /// A `text/event-stream` body: each item is sent as one SSE event (`event:` line when the
    /// name is given, then `data:`), flushed separately.
    Sse(Vec<(Option<String>, String)>),
    /// As `Sse`, holding the stream open after the first `at` events until `gate` is
    /// notified (a test checks what the client made of a half-written answer).
    SseHeld {
        /// The events.
        events: Vec<(Option<String>, String)>,
        /// How many go before the pause.
        at: usize,
        /// Opens the pause.
        gate: Arc<tokio::sync::Notify>,
    },
    /// Accepts the request and never answers.
    Hang,
}

impl FakeResponse {
    /// 200 with a JSON body.
    pub fn ok(body: Value) -> Self {
        FakeResponse::Json {
            status: 200,
            headers: Vec::new(),
            body,
        }
    }

    /// An error status with a JSON body.
    pub fn status(status: u16, body: Value) -> Self {
        FakeResponse::Json {
            status,
            headers: Vec::new(),
            body,
        }
    }

    /// Adds a header to a JSON response.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        if let FakeResponse::Json { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }

    /// SSE events with data only.
    pub fn sse(data: Vec<String>) -> Self {
        FakeResponse::Sse(data.into_iter().map(|d| (None, d)).collect())
    }

    /// This SSE response, paused after its first `at` events until `gate` is notified.
    pub fn held_at(self, at: usize, gate: Arc<tokio::sync::Notify>) -> Self {
        match self {
            FakeResponse::Sse(events) => FakeResponse::SseHeld { events, at, gate },
            other => other,
        }
    }
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Headers, lower-case names.
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    script: Mutex<VecDeque<FakeResponse>>,
    seen: Mutex<Vec<Recorded>>,
    /// What a planning request (`[PLAN]`, a tainted turn's) is answered with.
    plan: Mutex<Vec<String>>,
}

/// The marker a tainted turn's planning request starts its system prompt with
/// (`strata_runtime::intent::PLAN_MARKER`).
pub const PLAN_MARKER: &str = "[PLAN]";

/// Whether `body` (OpenAI, Anthropic or Gemini) is a planning request.
fn is_plan(body: &Value) -> bool {
    let starts = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .is_some_and(|s| s.starts_with(PLAN_MARKER))
    };
    starts(body.pointer("/messages/0/content"))
        || starts(body.get("system"))
        || starts(body.pointer("/system/0/text"))
        || starts(body.pointer("/systemInstruction/parts/0/text"))
}

/// A scripted HTTP server on 127.0.0.1.
pub struct FakeServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeServer {
    /// Starts a server on an ephemeral loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let inner = Arc::new(Inner::default());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeServer { url, inner, task })
    }

    /// Sets the tools a planning request is answered with (default none). Planning
    /// requests are answered without taking a scripted answer and are not recorded.
    pub fn plan(&self, tools: &[&str]) {
        *self.inner.plan.lock().unwrap_or_else(|p| p.into_inner()) =
            tools.iter().map(|t| (*t).to_owned()).collect();
    }

    /// Queues answers, in order.
    pub fn script(&self, responses: impl IntoIterator<Item = FakeResponse>) {
        let mut q = self.inner.script.lock().unwrap_or_else(|p| p.into_inner());
        q.extend(responses);
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Answers not consumed yet.
    pub fn remaining(&self) -> usize {
        self.inner
            .script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let rec = Recorded {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned()),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    if is_plan(&rec.body) {
        let tools = inner.plan.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let answer = serde_json::json!({ "tools": tools }).to_string();
        let reply = if rec.path.contains("/messages") {
            anthropic::text(&answer)
        } else if rec.path.contains("generateContent") {
            gemini::text(&answer)
        } else {
            openai::text(&answer)
        };
        if let FakeResponse::Json {
            status,
            headers,
            body,
        } = reply
        {
            return json_response(status, &headers, &body);
        }
    }
    inner
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(rec);
    let next = inner
        .script
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop_front();
    match next {
        None => json_response(
            500,
            &[],
            &serde_json::json!({"error": {"message": "fake script exhausted"}}),
        ),
        Some(FakeResponse::Json {
            status,
            headers,
            body,
        }) => json_response(status, &headers, &body),
        Some(FakeResponse::Sse(events)) => sse_response(async_stream(events, None)),
        Some(FakeResponse::SseHeld { events, at, gate }) => {
            sse_response(async_stream(events, Some((at, gate))))
        }
        Some(FakeResponse::Hang) => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            json_response(504, &[], &Value::Null)
        }
    }
}

fn json_response(status: u16, headers: &[(String, String)], body: &Value) -> Response {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(Body::from(body.to_string())).unwrap_or_default()
}

/// A `text/event-stream` answer carrying `stream`.
fn sse_response(
    stream: impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

/// Sends each event as its own chunk, with a short pause, so clients see them split.
fn async_stream(
    events: Vec<(Option<String>, String)>,
    hold: Option<(usize, Arc<tokio::sync::Notify>)>,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    let it = events.into_iter().enumerate();
    futures_util::stream::unfold((it, hold), |(mut it, hold)| async move {
        let (i, (name, data)) = it.next()?;
        if let Some((at, gate)) = &hold
            && i == *at
        {
            gate.notified().await;
        }
        let mut chunk = String::new();
        if let Some(n) = name {
            chunk.push_str(&format!("event: {n}\n"));
        }
        for line in data.lines() {
            chunk.push_str(&format!("data: {line}\n"));
        }
        chunk.push('\n');
        tokio::time::sleep(Duration::from_millis(2)).await;
        Some((Ok(Bytes::from(chunk)), (it, hold)))
    })
}

/// OpenAI chat-completions bodies.
pub mod openai {
    use serde_json::{Value, json};

    use super::FakeResponse;

    /// A final text answer.
    pub fn text(content: &str) -> FakeResponse {
        FakeResponse::ok(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
        }))
    }

    /// Tool calls: `(id, name, arguments)`.
    pub fn tool_calls(calls: &[(&str, &str, Value)]) -> FakeResponse {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
            })
            .collect();
        FakeResponse::ok(json!({
            "id": "chatcmpl-2", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
        }))
    }

    /// A streamed text answer, one chunk per piece, then usage and `[DONE]`.
    pub fn stream_text(pieces: &[&str]) -> FakeResponse {
        let mut ev: Vec<String> = vec![
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
                .to_string(),
        ];
        for p in pieces {
            ev.push(json!({"choices": [{"index": 0, "delta": {"content": p}}]}).to_string());
        }
        ev.push(
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string(),
        );
        ev.push(
            json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}})
                .to_string(),
        );
        ev.push("[DONE]".into());
        FakeResponse::sse(ev)
    }

    /// A streamed tool call whose name and arguments arrive split over several chunks; two
    /// calls interleaved by index.
    pub fn stream_two_tool_calls(a: (&str, &str, &str), b: (&str, &str, &str)) -> FakeResponse {
        let split = |s: &str| -> (String, String) {
            let mid = s.len() / 2;
            let mid = (mid..=s.len())
                .find(|i| s.is_char_boundary(*i))
                .unwrap_or(s.len());
            (s[..mid].to_owned(), s[mid..].to_owned())
        };
        let (a1, a2) = split(a.2);
        let (b1, b2) = split(b.2);
        let ev = vec![
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
                {"index": 0, "id": a.0, "type": "function", "function": {"name": a.1, "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": a1}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 1, "id": b.0, "type": "function", "function": {"name": b.1, "arguments": b1}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": a2}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": b2}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ];
        let mut ev: Vec<String> = ev.into_iter().map(|v| v.to_string()).collect();
        ev.push("[DONE]".into());
        FakeResponse::sse(ev)
    }

    /// An error body as OpenAI sends it.
    pub fn error(status: u16, message: &str) -> FakeResponse {
        FakeResponse::status(
            status,
            json!({"error": {"message": message, "type": "error"}}),
        )
    }
}

/// Anthropic Messages bodies.
pub mod anthropic {
    use serde_json::{Value, json};

    use super::FakeResponse;

    /// A final text answer.
    pub fn text(t: &str) -> FakeResponse {
        FakeResponse::ok(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "fake",
            "content": [{"type": "text", "text": t}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 4}
        }))
    }

    /// Tool uses `(id, name, input)`, with optional leading text.
    pub fn tool_uses(lead: Option<&str>, calls: &[(&str, &str, Value)]) -> FakeResponse {
        let mut content: Vec<Value> = lead
            .map(|t| json!({"type": "text", "text": t}))
            .into_iter()
            .collect();
        content.extend(calls.iter().map(
            |(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}),
        ));
        FakeResponse::ok(json!({
            "id": "msg_2", "type": "message", "role": "assistant", "model": "fake",
            "content": content, "stop_reason": "tool_use",
            "usage": {"input_tokens": 20, "output_tokens": 8}
        }))
    }

    fn ev(name: &str, data: Value) -> (Option<String>, String) {
        (Some(name.to_owned()), data.to_string())
    }

    /// A streamed answer: a text block, then a tool_use block whose input JSON arrives in
    /// two fragments.
    pub fn stream_text_then_tool(
        text: &str,
        id: &str,
        name: &str,
        input_json: &str,
    ) -> FakeResponse {
        let mid = input_json.len() / 2;
        let mid = (mid..=input_json.len())
            .find(|i| input_json.is_char_boundary(*i))
            .unwrap_or(0);
        FakeResponse::Sse(vec![
            ev(
                "message_start",
                json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 30, "output_tokens": 1}}}),
            ),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            ev("ping", json!({"type": "ping"})),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": &input_json[..mid]}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": &input_json[mid..]}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ),
            ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 15}}),
            ),
            ev("message_stop", json!({"type": "message_stop"})),
        ])
    }

    /// A streamed text answer.
    pub fn stream_text(text: &str) -> FakeResponse {
        FakeResponse::Sse(vec![
            ev(
                "message_start",
                json!({"type": "message_start", "message": {"id": "m2", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 40, "output_tokens": 1}}}),
            ),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
            ),
            ev("message_stop", json!({"type": "message_stop"})),
        ])
    }

    /// An error body as Anthropic sends it.
    pub fn error(status: u16, kind: &str, message: &str) -> FakeResponse {
        FakeResponse::status(
            status,
            json!({"type": "error", "error": {"type": kind, "message": message}}),
        )
    }
}

/// Gemini `generateContent` bodies.
pub mod gemini {
    use serde_json::{Value, json};

    use super::FakeResponse;

    fn candidate(parts: Vec<Value>) -> Value {
        json!({
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 5, "totalTokenCount": 14}
        })
    }

    /// A final text answer.
    pub fn text(t: &str) -> FakeResponse {
        FakeResponse::ok(candidate(vec![json!({"text": t})]))
    }

    /// Function calls `(name, args)` (Gemini sends no ids).
    pub fn function_calls(calls: &[(&str, Value)]) -> FakeResponse {
        FakeResponse::ok(candidate(
            calls
                .iter()
                .map(|(name, args)| json!({"functionCall": {"name": name, "args": args}}))
                .collect(),
        ))
    }

    /// A streamed text answer, one chunk per piece.
    pub fn stream_text(pieces: &[&str]) -> FakeResponse {
        FakeResponse::sse(
            pieces
                .iter()
                .map(|p| candidate(vec![json!({"text": p})]).to_string())
                .collect(),
        )
    }

    /// An error body as Google sends it.
    pub fn error(status: u16, message: &str) -> FakeResponse {
        FakeResponse::status(
            status,
            json!({"error": {"code": status, "message": message, "status": "ERROR"}}),
        )
    }
}

/// The variable naming the file skipped tests append to (`cargo xtask test` sets it and ends
/// the run with a summary of what was not tested).
pub const SKIP_LOG_VAR: &str = "STRATA_SKIP_LOG";

/// Says that `what` was not tested here and how to enable it: on stderr (`SKIPPED: …`), and as
/// one line (`<test> | <what> | <enable>`) appended to the file [`SKIP_LOG_VAR`] names.
pub fn skipped(what: &str, enable: &str) {
    eprintln!("SKIPPED: {what}; {enable}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR) {
        use std::io::Write;
        let test = std::thread::current().name().unwrap_or("a test").to_owned();
        let line = format!("{test} | {what} | {enable}\n").replace(['\r'], " ");
        // One write of one line in append mode: lines of parallel tests do not interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// Whether util-linux `script` is here to give a test a pseudo-terminal. Under `CI` its
/// absence fails the test (`.ci/run`'s machine has it); elsewhere the test says SKIPPED.
pub fn pty_available() -> bool {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok()
    {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI needs util-linux `script` for the terminal tests"
    );
    skipped(
        "the terminal tests (no `script` for a pseudo-terminal)",
        "apt-get install util-linux",
    );
    false
}

/// Serves `app` on an ephemeral 127.0.0.1 port until the test's runtime ends; its address.
/// For fakes that need routes and state of their own (else [`FakeServer`]).
pub async fn serve(app: axum::Router) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = l.local_addr().expect("local address");
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    addr
}

/// Whether `python3` can import `module` (interop tests drive our code with real Python
/// libraries). Under `CI` its absence fails the test (`.ci/run` pip-installs
/// `pip_package`); elsewhere the test says SKIPPED and passes.
pub fn python_has(module: &str, pip_package: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have Python's {pip_package}: python3 -m pip install {pip_package}"
        );
        skipped(
            &format!("the interop tests needing Python's {module}"),
            &format!("python3 -m pip install {pip_package}"),
        );
    }
    ok
}

/// The path of `program` found on `PATH` (a tool the tests drive, installed by `.ci/run`
/// with `install`). Under `CI` its absence fails the test; elsewhere the test says SKIPPED
/// with `install` and passes.
pub fn program_on_path(program: &str, install: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have `{program}`: {install}"
        );
        skipped(
            &format!("the tests needing `{program}` (not on PATH)"),
            install,
        );
    }
    found
}

/// The PostgreSQL server the storage tests use: `STRATA_TEST_POSTGRES_URL`, default
/// `postgres://postgres@127.0.0.1:5432/test` (the project's machines and CI run one with
/// trust auth). `None` when nothing answers there — the test says SKIPPED and passes —
/// except under `CI`, where it fails (`.ci/run` starts the server).
pub fn postgres_url() -> Option<String> {
    service_url(
        "STRATA_TEST_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
        "PostgreSQL",
        ".ci/run starts it with pg_ctlcluster",
        "start one (trust auth, database `test`) or set STRATA_TEST_POSTGRES_URL",
    )
}

/// The NATS server (with JetStream) the cluster tests use: `STRATA_TEST_NATS_URL`, default
/// `nats://127.0.0.1:4222`. `None` when nothing answers — the test says SKIPPED and passes —
/// except under `CI`, where it fails (`.ci/run` starts nats-server).
pub fn nats_url() -> Option<String> {
    service_url(
        "STRATA_TEST_NATS_URL",
        "nats://127.0.0.1:4222",
        "NATS with JetStream",
        ".ci/run starts nats-server -js",
        "start `nats-server -js -a 127.0.0.1 -p 4222` or set STRATA_TEST_NATS_URL",
    )
}

/// `var` or `default`, when something answers at its host and port; otherwise SKIPPED with
/// `how` outside CI, and a failure under `CI` (where `ci` says what provides it).
fn service_url(var: &str, default: &str, what: &str, ci: &str, how: &str) -> Option<String> {
    let url = std::env::var(var).unwrap_or_else(|_| default.into());
    let addr = url_host_port(&url);
    let answers = std::net::ToSocketAddrs::to_socket_addrs(&addr)
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| {
            std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)).is_ok()
        });
    if !answers {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs {what} at {addr} ({ci})"
        );
        skipped(&format!("the tests needing {what} (none at {addr})"), how);
        return None;
    }
    Some(url)
}

/// An OpenAI-compatible chat-completions server on 127.0.0.1 that answers every request
/// with `echo: <the last user message>`, after `delay` (and half a second more when the
/// message says `slow`): a provider whose answers can be matched to the messages that asked
/// for them, however many instances share it. A message that says `fail once` is refused
/// (400) the first time it is asked, answered after: a turn that fails and then succeeds when
/// it is tried again. Its base URL (`http://127.0.0.1:PORT`; the API is under `/v1`).
pub async fn echo_llm(delay: std::time::Duration) -> String {
    use axum::Json;
    use axum::routing::post;
    use serde_json::{Value, json};
    let refused: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<Value>| {
            let refused = refused.clone();
            async move {
                let last = body["messages"]
                    .as_array()
                    .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                let slow = if last.contains("slow") {
                    Duration::from_millis(500)
                } else {
                    Duration::ZERO
                };
                tokio::time::sleep(delay + slow).await;
                if last.contains("fail once")
                    && refused
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(last.clone())
                {
                    return (
                        StatusCode::BAD_REQUEST,
                        Json(json!({"error": {
                            "message": "refused once, as asked", "type": "invalid_request_error"
                        }})),
                    );
                }
                (
                    StatusCode::OK,
                    Json(json!({
                        "id": "chatcmpl-echo", "object": "chat.completion", "model": "fake",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("echo: {last}")}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
                    })),
                )
            }
        }),
    );
    format!("http://{}", serve(app).await)
}

/// An OpenAI-compatible chat-completions server on 127.0.0.1 whose every answer `answer`
/// makes from the request body (an [`openai`] response: `openai::text`, `openai::tool_calls`),
/// after `delay`: a provider many concurrent turns can share, each answered from its own
/// conversation rather than from one queue. Its base URL (the API is under `/v1`).
pub async fn llm_fn(
    delay: std::time::Duration,
    answer: impl Fn(&serde_json::Value) -> FakeResponse + Send + Sync + 'static,
) -> String {
    use axum::Json;
    use axum::routing::post;
    let answer = Arc::new(answer);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<serde_json::Value>| {
            let answer = answer.clone();
            async move {
                tokio::time::sleep(delay).await;
                match answer(&body) {
                    FakeResponse::Json {
                        status,
                        headers,
                        body,
                    } => json_response(status, &headers, &body),
                    _ => json_response(
                        500,
                        &[],
                        &serde_json::json!({"error": {"message": "llm_fn answers JSON only"}}),
                    ),
                }
            }
        }),
    );
    format!("http://{}", serve(app).await)
}

/// What [`effect_sink`] received: each request's method, path and `Idempotency-Key` header.
pub type Landed = Arc<Mutex<Vec<(String, String, Option<String>)>>>;

/// A server on 127.0.0.1 that answers every request `200 {"ok": true}` and keeps each one's
/// method, path and `Idempotency-Key` header: where effects land, counted. Its base URL and
/// what it received.
pub async fn effect_sink() -> (String, Landed) {
    let seen: Landed = Arc::default();
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
        let kept = kept.clone();
        async move {
            let key = headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            kept.lock().unwrap_or_else(|p| p.into_inner()).push((
                method.to_string(),
                uri.path().to_owned(),
                key,
            ));
            json_response(200, &[], &serde_json::json!({"ok": true}))
        }
    });
    (format!("http://{}", serve(app).await), seen)
}

/// An OpenAI-compatible server on 127.0.0.1 with a context window of `limit` tokens, as a
/// small local model has: a request whose messages and tools (four bytes a token, about what
/// real tokenizers make of English and JSON) plus its `max_tokens` exceed it is refused with
/// OpenAI's 400 `context_length_exceeded`; one that fits is answered
/// `fits: <tokens> tokens, <n> tools`. Its base URL, and every request body it received.
pub async fn context_limited_llm(
    limit: usize,
) -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    use axum::Json;
    use axum::http::StatusCode;
    use axum::routing::post;
    use serde_json::{Value, json};
    let seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = std::sync::Arc::default();
    let seen2 = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<Value>| {
            let seen = seen2.clone();
            async move {
                let tokens = (body["messages"].to_string().len() + body["tools"].to_string().len())
                    .div_ceil(4);
                let answer = body["max_tokens"].as_u64().unwrap_or(0) as usize;
                let tools = body["tools"].as_array().map_or(0, Vec::len);
                seen.lock().unwrap_or_else(|p| p.into_inner()).push(body);
                if tokens + answer > limit {
                    return (
                        StatusCode::BAD_REQUEST,
                        Json(json!({"error": {
                            "message": format!("This model's maximum context length is {limit} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."),
                            "type": "invalid_request_error", "param": "messages",
                            "code": "context_length_exceeded"
                        }})),
                    );
                }
                (
                    StatusCode::OK,
                    Json(json!({
                        "id": "chatcmpl-fit", "object": "chat.completion", "model": "small",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("fits: {tokens} tokens, {tools} tools")}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": tokens, "completion_tokens": 6, "total_tokens": tokens + 6}
                    })),
                )
            }
        }),
    );
    (format!("http://{}", serve(app).await), seen)
}

/// A schema name no other test run uses (`t_<random>`).
pub fn unique_schema() -> String {
    format!("t_{}", uuid::Uuid::new_v4().simple())
}

/// A TCP proxy on 127.0.0.1 in front of `target` that can be cut (every connection dropped,
/// new ones closed at once) and restored: a database or broker going away and coming back.
pub struct TcpProxy {
    /// Where clients connect.
    pub addr: std::net::SocketAddr,
    state: std::sync::Arc<std::sync::Mutex<ProxyState>>,
}

struct ProxyState {
    up: bool,
    conns: Vec<tokio::task::JoinHandle<()>>,
}

impl TcpProxy {
    /// Starts forwarding to `target` (`host:port`).
    pub async fn start(target: &str) -> TcpProxy {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = l.local_addr().expect("local address");
        let state = std::sync::Arc::new(std::sync::Mutex::new(ProxyState {
            up: true,
            conns: Vec::new(),
        }));
        let (state2, target) = (state.clone(), target.to_owned());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = l.accept().await {
                // Checked and registered under one lock, so a connection accepted as `cut`
                // runs is either refused here or dropped by it — never left forwarding.
                let mut st = state2.lock().unwrap_or_else(|p| p.into_inner());
                if !st.up {
                    continue;
                }
                let target = target.clone();
                st.conns.push(tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                }));
            }
        });
        TcpProxy { addr, state }
    }

    /// Drops every connection and refuses new ones until [`TcpProxy::restore`]. Returns once
    /// every forwarding task has ended: nothing sent after this reaches the target (an abort
    /// alone lands at the task's next await, and a byte copied before it would still arrive).
    pub async fn cut(&self) {
        let conns = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.up = false;
            std::mem::take(&mut st.conns)
        };
        for c in conns {
            c.abort();
            let _ = c.await;
        }
    }

    /// Forwards again.
    pub fn restore(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).up = true;
    }
}

/// `host:port` of a URL such as `postgres://user@host:port/db` or `nats://host:port`.
pub fn url_host_port(url: &str) -> String {
    let url = url.split_once("://").map_or(url, |(_, r)| r);
    url.split_once('@')
        .map_or(url, |(_, r)| r)
        .split(['/', '?'])
        .next()
        .unwrap_or("127.0.0.1:5432")
        .to_owned()
}
