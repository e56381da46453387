//! One account's gateway loop: READY, messages (de-duplicated, routed, guarded, answered),
//! reactions for approvals, interactions for slash commands, and registering the commands.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use strata_runtime::EnvExt;

use strata_engine::connector::InboundMessage;
use strata_engine::turns::AgentDirectory;
use tokio::sync::watch;
use twilight_gateway::{Event, EventTypeFlags, Shard, StreamExt};
use twilight_model::id::Id;

use crate::answer::{Categories, answer};
use crate::attach::Attachments;
use crate::commands::slash;
use crate::{DiscordAccount, Seen, approvals, commands, guards, route};

/// What one account's loop works with.
#[derive(Clone)]
pub(crate) struct AccountCtx {
    pub(crate) account: Arc<DiscordAccount>,
    pub(crate) files: Arc<Attachments>,
    pub(crate) routes: BTreeMap<String, strata_engine::config::DiscordRouting>,
    pub(crate) guards: Arc<Mutex<guards::Guards>>,
    pub(crate) approver: Option<Arc<approvals::DiscordApprovals>>,
    pub(crate) directory: Arc<dyn AgentDirectory>,
    pub(crate) skills: Option<Arc<strata_runtime::skills::SkillSet>>,
    pub(crate) policy: Arc<strata_engine::access::AccessPolicy>,
    pub(crate) resync_secs: u64,
    pub(crate) progress: Option<Progress>,
    pub(crate) command_runner: Option<Arc<strata_runtime::Invoker>>,
    pub(crate) skill_turns: Option<Arc<dyn strata_runtime::skills::SkillTurns>>,
    /// Where the account's connection state is kept.
    pub(crate) hub: Arc<strata_runtime::hub::ConnectorHub>,
}

/// The activity board and how long a turn runs before its progress message appears.
pub(crate) type Progress = (
    Arc<strata_runtime::turns::ActivityBoard>,
    std::time::Duration,
);

/// Application id, guilds, and the JSON of the commands last registered.
pub(crate) type Registered = (
    Id<twilight_model::id::marker::ApplicationMarker>,
    Vec<Id<twilight_model::id::marker::GuildMarker>>,
    String,
);

/// Registers the slash commands in every guild when they differ from the last registration.
pub(crate) fn sync_commands(
    account: &Arc<DiscordAccount>,
    skills: Option<&strata_runtime::skills::SkillSet>,
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

/// One account's gateway loop: events in, turns out, replies posted. With a `cursor` (the
/// account is held under a lease), each message taken moves it on; with `backfill`, the
/// messages after that resume point are fetched once the gateway is ready and taken as if
/// they had just arrived (the previous holder's gap).
pub(crate) async fn run_account(
    ctx: AccountCtx,
    mut shard: Shard,
    mut stop: watch::Receiver<bool>,
    cursor: Option<Arc<Mutex<Cursor>>>,
    mut backfill: Option<Cursor>,
    cursor_file: Option<std::path::PathBuf>,
) {
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
        skill_turns,
        hub,
    } = ctx;
    let me: Arc<Mutex<Option<u64>>> = Arc::default();
    let mut inbox = Inbox {
        uses_categories: routes.values().any(|r| !r.categories.is_empty()),
        categories: Categories::default(),
        seen: Seen::new(),
        cursor,
        cursor_file,
        account: account.clone(),
        files,
        routes: routes.clone(),
        guards,
        directory: directory.clone(),
        progress,
        goals: command_runner.as_ref().and_then(|i| i.env().goals()),
    };
    // (Gateway closes are always delivered.)
    let wanted = EventTypeFlags::READY
        | EventTypeFlags::RESUMED
        | EventTypeFlags::MESSAGE_CREATE
        | EventTypeFlags::REACTION_ADD
        | EventTypeFlags::INTERACTION_CREATE;
    let mut registered: Option<Registered> = None;
    let label = format!("discord:{}", account.account);
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
                hub.set_state(&label, false);
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
                hub.set_state(&label, false);
                tracing::warn!(account = %account.account, code = frame.as_ref().map(|f| f.code), reason = frame.as_ref().map(|f| f.reason.to_string()), "Discord gateway closed");
            }
            Event::Resumed => hub.set_state(&label, true),
            Event::Ready(r) => {
                hub.set_state(&label, true);
                *me.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.user.id.get());
                // Slash commands, per guild (guild commands update at once).
                let guilds: Vec<_> = r.guilds.iter().map(|g| g.id).collect();
                registered = Some((r.application.id, guilds, String::new()));
                sync_commands(&account, skills.as_deref(), &mut registered);
                tracing::info!(account = %account.account, user = %r.user.name, "Discord account connected");
                if let Some(from) = backfill.take() {
                    inbox.backfill(&from, &me).await;
                }
                // A holder that has taken nothing yet resumes from now.
                if let Some(c) = &inbox.cursor {
                    let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
                    if c.after == 0 {
                        c.after = Cursor::at(std::time::SystemTime::now());
                        if let Some(f) = &inbox.cursor_file {
                            save_cursor(f, &c);
                        }
                    }
                }
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
                    (skills.clone(), command_runner.clone(), skill_turns.clone()),
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
                    ap.on_reaction(msg, user, is_bot, &emoji, my_id).await;
                });
            }
            Event::MessageCreate(m) => inbox.take(m.message, &me).await,
            _ => {}
        }
    }
    shard.close(twilight_gateway::CloseFrame::NORMAL);
}

