//! `cluster.*`: several `strata serve` instances sharing the work through NATS JetStream,
//! their state in PostgreSQL. Off by default: a single instance needs neither.

use serde::{Deserialize, Serialize};

use super::{StorageBackend, StorageConfig};

/// `cluster.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Share the work with the other instances of this deployment (needs
    /// `storage.backend: postgres`).
    pub enabled: bool,
    /// `nats://[user:password@]host:4222` (`tls://` for TLS), several separated by commas,
    /// or a `vault:`/`env:` reference to that. `config show` masks a password in it.
    pub nats_url: Option<String>,
    /// A NATS credentials file (`.creds`: JWT and NKey seed), relative to the overlay
    /// directory.
    pub creds_file: Option<std::path::PathBuf>,
    /// PEM certificates the NATS server's must chain to (default: the system's roots).
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// A client certificate and its key, for servers that ask for one.
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// The client certificate's key.
    pub tls_key_file: Option<std::path::PathBuf>,
    /// This instance's name among the others (default: host name and process id).
    pub instance_id: Option<String>,
    /// The JetStream stream (and prefix of the key-value buckets) this deployment uses.
    pub stream: String,
    /// Seconds a taken turn may go without a sign of life before NATS hands it to another
    /// instance (a running turn keeps telling it that it is in progress).
    pub ack_wait_secs: u64,
    /// Seconds a connector lease lasts without renewal: how long a dead holder's connector
    /// stays down before another instance takes it over.
    pub lease_secs: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            enabled: false,
            nats_url: None,
            creds_file: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            instance_id: None,
            stream: "strata".into(),
            ack_wait_secs: 30,
            lease_secs: 15,
        }
    }
}

impl ClusterConfig {
    /// Why this configuration cannot run as a cluster member, if it cannot: one sentence per
    /// problem, naming the key.
    pub fn problems(&self, storage: &StorageConfig) -> Vec<String> {
        let mut out = Vec::new();
        if !self.enabled {
            return out;
        }
        if storage.backend == StorageBackend::Sqlite {
            out.push(
                "`cluster.enabled` needs `storage.backend: postgres`: instances of a cluster \
                 share sessions, approvals and rate limits, and SQLite files belong to one \
                 machine"
                    .into(),
            );
        }
        if self.nats_url.as_deref().is_none_or(|u| u.trim().is_empty()) {
            out.push(
                "`cluster.enabled` needs `cluster.nats_url` (nats://host:4222, or a \
                 `vault:`/`env:` reference to it)"
                    .into(),
            );
        }
        let token = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if !token(&self.stream) {
            out.push(format!(
                "`cluster.stream` `{}` must be letters, digits, `-` and `_` (it names a \
                 JetStream stream)",
                self.stream
            ));
        }
        if let Some(id) = &self.instance_id
            && !token(id)
        {
            out.push(format!(
                "`cluster.instance_id` `{id}` must be letters, digits, `-` and `_`"
            ));
        }
        if self.ack_wait_secs == 0 {
            out.push("`cluster.ack_wait_secs` must be at least 1".into());
        }
        if self.lease_secs < 2 {
            out.push("`cluster.lease_secs` must be at least 2".into());
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            out.push(
                "`cluster.tls_cert_file` and `cluster.tls_key_file` go together: set both or \
                 neither"
                    .into(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_on_sqlite_is_refused_with_the_reason() {
        let c = ClusterConfig {
            enabled: true,
            nats_url: Some("nats://127.0.0.1:4222".into()),
            ..ClusterConfig::default()
        };
        let p = c.problems(&StorageConfig::default());
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("storage.backend: postgres"), "{p:?}");
        let pg = StorageConfig {
            backend: StorageBackend::Postgres,
            ..StorageConfig::default()
        };
        assert!(c.problems(&pg).is_empty());
        // Off: nothing is asked of anything.
        assert!(ClusterConfig::default().problems(&pg).is_empty());
    }

    #[test]
    fn bad_values_name_their_key() {
        let pg = StorageConfig {
            backend: StorageBackend::Postgres,
            ..StorageConfig::default()
        };
        let c = ClusterConfig {
            enabled: true,
            stream: "a.b".into(),
            instance_id: Some("host 1".into()),
            ack_wait_secs: 0,
            lease_secs: 1,
            tls_cert_file: Some("c.pem".into()),
            ..ClusterConfig::default()
        };
        let p = c.problems(&pg).join("\n");
        for key in [
            "cluster.nats_url",
            "cluster.stream",
            "cluster.instance_id",
            "cluster.ack_wait_secs",
            "cluster.lease_secs",
            "cluster.tls_key_file",
        ] {
            assert!(p.contains(key), "{key} missing from:\n{p}");
        }
    }
}
