//! `strata goal list | show ID | events ID`: goal workstreams as the store `serve` uses
//! (SQLite or PostgreSQL) keeps them — read-only; goals change through the `goal_*` tools.

use strata_runtime::goal::Goals;

use super::context::*;
use crate::Exit;
use crate::cli::GoalCommand;

pub(crate) fn run(l: &Context, command: GoalCommand) -> Exit {
    if let GoalCommand::Events { limit, .. } = &command
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
        let (env, _) = crate::wiring::env(&l.config).await?;
        let (store, _) = crate::storage::open_store(&l.config, env.vault.as_deref()).await?;
        let goals = Goals::new(store, &l.config.config.goals).map_err(anyhow::Error::msg)?;
        let found = |e: strata_runtime::goal::GoalError| match e {
            strata_runtime::goal::GoalError::NotFound(_) => {
                anyhow::Error::new(Usage(e.to_string()))
            }
            e => anyhow::Error::new(e),
        };
        let text = match &command {
            GoalCommand::List { json } => {
                let all = goals.list().await?;
                if *json {
                    let rows: Vec<_> = all
                        .iter()
                        .map(strata_runtime::goal::Goal::summary)
                        .collect();
                    serde_json::to_string_pretty(&rows)?
                } else if all.is_empty() {
                    "no goals yet (an agent or owner makes one with goal_create)".to_owned()
                } else {
                    all.iter()
                        .map(|g| {
                            let s = strata_runtime::goal::Goal::summary(g);
                            format!(
                                "{:<40} {:<16} {}  ({} participants, {} open tasks, {} open \
                                 proposals)",
                                g.id,
                                g.state.as_str(),
                                g.title,
                                g.participants.len(),
                                s["open_tasks"],
                                s["open_proposals"]
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                }
            }
            GoalCommand::Show { id } => {
                serde_json::to_string_pretty(&goals.get(id).await.map_err(found)?)?
            }
            GoalCommand::Events { id, limit, json } => {
                let g = goals.get(id).await.map_err(found)?;
                let after = g.events.saturating_sub(*limit as u64);
                let events = goals.events(id, after, *limit).await.map_err(found)?;
                if *json {
                    serde_json::to_string_pretty(&events)?
                } else {
                    events
                        .iter()
                        .map(|e| {
                            let at = strata_engine::clock::rfc3339(
                                std::time::UNIX_EPOCH
                                    + std::time::Duration::from_millis(
                                        u64::try_from(e.at_ms).unwrap_or(0),
                                    ),
                            );
                            format!(
                                "{:>4}  {at}  {:<20} {:<9} {}{}",
                                e.seq,
                                e.actor,
                                e.kind,
                                e.detail,
                                e.reason
                                    .as_deref()
                                    .map(|r| format!("  — {r}"))
                                    .unwrap_or_default()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                }
            }
        };
        anyhow::Ok(text)
    };
    finish(rt.block_on(work))
}
