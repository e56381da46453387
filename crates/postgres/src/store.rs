//! `PgStore`: sessions and their tool log, approval requests and rate-limit counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::Value;
use strata_engine::llm::ChatMessage;
use strata_engine::session::{
    SessionInfo, SessionKey, SessionState, SessionStore, StoreError, StoredSession, StoredTurn,
    ToolLogEntry,
};
use strata_runtime::approval::{ApprovalRecord, ApprovalStatus, ApprovalStore};
use strata_runtime::ratelimit::{RateCounts, RateEvent, RateLog, WINDOWS};
use strata_runtime::store::{StateStore, StoreHealth, StoreStatus};
use strata_store::dump::{RateRow, SessionRow, ToolLogRow};
use tokio_postgres::Row;

use crate::batch::Batcher;
use crate::db::Db;
use crate::migrate::{SCHEMA_VERSION, TABLES};

/// Sessions, approvals and rate-limit counters in PostgreSQL.
#[derive(Clone)]
pub struct PgStore {
    db: Arc<Db>,
    /// Turns being stored, and sessions' versions being read, coalesced across concurrent
    /// turns (started on first use, on the runtime that uses the store).
    turns: Arc<OnceLock<Batcher<TurnWrite, bool>>>,
    versions: Arc<OnceLock<Batcher<SessionKey, i64>>>,
    loads: Arc<OnceLock<Batcher<SessionKey, Option<SessionState>>>>,
}

/// One turn to store: the session's row, the turn, its tool calls.
struct TurnWrite {
    key: SessionKey,
    /// Stored at most once per id.
    turn_id: Option<String>,
    messages: String,
    message_count: i64,
    provider_state: Option<String>,
    tools: Vec<ToolLogEntry>,
}

/// Calls a batch may hold, and batches in flight at once (each holds a connection).
const BATCH_MAX: usize = 1024;
const BATCH_WORKERS: usize = 2;

/// Stores `batch` in as few statements as it takes: one, unless a session comes twice (a
/// statement may update a row once), and one per turn when a batch fails (so one bad turn
/// fails alone). `false` for a turn whose id was stored already (nothing written).
async fn write_turns(db: Arc<Db>, batch: Vec<TurnWrite>) -> Vec<Result<bool, StoreError>> {
    let mut results: Vec<Option<Result<bool, StoreError>>> = vec![None; batch.len()];
    let mut left: Vec<usize> = (0..batch.len()).collect();
    while !left.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let (round, later): (Vec<usize>, Vec<usize>) =
            left.into_iter().partition(|&i| seen.insert(&batch[i].key));
        left = later;
        let items: Vec<&TurnWrite> = round.iter().map(|&i| &batch[i]).collect();
        match write_round(&db, &items).await {
            Ok(written) => {
                for (&i, w) in round.iter().zip(written) {
                    results[i] = Some(Ok(w));
                }
            }
            Err(e) if round.len() == 1 => results[round[0]] = Some(Err(e)),
            Err(_) => {
                for &i in &round {
                    let r = write_round(&db, &[&batch[i]]).await;
                    results[i] = Some(r.map(|w| w.first().copied().unwrap_or(false)));
                }
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StoreError::Failed("turn not written".into()))))
        .collect()
}

