//! Gemini `generateContent`, with an API key (Google AI) or a bearer token (Vertex AI):
//! `functionCall` / `functionResponse` parts, system instruction, SSE streaming.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use strata_engine::llm::*;
use strata_engine::secret::Secret;
use tokio::sync::Mutex;

use crate::http::{Endpoint, HttpSettings, send};

/// How requests authenticate.
pub enum GeminiAuth {
    /// Google AI Studio key, sent as `x-goog-api-key`.
    ApiKey(Secret),
    /// Vertex AI bearer token from a command's stdout (cached for 30 minutes) or a variable.
    Bearer(TokenSource),
}

/// Where a Vertex bearer token comes from.
pub enum TokenSource {
    /// `sh -c <command>`; stdout is the token. The command sees only PATH, HOME, LANG, USER
    /// and the listed variables.
    Command(String, Vec<String>),
    /// An environment variable.
    Env(String),
}

/// A Gemini or Vertex AI endpoint.
pub struct GeminiProvider {
    client: reqwest::Client,
    settings: HttpSettings,
    endpoint: Endpoint,
    /// Everything before `:generateContent`, e.g. `…/v1beta/models/gemini-2.5-flash`.
    model_url: String,
    auth: GeminiAuth,
    stream: bool,
    token_cache: Mutex<Option<(Secret, Instant)>>,
}

impl GeminiProvider {
    /// Google AI: `base_url` default `https://generativelanguage.googleapis.com`.
    pub fn google_ai(
        base_url: &str,
        model: &str,
        key: Secret,
        settings: HttpSettings,
        endpoint: Endpoint,
        stream: bool,
    ) -> Result<Self, LlmError> {
        Self::with(
            format!("{}/v1beta/models/{model}", base_url.trim_end_matches('/')),
            GeminiAuth::ApiKey(key),
            settings,
            endpoint,
            stream,
        )
    }

    /// Vertex AI: `base_url` default `https://{region}-aiplatform.googleapis.com`
    /// (`https://aiplatform.googleapis.com` for the `global` region).
    #[allow(clippy::too_many_arguments)]
    pub fn vertex(
        base_url: Option<&str>,
        project: &str,
        region: &str,
        model: &str,
        token: TokenSource,
        settings: HttpSettings,
        endpoint: Endpoint,
        stream: bool,
    ) -> Result<Self, LlmError> {
        let base = match base_url {
            Some(b) => b.trim_end_matches('/').to_owned(),
            None if region == "global" => "https://aiplatform.googleapis.com".to_owned(),
            None => format!("https://{region}-aiplatform.googleapis.com"),
        };
        Self::with(
            format!(
                "{base}/v1/projects/{project}/locations/{region}/publishers/google/models/{model}"
            ),
            GeminiAuth::Bearer(token),
            settings,
            endpoint,
            stream,
        )
    }

    fn with(
        model_url: String,
        auth: GeminiAuth,
        settings: HttpSettings,
        endpoint: Endpoint,
        stream: bool,
    ) -> Result<Self, LlmError> {
        Ok(GeminiProvider {
            client: settings.client()?,
            settings,
            endpoint,
            model_url,
            auth,
            stream,
            token_cache: Mutex::new(None),
        })
    }

    async fn bearer(&self, src: &TokenSource) -> Result<Secret, LlmError> {
        let mut cache = self.token_cache.lock().await;
        if let Some((t, at)) = cache.as_ref()
            && at.elapsed() < Duration::from_secs(1800)
        {
            return Ok(t.clone());
        }
        let token = match src {
            TokenSource::Env(var) => std::env::var(var).map_err(|_| LlmError::Auth {
                provider: self.endpoint.provider.clone(),
                config_key: self.endpoint.credential_key.clone(),
                detail: format!("environment variable `{var}` is not set"),
            })?,
            TokenSource::Command(cmd, allow) => {
                let mut c = strata_sandbox::host::command("sh", allow);
                c.arg("-c").arg(cmd);
                let out = strata_sandbox::host::output(c, None, Duration::from_secs(60), 64 * 1024)
                    .await
                    .map_err(|e| LlmError::Other(format!("token command failed to start: {e}")))?;
                let Some(status) = out.status else {
                    return Err(LlmError::Other("token command timed out after 60s".into()));
                };
                if !status.success() {
                    return Err(LlmError::Auth {
                        provider: self.endpoint.provider.clone(),
                        config_key: self.endpoint.credential_key.clone(),
                        detail: format!(
                            "token command exited with {}: {}",
                            status,
                            out.stderr.trim()
                        ),
                    });
                }
                out.stdout.trim().to_owned()
            }
        };
        let s = Secret::new(token);
        *cache = Some((s.clone(), Instant::now()));
        Ok(s)
    }

