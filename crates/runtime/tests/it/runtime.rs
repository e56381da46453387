//! The agent loop and the session manager, against an in-process scripted provider.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_runtime::EnvExt;

use serde_json::json;
use strata_engine::ToolFilter;
use strata_engine::agent::is_no_reply;
use strata_engine::agent::{Agent, AgentError, Message, Reply, TurnContext};
use strata_engine::audit::NoAudit;
use strata_engine::config::{Config, SessionsConfig};
use strata_engine::llm::*;
use strata_engine::session::{InMemoryStore, SessionKey, SessionStore};
use strata_engine::turns::TurnRequest;
use strata_engine::{Env, Principal, ToolError, async_trait, tool};
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::manager::AgentManager;
use strata_runtime::{Invoker, Registry};

use strata_test_support::scripted::{Scripted, calls, text};

static BARRIER: std::sync::OnceLock<tokio::sync::Barrier> = std::sync::OnceLock::new();

/// Waits until two calls of it are running at once (proves parallel execution).
#[tool(timeout_secs = 5)]
async fn rendezvous(
    /// A label echoed back.
    label: String,
) -> Result<String, ToolError> {
    BARRIER
        .get_or_init(|| tokio::sync::Barrier::new(2))
        .wait()
        .await;
    Ok(format!("met:{label}"))
}

/// Always fails.
#[tool]
async fn broken_tool() -> Result<(), ToolError> {
    Err(ToolError::failed("disk on fire"))
}

/// Upper-cases a word.
#[tool]
async fn shout(
    /// The word.
    word: String,
) -> Result<String, ToolError> {
    Ok(word.to_uppercase())
}

/// An environment whose team makes `p1` (the sender of these turns) an owner.
fn env() -> Arc<Env> {
    let base = crate::env_in(&std::env::temp_dir());
    let mut config = base.config.clone();
    config.team.people.push(strata_engine::config::Person {
        id: "p1".into(),
        name: "Test Owner".into(),
        access: strata_engine::config::Access::Owner,
        contacts: Default::default(),
        budget: None,
        role: None,
        timezone: None,
    });
    Arc::new(Env::new(
        config,
        base.overlay_dir.clone(),
        base.data_dir.clone(),
    ))
}

fn invoker() -> Arc<Invoker> {
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    Arc::new(Invoker::new(reg, env(), Arc::new(NoAudit)))
}

fn agent(provider: Arc<Scripted>, tools: ToolFilter) -> LlmAgent {
    LlmAgent::new("main", "You are a test agent.", provider, "m-1", invoker()).with_tools(tools)
}

fn turn_ctx() -> TurnContext {
    TurnContext::new(
        "main",
        "s1",
        "c1",
        Principal::Person { id: "p1".into() },
        env(),
    )
}

#[tokio::test]
async fn plain_answer_with_context_block() {
    let p = Scripted::new(vec![text("hello there")]);
    let a = agent(p.clone(), ToolFilter::None);
    let r = a
        .handle(turn_ctx(), Message::text("hi"))
        .await
        .expect("turn");
    assert_eq!(r.text, "hello there");
    assert!(!r.silent);
    assert_eq!(r.rounds, 1);
    assert_eq!(r.transcript.len(), 2);
    let req = &p.requests()[0];
    let system = req.system.as_deref().expect("system");
    assert!(system.starts_with("You are a test agent."));
    assert!(
        system.contains("[CONTEXT]")
            && system.contains("channel: c1")
            && system.contains("sender: Test Owner (person:p1; tier owner)"),
        "{system}"
    );
    assert!(
        req.tools.is_empty(),
        "no tools unless the agent is given some"
    );
    assert_eq!(req.model, "m-1");
}

#[tokio::test]
async fn tool_call_results_thread_back_with_their_ids() {
    let p = Scripted::new(vec![
        calls(&[("call-1", "shout", json!({"word": "hey"}))]),
        text("done: HEY"),
    ]);
    let a = agent(p.clone(), ToolFilter::List(vec!["shout".into()]));
    let r = a
        .handle(turn_ctx(), Message::text("shout hey"))
        .await
        .expect("turn");
    assert_eq!(r.text, "done: HEY");
    assert_eq!(r.rounds, 2);
    assert_eq!(r.tool_runs.len(), 1);
    assert_eq!(r.tool_runs[0].status, "ok");
    let reqs = p.requests();
    assert_eq!(
        reqs[0]
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["shout"]
    );
    let second = &reqs[1].messages;
    let tool_msg = second.last().expect("tool message");
    assert_eq!(tool_msg.role, Role::Tool);
    assert_eq!(tool_msg.tool_call_id.as_deref(), Some("call-1"));
    assert_eq!(tool_msg.content, "HEY");
    assert_eq!(second[second.len() - 2].tool_calls[0].id, "call-1");
}

