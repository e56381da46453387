//! The connection pool: where it points (never with the password), each connection's
//! settings, and the backoff that keeps a dead server from being hammered by every call.

use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::{Client, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use strata_engine::config::PostgresConfig;
use strata_engine::session::StoreError;
use strata_runtime::store::PoolStatus;

/// Opening the database failed.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The settings are wrong.
    #[error("{0}")]
    Config(String),
    /// The server did not answer or refused.
    #[error(
        "PostgreSQL at {target} is unreachable: {reason} — check that the server runs, that \
         `storage.postgres.url` names its host and port, and that the user may connect"
    )]
    Unreachable {
        /// `host:port/database`.
        target: String,
        /// Why.
        reason: String,
    },
    /// The database's schema is newer than this binary.
    #[error(
        "PostgreSQL at {target}, schema `{schema}`, is at version {found}, newer than this \
         binary's {known}: upgrade strata (an older binary must not write a newer schema)"
    )]
    TooNew {
        /// `host:port/database`.
        target: String,
        /// The schema.
        schema: String,
        /// Its version.
        found: i64,
        /// Ours.
        known: i64,
    },
    /// A migration failed.
    #[error("PostgreSQL at {target}: migrating schema `{schema}` failed: {reason}")]
    Migration {
        /// `host:port/database`.
        target: String,
        /// The schema.
        schema: String,
        /// Why.
        reason: String,
    },
}

/// Backoff after a failed connection: calls fail at once, with the last error, until it ends.
#[derive(Default)]
struct Backoff {
    state: Mutex<Option<(Instant, Duration, String)>>,
}

const FIRST_DELAY: Duration = Duration::from_millis(200);
const MAX_DELAY: Duration = Duration::from_secs(5);

impl Backoff {
    fn blocked(&self) -> Option<(Duration, String)> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (until, _, why) = s.as_ref()?;
        let left = until.checked_duration_since(Instant::now())?;
        Some((left, why.clone()))
    }

    fn failed(&self, why: String) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let delay = match s.as_ref() {
            Some((_, d, _)) => (*d * 2).min(MAX_DELAY),
            None => FIRST_DELAY,
        };
        *s = Some((Instant::now() + delay, delay, why));
    }

    fn ok(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.take().is_some() {
            tracing::info!("PostgreSQL answers again");
        }
    }
}

/// A pool of connections to one database and schema.
pub struct Db {
    pool: Pool,
    target: String,
    schema: String,
    backoff: Backoff,
}

/// Whether `schema` may be used as an identifier as it is.
fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && schema.len() <= 63
}

