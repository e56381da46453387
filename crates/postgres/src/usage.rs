//! Model calls' usage in PostgreSQL (`model_calls`), shared by the instances, summed per
//! agent, model, sender, UTC day or turn.

use strata_engine::async_trait;
use strata_engine::session::StoreError;
use strata_runtime::usage::{
    InputParts, ModelCall, UsageBy, UsageQuery, UsageRow, UsageStore, sort_rows,
};

use tokio_postgres::types::ToSql;

use crate::PgStore;

fn key_sql(by: UsageBy) -> &'static str {
    match by {
        UsageBy::Agent => "agent",
        UsageBy::Model => "provider || '/' || model",
        UsageBy::Sender => "sender",
        UsageBy::Day => "to_char(to_timestamp(ts_ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
        UsageBy::Turn => "turn_id",
        UsageBy::Session => "session",
    }
}

/// One model call's row; `$19` is the SQLite row id it was copied from (`storage migrate`),
/// NULL for a call recorded here — NULLs never conflict.
pub(crate) const INSERT_CALL: &str = "INSERT INTO model_calls (ts_ms, agent, session, sender, \
     turn_id, provider, model, purpose, input_tokens, output_tokens, cached_input_tokens, \
     cache_write_tokens, cost_usd, in_system, in_tools, in_memory, in_history, in_tool_outputs, \
     source_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
     $17, $18, $19) ON CONFLICT (source_id) DO NOTHING";

/// One owned statement parameter.
pub(crate) type Param = Box<dyn ToSql + Sync + Send>;

/// The values of [`INSERT_CALL`] for `m`.
pub(crate) fn call_values(m: &ModelCall, source_id: Option<i64>) -> Vec<Param> {
    let n = |v: u64| Box::new(v as i64) as Param;
    vec![
        Box::new(m.ts_ms),
        Box::new(m.agent.clone()),
        Box::new(m.session.clone()),
        Box::new(m.sender.clone()),
        Box::new(m.turn_id.clone()),
        Box::new(m.provider.clone()),
        Box::new(m.model.clone()),
        Box::new(m.purpose.clone()),
        n(m.usage.input_tokens),
        n(m.usage.output_tokens),
        n(m.usage.cached_input_tokens),
        n(m.usage.cache_write_tokens),
        Box::new(m.cost_usd),
        n(m.input_parts.system),
        n(m.input_parts.tools),
        n(m.input_parts.memory),
        n(m.input_parts.history),
        n(m.input_parts.tool_outputs),
        Box::new(source_id),
    ]
}

/// Borrowed, as `execute` takes them.
pub(crate) fn refs(values: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    values
        .iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

#[async_trait]
impl UsageStore for PgStore {
    async fn record_calls(&self, calls: &[ModelCall]) -> Result<(), StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let st = c
            .prepare_cached(INSERT_CALL)
            .await
            .map_err(|e| db.fail(e))?;
        for m in calls {
            let values = call_values(m, None);
            c.execute(&st, &refs(&values))
                .await
                .map_err(|e| db.fail(e))?;
        }
        Ok(())
    }

    async fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>, StoreError> {
        let db = self.db();
        let c = db.client().await?;
        let sql = format!(
            "SELECT {key}, count(*)::BIGINT, sum(input_tokens)::BIGINT, \
             sum(output_tokens)::BIGINT, sum(cached_input_tokens)::BIGINT, \
             sum(cache_write_tokens)::BIGINT, coalesce(sum(cost_usd), 0)::DOUBLE PRECISION, \
             count(*) FILTER (WHERE cost_usd IS NULL)::BIGINT, sum(in_system)::BIGINT, \
             sum(in_tools)::BIGINT, sum(in_memory)::BIGINT, sum(in_history)::BIGINT, \
             sum(in_tool_outputs)::BIGINT FROM model_calls \
             WHERE ts_ms >= $1 AND ($2::TEXT IS NULL OR turn_id = $2) GROUP BY 1",
            key = key_sql(q.by)
        );
        let since = q.since_ms.unwrap_or(i64::MIN);
        let rows = c
            .query(&sql, &[&since, &q.turn_id])
            .await
            .map_err(|e| db.fail(e))?;
        let mut out: Vec<UsageRow> = rows
            .iter()
            .map(|r| {
                let n = |i: usize| r.get::<_, i64>(i).max(0) as u64;
                UsageRow {
                    key: r.get::<_, Option<String>>(0).unwrap_or_default(),
                    calls: n(1),
                    input_tokens: n(2),
                    output_tokens: n(3),
                    cached_input_tokens: n(4),
                    cache_write_tokens: n(5),
                    cost_usd: r.get(6),
                    unpriced_calls: n(7),
                    input_parts: InputParts::from_array([n(8), n(9), n(10), n(11), n(12)]),
                }
            })
            .collect();
        sort_rows(&mut out);
        Ok(out)
    }
}
