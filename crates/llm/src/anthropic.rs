//! Anthropic Messages API: `tool_use` / `tool_result` blocks, system prompt, streaming events.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use strata_engine::llm::*;
use strata_engine::secret::Secret;

use crate::http::{Endpoint, HttpSettings, send};

/// The API version header we speak.
pub const API_VERSION: &str = "2023-06-01";

/// An Anthropic endpoint.
pub struct AnthropicProvider {
    client: reqwest::Client,
    settings: HttpSettings,
    endpoint: Endpoint,
    base_url: String,
    api_key: Secret,
    stream: bool,
    default_max_tokens: u32,
}

impl AnthropicProvider {
    /// `base_url` without `/v1` (default `https://api.anthropic.com`).
    pub fn new(
        base_url: &str,
        api_key: Secret,
        settings: HttpSettings,
        endpoint: Endpoint,
        stream: bool,
    ) -> Result<Self, LlmError> {
        Ok(AnthropicProvider {
            client: settings.client()?,
            settings,
            endpoint,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            stream,
            default_max_tokens: 4096,
        })
    }

    fn body(&self, req: &CompletionRequest, stream: bool) -> Value {
        let mut body = json!({
            "model": req.model,
            "max_tokens": req.max_tokens.unwrap_or(self.default_max_tokens),
            "messages": messages(&req.messages),
        });
        if let Some(s) = &req.system {
            body["system"] = json!(s);
        }
        if !req.tools.is_empty() {
            body["tools"] = Value::Array(
                req.tools
                    .iter()
                    .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
                    .collect(),
            );
        }
        if let Some(t) = req.temperature {
            body["temperature"] = json!(t);
        }
        if stream {
            body["stream"] = json!(true);
        }
        body
    }

    fn request(&self, body: &Value) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/v1/messages", self.base_url))
            .header("x-api-key", self.api_key.expose())
            .header("anthropic-version", API_VERSION)
            .json(body)
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
            self.streamed(req, on_event).await
        } else {
            self.plain(req).await
        }
    }

    async fn plain(&self, req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let body = self.body(req, false);
        let resp = send(&self.settings, &self.endpoint, || self.request(&body)).await?;
        let parsed: WireResponse = resp
            .json()
            .await
            .map_err(|e| self.protocol(format!("invalid JSON: {e}")))?;
        let mut text = String::new();
        let mut calls = Vec::new();
        for block in parsed.content {
            match block {
                Block::Text { text: t } => text.push_str(&t),
                Block::ToolUse { id, name, input } => calls.push(ToolCall {
                    id,
                    name,
                    arguments: input,
                }),
                Block::Other => {}
            }
        }
        Ok(CompletionResponse {
            stop: crate::stop::ANTHROPIC.map(parsed.stop_reason.as_deref(), !calls.is_empty()),
            message: ChatMessage {
                role: Role::Assistant,
                content: text,
                tool_calls: calls,
                tool_call_id: None,
            },
            usage: parsed.usage.into(),
            provider_state: None,
        })
    }

    async fn streamed(
        &self,
        req: &CompletionRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<CompletionResponse, LlmError> {
        let body = self.body(req, true);
        let resp = send(&self.settings, &self.endpoint, || self.request(&body)).await?;
        let mut events = eventsource_stream::EventStream::new(resp.bytes_stream());
        let mut text = String::new();
        // index → (id, name, partial JSON)
        let mut tools: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
        let mut usage = Usage::default();
        let mut stop: Option<String> = None;
        let mut finished = false;
        while let Some(ev) = events.next().await {
            let ev = ev.map_err(|e| self.protocol(format!("stream broke: {e}")))?;
            let data: Value = match serde_json::from_str(&ev.data) {
                Ok(v) => v,
                Err(_) => continue, // keep-alives and comments
            };
            match data["type"].as_str().unwrap_or(ev.event.as_str()) {
                "message_start" => {
                    if let Ok(u) =
                        serde_json::from_value::<WireUsage>(data["message"]["usage"].clone())
                    {
                        usage = u.into();
                    }
                }
                "content_block_start" => {
                    let block = &data["content_block"];
                    if block["type"] == "tool_use" {
                        let idx = data["index"].as_u64().unwrap_or(0);
                        tools.insert(
                            idx,
                            (
                                block["id"].as_str().unwrap_or_default().to_owned(),
                                block["name"].as_str().unwrap_or_default().to_owned(),
                                String::new(),
                            ),
                        );
                    }
                }
                "content_block_delta" => {
                    let d = &data["delta"];
                    match d["type"].as_str() {
                        Some("text_delta") => {
                            let t = d["text"].as_str().unwrap_or_default();
                            if !t.is_empty() {
                                on_event(StreamEvent::TextDelta(t.to_owned()));
                                text.push_str(t);
                            }
                        }
                        Some("input_json_delta") => {
                            let idx = data["index"].as_u64().unwrap_or(0);
                            if let Some(entry) = tools.get_mut(&idx) {
                                entry
                                    .2
                                    .push_str(d["partial_json"].as_str().unwrap_or_default());
                            }
                        }
                        _ => {}
                    }
                }
                "message_delta" => {
                    if let Some(s) = data["delta"]["stop_reason"].as_str() {
                        stop = Some(s.to_owned());
                    }
                    if let Some(n) = data["usage"]["output_tokens"].as_u64() {
                        usage.output_tokens = n;
                    }
                }
                "message_stop" => {
                    finished = true;
                    break;
                }
                "error" => {
                    let msg = data["error"]["message"].as_str().unwrap_or("unknown error");
                    return Err(LlmError::Unavailable {
                        provider: self.endpoint.provider.clone(),
                        attempts: 1,
                        detail: format!("stream error: {msg}"),
                    });
                }
                _ => {}
            }
        }
        if !finished {
            return Err(self.protocol("stream ended before message_stop"));
        }
        let calls: Vec<ToolCall> = tools
            .into_values()
            .map(|(id, name, json)| ToolCall {
                id,
                name,
                arguments: if json.trim().is_empty() {
                    json!({})
                } else {
                    serde_json::from_str(&json).unwrap_or(Value::String(json))
                },
            })
            .collect();
        for c in &calls {
            on_event(StreamEvent::ToolCall(c.clone()));
        }
        Ok(CompletionResponse {
            stop: crate::stop::ANTHROPIC.map(stop.as_deref(), !calls.is_empty()),
            message: ChatMessage {
                role: Role::Assistant,
                content: text,
                tool_calls: calls,
                tool_call_id: None,
            },
            usage,
            provider_state: None,
        })
    }
}