impl Db {
    /// Connects to `url` (already resolved from `vault:`/`env:`) with `cfg`'s pool size,
    /// schema, timeouts and TLS (the URL's `sslmode`, `cfg.ca_file` read as given — the
    /// caller makes it absolute), checks the server answers, and applies pending migrations.
    pub async fn connect(url: &str, cfg: &PostgresConfig) -> Result<Db, PgError> {
        if !valid_schema(&cfg.schema) {
            return Err(PgError::Config(format!(
                "`storage.postgres.schema` `{}` must be lower-case letters, digits and `_`, \
                 starting with a letter or `_` (at most 63)",
                cfg.schema
            )));
        }
        let (url, verify) = crate::tls::split_sslmode(url);
        let ca = match &cfg.ca_file {
            Some(p) => Some(std::fs::read(p).map_err(|e| {
                PgError::Config(format!("`storage.postgres.ca_file` {}: {e}", p.display()))
            })?),
            None => None,
        };
        let tls = crate::tls::connector(verify, ca.as_deref()).map_err(PgError::Config)?;
        // tokio-postgres's parse errors do not repeat the string, so the password stays out.
        let mut pg = tokio_postgres::Config::from_str(&url).map_err(|e| {
            PgError::Config(format!(
                "`storage.postgres.url` is not a PostgreSQL URL (postgres://user:password@host:port/database): {e}"
            ))
        })?;
        let timeout = Duration::from_secs(cfg.connect_timeout_secs.max(1));
        pg.connect_timeout(timeout);
        pg.application_name("strata");
        pg.options(format!(
            "-c search_path={} -c statement_timeout={}",
            cfg.schema,
            cfg.statement_timeout_secs.max(1) * 1000
        ));
        let target = describe(&pg);
        let mgr = Manager::from_config(
            pg,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(cfg.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .build()
            .map_err(|e| PgError::Config(format!("PostgreSQL pool: {e}")))?;
        let db = Db {
            pool,
            target,
            schema: cfg.schema.clone(),
            backoff: Backoff::default(),
        };
        let mut client = db.pool.get().await.map_err(|e| PgError::Unreachable {
            target: db.target.clone(),
            reason: pool_error(&e),
        })?;
        crate::migrate::run(&mut client, &db.target, &db.schema).await?;
        Ok(db)
    }

    /// `host:port/database` (never the password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The schema.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A connection, or an error naming the server (at once while backing off).
    pub async fn client(&self) -> Result<Client, StoreError> {
        if let Some((left, why)) = self.backoff.blocked() {
            return Err(StoreError::Unavailable(format!(
                "PostgreSQL at {} is unavailable ({why}); retrying in {} ms",
                self.target,
                left.as_millis()
            )));
        }
        match self.pool.get().await {
            Ok(c) => {
                self.backoff.ok();
                Ok(c)
            }
            Err(e) => {
                let why = pool_error(&e);
                tracing::warn!(target = %self.target, error = %why, "PostgreSQL connection failed");
                self.backoff.failed(why.clone());
                strata_engine::meters::store_error("postgres");
                Err(StoreError::Unavailable(format!(
                    "PostgreSQL at {} is unavailable: {why}",
                    self.target
                )))
            }
        }
    }

    /// Maps a statement's error, noting a lost connection for the backoff.
    pub fn fail(&self, e: tokio_postgres::Error) -> StoreError {
        strata_engine::meters::store_error("postgres");
        if e.is_closed() {
            self.backoff.failed(e.to_string());
        }
        let m = format!("PostgreSQL at {}: {}", self.target, sql_error(&e));
        if e.is_closed() {
            StoreError::Unavailable(m)
        } else {
            StoreError::Failed(m)
        }
    }

    /// The pool's state.
    pub fn pool_status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus {
            max_size: s.max_size,
            size: s.size,
            available: s.available,
            waiting: s.waiting,
        }
    }
}

/// The server's message where there is one (tokio-postgres's Display says only "db error").
pub(crate) fn sql_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(b) => {
            let mut s = sql_error(b);
            let mut src = std::error::Error::source(b);
            while let Some(inner) = src {
                s = format!("{s}: {inner}");
                src = inner.source();
            }
            s
        }
        PoolError::Timeout(_) => "timed out waiting for a connection".into(),
        other => other.to_string(),
    }
}

fn describe(pg: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = pg
                .get_ports()
                .get(i)
                .or(pg.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_owned()
    } else {
        hosts.join(",")
    };
    match pg.get_dbname() {
        Some(db) => format!("{hosts}/{db}"),
        None => hosts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_plain_identifiers() {
        assert!(valid_schema("strata"));
        assert!(valid_schema("_t1"));
        assert!(!valid_schema("Strata"));
        assert!(!valid_schema("1x"));
        assert!(!valid_schema("a;drop table x"));
        assert!(!valid_schema(""));
        assert!(!valid_schema(&"a".repeat(64)));
    }

    #[test]
    fn the_target_has_no_password() {
        let pg = tokio_postgres::Config::from_str("postgres://u:hunter2@db.example:6543/app")
            .expect("url");
        assert_eq!(describe(&pg), "db.example:6543/app");
    }
}
