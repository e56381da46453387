//! Anthropic and Gemini/Vertex clients against fakes on 127.0.0.1, through the agent loop.

use std::sync::Arc;

use serde_json::json;
use strata_engine::ToolFilter;
use strata_engine::agent::{Agent, Message, TurnContext};
use strata_engine::audit::NoAudit;
use strata_engine::config::{Config, LlmConfig};
use strata_engine::llm::{CompletionRequest, LlmError};
use strata_engine::{Env, Principal, ToolError, tool};
use strata_llm::AgentContext;
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::{Invoker, Registry};
use strata_test_support::{FakeResponse, FakeServer, anthropic, gemini, openai};

/// Converts a temperature (fake).
#[tool]
async fn to_fahrenheit(
    /// Degrees Celsius.
    celsius: f64,
) -> Result<f64, ToolError> {
    Ok(celsius * 9.0 / 5.0 + 32.0)
}

/// Always fails.
#[tool]
async fn out_of_order() -> Result<(), ToolError> {
    Err(ToolError::failed("machine broken"))
}

fn env() -> Arc<Env> {
    let d = std::env::temp_dir();
    Arc::new(Env::new(Config::default(), d.clone(), d))
}

fn agent(c: &LlmConfig) -> LlmAgent {
    let provider = strata_llm::build(c, None, "agents.main.llm", &AgentContext::bare("main"))
        .expect("provider");
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let inv = Arc::new(Invoker::new(reg, env(), Arc::new(NoAudit)));
    LlmAgent::new(
        "main",
        "Be brief.",
        provider,
        c.model.clone().unwrap_or_default(),
        inv,
    )
    .with_tools(ToolFilter::List(vec![
        "to_fahrenheit".into(),
        "out_of_order".into(),
    ]))
}

fn turn() -> TurnContext {
    TurnContext::new("main", "s", "c", Principal::Operator, env())
}

fn cfg(provider: &str, url: &str, model: &str, stream: bool) -> LlmConfig {
    let mut c = LlmConfig::new(provider);
    c.base_url = Some(url.to_owned());
    c.api_key = Some("test-key".into());
    c.model = Some(model.to_owned());
    c.retry_base_ms = Some(5);
    c.stream = Some(stream);
    c
}

#[tokio::test]
async fn anthropic_tool_round_trip_with_parallel_and_failing_calls() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        anthropic::tool_uses(
            Some("Let me convert."),
            &[
                ("toolu_1", "to_fahrenheit", json!({"celsius": 100})),
                ("toolu_2", "out_of_order", json!({})),
            ],
        ),
        anthropic::text("212°F; the other tool is broken."),
    ]);
    let c = cfg("anthropic", &fake.url, "claude-test", false);
    let r = agent(&c)
        .handle(turn(), Message::text("100C?"))
        .await
        .expect("turn");
    assert_eq!(r.text, "212°F; the other tool is broken.");
    let reqs = fake.requests();
    let first = &reqs[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.headers["x-api-key"], "test-key");
    assert_eq!(first.headers["anthropic-version"], "2023-06-01");
    assert!(
        first.body["system"]
            .as_str()
            .expect("system")
            .starts_with("Be brief.")
    );
    assert_eq!(first.body["max_tokens"], 4096);
    assert_eq!(
        first.body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "100C?"}]}])
    );
    let tool = first.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "to_fahrenheit")
        .cloned()
        .expect("t");
    assert_eq!(tool["input_schema"]["required"], json!(["celsius"]));
    let msgs = reqs[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(msgs.len(), 3, "user, assistant, user(tool results)");
    assert_eq!(
        msgs[1]["content"][0],
        json!({"type": "text", "text": "Let me convert."})
    );
    assert_eq!(msgs[1]["content"][1]["type"], "tool_use");
    assert_eq!(msgs[1]["content"][1]["id"], "toolu_1");
    assert_eq!(msgs[2]["role"], "user");
    assert_eq!(
        msgs[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "212.0", "is_error": false})
    );
    assert_eq!(msgs[2]["content"][1]["tool_use_id"], "toolu_2");
    assert_eq!(msgs[2]["content"][1]["is_error"], true);
}

