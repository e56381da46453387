//! `strata storage status | migrate`.

use serde_json::{Value, json};

use super::context::*;
use crate::Exit;
use crate::cli::StorageCommand;

pub(crate) fn run(l: &Context, command: StorageCommand) -> Exit {
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    match command {
        StorageCommand::Status { json } => match rt.block_on(status(l)) {
            Ok(v) if json => out(&serde_json::to_string_pretty(&v).unwrap_or_default()),
            Ok(v) => out(&status_text(&v)),
            Err(e) => fail(&e),
        },
        StorageCommand::Migrate {
            from,
            to,
            dry_run,
            json,
        } => {
            if (from.as_str(), to.as_str()) != ("sqlite", "postgres") {
                eprintln!(
                    "error: `--from {from} --to {to}`: only `--from sqlite --to postgres` is supported"
                );
                return Exit::Usage;
            }
            // Its lines on a terminal show it moving; with --json, or piped, a spinner does.
            let progress =
                (json || !std::io::IsTerminal::is_terminal(&std::io::stdout())).then(|| {
                    Progress::start(if dry_run {
                        "counting what would be copied into PostgreSQL"
                    } else {
                        "copying into PostgreSQL"
                    })
                });
            let done = rt.block_on(migrate(l, dry_run, json));
            drop(progress);
            match done {
                Ok((v, ok)) => {
                    if json {
                        let _ = out(&serde_json::to_string_pretty(&v).unwrap_or_default());
                    }
                    if ok { Exit::Ok } else { Exit::Failure }
                }
                Err(e) => fail(&e),
            }
        }
    }
}

async fn status(l: &Context) -> anyhow::Result<Value> {
    let (env, memory) = crate::wiring::env(&l.config).await?;
    let store = open_store(l, &env).await?;
    let st = store.status().await?;
    let mut v = serde_json::to_value(&st)?;
    let rows: serde_json::Map<String, Value> =
        st.rows.iter().map(|(t, n)| (t.clone(), json!(n))).collect();
    v["rows"] = Value::Object(rows);
    v["health"] = serde_json::to_value(store.health().await)?;
    if let Some(strata_memory::Backend::Kept(m)) = &memory {
        let s = m.stats().await?;
        v["memory"] =
            json!({"location": m.location(), "memories": s.total, "with_vectors": s.with_vectors});
    }
    Ok(v)
}

