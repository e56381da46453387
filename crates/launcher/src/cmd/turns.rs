//! `strata turns list [--unfinished] | show ID`: the turn journal (docs/DURABILITY.md) as the
//! store `serve` uses (SQLite or PostgreSQL) keeps it — read-only.

use serde_json::Value;
use strata_runtime::journal::{TurnFilter, detail, summary};

use super::context::*;
use crate::Exit;
use crate::cli::TurnsCommand;

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    }
}

pub(crate) fn run(l: &Context, command: TurnsCommand) -> Exit {
    if let TurnsCommand::List { limit, .. } = &command
        && !(1..=10_000).contains(limit)
    {
        eprintln!("error: --limit must be from 1 to 10000");
        return Exit::Usage;
    }
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let work = async {
        let env = crate::wiring::env_without_memory(&l.config)?;
        let (store, _) = crate::storage::open_store(&l.config, env.vault.as_deref()).await?;
        let text = match &command {
            TurnsCommand::List {
                unfinished,
                limit,
                json,
            } => {
                let turns = store
                    .journal_turns(TurnFilter {
                        unfinished: *unfinished,
                        limit: *limit,
                    })
                    .await?;
                let rows: Vec<Value> = turns.iter().map(summary).collect();
                if *json {
                    serde_json::to_string_pretty(&rows)?
                } else if rows.is_empty() {
                    if *unfinished {
                        "no unfinished turns".to_owned()
                    } else {
                        "no journaled turns".to_owned()
                    }
                } else {
                    rows.iter()
                        .map(|r| {
                            format!(
                                "{:<38} {:<24} {:<10} {:<12} resumed {}  {} steps  {}/{}  {}",
                                s(&r["turn_id"]),
                                s(&r["started"]),
                                s(&r["outcome"]),
                                s(&r["agent"]),
                                s(&r["resumed"]),
                                s(&r["steps"]),
                                s(&r["channel"]),
                                s(&r["sender"]),
                                s(&r["message"]),
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                }
            }
            TurnsCommand::Show { id, json } => {
                let Some((turn, steps)) = store.journal_turn(id).await? else {
                    return Err(anyhow::Error::new(Usage(format!(
                        "no journaled turn `{id}`; `strata turns list` shows the kept ones \
                         (finished turns are kept `journal.retain_days`)"
                    ))));
                };
                let v = detail(&turn, &steps);
                if *json {
                    serde_json::to_string_pretty(&v)?
                } else {
                    let t = &v["turn"];
                    let mut out = format!(
                        "turn {}  agent {}  session {}  channel {}  sender {}\nstarted {}  ended {}  outcome {}  resumed {}\nmessage: {}\n",
                        s(&t["turn_id"]),
                        s(&t["agent"]),
                        s(&t["session"]),
                        s(&t["channel"]),
                        s(&t["sender"]),
                        s(&t["started"]),
                        s(&t["ended"]),
                        s(&t["outcome"]),
                        s(&t["resumed"]),
                        s(&t["message"]),
                    );
                    for st in v["steps"].as_array().into_iter().flatten() {
                        let cost = match st["kind"].as_str() {
                            Some("model") => format!(
                                "{} in / {} out tokens",
                                s(&st["input_tokens"]),
                                s(&st["output_tokens"])
                            ),
                            Some("tool_started") => String::new(),
                            _ => match st["elapsed_ms"].as_f64() {
                                Some(ms) => format!("{ms:.1} ms"),
                                None => String::new(),
                            },
                        };
                        out.push_str(&format!(
                            "{:>4}  {}  {:<15} {:<6} {:<16} {:<14} {:<22} {}\n",
                            s(&st["seq"]),
                            s(&st["at"]),
                            s(&st["kind"]),
                            s(&st["key"]),
                            s(&st["status"]),
                            st["tool"].as_str().unwrap_or(""),
                            cost,
                            s(&st["detail"]),
                        ));
                    }
                    out.trim_end().to_owned()
                }
            }
        };
        anyhow::Ok(text)
    };
    finish(rt.block_on(work))
}
