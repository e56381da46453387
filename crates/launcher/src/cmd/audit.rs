//! `strata audit verify` and `strata events`.

use std::io::Write;
use std::path::PathBuf;

use super::context::*;
use crate::Exit;

pub(crate) fn audit_verify(l: &Context, file: Option<PathBuf>) -> Exit {
    let path = file.unwrap_or_else(|| audit_path(l));
    match strata_store::audit_log::verify_all(&path) {
        Ok(Ok(r)) => {
            let note = if r.starts_mid_chain {
                " (the oldest kept file continues a chain whose start was rotated away)"
            } else {
                ""
            };
            out(&format!(
                "ok: {} records in {} file(s) ending at {}, chain intact{note}",
                r.records,
                r.files.len(),
                path.display()
            ))
        }
        Ok(Err((f, b))) => {
            println!("broken at line {} of {}: {}", b.line, f.display(), b.reason);
            Exit::Failure
        }
        Err(e) => fail(&anyhow::anyhow!("cannot read {}: {e}", path.display())),
    }
}

pub(crate) fn events(l: &Context, limit: usize, follow: bool) -> Exit {
    if !(1..=1000).contains(&limit) {
        eprintln!("error: --limit must be from 1 to 1000");
        return Exit::Usage;
    }
    // A cluster member's configuration: every member's records, from PostgreSQL.
    if l.config.config.cluster.enabled {
        return cluster_events(l, limit, follow);
    }
    let path = audit_path(l);
    let records = match strata_store::audit_log::tail(&path, limit) {
        Ok(r) => r,
        Err(e) => return fail(&anyhow::anyhow!("cannot read {}: {e}", path.display())),
    };
    for r in &records {
        println!("{r}");
    }
    if !follow {
        return Exit::Ok;
    }
    // Follow: print lines appended after what was shown (rotation-safe: restart on shrink).
    let mut follower = strata_store::audit_log::Follower::from_end(&path);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let Ok(lines) = follower.read_new(u64::MAX) else {
            continue;
        };
        if lines.is_empty() {
            continue;
        }
        let mut out = std::io::stdout().lock();
        if write!(out, "{lines}").and_then(|()| out.flush()).is_err() {
            return Exit::Ok; // the reader went away
        }
    }
}

/// `events` with `cluster.enabled`: the records every member shipped to PostgreSQL, each
/// with its `instance`; `--follow` prints those shipped since, as they come.
#[cfg(feature = "cluster")]
fn cluster_events(l: &Context, limit: usize, follow: bool) -> Exit {
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let run = async {
        let (env, _) = crate::wiring::env(&l.config).await?;
        let (_, pool) = crate::storage::open_store(&l.config, env.vault.as_deref()).await?;
        let Some(pool) = pool else {
            anyhow::bail!("the cluster's events are kept in PostgreSQL, and no pool was opened");
        };
        let events = strata_postgres::ClusterEvents::new(pool);
        let (records, mut pos) = events.tail(limit as i64).await?;
        let print = |records: &[serde_json::Value]| {
            let mut out = std::io::stdout().lock();
            records
                .iter()
                .try_for_each(|r| writeln!(out, "{r}"))
                .and_then(|()| out.flush())
        };
        if print(&records).is_err() || !follow {
            return Ok(());
        }
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let (records, next) = events.after(pos, 1000).await?;
            pos = next;
            if print(&records).is_err() {
                return Ok(()); // the reader went away
            }
        }
    };
    match rt.block_on(run) {
        Ok(()) => Exit::Ok,
        Err(e) => fail(&e),
    }
}

/// Without the `cluster` feature there are no cluster events to read.
#[cfg(not(feature = "cluster"))]
fn cluster_events(_: &Context, _: usize, _: bool) -> Exit {
    fail(&anyhow::anyhow!(
        "this binary was built without the launcher's `cluster` feature"
    ))
}
