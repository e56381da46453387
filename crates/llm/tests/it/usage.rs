//! Token usage as each vendor reports it on the wire (values taken from the response, none
//! computed), and each model call of a turn stored with its agent, session, sender, turn and
//! cost.

use std::sync::Arc;
use strata_runtime::EnvExt;

use serde_json::json;
use strata_engine::agent::{Agent, Message, TurnContext};
use strata_engine::audit::NoAudit;
use strata_engine::config::{Config, LlmConfig};
use strata_engine::llm::{CompletionRequest, Usage};
use strata_engine::{Env, Principal};
use strata_llm::AgentContext;
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::usage::{InMemoryUsage, Pricing, UsageMeter};
use strata_runtime::{Invoker, Registry};
use strata_test_support::{FakeResponse, FakeServer};

fn cfg(provider: &str, url: &str, model: &str) -> LlmConfig {
    let mut c = LlmConfig::new(provider);
    c.base_url = Some(url.to_owned());
    c.api_key = Some("test-key".into());
    c.model = Some(model.to_owned());
    c.retry_base_ms = Some(5);
    c
}

async fn usage_of(provider: &str, model: &str, body: serde_json::Value) -> Usage {
    let fake = FakeServer::start().await.expect("fake");
    fake.script([FakeResponse::ok(body)]);
    let p = strata_llm::build(
        &cfg(provider, &fake.url, model),
        None,
        "defaults.llm",
        &AgentContext::bare("main"),
    )
    .expect("provider");
    let req = CompletionRequest {
        model: model.into(),
        messages: vec![strata_engine::llm::ChatMessage::text(
            strata_engine::llm::Role::User,
            "hi",
        )],
        ..Default::default()
    };
    p.complete(&req).await.expect("answer").usage
}

/// `main` on gpt-4o-mini at the fake server `url`, its calls priced by the shipped table and
/// kept in memory: the environment, the kept calls and the agent.
fn metered_agent(url: &str) -> (Arc<Env>, Arc<InMemoryUsage>, LlmAgent) {
    let d = std::env::temp_dir();
    let env = Arc::new(Env::new(Config::default(), d.clone(), d));
    let stored = Arc::new(InMemoryUsage::default());
    env.attach_usage(Arc::new(UsageMeter::new(
        stored.clone(),
        Pricing::from_config(&Config::default()),
    )));
    let provider = strata_llm::build(
        &cfg("openai", url, "gpt-4o-mini"),
        None,
        "defaults.llm",
        &AgentContext::bare("main"),
    )
    .expect("provider");
    let inv = Arc::new(Invoker::new(
        Arc::new(Registry::empty()),
        env.clone(),
        Arc::new(NoAudit),
    ));
    let agent = LlmAgent::new("main", "Be brief.", provider, "gpt-4o-mini", inv);
    (env, stored, agent)
}

fn tokens(u: &Usage) -> (u64, u64, u64, u64) {
    (
        u.input_tokens,
        u.output_tokens,
        u.cached_input_tokens,
        u.cache_write_tokens,
    )
}

#[tokio::test]
async fn openai_usage_counts_cached_prompt_tokens_from_prompt_tokens_details() {
    let u = usage_of(
        "openai",
        "gpt-4o",
        json!({
            "id": "chatcmpl-9", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                      "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0}}
        }),
    )
    .await;
    assert_eq!(tokens(&u), (2006, 300, 1920, 0));
    assert_eq!(u.cost_usd, None);
}

#[tokio::test]
async fn anthropic_usage_adds_the_cache_reads_and_writes_it_reports_apart() {
    let u = usage_of(
        "anthropic",
        "claude-sonnet-4-20250514",
        json!({
            "id": "msg_9", "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514",
            "content": [{"type": "text", "text": "Hi"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 50, "output_tokens": 120,
                      "cache_creation_input_tokens": 248, "cache_read_input_tokens": 1800}
        }),
    )
    .await;
    assert_eq!(tokens(&u), (50 + 248 + 1800, 120, 1800, 248));
}

#[tokio::test]
async fn gemini_usage_metadata_counts_cached_content_and_thinking_as_output() {
    let u = usage_of(
        "gemini",
        "gemini-2.5-flash",
        json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 1500, "candidatesTokenCount": 40,
                              "thoughtsTokenCount": 210, "cachedContentTokenCount": 1024,
                              "totalTokenCount": 1750}
        }),
    )
    .await;
    assert_eq!(tokens(&u), (1500, 250, 1024, 0));
}

