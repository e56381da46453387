//! Joining the cluster (`cluster.enabled`, the `cluster` feature): the NATS connection, the
//! manager's turns handed to the work queue, and the worker that takes turns here.

use std::sync::Arc;

use strata_engine::config::LoadedConfig;
use strata_engine::secret::Vault;

use crate::wiring::Wired;

/// This instance as a member: what `serve` stops on shutdown.
#[cfg(feature = "cluster")]
pub struct Member {
    /// The membership.
    pub cluster: Arc<strata_cluster::Cluster>,
    worker: strata_cluster::Worker,
    leases: Option<Arc<dyn strata_engine::connector::Leases>>,
    lease_ttl: std::time::Duration,
}

#[cfg(feature = "cluster")]
impl Member {
    /// Stops taking turns; the running ones finish.
    pub async fn leave(self) {
        self.worker.stop().await;
    }

    /// What `GET /api/cluster` shows.
    pub fn view(&self) -> Option<Arc<dyn strata_engine::turns::ClusterView>> {
        Some(self.cluster.clone())
    }

    /// How the Discord accounts are held: each one's gateway on the member holding its
    /// lease (`cluster.lease_secs`).
    pub fn discord_lease(&self) -> Option<strata_discord::Lease> {
        Some(strata_discord::Lease {
            store: self.leases.clone()?,
            holder: self.cluster.instance().to_owned(),
            ttl: self.lease_ttl,
        })
    }
}

/// Joins when `cluster.enabled`; `None` otherwise. `address` is this instance's control
/// API, as the other members and `cluster status` show it.
#[cfg(feature = "cluster")]
pub async fn join(
    cfg: &LoadedConfig,
    wired: &Wired,
    vault: Option<&dyn Vault>,
    address: &str,
) -> anyhow::Result<Option<Member>> {
    let c = &cfg.config.cluster;
    if !c.enabled {
        return Ok(None);
    }
    let problems = c.problems(&cfg.config.storage);
    if !problems.is_empty() {
        anyhow::bail!("cannot start as a cluster member: {}", problems.join("; "));
    }
    let Some(url) = &c.nats_url else {
        anyhow::bail!("`cluster.nats_url` is not set");
    };
    let url = strata_engine::secret::resolve_ref(url, vault, "cluster.nats_url")
        .map_err(|e| anyhow::anyhow!(e))?;
    let store: Arc<dyn strata_engine::session::SessionStore> = wired.store.clone();
    let members = wired.pool.clone().map(strata_postgres::Members::new);
    let leases = wired.pool.clone().map(|p| {
        Arc::new(strata_postgres::PgLeases::new(p)) as Arc<dyn strata_engine::connector::Leases>
    });
    let cluster = strata_cluster::Cluster::connect(
        c,
        url.expose(),
        &cfg.overlay_dir,
        strata_cluster::Shared {
            store,
            members,
            address: Some(address.to_owned()),
        },
    )
    .await?;
    wired.manager.set_queue(cluster.clone());
    let worker = cluster.start(wired.manager.clone());
    Ok(Some(Member {
        cluster,
        worker,
        leases,
        lease_ttl: std::time::Duration::from_secs(c.lease_secs),
    }))
}

/// Without the `cluster` feature a member cannot be made.
#[cfg(not(feature = "cluster"))]
pub struct Member;

#[cfg(not(feature = "cluster"))]
impl Member {
    /// Nothing to stop.
    pub async fn leave(self) {}

    /// Nothing to show.
    pub fn view(&self) -> Option<Arc<dyn strata_engine::turns::ClusterView>> {
        None
    }

    /// Every Discord account runs here.
    pub fn discord_lease(&self) -> Option<strata_discord::Lease> {
        None
    }
}

/// Without the `cluster` feature, `cluster.enabled` is refused.
#[cfg(not(feature = "cluster"))]
pub async fn join(
    cfg: &LoadedConfig,
    _: &Wired,
    _: Option<&dyn Vault>,
    _: &str,
) -> anyhow::Result<Option<Member>> {
    if cfg.config.cluster.enabled {
        anyhow::bail!(
            "`cluster.enabled` needs a binary built with the launcher's `cluster` feature"
        );
    }
    Ok(None)
}
