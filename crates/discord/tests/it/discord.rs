//! The real twilight clients against a fake Discord on 127.0.0.1: a gateway (WebSocket:
//! HELLO, IDENTIFY, READY, heartbeats, MESSAGE_CREATE dispatches pushed by the test) and REST
//! (`/api/v10/...`, every request recorded). Agents are real `LlmAgent`s under a real
//! `AgentManager`; only the model is scripted.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message as Ws, WebSocket, WebSocketUpgrade};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use strata_engine::ToolFilter;
use strata_engine::config::{
    Access, AgentConfig, Config, DiscordAccount, DiscordRouting, Person, RoutingConfig,
};
use strata_engine::runtime::{AgentDirectory, AgentManager, LlmAgent};
use strata_engine::session::InMemoryStore;
use strata_engine::{Invoker, Registry, RuntimeEnv};
use strata_test_support::scripted::{Scripted, text};
use tokio::sync::broadcast;

#[derive(Clone)]
struct Fake {
    /// REST requests: (method, path, body).
    rest: Arc<Mutex<Vec<(String, String, Value)>>>,
    /// IDENTIFY payloads received.
    identified: Arc<Mutex<Vec<Value>>>,
    /// Dispatches to push to connected gateways.
    push: broadcast::Sender<Value>,
    /// Drops every gateway connection (code 4000: the client may resume).
    drop_all: broadcast::Sender<()>,
    /// Asks every connected client to reconnect (op 7 RECONNECT).
    reconnect: broadcast::Sender<()>,
    /// RESUME payloads received.
    resumed: Arc<Mutex<Vec<Value>>>,
    /// The last dispatch pushed (replayed after a resume, as Discord may).
    last: Arc<Mutex<Option<Value>>>,
    port: u16,
}

async fn gateway(ws: WebSocketUpgrade, State(f): State<Fake>) -> Response {
    ws.on_upgrade(move |socket| session(socket, f))
}

