//! The turn journal in PostgreSQL: a row per turn (its start as JSON), a row per step, each
//! write committed before the call returns — shared by every instance, so a turn redelivered
//! to another instance continues from the steps the first one recorded.

use strata_engine::async_trait;
use strata_engine::session::StoreError;
use strata_runtime::journal::{JournalOp, JournalStep, JournalStore, JournalTurn, TurnFilter};
use tokio_postgres::Row;

use crate::PgStore;

fn fail(e: impl std::fmt::Display) -> StoreError {
    StoreError::failed(e)
}

const TURN_COLUMNS: &str = "turn_id, owner, started_ms, ended_ms, outcome, resumed, start, \
     (SELECT COUNT(*) FROM journal_steps s WHERE s.turn_id = journal_turns.turn_id)";

fn turn_row(r: &Row) -> Result<JournalTurn, StoreError> {
    Ok(JournalTurn {
        turn_id: r.get(0),
        owner: r.get(1),
        started_ms: r.get(2),
        ended_ms: r.get(3),
        outcome: r.get(4),
        resumed: u32::try_from(r.get::<_, i64>(5)).unwrap_or(u32::MAX),
        start: serde_json::from_str(r.get::<_, &str>(6)).map_err(fail)?,
        steps: u64::try_from(r.get::<_, i64>(7)).unwrap_or(0),
    })
}

/// A [`JournalOp`] batch as columns.
#[derive(Default)]
struct Batch<'a> {
    begin_id: Vec<&'a str>,
    begin_owner: Vec<&'a str>,
    begin_started: Vec<i64>,
    begin_agent: Vec<&'a str>,
    begin_session: Vec<&'a str>,
    begin_start: Vec<String>,
    step_turn: Vec<&'a str>,
    step_seq: Vec<i64>,
    step_at: Vec<i64>,
    step_kind: Vec<&'a str>,
    step_key: Vec<&'a str>,
    step_data: Vec<String>,
    end_id: Vec<&'a str>,
    end_at: Vec<i64>,
    end_outcome: Vec<&'a str>,
}

#[async_trait]
impl JournalStore for PgStore {
    /// One transaction for every write the journal's writer queued meanwhile, of every turn:
    /// one commit (one fsync) instead of one per step, and three statements (the starts, the
    /// steps, the ends, each over arrays) instead of one round trip per write.
    async fn journal_write(&self, ops: &[JournalOp]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut b = Batch::default();
        for op in ops {
            match op {
                JournalOp::Begin(t) => {
                    b.begin_id.push(t.turn_id.as_str());
                    b.begin_owner.push(t.owner.as_str());
                    b.begin_started.push(t.started_ms);
                    b.begin_agent.push(t.start.agent_id.as_str());
                    b.begin_session.push(t.start.session_id.as_str());
                    b.begin_start
                        .push(serde_json::to_string(&t.start).map_err(fail)?);
                }
                JournalOp::Append { turn_id, steps } => {
                    for s in steps {
                        b.step_turn.push(turn_id.as_str());
                        b.step_seq.push(i64::try_from(s.seq).map_err(fail)?);
                        b.step_at.push(s.at_ms);
                        b.step_kind.push(s.kind.as_str());
                        b.step_key.push(s.key.as_str());
                        b.step_data.push(s.data.to_string());
                    }
                }
                JournalOp::End {
                    turn_id,
                    at_ms,
                    outcome,
                } => {
                    // The first end of a turn is its end (as one by one).
                    if !b.end_id.contains(&turn_id.as_str()) {
                        b.end_id.push(turn_id.as_str());
                        b.end_at.push(*at_ms);
                        b.end_outcome.push(outcome.as_str());
                    }
                }
            }
        }
        let db = self.db();
        let mut c = db.client().await?;
        let tx = c.transaction().await.map_err(|e| db.fail(e))?;
        // Starts before steps before ends: a start and the end of the same turn in one batch
        // land in that order.
        if !b.begin_id.is_empty() {
            tx.execute(
                "INSERT INTO journal_turns (turn_id, owner, started_ms, agent_id, session_id, start) \
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], \
                 $6::text[]) ON CONFLICT (turn_id) DO NOTHING",
                &[
                    &b.begin_id,
                    &b.begin_owner,
                    &b.begin_started,
                    &b.begin_agent,
                    &b.begin_session,
                    &b.begin_start,
                ],
            )
            .await
            .map_err(|e| db.fail(e))?;
        }
        if !b.step_turn.is_empty() {
            tx.execute(
                "INSERT INTO journal_steps (turn_id, seq, at_ms, kind, key, data) \
                 SELECT * FROM UNNEST($1::text[], $2::int8[], $3::int8[], $4::text[], $5::text[], \
                 $6::text[])",
                &[
                    &b.step_turn,
                    &b.step_seq,
                    &b.step_at,
                    &b.step_kind,
                    &b.step_key,
                    &b.step_data,
                ],
            )
            .await
            .map_err(|e| db.fail(e))?;
        }
        if !b.end_id.is_empty() {
            tx.execute(
                "UPDATE journal_turns t SET ended_ms = u.at, outcome = u.outcome \
                 FROM UNNEST($1::text[], $2::int8[], $3::text[]) AS u(id, at, outcome) \
                 WHERE t.turn_id = u.id AND t.ended_ms IS NULL",
                &[&b.end_id, &b.end_at, &b.end_outcome],
            )
            .await
            .map_err(|e| db.fail(e))?;
        }
        tx.commit().await.map_err(|e| db.fail(e))
    }

