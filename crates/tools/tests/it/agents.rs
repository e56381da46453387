//! `ask_agent`, `send_to_agent` and `list_capabilities` over real `LlmAgent`s run by a real
//! `AgentManager`; only the model is scripted (one queue of replies per agent).

use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_runtime::EnvExt;

use serde_json::{Value, json};
use strata_engine::ToolFilter;
use strata_engine::agent::Message;
use strata_engine::audit::NoAudit;
use strata_engine::config::{Access, AgentTier, Config, Person, TeamAgent};
use strata_engine::connector::{
    ChannelRef, Connector, ConnectorError, InboundMessage, OutboundMessage,
};
use strata_engine::llm::*;
use strata_engine::session::{InMemoryStore, SessionKey, SessionStore};
use strata_engine::turns::{AgentDirectory, TurnRequest};
use strata_engine::{Env, Principal, async_trait};
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::manager::AgentManager;
use strata_runtime::{Invocation, Invoker, Registry, Status};

use strata_test_support::scripted::{Scripted, text};

fn call(name: &str, args: Value) -> CompletionResponse {
    strata_test_support::scripted::calls(&[(&format!("c-{name}"), name, args)])
}

/// The tool results the agent's model was shown, in order.
fn tool_results(p: &Scripted) -> Vec<String> {
    p.tool_results()
}

struct World {
    env: Arc<Env>,
    manager: Arc<AgentManager>,
    invoker: Arc<Invoker>,
    store: Arc<InMemoryStore>,
    providers: Vec<(String, Arc<Scripted>)>,
    _dir: tempfile::TempDir,
}

impl World {
    /// Invokes `tool` as agent `agent` on behalf of the owner.
    async fn call(&self, agent: &str, tool: &str, args: Value) -> strata_runtime::InvocationResult {
        self.invoker.invoke(as_agent(agent, tool, args)).await
    }

    fn provider(&self, id: &str) -> Arc<Scripted> {
        self.providers
            .iter()
            .find(|(a, _)| a == id)
            .map(|(_, p)| p.clone())
            .expect("provider")
    }
}

/// alpha and beta are coordinators, gamma is an assistant; `p1` is an owner.
fn world(scripts: Vec<(&str, Vec<CompletionResponse>)>) -> World {
    world_with(scripts, |_| {})
}

fn world_with(
    scripts: Vec<(&str, Vec<CompletionResponse>)>,
    tweak: impl FnOnce(&mut Config),
) -> World {
    let _ = strata_tools::link();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = Config::default();
    c.tools.timeout_secs = 10;
    c.team.people.push(Person {
        id: "p1".into(),
        name: "Test Owner".into(),
        access: Access::Owner,
        contacts: Default::default(),
        budget: None,
        role: None,
        timezone: None,
    });
    for (id, tier) in [
        ("alpha", AgentTier::Coordinator),
        ("beta", AgentTier::Coordinator),
        ("gamma", AgentTier::Assistant),
    ] {
        c.team.agents.push(TeamAgent {
            id: id.into(),
            agent_tier: tier,
        });
    }
    tweak(&mut c);
    let env = Arc::new(Env::new(
        c,
        dir.path().to_path_buf(),
        dir.path().join("data"),
    ));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    let invoker = Arc::new(Invoker::new(reg, env.clone(), Arc::new(NoAudit)));
    let mut providers = Vec::new();
    let mut agents: Vec<Arc<dyn strata_engine::agent::Agent>> = Vec::new();
    for (id, script) in scripts {
        let p = Scripted::new(script);
        providers.push((id.to_owned(), p.clone()));
        agents.push(Arc::new(
            LlmAgent::new(id, format!("You are {id}."), p, "m-1", invoker.clone()).with_tools(
                ToolFilter::List(vec![
                    "ask_agent".into(),
                    "send_to_agent".into(),
                    "list_capabilities".into(),
                ]),
            ),
        ));
    }
    let store = Arc::new(InMemoryStore::default());
    let manager = Arc::new(AgentManager::new(agents, store.clone(), env.clone()));
    let weak: std::sync::Weak<dyn AgentDirectory> =
        Arc::downgrade(&manager) as std::sync::Weak<AgentManager>;
    env.attach_agents(weak);
    let env = env.clone();
    World {
        env,
        manager,
        invoker,
        store,
        providers,
        _dir: dir,
    }
}

