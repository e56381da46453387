//! `SqliteMemory`: memories in SQLite with an FTS5 index, optional vectors, a change log,
//! scope-based visibility, dedup on store and decay.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, Row};
use serde::Serialize;
use strata_engine::config::{Config, MemoryConfig};
use strata_engine::memory::{Embedder, Memory, MemoryError, MemoryScope, MemoryType, Viewer};

use crate::text::{from_blob, normalize};

mod backend;
mod maintenance;
mod recall;

use crate::rank::VecIndex;

const SCHEMA_VERSION: i64 = 3;

/// Version 2: `taint` — what had tainted the turn that stored a memory.
const MIGRATION_2: &str = "ALTER TABLE memories ADD COLUMN taint TEXT;";

/// Version 3: the idempotency key of the call that stored (or merged) a memory, on its log
/// line: the same call run again finds it.
const MIGRATION_3: &str = "ALTER TABLE memory_log ADD COLUMN idempotency_key TEXT;
CREATE INDEX memory_log_by_key ON memory_log(idempotency_key) WHERE idempotency_key IS NOT NULL;";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memory_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    mid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    content TEXT NOT NULL,
    category TEXT,
    tags TEXT NOT NULL DEFAULT '[]',
    confidence REAL NOT NULL DEFAULT 1.0,
    pinned INTEGER NOT NULL DEFAULT 0,
    scope TEXT NOT NULL,
    created_by TEXT NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0,
    last_access INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    decayed_at INTEGER,
    archived INTEGER NOT NULL DEFAULT 0,
    archived_at INTEGER,
    embedding BLOB,
    embedder TEXT
);
CREATE INDEX IF NOT EXISTS memories_by_scope ON memories(scope, archived);
CREATE INDEX IF NOT EXISTS memories_by_updated ON memories(updated_at);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    content, category, tags, content='memories', content_rowid='mid',
    tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content, category, tags)
    VALUES (new.mid, new.content, new.category, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, category, tags)
    VALUES ('delete', old.mid, old.content, old.category, old.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE OF content, category, tags ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, category, tags)
    VALUES ('delete', old.mid, old.content, old.category, old.tags);
    INSERT INTO memories_fts(rowid, content, category, tags)
    VALUES (new.mid, new.content, new.category, new.tags);
END;
-- Per-term document counts straight from the FTS index (a view, no data of its own).
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts_vocab USING fts5vocab(memories_fts, 'row');
CREATE TABLE IF NOT EXISTS memory_log (
    seq INTEGER PRIMARY KEY,
    ts INTEGER NOT NULL,
    memory_id TEXT NOT NULL,
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT
);
";

const COLS: &str = "mid, id, type, content, category, tags, confidence, pinned, scope, created_by, \
                    access_count, last_access, created_at, updated_at, archived, taint";

fn row_to_memory(r: &Row<'_>) -> rusqlite::Result<(i64, Memory)> {
    let tags: String = r.get(5)?;
    let scope: String = r.get(8)?;
    let kind: String = r.get(2)?;
    Ok((
        r.get(0)?,
        Memory {
            id: r.get(1)?,
            memory_type: MemoryType::parse(&kind).unwrap_or_default(),
            content: r.get(3)?,
            category: r.get(4)?,
            tags: serde_json::from_str(&tags).unwrap_or_default(),
            confidence: r.get::<_, f64>(6)? as f32,
            pinned: r.get::<_, i64>(7)? != 0,
            scope: scope.parse().unwrap_or(MemoryScope::Global),
            created_by: r.get(9)?,
            access_count: r.get::<_, i64>(10)?.max(0) as u64,
            last_access: r.get(11)?,
            created_at: r.get(12)?,
            updated_at: r.get(13)?,
            archived: r.get::<_, i64>(14)? != 0,
            taint: r.get(15)?,
        },
    ))
}

/// What a decay run changed (or would change, with `dry_run`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DecayReport {
    /// Memories whose confidence went down.
    pub decayed: usize,
    /// Ids archived (fell below `archive_below`).
    pub archived: Vec<String>,
    /// Ids deleted (archived longer than `purge_after_days`).
    pub purged: Vec<String>,
}

/// Counts for `strata memory stats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// All rows.
    pub total: u64,
    /// Archived rows.
    pub archived: u64,
    /// Pinned rows.
    pub pinned: u64,
    /// Rows with a vector.
    pub with_vectors: u64,
    /// Rows per scope.
    pub by_scope: HashMap<String, u64>,
    /// Rows per type.
    pub by_type: HashMap<String, u64>,
}

/// The SQLite memory backend.
pub struct SqliteMemory {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    cfg: MemoryConfig,
    team: Config,
    embedder: Option<Arc<dyn Embedder>>,
    vectors: Arc<Mutex<VecIndex>>,
    clock: Arc<dyn Fn() -> i64 + Send + Sync>,
}

