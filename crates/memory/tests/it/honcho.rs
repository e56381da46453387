//! The Honcho client against a fake Honcho on 127.0.0.1 speaking the v3 routes; a slow or
//! dead server never stops a turn.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use strata_engine::agent::{Agent, Message, TurnContext};
use strata_engine::audit::NoAudit;
use strata_engine::config::{Config, HonchoConfig};
use strata_engine::llm::{
    ChatMessage, CompletionRequest, CompletionResponse, LlmError, LlmProvider, Role, StopReason,
    Usage,
};
use strata_engine::memory::MemoryBackend;
use strata_engine::{Env, Principal, async_trait};
use strata_memory::HonchoMemory;
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::{Invoker, Registry};

use strata_test_support::honcho::fake;

fn cfg(url: &str, timeout_ms: u64) -> HonchoConfig {
    HonchoConfig {
        url: url.into(),
        workspace: "acme".into(),
        human_peer: None,
        agent_peer: None,
        api_key: None,
        timeout_ms: Some(timeout_ms),
    }
}

fn env(mem: Option<Arc<dyn MemoryBackend>>) -> Arc<Env> {
    let dir = std::env::temp_dir();
    let mut e = Env::new(Config::default(), dir.clone(), dir.join("data"));
    if let Some(m) = mem {
        e = e.with_memory(m);
    }
    Arc::new(e)
}

fn turn(env: Arc<Env>) -> TurnContext {
    TurnContext::new(
        "main",
        "chan-7",
        "chan-7",
        Principal::Person {
            id: "discord:4242".into(),
        },
        env,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_and_exchanges_over_the_v3_routes() {
    let (url, st) = fake().await;
    let h = HonchoMemory::new(
        &cfg(&url, 3000),
        Some("hch-test".into()),
        &Config::default(),
    )
    .expect("client");
    let t = turn(env(None));
    let block = h
        .context_block(&t.memory_turn(), "what next?")
        .await
        .expect("context")
        .expect("block");
    assert_eq!(
        block,
        "[MEMORY]\nKnown about person-discord-4242: person-discord-4242 prefers short answers and works on the billing service.\n\
         Session summary: They discussed the invoice export.\n[/MEMORY]"
    );
    h.record_exchange(
        &t.memory_turn(),
        "export the invoices",
        "Done: 12 invoices.",
    )
    .await
    .expect("record");
    // A second turn does not re-create workspace, peers or session.
    h.context_block(&t.memory_turn(), "and now?")
        .await
        .expect("context");
    let calls = st.calls.lock().expect("lock").clone();
    let names: Vec<&str> = calls.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(
        names,
        [
            r#"ws "acme""#,
            r#"peer acme/"person-discord-4242""#,
            r#"peer acme/"main""#,
            r#"session acme/"main-chan-7""#,
            "representation acme/person-discord-4242",
            "summaries acme/main-chan-7",
            "messages acme/main-chan-7",
            "representation acme/person-discord-4242",
            "summaries acme/main-chan-7",
        ]
    );
    let msgs = &calls[6].1["messages"];
    assert_eq!(
        msgs[0],
        json!({"peer_id": "person-discord-4242", "content": "export the invoices"})
    );
    assert_eq!(
        msgs[1],
        json!({"peer_id": "main", "content": "Done: 12 invoices."})
    );
    assert_eq!(
        calls[3].1["peers"],
        json!({"person-discord-4242": {}, "main": {}})
    );
}

struct Echo;

#[async_trait]
impl LlmProvider for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    async fn complete(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let last = req
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        Ok(CompletionResponse {
            message: ChatMessage::text(Role::Assistant, format!("echo: {last}")),
            stop: StopReason::EndTurn,
            usage: Usage::default(),
            provider_state: None,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_dead_honcho_never_stops_a_turn() {
    let (url, st) = fake().await;
    *st.delay.lock().expect("lock") = Duration::from_secs(5);
    let slow: Arc<dyn MemoryBackend> =
        Arc::new(HonchoMemory::new(&cfg(&url, 300), None, &Config::default()).expect("client"));
    let started = Instant::now();
    assert!(
        slow.context_block(&turn(env(None)).memory_turn(), "x")
            .await
            .is_err()
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the timeout is respected"
    );

    let dead: Arc<dyn MemoryBackend> = Arc::new(
        HonchoMemory::new(&cfg("http://127.0.0.1:9", 300), None, &Config::default())
            .expect("client"),
    );
    for mem in [slow, dead] {
        let e = env(Some(mem));
        let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
        let inv = Arc::new(Invoker::new(reg, e.clone(), Arc::new(NoAudit)));
        let agent = LlmAgent::new("main", "You are a test agent.", Arc::new(Echo), "m", inv);
        let started = Instant::now();
        let r = agent
            .handle(turn(e), Message::text("hello"))
            .await
            .expect("turn answers");
        assert_eq!(r.text, "echo: hello");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
