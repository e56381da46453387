//! `storage.*`: which database holds sessions, approvals and rate-limit counters (and, with
//! `memory.backend: postgres`, memory).

use serde::{Deserialize, Serialize};

/// `storage.*`
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `sqlite` (default: files under the data dir, no server) or `postgres`.
    pub backend: StorageBackend,
    /// The PostgreSQL server (`backend: postgres`).
    pub postgres: PostgresConfig,
}

/// `storage.backend`
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    /// SQLite files under the data dir.
    #[default]
    Sqlite,
    /// A PostgreSQL server that several instances may share.
    Postgres,
}

/// `storage.postgres.*` (also `memory.postgres.*`, whose unset keys come from here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// `postgres://user:password@host:port/database?sslmode=…`, or a `vault:`/`env:`
    /// reference to one. Never logged; `config show` masks its password.
    pub url: Option<String>,
    /// Connections most held at once.
    pub pool_size: usize,
    /// The schema Strata's tables live in (one database can host several deployments).
    pub schema: String,
    /// Seconds to wait for a connection before the call fails.
    pub connect_timeout_secs: u64,
    /// Seconds a statement may run before the server cancels it.
    pub statement_timeout_secs: u64,
    /// PEM certificates the server's must chain to under `sslmode=verify-ca|verify-full`
    /// (default: the system's roots); relative to the overlay directory.
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url: None,
            pool_size: 8,
            schema: "strata".into(),
            connect_timeout_secs: 5,
            statement_timeout_secs: 30,
            ca_file: None,
        }
    }
}

/// `url` with the password of its user part replaced by `********` (anything else as it
/// is): what `config show` and error messages may print.
pub fn mask_url_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let Some(colon) = rest[..at].find(':') else {
        return url.to_owned();
    };
    format!(
        "{}{}:********{}",
        &url[..scheme_end + 3],
        &rest[..colon],
        &rest[at..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_and_nothing_else() {
        assert_eq!(
            mask_url_password("postgres://app:s3cr@t@db.example:5432/strata"),
            "postgres://app:********@db.example:5432/strata"
        );
        assert_eq!(
            mask_url_password("postgres://app@db/strata?sslmode=require"),
            "postgres://app@db/strata?sslmode=require"
        );
        assert_eq!(
            mask_url_password("postgres://db/x?u=a:b@c"),
            "postgres://db/x?u=a:b@c"
        );
        assert_eq!(mask_url_password("env:DATABASE_URL"), "env:DATABASE_URL");
    }
}
