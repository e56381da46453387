//! SQLite's rows for the memory policy (`kept::Rows`: pinned, duplicates, merge, insert,
//! delete) and the `MemoryBackend` that hands each operation to `kept::policy`.

use std::sync::Mutex;

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params, params_from_iter};
use strata_engine::config::{Config, MemoryConfig};
use strata_engine::memory::{Memory, MemoryError, MemoryQuery, MemoryScope, NewMemory, Viewer};

use super::{COLS, SqliteMemory, row_to_memory};
use crate::rank::VecIndex;
use crate::text::to_blob;

#[async_trait]
impl crate::kept::Recall for SqliteMemory {
    async fn keyword(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Vec<(i64, Memory)>, MemoryError> {
        SqliteMemory::keyword(self, viewer, q, limit).await
    }

    async fn semantic(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Option<Vec<(i64, Memory)>>, MemoryError> {
        SqliteMemory::semantic(self, viewer, q, limit).await
    }

    async fn touch(&self, rows: Vec<i64>) {
        SqliteMemory::touch(self, rows).await
    }
}

#[async_trait]
impl crate::kept::Rows for SqliteMemory {
    fn memory_config(&self) -> &MemoryConfig {
        &self.cfg
    }

    fn team(&self) -> &Config {
        &self.team
    }

    fn now(&self) -> i64 {
        SqliteMemory::now(self)
    }

    fn vectors(&self) -> &Mutex<VecIndex> {
        &self.vectors
    }

    async fn embed(&self, text: &str) -> Option<Vec<f32>> {
        self.embed_one(text).await
    }

    async fn pinned(&self, viewer: &Viewer) -> Result<Vec<Memory>, MemoryError> {
        let (vis, args) = Self::visibility(viewer);
        self.db(move |c| {
            c.prepare(&format!(
                "SELECT {COLS} FROM memories m WHERE pinned = 1 AND archived = 0 AND {vis} ORDER BY updated_at DESC LIMIT 20"
            ))?
            .query_map(params_from_iter(args.iter()), |r| row_to_memory(r).map(|(_, m)| m))?
            .collect()
        })
        .await
    }

    async fn id_of(&self, mid: i64) -> Result<Option<String>, MemoryError> {
        self.db(move |c| {
            c.query_row("SELECT id FROM memories WHERE mid = ?1", [mid], |r| {
                r.get(0)
            })
            .optional()
        })
        .await
    }

    async fn stored_by_key(&self, key: &str) -> Result<Option<(String, bool)>, MemoryError> {
        let key = key.to_owned();
        self.db(move |c| {
            c.query_row(
                "SELECT memory_id, action FROM memory_log WHERE idempotency_key = ?1 \
                 AND action IN ('insert', 'merge') ORDER BY seq LIMIT 1",
                [key],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)? == "insert")),
            )
            .optional()
        })
        .await
    }

    async fn merge(&self, mid: i64, id: &str, m: &NewMemory, now: i64) -> Result<(), MemoryError> {
        let (pinned, actor, taint) = (m.pinned, m.created_by.clone(), m.taint.clone());
        let m = m.clone();
        let conf = m.confidence.unwrap_or(1.0);
        let idc = id.to_owned();
        self.db(move |c| {
            let tx = c.transaction()?;
            let (old_content, old_tags): (String, String) =
                tx.query_row("SELECT content, tags FROM memories WHERE mid = ?1", [mid], |r| Ok((r.get(0)?, r.get(1)?)))?;
            let (keep, tags) = crate::kept::merged(old_content, &old_tags, &m);
            tx.execute(
                "UPDATE memories SET content = ?2, tags = ?3, pinned = MAX(pinned, ?4), \
                 confidence = MAX(confidence, ?5), updated_at = ?6, archived = 0, \
                 taint = COALESCE(taint, ?7) WHERE mid = ?1",
                params![mid, keep, tags, pinned as i64, f64::from(conf), now, taint],
            )?;
            tx.execute(
                "INSERT INTO memory_log (ts, memory_id, action, actor, reason, idempotency_key) VALUES (?1, ?2, 'merge', ?3, 'near-duplicate stored', ?4)",
                params![now, idc, actor, m.idempotency_key],
            )?;
            tx.commit()
        })
        .await
    }

    async fn insert(
        &self,
        id: &str,
        m: &NewMemory,
        vector: Option<&[f32]>,
        now: i64,
    ) -> Result<i64, MemoryError> {
        let idc = id.to_owned();
        let m = m.clone();
        let scope_s = m.scope.to_string();
        let blob = vector.map(to_blob);
        let embedder = self.embedder.as_ref().map(|e| e.name());
        self.db(move |c| {
            let tx = c.transaction()?;
            tx.execute(
                "INSERT INTO memories (id, type, content, category, tags, confidence, pinned, scope, created_by, \
                 created_at, updated_at, embedding, embedder, taint) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13)",
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
                    m.taint,
                ],
            )?;
            let mid = tx.last_insert_rowid();
            tx.execute(
                "INSERT INTO memory_log (ts, memory_id, action, actor, reason, idempotency_key) VALUES (?1, ?2, 'insert', ?3, NULL, ?4)",
                params![now, idc, m.created_by, m.idempotency_key],
            )?;
            tx.commit()?;
            Ok(mid)
        })
        .await
    }

    async fn by_id(&self, id: &str) -> Result<Option<Memory>, MemoryError> {
        let id = id.to_owned();
        self.db(move |c| {
            c.query_row(
                &format!("SELECT {COLS} FROM memories m WHERE id = ?1"),
                [id],
                |r| row_to_memory(r).map(|(_, m)| m),
            )
            .optional()
        })
        .await
    }

    async fn delete(
        &self,
        id: &str,
        reason: &str,
        by: &str,
        now: i64,
    ) -> Result<Option<i64>, MemoryError> {
        let (idc, reason, by) = (id.to_owned(), reason.to_owned(), by.to_owned());
        self.db(move |c| {
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
        .await
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

// The policy is `kept::policy`'s, shared with PostgreSQL; this file holds the rows.
crate::kept_backend!(SqliteMemory);
