//! The state a running Strata keeps — sessions and their tool log, approval requests and
//! rate-limit counters — behind one trait, so the code above it does not know which backend
//! it talks to (SQLite in `strata-store`, PostgreSQL in `strata-postgres`).

use async_trait::async_trait;
use serde::Serialize;

use crate::approval::ApprovalStore;
use crate::ratelimit::RateLog;
use strata_engine::session::{SessionStore, StoreError};

/// Whether the store answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum StoreHealth {
    /// It answered.
    Ok,
    /// It did not: calls that need it fail until it is back.
    Degraded {
        /// Why (never a password).
        reason: String,
    },
}

/// A connection pool's state, for `strata storage status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// Connections most held at once.
    pub max_size: usize,
    /// Connections open now.
    pub size: usize,
    /// Of those, idle.
    pub available: usize,
    /// Callers waiting for one.
    pub waiting: usize,
}

/// What `strata storage status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreStatus {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The file, or `host:port/database` and the schema (never a password).
    pub location: String,
    /// The schema version the database is at.
    pub schema_version: i64,
    /// The newest version this binary knows.
    pub known_version: i64,
    /// Rows per table, by table name.
    pub rows: Vec<(String, u64)>,
    /// The pool, where there is one.
    pub pool: Option<PoolStatus>,
}

/// Every store a running Strata needs, in one backend.
#[async_trait]
pub trait StateStore:
    SessionStore
    + ApprovalStore
    + RateLog
    + crate::schedule::ScheduleStore
    + crate::usage::UsageStore
    + crate::goal::GoalStore
    + crate::journal::JournalStore
{
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// Where it is, for logs (never a password).
    fn location(&self) -> String;
    /// Waits until every write queued so far is durable (before a short-lived process exits).
    async fn flush(&self) -> Result<(), StoreError>;
    /// Asks the database whether it answers now.
    async fn health(&self) -> StoreHealth;
    /// Schema version, row counts and pool.
    async fn status(&self) -> Result<StoreStatus, StoreError>;
}
