//! Model calls' usage in SQLite (`model_calls`), summed per agent, model, sender, UTC day or
//! turn.

use async_trait::async_trait;
use rusqlite::params;
use strata_engine::session::StoreError;
use strata_runtime::usage::{
    InputParts, ModelCall, UsageBy, UsageQuery, UsageRow, UsageStore, sort_rows,
};

use crate::SqliteStore;

fn key_sql(by: UsageBy) -> &'static str {
    match by {
        UsageBy::Agent => "agent",
        UsageBy::Model => "provider || '/' || model",
        UsageBy::Sender => "sender",
        UsageBy::Day => "date(ts_ms / 1000, 'unixepoch')",
        UsageBy::Turn => "turn_id",
        UsageBy::Session => "session",
    }
}

#[async_trait]
impl UsageStore for SqliteStore {
    async fn record_calls(&self, calls: &[ModelCall]) -> Result<(), StoreError> {
        let calls = calls.to_vec();
        self.write(move |c| {
            let mut st = c.prepare_cached(
                "INSERT INTO model_calls (ts_ms, agent, session, sender, turn_id, provider, model, \
                 purpose, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, \
                 cost_usd, in_system, in_tools, in_memory, in_history, in_tool_outputs) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
                 ?17, ?18)",
            )?;
            for m in &calls {
                st.execute(params![
                    m.ts_ms,
                    m.agent,
                    m.session,
                    m.sender,
                    m.turn_id,
                    m.provider,
                    m.model,
                    m.purpose,
                    m.usage.input_tokens as i64,
                    m.usage.output_tokens as i64,
                    m.usage.cached_input_tokens as i64,
                    m.usage.cache_write_tokens as i64,
                    m.cost_usd,
                    m.input_parts.system as i64,
                    m.input_parts.tools as i64,
                    m.input_parts.memory as i64,
                    m.input_parts.history as i64,
                    m.input_parts.tool_outputs as i64,
                ])?;
            }
            Ok(calls.len())
        })
        .await
        .map(|_| ())
    }

    async fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>, StoreError> {
        let sql = format!(
            "SELECT {key}, count(*), sum(input_tokens), sum(output_tokens), \
             sum(cached_input_tokens), sum(cache_write_tokens), total(cost_usd), \
             sum(cost_usd IS NULL), sum(in_system), sum(in_tools), sum(in_memory), \
             sum(in_history), sum(in_tool_outputs) FROM model_calls \
             WHERE ts_ms >= ?1 AND (?2 IS NULL OR turn_id = ?2) GROUP BY 1",
            key = key_sql(q.by)
        );
        let (since, turn) = (q.since_ms.unwrap_or(i64::MIN), q.turn_id.clone());
        let mut rows = self
            .with(move |c| {
                c.prepare_cached(&sql)?
                    .query_map(params![since, turn], |r| {
                        let n = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
                        Ok(UsageRow {
                            key: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                            calls: n(1)?,
                            input_tokens: n(2)?,
                            output_tokens: n(3)?,
                            cached_input_tokens: n(4)?,
                            cache_write_tokens: n(5)?,
                            cost_usd: r.get(6)?,
                            unpriced_calls: n(7)?,
                            input_parts: InputParts::from_array([
                                n(8)?,
                                n(9)?,
                                n(10)?,
                                n(11)?,
                                n(12)?,
                            ]),
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()
            })
            .await?;
        sort_rows(&mut rows);
        Ok(rows)
    }
}
