//! Agents: something that answers a message.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::principal::Principal;
use crate::tool::RuntimeEnv;

/// An incoming message as an agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The text.
    pub text: String,
    /// Files handed to the agent (already in its workspace).
    #[serde(default)]
    pub attachments: Vec<PathBuf>,
}

impl Message {
    /// A text message.
    pub fn text(text: impl Into<String>) -> Self {
        Message {
            text: text.into(),
            attachments: Vec::new(),
        }
    }
}

/// Where a turn happens and who asked.
#[derive(Debug, Clone)]
pub struct TurnContext {
    /// The agent handling the turn.
    pub agent_id: String,
    /// Conversation session.
    pub session_id: String,
    /// Connector channel (`cli`, a Discord channel id…).
    pub channel_id: String,
    /// Who sent the message.
    pub sender: Principal,
    /// Shared runtime handles.
    pub env: Arc<RuntimeEnv>,
}

/// An agent's answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Reply {
    /// The text to send.
    pub text: String,
    /// The agent chose not to answer (the `NO_REPLY` sentinel): stored, never sent.
    pub silent: bool,
}

/// Agent failures.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    /// The model provider failed.
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    /// Anything else, with a readable reason.
    #[error("{0}")]
    Other(String),
}

/// Something that answers messages. `LlmAgent` (the runtime issue) is the standard one; a
/// deployment may add rule-based or scripted agents.
///
/// ```
/// use strata_engine::agent::*;
///
/// struct Echo;
///
/// #[strata_engine::async_trait]
/// impl Agent for Echo {
///     fn id(&self) -> &str { "echo" }
///     async fn handle(&self, _turn: TurnContext, input: Message) -> Result<Reply, AgentError> {
///         Ok(Reply { text: input.text, silent: false })
///     }
/// }
/// ```
#[async_trait]
pub trait Agent: Send + Sync {
    /// The agent's id (key in `agents.yaml`).
    fn id(&self) -> &str;
    /// Handles one turn.
    async fn handle(&self, turn: TurnContext, input: Message) -> Result<Reply, AgentError>;
}