#[tokio::test]
async fn anthropic_streaming_assembles_partial_json() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        anthropic::stream_text_then_tool(
            "Converting.",
            "toolu_9",
            "to_fahrenheit",
            r#"{"celsius": 37}"#,
        ),
        anthropic::stream_text("98.6°F"),
    ]);
    let c = cfg("anthropic", &fake.url, "claude-test", true);
    let r = agent(&c)
        .handle(turn(), Message::text("37C?"))
        .await
        .expect("turn");
    assert_eq!(r.text, "98.6°F");
    assert_eq!(
        (r.usage.input_tokens, r.usage.output_tokens),
        (30 + 40, 15 + 3)
    );
    let msgs = fake.requests()[1].body["messages"]
        .as_array()
        .expect("m")
        .clone();
    assert_eq!(msgs[1]["content"][1]["input"], json!({"celsius": 37}));
    assert_eq!(msgs[2]["content"][0]["content"], "98.6");
    assert_eq!(fake.requests()[0].body["stream"], true);
}

#[tokio::test]
async fn anthropic_overload_retried_and_auth_named() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        anthropic::error(529, "overloaded_error", "Overloaded"),
        anthropic::text("ok"),
    ]);
    let c = cfg("anthropic", &fake.url, "claude-test", false);
    assert_eq!(
        agent(&c)
            .handle(turn(), Message::text("hi"))
            .await
            .expect("turn")
            .text,
        "ok"
    );

    fake.script([anthropic::error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )]);
    let p = strata_llm::build(&c, None, "agents.main.llm", &AgentContext::bare("main")).expect("p");
    let err = p
        .complete(&CompletionRequest {
            model: "m".into(),
            ..Default::default()
        })
        .await
        .expect_err("401");
    assert!(
        matches!(&err, LlmError::Auth { config_key, .. } if config_key == "agents.main.llm.api_key"),
        "{err:?}"
    );
    assert!(err.to_string().contains("invalid x-api-key"));
}

#[tokio::test]
async fn gemini_function_calls_get_ids_and_responses_carry_names() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        gemini::function_calls(&[
            ("to_fahrenheit", json!({"celsius": 0})),
            ("to_fahrenheit", json!({"celsius": 10})),
        ]),
        gemini::text("32°F and 50°F"),
    ]);
    let c = cfg("gemini", &fake.url, "google/gemini-test", false);
    let r = agent(&c)
        .handle(turn(), Message::text("0 and 10C?"))
        .await
        .expect("turn");
    assert_eq!(r.text, "32°F and 50°F");
    let reqs = fake.requests();
    assert_eq!(
        reqs[0].path, "/v1beta/models/gemini-test:generateContent",
        "google/ prefix stripped"
    );
    assert_eq!(reqs[0].headers["x-goog-api-key"], "test-key");
    assert!(
        reqs[0].body["systemInstruction"]["parts"][0]["text"]
            .as_str()
            .expect("s")
            .starts_with("Be brief.")
    );
    let decl = &reqs[0].body["tools"][0]["functionDeclarations"];
    let f = decl
        .as_array()
        .expect("decls")
        .iter()
        .find(|d| d["name"] == "to_fahrenheit")
        .cloned()
        .expect("f");
    assert!(
        f["parameters"].get("additionalProperties").is_none(),
        "Gemini subset: {f}"
    );
    let contents = reqs[1].body["contents"]
        .as_array()
        .expect("contents")
        .clone();
    assert_eq!(contents[1]["role"], "model");
    assert_eq!(
        contents[1]["parts"][1]["functionCall"]["args"],
        json!({"celsius": 10})
    );
    assert_eq!(contents[2]["role"], "user");
    assert_eq!(
        contents[2]["parts"][0]["functionResponse"]["name"],
        "to_fahrenheit"
    );
    assert_eq!(
        contents[2]["parts"][0]["functionResponse"]["response"],
        json!({"content": "32.0"})
    );
    assert_eq!(
        contents[2]["parts"][1]["functionResponse"]["response"],
        json!({"content": "50.0"})
    );
}

