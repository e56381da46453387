//! Connector leases in the database (`connector_leases`): one holder per name until its
//! lease runs out, measured by the database's clock, so the members' clocks need not agree.

use std::sync::Arc;
use std::time::Duration;

use strata_engine::async_trait;
use strata_engine::session::StoreError;
use strata_runtime::hub::{LeaseGrant, Leases};

use crate::db::Db;

/// The leases' table.
#[derive(Clone)]
pub struct PgLeases {
    db: Arc<Db>,
}

impl PgLeases {
    /// Over `db` (connected and migrated).
    pub fn new(db: Arc<Db>) -> Self {
        PgLeases { db }
    }

    /// Live leases: (name, holder, epoch), by name.
    pub async fn held(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let c = self.db.client().await?;
        let rows = c
            .query(
                "SELECT name, holder, epoch FROM connector_leases \
                 WHERE holder IS NOT NULL AND expires_at > now() ORDER BY name",
                &[],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }
}

#[async_trait]
impl Leases for PgLeases {
    async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        state: Option<&str>,
    ) -> Result<Option<LeaseGrant>, StoreError> {
        let c = self.db.client().await?;
        // One statement: the row is locked by the upsert, and the condition is checked
        // again against the newest row when two instances try at once — one of them wins.
        let row = c
            .query_opt(
                "WITH before AS (SELECT holder FROM connector_leases WHERE name = $1) \
                 INSERT INTO connector_leases AS l (name, holder, epoch, expires_at, state) \
                 VALUES ($1, $2, 1, now() + make_interval(secs => $3), $4) \
                 ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                 expires_at = excluded.expires_at, \
                 epoch = CASE WHEN l.holder = excluded.holder THEN l.epoch ELSE l.epoch + 1 END, \
                 state = COALESCE(excluded.state, l.state) \
                 WHERE l.holder = excluded.holder OR l.holder IS NULL OR l.expires_at <= now() \
                 RETURNING l.epoch, l.state, (SELECT holder FROM before)",
                &[&name, &holder, &ttl.as_secs_f64(), &state],
            )
            .await
            .map_err(|e| self.db.fail(e))?;
        Ok(row.map(|r| {
            let before: Option<String> = r.get(2);
            LeaseGrant {
                epoch: r.get(0),
                taken_from: before.filter(|b| b != holder),
                state: r.get(1),
            }
        }))
    }

    async fn release(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        let c = self.db.client().await?;
        c.execute(
            "UPDATE connector_leases SET holder = NULL, expires_at = now() \
             WHERE name = $1 AND holder = $2",
            &[&name, &holder],
        )
        .await
        .map(|_| ())
        .map_err(|e| self.db.fail(e))
    }
}
