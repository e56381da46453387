//! The running connectors ([`ConnectorHub`]), security alerts posted to a channel
//! ([`ChannelAlerts`]) and connector leases across instances ([`Leases`]).

use async_trait::async_trait;
use strata_engine::connector::{ChannelRef, Connector, ConnectorError, OutboundMessage};

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
        strata_engine::meters::connector_state(name, up);
        let mut m = self.states.write().unwrap_or_else(|p| p.into_inner());
        let s = m.entry(name.to_owned()).or_insert_with(|| ConnectorState {
            name: name.to_owned(),
            up: None,
            since_ms: None,
            reconnects: 0,
            disabled: None,
        });
        if s.up != Some(up) {
            s.since_ms = Some(strata_engine::clock::now_ms());
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
                since_ms: Some(strata_engine::clock::now_ms()),
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
        self.send_keyed(to, text, reply_to, None).await
    }

    /// Sends `text` to `to`, under an idempotency `key` when given: a connector that dedupes
    /// ([`Connector::dedupes_sends`]) posts nothing new for a key it has seen.
    pub async fn send_keyed(
        &self,
        to: &ChannelRef,
        text: &str,
        reply_to: Option<String>,
        key: Option<&str>,
    ) -> Result<(), ConnectorError> {
        let c = self.connector(to)?;
        let message = OutboundMessage {
            channel_id: to.channel_id.clone(),
            text: text.to_owned(),
            reply_to,
        };
        match key {
            Some(key) => c.send_keyed(message, key).await,
            None => c.send(message).await,
        }
    }

    /// Whether the connector of `to` dedupes keyed sends (false when it is not running).
    pub fn dedupes_sends(&self, to: &ChannelRef) -> bool {
        self.get(&to.connector).is_some_and(|c| c.dedupes_sends())
    }

    fn connector(&self, to: &ChannelRef) -> Result<std::sync::Arc<dyn Connector>, ConnectorError> {
        self.get(&to.connector).ok_or_else(|| ConnectorError {
            connector: to.connector.clone(),
            detail: format!(
                "no such connector is running (running: {})",
                match self.names() {
                    n if n.is_empty() => "none".to_owned(),
                    n => n.join(", "),
                }
            ),
        })
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

impl strata_engine::audit::AlertSink for ChannelAlerts {
    fn alert(&self, a: &strata_engine::audit::Alert) {
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
    ) -> Result<Option<LeaseGrant>, strata_engine::session::StoreError>;

    /// Gives `name` up when `holder` has it (a stopping instance), keeping its state for
    /// the next holder.
    async fn release(
        &self,
        name: &str,
        holder: &str,
    ) -> Result<(), strata_engine::session::StoreError>;
}
