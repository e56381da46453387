//! `strata cluster status`: the members as the database knows them (each one's heartbeat
//! row), so it works from any machine with the configuration, member or not.

use serde_json::Value;

use super::context::*;
use crate::Exit;
use crate::cli::ClusterCommand;

pub(crate) fn run(l: &Context, command: ClusterCommand) -> Exit {
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    match command {
        ClusterCommand::Status { json } => match rt.block_on(status(l)) {
            Ok(v) if json => out(&serde_json::to_string_pretty(&v).unwrap_or_default()),
            Ok(v) => out(&status_text(&v)),
            Err(e) => fail(&e),
        },
    }
}

#[cfg(feature = "cluster")]
async fn status(l: &Context) -> anyhow::Result<Value> {
    let c = &l.config.config;
    if c.storage.backend != strata_engine::config::StorageBackend::Postgres {
        anyhow::bail!(
            "no cluster here: its members are kept in PostgreSQL, and `storage.backend` is `sqlite`"
        );
    }
    let (env, _) = crate::wiring::env(&l.config).await?;
    let (_, pool) = crate::storage::open_store(&l.config, env.vault.as_deref()).await?;
    let Some(pool) = pool else {
        anyhow::bail!("the store opened no PostgreSQL pool");
    };
    let rows = strata_postgres::Members::new(pool).list().await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let newest = rows.iter().max_by_key(|r| r.heartbeat_at);
    Ok(serde_json::json!({
        "enabled": c.cluster.enabled,
        "stream": c.cluster.stream,
        "stream_depth": newest.and_then(|r| r.stream_depth),
        "redelivered": rows.iter().map(|r| r.redelivered).sum::<i64>(),
        "instances": rows.iter().map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["alive"] = serde_json::json!(now - r.heartbeat_at <= 15);
            v
        }).collect::<Vec<_>>(),
    }))
}

#[cfg(not(feature = "cluster"))]
async fn status(_: &Context) -> anyhow::Result<Value> {
    anyhow::bail!("this binary was built without the launcher's `cluster` feature")
}

fn status_text(v: &Value) -> String {
    let mut lines = vec![format!(
        "stream {}: {} waiting, {} taken again after an instance went away",
        v["stream"].as_str().unwrap_or("?"),
        v["stream_depth"]
            .as_i64()
            .map_or("?".to_owned(), |d| d.to_string()),
        v["redelivered"]
    )];
    let rows = v["instances"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        lines.push("no instance has reported (is any running with `cluster.enabled`?)".into());
    }
    for r in rows {
        lines.push(format!(
            "{:<28} {:<5} {:<24} v{} started {} heartbeat {} in flight {} run {} leases {}",
            r["id"].as_str().unwrap_or("?"),
            if r["alive"] == true { "up" } else { "GONE" },
            r["address"].as_str().unwrap_or("-"),
            r["version"].as_str().unwrap_or("?"),
            r["started_at"],
            r["heartbeat_at"],
            r["in_flight"],
            r["turns_run"],
            r["leases"]
                .as_array()
                .map(|l| l
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "-".into()),
        ));
    }
    lines.join("\n")
}