/// One statement (one round trip, one commit) for turns of distinct sessions: each
/// session's row, its turn, and the turn's tool calls, all or nothing; a turn whose id is
/// stored already is left out (`false` in the answer, one per item).
async fn write_round(db: &Db, items: &[&TurnWrite]) -> Result<Vec<bool>, StoreError> {
    let t = now();
    let agent: Vec<&str> = items.iter().map(|w| w.key.agent_id.as_str()).collect();
    let session: Vec<&str> = items.iter().map(|w| w.key.session_id.as_str()).collect();
    let state: Vec<Option<&str>> = items.iter().map(|w| w.provider_state.as_deref()).collect();
    let messages: Vec<&str> = items.iter().map(|w| w.messages.as_str()).collect();
    let count: Vec<i64> = items.iter().map(|w| w.message_count).collect();
    let ids: Vec<Option<&str>> = items.iter().map(|w| w.turn_id.as_deref()).collect();
    let tools = items.iter().flat_map(|w| w.tools.iter());
    let t_agent: Vec<&str> = tools.clone().map(|e| e.key.agent_id.as_str()).collect();
    let t_session: Vec<&str> = tools.clone().map(|e| e.key.session_id.as_str()).collect();
    let t_tool: Vec<&str> = tools.clone().map(|e| e.tool.as_str()).collect();
    let t_status: Vec<&str> = tools.clone().map(|e| e.status.as_str()).collect();
    let t_elapsed: Vec<f64> = tools.clone().map(|e| e.elapsed_ms).collect();
    let t_request: Vec<&str> = tools.map(|e| e.request_id.as_str()).collect();
    let c = db.client().await?;
    let st = c
        .prepare_cached(
            "WITH i AS (
                SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[],
                    $13::TEXT[]) AS i(agent_id, session_id, provider_state, messages,
                    message_count, turn_id)
                WHERE i.turn_id IS NULL
                   OR NOT EXISTS (SELECT 1 FROM turns d WHERE d.turn_id = i.turn_id)
             ), s AS (
                INSERT INTO sessions (agent_id, session_id, created_at, updated_at,
                    turns_since_summary, turn_count, provider_state, version)
                SELECT agent_id, session_id, $6, $6, 1, 1, provider_state, 1 FROM i
                ON CONFLICT (agent_id, session_id) DO UPDATE SET
                    updated_at = excluded.updated_at,
                    turns_since_summary = sessions.turns_since_summary + 1,
                    turn_count = sessions.turn_count + 1,
                    provider_state = excluded.provider_state,
                    version = sessions.version + 1
                RETURNING id, agent_id, session_id, turn_count
             ), t AS (
                INSERT INTO turns (session, turn, messages, message_count, created_at, turn_id)
                SELECT s.id, s.turn_count, i.messages, i.message_count, $6, i.turn_id
                FROM s JOIN i ON i.agent_id = s.agent_id AND i.session_id = s.session_id
             ), l AS (
                INSERT INTO tool_log (ts, agent_id, session_id, tool, status, elapsed_ms, request_id)
                SELECT $6, u.agent_id, u.session_id, u.tool, u.status, u.elapsed, u.request
                FROM unnest($7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::FLOAT8[],
                    $12::TEXT[]) AS u(agent_id, session_id, tool, status, elapsed, request)
                JOIN i ON i.agent_id = u.agent_id AND i.session_id = u.session_id
             )
             SELECT agent_id, session_id FROM s",
        )
        .await
        .map_err(|e| db.fail(e))?;
    let rows = match c
        .query(
            &st,
            &[
                &agent, &session, &state, &messages, &count, &t, &t_agent, &t_session, &t_tool,
                &t_status, &t_elapsed, &t_request, &ids,
            ],
        )
        .await
    {
        Ok(rows) => rows,
        // Another statement (a second batch here, or another instance) stored this turn id
        // between our check and our insert: the whole statement rolled back, and the turn
        // is stored once — by the other. A batch of several is retried one by one.
        Err(e) if items.len() == 1 && same_turn_id_stored(&e) => return Ok(vec![false]),
        Err(e) => return Err(db.fail(e)),
    };
    let written: std::collections::HashSet<(String, String)> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(items
        .iter()
        .map(|w| written.contains(&(w.key.agent_id.clone(), w.key.session_id.clone())))
        .collect())
}

/// The insert lost a race for its turn id (`turns_by_id`'s unique violation).
fn same_turn_id_stored(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        *d.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && d.constraint() == Some("turns_by_id")
    })
}

/// Runs `sql` (a constant) with the keys' agent ids as `$1` and session ids as `$2`.
async fn by_keys(db: &Db, keys: &[SessionKey], sql: &str) -> Result<Vec<Row>, StoreError> {
    let agent: Vec<&str> = keys.iter().map(|k| k.agent_id.as_str()).collect();
    let session: Vec<&str> = keys.iter().map(|k| k.session_id.as_str()).collect();
    let c = db.client().await?;
    let st = c.prepare_cached(sql).await.map_err(|e| db.fail(e))?;
    c.query(&st, &[&agent, &session])
        .await
        .map_err(|e| db.fail(e))
}

