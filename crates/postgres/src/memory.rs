//! `PgMemory`: agent memory in PostgreSQL — full-text search over a `tsvector` column with a
//! GIN index (in `memory.language`), vectors stored per row as `real[]` and ranked in process
//! as the SQLite backend ranks them (no pgvector needed), scopes, dedup, decay, and a change
//! log through which every instance's copy of the vectors follows the others' writes.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use strata_engine::config::{Config, MemoryConfig};
use strata_engine::memory::{
    Embedder, Memory, MemoryError, MemoryQuery, MemoryScope, MemoryType, NewMemory, Viewer,
};
use strata_memory::rank::VecIndex;
use strata_memory::text::{normalize, terms};
use strata_memory::{DecayReport, LogRow, MemoryMaintenance, MemoryRow, Stats};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::db::Db;

const COLS: &str = "mid, id, type, content, category, tags, confidence, pinned, scope, created_by, \
                    access_count, last_access, created_at, updated_at, archived, taint";

/// [`COLS`] of the row aliased `m`.
fn cols_of_m() -> String {
    COLS.split(", ")
        .map(|c| format!("m.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The weighted document of a row: content first, category and tags second (the SQLite
/// backend weighs its columns 1 : 0.5 : 0.5). `$L` is the language.
const FTS: &str = "setweight(to_tsvector($L::text::regconfig, $C), 'A') || \
                   setweight(to_tsvector($L::text::regconfig, coalesce($K, '')), 'B') || \
                   setweight(to_tsvector($L::text::regconfig, $T), 'B')";

/// Which rows a viewer sees, as parameters `$1` (all), `$2` (scopes), `$3` (fleet reading).
const VISIBLE: &str = "($1 OR m.scope = ANY($2) OR ($3 AND m.scope LIKE 'agent:%'))";

fn row_to_memory(r: &Row) -> (i64, Memory) {
    let tags: String = r.get(5);
    let scope: String = r.get(8);
    let kind: String = r.get(2);
    (
        r.get(0),
        Memory {
            id: r.get(1),
            memory_type: MemoryType::parse(&kind).unwrap_or_default(),
            content: r.get(3),
            category: r.get(4),
            tags: serde_json::from_str(&tags).unwrap_or_default(),
            confidence: r.get::<_, f64>(6) as f32,
            pinned: r.get(7),
            scope: scope.parse().unwrap_or(MemoryScope::Global),
            created_by: r.get(9),
            access_count: r.get::<_, i64>(10).max(0) as u64,
            last_access: r.get(11),
            created_at: r.get(12),
            updated_at: r.get(13),
            archived: r.get(14),
            taint: r.get(15),
        },
    )
}

/// The viewer as the three parameters of [`VISIBLE`].
fn visibility(viewer: &Viewer) -> (bool, Vec<String>, bool) {
    let mut scopes = vec!["global".to_owned()];
    if let Some(a) = &viewer.agent {
        scopes.push(format!("agent:{a}"));
    }
    scopes.extend(viewer.groups.iter().map(|g| format!("group:{g}")));
    if let Some(p) = &viewer.private_key {
        scopes.push(format!("private:{p}"));
    }
    (viewer.all, scopes, viewer.fleet_read)
}

/// Drops terms in more than `cap` memories while a rarer one remains; when every term is
/// that common, only the rarest stays (as the SQLite backend does). The kept terms with
/// their counts.
fn prune(terms: Vec<String>, cap: i64, counts: Vec<i64>) -> (Vec<String>, Vec<i64>) {
    if terms.len() < 2 || counts.iter().all(|n| *n <= cap) {
        return (terms, counts);
    }
    if counts.iter().any(|n| *n <= cap) {
        return terms
            .into_iter()
            .zip(counts)
            .filter(|(_, n)| *n <= cap)
            .unzip();
    }
    let rarest = counts
        .iter()
        .enumerate()
        .min_by_key(|(_, n)| **n)
        .map_or(0, |(i, _)| i);
    (vec![terms[rarest].clone()], vec![counts[rarest]])
}

/// The query for `terms`: each term a lexeme alternative. Terms are runs of letters and
/// digits, so nothing a user typed can become tsquery syntax; the text is a parameter.
fn tsquery_text(terms: &[String]) -> String {
    terms.join(" | ")
}

/// How long the planner's term statistics are used before they are read again.
const STATS_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The planner's statistics of the full-text column.
struct TermStats {
    /// Rows in the table (the planner's estimate).
    rows: i64,
    /// Fraction of rows holding each of the most common lexemes.
    freq: HashMap<String, f32>,
}

struct CachedStats {
    read: std::time::Instant,
    data: Option<Arc<TermStats>>,
}

/// How far back in the change log a refresh looks for entries committed out of order.
const LOG_WINDOW: i64 = 256;

#[derive(Default)]
struct Follow {
    /// The highest change-log sequence number applied.
    watermark: i64,
    /// Sequence numbers applied within the window below the watermark.
    applied: BTreeSet<i64>,
}

/// The PostgreSQL memory backend.
pub struct PgMemory {
    db: Arc<Db>,
    cfg: MemoryConfig,
    team: Config,
    embedder: Option<Arc<dyn Embedder>>,
    vectors: Arc<Mutex<VecIndex>>,
    follow: tokio::sync::Mutex<Follow>,
    stats: Mutex<Option<CachedStats>>,
    clock: Arc<dyn Fn() -> i64 + Send + Sync>,
}

fn system_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl PgMemory {
    /// Memory over `db` (connected and migrated); `config` supplies `memory.*` and the team.
    /// Loads the vectors of live memories.
    pub async fn open(db: Arc<Db>, config: &Config) -> Result<Self, MemoryError> {
        let m = PgMemory {
            db,
            cfg: config.memory.clone(),
            team: config.clone(),
            embedder: None,
            vectors: Arc::new(Mutex::new(VecIndex::default())),
            follow: tokio::sync::Mutex::new(Follow::default()),
            stats: Mutex::new(None),
            clock: Arc::new(system_now),
        };
        m.reload_vectors().await?;
        Ok(m)
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

    fn now(&self) -> i64 {
        (self.clock)()
    }

    fn lang(&self) -> &str {
        &self.cfg.language
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, MemoryError> {
        self.db.client().await.map_err(MemoryError::from)
    }

    fn fail(&self, e: tokio_postgres::Error) -> MemoryError {
        MemoryError::from(self.db.fail(e))
    }

    /// Refreshes the planner's statistics after a bulk write (autovacuum would, within a
    /// minute or so; recall's term counts read them) and drops the cached copy.
    async fn analyze(&self) {
        let r = async {
            let c = self.client().await?;
            c.batch_execute("ANALYZE memories")
                .await
                .map_err(|e| self.fail(e))
        };
        if let Err(e) = r.await {
            tracing::warn!(error = %e, "ANALYZE after a bulk write failed");
        }
        *self.stats.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Reads every live vector again (at open, after decay).
    async fn reload_vectors(&self) -> Result<(), MemoryError> {
        let c = self.client().await?;
        let mut follow = self.follow.lock().await;
        let top: i64 = c
            .query_one("SELECT COALESCE(MAX(seq), 0) FROM memory_log", &[])
            .await
            .map_err(|e| self.fail(e))?
            .get(0);
        let rows = c
            .query(
                "SELECT m.mid, m.scope, v.embedding FROM memories m JOIN memory_vectors v ON v.mid = m.mid \
                 WHERE NOT m.archived",
                &[],
            )
            .await
            .map_err(|e| self.fail(e))?;
        let mut idx = VecIndex::default();
        for r in rows {
            let v: Vec<f32> = r.get(2);
            idx.insert(r.get(0), r.get::<_, &str>(1), &v);
        }
        *self.vectors.lock().unwrap_or_else(|p| p.into_inner()) = idx;
        // Entries up to `top` are reflected (or, committed later below it, re-read once).
        follow.watermark = top;
        follow.applied.clear();
        Ok(())
    }

    /// Applies other writers' changes (any instance) to the in-process vectors: every
    /// change-log entry since the last look names a row, which is read again — one query
    /// when nothing changed, two when something did. This instance's own inserts and
    /// deletes are already applied and skipped.
    async fn follow(&self) -> Result<(), MemoryError> {
        let c = self.client().await?;
        let mut f = self.follow.lock().await;
        let floor = f.watermark - LOG_WINDOW;
        let seen: Vec<i64> = f.applied.range(floor + 1..).copied().collect();
        let entries: Vec<(i64, i64)> = c
            .query(
                "SELECT seq, mid FROM memory_log \
                 WHERE seq > $1 AND mid IS NOT NULL AND NOT (seq = ANY($2)) ORDER BY seq",
                &[&floor, &seen],
            )
            .await
            .map_err(|e| self.fail(e))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        if !entries.is_empty() {
            let mut mids: Vec<i64> = entries.iter().map(|(_, m)| *m).collect();
            mids.sort_unstable();
            mids.dedup();
            let rows = c
                .query(
                    "SELECT m.mid, m.scope, v.embedding, m.archived FROM memories m \
                     LEFT JOIN memory_vectors v ON v.mid = m.mid WHERE m.mid = ANY($1)",
                    &[&mids],
                )
                .await
                .map_err(|e| self.fail(e))?;
            let mut live: HashMap<i64, (String, Vec<f32>)> = HashMap::new();
            for r in rows {
                let (mid, scope, v, archived): (i64, String, Option<Vec<f32>>, bool) =
                    (r.get(0), r.get(1), r.get(2), r.get(3));
                if let (Some(v), false) = (v, archived) {
                    live.insert(mid, (scope, v));
                }
            }
            let mut idx = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
            for mid in mids {
                match live.get(&mid) {
                    Some((scope, v)) => idx.insert(mid, scope, v),
                    None => idx.remove(mid),
                }
            }
        }
        let newest = entries.iter().map(|(s, _)| *s).max().unwrap_or(0);
        f.applied.extend(entries.iter().map(|(s, _)| *s));
        let own = f.applied.last().copied().unwrap_or(0);
        f.watermark = f.watermark.max(newest).max(own);
        let keep_from = f.watermark - LOG_WINDOW;
        f.applied = f.applied.split_off(&keep_from);
        Ok(())
    }

    /// Notes change-log entries this instance wrote and has applied already.
    async fn applied(&self, seqs: impl IntoIterator<Item = i64>) {
        self.follow.lock().await.applied.extend(seqs);
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

    /// Full-text ranking. Query words too common to tell anything are dropped first (as
    /// SQLite does); then, when the words left match many memories, the ranking runs over
    /// candidates — every memory holding a rare word, a bounded sample of those holding a
    /// common one — and over everything only when the candidates leave too few results
    /// (as SQLite's first pass does): ranking reads each matching row, so this bounds the
    /// rows a query reads.
    async fn keyword(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Vec<(i64, Memory)>, MemoryError> {
        let t = terms(&q.text, 16);
        if t.is_empty() {
            return Ok(Vec::new());
        }
        let (t, counts) = match self.term_counts(&t).await {
            Some((cap, counts)) => {
                let (t, c) = prune(t, cap, counts);
                (t, Some(c))
            }
            None => (t, None),
        };
        let candidates = (limit * 8).max(64);
        // Ranking every match costs about 3 µs a row here: below a thousand or so, one
        // query over all of them is cheaper than the candidates' query and its planning.
        let many = (candidates * 4).max(1000) as i64;
        if counts.is_some_and(|c| c.iter().sum::<i64>() > many) {
            let first = self
                .keyword_sql(viewer, q, &t, limit, Some(candidates))
                .await?;
            if first.len() >= limit {
                return Ok(first);
            }
        }
        self.keyword_sql(viewer, q, &t, limit, None).await
    }

    /// The ranking query over every match, or over `candidates` per word.
    async fn keyword_sql(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        t: &[String],
        limit: usize,
        candidates: Option<usize>,
    ) -> Result<Vec<(i64, Memory)>, MemoryError> {
        let (all, scopes, fleet) = visibility(viewer);
        let kind = q.memory_type.map(MemoryType::as_str);
        let cols = cols_of_m();
        let filters = "NOT m.archived AND ($6::TEXT IS NULL OR m.type = $6) \
                       AND ($7::TEXT IS NULL OR m.category = $7)";
        let sql = match candidates {
            None => format!(
                "SELECT {cols} FROM memories m, to_tsquery($4::text::regconfig, $5) q \
                 WHERE m.fts @@ q AND {VISIBLE} AND {filters} \
                 ORDER BY ts_rank(m.fts, q) DESC, m.mid LIMIT $8"
            ),
            Some(_) => format!(
                "WITH c AS (SELECT DISTINCT s.mid FROM unnest($9::TEXT[]) AS u(t), \
                   LATERAL (SELECT mid FROM memories \
                            WHERE fts @@ to_tsquery($4::text::regconfig, u.t) LIMIT $10) s) \
                 SELECT {cols} FROM memories m JOIN c ON c.mid = m.mid, \
                   to_tsquery($4::text::regconfig, $5) q \
                 WHERE {VISIBLE} AND {filters} \
                 ORDER BY ts_rank(m.fts, q) DESC, m.mid LIMIT $8"
            ),
        };
        let query = tsquery_text(t);
        let (lang, limit) = (self.lang(), limit as i64);
        let n = candidates.unwrap_or(0) as i64;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &all,
            &scopes,
            &fleet,
            &lang,
            &query,
            &kind,
            &q.category,
            &limit,
        ];
        if candidates.is_some() {
            params.push(&t);
            params.push(&n);
        }
        let c = self.client().await?;
        let rows = match candidates {
            // Planned with its values each time: a cached generic plan may scan the table for
            // the per-word sample instead of using the index (seen at 40-70 ms at 10,000).
            Some(_) => c.query(sql.as_str(), &params).await,
            None => {
                let st = c.prepare_cached(&sql).await.map_err(|e| self.fail(e))?;
                c.query(&st, &params).await
            }
        }
        .map_err(|e| self.fail(e))?;
        Ok(rows.iter().map(row_to_memory).collect())
    }

    /// (cap, document count per term): from the planner's statistics of the `fts` column
    /// (its most common lexemes and their frequencies, kept by ANALYZE; read at most once a
    /// minute), so the common case reads no rows; without statistics yet (a new table), by
    /// counting matches (stopping at four times the cap) when there are words to weigh
    /// against each other. `None` when unknown.
    async fn term_counts(&self, terms: &[String]) -> Option<(i64, Vec<i64>)> {
        let counts = match self.estimated_counts(terms).await {
            Ok(Some(c)) => Ok(c),
            Ok(None) if terms.len() >= 2 => self.counted(terms).await,
            Ok(None) => return None,
            Err(e) => Err(e),
        };
        match counts {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "term counts unavailable; searching with every term");
                None
            }
        }
    }

    /// (cap, document count per term) from the planner's statistics; `None` when the table
    /// has none yet.
    async fn estimated_counts(
        &self,
        terms: &[String],
    ) -> Result<Option<(i64, Vec<i64>)>, MemoryError> {
        let stats = {
            let cached = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            cached
                .as_ref()
                .filter(|s| s.read.elapsed() < STATS_TTL)
                .map(|s| s.data.clone())
        };
        let stats = match stats {
            Some(s) => s,
            None => {
                let fresh = self.read_stats().await?;
                *self.stats.lock().unwrap_or_else(|p| p.into_inner()) = Some(CachedStats {
                    read: std::time::Instant::now(),
                    data: fresh.clone(),
                });
                fresh
            }
        };
        let Some(stats) = stats else {
            return Ok(None);
        };
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "SELECT (tsvector_to_array(to_tsvector($1::text::regconfig, u.t)))[1] \
                 FROM unnest($2::TEXT[]) WITH ORDINALITY AS u(t, i) ORDER BY u.i",
            )
            .await
            .map_err(|e| self.fail(e))?;
        let lexemes: Vec<Option<String>> = c
            .query(&st, &[&self.lang(), &terms])
            .await
            .map_err(|e| self.fail(e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let cap = (stats.rows / 20).max(1000);
        let counts = lexemes
            .iter()
            .map(|l| {
                // A lexeme the statistics do not list is rarer than the rarest they list.
                let f = l
                    .as_ref()
                    .and_then(|l| stats.freq.get(l).copied())
                    .unwrap_or(0.0);
                (f64::from(f) * stats.rows as f64) as i64
            })
            .collect();
        Ok(Some((cap, counts)))
    }

    /// The `fts` column's most common lexemes and their frequencies, and the table's rows.
    async fn read_stats(&self) -> Result<Option<Arc<TermStats>>, MemoryError> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                "SELECT s.most_common_elems::TEXT::TEXT[], s.most_common_elem_freqs, c.reltuples::BIGINT \
                 FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename \
                 AND c.relnamespace = current_schema()::regnamespace \
                 WHERE s.schemaname = current_schema() AND s.tablename = 'memories' AND s.attname = 'fts'",
                &[],
            )
            .await
            .map_err(|e| self.fail(e))?;
        let Some(row) = row else { return Ok(None) };
        let (elems, freqs, rows): (Option<Vec<String>>, Option<Vec<f32>>, i64) =
            (row.get(0), row.get(1), row.get(2));
        let (Some(elems), Some(freqs)) = (elems, freqs) else {
            return Ok(None);
        };
        if rows <= 0 {
            return Ok(None);
        }
        Ok(Some(Arc::new(TermStats {
            rows,
            freq: elems.into_iter().zip(freqs).collect(),
        })))
    }

    /// (cap, document count per term), counted (stopping at four times the cap).
    async fn counted(&self, terms: &[String]) -> Result<(i64, Vec<i64>), MemoryError> {
        let c = self.client().await?;
        let total: i64 = c
            .query_one("SELECT COALESCE(MAX(mid), 0) FROM memories", &[])
            .await
            .map_err(|e| self.fail(e))?
            .get(0);
        let cap = (total / 20).max(1000);
        let rows = c
            .query(
                "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM memories \
                 WHERE fts @@ to_tsquery($1::text::regconfig, u.t) LIMIT $3::BIGINT * 4) s) \
                 FROM unnest($2::TEXT[]) WITH ORDINALITY AS u(t, i) ORDER BY u.i",
                &[&self.lang(), &terms, &cap],
            )
            .await
            .map_err(|e| self.fail(e))?;
        Ok((cap, rows.iter().map(|r| r.get::<_, i64>(0)).collect()))
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
        self.follow().await?;
        let filtered = q.memory_type.is_some() || q.category.is_some();
        let want = if filtered { limit * 4 } else { limit };
        let hits = {
            let idx = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
            idx.top(&qv, want, |scope| viewer.sees_str(scope))
        };
        if hits.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let mids: Vec<i64> = hits.iter().map(|(m, _)| *m).collect();
        let kind = q.memory_type.map(MemoryType::as_str);
        let c = self.client().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT {COLS} FROM memories m WHERE mid = ANY($1) AND NOT archived \
                     AND ($2::TEXT IS NULL OR type = $2) AND ($3::TEXT IS NULL OR category = $3)"
                ),
                &[&mids, &kind, &q.category],
            )
            .await
            .map_err(|e| self.fail(e))?;
        let by_mid: HashMap<i64, Memory> = rows.iter().map(row_to_memory).collect();
        Ok(Some(
            hits.into_iter()
                .filter_map(|(mid, _)| by_mid.get(&mid).map(|m| (mid, m.clone())))
                .take(limit)
                .collect(),
        ))
    }

    async fn touch(&self, mids: Vec<i64>) {
        if mids.is_empty() {
            return;
        }
        let now = self.now();
        // Access statistics are not worth a wait for the disk: the commit does not wait for
        // its WAL to be flushed (a server crash may lose the last few counts, nothing else).
        // The three statements go out together (tokio-postgres pipelines requests polled in
        // order), so this is one round trip.
        let r = async {
            let c = self.client().await?;
            let st = c
                .prepare_cached(
                    "UPDATE memories SET access_count = access_count + 1, last_access = $2 \
                     WHERE mid = ANY($1)",
                )
                .await
                .map_err(|e| self.fail(e))?;
            let params: [&(dyn ToSql + Sync); 2] = [&mids, &now];
            // All three run to the end, so the transaction is always closed (a failed UPDATE
            // makes the COMMIT a rollback) before the connection goes back to the pool.
            let (begin, update, commit) = tokio::join!(
                c.batch_execute("BEGIN; SET LOCAL synchronous_commit = off"),
                c.execute(&st, &params),
                c.batch_execute("COMMIT"),
            );
            begin.and(update).and(commit).map_err(|e| self.fail(e))
        };
        if let Err(e) = r.await {
            tracing::warn!(error = %e, "memory access stats not updated");
        }
    }

    /// Copies rows as they are (same ids, vectors, timestamps); a memory already present is
    /// left as it is. Returns how many were new.
    pub async fn restore(&self, rows: &[MemoryRow]) -> Result<u64, MemoryError> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(|e| self.fail(e))?;
        let sql = format!(
            "WITH m AS (INSERT INTO memories (id, type, content, category, tags, confidence, \
             pinned, scope, created_by, access_count, last_access, created_at, updated_at, \
             decayed_at, archived, archived_at, taint, fts) VALUES ($1, $2, $3, $4, $5, $6, $7, \
             $8, $9, $10, $11, $12, $13, $14, $15, $16, $19, {}) ON CONFLICT (id) DO NOTHING \
             RETURNING mid), v AS (INSERT INTO memory_vectors (mid, embedding, embedder) \
             SELECT mid, $17::REAL[], $18 FROM m WHERE $17::REAL[] IS NOT NULL) \
             SELECT COUNT(*) FROM m",
            fts_expr(20, 3, 4, 5)
        );
        let st = tx.prepare(&sql).await.map_err(|e| self.fail(e))?;
        let mut n = 0;
        for r in rows {
            let m = &r.memory;
            let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
            let params: [&(dyn ToSql + Sync); 20] = [
                &m.id,
                &m.memory_type.as_str(),
                &m.content,
                &m.category,
                &tags,
                &f64::from(m.confidence),
                &m.pinned,
                &m.scope.to_string(),
                &m.created_by,
                &(m.access_count as i64),
                &m.last_access,
                &m.created_at,
                &m.updated_at,
                &r.decayed_at,
                &m.archived,
                &r.archived_at,
                &r.embedding,
                &r.embedder,
                &m.taint,
                &self.cfg.language,
            ];
            let new: i64 = tx
                .query_one(&st, &params)
                .await
                .map_err(|e| self.fail(e))?
                .get(0);
            n += new as u64;
        }
        tx.commit().await.map_err(|e| self.fail(e))?;
        self.reload_vectors().await?;
        self.analyze().await;
        Ok(n)
    }

    /// Copies change-log entries (keyed by their source sequence number). Returns how many
    /// were new.
    pub async fn restore_log(&self, rows: &[LogRow]) -> Result<u64, MemoryError> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(|e| self.fail(e))?;
        let mut n = 0;
        for r in rows {
            n += tx
                .execute(
                    "INSERT INTO memory_log (ts, memory_id, action, actor, reason, source_id) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (source_id) DO NOTHING",
                    &[&r.ts, &r.memory_id, &r.action, &r.actor, &r.reason, &r.seq],
                )
                .await
                .map_err(|e| self.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.fail(e))?;
        Ok(n)
    }
}

/// [`FTS`] with its placeholders numbered: language `l`, content `c`, category `k`, tags `t`.
fn fts_expr(l: usize, c: usize, k: usize, t: usize) -> String {
    FTS.replace("$L", &format!("${l}"))
        .replace("$C", &format!("${c}"))
        .replace("$K", &format!("${k}"))
        .replace("$T", &format!("${t}"))
}

/// Removes what a forgotten memory left in the table's and the full-text index's pages:
/// VACUUM drops the deleted row version (unless a transaction that could still see it is
/// open), and the GIN index, which keeps a word it no longer points to in its entry tree, is
/// rebuilt concurrently (recall goes on meanwhile). WAL and backups keep older versions
/// until they are recycled (docs/STORAGE.md).
pub async fn scrub(db: &Db) {
    let c = match db.client().await {
        Ok(c) => c,
        Err(e) => return tracing::warn!(error = %e, "cleanup after forget skipped"),
    };
    for step in [
        "VACUUM memories, memory_vectors",
        "REINDEX INDEX CONCURRENTLY memories_fts",
    ] {
        if let Err(e) = c.batch_execute(step).await {
            tracing::warn!(step, error = %crate::db::sql_error(&e), "cleanup after forget failed; autovacuum will clear the rest");
        }
    }
}

/// Logs a change; its sequence number.
async fn log(
    tx: &deadpool_postgres::Transaction<'_>,
    ts: i64,
    id: &str,
    mid: i64,
    action: &str,
    actor: &str,
    reason: Option<&str>,
) -> Result<i64, tokio_postgres::Error> {
    log_keyed(tx, ts, id, mid, action, actor, reason, None).await
}

/// Logs a change made by a call with an idempotency key (a store, a merge); its sequence
/// number.
#[allow(clippy::too_many_arguments)]
async fn log_keyed(
    tx: &deadpool_postgres::Transaction<'_>,
    ts: i64,
    id: &str,
    mid: i64,
    action: &str,
    actor: &str,
    reason: Option<&str>,
    key: Option<&str>,
) -> Result<i64, tokio_postgres::Error> {
    let st = tx
        .prepare_cached(
            "INSERT INTO memory_log (ts, memory_id, mid, action, actor, reason, idempotency_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq",
        )
        .await?;
    Ok(tx
        .query_one(&st, &[&ts, &id, &mid, &action, &actor, &reason, &key])
        .await?
        .get(0))
}

#[async_trait]
impl strata_memory::kept::Recall for PgMemory {
    async fn keyword(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Vec<(i64, Memory)>, MemoryError> {
        PgMemory::keyword(self, viewer, q, limit).await
    }

    async fn semantic(
        &self,
        viewer: &Viewer,
        q: &MemoryQuery,
        limit: usize,
    ) -> Result<Option<Vec<(i64, Memory)>>, MemoryError> {
        PgMemory::semantic(self, viewer, q, limit).await
    }

    async fn touch(&self, rows: Vec<i64>) {
        PgMemory::touch(self, rows).await
    }
}

#[async_trait]
impl strata_memory::kept::Rows for PgMemory {
    fn memory_config(&self) -> &MemoryConfig {
        &self.cfg
    }

    fn team(&self) -> &Config {
        &self.team
    }

    fn now(&self) -> i64 {
        PgMemory::now(self)
    }

    fn vectors(&self) -> &Mutex<VecIndex> {
        &self.vectors
    }

    async fn embed(&self, text: &str) -> Option<Vec<f32>> {
        self.embed_one(text).await
    }

    async fn pinned(&self, viewer: &Viewer) -> Result<Vec<Memory>, MemoryError> {
        let (all, scopes, fleet) = visibility(viewer);
        let c = self.client().await?;
        Ok(c.query(
            &format!(
                "SELECT {COLS} FROM memories m WHERE pinned AND NOT archived AND {VISIBLE} \
                 ORDER BY updated_at DESC LIMIT 20"
            ),
            &[&all, &scopes, &fleet],
        )
        .await
        .map_err(|e| self.fail(e))?
        .iter()
        .map(|r| row_to_memory(r).1)
        .collect())
    }

    async fn sync_vectors(&self) -> Result<(), MemoryError> {
        self.follow().await
    }

    async fn id_of(&self, mid: i64) -> Result<Option<String>, MemoryError> {
        let c = self.client().await?;
        Ok(
            c.query_opt("SELECT id FROM memories WHERE mid = $1", &[&mid])
                .await
                .map_err(|e| self.fail(e))?
                .map(|r| r.get(0)),
        )
    }

    async fn stored_by_key(&self, key: &str) -> Result<Option<(String, bool)>, MemoryError> {
        let c = self.client().await?;
        Ok(c.query_opt(
            "SELECT memory_id, action FROM memory_log WHERE idempotency_key = $1 \
                 AND action IN ('insert', 'merge') ORDER BY seq LIMIT 1",
            &[&key],
        )
        .await
        .map_err(|e| self.fail(e))?
        .map(|r| (r.get(0), r.get::<_, &str>(1) == "insert")))
    }

    async fn merge(&self, mid: i64, id: &str, m: &NewMemory, now: i64) -> Result<(), MemoryError> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(|e| self.fail(e))?;
        let old = tx
            .query_one(
                "SELECT content, tags FROM memories WHERE mid = $1 FOR UPDATE",
                &[&mid],
            )
            .await
            .map_err(|e| self.fail(e))?;
        let (old_content, old_tags): (String, String) = (old.get(0), old.get(1));
        let (keep, tags) = strata_memory::kept::merged(old_content, &old_tags, m);
        let sql = format!(
            "UPDATE memories m SET content = $2, tags = $3, pinned = pinned OR $4, \
             confidence = GREATEST(confidence, $5), updated_at = $6, archived = FALSE, \
             taint = COALESCE(taint, $7), fts = {} WHERE mid = $1",
            fts_expr(8, 2, 9, 3)
        );
        tx.execute(
            &sql,
            &[
                &mid,
                &keep,
                &tags,
                &m.pinned,
                &f64::from(m.confidence.unwrap_or(1.0)),
                &now,
                &m.taint,
                &self.cfg.language,
                &m.category,
            ],
        )
        .await
        .map_err(|e| self.fail(e))?;
        log_keyed(
            &tx,
            now,
            id,
            mid,
            "merge",
            &m.created_by,
            Some("near-duplicate stored"),
            m.idempotency_key.as_deref(),
        )
        .await
        .map_err(|e| self.fail(e))?;
        tx.commit().await.map_err(|e| self.fail(e))
    }

    async fn insert(
        &self,
        id: &str,
        m: &NewMemory,
        vector: Option<&[f32]>,
        now: i64,
    ) -> Result<i64, MemoryError> {
        let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
        let embedder = self.embedder.as_ref().map(|e| e.name());
        let scope = m.scope.to_string();
        let vector: Option<Vec<f32>> = vector.map(<[f32]>::to_vec);
        let sql = format!(
            "WITH m AS (INSERT INTO memories (id, type, content, category, tags, confidence, \
             pinned, scope, created_by, created_at, updated_at, taint, fts) VALUES ($1, $2, $3, \
             $4, $5, $6, $7, $8, $9, $10, $10, $13, {}) RETURNING mid), \
             v AS (INSERT INTO memory_vectors (mid, embedding, embedder) \
             SELECT mid, $11::REAL[], $12 FROM m WHERE $11::REAL[] IS NOT NULL) \
             SELECT mid FROM m",
            fts_expr(14, 3, 4, 5)
        );
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(|e| self.fail(e))?;
        let mid: i64 = tx
            .query_one(
                &sql,
                &[
                    &id,
                    &m.memory_type.as_str(),
                    &m.content,
                    &m.category,
                    &tags,
                    &f64::from(m.confidence.unwrap_or(1.0).clamp(0.0, 1.0)),
                    &m.pinned,
                    &scope,
                    &m.created_by,
                    &now,
                    &vector,
                    &embedder,
                    &m.taint,
                    &self.cfg.language,
                ],
            )
            .await
            .map_err(|e| self.fail(e))?
            .get(0);
        let seq = log_keyed(
            &tx,
            now,
            id,
            mid,
            "insert",
            &m.created_by,
            None,
            m.idempotency_key.as_deref(),
        )
        .await
        .map_err(|e| self.fail(e))?;
        tx.commit().await.map_err(|e| self.fail(e))?;
        self.applied([seq]).await;
        Ok(mid)
    }

    async fn by_id(&self, id: &str) -> Result<Option<Memory>, MemoryError> {
        let c = self.client().await?;
        Ok(c.query_opt(
            &format!("SELECT {COLS} FROM memories m WHERE id = $1"),
            &[&id],
        )
        .await
        .map_err(|e| self.fail(e))?
        .map(|r| row_to_memory(&r).1))
    }

    async fn delete(
        &self,
        id: &str,
        reason: &str,
        by: &str,
        now: i64,
    ) -> Result<Option<i64>, MemoryError> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(|e| self.fail(e))?;
        // The row holds the text, its full-text document and its vector: one delete.
        let mid: Option<i64> = tx
            .query_opt("DELETE FROM memories WHERE id = $1 RETURNING mid", &[&id])
            .await
            .map_err(|e| self.fail(e))?
            .map(|r| r.get(0));
        let mut seq = None;
        if let Some(mid) = mid {
            seq = Some(
                log(&tx, now, id, mid, "delete", by, Some(reason))
                    .await
                    .map_err(|e| self.fail(e))?,
            );
        }
        tx.commit().await.map_err(|e| self.fail(e))?;
        // The deleted row version and its index entries go now, not at the next autovacuum,
        // and once more a little later in case a transaction elsewhere held them back.
        if mid.is_some() {
            drop(c);
            scrub(&self.db).await;
            let db = self.db.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                scrub(&db).await;
            });
        }
        self.applied(seq).await;
        Ok(mid)
    }

    async fn list(
        &self,
        viewer: &Viewer,
        since: Option<i64>,
        scope: Option<&MemoryScope>,
        limit: usize,
    ) -> Result<Vec<Memory>, MemoryError> {
        let (all, scopes, fleet) = visibility(viewer);
        let scope = scope.map(ToString::to_string);
        let c = self.client().await?;
        Ok(c.query(
            &format!(
                "SELECT {COLS} FROM memories m WHERE NOT archived AND {VISIBLE} \
                 AND ($4::BIGINT IS NULL OR updated_at >= $4) AND ($5::TEXT IS NULL OR scope = $5) \
                 ORDER BY updated_at DESC, mid DESC LIMIT $6"
            ),
            &[
                &all,
                &scopes,
                &fleet,
                &since,
                &scope,
                &(limit.clamp(1, 10_000) as i64),
            ],
        )
        .await
        .map_err(|e| self.fail(e))?
        .iter()
        .map(|r| row_to_memory(r).1)
        .collect())
    }
}

