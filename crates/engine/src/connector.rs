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
}