fn status_text(v: &Value) -> String {
    let mut lines = vec![
        format!("backend   {}", v["backend"].as_str().unwrap_or("?")),
        format!("location  {}", v["location"].as_str().unwrap_or("?")),
        format!(
            "schema    version {} (this binary knows {})",
            v["schema_version"], v["known_version"]
        ),
        format!(
            "health    {}{}",
            v["health"]["state"].as_str().unwrap_or("?"),
            v["health"]["reason"]
                .as_str()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
    ];
    if let Some(p) = v["pool"].as_object() {
        lines.push(format!(
            "pool      {} open of {} ({} idle, {} waiting)",
            p["size"], p["max_size"], p["available"], p["waiting"]
        ));
    }
    lines.push("rows".into());
    if let Some(rows) = v["rows"].as_object() {
        for (t, n) in rows {
            lines.push(format!("  {t:<12} {n}"));
        }
    }
    if let Some(m) = v["memory"].as_object() {
        lines.push(format!(
            "memory    {} memories ({} with vectors) in {}",
            m["memories"],
            m["with_vectors"],
            m["location"].as_str().unwrap_or("?")
        ));
    }
    lines.join("\n")
}

/// One table's figures.
#[cfg(feature = "postgres")]
#[derive(Default)]
struct Count {
    read: u64,
    copied: u64,
    target: u64,
}

#[cfg(not(feature = "postgres"))]
async fn migrate(_: &Context, _: bool, _: bool) -> anyhow::Result<(Value, bool)> {
    anyhow::bail!("this binary was built without the launcher's `postgres` feature")
}

#[cfg(feature = "postgres")]
async fn migrate(l: &Context, dry_run: bool, json: bool) -> anyhow::Result<(Value, bool)> {
    use strata_memory::MemoryMaintenance;
    use strata_postgres::{PgMemory, PgStore};

    const PAGE: usize = 500;
    let cfg = &l.config;
    let env = crate::wiring::env_without_memory(cfg)?;
    let vault = env.vault.as_deref();
    let src_path = cfg.data_dir.join(&cfg.config.sessions.database);
    if !src_path.exists() {
        anyhow::bail!(
            "no SQLite store at {}: nothing to migrate (is --data-dir right?)",
            src_path.display()
        );
    }
    let src = strata_store::SqliteStore::open(&src_path)?;
    let mem_path = cfg.data_dir.join(&cfg.config.memory.database);
    let src_mem = if mem_path.exists() {
        Some(strata_memory::SqliteMemory::open(&mem_path, &cfg.config)?)
    } else {
        None
    };
    let db = crate::storage::connect(cfg, &cfg.config.storage.postgres, "storage.postgres", vault)
        .await?;
    let dst = PgStore::new(db.clone());
    let mem_db = match cfg
        .config
        .memory
        .postgres
        .as_ref()
        .filter(|p| p.url.is_some())
    {
        Some(pg) => crate::storage::connect(cfg, pg, "memory.postgres", vault).await?,
        None => db.clone(),
    };
    let dst_mem = PgMemory::open(mem_db, &cfg.config).await?;
    let say = |line: String| {
        if !json {
            println!("{line}");
        }
    };
    say(format!(
        "from {} to {}{}",
        src_path.display(),
        strata_runtime::store::StateStore::location(&dst),
        if dry_run {
            " (dry run: nothing is written)"
        } else {
            ""
        }
    ));
    let mut counts: Vec<(&str, Count)> = Vec::new();

    // Sessions and their turns.
    let (mut s, mut t) = (Count::default(), Count::default());
    let mut after = 0;
    loop {
        let (rows, last) = src.dump_sessions(after, PAGE).await?;
        let Some(last) = last else { break };
        after = last;
        s.read += rows.len() as u64;
        t.read += rows.iter().map(|r| r.turns.len() as u64).sum::<u64>();
        if !dry_run {
            let (ns, nt) = dst.restore_sessions(&rows).await?;
            s.copied += ns;
            t.copied += nt;
        }
    }
    counts.push(("sessions", s));
    counts.push(("turns", t));
    // The tool log.
    let mut c = Count::default();
    let mut after = 0;
    loop {
        let rows = src.dump_tool_log(after, PAGE).await?;
        let Some(last) = rows.last() else { break };
        after = last.source_id;
        c.read += rows.len() as u64;
        if !dry_run {
            c.copied += dst.restore_tool_log(&rows).await?;
        }
    }
    counts.push(("tool_log", c));
    // Approvals.
    let mut c = Count::default();
    let mut after = 0;
    loop {
        let (rows, last) = src.dump_approvals(after, PAGE).await?;
        let Some(last) = last else { break };
        after = last;
        c.read += rows.len() as u64;
        if !dry_run {
            c.copied += dst.restore_approvals(&rows).await?;
        }
    }
    counts.push(("approvals", c));
    // Rate-limit events.
    let mut c = Count::default();
    let mut after = 0;
    loop {
        let rows = src.dump_rate_events(after, PAGE).await?;
        let Some(last) = rows.last() else { break };
        after = last.source_id;
        c.read += rows.len() as u64;
        if !dry_run {
            c.copied += dst.restore_rate_events(&rows).await?;
        }
    }
    counts.push(("rate_events", c));
    // Model calls' usage.
    let mut c = Count::default();
    let mut after = 0;
    loop {
        let rows = src.dump_model_calls(after, PAGE).await?;
        let Some(last) = rows.last() else { break };
        after = last.source_id;
        c.read += rows.len() as u64;
        if !dry_run {
            c.copied += dst.restore_model_calls(&rows).await?;
        }
    }
    counts.push(("model_calls", c));
    // Goals, each with its whole log.
    let (mut g, mut ge) = (Count::default(), Count::default());
    {
        use strata_runtime::goal::GoalStore;
        for goal in src.goals().await? {
            let events = src.goal_events(&goal.id, 0, usize::MAX).await?;
            g.read += 1;
            ge.read += events.len() as u64;
            if !dry_run && dst.restore_goal(&goal, &events).await? {
                g.copied += 1;
                ge.copied += events.len() as u64;
            }
        }
    }
    counts.push(("goals", g));
    counts.push(("goal_events", ge));
    // Turn journals, each with its steps: a turn still unfinished in the source arrives
    // unfinished, and the next `serve` on the target resumes it (docs/DURABILITY.md).
    let (mut j, mut js) = (Count::default(), Count::default());
    {
        use strata_runtime::journal::{JournalStore, TurnFilter};
        let all = TurnFilter {
            unfinished: false,
            limit: usize::MAX,
        };
        for listed in src.journal_turns(all).await? {
            let Some((turn, steps)) = src.journal_turn(&listed.turn_id).await? else {
                continue;
            };
            j.read += 1;
            js.read += steps.len() as u64;
            if !dry_run && dst.journal_begin(&turn).await? {
                dst.journal_append(&turn.turn_id, &steps).await?;
                if let (Some(at), Some(outcome)) = (turn.ended_ms, turn.outcome.as_deref()) {
                    dst.journal_end(&turn.turn_id, at, outcome).await?;
                }
                j.copied += 1;
                js.copied += steps.len() as u64;
            }
        }
    }
    counts.push(("journal_turns", j));
    counts.push(("journal_steps", js));
    // Memories (with their vectors) and their change log.
    let (mut m, mut ml) = (Count::default(), Count::default());
    if let Some(sm) = &src_mem {
        let mut after = 0;
        loop {
            let (rows, last) = sm.dump(after, PAGE).await?;
            let Some(last) = last else { break };
            after = last;
            m.read += rows.len() as u64;
            if !dry_run {
                m.copied += dst_mem.restore(&rows).await?;
            }
        }
        let mut after = 0;
        loop {
            let rows = sm.dump_log(after, PAGE).await?;
            let Some(last) = rows.last() else { break };
            after = last.seq;
            ml.read += rows.len() as u64;
            if !dry_run {
                ml.copied += dst_mem.restore_log(&rows).await?;
            }
        }
    }
    counts.push(("memories", m));
    counts.push(("memory_log", ml));

    // Verify: every table holds at least what the source holds.
    let status = strata_runtime::store::StateStore::status(&dst).await?;
    let mem_stats = dst_mem.stats().await?;
    let mem_log_rows = status
        .rows
        .iter()
        .find(|(t, _)| t == "memory_log")
        .map_or(0, |(_, n)| *n);
    let mut ok = true;
    let mut tables = serde_json::Map::new();
    for (name, c) in &mut counts {
        c.target = match *name {
            "memories" => mem_stats.total,
            "memory_log" => mem_log_rows,
            _ => status
                .rows
                .iter()
                .find(|(t, _)| t == name)
                .map_or(0, |(_, n)| *n),
        };
        let verified = dry_run || c.target >= c.read;
        ok &= verified;
        say(format!(
            "  {name:<13} {:>8} read  {:>8} copied  {:>8} already there  {:>8} in target{}",
            c.read,
            c.copied,
            if dry_run {
                0
            } else {
                c.read - c.copied.min(c.read)
            },
            c.target,
            if verified { "" } else { "  MISSING ROWS" }
        ));
        tables.insert(
            (*name).to_owned(),
            json!({"read": c.read, "copied": c.copied, "target": c.target, "verified": verified}),
        );
    }
    if !json {
        if !ok {
            eprintln!(
                "error: the target holds fewer rows than the source; see the lines marked MISSING ROWS"
            );
        } else if !dry_run {
            println!(
                "verified: every table in the target holds at least the source's rows; set `storage.backend: postgres` (and `memory.backend: postgres`) to use it"
            );
        }
    }
    Ok((
        json!({"dry_run": dry_run, "tables": tables, "verified": ok}),
        ok,
    ))
}
