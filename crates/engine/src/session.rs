//! Conversation sessions: what an agent remembers of one channel, and where it is kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::llm::{ChatMessage, Role};

/// One conversation: an agent in a session (by default the channel).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    /// Agent id.
    pub agent_id: String,
    /// Session id (the channel id unless the caller picks one).
    pub session_id: String,
}

impl SessionKey {
    /// A key.
    pub fn new(agent_id: impl Into<String>, session_id: impl Into<String>) -> Self {
        SessionKey {
            agent_id: agent_id.into(),
            session_id: session_id.into(),
        }
    }
}

/// A session's stored state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionState {
    /// Summary of what came before `messages`, if compacted.
    pub summary: Option<String>,
    /// Messages since the summary, oldest first.
    pub messages: Vec<ChatMessage>,
    /// Turns since the last compaction.
    pub turns_since_summary: u32,
    /// Provider-specific state (e.g. a CLI session id).
    pub provider_state: Option<Value>,
    /// What has tainted this session's turns so far, kept by the store
    /// ([`SessionStore::set_taint`]) so a restart or another instance still knows — a
    /// message from an untrusted sender included, which the history alone does not show.
    pub taint: Vec<crate::taint::TaintSource>,
    /// The store's write counter for the session when it was loaded, where other processes
    /// may write it too ([`SessionStore::version`]); `None` where this process is its only
    /// writer.
    pub version: Option<i64>,
}

/// A session's columns as a store keeps them: JSON text, one JSON array of messages per turn.
#[derive(Debug, Clone, Default)]
pub struct StoredSession {
    /// Summary of the compacted part.
    pub summary: Option<String>,
    /// Turns since the summary.
    pub turns_since_summary: i64,
    /// Provider state, JSON.
    pub provider_state: Option<String>,
    /// Taint sources, a JSON list.
    pub taint: Option<String>,
    /// The store's write counter, where it keeps one.
    pub version: Option<i64>,
}

impl StoredSession {
    /// The state, its turns' messages in order (an unreadable turn is skipped and logged,
    /// unreadable provider state or taint read as none).
    pub fn into_state(self, turns: impl IntoIterator<Item = String>) -> SessionState {
        let mut messages: Vec<ChatMessage> = Vec::new();
        for text in turns {
            match serde_json::from_str::<Vec<ChatMessage>>(&text) {
                Ok(mut m) => messages.append(&mut m),
                Err(e) => tracing::error!(error = %e, "unreadable turn skipped"),
            }
        }
        SessionState {
            summary: self.summary,
            messages,
            turns_since_summary: u32::try_from(self.turns_since_summary).unwrap_or(u32::MAX),
            provider_state: self
                .provider_state
                .and_then(|s| serde_json::from_str::<Value>(&s).ok()),
            taint: self
                .taint
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default(),
            version: self.version,
        }
    }
}

/// A session as a listing shows it (`GET /api/sessions`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionInfo {
    /// Agent id.
    pub agent_id: String,
    /// Session id.
    pub session_id: String,
    /// Turns stored since it began (compaction does not lower it).
    pub turns: u64,
    /// When it began (Unix seconds).
    pub created_at: i64,
    /// When its last turn was stored (Unix seconds).
    pub updated_at: i64,
}

/// One stored turn's messages and when it was stored (a transcript).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoredTurn {
    /// When it was stored (Unix seconds; 0 where the store keeps no time).
    pub at: i64,
    /// Its messages, in order.
    pub messages: Vec<ChatMessage>,
}

/// Keeps sessions whose agent or session id contains `query` (all for an empty one), most
/// recently active first, at most `limit` — how every store's listing is meant to answer.
/// (ASCII letters match either case, as SQL's `LIKE`/`ILIKE` do.)
pub fn matches_query(info: &SessionInfo, query: &str) -> bool {
    let q = query.to_ascii_lowercase();
    q.is_empty()
        || info.agent_id.to_ascii_lowercase().contains(&q)
        || info.session_id.to_ascii_lowercase().contains(&q)
}

/// A `LIKE` pattern matching text that contains `query` literally, for stores that list with SQL (`%`, `_` and `\` escaped).
pub fn like_pattern(query: &str) -> String {
    let mut p = String::with_capacity(query.len() + 2);
    p.push('%');
    for ch in query.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(ch);
    }
    p.push('%');
    p
}

/// Stored turns (when, the JSON array of its messages) as a transcript; an unreadable turn
/// is shown as a note rather than dropped silently.
pub fn read_turns(turns: impl IntoIterator<Item = (i64, String)>) -> Vec<StoredTurn> {
    turns
        .into_iter()
        .map(|(at, text)| StoredTurn {
            at,
            messages: serde_json::from_str(&text).unwrap_or_else(|e| {
                vec![ChatMessage::text(
                    Role::System,
                    format!("(this turn could not be read: {e})"),
                )]
            }),
        })
        .collect()
}

