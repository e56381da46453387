//! # strata-store
//!
//! SQLite persistence (rusqlite, SQLite bundled — FTS5 included for the memory issue). One
//! database file in the data dir, WAL mode, foreign keys on, a busy timeout, file mode 0600.
//! Calls run on tokio's blocking pool, never on the async worker threads. Schema versions are
//! applied at open (`PRAGMA user_version`).

pub mod audit_log;
pub use audit_log::JsonlAudit;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use strata_engine::llm::ChatMessage;
use strata_engine::session::{
    SessionInfo, SessionKey, SessionState, SessionStore, StoreError, StoredSession, StoredTurn,
    ToolLogEntry,
};
use strata_runtime::store::{StateStore, StoreHealth, StoreStatus};

/// Schema migrations, applied in order; the index + 1 is the version.
const MIGRATIONS: &[&str] = &[
    // 1: sessions, turns (a turn's messages as one JSON array: one row per turn), tool log.
    "CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        summary TEXT,
        turns_since_summary INTEGER NOT NULL DEFAULT 0,
        turn_count INTEGER NOT NULL DEFAULT 0,
        provider_state TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (agent_id, session_id)
    );
    CREATE TABLE turns (
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn INTEGER NOT NULL,
        messages TEXT NOT NULL,
        message_count INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (session, turn)
    ) WITHOUT ROWID;
    CREATE TABLE tool_log (
        id INTEGER PRIMARY KEY,
        ts INTEGER NOT NULL,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        status TEXT NOT NULL,
        elapsed_ms REAL NOT NULL,
        request_id TEXT NOT NULL
    );
    CREATE INDEX tool_log_by_ts ON tool_log(ts);",
    // 2: rate-limit events and approval requests (the security pipeline).
    "CREATE TABLE rate_events (
        key TEXT NOT NULL,
        tool TEXT NOT NULL,
        ts_ms INTEGER NOT NULL
    );
    CREATE INDEX rate_events_by_ts ON rate_events(ts_ms);
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        agent_id TEXT,
        tool TEXT NOT NULL,
        principal TEXT NOT NULL,
        args TEXT NOT NULL,
        description TEXT NOT NULL,
        status TEXT NOT NULL,
        approver TEXT,
        reason TEXT,
        created_at INTEGER NOT NULL,
        decided_at INTEGER
    );
    CREATE INDEX approvals_by_status ON approvals(status, created_at);",
    // 3: what has tainted a session (JSON list of taint sources), kept across restarts.
    "ALTER TABLE sessions ADD COLUMN taint TEXT;",
    // 4: schedules: each one's state, and its runs (a run is claimed before it starts).
    "CREATE TABLE schedule_state (
        name TEXT PRIMARY KEY,
        next_run INTEGER,
        last_run INTEGER,
        last_status TEXT,
        last_duration_ms INTEGER,
        failures INTEGER NOT NULL DEFAULT 0,
        paused INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE schedule_runs (
        name TEXT NOT NULL,
        due INTEGER NOT NULL,
        instance TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        finished_ms INTEGER,
        status TEXT NOT NULL,
        detail TEXT,
        until_ms INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (name, due)
    );",
    // 5: schedules people asked for in conversation (`schedule_create`), as JSON.
    "CREATE TABLE schedule_defs (name TEXT PRIMARY KEY, def TEXT NOT NULL);",
    // 6: a tick reads only what is due.
    "CREATE INDEX schedule_state_due ON schedule_state(next_run) WHERE paused = 0;",
    // 7: every model call's tokens and cost (NULL: no price for the model).
    "CREATE TABLE model_calls (
        ts_ms INTEGER NOT NULL,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        sender TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        purpose TEXT NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        cached_input_tokens INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL,
        cost_usd REAL
    );
    CREATE INDEX model_calls_by_ts ON model_calls(ts_ms);
    CREATE INDEX model_calls_by_turn ON model_calls(turn_id);",
    // 8: where each call's prompt tokens went (0 for calls recorded before).
    "ALTER TABLE model_calls ADD COLUMN in_system INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE model_calls ADD COLUMN in_tools INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE model_calls ADD COLUMN in_memory INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE model_calls ADD COLUMN in_history INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE model_calls ADD COLUMN in_tool_outputs INTEGER NOT NULL DEFAULT 0;",
    // 9: goal workstreams: each goal as a versioned JSON document, and its append-only log.
    "CREATE TABLE goals (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        version INTEGER NOT NULL,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        doc TEXT NOT NULL
    );
    CREATE TABLE goal_events (
        goal TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at_ms INTEGER NOT NULL,
        actor TEXT NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL,
        reason TEXT,
        PRIMARY KEY (goal, seq)
    );",
    // 10: the turn journal (strata_runtime::journal): each turn's start and its steps.
    "CREATE TABLE journal_turns (
        turn_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        ended_ms INTEGER,
        outcome TEXT,
        resumed INTEGER NOT NULL DEFAULT 0,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        start TEXT NOT NULL
    );
    CREATE INDEX journal_turns_open ON journal_turns(started_ms) WHERE ended_ms IS NULL;
    CREATE INDEX journal_turns_ended ON journal_turns(ended_ms);
    CREATE TABLE journal_steps (
        turn_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (turn_id, seq)
    );",
    // 11: a turn stored under its id once (a retried request, a resumed turn).
    "ALTER TABLE turns ADD COLUMN turn_id TEXT;
    CREATE UNIQUE INDEX turns_by_id ON turns(turn_id) WHERE turn_id IS NOT NULL;",
];

