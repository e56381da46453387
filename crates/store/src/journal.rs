//! The turn journal in SQLite: a row per turn (its start as JSON), a row per step. Each write
//! is its own commit through the writer thread (group-committed with whatever else is
//! queued), so a step is durable when the call returns.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use strata_engine::session::StoreError;
use strata_runtime::journal::{
    JournalOp, JournalStep, JournalStore, JournalTurn, TurnFilter, TurnStart,
};

use crate::SqliteStore;

fn fail(e: impl std::fmt::Display) -> StoreError {
    StoreError::failed(e)
}

fn conversion(e: serde_json::Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
}

const TURN_COLUMNS: &str = "turn_id, owner, started_ms, ended_ms, outcome, resumed, start, \
     (SELECT COUNT(*) FROM journal_steps s WHERE s.turn_id = journal_turns.turn_id)";

fn turn_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<JournalTurn> {
    let start: String = r.get(6)?;
    let start: TurnStart = serde_json::from_str(&start).map_err(conversion)?;
    Ok(JournalTurn {
        turn_id: r.get(0)?,
        owner: r.get(1)?,
        started_ms: r.get(2)?,
        ended_ms: r.get(3)?,
        outcome: r.get(4)?,
        resumed: u32::try_from(r.get::<_, i64>(5)?).unwrap_or(u32::MAX),
        steps: u64::try_from(r.get::<_, i64>(7)?).unwrap_or(0),
        start,
    })
}

const BEGIN: &str = "INSERT INTO journal_turns (turn_id, owner, started_ms, agent_id, session_id, start) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (turn_id) DO NOTHING";
const APPEND: &str = "INSERT INTO journal_steps (turn_id, seq, at_ms, kind, key, data) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const END: &str = "UPDATE journal_turns SET ended_ms = ?2, outcome = ?3 \
     WHERE turn_id = ?1 AND ended_ms IS NULL";

/// A step as its row: seq, at_ms, kind, key, data.
type StepRow = (i64, i64, String, String, String);

/// A [`JournalOp`] with its JSON already written, ready for the writer thread.
enum Op {
    Begin(Box<JournalTurn>, String),
    Append(String, Vec<StepRow>),
    End(String, i64, String),
}

fn step_rows(steps: &[JournalStep]) -> Result<Vec<StepRow>, StoreError> {
    steps
        .iter()
        .map(|s| {
            Ok((
                i64::try_from(s.seq).map_err(fail)?,
                s.at_ms,
                s.kind.clone(),
                s.key.clone(),
                s.data.to_string(),
            ))
        })
        .collect()
}

fn prepared(ops: &[JournalOp]) -> Result<Vec<Op>, StoreError> {
    ops.iter()
        .map(|op| {
            Ok(match op {
                JournalOp::Begin(t) => {
                    Op::Begin(t.clone(), serde_json::to_string(&t.start).map_err(fail)?)
                }
                JournalOp::Append { turn_id, steps } => {
                    Op::Append(turn_id.clone(), step_rows(steps)?)
                }
                JournalOp::End {
                    turn_id,
                    at_ms,
                    outcome,
                } => Op::End(turn_id.clone(), *at_ms, outcome.clone()),
            })
        })
        .collect()
}

/// The writer thread's job for `ops`: one transaction (a savepoint of the writer's, when it
/// commits several jobs at once); the rows it changed (a start of a turn that has one: none).
fn job(ops: Vec<Op>) -> impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<usize> + Send {
    move |c| {
        let mut changed = 0;
        for op in &ops {
            changed += match op {
                Op::Begin(t, start) => c.prepare_cached(BEGIN)?.execute(params![
                    t.turn_id,
                    t.owner,
                    t.started_ms,
                    t.start.agent_id,
                    t.start.session_id,
                    start
                ])?,
                Op::Append(id, rows) => {
                    let mut st = c.prepare_cached(APPEND)?;
                    for r in rows {
                        st.execute(params![id, r.0, r.1, r.2, r.3, r.4])?;
                    }
                    rows.len()
                }
                Op::End(id, at, outcome) => {
                    c.prepare_cached(END)?.execute(params![id, at, outcome])?
                }
            };
        }
        Ok(changed)
    }
}

