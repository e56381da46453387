//! # strata-discord
//!
//! The Discord connector on twilight 0.18: one gateway shard and one REST client per bot
//! account in `connectors.discord.accounts`, messages routed to agents by their
//! `routing.discord`, replies split at Discord's 2,000 characters on line and code-fence
//! boundaries. Both base URLs are configurable (`api_proxy`, `gateway_url`) so the real client
//! is tested against a fake Discord on 127.0.0.1.
//!
//! What this crate does today: accounts (a bad token disables that account with a clear log
//! line, the others go on), exact-channel > wildcard > DM-fallback routing with the `guilds`,
//! `users` and `mentions` filters, incoming de-duplication by message id, its own and other
//! bots' messages ignored unless the bot is mentioned, `NO_REPLY` never posted, replies split
//! and posted as replies, home channels registered for `send_to_agent`. See docs/DISCORD.md
//! for what is still to come.

pub mod approvals;
pub mod commands;
pub mod guards;
pub mod route;
pub mod split;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use strata_engine::agent::Message;
use strata_engine::agent::is_no_reply;
use strata_engine::config::{Config, DiscordConfig};
use strata_engine::connector::{
    ChannelRef, Connector, ConnectorError, ConnectorHub, InboundMessage, OutboundMessage,
};
use strata_engine::turns::{AgentDirectory, TurnRequest};
use strata_engine::{Principal, async_trait};
use tokio::sync::{mpsc, watch};
use twilight_gateway::{ConfigBuilder, Event, EventTypeFlags, Intents, Shard, ShardId, StreamExt};
use twilight_model::id::Id;

pub use route::route;
pub use split::split_message;

/// Discord's limit for one message.
pub const MAX_MESSAGE: usize = 2000;

/// What the connector works with besides its configuration.
pub struct Services {
    /// The running agents.
    pub directory: Arc<dyn AgentDirectory>,
    /// Where the accounts register (for `send_message`, `send_to_agent`, alerts).
    pub hub: Arc<ConnectorHub>,
    /// Approval requests to post to `security.hitl.channel`.
    pub approvals: Option<Arc<strata_engine::approval::Approvals>>,
    /// Skills, registered as slash commands.
    pub skills: Option<Arc<strata_engine::skills::SkillSet>>,
    /// What running turns are doing, for progress messages.
    pub activity: Option<Arc<strata_engine::turns::ActivityBoard>>,
    /// Runs command skills as their tools (`skill__<name>`) with the sender as principal;
    /// without it they are refused.
    pub invoker: Option<Arc<strata_engine::Invoker>>,
}

/// One bot account: its REST client, as a [`Connector`] (`discord:<name>`).
pub struct DiscordAccount {
    name: String,
    account: String,
    http: Arc<twilight_http::Client>,
}

impl DiscordAccount {
    /// The account's REST client under `cfg` (proxy settings applied).
    pub fn new(account: &str, token: &str, cfg: &DiscordConfig) -> Self {
        let mut b = twilight_http::Client::builder().token(token.to_owned());
        if let Some(p) = &cfg.api_proxy {
            b = b.proxy(p.clone(), cfg.plain_http);
        }
        DiscordAccount {
            name: format!("discord:{account}"),
            account: account.to_owned(),
            http: Arc::new(b.build()),
        }
    }
}

impl DiscordAccount {
    /// Checks the token with `GET /users/@me` (for `strata doctor --online` and the setup
    /// wizard): the bot's name and id, or why Discord refused.
    pub async fn check(&self) -> Result<String, ConnectorError> {
        let err = |detail: String| ConnectorError {
            connector: self.name.clone(),
            detail,
        };
        let resp = self.http.current_user().await.map_err(|e| match e.kind() {
            twilight_http::error::ErrorType::Response { status, .. } if status.get() == 401 => {
                err("Discord rejected the bot token (401)".into())
            }
            _ => err(format!("Discord did not confirm the token: {e}")),
        })?;
        let me = resp
            .model()
            .await
            .map_err(|e| err(format!("unexpected answer from /users/@me: {e}")))?;
        Ok(format!("bot `{}` ({})", me.name, me.id))
    }

