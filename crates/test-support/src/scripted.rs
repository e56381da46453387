//! An in-process [`LlmProvider`] that answers from a script and records every request: for
//! tests of the agent loop and of tools that run agents, where no wire format is involved.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use strata_engine::async_trait;
use strata_engine::llm::{
    ChatMessage, CompletionRequest, CompletionResponse, LlmError, LlmProvider, Role, StopReason,
    ToolCall, Usage,
};

/// Returns the next scripted response per call ("script exhausted" after the last).
#[derive(Default)]
pub struct Scripted {
    replies: Mutex<VecDeque<CompletionResponse>>,
    requests: Mutex<Vec<CompletionRequest>>,
    plan: Mutex<Vec<String>>,
}

impl Scripted {
    /// A provider answering with `replies` in order.
    pub fn new(replies: Vec<CompletionResponse>) -> Arc<Self> {
        Arc::new(Scripted {
            replies: Mutex::new(replies.into()),
            requests: Mutex::new(Vec::new()),
            plan: Mutex::new(Vec::new()),
        })
    }

    /// Sets the tools a tainted turn's planning request (its system prompt starts with
    /// [`crate::PLAN_MARKER`]) is answered with (default none). Planning requests are
    /// answered without taking a scripted reply and are not among [`requests`](Self::requests).
    pub fn plan(&self, tools: &[&str]) {
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) =
            tools.iter().map(|t| (*t).to_owned()).collect();
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<CompletionRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The tool results the model was shown, in order.
    pub fn tool_results(&self) -> Vec<String> {
        self.requests()
            .iter()
            .flat_map(|r| r.messages.iter())
            .filter(|m| m.role == Role::Tool)
            .map(|m| m.content.clone())
            .collect()
    }
}

#[async_trait]
impl LlmProvider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn complete(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
        if req
            .system
            .as_deref()
            .is_some_and(|s| s.starts_with(crate::PLAN_MARKER))
        {
            let tools = self.plan.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Ok(text(&serde_json::json!({ "tools": tools }).to_string()));
        }
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(req.clone());
        self.replies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
            .ok_or_else(|| LlmError::Other("script exhausted".into()))
    }
}

/// A final text answer (usage 10 in, 2 out).
pub fn text(t: &str) -> CompletionResponse {
    CompletionResponse {
        message: ChatMessage::text(Role::Assistant, t),
        stop: StopReason::EndTurn,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 2,
            ..Usage::default()
        },
        provider_state: None,
    }
}

/// Tool calls `(id, name, arguments)`.
pub fn calls(calls: &[(&str, &str, serde_json::Value)]) -> CompletionResponse {
    CompletionResponse {
        message: ChatMessage {
            role: Role::Assistant,
            content: String::new(),
            tool_calls: calls
                .iter()
                .map(|(id, name, args)| ToolCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    arguments: args.clone(),
                })
                .collect(),
            tool_call_id: None,
        },
        stop: StopReason::ToolUse,
        usage: Usage::default(),
        provider_state: None,
    }
}