fn err(e: impl std::fmt::Display) -> MemoryError {
    MemoryError::failed(e)
}

fn system_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl SqliteMemory {
    /// Opens (creating) the memory database at `path`. `config` supplies `memory.*` and the
    /// team (for private-scope keys).
    pub fn open(path: &Path, config: &Config) -> Result<Self, MemoryError> {
        // Opened as every Strata database is (0600, busy timeout, WAL retried while another
        // process opens the same new file).
        let conn = strata_store::open_connection(path).map_err(MemoryError::unavailable)?;
        // Forgotten content is overwritten on disk, not just unlinked from the b-tree.
        conn.pragma_update(None, "secure_delete", "ON")
            .map_err(err)?;
        // Schema and version under the write lock: two processes opening a new file at once
        // would otherwise both find no version row and both insert one.
        conn.execute_batch("BEGIN IMMEDIATE").map_err(err)?;
        let version = conn.execute_batch(SCHEMA).and_then(|()| {
            conn.query_row("SELECT version FROM memory_schema", [], |r| {
                r.get::<_, i64>(0)
            })
            .optional()
        });
        let version = match version {
            Ok(v) => v,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(err(e));
            }
        };
        let checked = match version {
            Some(v) if v > SCHEMA_VERSION => Err(MemoryError::Corrupt(format!(
                "{} has memory schema {v}, newer than this binary's {SCHEMA_VERSION}; upgrade strata",
                path.display()
            ))),
            // A new file has the version-1 tables the schema just made.
            v => (|| {
                if v.unwrap_or(1) < 2 {
                    conn.execute_batch(MIGRATION_2)?;
                }
                if v.unwrap_or(1) < 3 {
                    conn.execute_batch(MIGRATION_3)?;
                }
                match v {
                    None => conn.execute(
                        "INSERT INTO memory_schema (version) VALUES (?1)",
                        [SCHEMA_VERSION],
                    ),
                    Some(_) => {
                        conn.execute("UPDATE memory_schema SET version = ?1", [SCHEMA_VERSION])
                    }
                }
                .map(|_| ())
            })()
            .map_err(err),
        };
        match checked {
            Ok(()) => conn.execute_batch("COMMIT").map_err(err)?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
        let mut index = VecIndex::default();
        {
            let mut stmt = conn
                .prepare("SELECT mid, scope, embedding FROM memories WHERE embedding IS NOT NULL AND archived = 0")
                .map_err(err)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Vec<u8>>(2)?,
                    ))
                })
                .map_err(err)?;
            for row in rows {
                let (mid, scope, blob) = row.map_err(err)?;
                index.insert(mid, &scope, &from_blob(&blob));
            }
        }
        Ok(SqliteMemory {
            conn: Arc::new(Mutex::new(conn)),
            path: path.to_path_buf(),
            cfg: config.memory.clone(),
            team: config.clone(),
            embedder: None,
            vectors: Arc::new(Mutex::new(index)),
            clock: Arc::new(system_now),
        })
    }

    /// Uses `embedder` for semantic recall and dedup.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Replaces the clock (Unix seconds; tests of decay).
    pub fn with_clock(mut self, clock: Arc<dyn Fn() -> i64 + Send + Sync>) -> Self {
        self.clock = clock;
        self
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn now(&self) -> i64 {
        (self.clock)()
    }

    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, MemoryError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut c)
        })
        .await
        .map_err(|e| MemoryError::Failed(format!("memory task failed: {e}")))?
        .map_err(err)
    }

    async fn embed_one(&self, text: &str) -> Option<Vec<f32>> {
        let e = self.embedder.as_ref()?;
        match e.embed(&[text.to_owned()]).await {
            Ok(mut v) if !v.is_empty() => {
                let mut x = v.swap_remove(0);
                normalize(&mut x);
                Some(x)
            }
            Ok(_) => None,
            Err(err) => {
                tracing::warn!(embedder = %e.name(), error = %err, "embedding failed; keyword recall only for this item");
                None
            }
        }
    }

    /// A SQL condition (and its parameters) limiting rows to what `viewer` sees.
    fn visibility(viewer: &Viewer) -> (String, Vec<String>) {
        if viewer.all {
            return ("1".into(), Vec::new());
        }
        let mut scopes = vec!["global".to_owned()];
        if let Some(a) = &viewer.agent {
            scopes.push(format!("agent:{a}"));
        }
        scopes.extend(viewer.groups.iter().map(|g| format!("group:{g}")));
        if let Some(p) = &viewer.private_key {
            scopes.push(format!("private:{p}"));
        }
        let marks = vec!["?"; scopes.len()].join(", ");
        let mut cond = format!("m.scope IN ({marks})");
        if viewer.fleet_read {
            cond = format!("({cond} OR m.scope LIKE 'agent:%')");
        }
        (cond, scopes)
    }
}
