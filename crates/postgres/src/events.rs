//! The cluster's audit records in one place (`cluster_events`): each member ships the lines
//! its audit log gains, and `/api/events` or `strata events` on any member reads them all.
//! The hash chains stay in the members' own files (`strata audit verify` checks each).

use std::sync::Arc;

use serde_json::Value;
use strata_engine::session::StoreError;

use crate::db::Db;

/// The events' table.
#[derive(Clone)]
pub struct ClusterEvents {
    db: Arc<Db>,
}

impl ClusterEvents {
    /// Over `db` (connected and migrated).
    pub fn new(db: Arc<Db>) -> Self {
        ClusterEvents { db }
    }

    /// Stores `instance`'s audit lines (JSON objects with a `ts`; other lines are skipped
    /// and counted in the result's second place). Returns (stored, skipped).
    pub async fn ship(&self, instance: &str, lines: &str) -> Result<(usize, usize), StoreError> {
        let (mut ts, mut records, mut skipped) = (Vec::new(), Vec::new(), 0);
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Value>(line) {
                Ok(v) if v["ts"].is_string() => {
                    ts.push(v["ts"].as_str().unwrap_or_default().to_owned());
                    records.push(line.to_owned());
                }
                _ => skipped += 1,
            }
        }
        if records.is_empty() {
            return Ok((0, skipped));
        }
        let c = self.db.client().await?;
        c.execute(
            "INSERT INTO cluster_events (instance, ts, record) \
             SELECT $1, t, r FROM unnest($2::text[], $3::text[]) AS u (t, r)",
            &[&instance, &ts, &records],
        )
        .await
        .map_err(|e| self.db.fail(e))?;
        Ok((records.len(), skipped))
    }

    /// The newest `n` records of every member, oldest first, each with its `instance`; and
    /// the position of the newest, for [`after`](Self::after).
    pub async fn tail(&self, n: i64) -> Result<(Vec<Value>, i64), StoreError> {
        let c = self.db.client().await?;
        let rows = c
            .query(
                "SELECT seq, instance, record FROM (SELECT seq, instance, ts, record \
                 FROM cluster_events ORDER BY ts DESC, seq DESC LIMIT $1) x ORDER BY ts, seq",
                &[&n],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        let last = c
            .query_one("SELECT COALESCE(max(seq), 0) FROM cluster_events", &[])
            .await
            .map_err(|e| self.db.fail(e))?
            .get(0);
        Ok((rows.iter().filter_map(record).collect(), last))
    }

    /// The records stored after position `seq`, in the order stored (at most `n`), and the
    /// new position.
    pub async fn after(&self, seq: i64, n: i64) -> Result<(Vec<Value>, i64), StoreError> {
        let c = self.db.client().await?;
        let rows = c
            .query(
                "SELECT seq, instance, record FROM cluster_events WHERE seq > $1 \
                 ORDER BY seq LIMIT $2",
                &[&seq, &n],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        let last = rows.last().map_or(seq, |r| r.get(0));
        Ok((rows.iter().filter_map(record).collect(), last))
    }

    /// Deletes records older than `ts` (RFC 3339); returns how many.
    pub async fn prune(&self, ts: &str) -> Result<u64, StoreError> {
        let c = self.db.client().await?;
        c.execute("DELETE FROM cluster_events WHERE ts < $1", &[&ts])
            .await
            .map_err(|e| self.db.fail(e))
    }
}

fn record(r: &tokio_postgres::Row) -> Option<Value> {
    let instance: String = r.get(1);
    let mut v: Value = serde_json::from_str(r.get::<_, &str>(2)).ok()?;
    v.as_object_mut()?
        .insert("instance".into(), Value::String(instance));
    Some(v)
}
