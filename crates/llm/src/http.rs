//! The HTTP side every vendor provider shares: timeouts, retries with jittered exponential
//! backoff on 429/5xx/connection errors (honouring `Retry-After`), and errors that name the
//! provider and, for authentication, the config key to fix.

use std::time::Duration;

use reqwest::{RequestBuilder, Response, StatusCode};
use strata_engine::config::LlmConfig;
use strata_engine::llm::LlmError;

/// What to do about a refusal for size (OpenAI's `context_length_exceeded`, llama.cpp's
/// `exceed_context_size_error`, Anthropic's "prompt is too long"), or nothing.
fn context_hint(body: &str) -> &'static str {
    let b = body.to_ascii_lowercase();
    let about_size = [
        "context length",
        "context_length",
        "context size",
        "context_size",
        "prompt is too long",
        "too many tokens",
    ]
    .iter()
    .any(|p| b.contains(p));
    if about_size {
        " — the model's context window is smaller than the request: set `llm.context_window` \
         to its size in tokens (requests are then fitted into it), or give the agent fewer tools"
    } else {
        ""
    }
}

/// Retry and timeout settings.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Attempts in all (at least 1).
    pub max_attempts: u32,
    /// First backoff delay; doubled per attempt.
    pub retry_base: Duration,
    /// Cap on any single delay (also caps `Retry-After`).
    pub max_delay: Duration,
    /// Connection timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout.
    pub timeout: Duration,
}

impl HttpSettings {
    /// From an agent's `llm` block.
    pub fn from_config(cfg: &LlmConfig) -> Self {
        HttpSettings {
            max_attempts: cfg.max_attempts.unwrap_or(3).max(1),
            retry_base: Duration::from_millis(cfg.retry_base_ms.unwrap_or(500)),
            max_delay: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(cfg.connect_timeout_secs.unwrap_or(10)),
            timeout: Duration::from_secs(cfg.timeout_secs.unwrap_or(120)),
        }
    }

    /// A client with these timeouts. No system proxy: a model endpoint is configured
    /// explicitly, and a proxy from the environment would see our keys.
    pub fn client(&self) -> Result<reqwest::Client, LlmError> {
        reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .timeout(self.timeout)
            .no_proxy()
            .user_agent(concat!("strata/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Other(format!("cannot build HTTP client: {e}")))
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .retry_base
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        let d = exp.min(self.max_delay);
        // Half fixed, half random: spreads retries of many sessions apart.
        let half = d / 2;
        half + Duration::from_millis(fastrand::u64(0..=half.as_millis() as u64))
    }
}

/// What the caller needs to word errors.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Provider name for messages (`openai`, `anthropic`…).
    pub provider: String,
    /// The config key holding the credential (`agents.main.llm.api_key`).
    pub credential_key: String,
}

fn retry_after(resp: &Response) -> Option<Duration> {
    let v = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| *s >= 0.0)
        .map(Duration::from_secs_f64)
}

async fn body_snippet(resp: Response) -> String {
    let text = resp.text().await.unwrap_or_default();
    // Vendors put the useful part in error.message.
    let msg = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.pointer("/message"))
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        })
        .unwrap_or(text);
    let mut s: String = msg.chars().take(300).collect();
    if s.len() < msg.len() {
        s.push('…');
    }
    s
}

/// Sends the request built by `build` (called once per attempt), retrying what is worth
/// retrying. Returns the first successful (2xx) response.
pub async fn send(
    settings: &HttpSettings,
    endpoint: &Endpoint,
    build: impl Fn() -> RequestBuilder,
) -> Result<Response, LlmError> {
    let mut last = String::new();
    for attempt in 1..=settings.max_attempts {
        let wait = match build().send().await {
            Ok(resp) => {
                let status = resp.status();
                if status.is_success() {
                    return Ok(resp);
                }
                if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                    return Err(LlmError::Auth {
                        provider: endpoint.provider.clone(),
                        config_key: endpoint.credential_key.clone(),
                        detail: format!("{status}: {}", body_snippet(resp).await),
                    });
                }
                let retryable = status == StatusCode::TOO_MANY_REQUESTS
                    || status == StatusCode::REQUEST_TIMEOUT
                    || status.is_server_error();
                if !retryable {
                    let body = body_snippet(resp).await;
                    return Err(LlmError::Protocol {
                        provider: endpoint.provider.clone(),
                        detail: format!("{status}: {body}{}", context_hint(&body)),
                    });
                }
                let hinted = retry_after(&resp);
                last = format!("{status}: {}", body_snippet(resp).await);
                hinted
                    .map(|d| d.min(settings.max_delay))
                    .unwrap_or_else(|| settings.backoff(attempt))
            }
            Err(e) => {
                if !(e.is_connect() || e.is_timeout() || e.is_request()) {
                    return Err(LlmError::Other(format!("{}: {e}", endpoint.provider)));
                }
                last = if e.is_timeout() {
                    format!("timed out after {:?}", settings.timeout)
                } else {
                    format!("connection failed: {e}")
                };
                settings.backoff(attempt)
            }
        };
        if attempt < settings.max_attempts {
            tracing::warn!(provider = %endpoint.provider, attempt, error = %last, delay_ms = wait.as_millis() as u64, "retrying");
            tokio::time::sleep(wait).await;
        }
    }
    Err(LlmError::Unavailable {
        provider: endpoint.provider.clone(),
        attempts: settings.max_attempts,
        detail: last,
    })
}