/// Sessions with their turns (`None` for one not stored), one statement for the batch — so
/// each session's row and its turns are read in one snapshot.
async fn read_sessions(
    db: Arc<Db>,
    keys: Vec<SessionKey>,
) -> Vec<Result<Option<SessionState>, StoreError>> {
    let rows = by_keys(
        &db,
        &keys,
        "SELECT u.n, s.summary, s.turns_since_summary, s.provider_state, s.taint, \
         s.version, t.messages \
         FROM unnest($1::TEXT[], $2::TEXT[]) WITH ORDINALITY AS u(agent_id, session_id, n) \
         JOIN sessions s ON s.agent_id = u.agent_id AND s.session_id = u.session_id \
         LEFT JOIN turns t ON t.session = s.id \
         ORDER BY u.n, t.turn",
    );
    let rows = match rows.await {
        Ok(rows) => rows,
        Err(e) => return keys.iter().map(|_| Err(e.clone())).collect(),
    };
    let mut out: Vec<Option<SessionState>> = keys.iter().map(|_| None).collect();
    let mut at = 0;
    while at < rows.len() {
        let n: i64 = rows[at].get(0);
        let end = rows[at..]
            .iter()
            .position(|r| r.get::<_, i64>(0) != n)
            .map_or(rows.len(), |p| at + p);
        let row = &rows[at];
        let stored = StoredSession {
            summary: row.get(1),
            turns_since_summary: row.get(2),
            provider_state: row.get(3),
            taint: row.get(4),
            version: Some(row.get(5)),
        };
        let turns = rows[at..end]
            .iter()
            .filter_map(|t| t.get::<_, Option<String>>(6));
        // WITH ORDINALITY counts from 1.
        if let Some(slot) = usize::try_from(n - 1).ok().and_then(|i| out.get_mut(i)) {
            *slot = Some(stored.into_state(turns));
        }
        at = end;
    }
    out.into_iter().map(Ok).collect()
}

