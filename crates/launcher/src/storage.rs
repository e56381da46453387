//! Opening the configured state store and memory: SQLite files under the data dir, or
//! PostgreSQL (`storage.backend: postgres`, `memory.backend: postgres`; the `postgres`
//! feature). Memory shares the store's pool unless `memory.postgres.url` names another
//! server.

use std::sync::Arc;

use anyhow::Context as _;
use strata_engine::config::{LoadedConfig, MemoryBackendKind, StorageBackend};
use strata_engine::secret::Vault;
use strata_runtime::store::StateStore;

/// The PostgreSQL pool shared by the store and memory of one process.
#[cfg(feature = "postgres")]
pub type Shared = Option<Arc<strata_postgres::Db>>;
/// Without the `postgres` feature there is nothing to share.
#[cfg(not(feature = "postgres"))]
pub type Shared = Option<std::convert::Infallible>;

/// The state store `storage.*` asks for, and the pool it opened (for memory to share).
pub async fn open_store(
    cfg: &LoadedConfig,
    vault: Option<&dyn Vault>,
) -> anyhow::Result<(Arc<dyn StateStore>, Shared)> {
    match cfg.config.storage.backend {
        StorageBackend::Sqlite => {
            let path = cfg.data_dir.join(&cfg.config.sessions.database);
            let store = strata_store::SqliteStore::open(&path)?;
            Ok((Arc::new(store), None))
        }
        StorageBackend::Postgres => postgres_store(cfg, vault).await,
    }
}

#[cfg(feature = "postgres")]
async fn postgres_store(
    cfg: &LoadedConfig,
    vault: Option<&dyn Vault>,
) -> anyhow::Result<(Arc<dyn StateStore>, Shared)> {
    let db = connect(cfg, &cfg.config.storage.postgres, "storage.postgres", vault).await?;
    Ok((
        Arc::new(strata_postgres::PgStore::new(db.clone())),
        Some(db),
    ))
}

#[cfg(not(feature = "postgres"))]
async fn postgres_store(
    _: &LoadedConfig,
    _: Option<&dyn Vault>,
) -> anyhow::Result<(Arc<dyn StateStore>, Shared)> {
    anyhow::bail!(
        "`storage.backend: postgres` needs a binary built with the launcher's `postgres` feature"
    )
}

/// Connects to the server `pg` names (its `url` resolved from `vault:`/`env:`, its
/// `ca_file` taken from the overlay directory).
#[cfg(feature = "postgres")]
pub async fn connect(
    cfg: &LoadedConfig,
    pg: &strata_engine::config::PostgresConfig,
    key: &str,
    vault: Option<&dyn Vault>,
) -> anyhow::Result<Arc<strata_postgres::Db>> {
    let Some(url) = &pg.url else {
        anyhow::bail!(
            "`{key}.url` is not set: give the server as postgres://user:password@host:5432/database \
             (or a `vault:`/`env:` reference to one)"
        );
    };
    let url = strata_engine::secret::resolve_ref(url, vault, &format!("{key}.url"))
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut pg = pg.clone();
    pg.ca_file = pg.ca_file.map(|f| cfg.overlay_dir.join(f));
    Ok(Arc::new(
        strata_postgres::Db::connect(url.expose(), &pg).await?,
    ))
}

/// The memory backend `memory.*` asks for; `shared` is the store's pool, used when
/// `memory.postgres.url` is unset.
pub async fn open_memory(
    cfg: &LoadedConfig,
    vault: Option<&dyn Vault>,
    shared: &Shared,
) -> anyhow::Result<Option<strata_memory::Backend>> {
    let hint = "(`memory.*` in config; `memory.backend: none` turns it off)";
    if cfg.config.memory.backend != MemoryBackendKind::Postgres {
        return strata_memory::build(&cfg.config, &cfg.data_dir, vault)
            .map_err(|e| anyhow::anyhow!("{e} {hint}"));
    }
    postgres_memory(cfg, vault, shared)
        .await
        .with_context(|| format!("memory on PostgreSQL {hint}"))
}

#[cfg(feature = "postgres")]
async fn postgres_memory(
    cfg: &LoadedConfig,
    vault: Option<&dyn Vault>,
    shared: &Shared,
) -> anyhow::Result<Option<strata_memory::Backend>> {
    let own = cfg
        .config
        .memory
        .postgres
        .as_ref()
        .filter(|p| p.url.is_some());
    let db = match (own, shared) {
        (Some(pg), _) => connect(cfg, pg, "memory.postgres", vault).await?,
        (None, Some(db)) => db.clone(),
        (None, None) => match &cfg.config.storage.postgres.url {
            Some(_) => {
                connect(cfg, &cfg.config.storage.postgres, "storage.postgres", vault).await?
            }
            None => anyhow::bail!(
                "`memory.backend: postgres` needs `memory.postgres.url` or `storage.postgres.url`"
            ),
        },
    };
    let mut mem = strata_postgres::PgMemory::open(db, &cfg.config).await?;
    if let Some(e) = strata_memory::embedder(&cfg.config, vault)? {
        mem = mem.with_embedder(e);
    }
    Ok(Some(strata_memory::Backend::Kept(Arc::new(mem))))
}

#[cfg(not(feature = "postgres"))]
async fn postgres_memory(
    _: &LoadedConfig,
    _: Option<&dyn Vault>,
    _: &Shared,
) -> anyhow::Result<Option<strata_memory::Backend>> {
    anyhow::bail!(
        "`memory.backend: postgres` needs a binary built with the launcher's `postgres` feature"
    )
}