fn from_owner(agent: &str, text: &str) -> TurnRequest {
    TurnRequest {
        agent_id: agent.into(),
        session_id: "s1".into(),
        stream: None,
        scopes: Vec::new(),
        channel_kind: None,
        channel_id: "c1".into(),
        sender: Principal::Person { id: "p1".into() },
        message: Message::text(text),
        depth: 0,
        taint: None,
        turn_id: None,
    }
}

fn as_agent(agent: &str, tool: &str, args: Value) -> Invocation {
    let mut inv = Invocation::new(tool, args, Principal::Person { id: "p1".into() });
    inv.agent_id = Some(agent.into());
    inv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_agent_round_trip_in_a_private_side_session() {
    let w = world(vec![
        (
            "alpha",
            vec![
                call(
                    "ask_agent",
                    json!({"agent": "beta", "question": "What is the launch code name?"}),
                ),
                text("Beta says: Bluebird."),
            ],
        ),
        ("beta", vec![text("Bluebird")]),
    ]);
    let r = w
        .manager
        .turn(from_owner("alpha", "ask beta for the code name"))
        .await
        .expect("turn");
    assert_eq!(r.text, "Beta says: Bluebird.");
    // alpha's model saw beta's answer as the tool result.
    let results = tool_results(&w.provider("alpha"));
    assert_eq!(results.len(), 1);
    let v: Value = serde_json::from_str(&results[0]).expect("json result");
    assert_eq!(v, json!({"agent": "beta", "answer": "Bluebird"}));
    // beta answered the question alone, as alpha (not as the person), in a side session.
    let beta = w.provider("beta").requests();
    assert_eq!(beta.len(), 1);
    let system = beta[0].system.as_deref().unwrap_or_default();
    assert!(system.contains("sender: agent:alpha"), "{system}");
    assert!(system.contains("channel: ask-alpha-"), "{system}");
    let last = beta[0].messages.last().expect("message");
    assert_eq!(last.content, "What is the launch code name?");
    assert!(
        beta[0]
            .messages
            .iter()
            .all(|m| !m.content.contains("ask beta")),
        "the other agent does not see the asker's conversation"
    );
    // The side session was kept under beta, not in the owner's session.
    let owner_session = w
        .store
        .load(&SessionKey::new("beta", "s1"))
        .await
        .expect("load");
    assert!(owner_session.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_to_agent_returns_a_receipt_and_delivers_to_the_inbox() {
    let w = world(vec![
        ("alpha", vec![]),
        ("beta", vec![text("Noted, will deploy at noon.")]),
    ]);
    let r = w
        .call(
            "alpha",
            "send_to_agent",
            json!({"agent": "beta", "message": "Deploy window is noon."}),
        )
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["agent"], "beta");
    assert_eq!(r.value["delivery"], "side_session");
    assert_eq!(r.value["session"], "inbox-beta");
    assert!(
        uuid_like(r.value["receipt"].as_str().unwrap_or_default()),
        "{r:?}"
    );
    // Delivery happens after the receipt: wait for beta's inbox session to hold the turn.
    let key = SessionKey::new("beta", "inbox-beta");
    let mut state = None;
    for _ in 0..200 {
        if let Some(s) = w.store.load(&key).await.expect("load")
            && s.messages.len() >= 2
        {
            state = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let state = state.expect("beta's inbox turn was stored");
    assert_eq!(state.messages[0].content, "Deploy window is noon.");
    assert_eq!(state.messages[1].content, "Noted, will deploy at noon.");
    let beta = w.provider("beta").requests();
    assert!(
        beta[0]
            .system
            .as_deref()
            .unwrap_or_default()
            .contains("sender: agent:alpha")
    );
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chain_stops_at_depth_three() {
    // owner → alpha (0) asks beta (1), beta asks alpha (2), alpha asks beta again: refused.
    // beta's turn has an agent as its sender, so its own ask_agent call would go to approval
    // (layer 2); listing the tool as safe lets the chain run on its own.
    let w = world_with(
        vec![
            (
                "alpha",
                vec![
                    call("ask_agent", json!({"agent": "beta", "question": "q1"})),
                    call("ask_agent", json!({"agent": "beta", "question": "q3"})),
                    text("alpha-inner"),
                    text("alpha-outer"),
                ],
            ),
            (
                "beta",
                vec![
                    call("ask_agent", json!({"agent": "alpha", "question": "q2"})),
                    text("beta-done"),
                ],
            ),
        ],
        |c| {
            c.security
                .access_control
                .safe_tools
                .push("ask_agent".into())
        },
    );
    let r = w
        .manager
        .turn(from_owner("alpha", "start"))
        .await
        .expect("turn");
    assert_eq!(r.text, "alpha-outer");
    let alpha = tool_results(&w.provider("alpha"));
    assert!(
        alpha.iter().any(|t| t.contains("depth limit reached (3)")),
        "{alpha:?}"
    );
    let beta = tool_results(&w.provider("beta"));
    assert!(beta.iter().any(|t| t.contains("alpha-inner")), "{beta:?}");
    // beta was asked exactly once: the third hop never started a turn.
    let asked: Vec<String> = w
        .provider("beta")
        .requests()
        .iter()
        .filter_map(|r| r.messages.iter().find(|m| m.role == Role::User))
        .map(|m| m.content.clone())
        .collect();
    assert!(asked.iter().all(|q| q == "q1"), "{asked:?}");

    // The same limit straight through the Invoker.
    let mut inv = as_agent(
        "alpha",
        "ask_agent",
        json!({"agent": "beta", "question": "x"}),
    );
    inv.depth = 2;
    let r = w.invoker.invoke(inv).await;
    assert_eq!(r.status, Status::Error);
    assert!(r.error.unwrap_or_default().contains("depth limit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_messages_unknown_agents_and_assistants_are_refused() {
    let w = world(vec![("alpha", vec![]), ("beta", vec![]), ("gamma", vec![])]);
    let r = w
        .call(
            "alpha",
            "ask_agent",
            json!({"agent": "alpha", "question": "hello me"}),
        )
        .await;
    assert_eq!(r.status, Status::ValidationError);
    assert!(
        r.error
            .unwrap_or_default()
            .contains("cannot message itself")
    );

    let r = w
        .call(
            "alpha",
            "send_to_agent",
            json!({"agent": "nobody", "message": "hi"}),
        )
        .await;
    assert_eq!(r.status, Status::ValidationError);
    let e = r.error.unwrap_or_default();
    assert!(
        e.contains("no agent `nobody`") && e.contains("alpha, beta, gamma"),
        "{e}"
    );

    for (tool, args) in [
        ("ask_agent", json!({"agent": "alpha", "question": "q"})),
        ("send_to_agent", json!({"agent": "alpha", "message": "m"})),
    ] {
        let r = w.call("gamma", tool, args).await;
        assert_eq!(r.status, Status::Denied, "{tool}: {r:?}");
        assert!(
            r.error.unwrap_or_default().contains("assistant-tier"),
            "{tool}"
        );
    }
    // Nothing ran in any agent.
    for id in ["alpha", "beta", "gamma"] {
        assert!(w.provider(id).requests().is_empty(), "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_capabilities_shows_what_the_caller_may_use() {
    let w = world(vec![("alpha", vec![]), ("beta", vec![]), ("gamma", vec![])]);
    let r = w.call("alpha", "list_capabilities", json!({})).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let names: Vec<&str> = r.value["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"ask_agent") && names.contains(&"read_file"),
        "{names:?}"
    );
    let agents: Vec<&str> = r.value["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    // The running agents the caller may talk to, never the caller itself.
    assert_eq!(agents, ["beta", "gamma"]);

    // An assistant does not see the inter-agent tools at all.
    let r = w.call("gamma", "list_capabilities", json!({})).await;
    let names: Vec<&str> = r.value["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        !names.contains(&"ask_agent") && !names.contains(&"send_to_agent"),
        "{names:?}"
    );
    assert!(names.contains(&"list_capabilities"));
    // ... and may talk to no agent (layer 1: assistants reach none).
    assert_eq!(r.value["agents"], json!([]));
}

/// A connector that records what it is asked to send (fails for channel `down`).
#[derive(Default)]
struct Recorder {
    sent: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl Connector for Recorder {
    fn name(&self) -> &str {
        "chat:main"
    }
    async fn run(
        &self,
        _tx: tokio::sync::mpsc::Sender<InboundMessage>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), ConnectorError> {
        let _ = stop.wait_for(|s| *s).await;
        Ok(())
    }
    async fn send(&self, m: OutboundMessage) -> Result<(), ConnectorError> {
        if m.channel_id == "down" {
            return Err(ConnectorError {
                connector: "chat:main".into(),
                detail: "channel is gone".into(),
            });
        }
        self.sent.lock().expect("lock").push((m.channel_id, m.text));
        Ok(())
    }
}

impl Recorder {
    fn sent(&self) -> Vec<(String, String)> {
        self.sent.lock().expect("lock").clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_to_agent_posts_in_the_home_channel_and_the_reply_follows() {
    let w = world(vec![
        ("alpha", vec![]),
        ("beta", vec![text("On it: deploying at noon.")]),
        ("gamma", vec![text("hi back")]),
    ]);
    let rec = Arc::new(Recorder::default());
    w.env.connectors().register(rec.clone());
    w.env
        .connectors()
        .set_home("beta", ChannelRef::parse("chat:main:4242").expect("ref"));
    let r = w
        .call(
            "alpha",
            "send_to_agent",
            json!({"agent": "beta", "message": "Deploy window is noon."}),
        )
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["delivery"], "home_channel");
    assert_eq!(r.value["channel"], "chat:main:4242");
    for _ in 0..200 {
        if rec.sent().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        rec.sent(),
        [
            (
                "4242".to_owned(),
                "[message from alpha to beta] Deploy window is noon.".to_owned()
            ),
            ("4242".to_owned(), "On it: deploying at noon.".to_owned()),
        ]
    );
    // beta's turn ran in the channel's session, as alpha.
    let state = w
        .store
        .load(&SessionKey::new("beta", "chat:main:4242"))
        .await
        .expect("load")
        .expect("session");
    assert_eq!(state.messages[0].content, "Deploy window is noon.");
    let system = w.provider("beta").requests()[0]
        .system
        .clone()
        .unwrap_or_default();
    assert!(
        system.contains("sender: agent:alpha") && system.contains("channel: chat:main:4242"),
        "{system}"
    );

    // A home channel that cannot be posted to falls back to the side session, and says why.
    w.env
        .connectors()
        .set_home("gamma", ChannelRef::parse("chat:main:down").expect("ref"));
    let r = w
        .call(
            "alpha",
            "send_to_agent",
            json!({"agent": "gamma", "message": "hello"}),
        )
        .await;
    assert_eq!(r.value["delivery"], "side_session", "{r:?}");
    assert!(
        r.value["note"]
            .as_str()
            .unwrap_or_default()
            .contains("channel is gone")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_posts_through_a_running_connector() {
    let w = world(vec![("alpha", vec![])]);
    let send = |channel: &str, text: &str| {
        as_agent(
            "alpha",
            "send_message",
            json!({"channel": channel, "text": text}),
        )
    };
    // Nothing running yet.
    let r = w.invoker.invoke(send("chat:main:7", "hi")).await;
    assert_eq!(r.status, Status::ValidationError);
    assert!(r.error.unwrap_or_default().contains("running: none"));

    let rec = Arc::new(Recorder::default());
    w.env.connectors().register(rec.clone());
    let r = w
        .invoker
        .invoke(send("chat:main:7", "Build is green."))
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["channel"], "chat:main:7");
    assert_eq!(rec.sent(), [("7".to_owned(), "Build is green.".to_owned())]);

    for (channel, text, status) in [
        ("nochannel", "x", Status::ValidationError),
        ("other:1", "x", Status::ValidationError),
        ("chat:main:7", "NO_REPLY", Status::ValidationError),
        ("chat:main:7", "   ", Status::ValidationError),
        ("chat:main:down", "x", Status::Error),
    ] {
        let r = w.invoker.invoke(send(channel, text)).await;
        assert_eq!(r.status, status, "{channel} {text}: {r:?}");
    }
    assert_eq!(rec.sent().len(), 1);
}