#[async_trait]
impl JournalStore for SqliteStore {
    async fn journal_write(&self, ops: &[JournalOp]) -> Result<(), StoreError> {
        // One job: one transaction, committed with whatever else the writer has queued.
        self.write(job(prepared(ops)?)).await.map(|_| ())
    }

    /// The writer thread is the queue: jobs run in the order they were sent.
    fn journal_ordered(&self) -> bool {
        true
    }

    fn journal_queue(&self, ops: Vec<JournalOp>) {
        match prepared(&ops) {
            Ok(ops) => self.write_detached(job(ops)),
            Err(e) => tracing::warn!(error = %e, "a journal write was not queued"),
        }
    }

    async fn journal_begin(&self, turn: &JournalTurn) -> Result<bool, StoreError> {
        let start = serde_json::to_string(&turn.start).map_err(fail)?;
        self.write(job(vec![Op::Begin(Box::new(turn.clone()), start)]))
            .await
            .map(|n| n == 1)
    }

    async fn journal_reopen(&self, turn_id: &str, owner: &str) -> Result<(), StoreError> {
        let (id, owner) = (turn_id.to_owned(), owner.to_owned());
        self.write(move |c| {
            c.prepare_cached(
                "UPDATE journal_turns SET owner = ?2, ended_ms = NULL, outcome = NULL, \
                 resumed = resumed + 1 WHERE turn_id = ?1",
            )?
            .execute(params![id, owner])
        })
        .await
        .map(|_| ())
    }

    async fn journal_append(&self, turn_id: &str, steps: &[JournalStep]) -> Result<(), StoreError> {
        let op = Op::Append(turn_id.to_owned(), step_rows(steps)?);
        self.write(job(vec![op])).await.map(|_| ())
    }

    async fn journal_end(
        &self,
        turn_id: &str,
        at_ms: i64,
        outcome: &str,
    ) -> Result<(), StoreError> {
        let op = Op::End(turn_id.to_owned(), at_ms, outcome.to_owned());
        self.write(job(vec![op])).await.map(|_| ())
    }

    async fn journal_turn(
        &self,
        turn_id: &str,
    ) -> Result<Option<(JournalTurn, Vec<JournalStep>)>, StoreError> {
        let id = turn_id.to_owned();
        self.with(move |c| {
            let turn = c
                .prepare_cached(&format!(
                    "SELECT {TURN_COLUMNS} FROM journal_turns WHERE turn_id = ?1"
                ))?
                .query_row([&id], turn_row)
                .optional()?;
            let Some(turn) = turn else { return Ok(None) };
            let steps = c
                .prepare_cached(
                    "SELECT seq, at_ms, kind, key, data FROM journal_steps \
                     WHERE turn_id = ?1 ORDER BY seq",
                )?
                .query_map([&id], |r| {
                    let data: String = r.get(4)?;
                    Ok(JournalStep {
                        seq: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                        at_ms: r.get(1)?,
                        kind: r.get(2)?,
                        key: r.get(3)?,
                        data: serde_json::from_str(&data).map_err(conversion)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(Some((turn, steps)))
        })
        .await
    }

    async fn journal_turns(&self, filter: TurnFilter) -> Result<Vec<JournalTurn>, StoreError> {
        let limit =
            i64::try_from(if filter.limit == 0 { 100 } else { filter.limit }).unwrap_or(i64::MAX);
        self.with(move |c| {
            let sql = if filter.unfinished {
                format!(
                    "SELECT {TURN_COLUMNS} FROM journal_turns WHERE ended_ms IS NULL \
                     ORDER BY started_ms DESC, turn_id LIMIT ?1"
                )
            } else {
                format!(
                    "SELECT {TURN_COLUMNS} FROM journal_turns \
                     ORDER BY started_ms DESC, turn_id LIMIT ?1"
                )
            };
            c.prepare_cached(&sql)?
                .query_map([limit], turn_row)?
                .collect()
        })
        .await
    }

    async fn journal_prune(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.write(move |c| {
            c.prepare_cached(
                "DELETE FROM journal_steps WHERE turn_id IN \
                 (SELECT turn_id FROM journal_turns WHERE ended_ms < ?1)",
            )?
            .execute([before_ms])?;
            c.prepare_cached("DELETE FROM journal_turns WHERE ended_ms < ?1")?
                .execute([before_ms])
        })
        .await
        .map(|n| n as u64)
    }
}