/// The newest schema version this binary knows (the number of migrations).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub mod dump;
mod goals;
mod journal;
mod schedules;
mod security;
mod usage;

/// The tables `strata storage status` counts and `storage migrate` copies, in copy order.
pub const TABLES: &[&str] = &[
    "sessions",
    "turns",
    "tool_log",
    "approvals",
    "rate_events",
    "model_calls",
    "goals",
    "goal_events",
    "journal_turns",
    "journal_steps",
];

/// Opening or migrating the database failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// SQLite refused.
    #[error("database {path}: {source}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// The file's schema is newer than this binary knows.
    #[error(
        "database {path} has schema version {found}, newer than this binary's {known}; upgrade strata"
    )]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: i64,
        /// Ours.
        known: i64,
    },
    /// Creating the directory or setting permissions failed.
    #[error("database {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The SQLite store. Writes go to one writer thread that commits whatever has queued up in
/// a single transaction (group commit: under load, many turns share one commit); reads use a
/// second connection on the blocking pool (WAL lets them run beside the writer).
#[derive(Clone)]
pub struct SqliteStore {
    reader: Arc<Mutex<Connection>>,
    writer: std::sync::mpsc::Sender<Job>,
    path: PathBuf,
}

type WriteFn = Box<dyn FnOnce(&Connection) -> rusqlite::Result<usize> + Send>;

struct Job {
    op: WriteFn,
    reply: tokio::sync::oneshot::Sender<Result<usize, String>>,
}

/// Most jobs committed together.
const BATCH: usize = 512;

