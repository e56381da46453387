//! Reading a store's rows as they are, in pages by row id, for `strata storage migrate`
//! (which writes them into another backend with the same ids, so a second run copies
//! nothing twice).

use rusqlite::params;
use strata_engine::session::StoreError;
use strata_runtime::approval::ApprovalRecord;

use crate::SqliteStore;

/// A session row with its turns.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    /// Agent id.
    pub agent_id: String,
    /// Session id.
    pub session_id: String,
    /// Summary of the compacted part.
    pub summary: Option<String>,
    /// Turns since the summary.
    pub turns_since_summary: i64,
    /// Turns ever recorded (the next turn's number is this + 1).
    pub turn_count: i64,
    /// Provider state, as JSON text.
    pub provider_state: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub updated_at: i64,
    /// What has tainted it (JSON list of taint sources).
    pub taint: Option<String>,
    /// The stored turns, oldest first.
    pub turns: Vec<TurnRow>,
}

/// One stored turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRow {
    /// Its number in the session.
    pub turn: i64,
    /// Its messages, a JSON array.
    pub messages: String,
    /// How many.
    pub message_count: i64,
    /// Unix seconds.
    pub created_at: i64,
}

/// One tool-log row.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLogRow {
    /// Its row id in the source (the copy's key).
    pub source_id: i64,
    /// Unix seconds.
    pub ts: i64,
    /// Agent id.
    pub agent_id: String,
    /// Session id.
    pub session_id: String,
    /// Tool.
    pub tool: String,
    /// Outcome.
    pub status: String,
    /// Milliseconds.
    pub elapsed_ms: f64,
    /// Joins the audit log.
    pub request_id: String,
}

/// One rate-limit event.
#[derive(Debug, Clone, PartialEq)]
pub struct RateRow {
    /// Its row id in the source (the copy's key).
    pub source_id: i64,
    /// `agent:<id>` or the principal.
    pub key: String,
    /// Tool.
    pub tool: String,
    /// Unix milliseconds.
    pub ts_ms: i64,
}

/// One model call with its row id in the source (the copy's key).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCallRow {
    /// Its row id in the source.
    pub source_id: i64,
    /// The call.
    pub call: strata_runtime::usage::ModelCall,
}

impl SqliteStore {
    /// Up to `limit` model calls with a row id above `after`.
    pub async fn dump_model_calls(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<ModelCallRow>, StoreError> {
        use strata_engine::llm::Usage;
        use strata_runtime::usage::{InputParts, ModelCall};
        self.with(move |c| {
            c.prepare_cached(
                "SELECT rowid, ts_ms, agent, session, sender, turn_id, provider, model, purpose, \
                 input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd, \
                 in_system, in_tools, in_memory, in_history, in_tool_outputs \
                 FROM model_calls WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
            )?
            .query_map(params![after, limit as i64], |r| {
                let n = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
                Ok(ModelCallRow {
                    source_id: r.get(0)?,
                    call: ModelCall {
                        ts_ms: r.get(1)?,
                        agent: r.get(2)?,
                        session: r.get(3)?,
                        sender: r.get(4)?,
                        turn_id: r.get(5)?,
                        provider: r.get(6)?,
                        model: r.get(7)?,
                        purpose: r.get(8)?,
                        usage: Usage {
                            input_tokens: n(9)?,
                            output_tokens: n(10)?,
                            cached_input_tokens: n(11)?,
                            cache_write_tokens: n(12)?,
                            cost_usd: None,
                        },
                        cost_usd: r.get(13)?,
                        input_parts: InputParts::from_array([
                            n(14)?,
                            n(15)?,
                            n(16)?,
                            n(17)?,
                            n(18)?,
                        ]),
                    },
                })
            })?
            .collect()
        })
        .await
    }

    /// Up to `limit` sessions whose row id is above `after`, with their turns, and the last
    /// row id read (`None` when there were none).
    pub async fn dump_sessions(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<SessionRow>, Option<i64>), StoreError> {
        self.with(move |c| {
            let rows: Vec<(i64, SessionRow)> = c
                .prepare_cached(
                    "SELECT id, agent_id, session_id, summary, turns_since_summary, turn_count, \
                     provider_state, created_at, updated_at, taint FROM sessions WHERE id > ?1 \
                     ORDER BY id LIMIT ?2",
                )?
                .query_map(params![after, limit as i64], |r| {
                    Ok((
                        r.get(0)?,
                        SessionRow {
                            agent_id: r.get(1)?,
                            session_id: r.get(2)?,
                            summary: r.get(3)?,
                            turns_since_summary: r.get(4)?,
                            turn_count: r.get(5)?,
                            provider_state: r.get(6)?,
                            created_at: r.get(7)?,
                            updated_at: r.get(8)?,
                            taint: r.get(9)?,
                            turns: Vec::new(),
                        },
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let last = rows.last().map(|(id, _)| *id);
            let mut turns = c.prepare_cached(
                "SELECT turn, messages, message_count, created_at FROM turns WHERE session = ?1 \
                 ORDER BY turn",
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for (id, mut s) in rows {
                s.turns = turns
                    .query_map([id], |r| {
                        Ok(TurnRow {
                            turn: r.get(0)?,
                            messages: r.get(1)?,
                            message_count: r.get(2)?,
                            created_at: r.get(3)?,
                        })
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                out.push(s);
            }
            Ok((out, last))
        })
        .await
    }

    /// Up to `limit` tool-log rows with a row id above `after`.
    pub async fn dump_tool_log(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<ToolLogRow>, StoreError> {
        self.with(move |c| {
            c.prepare_cached(
                "SELECT id, ts, agent_id, session_id, tool, status, elapsed_ms, request_id \
                 FROM tool_log WHERE id > ?1 ORDER BY id LIMIT ?2",
            )?
            .query_map(params![after, limit as i64], |r| {
                Ok(ToolLogRow {
                    source_id: r.get(0)?,
                    ts: r.get(1)?,
                    agent_id: r.get(2)?,
                    session_id: r.get(3)?,
                    tool: r.get(4)?,
                    status: r.get(5)?,
                    elapsed_ms: r.get(6)?,
                    request_id: r.get(7)?,
                })
            })?
            .collect()
        })
        .await
    }

    /// Up to `limit` rate events with a row id above `after`.
    pub async fn dump_rate_events(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<RateRow>, StoreError> {
        self.with(move |c| {
            c.prepare_cached(
                "SELECT rowid, key, tool, ts_ms FROM rate_events WHERE rowid > ?1 \
                 ORDER BY rowid LIMIT ?2",
            )?
            .query_map(params![after, limit as i64], |r| {
                Ok(RateRow {
                    source_id: r.get(0)?,
                    key: r.get(1)?,
                    tool: r.get(2)?,
                    ts_ms: r.get(3)?,
                })
            })?
            .collect()
        })
        .await
    }

    /// Up to `limit` approval requests with a row id above `after`, and the last row id.
    pub async fn dump_approvals(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<ApprovalRecord>, Option<i64>), StoreError> {
        self.with(move |c| {
            let rows: Vec<(i64, ApprovalRecord)> = c
                .prepare_cached(&format!(
                    "SELECT {}, rowid FROM approvals WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
                    crate::security::COLS
                ))?
                .query_map(params![after, limit as i64], |r| {
                    Ok((r.get(11)?, crate::security::approval(r)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let last = rows.last().map(|(id, _)| *id);
            Ok((rows.into_iter().map(|(_, a)| a).collect(), last))
        })
        .await
    }
}
