//! `metrics.*`: the Prometheus endpoint.

use serde::{Deserialize, Serialize};

/// `metrics.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Record metrics and serve `GET /metrics` (behind a control token). Default `true`.
    pub enabled: bool,
    /// `127.0.0.1:9464`-style address of a second listener serving only `/metrics`, without a
    /// token, for a scraper on the same machine. Loopback addresses only.
    pub bind: Option<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            bind: None,
        }
    }
}
