//! The control API against a real server on an ephemeral loopback port.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_engine::ToolFilter;
use strata_engine::config::{Access, Config, LlmConfig};
use strata_engine::{Env, ToolError, tool};
use strata_http::{HttpState, Token};
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::manager::AgentManager;
use strata_runtime::{Invoker, Registry};
use strata_store::JsonlAudit;
use strata_test_support::{FakeServer, openai};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FULL: &str = "full-access-token-0123456789";
const SCOPED: &str = "scoped-token-abcdefghijklmnop";
const NO_FILES: &str = "echo-only-token-abcdefghijklm";

/// Echoes its text.
#[tool]
async fn echo(
    /// Text.
    text: String,
) -> Result<String, ToolError> {
    Ok(text)
}

/// Reads a secret (scoped tokens must not see it).
#[tool]
async fn admin_reset() -> Result<&'static str, ToolError> {
    Ok("reset")
}

struct Server {
    url: String,
    dir: tempfile::TempDir,
    _fake: Option<FakeServer>,
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

async fn server() -> Server {
    server_with(Config::default()).await
}

/// [`server`] with `config` (the Invoker's security stages read it).
async fn server_with(config: Config) -> Server {
    // The core file tools serve /api/artifacts.
    let _ = strata_tools::link();
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    write(d, "tmp/report.txt", "quarterly report");
    write(d, "tmp/sub/data.csv", "a,b\n1,2\n");
    write(d, "tmp/secrets.enc", "ciphertext");
    std::fs::write(d.join("tmp/blob.bin"), [0u8, 1, 2, 255]).expect("blob");
    write(d, "agents/main/AGENTS.md", "# Main");
    write(d, "outside.txt", "TOP-SECRET-OUTSIDE");
    #[cfg(unix)]
    std::os::unix::fs::symlink(d.join("outside.txt"), d.join("tmp/link")).expect("symlink");

    let env = Arc::new(Env::new(config, d.to_path_buf(), d.join("data")));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let audit = Arc::new(JsonlAudit::open(&d.join("data/audit.jsonl")).expect("audit"));
    let invoker = Arc::new(Invoker::new(reg, env.clone(), audit.clone()));

    let fake = FakeServer::start().await.expect("fake");
    let mut llm = LlmConfig::new("openai");
    llm.base_url = Some(format!("{}/v1", fake.url));
    llm.api_key = Some("k".into());
    let provider = strata_llm::build(
        &llm,
        None,
        "defaults.llm",
        &strata_llm::AgentContext::bare("main"),
    )
    .expect("p");
    let agent = LlmAgent::new("main", "# Main", provider, "fake", invoker.clone())
        .with_tools(ToolFilter::All);
    let store =
        Arc::new(strata_store::SqliteStore::open(&d.join("data/strata.db")).expect("store"));
    let manager = Arc::new(AgentManager::new(vec![Arc::new(agent)], store.clone(), env));

    let state = Arc::new(HttpState {
        invoker,
        manager: Some(manager),
        default_agent: Some("main".into()),
        skipped: vec![("ghost".into(), "no LLM provider".into())],
        tokens: vec![
            Token::new("ops", FULL, None, Access::Owner),
            Token::new("echoer", NO_FILES, Some(vec!["echo".into()]), Access::Owner),
            Token::new(
                "ci",
                SCOPED,
                Some(vec!["echo".into(), "list_*".into()]),
                Access::Admin,
            ),
        ],
        execute_key: Some("execute-key-123".into()),
        max_body_bytes: 1024,
        read_timeout: Duration::from_secs(1),
        audit: audit.clone(),
        audit_path: d.join("data/audit.jsonl"),
        artifact_roots: vec![d.join("tmp"), d.join("agents")],
        overlay_dir: d.to_path_buf(),
        data_dir: d.join("data"),
        sessions: Some(store),
        started: Instant::now(),
        cluster: None,
        schedules: None,
        metrics: Some(Arc::new(|| "# no metrics here\n".to_owned())),
        errors: Some(Arc::new(|| {
            vec![
                serde_json::json!({"ts": "2026-12-04T00:00:00.000Z", "level": "warn", "target": "t", "message": "a test warning"}),
            ]
        })),
        ui: Default::default(),
        described: Default::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(strata_http::serve(listener, state, std::future::pending()));
    Server {
        url,
        dir,
        _fake: Some(fake),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

async fn get(
    s: &Server,
    path: &str,
    token: Option<&str>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut r = client().get(format!("{}{path}", s.url));
    if let Some(t) = token {
        r = r.header("x-strata-token", t);
    }
    let resp = r.send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, body, headers)
}

async fn post(s: &Server, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let mut r = client()
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.expect("send");
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn auth_envelopes_and_no_store() {
    let s = server().await;
    let (st, body, h) = get(&s, "/api/tools", None).await;
    assert_eq!(st, 401);
    assert_eq!(body["ok"], false);
    assert_eq!(body["code"], "unauthorized");
    assert!(
        body["error"]
            .as_str()
            .expect("e")
            .contains("X-Strata-Token")
    );
    assert_eq!(h["cache-control"], "no-store");
    let (st, body, _) = get(&s, "/api/tools", Some("wrong-token")).await;
    assert_eq!((st, body["code"].as_str()), (401, Some("unauthorized")));
    // Header and bearer both work.
    let (st, _, _) = get(&s, "/api/tools", Some(FULL)).await;
    assert_eq!(st, 200);
    let (st, _) = post(
        &s,
        "/api/invoke",
        Some(FULL),
        r#"{"tool":"echo","args":{"text":"hi"}}"#,
    )
    .await;
    assert_eq!(st, 200);
    // Health needs no token.
    let (st, body, h) = get(&s, "/api/health", None).await;
    assert_eq!(st, 200);
    assert_eq!(body["service"], "strata");
    assert!(body["tool_count"].as_u64().expect("n") >= 2);
    assert_eq!(h["cache-control"], "no-store");
    let r = client()
        .get(format!("{}/health", s.url))
        .send()
        .await
        .expect("health");
    assert_eq!(r.status().as_u16(), 200);
    // Unknown route: 404 in the envelope.
    let (st, body, _) = get(&s, "/api/nope", Some(FULL)).await;
    assert_eq!((st, body["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn scoped_tokens_see_and_call_only_their_tools() {
    let s = server().await;
    let (_, body, _) = get(&s, "/api/tools", Some(SCOPED)).await;
    let names: Vec<&str> = body["value"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("n"))
        .collect();
    assert_eq!(names, ["echo", "list_capabilities", "list_files"]);
    let t = &body["value"]["tools"][0];
    for key in [
        "name",
        "description",
        "input_schema",
        "capabilities",
        "side_effects",
        "hitl",
        "layer",
    ] {
        assert!(t.get(key).is_some(), "{key} missing in {t}");
    }
    let (st, body) = post(&s, "/api/invoke", Some(SCOPED), r#"{"tool":"admin_reset"}"#).await;
    assert_eq!((st, body["code"].as_str()), (403, Some("forbidden")));
    // The Invoker refused it (not the route), so the refusal is in the audit log.
    let (_, ev, _) = get(&s, "/api/events?limit=1", Some(FULL)).await;
    let refused = &ev["value"]["events"][0];
    assert_eq!(refused["tool"], "admin_reset");
    assert_eq!(refused["status"], "denied");
    assert_eq!(refused["principal"], "token:ci");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("denied (layer 2): token:ci may not call `admin_reset`")),
        "{refused}"
    );
    let (st, body) = post(
        &s,
        "/api/invoke",
        Some(SCOPED),
        r#"{"tool":"echo","args":{"text":"ok"},"request_id":"r-42"}"#,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(body["value"]["value"], "ok");
    assert_eq!(body["value"]["request_id"], "r-42");
    // The audit log names the token's principal.
    let (_, ev, _) = get(&s, "/api/events?limit=1", Some(FULL)).await;
    assert_eq!(ev["value"]["events"][0]["principal"], "token:ci");
    assert_eq!(ev["value"]["events"][0]["request_id"], "r-42");
}

#[tokio::test]
async fn invoke_statuses_and_malformed_requests() {
    let s = server().await;
    let cases: &[(&str, &str)] = &[
        ("{not json", "invalid JSON"),
        ("[1,2]", "must be a JSON object"),
        (r#"{"args":{}}"#, "`tool` is missing"),
        (r#"{"tool":""}"#, "`tool` must be a non-empty string"),
        (r#"{"tool":5}"#, "`tool` must be a non-empty string"),
        (
            r#"{"tool":"echo","args":[1]}"#,
            "`args` must be a JSON object",
        ),
        (
            r#"{"tool":"echo","request_id":7}"#,
            "`request_id` must be a string",
        ),
        (r#"{"tool":"echo","arg":{}}"#, "unknown field `arg`"),
    ];
    for (body, want) in cases {
        let (st, v) = post(&s, "/api/invoke", Some(FULL), body).await;
        assert_eq!(st, 400, "{body}");
        assert_eq!(v["code"], "bad_request", "{body}");
        assert!(
            v["error"].as_str().expect("e").contains(want),
            "{body}: {v}"
        );
    }
    // Inner statuses are 200 with the result.
    let (st, v) = post(&s, "/api/invoke", Some(FULL), r#"{"tool":"nope"}"#).await;
    assert_eq!(
        (st, v["value"]["status"].as_str()),
        (200, Some("unknown_tool"))
    );
    let (st, v) = post(
        &s,
        "/api/invoke",
        Some(FULL),
        r#"{"tool":"echo","args":{"text":5}}"#,
    )
    .await;
    assert_eq!(
        (st, v["value"]["status"].as_str()),
        (200, Some("validation_error"))
    );
    assert_eq!(v["value"]["ok"], false);
}

async fn raw(url: &str, request: &[u8], read_after: Option<Duration>) -> String {
    let addr = url.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    sock.write_all(request).await.expect("write");
    if let Some(d) = read_after {
        tokio::time::sleep(d).await;
    }
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut buf))
        .await
        .expect("answer in time")
        .expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn oversized_and_stalled_bodies() {
    let s = server().await;
    // A huge Content-Length is refused before any body byte is sent.
    let req = format!(
        "POST /api/invoke HTTP/1.1\r\nHost: localhost\r\nX-Strata-Token: {FULL}\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n"
    );
    let resp = raw(&s.url, req.as_bytes(), None).await;
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    assert!(resp.contains("payload_too_large"), "{resp}");
    // Chunked bodies over the limit too.
    let big = format!(
        "{{\"tool\":\"echo\",\"args\":{{\"text\":\"{}\"}}}}",
        "x".repeat(5000)
    );
    let (st, v) = post(&s, "/api/invoke", Some(FULL), &big).await;
    assert_eq!((st, v["code"].as_str()), (413, Some("payload_too_large")));
    // A client that promises 100 bytes and sends 10 gets 408 after the read timeout.
    let req = format!(
        "POST /api/invoke HTTP/1.1\r\nHost: localhost\r\nX-Strata-Token: {FULL}\r\nContent-Length: 100\r\n\r\n{{\"tool\":\"e"
    );
    let started = Instant::now();
    let resp = raw(&s.url, req.as_bytes(), None).await;
    assert!(resp.starts_with("HTTP/1.1 408"), "{resp}");
    assert!(resp.contains("request_timeout"));
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn events_after_invocations() {
    let s = server().await;
    for i in 0..3 {
        post(
            &s,
            "/api/invoke",
            Some(FULL),
            &format!(r#"{{"tool":"echo","args":{{"text":"{i}"}},"request_id":"e{i}"}}"#),
        )
        .await;
    }
    let (st, v, _) = get(&s, "/api/events?limit=2", Some(FULL)).await;
    assert_eq!(st, 200);
    let ids: Vec<&str> = v["value"]["events"]
        .as_array()
        .expect("a")
        .iter()
        .map(|e| e["request_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["e1", "e2"], "newest last");
    let (_, v, _) = get(&s, "/api/events", Some(FULL)).await;
    assert_eq!(v["value"]["events"].as_array().expect("a").len(), 3);
    for bad in ["0", "1001", "x"] {
        let (st, _, _) = get(&s, &format!("/api/events?limit={bad}"), Some(FULL)).await;
        assert_eq!(st, 400, "limit={bad}");
    }
}

#[tokio::test]
async fn a_rate_limited_read_says_when_to_try_again() {
    let mut cfg = Config::default();
    cfg.security.rate_limits.tools.insert(
        "read_file".into(),
        strata_engine::config::Limits {
            per_minute: Some(2),
            ..Default::default()
        },
    );
    let s = server_with(cfg).await;
    for _ in 0..2 {
        let (st, v, _) = get(&s, "/api/artifacts/tmp/report.txt", Some(FULL)).await;
        assert_eq!(st, 200, "{v}");
    }
    for _ in 0..3 {
        let (st, v, h) = get(&s, "/api/artifacts/tmp/report.txt", Some(FULL)).await;
        assert_eq!(st, 429, "{v}");
        assert_eq!(v["code"], "rate_limited", "{v}");
        let after: u64 = h
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!((1..=60).contains(&after), "Retry-After {after}");
    }
    // The same through /api/invoke: the result carries it.
    let (st, v) = post(
        &s,
        "/api/invoke",
        Some(FULL),
        r#"{"tool": "read_file", "args": {"path": "tmp/report.txt"}}"#,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["value"]["status"], "rate_limited", "{v}");
    assert!(
        v["value"]["retry_after_secs"]
            .as_u64()
            .is_some_and(|n| (1..=60).contains(&n)),
        "{v}"
    );
    // A call that ran carries no such field.
    let (_, v) = post(
        &s,
        "/api/invoke",
        Some(FULL),
        r#"{"tool": "echo", "args": {"text": "hi"}}"#,
    )
    .await;
    assert!(v["value"].get("retry_after_secs").is_none(), "{v}");
}

#[tokio::test]
async fn artifacts_list_read_and_refuse_escapes() {
    let s = server().await;
    let (st, v, _) = get(&s, "/api/artifacts?under=tmp&glob=**/*.csv", Some(FULL)).await;
    assert_eq!(st, 200, "{v}");
    let paths: Vec<&str> = v["value"]["entries"]
        .as_array()
        .expect("a")
        .iter()
        .map(|e| e["path"].as_str().expect("p"))
        .collect();
    assert_eq!(paths, ["tmp/sub/data.csv"]);
    let (_, v, _) = get(&s, "/api/artifacts", Some(FULL)).await;
    let all = v["value"]["entries"].to_string();
    assert!(all.contains("tmp/report.txt") && all.contains("agents/main/AGENTS.md"));
    assert!(!all.contains("secrets.enc"), "secret files are not listed");

    let (st, v, _) = get(&s, "/api/artifacts/tmp/report.txt", Some(FULL)).await;
    assert_eq!(st, 200);
    assert_eq!(v["value"]["content"], "quarterly report");
    assert_eq!(v["value"]["encoding"], "utf-8");
    // The read was a call of `read_file` through the Invoker, audited as the token.
    let (_, ev, _) = get(&s, "/api/events?limit=1", Some(FULL)).await;
    let rec = &ev["value"]["events"][0];
    assert_eq!(
        (
            rec["tool"].as_str(),
            rec["status"].as_str(),
            rec["principal"].as_str()
        ),
        (Some("read_file"), Some("ok"), Some("token:ops")),
        "{rec}"
    );
    assert_eq!(rec["args"]["path"], "tmp/report.txt");
    // A token whose scope leaves out the file tools reads no artifacts (and is audited).
    let (st, v, _) = get(&s, "/api/artifacts/tmp/report.txt", Some(NO_FILES)).await;
    assert_eq!((st, v["code"].as_str()), (403, Some("forbidden")), "{v}");
    let (_, ev, _) = get(&s, "/api/events?limit=1", Some(FULL)).await;
    assert_eq!(ev["value"]["events"][0]["status"], "denied");
    // Binary files come back as base64.
    let (st, v, _) = get(&s, "/api/artifacts/tmp/blob.bin", Some(FULL)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (
            v["value"]["encoding"].as_str(),
            v["value"]["content"].as_str()
        ),
        (Some("base64"), Some("AAEC/w=="))
    );
    let (_, v, _) = get(&s, "/api/artifacts/tmp/report.txt?max_bytes=9", Some(FULL)).await;
    assert_eq!(
        (
            v["value"]["content"].as_str(),
            v["value"]["truncated"].as_bool()
        ),
        (Some("quarterly"), Some(true))
    );

    let outside = s.dir.path().join("outside.txt");
    for path in [
        "/api/artifacts/tmp/../outside.txt".to_owned(),
        "/api/artifacts/tmp/..%2f..%2foutside.txt".to_owned(),
        "/api/artifacts/..%2foutside.txt".to_owned(),
        format!("/api/artifacts/{}", outside.display()),
        "/api/artifacts/tmp/link".to_owned(),
        "/api/artifacts/tmp/secrets.enc".to_owned(),
        "/api/artifacts?under=..".to_owned(),
    ] {
        let (st, v, _) = get(&s, &path, Some(FULL)).await;
        assert!(st == 403 || st == 404, "{path}: {st} {v}");
        let text = v.to_string();
        assert!(
            !text.contains("ciphertext") && !text.contains("TOP-SECRET-OUTSIDE"),
            "{path}: leaked {v}"
        );
        assert_eq!(v["ok"], false, "{path}");
    }
}

#[tokio::test]
async fn state_openapi_and_routes_agree() {
    let s = server().await;
    let (st, v, _) = get(&s, "/api/state", Some(FULL)).await;
    assert_eq!(st, 200);
    assert_eq!(v["value"]["agents"][0]["id"], "main");
    assert_eq!(v["value"]["agents"][0]["provider"], "openai");
    assert_eq!(v["value"]["agents_not_started"][0]["id"], "ghost");

    let (st, doc, _) = get(&s, "/api/openapi.json", Some(FULL)).await;
    assert_eq!(st, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("item").keys() {
            documented.push((method.clone(), path.clone()));
        }
    }
    documented.sort();
    let mut routes: Vec<(String, String)> = strata_http::ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    routes.sort();
    assert_eq!(documented, routes, "the document lists exactly the routes");
    // Every documented route exists on the router (no 405, no 404 from the fallback — a
    // route may answer 404 for a thing that does not exist).
    for (method, path) in &routes {
        let concrete = path
            .replace("{path}", "tmp/report.txt")
            .replace("{id}", "no-such-request")
            .replace("{decision}", "approve")
            .replace("{agent}", "main")
            .replace("{session}", "no-such-session")
            .replace("{action}", "reset");
        let req = if method == "get" {
            client().get(format!("{}{concrete}", s.url))
        } else {
            client().post(format!("{}{concrete}", s.url)).body("{}")
        };
        let resp = req
            .header("x-strata-token", FULL)
            .send()
            .await
            .expect("send");
        let st = resp.status().as_u16();
        // The event stream never ends: its status is all there is to read.
        let body = if path.ends_with("/stream") {
            String::new()
        } else {
            resp.text().await.unwrap_or_default()
        };
        assert!(
            st != 405 && !(st == 404 && body.contains("no route")),
            "{method} {path} → {st} {body}"
        );
    }
}

#[tokio::test]
async fn chat_runs_a_turn_and_execute_queues_a_task() {
    let s = server().await;
    let fake = s._fake.as_ref().expect("fake");
    fake.script([openai::text("Hello from main")]);
    let (st, v) = post(
        &s,
        "/chat",
        Some(FULL),
        r#"{"message":"hi","session_id":"web-1"}"#,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v,
        json!({"response": "Hello from main", "session_id": "web-1"})
    );
    let (st, v) = post(
        &s,
        "/chat",
        Some(FULL),
        r#"{"message":"hi","agent":"nobody"}"#,
    )
    .await;
    assert_eq!((st, v["code"].as_str()), (404, Some("not_found")));
    let (st, _) = post(&s, "/chat", None, r#"{"message":"hi"}"#).await;
    assert_eq!(st, 401);

    // /execute: its own key, not the control token.
    let payload = r#"{"task_id": 17, "title": "Check disks", "description": "Report usage", "assigned_agent": "main", "priority": "high", "status": "new", "input_data": {"host": "db1"}}"#;
    let r = client()
        .post(format!("{}/execute", s.url))
        .header("x-api-key", "wrong")
        .body(payload)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    let r = client()
        .post(format!("{}/execute", s.url))
        .bearer_auth(FULL)
        .body(payload)
        .send()
        .await
        .expect("send");
    assert_eq!(
        r.status().as_u16(),
        401,
        "a control token is not the execute key"
    );
    fake.script([openai::text("on it")]);
    let r = client()
        .post(format!("{}/execute", s.url))
        .header("x-api-key", "execute-key-123")
        .body(payload)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v, json!({"message": "Task 17 received", "status": "ok"}));
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(s.dir.path().join("data/tasks/task_17_payload.json"))
            .expect("payload"),
    )
    .expect("json");
    assert_eq!(stored["title"], "Check disks");
    assert!(stored["received_at"].as_str().expect("ts").ends_with('Z'));
    let r = client()
        .post(format!("{}/execute", s.url))
        .header("x-api-key", "execute-key-123")
        .body(r#"{"task_id":"../x","assigned_agent":"main"}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 400);
}

#[tokio::test]
async fn bodies_refuse_misspelt_fields_and_name_the_wrong_one() {
    let s = server().await;
    // A misspelt field is an error, not silently a new session.
    let (st, v) = post(
        &s,
        "/chat",
        Some(FULL),
        r#"{"message":"hi","sesion_id":"web-1"}"#,
    )
    .await;
    assert_eq!((st, v["code"].as_str()), (400, Some("bad_request")), "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown field `sesion_id`")),
        "{v}"
    );
    let (st, v) = post(&s, "/chat", Some(FULL), r#"{"message":"hi","agent":7}"#).await;
    assert_eq!(st, 400);
    assert_eq!(v["error"], "field `agent` must be a string");
    let (st, v) = post(&s, "/chat", Some(FULL), r#"{"agent":"main"}"#).await;
    assert_eq!(st, 400);
    assert_eq!(v["error"], "field `message` is missing");
    let (st, v) = post(
        &s,
        "/api/approvals/nope/approve",
        Some(FULL),
        r#"{"reasn":"ok"}"#,
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown field `reasn`")),
        "{v}"
    );
}

/// A request addressed to a host the server does not serve — what a page on another site
/// sends once its name points here (DNS rebinding) — is refused before the token is even
/// looked at; the server's own names pass.
#[tokio::test]
async fn requests_for_other_hosts_are_refused() {
    let s = server().await;
    let port = s.url.rsplit(':').next().expect("port").to_owned();
    for (host, want) in [
        ("evil.example".to_owned(), "403 Forbidden"),
        (format!("evil.example:{port}"), "403 Forbidden"),
        (format!("127.0.0.1:{port}"), "200 OK"),
        (format!("localhost:{port}"), "200 OK"),
    ] {
        let answer = raw(
            &s.url,
            format!("GET /api/health HTTP/1.1\r\nHost: {host}\r\nX-Strata-Token: {FULL}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
            None,
        )
        .await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {want}")),
            "{host}: {answer}"
        );
        if want.starts_with("403") {
            assert!(
                answer.contains("host_not_allowed") && answer.contains("server.allowed_hosts"),
                "{answer}"
            );
        }
    }
}

/// Every answer, public or not, an error or not, carries the headers that keep a browser from
/// caching, sniffing, framing or running it.
#[tokio::test]
async fn every_answer_carries_the_browser_safety_headers() {
    let s = server().await;
    let c = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    for (path, token) in [
        ("/health", None),
        ("/api/tools", Some(FULL)),
        ("/api/tools", None),
        ("/no/such/route", Some(FULL)),
    ] {
        let mut req = c.get(format!("{}{path}", s.url));
        if let Some(t) = token {
            req = req.header("X-Strata-Token", t);
        }
        let r = req.send().await.expect("send");
        let h = r.headers();
        for (name, want) in [
            ("cache-control", "no-store"),
            ("x-content-type-options", "nosniff"),
            ("x-frame-options", "DENY"),
            ("referrer-policy", "no-referrer"),
            (
                "content-security-policy",
                "default-src 'none'; frame-ancestors 'none'",
            ),
        ] {
            assert_eq!(
                h.get(name).and_then(|v| v.to_str().ok()),
                Some(want),
                "{path}: {name}"
            );
        }
    }
}

/// The dashboard's cookie without a browser: it is issued for a valid token only, stands for
/// the token on `/api/*` and nowhere else, and a change made with it needs the sign-in's CSRF
/// token from this origin; signing out ends it. (The browser tests in the launcher drive the
/// same through Chromium.)
#[tokio::test]
async fn a_dashboard_sign_in_is_a_cookie_whose_changes_need_the_csrf_token() {
    let s = server().await;
    // Redirects are looked at, not followed.
    let plain = || {
        reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
    };
    let login = |token: &str, origin: Option<&str>| {
        let mut r = plain()
            .post(format!("{}/ui/login", s.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"));
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        r.send()
    };
    let r = login("not-a-token", None).await.expect("send");
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    let r = login(FULL, Some("http://evil.example"))
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 403, "a login posted by another site");
    assert!(r.headers().get("set-cookie").is_none());
    // No redirects followed: the 303 carries the cookie.
    let r = login(FULL, Some(&s.url)).await.expect("send");
    assert_eq!(r.status().as_u16(), 303);
    let set = r.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Max-Age="),
        "{set}"
    );
    let cookie = set.split(';').next().expect("pair").to_owned();

    let with_cookie = |method: reqwest::Method, path: &str| {
        plain()
            .request(method, format!("{}{path}", s.url))
            .header("cookie", cookie.clone())
    };
    let me: Value = with_cookie(reqwest::Method::GET, "/api/session")
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(me["value"]["principal"], "token:ops", "{me}");
    assert_eq!(me["value"]["token_name"], "ops");
    let csrf = me["value"]["csrf"].as_str().expect("csrf").to_owned();
    // A token caller has no CSRF token: it needs none.
    let (_, v, _) = get(&s, "/api/session", Some(FULL)).await;
    assert_eq!(v["value"]["csrf"], Value::Null);

    let invoke = r#"{"tool":"echo","args":{"text":"via cookie"}}"#;
    let r = with_cookie(reqwest::Method::POST, "/api/invoke")
        .body(invoke)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 403, "no CSRF token");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["code"], "csrf_failed");
    let r = with_cookie(reqwest::Method::POST, "/api/invoke")
        .header("x-strata-csrf", "a-guess")
        .body(invoke)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 403, "a wrong CSRF token");
    let r = with_cookie(reqwest::Method::POST, "/api/invoke")
        .header("x-strata-csrf", &csrf)
        .header("origin", "http://evil.example")
        .body(invoke)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 403, "another origin");
    let r = with_cookie(reqwest::Method::POST, "/api/invoke")
        .header("x-strata-csrf", &csrf)
        .header("origin", &s.url)
        .body(invoke)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["value"]["value"], "via cookie", "{v}");
    // The cookie is the dashboard's: not a key to /chat or /mcp.
    let r = with_cookie(reqwest::Method::POST, "/chat")
        .header("x-strata-csrf", &csrf)
        .body(r#"{"message":"hi"}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);

    // The pages: `/` leads to the dashboard, which needs a sign-in, with its own strict policy.
    let r = plain()
        .get(format!("{}/", s.url))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/ui/");
    let r = plain()
        .get(format!("{}/ui/", s.url))
        .send()
        .await
        .expect("send");
    assert_eq!(r.headers()["location"], "/ui/login");
    let r = with_cookie(reqwest::Method::GET, "/ui/")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .expect("csp")
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert_eq!(r.headers()["referrer-policy"], "same-origin");

    // Signing out ends it.
    let r = with_cookie(reqwest::Method::POST, "/ui/logout")
        .header("x-strata-csrf", &csrf)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 303);
    let r = with_cookie(reqwest::Method::GET, "/api/session")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
}

/// The routes behind the Sessions page: a list filtered by id, a transcript with when each
/// turn was stored, and a reset that the agent honours.
#[tokio::test]
async fn sessions_are_listed_shown_and_reset() {
    let s = server().await;
    let fake = s._fake.as_ref().expect("fake");
    fake.script([openai::text("first answer"), openai::text("second answer")]);
    for sid in ["alpha-1", "beta-2"] {
        let (st, v) = post(
            &s,
            "/chat",
            Some(FULL),
            &format!(r#"{{"message":"hello {sid}","session_id":"{sid}"}}"#),
        )
        .await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, v, _) = get(&s, "/api/sessions", Some(FULL)).await;
    assert_eq!(st, 200, "{v}");
    let ids: Vec<&str> = v["value"]["sessions"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    assert_eq!(ids, ["beta-2", "alpha-1"], "most recent first");
    let (_, v, _) = get(&s, "/api/sessions?q=ALPHA", Some(FULL)).await;
    assert_eq!(v["value"]["sessions"][0]["session_id"], "alpha-1", "{v}");
    assert_eq!(v["value"]["sessions"].as_array().map(Vec::len), Some(1));
    let (_, v, _) = get(&s, "/api/sessions?q=%25", Some(FULL)).await;
    assert_eq!(
        v["value"]["sessions"],
        json!([]),
        "`%` is a character, not a wildcard"
    );

    let (st, v, _) = get(&s, "/api/sessions/main/alpha-1", Some(FULL)).await;
    assert_eq!(st, 200, "{v}");
    let turn = &v["value"]["turns"][0];
    assert!(
        turn["at_ms"].as_i64().expect("at") > 1_700_000_000_000,
        "{v}"
    );
    assert_eq!(turn["messages"][0]["content"], "hello alpha-1");
    assert_eq!(turn["messages"][1]["content"], "first answer");
    let (st, v, _) = get(&s, "/api/sessions/main/nobody", Some(FULL)).await;
    assert_eq!((st, v["code"].as_str()), (404, Some("not_found")));

    let (st, v) = post(&s, "/api/sessions/main/alpha-1/reset", Some(FULL), "{}").await;
    assert_eq!(st, 200, "{v}");
    let (st, _, _) = get(&s, "/api/sessions/main/alpha-1", Some(FULL)).await;
    assert_eq!(st, 404);
    let (_, v, _) = get(&s, "/api/sessions", Some(FULL)).await;
    assert_eq!(v["value"]["sessions"].as_array().map(Vec::len), Some(1));
}
