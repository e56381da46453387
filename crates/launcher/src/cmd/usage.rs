//! `strata usage`: model calls' tokens and cost from the store `serve` uses.

use strata_runtime::usage::{UsageBy, UsageQuery, UsageRow, parse_since};

use super::context::*;
use crate::Exit;

pub(crate) fn run(
    l: &Context,
    by: &str,
    since: Option<&str>,
    turn: Option<String>,
    json: bool,
) -> Exit {
    let by = match UsageBy::parse(by) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: --by: {e}");
            return Exit::Usage;
        }
    };
    let since_ms = match since
        .map(|s| parse_since(s, strata_engine::clock::now_ms()))
        .transpose()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: --since: {e}");
            return Exit::Usage;
        }
    };
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let rows = rt.block_on(async {
        let (env, _) = crate::wiring::env(&l.config).await?;
        let (store, _) = crate::storage::open_store(&l.config, env.vault.as_deref()).await?;
        let q = UsageQuery {
            by,
            since_ms,
            turn_id: turn,
        };
        anyhow::Ok(store.usage(&q).await?)
    });
    let rows = match rows {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    if json {
        return out(&serde_json::to_string_pretty(&rows).unwrap_or_default());
    }
    out(&table(by, &rows))
}

/// A cost as people read it: `unknown` when no call had a price, a lower bound when some had
/// none.
pub(crate) fn cost(r: &UsageRow) -> String {
    match (r.unpriced_calls, r.calls) {
        (u, c) if u == c => "unknown".into(),
        (0, _) => format!("${:.4}", r.cost_usd),
        (u, _) => format!("≥${:.4} ({u} unpriced)", r.cost_usd),
    }
}

fn table(by: UsageBy, rows: &[UsageRow]) -> String {
    if rows.is_empty() {
        return "no model calls recorded".into();
    }
    let head = serde_json::to_value(by)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let w = rows
        .iter()
        .map(|r| r.key.len())
        .chain([head.len()])
        .max()
        .unwrap_or(5);
    let mut lines = vec![format!(
        "{head:w$}  {:>6}  {:>10}  {:>10}  {:>10}  cost",
        "calls", "input", "cached", "output"
    )];
    for r in rows {
        lines.push(format!(
            "{:w$}  {:>6}  {:>10}  {:>10}  {:>10}  {}",
            r.key,
            r.calls,
            r.input_tokens,
            r.cached_input_tokens,
            r.output_tokens,
            cost(r)
        ));
    }
    let parted: Vec<&UsageRow> = rows
        .iter()
        .filter(|r| r.input_parts.as_array().iter().any(|n| *n > 0))
        .collect();
    if !parted.is_empty() {
        lines.push(String::new());
        lines.push("where the prompt tokens went (shared out by the bytes of each part):".into());
        lines.push(format!(
            "{head:w$}  {:>16}  {:>16}  {:>16}  {:>16}  {:>16}",
            "system", "tool schemas", "memory", "history", "tool outputs"
        ));
        for r in parted {
            let parts = r.input_parts.as_array();
            let total: u64 = parts.iter().sum();
            let cell = |n: u64| format!("{n} ({}%)", (n * 100 + total / 2) / total.max(1));
            lines.push(format!(
                "{:w$}  {:>16}  {:>16}  {:>16}  {:>16}  {:>16}",
                r.key,
                cell(parts[0]),
                cell(parts[1]),
                cell(parts[2]),
                cell(parts[3]),
                cell(parts[4])
            ));
        }
    }
    lines.join("\n")
}
