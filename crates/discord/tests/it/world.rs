//! The test world: a fake Discord, real agents under a real manager, the connector started.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use strata_runtime::EnvExt;

use serde_json::json;
use strata_engine::Env;
use strata_engine::ToolFilter;
use strata_engine::config::{
    Access, AgentConfig, Config, DiscordAccount, DiscordRouting, Person, RoutingConfig,
};
use strata_engine::session::InMemoryStore;
use strata_engine::turns::AgentDirectory;
use strata_runtime::agent_loop::LlmAgent;
use strata_runtime::manager::AgentManager;
use strata_runtime::{Invoker, Registry};
use strata_test_support::scripted::Scripted;

use strata_test_support::discord::*;

pub struct World {
    pub dir_path: std::path::PathBuf,
    pub skills: Arc<strata_runtime::skills::SkillSet>,
    pub fake: Fake,
    pub invoker: Arc<Invoker>,
    pub approvals: Arc<strata_runtime::approval::Approvals>,
    pub runs: Arc<std::sync::atomic::AtomicUsize>,
    pub providers: BTreeMap<String, Arc<Scripted>>,
    pub _stop: tokio::sync::watch::Sender<bool>,
    pub _manager: Arc<AgentManager>,
    pub _dir: tempfile::TempDir,
}

/// Waits (up to 6 s) until `done` holds.
pub async fn eventually(mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl World {
    /// Ids of the messages the bot put both its reactions (✅ and ❌) on, in order.
    pub fn fully_reacted(&self) -> Vec<String> {
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
    pub async fn reacted_message(&self, index: usize) -> String {
        eventually(|| self.fully_reacted().len() > index).await;
        self.fully_reacted().swap_remove(index)
    }

    /// POSTed messages: (channel, content, replied-to message id).
    pub fn posted(&self) -> Vec<(String, String, Option<String>)> {
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

    pub async fn wait_posted(&self, n: usize) -> Vec<(String, String, Option<String>)> {
        eventually(|| self.posted().len() >= n).await;
        self.posted()
    }
}

pub type Agents<'a> = Vec<(
    &'a str,
    DiscordRouting,
    Vec<strata_engine::llm::CompletionResponse>,
)>;

pub async fn world(agents: Agents<'_>) -> World {
    world_with(agents, |_| {}, None).await
}

pub async fn world_with(
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
        budget: None,
        role: None,
        timezone: None,
    });
    // Another deployment's bot the owner vouches for (so layer 1 lets it talk).
    c.team.people.push(Person {
        id: "friendly-bot".into(),
        name: "Friendly Bot".into(),
        access: Access::Owner,
        contacts: [("discord".to_owned(), "777".to_owned())].into(),
        budget: None,
        role: None,
        timezone: None,
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
        budget: None,
        role: None,
        timezone: None,
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
    let env = Arc::new(Env::new(
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
        strata_store::JsonlAudit::open(&dir.path().join("data/audit.jsonl")).expect("audit"),
    );
    let inv = Invoker::new(reg, env.clone(), audit).with_alert_sink(Arc::new(
        strata_runtime::hub::ChannelAlerts::new(env.connectors().clone(), "556"),
    ));
    let approvals = Arc::new(
        strata_runtime::approval::Approvals::new(
            Arc::new(strata_runtime::approval::MemoryApprovalStore::default()),
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
    let skills = Arc::new(strata_runtime::skills::SkillSet::load(vec![
        strata_runtime::skills::SkillDir {
            path: dir.path().join("skills"),
            origin: "overlay".into(),
            prefix: String::new(),
        },
        strata_runtime::skills::SkillDir {
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
            skill_turns: None,
            lease: None,
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

pub fn routing(channels: Option<&[&str]>) -> DiscordRouting {
    DiscordRouting {
        account: "main".into(),
        channels: channels.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
        ..Default::default()
    }
}

pub struct Tokens;
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
