//! An OpenAI-compatible `/v1/embeddings` client (OpenAI, Ollama, llama.cpp server, vLLM).

use std::time::Duration;

use serde_json::{Value, json};
use strata_engine::memory::{Embedder, Embedding, MemoryError};

/// Embeddings over HTTP.
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    model: String,
    key: Option<String>,
}

impl OpenAiEmbedder {
    /// A client for `base_url` (up to and including `/v1`) and `model`.
    pub fn new(
        base_url: &str,
        model: &str,
        key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, MemoryError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(|e| MemoryError::Failed(format!("embedder client: {e}")))?;
        Ok(OpenAiEmbedder {
            client,
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            key,
        })
    }
}

impl Embedder for OpenAiEmbedder {
    fn name(&self) -> String {
        format!("openai:{}", self.model)
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> Embedding<'a> {
        Box::pin(async move {
            let mut req = self
                .client
                .post(&self.url)
                .json(&json!({"model": self.model, "input": texts}));
            if let Some(k) = &self.key {
                req = req.bearer_auth(k);
            }
            let resp = req.send().await.map_err(|e| {
                MemoryError::Unavailable(format!("embeddings at {}: {e}", self.url))
            })?;
            let status = resp.status();
            let body: Value = resp.json().await.map_err(|e| {
                MemoryError::Failed(format!("embeddings at {}: not JSON ({e})", self.url))
            })?;
            if !status.is_success() {
                return Err(MemoryError::Failed(format!(
                    "embeddings at {} answered {status}: {}",
                    self.url,
                    body["error"]["message"].as_str().unwrap_or("no message")
                )));
            }
            let data = body["data"]
                .as_array()
                .ok_or_else(|| MemoryError::Failed("embeddings: no `data` array".into()))?;
            let mut out = vec![Vec::new(); texts.len()];
            for (i, d) in data.iter().enumerate() {
                let idx = d["index"].as_u64().map_or(i, |x| x as usize);
                let v: Vec<f32> = d["embedding"]
                    .as_array()
                    .ok_or_else(|| {
                        MemoryError::Failed("embeddings: an item has no `embedding`".into())
                    })?
                    .iter()
                    .map(|x| x.as_f64().unwrap_or(0.0) as f32)
                    .collect();
                if let Some(slot) = out.get_mut(idx) {
                    *slot = v;
                }
            }
            if out.iter().any(Vec::is_empty) {
                return Err(MemoryError::Failed(
                    "embeddings: fewer vectors than inputs".into(),
                ));
            }
            Ok(out)
        })
    }
}
