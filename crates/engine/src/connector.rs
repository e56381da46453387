//! Connectors: where messages come from and go to (Discord, HTTP, the terminal).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

/// A message arriving from a connector, before routing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    /// Connector name (`discord:<account>`, `cli`, `http`).
    pub connector: String,
    /// Channel id in the connector's terms.
    pub channel_id: String,
    /// Message id (for de-duplication and replies).
    pub message_id: String,
    /// Sender id in the connector's terms.
    pub sender_id: String,
    /// Sender is a bot.
    pub sender_is_bot: bool,
    /// The text.
    pub text: String,
    /// Guild (server) id, when the channel belongs to one; `None` in direct messages.
    #[serde(default)]
    pub guild_id: Option<String>,
    /// The message mentions the receiving bot.
    #[serde(default)]
    pub mentions_me: bool,
}

/// A message to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboundMessage {
    /// Channel id.
    pub channel_id: String,
    /// The text (connectors split it as their protocol requires).
    pub text: String,
    /// Message to reply to, if any.
    pub reply_to: Option<String>,
}

/// A message from a channel's history, as the history tools return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryMessage {
    /// Message id.
    pub id: String,
    /// The author's id in the connector's terms.
    pub author_id: String,
    /// The author's display name.
    pub author: String,
    /// The author is a bot.
    pub author_is_bot: bool,
    /// The text.
    pub text: String,
    /// When it was posted (RFC 3339).
    pub timestamp: String,
    /// Attached files' names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<String>,
    /// The message it replies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
}

/// How many recent messages [`Connector::search`] looks through when the connector has no
/// search of its own.
pub const SEARCH_SCAN_LIMIT: usize = 500;

/// Connector failures.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{connector}: {detail}")]
pub struct ConnectorError {
    /// Connector name.
    pub connector: String,
    /// What failed.
    pub detail: String,
}

