//! OpenAI-compatible chat completions: OpenAI, Ollama, vLLM, llama.cpp server, LM Studio.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use strata_engine::llm::*;
use strata_engine::secret::Secret;

use crate::http::{Endpoint, HttpSettings, send};

/// An OpenAI-compatible endpoint.
pub struct OpenAiProvider {
    client: reqwest::Client,
    settings: HttpSettings,
    endpoint: Endpoint,
    base_url: String,
    api_key: Option<Secret>,
    stream: bool,
}

impl OpenAiProvider {
    /// `base_url` up to and including `/v1` (e.g. `https://api.openai.com/v1`,
    /// `http://127.0.0.1:11434/v1` for Ollama).
    pub fn new(
        base_url: &str,
        api_key: Option<Secret>,
        settings: HttpSettings,
        endpoint: Endpoint,
        stream: bool,
    ) -> Result<Self, LlmError> {
        Ok(OpenAiProvider {
            client: settings.client()?,
            settings,
            endpoint,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            stream,
        })
    }

    fn body(&self, req: &CompletionRequest, stream: bool) -> Value {
        let mut messages = Vec::new();
        if let Some(s) = &req.system {
            messages.push(json!({"role": "system", "content": s}));
        }
        for m in &req.messages {
            messages.push(match m.role {
                Role::Tool => json!({
                    "role": "tool",
                    "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                }),
                Role::Assistant if !m.tool_calls.is_empty() => json!({
                    "role": "assistant",
                    "content": if m.content.is_empty() { Value::Null } else { Value::String(m.content.clone()) },
                    "tool_calls": m.tool_calls.iter().map(|c| json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments.to_string()},
                    })).collect::<Vec<_>>(),
                }),
                role => json!({"role": role.as_str(), "content": m.content}),
            });
        }
        let mut body = json!({"model": req.model, "messages": messages});
        if !req.tools.is_empty() {
            body["tools"] = Value::Array(
                req.tools
                    .iter()
                    .map(|t| {
                        json!({"type": "function", "function": {
                            "name": t.name, "description": t.description, "parameters": t.input_schema,
                        }})
                    })
                    .collect(),
            );
            body["tool_choice"] = json!("auto");
        }
        if let Some(n) = req.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if let Some(t) = req.temperature {
            body["temperature"] = json!(t);
        }
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    fn request(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut r = self
            .client
            .post(format!("{}/chat/completions", self.base_url))
            .json(body);
        if let Some(k) = &self.api_key {
            r = r.bearer_auth(k.expose());
        }
        r
    }

    fn protocol(&self, detail: impl Into<String>) -> LlmError {
        LlmError::Protocol {
            provider: self.endpoint.provider.clone(),
            detail: detail.into(),
        }
    }

    /// One completion, streamed or not — the shape every HTTP provider's trait methods call.
    async fn run(
        &self,
        req: &CompletionRequest,
        stream: bool,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<CompletionResponse, LlmError> {
        if stream {
            self.complete_stream(req, on_event).await
        } else {
            self.complete_plain(req).await
        }
    }

    async fn complete_plain(
        &self,
        req: &CompletionRequest,
    ) -> Result<CompletionResponse, LlmError> {
        let body = self.body(req, false);
        let resp = send(&self.settings, &self.endpoint, || self.request(&body)).await?;
        self.read_plain(resp).await
    }

    /// A whole (not streamed) chat-completions response.
    async fn read_plain(&self, resp: reqwest::Response) -> Result<CompletionResponse, LlmError> {
        let parsed: ChatResponse = resp
            .json()
            .await
            .map_err(|e| self.protocol(format!("invalid JSON: {e}")))?;
        let choice = parsed
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| self.protocol("no choices in the response"))?;
        let tool_calls: Vec<ToolCall> = choice
            .message
            .tool_calls
            .into_iter()
            .map(|c| ToolCall {
                id: c.id,
                name: c.function.name,
                arguments: parse_arguments(&c.function.arguments),
            })
            .collect();
        Ok(CompletionResponse {
            stop: crate::stop::OPENAI.map(choice.finish_reason.as_deref(), !tool_calls.is_empty()),
            message: ChatMessage {
                role: Role::Assistant,
                content: choice.message.content.unwrap_or_default(),
                tool_calls,
                tool_call_id: None,
            },
            usage: parsed.usage.map(Into::into).unwrap_or_default(),
            provider_state: None,
        })
    }

