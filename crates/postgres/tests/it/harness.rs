//! One test body, both backends: [`both!`] makes a `sqlite` and a `postgres` test of an
//! `async fn(Kind)`. Each PostgreSQL test gets a schema of its own, dropped at the end.

use std::sync::Arc;

use strata_engine::config::{Config, PostgresConfig};
use strata_engine::memory::Embedder;
use strata_memory::MemoryMaintenance;
use strata_runtime::store::StateStore;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// Runs `$name(Kind)` once per backend.
#[macro_export]
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($crate::harness::Kind::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name($crate::harness::Kind::Postgres).await
            }
        }
    };
}

/// Where one test's state lives.
pub struct Harness {
    pub kind: Kind,
    pub dir: tempfile::TempDir,
    pub url: String,
    pub schema: String,
}

/// Memory options.
#[derive(Default, Clone)]
pub struct MemOpts {
    pub clock: Option<Arc<dyn Fn() -> i64 + Send + Sync>>,
    pub embedder: Option<Arc<dyn Embedder>>,
}

impl Harness {
    /// `None` when the backend is PostgreSQL and no server answers (outside CI).
    pub fn new(kind: Kind) -> Option<Harness> {
        let url = match kind {
            Kind::Sqlite => String::new(),
            Kind::Postgres => strata_test_support::postgres_url()?,
        };
        Some(Harness {
            kind,
            dir: tempfile::tempdir().expect("tmp"),
            url,
            schema: strata_test_support::unique_schema(),
        })
    }

    pub fn pg_config(&self) -> PostgresConfig {
        PostgresConfig {
            url: Some(self.url.clone()),
            pool_size: 4,
            schema: self.schema.clone(),
            ..PostgresConfig::default()
        }
    }

    pub async fn db(&self) -> Arc<strata_postgres::Db> {
        Arc::new(
            strata_postgres::Db::connect(&self.url, &self.pg_config())
                .await
                .expect("connect"),
        )
    }

    /// Opens the store (again: a second call is a restart).
    pub async fn store(&self) -> Arc<dyn StateStore> {
        match self.kind {
            Kind::Sqlite => Arc::new(
                strata_store::SqliteStore::open(&self.dir.path().join("data/strata.db"))
                    .expect("open"),
            ),
            Kind::Postgres => Arc::new(strata_postgres::PgStore::new(self.db().await)),
        }
    }

    /// Opens memory (again: a second call is a restart).
    pub async fn memory(&self, cfg: &Config, o: MemOpts) -> Arc<dyn MemoryMaintenance> {
        match self.kind {
            Kind::Sqlite => {
                let mut m =
                    strata_memory::SqliteMemory::open(&self.dir.path().join("memory.db"), cfg)
                        .expect("open");
                if let Some(c) = o.clock {
                    m = m.with_clock(c);
                }
                if let Some(e) = o.embedder {
                    m = m.with_embedder(e);
                }
                Arc::new(m)
            }
            Kind::Postgres => {
                let mut m = strata_postgres::PgMemory::open(self.db().await, cfg)
                    .await
                    .expect("open");
                if let Some(c) = o.clock {
                    m = m.with_clock(c);
                }
                if let Some(e) = o.embedder {
                    m = m.with_embedder(e);
                }
                Arc::new(m)
            }
        }
    }

    /// The rows of `table` matching `filter` (an SQL condition written for both backends).
    pub async fn count(&self, table: &str, filter: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE {filter}");
        match self.kind {
            Kind::Sqlite => {
                let file = if table.starts_with("memor") {
                    "memory.db"
                } else {
                    "data/strata.db"
                };
                let c = rusqlite::Connection::open(self.dir.path().join(file)).expect("raw");
                c.query_row(&sql, [], |r| r.get(0)).expect("count")
            }
            Kind::Postgres => {
                let c = raw(&self.url).await;
                c.batch_execute(&format!("SET search_path TO {}", self.schema))
                    .await
                    .expect("path");
                c.query_one(&sql, &[]).await.expect("count").get(0)
            }
        }
    }
}

/// A plain connection to the test server (no schema set).
pub async fn raw(url: &str) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("raw connection");
    tokio::spawn(conn);
    c
}

impl Drop for Harness {
    fn drop(&mut self) {
        if self.kind != Kind::Postgres {
            return;
        }
        let (url, schema) = (self.url.clone(), self.schema.clone());
        // Its own thread and runtime: Drop may run inside the test's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let c = raw(&url).await;
                let _ = c
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .await;
            });
        })
        .join();
    }
}