/// Runs one of the cached transaction-control statements.
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn writer_loop(conn: Connection, rx: std::sync::mpsc::Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let mut results: Vec<Result<usize, String>> = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        let mut ops = Vec::with_capacity(jobs.len());
        for j in jobs {
            ops.push(j.op);
            replies.push(j.reply);
        }
        match control(&conn, "BEGIN IMMEDIATE") {
            Err(e) => results.extend(ops.iter().map(|_| Err(e.to_string()))),
            Ok(()) => {
                let single = ops.len() == 1;
                for op in ops {
                    // Each job in its own savepoint: one failing write does not undo the
                    // others. A batch of one needs none: the transaction is the job.
                    let r = if single {
                        op(&conn)
                    } else {
                        control(&conn, "SAVEPOINT job").and_then(|()| match op(&conn) {
                            Ok(n) => control(&conn, "RELEASE job").map(|()| n),
                            Err(e) => {
                                let _ = control(&conn, "ROLLBACK TO job");
                                let _ = control(&conn, "RELEASE job");
                                Err(e)
                            }
                        })
                    };
                    results.push(r.map_err(|e| e.to_string()));
                }
                let failed_single = single && results.first().is_some_and(Result::is_err);
                let end = if failed_single { "ROLLBACK" } else { "COMMIT" };
                if let Err(e) = control(&conn, end) {
                    let _ = control(&conn, "ROLLBACK");
                    let msg = format!("commit failed: {e}");
                    results.iter_mut().for_each(|r| *r = Err(msg.clone()));
                }
            }
        }
        for (reply, r) in replies.into_iter().zip(results) {
            let _ = reply.send(r);
        }
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Opens (creating, with its directory) the SQLite file at `path` the way every Strata
/// database is opened — the sessions store here, agent memory in `strata-memory`: mode 0600,
/// a 5 s busy timeout, WAL (retried while another process opening the same new file holds
/// it: SQLite answers "locked" at once there instead of waiting) and `synchronous=NORMAL`.
pub fn open_connection(path: &Path) -> Result<Connection, OpenError> {
    let sql = |source| OpenError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    let io = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        strata_engine::paths::create_private_dir_all(parent).map_err(io)?;
    }
    let conn = Connection::open(path).map_err(sql)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => break,
            Err(rusqlite::Error::SqliteFailure(f, _))
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(sql(e)),
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql)?;
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating) the database at `path` and applies pending migrations.
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let sql = |source| OpenError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = open_connection(path)?;
        let reader = Connection::open(path).map_err(sql)?;
        reader.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql)?;
        migrate(&conn).map_err(|e| match e {
            MigrateError::Sql(source) => OpenError::Sqlite {
                path: path.to_path_buf(),
                source,
            },
            MigrateError::TooNew(found) => OpenError::TooNew {
                path: path.to_path_buf(),
                found,
                known: MIGRATIONS.len() as i64,
            },
        })?;
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("strata-store-writer".into())
            .spawn(move || writer_loop(conn, rx))
            .map_err(|source| OpenError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(SqliteStore {
            reader: Arc::new(Mutex::new(reader)),
            writer: tx,
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version in the file.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        let conn = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| sqlite_error(&e))
    }

    /// Queues a write for the writer thread and waits for its commit.
    async fn write<F>(&self, f: F) -> Result<usize, StoreError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<usize> + Send + 'static,
    {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.writer
            .send(Job {
                op: Box::new(f),
                reply,
            })
            .map_err(|_| StoreError::Unavailable("the database writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the database writer has stopped".into()))?
            .map_err(|e| {
                strata_engine::meters::store_error("sqlite");
                StoreError::Failed(e)
            })
    }

    /// Waits until every write queued so far is committed (call before a short-lived process
    /// exits, so fire-and-forget writes such as rate-limit events are not lost).
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.write(|_| Ok(0)).await.map(|_| ())
    }

    /// Queues a write without waiting for it (its failure is logged).
    fn write_detached<F>(&self, f: F)
    where
        F: FnOnce(&Connection) -> rusqlite::Result<usize> + Send + 'static,
    {
        let (reply, _rx) = tokio::sync::oneshot::channel();
        let op = move |c: &Connection| {
            f(c).inspect_err(|e| {
                strata_engine::meters::store_error("sqlite");
                tracing::warn!(error = %e, "a queued database write failed");
            })
        };
        if self
            .writer
            .send(Job {
                op: Box::new(op),
                reply,
            })
            .is_err()
        {
            tracing::error!("the database writer has stopped; a write was lost");
        }
    }

    /// Runs a read with the reader connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = self.reader.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut c)
        })
        .await
        .map_err(|e| StoreError::Failed(format!("store task failed: {e}")))?
        .map_err(|e| {
            strata_engine::meters::store_error("sqlite");
            sqlite_error(&e)
        })
    }
}