#[tokio::test]
async fn gemini_streaming_and_errors() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([gemini::stream_text(&["Hel", "lo"])]);
    let c = cfg("gemini", &fake.url, "gemini-test", true);
    let r = agent(&c)
        .handle(turn(), Message::text("hi"))
        .await
        .expect("turn");
    assert_eq!(r.text, "Hello");
    assert_eq!(
        fake.requests()[0].path,
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    );

    fake.script([
        gemini::error(500, "internal"),
        gemini::error(500, "internal"),
        gemini::error(500, "still internal"),
    ]);
    let c = cfg("gemini", &fake.url, "gemini-test", false);
    let err = agent(&c)
        .handle(turn(), Message::text("hi"))
        .await
        .expect_err("fails");
    assert!(
        err.to_string().contains("unavailable after 3 attempts"),
        "{err}"
    );

    fake.script([gemini::error(403, "API key not valid")]);
    let err = agent(&c)
        .handle(turn(), Message::text("hi"))
        .await
        .expect_err("403");
    assert!(err.to_string().contains("agents.main.llm.api_key"), "{err}");
}

#[tokio::test]
async fn vertex_uses_project_region_and_a_bearer_token_from_a_command() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([gemini::text("from vertex"), gemini::text("again")]);
    let mut c = cfg("vertex", &fake.url, "gemini-test", false);
    c.api_key = None;
    c.project = Some("demo-project".into());
    c.region = Some("europe-west4".into());
    c.token_command = Some("echo vertex-token-1".into());
    let a = agent(&c);
    assert_eq!(
        a.handle(turn(), Message::text("hi"))
            .await
            .expect("turn")
            .text,
        "from vertex"
    );
    assert_eq!(
        a.handle(turn(), Message::text("hi"))
            .await
            .expect("turn")
            .text,
        "again"
    );
    let reqs = fake.requests();
    assert_eq!(
        reqs[0].path,
        "/v1/projects/demo-project/locations/europe-west4/publishers/google/models/gemini-test:generateContent"
    );
    assert_eq!(reqs[0].headers["authorization"], "Bearer vertex-token-1");
    assert_eq!(reqs[1].headers["authorization"], "Bearer vertex-token-1");

    let mut bad = c.clone();
    bad.token_command = None;
    let err = strata_llm::build(&bad, None, "agents.main.llm", &AgentContext::bare("main"))
        .err()
        .expect("no token");
    assert!(err.to_string().contains("token_command"), "{err}");

    let mut failing = c.clone();
    failing.token_command = Some("echo nope >&2; exit 3".into());
    let p = strata_llm::build(
        &failing,
        None,
        "agents.main.llm",
        &AgentContext::bare("main"),
    )
    .expect("p");
    let err = p
        .complete(&CompletionRequest {
            model: "m".into(),
            ..Default::default()
        })
        .await
        .expect_err("fails");
    assert!(
        err.to_string().contains("token command exited") && err.to_string().contains("nope"),
        "{err}"
    );
}

#[tokio::test]
async fn check_lists_anthropic_models_and_reads_the_gemini_model_with_the_key() {
    let fake = FakeServer::start().await.expect("fake");
    let p = strata_llm::build(
        &cfg("anthropic", &fake.url, "m", false),
        None,
        "defaults.llm",
        &AgentContext::bare("main"),
    )
    .expect("provider");
    fake.script([strata_test_support::FakeResponse::ok(json!({"data": []}))]);
    let seen = p.check().await.expect("accepted");
    assert!(seen.contains("accepts the key"), "{seen}");
    let r = &fake.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/v1/models"));
    assert_eq!(
        r.headers.get("x-api-key").map(String::as_str),
        Some("test-key")
    );
    assert!(r.headers.contains_key("anthropic-version"));
    fake.script([anthropic::error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )]);
    match p.check().await {
        Err(LlmError::Auth { config_key, .. }) => assert_eq!(config_key, "defaults.llm.api_key"),
        other => panic!("{other:?}"),
    }

    let fake = FakeServer::start().await.expect("fake");
    let p = strata_llm::build(
        &cfg("gemini", &fake.url, "gemini-2.5-flash", false),
        None,
        "defaults.llm",
        &AgentContext::bare("main"),
    )
    .expect("provider");
    fake.script([strata_test_support::FakeResponse::ok(
        json!({"name": "models/gemini-2.5-flash"}),
    )]);
    p.check().await.expect("accepted");
    let r = &fake.requests()[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("GET", "/v1beta/models/gemini-2.5-flash")
    );
    assert_eq!(
        r.headers.get("x-goog-api-key").map(String::as_str),
        Some("test-key")
    );
    fake.script([strata_test_support::FakeResponse::status(
        404,
        json!({"error": {"message": "model not found"}}),
    )]);
    assert!(p.check().await.is_err());
}

