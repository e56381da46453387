//! The OpenAI-compatible client against a fake server on 127.0.0.1, through the real agent
//! loop: what we send (tool schemas, results threaded back by id) and what the agent returns.

use std::sync::Arc;

use serde_json::{Value, json};
use strata_engine::ToolFilter;
use strata_engine::agent::{Agent, Message, TurnContext};
use strata_engine::audit::NoAudit;
use strata_engine::config::{Config, LlmConfig};
use strata_engine::llm::{LlmError, StreamEvent};
use strata_engine::{Env, Principal, ToolError, tool};
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::{Invoker, Registry};
use strata_test_support::{FakeResponse, FakeServer, openai};

/// Looks up the weather (fake).
#[tool]
async fn weather(
    /// City name.
    city: String,
) -> Result<String, ToolError> {
    Ok(format!("sunny in {city}"))
}

/// Always fails.
#[tool]
async fn flaky() -> Result<(), ToolError> {
    Err(ToolError::failed("backend down"))
}

fn cfg(url: &str, stream: bool) -> LlmConfig {
    let mut c = LlmConfig::new("openai");
    c.base_url = Some(format!("{url}/v1"));
    c.api_key = Some("test-key".into());
    c.model = Some("fake-model".into());
    c.retry_base_ms = Some(5);
    c.stream = Some(stream);
    c
}

fn env() -> Arc<Env> {
    let d = std::env::temp_dir();
    Arc::new(Env::new(Config::default(), d.clone(), d))
}

fn agent(c: &LlmConfig) -> LlmAgent {
    let provider = strata_llm::build(
        c,
        None,
        "defaults.llm",
        &strata_llm::AgentContext::bare("main"),
    )
    .expect("provider");
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let inv = Arc::new(Invoker::new(reg, env(), Arc::new(NoAudit)));
    LlmAgent::new("main", "Be brief.", provider, "fake-model", inv)
        .with_tools(ToolFilter::List(vec!["weather".into(), "flaky".into()]))
}

fn turn() -> TurnContext {
    TurnContext::new("main", "s", "c", Principal::Operator, env())
}

#[tokio::test]
async fn plain_answer_and_the_request_we_send() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::text("Hello!")]);
    let r = agent(&cfg(&fake.url, false))
        .handle(turn(), Message::text("hi"))
        .await
        .expect("turn");
    assert_eq!(r.text, "Hello!");
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (11, 3));
    let req = &fake.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.headers["authorization"], "Bearer test-key");
    assert_eq!(req.body["model"], "fake-model");
    assert_eq!(req.body["messages"][0]["role"], "system");
    assert!(
        req.body["messages"][0]["content"]
            .as_str()
            .expect("s")
            .starts_with("Be brief.")
    );
    assert_eq!(
        req.body["messages"][1],
        json!({"role": "user", "content": "hi"})
    );
    let tools = req.body["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 2);
    let w = tools
        .iter()
        .find(|t| t["function"]["name"] == "weather")
        .expect("weather");
    assert_eq!(w["type"], "function");
    assert_eq!(w["function"]["description"], "Looks up the weather (fake).");
    assert_eq!(w["function"]["parameters"]["required"], json!(["city"]));
    assert_eq!(req.body["tool_choice"], "auto");
    assert!(req.body.get("stream").is_none());
}

#[tokio::test]
async fn tool_calls_parallel_and_failing_thread_back_by_id() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        openai::tool_calls(&[
            ("call_a", "weather", json!({"city": "Oslo"})),
            ("call_b", "weather", json!({"city": "Lima"})),
            ("call_c", "flaky", json!({})),
        ]),
        openai::text("Oslo and Lima are sunny; the other thing failed."),
    ]);
    let r = agent(&cfg(&fake.url, false))
        .handle(turn(), Message::text("weather?"))
        .await
        .expect("turn");
    assert_eq!(r.text, "Oslo and Lima are sunny; the other thing failed.");
    let second = &fake.requests()[1].body["messages"];
    let msgs = second.as_array().expect("messages");
    let n = msgs.len();
    let assistant = &msgs[n - 4];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], Value::Null);
    assert_eq!(assistant["tool_calls"][1]["id"], "call_b");
    assert_eq!(
        assistant["tool_calls"][1]["function"]["arguments"],
        r#"{"city":"Lima"}"#
    );
    assert_eq!(
        msgs[n - 3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "sunny in Oslo"})
    );
    assert_eq!(
        msgs[n - 2],
        json!({"role": "tool", "tool_call_id": "call_b", "content": "sunny in Lima"})
    );
    assert_eq!(msgs[n - 1]["tool_call_id"], "call_c");
    assert_eq!(msgs[n - 1]["content"], "error (error): backend down");
}