/// Converts our history to Anthropic's alternating user/assistant messages: tool results
/// become `tool_result` blocks in a user message, consecutive same-role messages merge.
fn messages(history: &[ChatMessage]) -> Vec<Value> {
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    for m in history {
        let (role, blocks) = match m.role {
            Role::User | Role::System => ("user", vec![json!({"type": "text", "text": m.content})]),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                    "is_error": m.content.starts_with("error ("),
                })],
            ),
            Role::Assistant => {
                let mut b = Vec::new();
                if !m.content.is_empty() {
                    b.push(json!({"type": "text", "text": m.content}));
                }
                for c in &m.tool_calls {
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({})
                    };
                    b.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
                }
                if b.is_empty() {
                    b.push(json!({"type": "text", "text": "(no answer)"}));
                }
                ("assistant", b)
            }
        };
        match out.last_mut() {
            Some((r, existing)) if r == role => existing.extend(blocks),
            _ => out.push((role.to_owned(), blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

#[async_trait]
impl LlmProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    async fn check(&self) -> Result<String, LlmError> {
        let url = format!("{}/v1/models", self.base_url);
        send(&self.settings, &self.endpoint, || {
            self.client
                .get(&url)
                .header("x-api-key", self.api_key.expose())
                .header("anthropic-version", API_VERSION)
        })
        .await?;
        Ok(format!(
            "{} accepts the key ({url})",
            self.endpoint.provider
        ))
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
struct WireResponse {
    #[serde(default)]
    content: Vec<Block>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

/// Anthropic's `usage`: `input_tokens` leaves out the prompt tokens read from and written to
/// the cache, which are their own fields.
#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        let read = u.cache_read_input_tokens.unwrap_or(0);
        let written = u.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: u.input_tokens + read + written,
            output_tokens: u.output_tokens,
            cached_input_tokens: read,
            cache_write_tokens: written,
            cost_usd: None,
        }
    }
}
