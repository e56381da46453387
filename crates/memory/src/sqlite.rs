//! `SqliteMemory`: memories in SQLite with an FTS5 index, optional vectors, a change log,
//! scope-based visibility, dedup on store and decay.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde::Serialize;
use strata_engine::Principal;
use strata_engine::config::{Config, MemoryConfig};
use strata_engine::memory::{
    Embedder, Memory, MemoryBackend, MemoryError, MemoryQuery, MemoryScope, MemoryTurn, MemoryType,
    NewMemory, SearchMode, Stored, Viewer, private_key,
};

use crate::text::{dot, from_blob, normalize, to_blob, word_similarity};

const SCHEMA_VERSION: i64 = 1;

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
                    access_count, last_access, created_at, updated_at, archived";

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

/// The in-memory copy of the vectors (brute-force cosine over unit vectors).
#[derive(Default)]
struct VecIndex {
    dim: usize,
    mids: Vec<i64>,
    scopes: Vec<Arc<str>>,
    data: Vec<f32>,
    pos: HashMap<i64, usize>,
}

impl VecIndex {
    fn insert(&mut self, mid: i64, scope: &str, v: &[f32]) {
        if self.dim == 0 {
            self.dim = v.len();
        }
        if v.len() != self.dim {
            return; // a different embedder's vector: ignored until re-embedded
        }
        self.remove(mid);
        self.pos.insert(mid, self.mids.len());
        self.mids.push(mid);
        self.scopes.push(Arc::from(scope));
        self.data.extend_from_slice(v);
    }

    fn remove(&mut self, mid: i64) {
        let Some(i) = self.pos.remove(&mid) else {
            return;
        };
        let last = self.mids.len() - 1;
        if i != last {
            let moved = self.mids[last];
            self.mids.swap(i, last);
            self.scopes.swap(i, last);
            let (d, dim) = (&mut self.data, self.dim);
            for k in 0..dim {
                d.swap(i * dim + k, last * dim + k);
            }
            self.pos.insert(moved, i);
        }
        self.mids.pop();
        self.scopes.pop();
        self.data.truncate(last * self.dim);
    }

    /// The `k` best (mid, cosine) among entries whose scope passes `visible`.
    fn top(&self, q: &[f32], k: usize, visible: impl Fn(&str) -> bool) -> Vec<(i64, f32)> {
        if q.len() != self.dim || self.dim == 0 {
            return Vec::new();
        }
        let mut best: Vec<(i64, f32)> = Vec::with_capacity(k + 1);
        for (i, mid) in self.mids.iter().enumerate() {
            if !visible(&self.scopes[i]) {
                continue;
            }
            let s = dot(q, &self.data[i * self.dim..(i + 1) * self.dim]);
            if best.len() < k || best.last().is_some_and(|(_, b)| s > *b) {
                let at = best.partition_point(|(_, b)| *b >= s);
                best.insert(at, (*mid, s));
                best.truncate(k);
            }
        }
        best
    }
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
    MemoryError(e.to_string())
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
        let conn = strata_store::open_connection(path).map_err(|e| MemoryError(e.to_string()))?;
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
            None => conn
                .execute(
                    "INSERT INTO memory_schema (version) VALUES (?1)",
                    [SCHEMA_VERSION],
                )
                .map(|_| ())
                .map_err(err),
            Some(v) if v > SCHEMA_VERSION => Err(MemoryError(format!(
                "{} has memory schema {v}, newer than this binary's {SCHEMA_VERSION}; upgrade strata",
                path.display()
            ))),
            Some(_) => Ok(()),
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
        .map_err(|e| MemoryError(format!("memory task failed: {e}")))?
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