    /// Like [`Connector::send`], with files attached to the first part.
    pub async fn send_with_files(
        &self,
        message: OutboundMessage,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<(), ConnectorError> {
        let err = |detail: String| ConnectorError {
            connector: self.name.clone(),
            detail,
        };
        let channel: u64 = message
            .channel_id
            .parse()
            .map_err(|_| err(format!("`{}` is not a channel id", message.channel_id)))?;
        let channel = Id::new_checked(channel).ok_or_else(|| err("channel id 0".into()))?;
        let reply_to = message
            .reply_to
            .as_deref()
            .and_then(|m| m.parse::<u64>().ok())
            .and_then(Id::new_checked);
        let attachments: Vec<twilight_model::http::attachment::Attachment> = files
            .into_iter()
            .enumerate()
            .map(|(i, (name, bytes))| {
                twilight_model::http::attachment::Attachment::from_bytes(name, bytes, i as u64)
            })
            .collect();
        for (i, part) in split_message(&message.text, MAX_MESSAGE).iter().enumerate() {
            let mut req = self.http.create_message(channel).content(part);
            if i == 0 {
                if let Some(r) = reply_to {
                    // The original may be gone: then it is a plain message.
                    req = req.reply(r).fail_if_not_exists(false);
                }
                if !attachments.is_empty() {
                    req = req.attachments(&attachments);
                }
            }
            req.await.map_err(|e| err(format!("posting failed: {e}")))?;
        }
        Ok(())
    }
}

#[async_trait]
impl Connector for DiscordAccount {
    fn name(&self) -> &str {
        &self.name
    }

