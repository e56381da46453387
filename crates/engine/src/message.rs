//! What a turn carries in and out, as data: the incoming [`Message`], the [`Reply`] with its
//! tool runs, [`AgentError`], and the `NO_REPLY` sentinel. Below the agent trait, so the turn
//! registry and the agent directory can name them without reaching up.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::llm::{ChatMessage, Usage};

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
    /// The answer of a turn stored earlier under the same `turn_id` (a redelivered
    /// message): a connector that posted it the first time does not post it again.
    #[serde(default)]
    pub replayed: bool,
}

impl Reply {
    /// The answer of a turn stored earlier (its messages as the session keeps them): the last
    /// assistant text, silent where that was the `NO_REPLY` sentinel.
    pub fn from_stored(transcript: Vec<ChatMessage>) -> Reply {
        let text = transcript
            .iter()
            .rev()
            .find(|m| m.role == crate::llm::Role::Assistant && m.tool_calls.is_empty())
            .map(|m| m.content.clone())
            .unwrap_or_default();
        Reply {
            silent: is_no_reply(&text),
            text,
            transcript,
            replayed: true,
            ..Reply::default()
        }
    }
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
    /// A budget is reached (`block`, or `ask` declined): the sentence for the sender.
    #[error("{0}")]
    Budget(String),
    /// Anything else, with a readable reason.
    #[error("{0}")]
    Other(String),
}

/// Is this reply the `NO_REPLY` sentinel? It must open the text, optionally behind wrapper
/// punctuation (`**NO_REPLY**`, `[NO_REPLY]`, `` `NO_REPLY` ``).
pub fn is_no_reply(text: &str) -> bool {
    let t = text.trim_start();
    let t = t.trim_start_matches(|c: char| "*_`[({<\"'".contains(c));
    t.starts_with("NO_REPLY")
}