/// A source and sink of messages. It owns its protocol's quirks (splitting, typing, dedup,
/// loop guards); the router sees clean [`InboundMessage`]s.
///
/// ```
/// use strata_engine::connector::*;
/// use tokio::sync::{mpsc, watch};
///
/// /// Prints what it is asked to send; never receives anything.
/// struct Stdout;
///
/// #[strata_engine::async_trait]
/// impl Connector for Stdout {
///     fn name(&self) -> &str { "stdout" }
///     async fn run(&self, _tx: mpsc::Sender<InboundMessage>, mut stop: watch::Receiver<bool>) -> Result<(), ConnectorError> {
///         let _ = stop.wait_for(|s| *s).await;
///         Ok(())
///     }
///     async fn send(&self, msg: OutboundMessage) -> Result<(), ConnectorError> {
///         println!("{}", msg.text);
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait Connector: Send + Sync {
    /// Name for routing and logs.
    fn name(&self) -> &str;
    /// Feeds inbound messages into `inbound` until `stop` turns true.
    async fn run(
        &self,
        inbound: mpsc::Sender<InboundMessage>,
        stop: watch::Receiver<bool>,
    ) -> Result<(), ConnectorError>;
    /// Sends one message.
    async fn send(&self, message: OutboundMessage) -> Result<(), ConnectorError>;
    /// Sends one message so that sending it again under the same `key` posts nothing new,
    /// where the protocol dedupes (Discord: the message `nonce` with `enforce_nonce`). The
    /// default sends it plainly: override it together with [`Self::dedupes_sends`].
    async fn send_keyed(&self, message: OutboundMessage, key: &str) -> Result<(), ConnectorError> {
        let _ = key;
        self.send(message).await
    }
    /// Whether [`Self::send_keyed`] dedupes by its key. A tool that posts through a connector
    /// that does not refuses to post again when a resumed turn runs its call a second time
    /// (the first post may have gone out): at most once instead of exactly once.
    fn dedupes_sends(&self) -> bool {
        false
    }
    /// Whether `channel_id` is a channel a group reads (not one person's direct messages):
    /// where a message between agents may be posted. The default says yes.
    async fn is_group_channel(&self, channel_id: &str) -> bool {
        let _ = channel_id;
        true
    }

    /// Whether `agent`'s routing on this connector covers `channel_id` (it answers there, or
    /// it is its home channel): the channels its history tools may read. The default: none.
    async fn agent_covers(&self, agent: &str, channel_id: &str) -> bool {
        let _ = (agent, channel_id);
        false
    }

    /// Up to `limit` messages of `channel_id` (newest first), before message `before` when
    /// given. The default: this connector keeps no history.
    async fn history(
        &self,
        channel_id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<Vec<HistoryMessage>, ConnectorError> {
        let _ = (channel_id, limit, before);
        Err(self.unsupported("reading a channel's history"))
    }

    /// One message of `channel_id`.
    async fn message(
        &self,
        channel_id: &str,
        message_id: &str,
    ) -> Result<HistoryMessage, ConnectorError> {
        let _ = (channel_id, message_id);
        Err(self.unsupported("reading a message"))
    }

    /// Up to `limit` messages of `channel_id` containing `query` (any case), newest first. The
    /// default looks through the [`SEARCH_SCAN_LIMIT`] most recent messages with
    /// [`Connector::history`]; `scanned` says how many it saw.
    async fn search(
        &self,
        channel_id: &str,
        query: &str,
        limit: usize,
    ) -> Result<SearchResult, ConnectorError> {
        let needle = query.to_lowercase();
        let mut found = Vec::new();
        let (mut scanned, mut before) = (0usize, None::<String>);
        while scanned < SEARCH_SCAN_LIMIT && found.len() < limit {
            let asked = 100.min(SEARCH_SCAN_LIMIT - scanned);
            let page = self.history(channel_id, asked, before.as_deref()).await?;
            let Some(last) = page.last() else { break };
            before = Some(last.id.clone());
            scanned += page.len();
            // A short page is the channel's beginning.
            let full = page.len() >= asked;
            found.extend(
                page.into_iter()
                    .filter(|m| m.text.to_lowercase().contains(&needle)),
            );
            if !full {
                break;
            }
        }
        found.truncate(limit);
        Ok(SearchResult {
            messages: found,
            scanned,
        })
    }

    /// Posts `bytes` as a file named `file_name` in `channel_id`, with `text` when given.
    async fn send_file(
        &self,
        channel_id: &str,
        file_name: &str,
        bytes: Vec<u8>,
        text: Option<&str>,
    ) -> Result<(), ConnectorError> {
        let _ = (channel_id, file_name, bytes, text);
        Err(self.unsupported("posting files"))
    }

    /// Makes a text channel `name` under `category` (a Discord category id) with `topic`;
    /// its id. The default: this connector cannot.
    async fn create_channel(
        &self,
        name: &str,
        category: &str,
        topic: &str,
    ) -> Result<String, ConnectorError> {
        let _ = (name, category, topic);
        Err(self.unsupported("making channels"))
    }

    /// The largest file [`Connector::send_file`] takes, in bytes.
    fn max_file_bytes(&self) -> u64 {
        10 << 20
    }

    /// The error for an operation this connector does not offer.
    fn unsupported(&self, what: &str) -> ConnectorError {
        ConnectorError {
            connector: self.name().to_owned(),
            detail: format!("{what} is not something this connector can do"),
        }
    }
}

/// What [`Connector::search`] found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// The matching messages, newest first.
    pub messages: Vec<HistoryMessage>,
    /// How many messages were looked through.
    pub scanned: usize,
}

/// A channel of a connector: `<connector>:<channel id>` in text (the connector name may hold
/// colons itself, as `discord:<account>` does; the channel id is what follows the last one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelRef {
    /// Connector name.
    pub connector: String,
    /// Channel id in the connector's terms.
    pub channel_id: String,
}

impl ChannelRef {
    /// Parses `<connector>:<channel id>`.
    pub fn parse(s: &str) -> Option<ChannelRef> {
        let (c, ch) = s.trim().rsplit_once(':')?;
        (!c.is_empty() && !ch.is_empty()).then(|| ChannelRef {
            connector: c.to_owned(),
            channel_id: ch.to_owned(),
        })
    }

    /// The session a channel's conversation is kept under (the same for every agent).
    pub fn session_id(&self) -> String {
        self.to_string()
    }
}

impl std::fmt::Display for ChannelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.connector, self.channel_id)
    }
}