    /// The gateway runs in [`run_account`]; this only waits for the stop signal.
    async fn run(
        &self,
        _inbound: mpsc::Sender<InboundMessage>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ConnectorError> {
        let _ = stop.wait_for(|s| *s).await;
        Ok(())
    }

    async fn send(&self, message: OutboundMessage) -> Result<(), ConnectorError> {
        self.send_with_files(message, Vec::new()).await
    }
}

/// Ids seen recently (the gateway replays after a resume).
struct Seen {
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

impl Seen {
    fn new() -> Self {
        Seen {
            order: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    /// True the first time `id` is offered.
    fn first(&mut self, id: u64) -> bool {
        if !self.set.insert(id) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > 4096
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

fn intents(names: Option<&[String]>) -> Intents {
    let Some(names) = names else {
        return Intents::GUILDS
            | Intents::GUILD_MESSAGES
            | Intents::DIRECT_MESSAGES
            | Intents::MESSAGE_CONTENT
            | Intents::GUILD_MESSAGE_REACTIONS;
    };
    let mut i = Intents::empty();
    for n in names {
        i |= match n.to_ascii_lowercase().as_str() {
            "guilds" => Intents::GUILDS,
            "guild_messages" => Intents::GUILD_MESSAGES,
            "direct_messages" => Intents::DIRECT_MESSAGES,
            "message_content" => Intents::MESSAGE_CONTENT,
            "guild_message_reactions" => Intents::GUILD_MESSAGE_REACTIONS,
            "direct_message_reactions" => Intents::DIRECT_MESSAGE_REACTIONS,
            "guild_members" => Intents::GUILD_MEMBERS,
            other => {
                tracing::warn!(intent = other, "unknown Discord intent ignored");
                Intents::empty()
            }
        };
    }
    i
}

/// Starts every configured account: resolves tokens, registers each account in `hub` with
/// the home channels of its agents, and runs its gateway until `stop`. An account whose token
/// cannot be resolved is skipped with a clear log line; the others go on. Returns the tasks.
///
/// With `approvals` and `security.hitl.channel` set (a channel id, or
/// `discord:<account>:<channel id>` to pick the account; a bare id uses the first account),
/// approval requests are posted there and decided by ✅/❌ reactions.
pub fn start(
    config: &Config,
    overlay_dir: &std::path::Path,
    data_dir: &std::path::Path,
    vault: Option<&dyn strata_engine::secret::Vault>,
    services: Services,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let Services {
        directory,
        hub,
        approvals,
        skills,
        activity,
        invoker: command_runner,
    } = services;

    let cfg = &config.connectors.discord;
    let progress = activity
        .filter(|_| cfg.progress_after_seconds > 0)
        .map(|b| {
            (
                b,
                std::time::Duration::from_secs(cfg.progress_after_seconds),
            )
        });
    let policy = Arc::new(strata_engine::access::AccessPolicy::from_config(config));
    let mut tasks = Vec::new();
    // Which account posts approval requests, and where.
    let hitl = config
        .security
        .hitl
        .channel
        .as_deref()
        .and_then(|c| match ChannelRef::parse(c) {
            Some(r) if r.connector.starts_with("discord:") => Some((
                r.connector.trim_start_matches("discord:").to_owned(),
                r.channel_id,
            )),
            _ => cfg
                .accounts
                .keys()
                .next()
                .map(|a| (a.clone(), c.trim().to_owned())),
        });
    for (name, acct) in &cfg.accounts {
        let key = format!("connectors.discord.accounts.{name}.token");
        let token = match strata_engine::secret::resolve_ref(&acct.token, vault, &key) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(account = %name, error = %e, "Discord account disabled");
                continue;
            }
        };
        let account = Arc::new(DiscordAccount::new(name, token.expose(), cfg));
        hub.register(account.clone());
        for (agent, a) in &config.agents {
            if let Some(r) = a.routing.discord.as_ref().filter(|r| r.account == *name)
                && let Some(home) = &r.home_channel
            {
                hub.set_home(
                    agent,
                    ChannelRef {
                        connector: account.name.clone(),
                        channel_id: home.clone(),
                    },
                );
            }
        }
        let routes: BTreeMap<String, strata_engine::config::DiscordRouting> = config
            .agents
            .iter()
            .filter_map(|(id, a)| {
                a.routing
                    .discord
                    .clone()
                    .filter(|r| r.account == *name)
                    .map(|r| (id.clone(), r))
            })
            .collect();
        let mut gw =
            ConfigBuilder::new(token.expose().to_owned(), intents(acct.intents.as_deref()));
        if let Some(u) = &cfg.gateway_url {
            gw = gw.proxy_url(u.clone());
        }
        // Presence: online, with the configured activity text ("Listening to …").
        let activities: Vec<twilight_model::gateway::presence::Activity> = acct
            .presence
            .iter()
            .map(|text| {
                twilight_model::gateway::presence::MinimalActivity {
                    kind: twilight_model::gateway::presence::ActivityType::Listening,
                    name: text.clone(),
                    url: None,
                }
                .into()
            })
            .collect();
        if let Ok(p) =
            twilight_model::gateway::payload::outgoing::update_presence::UpdatePresencePayload::new(
                activities,
                false,
                None,
                twilight_model::gateway::presence::Status::Online,
            )
        {
            gw = gw.presence(p);
        }
        let shard = Shard::with_config(ShardId::ONE, gw.build());
        let approver = match (&hitl, &approvals) {
            (Some((a, ch)), Some(ap)) if a == name => {
                match ch.parse::<u64>().ok().and_then(Id::new_checked) {
                    Some(ch) => {
                        let d = Arc::new(approvals::DiscordApprovals::new(account.clone(), ch, ap));
                        ap.add_channel(d.clone());
                        Some(d)
                    }
                    None => {
                        tracing::error!(channel = %ch, "security.hitl.channel is not a Discord channel id");
                        None
                    }
                }
            }
            _ => None,
        };
        let guards = Arc::new(Mutex::new(guards::Guards::new(
            cfg.bot_chain_limit,
            cfg.bot_chain_decay_seconds,
        )));
        let files = Arc::new(Attachments {
            overlay: overlay_dir.to_path_buf(),
            workspaces: overlay_dir.join(&config.tools.terminal.workspace),
            roots: config
                .tools
                .roots
                .iter()
                .map(|r| overlay_dir.join(r))
                .collect(),
            data_dir: data_dir.to_path_buf(),
            max_bytes: cfg.max_attachment_mb.max(1) << 20,
            client: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()
                .unwrap_or_default(),
        });
        let ctx = AccountCtx {
            account,
            files,
            routes,
            guards,
            approver,
            directory: directory.clone(),
            skills: skills.clone(),
            policy: policy.clone(),
            resync_secs: cfg.commands_resync_seconds,
            progress: progress.clone(),
            command_runner: command_runner.clone(),
        };
        tasks.push(tokio::spawn(run_account(ctx, shard, stop.clone())));
    }
    tasks
}

/// What one account's loop works with.
struct AccountCtx {
    account: Arc<DiscordAccount>,
    files: Arc<Attachments>,
    routes: BTreeMap<String, strata_engine::config::DiscordRouting>,
    guards: Arc<Mutex<guards::Guards>>,
    approver: Option<Arc<approvals::DiscordApprovals>>,
    directory: Arc<dyn AgentDirectory>,
    skills: Option<Arc<strata_engine::skills::SkillSet>>,
    policy: Arc<strata_engine::access::AccessPolicy>,
    resync_secs: u64,
    progress: Option<Progress>,
    command_runner: Option<Arc<strata_engine::Invoker>>,
}

/// The activity board and how long a turn runs before its progress message appears.
type Progress = (
    Arc<strata_engine::turns::ActivityBoard>,
    std::time::Duration,
);

/// Application id, guilds, and the JSON of the commands last registered.
type Registered = (
    Id<twilight_model::id::marker::ApplicationMarker>,
    Vec<Id<twilight_model::id::marker::GuildMarker>>,
    String,
);

/// Registers the slash commands in every guild when they differ from the last registration.
fn sync_commands(
    account: &Arc<DiscordAccount>,
    skills: Option<&strata_engine::skills::SkillSet>,
    registered: &mut Option<Registered>,
) {
    let Some((app, guilds, last)) = registered.as_mut() else {
        return;
    };
    let cmds = commands::build(&skills.map(|s| s.snapshot()).unwrap_or_default());
    let json = serde_json::to_string(&cmds).unwrap_or_default();
    if *last == json {
        return;
    }
    *last = json;
    let (http, app, guilds) = (account.http.clone(), *app, guilds.clone());
    tokio::spawn(async move {
        for g in guilds {
            match http.interaction(app).set_guild_commands(g, &cmds).await {
                Ok(_) => {
                    tracing::info!(guild = %g, commands = cmds.len(), "slash commands registered")
                }
                Err(e) => {
                    tracing::warn!(guild = %g, error = %e, "registering slash commands failed")
                }
            }
        }
    });
}

/// One account's gateway loop: events in, turns out, replies posted.
async fn run_account(ctx: AccountCtx, mut shard: Shard, mut stop: watch::Receiver<bool>) {
    let AccountCtx {
        account,
        files,
        routes,
        guards,
        approver,
        directory,
        skills,
        policy,
        resync_secs,
        progress,
        command_runner,
    } = ctx;
    let me: Arc<Mutex<Option<u64>>> = Arc::default();
    let uses_categories = routes.values().any(|r| !r.categories.is_empty());
    let mut categories = Categories::default();
    let mut seen = Seen::new();
    // (Gateway closes are always delivered.)
    let wanted = EventTypeFlags::READY
        | EventTypeFlags::MESSAGE_CREATE
        | EventTypeFlags::REACTION_ADD
        | EventTypeFlags::INTERACTION_CREATE;
    let mut registered: Option<Registered> = None;
    let mut resync = tokio::time::interval(std::time::Duration::from_secs(resync_secs.max(1)));
    loop {
        let item = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = resync.tick() => {
                // Skills changed since the last registration: register again.
                sync_commands(&account, skills.as_deref(), &mut registered);
                continue;
            }
            item = shard.next_event(wanted) => item,
        };
        let event = match item {
            None => {
                // twilight ends the stream only on a fatal close (bad token, bad intents).
                tracing::error!(account = %account.account, "Discord closed this account's gateway for good (invalid token or intents?): account disabled, the others go on");
                return;
            }
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                tracing::warn!(account = %account.account, error = %e, "Discord gateway error");
                if e.to_string().contains("4004") {
                    tracing::error!(account = %account.account, "Discord rejected the token; account disabled");
                    break;
                }
                continue;
            }
        };
        match event {
            Event::GatewayClose(frame) => {
                tracing::warn!(account = %account.account, code = frame.as_ref().map(|f| f.code), reason = frame.as_ref().map(|f| f.reason.to_string()), "Discord gateway closed");
            }
            Event::Ready(r) => {
                *me.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.user.id.get());
                // Slash commands, per guild (guild commands update at once).
                let guilds: Vec<_> = r.guilds.iter().map(|g| g.id).collect();
                registered = Some((r.application.id, guilds, String::new()));
                sync_commands(&account, skills.as_deref(), &mut registered);
                tracing::info!(account = %account.account, user = %r.user.name, "Discord account connected");
            }
            Event::InteractionCreate(i) => {
                let i = i.0;
                let Some(
                    twilight_model::application::interaction::InteractionData::ApplicationCommand(
                        data,
                    ),
                ) = i.data.clone()
                else {
                    continue;
                };
                let user = i
                    .member
                    .as_ref()
                    .and_then(|m| m.user.as_ref())
                    .or(i.user.as_ref())
                    .map(|u| u.id.to_string())
                    .unwrap_or_default();
                let channel = i
                    .channel
                    .as_ref()
                    .map(|c| c.id.to_string())
                    .unwrap_or_default();
                let msg = InboundMessage {
                    connector: account.name.clone(),
                    channel_id: channel,
                    message_id: i.id.to_string(),
                    sender_id: user,
                    sender_is_bot: false,
                    text: String::new(),
                    guild_id: i.guild_id.map(|g| g.to_string()),
                    mentions_me: true,
                };
                let agents = route(&msg, None, &routes);
                tokio::spawn(slash(
                    account.clone(),
                    policy.clone(),
                    directory.clone(),
                    (skills.clone(), command_runner.clone()),
                    agents,
                    msg,
                    (i.application_id, i.id, i.token.clone()),
                    *data,
                ));
            }
            Event::ReactionAdd(r) => {
                let Some(ap) = &approver else { continue };
                let my_id = *me.lock().unwrap_or_else(|p| p.into_inner());
                if Some(r.user_id.get()) == my_id {
                    continue;
                }
                let emoji = match &r.emoji {
                    twilight_model::channel::message::EmojiReactionType::Unicode { name } => {
                        name.clone()
                    }
                    _ => continue,
                };
                let is_bot = r.member.as_ref().is_some_and(|m| m.user.bot);
                let ap = ap.clone();
                let (msg, user) = (r.message_id.get(), r.user_id.get());
                tokio::spawn(async move {
                    ap.on_reaction(msg, user, is_bot, &emoji).await;
                });
            }
            Event::MessageCreate(m) => {
                let my_id = *me.lock().unwrap_or_else(|p| p.into_inner());
                if Some(m.author.id.get()) == my_id || !seen.first(m.id.get()) {
                    continue;
                }
                let mentions_me =
                    my_id.is_some_and(|id| m.mentions.iter().any(|u| u.id.get() == id));
                // Bots are heard when they mention us or write in a watched channel (one an
                // agent of this account lists exactly).
                let channel_s = m.channel_id.to_string();
                let watched = routes
                    .values()
                    .any(|r| r.channels.as_ref().is_some_and(|c| c.contains(&channel_s)));
                if m.author.bot && !mentions_me && !watched {
                    continue;
                }
                let found: Vec<(String, String, u64)> = m
                    .attachments
                    .iter()
                    .map(|a| (a.filename.clone(), a.url.clone(), a.size))
                    .collect();
                let msg = InboundMessage {
                    connector: account.name.clone(),
                    channel_id: m.channel_id.to_string(),
                    message_id: m.id.to_string(),
                    sender_id: m.author.id.to_string(),
                    sender_is_bot: m.author.bot,
                    text: m.content.clone(),
                    guild_id: m.guild_id.map(|g| g.to_string()),
                    mentions_me,
                };
                // The channel's category, when some agent routes by category.
                let category = match m.guild_id {
                    Some(_) if uses_categories => {
                        categories.lookup(&account.http, m.channel_id.get()).await
                    }
                    _ => None,
                };
                let agents = route(&msg, category.as_deref(), &routes);
                if agents.is_empty() {
                    continue;
                }
                let verdict = guards.lock().unwrap_or_else(|p| p.into_inner()).inbound(
                    std::time::Instant::now(),
                    &msg.channel_id,
                    &msg.sender_id,
                    msg.sender_is_bot,
                    &msg.text,
                );
                if let Err(why) = verdict {
                    tracing::info!(account = %account.account, channel = %msg.channel_id, sender = %msg.sender_id, reason = ?why, "Discord message not answered (loop guard)");
                    continue;
                }
                let files = files.clone();
                let (account, guards, directory, progress) = (
                    account.clone(),
                    guards.clone(),
                    directory.clone(),
                    progress.clone(),
                );
                tokio::spawn(async move {
                    // Attachments first (downloaded once, saved in each agent's workspace).
                    let saved = files.save(&found, &msg.message_id, &agents).await;
                    for agent in agents {
                        let mut msg = msg.clone();
                        if let Some(notes) = saved.get(&agent) {
                            for n in notes {
                                msg.text.push('\n');
                                msg.text.push_str(n);
                            }
                        }
                        tokio::spawn(answer(
                            account.clone(),
                            files.clone(),
                            guards.clone(),
                            directory.clone(),
                            progress.clone(),
                            agent,
                            msg,
                        ));
                    }
                });
            }
            _ => {}
        }
    }
    shard.close(twilight_gateway::CloseFrame::NORMAL);
}

/// Runs `agent`'s turn for `msg` and posts the reply in the channel.
#[allow(clippy::too_many_arguments)]
async fn answer(
    account: Arc<DiscordAccount>,
    files: Arc<Attachments>,
    guards: Arc<Mutex<guards::Guards>>,
    directory: Arc<dyn AgentDirectory>,
    progress: Option<Progress>,
    agent: String,
    msg: InboundMessage,
) {
    let channel = ChannelRef {
        connector: msg.connector.clone(),
        channel_id: msg.channel_id.clone(),
    };
    // "Typing…" while the agent works: once now, then every 8 s (Discord shows it ~10 s).
    let mut typing = None;
    if let Some(ch) = msg.channel_id.parse::<u64>().ok().and_then(Id::new_checked) {
        let _ = account.http.create_typing_trigger(ch).await;
        let http = account.http.clone();
        typing = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(8)).await;
                let _ = http.create_typing_trigger(ch).await;
            }
        }));
    }
    // A long turn gets a progress message naming the tools in use, edited as they change.
    let progress_msg: Arc<Mutex<Option<u64>>> = Arc::default();
    let progress_task = match (
        progress,
        msg.channel_id.parse::<u64>().ok().and_then(Id::new_checked),
    ) {
        (Some((board, after)), Some(ch)) => {
            let (http, agent, session, slot) = (
                account.http.clone(),
                agent.clone(),
                channel.session_id(),
                progress_msg.clone(),
            );
            Some(tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let text = |tools: &Option<String>| match tools {
                    Some(t) => format!("⏳ {agent} is working… (using `{t}`)"),
                    None => format!("⏳ {agent} is working…"),
                };
                let mut shown = board.get(&agent, &session);
                let Ok(resp) = http.create_message(ch).content(&text(&shown)).await else {
                    return;
                };
                let Ok(m) = resp.model().await else { return };
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(m.id.get());
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    let now = board.get(&agent, &session);
                    if now.is_some() && now != shown {
                        let _ = http
                            .update_message(ch, m.id)
                            .content(Some(&text(&now)))
                            .await;
                        shown = now;
                    }
                }
            }))
        }
        _ => None,
    };
    let reply = directory
        .run_turn(TurnRequest {
            agent_id: agent.clone(),
            session_id: channel.session_id(),
            channel_id: channel.to_string(),
            sender: Principal::Person {
                id: format!("discord:{}", msg.sender_id),
            },
            message: Message::text(msg.text.clone()),
            depth: 0,
        })
        .await;
    if let Some(t) = typing {
        t.abort();
    }
    if let Some(t) = progress_task {
        t.abort();
    }
    let shown = *progress_msg.lock().unwrap_or_else(|p| p.into_inner());
    if let (Some(m), Some(ch)) = (
        shown.and_then(Id::new_checked),
        msg.channel_id.parse::<u64>().ok().and_then(Id::new_checked),
    ) {
        let _ = account.http.delete_message(ch, m).await;
    }
    let text = match reply {
        Ok(r) if r.silent || is_no_reply(&r.text) || r.text.trim().is_empty() => return,
        Ok(r) => r.text,
        Err(strata_engine::agent::AgentError::Denied(why)) => {
            tracing::info!(agent = %agent, sender = %msg.sender_id, reason = %why, "Discord message not for this sender");
            return;
        }
        Err(e) => {
            tracing::warn!(agent = %agent, error = %e, "turn failed");
            format!("Sorry, I could not answer that ({e}).")
        }
    };
    let fresh = guards.lock().unwrap_or_else(|p| p.into_inner()).outgoing(
        std::time::Instant::now(),
        &msg.channel_id,
        &text,
    );
    if !fresh {
        tracing::info!(agent = %agent, channel = %msg.channel_id, "same reply to this channel within 120 s dropped");
        return;
    }
    let (text, files) = files.outgoing(&text).await;
    let out = OutboundMessage {
        channel_id: msg.channel_id.clone(),
        text,
        reply_to: Some(msg.message_id.clone()),
    };
    if let Err(e) = account.send_with_files(out, files).await {
        tracing::warn!(agent = %agent, error = %e, "posting the reply failed");
    }
}

