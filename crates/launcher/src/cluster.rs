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
    leases: Option<Arc<dyn strata_runtime::hub::Leases>>,
    lease_ttl: std::time::Duration,
    shipper: Option<(
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    )>,
    monitor: tokio::task::JoinHandle<()>,
}

#[cfg(feature = "cluster")]
impl Member {
    /// Stops taking turns; the running ones finish; the audit records they leave are
    /// shipped.
    pub async fn leave(self) {
        self.worker.stop().await;
        self.monitor.abort();
        if let Some((stop, task)) = self.shipper {
            let _ = stop.send(true);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        }
    }

    /// What `GET /api/cluster` shows.
    pub fn view(&self) -> Option<Arc<dyn strata_runtime::turns::ClusterView>> {
        Some(self.cluster.clone())
    }

    /// This member's id (`cluster.instance_id`).
    pub fn instance(&self) -> &str {
        self.cluster.instance()
    }

    /// How the Discord accounts are held: each one's gateway on the member holding its
    /// lease (`cluster.lease_secs`).
    #[cfg(feature = "discord")]
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
        Arc::new(strata_postgres::PgLeases::new(p)) as Arc<dyn strata_runtime::hub::Leases>
    });
    let cluster = strata_cluster::Cluster::connect(
        c,
        url.expose(),
        &cfg.overlay_dir,
        strata_cluster::Shared {
            store,
            members,
            address: Some(address.to_owned()),
            events: wired.pool.clone().map(strata_postgres::ClusterEvents::new),
        },
    )
    .await?;
    let shipper = wired.pool.clone().map(|p| {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let task = ship_events(
            strata_postgres::ClusterEvents::new(p),
            cluster.instance().to_owned(),
            wired.audit.path().to_path_buf(),
            rx,
        );
        (tx, task)
    });
    let monitor = cluster.share_monitor(wired.invoker.clone()).await?;
    wired.manager.set_queue(cluster.clone());
    let worker = cluster.start(wired.manager.clone());
    Ok(Some(Member {
        cluster,
        worker,
        leases,
        lease_ttl: std::time::Duration::from_secs(c.lease_secs),
        shipper,
        monitor,
    }))
}

/// How long the cluster keeps audit records in PostgreSQL (each member's own file keeps
/// them as `security.audit` says).
#[cfg(feature = "cluster")]
const EVENTS_KEPT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Ships the lines this member's audit log gains to the cluster's events every half second
/// (what PostgreSQL does not take is kept and sent again, up to 8 MiB), until `stop` — then
/// once more; drops records older than [`EVENTS_KEPT`] every hour.
#[cfg(feature = "cluster")]
fn ship_events(
    events: strata_postgres::ClusterEvents,
    instance: String,
    path: std::path::PathBuf,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    const BACKLOG: usize = 8 << 20;
    tokio::spawn(async move {
        let mut follower = strata_store::audit_log::Follower::from_end(&path);
        let mut pending = String::new();
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
        let mut pruned: Option<std::time::Instant> = None;
        let mut warned: Option<std::time::Instant> = None;
        loop {
            let last = tokio::select! {
                _ = stop.wait_for(|s| *s) => true,
                _ = tick.tick() => false,
            };
            match follower.read_new(1 << 20) {
                Ok(lines) => pending.push_str(&lines),
                Err(e) => {
                    tracing::warn!(error = %e, path = %path.display(), "audit log not read for the cluster's events")
                }
            }
            if pending.len() > BACKLOG {
                // PostgreSQL has been away for long: keep the newest, say so.
                let cut = pending.len() - BACKLOG;
                let cut = pending[cut..]
                    .find('\n')
                    .map_or(pending.len(), |i| cut + i + 1);
                pending.drain(..cut);
                tracing::warn!(
                    "audit records not shipped to the cluster's events were dropped there (the member's own log keeps them)"
                );
            }
            if !pending.is_empty() {
                match events.ship(&instance, &pending).await {
                    Ok(_) => pending.clear(),
                    Err(e) if warned.is_none_or(|w| w.elapsed().as_secs() >= 60) => {
                        warned = Some(std::time::Instant::now());
                        tracing::warn!(error = %e, "audit records not shipped to the cluster's events yet");
                    }
                    Err(_) => {}
                }
            }
            if pruned.is_none_or(|p| p.elapsed().as_secs() >= 3600) {
                pruned = Some(std::time::Instant::now());
                let before =
                    strata_engine::clock::rfc3339(std::time::SystemTime::now() - EVENTS_KEPT);
                if let Err(e) = events.prune(&before).await {
                    tracing::warn!(error = %e, "old cluster events not pruned");
                }
            }
            if last {
                return;
            }
        }
    })
}

/// Without the `cluster` feature a member cannot be made.
#[cfg(not(feature = "cluster"))]
pub struct Member;

#[cfg(not(feature = "cluster"))]
impl Member {
    /// Nothing to stop.
    pub async fn leave(self) {}

    /// Nothing to show.
    pub fn view(&self) -> Option<Arc<dyn strata_runtime::turns::ClusterView>> {
        None
    }

    /// Never called: no member is made without the feature.
    pub fn instance(&self) -> &str {
        "local"
    }

    /// Every Discord account runs here.
    #[cfg(feature = "discord")]
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
