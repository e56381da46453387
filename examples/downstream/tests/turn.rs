//! Drives a turn through the downstream crate's connector, memory and agent with the engine's
//! runtime, calls its tool through the engine's pipeline, and holds `src/lib.rs` to the
//! contract: the names of `strata_engine` a team's crate builds on.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use strata_downstream_example::{DirConnector, Librarian, NotesMemory};
use strata_engine::agent::Message;
use strata_engine::audit::NoAudit;
use strata_engine::config::{Access, Config, Person};
use strata_engine::connector::{Connector, InboundMessage, OutboundMessage};
use strata_engine::session::InMemoryStore;
use strata_engine::turns::TurnRequest;
use strata_engine::{Env, Principal};
use strata_runtime::manager::AgentManager;
use strata_runtime::{Invocation, Invoker, Registry, Status};
use tokio::sync::{mpsc, watch};

/// What a downstream crate may name of `strata_engine`: the traits it implements and the data
/// they take and give, the tool attribute and what a tool sees. Everything else (the Invoker,
/// the agent loop, the manager, the scheduler, budgets…) is machinery the launcher runs.
const CONTRACT: &[&str] = &[
    "agent::Agent",
    "agent::AgentError",
    "agent::Message",
    "agent::Reply",
    "agent::TurnContext",
    "connector::Connector",
    "connector::ConnectorError",
    "connector::InboundMessage",
    "connector::OutboundMessage",
    "memory::MemoryBackend",
    "memory::MemoryError",
    "memory::MemoryTurn",
    "ToolContext",
    "ToolError",
    "async_trait",
    "tool",
];

/// The `strata_engine` names a `use` block imports: `use strata_engine::a::{B, C};` gives
/// `a::B` and `a::C`.
fn imported(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(i) = rest.find("use strata_engine::") {
        let after = &rest[i + "use strata_engine::".len()..];
        let end = after.find(';').unwrap_or(after.len());
        let item: String = after[..end].split_whitespace().collect();
        match item.split_once('{') {
            Some((module, names)) => {
                for n in names
                    .trim_end_matches('}')
                    .split(',')
                    .filter(|n| !n.is_empty())
                {
                    out.push(format!("{module}{n}"));
                }
            }
            None => out.push(item),
        }
        rest = &after[end..];
    }
    out
}

#[test]
fn the_library_names_only_the_contract() {
    let source = include_str!("../src/lib.rs");
    let names = imported(source);
    assert!(names.len() >= CONTRACT.len(), "{names:?}");
    for n in &names {
        assert!(
            CONTRACT.contains(&n.as_str()),
            "src/lib.rs names `strata_engine::{n}`, which is not in the contract"
        );
    }
    // Nothing named by a full path outside a `use` either.
    for line in source
        .lines()
        .filter(|l| !l.trim_start().starts_with("use "))
    {
        assert!(
            !line.contains("strata_engine::"),
            "a path outside the imports: {line}"
        );
    }
    // The parser itself: a name outside the contract is caught.
    assert_eq!(
        imported("use strata_engine::paths::{open_guarded, X};"),
        ["paths::open_guarded", "paths::X"]
    );
}

fn turn(m: &InboundMessage) -> TurnRequest {
    TurnRequest {
        agent_id: "librarian".into(),
        session_id: m.channel_id.clone(),
        stream: None,
        scopes: Vec::new(),
        channel_kind: None,
        channel_id: m.channel_id.clone(),
        sender: Principal::Person {
            id: m.sender_id.clone(),
        },
        message: Message::text(m.text.clone()),
        depth: 0,
        taint: None,
        turn_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_in_a_file_is_answered_in_a_file_and_remembered() {
    let dir = tempfile::tempdir().expect("tmp");
    // Ana is on the team: layer 1 lets only people the team knows talk to an agent.
    let mut config = Config::default();
    config.team.people = vec![Person {
        id: "ana".into(),
        name: "Ana Example".into(),
        access: Access::Staff,
        contacts: Default::default(),
        budget: None,
        role: None,
        timezone: None,
    }];
    let env = Arc::new(
        Env::new(config, dir.path().into(), dir.path().join("data"))
            .with_memory(Arc::new(NotesMemory::default())),
    );
    let manager = AgentManager::new(
        vec![Arc::new(Librarian)],
        Arc::new(InMemoryStore::default()),
        env.clone(),
    );
    let conn = Arc::new(DirConnector::new(dir.path()).expect("connector"));
    let (tx, mut rx) = mpsc::channel(8);
    let (stop, stopped) = watch::channel(false);
    let running = tokio::spawn({
        let c = conn.clone();
        async move { c.run(tx, stopped).await }
    });
    for (text, expected) in [
        ("where are the style guides kept", "6 words"),
        (
            "and the templates",
            "3 words; before, you asked about \"where are the style guides kept\"",
        ),
    ] {
        std::fs::write(dir.path().join("inbox/ana.msg"), text).expect("write");
        let m = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the connector read the message in time")
            .expect("a message");
        assert_eq!((m.connector.as_str(), m.text.as_str()), ("dir", text));
        let reply = manager.turn(turn(&m)).await.expect("turn");
        assert_eq!(reply.text, expected);
        conn.send(OutboundMessage {
            channel_id: m.channel_id.clone(),
            text: reply.text.clone(),
            reply_to: Some(m.message_id.clone()),
        })
        .await
        .expect("send");
    }
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the connector stopped")
        .expect("join")
        .expect("run");
    let outbox = std::fs::read_to_string(dir.path().join("outbox/ana.txt")).expect("outbox");
    assert_eq!(
        outbox,
        "6 words\n3 words; before, you asked about \"where are the style guides kept\"\n"
    );
    assert!(dir.path().join("inbox/ana.done").is_file());
    assert!(!dir.path().join("inbox/ana.msg").exists());
}

#[tokio::test]
async fn the_tool_runs_through_the_engines_pipeline() {
    strata_downstream_example::link();
    let dir = tempfile::tempdir().expect("tmp");
    let env = Arc::new(Env::new(
        Config::default(),
        dir.path().into(),
        dir.path().join("data"),
    ));
    let registry = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    assert!(
        registry.get("word_count").is_some(),
        "word_count is registered"
    );
    let invoker = Invoker::new(registry, env, Arc::new(NoAudit));
    let r = invoker
        .invoke(Invocation::new(
            "word_count",
            json!({"text": "one two three"}),
            Principal::Operator,
        ))
        .await;
    assert_eq!(r.status, Status::Ok, "{:?}", r.error);
    assert_eq!(r.value, json!({"words": 3}));
    let r = invoker
        .invoke(Invocation::new(
            "word_count",
            json!({"txt": "typo"}),
            Principal::Operator,
        ))
        .await;
    assert_ne!(r.status, Status::Ok);
    assert!(r.error.unwrap_or_default().contains("text"));
}