    async fn complete_stream(
        &self,
        req: &CompletionRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<CompletionResponse, LlmError> {
        let body = self.body(req, true);
        let resp = send(&self.settings, &self.endpoint, || self.request(&body)).await?;
        // Some OpenAI-compatible servers (and proxies) answer a streamed request whole.
        let whole = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        if whole {
            let r = self.read_plain(resp).await?;
            if !r.message.content.is_empty() {
                on_event(StreamEvent::TextDelta(r.message.content.clone()));
            }
            for c in &r.message.tool_calls {
                on_event(StreamEvent::ToolCall(c.clone()));
            }
            return Ok(r);
        }
        let mut events = eventsource_stream::EventStream::new(resp.bytes_stream());
        let mut text = String::new();
        // Tool calls arrive in fragments keyed by index; assemble before parsing.
        let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
        let mut finish: Option<String> = None;
        let mut usage = Usage::default();
        let mut done = false;
        while let Some(ev) = events.next().await {
            let ev = ev.map_err(|e| self.protocol(format!("stream broke: {e}")))?;
            if ev.data.trim() == "[DONE]" {
                done = true;
                break;
            }
            let chunk: StreamChunk = serde_json::from_str(&ev.data)
                .map_err(|e| self.protocol(format!("bad stream chunk ({e}): {}", ev.data)))?;
            if let Some(u) = chunk.usage {
                usage = u.into();
            }
            for choice in chunk.choices {
                if let Some(c) = choice.delta.content
                    && !c.is_empty()
                {
                    on_event(StreamEvent::TextDelta(c.clone()));
                    text.push_str(&c);
                }
                for d in choice.delta.tool_calls {
                    let entry = calls.entry(d.index).or_default();
                    if let Some(id) = d.id {
                        entry.0 = id;
                    }
                    if let Some(f) = d.function {
                        if let Some(n) = f.name {
                            entry.1.push_str(&n);
                        }
                        if let Some(a) = f.arguments {
                            entry.2.push_str(&a);
                        }
                    }
                }
                if choice.finish_reason.is_some() {
                    finish = choice.finish_reason;
                }
            }
        }
        if !done && finish.is_none() {
            return Err(self.protocol("stream ended before the answer was complete"));
        }
        let tool_calls: Vec<ToolCall> = calls
            .into_values()
            .map(|(id, name, args)| ToolCall {
                id,
                name,
                arguments: parse_arguments(&args),
            })
            .collect();
        for c in &tool_calls {
            on_event(StreamEvent::ToolCall(c.clone()));
        }
        Ok(CompletionResponse {
            stop: crate::stop::OPENAI.map(finish.as_deref(), !tool_calls.is_empty()),
            message: ChatMessage {
                role: Role::Assistant,
                content: text,
                tool_calls,
                tool_call_id: None,
            },
            usage,
            provider_state: None,
        })
    }
}

/// Arguments arrive as a JSON string; models sometimes send an empty string for "no
/// arguments" and occasionally broken JSON. Broken JSON is passed on as a string, so the
/// Invoker answers the model with a validation error it can correct.
fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

#[async_trait]
impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    async fn check(&self) -> Result<String, LlmError> {
        let url = format!("{}/models", self.base_url);
        send(&self.settings, &self.endpoint, || {
            let r = self.client.get(&url);
            match &self.api_key {
                Some(k) => r.bearer_auth(k.expose()),
                None => r,
            }
        })
        .await?;
        Ok(match self.api_key {
            Some(_) => format!("{} accepts the key ({url})", self.endpoint.provider),
            None => format!("{} answers without a key ({url})", self.endpoint.provider),
        })
    }

    async fn complete(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
        self.run(req, self.stream, &mut |_| {}).await
    }

    async fn complete_streaming(
        &self,
        req: &CompletionRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<CompletionResponse, LlmError> {
        self.run(req, true, on_event).await
    }
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: WireMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireCall>,
}

#[derive(Deserialize)]
struct WireCall {
    #[serde(default)]
    id: String,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

/// OpenAI's `usage`: `prompt_tokens` counts the cached ones too
/// (`prompt_tokens_details.cached_tokens`).
#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            cached_input_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            ..Usage::default()
        }
    }
}

#[derive(Deserialize)]
struct StreamChunk {
    #[serde(default)]
    choices: Vec<StreamChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct StreamChoice {
    #[serde(default)]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<DeltaCall>,
}

#[derive(Deserialize)]
struct DeltaCall {
    #[serde(default)]
    index: u64,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<DeltaFunction>,
}

#[derive(Deserialize)]
struct DeltaFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}
