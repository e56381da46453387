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

/// The configured backend, or `None` for `memory.backend: none`.
pub enum Backend {
    /// SQLite (its extra operations — decay, stats, export — are reachable).
    Sqlite(Arc<SqliteMemory>),
    /// Honcho.
    Honcho(Arc<HonchoMemory>),
}

impl Backend {
    /// As the engine's trait object.
    pub fn as_dyn(&self) -> Arc<dyn MemoryBackend> {
        match self {
            Backend::Sqlite(s) => s.clone(),
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
        .map_err(|e| MemoryError(e.to_string()))
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
            if let Some(e) = &m.embedder {
                let key = secret(&e.api_key, vault, "memory.embedder.api_key")?;
                let timeout = Duration::from_secs(e.timeout_secs.unwrap_or(10).max(1));
                mem = mem.with_embedder(Arc::new(OpenAiEmbedder::new(
                    &e.base_url,
                    &e.model,
                    key,
                    timeout,
                )?));
            }
            Ok(Some(Backend::Sqlite(Arc::new(mem))))
        }
        MemoryBackendKind::Honcho => {
            let h = m.honcho.as_ref().ok_or_else(|| {
                MemoryError(
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