/// Where a held account's gateway has got to: the newest message id taken and the channels
/// heard from lately, saved with each lease renewal so the next holder fetches what arrived
/// in between (a new gateway session does not replay it).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Cursor {
    /// Messages after this id are not taken yet.
    pub(crate) after: u64,
    /// Channels messages came from, the latest first.
    pub(crate) channels: Vec<u64>,
}

/// The resume point kept in `path` by a process that runs the gateway without a lease (one
/// node): `None` when there is none (a first start) or it cannot be read (said in the log).
pub(crate) fn load_cursor(path: &std::path::Path) -> Option<Cursor> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "Discord resume point not read: messages that arrived while stopped are not fetched");
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "Discord resume point is not valid: messages that arrived while stopped are not fetched");
            None
        }
    }
}

/// Writes `cursor` to `path` whole (a temporary file renamed over it), so a crash leaves the
/// old point or the new one. Not synced: a point lost to a power cut only makes the next
/// start fetch messages again that were taken already, and a message's turn id answers it
/// once.
pub(crate) fn save_cursor(path: &std::path::Path, cursor: &Cursor) {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(cursor).unwrap_or_default())?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        tracing::warn!(file = %path.display(), error = %e, "Discord resume point not saved");
    }
}

/// Channels a cursor remembers.
const CURSOR_CHANNELS: usize = 32;
/// Messages fetched per channel when a new holder catches up.
const BACKFILL_PER_CHANNEL: u16 = 50;

impl Cursor {
    fn took(&mut self, id: u64, channel: u64) {
        self.after = self.after.max(id);
        self.channels.retain(|c| *c != channel);
        self.channels.insert(0, channel);
        self.channels.truncate(CURSOR_CHANNELS);
    }

    /// A resume point at `now` (a message id made from the time, as Discord makes them),
    /// for a holder that has taken nothing yet.
    pub(crate) fn at(now: std::time::SystemTime) -> u64 {
        const DISCORD_EPOCH_MS: u128 = 1_420_070_400_000;
        let ms = now
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        u64::try_from(ms.saturating_sub(DISCORD_EPOCH_MS)).unwrap_or(0) << 22
    }
}

/// What taking a message needs: de-duplication, routing, guards, the turn's answer.
struct Inbox {
    uses_categories: bool,
    categories: Categories,
    seen: Seen,
    cursor: Option<Arc<Mutex<Cursor>>>,
    /// Where a process without a lease keeps the cursor (saved as each message is taken).
    cursor_file: Option<std::path::PathBuf>,
    account: Arc<DiscordAccount>,
    files: Arc<Attachments>,
    routes: BTreeMap<String, strata_engine::config::DiscordRouting>,
    guards: Arc<Mutex<guards::Guards>>,
    directory: Arc<dyn AgentDirectory>,
    progress: Option<Progress>,
    /// Goal channels: their participants are routed there, and their turn budget replaces
    /// the bot-chain limit.
    goals: Option<Arc<strata_runtime::goal::Goals>>,
}