/// Sessions' versions (0 for a session not stored yet), one statement for the batch.
async fn read_versions(db: Arc<Db>, keys: Vec<SessionKey>) -> Vec<Result<i64, StoreError>> {
    let rows = by_keys(
        &db,
        &keys,
        "SELECT COALESCE(s.version, 0) FROM unnest($1::TEXT[], $2::TEXT[]) \
         WITH ORDINALITY AS u(agent_id, session_id, n) \
         LEFT JOIN sessions s ON s.agent_id = u.agent_id AND s.session_id = u.session_id \
         ORDER BY u.n",
    );
    let versions = rows
        .await
        .map(|rows| rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>());
    match versions {
        Ok(v) if v.len() == keys.len() => v.into_iter().map(Ok).collect(),
        Ok(v) => {
            let e = StoreError::Failed(format!("{} versions for {} sessions", v.len(), keys.len()));
            keys.iter().map(|_| Err(e.clone())).collect()
        }
        Err(e) => keys.iter().map(|_| Err(e.clone())).collect(),
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Rate events older than this are deleted (the longest window is a day).
const KEEP_MS: i64 = 24 * 60 * 60 * 1000;
static RECORDS: AtomicU64 = AtomicU64::new(0);

const APPROVAL_COLS: &str = "id, agent_id, tool, principal, args, description, status, approver, \
                             reason, created_at, decided_at";

fn approval(r: &Row) -> ApprovalRecord {
    let args: String = r.get(4);
    let status: String = r.get(6);
    ApprovalRecord {
        id: r.get(0),
        agent_id: r.get(1),
        tool: r.get(2),
        principal: r.get(3),
        args: serde_json::from_str(&args).unwrap_or(Value::Null),
        description: r.get(5),
        // An unknown status (a newer binary wrote it) reads as timeout: never as approved.
        status: ApprovalStatus::parse(&status).unwrap_or(ApprovalStatus::Timeout),
        approver: r.get(7),
        reason: r.get(8),
        created_at: r.get(9),
        decided_at: r.get(10),
    }
}

impl PgStore {
    /// The store over `db` (connected and migrated).
    pub fn new(db: Arc<Db>) -> Self {
        PgStore {
            db,
            turns: Arc::default(),
            versions: Arc::default(),
            loads: Arc::default(),
        }
    }

    /// Queues a turn for the writer; `false` when its id was stored already.
    async fn write_turn(
        &self,
        key: &SessionKey,
        turn_id: Option<&str>,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
        tools: &[ToolLogEntry],
    ) -> Result<bool, StoreError> {
        let json = serde_json::to_string(messages).map_err(StoreError::failed)?;
        self.turn_writer()
            .call(TurnWrite {
                key: key.clone(),
                turn_id: turn_id.map(str::to_owned),
                messages: json,
                message_count: messages.len() as i64,
                provider_state: provider_state.map(Value::to_string),
                tools: tools.to_vec(),
            })
            .await
    }

    fn turn_writer(&self) -> &Batcher<TurnWrite, bool> {
        self.turns.get_or_init(|| {
            let db = self.db.clone();
            Batcher::start(BATCH_WORKERS, BATCH_MAX, move |b| {
                write_turns(db.clone(), b)
            })
        })
    }

    fn version_reader(&self) -> &Batcher<SessionKey, i64> {
        self.versions.get_or_init(|| {
            let db = self.db.clone();
            Batcher::start(BATCH_WORKERS, BATCH_MAX, move |b| {
                read_versions(db.clone(), b)
            })
        })
    }

    fn session_reader(&self) -> &Batcher<SessionKey, Option<SessionState>> {
        self.loads.get_or_init(|| {
            let db = self.db.clone();
            Batcher::start(BATCH_WORKERS, BATCH_MAX, move |b| {
                read_sessions(db.clone(), b)
            })
        })
    }

    /// The pool.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    async fn insert_tool_log(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        entries: &[ToolLogEntry],
        t: i64,
    ) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let st = tx
            .prepare_cached(
                "INSERT INTO tool_log (ts, agent_id, session_id, tool, status, elapsed_ms, request_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        for e in entries {
            tx.execute(
                &st,
                &[
                    &t,
                    &e.key.agent_id,
                    &e.key.session_id,
                    &e.tool,
                    &e.status,
                    &e.elapsed_ms,
                    &e.request_id,
                ],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        }
        Ok(())
    }

    /// Copies sessions with their turns; a session already present (same agent and session
    /// id) is left as it is. Returns (sessions, turns) copied.
    pub async fn restore_sessions(&self, rows: &[SessionRow]) -> Result<(u64, u64), StoreError> {
        let mut c = self.db.client().await?;
        let tx = c.transaction().await.map_err(|e| self.db.fail(e))?;
        let (mut sessions, mut turns) = (0, 0);
        for s in rows {
            let pk: Option<i64> = tx
                .query_opt(
                    "INSERT INTO sessions (agent_id, session_id, summary, turns_since_summary, \
                     turn_count, provider_state, created_at, updated_at, taint) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     ON CONFLICT (agent_id, session_id) DO NOTHING RETURNING id",
                    &[
                        &s.agent_id,
                        &s.session_id,
                        &s.summary,
                        &s.turns_since_summary,
                        &s.turn_count,
                        &s.provider_state,
                        &s.created_at,
                        &s.updated_at,
                        &s.taint,
                    ],
                )
                .await
                .map_err(|e| self.db.fail(e))?
                .map(|r| r.get(0));
            let Some(pk) = pk else { continue };
            sessions += 1;
            for t in &s.turns {
                tx.execute(
                    "INSERT INTO turns (session, turn, messages, message_count, created_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[&pk, &t.turn, &t.messages, &t.message_count, &t.created_at],
                )
                .await
                .map_err(|e| self.db.fail(e))?;
                turns += 1;
            }
        }
        tx.commit().await.map_err(|e| self.db.fail(e))?;
        Ok((sessions, turns))
    }

    /// Copies tool-log rows (keyed by their source row id). Returns how many were new.
    pub async fn restore_tool_log(&self, rows: &[ToolLogRow]) -> Result<u64, StoreError> {
        let mut c = self.db.client().await?;
        let tx = c.transaction().await.map_err(|e| self.db.fail(e))?;
        let mut n = 0;
        for r in rows {
            n += tx
                .execute(
                    "INSERT INTO tool_log (ts, agent_id, session_id, tool, status, elapsed_ms, \
                     request_id, source_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                     ON CONFLICT (source_id) DO NOTHING",
                    &[
                        &r.ts,
                        &r.agent_id,
                        &r.session_id,
                        &r.tool,
                        &r.status,
                        &r.elapsed_ms,
                        &r.request_id,
                        &r.source_id,
                    ],
                )
                .await
                .map_err(|e| self.db.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.db.fail(e))?;
        Ok(n)
    }

    /// Copies model calls (keyed by their source row id). Returns how many were new.
    pub async fn restore_model_calls(
        &self,
        rows: &[strata_store::dump::ModelCallRow],
    ) -> Result<u64, StoreError> {
        let mut c = self.db.client().await?;
        let tx = c.transaction().await.map_err(|e| self.db.fail(e))?;
        let mut n = 0;
        for r in rows {
            let values = crate::usage::call_values(&r.call, Some(r.source_id));
            n += tx
                .execute(crate::usage::INSERT_CALL, &crate::usage::refs(&values))
                .await
                .map_err(|e| self.db.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.db.fail(e))?;
        Ok(n)
    }

    /// Copies rate events (keyed by their source row id). Returns how many were new.
    pub async fn restore_rate_events(&self, rows: &[RateRow]) -> Result<u64, StoreError> {
        let mut c = self.db.client().await?;
        let tx = c.transaction().await.map_err(|e| self.db.fail(e))?;
        let mut n = 0;
        for r in rows {
            n += tx
                .execute(
                    "INSERT INTO rate_events (key, tool, ts_ms, source_id) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (source_id) DO NOTHING",
                    &[&r.key, &r.tool, &r.ts_ms, &r.source_id],
                )
                .await
                .map_err(|e| self.db.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.db.fail(e))?;
        Ok(n)
    }

    /// Copies approval requests (keyed by id). Returns how many were new.
    pub async fn restore_approvals(&self, rows: &[ApprovalRecord]) -> Result<u64, StoreError> {
        let mut c = self.db.client().await?;
        let tx = c.transaction().await.map_err(|e| self.db.fail(e))?;
        let mut n = 0;
        for a in rows {
            n += tx
                .execute(
                    &format!(
                        "INSERT INTO approvals ({APPROVAL_COLS}) VALUES ($1, $2, $3, $4, $5, $6, \
                         $7, $8, $9, $10, $11) ON CONFLICT (id) DO NOTHING"
                    ),
                    &[
                        &a.id,
                        &a.agent_id,
                        &a.tool,
                        &a.principal,
                        &a.args.to_string(),
                        &a.description,
                        &a.status.as_str(),
                        &a.approver,
                        &a.reason,
                        &a.created_at,
                        &a.decided_at,
                    ],
                )
                .await
                .map_err(|e| self.db.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.db.fail(e))?;
        Ok(n)
    }
}

#[async_trait]
impl SessionStore for PgStore {
    async fn load(&self, key: &SessionKey) -> Result<Option<SessionState>, StoreError> {
        self.session_reader().call(key.clone()).await
    }

    async fn append_turn(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
    ) -> Result<(), StoreError> {
        self.record_turn(key, messages, provider_state, &[]).await
    }

    async fn record_turn(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
        tools: &[ToolLogEntry],
    ) -> Result<(), StoreError> {
        self.write_turn(key, None, messages, provider_state, tools)
            .await
            .map(|_| ())
    }

    async fn record_turn_once(
        &self,
        key: &SessionKey,
        turn_id: &str,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
        tools: &[ToolLogEntry],
    ) -> Result<bool, StoreError> {
        self.write_turn(key, Some(turn_id), messages, provider_state, tools)
            .await
    }

    async fn stored_turn(&self, turn_id: &str) -> Result<Option<Vec<ChatMessage>>, StoreError> {
        let c = self.db.client().await?;
        let st = c
            .prepare_cached("SELECT messages FROM turns WHERE turn_id = $1")
            .await
            .map_err(|e| self.db.fail(e))?;
        let Some(row) = c
            .query_opt(&st, &[&turn_id])
            .await
            .map_err(|e| self.db.fail(e))?
        else {
            return Ok(None);
        };
        let json: String = row.get(0);
        serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("stored turn {turn_id}: {e}")))
    }

    async fn compact(
        &self,
        key: &SessionKey,
        summary: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        let mut c = self.db.client().await?;
        let tx = c.transaction().await.map_err(|e| self.db.fail(e))?;
        let Some(pk) = tx
            .query_opt(
                "SELECT id FROM sessions WHERE agent_id = $1 AND session_id = $2 FOR UPDATE",
                &[&key.agent_id, &key.session_id],
            )
            .await
            .map_err(|e| self.db.fail(e))?
            .map(|r| r.get::<_, i64>(0))
        else {
            return Ok(());
        };
        // Keep the newest `keep` messages: whole turns from the end, the oldest kept turn
        // trimmed when `keep` falls inside it, everything older deleted.
        let rows = tx
            .query(
                "SELECT turn, message_count FROM turns WHERE session = $1 ORDER BY turn DESC",
                &[&pk],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        let mut kept = 0i64;
        let mut boundary: Option<i64> = None;
        for r in rows {
            let (turn, count): (i64, i64) = (r.get(0), r.get(1));
            if kept + count <= keep as i64 {
                kept += count;
                continue;
            }
            let take = keep as i64 - kept;
            if take > 0 {
                let text: String = tx
                    .query_one(
                        "SELECT messages FROM turns WHERE session = $1 AND turn = $2",
                        &[&pk, &turn],
                    )
                    .await
                    .map_err(|e| self.db.fail(e))?
                    .get(0);
                let mut msgs: Vec<ChatMessage> =
                    serde_json::from_str(&text).map_err(StoreError::corrupt)?;
                let tail = msgs.split_off(msgs.len().saturating_sub(take as usize));
                let json = serde_json::to_string(&tail).map_err(StoreError::failed)?;
                tx.execute(
                    "UPDATE turns SET messages = $3, message_count = $4 WHERE session = $1 AND turn = $2",
                    &[&pk, &turn, &json, &take],
                )
                .await
                .map_err(|e| self.db.fail(e))?;
                boundary = Some(turn);
            } else {
                boundary = Some(turn + 1);
            }
            break;
        }
        if let Some(b) = boundary {
            tx.execute(
                "DELETE FROM turns WHERE session = $1 AND turn < $2",
                &[&pk, &b],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        }
        tx.execute(
            "UPDATE sessions SET summary = $2, turns_since_summary = 0, updated_at = $3, \
             version = version + 1 WHERE id = $1",
            &[&pk, &summary, &now()],
        )
        .await
        .map_err(|e| self.db.fail(e))?;
        tx.commit().await.map_err(|e| self.db.fail(e))
    }

    async fn reset(&self, key: &SessionKey) -> Result<(), StoreError> {
        let c = self.db.client().await?;
        c.execute(
            "DELETE FROM sessions WHERE agent_id = $1 AND session_id = $2",
            &[&key.agent_id, &key.session_id],
        )
        .await
        .map(|_| ())
        .map_err(|e| self.db.fail(e))
    }

    async fn prune(&self, idle: Duration) -> Result<usize, StoreError> {
        let cutoff = now() - idle.as_secs() as i64;
        let c = self.db.client().await?;
        c.execute("DELETE FROM sessions WHERE updated_at < $1", &[&cutoff])
            .await
            .map(|n| n as usize)
            .map_err(|e| self.db.fail(e))
    }

    async fn log_tools(&self, entries: &[ToolLogEntry]) -> Result<(), StoreError> {
        let mut c = self.db.client().await?;
        let tx = c.transaction().await.map_err(|e| self.db.fail(e))?;
        self.insert_tool_log(&tx, entries, now()).await?;
        tx.commit().await.map_err(|e| self.db.fail(e))
    }

    async fn version(&self, key: &SessionKey) -> Result<Option<i64>, StoreError> {
        self.version_reader().call(key.clone()).await.map(Some)
    }

    fn versioned(&self) -> bool {
        true
    }

    async fn set_taint(
        &self,
        key: &SessionKey,
        sources: &[strata_engine::taint::TaintSource],
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(sources).map_err(StoreError::failed)?;
        let c = self.db.client().await?;
        c.execute(
            "UPDATE sessions SET taint = $3 WHERE agent_id = $1 AND session_id = $2",
            &[&key.agent_id, &key.session_id, &json],
        )
        .await
        .map(|_| ())
        .map_err(|e| self.db.fail(e))
    }

    async fn count(&self) -> Result<u64, StoreError> {
        let c = self.db.client().await?;
        c.query_one("SELECT COUNT(*) FROM sessions", &[])
            .await
            .map(|r| r.get::<_, i64>(0).max(0) as u64)
            .map_err(|e| self.db.fail(e))
    }

    async fn list_sessions(
        &self,
        query: &str,
        limit: usize,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        let pattern = strata_engine::session::like_pattern(query);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let c = self.db.client().await?;
        let rows = c
            .query(
                "SELECT agent_id, session_id, turn_count, created_at, updated_at FROM sessions \
                 WHERE agent_id ILIKE $1 OR session_id ILIKE $1 \
                 ORDER BY updated_at DESC, id DESC LIMIT $2",
                &[&pattern, &limit],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        Ok(rows
            .iter()
            .map(|r| SessionInfo {
                agent_id: r.get(0),
                session_id: r.get(1),
                turns: r.get::<_, i64>(2).max(0) as u64,
                created_at: r.get(3),
                updated_at: r.get(4),
            })
            .collect())
    }

    async fn transcript(
        &self,
        key: &SessionKey,
    ) -> Result<Option<(Option<String>, Vec<StoredTurn>)>, StoreError> {
        // One statement: the session's row and its turns from one snapshot.
        let c = self.db.client().await?;
        let rows = c
            .query(
                "SELECT s.summary, t.created_at, t.messages FROM sessions s \
                 LEFT JOIN turns t ON t.session = s.id \
                 WHERE s.agent_id = $1 AND s.session_id = $2 ORDER BY t.turn",
                &[&key.agent_id, &key.session_id],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let summary: Option<String> = first.get(0);
        let turns = rows.iter().filter_map(|r| {
            let at: Option<i64> = r.get(1);
            let text: Option<String> = r.get(2);
            at.zip(text)
        });
        Ok(Some((summary, strata_engine::session::read_turns(turns))))
    }
}

#[async_trait]
impl RateLog for PgStore {
    async fn load_since(&self, since_ms: i64) -> Result<Vec<RateEvent>, StoreError> {
        let c = self.db.client().await?;
        Ok(c.query(
            "SELECT key, tool, ts_ms FROM rate_events WHERE ts_ms > $1",
            &[&since_ms],
        )
        .await
        .map_err(|e| self.db.fail(e))?
        .into_iter()
        .map(|r| RateEvent {
            key: r.get(0),
            tool: r.get(1),
            ts_ms: r.get(2),
        })
        .collect())
    }

    fn append(&self, e: RateEvent) {
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(err) = me.record(e, [None; 3]).await {
                tracing::error!(error = %err, "a rate-limit event was not stored");
            }
        });
    }

    fn shared(&self) -> bool {
        true
    }

    async fn record(&self, e: RateEvent, caps: [Option<u32>; 3]) -> Result<RateCounts, StoreError> {
        let mut c = self.db.client().await?;
        let tx = c.transaction().await.map_err(|e| self.db.fail(e))?;
        // One key and tool at a time across every instance: the count below must see every
        // event recorded before this one (READ COMMITTED takes its snapshot per statement,
        // so the lock comes first, in its own statement).
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\\n' || $2, 0))",
            &[&e.key, &e.tool],
        )
        .await
        .map_err(|err| self.db.fail(err))?;
        let [(_, m), (_, h), (_, d)] = WINDOWS;
        let row = tx
            .query_one(
                "SELECT 1 + COUNT(*) FILTER (WHERE ts_ms > $3::BIGINT - $4::BIGINT),
                        1 + COUNT(*) FILTER (WHERE ts_ms > $3::BIGINT - $5::BIGINT),
                        1 + COUNT(*),
                        MIN(ts_ms) FILTER (WHERE ts_ms > $3::BIGINT - $4::BIGINT),
                        MIN(ts_ms) FILTER (WHERE ts_ms > $3::BIGINT - $5::BIGINT),
                        MIN(ts_ms)
                 FROM rate_events WHERE key = $1 AND tool = $2 AND ts_ms > $3::BIGINT - $6::BIGINT",
                &[&e.key, &e.tool, &e.ts_ms, &m, &h, &d],
            )
            .await
            .map_err(|err| self.db.fail(err))?;
        let n = |i: usize| u32::try_from(row.get::<_, i64>(i)).unwrap_or(u32::MAX);
        let seen = RateCounts {
            counts: [n(0), n(1), n(2)],
            oldest: [row.get(3), row.get(4), row.get(5)],
        };
        // Only a call let through counts: a client retrying in a loop gets back in when the
        // window has room.
        if seen.fits(caps) {
            tx.execute(
                "INSERT INTO rate_events (key, tool, ts_ms) VALUES ($1, $2, $3)",
                &[&e.key, &e.tool, &e.ts_ms],
            )
            .await
            .map_err(|err| self.db.fail(err))?;
        }
        if RECORDS.fetch_add(1, Ordering::Relaxed).is_multiple_of(1024) {
            tx.execute(
                "DELETE FROM rate_events WHERE ts_ms <= $1",
                &[&(e.ts_ms - KEEP_MS)],
            )
            .await
            .map_err(|err| self.db.fail(err))?;
        }
        tx.commit().await.map_err(|err| self.db.fail(err))?;
        Ok(seen)
    }
}

#[async_trait]
impl ApprovalStore for PgStore {
    async fn insert(&self, a: &ApprovalRecord) -> Result<(), StoreError> {
        let c = self.db.client().await?;
        c.execute(
            &format!(
                "INSERT INTO approvals ({APPROVAL_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            ),
            &[
                &a.id,
                &a.agent_id,
                &a.tool,
                &a.principal,
                &a.args.to_string(),
                &a.description,
                &a.status.as_str(),
                &a.approver,
                &a.reason,
                &a.created_at,
                &a.decided_at,
            ],
        )
        .await
        .map(|_| ())
        .map_err(|e| self.db.fail(e))
    }

    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let c = self.db.client().await?;
        c.query_opt(
            &format!("SELECT {APPROVAL_COLS} FROM approvals WHERE id = $1"),
            &[&id],
        )
        .await
        .map(|r| r.as_ref().map(approval))
        .map_err(|e| self.db.fail(e))
    }

    async fn list(
        &self,
        status: Option<ApprovalStatus>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let c = self.db.client().await?;
        let status = status.map(ApprovalStatus::as_str);
        c.query(
            &format!(
                "SELECT {APPROVAL_COLS} FROM approvals WHERE ($1::TEXT IS NULL OR status = $1) \
                 ORDER BY created_at DESC, seq DESC LIMIT $2"
            ),
            &[&status, &(limit as i64)],
        )
        .await
        .map(|rows| rows.iter().map(approval).collect())
        .map_err(|e| self.db.fail(e))
    }

    async fn decide(
        &self,
        id: &str,
        status: ApprovalStatus,
        approver: Option<&str>,
        reason: Option<&str>,
        at: i64,
    ) -> Result<bool, StoreError> {
        let c = self.db.client().await?;
        c.execute(
            "UPDATE approvals SET status = $2, approver = $3, reason = $4, decided_at = $5 \
             WHERE id = $1 AND status = 'pending'",
            &[&id, &status.as_str(), &approver, &reason, &at],
        )
        .await
        .map(|n| n == 1)
        .map_err(|e| self.db.fail(e))
    }

    async fn expire(&self, created_before: i64, at: i64) -> Result<usize, StoreError> {
        let c = self.db.client().await?;
        c.execute(
            "UPDATE approvals SET status = 'timeout', reason = 'timeout', decided_at = $2 \
             WHERE status = 'pending' AND created_at <= $1",
            &[&created_before, &at],
        )
        .await
        .map(|n| n as usize)
        .map_err(|e| self.db.fail(e))
    }
}

#[async_trait]
impl StateStore for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn location(&self) -> String {
        format!("{} schema {}", self.db.target(), self.db.schema())
    }

    /// Every write is committed before its call returns; rate events handed to `append` are
    /// recorded by `record` in the limiter's path instead.
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn health(&self) -> StoreHealth {
        let answer = async {
            let c = self.db.client().await?;
            c.query_one("SELECT 1", &[])
                .await
                .map_err(|e| self.db.fail(e))
        };
        match answer.await {
            Ok(_) => StoreHealth::Ok,
            Err(e) => StoreHealth::Degraded {
                reason: e.message().to_owned(),
            },
        }
    }

    async fn status(&self) -> Result<StoreStatus, StoreError> {
        let c = self.db.client().await?;
        let version = crate::migrate::version(&c)
            .await
            .map_err(|e| self.db.fail(e))?;
        let mut rows = Vec::new();
        for t in TABLES {
            // Table names come from the constant list, never from input.
            let n: i64 = c
                .query_one(&format!("SELECT COUNT(*) FROM {t}"), &[])
                .await
                .map_err(|e| self.db.fail(e))?
                .get(0);
            rows.push(((*t).to_owned(), n.max(0) as u64));
        }
        Ok(StoreStatus {
            backend: "postgres",
            location: self.location(),
            schema_version: version,
            known_version: SCHEMA_VERSION,
            rows,
            pool: Some(self.db.pool_status()),
        })
    }
}
