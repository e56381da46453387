//! # strata-memory
//!
//! Memory backends for Strata agents (`memory.backend` in config):
//!
//! - [`SqliteMemory`] (default): memories in SQLite with an FTS5 index and optional vectors,
//!   scopes per agent, person, group and global, hybrid recall (reciprocal rank fusion of
//!   keyword and cosine ranks, keyword-only when no embedder answers), dedup on store,
//!   decay/archive/purge, and a change log;
//! - [`HonchoMemory`]: a Honcho v3 client.
//!
//! [`build`] makes the configured one. `docs/MEMORY.md` explains scopes, recall and decay.

mod embed;
mod honcho;
pub mod kept;
pub mod rank;
mod sqlite;
pub mod text;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use strata_engine::config::{Config, MemoryBackendKind};
use strata_engine::memory::{MemoryBackend, MemoryError};
use strata_engine::secret::{Vault, resolve_ref};

pub use embed::OpenAiEmbedder;
pub use honcho::HonchoMemory;
pub use sqlite::{DecayReport, SqliteMemory, Stats};

/// What [`kept_backend!`] expands to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use strata_engine::Principal;
    pub use strata_engine::memory::{
        Memory, MemoryBackend, MemoryError, MemoryQuery, MemoryScope, MemoryTurn, NewMemory,
        Stored, Viewer,
    };
}

use strata_engine::memory::{Memory, NewMemory};

/// A stored memory as its row holds it, vector included (`strata storage migrate`).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRow {
    /// The memory.
    pub memory: Memory,
    /// When decay last ran over it (Unix seconds).
    pub decayed_at: Option<i64>,
    /// When it was archived.
    pub archived_at: Option<i64>,
    /// Its vector, unit length.
    pub embedding: Option<Vec<f32>>,
    /// The embedder that made it.
    pub embedder: Option<String>,
}

/// One change-log entry.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    /// Its sequence number in the source (the copy's key).
    pub seq: i64,
    /// Unix seconds.
    pub ts: i64,
    /// The memory.
    pub memory_id: String,
    /// `insert`, `merge`, `delete`, `archive`, `purge`.
    pub action: String,
    /// Who.
    pub actor: String,
    /// Why.
    pub reason: Option<String>,
}

/// The operations of a memory backend Strata keeps itself (SQLite, PostgreSQL) beyond the
/// engine's trait: what `strata memory` and the decay job use.
#[async_trait::async_trait]
pub trait MemoryMaintenance: MemoryBackend {
    /// Where it is, for logs (a file, or `host:port/database` — never a password).
    fn location(&self) -> String;
    /// Runs decay at the backend's clock's now (see [`SqliteMemory::decay`]).
    async fn decay(&self, dry_run: bool) -> Result<DecayReport, MemoryError>;
    /// Counts per scope and type.
    async fn stats(&self) -> Result<Stats, MemoryError>;
    /// Every memory, archived ones too.
    async fn export(&self) -> Result<Vec<Memory>, MemoryError>;
    /// Change-log entries for one memory, oldest first: (ts, action, actor, reason).
    async fn history(
        &self,
        id: &str,
    ) -> Result<Vec<(i64, String, String, Option<String>)>, MemoryError>;
    /// Inserts many memories without dedup or embedding (restore, benchmarks).
    async fn bulk_insert(
        &self,
        items: Vec<NewMemory>,
        vectors: Vec<Option<Vec<f32>>>,
    ) -> Result<usize, MemoryError>;
    /// Up to `limit` rows whose row id is above `after`, and the last row id read.
    async fn dump(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<MemoryRow>, Option<i64>), MemoryError>;
    /// Up to `limit` change-log entries with a sequence number above `after`.
    async fn dump_log(&self, after: i64, limit: usize) -> Result<Vec<LogRow>, MemoryError>;
}

/// The configured backend, or `None` for `memory.backend: none`.
#[derive(Clone)]
pub enum Backend {
    /// A backend Strata keeps itself (its extra operations — decay, stats, export — are
    /// reachable).
    Kept(Arc<dyn MemoryMaintenance>),
    /// Honcho.
    Honcho(Arc<HonchoMemory>),
}

impl Backend {
    /// As the engine's trait object.
    pub fn as_dyn(&self) -> Arc<dyn MemoryBackend> {
        match self {
            Backend::Kept(s) => s.clone(),
            Backend::Honcho(h) => h.clone(),
        }
    }
}

fn secret(
    r: &Option<String>,
    vault: Option<&dyn Vault>,
    path: &str,
) -> Result<Option<String>, MemoryError> {
    r.as_deref()
        .map(|v| resolve_ref(v, vault, path).map(|s| s.expose().to_owned()))
        .transpose()
        .map_err(MemoryError::invalid)
}

/// The embedder `memory.embedder` configures, if any.
pub fn embedder(
    config: &Config,
    vault: Option<&dyn Vault>,
) -> Result<Option<Arc<dyn strata_engine::memory::Embedder>>, MemoryError> {
    let Some(e) = &config.memory.embedder else {
        return Ok(None);
    };
    let key = secret(&e.api_key, vault, "memory.embedder.api_key")?;
    let timeout = Duration::from_secs(e.timeout_secs.unwrap_or(10).max(1));
    Ok(Some(Arc::new(OpenAiEmbedder::new(
        &e.base_url,
        &e.model,
        key,
        timeout,
    )?)))
}

/// Builds the backend `config.memory` asks for, its files under `data_dir`.
pub fn build(
    config: &Config,
    data_dir: &Path,
    vault: Option<&dyn Vault>,
) -> Result<Option<Backend>, MemoryError> {
    let m = &config.memory;
    match m.backend {
        MemoryBackendKind::None => Ok(None),
        MemoryBackendKind::Sqlite => {
            let mut mem = SqliteMemory::open(&data_dir.join(&m.database), config)?;
            if let Some(e) = embedder(config, vault)? {
                mem = mem.with_embedder(e);
            }
            Ok(Some(Backend::Kept(Arc::new(mem))))
        }
        MemoryBackendKind::Postgres => Err(MemoryError::Invalid(
            "`memory.backend: postgres` is opened by the launcher (`strata-postgres`); this \
             binary was built without its `postgres` feature"
                .into(),
        )),
        MemoryBackendKind::Honcho => {
            let h = m.honcho.as_ref().ok_or_else(|| {
                MemoryError::Invalid(
                    "`memory.backend: honcho` needs a `memory.honcho` section (url, workspace)"
                        .into(),
                )
            })?;
            let key = secret(&h.api_key, vault, "memory.honcho.api_key")?;
            Ok(Some(Backend::Honcho(Arc::new(HonchoMemory::new(
                h, key, config,
            )?))))
        }
    }
}
