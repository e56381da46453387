//! `connectors.*` (the Discord accounts and their guards) and `agents.<id>.routing`.
//! `docs/DISCORD.md` has every key with its default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `connectors.*`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectorsConfig {
    /// Discord bot accounts.
    pub discord: DiscordConfig,
}

/// `connectors.discord.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordConfig {
    /// Bot accounts by name (`discord:<name>` is the connector's name).
    pub accounts: BTreeMap<String, DiscordAccount>,
    /// REST base, for tests and proxies (`host:port` served over plain HTTP when
    /// `plain_http`); unset = Discord.
    pub api_proxy: Option<String>,
    /// Gateway base URL (`ws://…`) for tests and proxies; unset = Discord.
    pub gateway_url: Option<String>,
    /// Talk plain HTTP to `api_proxy` (tests only).
    pub plain_http: bool,
    /// Consecutive bot-triggered turns in a channel without a human before the channel stops
    /// answering bots.
    pub bot_chain_limit: u32,
    /// Seconds after which the chain counter heals.
    pub bot_chain_decay_seconds: u64,
    /// Largest incoming attachment saved into the agent's workspace, MiB.
    pub max_attachment_mb: u64,
    /// Seconds between checks whether the skills changed (slash commands re-registered).
    pub commands_resync_seconds: u64,
    /// Seconds of a turn before a progress message appears (edited as tools change,
    /// removed when the reply is posted); 0 = never.
    pub progress_after_seconds: u64,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        DiscordConfig {
            accounts: BTreeMap::new(),
            api_proxy: None,
            gateway_url: None,
            plain_http: false,
            bot_chain_limit: 12,
            bot_chain_decay_seconds: 300,
            max_attachment_mb: 8,
            commands_resync_seconds: 30,
            progress_after_seconds: 15,
        }
    }
}

/// `connectors.discord.accounts.<name>`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscordAccount {
    /// `false` leaves the account out of this process (e.g. the main bot in the ops
    /// profile). Default `true`.
    #[serde(default = "super::yes", skip_serializing_if = "super::is_true")]
    pub enabled: bool,
    /// The bot token: `vault:<key>` or `env:<VAR>`.
    pub token: String,
    /// Gateway intents by name (default: guilds, guild_messages, direct_messages,
    /// message_content, guild_message_reactions).
    #[serde(default)]
    pub intents: Option<Vec<String>>,
    /// Presence text shown as "Listening to `<text>`" (unset: just online).
    #[serde(default)]
    pub presence: Option<String>,
}

/// `agents.<id>.routing`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RoutingConfig {
    /// Where the agent listens on Discord.
    pub discord: Option<DiscordRouting>,
}

/// `agents.<id>.routing.discord`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordRouting {
    /// The bot account (required).
    pub account: String,
    /// Channel ids the agent answers in; empty list = every channel the bot sees (wildcard);
    /// unset = none (DMs only).
    pub channels: Option<Vec<String>>,
    /// Category ids whose channels the agent answers in.
    pub categories: Vec<String>,
    /// Only these guilds (empty = any).
    pub guilds: Vec<String>,
    /// Answer only DMs and messages that mention the bot.
    pub mentions: bool,
    /// Only these user ids (empty = anyone).
    pub users: Vec<String>,
    /// Channel for inter-agent deliveries (`send_to_agent`).
    pub home_channel: Option<String>,
}
