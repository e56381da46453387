//! Turns as a tool and a surface see them: the [`AgentDirectory`] tools reach agents
//! through, a [`TurnRequest`], and the [`TurnEvent`]s a [`TurnSink`] receives while a turn
//! runs. The runtime (`strata-runtime`) keeps the turns in progress.

use std::sync::Arc;

use async_trait::async_trait;

use crate::message::{AgentError, Message, Reply};
use crate::principal::Principal;
use crate::taint::Taint;

/// The running agents, as tools see them (`ask_agent`, `send_to_agent`, `list_capabilities`).
#[async_trait]
pub trait AgentDirectory: Send + Sync {
    /// Agent ids, sorted.
    fn agent_ids(&self) -> Vec<String>;
    /// Runs a turn (layer 1 applies).
    async fn run_turn(&self, req: TurnRequest) -> Result<Reply, AgentError>;
    /// Runs a turn nobody waits on (`send_to_agent`): where the work is shared — through
    /// the cluster's queue when there is one, whatever the turn's depth, so it outlives the
    /// instance that sent it. Elsewhere as [`Self::run_turn`].
    async fn deliver(&self, req: TurnRequest) -> Result<Reply, AgentError> {
        self.run_turn(req).await
    }
    /// `agent`'s sessions, most recently active first (where the store can list them):
    /// `send_to_agent` looks among them for the channel the agent last talked in.
    async fn recent_sessions(&self, agent_id: &str) -> Vec<String> {
        let _ = agent_id;
        Vec::new()
    }
    /// Forgets a session's conversation (`/reset`).
    async fn reset(&self, agent_id: &str, session_id: &str) -> Result<(), AgentError> {
        let _ = (agent_id, session_id);
        Err(AgentError::Other(
            "resetting sessions is not supported here".into(),
        ))
    }
}

/// What a running turn shows the people waiting on it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnEvent {
    /// Text as the model writes it (every round's, in order).
    Token {
        /// The new text.
        text: String,
    },
    /// A tool call is starting.
    ToolStart {
        /// The model's id for the call.
        id: String,
        /// The tool.
        tool: String,
    },
    /// A tool call ended.
    ToolEnd {
        /// The model's id for the call.
        id: String,
        /// The tool.
        tool: String,
        /// `ok`, `error`, `denied`, …
        status: String,
        /// How long it ran.
        elapsed_ms: f64,
    },
}

/// Where a turn's [`TurnEvent`]s go. Called from the turn's task: keep it quick (send into a
/// channel).
#[derive(Clone)]
pub struct TurnSink(Arc<dyn Fn(TurnEvent) + Send + Sync>);

impl TurnSink {
    /// A sink calling `f` for each event.
    pub fn new(f: impl Fn(TurnEvent) + Send + Sync + 'static) -> Self {
        TurnSink(Arc::new(f))
    }

    /// A sink sending into `tx` (events are dropped once the receiver is gone).
    pub fn channel(tx: tokio::sync::mpsc::UnboundedSender<TurnEvent>) -> Self {
        TurnSink::new(move |e| {
            let _ = tx.send(e);
        })
    }

    /// Passes `event` on.
    pub fn send(&self, event: TurnEvent) {
        (self.0)(event)
    }
}

impl std::fmt::Debug for TurnSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TurnSink")
    }
}

/// A turn to run.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// Agent id.
    pub agent_id: String,
    /// Session id (usually the channel id).
    pub session_id: String,
    /// Channel id.
    pub channel_id: String,
    /// What kind of channel it is, in words the model reads (`Discord direct message`,
    /// `Discord server channel #ops`); `None`: told from the channel id (`cli`, `http`, …).
    pub channel_kind: Option<String>,
    /// Where the turn's progress goes while it runs (tokens, tool calls), for a surface
    /// that shows the answer as it is written. `None`: only the reply counts. A turn the
    /// cluster's queue runs elsewhere does not stream.
    pub stream: Option<TurnSink>,
    /// Narrowings of the caller beyond the agent's own (an API token's tool scope): every
    /// tool call the turn makes carries them, so the Invoker refuses what they leave out.
    pub scopes: Vec<crate::scope::Scope>,
    /// Who sent it.
    pub sender: Principal,
    /// The message.
    pub message: Message,
    /// Inter-agent depth.
    pub depth: u32,
    /// The taint of the turn that asked for this one (`ask_agent`, `send_to_agent`): the new
    /// turn shares it. `None` for a message from a connector.
    pub taint: Option<Taint>,
    /// A stable id for this unit of work (a connector's message id, an HTTP caller's
    /// `request_id`): a turn whose id is already stored is not run again. `None`: a fresh
    /// one each time.
    pub turn_id: Option<String>,
}
