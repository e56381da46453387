//! Goals in SQLite: the goal as a JSON document saved over the version read (one
//! conditional update), its events inserted in the same transaction.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use strata_engine::session::StoreError;
use strata_runtime::goal::{Goal, GoalEvent, GoalStore};

use crate::SqliteStore;

fn fail(e: impl std::fmt::Display) -> StoreError {
    StoreError::failed(e)
}

fn doc(g: &Goal) -> Result<String, StoreError> {
    serde_json::to_string(g).map_err(fail)
}

fn read_doc(s: &str) -> rusqlite::Result<Goal> {
    serde_json::from_str(s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// The rows of `events`, ready to insert.
type EventRow = (String, i64, i64, String, String, String, Option<String>);

fn rows(events: &[GoalEvent]) -> Result<Vec<EventRow>, StoreError> {
    events
        .iter()
        .map(|e| {
            Ok((
                e.goal.clone(),
                i64::try_from(e.seq).map_err(fail)?,
                e.at_ms,
                e.actor.clone(),
                e.kind.clone(),
                serde_json::to_string(&e.detail).map_err(fail)?,
                e.reason.clone(),
            ))
        })
        .collect()
}

fn insert_events(c: &rusqlite::Connection, rows: &[EventRow]) -> rusqlite::Result<()> {
    let mut stmt = c.prepare_cached(
        "INSERT INTO goal_events (goal, seq, at_ms, actor, kind, detail, reason) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for r in rows {
        stmt.execute(params![r.0, r.1, r.2, r.3, r.4, r.5, r.6])?;
    }
    Ok(())
}

#[async_trait]
impl GoalStore for SqliteStore {
    async fn insert_goal(&self, goal: &Goal, event: &GoalEvent) -> Result<bool, StoreError> {
        let (id, state, version) = (
            goal.id.clone(),
            goal.state.as_str(),
            i64::try_from(goal.version).map_err(fail)?,
        );
        let (created, updated, json) = (goal.created_ms, goal.updated_ms, doc(goal)?);
        let events = rows(std::slice::from_ref(event))?;
        self.write(move |c| {
            let n = c.execute(
                "INSERT INTO goals (id, state, version, created_ms, updated_ms, doc) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
                params![id, state, version, created, updated, json],
            )?;
            if n == 1 {
                insert_events(c, &events)?;
            }
            Ok(n)
        })
        .await
        .map(|n| n == 1)
    }

    async fn goal(&self, id: &str) -> Result<Option<Goal>, StoreError> {
        let id = id.to_owned();
        self.with(move |c| {
            c.prepare_cached("SELECT doc FROM goals WHERE id = ?1")?
                .query_row([id], |r| read_doc(&r.get::<_, String>(0)?))
                .optional()
        })
        .await
    }

    async fn goals(&self) -> Result<Vec<Goal>, StoreError> {
        self.with(|c| {
            c.prepare_cached("SELECT doc FROM goals ORDER BY created_ms DESC, id")?
                .query_map([], |r| read_doc(&r.get::<_, String>(0)?))?
                .collect()
        })
        .await
    }

    async fn save_goal(&self, goal: &Goal, events: &[GoalEvent]) -> Result<bool, StoreError> {
        let (id, state) = (goal.id.clone(), goal.state.as_str());
        let version = i64::try_from(goal.version).map_err(fail)?;
        let (updated, json) = (goal.updated_ms, doc(goal)?);
        let events = rows(events)?;
        self.write(move |c| {
            let n = c.execute(
                "UPDATE goals SET state = ?2, version = ?3, updated_ms = ?4, doc = ?5 \
                 WHERE id = ?1 AND version = ?3 - 1",
                params![id, state, version, updated, json],
            )?;
            if n == 1 {
                insert_events(c, &events)?;
            }
            Ok(n)
        })
        .await
        .map(|n| n == 1)
    }

    async fn goal_events(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<GoalEvent>, StoreError> {
        let id = id.to_owned();
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with(move |c| {
            c.prepare_cached(
                "SELECT goal, seq, at_ms, actor, kind, detail, reason FROM goal_events \
                 WHERE goal = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?
            .query_map(params![id, after, limit], |r| {
                let detail: String = r.get(5)?;
                Ok(GoalEvent {
                    goal: r.get(0)?,
                    seq: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    at_ms: r.get(2)?,
                    actor: r.get(3)?,
                    kind: r.get(4)?,
                    detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::Null),
                    reason: r.get(6)?,
                })
            })?
            .collect()
        })
        .await
    }
}
