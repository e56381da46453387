//! An account held under a lease (`cluster.lease_secs`): when several instances share the
//! work, one of them runs the account's gateway; it renews the lease every third of its
//! time and closes the gateway before the lease could run out when it cannot; the others
//! try every third of the lease and take over, fetching what arrived in between. Replies and
//! reactions go out through the REST API from whichever instance runs the turn.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_engine::session::StoreError;
use tokio::sync::watch;
use twilight_gateway::{Shard, ShardId};

use crate::gateway::{AccountCtx, Cursor, run_account};

/// The lease store, who this instance is, and how long a lease lasts.
#[derive(Clone)]
pub struct Lease {
    /// Where leases are kept (PostgreSQL in a cluster).
    pub store: Arc<dyn strata_runtime::hub::Leases>,
    /// This instance (`cluster.instance_id`).
    pub holder: String,
    /// `cluster.lease_secs`.
    pub ttl: Duration,
}

enum Ended {
    Stop,
    Lost,
    Gone,
}

/// Runs the account's gateway whenever this instance holds its lease, until `stop`.
pub(crate) async fn hold(
    ctx: AccountCtx,
    gateway: twilight_gateway::Config,
    lease: Lease,
    mut stop: watch::Receiver<bool>,
) {
    let name = ctx.account.name.clone();
    let account = ctx.account.account.clone();
    let every = lease.ttl / 3;
    loop {
        // Wait for the lease.
        let (grant, taken_at) = loop {
            let asked = Instant::now();
            match lease
                .store
                .acquire(&name, &lease.holder, lease.ttl, None)
                .await
            {
                Ok(Some(g)) => break (g, asked),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(account = %account, error = %e, "Discord lease not checked")
                }
            }
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(every) => {}
            }
        };
        tracing::info!(
            account = %account,
            epoch = grant.epoch,
            from = grant.taken_from.as_deref().unwrap_or("-"),
            "Discord lease taken: this instance runs the account's gateway"
        );
        let resume: Option<Cursor> = grant
            .state
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok());
        let cursor = Arc::new(Mutex::new(resume.clone().unwrap_or_default()));
        let backfill = resume.filter(|c| c.after > 0);
        let (held_tx, held_rx) = watch::channel(false);
        let shard = Shard::with_config(ShardId::ONE, gateway.clone());
        let mut run = tokio::spawn(run_account(
            ctx.clone(),
            shard,
            held_rx,
            Some(cursor.clone()),
            backfill,
            None,
        ));
        // Closed before the database could hand the lease to another.
        let margin = lease.ttl / 3;
        let mut deadline = taken_at + lease.ttl - margin;
        let save = |c: &Arc<Mutex<Cursor>>| {
            serde_json::to_string(&*c.lock().unwrap_or_else(|p| p.into_inner())).ok()
        };
        let ended = loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break Ended::Stop,
                _ = &mut run => break Ended::Gone,
                _ = tokio::time::sleep(every) => {}
            }
            let asked = Instant::now();
            let state = save(&cursor);
            let renewed = tokio::time::timeout(
                every,
                lease
                    .store
                    .acquire(&name, &lease.holder, lease.ttl, state.as_deref()),
            )
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("no answer in time".into())));
            match renewed {
                Ok(Some(_)) => deadline = asked + lease.ttl - margin,
                Ok(None) => break Ended::Lost,
                Err(e) => {
                    tracing::warn!(account = %account, error = %e, "Discord lease not renewed");
                    if Instant::now() >= deadline {
                        break Ended::Lost;
                    }
                }
            }
        };
        let _ = held_tx.send(true);
        if !run.is_finished()
            && tokio::time::timeout(Duration::from_secs(5), &mut run)
                .await
                .is_err()
        {
            run.abort();
        }
        match ended {
            Ended::Lost => {
                tracing::warn!(account = %account, "Discord lease lost: gateway closed; this instance takes it again when it is free");
            }
            Ended::Stop | Ended::Gone => {
                // The resume point for the next holder, then the lease, so one takes over now.
                let state = save(&cursor);
                let _ = lease
                    .store
                    .acquire(&name, &lease.holder, lease.ttl, state.as_deref())
                    .await;
                match lease.store.release(&name, &lease.holder).await {
                    Ok(()) => tracing::info!(account = %account, "Discord lease released"),
                    Err(e) => {
                        tracing::warn!(account = %account, error = %e, "Discord lease not released; another instance takes it when it runs out")
                    }
                }
                return;
            }
        }
    }
}
