//! Maintenance: decay, statistics, export and import, history.

use async_trait::async_trait;
use rusqlite::params;
use strata_engine::memory::{Memory, MemoryError, NewMemory};

use super::{COLS, DecayReport, SqliteMemory, Stats, row_to_memory};
use crate::rank::VecIndex;
use crate::text::{from_blob, normalize, to_blob};

impl SqliteMemory {
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

    pub(super) async fn reload_vectors(&self) -> Result<(), MemoryError> {
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
                         created_at, updated_at, embedding, taint) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12)",
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
                            m.taint,
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
}

#[async_trait]
impl crate::MemoryMaintenance for SqliteMemory {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    async fn decay(&self, dry_run: bool) -> Result<DecayReport, MemoryError> {
        SqliteMemory::decay(self, dry_run).await
    }

    async fn stats(&self) -> Result<Stats, MemoryError> {
        SqliteMemory::stats(self).await
    }

    async fn export(&self) -> Result<Vec<Memory>, MemoryError> {
        SqliteMemory::export(self).await
    }

    async fn history(
        &self,
        id: &str,
    ) -> Result<Vec<(i64, String, String, Option<String>)>, MemoryError> {
        SqliteMemory::history(self, id).await
    }

    async fn bulk_insert(
        &self,
        items: Vec<NewMemory>,
        vectors: Vec<Option<Vec<f32>>>,
    ) -> Result<usize, MemoryError> {
        SqliteMemory::bulk_insert(self, items, vectors).await
    }

    async fn dump(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<crate::MemoryRow>, Option<i64>), MemoryError> {
        self.db(move |c| {
            let rows: Vec<(i64, crate::MemoryRow)> = c
                .prepare(&format!(
                    "SELECT {COLS}, decayed_at, archived_at, embedding, embedder FROM memories m \
                     WHERE mid > ?1 ORDER BY mid LIMIT ?2"
                ))?
                .query_map(params![after, limit as i64], |r| {
                    let (mid, memory) = row_to_memory(r)?;
                    let blob: Option<Vec<u8>> = r.get(18)?;
                    Ok((
                        mid,
                        crate::MemoryRow {
                            memory,
                            decayed_at: r.get(16)?,
                            archived_at: r.get(17)?,
                            embedding: blob.map(|b| from_blob(&b)),
                            embedder: r.get(19)?,
                        },
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let last = rows.last().map(|(mid, _)| *mid);
            Ok((rows.into_iter().map(|(_, row)| row).collect(), last))
        })
        .await
    }

    async fn dump_log(&self, after: i64, limit: usize) -> Result<Vec<crate::LogRow>, MemoryError> {
        self.db(move |c| {
            c.prepare(
                "SELECT seq, ts, memory_id, action, actor, reason FROM memory_log WHERE seq > ?1 \
                 ORDER BY seq LIMIT ?2",
            )?
            .query_map(params![after, limit as i64], |r| {
                Ok(crate::LogRow {
                    seq: r.get(0)?,
                    ts: r.get(1)?,
                    memory_id: r.get(2)?,
                    action: r.get(3)?,
                    actor: r.get(4)?,
                    reason: r.get(5)?,
                })
            })?
            .collect()
        })
        .await
    }
}