async fn session(mut socket: WebSocket, f: Fake) {
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 41250}});
    if socket
        .send(Ws::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    let mut rx = f.push.subscribe();
    let mut drops = f.drop_all.subscribe();
    let mut reconnects = f.reconnect.subscribe();
    let mut seq = 1u64;
    loop {
        tokio::select! {
            m = socket.recv() => {
                let Some(Ok(m)) = m else { return };
                let Ws::Text(t) = m else { continue };
                let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                match v["op"].as_u64() {
                    Some(1) => {
                        let _ = socket.send(Ws::Text(json!({"op": 11}).to_string().into())).await;
                    }
                    Some(6) => {
                        f.resumed.lock().expect("lock").push(v["d"].clone());
                        let resumed = json!({"op": 0, "t": "RESUMED", "s": seq, "d": null});
                        seq += 1;
                        let _ = socket.send(Ws::Text(resumed.to_string().into())).await;
                        let replay = f.last.lock().expect("lock").clone();
                        if let Some(mut d) = replay {
                            d["s"] = json!(seq);
                            seq += 1;
                            let _ = socket.send(Ws::Text(d.to_string().into())).await;
                        }
                    }
                    Some(2) => {
                        f.identified.lock().expect("lock").push(v["d"].clone());
                        if v["d"]["token"].as_str().is_some_and(|t| t.contains("bad")) {
                            let frame = axum::extract::ws::CloseFrame {
                                code: 4004,
                                reason: "Authentication failed.".into(),
                            };
                            let _ = socket.send(Ws::Close(Some(frame))).await;
                            return;
                        }
                        let ready = json!({"op": 0, "t": "READY", "s": seq, "d": {
                            "v": 10,
                            "user": {"id": "900", "username": "strata-bot", "discriminator": "0",
                                     "avatar": null, "bot": true, "mfa_enabled": false},
                            "guilds": [{"id": "9", "unavailable": true}],
                            "session_id": "fake-session",
                            "resume_gateway_url": format!("ws://127.0.0.1:{}", f.port),
                            "application": {"id": "900", "flags": 0},
                            "shard": [0, 1]
                        }});
                        seq += 1;
                        let _ = socket.send(Ws::Text(ready.to_string().into())).await;
                    }
                    _ => {}
                }
            }
            _ = reconnects.recv() => {
                let _ = socket.send(Ws::Text(json!({"op": 7, "d": null}).to_string().into())).await;
            }
            _ = drops.recv() => {
                let frame = axum::extract::ws::CloseFrame { code: 4000, reason: "unknown error".into() };
                let _ = socket.send(Ws::Close(Some(frame))).await;
                return;
            }
            d = rx.recv() => {
                let Ok(mut d) = d else { return };
                *f.last.lock().expect("lock") = Some(d.clone());
                d["s"] = json!(seq);
                seq += 1;
                if socket.send(Ws::Text(d.to_string().into())).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn rest(State(f): State<Fake>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let ctype = parts
        .headers
        .get("content-type")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut v: Value = if ctype.starts_with("multipart/form-data") {
        // Files: the JSON part is `payload_json`; record the file names and bodies.
        let raw = String::from_utf8_lossy(&bytes).into_owned();
        let mut v = raw
            .split("name=\"payload_json\"")
            .nth(1)
            .and_then(|rest| rest.split("\r\n\r\n").nth(1))
            .and_then(|body| body.split("\r\n--").next())
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
            .unwrap_or(Value::Null);
        let files: Vec<Value> = raw
            .split("filename=\"")
            .skip(1)
            .filter_map(|r| {
                let name = r.split('"').next()?;
                let body = r.split("\r\n\r\n").nth(1)?.split("\r\n--").next()?;
                Some(json!({"name": name, "body": body}))
            })
            .collect();
        v["_files"] = json!(files);
        v
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    if let Some(o) = v.as_object_mut() {
        let auth = parts
            .headers
            .get("authorization")
            .and_then(|h| h.to_str().ok());
        o.insert("_auth".into(), json!(auth));
    }
    let path = parts.uri.path().to_owned();
    f.rest
        .lock()
        .expect("lock")
        .push((parts.method.to_string(), path.clone(), v.clone()));
    // The "CDN": attachment bodies.
    if path.starts_with("/cdn/") {
        return format!("contents of {}", path.trim_start_matches("/cdn/")).into_response();
    }
    // GET /channels/{id}: a text channel whose category is 777000 for channel 300, 888000
    // otherwise.
    if parts.method == axum::http::Method::GET && path.split('/').count() == 5 {
        let id = path.rsplit('/').next().unwrap_or("1").to_owned();
        let parent = if id == "300" { "777000" } else { "888000" };
        return axum::Json(json!({
            "id": id, "type": 0, "guild_id": "9", "name": "general", "position": 0,
            "parent_id": parent, "permission_overwrites": []
        }))
        .into_response();
    }
    // Echo a message object for POST .../messages, with a fresh id.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(5000);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let channel = path.split('/').nth(4).unwrap_or("1").to_owned();
    axum::Json(json!({
        "id": id.to_string(), "channel_id": channel, "content": v["content"], "type": 0,
        "author": {"id": "900", "username": "strata-bot", "discriminator": "0", "avatar": null, "bot": true},
        "attachments": [], "embeds": [], "mentions": [], "mention_roles": [],
        "mention_everyone": false, "pinned": false, "tts": false,
        "timestamp": "2026-12-02T00:00:00+00:00", "edited_timestamp": null
    }))
    .into_response()
}

async fn fake() -> Fake {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let (push, _) = broadcast::channel(64);
    let (drop_all, _) = broadcast::channel(4);
    let (reconnect, _) = broadcast::channel(4);
    let f = Fake {
        rest: Arc::default(),
        identified: Arc::default(),
        push,
        drop_all,
        reconnect,
        resumed: Arc::default(),
        last: Arc::default(),
        port,
    };
    let app = axum::Router::new()
        .route("/", axum::routing::get(gateway))
        .fallback(rest)
        .with_state(f.clone());
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    f
}

fn message(
    id: u64,
    channel: &str,
    guild: Option<&str>,
    author: &str,
    bot: bool,
    text: &str,
    mention_me: bool,
) -> Value {
    let mut d = json!({
        "id": id.to_string(), "channel_id": channel, "content": text, "type": 0,
        "author": {"id": author, "username": format!("user-{author}"), "discriminator": "0", "avatar": null, "bot": bot},
        "attachments": [], "embeds": [], "mention_roles": [],
        "mention_everyone": false, "pinned": false, "tts": false,
        "timestamp": "2026-12-02T00:00:00+00:00", "edited_timestamp": null,
        "mentions": if mention_me {
            json!([{"id": "900", "username": "strata-bot", "discriminator": "0", "avatar": null, "bot": true, "public_flags": 0}])
        } else { json!([]) }
    });
    if let Some(g) = guild {
        d["guild_id"] = json!(g);
    }
    json!({"op": 0, "t": "MESSAGE_CREATE", "d": d})
}

struct World {
    dir_path: std::path::PathBuf,
    skills: Arc<strata_engine::skills::SkillSet>,
    fake: Fake,
    invoker: Arc<Invoker>,
    approvals: Arc<strata_engine::approval::Approvals>,
    runs: Arc<std::sync::atomic::AtomicUsize>,
    providers: BTreeMap<String, Arc<Scripted>>,
    _stop: tokio::sync::watch::Sender<bool>,
    _manager: Arc<AgentManager>,
    _dir: tempfile::TempDir,
}

/// Waits (up to 6 s) until `done` holds.
async fn eventually(mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl World {
    /// Ids of the messages the bot put both its reactions (✅ and ❌) on, in order.
    fn fully_reacted(&self) -> Vec<String> {
        let rest = self.fake.rest.lock().expect("lock");
        let mut counts: Vec<(String, usize)> = Vec::new();
        for (m, p, _) in rest.iter() {
            if m == "PUT" && p.contains("/reactions/") {
                let id = p.split('/').nth(6).unwrap_or_default().to_owned();
                match counts.iter_mut().find(|(i, _)| *i == id) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((id, 1)),
                }
            }
        }
        counts
            .into_iter()
            .filter(|(_, n)| *n >= 2)
            .map(|(i, _)| i)
            .collect()
    }

    /// The `index`-th approval request message, once the bot has reacted to it.
    async fn reacted_message(&self, index: usize) -> String {
        eventually(|| self.fully_reacted().len() > index).await;
        self.fully_reacted().swap_remove(index)
    }

    /// POSTed messages: (channel, content, replied-to message id).
    fn posted(&self) -> Vec<(String, String, Option<String>)> {
        self.fake
            .rest
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, p, _)| m == "POST" && p.ends_with("/messages"))
            .map(|(_, p, v)| {
                (
                    p.split('/').nth(4).unwrap_or_default().to_owned(),
                    v["content"].as_str().unwrap_or_default().to_owned(),
                    v["message_reference"]["message_id"]
                        .as_str()
                        .map(str::to_owned),
                )
            })
            .collect()
    }

    async fn wait_posted(&self, n: usize) -> Vec<(String, String, Option<String>)> {
        eventually(|| self.posted().len() >= n).await;
        self.posted()
    }
}

type Agents<'a> = Vec<(
    &'a str,
    DiscordRouting,
    Vec<strata_engine::llm::CompletionResponse>,
)>;

async fn world(agents: Agents<'_>) -> World {
    world_with(agents, |_| {}, None).await
}

async fn world_with(
    agents: Agents<'_>,
    tweak: impl FnOnce(&mut Config),
    vault: Option<&dyn strata_engine::secret::Vault>,
) -> World {
    let fake = fake().await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = Config::default();
    c.team.people.push(Person {
        id: "olivia".into(),
        name: "Owner Example".into(),
        access: Access::Owner,
        contacts: [("discord".to_owned(), "42".to_owned())].into(),
    });
    // Another deployment's bot the owner vouches for (so layer 1 lets it talk).
    c.team.people.push(Person {
        id: "friendly-bot".into(),
        name: "Friendly Bot".into(),
        access: Access::Owner,
        contacts: [("discord".to_owned(), "777".to_owned())].into(),
    });
    c.connectors.discord.accounts.insert(
        "main".into(),
        DiscordAccount {
            enabled: true,
            token: "env:PATH".into(), // any set variable: the fake accepts every token
            intents: None,
            presence: Some("the team".into()),
        },
    );
    c.team.people.push(Person {
        id: "sam".into(),
        name: "Staff Example".into(),
        access: Access::Staff,
        contacts: [("discord".to_owned(), "43".to_owned())].into(),
    });
    c.security.hitl.channel = Some("555".into());
    c.connectors.discord.api_proxy = Some(format!("127.0.0.1:{}", fake.port));
    c.connectors.discord.plain_http = true;
    c.connectors.discord.gateway_url = Some(format!("ws://127.0.0.1:{}", fake.port));
    tweak(&mut c);
    for (id, r, _) in &agents {
        c.agents.insert(
            (*id).into(),
            AgentConfig {
                routing: RoutingConfig {
                    discord: Some(r.clone()),
                },
                tools: Some(strata_engine::config::ToolSelection::List(vec![
                    "slow_report".into(),
                ])),
                ..Default::default()
            },
        );
    }
    let env = Arc::new(RuntimeEnv::new(
        c.clone(),
        dir.path().to_path_buf(),
        dir.path().join("data"),
    ));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    // A gated tool that counts its runs (for approvals by reaction).
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r2 = runs.clone();
    let mut spec = strata_engine::ToolSpec::new("launch", "gated", json!({"type": "object"}));
    spec.hitl = true;
    reg.register(spec, move |_, _| {
        let r = r2.clone();
        async move {
            r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(strata_engine::ToolOutput(json!("launched")))
        }
    })
    .expect("register");
    // A tool that takes a while (for the progress message).
    let slow = strata_engine::ToolSpec::new("slow_report", "slow", json!({"type": "object"}));
    reg.register(slow, |_, _| async {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        Ok(strata_engine::ToolOutput(json!("report ready")))
    })
    .expect("register");
    let audit = Arc::new(
        strata_engine::audit::JsonlAudit::open(&dir.path().join("data/audit.jsonl"))
            .expect("audit"),
    );
    let inv = Invoker::new(reg, env.clone(), audit).with_alert_sink(Arc::new(
        strata_engine::connector::ChannelAlerts::new(env.connectors().clone(), "556"),
    ));
    let approvals = Arc::new(
        strata_engine::approval::Approvals::new(
            Arc::new(strata_engine::approval::MemoryApprovalStore::default()),
            inv.policy().clone(),
        )
        .with_timeout(Duration::from_secs(c.security.hitl.timeout.max(1))),
    );
    let invoker = Arc::new(inv.with_approvals(approvals.clone()));
    let mut providers = BTreeMap::new();
    let mut list: Vec<Arc<dyn strata_engine::agent::Agent>> = Vec::new();
    for (id, _, script) in agents {
        let p = Scripted::new(script);
        providers.insert(id.to_owned(), p.clone());
        list.push(Arc::new(
            LlmAgent::new(id, "You are on Discord.", p, "m", invoker.clone())
                .with_tools(ToolFilter::List(vec!["slow_report".into()])),
        ));
    }
    let manager = Arc::new(AgentManager::new(
        list,
        Arc::new(InMemoryStore::default()),
        env.clone(),
    ));
    // The example overlay's two skills (a prompt skill and a command skill).
    std::fs::create_dir_all(dir.path().join("skills")).expect("skills dir");
    let skills = Arc::new(strata_engine::skills::SkillSet::load(vec![
        strata_engine::skills::SkillDir {
            path: dir.path().join("skills"),
            origin: "overlay".into(),
            prefix: String::new(),
        },
        strata_engine::skills::SkillDir {
            path: std::path::PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../overlay-example/skills"
            )),
            origin: "overlay".into(),
            prefix: String::new(),
        },
    ]));
    // Command skills are tools (`skill__<name>`), as `serve` registers them.
    strata_tools::skill_tools::sync(invoker.registry(), &skills);
    std::fs::create_dir_all(dir.path().join("knowledgebase")).expect("kb");
    std::fs::write(dir.path().join("knowledgebase/notes.md"), "notes\n").expect("kb file");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let dirv: Arc<dyn AgentDirectory> = manager.clone();
    strata_discord::start(
        &c,
        dir.path(),
        &dir.path().join("data"),
        vault,
        strata_discord::Services {
            directory: dirv,
            hub: env.connectors().clone(),
            approvals: Some(approvals.clone()),
            skills: Some(skills.clone()),
            activity: Some(env.activity().clone()),
            invoker: Some(invoker.clone()),
        },
        rx,
    );
    // Connected once IDENTIFY arrived and READY was sent.
    eventually(|| !fake.identified.lock().expect("lock").is_empty()).await;
    assert!(
        !fake.identified.lock().expect("lock").is_empty(),
        "the shard identified"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    World {
        dir_path: dir.path().to_path_buf(),
        skills,
        fake,
        invoker,
        approvals,
        runs,
        providers,
        _stop: stop,
        _manager: manager,
        _dir: dir,
    }
}

fn routing(channels: Option<&[&str]>) -> DiscordRouting {
    DiscordRouting {
        account: "main".into(),
        channels: channels.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_routed_answered_as_a_reply_and_long_answers_are_split() {
    let long: String = (0..150)
        .map(|i| format!("Step {i}: do the thing.\n"))
        .collect();
    let w = world(vec![
        (
            "ops",
            routing(Some(&["100"])),
            vec![text("On it."), text(&long)],
        ),
        ("helper", routing(Some(&[])), vec![text("Helper here.")]),
    ])
    .await;
    let identify = w.fake.identified.lock().expect("lock")[0].clone();
    assert_eq!(
        identify["token"].as_str().map(|t| !t.is_empty()),
        Some(true)
    );
    assert!(
        identify["intents"].as_u64().unwrap_or(0) & (1 << 15) != 0,
        "message content intent"
    );
    assert_eq!(identify["presence"]["status"], "online");
    assert_eq!(identify["presence"]["activities"][0]["name"], "the team");
    assert_eq!(
        identify["presence"]["activities"][0]["type"], 2,
        "listening"
    );

    // An exact channel beats the wildcard.
    w.fake
        .push
        .send(message(
            7001,
            "100",
            Some("9"),
            "42",
            false,
            "deploy status?",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(1).await;
    assert_eq!(
        posted,
        [("100".into(), "On it.".into(), Some("7001".into()))]
    );
    assert!(w.providers["helper"].requests().is_empty());
    let typing = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .any(|(m, p, _)| m == "POST" && p == "/api/v10/channels/100/typing");
    assert!(typing, "typing indicator while the agent worked");
    let req = &w.providers["ops"].requests()[0];
    let system = req.system.clone().unwrap_or_default();
    assert!(system.contains("sender: person:discord:42"), "{system}");
    assert!(system.contains("channel: discord:main:100"), "{system}");

    // The gateway replays the same message (resume): no second turn.
    w.fake
        .push
        .send(message(
            7001,
            "100",
            Some("9"),
            "42",
            false,
            "deploy status?",
            false,
        ))
        .expect("push");
    // Another channel goes to the wildcard agent.
    w.fake
        .push
        .send(message(7002, "200", Some("9"), "42", false, "hello", false))
        .expect("push");
    let posted = w.wait_posted(2).await;
    assert_eq!(posted.len(), 2, "{posted:?}");
    assert_eq!(
        posted[1],
        ("200".into(), "Helper here.".into(), Some("7002".into()))
    );
    assert_eq!(
        w.providers["ops"].requests().len(),
        1,
        "the replay started no turn"
    );

    // A long answer comes in parts of at most 2,000 characters, only the first a reply.
    w.fake
        .push
        .send(message(
            7003,
            "100",
            Some("9"),
            "42",
            false,
            "full runbook",
            false,
        ))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let posted = w.wait_posted(4).await;
    let parts: Vec<_> = posted[2..].to_vec();
    assert!(parts.len() >= 2, "{parts:?}");
    assert!(
        parts
            .iter()
            .all(|(c, t, _)| c == "100" && t.chars().count() <= 2000)
    );
    assert_eq!(parts[0].2.as_deref(), Some("7003"));
    assert!(parts[1..].iter().all(|(_, _, r)| r.is_none()));
    assert_eq!(
        parts.iter().map(|(_, t, _)| t.as_str()).collect::<String>(),
        long
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_own_messages_strangers_and_no_reply_get_no_answer() {
    let w = world(vec![(
        "helper",
        routing(Some(&[])),
        vec![text("NO_REPLY"), text("Hello, fellow bot.")],
    )])
    .await;
    // Its own message, another bot without a mention, a stranger (unknown sender: layer 1).
    for m in [
        message(8001, "200", Some("9"), "900", true, "I said this", false),
        message(8002, "200", Some("9"), "777", true, "bot chatter", false),
        message(8003, "200", Some("9"), "555", false, "who are you?", false),
    ] {
        w.fake.push.send(m).expect("push");
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(w.posted().is_empty(), "{:?}", w.posted());
    assert!(w.providers["helper"].requests().is_empty());
    // The owner gets NO_REPLY: nothing is posted.
    w.fake
        .push
        .send(message(
            8004,
            "200",
            Some("9"),
            "42",
            false,
            "just saying",
            false,
        ))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(w.providers["helper"].requests().len(), 1);
    assert!(w.posted().is_empty(), "{:?}", w.posted());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeating_bot_is_muted_and_the_same_reply_is_not_posted_twice() {
    let w = world(vec![(
        "helper",
        routing(Some(&[])),
        vec![text("Pong."), text("Pong."), text("Different.")],
    )])
    .await;
    // A known bot that mentions us is answered...
    w.fake
        .push
        .send(message(
            9001,
            "300",
            Some("9"),
            "777",
            true,
            "<@900> ping",
            true,
        ))
        .expect("push");
    assert_eq!(w.wait_posted(1).await.len(), 1);
    // ...the same answer to the same channel within two minutes is dropped...
    w.fake
        .push
        .send(message(
            9002,
            "300",
            Some("9"),
            "777",
            true,
            "<@900> ping",
            true,
        ))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(w.providers["helper"].requests().len(), 2, "the turn ran");
    assert_eq!(w.posted().len(), 1, "but the repeated reply was not posted");
    // ...and the third identical message mutes the bot: no turn at all.
    w.fake
        .push
        .send(message(
            9003,
            "300",
            Some("9"),
            "777",
            true,
            "<@900> PING",
            true,
        ))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(w.providers["helper"].requests().len(), 2, "muted");
    // A person in the same channel is still answered.
    w.fake
        .push
        .send(message(
            9004,
            "300",
            Some("9"),
            "42",
            false,
            "status?",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(2).await;
    assert_eq!(posted[1].1, "Different.");
}

fn reaction(message: &str, user: &str, bot: bool, emoji: &str) -> Value {
    json!({"op": 0, "t": "MESSAGE_REACTION_ADD", "d": {
        "user_id": user, "channel_id": "555", "message_id": message, "guild_id": "9",
        "emoji": {"id": null, "name": emoji}, "burst": false, "type": 0,
        "member": {"user": {"id": user, "username": format!("u{user}"), "discriminator": "0", "avatar": null, "bot": bot},
                   "roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": false, "mute": false, "flags": 0}
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_decided_by_an_approvers_reaction_only() {
    let w = world(vec![("helper", routing(Some(&[])), vec![])]).await;
    let call = |who: &str| {
        let inv = w.invoker.clone();
        let c = strata_engine::Invocation::new(
            "launch",
            json!({"password": "hunter2"}),
            strata_engine::Principal::Person { id: who.into() },
        );
        tokio::spawn(async move { inv.invoke(c).await })
    };
    let task = call("olivia");
    let posted = w.wait_posted(1).await;
    let (channel, text, _) = posted[0].clone();
    assert_eq!(channel, "555");
    assert!(
        text.contains("Approval needed") && text.contains("`launch`"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "arguments are redacted: {text}");
    // The request message got both reactions from the bot.
    let msg_id = w.reacted_message(0).await;

    // A non-approver's and a bot's ✅ change nothing.
    w.fake
        .push
        .send(reaction(&msg_id, "43", false, "✅"))
        .expect("push");
    w.fake
        .push
        .send(reaction(&msg_id, "777", true, "✅"))
        .expect("push");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!task.is_finished());
    assert_eq!(w.runs.load(std::sync::atomic::Ordering::SeqCst), 0);

    // The owner's ✅ runs it, and the outcome is posted as a reply.
    w.fake
        .push
        .send(reaction(&msg_id, "42", false, "✅"))
        .expect("push");
    let r = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("decided")
        .expect("join");
    assert_eq!(r.status, strata_engine::Status::Ok, "{r:?}");
    assert_eq!(w.runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The outcome is replied to the request, and is a security alert in the alert channel.
    let posted = w.wait_posted(3).await;
    let outcome = posted
        .iter()
        .find(|(c, t, _)| c == "555" && t.contains("approved"))
        .expect("outcome posted");
    assert!(outcome.1.contains("discord:42"), "{posted:?}");
    assert_eq!(outcome.2.as_deref(), Some(msg_id.as_str()));
    assert!(
        posted
            .iter()
            .any(|(c, t, _)| c == "556" && t.contains("security alert (approval: approved)")),
        "{posted:?}"
    );

    // ❌ denies.
    let task = call("olivia");
    let mut asked = 0;
    for _ in 0..100 {
        asked = w
            .posted()
            .iter()
            .filter(|(_, t, _)| t.contains("Approval needed"))
            .count();
        if asked == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(asked, 2);
    let msg_id = w.reacted_message(1).await;
    w.fake
        .push
        .send(reaction(&msg_id, "42", false, "❌"))
        .expect("push");
    let r = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("decided")
        .expect("join");
    assert_eq!(r.status, strata_engine::Status::ApprovalDenied, "{r:?}");
    assert_eq!(w.runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    let pending = w
        .approvals
        .store()
        .list(Some(strata_engine::approval::ApprovalStatus::Pending), 10)
        .await
        .expect("list");
    assert!(pending.is_empty());
}

struct Tokens;
impl strata_engine::secret::Vault for Tokens {
    fn get(&self, key: &str) -> Option<strata_engine::secret::Secret> {
        let v = match key {
            "discord-main" => "token-main",
            "discord-second" => "token-second",
            "discord-broken" => "token-bad",
            _ => return None,
        };
        Some(strata_engine::secret::Secret::new(v))
    }
    fn keys(&self) -> Vec<String> {
        vec![]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_accounts_answer_for_their_own_agents_and_a_bad_token_disables_only_its_account() {
    let mut second = routing(Some(&[]));
    second.account = "second".into();
    let w = world_with(
        vec![
            ("ops", routing(Some(&[])), vec![text("ops here")]),
            ("sales", second, vec![text("sales here")]),
        ],
        |c| {
            let acct = |key: &str| DiscordAccount {
                enabled: true,
                token: format!("vault:{key}"),
                intents: None,
                presence: None,
            };
            let d = &mut c.connectors.discord.accounts;
            d.insert("main".into(), acct("discord-main"));
            d.insert("second".into(), acct("discord-second"));
            d.insert("broken".into(), acct("discord-broken"));
            d.insert("missing".into(), acct("discord-nowhere"));
        },
        Some(&Tokens),
    )
    .await;
    // Three accounts identified (the one without a token never connected); the broken one
    // once, with no retry loop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ids: Vec<String> = w
        .fake
        .identified
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|d| d["token"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(
        ids.iter().filter(|t| t.contains("bad")).count(),
        1,
        "{ids:?}"
    );

    // Both working bots see the message; each answers for its own agent, with its own token.
    w.fake
        .push
        .send(message(
            6001,
            "100",
            Some("9"),
            "42",
            false,
            "anyone?",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(2).await;
    let mut texts: Vec<&str> = posted.iter().map(|(_, t, _)| t.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(texts, ["ops here", "sales here"]);
    let auths: Vec<String> = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, _)| m == "POST" && p.ends_with("/messages"))
        .filter_map(|(_, _, v)| v["_auth"].as_str().map(str::to_owned))
        .collect();
    assert!(auths.iter().any(|a| a.ends_with("token-main")), "{auths:?}");
    assert!(
        auths.iter().any(|a| a.ends_with("token-second")),
        "{auths:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_dropped_connection_the_shard_resumes_and_a_replay_starts_no_second_turn() {
    let w = world(vec![(
        "ops",
        routing(Some(&[])),
        vec![text("first"), text("second")],
    )])
    .await;
    w.fake
        .push
        .send(message(4001, "100", Some("9"), "42", false, "one", false))
        .expect("push");
    assert_eq!(w.wait_posted(1).await.len(), 1);
    // The connection drops; twilight reconnects and RESUMEs; the fake replays message 4001.
    w.fake.drop_all.send(()).expect("drop");
    eventually(|| !w.fake.resumed.lock().expect("lock").is_empty()).await;
    let resumed = w.fake.resumed.lock().expect("lock").clone();
    assert_eq!(resumed.len(), 1, "resumed once");
    assert_eq!(resumed[0]["session_id"], "fake-session");
    assert_eq!(
        w.fake.identified.lock().expect("lock").len(),
        1,
        "no new IDENTIFY"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        w.providers["ops"].requests().len(),
        1,
        "the replay started no turn"
    );
    // The resumed connection carries new messages.
    w.fake
        .push
        .send(message(4002, "100", Some("9"), "42", false, "two", false))
        .expect("push");
    let posted = w.wait_posted(2).await;
    assert_eq!(posted[1].1, "second");
    // Discord asks for a reconnect (op 7): the shard reconnects and resumes again.
    w.fake.reconnect.send(()).expect("reconnect");
    eventually(|| w.fake.resumed.lock().expect("lock").len() >= 2).await;
    assert_eq!(
        w.fake.resumed.lock().expect("lock").len(),
        2,
        "resumed after RECONNECT"
    );
    assert_eq!(w.fake.identified.lock().expect("lock").len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        w.providers["ops"].requests().len(),
        2,
        "the replay after it started no turn"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_category_routes_between_exact_channels_and_the_wildcard() {
    let mut support = routing(None);
    support.categories = vec!["777000".into()];
    let w = world(vec![
        (
            "support",
            support,
            vec![text("support here"), text("support again")],
        ),
        ("helper", routing(Some(&[])), vec![text("helper here")]),
    ])
    .await;
    for (id, channel) in [(3001, "300"), (3002, "301"), (3003, "300")] {
        w.fake
            .push
            .send(message(id, channel, Some("9"), "42", false, "help", false))
            .expect("push");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let posted = w.wait_posted(3).await;
    let got: Vec<(&str, &str)> = posted
        .iter()
        .map(|(c, t, _)| (c.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("300", "support here"),
            ("301", "helper here"),
            ("300", "support again")
        ]
    );
    // Each channel was looked up once.
    let lookups = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, _)| m == "GET" && p.starts_with("/api/v10/channels/"))
        .count();
    assert_eq!(lookups, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_land_in_the_agents_workspace_within_the_size_cap() {
    let w = world(vec![("ops", routing(Some(&[])), vec![text("got it")])]).await;
    let base = format!("http://127.0.0.1:{}/cdn", w.fake.port);
    let mut m = message(2001, "100", Some("9"), "42", false, "see attached", false);
    m["d"]["attachments"] = json!([
        {"id": "1", "filename": "report.txt", "size": 22, "url": format!("{base}/report.txt"),
         "proxy_url": format!("{base}/report.txt")},
        {"id": "2", "filename": "../../etc/passwd", "size": 22, "url": format!("{base}/passwd"),
         "proxy_url": format!("{base}/passwd")},
        {"id": "3", "filename": "huge.bin", "size": 900000000u64, "url": format!("{base}/huge"),
         "proxy_url": format!("{base}/huge")}
    ]);
    w.fake.push.send(m).expect("push");
    assert_eq!(w.wait_posted(1).await.len(), 1);
    let ws = w.dir_path.join("tmp/workspaces/ops/attachments");
    assert_eq!(
        std::fs::read_to_string(ws.join("2001-report.txt")).expect("saved"),
        "contents of report.txt"
    );
    // A hostile name stays inside the workspace.
    assert_eq!(
        std::fs::read_to_string(ws.join("2001-_.._etc_passwd")).expect("saved"),
        "contents of passwd"
    );
    let asked = w.providers["ops"].requests()[0]
        .messages
        .last()
        .map(|m| m.content.clone())
        .unwrap_or_default();
    assert!(asked.starts_with("see attached"), "{asked}");
    assert!(
        asked.contains(
            "[attachment saved: tmp/workspaces/ops/attachments/2001-report.txt (22 bytes)]"
        ),
        "{asked}"
    );
    assert!(asked.contains("[attachment huge.bin not saved"), "{asked}");
    assert!(!ws.join("2001-huge.bin").exists());
}

fn interaction(id: u64, channel: &str, user: &str, name: &str, options: Value) -> Value {
    json!({"op": 0, "t": "INTERACTION_CREATE", "d": {
        "id": id.to_string(), "application_id": "900", "type": 2, "token": format!("tok-{id}"),
        "version": 1, "attachment_size_limit": 8388608, "authorizing_integration_owners": {},
        "entitlements": [], "guild_id": "9", "channel_id": channel,
        "channel": {"id": channel, "type": 0},
        "member": {"user": {"id": user, "username": format!("u{user}"), "discriminator": "0", "avatar": null},
                   "roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": false, "mute": false,
                   "flags": 0, "permissions": "0"},
        "data": {"id": "1", "name": name, "type": 1, "options": options}
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_are_slash_commands_and_reset_and_status_work() {
    let w = world_with(
        vec![(
            "ops",
            routing(Some(&["100"])),
            vec![
                text("Here is a short briefing on backups."),
                text("remembered?"),
            ],
        )],
        |c| {
            // The example's disk-usage says `gated: false`; the operator gates it here.
            c.security.hitl.gated_tools.push("skill__*".into());
            c.security.rate_limits.tools.insert(
                "skill__*".into(),
                strata_engine::config::Limits {
                    per_minute: Some(1),
                    ..Default::default()
                },
            );
        },
        None,
    )
    .await;
    // Registered per guild: the two built-ins and both skills, options with choices.
    let mut registered = None;
    for _ in 0..100 {
        registered = w
            .fake
            .rest
            .lock()
            .expect("lock")
            .iter()
            .find(|(m, p, _)| m == "PUT" && p == "/api/v10/applications/900/guilds/9/commands")
            .map(|(_, _, v)| v.clone());
        if registered.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let registered = registered.expect("commands registered");
    let names: Vec<&str> = registered
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["reset", "status", "brief", "disk-usage"]);
    let brief = &registered[2];
    assert_eq!(brief["options"][0]["name"], "topic");
    assert_eq!(brief["options"][0]["required"], true);
    assert_eq!(brief["options"][1]["choices"][1]["value"], "long");

    let answers = |w: &World| -> Vec<(String, String)> {
        w.fake
            .rest
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, p, _)| m == "PATCH" && p.ends_with("/messages/@original"))
            .map(|(_, p, v)| {
                (
                    p.split('/').nth(5).unwrap_or_default().to_owned(),
                    v["content"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };

    let push = |i: Value| w.fake.push.send(i).expect("push");
    push(interaction(11, "100", "42", "status", json!([])));
    push(interaction(
        12,
        "100",
        "42",
        "brief",
        json!([{"name": "topic", "type": 3, "value": "backups"}]),
    ));
    push(interaction(
        13,
        "100",
        "42",
        "disk-usage",
        json!([{"name": "path", "type": 3, "value": "knowledgebase"}]),
    ));
    // The command skill is its tool, gated: the request waits in the approval channel
    // until an approver's ✅.
    let msg_id = w.reacted_message(0).await;
    let request = w
        .posted()
        .into_iter()
        .find(|(c, _, _)| c == "555")
        .map(|(_, t, _)| t)
        .unwrap_or_default();
    assert!(request.contains("`skill__disk-usage`"), "{request}");
    assert!(
        !answers(&w).iter().any(|(t, _)| t == "tok-13"),
        "nothing ran before the approval"
    );
    push(reaction(&msg_id, "42", false, "✅"));
    let mut got = Vec::new();
    for _ in 0..500 {
        got = answers(&w);
        if got.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got.sort();
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(
        got[0],
        (
            "tok-11".into(),
            "Answering here through discord:main: ops.".into()
        )
    );
    assert_eq!(
        got[1],
        (
            "tok-12".into(),
            "Here is a short briefing on backups.".into()
        )
    );
    // The command skill really ran (in the sandbox, from the overlay directory).
    assert!(
        got[2].1.starts_with("```") && got[2].1.contains("\tknowledgebase"),
        "{got:?}"
    );
    // Each interaction was acknowledged first (deferred).
    let acks = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, v)| m == "POST" && p.ends_with("/callback") && v["type"] == 5)
        .count();
    assert_eq!(acks, 3);
    // The prompt skill ran as a turn in the channel's session with the rendered prompt.
    let asked = w.providers["ops"].requests()[0]
        .messages
        .last()
        .map(|m| m.content.clone())
        .unwrap_or_default();
    assert!(
        asked.starts_with("Give me a short briefing on backups"),
        "{asked}"
    );

    // /reset forgets the channel's conversation: the next turn starts without history.
    push(interaction(14, "100", "42", "reset", json!([])));
    eventually(|| answers(&w).len() >= 4).await;
    let got = answers(&w);
    assert!(
        got.iter()
            .any(|(t, c)| t == "tok-14" && c.contains("Fresh start: ops")),
        "{got:?}"
    );
    // A stranger's /reset resets nothing.
    push(interaction(15, "100", "555", "reset", json!([])));
    eventually(|| answers(&w).len() >= 5).await;
    assert!(
        answers(&w)
            .iter()
            .any(|(t, c)| t == "tok-15" && c == "Nothing was reset.")
    );
    // A staff member may not run a command skill.
    push(interaction(
        16,
        "100",
        "43",
        "disk-usage",
        json!([{"name": "path", "type": 3, "value": "tmp"}]),
    ));
    eventually(|| answers(&w).len() >= 6).await;
    // Access control decides it, in the Invoker: staff may use only the safe tools.
    assert!(
        answers(&w)
            .iter()
            .any(|(t, c)| t == "tok-16" && c.contains("denied: denied (layer 2)")),
        "{:?}",
        answers(&w)
    );
    // The owner again within the minute: the skill's rate limit refuses before anyone is asked.
    push(interaction(
        17,
        "100",
        "42",
        "disk-usage",
        json!([{"name": "path", "type": 3, "value": "knowledgebase"}]),
    ));
    eventually(|| answers(&w).iter().any(|(t, _)| t == "tok-17")).await;
    assert!(
        answers(&w)
            .iter()
            .any(|(t, c)| t == "tok-17" && c.contains("rate_limited")),
        "{:?}",
        answers(&w)
    );
    // Each of the three calls left its audit record, with the sender as principal.
    let audit = w.dir_path.join("data/audit.jsonl");
    let records = || -> Vec<(String, String)> {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["tool"] == "skill__disk-usage" && v.get("event").is_none())
            .map(|v| {
                (
                    v["principal"].as_str().unwrap_or_default().to_owned(),
                    v["status"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    eventually(|| records().len() >= 3).await;
    assert_eq!(
        records(),
        [
            ("person:discord:42".into(), "ok".into()),
            ("person:discord:43".into(), "denied".into()),
            ("person:discord:42".into(), "rate_limited".into()),
        ]
    );
    w.fake
        .push
        .send(message(
            1501,
            "100",
            Some("9"),
            "42",
            false,
            "do you remember?",
            false,
        ))
        .expect("push");
    eventually(|| w.providers["ops"].requests().len() >= 2).await;
    let req = &w.providers["ops"].requests()[1];
    assert_eq!(
        req.messages.len(),
        1,
        "no history after /reset: {:?}",
        req.messages
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_commands_are_registered_again_when_the_skills_change() {
    let w = world_with(
        vec![("ops", routing(Some(&[])), vec![])],
        |c| c.connectors.discord.commands_resync_seconds = 1,
        None,
    )
    .await;
    let registrations = |w: &World| -> Vec<Vec<String>> {
        w.fake
            .rest
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, p, _)| m == "PUT" && p.ends_with("/guilds/9/commands"))
            .map(|(_, _, v)| {
                v.as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|c| c["name"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect()
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        registrations(&w).len(),
        1,
        "nothing changed: registered once"
    );
    std::fs::write(
        w.dir_path.join("skills/standup.yaml"),
        "name: standup\ndescription: Writes the stand-up note.\nprompt: Write today's stand-up note.\n",
    )
    .expect("skill");
    w.skills.reload();
    eventually(|| registrations(&w).len() >= 2).await;
    let regs = registrations(&w);
    assert_eq!(regs.len(), 2, "{regs:?}");
    assert!(regs[1].contains(&"standup".to_owned()), "{regs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_turn_shows_a_progress_message_naming_the_tool_then_removes_it() {
    let w = world_with(
        vec![(
            "ops",
            routing(Some(&[])),
            vec![
                strata_test_support::scripted::calls(&[("c1", "slow_report", json!({}))]),
                text("Here is the report."),
            ],
        )],
        |c| c.connectors.discord.progress_after_seconds = 1,
        None,
    )
    .await;
    w.fake
        .push
        .send(message(
            8801,
            "100",
            Some("9"),
            "42",
            false,
            "report please",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(2).await;
    assert_eq!(posted.len(), 2, "{posted:?}");
    assert_eq!(posted[0].1, "⏳ ops is working… (using `slow_report`)");
    assert_eq!(posted[1].1, "Here is the report.");
    // The progress message was deleted once the reply was there.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let deleted = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, _)| m == "DELETE" && p.starts_with("/api/v10/channels/100/messages/"))
        .count();
    assert_eq!(deleted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_named_in_a_reply_are_attached_from_the_roots_only() {
    let w = world(vec![(
        "ops",
        routing(Some(&[])),
        vec![text("Here it is.\n[attach: tmp/out/report.csv]\n[attach: config/secrets.enc]\n[attach: ../etc/passwd]")],
    )])
    .await;
    std::fs::create_dir_all(w.dir_path.join("tmp/out")).expect("dir");
    std::fs::write(w.dir_path.join("tmp/out/report.csv"), "a,b\n1,2\n").expect("file");
    std::fs::create_dir_all(w.dir_path.join("config")).expect("dir");
    std::fs::write(w.dir_path.join("config/secrets.enc"), "SECRET").expect("file");
    w.fake
        .push
        .send(message(
            5501,
            "100",
            Some("9"),
            "42",
            false,
            "the report?",
            false,
        ))
        .expect("push");
    w.wait_posted(1).await;
    let rec = w.fake.rest.lock().expect("lock").clone();
    let (_, _, v) = rec
        .iter()
        .find(|(m, p, _)| m == "POST" && p.ends_with("/messages"))
        .expect("posted");
    assert_eq!(
        v["content"],
        "Here it is.\n(could not attach config/secrets.enc)\n(could not attach ../etc/passwd)"
    );
    let files = v["_files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0]["name"], "report.csv");
    assert_eq!(files[0]["body"], "a,b\n1,2\n");
    assert!(!format!("{v}").contains("SECRET"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dms_reach_every_bound_agent_and_watched_channels_hear_bots() {
    let w = world(vec![
        (
            "ops",
            routing(Some(&["100"])),
            vec![text("ops in DM"), text("ops heard the bot")],
        ),
        ("quiet", routing(None), vec![text("quiet in DM")]),
    ])
    .await;
    // A DM (no guild) goes to both agents bound to the account.
    w.fake
        .push
        .send(message(5601, "4242", None, "42", false, "hello", false))
        .expect("push");
    let posted = w.wait_posted(2).await;
    let mut texts: Vec<&str> = posted.iter().map(|(_, t, _)| t.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(texts, ["ops in DM", "quiet in DM"]);
    // A known bot without a mention: heard in the watched channel 100, not elsewhere.
    w.fake
        .push
        .send(message(
            5602,
            "100",
            Some("9"),
            "777",
            true,
            "build finished",
            false,
        ))
        .expect("push");
    let posted = w.wait_posted(3).await;
    assert_eq!(
        posted[2],
        (
            "100".into(),
            "ops heard the bot".into(),
            Some("5602".into())
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chain_breaker_stops_bots_in_a_channel_until_a_human_writes() {
    let replies: Vec<_> = (0..4).map(|i| text(&format!("reply {i}"))).collect();
    let w = world_with(
        vec![("ops", routing(Some(&["100"])), replies)],
        |c| {
            c.connectors.discord.bot_chain_limit = 2;
            for id in ["778", "779"] {
                c.team.people.push(Person {
                    id: format!("bot-{id}"),
                    name: "Another Bot".into(),
                    access: Access::Owner,
                    contacts: [("discord".to_owned(), id.to_owned())].into(),
                });
            }
        },
        None,
    )
    .await;
    // Three different bots (no rate or repeat trouble): the third bot-triggered turn in a
    // row is refused.
    for (id, bot) in [(5701u64, "777"), (5702, "778"), (5703, "779")] {
        w.fake
            .push
            .send(message(
                id,
                "100",
                Some("9"),
                bot,
                true,
                &format!("from {bot}"),
                false,
            ))
            .expect("push");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(w.wait_posted(2).await.len(), 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(w.providers["ops"].requests().len(), 2, "the chain broke");
    // A human resets the chain; bots are heard again.
    w.fake
        .push
        .send(message(
            5704,
            "100",
            Some("9"),
            "42",
            false,
            "carry on",
            false,
        ))
        .expect("push");
    w.fake
        .push
        .send(message(
            5705,
            "100",
            Some("9"),
            "777",
            true,
            "from 777 again",
            false,
        ))
        .expect("push");
    assert_eq!(w.wait_posted(4).await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_approval_times_out_and_says_so_in_the_channel() {
    let w = world_with(
        vec![("helper", routing(Some(&[])), vec![])],
        |c| c.security.hitl.timeout = 1,
        None,
    )
    .await;
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        w.invoker.invoke(strata_engine::Invocation::new(
            "launch",
            json!({}),
            strata_engine::Principal::Person {
                id: "olivia".into(),
            },
        )),
    )
    .await
    .expect("the timeout decides");
    assert_eq!(r.status, strata_engine::Status::ApprovalDenied, "{r:?}");
    assert!(r.error.unwrap_or_default().contains("did not run"));
    assert_eq!(w.runs.load(std::sync::atomic::Ordering::SeqCst), 0);
    let posted = w.wait_posted(2).await;
    assert!(posted[0].1.contains("Approval needed"), "{posted:?}");
    assert!(
        posted
            .iter()
            .any(|(c, t, _)| c == "555" && t.contains("timeout")),
        "{posted:?}"
    );
}