    fn body(&self, req: &CompletionRequest) -> Value {
        let mut body = json!({"contents": contents(&req.messages)});
        if let Some(s) = &req.system {
            body["systemInstruction"] = json!({"parts": [{"text": s}]});
        }
        if !req.tools.is_empty() {
            let decls: Vec<Value> = req
                .tools
                .iter()
                .map(|t| {
                    json!({"name": t.name, "description": t.description, "parameters": gemini_schema(&t.input_schema)})
                })
                .collect();
            body["tools"] = json!([{"functionDeclarations": decls}]);
        }
        let mut generation = Map::new();
        if let Some(n) = req.max_tokens {
            generation.insert("maxOutputTokens".into(), json!(n));
        }
        if let Some(t) = req.temperature {
            generation.insert("temperature".into(), json!(t));
        }
        if !generation.is_empty() {
            body["generationConfig"] = Value::Object(generation);
        }
        body
    }

    /// The credential header: the API key, or a bearer token from the token source.
    async fn auth_header(&self) -> Result<(&'static str, String), LlmError> {
        Ok(match &self.auth {
            GeminiAuth::ApiKey(k) => ("x-goog-api-key", k.expose().to_owned()),
            GeminiAuth::Bearer(src) => (
                "authorization",
                format!("Bearer {}", self.bearer(src).await?.expose()),
            ),
        })
    }

    async fn request(&self, body: &Value, stream: bool) -> Result<reqwest::Response, LlmError> {
        let url = if stream {
            format!("{}:streamGenerateContent?alt=sse", self.model_url)
        } else {
            format!("{}:generateContent", self.model_url)
        };
        let auth = self.auth_header().await?;
        send(&self.settings, &self.endpoint, || {
            self.client.post(&url).header(auth.0, &auth.1).json(body)
        })
        .await
    }

    async fn run(
        &self,
        req: &CompletionRequest,
        stream: bool,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<CompletionResponse, LlmError> {
        let body = self.body(req);
        let resp = self.request(&body, stream).await?;
        let mut acc = Accumulated::default();
        if stream {
            let mut events = eventsource_stream::EventStream::new(resp.bytes_stream());
            while let Some(ev) = events.next().await {
                let ev = ev.map_err(|e| self.protocol(format!("stream broke: {e}")))?;
                let chunk: Value = serde_json::from_str(&ev.data)
                    .map_err(|e| self.protocol(format!("bad stream chunk: {e}")))?;
                acc.add(&chunk, on_event);
            }
        } else {
            let v: Value = resp
                .json()
                .await
                .map_err(|e| self.protocol(format!("invalid JSON: {e}")))?;
            acc.add(&v, &mut |_| {});
        }
        if !acc.saw_candidate {
            return Err(self.protocol("no candidates in the response (blocked prompt?)"));
        }
        for c in &acc.calls {
            on_event(StreamEvent::ToolCall(c.clone()));
        }
        let has_calls = !acc.calls.is_empty();
        Ok(CompletionResponse {
            stop: crate::stop::GEMINI.map(acc.finish.as_deref(), has_calls),
            message: ChatMessage {
                role: Role::Assistant,
                content: acc.text,
                tool_calls: acc.calls,
                tool_call_id: None,
            },
            usage: acc.usage,
            provider_state: None,
        })
    }

    fn protocol(&self, detail: impl Into<String>) -> LlmError {
        LlmError::Protocol {
            provider: self.endpoint.provider.clone(),
            detail: detail.into(),
        }
    }
}

#[derive(Default)]
struct Accumulated {
    text: String,
    calls: Vec<ToolCall>,
    finish: Option<String>,
    usage: Usage,
    saw_candidate: bool,
}

impl Accumulated {
    fn add(&mut self, v: &Value, on_event: &mut (dyn FnMut(StreamEvent) + Send)) {
        // `promptTokenCount` counts the cached ones too; thinking tokens are billed as
        // output. Each streamed chunk carries the totals so far: the last one wins.
        if let Some(u) = v.get("usageMetadata") {
            self.usage.input_tokens = u["promptTokenCount"]
                .as_u64()
                .unwrap_or(self.usage.input_tokens);
            if let Some(out) = u["candidatesTokenCount"].as_u64() {
                self.usage.output_tokens = out + u["thoughtsTokenCount"].as_u64().unwrap_or(0);
            }
            self.usage.cached_input_tokens = u["cachedContentTokenCount"]
                .as_u64()
                .unwrap_or(self.usage.cached_input_tokens);
        }
        let Some(c) = v["candidates"].as_array().and_then(|a| a.first()) else {
            return;
        };
        self.saw_candidate = true;
        if let Some(f) = c["finishReason"].as_str() {
            self.finish = Some(f.to_owned());
        }
        for part in c["content"]["parts"].as_array().into_iter().flatten() {
            if let Some(t) = part["text"].as_str()
                && part.get("thought").and_then(Value::as_bool) != Some(true)
            {
                if !t.is_empty() {
                    on_event(StreamEvent::TextDelta(t.to_owned()));
                }
                self.text.push_str(t);
            }
            if let Some(fc) = part.get("functionCall") {
                let name = fc["name"].as_str().unwrap_or_default().to_owned();
                // Gemini may omit ids; ours must be unique within the turn.
                let id = fc["id"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("call_{}_{name}", self.calls.len()));
                let args = fc.get("args").cloned().unwrap_or_else(|| json!({}));
                self.calls.push(ToolCall {
                    id,
                    name,
                    arguments: args,
                });
            }
        }
    }
}

/// Our history as Gemini `contents`: `user`/`model` turns; tool results become
/// `functionResponse` parts named after the call they answer.
fn contents(history: &[ChatMessage]) -> Vec<Value> {
    let name_of = |id: &str| -> String {
        history
            .iter()
            .flat_map(|m| m.tool_calls.iter())
            .find(|c| c.id == id)
            .map(|c| c.name.clone())
            .unwrap_or_default()
    };
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    for m in history {
        let (role, parts) = match m.role {
            Role::User | Role::System => ("user", vec![json!({"text": m.content})]),
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                let response = serde_json::from_str::<Value>(&m.content)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({"content": m.content}));
                (
                    "user",
                    vec![json!({"functionResponse": {"name": name_of(&id), "response": response}})],
                )
            }
            Role::Assistant => {
                let mut p = Vec::new();
                if !m.content.is_empty() {
                    p.push(json!({"text": m.content}));
                }
                for c in &m.tool_calls {
                    p.push(json!({"functionCall": {"name": c.name, "args": c.arguments}}));
                }
                if p.is_empty() {
                    p.push(json!({"text": ""}));
                }
                ("model", p)
            }
        };
        match out.last_mut() {
            Some((r, existing)) if r == role => existing.extend(parts),
            _ => out.push((role.to_owned(), parts)),
        }
    }
    out.into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect()
}