#[tokio::test]
async fn streaming_assembles_tool_call_deltas_split_across_chunks() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        openai::stream_two_tool_calls(
            ("call_1", "weather", r#"{"city": "Reykjavík"}"#),
            ("call_2", "weather", r#"{"city": "Quito"}"#),
        ),
        openai::stream_text(&["All ", "sunny", "."]),
    ]);
    let r = agent(&cfg(&fake.url, true))
        .handle(turn(), Message::text("go"))
        .await
        .expect("turn");
    assert_eq!(r.text, "All sunny.");
    let reqs = fake.requests();
    assert_eq!(reqs[0].body["stream"], true);
    assert_eq!(reqs[0].body["stream_options"]["include_usage"], true);
    let msgs = reqs[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    let n = msgs.len();
    assert_eq!(msgs[n - 2]["content"], "sunny in Reykjavík");
    assert_eq!(msgs[n - 1]["content"], "sunny in Quito");
    assert_eq!(msgs[n - 1]["tool_call_id"], "call_2");

    // The streaming API also reports deltas as they come.
    fake.script([openai::stream_text(&["a", "b"])]);
    let provider = strata_llm::build(
        &cfg(&fake.url, true),
        None,
        "x",
        &strata_llm::AgentContext::bare("main"),
    )
    .expect("p");
    let mut seen = Vec::new();
    let req = strata_engine::llm::CompletionRequest {
        model: "m".into(),
        ..Default::default()
    };
    let resp = provider
        .complete_streaming(&req, &mut |e| seen.push(e))
        .await
        .expect("stream");
    assert_eq!(resp.message.content, "ab");
    assert_eq!(
        seen,
        vec![
            StreamEvent::TextDelta("a".into()),
            StreamEvent::TextDelta("b".into())
        ]
    );
    assert_eq!(resp.usage.input_tokens, 7);
}

#[tokio::test]
async fn retries_429_honouring_retry_after_then_succeeds() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        openai::error(429, "slow down").with_header("retry-after", "0"),
        openai::text("finally"),
    ]);
    let r = agent(&cfg(&fake.url, false))
        .handle(turn(), Message::text("hi"))
        .await
        .expect("turn");
    assert_eq!(r.text, "finally");
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn gives_up_after_three_server_errors() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([
        openai::error(500, "boom 1"),
        openai::error(502, "boom 2"),
        openai::error(503, "boom 3"),
        openai::text("never reached"),
    ]);
    let err = agent(&cfg(&fake.url, false))
        .handle(turn(), Message::text("hi"))
        .await
        .expect_err("fails");
    let msg = err.to_string();
    assert!(
        msg.contains("openai: unavailable after 3 attempts") && msg.contains("boom 3"),
        "{msg}"
    );
    assert_eq!(fake.requests().len(), 3);
    assert_eq!(fake.remaining(), 1);
}

#[tokio::test]
async fn unauthorized_names_the_provider_and_the_key_and_is_not_retried() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([openai::error(401, "Incorrect API key provided")]);
    let provider = strata_llm::build(
        &cfg(&fake.url, false),
        None,
        "agents.main.llm",
        &strata_llm::AgentContext::bare("main"),
    )
    .expect("p");
    let req = strata_engine::llm::CompletionRequest {
        model: "m".into(),
        ..Default::default()
    };
    let err = provider.complete(&req).await.expect_err("401");
    match &err {
        LlmError::Auth {
            provider,
            config_key,
            detail,
        } => {
            assert_eq!(provider, "openai");
            assert_eq!(config_key, "agents.main.llm.api_key");
            assert!(detail.contains("Incorrect API key"), "{detail}");
        }
        other => panic!("wrong error: {other:?}"),
    }
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    // A port that was free a moment ago: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let provider = strata_llm::build(
        &cfg(&format!("http://127.0.0.1:{port}"), false),
        None,
        "x",
        &strata_llm::AgentContext::bare("main"),
    )
    .expect("p");
    let req = strata_engine::llm::CompletionRequest {
        model: "m".into(),
        ..Default::default()
    };
    let err = provider.complete(&req).await.expect_err("refused");
    assert!(
        matches!(err, LlmError::Unavailable { attempts: 3, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_hanging_server_hits_the_timeout() {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([FakeResponse::Hang]);
    let mut c = cfg(&fake.url, false);
    c.timeout_secs = Some(1);
    c.max_attempts = Some(1);
    let provider =
        strata_llm::build(&c, None, "x", &strata_llm::AgentContext::bare("main")).expect("p");
    let req = strata_engine::llm::CompletionRequest {
        model: "m".into(),
        ..Default::default()
    };
    let err = provider.complete(&req).await.expect_err("timeout");
    assert!(err.to_string().contains("timed out"), "{err}");
}
