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

mod answer;
pub mod approvals;
mod attach;
pub mod commands;
mod gateway;
pub mod guards;
mod lease;
mod live;
pub mod route;
pub mod split;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use strata_runtime::EnvExt;

use strata_engine::async_trait;
use strata_engine::config::{Config, DiscordConfig};
use strata_engine::connector::{
    ChannelRef, Connector, ConnectorError, InboundMessage, OutboundMessage,
};
use strata_engine::turns::AgentDirectory;
use strata_runtime::hub::ConnectorHub;
use tokio::sync::{mpsc, watch};
use twilight_gateway::{ConfigBuilder, Intents, Shard, ShardId};
use twilight_model::id::Id;

use crate::attach::Attachments;
use crate::gateway::{AccountCtx, run_account};

pub use lease::Lease;
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
    pub approvals: Option<Arc<strata_runtime::approval::Approvals>>,
    /// Skills, registered as slash commands.
    pub skills: Option<Arc<strata_runtime::skills::SkillSet>>,
    /// What running turns are doing, for progress messages.
    pub activity: Option<Arc<strata_runtime::turns::ActivityBoard>>,
    /// Runs command skills as their tools (`skill__<name>`) with the sender as principal;
    /// without it they are refused.
    pub invoker: Option<Arc<strata_runtime::Invoker>>,
    /// Runs prompt skills with their own `tools`, `max_rounds` and `llm`; without it a
    /// prompt skill is a turn of the channel's agent as configured.
    pub skill_turns: Option<Arc<dyn strata_runtime::skills::SkillTurns>>,
    /// When several instances share the work: each account's gateway runs on the one
    /// instance holding its lease. `None`: every account's gateway runs here.
    pub lease: Option<Lease>,
}

/// One bot account: its REST client, as a [`Connector`] (`discord:<name>`).
pub struct DiscordAccount {
    name: String,
    account: String,
    http: Arc<twilight_http::Client>,
    /// The agents routed through this account (what their history tools may read).
    routes: BTreeMap<String, strata_engine::config::DiscordRouting>,
    /// The largest file posted (`connectors.discord.max_attachment_mb`).
    max_file: u64,
    /// Goal channels: a goal's agents read its channel too.
    goals: Option<Arc<strata_runtime::goal::Goals>>,
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
            routes: BTreeMap::new(),
            max_file: cfg.max_attachment_mb.max(1) << 20,
            goals: None,
        }
    }

    /// The goals whose channels this account's agents take part in.
    pub fn with_goals(mut self, goals: Option<Arc<strata_runtime::goal::Goals>>) -> Self {
        self.goals = goals;
        self
    }

    /// The agents routed through this account.
    pub fn with_routes(
        mut self,
        routes: BTreeMap<String, strata_engine::config::DiscordRouting>,
    ) -> Self {
        self.routes = routes;
        self
    }

    fn error(&self, detail: String) -> ConnectorError {
        ConnectorError {
            connector: self.name.clone(),
            detail,
        }
    }

    fn channel_id(
        &self,
        channel_id: &str,
    ) -> Result<Id<twilight_model::id::marker::ChannelMarker>, ConnectorError> {
        channel_id
            .parse::<u64>()
            .ok()
            .and_then(Id::new_checked)
            .ok_or_else(|| self.error(format!("`{channel_id}` is not a Discord channel id")))
    }

    fn message_id(
        &self,
        message_id: &str,
    ) -> Result<Id<twilight_model::id::marker::MessageMarker>, ConnectorError> {
        message_id
            .parse::<u64>()
            .ok()
            .and_then(Id::new_checked)
            .ok_or_else(|| self.error(format!("`{message_id}` is not a Discord message id")))
    }

    /// Discord's refusal in words: 403 and 404 say what they mean.
    fn refused(&self, what: &str, e: &twilight_http::Error) -> ConnectorError {
        match e.kind() {
            twilight_http::error::ErrorType::Response { status, .. } if status.get() == 403 => self
                .error(format!(
                    "{what}: the bot may not read there (403 Missing Access)"
                )),
            twilight_http::error::ErrorType::Response { status, .. } if status.get() == 404 => {
                self.error(format!("{what}: not found (404)"))
            }
            _ => self.error(format!("{what}: {e}")),
        }
    }
}