impl Inbox {
    /// Fetches the messages after `from` in the channels it names and those the agents list
    /// exactly, oldest first, and takes them.
    async fn backfill(&mut self, from: &Cursor, me: &Arc<Mutex<Option<u64>>>) {
        let Some(after) = Id::new_checked(from.after) else {
            return;
        };
        let mut channels: Vec<u64> = from.channels.clone();
        for r in self.routes.values() {
            for c in r.channels.iter().flatten() {
                if let Ok(c) = c.parse::<u64>()
                    && !channels.contains(&c)
                {
                    channels.push(c);
                }
            }
        }
        let mut found = Vec::new();
        for c in channels.into_iter().filter_map(Id::new_checked) {
            let got = self
                .account
                .http
                .channel_messages(c)
                .after(after)
                .limit(BACKFILL_PER_CHANNEL)
                .await;
            match got {
                Ok(resp) => match resp.models().await {
                    Ok(ms) => found.extend(ms),
                    Err(e) => {
                        tracing::warn!(channel = %c, error = %e, "missed messages not readable")
                    }
                },
                Err(e) => tracing::warn!(channel = %c, error = %e, "missed messages not fetched"),
            }
        }
        found.sort_by_key(|m| m.id.get());
        if !found.is_empty() {
            tracing::info!(account = %self.account.account, messages = found.len(), "taking the messages that arrived while no instance held the gateway");
        }
        for m in found {
            self.take(m, me).await;
        }
    }

    /// Takes one message: de-duplicated, routed, guarded, answered by each agent it reaches.
    async fn take(&mut self, m: twilight_model::channel::Message, me: &Arc<Mutex<Option<u64>>>) {
        let my_id = *me.lock().unwrap_or_else(|p| p.into_inner());
        if Some(m.author.id.get()) == my_id || !self.seen.first(m.id.get()) {
            return;
        }
        if let Some(c) = &self.cursor {
            let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
            c.took(m.id.get(), m.channel_id.get());
            if let Some(f) = &self.cursor_file {
                save_cursor(f, &c);
            }
        }
        let mentions_me = my_id.is_some_and(|id| m.mentions.iter().any(|u| u.id.get() == id));
        // A goal's channel: its agents (those this account speaks for) answer there.
        let channel_key = format!("{}:{}", self.account.name, m.channel_id);
        let goal = self
            .goals
            .as_ref()
            .and_then(|g| g.channel(&channel_key).map(|c| (g.clone(), c)));
        // Bots are heard when they mention us or write in a watched channel (one an
        // agent of this account lists exactly, or a goal's).
        let channel_s = m.channel_id.to_string();
        let watched = goal.is_some()
            || self
                .routes
                .values()
                .any(|r| r.channels.as_ref().is_some_and(|c| c.contains(&channel_s)));
        if m.author.bot && !mentions_me && !watched {
            return;
        }
        let found: Vec<(String, String, u64)> = m
            .attachments
            .iter()
            .map(|a| (a.filename.clone(), a.url.clone(), a.size))
            .collect();
        let msg = InboundMessage {
            connector: self.account.name.clone(),
            channel_id: m.channel_id.to_string(),
            message_id: m.id.to_string(),
            sender_id: m.author.id.to_string(),
            sender_is_bot: m.author.bot,
            text: m.content.clone(),
            guild_id: m.guild_id.map(|g| g.to_string()),
            mentions_me,
        };
        let mut agents = match &goal {
            Some((_, ch)) => ch
                .agents
                .iter()
                .filter(|a| self.routes.contains_key(*a))
                .cloned()
                .collect(),
            None => {
                // The channel's category, when some agent routes by category.
                let category = match m.guild_id {
                    Some(_) if self.uses_categories => {
                        self.categories
                            .lookup(&self.account.http, m.channel_id.get())
                            .await
                    }
                    _ => None,
                };
                route(&msg, category.as_deref(), &self.routes)
            }
        };
        if agents.is_empty() {
            return;
        }
        let verdict = self
            .guards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .inbound_in(
                std::time::Instant::now(),
                &msg.channel_id,
                &msg.sender_id,
                msg.sender_is_bot,
                &msg.text,
                goal.is_none(),
            );
        if let Err(why) = verdict {
            tracing::info!(account = %self.account.account, channel = %msg.channel_id, sender = %msg.sender_id, reason = ?why, "Discord message not answered (loop guard)");
            return;
        }
        if let Some((goals, ch)) = &goal {
            if !msg.sender_is_bot {
                goals.human_spoke(&channel_key);
            }
            agents.retain(|_| goals.take_turn(&channel_key));
            if agents.is_empty() {
                tracing::info!(account = %self.account.account, channel = %msg.channel_id, goal = %ch.goal, budget = ch.turn_budget, "goal channel's turn budget is spent until a person writes");
                return;
            }
        }
        let files = self.files.clone();
        let (account, guards, directory, progress) = (
            self.account.clone(),
            self.guards.clone(),
            self.directory.clone(),
            self.progress.clone(),
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
}
