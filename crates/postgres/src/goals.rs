//! Goals in PostgreSQL: the goal as a JSON document saved over the version read (one
//! conditional update), its events inserted in the same transaction — so instances changing
//! one goal at once never lose a change.

use strata_engine::async_trait;
use strata_engine::session::StoreError;
use strata_runtime::goal::{Goal, GoalEvent, GoalStore};
use tokio_postgres::Row;

use crate::PgStore;

fn fail(e: impl std::fmt::Display) -> StoreError {
    StoreError::failed(e)
}

fn read_doc(r: &Row) -> Result<Goal, StoreError> {
    serde_json::from_str(r.get::<_, &str>(0)).map_err(fail)
}

const INSERT_EVENT: &str = "INSERT INTO goal_events (goal, seq, at_ms, actor, kind, detail, \
                            reason) VALUES ($1, $2, $3, $4, $5, $6, $7)";

async fn insert_events(
    tx: &tokio_postgres::Transaction<'_>,
    events: &[GoalEvent],
) -> Result<(), tokio_postgres::Error> {
    let st = tx.prepare(INSERT_EVENT).await?;
    for e in events {
        let seq = i64::try_from(e.seq).unwrap_or(i64::MAX);
        let detail = e.detail.to_string();
        tx.execute(
            &st,
            &[
                &e.goal, &seq, &e.at_ms, &e.actor, &e.kind, &detail, &e.reason,
            ],
        )
        .await?;
    }
    Ok(())
}

impl PgStore {
    /// Stores a goal with its log so far (a new goal's first event, or — for `storage
    /// migrate` — its whole log as it is); a goal already here is left as it is. Returns
    /// whether it was new.
    pub async fn restore_goal(
        &self,
        goal: &Goal,
        events: &[GoalEvent],
    ) -> Result<bool, StoreError> {
        let db = self.db();
        let json = serde_json::to_string(goal).map_err(fail)?;
        let version = i64::try_from(goal.version).map_err(fail)?;
        let mut c = db.client().await?;
        let tx = c.transaction().await.map_err(|e| db.fail(e))?;
        let n = tx
            .execute(
                "INSERT INTO goals (id, state, version, created_ms, updated_ms, doc) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
                &[
                    &goal.id,
                    &goal.state.as_str(),
                    &version,
                    &goal.created_ms,
                    &goal.updated_ms,
                    &json,
                ],
            )
            .await
            .map_err(|e| db.fail(e))?;
        if n == 1 {
            insert_events(&tx, events).await.map_err(|e| db.fail(e))?;
        }
        tx.commit().await.map_err(|e| db.fail(e))?;
        Ok(n == 1)
    }
}

#[async_trait]
impl GoalStore for PgStore {
    async fn insert_goal(&self, goal: &Goal, event: &GoalEvent) -> Result<bool, StoreError> {
        self.restore_goal(goal, std::slice::from_ref(event)).await
    }

    async fn goal(&self, id: &str) -> Result<Option<Goal>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let row = c
            .query_opt("SELECT doc FROM goals WHERE id = $1", &[&id])
            .await
            .map_err(|e| db.fail(e))?;
        row.as_ref().map(read_doc).transpose()
    }

    async fn goals(&self) -> Result<Vec<Goal>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let rows = c
            .query("SELECT doc FROM goals ORDER BY created_ms DESC, id", &[])
            .await
            .map_err(|e| db.fail(e))?;
        rows.iter().map(read_doc).collect()
    }

    async fn save_goal(&self, goal: &Goal, events: &[GoalEvent]) -> Result<bool, StoreError> {
        let db = self.db();
        let json = serde_json::to_string(goal).map_err(fail)?;
        let version = i64::try_from(goal.version).map_err(fail)?;
        let mut c = db.client().await?;
        let tx = c.transaction().await.map_err(|e| db.fail(e))?;
        let n = tx
            .execute(
                "UPDATE goals SET state = $2, version = $3::BIGINT, updated_ms = $4, doc = $5 \
                 WHERE id = $1 AND version = $3::BIGINT - 1",
                &[
                    &goal.id,
                    &goal.state.as_str(),
                    &version,
                    &goal.updated_ms,
                    &json,
                ],
            )
            .await
            .map_err(|e| db.fail(e))?;
        if n == 1 {
            insert_events(&tx, events).await.map_err(|e| db.fail(e))?;
        }
        tx.commit().await.map_err(|e| db.fail(e))?;
        Ok(n == 1)
    }

    async fn goal_events(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<GoalEvent>, StoreError> {
        let db = self.db();
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let c = db.client().await?;
        let rows = c
            .query(
                "SELECT goal, seq, at_ms, actor, kind, detail, reason FROM goal_events \
                 WHERE goal = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&id, &after, &limit],
            )
            .await
            .map_err(|e| db.fail(e))?;
        Ok(rows
            .iter()
            .map(|r| GoalEvent {
                goal: r.get(0),
                seq: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                at_ms: r.get(2),
                actor: r.get(3),
                kind: r.get(4),
                detail: serde_json::from_str(r.get::<_, &str>(5))
                    .unwrap_or(serde_json::Value::Null),
                reason: r.get(6),
            })
            .collect())
    }
}
