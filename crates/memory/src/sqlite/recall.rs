//! Recall: keyword search in the FTS index, vector search, and their fusion.

use std::collections::HashMap;

use rusqlite::{OptionalExtension, params_from_iter};
use strata_engine::memory::{Memory, MemoryError, MemoryQuery, Viewer};

use super::{COLS, SqliteMemory, row_to_memory};

impl SqliteMemory {
    pub(super) async fn keyword(
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
    pub(super) async fn prune_common(&self, terms: Vec<String>) -> Vec<String> {
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

    pub(super) async fn keyword_sql(
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

    pub(super) async fn by_mids(
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

    pub(super) async fn semantic(
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

    pub(super) async fn touch(&self, mids: Vec<i64>) {
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
}