    async fn journal_begin(&self, turn: &JournalTurn) -> Result<bool, StoreError> {
        let db = self.db();
        let start = serde_json::to_string(&turn.start).map_err(fail)?;
        let c = db.client().await?;
        let n = c
            .execute(
                "INSERT INTO journal_turns (turn_id, owner, started_ms, agent_id, session_id, start) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (turn_id) DO NOTHING",
                &[
                    &turn.turn_id,
                    &turn.owner,
                    &turn.started_ms,
                    &turn.start.agent_id,
                    &turn.start.session_id,
                    &start,
                ],
            )
            .await
            .map_err(|e| db.fail(e))?;
        Ok(n == 1)
    }

    async fn journal_reopen(&self, turn_id: &str, owner: &str) -> Result<(), StoreError> {
        let db = self.db();
        let c = db.client().await?;
        c.execute(
            "UPDATE journal_turns SET owner = $2, ended_ms = NULL, outcome = NULL, \
             resumed = resumed + 1 WHERE turn_id = $1",
            &[&turn_id, &owner],
        )
        .await
        .map_err(|e| db.fail(e))?;
        Ok(())
    }

    async fn journal_append(&self, turn_id: &str, steps: &[JournalStep]) -> Result<(), StoreError> {
        let db = self.db();
        let mut c = db.client().await?;
        let tx = c.transaction().await.map_err(|e| db.fail(e))?;
        for s in steps {
            let seq = i64::try_from(s.seq).map_err(fail)?;
            let data = s.data.to_string();
            tx.execute(
                "INSERT INTO journal_steps (turn_id, seq, at_ms, kind, key, data) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[&turn_id, &seq, &s.at_ms, &s.kind, &s.key, &data],
            )
            .await
            .map_err(|e| db.fail(e))?;
        }
        tx.commit().await.map_err(|e| db.fail(e))
    }

    async fn journal_end(
        &self,
        turn_id: &str,
        at_ms: i64,
        outcome: &str,
    ) -> Result<(), StoreError> {
        let db = self.db();
        let c = db.client().await?;
        c.execute(
            "UPDATE journal_turns SET ended_ms = $2, outcome = $3 \
             WHERE turn_id = $1 AND ended_ms IS NULL",
            &[&turn_id, &at_ms, &outcome],
        )
        .await
        .map_err(|e| db.fail(e))?;
        Ok(())
    }

    async fn journal_turn(
        &self,
        turn_id: &str,
    ) -> Result<Option<(JournalTurn, Vec<JournalStep>)>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let row = c
            .query_opt(
                &format!("SELECT {TURN_COLUMNS} FROM journal_turns WHERE turn_id = $1"),
                &[&turn_id],
            )
            .await
            .map_err(|e| db.fail(e))?;
        let Some(row) = row else { return Ok(None) };
        let turn = turn_row(&row)?;
        let rows = c
            .query(
                "SELECT seq, at_ms, kind, key, data FROM journal_steps \
                 WHERE turn_id = $1 ORDER BY seq",
                &[&turn_id],
            )
            .await
            .map_err(|e| db.fail(e))?;
        let steps = rows
            .iter()
            .map(|r| {
                Ok(JournalStep {
                    seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                    at_ms: r.get(1),
                    kind: r.get(2),
                    key: r.get(3),
                    data: serde_json::from_str(r.get::<_, &str>(4)).map_err(fail)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Some((turn, steps)))
    }

    async fn journal_turns(&self, filter: TurnFilter) -> Result<Vec<JournalTurn>, StoreError> {
        let db = self.db();
        let limit =
            i64::try_from(if filter.limit == 0 { 100 } else { filter.limit }).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM journal_turns {} ORDER BY started_ms DESC, turn_id LIMIT $1",
            if filter.unfinished {
                "WHERE ended_ms IS NULL"
            } else {
                ""
            }
        );
        let c = db.client().await?;
        let rows = c.query(&sql, &[&limit]).await.map_err(|e| db.fail(e))?;
        rows.iter().map(turn_row).collect()
    }

    async fn journal_prune(&self, before_ms: i64) -> Result<u64, StoreError> {
        let db = self.db();
        let mut c = db.client().await?;
        let tx = c.transaction().await.map_err(|e| db.fail(e))?;
        tx.execute(
            "DELETE FROM journal_steps WHERE turn_id IN \
             (SELECT turn_id FROM journal_turns WHERE ended_ms < $1)",
            &[&before_ms],
        )
        .await
        .map_err(|e| db.fail(e))?;
        let n = tx
            .execute(
                "DELETE FROM journal_turns WHERE ended_ms < $1",
                &[&before_ms],
            )
            .await
            .map_err(|e| db.fail(e))?;
        tx.commit().await.map_err(|e| db.fail(e))?;
        Ok(n)
    }
}
