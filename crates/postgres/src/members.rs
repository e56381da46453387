//! The members of a cluster as the database knows them: one row per instance, refreshed by
//! its heartbeat; what `strata cluster status` and `GET /api/cluster` show.

use std::sync::Arc;

use serde::Serialize;
use strata_engine::session::StoreError;

use crate::db::Db;

/// One instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberRow {
    /// `cluster.instance_id`.
    pub id: String,
    /// Its control API (`http://host:port`), when it serves one.
    pub address: Option<String>,
    /// Its binary's version.
    pub version: String,
    /// When it started (Unix seconds).
    pub started_at: i64,
    /// Its last heartbeat (Unix seconds).
    pub heartbeat_at: i64,
    /// Turns running there.
    pub in_flight: i64,
    /// Turns it ran since it started.
    pub turns_run: i64,
    /// Redelivered turns it answered from the store.
    pub answered_from_store: i64,
    /// Turns it took after another instance had them.
    pub redelivered: i64,
    /// Messages waiting in the stream when it last looked.
    pub stream_depth: Option<i64>,
    /// Connector leases it holds (read from the leases' table; not written by a beat).
    pub leases: Vec<String>,
}

/// The members' table.
#[derive(Clone)]
pub struct Members {
    db: Arc<Db>,
}

impl Members {
    /// Over `db` (connected and migrated).
    pub fn new(db: Arc<Db>) -> Self {
        Members { db }
    }

    /// Writes `m`'s row (its heartbeat).
    pub async fn beat(&self, m: &MemberRow) -> Result<(), StoreError> {
        let c = self.db.client().await?;
        c.execute(
            "INSERT INTO cluster_members (id, address, version, started_at, heartbeat_at, \
             in_flight, turns_run, answered_from_store, redelivered, stream_depth, leases) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (id) DO UPDATE SET address = excluded.address, \
             version = excluded.version, started_at = excluded.started_at, \
             heartbeat_at = excluded.heartbeat_at, in_flight = excluded.in_flight, \
             turns_run = excluded.turns_run, answered_from_store = excluded.answered_from_store, \
             redelivered = excluded.redelivered, stream_depth = excluded.stream_depth, \
             leases = excluded.leases",
            &[
                &m.id,
                &m.address,
                &m.version,
                &m.started_at,
                &m.heartbeat_at,
                &m.in_flight,
                &m.turns_run,
                &m.answered_from_store,
                &m.redelivered,
                &m.stream_depth,
                &m.leases,
            ],
        )
        .await
        .map(|_| ())
        .map_err(|e| self.db.fail(e))
    }

    /// Removes `id`'s row (it stopped).
    pub async fn remove(&self, id: &str) -> Result<(), StoreError> {
        let c = self.db.client().await?;
        c.execute("DELETE FROM cluster_members WHERE id = $1", &[&id])
            .await
            .map(|_| ())
            .map_err(|e| self.db.fail(e))
    }

    /// Every row, by id.
    pub async fn list(&self) -> Result<Vec<MemberRow>, StoreError> {
        let c = self.db.client().await?;
        let rows = c
            .query(
                "SELECT id, address, version, started_at, heartbeat_at, in_flight, turns_run, \
                 answered_from_store, redelivered, stream_depth, \
                 ARRAY(SELECT l.name FROM connector_leases l WHERE l.holder = m.id \
                 AND l.expires_at > now() ORDER BY l.name) FROM cluster_members m ORDER BY id",
                &[],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        Ok(rows
            .iter()
            .map(|r| MemberRow {
                id: r.get(0),
                address: r.get(1),
                version: r.get(2),
                started_at: r.get(3),
                heartbeat_at: r.get(4),
                in_flight: r.get(5),
                turns_run: r.get(6),
                answered_from_store: r.get(7),
                redelivered: r.get(8),
                stream_depth: r.get(9),
                leases: r.get(10),
            })
            .collect())
    }
}
