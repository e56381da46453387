//! Memory: what agents remember across sessions.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::agent::TurnContext;

/// Who may see a memory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum MemoryScope {
    /// One agent's own (default).
    Agent(String),
    /// One principal's private memory: visible only in turns whose sender is that principal.
    Private(String),
    /// Everyone's.
    Global,
    /// A named group of agents.
    Group(String),
}

/// A remembered item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Id.
    pub id: String,
    /// The text.
    pub content: String,
    /// Visibility.
    pub scope: MemoryScope,
    /// Free tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Never decays.
    #[serde(default)]
    pub pinned: bool,
}

/// Memory failures. The runtime logs them and goes on without memory.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("memory: {0}")]
pub struct MemoryError(pub String);

/// A memory store. Failures never fail a turn: the agent runtime logs them and goes on.
///
/// ```
/// use strata_engine::memory::*;
/// use strata_engine::agent::TurnContext;
///
/// /// Remembers nothing.
/// struct Amnesia;
///
/// #[strata_engine::async_trait]
/// impl MemoryBackend for Amnesia {
///     async fn recall(&self, _: &[MemoryScope], _: &str, _: usize) -> Result<Vec<Memory>, MemoryError> { Ok(vec![]) }
///     async fn store(&self, _: Memory) -> Result<String, MemoryError> { Err(MemoryError("read-only".into())) }
///     async fn forget(&self, _: &str, _: &str) -> Result<bool, MemoryError> { Ok(false) }
///     async fn context_block(&self, _: &TurnContext, _: &str) -> Result<Option<String>, MemoryError> { Ok(None) }
///     async fn record_exchange(&self, _: &TurnContext, _: &str, _: &str) -> Result<(), MemoryError> { Ok(()) }
/// }
/// ```
#[async_trait]
pub trait MemoryBackend: Send + Sync {
    /// Memories relevant to `query` within `scopes`, best first.
    async fn recall(
        &self,
        scopes: &[MemoryScope],
        query: &str,
        limit: usize,
    ) -> Result<Vec<Memory>, MemoryError>;
    /// Stores a memory, returns its id.
    async fn store(&self, memory: Memory) -> Result<String, MemoryError>;
    /// Erases a memory; `reason` is logged. Returns whether it existed.
    async fn forget(&self, id: &str, reason: &str) -> Result<bool, MemoryError>;
    /// The block injected into the system instruction before a model call, if any.
    async fn context_block(
        &self,
        turn: &TurnContext,
        message: &str,
    ) -> Result<Option<String>, MemoryError>;
    /// Called after each turn with what was said.
    async fn record_exchange(
        &self,
        turn: &TurnContext,
        user: &str,
        reply: &str,
    ) -> Result<(), MemoryError>;
}
