//! # strata-store
//!
//! SQLite persistence (rusqlite, SQLite bundled — FTS5 included for the memory issue). One
//! database file in the data dir, WAL mode, foreign keys on, a busy timeout, file mode 0600.
//! Calls run on tokio's blocking pool, never on the async worker threads. Schema versions are
//! applied at open (`PRAGMA user_version`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use strata_engine::llm::{ChatMessage, Role, ToolCall};
use strata_engine::session::{SessionKey, SessionState, SessionStore, StoreError, ToolLogEntry};

/// Schema migrations, applied in order; the index + 1 is the version.
const MIGRATIONS: &[&str] = &[
    // 1: sessions, messages, tool log.
    "CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        summary TEXT,
        turns_since_summary INTEGER NOT NULL DEFAULT 0,
        provider_state TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (agent_id, session_id)
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        tool_calls TEXT,
        tool_call_id TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX messages_by_session ON messages(session, id);
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

/// The SQLite store.
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn role_str(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn parse_role(s: &str) -> Role {
    match s {
        "system" => Role::System,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        _ => Role::User,
    }
}

impl SqliteStore {
    /// Opens (creating) the database at `path` and applies pending migrations.
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let sql = |source| OpenError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| OpenError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(sql)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
                |source| OpenError::Io {
                    path: path.to_path_buf(),
                    source,
                },
            )?;
        }
        conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
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
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version in the file.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| StoreError(e.to_string()))
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut c)
        })
        .await
        .map_err(|e| StoreError(format!("store task failed: {e}")))?
        .map_err(|e| StoreError(e.to_string()))
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
        // One transaction per step: a failed step leaves the previous version intact.
        let batch = format!("BEGIN IMMEDIATE; {m}; PRAGMA user_version = {v}; COMMIT;");
        if let Err(e) = conn.execute_batch(&batch) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(MigrateError::Sql(e));
        }
        tracing::info!(version = v, "database migrated");
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

#[async_trait]
impl SessionStore for SqliteStore {
    async fn load(&self, key: &SessionKey) -> Result<Option<SessionState>, StoreError> {
        let key = key.clone();
        self.with(move |c| {
            let row = c
                .query_row(
                    "SELECT id, summary, turns_since_summary, provider_state FROM sessions
                     WHERE agent_id = ?1 AND session_id = ?2",
                    params![key.agent_id, key.session_id],
                    |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, Option<String>>(1)?,
                            r.get::<_, i64>(2)?,
                            r.get::<_, Option<String>>(3)?,
                        ))
                    },
                )
                .optional()?;
            let Some((pk, summary, turns, state)) = row else {
                return Ok(None);
            };
            let mut stmt = c.prepare_cached(
                "SELECT role, content, tool_calls, tool_call_id FROM messages
                 WHERE session = ?1 ORDER BY id",
            )?;
            let messages = stmt
                .query_map([pk], |r| {
                    let calls: Option<String> = r.get(2)?;
                    Ok(ChatMessage {
                        role: parse_role(&r.get::<_, String>(0)?),
                        content: r.get(1)?,
                        tool_calls: calls
                            .and_then(|c| serde_json::from_str::<Vec<ToolCall>>(&c).ok())
                            .unwrap_or_default(),
                        tool_call_id: r.get(3)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(Some(SessionState {
                summary,
                messages,
                turns_since_summary: u32::try_from(turns).unwrap_or(u32::MAX),
                provider_state: state.and_then(|s| serde_json::from_str::<Value>(&s).ok()),
            }))
        })
        .await
    }

    async fn append_turn(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
    ) -> Result<(), StoreError> {
        let key = key.clone();
        let messages = messages.to_vec();
        let state = provider_state.map(Value::to_string);
        self.with(move |c| {
            let tx = c.transaction()?;
            let t = now();
            tx.execute(
                "INSERT INTO sessions (agent_id, session_id, created_at, updated_at, turns_since_summary, provider_state)
                 VALUES (?1, ?2, ?3, ?3, 1, ?4)
                 ON CONFLICT (agent_id, session_id) DO UPDATE SET
                    updated_at = excluded.updated_at,
                    turns_since_summary = turns_since_summary + 1,
                    provider_state = excluded.provider_state",
                params![key.agent_id, key.session_id, t, state],
            )?;
            let pk = session_pk(&tx, &key)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            {
                let mut ins = tx.prepare_cached(
                    "INSERT INTO messages (session, role, content, tool_calls, tool_call_id, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                for m in &messages {
                    let calls = (!m.tool_calls.is_empty())
                        .then(|| serde_json::to_string(&m.tool_calls).unwrap_or_default());
                    ins.execute(params![pk, role_str(m.role), m.content, calls, m.tool_call_id, t])?;
                }
            }
            tx.commit()
        })
        .await
    }

    async fn compact(
        &self,
        key: &SessionKey,
        summary: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        let key = key.clone();
        let summary = summary.to_owned();
        self.with(move |c| {
            let tx = c.transaction()?;
            if let Some(pk) = session_pk(&tx, &key)? {
                // Delete everything but the newest `keep` messages.
                tx.execute(
                    "DELETE FROM messages WHERE session = ?1 AND id NOT IN
                       (SELECT id FROM messages WHERE session = ?1 ORDER BY id DESC LIMIT ?2)",
                    params![pk, keep as i64],
                )?;
                tx.execute(
                    "UPDATE sessions SET summary = ?2, turns_since_summary = 0, updated_at = ?3 WHERE id = ?1",
                    params![pk, summary, now()],
                )?;
            }
            tx.commit()
        })
        .await
    }

    async fn reset(&self, key: &SessionKey) -> Result<(), StoreError> {
        let key = key.clone();
        self.with(move |c| {
            c.execute(
                "DELETE FROM sessions WHERE agent_id = ?1 AND session_id = ?2",
                params![key.agent_id, key.session_id],
            )
            .map(|_| ())
        })
        .await
    }

    async fn prune(&self, idle: Duration) -> Result<usize, StoreError> {
        let cutoff = now() - idle.as_secs() as i64;
        self.with(move |c| c.execute("DELETE FROM sessions WHERE updated_at < ?1", [cutoff]))
            .await
    }

    async fn log_tools(&self, entries: &[ToolLogEntry]) -> Result<(), StoreError> {
        let entries = entries.to_vec();
        self.with(move |c| {
            let tx = c.transaction()?;
            {
                let mut ins = tx.prepare_cached(
                    "INSERT INTO tool_log (ts, agent_id, session_id, tool, status, elapsed_ms, request_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?;
                let t = now();
                for e in &entries {
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
            }
            tx.commit()
        })
        .await
    }

    async fn count(&self) -> Result<u64, StoreError> {
        self.with(|c| c.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0)))
            .await
            .map(|n| n.max(0) as u64)
    }
}
