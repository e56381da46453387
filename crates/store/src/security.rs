//! Rate-limit events and approval requests in SQLite.

use std::sync::atomic::{AtomicU64, Ordering};
use strata_engine::session::StoreError;

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params};
use strata_runtime::approval::{ApprovalRecord, ApprovalStatus, ApprovalStore};
use strata_runtime::ratelimit::{RateCounts, RateEvent, RateLog, WINDOWS};

use crate::SqliteStore;

/// Rate events older than this are deleted (the longest window is a day).
const KEEP_MS: i64 = 24 * 60 * 60 * 1000;

static APPENDS: AtomicU64 = AtomicU64::new(0);

#[async_trait]
impl RateLog for SqliteStore {
    async fn load_since(&self, since_ms: i64) -> Result<Vec<RateEvent>, StoreError> {
        self.with(move |c| {
            c.prepare_cached("SELECT key, tool, ts_ms FROM rate_events WHERE ts_ms > ?1")?
                .query_map([since_ms], |r| {
                    Ok(RateEvent {
                        key: r.get(0)?,
                        tool: r.get(1)?,
                        ts_ms: r.get(2)?,
                    })
                })?
                .collect()
        })
        .await
    }

    /// Counts and (when the call fits `caps`) inserts in one write (SQLite's writer lock
    /// orders it against every other process). The limiter does not use it for SQLite — a
    /// local log counts in memory — but the store answers it the same way PostgreSQL does.
    async fn record(&self, e: RateEvent, caps: [Option<u32>; 3]) -> Result<RateCounts, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.write(move |c| {
            let mut seen = RateCounts::default();
            let mut st = c.prepare_cached(
                "SELECT COUNT(*), MIN(ts_ms) FROM rate_events WHERE key = ?1 AND tool = ?2 \
                 AND ts_ms > ?3",
            )?;
            for (i, (_, span)) in WINDOWS.iter().enumerate() {
                let (k, oldest): (i64, Option<i64>) = st
                    .query_row(params![e.key, e.tool, e.ts_ms - span], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?;
                seen.counts[i] = u32::try_from(k + 1).unwrap_or(u32::MAX);
                seen.oldest[i] = oldest;
            }
            let fits = seen.fits(caps);
            if fits {
                c.prepare_cached("INSERT INTO rate_events (key, tool, ts_ms) VALUES (?1, ?2, ?3)")?
                    .execute(params![e.key, e.tool, e.ts_ms])?;
            }
            let _ = tx.send(seen);
            Ok(usize::from(fits))
        })
        .await?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the database writer has stopped".into()))
    }

    fn append(&self, e: RateEvent) {
        // Every 1024th event also drops what no window can see any more.
        let prune = APPENDS.fetch_add(1, Ordering::Relaxed).is_multiple_of(1024);
        self.write_detached(move |c| {
            let n = c
                .prepare_cached("INSERT INTO rate_events (key, tool, ts_ms) VALUES (?1, ?2, ?3)")?
                .execute(params![e.key, e.tool, e.ts_ms])?;
            if prune {
                c.prepare_cached("DELETE FROM rate_events WHERE ts_ms <= ?1")?
                    .execute([e.ts_ms - KEEP_MS])?;
            }
            Ok(n)
        });
    }
}

pub(crate) const COLS: &str = "id, agent_id, tool, principal, args, description, status, approver, reason, \
                    created_at, decided_at";

pub(crate) fn approval(r: &Row<'_>) -> rusqlite::Result<ApprovalRecord> {
    let args: String = r.get(4)?;
    let status: String = r.get(6)?;
    Ok(ApprovalRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        tool: r.get(2)?,
        principal: r.get(3)?,
        args: serde_json::from_str(&args).unwrap_or(serde_json::Value::Null),
        description: r.get(5)?,
        // An unknown status (a newer binary wrote it) reads as timeout: never as approved.
        status: ApprovalStatus::parse(&status).unwrap_or(ApprovalStatus::Timeout),
        approver: r.get(7)?,
        reason: r.get(8)?,
        created_at: r.get(9)?,
        decided_at: r.get(10)?,
    })
}

#[async_trait]
impl ApprovalStore for SqliteStore {
    async fn insert(&self, a: &ApprovalRecord) -> Result<(), StoreError> {
        let a = a.clone();
        self.write(move |c| {
            c.execute(
                &format!("INSERT INTO approvals ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"),
                params![
                    a.id,
                    a.agent_id,
                    a.tool,
                    a.principal,
                    a.args.to_string(),
                    a.description,
                    a.status.as_str(),
                    a.approver,
                    a.reason,
                    a.created_at,
                    a.decided_at
                ],
            )
        })
        .await
        .map(|_| ())
    }

    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let id = id.to_owned();
        self.with(move |c| {
            c.query_row(
                &format!("SELECT {COLS} FROM approvals WHERE id = ?1"),
                [id],
                approval,
            )
            .optional()
        })
        .await
    }

    async fn list(
        &self,
        status: Option<ApprovalStatus>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.with(move |c| {
            let limit = limit as i64;
            match status {
                Some(s) => c
                    .prepare(&format!(
                        "SELECT {COLS} FROM approvals WHERE status = ?1 \
                         ORDER BY created_at DESC, rowid DESC LIMIT ?2"
                    ))?
                    .query_map(params![s.as_str(), limit], approval)?
                    .collect(),
                None => c
                    .prepare(&format!(
                        "SELECT {COLS} FROM approvals ORDER BY created_at DESC, rowid DESC LIMIT ?1"
                    ))?
                    .query_map([limit], approval)?
                    .collect(),
            }
        })
        .await
    }

    async fn decide(
        &self,
        id: &str,
        status: ApprovalStatus,
        approver: Option<&str>,
        reason: Option<&str>,
        at: i64,
    ) -> Result<bool, StoreError> {
        let (id, approver, reason) = (
            id.to_owned(),
            approver.map(str::to_owned),
            reason.map(str::to_owned),
        );
        self.write(move |c| {
            c.execute(
                "UPDATE approvals SET status = ?2, approver = ?3, reason = ?4, decided_at = ?5 \
                 WHERE id = ?1 AND status = 'pending'",
                params![id, status.as_str(), approver, reason, at],
            )
        })
        .await
        .map(|n| n == 1)
    }

    async fn expire(&self, created_before: i64, at: i64) -> Result<usize, StoreError> {
        self.write(move |c| {
            c.execute(
                "UPDATE approvals SET status = 'timeout', reason = 'timeout', decided_at = ?2 \
                 WHERE status = 'pending' AND created_at <= ?1",
                params![created_before, at],
            )
        })
        .await
    }
}