impl SqliteStore {
    /// Appends a turn to its session; with `turn_id`, only when no turn with that id is
    /// stored (returns whether it was written).
    async fn write_turn(
        &self,
        key: &SessionKey,
        turn_id: Option<&str>,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
        tools: &[ToolLogEntry],
    ) -> Result<bool, StoreError> {
        let key = key.clone();
        let turn_id = turn_id.map(str::to_owned);
        let messages = messages.to_vec();
        let tools = tools.to_vec();
        let state = provider_state.map(Value::to_string);
        self.write(move |tx| {
            let t = now();
            if let Some(id) = &turn_id
                && tx
                    .prepare_cached("SELECT 1 FROM turns WHERE turn_id = ?1")?
                    .exists([id])?
            {
                return Ok(0);
            }
            let (pk, turn): (i64, i64) = tx
                .prepare_cached(
                    "INSERT INTO sessions (agent_id, session_id, created_at, updated_at, turns_since_summary, turn_count, provider_state)
                     VALUES (?1, ?2, ?3, ?3, 1, 1, ?4)
                     ON CONFLICT (agent_id, session_id) DO UPDATE SET
                        updated_at = excluded.updated_at,
                        turns_since_summary = turns_since_summary + 1,
                        turn_count = turn_count + 1,
                        provider_state = excluded.provider_state
                     RETURNING id, turn_count",
                )?
                .query_row(params![key.agent_id, key.session_id, t, state], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            let json = serde_json::to_string(&messages)
                .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
            tx.prepare_cached(
                "INSERT INTO turns (session, turn, messages, message_count, created_at, turn_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![pk, turn, json, messages.len() as i64, t, turn_id])?;
            insert_tool_log(tx, &tools, t)?;
            Ok(1)
        })
        .await
        .map(|n| n == 1)
    }
}

enum MigrateError {
    Sql(rusqlite::Error),
    TooNew(i64),
}

fn migrate(conn: &Connection) -> Result<(), MigrateError> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(MigrateError::Sql)?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(MigrateError::TooNew(version));
    }
    for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let v = i as i64 + 1;
        // One transaction per step: a failed step leaves the previous version intact. The
        // version is read again under the write lock: another process opening the same new
        // file (`strata approvals list` beside a running command) may have applied it first.
        let step = || -> rusqlite::Result<bool> {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            let now: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if now >= v {
                conn.execute_batch("COMMIT")?;
                return Ok(false);
            }
            conn.execute_batch(&format!("{m}; PRAGMA user_version = {v}; COMMIT;"))?;
            Ok(true)
        };
        match step() {
            Ok(true) => tracing::info!(version = v, "database migrated"),
            Ok(false) => {}
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(MigrateError::Sql(e));
            }
        }
    }
    Ok(())
}

fn session_pk(tx: &Connection, key: &SessionKey) -> rusqlite::Result<Option<i64>> {
    tx.query_row(
        "SELECT id FROM sessions WHERE agent_id = ?1 AND session_id = ?2",
        params![key.agent_id, key.session_id],
        |r| r.get(0),
    )
    .optional()
}