/// Channel → category (parent) ids, looked up over REST once per channel.
#[derive(Default)]
struct Categories {
    known: std::collections::HashMap<u64, Option<String>>,
}

impl Categories {
    async fn lookup(&mut self, http: &twilight_http::Client, channel: u64) -> Option<String> {
        if let Some(c) = self.known.get(&channel) {
            return c.clone();
        }
        let id = Id::new_checked(channel)?;
        let parent = match http.channel(id).await {
            Ok(resp) => match resp.model().await {
                Ok(ch) => ch.parent_id.map(|p| p.to_string()),
                Err(e) => {
                    tracing::warn!(channel, error = %e, "reading a channel failed");
                    return None;
                }
            },
            Err(e) => {
                tracing::warn!(channel, error = %e, "looking up a channel failed");
                return None;
            }
        };
        if self.known.len() > 10_000 {
            self.known.clear();
        }
        self.known.insert(channel, parent.clone());
        parent
    }
}

/// Incoming attachments, saved into the agents' workspaces (`tools.terminal.workspace`), so
/// file tools and `terminal_exec` can open them.
struct Attachments {
    overlay: std::path::PathBuf,
    workspaces: std::path::PathBuf,
    /// Where reply attachments may come from (`tools.roots`), and the data dir (never).
    roots: Vec<std::path::PathBuf>,
    data_dir: std::path::PathBuf,
    max_bytes: u64,
    client: reqwest::Client,
}