#[tokio::test]
async fn parallel_tool_calls_run_concurrently_and_keep_order() {
    let p = Scripted::new(vec![
        calls(&[
            ("a", "rendezvous", json!({"label": "one"})),
            ("b", "rendezvous", json!({"label": "two"})),
        ]),
        text("both met"),
    ]);
    let a = agent(p.clone(), ToolFilter::List(vec!["rendez*".into()]));
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        a.handle(turn_ctx(), Message::text("go")),
    )
    .await
    .expect("no deadlock: calls ran concurrently")
    .expect("turn");
    assert_eq!(r.text, "both met");
    let msgs = &p.requests()[1].messages;
    let n = msgs.len();
    assert_eq!(
        (
            msgs[n - 2].tool_call_id.as_deref(),
            msgs[n - 2].content.as_str()
        ),
        (Some("a"), "met:one")
    );
    assert_eq!(
        (
            msgs[n - 1].tool_call_id.as_deref(),
            msgs[n - 1].content.as_str()
        ),
        (Some("b"), "met:two")
    );
}

#[tokio::test]
async fn failing_and_forbidden_tools_go_back_to_the_model_as_results() {
    let p = Scripted::new(vec![
        calls(&[
            ("x", "broken_tool", json!({})),
            ("y", "shout", json!({"word": "a"})),
        ]),
        text("I could not do it"),
    ]);
    let a = agent(p.clone(), ToolFilter::List(vec!["broken_tool".into()]));
    let r = a
        .handle(turn_ctx(), Message::text("try"))
        .await
        .expect("turn does not crash");
    assert_eq!(r.text, "I could not do it");
    let msgs = &p.requests()[1].messages;
    let n = msgs.len();
    assert_eq!(msgs[n - 2].content, "error (error): disk on fire");
    assert!(
        msgs[n - 1]
            .content
            .contains("not available to agent `main`"),
        "{}",
        msgs[n - 1].content
    );
    assert_eq!(r.tool_runs[1].status, "denied");
}

#[tokio::test]
async fn round_limit_says_so() {
    let loops: Vec<_> = (0..5)
        .map(|i| calls(&[(&*format!("c{i}").leak(), "shout", json!({"word": "x"}))]))
        .collect();
    let p = Scripted::new(loops);
    let a = agent(p.clone(), ToolFilter::All).with_max_rounds(3);
    let r = a
        .handle(turn_ctx(), Message::text("loop"))
        .await
        .expect("turn");
    assert_eq!(r.rounds, 3);
    assert!(r.text.contains("stopped after 3 rounds"), "{}", r.text);
    assert_eq!(p.requests().len(), 3);
}

#[test]
fn no_reply_sentinel() {
    for t in [
        "NO_REPLY",
        "  NO_REPLY.",
        "**NO_REPLY**",
        "[NO_REPLY]",
        "`NO_REPLY` nothing to add",
    ] {
        assert!(is_no_reply(t), "{t}");
    }
    for t in ["I will not say NO_REPLY", "no_reply", "", "NO"] {
        assert!(!is_no_reply(t), "{t}");
    }
}

#[tokio::test]
async fn provider_failure_is_an_error_not_a_panic() {
    let p = Scripted::new(vec![]);
    let a = agent(p, ToolFilter::None);
    let err = a
        .handle(turn_ctx(), Message::text("hi"))
        .await
        .expect_err("fails");
    assert!(err.to_string().contains("script exhausted"));
}

/// Echoes, tracking how many turns of each session run at once.
struct Tracker {
    in_flight: Mutex<std::collections::HashMap<String, usize>>,
    max_same_session: AtomicUsize,
    barrier: tokio::sync::Barrier,
}

