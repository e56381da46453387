//! Agents: something that answers a message.

use std::sync::Arc;

use async_trait::async_trait;

use crate::llm::ChatMessage;
use crate::principal::Principal;
use crate::tool::Env;

pub use crate::message::{AgentError, Message, Reply, ToolRun, is_no_reply};

/// The session a summary is made for (its model call is recorded and budgeted as the turn's
/// that led to it).
#[derive(Debug, Clone, Copy)]
pub struct Compaction<'a> {
    /// The session.
    pub session_id: &'a str,
    /// Who the turn that led to it was for.
    pub sender: &'a Principal,
    /// That turn's id.
    pub turn_id: &'a str,
    /// Shared runtime handles.
    pub env: &'a Env,
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
    /// What kind of channel it is (`TurnRequest::channel_kind`).
    pub channel_kind: Option<String>,
    /// Where the turn's progress goes (`TurnRequest::stream`).
    pub stream: Option<crate::turns::TurnSink>,
    /// The caller's narrowings beyond the agent's own (`TurnRequest::scopes`).
    pub scopes: Vec<crate::scope::Scope>,
    /// Who sent the message.
    pub sender: Principal,
    /// Shared runtime handles.
    pub env: Arc<Env>,
    /// Summary of the conversation before `history`, if it was compacted.
    pub summary: Option<String>,
    /// The conversation so far (oldest first), without the new message.
    pub history: Vec<ChatMessage>,
    /// Provider-specific session state from the previous turn (e.g. a CLI session id).
    pub provider_state: Option<serde_json::Value>,
    /// Nesting depth of inter-agent calls that led to this turn (0 for a person's message).
    pub depth: u32,
    /// The turn's taint (shared with the turn that asked for this one, if one did).
    pub taint: crate::taint::Taint,
    /// The turn's id: the stable one of its unit of work where there is one (a Discord
    /// message's), else fresh. Logs, spans and usage records carry it.
    pub turn_id: String,
}

impl TurnContext {
    /// The turn as memory backends see it.
    pub fn memory_turn(&self) -> crate::memory::MemoryTurn<'_> {
        crate::memory::MemoryTurn {
            agent_id: &self.agent_id,
            session_id: &self.session_id,
            channel_id: &self.channel_id,
            sender: &self.sender,
            taint: self
                .env
                .config
                .security
                .taint
                .tracks_memory()
                .then_some(&self.taint),
        }
    }

    /// A fresh turn with no history.
    pub fn new(
        agent_id: impl Into<String>,
        session_id: impl Into<String>,
        channel_id: impl Into<String>,
        sender: Principal,
        env: Arc<Env>,
    ) -> Self {
        TurnContext {
            agent_id: agent_id.into(),
            session_id: session_id.into(),
            channel_id: channel_id.into(),
            channel_kind: None,
            stream: None,
            scopes: Vec::new(),
            sender,
            env,
            summary: None,
            history: Vec::new(),
            provider_state: None,
            depth: 0,
            taint: crate::taint::Taint::new(),
            turn_id: uuid::Uuid::new_v4().to_string(),
        }
    }
}

/// An agent's model calls as they went (`GET /api/state`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AgentHealth {
    /// Whether the last model call succeeded.
    pub last_call_ok: bool,
    /// When it ended (RFC 3339).
    pub last_call_at: String,
    /// Its error, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Model calls made and failed since start.
    pub calls: u64,
    /// Of which failed.
    pub failures: u64,
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

    /// How its model calls have gone: the last call's outcome (`ok`, `error` with the
    /// error, when), `None` before the first call or for agents without a model.
    fn health(&self) -> Option<AgentHealth> {
        None
    }
    /// Handles one turn.
    async fn handle(&self, turn: TurnContext, input: Message) -> Result<Reply, AgentError>;

    /// Condenses a long conversation into a summary (used when a session is compacted).
    /// `None` means the agent cannot summarise; the session is then left as it is.
    async fn summarize(
        &self,
        _who: &Compaction<'_>,
        _previous: Option<&str>,
        _messages: &[ChatMessage],
    ) -> Result<Option<String>, AgentError> {
        Ok(None)
    }
}