/// One tool call made during a turn, for the session's tool log.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLogEntry {
    /// The session.
    pub key: SessionKey,
    /// Tool name.
    pub tool: String,
    /// Outcome status.
    pub status: String,
    /// Milliseconds.
    pub elapsed_ms: f64,
    /// Request id (joins the audit log).
    pub request_id: String,
}

/// A store's failure (sessions, approvals, rate-limit counters, schedules, goals): the one
/// error type the store traits share, so a backend (SQLite, PostgreSQL) maps its own errors
/// once. The kind says what a caller can do about it; the message, for a person, says what
/// happened (`store: <message>` is how it shows).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The backend cannot answer now — a lost or refused connection, a stopped writer, no
    /// answer in time: the same request may work later.
    #[error("store: {0}")]
    Unavailable(String),
    /// Another writer changed what this one read (a version or a unique key taken).
    #[error("store: {0}")]
    Conflict(String),
    /// What was asked for is not there.
    #[error("store: {0}")]
    NotFound(String),
    /// What is stored does not read back (a row that does not parse, a newer schema).
    #[error("store: {0}")]
    Corrupt(String),
    /// An operation this store does not offer.
    #[error("store: {0}")]
    Unsupported(String),
    /// Any other failure of the backend (a statement refused, a value it cannot take).
    #[error("store: {0}")]
    Failed(String),
}

impl StoreError {
    /// [`StoreError::Unavailable`] from anything printable.
    pub fn unavailable(m: impl std::fmt::Display) -> Self {
        StoreError::Unavailable(m.to_string())
    }
    /// [`StoreError::Corrupt`] from anything printable.
    pub fn corrupt(m: impl std::fmt::Display) -> Self {
        StoreError::Corrupt(m.to_string())
    }
    /// [`StoreError::Failed`] from anything printable.
    pub fn failed(m: impl std::fmt::Display) -> Self {
        StoreError::Failed(m.to_string())
    }
    /// The message, without the `store:` prefix.
    pub fn message(&self) -> &str {
        match self {
            StoreError::Unavailable(m)
            | StoreError::Conflict(m)
            | StoreError::NotFound(m)
            | StoreError::Corrupt(m)
            | StoreError::Unsupported(m)
            | StoreError::Failed(m) => m,
        }
    }
}

/// Where sessions live. `strata-store` keeps them in SQLite; [`InMemoryStore`] is for tests
/// and embedders that do not need restarts.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The session's state, `None` if it never existed.
    async fn load(&self, key: &SessionKey) -> Result<Option<SessionState>, StoreError>;
    /// Appends a turn's messages and sets the provider state (creating the session).
    async fn append_turn(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
    ) -> Result<(), StoreError>;
    /// Replaces everything before the last `keep` messages with `summary`.
    async fn compact(&self, key: &SessionKey, summary: &str, keep: usize)
    -> Result<(), StoreError>;
    /// Forgets a session entirely.
    async fn reset(&self, key: &SessionKey) -> Result<(), StoreError>;
    /// Deletes sessions idle for longer than `idle`; returns how many.
    async fn prune(&self, idle: Duration) -> Result<usize, StoreError>;
    /// Records tool calls made in a turn.
    async fn log_tools(&self, entries: &[ToolLogEntry]) -> Result<(), StoreError>;
    /// Stores a whole turn: its messages, provider state and tool calls. Stores that can do it
    /// in one write override this.
    async fn record_turn(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
        tools: &[ToolLogEntry],
    ) -> Result<(), StoreError> {
        self.append_turn(key, messages, provider_state).await?;
        if !tools.is_empty() {
            self.log_tools(tools).await?;
        }
        Ok(())
    }
    /// [`record_turn`](SessionStore::record_turn) for a turn with a stable id: `Ok(false)`,
    /// storing nothing, when a turn with that id is stored already (a redelivered message).
    /// Stores that keep no ids store it every time.
    async fn record_turn_once(
        &self,
        key: &SessionKey,
        turn_id: &str,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
        tools: &[ToolLogEntry],
    ) -> Result<bool, StoreError> {
        let _ = turn_id;
        self.record_turn(key, messages, provider_state, tools)
            .await
            .map(|()| true)
    }
    /// The messages of the stored turn with this id, if there is one (`None` also from stores
    /// that keep no ids).
    async fn stored_turn(&self, turn_id: &str) -> Result<Option<Vec<ChatMessage>>, StoreError> {
        let _ = turn_id;
        Ok(None)
    }
    /// Number of sessions.
    async fn count(&self) -> Result<u64, StoreError>;
    /// Sessions whose agent or session id contains `query` (all for an empty one), most
    /// recently active first, at most `limit`. Stores that cannot list answer an error.
    async fn list_sessions(
        &self,
        query: &str,
        limit: usize,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        let _ = (query, limit);
        Err(StoreError::Unsupported(
            "this store cannot list its sessions".into(),
        ))
    }
    /// A session's transcript: its turns since the last compaction with when each was
    /// stored, and the summary before them; `None` if it does not exist. The default reads
    /// the state, as one turn without a time.
    async fn transcript(
        &self,
        key: &SessionKey,
    ) -> Result<Option<(Option<String>, Vec<StoredTurn>)>, StoreError> {
        Ok(self.load(key).await?.map(|s| {
            (
                s.summary,
                vec![StoredTurn {
                    at: 0,
                    messages: s.messages,
                }],
            )
        }))
    }
    /// The session's write counter, where other processes may write the same session (a
    /// shared database; every `record_turn` and `compact` adds one): the manager compares it
    /// with the one it loaded and reloads a session another instance changed. `None` (the
    /// default): this process is the session's only writer, nothing to compare.
    async fn version(&self, key: &SessionKey) -> Result<Option<i64>, StoreError> {
        let _ = key;
        Ok(None)
    }
    /// Whether [`version`](Self::version) answers `Some` (a store instances share): a
    /// session that `load` did not find then starts at version 0 without asking.
    fn versioned(&self) -> bool {
        false
    }
    /// Keeps what has tainted the session (the whole list; not a write that changes the
    /// version). Stores that keep nothing ignore it.
    async fn set_taint(
        &self,
        key: &SessionKey,
        sources: &[crate::taint::TaintSource],
    ) -> Result<(), StoreError> {
        let _ = (key, sources);
        Ok(())
    }
}