#[async_trait]
impl Agent for Tracker {
    fn id(&self) -> &str {
        "tracker"
    }
    async fn handle(&self, turn: TurnContext, input: Message) -> Result<Reply, AgentError> {
        let now = {
            let mut m = self.in_flight.lock().expect("lock");
            let e = m.entry(turn.session_id.clone()).or_default();
            *e += 1;
            *e
        };
        self.max_same_session.fetch_max(now, Ordering::SeqCst);
        if input.text == "meet" {
            // Only completes if another session's turn runs at the same time.
            self.barrier.wait().await;
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        *self
            .in_flight
            .lock()
            .expect("lock")
            .get_mut(&turn.session_id)
            .expect("entry") -= 1;
        let mut r = Reply::text(format!("{}#{}", input.text, turn.history.len()));
        r.transcript = vec![
            ChatMessage::text(Role::User, input.text),
            ChatMessage::text(Role::Assistant, r.text.clone()),
        ];
        Ok(r)
    }
    async fn summarize(
        &self,
        _who: &strata_engine::agent::Compaction<'_>,
        prev: Option<&str>,
        msgs: &[ChatMessage],
    ) -> Result<Option<String>, AgentError> {
        Ok(Some(format!(
            "{}+{} msgs",
            prev.unwrap_or("sum"),
            msgs.len()
        )))
    }
}

fn tracker() -> Arc<Tracker> {
    Arc::new(Tracker {
        in_flight: Mutex::new(Default::default()),
        max_same_session: AtomicUsize::new(0),
        barrier: tokio::sync::Barrier::new(2),
    })
}

fn req(session: &str, text: &str) -> TurnRequest {
    TurnRequest {
        agent_id: "tracker".into(),
        session_id: session.into(),
        stream: None,
        scopes: Vec::new(),
        channel_kind: None,
        channel_id: session.into(),
        sender: Principal::Operator,
        message: Message::text(text),
        depth: 0,
        taint: None,
        turn_id: None,
    }
}

fn manager(t: Arc<Tracker>, store: Arc<InMemoryStore>, cfg: SessionsConfig) -> Arc<AgentManager> {
    let _ = Config::default();
    Arc::new(AgentManager::new(vec![t], store, env()).with_sessions_config(cfg))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_in_one_session_never_overlap_and_sessions_run_in_parallel() {
    let t = tracker();
    let m = manager(
        t.clone(),
        Arc::new(InMemoryStore::default()),
        SessionsConfig::default(),
    );
    let mut set = tokio::task::JoinSet::new();
    for i in 0..6 {
        let m = m.clone();
        set.spawn(async move { m.turn(req("same", &format!("t{i}"))).await });
    }
    while let Some(r) = set.join_next().await {
        r.expect("join").expect("turn");
    }
    assert_eq!(t.max_same_session.load(Ordering::SeqCst), 1);
    // Six turns, each saw the previous ones' two messages: histories 0, 2, …, 10.
    let last = m.turn(req("same", "last")).await.expect("turn");
    assert_eq!(last.text, "last#12");

    let (a, b) = tokio::time::timeout(
        Duration::from_secs(10),
        futures_join(m.turn(req("ch-a", "meet")), m.turn(req("ch-b", "meet"))),
    )
    .await
    .expect("different sessions ran concurrently");
    a.expect("a");
    b.expect("b");
}

async fn futures_join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    tokio::join!(a, b)
}

#[tokio::test]
async fn evicted_sessions_come_back_from_the_store() {
    let store = Arc::new(InMemoryStore::default());
    let cfg = SessionsConfig {
        max_live: 2,
        summarize_after: 0,
        ..SessionsConfig::default()
    };
    let m = manager(tracker(), store.clone(), cfg);
    m.turn(req("s1", "one")).await.expect("turn");
    m.turn(req("s2", "two")).await.expect("turn");
    m.turn(req("s3", "three")).await.expect("turn");
    assert!(m.live_sessions() <= 2);
    let r = m.turn(req("s1", "again")).await.expect("turn");
    assert_eq!(
        r.text, "again#2",
        "s1's history was reloaded from the store"
    );
    assert_eq!(store.count().await.expect("count"), 3);
}

#[tokio::test]
async fn long_sessions_are_summarised_keeping_the_last_turns() {
    let store = Arc::new(InMemoryStore::default());
    let cfg = SessionsConfig {
        summarize_after: 3,
        keep_turns: 1,
        ..SessionsConfig::default()
    };
    let m = manager(tracker(), store.clone(), cfg);
    for i in 0..3 {
        m.turn(req("s", &format!("t{i}"))).await.expect("turn");
    }
    let state = store
        .load(&SessionKey::new("tracker", "s"))
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(state.summary.as_deref(), Some("sum+4 msgs"));
    assert_eq!(state.messages.len(), 2, "the last turn is kept verbatim");
    assert_eq!(state.messages[0].content, "t2");
    let r = m.turn(req("s", "next")).await.expect("turn");
    assert_eq!(r.text, "next#2");
}

#[tokio::test]
async fn reset_forgets_and_unknown_agents_are_errors() {
    let store = Arc::new(InMemoryStore::default());
    let m = manager(tracker(), store, SessionsConfig::default());
    m.turn(req("s", "a")).await.expect("turn");
    m.reset("tracker", "s").await.expect("reset");
    assert_eq!(m.turn(req("s", "b")).await.expect("turn").text, "b#0");
    let mut bad = req("s", "x");
    bad.agent_id = "ghost".into();
    let err = m.turn(bad).await.expect_err("unknown");
    assert!(err.to_string().contains("unknown agent `ghost`"));
}

#[tokio::test]
async fn the_model_sees_only_what_the_sender_may_use_and_unshown_tools_are_refused() {
    // `shout` is safe, `broken_tool` is not: a staff sender sees only `shout`.
    let mut config = env().config.clone();
    config.security.access_control.safe_tools = vec!["shout".into()];
    config.team.people.push(strata_engine::config::Person {
        id: "s1".into(),
        name: "Test Staff".into(),
        access: strata_engine::config::Access::Staff,
        contacts: Default::default(),
        budget: None,
        role: None,
        timezone: None,
    });
    let env = Arc::new(Env::new(
        config,
        std::env::temp_dir(),
        std::env::temp_dir().join("data"),
    ));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let inv = Arc::new(Invoker::new(reg, env.clone(), Arc::new(NoAudit)));
    let p = Scripted::new(vec![
        // The model names a tool it was not shown.
        calls(&[("x", "broken_tool", json!({}))]),
        text("done"),
    ]);
    let a = LlmAgent::new("main", "You are a test agent.", p.clone(), "m-1", inv)
        .with_tools(ToolFilter::List(vec!["broken_tool".into(), "shout".into()]));
    let staff = Principal::Person { id: "s1".into() };
    let names = |specs: &[strata_engine::ToolSpec]| -> Vec<String> {
        specs.iter().map(|s| s.name.clone()).collect()
    };
    assert_eq!(names(&a.visible_tools(&staff)), ["shout"]);
    let owner = Principal::Person { id: "p1".into() };
    assert_eq!(names(&a.visible_tools(&owner)), ["broken_tool", "shout"]);
    let ctx = TurnContext::new("main", "s1", "c1", staff, env);
    let r = a.handle(ctx, Message::text("try")).await.expect("turn");
    assert_eq!(names(&p.requests()[0].tools), ["shout"]);
    let msgs = &p.requests()[1].messages;
    let last = &msgs[msgs.len() - 1].content;
    assert!(
        last.starts_with("error (denied): denied (layer 2)"),
        "{last}"
    );
    assert_eq!(r.tool_runs[0].status, "denied");
}

/// Sees the turn registry while the turn runs.
struct SeesTurn {
    env: Arc<Env>,
    seen: Mutex<Option<strata_runtime::turns::TurnInfo>>,
}

#[async_trait]
impl LlmProvider for SeesTurn {
    fn name(&self) -> &str {
        "sees-turn"
    }
    async fn complete(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let id = req.turn.clone().expect("a turn id");
        *self.seen.lock().expect("lock") = self.env.turns().get(&id);
        Ok(text("done"))
    }
}

#[tokio::test]
async fn a_turn_is_registered_while_it_runs_and_only_then() {
    let env = env();
    let p = Arc::new(SeesTurn {
        env: env.clone(),
        seen: Mutex::new(None),
    });
    let a = LlmAgent::new("main", "x", p.clone(), "m", invoker());
    let mut ctx = TurnContext::new(
        "main",
        "s9",
        "c9",
        Principal::Person { id: "p1".into() },
        env.clone(),
    );
    ctx.depth = 2;
    a.handle(ctx, Message::text("hi")).await.expect("turn");
    let seen = p
        .seen
        .lock()
        .expect("lock")
        .clone()
        .expect("registered during the turn");
    assert_eq!(seen.agent_id, "main");
    assert_eq!(seen.session_id, "s9");
    assert_eq!(seen.sender, Principal::Person { id: "p1".into() });
    assert_eq!(seen.depth, 2);
    assert!(env.turns().is_empty(), "removed when the turn ended");
}

#[tokio::test]
async fn a_tool_outside_the_agents_list_is_refused_by_the_invoker_and_audited() {
    let dir = tempfile::tempdir().expect("tmp");
    let audit =
        Arc::new(strata_store::JsonlAudit::open(&dir.path().join("audit.jsonl")).expect("audit"));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let inv = Arc::new(Invoker::new(reg, env(), audit.clone()));
    let p = Scripted::new(vec![
        calls(&[
            ("x", "shout", json!({"word": "a"})),
            ("y", "no_such_tool", json!({})),
        ]),
        text("done"),
    ]);
    let a = LlmAgent::new("main", "t", p.clone(), "m-1", inv)
        .with_tools(ToolFilter::List(vec!["broken_tool".into()]));
    let r = a
        .handle(turn_ctx(), Message::text("try"))
        .await
        .expect("turn");
    assert_eq!(r.tool_runs[0].status, "denied");
    assert!(
        !r.tool_runs[0].request_id.is_empty(),
        "an invoked call has an id"
    );
    // A name outside the list is refused the same way whether or not such a tool exists.
    assert_eq!(r.tool_runs[1].status, "denied");
    audit.close();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(audit.path())
        .expect("audit file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, tool) in lines.iter().zip(["shout", "no_such_tool"]) {
        assert_eq!(line["tool"], tool);
        assert_eq!(line["status"], "denied");
        assert_eq!(line["agent_id"], "main");
        assert_eq!(line["principal"], "person:p1");
        assert!(
            line["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("denied (layer 3)")),
            "{line}"
        );
    }
}