/// A Discord message as the history tools show it.
fn history_message(
    m: twilight_model::channel::Message,
) -> strata_engine::connector::HistoryMessage {
    strata_engine::connector::HistoryMessage {
        id: m.id.to_string(),
        author_id: m.author.id.to_string(),
        author: m
            .author
            .global_name
            .clone()
            .unwrap_or(m.author.name.clone()),
        author_is_bot: m.author.bot,
        text: m.content,
        timestamp: m.timestamp.iso_8601().to_string(),
        attachments: m.attachments.into_iter().map(|a| a.filename).collect(),
        reply_to: m
            .reference
            .and_then(|r| r.message_id)
            .map(|id| id.to_string()),
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
        let mut parts = split_message(&message.text, MAX_MESSAGE);
        if parts.is_empty() && !attachments.is_empty() {
            // A file on its own: a message without text.
            parts.push(String::new());
        }
        for (i, part) in parts.iter().enumerate() {
            let mut req = self.http.create_message(channel);
            if !part.is_empty() {
                req = req.content(part);
            }
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

/// The `nonce` of part `part` of a post under idempotency `key`: at most 25 characters, as
/// Discord allows — a stable 64-bit hash (FNV-1a) of the whole key, so keys that share a
/// beginning (two agents answering one message) get different nonces.
fn send_nonce(key: &str, part: usize) -> String {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{h:016x}-{part}")
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

    async fn is_group_channel(&self, channel_id: &str) -> bool {
        use twilight_model::channel::ChannelType;
        let Some(id) = channel_id.parse::<u64>().ok().and_then(Id::new_checked) else {
            return false;
        };
        match self.http.channel(id).await {
            Ok(resp) => match resp.model().await {
                Ok(ch) => !matches!(ch.kind, ChannelType::Private | ChannelType::Group),
                Err(_) => false,
            },
            // Not known to be shared: not a place for messages between agents.
            Err(_) => false,
        }
    }

    async fn send(&self, message: OutboundMessage) -> Result<(), ConnectorError> {
        self.send_with_files(message, Vec::new()).await
    }

    /// Posts each part with a `nonce` made from `key` and the part's number and
    /// `enforce_nonce`: Discord answers a post whose nonce it saw from this bot in the last
    /// few minutes with the message it made then, and makes none. (twilight's builder has no
    /// `enforce_nonce`, so the request is written here, as it writes a plain one.)
    async fn send_keyed(&self, message: OutboundMessage, key: &str) -> Result<(), ConnectorError> {
        use twilight_http::request::Request;
        use twilight_http::routing::Route;
        let channel = self.channel_id(&message.channel_id)?;
        let reply_to = message
            .reply_to
            .as_deref()
            .and_then(|m| m.parse::<u64>().ok())
            .filter(|m| *m != 0);
        for (i, part) in split_message(&message.text, MAX_MESSAGE).iter().enumerate() {
            let mut body = serde_json::json!({
                "content": part,
                "nonce": send_nonce(key, i),
                "enforce_nonce": true,
            });
            if i == 0
                && let Some(r) = reply_to
            {
                // The original may be gone: then it is a plain message.
                body["message_reference"] =
                    serde_json::json!({"message_id": r.to_string(), "fail_if_not_exists": false});
            }
            let req = Request::builder(&Route::CreateMessage {
                channel_id: channel.get(),
            })
            .json(&body)
            .build()
            .map_err(|e| self.error(format!("posting failed: {e}")))?;
            self.http
                .request::<twilight_model::channel::Message>(req)
                .await
                .map_err(|e| self.error(format!("posting failed: {e}")))?;
        }
        Ok(())
    }

    fn dedupes_sends(&self) -> bool {
        true
    }

    async fn agent_covers(&self, agent: &str, channel_id: &str) -> bool {
        let Some(r) = self.routes.get(agent) else {
            return false;
        };
        // A goal's channel, for the goal's agents.
        if let Some(ch) = self
            .goals
            .as_ref()
            .and_then(|g| g.channel(&format!("{}:{channel_id}", self.name)))
            && ch.agents.iter().any(|a| a == agent)
        {
            return true;
        }
        if r.home_channel.as_deref() == Some(channel_id)
            || r.channels
                .as_ref()
                .is_some_and(|c| c.iter().any(|c| c == channel_id))
        {
            return true;
        }
        let wildcard = r.channels.as_ref().is_some_and(Vec::is_empty);
        if !wildcard && r.categories.is_empty() {
            return false;
        }
        // A wildcard or category route covers a server channel it could answer in.
        let Ok(id) = self.channel_id(channel_id) else {
            return false;
        };
        let Ok(ch) = (match self.http.channel(id).await {
            Ok(resp) => resp.model().await.map_err(|_| ()),
            Err(_) => Err(()),
        }) else {
            return false;
        };
        let Some(guild) = ch.guild_id.map(|g| g.to_string()) else {
            return false;
        };
        if !r.guilds.is_empty() && !r.guilds.contains(&guild) {
            return false;
        }
        wildcard
            || ch
                .parent_id
                .is_some_and(|p| r.categories.contains(&p.to_string()))
    }

    async fn history(
        &self,
        channel_id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<Vec<strata_engine::connector::HistoryMessage>, ConnectorError> {
        let channel = self.channel_id(channel_id)?;
        let limit = limit.clamp(1, 100) as u16;
        let what = format!("reading channel {channel_id}");
        let resp = match before {
            Some(b) => {
                let b = self.message_id(b)?;
                self.http
                    .channel_messages(channel)
                    .before(b)
                    .limit(limit)
                    .await
            }
            None => self.http.channel_messages(channel).limit(limit).await,
        }
        .map_err(|e| self.refused(&what, &e))?;
        let messages = resp
            .models()
            .await
            .map_err(|e| self.error(format!("{what}: unexpected answer: {e}")))?;
        Ok(messages.into_iter().map(history_message).collect())
    }

    async fn message(
        &self,
        channel_id: &str,
        message_id: &str,
    ) -> Result<strata_engine::connector::HistoryMessage, ConnectorError> {
        let channel = self.channel_id(channel_id)?;
        let id = self.message_id(message_id)?;
        let what = format!("reading message {message_id} in channel {channel_id}");
        let resp = self
            .http
            .message(channel, id)
            .await
            .map_err(|e| self.refused(&what, &e))?;
        let m = resp
            .model()
            .await
            .map_err(|e| self.error(format!("{what}: unexpected answer: {e}")))?;
        Ok(history_message(m))
    }

    async fn send_file(
        &self,
        channel_id: &str,
        file_name: &str,
        bytes: Vec<u8>,
        text: Option<&str>,
    ) -> Result<(), ConnectorError> {
        if bytes.len() as u64 > self.max_file {
            return Err(self.error(format!(
                "{file_name} is {} bytes; files over {} MiB are not posted \
                 (connectors.discord.max_attachment_mb)",
                bytes.len(),
                self.max_file >> 20
            )));
        }
        self.channel_id(channel_id)?;
        self.send_with_files(
            OutboundMessage {
                channel_id: channel_id.to_owned(),
                text: text.unwrap_or_default().to_owned(),
                reply_to: None,
            },
            vec![(file_name.to_owned(), bytes)],
        )
        .await
    }

    fn max_file_bytes(&self) -> u64 {
        self.max_file
    }

    async fn create_channel(
        &self,
        name: &str,
        category: &str,
        topic: &str,
    ) -> Result<String, ConnectorError> {
        let parent = self.channel_id(category)?;
        // The category's server is the new channel's.
        let what = format!("category {category}");
        let cat = self
            .http
            .channel(parent)
            .await
            .map_err(|e| self.refused(&what, &e))?
            .model()
            .await
            .map_err(|e| self.error(format!("{what}: unexpected answer: {e}")))?;
        let guild = cat
            .guild_id
            .ok_or_else(|| self.error(format!("{what} is not in a server (goals.category)")))?;
        let made = self
            .http
            .create_guild_channel(guild, name)
            .kind(twilight_model::channel::ChannelType::GuildText)
            .parent_id(parent)
            .topic(topic)
            .await
            .map_err(|e| self.refused(&format!("a channel under {what}"), &e))?
            .model()
            .await
            .map_err(|e| self.error(format!("the new channel: unexpected answer: {e}")))?;
        Ok(made.id.to_string())
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
        skill_turns,
        lease,
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
                hub.set_disabled(&format!("discord:{name}"), &e.to_string());
                continue;
            }
        };
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
        let account = Arc::new(
            DiscordAccount::new(name, token.expose(), cfg)
                .with_routes(routes.clone())
                .with_goals(command_runner.as_ref().and_then(|i| i.env().goals())),
        );
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
            skill_turns: skill_turns.clone(),
            hub: hub.clone(),
        };
        let gw = gw.build();
        tasks.push(match &lease {
            Some(l) => tokio::spawn(lease::hold(ctx, gw, l.clone(), stop.clone())),
            None => {
                // One process runs the gateway: it keeps its resume point in the data dir and,
                // started again, fetches what arrived while it was down.
                let name: String = ctx
                    .account
                    .account
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let file = data_dir.join("discord").join(format!("{name}.cursor.json"));
                let saved = gateway::load_cursor(&file);
                let cursor = Arc::new(Mutex::new(saved.clone().unwrap_or_default()));
                tokio::spawn(run_account(
                    ctx,
                    Shard::with_config(ShardId::ONE, gw),
                    stop.clone(),
                    Some(cursor),
                    saved.filter(|c| c.after > 0),
                    Some(file),
                ))
            }
        });
    }
    tasks
}

#[cfg(test)]
mod nonce_tests {
    #[test]
    fn nonces_fit_discord_and_tell_keys_apart() {
        let a = super::send_nonce("discord:message-1:main", 0);
        let b = super::send_nonce("discord:message-1:helper", 0);
        let c = super::send_nonce("discord:message-1:main", 1);
        assert!(a.len() <= 25 && super::send_nonce("k", 99_999).len() <= 25);
        assert!(a != b && a != c && b != c);
        assert_eq!(a, super::send_nonce("discord:message-1:main", 0));
    }
}
