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

/// The running connectors by name, and the agents' home channels: what `send_message` and
/// `send_to_agent` post through. Connectors register themselves when they start; a connector
/// that routes an agent to a home channel records it with [`ConnectorHub::set_home`].
#[derive(Default)]
pub struct ConnectorHub {
    connectors:
        std::sync::RwLock<std::collections::BTreeMap<String, std::sync::Arc<dyn Connector>>>,
    homes: std::sync::RwLock<std::collections::BTreeMap<String, ChannelRef>>,
    states: std::sync::RwLock<std::collections::BTreeMap<String, ConnectorState>>,
}

/// Whether a connector is connected, as it last said (`strata status`, `GET /api/status`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ConnectorState {
    /// The connector's name.
    pub name: String,
    /// Connected; `None`: it has not said (connectors without a connection to keep, such as
    /// one that only sends).
    pub up: Option<bool>,
    /// Since when (ms since the epoch), when it has said.
    pub since_ms: Option<i64>,
    /// Times it lost its connection.
    pub reconnects: u64,
    /// Why it is not running at all (a token that could not be resolved); `None` while it
    /// runs or tries to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
}

impl std::fmt::Debug for ConnectorHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectorHub")
            .field("connectors", &self.names())
            .finish_non_exhaustive()
    }
}

impl ConnectorHub {
    /// Adds (or replaces) a connector under its name.
    pub fn register(&self, c: std::sync::Arc<dyn Connector>) {
        let mut m = self.connectors.write().unwrap_or_else(|p| p.into_inner());
        m.insert(c.name().to_owned(), c);
    }

    /// Records that connector `name` connected (`true`) or lost its connection (`false`),
    /// and counts it in the metrics.
    pub fn set_state(&self, name: &str, up: bool) {
        crate::meters::connector_state(name, up);
        let mut m = self.states.write().unwrap_or_else(|p| p.into_inner());
        let s = m.entry(name.to_owned()).or_insert_with(|| ConnectorState {
            name: name.to_owned(),
            up: None,
            since_ms: None,
            reconnects: 0,
            disabled: None,
        });
        if s.up != Some(up) {
            s.since_ms = Some(crate::clock::now_ms());
        }
        if !up && s.up == Some(true) {
            s.reconnects += 1;
        }
        s.up = Some(up);
    }

    /// Every registered connector's state, and those that reported one, by name.
    pub fn states(&self) -> Vec<ConnectorState> {
        let mut out = self
            .states
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for n in self.names() {
            out.entry(n.clone()).or_insert(ConnectorState {
                name: n,
                up: None,
                since_ms: None,
                reconnects: 0,
                disabled: None,
            });
        }
        out.into_values().collect()
    }

    /// Records that connector `name` does not run, and why (shown by `/api/state` and
    /// `/api/status`).
    pub fn set_disabled(&self, name: &str, reason: &str) {
        let mut m = self.states.write().unwrap_or_else(|p| p.into_inner());
        m.insert(
            name.to_owned(),
            ConnectorState {
                name: name.to_owned(),
                up: Some(false),
                since_ms: Some(crate::clock::now_ms()),
                reconnects: 0,
                disabled: Some(reason.to_owned()),
            },
        );
    }

    /// Connector names, sorted.
    pub fn names(&self) -> Vec<String> {
        let m = self.connectors.read().unwrap_or_else(|p| p.into_inner());
        m.keys().cloned().collect()
    }

    /// The connector called `name`.
    pub fn get(&self, name: &str) -> Option<std::sync::Arc<dyn Connector>> {
        let m = self.connectors.read().unwrap_or_else(|p| p.into_inner());
        m.get(name).cloned()
    }

    /// Records `agent`'s home channel.
    pub fn set_home(&self, agent: &str, channel: ChannelRef) {
        let mut m = self.homes.write().unwrap_or_else(|p| p.into_inner());
        m.insert(agent.to_owned(), channel);
    }

