//! `memory.*`: the memory backend, recall, decay, embeddings, Honcho. `docs/MEMORY.md` has
//! every key with its default.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `memory.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// `sqlite` (default), `postgres`, `honcho` or `none`.
    pub backend: MemoryBackendKind,
    /// The SQLite file, relative to the data dir (may be the sessions database).
    pub database: PathBuf,
    /// Agents see other agents' agent-scoped memories.
    pub fleet_read: bool,
    /// Named groups of agents (`group:<name>` scopes).
    pub groups: BTreeMap<String, Vec<String>>,
    /// Token budget of the `[MEMORY]` block (about 4 characters a token).
    pub context_tokens: usize,
    /// Memories recalled for the block besides the pinned ones.
    pub recall_limit: usize,
    /// Store every exchange as an episodic memory.
    pub record_exchanges: bool,
    /// Similarity at or above which a new memory merges into an existing one in its scope
    /// (cosine with an embedder, word overlap without).
    pub dedup_threshold: f32,
    /// Embeddings for semantic and hybrid recall; none = keyword only.
    pub embedder: Option<EmbedderConfig>,
    /// Confidence decay, archiving and purging.
    pub decay: DecayConfig,
    /// PostgreSQL for `backend: postgres`; unset keys (the whole section, usually) come from
    /// `storage.postgres`, so memory shares the store's server.
    pub postgres: Option<super::PostgresConfig>,
    /// Language of the full-text search on PostgreSQL (a text search configuration:
    /// `english`, `simple`, `german`…).
    pub language: String,
    /// The Honcho backend (`backend: honcho`).
    pub honcho: Option<HonchoConfig>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            backend: MemoryBackendKind::Sqlite,
            database: "memory.db".into(),
            fleet_read: false,
            groups: BTreeMap::new(),
            context_tokens: 600,
            recall_limit: 6,
            record_exchanges: true,
            dedup_threshold: 0.9,
            embedder: None,
            decay: DecayConfig::default(),
            postgres: None,
            language: "english".into(),
            honcho: None,
        }
    }
}

/// `memory.backend`
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum MemoryBackendKind {
    /// Embedded SQLite with FTS5 and vectors.
    #[default]
    Sqlite,
    /// PostgreSQL (`memory.postgres`, else the `storage.postgres` server), full-text search
    /// with `tsvector` and vectors ranked in process.
    Postgres,
    /// A Honcho server.
    Honcho,
    /// No memory.
    None,
}

/// `memory.embedder` — an OpenAI-compatible `/v1/embeddings` server (OpenAI, Ollama,
/// llama.cpp server, vLLM…).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbedderConfig {
    /// Base URL up to and including `/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// `vault:<key>`, `env:<VAR>` or literal; none for local servers.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Seconds per request (default 10).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// `memory.decay`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DecayConfig {
    /// Hours between decay runs inside `serve` (0 = never).
    pub interval_hours: u64,
    /// Confidence lost per day of not being used.
    pub daily_rate: f32,
    /// Memories used within this many days do not decay.
    pub grace_days: u32,
    /// Below this confidence a memory is archived (hidden from recall).
    pub archive_below: f32,
    /// Archived memories are deleted after this many days (0 = never).
    pub purge_after_days: u32,
}

impl Default for DecayConfig {
    fn default() -> Self {
        DecayConfig {
            interval_hours: 24,
            daily_rate: 0.02,
            grace_days: 14,
            archive_below: 0.2,
            purge_after_days: 0,
        }
    }
}

/// `memory.honcho`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HonchoConfig {
    /// Base URL (e.g. `https://api.honcho.dev`).
    pub url: String,
    /// Workspace id.
    pub workspace: String,
    /// Peer id of the human side (default: the sender's private key).
    #[serde(default)]
    pub human_peer: Option<String>,
    /// Peer id of the agent (default: the agent id).
    #[serde(default)]
    pub agent_peer: Option<String>,
    /// `vault:<key>`, `env:<VAR>` or literal.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Milliseconds per call (default 3000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}