/// Two model calls of one turn (a tool call, then the answer): each stored with the turn's
/// agent, session, sender and id, priced by the shipped table, and summed into the reply.
#[tokio::test]
async fn each_model_call_of_a_turn_is_stored_with_its_turn_and_cost() {
    let fake = FakeServer::start().await.expect("fake");
    let body = |content: serde_json::Value, finish: &str, prompt: u64| {
        json!({
            "id": "c", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": content, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 100_000,
                      "prompt_tokens_details": {"cached_tokens": 0}}
        })
    };
    fake.script([
        FakeResponse::ok(body(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "nothing_here", "arguments": "{}"}}]}),
            "tool_calls",
            1_000_000,
        )),
        FakeResponse::ok(body(
            json!({"role": "assistant", "content": "Done."}),
            "stop",
            2_000_000,
        )),
    ]);
    let (env, stored, agent) = metered_agent(&fake.url);
    let turn = TurnContext::new(
        "main",
        "s-1",
        "c",
        Principal::Person { id: "boss".into() },
        env.clone(),
    );
    let turn_id = turn.turn_id.clone();
    let reply = agent.handle(turn, Message::text("go")).await.expect("turn");
    assert_eq!(reply.text, "Done.");
    assert_eq!(tokens(&reply.usage), (3_000_000, 200_000, 0, 0));
    let calls = stored.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    for c in &calls {
        assert_eq!(
            (
                c.agent.as_str(),
                c.session.as_str(),
                c.sender.as_str(),
                c.turn_id.as_str(),
                c.provider.as_str(),
                c.model.as_str(),
                c.purpose.as_str()
            ),
            (
                "main",
                "s-1",
                "person:boss",
                turn_id.as_str(),
                "openai",
                "gpt-4o-mini",
                "turn"
            )
        );
    }
    // Where the prompt tokens went: shared out of the vendor's figure, adding up to it; the
    // second call carries the first's tool result, the first none; no memory here.
    for c in &calls {
        let parts = c.input_parts;
        assert_eq!(
            parts.as_array().iter().sum::<u64>(),
            c.usage.input_tokens,
            "{parts:?}"
        );
        assert_eq!(parts.memory, 0);
        assert!(parts.system > 0 && parts.history > 0, "{parts:?}");
    }
    assert_eq!(calls[0].input_parts.tool_outputs, 0);
    assert!(
        calls[1].input_parts.tool_outputs > 0,
        "{:?}",
        calls[1].input_parts
    );
    // gpt-4o-mini: $0.15 per million in, $0.60 out.
    let cost = |i: usize| calls[i].cost_usd.expect("priced");
    assert!((cost(0) - (0.15 + 0.06)).abs() < 1e-9, "{}", cost(0));
    assert!((cost(1) - (0.30 + 0.06)).abs() < 1e-9, "{}", cost(1));
}

/// Compacting a session is a model call too: stored with purpose `summary`, the session and
/// the id of the turn that led to it.
#[tokio::test]
async fn a_summary_model_call_is_recorded_as_the_turn_s_summary() {
    use strata_engine::config::SessionsConfig;
    use strata_engine::session::InMemoryStore;
    use strata_engine::turns::TurnRequest;
    use strata_runtime::manager::AgentManager;
    let fake = FakeServer::start().await.expect("fake");
    let body = |content: &str, prompt: u64| {
        FakeResponse::ok(json!({
            "id": "c", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 7}
        }))
    };
    fake.script([
        body("First.", 100),
        body("Second.", 200),
        body("They said hello twice.", 300),
    ]);
    let (env, stored, agent) = metered_agent(&fake.url);
    let m = AgentManager::new(
        vec![Arc::new(agent)],
        Arc::new(InMemoryStore::default()),
        env.clone(),
    )
    .with_sessions_config(SessionsConfig {
        summarize_after: 2,
        keep_turns: 1,
        ..SessionsConfig::default()
    });
    for (i, text) in ["hello", "hello again"].into_iter().enumerate() {
        m.turn(TurnRequest {
            agent_id: "main".into(),
            session_id: "s-9".into(),
            stream: None,
            scopes: Vec::new(),
            channel_kind: None,
            channel_id: "c".into(),
            sender: Principal::Operator,
            message: Message::text(text),
            depth: 0,
            taint: None,
            turn_id: Some(format!("turn-{i}")),
        })
        .await
        .expect("turn");
    }
    let calls = stored.calls();
    let seen: Vec<(&str, &str, &str, u64)> = calls
        .iter()
        .map(|c| {
            (
                c.purpose.as_str(),
                c.turn_id.as_str(),
                c.session.as_str(),
                c.usage.input_tokens,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("turn", "turn-0", "s-9", 100),
            ("turn", "turn-1", "s-9", 200),
            ("summary", "turn-1", "s-9", 300)
        ]
    );
    assert_eq!(calls[2].sender, "operator");
}