/// A turn somebody watches streams from every vendor with `stream` left unset, a tool call
/// in the middle of the stream included: the watcher sees the text as it comes, the tool's
/// start and end, then the answer.
#[tokio::test]
async fn a_watched_turn_streams_with_tool_calls_mid_stream_on_every_vendor() {
    use strata_engine::turns::{TurnEvent, TurnSink};
    let gemini_call = FakeResponse::sse(vec![
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Converting."}]}, "index": 0}]})
            .to_string(),
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "to_fahrenheit", "args": {"celsius": 37}}}]},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 5}})
        .to_string(),
    ]);
    let cases: Vec<(&str, &str, Vec<FakeResponse>)> = vec![
        (
            "openai",
            "gpt-test",
            vec![
                openai::stream_two_tool_calls(
                    ("c1", "to_fahrenheit", r#"{"celsius": 37}"#),
                    ("c2", "to_fahrenheit", r#"{"celsius": 0}"#),
                ),
                openai::stream_text(&["98.6", "°F"]),
            ],
        ),
        (
            "anthropic",
            "claude-test",
            vec![
                anthropic::stream_text_then_tool(
                    "Converting.",
                    "toolu_9",
                    "to_fahrenheit",
                    r#"{"celsius": 37}"#,
                ),
                anthropic::stream_text("98.6°F"),
            ],
        ),
        (
            "gemini",
            "gemini-test",
            vec![gemini_call, gemini::stream_text(&["98.6", "°F"])],
        ),
    ];
    for (vendor, model, script) in cases {
        let fake = FakeServer::start().await.expect("fake");
        fake.script(script);
        let base = if vendor == "openai" {
            format!("{}/v1", fake.url)
        } else {
            fake.url.clone()
        };
        let mut c = cfg(vendor, &base, model, false);
        c.stream = None;
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut t = turn();
        let into = seen.clone();
        t.stream = Some(TurnSink::new(move |e| {
            into.lock().expect("lock").push(e);
        }));
        let r = agent(&c)
            .handle(t, Message::text("37C?"))
            .await
            .expect("turn");
        assert_eq!(r.text, "98.6°F", "{vendor}");
        let seen = seen.lock().expect("lock").clone();
        let starts = seen
            .iter()
            .position(|e| matches!(e, TurnEvent::ToolStart { tool, .. } if tool == "to_fahrenheit"))
            .unwrap_or_else(|| panic!("{vendor}: no tool start in {seen:?}"));
        assert!(
            seen.iter()
                .any(|e| matches!(e, TurnEvent::ToolEnd { status, .. } if status == "ok")),
            "{vendor}: {seen:?}"
        );
        let after: String = seen[starts..]
            .iter()
            .filter_map(|e| match e {
                TurnEvent::Token { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(after, "98.6°F", "{vendor}: {seen:?}");
        // More than one piece: it streamed, it did not arrive whole.
        let pieces = seen
            .iter()
            .filter(|e| matches!(e, TurnEvent::Token { .. }))
            .count();
        assert!(pieces >= 2, "{vendor}: {seen:?}");
        for r in fake.requests() {
            let streamed = r.body["stream"] == true || r.path.contains("streamGenerateContent");
            assert!(streamed, "{vendor} asked without streaming: {}", r.path);
        }
    }
}