fn insert_tool_log(tx: &Connection, entries: &[ToolLogEntry], t: i64) -> rusqlite::Result<usize> {
    if entries.is_empty() {
        return Ok(0);
    }
    let mut ins = tx.prepare_cached(
        "INSERT INTO tool_log (ts, agent_id, session_id, tool, status, elapsed_ms, request_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for e in entries {
        ins.execute(params![
            t,
            e.key.agent_id,
            e.key.session_id,
            e.tool,
            e.status,
            e.elapsed_ms,
            e.request_id
        ])?;
    }
    Ok(entries.len())
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn load(&self, key: &SessionKey) -> Result<Option<SessionState>, StoreError> {
        let key = key.clone();
        self.with(move |c| {
            let row = c
                .query_row(
                    "SELECT id, summary, turns_since_summary, provider_state, taint FROM sessions
                     WHERE agent_id = ?1 AND session_id = ?2",
                    params![key.agent_id, key.session_id],
                    |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, Option<String>>(1)?,
                            r.get::<_, i64>(2)?,
                            r.get::<_, Option<String>>(3)?,
                            r.get::<_, Option<String>>(4)?,
                        ))
                    },
                )
                .optional()?;
            let Some((pk, summary, turns, state, taint)) = row else {
                return Ok(None);
            };
            let turns_text: Vec<String> = c
                .prepare_cached("SELECT messages FROM turns WHERE session = ?1 ORDER BY turn")?
                .query_map([pk], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<_>>()?;
            let stored = StoredSession {
                summary,
                turns_since_summary: turns,
                provider_state: state,
                taint,
                version: None,
            };
            Ok(Some(stored.into_state(turns_text)))
        })
        .await
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
        let id = turn_id.to_owned();
        let json: Option<String> = self
            .with(move |c| {
                c.prepare_cached("SELECT messages FROM turns WHERE turn_id = ?1")?
                    .query_row([id], |r| r.get(0))
                    .optional()
            })
            .await?;
        json.map(|j| {
            serde_json::from_str(&j)
                .map_err(|e| StoreError::Corrupt(format!("stored turn {turn_id}: {e}")))
        })
        .transpose()
    }

    async fn compact(
        &self,
        key: &SessionKey,
        summary: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        let key = key.clone();
        let summary = summary.to_owned();
        self.write(move |tx| {
            if let Some(pk) = session_pk(tx, &key)? {
                // Keep the newest `keep` messages: whole turns from the end, the oldest kept
                // turn trimmed when `keep` falls inside it, everything older deleted.
                let rows: Vec<(i64, i64)> = tx
                    .prepare_cached(
                        "SELECT turn, message_count FROM turns WHERE session = ?1 ORDER BY turn DESC",
                    )?
                    .query_map([pk], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                let mut kept = 0i64;
                let mut boundary: Option<i64> = None;
                for (turn, count) in rows {
                    if kept + count <= keep as i64 {
                        kept += count;
                        continue;
                    }
                    let take = keep as i64 - kept;
                    if take > 0 {
                        let text: String = tx.query_row(
                            "SELECT messages FROM turns WHERE session = ?1 AND turn = ?2",
                            params![pk, turn],
                            |r| r.get(0),
                        )?;
                        let mut msgs: Vec<ChatMessage> = serde_json::from_str(&text)
                            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
                        let tail = msgs.split_off(msgs.len() - take as usize);
                        let json = serde_json::to_string(&tail)
                            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
                        tx.execute(
                            "UPDATE turns SET messages = ?3, message_count = ?4 WHERE session = ?1 AND turn = ?2",
                            params![pk, turn, json, take],
                        )?;
                        boundary = Some(turn);
                    } else {
                        boundary = Some(turn + 1);
                    }
                    break;
                }
                if let Some(b) = boundary {
                    tx.execute(
                        "DELETE FROM turns WHERE session = ?1 AND turn < ?2",
                        params![pk, b],
                    )?;
                }
                tx.execute(
                    "UPDATE sessions SET summary = ?2, turns_since_summary = 0, updated_at = ?3 WHERE id = ?1",
                    params![pk, summary, now()],
                )?;
            }
            Ok(0)
        })
        .await
        .map(|_| ())
    }

    async fn reset(&self, key: &SessionKey) -> Result<(), StoreError> {
        let key = key.clone();
        self.write(move |c| {
            c.execute(
                "DELETE FROM sessions WHERE agent_id = ?1 AND session_id = ?2",
                params![key.agent_id, key.session_id],
            )
        })
        .await
        .map(|_| ())
    }

    async fn prune(&self, idle: Duration) -> Result<usize, StoreError> {
        let cutoff = now() - idle.as_secs() as i64;
        self.write(move |c| c.execute("DELETE FROM sessions WHERE updated_at < ?1", [cutoff]))
            .await
    }

    async fn log_tools(&self, entries: &[ToolLogEntry]) -> Result<(), StoreError> {
        let entries = entries.to_vec();
        self.write(move |tx| insert_tool_log(tx, &entries, now()))
            .await
            .map(|_| ())
    }

    async fn set_taint(
        &self,
        key: &SessionKey,
        sources: &[strata_engine::taint::TaintSource],
    ) -> Result<(), StoreError> {
        let key = key.clone();
        let json = serde_json::to_string(sources).map_err(StoreError::failed)?;
        self.write(move |c| {
            c.execute(
                "UPDATE sessions SET taint = ?3 WHERE agent_id = ?1 AND session_id = ?2",
                params![key.agent_id, key.session_id, json],
            )
        })
        .await
        .map(|_| ())
    }

    async fn count(&self) -> Result<u64, StoreError> {
        self.with(|c| c.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0)))
            .await
            .map(|n| n.max(0) as u64)
    }

    async fn list_sessions(
        &self,
        query: &str,
        limit: usize,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        let pattern = strata_engine::session::like_pattern(query);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with(move |c| {
            c.prepare_cached(
                "SELECT agent_id, session_id, turn_count, created_at, updated_at FROM sessions
                 WHERE agent_id LIKE ?1 ESCAPE '\\' OR session_id LIKE ?1 ESCAPE '\\'
                 ORDER BY updated_at DESC, id DESC LIMIT ?2",
            )?
            .query_map(params![pattern, limit], |r| {
                Ok(SessionInfo {
                    agent_id: r.get(0)?,
                    session_id: r.get(1)?,
                    turns: r.get::<_, i64>(2)?.max(0) as u64,
                    created_at: r.get(3)?,
                    updated_at: r.get(4)?,
                })
            })?
            .collect()
        })
        .await
    }

    async fn transcript(
        &self,
        key: &SessionKey,
    ) -> Result<Option<(Option<String>, Vec<StoredTurn>)>, StoreError> {
        let key = key.clone();
        let found = self
            .with(move |c| {
                let row = c
                    .query_row(
                        "SELECT id, summary FROM sessions WHERE agent_id = ?1 AND session_id = ?2",
                        params![key.agent_id, key.session_id],
                        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?)),
                    )
                    .optional()?;
                let Some((pk, summary)) = row else {
                    return Ok(None);
                };
                let turns: Vec<(i64, String)> = c
                    .prepare_cached(
                        "SELECT created_at, messages FROM turns WHERE session = ?1 ORDER BY turn",
                    )?
                    .query_map([pk], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(Some((summary, turns)))
            })
            .await?;
        Ok(found.map(|(summary, turns)| (summary, strata_engine::session::read_turns(turns))))
    }
}