/// Gemini accepts an OpenAPI-style subset of JSON Schema: no `$ref`/`$defs`,
/// `additionalProperties`, `$schema`, `title`, `const`; nullable types as `nullable: true`.
/// This rewrites our schemas into that subset.
pub fn gemini_schema(schema: &Value) -> Value {
    let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
    clean(schema, &defs, 0)
}

fn clean(v: &Value, defs: &Value, depth: usize) -> Value {
    let Value::Object(m) = v else {
        return v.clone();
    };
    if depth > 32 {
        return json!({"type": "object"});
    }
    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or_default();
        let mut target = clean(&defs[name], defs, depth + 1);
        if let (Some(d), Value::Object(t)) = (m.get("description"), &mut target) {
            t.insert("description".into(), d.clone());
        }
        return target;
    }
    let mut out = Map::new();
    for (k, val) in m {
        match k.as_str() {
            "$defs" | "$schema" | "additionalProperties" | "title" | "default" | "format" => {}
            "const" => {
                out.insert("enum".into(), json!([val]));
            }
            "type" => match val {
                Value::Array(ts) => {
                    let non_null: Vec<&Value> = ts.iter().filter(|t| *t != "null").collect();
                    if non_null.len() < ts.len() {
                        out.insert("nullable".into(), json!(true));
                    }
                    out.insert(
                        "type".into(),
                        non_null.first().map_or(json!("string"), |t| (*t).clone()),
                    );
                }
                t => {
                    out.insert("type".into(), t.clone());
                }
            },
            "properties" => {
                let props: Map<String, Value> = val
                    .as_object()
                    .map(|p| {
                        p.iter()
                            .map(|(k, s)| (k.clone(), clean(s, defs, depth + 1)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert("properties".into(), Value::Object(props));
            }
            "items" => {
                out.insert("items".into(), clean(val, defs, depth + 1));
            }
            "anyOf" | "oneOf" | "allOf" => {
                let alts: Vec<Value> = val
                    .as_array()
                    .map(|a| a.iter().map(|s| clean(s, defs, depth + 1)).collect())
                    .unwrap_or_default();
                out.insert("anyOf".into(), Value::Array(alts));
            }
            _ => {
                out.insert(k.clone(), val.clone());
            }
        }
    }
    Value::Object(out)
}

#[async_trait]
impl LlmProvider for GeminiProvider {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    /// Reads the configured model's metadata: the credential and the model name at once.
    async fn check(&self) -> Result<String, LlmError> {
        let auth = self.auth_header().await?;
        send(&self.settings, &self.endpoint, || {
            self.client.get(&self.model_url).header(auth.0, &auth.1)
        })
        .await?;
        Ok(format!(
            "{} accepts the credential and knows the model",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_rewritten_into_gemini_subset() {
        let s = json!({
            "type": "object",
            "additionalProperties": false,
            "$defs": {"T": {"type": "object", "title": "T", "properties": {"port": {"type": "integer", "format": "uint16"}}}},
            "properties": {
                "note": {"type": ["string", "null"], "description": "d"},
                "target": {"$ref": "#/$defs/T", "description": "where"},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "k": {"const": "x"}
            },
            "required": ["target"]
        });
        assert_eq!(
            gemini_schema(&s),
            json!({
                "type": "object",
                "properties": {
                    "note": {"type": "string", "nullable": true, "description": "d"},
                    "target": {"type": "object", "properties": {"port": {"type": "integer"}}, "description": "where"},
                    "mode": {"type": "string", "enum": ["a", "b"]},
                    "k": {"enum": ["x"]}
                },
                "required": ["target"]
            })
        );
    }
}
