//! The model side: one request/response exchange, tool calls included.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::spec::ToolSpec;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The person (or agent) talking to the agent.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

impl Role {
    /// The lower-case name (`user`, `assistant`, …), as most vendors spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id; tool results refer to it.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments object.
    pub arguments: Value,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Speaker.
    pub role: Role,
    /// Text (may be empty for a pure tool-call turn).
    pub content: String,
    /// Tool calls (assistant messages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Which call this answers (tool messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with text only.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// What the engine asks a provider.
#[derive(Debug, Clone, Default)]
pub struct CompletionRequest {
    /// Model name.
    pub model: String,
    /// System instruction (identity, context block, memory block).
    pub system: Option<String>,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Tools the model may call (already filtered by access control). Shared: agents build
    /// the list once per registry change, not per request.
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// Output cap.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Provider session state from the previous response of this session, if any.
    pub provider_state: Option<Value>,
    /// Id of the running turn in `Env::turns`, for providers whose tool calls come
    /// back from outside the process (the Claude Code CLI through MCP): they pass it along so
    /// those calls run as this turn's (its sender, its inter-agent depth).
    pub turn: Option<String>,
}

/// Token accounting, as the vendor reported it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, all of them: those read from the vendor's prompt cache and those
    /// written to it included.
    pub input_tokens: u64,
    /// Completion tokens (a model's thinking tokens included: they are billed as output).
    pub output_tokens: u64,
    /// Of `input_tokens`, read from the prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Of `input_tokens`, written to the prompt cache (Anthropic bills them higher).
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// The cost in US dollars where the vendor reports it (the Claude Code CLI does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Adds `other` (a cost is known only while every part's is).
    pub fn add(&mut self, other: &Usage) {
        self.cost_usd = if *self == Usage::default() {
            other.cost_usd
        } else {
            self.cost_usd.zip(other.cost_usd).map(|(a, b)| a + b)
        };
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A final answer.
    EndTurn,
    /// It wants tool results.
    ToolUse,
    /// Output cap reached.
    MaxTokens,
    /// Anything else the provider reported.
    Other,
}

/// A provider's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionResponse {
    /// The assistant message (text and/or tool calls).
    pub message: ChatMessage,
    /// Why it stopped.
    pub stop: StopReason,
    /// Tokens used.
    pub usage: Usage,
    /// Session state the provider wants back next time (e.g. a CLI session id).
    pub provider_state: Option<Value>,
}

/// A piece of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// More text.
    TextDelta(String),
    /// A complete tool call (providers assemble argument fragments first).
    ToolCall(ToolCall),
}

/// Provider failures. The message names the provider and, for auth problems, the config key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// 401/403.
    #[error("{provider}: authentication failed ({detail}); check `{config_key}`")]
    Auth {
        /// Provider name.
        provider: String,
        /// Where the key is configured.
        config_key: String,
        /// What the server said.
        detail: String,
    },
    /// Retries exhausted on 429/5xx/connection errors.
    #[error("{provider}: unavailable after {attempts} attempts: {detail}")]
    Unavailable {
        /// Provider name.
        provider: String,
        /// Attempts made.
        attempts: u32,
        /// Last error.
        detail: String,
    },
    /// The answer could not be understood.
    #[error("{provider}: unexpected response: {detail}")]
    Protocol {
        /// Provider name.
        provider: String,
        /// What was wrong.
        detail: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// A model vendor. Providers never run tools: they return the calls, the engine runs them
/// through the Invoker and sends the results back in the next request.
///
/// ```
/// use strata_engine::llm::*;
///
/// /// Answers every request with the last user message, reversed.
/// struct Mirror;
///
/// #[strata_engine::async_trait]
/// impl LlmProvider for Mirror {
///     fn name(&self) -> &str { "mirror" }
///     async fn complete(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
///         let last = req.messages.last().map(|m| m.content.chars().rev().collect::<String>());
///         Ok(CompletionResponse {
///             message: ChatMessage::text(Role::Assistant, last.unwrap_or_default()),
///             stop: StopReason::EndTurn,
///             usage: Usage::default(),
///             provider_state: None,
///         })
///     }
/// }
/// ```
#[async_trait]
pub trait LlmProvider: Send + Sync {
    /// Short name for logs and errors (`openai`, `anthropic`…).
    fn name(&self) -> &str;

    /// One exchange.
    async fn complete(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError>;

    /// Checks that the provider answers and accepts its credentials with the cheapest call it
    /// has (listing models, or the CLI's version), for `strata doctor --online` and the setup
    /// wizard. `Ok` says what was seen. The default: not checked.
    async fn check(&self) -> Result<String, LlmError> {
        Ok(format!("{}: not checked", self.name()))
    }

    /// One exchange, streamed: `on_event` sees text deltas and completed tool calls as they
    /// arrive; the return value is the same as [`Self::complete`]'s. The default streams the
    /// complete answer as one delta.
    async fn complete_streaming(
        &self,
        req: &CompletionRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<CompletionResponse, LlmError> {
        let resp = self.complete(req).await?;
        if !resp.message.content.is_empty() {
            on_event(StreamEvent::TextDelta(resp.message.content.clone()));
        }
        for c in &resp.message.tool_calls {
            on_event(StreamEvent::ToolCall(c.clone()));
        }
        Ok(resp)
    }
}