    async fn keyword(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Vec<(i64, Memory)>, MemoryError> {
        let terms = crate::text::terms(&q.text, 16);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let terms = self.prune_common(terms).await;
        let Some(fts) = crate::text::fts_query_terms(&terms) else {
            return Ok(Vec::new());
        };
        // First the best candidates from the index alone (no per-match join), then the
        // filters; only when the filters leave too few does the full join run.
        let candidates = (limit * 8).max(64);
        let first = self
            .keyword_sql(viewer, q, &fts, limit, Some(candidates))
            .await?;
        if first.len() >= limit {
            return Ok(first);
        }
        self.keyword_sql(viewer, q, &fts, limit, None).await
    }

    /// Drops query terms so common that ranking their whole posting lists costs more than they
    /// tell (in more than 5 % of the memories, at least 1,000), as long as a rarer term remains;
    /// when every term is that common, only the rarest stays. Document counts come from the
    /// index's vocabulary (terms it does not hold exactly — stemmed forms — are kept).
    async fn prune_common(&self, terms: Vec<String>) -> Vec<String> {
        if terms.len() < 2 {
            return terms;
        }
        let t2 = terms.clone();
        let counts = self
            .db(move |c| {
                let total: i64 =
                    c.query_row("SELECT COALESCE(max(mid), 0) FROM memories", [], |r| {
                        r.get(0)
                    })?;
                let mut st =
                    c.prepare_cached("SELECT doc FROM memories_fts_vocab WHERE term = ?")?;
                let mut out = Vec::with_capacity(t2.len());
                for t in &t2 {
                    let n: i64 = st.query_row([t], |r| r.get(0)).optional()?.unwrap_or(0);
                    out.push(n);
                }
                Ok((total, out))
            })
            .await;
        let Ok((total, counts)) = counts else {
            return terms;
        };
        let cap = (total / 20).max(1000);
        if counts.iter().all(|n| *n <= cap) {
            return terms;
        }
        if counts.iter().any(|n| *n <= cap) {
            return terms
                .into_iter()
                .zip(counts)
                .filter(|(_, n)| *n <= cap)
                .map(|(t, _)| t)
                .collect();
        }
        let rarest = counts
            .iter()
            .enumerate()
            .min_by_key(|(_, n)| **n)
            .map_or(0, |(i, _)| i);
        vec![terms[rarest].clone()]
    }

    async fn keyword_sql(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        fts: &str,
        limit: usize,
        candidates: Option<usize>,
    ) -> Result<Vec<(i64, Memory)>, MemoryError> {
        let (vis, mut args) = Self::visibility(viewer);
        let cols = COLS
            .split(", ")
            .map(|c| format!("m.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let cap = candidates
            .map(|n| format!(" ORDER BY score LIMIT {n}"))
            .unwrap_or_default();
        let mut sql = format!(
            "SELECT {cols} FROM (SELECT rowid AS r, bm25(memories_fts, 1.0, 0.5, 0.5) AS score \
             FROM memories_fts WHERE memories_fts MATCH ?{cap}) f JOIN memories m ON m.mid = f.r \
             WHERE m.archived = 0 AND {vis}"
        );
        let mut all = vec![fts.to_owned()];
        all.append(&mut args);
        if let Some(t) = q.memory_type {
            sql.push_str(" AND m.type = ?");
            all.push(t.as_str().to_owned());
        }
        if let Some(c) = &q.category {
            sql.push_str(" AND m.category = ?");
            all.push(c.clone());
        }
        sql.push_str(&format!(" ORDER BY f.score LIMIT {limit}"));
        self.db(move |c| {
            c.prepare_cached(&sql)?
                .query_map(params_from_iter(all.iter()), row_to_memory)?
                .collect()
        })
        .await
    }

    async fn by_mids(
        &self,
        mids: Vec<i64>,
        q: Option<&MemoryQuery>,
    ) -> Result<HashMap<i64, Memory>, MemoryError> {
        if mids.is_empty() {
            return Ok(HashMap::new());
        }
        let marks = vec!["?"; mids.len()].join(", ");
        let mut sql =
            format!("SELECT {COLS} FROM memories m WHERE mid IN ({marks}) AND archived = 0");
        let mut args: Vec<rusqlite::types::Value> = mids.into_iter().map(Into::into).collect();
        if let Some(q) = q {
            if let Some(t) = q.memory_type {
                sql.push_str(" AND type = ?");
                args.push(t.as_str().to_owned().into());
            }
            if let Some(c) = &q.category {
                sql.push_str(" AND category = ?");
                args.push(c.clone().into());
            }
        }
        self.db(move |c| {
            c.prepare(&sql)?
                .query_map(params_from_iter(args.iter()), row_to_memory)?
                .collect::<rusqlite::Result<HashMap<i64, Memory>>>()
        })
        .await
    }

    async fn semantic(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Option<Vec<(i64, Memory)>>, MemoryError> {
        let Some(qv) = self.embed_one(&q.text).await else {
            return Ok(None);
        };
        let filtered = q.memory_type.is_some() || q.category.is_some();
        let want = if filtered { limit * 4 } else { limit };
        let hits = {
            let idx = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
            idx.top(&qv, want, |scope| viewer.sees_str(scope))
        };
        let rows = self
            .by_mids(hits.iter().map(|(m, _)| *m).collect(), Some(q))
            .await?;
        Ok(Some(
            hits.into_iter()
                .filter_map(|(mid, _)| rows.get(&mid).map(|m| (mid, m.clone())))
                .take(limit)
                .collect(),
        ))
    }

    async fn touch(&self, mids: Vec<i64>) {
        if mids.is_empty() {
            return;
        }
        let now = self.now();
        let marks = vec!["?"; mids.len()].join(", ");
        let sql = format!(
            "UPDATE memories SET access_count = access_count + 1, last_access = {now} WHERE mid IN ({marks})"
        );
        let r = self
            .db(move |c| {
                c.prepare_cached(&sql)?
                    .execute(params_from_iter(mids.iter()))
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "memory access stats not updated");
        }
    }

    /// Runs decay at the clock's now: unused, unpinned memories lose confidence
    /// (`daily_rate` per day since they were last used or decayed, after `grace_days`), fall
    /// into the archive below `archive_below`, and leave it for good after
    /// `purge_after_days`. `dry_run` reports without changing anything.
    pub async fn decay(&self, dry_run: bool) -> Result<DecayReport, MemoryError> {
        let now = self.now();
        let d = self.cfg.decay.clone();
        let report = self
            .db(move |c| {
                let tx = c.transaction()?;
                let mut report = DecayReport::default();
                let grace = now - i64::from(d.grace_days) * 86_400;
                // Decay starts `grace_days` after the last use and counts from the later of
                // that and the previous run.
                let rows: Vec<(i64, String, f64, i64, Option<i64>)> = tx
                    .prepare(
                        "SELECT mid, id, confidence, MAX(created_at, COALESCE(last_access, 0)), decayed_at \
                         FROM memories WHERE pinned = 0 AND archived = 0 AND COALESCE(last_access, created_at) < ?1",
                    )?
                    .query_map([grace], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                for (mid, id, conf, used, decayed_at) in rows {
                    let from = (used + i64::from(d.grace_days) * 86_400).max(decayed_at.unwrap_or(i64::MIN));
                    let days = (now - from) as f64 / 86_400.0;
                    if days <= 0.0 {
                        continue;
                    }
                    let next = (conf - f64::from(d.daily_rate) * days).max(0.0);
                    report.decayed += 1;
                    let archive = next < f64::from(d.archive_below) - 1e-9;
                    if archive {
                        report.archived.push(id.clone());
                    }
                    if !dry_run {
                        tx.execute(
                            "UPDATE memories SET confidence = ?2, decayed_at = ?3, archived = ?4, \
                             archived_at = CASE WHEN ?4 = 1 THEN ?3 ELSE archived_at END WHERE mid = ?1",
                            params![mid, next, now, archive as i64],
                        )?;
                        if archive {
                            tx.execute(
                                "INSERT INTO memory_log (ts, memory_id, action, actor, reason) VALUES (?1, ?2, 'archive', 'decay', ?3)",
                                params![now, id, format!("confidence {next:.2} below {}", d.archive_below)],
                            )?;
                        }
                    }
                }
                if d.purge_after_days > 0 {
                    let cutoff = now - i64::from(d.purge_after_days) * 86_400;
                    let old: Vec<String> = tx
                        .prepare("SELECT id FROM memories WHERE archived = 1 AND archived_at <= ?1")?
                        .query_map([cutoff], |r| r.get(0))?
                        .collect::<rusqlite::Result<_>>()?;
                    if !dry_run {
                        for id in &old {
                            tx.execute("DELETE FROM memories WHERE id = ?1", [id])?;
                            tx.execute(
                                "INSERT INTO memory_log (ts, memory_id, action, actor, reason) VALUES (?1, ?2, 'purge', 'decay', 'archived too long')",
                                params![now, id],
                            )?;
                        }
                    }
                    report.purged = old;
                }
                if dry_run {
                    tx.rollback()?;
                } else {
                    tx.commit()?;
                }
                Ok(report)
            })
            .await?;
        if !dry_run {
            // Archived and purged memories leave the vector index.
            let gone: Vec<String> = report
                .archived
                .iter()
                .chain(&report.purged)
                .cloned()
                .collect();
            if !gone.is_empty() {
                self.reload_vectors().await?;
            }
        }
        Ok(report)
    }

    async fn reload_vectors(&self) -> Result<(), MemoryError> {
        let rows: Vec<(i64, String, Vec<u8>)> = self
            .db(|c| {
                c.prepare("SELECT mid, scope, embedding FROM memories WHERE embedding IS NOT NULL AND archived = 0")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .await?;
        let mut idx = VecIndex::default();
        for (mid, scope, blob) in rows {
            idx.insert(mid, &scope, &from_blob(&blob));
        }
        *self.vectors.lock().unwrap_or_else(|p| p.into_inner()) = idx;
        Ok(())
    }

    /// Inserts many memories in one transaction without dedup or embedding — for restoring
    /// and for benchmarks; `vectors` (unit length or not) go with the item at the same index.
    pub async fn bulk_insert(
        &self,
        items: Vec<NewMemory>,
        vectors: Vec<Option<Vec<f32>>>,
    ) -> Result<usize, MemoryError> {
        let now = self.now();
        let mut vectors = vectors;
        vectors.resize(items.len(), None);
        for v in vectors.iter_mut().flatten() {
            normalize(v);
        }
        let rows: Vec<(String, NewMemory, Option<Vec<f32>>)> = items
            .into_iter()
            .zip(vectors)
            .map(|(m, v)| (uuid::Uuid::new_v4().to_string(), m, v))
            .collect();
        let inserted: Vec<(i64, String, Option<Vec<f32>>)> = self
            .db(move |c| {
                let tx = c.transaction()?;
                let mut out = Vec::with_capacity(rows.len());
                {
                    let mut ins = tx.prepare_cached(
                        "INSERT INTO memories (id, type, content, category, tags, confidence, pinned, scope, created_by, \
                         created_at, updated_at, embedding) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)",
                    )?;
                    for (id, m, v) in rows {
                        ins.execute(params![
                            id,
                            m.memory_type.as_str(),
                            m.content,
                            m.category,
                            serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into()),
                            f64::from(m.confidence.unwrap_or(1.0)),
                            m.pinned as i64,
                            m.scope.to_string(),
                            m.created_by,
                            now,
                            v.as_deref().map(to_blob),
                        ])?;
                        out.push((tx.last_insert_rowid(), m.scope.to_string(), v));
                    }
                }
                tx.commit()?;
                Ok(out)
            })
            .await?;
        let n = inserted.len();
        let mut idx = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
        for (mid, scope, v) in inserted {
            if let Some(v) = v {
                idx.insert(mid, &scope, &v);
            }
        }
        Ok(n)
    }

    /// Counts per scope and type.
    pub async fn stats(&self) -> Result<Stats, MemoryError> {
        self.db(|c| {
            let mut s = Stats::default();
            c.query_row(
                "SELECT COUNT(*), COALESCE(SUM(archived), 0), COALESCE(SUM(pinned), 0), COUNT(embedding) FROM memories",
                [],
                |r| {
                    s.total = r.get::<_, i64>(0)? as u64;
                    s.archived = r.get::<_, i64>(1)? as u64;
                    s.pinned = r.get::<_, i64>(2)? as u64;
                    s.with_vectors = r.get::<_, i64>(3)? as u64;
                    Ok(())
                },
            )?;
            for (sql, map) in [
                ("SELECT scope, COUNT(*) FROM memories GROUP BY scope", &mut s.by_scope),
                ("SELECT type, COUNT(*) FROM memories GROUP BY type", &mut s.by_type),
            ] {
                let rows: Vec<(String, i64)> = c
                    .prepare(sql)?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                map.extend(rows.into_iter().map(|(k, v)| (k, v as u64)));
            }
            Ok(s)
        })
        .await
    }

    /// Every memory, archived ones too (export).
    pub async fn export(&self) -> Result<Vec<Memory>, MemoryError> {
        self.db(|c| {
            c.prepare(&format!("SELECT {COLS} FROM memories m ORDER BY mid"))?
                .query_map([], |r| row_to_memory(r).map(|(_, m)| m))?
                .collect()
        })
        .await
    }

    /// Change-log entries for one memory, oldest first: (ts, action, actor, reason).
    pub async fn history(
        &self,
        id: &str,
    ) -> Result<Vec<(i64, String, String, Option<String>)>, MemoryError> {
        let id = id.to_owned();
        self.db(move |c| {
            c.prepare("SELECT ts, action, actor, reason FROM memory_log WHERE memory_id = ?1 ORDER BY seq")?
                .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .await
    }

    /// Finds a near-duplicate of `content` in `scope`: (mid, id, content).
    async fn duplicate(
        &self,
        scope: &MemoryScope,
        content: &str,
        vector: Option<&[f32]>,
    ) -> Result<Option<(i64, String)>, MemoryError> {
        let threshold = self.cfg.dedup_threshold;
        if let Some(v) = vector {
            let scope_s = scope.to_string();
            let hit = {
                let idx = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
                idx.top(v, 1, |s| s == scope_s)
            };
            if let Some((mid, sim)) = hit.first()
                && *sim >= threshold
            {
                let mid = *mid;
                let id: Option<String> = self
                    .db(move |c| {
                        c.query_row("SELECT id FROM memories WHERE mid = ?1", [mid], |r| {
                            r.get(0)
                        })
                        .optional()
                    })
                    .await?;
                return Ok(id.map(|id| (mid, id)));
            }
            return Ok(None);
        }
        let viewer = Viewer {
            agent: None,
            private_key: None,
            groups: Vec::new(),
            fleet_read: false,
            all: true,
        };
        let q = MemoryQuery {
            text: content.to_owned(),
            limit: 5,
            ..Default::default()
        };
        for (mid, m) in self.keyword(&viewer, &q, 20).await? {
            if m.scope == *scope && word_similarity(&m.content, content) >= threshold {
                return Ok(Some((mid, m.id)));
            }
        }
        Ok(None)
    }
}

fn format_block(items: &[Memory], budget_chars: usize) -> Option<String> {
    let mut body = String::new();
    for m in items {
        let label = match &m.category {
            Some(c) => format!("{}/{c}", m.memory_type.as_str()),
            None => m.memory_type.as_str().to_owned(),
        };
        let pin = if m.pinned { ", pinned" } else { "" };
        let line = format!("- [{label}{pin}] {}\n", m.content.replace('\n', " "));
        if body.len() + line.len() > budget_chars {
            break;
        }
        body.push_str(&line);
    }
    (!body.is_empty()).then(|| format!("[MEMORY]\n{body}[/MEMORY]"))
}

#[async_trait]
impl MemoryBackend for SqliteMemory {
    fn viewer(&self, agent: Option<&str>, sender: &Principal) -> Viewer {
        let groups = match agent {
            Some(a) => self
                .cfg
                .groups
                .iter()
                .filter(|(_, members)| members.iter().any(|m| m == a))
                .map(|(g, _)| g.clone())
                .collect(),
            None => Vec::new(),
        };
        Viewer {
            agent: agent.map(str::to_owned),
            private_key: private_key(&self.team, sender),
            groups,
            fleet_read: self.cfg.fleet_read,
            all: false,
        }
    }

    async fn context_block(
        &self,
        turn: &MemoryTurn<'_>,
        message: &str,
    ) -> Result<Option<String>, MemoryError> {
        let viewer = self.viewer(Some(turn.agent_id), turn.sender);
        let (vis, args) = Self::visibility(&viewer);
        let pinned: Vec<Memory> = self
            .db(move |c| {
                c.prepare(&format!(
                    "SELECT {COLS} FROM memories m WHERE pinned = 1 AND archived = 0 AND {vis} ORDER BY updated_at DESC LIMIT 20"
                ))?
                .query_map(params_from_iter(args.iter()), |r| row_to_memory(r).map(|(_, m)| m))?
                .collect()
            })
            .await?;
        let recalled = self
            .search(
                &viewer,
                &MemoryQuery {
                    text: message.to_owned(),
                    limit: self.cfg.recall_limit,
                    ..Default::default()
                },
            )
            .await?;
        let mut items = pinned;
        for m in recalled {
            if !items.iter().any(|x| x.id == m.id) {
                items.push(m);
            }
        }
        Ok(format_block(
            &items,
            self.cfg.context_tokens.saturating_mul(4),
        ))
    }

    async fn record_exchange(
        &self,
        turn: &MemoryTurn<'_>,
        user: &str,
        reply: &str,
    ) -> Result<(), MemoryError> {
        if !self.cfg.record_exchanges
            || reply.trim().is_empty()
            || strata_engine::agent::is_no_reply(reply)
        {
            return Ok(());
        }
        let viewer = self.viewer(Some(turn.agent_id), turn.sender);
        // What a person said stays theirs: their exchanges go to their private scope.
        let scope = match &viewer.private_key {
            Some(p) => MemoryScope::Private(p.clone()),
            None => viewer.default_scope(),
        };
        let cut = |s: &str| s.chars().take(1000).collect::<String>();
        let content = format!(
            "{} said: {}\n{} answered: {}",
            turn.sender,
            cut(user),
            turn.agent_id,
            cut(reply)
        );
        self.store(
            &viewer,
            NewMemory {
                content,
                memory_type: MemoryType::Episodic,
                category: Some("exchange".into()),
                tags: vec![format!("channel:{}", turn.channel_id)],
                scope,
                pinned: false,
                created_by: format!("agent:{}", turn.agent_id),
                confidence: Some(0.6),
            },
        )
        .await
        .map(|_| ())
    }

    async fn search(&self, viewer: &Viewer, q: &MemoryQuery) -> Result<Vec<Memory>, MemoryError> {
        let limit = q.limit.clamp(1, 100);
        let mut ranked: Vec<(i64, Memory)> = match q.mode {
            SearchMode::Keyword => self.keyword(viewer, q, limit).await?,
            SearchMode::Semantic => match self.semantic(viewer, q, limit).await? {
                Some(v) => v,
                None => self.keyword(viewer, q, limit).await?,
            },
            SearchMode::Hybrid => {
                let kw = self.keyword(viewer, q, limit * 3).await?;
                match self.semantic(viewer, q, limit * 3).await? {
                    None => kw.into_iter().take(limit).collect(),
                    Some(sem) => rrf(kw, sem, limit),
                }
            }
        };
        ranked.truncate(limit);
        self.touch(ranked.iter().map(|(m, _)| *m).collect()).await;
        Ok(ranked.into_iter().map(|(_, m)| m).collect())
    }

    async fn store(&self, viewer: &Viewer, m: NewMemory) -> Result<Stored, MemoryError> {
        if m.content.trim().is_empty() {
            return Err(MemoryError("content is empty".into()));
        }
        if !viewer.may_write(&m.scope) {
            return Err(MemoryError(format!(
                "scope `{}` is not writable here",
                m.scope
            )));
        }
        let vector = self.embed_one(&m.content).await;
        let now = self.now();
        let scope_s = m.scope.to_string();
        if let Some((mid, id)) = self
            .duplicate(&m.scope, &m.content, vector.as_deref())
            .await?
        {
            let (content, tags, pinned, actor) = (
                m.content.clone(),
                m.tags.clone(),
                m.pinned,
                m.created_by.clone(),
            );
            let conf = m.confidence.unwrap_or(1.0);
            let idc = id.clone();
            self.db(move |c| {
                let tx = c.transaction()?;
                let (old_content, old_tags): (String, String) =
                    tx.query_row("SELECT content, tags FROM memories WHERE mid = ?1", [mid], |r| Ok((r.get(0)?, r.get(1)?)))?;
                let mut all: Vec<String> = serde_json::from_str(&old_tags).unwrap_or_default();
                for t in tags {
                    if !all.contains(&t) {
                        all.push(t);
                    }
                }
                let keep = if content.len() > old_content.len() { content } else { old_content };
                tx.execute(
                    "UPDATE memories SET content = ?2, tags = ?3, pinned = MAX(pinned, ?4), \
                     confidence = MAX(confidence, ?5), updated_at = ?6, archived = 0 WHERE mid = ?1",
                    params![mid, keep, serde_json::to_string(&all).unwrap_or_else(|_| "[]".into()), pinned as i64, f64::from(conf), now],
                )?;
                tx.execute(
                    "INSERT INTO memory_log (ts, memory_id, action, actor, reason) VALUES (?1, ?2, 'merge', ?3, 'near-duplicate stored')",
                    params![now, idc, actor],
                )?;
                tx.commit()
            })
            .await?;
            return Ok(Stored::Merged(id));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let idc = id.clone();
        let blob = vector.as_deref().map(to_blob);
        let embedder = self.embedder.as_ref().map(|e| e.name());
        let mid = self
            .db(move |c| {
                let tx = c.transaction()?;
                tx.execute(
                    "INSERT INTO memories (id, type, content, category, tags, confidence, pinned, scope, created_by, \
                     created_at, updated_at, embedding, embedder) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12)",
                    params![
                        idc,
                        m.memory_type.as_str(),
                        m.content,
                        m.category,
                        serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into()),
                        f64::from(m.confidence.unwrap_or(1.0).clamp(0.0, 1.0)),
                        m.pinned as i64,
                        scope_s,
                        m.created_by,
                        now,
                        blob,
                        embedder,
                    ],
                )?;
                let mid = tx.last_insert_rowid();
                tx.execute(
                    "INSERT INTO memory_log (ts, memory_id, action, actor, reason) VALUES (?1, ?2, 'insert', ?3, NULL)",
                    params![now, idc, m.created_by],
                )?;
                tx.commit()?;
                Ok(mid)
            })
            .await?;
        if let Some(v) = vector {
            self.vectors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(mid, &m.scope.to_string(), &v);
        }
        Ok(Stored::Created(id))
    }

    async fn get(&self, viewer: &Viewer, id: &str) -> Result<Option<Memory>, MemoryError> {
        let id = id.to_owned();
        let m = self
            .db(move |c| {
                c.query_row(
                    &format!("SELECT {COLS} FROM memories m WHERE id = ?1"),
                    [id],
                    |r| row_to_memory(r).map(|(_, m)| m),
                )
                .optional()
            })
            .await?;
        Ok(m.filter(|m| viewer.sees(&m.scope)))
    }

    async fn forget(
        &self,
        viewer: &Viewer,
        id: &str,
        reason: &str,
        by: &str,
    ) -> Result<bool, MemoryError> {
        let Some(m) = self.get(viewer, id).await? else {
            return Ok(false);
        };
        if !viewer.may_write(&m.scope) {
            return Err(MemoryError(format!(
                "memory `{id}` is in scope `{}`, not writable here",
                m.scope
            )));
        }
        let (idc, reason, by, now) = (id.to_owned(), reason.to_owned(), by.to_owned(), self.now());
        let mid: Option<i64> = self
            .db(move |c| {
                let tx = c.transaction()?;
                let mid: Option<i64> = tx
                    .query_row("SELECT mid FROM memories WHERE id = ?1", [&idc], |r| r.get(0))
                    .optional()?;
                // The delete trigger removes the FTS entry; the vector is in the row.
                tx.execute("DELETE FROM memories WHERE id = ?1", [&idc])?;
                tx.execute(
                    "INSERT INTO memory_log (ts, memory_id, action, actor, reason) VALUES (?1, ?2, 'delete', ?3, ?4)",
                    params![now, idc, by, reason],
                )?;
                tx.commit()?;
                // FTS5 deletes leave tombstones beside the old tokens until segments merge:
                // merge now so the words are gone from the index, not just hidden.
                c.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')", [])?;
                // Old page images in the WAL are rewritten into the database and dropped.
                let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                Ok(mid)
            })
            .await?;
        if let Some(mid) = mid {
            self.vectors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(mid);
        }
        Ok(mid.is_some())
    }

    async fn list(
        &self,
        viewer: &Viewer,
        since: Option<i64>,
        scope: Option<&MemoryScope>,
        limit: usize,
    ) -> Result<Vec<Memory>, MemoryError> {
        let (vis, mut args) = Self::visibility(viewer);
        let mut sql = format!("SELECT {COLS} FROM memories m WHERE archived = 0 AND {vis}");
        if let Some(s) = since {
            sql.push_str(&format!(" AND updated_at >= {s}"));
        }
        if let Some(s) = scope {
            sql.push_str(" AND scope = ?");
            args.push(s.to_string());
        }
        sql.push_str(&format!(
            " ORDER BY updated_at DESC, mid DESC LIMIT {}",
            limit.clamp(1, 10_000)
        ));
        self.db(move |c| {
            c.prepare(&sql)?
                .query_map(params_from_iter(args.iter()), |r| {
                    row_to_memory(r).map(|(_, m)| m)
                })?
                .collect()
        })
        .await
    }
}

/// Reciprocal rank fusion (k = 60) of two ranked lists.
fn rrf(a: Vec<(i64, Memory)>, b: Vec<(i64, Memory)>, limit: usize) -> Vec<(i64, Memory)> {
    const K: f64 = 60.0;
    let mut score: HashMap<i64, (f64, Memory)> = HashMap::new();
    for list in [a, b] {
        for (rank, (mid, m)) in list.into_iter().enumerate() {
            let e = score.entry(mid).or_insert((0.0, m));
            e.0 += 1.0 / (K + rank as f64 + 1.0);
        }
    }
    let mut v: Vec<(i64, f64, Memory)> = score.into_iter().map(|(k, (s, m))| (k, s, m)).collect();
    v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    v.into_iter().take(limit).map(|(k, _, m)| (k, m)).collect()
}
