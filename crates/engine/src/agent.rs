//! Agents: something that answers a message.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::llm::{ChatMessage, Usage};
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
    /// Summary of the conversation before `history`, if it was compacted.
    pub summary: Option<String>,
    /// The conversation so far (oldest first), without the new message.
    pub history: Vec<ChatMessage>,
    /// Provider-specific session state from the previous turn (e.g. a CLI session id).
    pub provider_state: Option<serde_json::Value>,
    /// Nesting depth of inter-agent calls that led to this turn (0 for a person's message).
    pub depth: u32,
}

impl TurnContext {
    /// A fresh turn with no history.
    pub fn new(
        agent_id: impl Into<String>,
        session_id: impl Into<String>,
        channel_id: impl Into<String>,
        sender: Principal,
        env: Arc<RuntimeEnv>,
    ) -> Self {
        TurnContext {
            agent_id: agent_id.into(),
            session_id: session_id.into(),
            channel_id: channel_id.into(),
            sender,
            env,
            summary: None,
            history: Vec::new(),
            provider_state: None,
            depth: 0,
        }
    }
}

/// An agent's answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Reply {
    /// The text to send.
    pub text: String,
    /// The agent chose not to answer (the `NO_REPLY` sentinel): stored, never sent.
    pub silent: bool,
    /// Messages this turn adds to the session: the user's message, assistant tool calls, tool
    /// results and the final answer. The session manager stores them.
    #[serde(default)]
    pub transcript: Vec<ChatMessage>,
    /// Provider session state to keep for the next turn.
    #[serde(default)]
    pub provider_state: Option<serde_json::Value>,
    /// Tokens used over every round of the turn.
    #[serde(default)]
    pub usage: Usage,
    /// Model calls made.
    #[serde(default)]
    pub rounds: u32,
    /// Tool calls made, in order.
    #[serde(default)]
    pub tool_runs: Vec<ToolRun>,
}

/// One tool call of a turn, for the session's tool log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRun {
    /// Tool name.
    pub tool: String,
    /// Outcome (`ok`, `error`, …).
    pub status: String,
    /// Milliseconds.
    pub elapsed_ms: f64,
    /// Request id (joins the audit log).
    pub request_id: String,
}

impl Reply {
    /// A plain text reply with no transcript (scripted agents).
    pub fn text(text: impl Into<String>) -> Self {
        Reply {
            text: text.into(),
            ..Reply::default()
        }
    }
}

/// Agent failures.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    /// The model provider failed.
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    /// Access control (layer 1) refused: this sender may not talk to this agent.
    #[error("{0}")]
    Denied(String),
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
///         Ok(Reply::text(input.text))
///     }
/// }
/// ```
#[async_trait]
pub trait Agent: Send + Sync {
    /// The agent's id (key in `agents.yaml`).
    fn id(&self) -> &str;

    /// The model provider behind it, for status pages (`openai`, `claude-code`…).
    fn provider(&self) -> Option<&str> {
        None
    }
    /// Handles one turn.
    async fn handle(&self, turn: TurnContext, input: Message) -> Result<Reply, AgentError>;

    /// Condenses a long conversation into a summary (used when a session is compacted).
    /// `None` means the agent cannot summarise; the session is then left as it is.
    async fn summarize(
        &self,
        _previous: Option<&str>,
        _messages: &[ChatMessage],
    ) -> Result<Option<String>, AgentError> {
        Ok(None)
    }
}

/// Is this reply the `NO_REPLY` sentinel? It must open the text, optionally behind wrapper
/// punctuation (`**NO_REPLY**`, `[NO_REPLY]`, `` `NO_REPLY` ``).
pub fn is_no_reply(text: &str) -> bool {
    let t = text.trim_start();
    let t = t.trim_start_matches(|c: char| "*_`[({<\"'".contains(c));
    t.starts_with("NO_REPLY")
}