/// A file name safe to write: letters, digits, `.`, `-`, `_`; no leading dot.
fn safe_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let s = s.trim_start_matches('.').to_owned();
    if s.is_empty() { "file".into() } else { s }
}

impl Attachments {
    /// Downloads each attachment (skipping those over the cap) and writes it to
    /// `<workspace>/<agent>/attachments/<message>-<name>`; returns per agent the lines to add
    /// to the message text.
    async fn save(
        &self,
        found: &[(String, String, u64)],
        message_id: &str,
        agents: &[String],
    ) -> std::collections::HashMap<String, Vec<String>> {
        let mut out: std::collections::HashMap<String, Vec<String>> = Default::default();
        for (name, url, size) in found {
            let note =
                |agent: &str,
                 text: String,
                 out: &mut std::collections::HashMap<String, Vec<String>>| {
                    out.entry(agent.to_owned()).or_default().push(text);
                };
            if *size > self.max_bytes {
                for a in agents {
                    note(
                        a,
                        format!(
                            "[attachment {name} not saved: {size} bytes is over the {} MiB limit]",
                            self.max_bytes >> 20
                        ),
                        &mut out,
                    );
                }
                continue;
            }
            let bytes = match self.fetch(url).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(file = %name, error = %e, "downloading an attachment failed");
                    for a in agents {
                        note(
                            a,
                            format!("[attachment {name} could not be downloaded]"),
                            &mut out,
                        );
                    }
                    continue;
                }
            };
            let file = format!("{message_id}-{}", safe_name(name));
            for a in agents {
                let dir = self.workspaces.join(a).join("attachments");
                let path = dir.join(&file);
                let written = tokio::fs::create_dir_all(&dir).await.is_ok()
                    && tokio::fs::write(&path, &bytes).await.is_ok();
                let shown = path
                    .strip_prefix(&self.overlay)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                if written {
                    note(
                        a,
                        format!("[attachment saved: {shown} ({} bytes)]", bytes.len()),
                        &mut out,
                    );
                } else {
                    note(
                        a,
                        format!("[attachment {name} could not be saved]"),
                        &mut out,
                    );
                }
            }
        }
        out
    }

    /// Files a reply asks to attach with lines `[attach: <path>]` (relative to the overlay,
    /// inside `tools.roots`, never secrets or the data dir; at most 10, each within the cap):
    /// returns the text without those lines (a note replaces any that could not be attached)
    /// and the files.
    async fn outgoing(&self, text: &str) -> (String, Vec<(String, Vec<u8>)>) {
        let mut kept = Vec::new();
        let mut files = Vec::new();
        for line in text.lines() {
            let t = line.trim();
            let Some(path) = t
                .strip_prefix("[attach:")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::trim)
            else {
                kept.push(line.to_owned());
                continue;
            };
            // Opened beneath its root: a symlink swapped in after the check is not followed.
            let opened = strata_engine::paths::open_guarded(
                std::path::Path::new(path),
                &self.overlay,
                &self.roots,
                std::slice::from_ref(&self.data_dir),
            );
            let loaded = match opened {
                Ok((f, p)) if files.len() < 10 => {
                    let mut f = tokio::fs::File::from_std(f);
                    match f.metadata().await {
                        Ok(m) if m.is_file() && m.len() <= self.max_bytes => {
                            let mut b = Vec::new();
                            tokio::io::AsyncReadExt::read_to_end(&mut f, &mut b)
                                .await
                                .ok()
                                .map(|_| (p, b))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            match loaded {
                Some((p, bytes)) => {
                    let name = p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .map(safe_name)
                        .unwrap_or_else(|| "file".into());
                    files.push((name, bytes));
                }
                None => kept.push(format!("(could not attach {path})")),
            }
        }
        let mut out = kept.join("\n");
        if text.ends_with('\n') {
            out.push('\n');
        }
        (out, files)
    }

    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .error_for_status()
            .map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > self.max_bytes {
                return Err("larger than announced".into());
            }
        }
        Ok(body)
    }
}

