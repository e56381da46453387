//! The Honcho backend: a client for the Honcho v3 REST API. Honcho keeps the conversation and
//! reasons about the people in it; we ask it for what it knows before a model call and hand
//! it each exchange after the turn. Every call has a short timeout, and any failure is logged
//! while the turn goes on — memory is augmentation, not a dependency.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use strata_engine::config::{Config, HonchoConfig};
use strata_engine::memory::{MemoryBackend, MemoryError, MemoryTurn, private_key};

/// Honcho ids: letters, digits, `-` and `_`.
fn peer_id(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The Honcho memory backend.
pub struct HonchoMemory {
    client: reqwest::Client,
    base: String,
    workspace: String,
    cfg: HonchoConfig,
    team: Config,
    key: Option<String>,
    /// Sessions (and their peers) already ensured in this process.
    ready: Mutex<HashSet<String>>,
}

impl HonchoMemory {
    /// A client for `cfg`; `key` is the resolved API key.
    pub fn new(
        cfg: &HonchoConfig,
        key: Option<String>,
        config: &Config,
    ) -> Result<Self, MemoryError> {
        let timeout = Duration::from_millis(cfg.timeout_ms.unwrap_or(3000).max(100));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| MemoryError::Failed(format!("honcho client: {e}")))?;
        Ok(HonchoMemory {
            client,
            base: cfg.url.trim_end_matches('/').to_owned(),
            workspace: peer_id(&cfg.workspace),
            cfg: cfg.clone(),
            team: config.clone(),
            key,
            ready: Mutex::new(HashSet::new()),
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, MemoryError> {
        let url = format!("{}/v3/workspaces{path}", self.base);
        let mut req = self.client.request(method, &url);
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| MemoryError::Unavailable(format!("honcho {url}: {e}")))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(MemoryError::Failed(format!(
                "honcho {url} answered {status}"
            )));
        }
        // 200 and 201 both mean "here it is" for get-or-create.
        Ok(resp.json().await.unwrap_or(Value::Null))
    }

    fn peers(&self, turn: &MemoryTurn<'_>) -> (String, String) {
        let human = self
            .cfg
            .human_peer
            .clone()
            .or_else(|| private_key(&self.team, turn.sender))
            .unwrap_or_else(|| "unknown".into());
        let agent = self
            .cfg
            .agent_peer
            .clone()
            .unwrap_or_else(|| turn.agent_id.to_owned());
        (peer_id(&human), peer_id(&agent))
    }

    fn session(&self, turn: &MemoryTurn<'_>) -> String {
        peer_id(&format!("{}-{}", turn.agent_id, turn.session_id))
    }

    /// Ensures workspace, both peers and the session exist (once per process and session).
    async fn ensure(&self, turn: &MemoryTurn<'_>) -> Result<(String, String, String), MemoryError> {
        let (human, agent) = self.peers(turn);
        let session = self.session(turn);
        let key = format!("{session}/{human}/{agent}");
        if self
            .ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
        {
            return Ok((human, agent, session));
        }
        let ws = &self.workspace;
        self.call(reqwest::Method::POST, "", Some(json!({"id": ws})))
            .await?;
        for p in [&human, &agent] {
            self.call(
                reqwest::Method::POST,
                &format!("/{ws}/peers"),
                Some(json!({"id": p})),
            )
            .await?;
        }
        self.call(
            reqwest::Method::POST,
            &format!("/{ws}/sessions"),
            Some(json!({"id": session, "peers": {human.as_str(): {}, agent.as_str(): {}}})),
        )
        .await?;
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key);
        Ok((human, agent, session))
    }
}

#[async_trait]
impl MemoryBackend for HonchoMemory {
    async fn context_block(
        &self,
        turn: &MemoryTurn<'_>,
        _message: &str,
    ) -> Result<Option<String>, MemoryError> {
        let (human, _, session) = self.ensure(turn).await?;
        let ws = &self.workspace;
        let rep = self
            .call(
                reqwest::Method::POST,
                &format!("/{ws}/peers/{human}/representation"),
                Some(json!({"session_id": session})),
            )
            .await?;
        let summaries = self
            .call(
                reqwest::Method::GET,
                &format!("/{ws}/sessions/{session}/summaries"),
                None,
            )
            .await?;
        let known = rep["representation"]
            .as_str()
            .unwrap_or("")
            .trim()
            .to_owned();
        let summary = summaries["short_summary"]["content"]
            .as_str()
            .or_else(|| summaries["long_summary"]["content"].as_str())
            .unwrap_or("")
            .trim()
            .to_owned();
        let mut body = String::new();
        if !known.is_empty() {
            body.push_str(&format!("Known about {human}: {known}\n"));
        }
        if !summary.is_empty() {
            body.push_str(&format!("Session summary: {summary}\n"));
        }
        Ok((!body.is_empty()).then(|| format!("[MEMORY]\n{body}[/MEMORY]")))
    }

    async fn record_exchange(
        &self,
        turn: &MemoryTurn<'_>,
        user: &str,
        reply: &str,
    ) -> Result<(), MemoryError> {
        let (human, agent, session) = self.ensure(turn).await?;
        let ws = &self.workspace;
        self.call(
            reqwest::Method::POST,
            &format!("/{ws}/sessions/{session}/messages"),
            Some(json!({"messages": [
                {"peer_id": human, "content": user},
                {"peer_id": agent, "content": reply},
            ]})),
        )
        .await
        .map(|_| ())
    }
}