/// Sessions in a map: lost on restart.
#[derive(Default)]
pub struct InMemoryStore {
    sessions: Mutex<HashMap<SessionKey, (SessionState, SystemTime)>>,
    tools: Mutex<Vec<ToolLogEntry>>,
}

impl InMemoryStore {
    /// Tool log entries recorded so far.
    pub fn tool_log(&self) -> Vec<ToolLogEntry> {
        self.tools.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl SessionStore for InMemoryStore {
    async fn load(&self, key: &SessionKey) -> Result<Option<SessionState>, StoreError> {
        let map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map.get(key).map(|(s, _)| s.clone()))
    }

    async fn append_turn(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        provider_state: Option<&Value>,
    ) -> Result<(), StoreError> {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map
            .entry(key.clone())
            .or_insert_with(|| (SessionState::default(), SystemTime::now()));
        entry.0.messages.extend_from_slice(messages);
        entry.0.turns_since_summary += 1;
        entry.0.provider_state = provider_state.cloned();
        entry.1 = SystemTime::now();
        Ok(())
    }

    async fn compact(
        &self,
        key: &SessionKey,
        summary: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, _)) = map.get_mut(key) {
            let cut = s.messages.len().saturating_sub(keep);
            s.messages.drain(..cut);
            s.summary = Some(summary.to_owned());
            s.turns_since_summary = 0;
        }
        Ok(())
    }

    async fn reset(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        Ok(())
    }

    async fn prune(&self, idle: Duration) -> Result<usize, StoreError> {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let before = map.len();
        let now = SystemTime::now();
        map.retain(|_, (_, t)| now.duration_since(*t).unwrap_or_default() <= idle);
        Ok(before - map.len())
    }

    async fn log_tools(&self, entries: &[ToolLogEntry]) -> Result<(), StoreError> {
        self.tools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(entries);
        Ok(())
    }

    async fn set_taint(
        &self,
        key: &SessionKey,
        sources: &[crate::taint::TaintSource],
    ) -> Result<(), StoreError> {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, _)) = map.get_mut(key) {
            s.taint = sources.to_vec();
        }
        Ok(())
    }

    async fn count(&self) -> Result<u64, StoreError> {
        Ok(self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len() as u64)
    }

    async fn list_sessions(
        &self,
        query: &str,
        limit: usize,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        let secs = |t: &SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        };
        let map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<SessionInfo> = map
            .iter()
            .map(|(k, (s, t))| SessionInfo {
                agent_id: k.agent_id.clone(),
                session_id: k.session_id.clone(),
                turns: u64::from(s.turns_since_summary),
                created_at: secs(t),
                updated_at: secs(t),
            })
            .filter(|i| matches_query(i, query))
            .collect();
        out.sort_by_key(|i| std::cmp::Reverse(i.updated_at));
        out.truncate(limit);
        Ok(out)
    }
}

/// Where to cut a history so that the last `turns` turns survive whole: the index of the
/// `turns`-th user message from the end (0 when there are fewer). Never splits a tool call
/// from its result.
pub fn turn_boundary(messages: &[ChatMessage], turns: usize) -> usize {
    if turns == 0 {
        return messages.len();
    }
    let mut seen = 0;
    for (i, m) in messages.iter().enumerate().rev() {
        if m.role == Role::User {
            seen += 1;
            if seen == turns {
                return i;
            }
        }
    }
    0
}