// The policy is `strata_memory::kept::policy`'s, shared with SQLite; this file holds the rows.
strata_memory::kept_backend!(PgMemory);

#[async_trait]
impl MemoryMaintenance for PgMemory {
    fn location(&self) -> String {
        format!("{} schema {}", self.db.target(), self.db.schema())
    }

    async fn decay(&self, dry_run: bool) -> Result<DecayReport, MemoryError> {
        let now = self.now();
        let d = self.cfg.decay.clone();
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(|e| self.fail(e))?;
        let mut report = DecayReport::default();
        let grace_s = i64::from(d.grace_days) * 86_400;
        let rows = tx
            .query(
                "SELECT mid, id, confidence, GREATEST(created_at, COALESCE(last_access, 0)), decayed_at \
                 FROM memories WHERE NOT pinned AND NOT archived AND COALESCE(last_access, created_at) < $1 \
                 FOR UPDATE",
                &[&(now - grace_s)],
            )
            .await
            .map_err(|e| self.fail(e))?;
        for r in rows {
            let (mid, id, conf, used, decayed_at): (i64, String, f64, i64, Option<i64>) =
                (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
            let from = (used + grace_s).max(decayed_at.unwrap_or(i64::MIN));
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
                    "UPDATE memories SET confidence = $2, decayed_at = $3, archived = $4, \
                     archived_at = CASE WHEN $4 THEN $3 ELSE archived_at END WHERE mid = $1",
                    &[&mid, &next, &now, &archive],
                )
                .await
                .map_err(|e| self.fail(e))?;
                if archive {
                    let why = format!("confidence {next:.2} below {}", d.archive_below);
                    log(&tx, now, &id, mid, "archive", "decay", Some(&why))
                        .await
                        .map_err(|e| self.fail(e))?;
                }
            }
        }
        if d.purge_after_days > 0 {
            let cutoff = now - i64::from(d.purge_after_days) * 86_400;
            let old: Vec<(i64, String)> = tx
                .query(
                    "SELECT mid, id FROM memories WHERE archived AND archived_at <= $1 ORDER BY mid",
                    &[&cutoff],
                )
                .await
                .map_err(|e| self.fail(e))?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            if !dry_run {
                for (mid, id) in &old {
                    tx.execute("DELETE FROM memories WHERE mid = $1", &[mid])
                        .await
                        .map_err(|e| self.fail(e))?;
                    log(
                        &tx,
                        now,
                        id,
                        *mid,
                        "purge",
                        "decay",
                        Some("archived too long"),
                    )
                    .await
                    .map_err(|e| self.fail(e))?;
                }
            }
            report.purged = old.into_iter().map(|(_, id)| id).collect();
        }
        if dry_run {
            tx.rollback().await.map_err(|e| self.fail(e))?;
        } else {
            tx.commit().await.map_err(|e| self.fail(e))?;
            if !report.archived.is_empty() || !report.purged.is_empty() {
                self.follow().await?;
            }
        }
        Ok(report)
    }

    async fn stats(&self) -> Result<Stats, MemoryError> {
        let c = self.client().await?;
        let mut s = Stats::default();
        let r = c
            .query_one(
                "SELECT COUNT(*), COUNT(*) FILTER (WHERE archived), COUNT(*) FILTER (WHERE pinned), \
                 (SELECT COUNT(*) FROM memory_vectors) FROM memories",
                &[],
            )
            .await
            .map_err(|e| self.fail(e))?;
        let n = |i: usize| r.get::<_, i64>(i).max(0) as u64;
        (s.total, s.archived, s.pinned, s.with_vectors) = (n(0), n(1), n(2), n(3));
        for (sql, map) in [
            (
                "SELECT scope, COUNT(*) FROM memories GROUP BY scope",
                &mut s.by_scope,
            ),
            (
                "SELECT type, COUNT(*) FROM memories GROUP BY type",
                &mut s.by_type,
            ),
        ] {
            for r in c.query(sql, &[]).await.map_err(|e| self.fail(e))? {
                map.insert(r.get(0), r.get::<_, i64>(1).max(0) as u64);
            }
        }
        Ok(s)
    }

    async fn export(&self) -> Result<Vec<Memory>, MemoryError> {
        let c = self.client().await?;
        Ok(
            c.query(&format!("SELECT {COLS} FROM memories m ORDER BY mid"), &[])
                .await
                .map_err(|e| self.fail(e))?
                .iter()
                .map(|r| row_to_memory(r).1)
                .collect(),
        )
    }

    async fn history(
        &self,
        id: &str,
    ) -> Result<Vec<(i64, String, String, Option<String>)>, MemoryError> {
        let c = self.client().await?;
        Ok(c
            .query(
                "SELECT ts, action, actor, reason FROM memory_log WHERE memory_id = $1 ORDER BY ts, seq",
                &[&id],
            )
            .await
            .map_err(|e| self.fail(e))?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect())
    }

    async fn bulk_insert(
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
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(|e| self.fail(e))?;
        let sql = format!(
            "WITH m AS (INSERT INTO memories (id, type, content, category, tags, confidence, \
             pinned, scope, created_by, created_at, updated_at, taint, fts) VALUES ($1, $2, $3, \
             $4, $5, $6, $7, $8, $9, $10, $10, $12, {}) RETURNING mid), \
             v AS (INSERT INTO memory_vectors (mid, embedding) \
             SELECT mid, $11::REAL[] FROM m WHERE $11::REAL[] IS NOT NULL) \
             SELECT mid FROM m",
            fts_expr(13, 3, 4, 5)
        );
        let st = tx.prepare(&sql).await.map_err(|e| self.fail(e))?;
        let mut inserted = Vec::with_capacity(items.len());
        for (m, v) in items.into_iter().zip(vectors) {
            let id = uuid::Uuid::new_v4().to_string();
            let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
            let scope = m.scope.to_string();
            let mid: i64 = tx
                .query_one(
                    &st,
                    &[
                        &id,
                        &m.memory_type.as_str(),
                        &m.content,
                        &m.category,
                        &tags,
                        &f64::from(m.confidence.unwrap_or(1.0)),
                        &m.pinned,
                        &scope,
                        &m.created_by,
                        &now,
                        &v,
                        &m.taint,
                        &self.cfg.language,
                    ],
                )
                .await
                .map_err(|e| self.fail(e))?
                .get(0);
            let seq = log(&tx, now, &id, mid, "insert", &m.created_by, Some("bulk"))
                .await
                .map_err(|e| self.fail(e))?;
            inserted.push((mid, seq, scope, v));
        }
        tx.commit().await.map_err(|e| self.fail(e))?;
        let n = inserted.len();
        let mut seqs = Vec::with_capacity(n);
        {
            let mut idx = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
            for (mid, seq, scope, v) in inserted {
                if let Some(v) = v {
                    idx.insert(mid, &scope, &v);
                }
                seqs.push(seq);
            }
        }
        self.applied(seqs).await;
        self.analyze().await;
        Ok(n)
    }

    async fn dump(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<MemoryRow>, Option<i64>), MemoryError> {
        let c = self.client().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT {}, m.decayed_at, m.archived_at, v.embedding, v.embedder \
                     FROM memories m LEFT JOIN memory_vectors v ON v.mid = m.mid \
                     WHERE m.mid > $1 ORDER BY m.mid LIMIT $2",
                    cols_of_m()
                ),
                &[&after, &(limit as i64)],
            )
            .await
            .map_err(|e| self.fail(e))?;
        let last = rows.last().map(|r| r.get::<_, i64>(0));
        Ok((
            rows.iter()
                .map(|r| MemoryRow {
                    memory: row_to_memory(r).1,
                    decayed_at: r.get(16),
                    archived_at: r.get(17),
                    embedding: r.get(18),
                    embedder: r.get(19),
                })
                .collect(),
            last,
        ))
    }

    async fn dump_log(&self, after: i64, limit: usize) -> Result<Vec<LogRow>, MemoryError> {
        let c = self.client().await?;
        Ok(c.query(
            "SELECT seq, ts, memory_id, action, actor, reason FROM memory_log WHERE seq > $1 \
                 ORDER BY seq LIMIT $2",
            &[&after, &(limit as i64)],
        )
        .await
        .map_err(|e| self.fail(e))?
        .iter()
        .map(|r| LogRow {
            seq: r.get(0),
            ts: r.get(1),
            memory_id: r.get(2),
            action: r.get(3),
            actor: r.get(4),
            reason: r.get(5),
        })
        .collect())
    }
}