#[async_trait]
impl StateStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    async fn flush(&self) -> Result<(), StoreError> {
        SqliteStore::flush(self).await
    }

    async fn health(&self) -> StoreHealth {
        match self.flush().await {
            Ok(()) => StoreHealth::Ok,
            Err(e) => StoreHealth::Degraded {
                reason: e.to_string(),
            },
        }
    }

    async fn status(&self) -> Result<StoreStatus, StoreError> {
        let rows = self
            .with(|c| {
                TABLES
                    .iter()
                    .map(|t| {
                        // Table names come from the constant above, never from input.
                        c.query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| {
                            r.get::<_, i64>(0)
                        })
                        .map(|n| ((*t).to_owned(), n.max(0) as u64))
                    })
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        Ok(StoreStatus {
            backend: "sqlite",
            location: self.location(),
            schema_version: self.schema_version()?,
            known_version: MIGRATIONS.len() as i64,
            rows,
            pool: None,
        })
    }
}

/// A SQLite failure as a [`StoreError`] of the right kind: busy or locked is `Unavailable` (it
/// may work in a moment), a constraint is `Conflict`, a file that is not a database is
/// `Corrupt`, anything else `Failed`; the message is SQLite's.
pub(crate) fn sqlite_error(e: &rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DatabaseBusy | C::DatabaseLocked) => StoreError::unavailable(e),
        Some(C::ConstraintViolation) => StoreError::Conflict(e.to_string()),
        Some(C::NotADatabase | C::DatabaseCorrupt) => StoreError::corrupt(e),
        _ => StoreError::failed(e),
    }
}

#[cfg(test)]
mod error_kinds {
    use super::*;

    /// SQLite's failures become store errors of the kind a caller can act on.
    #[test]
    fn sqlite_failures_map_to_their_kind() {
        let c = rusqlite::Connection::open_in_memory().expect("open");
        c.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY); INSERT INTO t VALUES ('a');")
            .expect("schema");
        let dup = c
            .execute("INSERT INTO t VALUES ('a')", [])
            .expect_err("a taken key");
        assert!(
            matches!(sqlite_error(&dup), StoreError::Conflict(_)),
            "{dup}"
        );
        let bad = c
            .execute("INSERT INTO nowhere VALUES (1)", [])
            .expect_err("no such table");
        let e = sqlite_error(&bad);
        assert!(matches!(e, StoreError::Failed(_)), "{e:?}");
        assert_eq!(e.to_string(), format!("store: {bad}"));
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert!(matches!(sqlite_error(&busy), StoreError::Unavailable(_)));
    }
}