    /// `agent`'s home channel, when its connector is running.
    pub fn home(&self, agent: &str) -> Option<ChannelRef> {
        let m = self.homes.read().unwrap_or_else(|p| p.into_inner());
        m.get(agent)
            .filter(|c| self.get(&c.connector).is_some())
            .cloned()
    }

    /// Sends `text` to `to`.
    pub async fn send(
        &self,
        to: &ChannelRef,
        text: &str,
        reply_to: Option<String>,
    ) -> Result<(), ConnectorError> {
        let c = self.get(&to.connector).ok_or_else(|| ConnectorError {
            connector: to.connector.clone(),
            detail: format!(
                "no such connector is running (running: {})",
                match self.names() {
                    n if n.is_empty() => "none".to_owned(),
                    n => n.join(", "),
                }
            ),
        })?;
        c.send(OutboundMessage {
            channel_id: to.channel_id.clone(),
            text: text.to_owned(),
            reply_to,
        })
        .await
    }
}

impl ConnectorHub {
    /// The channel `s` names: `<connector>:<channel id>` for a running connector, or a bare
    /// channel id on the first running connector.
    pub fn resolve(&self, s: &str) -> Option<ChannelRef> {
        if let Some(r) = ChannelRef::parse(s)
            && self.get(&r.connector).is_some()
        {
            return Some(r);
        }
        let id = s.trim();
        if id.is_empty() || id.contains(':') {
            return None;
        }
        self.names().into_iter().next().map(|connector| ChannelRef {
            connector,
            channel_id: id.to_owned(),
        })
    }
}

/// Posts security alerts (content safety, behaviour monitor, approval outcomes, rate-limit
/// trips) to a connector channel: `security.alert_channel`. Delivery is queued on the
/// runtime; an alert raised before any connector runs is only in the audit log.
pub struct ChannelAlerts {
    hub: std::sync::Arc<ConnectorHub>,
    target: String,
}

impl ChannelAlerts {
    /// Alerts to `target` (see [`ConnectorHub::resolve`]) through `hub`.
    pub fn new(hub: std::sync::Arc<ConnectorHub>, target: impl Into<String>) -> Self {
        ChannelAlerts {
            hub,
            target: target.into(),
        }
    }
}

impl crate::audit::AlertSink for ChannelAlerts {
    fn alert(&self, a: &crate::audit::Alert) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(to) = self.hub.resolve(&self.target) else {
            return;
        };
        let mut text = format!("⚠️ security alert ({}: {}): {}", a.kind, a.rule, a.message);
        if let Some(agent) = &a.agent_id {
            text.push_str(&format!(" · agent {agent}"));
        }
        if let Some(tool) = &a.tool {
            text.push_str(&format!(" · tool `{tool}`"));
        }
        let hub = self.hub.clone();
        rt.spawn(async move {
            if let Err(e) = hub.send(&to, &text, None).await {
                tracing::warn!(error = %e, "posting a security alert failed");
            }
        });
    }
}

/// A connector lease as the store grants it: held by one instance until `ttl` after its
/// last renewal, measured by the store's clock (so the members' clocks need not agree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Counts changes of holder: a new holder sees a higher epoch than the one before.
    pub epoch: i64,
    /// The holder before this call; `None` when this instance held it already or nobody did.
    pub taken_from: Option<String>,
    /// What the holders save with their renewals (the connector's resume point), as the
    /// last one left it.
    pub state: Option<String>,
}

/// Who holds which connector across instances sharing a store (`cluster.lease_secs`): one
/// Discord gateway per bot account, taken over when its holder stops renewing.
#[async_trait]
pub trait Leases: Send + Sync {
    /// Takes `name` for `holder` when it is free or its lease has run out, or renews it when
    /// `holder` has it; `state`, when given, is saved with it. `Ok(None)`: another holds it.
    async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: std::time::Duration,
        state: Option<&str>,
    ) -> Result<Option<LeaseGrant>, crate::session::StoreError>;

    /// Gives `name` up when `holder` has it (a stopping instance), keeping its state for
    /// the next holder.
    async fn release(&self, name: &str, holder: &str) -> Result<(), crate::session::StoreError>;
}
