//! `strata schedule list | show | run | pause | resume | history`: the schedules the
//! configuration describes, with their state from the store `serve` uses (SQLite or
//! PostgreSQL), so a change here is seen by the running instances at their next tick.

use serde_json::{Value, json};

use super::context::*;
use crate::Exit;
use crate::cli::ScheduleCommand;

pub(crate) fn run(l: &Context, command: ScheduleCommand) -> Exit {
    let mut schedules = match strata_runtime::schedule::from_config(&l.config.config) {
        Ok(s) => s,
        Err(p) => return fail(&anyhow::anyhow!("schedules: {}", p.join("; "))),
    };
    let name_of = |c: &ScheduleCommand| match c {
        ScheduleCommand::List { .. } => None,
        ScheduleCommand::Show { name }
        | ScheduleCommand::Run { name }
        | ScheduleCommand::Pause { name }
        | ScheduleCommand::Resume { name }
        | ScheduleCommand::History { name, .. } => Some(name.clone()),
    };
    if let ScheduleCommand::History { limit, .. } = &command
        && !(1..=1000).contains(limit)
    {
        eprintln!("error: --limit must be from 1 to 1000");
        return Exit::Usage;
    }
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let work = async {
        let (env, _) = crate::wiring::env(&l.config).await?;
        let (store, _) = crate::storage::open_store(&l.config, env.vault.as_deref()).await?;
        let now = strata_runtime::schedule::Timestamp::now().as_second();
        // Those people asked for in conversation, too.
        for d in store.defs().await? {
            if let Ok(s) = d.schedule() {
                schedules.push(s);
            }
        }
        if let Some(name) = name_of(&command)
            && !schedules.iter().any(|s| s.name == name)
        {
            let known: Vec<&str> = schedules.iter().map(|s| s.name.as_str()).collect();
            return Err(Usage(format!(
                "no schedule `{name}` (schedules: {})",
                known.join(", ")
            ))
            .into());
        }
        let text = match &command {
            ScheduleCommand::List { json } => {
                let rows = strata_runtime::schedule::overview(&schedules, &store.states().await?);
                if *json {
                    serde_json::to_string_pretty(&rows)?
                } else {
                    rows.iter().map(line).collect::<Vec<_>>().join("\n")
                }
            }
            ScheduleCommand::Show { name } => {
                let states = store.states().await?;
                let rows = strata_runtime::schedule::overview(&schedules, &states);
                let row = rows
                    .into_iter()
                    .find(|r| r["name"] == name.as_str())
                    .unwrap_or_default();
                let runs = store.history(name, 5).await?;
                serde_json::to_string_pretty(&json!({"schedule": row, "runs": runs}))?
            }
            ScheduleCommand::Run { name } => {
                strata_runtime::schedule::make_due(store.as_ref(), name, now).await?;
                store.flush().await?;
                format!("{name}: due now (a running `strata serve` starts it within a second)")
            }
            ScheduleCommand::Pause { name } => {
                store.set_paused(name, true).await?;
                store.flush().await?;
                format!("{name}: paused")
            }
            ScheduleCommand::Resume { name } => {
                store.set_paused(name, false).await?;
                store.flush().await?;
                format!("{name}: resumed")
            }
            ScheduleCommand::History { name, limit, json } => {
                let runs = store.history(name, *limit).await?;
                if *json {
                    serde_json::to_string_pretty(&runs)?
                } else if runs.is_empty() {
                    format!("{name}: no runs yet")
                } else {
                    runs.iter()
                        .map(|r| {
                            let due = strata_runtime::schedule::Timestamp::from_second(r.due)
                                .map(|t| t.to_string())
                                .unwrap_or_default();
                            let ms = r.finished_ms.map(|f| f - r.started_ms);
                            format!(
                                "{due}  {:<8} {:>7}  {}  {}",
                                r.status,
                                ms.map_or("-".to_owned(), |m| format!("{m} ms")),
                                r.instance,
                                r.detail.as_deref().unwrap_or("")
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

fn line(r: &Value) -> String {
    let s = |k: &str| r[k].as_str().unwrap_or("-").to_owned();
    let state = if !r["enabled"].as_bool().unwrap_or(true) {
        "off".to_owned()
    } else if r["paused"].as_bool().unwrap_or(false) {
        "paused".to_owned()
    } else {
        "on".to_owned()
    };
    format!(
        "{:<20} {:<7} {:<40} {} {:<18} next {}  last {} {}{}",
        s("name"),
        state,
        s("when"),
        s("kind"),
        s("runs"),
        s("next_run"),
        s("last_run"),
        s("last_status"),
        match r["failures"].as_i64() {
            Some(n) if n > 0 => format!(" ({n} failures in a row)"),
            _ => String::new(),
        }
    )
}