/// Answers a slash command: acknowledges it at once (Discord allows 3 s), then edits the
/// answer in when the work is done.
#[allow(clippy::too_many_arguments)]
async fn slash(
    account: Arc<DiscordAccount>,
    policy: Arc<strata_engine::access::AccessPolicy>,
    directory: Arc<dyn AgentDirectory>,
    (skills, runner): (
        Option<Arc<strata_engine::skills::SkillSet>>,
        Option<Arc<strata_engine::Invoker>>,
    ),
    agents: Vec<String>,
    msg: InboundMessage,
    (app, id, token): (
        Id<twilight_model::id::marker::ApplicationMarker>,
        Id<twilight_model::id::marker::InteractionMarker>,
        String,
    ),
    data: twilight_model::application::interaction::application_command::CommandData,
) {
    use twilight_model::http::interaction::{InteractionResponse, InteractionResponseType};
    let client = account.http.interaction(app);
    let ack = InteractionResponse {
        kind: InteractionResponseType::DeferredChannelMessageWithSource,
        data: None,
    };
    if let Err(e) = client.create_response(id, &token, &ack).await {
        tracing::warn!(error = %e, "acknowledging a slash command failed");
        return;
    }
    let session = ChannelRef {
        connector: msg.connector.clone(),
        channel_id: msg.channel_id.clone(),
    }
    .session_id();
    let sender = Principal::Person {
        id: format!("discord:{}", msg.sender_id),
    };
    let text = match data.name.as_str() {
        _ if agents.is_empty() => "No agent answers in this channel.".to_owned(),
        "status" => format!(
            "Answering here through {}: {}.",
            account.name,
            agents.join(", ")
        ),
        "reset" => {
            let mut done = Vec::new();
            for a in &agents {
                // Only people who may talk to the agent may reset it.
                if policy.may_talk(&sender, a).is_err() {
                    continue;
                }
                if directory.reset(a, &session).await.is_ok() {
                    done.push(a.clone());
                }
            }
            if done.is_empty() {
                "Nothing was reset.".to_owned()
            } else {
                format!(
                    "Fresh start: {} forgot this channel's conversation.",
                    done.join(", ")
                )
            }
        }
        name => {
            let snapshot = skills.as_ref().map(|s| s.snapshot()).unwrap_or_default();
            match commands::skill_for(&snapshot, name) {
                None => format!("There is no skill `{name}` any more."),
                Some(skill) => {
                    let given: BTreeMap<String, String> = data
                        .options
                        .iter()
                        .filter_map(|o| {
                            let pname = skill
                                .def
                                .parameters
                                .iter()
                                .map(|(n, _)| n)
                                .find(|n| commands::command_name(n) == o.name)?;
                            use twilight_model::application::interaction::application_command::CommandOptionValue as V;
                            let v = match &o.value {
                                V::String(s) => s.clone(),
                                V::Integer(i) => i.to_string(),
                                V::Number(n) => n.to_string(),
                                V::Boolean(b) => b.to_string(),
                                _ => return None,
                            };
                            Some((pname.clone(), v))
                        })
                        .collect();
                    match skill
                        .bind(&given)
                        .map(|v| skill.render(&v).into_owned_action())
                    {
                        Err(e) => e,
                        Ok(OwnedAction::Invalid(e)) => e,
                        Ok(OwnedAction::Command) => match &runner {
                            None => format!(
                                "`{}` is a command skill: run it with `strata skill run {}`.",
                                skill.name, skill.name
                            ),
                            // Its tool, as the sender: access control, rate limits, approval
                            // (here in the approval channel), audit and the sandbox apply.
                            Some(invoker) => {
                                let mut call = strata_engine::Invocation::new(
                                    strata_engine::skills::tool_name(&skill.name),
                                    skill.args_from_strings(&given),
                                    sender.clone(),
                                );
                                call.session_id = Some(session.clone());
                                call.channel_id = Some(session.clone());
                                let r = invoker.invoke(call).await;
                                match (&r.value, r.ok()) {
                                    (serde_json::Value::String(out), true)
                                        if out.trim().is_empty() =>
                                    {
                                        "Done.".to_owned()
                                    }
                                    (serde_json::Value::String(out), true) => format!(
                                        "```\n{}\n```",
                                        out.chars().take(1900).collect::<String>()
                                    ),
                                    (v, true) => v.to_string(),
                                    (_, false) => format!(
                                        "`{}` {}: {}",
                                        skill.name,
                                        r.status.as_str(),
                                        r.error.as_deref().unwrap_or("no message")
                                    ),
                                }
                            }
                        },
                        Ok(OwnedAction::Prompt(prompt)) => {
                            match directory
                                .run_turn(TurnRequest {
                                    agent_id: agents[0].clone(),
                                    session_id: session.clone(),
                                    channel_id: session.clone(),
                                    sender: sender.clone(),
                                    message: Message::text(prompt),
                                    depth: 0,
                                })
                                .await
                            {
                                Ok(r) if r.silent || is_no_reply(&r.text) => "Done.".to_owned(),
                                Ok(r) => r.text,
                                Err(e) => format!("The skill could not run: {e}"),
                            }
                        }
                    }
                }
            }
        }
    };
    let first = split_message(&text, MAX_MESSAGE)
        .into_iter()
        .next()
        .unwrap_or_default();
    if let Err(e) = client.update_response(&token).content(Some(&first)).await {
        tracing::warn!(error = %e, "answering a slash command failed");
    }
}

/// A rendered skill, owned.
enum OwnedAction {
    Prompt(String),
    Command,
    Invalid(String),
}

trait IntoOwned {
    fn into_owned_action(self) -> OwnedAction;
}

impl IntoOwned for strata_engine::skills::SkillAction<'_> {
    fn into_owned_action(self) -> OwnedAction {
        match self {
            strata_engine::skills::SkillAction::Prompt(p) => OwnedAction::Prompt(p),
            strata_engine::skills::SkillAction::Command(_) => OwnedAction::Command,
            strata_engine::skills::SkillAction::Invalid(e) => OwnedAction::Invalid(e.to_owned()),
        }
    }
}
